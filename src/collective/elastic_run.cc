#include "collective/elastic_run.h"

#include "tandem/error.h"

namespace tandem::collective {
namespace {

// Regroups, runs the reset callbacks and syncs; a change meanwhile (another
// worker left while these regrouped) starts it again from the last commit.
void Reset(elastic::State& state, const std::function<Communicator&()>& world,
           const std::function<Members()>& regroup) {
  for (;;) {
    try {
      regroup();
      state.OnReset();
      state.Sync(world());
      return;
    } catch (const MembershipChanged&) {
      state.Restore();
    }
  }
}

}  // namespace

void RunElastic(elastic::State& state, const std::function<Communicator&()>& world,
                const std::function<Members()>& regroup, const std::function<void()>& train,
                const std::function<void()>& check_joins) {
  // The commits inside `train` check for workers waiting to join, for as
  // long as the loop runs.
  struct CommitCheck {
    elastic::State& state;
    ~CommitCheck() { state.SetCommitCheck({}); }
  } commit_check{state};
  state.SetCommitCheck(check_joins);
  // A change during the first Sync (a worker left before they all started)
  // is handled as any other: Reset syncs again.
  bool synced = false;
  for (;;) {
    try {
      if (!synced) {
        synced = true;
        state.Sync(world());
      }
      train();
      return;
    } catch (const MembershipChanged&) {
      state.Restore();
      Reset(state, world, regroup);
    }
  }
}

}  // namespace tandem::collective
