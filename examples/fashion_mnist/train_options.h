// The trainer's command line (docs/training.md lists every option).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fashion_mnist {

/// What the command line asked for.
///
/// Thread-safety: a plain value.
struct TrainOptions {
  std::string kvstore = "dist_sync";  ///< local, dist_sync, dist_async (ignored with allreduce)
  bool allreduce = false;             ///< gradients through collectives instead of servers
  /// none; fp16, bf16 or powersgd with allreduce; 2bit or 1bit with
  /// allreduce or a dist kvstore (docs/training.md, "Compression").
  std::string compression = "none";
  double compression_threshold = 0.5;          ///< 2bit/1bit: MXNet's threshold
  int powersgd_rank = 1;                       ///< powersgd: the factors' rank
  int64_t powersgd_start_step = 10;            ///< powersgd: plain allreduce before this step
  double powersgd_min_compression_rate = 2.0;  ///< powersgd: compress a tensor only above this
  bool optimizer_on_workers = false;           ///< servers sum; every worker runs SGD itself
  /// dist_sync with the optimizer on the workers and the balanced key
  /// placement (TANDEM_KV_PLACEMENT=balanced); implies optimizer_on_workers.
  bool servers_on_spare_hosts = false;
  bool elastic = false;  ///< go on when workers leave; re-shard at each epoch (docs/elastic.md)
  int epochs = 2;
  int64_t batch_size = 64;  ///< per worker (the global batch is the sum)
  double lr = 0.05;         ///< for one worker's batch
  double momentum = 0.9;
  double wd = 0.0;
  bool scale_lr = false;         ///< the linear scaling rule
  double warmup_epochs = 0.0;    ///< gradual warm-up to the scaled rate
  std::vector<double> workload;  ///< relative speed per worker (unequal shards)
  uint64_t seed = 42;
  std::string data_dir;          ///< holds the IDX files
  int64_t train_limit = 0;       ///< use the first N training examples (0: all)
  int64_t test_limit = 0;        ///< evaluate on the first N test examples (0: all)
  int64_t max_steps = -1;        ///< stop after this many steps in all (-1: every epoch; 0: none)
  std::string checkpoint_dir;    ///< save after each epoch here
  bool resume = false;           ///< continue from checkpoint_dir
  int64_t checkpoint_every = 0;  ///< a store checkpoint every N steps (0: none)
  int restart_count = 0;         ///< TANDEM_RESTART_COUNT: > 0 resumes from a store checkpoint
  std::string dump_weights;      ///< rank 0 writes the final weights here
  int threads = 1;               ///< LibTorch's intra-op threads per worker
  bool quiet = false;            ///< no progress lines
};

/// Parses argv (and reads TANDEM_RESTART_COUNT into restart_count). Returns false (after printing
/// help or the error) when the program should exit with `*exit_code`. Thread: main.
bool ParseTrainOptions(int argc, char** argv, TrainOptions* options, int* exit_code);

}  // namespace fashion_mnist
