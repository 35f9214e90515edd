#include "net/event_loop.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>

#include "tandem/error.h"

namespace tandem::net {
namespace {

constexpr int kMaxEventsPerWait = 128;

IoError SysError(const std::string& what) {
  return IoError(fmt::format("{}: {}", what, std::strerror(errno)));
}

}  // namespace

EventLoop::EventLoop(std::string name) {
  epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_) throw SysError("epoll_create1");
  wake_fd_.Reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_) throw SysError("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // serial 0 is the wake-up descriptor
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) {
    throw SysError("epoll_ctl(ADD eventfd)");
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
  // The loop looks at its queue before every epoll_wait, so work posted by
  // the loop thread itself needs no wake-up.
  if (!IsLoopThread()) Wake();
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
  if (earliest && !IsLoopThread()) Wake();
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

FdWatch EventLoop::AddFd(int fd, uint32_t events, FdCallback cb) {
  FdWatch watch{fd, next_serial_++};
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch.serial;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw SysError(fmt::format("epoll_ctl(ADD fd {})", fd));
  }
  callbacks_.emplace(watch.serial, std::make_shared<FdCallback>(std::move(cb)));
  return watch;
}

void EventLoop::ModifyFd(const FdWatch& watch, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch.serial;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, watch.fd, &ev) != 0) {
    throw SysError(fmt::format("epoll_ctl(MOD fd {})", watch.fd));
  }
}

void EventLoop::RemoveFd(const FdWatch& watch) {
  // Failure means the descriptor is already gone from the epoll set, which
  // is the state we want.
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, watch.fd, nullptr);
  callbacks_.erase(watch.serial);
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
    for (int i = 0; i < n; ++i) {
      uint64_t serial = events[i].data.u64;
      if (serial == 0) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &count, sizeof(count));
        // Cleared before the queue is drained below, so a Post racing with
        // this iteration either lands in this drain or wakes us again.
        wake_pending_.store(false);
        continue;
      }
      auto it = callbacks_.find(serial);
      if (it == callbacks_.end()) continue;  // removed earlier in this batch
      auto cb = it->second;                  // keeps the callback alive if it removes itself
      (*cb)(events[i].events);
    }
    RunDueTimers();
    RunTasks();
  }
  // Drain: every task posted before the queue closes runs, including tasks
  // those tasks post.
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
