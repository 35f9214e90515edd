// Elastic training in Horovod Elastic's shape, in C++ (docs/elastic.md,
// "The elastic API"): a State the training loop commits after each step,
// and Run, which calls the loop again from the last commit when a worker
// leaves an elastic job (TANDEM_MIN_WORKERS, tandem launch --workers
// MIN:MAX).
//
//   tandem::elastic::TensorState state;
//   state.AddTensor("weights", weights_view);
//   state.AddTensor("momentum", momentum_view);
//   int64_t& step = state.AddCounter("step");
//   state.RegisterResetCallback([&] { lr = base_lr * collectives->world().size(); });
//   tandem::elastic::Run(*collectives, state, [&] {
//     while (step < steps) {
//       ...                                   // gradients, world().AllReduce, update
//       ++step;
//       state.Commit();                       // a copy in memory
//     }
//   });
//
// The Python API (tandem.elastic, tandem.torch.elastic) has the same shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tandem/cluster.h"
#include "tandem/collective.h"
#include "tandem/tensor.h"

namespace tandem::elastic {

/// What a training loop keeps across changes of the workers. A subclass
/// says how to copy it in memory (Save), go back to the copy (Restore) and
/// take rank 0's (Sync).
///
/// Thread-safety: none; one training thread uses a state.
class State {
 public:
  virtual ~State() = default;

  /// Records the state as the one to go back to: call it after each step
  /// (or every few). A copy in memory; inside Run, also the check for
  /// workers waiting to join (Collectives::CheckJoins, one small
  /// broadcast), which raises MembershipChanged so that Run admits them.
  /// Every member commits at the same points.
  void Commit();

  /// What Commit runs after Save (Run sets Collectives::CheckJoins for its
  /// duration; empty: nothing).
  void SetCommitCheck(std::function<void()> check) { commit_check_ = std::move(check); }

  /// Adds a function called after each regroup, before Sync: e.g. one that
  /// scales the learning rate by the new world().size() (the linear scaling
  /// rule) or cuts the data again by world().rank(). Called in the order
  /// added.
  void RegisterResetCallback(std::function<void()> callback);

  /// Runs the reset callbacks (Run calls it after each regroup).
  void OnReset();

  /// Copies the state in memory: what Restore goes back to.
  virtual void Save() = 0;
  /// Puts the state back to the last Save.
  virtual void Restore() = 0;
  /// Makes every member's state that of rank 0 of `world` (after a regroup,
  /// the lowest remaining worker), then saves it. Every member of `world`
  /// calls it; it runs collectives on `world`.
  virtual void Sync(Communicator& world) = 0;

 private:
  std::vector<std::function<void()>> reset_callbacks_;
  std::function<void()> commit_check_;
};

/// A State over tensors the program owns (weights, optimizer slots) and
/// named integer counters (epoch, step) that the state owns.
class TensorState : public State {
 public:
  /// Adds the tensor `view` under `name`. The memory stays the program's and
  /// must outlive the state; what it holds now is the first saved copy.
  /// Every worker adds the same names, in the same order, with the same
  /// dtypes and shapes (Sync's broadcasts check them). Throws
  /// InvalidArgument: an empty or repeated name, no data for a non-empty
  /// shape.
  void AddTensor(const std::string& name, const TensorView& view);

  /// Adds a counter `name` starting at `initial` and returns it; the
  /// reference stays valid as long as the state. Throws InvalidArgument: an
  /// empty or repeated name.
  int64_t& AddCounter(const std::string& name, int64_t initial = 0);

  /// The counter `name`. Throws InvalidArgument naming it when there is
  /// none.
  int64_t& counter(const std::string& name);

  void Save() override;
  void Restore() override;
  /// Broadcasts every tensor (as "elastic state NAME") and the counters (one
  /// int64 tensor, "elastic state counters") from rank 0, then saves.
  void Sync(Communicator& world) override;

 private:
  struct Entry {
    std::string name;
    TensorView view;
    std::vector<std::byte> saved;
  };
  std::vector<Entry> tensors_;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, int64_t> saved_counters_;
};

/// Horovod's hvd.elastic.run: Sync(world) so that every worker starts from
/// rank 0's state, then `train()`. When it raises MembershipChanged (a
/// worker left, or workers wait to join and a Commit saw it;
/// docs/elastic.md): Restore() to the last commit,
/// collectives.Regroup(), the reset callbacks, Sync(world) again (every
/// worker takes the lowest remaining one's last commit), then `train()`
/// again. A change while they regroup starts that again. Other exceptions
/// pass through, PeerLost too (fewer than the minimum of workers remain).
/// Every remaining worker must be inside Run. Each worker loses what it did
/// since its last commit. A worker admitted into the running job runs the
/// same program: its Run's first Sync takes the state of the workers that
/// admitted it.
void Run(Collectives& collectives, State& state, const std::function<void()>& train);

}  // namespace tandem::elastic
