#include "base/thread_pool.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <system_error>

#include "tandem/error.h"

namespace tandem::base {
namespace {

// One ParallelFor call. The caller and up to `chunks - 1` helper tasks claim
// chunk indices from `next` until none are left; whoever finishes the last
// chunk wakes the caller. A helper that runs after every chunk was claimed
// (late, or after the caller returned) claims nothing and never touches
// `fn`, which may by then be gone; the shared_ptr keeps the rest alive.
struct ParallelForState {
  const std::function<void(size_t, size_t)>* fn = nullptr;
  size_t n = 0;
  size_t chunks = 1;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};

  std::mutex mu;
  std::condition_variable all_done;
  size_t finished = 0;       // guarded by mu: chunks run or skipped
  std::exception_ptr error;  // guarded by mu: the first exception thrown

  // [begin, end) of chunk i: n split into `chunks` parts whose sizes differ
  // by at most one, the longer ones first.
  std::pair<size_t, size_t> Range(size_t i) const {
    const size_t base = n / chunks;
    const size_t extra = n % chunks;
    const size_t begin = i * base + std::min(i, extra);
    return {begin, begin + base + (i < extra ? 1 : 0)};
  }

  void RunChunks() {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= chunks) return;
      if (!failed.load()) {
        try {
          auto [begin, end] = Range(i);
          (*fn)(begin, end);
        } catch (...) {
          std::lock_guard lock(mu);
          if (!error) error = std::current_exception();
          failed.store(true);
        }
      }
      std::lock_guard lock(mu);
      if (++finished == chunks) all_done.notify_all();
    }
  }
};

// Linux keeps 15 characters of a thread name.
std::string ThreadName(const std::string& pool_name, size_t index) {
  std::string name = fmt::format("{}/{}", pool_name, index);
  if (name.size() > 15) name = name.substr(0, 15);
  return name;
}

}  // namespace

ThreadPool::ThreadPool(size_t threads, std::string name) : name_(std::move(name)) {
  if (threads == 0) {
    throw InvalidArgument(fmt::format("thread pool '{}': needs at least 1 thread, got 0", name_));
  }
  workers_.reserve(threads);
  try {
    for (size_t i = 0; i < threads; ++i) {
      workers_.emplace_back([this] { WorkerLoop(); });
      // Best effort: a failure only leaves the inherited name.
      pthread_setname_np(workers_.back().native_handle(), ThreadName(name_, i).c_str());
    }
  } catch (const std::system_error& e) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    throw IoError(fmt::format("thread pool '{}': starting thread {} of {} failed: {}", name_,
                              workers_.size(), threads, e.what()));
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::future<void> ThreadPool::Submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> result = packaged.get_future();
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(packaged));
  }
  wake_.notify_one();
  return result;
}

void ThreadPool::ParallelFor(size_t n, size_t min_chunk,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  const size_t chunk_floor = std::max<size_t>(min_chunk, 1);
  const size_t chunks = std::clamp<size_t>(n / chunk_floor, 1, workers_.size() + 1);
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  auto state = std::make_shared<ParallelForState>();
  state->fn = &fn;
  state->n = n;
  state->chunks = chunks;
  for (size_t i = 1; i < chunks; ++i) {
    Submit([state] { state->RunChunks(); });
  }
  state->RunChunks();
  std::unique_lock lock(state->mu);
  state->all_done.wait(lock, [&] { return state->finished == state->chunks; });
  if (state->error) std::rethrow_exception(state->error);
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to drain
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // stores the task's result or exception in its future
  }
}

}  // namespace tandem::base
