// An epoll event loop running on a thread of its own.
//
// The loop owns one thread. Everything that touches a socket's read side, a
// connection's life cycle or a handler callback runs there; other threads
// hand work over with Post(). Timers (handshake deadlines, retry backoff)
// fire on the same thread, so code run by the loop never needs a lock against
// other code run by the loop.
//
// One iteration: wait in epoll_wait (until the next timer is due, or not at
// all when tasks are queued), dispatch ready descriptors, run due timers, run
// queued tasks. Tasks posted from the loop thread itself cost no system call;
// from other threads, the first task of a batch writes the eventfd once.
//
// The caller set: descriptors registered with `callers_may_read` sit in a
// second epoll set nested in the loop's. Normally the loop thread dispatches
// them like the others. A thread that waits for something those descriptors
// will bring (a collective operation waiting for pieces over TCP) may instead
// drive that set itself with RunOnCaller: it takes the set out of the loop's
// epoll, sleeps in epoll_wait on it, and dispatches its events on its own
// thread, so the bytes it waits for wake it directly, with no hop through
// the loop thread (docs/transport.md, "Reading on the waiting thread").
// Meanwhile that thread runs the loop's timers and posted tasks as well (the
// wake-up eventfd is in the caller set), and the loop thread only watches
// what is left (listening sockets). Callbacks, timers and tasks still run
// one at a time: every dispatch, on either thread, holds the loop's dispatch
// mutex.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/unique_fd.h"

namespace tandem::net {

/// A descriptor registered with an EventLoop: what ModifyFd and RemoveFd
/// need. `serial` tells registrations of a reused descriptor number apart.
struct FdWatch {
  int fd = -1;
  uint64_t serial = 0;
  bool caller_set = false;  // registered in the caller set
};

/// Thread-safety: Post, RunAfter, Cancel, IsLoopThread, InCallback, ModifyFd,
/// RunOnCaller and Stop may be called from any thread; AddFd and RemoveFd
/// only from a callback, a timer or a task (InCallback()). The registration
/// table belongs to whichever thread dispatches (it holds dispatch_mu_); the
/// task queue and the timers are guarded by an internal mutex.
class EventLoop {
 public:
  using Duration = std::chrono::steady_clock::duration;
  /// Receives the epoll event bits (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP...).
  using FdCallback = std::function<void(uint32_t events)>;
  using TimerId = uint64_t;

  /// Creates the epoll instance and the wake-up eventfd and starts the loop
  /// thread, named `name` (at most 15 characters are kept). Throws IoError
  /// when the kernel objects cannot be created.
  explicit EventLoop(std::string name);
  /// Stops the loop (see Stop). Must not run on the loop thread.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  /// Queues `task` to run on the loop (the loop thread, or a thread driving
  /// the caller set), after the current callback when called from one.
  /// Tasks run in the order posted.
  /// Returns false (and destroys the task unrun) once the loop has stopped.
  /// Any thread; never throws except std::bad_alloc.
  bool Post(std::function<void()> task);

  /// Runs `fn` on the loop (as Post) once `delay` has passed (millisecond
  /// resolution). Returns an id for Cancel. Timers still pending when the loop
  /// stops never run. Any thread.
  TimerId RunAfter(Duration delay, std::function<void()> fn);

  /// Cancels a pending timer. Returns false when it already ran, is running,
  /// or never existed. Any thread.
  bool Cancel(TimerId id);

  /// True when called on the loop thread.
  bool IsLoopThread() const { return std::this_thread::get_id() == thread_id_; }

  /// True inside a callback, timer or task of this loop, on the loop thread
  /// or on a thread driving the caller set (RunOnCaller): code that must not
  /// block on the loop, since it is the loop.
  bool InCallback() const;

  /// Registers `fd` for `events` (EPOLLIN, EPOLLOUT, ...; level-triggered
  /// unless EPOLLET is given); `cb` runs whenever it is ready, one callback
  /// at a time, on the loop thread or, with `callers_may_read`, on a thread
  /// in RunOnCaller. The caller keeps owning `fd` and must RemoveFd before
  /// closing it. Only InCallback(). Throws IoError when epoll_ctl fails.
  FdWatch AddFd(int fd, uint32_t events, FdCallback cb, bool callers_may_read = false);

  /// Drives the caller set on this thread until `done()` is true or
  /// `deadline` passes: sleeps in epoll_wait on the set's descriptors and
  /// dispatches their events here, with the due timers and posted tasks
  /// (holding the dispatch mutex, so never at the same time as another
  /// callback). `done` runs outside any callback, at least every `slice`
  /// (what this thread does not see from the set, e.g. a failure another
  /// thread reports, is noticed that late at most). Returns false without
  /// waiting when another thread drives the set, when called from a
  /// callback, or once the loop stops: the caller then waits its own way.
  /// The caller must hold no lock that a callback, timer or task takes.
  /// For the first `spin` it polls instead of sleeping, yielding the core
  /// between looks.
  bool RunOnCaller(std::chrono::steady_clock::time_point deadline,
                   const std::function<bool()>& done, std::chrono::milliseconds slice,
                   std::chrono::microseconds spin = std::chrono::microseconds(0));

  /// Changes the events `watch` waits for. Any thread, as long as the caller
  /// guarantees the registration is not being removed concurrently. Throws
  /// IoError when epoll_ctl fails.
  void ModifyFd(const FdWatch& watch, uint32_t events);

  /// Unregisters `watch`; its callback is released and no further event of
  /// this registration is dispatched, even one already returned by the
  /// current epoll_wait. Safe to call from inside its own callback. Loop
  /// thread only; never throws.
  void RemoveFd(const FdWatch& watch);

  /// Makes the loop run every task posted so far and exit, then joins the
  /// thread. Pending timers and descriptor events are dropped. Idempotent.
  /// From the loop thread it only requests the stop; the destructor joins.
  void Stop();

 private:
  void Run();
  // One turn of the loop, on whichever thread runs it: takes dispatch_mu_,
  // dispatches the `n` ready events (none when n <= 0), runs the due timers
  // and the queued tasks.
  void RunIteration(const epoll_event* events, int n);
  // Dispatches one batch of ready events (the loop's or the caller set's).
  // Requires dispatch_mu_.
  void Dispatch(const epoll_event* events, int n);
  // Dispatches what the caller set has ready now. Requires dispatch_mu_.
  void DispatchCallerSet();
  // Runs the timers whose deadline has passed; returns nothing.
  void RunDueTimers();
  // Runs every queued task; returns how many ran.
  size_t RunTasks();
  // Milliseconds epoll_wait may sleep: -1 (no timer), 0 (work queued), or
  // the time to the next timer rounded up.
  int WaitMillis();
  void Wake();

  base::UniqueFd epoll_fd_;
  base::UniqueFd wake_fd_;
  base::UniqueFd caller_epoll_fd_;  // the caller set, nested in epoll_fd_

  // Held by whichever thread dispatches (the loop thread, or one in
  // RunOnCaller); guards the registration table.
  std::mutex dispatch_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<FdCallback>> callbacks_;
  uint64_t next_serial_ = 2;  // 0: the eventfd, 1: the caller set
  // True while a thread drives the caller set (it is out of epoll_fd_).
  std::atomic<bool> caller_driving_{false};

  // Guarded by mu_.
  std::mutex mu_;
  std::vector<std::function<void()>> tasks_;
  std::map<std::pair<std::chrono::steady_clock::time_point, TimerId>, std::function<void()>>
      timers_;
  std::unordered_map<TimerId, std::chrono::steady_clock::time_point> timer_deadlines_;
  TimerId next_timer_ = 1;
  bool accepting_ = true;  // false once the loop thread has exited

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> wake_pending_{false};
  std::thread thread_;
  std::thread::id thread_id_;
  std::mutex join_mu_;  // serialises concurrent Stop() calls
};

}  // namespace tandem::net
