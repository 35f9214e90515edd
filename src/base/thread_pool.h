// A fixed set of worker threads that run submitted tasks in FIFO order, and
// a parallel loop over an index range built on them.
//
// Used where one process splits CPU work: the local aggregation of large
// arrays (MXNET_KVSTORE_REDUCTION_NTHREADS), a server's merge and optimizer
// over a big key, gradient compression. Each owner builds its own pool and
// passes it down; there is no process-wide pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::base {

/// Thread-safety: Submit, ParallelFor and size may be called from any
/// thread, including from inside a task of this pool. The destructor must
/// run on a thread that is not one of the pool's own, after every other
/// caller has stopped submitting.
class ThreadPool {
 public:
  /// Starts `threads` worker threads named "<name>/<index>" (as far as the
  /// 15 characters Linux keeps allow; the name only shows in debuggers and
  /// top). Throws InvalidArgument when `threads` is 0, IoError when a
  /// thread cannot be started (the ones already started are stopped first).
  ThreadPool(size_t threads, std::string name);

  /// Drains: every task already queued, and every task those tasks submit
  /// while the pool shuts down, runs to completion before the workers are
  /// joined. So no future returned by Submit is ever left without a result.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Queues `task` to run on a worker thread. The future becomes ready when
  /// the task returns; an exception it throws is rethrown by the future's
  /// get(). Never throws itself (beyond std::bad_alloc).
  std::future<void> Submit(std::function<void()> task);

  /// Calls fn(begin, end) over disjoint ranges that together cover [0, n),
  /// each range at least `min_chunk` long except when n itself is shorter
  /// (a min_chunk of 0 counts as 1), using up to size() + 1 ranges. The
  /// calling thread works on ranges too and returns once every range has
  /// finished, so `fn` may capture locals by reference. It is safe to call
  /// from inside a task of this pool: the caller then does any range no
  /// idle worker picks up, so nesting cannot deadlock.
  ///
  /// When calls of `fn` throw, ranges not yet started are skipped and the
  /// first exception thrown (in time) is rethrown here after the running
  /// ones finish. With n == 0, fn is not called.
  void ParallelFor(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn);

  /// The number of worker threads.
  size_t size() const { return workers_.size(); }

 private:
  void WorkerLoop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                         // guarded by mu_
  std::vector<std::thread> workers_;              // set in the constructor only
};

}  // namespace tandem::base
