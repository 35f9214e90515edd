#include "trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "checkpoint.h"
#include "cnn_model.h"
#include "epoch_checkpoint_file.h"
#include "kv/checkpoint_directory.h"
#include "local_state.h"
#include "progress_line.h"
#include "resume_state.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Fashion-MNIST's pixel mean and standard deviation over the training set,
// on the 0..1 scale.
constexpr double kPixelMean = 0.2860;
constexpr double kPixelStd = 0.3530;

Split Cut(Split split, int64_t limit) {
  if (limit > 0 && limit < split.count) {
    split.count = limit;
    split.pixels.resize(static_cast<size_t>(limit) * kImageSide * kImageSide);
    split.labels.resize(static_cast<size_t>(limit));
  }
  return split;
}

// Views over a split's bytes (the split outlives them).
torch::Tensor PixelTensor(const Split& split) {
  return torch::from_blob(const_cast<uint8_t*>(split.pixels.data()),
                          {split.count, 1, kImageSide, kImageSide}, torch::kUInt8);
}
torch::Tensor LabelTensor(const Split& split) {
  return torch::from_blob(const_cast<uint8_t*>(split.labels.data()), {split.count}, torch::kUInt8)
      .to(torch::kInt64);
}

torch::Tensor Normalise(const torch::Tensor& pixels) {
  return (pixels.to(torch::kFloat32).div(255.0) - kPixelMean) / kPixelStd;
}

tandem::TensorView View(const torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat32,
              "parameter tensors must be contiguous float32");
  return tandem::TensorView{t.data_ptr(), tandem::DType::kF32,
                            std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
}

// Correctly classified test examples.
int64_t CountCorrect(CnnModel& model, const torch::Tensor& pixels, const torch::Tensor& labels) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  constexpr int64_t kChunk = 128;  // larger chunks make the convolutions' unfolded inputs huge
  for (int64_t begin = 0; begin < pixels.size(0); begin += kChunk) {
    const int64_t end = std::min(begin + kChunk, pixels.size(0));
    const torch::Tensor logits = model->forward(Normalise(pixels.slice(0, begin, end)));
    correct += logits.argmax(1).eq(labels.slice(0, begin, end)).sum().item<int64_t>();
  }
  model->train();
  return correct;
}

// Raw float32 for other programs to compare (no checksum: its readers take
// the bytes as they are), written atomically like every file the example
// writes: a reader never sees half of it, and a failed write leaves nothing.
void DumpWeights(const std::string& path, const std::vector<torch::Tensor>& weights) {
  std::string bytes;
  int64_t count = 0;
  for (const torch::Tensor& w : weights) {
    const torch::Tensor c = w.detach().contiguous();
    bytes.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
    count += c.numel();
  }
  try {
    tandem::kv::WriteFileDurably(path, bytes);
  } catch (const tandem::IoError& e) {
    throw tandem::IoError(fmt::format("--dump-weights: {}", e.what()));
  }
  fmt::print("weights: {} float32 values in {} tensors written to {}\n", count, weights.size(),
             path);
}

// An elastic allreduce run's position, which the workers take from the
// lowest remaining one after a change (docs/elastic.md, "The main job"):
// the workers its epoch's plan was cut over, and its resume state.
struct ElasticPosition {
  int source = -1;  // the worker whose position it is
  std::vector<int> plan_members;
  ResumeState state;
};

// The source worker (int32), a count of members (int32), the members
// (int32 each), then EncodeResumeState's bytes; native byte order, read
// only by the same program in the same job.
std::string EncodeElasticPosition(const ElasticPosition& p) {
  std::string out;
  auto put = [&](int32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(p.source);
  put(static_cast<int32_t>(p.plan_members.size()));
  for (int w : p.plan_members) put(w);
  out += EncodeResumeState(p.state);
  return out;
}

ElasticPosition DecodeElasticPosition(const std::string& bytes) {
  size_t at = 0;
  auto get = [&]() -> int32_t {
    if (bytes.size() - at < sizeof(int32_t)) {
      throw tandem::ProtocolError(fmt::format(
          "elastic position of {} bytes ends at byte {} inside its member list", bytes.size(), at));
    }
    int32_t v = 0;
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    at += sizeof(v);
    return v;
  };
  ElasticPosition p;
  p.source = get();
  const int32_t count = get();
  if (count < 1 || static_cast<size_t>(count) > bytes.size() / sizeof(int32_t)) {
    throw tandem::ProtocolError(
        fmt::format("elastic position of {} bytes names {} members", bytes.size(), count));
  }
  for (int32_t i = 0; i < count; ++i) p.plan_members.push_back(get());
  p.state = DecodeResumeState(bytes.substr(at));
  return p;
}

}  // namespace

TrainingData LoadTrainingData(const TrainOptions& options) {
  TrainingData data;
  data.train = Cut(LoadSplit(options.data_dir, "train"), options.train_limit);
  data.test = Cut(LoadSplit(options.data_dir, "t10k"), options.test_limit);
  return data;
}

double Train(const TrainOptions& o, const TrainingData& data, const BatchPlan& initial_plan,
             const LearningRate& rate, GradientExchange& exchange) {
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  CnnModel model;
  std::vector<torch::Tensor> weights = model->parameters();
  // An elastic run re-cuts the shards over the workers that remain, and the
  // lowest of them leads (prints, evaluates): both change between epochs.
  BatchPlan plan = initial_plan;
  // A worker admitted into the running job (docs/elastic.md, "The main
  // job"): its weights, optimizer state and position come from the others.
  const bool joined = o.elastic && exchange.joined_running_job();
  bool leader = !joined && exchange.rank() == 0;
  const bool synchronous = exchange.mode() != "dist_async";

  std::unique_ptr<torch::optim::SGD> sgd;
  if (!exchange.updates_weights()) {
    sgd = std::make_unique<torch::optim::SGD>(
        weights, torch::optim::SGDOptions(rate.At(1)).momentum(o.momentum).weight_decay(o.wd));
  }
  if (!o.checkpoint_dir.empty()) {
    // Servers write their optimizer states into it too (same machine under
    // the local launcher; elsewhere a shared directory).
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) {
      throw tandem::IoError(
          fmt::format("--checkpoint-dir {}: cannot create: {}", o.checkpoint_dir, ec.message()));
    }
    // Worker 0 writes the epoch checkpoint; what a killed save left goes.
    if (leader) {
      for (const std::string& stale : RemoveStaleCheckpointTemporaries(o.checkpoint_dir)) {
        fmt::print("removed {}, left by an interrupted save\n", stale);
      }
    }
  }
  int start_epoch = 0;
  int64_t resumed_steps = 0;
  if (o.resume) {
    const ResumeState saved =
        LoadCheckpoint(o.checkpoint_dir, exchange.num_workers(), weights, sgd.get());
    start_epoch = saved.epoch;
    resumed_steps = saved.steps_done;
    if (resumed_steps != static_cast<int64_t>(start_epoch) * plan.steps_per_epoch()) {
      throw tandem::InvalidArgument(fmt::format(
          "checkpoint file {}: {} epochs in {} steps, but this job makes {} steps per epoch "
          "(resume with the batch size, --train-limit and workers that wrote it)",
          EpochCheckpointPath(o.checkpoint_dir), start_epoch, resumed_steps,
          plan.steps_per_epoch()));
    }
    if (leader) {
      fmt::print("resuming from {} after epoch {}\n", o.checkpoint_dir, start_epoch);
    }
  }
  std::vector<tandem::TensorView> weight_views;
  for (const torch::Tensor& w : weights) weight_views.push_back(View(w));
  if (!joined) {
    torch::NoGradGuard no_grad;
    exchange.ShareInitialWeights(weight_views);
  }
  if (o.resume) exchange.LoadOptimizerStates(KvOptimizerStatesPath(o.checkpoint_dir));
  int64_t step_count = resumed_steps;
  int64_t start_step = 0;  // within start_epoch
  if (o.restart_count > 0 && !o.checkpoint_dir.empty() && exchange.has_store_checkpoints()) {
    // A restarted job (tandem launch --max-restarts): the newest consistent
    // store checkpoint, if any (docs/training.md, "Checkpoints").
    std::optional<std::string> saved;
    {
      torch::NoGradGuard no_grad;
      saved = exchange.LoadStoreCheckpoint(o.checkpoint_dir, weight_views);
    }
    if (saved) {
      const ResumeState state = DecodeResumeState(*saved);
      if (!state.local_state.empty()) LoadLocalState(state.local_state, weights, sgd.get());
      step_count = state.steps_done;
      start_epoch = state.epoch;
      start_step = state.next_step;
      if (start_step >= plan.steps_per_epoch()) {
        ++start_epoch;
        start_step = 0;
      }
    }
    if (leader) {
      fmt::print(
          "restart {}: {}\n", o.restart_count,
          saved ? fmt::format("resuming from the store checkpoint in {} after step {} "
                              "(epoch {}, step {})",
                              o.checkpoint_dir, step_count, start_epoch + 1, start_step)
                : fmt::format("no store checkpoint in {} yet; starting over", o.checkpoint_dir));
      std::fflush(stdout);
    }
  }

  const torch::Tensor train_pixels = PixelTensor(data.train);
  const torch::Tensor train_labels = LabelTensor(data.train);
  const torch::Tensor test_pixels = PixelTensor(data.test);
  const torch::Tensor test_labels = LabelTensor(data.test);
  // Synchronous modes sum the workers' gradients, so each worker divides its
  // loss by the global batch: the sum is then the gradient of the global
  // batch's mean loss. dist_async applies each worker's push alone.
  double loss_divisor = static_cast<double>(synchronous ? plan.global_batch() : plan.local_batch());
  if (leader) {
    fmt::print(
        "training: mode {}{}, {} workers, batch {} per worker ({} global), {} steps per epoch, "
        "lr {} -> {}{}, {} training and {} test examples\n",
        exchange.mode(),
        exchange.updates_weights() ? " (SGD on the servers)" : " (SGD on the workers)",
        exchange.num_workers(), plan.local_batch(), plan.global_batch(), plan.steps_per_epoch(),
        rate.base, rate.target(),
        rate.warmup_steps > 0 ? fmt::format(" (warm-up {} steps)", rate.warmup_steps) : "",
        data.train.count, data.test.count);
    const int64_t payload = exchange.PayloadBytes(weight_views);
    const int64_t float32 = Float32Bytes(weight_views);
    fmt::print("gradients: {} bytes per worker and step ({:.1f}x fewer than float32's {})\n",
               payload, static_cast<double>(float32) / static_cast<double>(payload), float32);
    std::fflush(stdout);
  }

  double accuracy = -1;
  bool stopped = false;
  // Elastic runs: the workers the current plan was cut over (in their
  // order; this worker's part is its place there).
  std::vector<int> plan_members(initial_plan.batches().size());
  for (size_t i = 0; i < plan_members.size(); ++i) plan_members[i] = static_cast<int>(i);
  // The answer of the last regroup (elastic runs).
  tandem::Members last_members;
  // A worker admitted during an epoch cut over workers it is not among has
  // no part in that epoch: until the next cut it adds zero gradients to the
  // allreduce and applies the same updates as the others.
  bool sitting_out = false;
  auto cut_plan = [&](const std::vector<int>& members) {
    const auto self = std::find(members.begin(), members.end(), exchange.rank());
    if (self == members.end() && !joined) {
      throw tandem::Error(fmt::format("worker {} is not among the workers [{}] it trains with",
                                      exchange.rank(), fmt::join(members, ", ")));
    }
    sitting_out = self == members.end();
    const int place = sitting_out ? 0 : static_cast<int>(self - members.begin());
    plan = BatchPlan(data.train.count, static_cast<int>(members.size()), place, o.batch_size, {},
                     o.seed);
    plan_members = members;
    // The lowest worker of the cut that is still a member leads (prints,
    // evaluates); a worker sitting out never does.
    leader = false;
    for (int w : members) {
      if (std::find(last_members.workers.begin(), last_members.workers.end(), w) !=
          last_members.workers.end()) {
        leader = w == exchange.rank();
        break;
      }
    }
    loss_divisor = static_cast<double>(synchronous ? plan.global_batch() : plan.local_batch());
  };
  // Where this worker is: the next step, within `epoch`. An allreduce run
  // that regroups after a change takes the lowest remaining worker's
  // position, weights and optimizer state (docs/elastic.md, "The main job").
  int epoch = start_epoch;
  int64_t step = start_step;
  uint32_t regrouped_epoch = 0;
  // The epoch's barrier was the regroup just passed (after an abandoned
  // step), whose answer is `last_members`.
  bool barrier_done = false;
  const bool abandons_steps = o.elastic && o.allreduce;
  // After a regroup whose answer `m` is a change: every member takes the
  // position, weights and optimizer state of group rank 0 of the new world
  // (the lowest worker that trained with the others).
  auto adopt_leader_state = [&](const tandem::Members& m) {
    ElasticPosition mine{exchange.rank(), plan_members, ResumeState{step_count, epoch, step, {}}};
    if (sgd) mine.state.local_state = SaveLocalState(weights, sgd.get());
    std::string bytes = EncodeElasticPosition(mine);
    exchange.ShareLeaderState(bytes);
    const ElasticPosition theirs = DecodeElasticPosition(bytes);
    if (!theirs.state.local_state.empty()) {
      LoadLocalState(theirs.state.local_state, weights, sgd.get());
    }
    step_count = theirs.state.steps_done;
    epoch = theirs.state.epoch;
    step = theirs.state.next_step;
    cut_plan(theirs.plan_members);
    regrouped_epoch = m.epoch;
    barrier_done = step == 0;
    if (leader) {
      fmt::print(
          "elastic: membership epoch {}: workers [{}] go on from step {} of epoch {} "
          "(worker {}'s weights and position)\n",
          m.epoch, fmt::join(m.workers, ", "), step + 1, epoch + 1, theirs.source);
      std::fflush(stdout);
    }
  };
  // Regroups (a barrier) and, when the members changed since the last
  // regroup, adopts the leader's position. Returns the members.
  auto regroup = [&]() -> tandem::Members {
    for (;;) {
      try {
        const tandem::Members m = exchange.ElasticBarrier();
        leader = !m.workers.empty() && m.workers.front() == exchange.rank();
        last_members = m;
        // A worker at the start of an epoch has passed its barrier now.
        barrier_done = step == 0;
        if (!abandons_steps || m.epoch == regrouped_epoch) return m;
        adopt_leader_state(m);
        return m;
      } catch (const tandem::MembershipChanged& e) {
        // Another worker left while these workers regrouped: again.
        if (leader) fmt::print("elastic: {}\n", e.what());
      }
    }
  };
  if (joined) {
    // Admitted at the members' regroup: they share the leader's state now.
    last_members = exchange.CurrentMembers();
    adopt_leader_state(last_members);
    fmt::print(
        "elastic: worker {} joined the running job (membership epoch {}, workers [{}]); it trains "
        "from step {} of epoch {}{}\n",
        exchange.rank(), last_members.epoch, fmt::join(last_members.workers, ", "), step + 1,
        epoch + 1, sitting_out ? ", adding zero gradients until the epoch ends" : "");
    std::fflush(stdout);
  }
  for (;;) {
    if (epoch >= o.epochs || stopped) {
      if (!o.elastic) break;
      // The last barrier: a worker that left during the last step may
      // send the others back to it (the leader's position).
      regroup();
      if (epoch >= o.epochs || stopped) break;
    }
    if (o.max_steps >= 0 && step_count >= o.max_steps) break;
    if (o.elastic && step == 0) {
      // Every worker that passes the barrier gets the same members, so all
      // of them cut this epoch alike (docs/elastic.md, "The main job").
      if (!barrier_done) {
        const int before = epoch;
        regroup();
        if (epoch != before || step != 0) continue;  // took the leader's place
      }
      barrier_done = false;
      const tandem::Members& m = last_members;
      if (m.workers != plan_members) {
        cut_plan(m.workers);
        if (leader) {
          fmt::print(
              "elastic: membership epoch {}: workers [{}] go on; epoch {} is cut into {} steps of "
              "{} ({} per worker)\n",
              m.epoch, fmt::join(m.workers, ", "), epoch + 1, plan.steps_per_epoch(),
              plan.global_batch(), plan.local_batch());
          std::fflush(stdout);
        }
      }
    }
    const std::vector<int64_t> order = plan.EpochOrder(epoch);
    ProgressLine progress(leader && !o.quiet ? stdout : nullptr, epoch + 1, o.epochs,
                          plan.steps_per_epoch(), plan.global_batch());
    const auto epoch_start = Clock::now();
    bool repositioned = false;
    for (; step < plan.steps_per_epoch(); ++step) {
      if (o.max_steps >= 0 && step_count >= o.max_steps) {
        stopped = true;
        break;
      }
      const auto t0 = Clock::now();
      double mean_loss = 0;
      if (sitting_out) {
        torch::NoGradGuard no_grad;
        for (torch::Tensor& w : weights) {
          if (w.grad().defined()) {
            w.mutable_grad().zero_();
          } else {
            w.mutable_grad() = torch::zeros_like(w);
          }
        }
      } else {
        const std::vector<int64_t> picked = plan.LocalBatch(order, step);
        const torch::Tensor index =
            torch::from_blob(const_cast<int64_t*>(picked.data()),
                             {static_cast<int64_t>(picked.size())}, torch::kInt64);
        const torch::Tensor images = Normalise(train_pixels.index_select(0, index));
        const torch::Tensor labels = train_labels.index_select(0, index);
        model->zero_grad();
        const torch::Tensor loss_sum = torch::nn::functional::cross_entropy(
            model->forward(images), labels,
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        (loss_sum / loss_divisor).backward();
        mean_loss = loss_sum.item<double>() / static_cast<double>(picked.size());
      }
      std::vector<tandem::TensorView> grad_views;
      for (const torch::Tensor& w : weights) grad_views.push_back(View(w.grad()));
      const auto t1 = Clock::now();
      try {
        torch::NoGradGuard no_grad;
        exchange.Exchange(grad_views, weight_views);
      } catch (const tandem::MembershipChanged& e) {
        if (!abandons_steps) throw;
        // A worker left during this step's allreduce: the step is
        // abandoned here; the workers that remain regroup and go on from
        // the lowest one's position.
        fmt::print(stderr, "elastic: step {} of epoch {} abandoned: {}\n", step + 1, epoch + 1,
                   e.what());
        regroup();
        repositioned = true;
        break;
      }
      const auto t2 = Clock::now();
      ++step_count;
      if (sgd) {
        for (auto& group : sgd->param_groups()) {
          static_cast<torch::optim::SGDOptions&>(group.options()).lr(rate.At(step_count));
        }
        sgd->step();
      }
      if (o.checkpoint_every > 0 && step_count % o.checkpoint_every == 0) {
        ResumeState state;
        state.steps_done = step_count;
        state.epoch = epoch;
        state.next_step = step + 1;
        if (sgd) state.local_state = SaveLocalState(weights, sgd.get());
        exchange.SaveStoreCheckpoint(o.checkpoint_dir, EncodeResumeState(state));
      }
      progress.Update(step + 1, mean_loss, Seconds(t0, Clock::now()), Seconds(t1, t2));
      if (abandons_steps && step + 1 < plan.steps_per_epoch()) {
        // Workers waiting to join are admitted after this step (the epoch's
        // last step leaves it to the next epoch's barrier, which admits too).
        try {
          exchange.CheckJoins();
        } catch (const tandem::MembershipChanged& e) {
          if (leader) {
            fmt::print("elastic: after step {} of epoch {}: {}\n", step + 1, epoch + 1, e.what());
          }
          ++step;
          regroup();
          repositioned = true;
          break;
        }
      }
    }
    if (repositioned) continue;  // at the position the regroup gave
    const double epoch_seconds = Seconds(epoch_start, Clock::now());
    if (o.checkpoint_dir.size() > 0 && !stopped) {
      exchange.SaveOptimizerStates(KvOptimizerStatesPath(o.checkpoint_dir));
      if (leader) {
        SaveCheckpoint(o.checkpoint_dir, epoch + 1, step_count, exchange.num_workers(), weights,
                       sgd.get());
      }
    }
    if (leader) {
      const int64_t correct = CountCorrect(model, test_pixels, test_labels);
      accuracy = static_cast<double>(correct) / static_cast<double>(data.test.count);
      fmt::print(
          "epoch {}/{} done{}: loss {:.4f}, {:.0f} samples/s, comm {:.1f}% of step time, {:.1f} s; "
          "test accuracy {:.4f} ({}/{})\n",
          epoch + 1, o.epochs, stopped ? fmt::format(" (stopped at step {})", step_count) : "",
          progress.mean_loss(), progress.samples_per_second(), 100 * progress.comm_share(),
          epoch_seconds, accuracy, correct, data.test.count);
      std::fflush(stdout);
    }
    if (stopped) break;
    ++epoch;
    step = 0;
  }
  if (o.elastic) {
    // The lowest worker that remains reports (worker 0 may have left); the
    // last regroup's answer says who.
    const tandem::Members& m = last_members;
    leader = !m.workers.empty() && m.workers.front() == exchange.rank();
    if (leader && m.epoch > 0) {
      fmt::print(
          "elastic: workers [{}] finished after {} membership change{} ({} workers started "
          "the job)\n",
          fmt::join(m.workers, ", "), m.epoch, m.epoch == 1 ? "" : "s",
          initial_plan.batches().size());
    }
  }
  if (leader) {
    if (accuracy < 0) {
      const int64_t correct = CountCorrect(model, test_pixels, test_labels);
      accuracy = static_cast<double>(correct) / static_cast<double>(data.test.count);
    }
    if (!o.dump_weights.empty()) DumpWeights(o.dump_weights, weights);
    fmt::print("final test accuracy: {:.4f} after {} steps\n", accuracy, step_count);
    std::fflush(stdout);
  }
  return accuracy;
}

}  // namespace fashion_mnist
