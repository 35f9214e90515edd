// The main job's training loop (docs/training.md): each worker trains the
// CNN on its shard of every global batch, exchanges gradients through a
// GradientExchange, and worker 0 reports test accuracy after every epoch.
#pragma once

#include "batch_plan.h"
#include "fashion_mnist_data.h"
#include "gradient_exchange.h"
#include "learning_rate.h"
#include "train_options.h"

namespace fashion_mnist {

/// The examples a run uses.
///
/// Thread-safety: a plain value.
struct TrainingData {
  Split train;
  Split test;
};

/// Loads both splits from options.data_dir, cut to --train-limit and
/// --test-limit. Thread: any. Throws what LoadSplit throws.
TrainingData LoadTrainingData(const TrainOptions& options);

/// Trains per `options` on `data`, worker `exchange.rank()` taking its part
/// of `plan`, at the rates of `rate`. Prints progress and, on worker 0,
/// each epoch's test accuracy and "final test accuracy: ..." at the end.
/// With options.elastic every epoch starts with a barrier; after a worker
/// left, the epoch is cut over the workers that remain and the lowest of
/// them prints. Returns the final test accuracy on the worker that printed
/// it (-1 elsewhere). Thread: main. Throws tandem::Error (communication,
/// checkpoint files).
double Train(const TrainOptions& options, const TrainingData& data, const BatchPlan& plan,
             const LearningRate& rate, GradientExchange& exchange);

}  // namespace fashion_mnist
