#include "train_options.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "fashion_mnist_data.h"

namespace fashion_mnist {

bool ParseTrainOptions(int argc, char** argv, TrainOptions* o, int* exit_code) {
  CLI::App app{
      "Trains a small CNN on Fashion-MNIST with LibTorch; gradients travel through tandem's "
      "parameter server (--kvstore) or its collectives (--allreduce). Run it under `tandem "
      "launch` (docs/training.md)."};
  o->data_dir = kDebianDataDir;
  // A later option wins (scripts/run-main-job.sh appends the caller's).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--kvstore", o->kvstore, "local, dist_sync or dist_async")
      ->check(CLI::IsMember({"local", "dist_sync", "dist_async"}));
  app.add_flag("--allreduce", o->allreduce,
               "sum gradients with tandem's allreduce among the workers (no servers; "
               "`tandem launch --no-scheduler`)");
  app.add_option("--compression", o->compression,
                 "none; with --allreduce: fp16 or bf16 (the dtype gradients travel and are "
                 "summed in) or powersgd (low-rank factors); with --allreduce or a dist "
                 "--kvstore: 2bit or 1bit (MXNet's quantisation with error feedback)")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "2bit", "1bit", "powersgd"}));
  CLI::Option* threshold =
      app.add_option("--compression-threshold", o->compression_threshold,
                     "2bit/1bit: MXNet's threshold (default 0.5, MXNet's; gradients of this "
                     "model want about 0.001)");
  CLI::Option* powersgd_rank = app.add_option("--powersgd-rank", o->powersgd_rank,
                                              "powersgd: the rank of the factors (default 1)")
                                   ->check(CLI::PositiveNumber);
  CLI::Option* powersgd_start =
      app.add_option("--powersgd-start-step", o->powersgd_start_step,
                     "powersgd: the steps before this one are plain allreduces (default 10)")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* powersgd_rate =
      app.add_option("--powersgd-min-compression-rate", o->powersgd_min_compression_rate,
                     "powersgd: a tensor is compressed only when its factors are this many "
                     "times smaller than it (default 2)")
          ->check(CLI::NonNegativeNumber);
  app.add_flag("--optimizer-on-workers", o->optimizer_on_workers,
               "the servers only sum gradients; each worker runs SGD (dist_sync, local)");
  app.add_flag("--servers-on-spare-hosts", o->servers_on_spare_hosts,
               "BytePS's summation service: dist_sync, the servers only sum and each worker runs "
               "SGD; large keys are cut so that servers on hosts without a worker take the "
               "larger share (TANDEM_KV_PLACEMENT=balanced, docs/kvstore.md)");
  app.add_flag("--elastic", o->elastic,
               "go on when workers leave the job (tandem launch --workers MIN:MAX, "
               "docs/elastic.md): each epoch starts with a barrier, and the workers that remain "
               "share that epoch's data; needs a dist --kvstore");
  app.add_option("--epochs", o->epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o->batch_size, "examples per worker and step")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o->lr, "SGD's learning rate for one worker's batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--momentum", o->momentum, "SGD's momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--wd", o->wd, "weight decay")->check(CLI::NonNegativeNumber);
  app.add_flag("--scale-lr", o->scale_lr,
               "linear scaling rule: the rate times global batch / --batch-size");
  app.add_option("--warmup-epochs", o->warmup_epochs,
                 "with --scale-lr: rise linearly from --lr to the scaled rate over these epochs")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workload", o->workload,
                 "relative speed of each worker, e.g. 1,1,2: the global batch is split in "
                 "proportion")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--seed", o->seed, "initial weights and data order");
  app.add_option("--data-dir", o->data_dir, "directory of the IDX files (gzipped or not)");
  app.add_option("--train-limit", o->train_limit, "train on the first N examples (0: all 60000)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", o->test_limit, "test on the first N examples (0: all 10000)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", o->max_steps,
                 "stop after N steps in all (-1: no limit; 0: only the initial weights)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--checkpoint-dir", o->checkpoint_dir,
                 "save weights and optimizer states here after every epoch");
  app.add_flag("--resume", o->resume, "continue from the last epoch saved in --checkpoint-dir");
  app.add_option("--checkpoint-every", o->checkpoint_every,
                 "also save a store checkpoint (servers and workers, docs/checkpoints.md) into "
                 "--checkpoint-dir every STEPS steps; a restarted job (TANDEM_RESTART_COUNT > 0) "
                 "resumes from the newest consistent one")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dump-weights", o->dump_weights,
                 "rank 0 writes the final weights here (float32, little-endian, in parameter "
                 "order)");
  app.add_option("--threads", o->threads, "LibTorch intra-op threads per worker")
      ->check(CLI::PositiveNumber);
  app.add_flag("--quiet", o->quiet, "no progress lines, only the epoch results");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return false;
  }
  if (o->elastic && !o->allreduce && o->kvstore.rfind("dist", 0) != 0) {
    std::cerr << "--elastic needs --allreduce or a dist --kvstore (dist_sync, dist_async), got "
                 "--kvstore "
              << o->kvstore << " (docs/elastic.md)\n";
    *exit_code = 2;
    return false;
  }
  if (o->elastic && o->allreduce && o->compression != "none" && o->compression != "fp16" &&
      o->compression != "bf16") {
    std::cerr << "--elastic --allreduce with --compression " << o->compression
              << ": its per-worker state (error feedback, factors) does not follow a change of "
                 "workers yet; none, fp16 and bf16 do (docs/elastic.md)\n";
    *exit_code = 2;
    return false;
  }
  if (o->elastic && !o->checkpoint_dir.empty()) {
    std::cerr << "--elastic with --checkpoint-dir: the checkpoints do not follow a change of "
                 "workers yet (docs/elastic.md)\n";
    *exit_code = 2;
    return false;
  }
  if (o->elastic && !o->workload.empty()) {
    std::cerr << "--elastic with --workload: the weights name the starting workers, and the "
                 "shards are re-cut over those that remain (docs/elastic.md)\n";
    *exit_code = 2;
    return false;
  }
  if (o->resume && o->checkpoint_dir.empty()) {
    std::cerr << "--resume needs --checkpoint-dir\n";
    *exit_code = 2;
    return false;
  }
  if (o->checkpoint_every > 0 && o->checkpoint_dir.empty()) {
    std::cerr << "--checkpoint-every needs --checkpoint-dir\n";
    *exit_code = 2;
    return false;
  }
  if (o->checkpoint_every > 0 && (o->allreduce || o->kvstore.rfind("dist", 0) != 0)) {
    std::cerr << "--checkpoint-every checkpoints the parameter server: it needs a distributed "
                 "--kvstore (dist_sync or dist_async), not "
              << (o->allreduce ? "--allreduce" : "--kvstore " + o->kvstore) << "\n";
    *exit_code = 2;
    return false;
  }
  if (const char* restarts = std::getenv("TANDEM_RESTART_COUNT")) {
    char* end = nullptr;
    const long n = std::strtol(restarts, &end, 10);
    if (end == restarts || *end != '\0' || n < 0 || n > 1000000) {
      std::cerr << "TANDEM_RESTART_COUNT='" << restarts
                << "' is not a restart count (a number >= 0)\n";
      *exit_code = 2;
      return false;
    }
    o->restart_count = static_cast<int>(n);
  }
  const bool quantized = o->compression == "2bit" || o->compression == "1bit";
  if (!o->allreduce && o->compression != "none" && !quantized) {
    std::cerr << "--compression " << o->compression
              << " compresses the allreduce's gradients: it needs --allreduce (the parameter "
                 "server's compression is 2bit or 1bit, docs/gradient-compression.md)\n";
    *exit_code = 2;
    return false;
  }
  if (!o->allreduce && quantized && o->kvstore == "local") {
    std::cerr << "--compression " << o->compression
              << " needs --allreduce or a dist --kvstore (dist_sync, dist_async): the local "
                 "store moves no gradients, as MXNet's\n";
    *exit_code = 2;
    return false;
  }
  if (threshold->count() > 0 && !quantized) {
    std::cerr << "--compression-threshold is 2bit's and 1bit's; --compression is " << o->compression
              << "\n";
    *exit_code = 2;
    return false;
  }
  for (const CLI::Option* p : {powersgd_rank, powersgd_start, powersgd_rate}) {
    if (p->count() > 0 && o->compression != "powersgd") {
      std::cerr << p->get_name() << " is PowerSGD's; --compression is " << o->compression << "\n";
      *exit_code = 2;
      return false;
    }
  }
  if (o->servers_on_spare_hosts) {
    if (o->allreduce || o->kvstore != "dist_sync") {
      std::cerr << "--servers-on-spare-hosts sums gradients on the parameter servers: it needs "
                   "--kvstore dist_sync"
                << (o->allreduce ? " and no --allreduce" : "") << " (got "
                << (o->allreduce ? "--allreduce" : "--kvstore " + o->kvstore) << ")\n";
      *exit_code = 2;
      return false;
    }
    o->optimizer_on_workers = true;
  }
  if (o->allreduce && o->optimizer_on_workers) {
    std::cerr << "--allreduce always runs the optimizer on the workers; drop "
                 "--optimizer-on-workers\n";
    *exit_code = 2;
    return false;
  }
  if (!o->allreduce && o->kvstore == "dist_async" && o->optimizer_on_workers) {
    std::cerr << "--kvstore dist_async applies every push on the servers, so it needs the "
                 "servers' optimizer; drop --optimizer-on-workers\n";
    *exit_code = 2;
    return false;
  }
  if (!o->allreduce && o->kvstore == "dist_async" && o->scale_lr) {
    std::cerr << "--scale-lr is the rule for synchronous training (one update per global "
                 "batch); dist_async updates once per worker batch\n";
    *exit_code = 2;
    return false;
  }
  if (o->warmup_epochs > 0 && !o->scale_lr) {
    std::cerr << "--warmup-epochs warms up to the scaled rate; it needs --scale-lr\n";
    *exit_code = 2;
    return false;
  }
  return true;
}

}  // namespace fashion_mnist
