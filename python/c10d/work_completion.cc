#include "work_completion.h"

#include <Python.h>
#include <fmt/format.h>

#include <cstdio>
#include <utility>

#include "tandem/error.h"

namespace tandem::c10d_backend {

TandemWork::TandemWork(int rank, ::c10d::OpType type, std::string description,
                       std::vector<at::Tensor> outputs)
    : ::c10d::Work(rank, type),
      description_(std::move(description)),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool TandemWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (timeout <= std::chrono::milliseconds(0)) {  // kNoTimeout (0) or kUnsetTimeout (-1)
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw Timeout(fmt::format("{} was not done within the {} ms that Work.wait allowed",
                              description_, timeout.count()));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> TandemWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> TandemWork::getFuture() { return future_; }

void TandemWork::Complete(std::exception_ptr error) { finish(error); }

void TandemWork::CompleteFuture() {
  if (std::exception_ptr error = exception()) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

GrowingPool::~GrowingPool() { Drain(); }

void GrowingPool::Run(std::function<void()> task) {
  std::lock_guard lock(mu_);
  tasks_.push_back(std::move(task));
  // Each idle thread takes one task: a task beyond them gets a new thread.
  if (tasks_.size() > idle_) {
    threads_.emplace_back([this] { Work(); });
  } else {
    cv_.notify_one();
  }
}

void GrowingPool::Drain() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

void GrowingPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

CompletionQueue::CompletionQueue(std::string group)
    : group_(std::move(group)), thread_([this] { Run(); }) {}

CompletionQueue::~CompletionQueue() { Drain(); }

void CompletionQueue::Push(PendingOperation operation, c10::intrusive_ptr<TandemWork> work) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Entry{std::move(operation), std::move(work)});
  }
  cv_.notify_one();
}

void CompletionQueue::Drain() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  messages_.Drain();
  futures_.Drain();
}

int TandemWork::sourceRank() const {
  if (!receive_) return ::c10d::Work::sourceRank();  // throws
  if (!receive_->Done()) {
    throw InvalidArgument(description_ + ": its sender is known once it completed (wait first)");
  }
  return receive_->Source();
}

void CompletionQueue::PushUnordered(PendingOperation operation,
                                    c10::intrusive_ptr<TandemWork> work) {
  auto entry = std::make_shared<Entry>(Entry{std::move(operation), std::move(work)});
  messages_.Run([this, entry] { Finish(*entry); });
}

void CompletionQueue::Finish(Entry& entry) {
  std::exception_ptr error;
  for (const CollectiveHandle& handle : entry.operation.handles) {
    try {
      handle.Wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (!error && entry.operation.finish) {
    try {
      entry.operation.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  entry.operation.keep.clear();
  entry.work->Complete(error);
  futures_.Run([work = std::move(entry.work), group = group_] {
    try {
      work->CompleteFuture();
    } catch (const std::exception& e) {
      // A callback that throws fails the future it returns, not this
      // one; anything else is reported and the pool goes on.
      std::fprintf(stderr, "tandem: completing an operation's future in %s: %s\n", group.c_str(),
                   e.what());
    }
  });
}

void CompletionQueue::Run() {
  for (;;) {
    Entry entry;
    {
      // Waits for the next operation of this group (not for another
      // process: each operation's own wait is bounded by its timeout).
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    Finish(entry);
  }
}

void WithoutGil(const std::function<void()>& fn) {
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    fn();
    return;
  }
  PyThreadState* state = PyEval_SaveThread();
  try {
    fn();
  } catch (...) {
    PyEval_RestoreThread(state);
    throw;
  }
  PyEval_RestoreThread(state);
}

}  // namespace tandem::c10d_backend
