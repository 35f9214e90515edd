// How the tandem backend's operations finish: a c10d::Work per torch call
// (wait, isCompleted, result and the future DDP's communication hooks chain
// on) and one thread per process group that waits for the tandem handles
// in submission order, runs the copies an operation needs afterwards
// (results out of a scratch buffer), and then completes the work.
// Point-to-point operations complete each on their own, out of that order.
//
// Its future is completed on another thread, from a pool that grows
// whenever every thread of it is busy: completing a future runs its
// callbacks, and a callback may wait for a later operation of the same
// group (PowerSGD's hook waits inside its callbacks), which the completion
// thread must then be free to finish.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "tandem/collective.h"

namespace tandem::c10d_backend {

/// What one torch operation queued on tandem.
struct PendingOperation {
  /// Every tandem operation it queued; all are waited for, even after one
  /// failed (tandem uses their memory until then).
  std::vector<CollectiveHandle> handles;
  /// Runs once every handle succeeded, on the completion thread (copies out
  /// of scratch buffers); may be empty. What it throws fails the work.
  std::function<void()> finish;
  /// The tensors tandem reads and writes (inputs, outputs, scratch),
  /// referenced until the handles are done.
  std::vector<at::Tensor> keep;
};

/// One torch operation's completion.
///
/// Thread-safety: every method may be called from any thread; Complete is
/// called once, by the completion thread.
class TandemWork : public ::c10d::Work {
 public:
  /// `description` names the operation in errors ("allreduce #12 of the
  /// tandem group of ranks [0, 1]"); `outputs` is what result() and the
  /// future give.
  TandemWork(int rank, ::c10d::OpType type, std::string description,
             std::vector<at::Tensor> outputs);

  /// Blocks until the operation is done, or for `timeout` when it is not
  /// kNoTimeout/kUnsetTimeout (then throws Timeout naming the operation).
  /// Rethrows the operation's error. Returns true.
  bool wait(std::chrono::milliseconds timeout) override;
  /// The output tensors (valid once the work completed).
  std::vector<at::Tensor> result() override;
  /// Completes with the output tensors (a list of tensors), or with the
  /// operation's error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  /// CPU work has nothing to synchronise with a stream.
  void synchronize() override {}
  /// A receive's sender (group rank), once it completed; other works throw
  /// as torch's do.
  int sourceRank() const override;
  /// Makes this the work of the receive `handle` (for sourceRank).
  void SetReceive(CollectiveHandle handle) { receive_ = std::move(handle); }

  /// Marks the work done (`error` null) or failed and wakes its waiters.
  void Complete(std::exception_ptr error);
  /// Completes the future the same way; its callbacks run on this thread.
  void CompleteFuture();

 private:
  const std::string description_;
  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::optional<CollectiveHandle> receive_;
};

/// Threads that run tasks in order of arrival, one more whenever every
/// thread is busy (a task may block until a later task ran).
///
/// Thread-safety: Run may be called from any thread; Drain from any thread
/// but the pool's own.
class GrowingPool {
 public:
  GrowingPool() = default;
  /// Drains.
  ~GrowingPool();
  GrowingPool(const GrowingPool&) = delete;
  GrowingPool& operator=(const GrowingPool&) = delete;

  /// Runs `task` on an idle thread, or on a new one.
  void Run(std::function<void()> task);
  /// Runs every task queued so far, then stops the threads. Idempotent.
  void Drain();

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  size_t idle_ = 0;                          // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
};

/// The completion thread of one process group.
///
/// Thread-safety: Push may be called from any thread; Drain from any
/// thread but the completion thread itself.
class CompletionQueue {
 public:
  /// `group` names the process group in the thread's error messages.
  explicit CompletionQueue(std::string group);
  /// Drains.
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  /// Queues `operation`, whose end completes `work`. Operations finish in
  /// the order they were pushed.
  void Push(PendingOperation operation, c10::intrusive_ptr<TandemWork> work);
  /// Queues a point-to-point `operation`, whose end completes `work` as
  /// soon as it ends, whatever was pushed before or after: a receive must
  /// not hold up the collectives behind it, nor another receive.
  void PushUnordered(PendingOperation operation, c10::intrusive_ptr<TandemWork> work);
  /// Completes everything pushed so far, then stops the thread. Idempotent.
  void Drain();

 private:
  struct Entry {
    PendingOperation operation;
    c10::intrusive_ptr<TandemWork> work;
  };
  void Run();
  // Waits for the entry's handles, runs its finish, completes its work and
  // hands its future to futures_.
  void Finish(Entry& entry);

  const std::string group_;
  GrowingPool messages_;  // one thread per point-to-point operation in flight
  GrowingPool futures_;   // completes the works' futures
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::thread thread_;
};

/// Runs `fn` with the calling thread's GIL released when it holds it (a
/// process group may be destroyed from Python while its completion thread
/// runs a future callback that needs the GIL).
void WithoutGil(const std::function<void()>& fn);

}  // namespace tandem::c10d_backend
