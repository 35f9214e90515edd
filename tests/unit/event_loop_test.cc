#include "net/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tandem::net {
namespace {

using namespace std::chrono_literals;
constexpr auto kPatience = 30s;

TEST(EventLoopTest, PostedTasksRunInOrderOnTheLoopThread) {
  EventLoop loop("test-loop");
  EXPECT_FALSE(loop.IsLoopThread());
  std::vector<int> order;  // loop thread only
  std::promise<std::thread::id> where;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(loop.Post([&order, i] { order.push_back(i); }));
  }
  std::promise<bool> on_loop;
  loop.Post([&] {
    on_loop.set_value(loop.IsLoopThread());
    where.set_value(std::this_thread::get_id());
  });
  auto f = on_loop.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_TRUE(f.get());
  EXPECT_NE(where.get_future().get(), std::this_thread::get_id());
  loop.Stop();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
}

TEST(EventLoopTest, StopRunsEveryTaskPostedBeforeItThenRefusesNewOnes) {
  EventLoop loop("test-loop");
  std::atomic<int> ran{0};
  // Tasks posted from many threads at once, and tasks posting tasks.
  std::vector<std::thread> posters;
  for (int t = 0; t < 4; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        loop.Post([&] {
          ran++;
          loop.Post([&] { ran++; });
        });
      }
    });
  }
  for (auto& p : posters) p.join();
  loop.Stop();
  EXPECT_EQ(ran.load(), 4 * 500 * 2);
  EXPECT_FALSE(loop.Post([&] { ran++; }));
  EXPECT_EQ(ran.load(), 4 * 500 * 2);
  loop.Stop();  // idempotent
}

TEST(EventLoopTest, TimersFireInDeadlineOrderAndCanBeCancelled) {
  EventLoop loop("test-loop");
  std::mutex mu;
  std::vector<int> fired;
  std::promise<void> last;
  auto record = [&](int v) {
    std::lock_guard lock(mu);
    fired.push_back(v);
  };
  loop.RunAfter(60ms, [&] { record(3); });
  auto cancelled = loop.RunAfter(30ms, [&] { record(99); });
  loop.RunAfter(10ms, [&] { record(1); });
  loop.RunAfter(40ms, [&] { record(2); });
  loop.RunAfter(80ms, [&] {
    record(4);
    last.set_value();
  });
  EXPECT_TRUE(loop.Cancel(cancelled));
  EXPECT_FALSE(loop.Cancel(cancelled));
  EXPECT_FALSE(loop.Cancel(123456));
  ASSERT_EQ(last.get_future().wait_for(kPatience), std::future_status::ready);
  std::lock_guard lock(mu);
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 3, 4}));
}

TEST(EventLoopTest, TimerNeverFiresEarly) {
  EventLoop loop("test-loop");
  auto start = std::chrono::steady_clock::now();
  std::promise<std::chrono::steady_clock::time_point> at;
  loop.RunAfter(50ms, [&] { at.set_value(std::chrono::steady_clock::now()); });
  auto f = at.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_GE(f.get() - start, 50ms);
}

TEST(EventLoopTest, DescriptorCallbacksSeeReadinessAndMayRemoveThemselves) {
  EventLoop loop("test-loop");
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  std::promise<std::string> got;
  std::atomic<int> calls{0};
  std::shared_ptr<FdWatch> watch = std::make_shared<FdWatch>();
  loop.Post([&, watch] {
    *watch = loop.AddFd(fds[0], EPOLLIN, [&, watch](uint32_t events) {
      calls++;
      ASSERT_TRUE(events & EPOLLIN);
      char buf[16] = {};
      ssize_t n = ::read(fds[0], buf, sizeof(buf));
      loop.RemoveFd(*watch);  // from inside its own callback
      got.set_value(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
    });
  });
  ASSERT_EQ(::write(fds[1], "hello", 5), 5);
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(f.get(), "hello");
  // Once removed, more data never reaches the callback.
  ASSERT_EQ(::write(fds[1], "again", 5), 5);
  std::promise<void> flushed;
  loop.RunAfter(20ms, [&] { flushed.set_value(); });
  flushed.get_future().wait();
  EXPECT_EQ(calls.load(), 1);
  loop.Stop();
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(EventLoopTest, ModifyFromAnotherThreadArmsWritability) {
  EventLoop loop("test-loop");
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  std::promise<FdWatch> registered;
  std::promise<void> writable;
  std::atomic<bool> done{false};
  loop.Post([&] {
    // Registered for nothing at first: the pipe is writable but quiet.
    registered.set_value(loop.AddFd(fds[1], 0, [&](uint32_t events) {
      if ((events & EPOLLOUT) && !done.exchange(true)) writable.set_value();
    }));
  });
  FdWatch w = registered.get_future().get();
  loop.ModifyFd(w, EPOLLOUT);
  ASSERT_EQ(writable.get_future().wait_for(kPatience), std::future_status::ready);
  loop.Post([&] { loop.RemoveFd(w); });
  loop.Stop();
  ::close(fds[0]);
  ::close(fds[1]);
}

// A pipe registered in the loop's caller set or its own set.
struct WatchedPipe {
  WatchedPipe(EventLoop& loop, bool callers_may_read, std::function<void(int fd)> on_readable)
      : loop_(loop) {
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    std::promise<FdWatch> registered;
    loop.Post([&] {
      registered.set_value(loop.AddFd(
          fds[0], EPOLLIN, [this, on_readable](uint32_t) { on_readable(fds[0]); },
          callers_may_read));
    });
    watch = registered.get_future().get();
  }
  ~WatchedPipe() {
    std::promise<void> removed;
    if (loop_.Post([&] {
          loop_.RemoveFd(watch);
          removed.set_value();
        })) {
      removed.get_future().wait();
    }
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void Write(char c) const { EXPECT_EQ(::write(fds[1], &c, 1), 1); }

  EventLoop& loop_;
  int fds[2] = {-1, -1};
  FdWatch watch;
};

// Blocks until the loop's thread sits in epoll_wait with nothing to do, as
// the kernel reports it in /proc: from then on only readiness in its own
// set (or a wake-up) makes it run anything. False after kPatience.
bool WaitUntilTheLoopThreadIsParked(EventLoop& loop) {
  std::promise<pid_t> tid;
  loop.Post([&] { tid.set_value(static_cast<pid_t>(::syscall(SYS_gettid))); });
  const std::string path = "/proc/self/task/" + std::to_string(tid.get_future().get()) + "/syscall";
  const auto until = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(path);
    long nr = -1;
    in >> nr;
    if (nr == SYS_epoll_wait || nr == SYS_epoll_pwait) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

char ReadOne(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : '\0';
}

TEST(EventLoopCallerTest, TheWaitingThreadDispatchesTheCallerSetAndThePostedTasks) {
  EventLoop loop("test-loop");
  std::mutex mu;
  std::vector<std::pair<char, std::thread::id>> seen;  // guarded by mu
  std::atomic<bool> in_callback{false};
  WatchedPipe pipe(loop, true, [&](int fd) {
    in_callback = loop.InCallback();
    const char c = ReadOne(fd);
    std::lock_guard lock(mu);
    seen.emplace_back(c, std::this_thread::get_id());
  });
  std::promise<void> driving;
  std::atomic<bool> looked{false};
  std::atomic<bool> task_ran{false};
  std::thread::id task_thread;
  // A loop thread still finishing the iteration that registered the pipe
  // would run the task below itself.
  ASSERT_TRUE(WaitUntilTheLoopThreadIsParked(loop));
  std::thread writer([&] {
    driving.get_future().wait();
    pipe.Write('a');
    // A task posted from another thread while the set is driven: the
    // wake-up reaches the driving thread, which runs it.
    loop.Post([&] {
      task_thread = std::this_thread::get_id();
      task_ran = true;
    });
    pipe.Write('b');
  });
  const bool drove = loop.RunOnCaller(
      std::chrono::steady_clock::now() + kPatience,
      [&] {
        if (!looked.exchange(true)) driving.set_value();
        std::lock_guard lock(mu);
        return seen.size() == 2 && task_ran.load();
      },
      5ms);
  writer.join();
  ASSERT_TRUE(drove);
  EXPECT_TRUE(in_callback.load());
  EXPECT_FALSE(loop.InCallback());  // only inside
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair('a', std::this_thread::get_id()));
  EXPECT_EQ(seen[1], std::make_pair('b', std::this_thread::get_id()));
  EXPECT_EQ(task_thread, std::this_thread::get_id());
}

TEST(EventLoopCallerTest, AfterTheWaitTheLoopThreadDispatchesTheSetAgain) {
  EventLoop loop("test-loop");
  std::promise<std::thread::id> where;
  WatchedPipe pipe(loop, true, [&](int fd) {
    ReadOne(fd);
    where.set_value(std::this_thread::get_id());
  });
  ASSERT_TRUE(loop.RunOnCaller(
      std::chrono::steady_clock::now() + 20ms, [] { return false; }, 5ms));
  pipe.Write('x');
  auto f = where.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(EventLoopCallerTest, OneDriverAtATimeAndNeverFromACallback) {
  EventLoop loop("test-loop");
  std::promise<void> driving;
  std::atomic<bool> looked{false};
  std::atomic<bool> stop{false};
  std::thread first([&] {
    loop.RunOnCaller(
        std::chrono::steady_clock::now() + kPatience,
        [&] {
          if (!looked.exchange(true)) driving.set_value();
          return stop.load();
        },
        5ms);
  });
  driving.get_future().wait();
  EXPECT_FALSE(loop.RunOnCaller(
      std::chrono::steady_clock::now() + 1s, [] { return false; }, 5ms));
  stop = true;
  first.join();
  std::promise<bool> from_task;
  loop.Post([&] {
    from_task.set_value(loop.RunOnCaller(
        std::chrono::steady_clock::now() + 1s, [] { return false; }, 5ms));
  });
  EXPECT_FALSE(from_task.get_future().get());
}

TEST(EventLoopCallerTest, CallbacksOnTheTwoThreadsNeverOverlap) {
  // One pipe in the loop's own set (the loop thread reads it), one in the
  // caller set (the waiting thread reads it), both kept busy: no two
  // callbacks ever run at once.
  EventLoop loop("test-loop");
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> own_reads{0};
  std::atomic<int> caller_reads{0};
  auto callback = [&](std::atomic<int>& reads) {
    return [&](int fd) {
      if (inside.fetch_add(1) != 0) overlaps++;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      while (ReadOne(fd) != '\0') reads++;
      inside.fetch_sub(1);
    };
  };
  WatchedPipe own(loop, false, callback(own_reads));
  WatchedPipe set(loop, true, callback(caller_reads));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) {
      own.Write('o');
      set.Write('s');
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  ASSERT_TRUE(loop.RunOnCaller(
      std::chrono::steady_clock::now() + 300ms, [] { return false; }, 5ms));
  stop = true;
  writer.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(own_reads.load(), 0);
  EXPECT_GT(caller_reads.load(), 0);
}

TEST(EventLoopCallerTest, StopEndsAWaitThatDrivesTheSet) {
  auto loop = std::make_unique<EventLoop>("test-loop");
  std::promise<void> driving;
  std::atomic<bool> looked{false};
  std::promise<bool> result;
  std::thread waiter([&] {
    result.set_value(loop->RunOnCaller(
        std::chrono::steady_clock::now() + kPatience,
        [&] {
          if (!looked.exchange(true)) driving.set_value();
          return false;
        },
        5ms));
  });
  driving.get_future().wait();
  const auto start = std::chrono::steady_clock::now();
  loop->Stop();
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f.get());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  waiter.join();
  EXPECT_FALSE(loop->RunOnCaller(
      std::chrono::steady_clock::now() + 1s, [] { return false; }, 5ms));
}

}  // namespace
}  // namespace tandem::net
