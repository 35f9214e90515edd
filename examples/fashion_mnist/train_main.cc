// fashion_mnist_train: the main job's worker program (docs/training.md).
//
//   tandem launch --launcher local -n 2 -s 1 -- fashion_mnist_train --kvstore dist_sync
//   tandem launch --launcher local -n 2 --no-scheduler -- fashion_mnist_train --allreduce
//   tandem launch -n 4 -s 6 --launcher ssh ... -- fashion_mnist_train --servers-on-spare-hosts
//   tandem launch -n 4 --no-scheduler -- fashion_mnist_train --allreduce --compression powersgd
//   fashion_mnist_train --kvstore local
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "allreduce_gradient_exchange.h"
#include "batch_plan.h"
#include "kv_gradient_exchange.h"
#include "learning_rate.h"
#include "powersgd_gradient_exchange.h"
#include "quantized_gradient_exchange.h"
#include "tandem/collective.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"
#include "train_options.h"
#include "trainer.h"

namespace fashion_mnist {
namespace {

int Run(const TrainOptions& o) {
  // Join first: the rank and the number of workers decide the shard.
  std::unique_ptr<tandem::KVStore> store;
  std::unique_ptr<tandem::Collectives> collectives;
  int rank = 0;
  int workers = 1;
  if (o.allreduce) {
    collectives = tandem::Collectives::Join();
    rank = collectives->world().rank();
    workers = collectives->world().size();
    if (collectives->cluster().joined_running_job()) {
      // Admitted into a running elastic job: the plan and the learning
      // rate's scale are the job's as it started, over all its places
      // (the trainer re-cuts the epoch over the members).
      workers = 0;
      for (const tandem::NodeInfo& node : collectives->cluster().nodes()) {
        workers += node.role == tandem::Role::kWorker ? 1 : 0;
      }
      rank = 0;
    }
  } else {
    if (o.servers_on_spare_hosts) {
      // The store reads its placement from the environment; no thread has
      // started yet, so setting it here is safe.
      const char* placement = std::getenv("TANDEM_KV_PLACEMENT");
      if (placement != nullptr && std::string(placement) != "balanced") {
        throw tandem::ConfigError(fmt::format(
            "--servers-on-spare-hosts places keys by TANDEM_KV_PLACEMENT=balanced, but the "
            "environment sets TANDEM_KV_PLACEMENT={}",
            placement));
      }
      setenv("TANDEM_KV_PLACEMENT", "balanced", 1);
    }
    store = tandem::KVStore::Create(o.kvstore);
    rank = store->Rank();
    workers = store->NumWorkers();
  }
  const TrainingData data = LoadTrainingData(o);
  const BatchPlan plan(data.train.count, workers, rank, o.batch_size, o.workload, o.seed);
  LearningRate rate;
  rate.base = o.lr;
  if (o.scale_lr) {
    rate.scale = static_cast<double>(plan.global_batch()) / static_cast<double>(o.batch_size);
    rate.warmup_steps =
        static_cast<int64_t>(o.warmup_epochs * static_cast<double>(plan.steps_per_epoch()) + 0.5);
  }
  std::optional<tandem::KVParams> quantized;
  if (o.compression == "2bit" || o.compression == "1bit") {
    quantized = tandem::KVParams{{"type", o.compression},
                                 {"threshold", fmt::format("{}", o.compression_threshold)}};
  }
  std::unique_ptr<GradientExchange> exchange;
  if (o.allreduce && quantized) {
    exchange = std::make_unique<QuantizedGradientExchange>(std::move(collectives), *quantized);
  } else if (o.allreduce && o.compression == "powersgd") {
    exchange = std::make_unique<PowerSgdGradientExchange>(
        std::move(collectives),
        PowerSgdOptions{.rank = o.powersgd_rank,
                        .start_step = o.powersgd_start_step,
                        .min_compression_rate = o.powersgd_min_compression_rate,
                        .seed = o.seed});
  } else if (o.allreduce) {
    std::optional<tandem::DType> wire;
    if (o.compression == "fp16") wire = tandem::DType::kF16;
    if (o.compression == "bf16") wire = tandem::DType::kBF16;
    exchange = std::make_unique<AllreduceGradientExchange>(std::move(collectives), wire);
  } else {
    std::optional<tandem::KVParams> server_sgd;
    if (!o.optimizer_on_workers) {
      server_sgd = rate.ServerSgdParams(o.momentum, o.wd, o.kvstore == "dist_async" ? workers : 1);
    }
    exchange = std::make_unique<KvGradientExchange>(std::move(store), std::move(server_sgd),
                                                    std::move(quantized));
  }
  Train(o, data, plan, rate, *exchange);
  return 0;
}

}  // namespace
}  // namespace fashion_mnist

int main(int argc, char** argv) {
  fashion_mnist::TrainOptions options;
  int exit_code = 0;
  if (!fashion_mnist::ParseTrainOptions(argc, argv, &options, &exit_code)) return exit_code;
  try {
    return fashion_mnist::Run(options);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "fashion_mnist_train: {}\n", e.what());
    // 200 for a lost peer, so that `tandem launch --max-restarts` and the
    // operators restart the job (docs/deploy.md).
    return tandem::ExitCodeFor(e);
  }
}
