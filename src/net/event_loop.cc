#include "net/event_loop.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

#include "tandem/error.h"

namespace tandem::net {
namespace {

constexpr int kMaxEventsPerWait = 128;
// The serials of the loop's own descriptors.
constexpr uint64_t kWakeSerial = 0;
constexpr uint64_t kCallerSetSerial = 1;

// The loop whose callback this thread runs now (nested loops: the innermost).
thread_local const EventLoop* t_dispatching = nullptr;

// Marks this thread as dispatching `loop` for a scope.
class DispatchScope {
 public:
  explicit DispatchScope(const EventLoop* loop) : previous_(t_dispatching) { t_dispatching = loop; }
  ~DispatchScope() { t_dispatching = previous_; }
  DispatchScope(const DispatchScope&) = delete;
  DispatchScope& operator=(const DispatchScope&) = delete;

 private:
  const EventLoop* previous_;
};

IoError SysError(const std::string& what) {
  return IoError(fmt::format("{}: {}", what, std::strerror(errno)));
}

}  // namespace

EventLoop::EventLoop(std::string name) {
  epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_) throw SysError("epoll_create1");
  wake_fd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) throw SysError("eventfd");
  caller_epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!caller_epoll_fd_) throw SysError("epoll_create1 (the caller set)");
  // The wake-up descriptor is in the caller set: a thread driving the set
  // runs the posted tasks and timers too, so a Post reaches whichever
  // thread runs the loop now.
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeSerial;
  if (::epoll_ctl(caller_epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    throw SysError("epoll_ctl(ADD eventfd)");
  }
  ev.data.u64 = kCallerSetSerial;  // readable when a descriptor of the set is ready
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, caller_epoll_fd_.get(), &ev) != 0) {
    throw SysError("epoll_ctl(ADD the caller set)");
  }
  // The thread must not look at thread_id_ before it is assigned.
  std::promise<void> id_known;
  auto id_ready = id_known.get_future();
  thread_ = std::thread([this, name = std::move(name), ready = std::move(id_ready)]() mutable {
    ready.wait();
    ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
    Run();
  });
  thread_id_ = thread_.get_id();
  id_known.set_value();
}

EventLoop::~EventLoop() { Stop(); }

bool EventLoop::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (!accepting_) return false;
    tasks_.push_back(std::move(task));
  }
  // The loop looks at its queue before every epoll_wait, so work posted
  // from a callback (by whichever thread runs the loop) needs no wake-up.
  if (!InCallback()) Wake();
  return true;
}

void EventLoop::Wake() {
  if (wake_pending_.exchange(true)) return;
  uint64_t one = 1;
  // The eventfd counter cannot overflow in practice; EAGAIN would mean it is
  // already readable, which is all a wake-up needs.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

EventLoop::TimerId EventLoop::RunAfter(Duration delay, std::function<void()> fn) {
  auto deadline = std::chrono::steady_clock::now() + delay;
  TimerId id;
  bool earliest;
  {
    std::lock_guard lock(mu_);
    id = next_timer_++;
    timers_.emplace(std::make_pair(deadline, id), std::move(fn));
    timer_deadlines_.emplace(id, deadline);
    earliest = timers_.begin()->first.second == id;
  }
  // A new earliest deadline shortens the current epoll_wait.
  if (earliest && !InCallback()) Wake();
  return id;
}

bool EventLoop::Cancel(TimerId id) {
  std::lock_guard lock(mu_);
  auto it = timer_deadlines_.find(id);
  if (it == timer_deadlines_.end()) return false;
  timers_.erase(std::make_pair(it->second, id));
  timer_deadlines_.erase(it);
  return true;
}

bool EventLoop::InCallback() const { return t_dispatching == this; }

FdWatch EventLoop::AddFd(int fd, uint32_t events, FdCallback cb, bool callers_may_read) {
  FdWatch watch{fd, next_serial_++, callers_may_read};
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch.serial;
  const int set = callers_may_read ? caller_epoll_fd_.get() : epoll_fd_.get();
  if (::epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw SysError(fmt::format("epoll_ctl(ADD fd {})", fd));
  }
  callbacks_.emplace(watch.serial, std::make_shared<FdCallback>(std::move(cb)));
  return watch;
}

void EventLoop::ModifyFd(const FdWatch& watch, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch.serial;
  const int set = watch.caller_set ? caller_epoll_fd_.get() : epoll_fd_.get();
  if (::epoll_ctl(set, EPOLL_CTL_MOD, watch.fd, &ev) != 0) {
    throw SysError(fmt::format("epoll_ctl(MOD fd {})", watch.fd));
  }
}

void EventLoop::RemoveFd(const FdWatch& watch) {
  // Failure means the descriptor is already gone from the epoll set, which
  // is the state we want.
  const int set = watch.caller_set ? caller_epoll_fd_.get() : epoll_fd_.get();
  ::epoll_ctl(set, EPOLL_CTL_DEL, watch.fd, nullptr);
  callbacks_.erase(watch.serial);
}

bool EventLoop::RunOnCaller(std::chrono::steady_clock::time_point deadline,
                            const std::function<bool()>& done, std::chrono::milliseconds slice,
                            std::chrono::microseconds spin) {
  if (IsLoopThread() || InCallback() || stop_requested_.load()) return false;
  bool expected = false;
  if (!caller_driving_.compare_exchange_strong(expected, true)) return false;
  // Out of the loop's epoll: the set's readiness wakes this thread alone.
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, caller_epoll_fd_.get(), nullptr);
  struct Restore {
    EventLoop* loop;
    ~Restore() {
      // Back in: level-triggered, so whatever became ready meanwhile (and
      // this thread did not dispatch) wakes the loop thread at once.
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kCallerSetSerial;
      ::epoll_ctl(loop->epoll_fd_.get(), EPOLL_CTL_ADD, loop->caller_epoll_fd_.get(), &ev);
      loop->caller_driving_.store(false);
      if (loop->stop_requested_.load()) {
        // This thread may have taken the stop's wake-up: pass it on.
        uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(loop->wake_fd_.get(), &one, sizeof(one));
      }
    }
  } restore{this};
  epoll_event events[kMaxEventsPerWait];
  const auto spin_until = std::chrono::steady_clock::now() + spin;
  while (!done() && !stop_requested_.load()) {
    // As the loop thread would: wait until an event, the next timer, the
    // deadline or the end of the slice; a deadline already passed still
    // gets one look (a poll).
    const auto left = deadline - std::chrono::steady_clock::now();
    const bool polling = left <= std::chrono::steady_clock::duration::zero();
    const auto wait = std::clamp<std::chrono::steady_clock::duration>(left, {}, slice);
    int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
    const int timers = WaitMillis();
    if (timers >= 0) ms = std::min(ms, timers);
    // Polling first, yielding the core between looks, when asked to.
    const bool spinning = spin.count() > 0 && std::chrono::steady_clock::now() < spin_until;
    if (spinning) ms = 0;
    const int n = ::epoll_wait(caller_epoll_fd_.get(), events, kMaxEventsPerWait, ms);
    RunIteration(events, n);
    if (polling) break;
    if (spinning && n == 0) std::this_thread::yield();
  }
  return true;
}

void EventLoop::RunIteration(const epoll_event* events, int n) {
  std::lock_guard lock(dispatch_mu_);
  DispatchScope scope(this);
  if (n > 0) Dispatch(events, n);
  RunDueTimers();
  RunTasks();
}

void EventLoop::Dispatch(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    const uint64_t serial = events[i].data.u64;
    if (serial == kWakeSerial) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &count, sizeof(count));
      // Cleared before the queue is drained, so a Post racing with this
      // iteration either lands in this drain or wakes us again.
      wake_pending_.store(false);
      continue;
    }
    if (serial == kCallerSetSerial) {
      DispatchCallerSet();
      continue;
    }
    auto it = callbacks_.find(serial);
    if (it == callbacks_.end()) continue;  // removed earlier in this batch
    auto cb = it->second;                  // keeps the callback alive if it removes itself
    (*cb)(events[i].events);
  }
}

void EventLoop::DispatchCallerSet() {
  epoll_event events[kMaxEventsPerWait];
  const int n = ::epoll_wait(caller_epoll_fd_.get(), events, kMaxEventsPerWait, 0);
  if (n > 0) Dispatch(events, n);
}

void EventLoop::Stop() {
  stop_requested_.store(true);
  if (IsLoopThread()) return;
  std::lock_guard lock(join_mu_);
  if (!thread_.joinable()) return;
  // Bypass Wake()'s coalescing: a stop must always reach the loop.
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
  // A thread driving the caller set sees the stop within one slice.
  while (caller_driving_.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

int EventLoop::WaitMillis() {
  std::lock_guard lock(mu_);
  if (!tasks_.empty()) return 0;
  if (timers_.empty()) return -1;
  auto left = timers_.begin()->first.first - std::chrono::steady_clock::now();
  if (left <= Duration::zero()) return 0;
  // Round up so a timer never fires a millisecond early and spins.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > 1000000 ? 1000000 : static_cast<int>(ms);
}

void EventLoop::RunDueTimers() {
  auto now = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> fn;
    {
      std::lock_guard lock(mu_);
      if (timers_.empty() || timers_.begin()->first.first > now) return;
      auto it = timers_.begin();
      fn = std::move(it->second);
      timer_deadlines_.erase(it->first.second);
      timers_.erase(it);
    }
    fn();
  }
}

size_t EventLoop::RunTasks() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(tasks_);
  }
  for (auto& task : batch) task();
  return batch.size();
}

void EventLoop::Run() {
  epoll_event events[kMaxEventsPerWait];
  while (!stop_requested_.load()) {
    int n = ::epoll_wait(epoll_fd_.get(), events, kMaxEventsPerWait, WaitMillis());
    if (n < 0 && errno != EINTR) {
      // Only EBADF/EFAULT/EINVAL are possible here, all programming errors
      // that would make every later wait fail too.
      std::fprintf(stderr, "tandem: epoll_wait failed: %s\n", std::strerror(errno));
      std::abort();
    }
    RunIteration(events, n);
  }
  // Drain: every task posted before the queue closes runs, including tasks
  // those tasks post.
  std::lock_guard dispatching(dispatch_mu_);
  DispatchScope scope(this);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (tasks_.empty()) {
        accepting_ = false;
        timers_.clear();
        timer_deadlines_.clear();
        break;
      }
    }
    RunTasks();
  }
  callbacks_.clear();
}

}  // namespace tandem::net
