#include "net/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
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

}  // namespace
}  // namespace tandem::net
