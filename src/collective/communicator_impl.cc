#include "collective/communicator_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "tandem/error.h"

namespace tandem::collective {

CommunicatorImpl::CommunicatorImpl(PeerMesh& mesh, uint32_t id, std::vector<int> members,
                                   CommunicatorSettings settings, base::Logger& log,
                                   base::OpRecorder& ops, base::Gauge& queued)
    : mesh_(mesh),
      id_(id),
      members_(std::move(members)),
      rank_(static_cast<int>(std::find(members_.begin(), members_.end(), mesh.rank()) -
                             members_.begin())),
      settings_(std::move(settings)),
      log_(log),
      ops_(ops),
      queued_(queued),
      call_state_(mesh.RegisterCommunicator(id, members_, settings_.epoch)),
      p2p_(mesh, id, members_, rank_, log) {
  if (rank_ >= size()) {
    throw InvalidArgument(
        fmt::format("worker {} is not a member of the group it creates", mesh.rank()));
  }
  thread_ = std::thread([this] { Loop(); });
}

CommunicatorImpl::~CommunicatorImpl() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CollectiveHandle CommunicatorImpl::Submit(std::string what, CallDescription call,
                                          std::chrono::milliseconds timeout, Body body) {
  auto state = std::make_shared<OpState>();
  state->waiting = &call_state_->user_waits;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Task{std::move(what), std::move(call),
                          timeout.count() > 0 ? timeout : settings_.timeout, std::move(body),
                          state});
  }
  queued_.Add(1);
  cv_.notify_all();
  return CollectiveHandle(state);
}

CollectiveHandle CommunicatorImpl::SendTo(std::string what, int peer, uint64_t tag,
                                          std::span<const std::byte> bytes,
                                          std::chrono::milliseconds timeout) {
  return CollectiveHandle(p2p_.Send(std::move(what), peer, tag, bytes,
                                    timeout.count() > 0 ? timeout : settings_.timeout));
}

CollectiveHandle CommunicatorImpl::ReceiveFrom(std::string what, int peer, uint64_t tag,
                                               std::span<std::byte> dest,
                                               std::chrono::milliseconds timeout) {
  return CollectiveHandle(p2p_.Receive(std::move(what), peer, tag, dest,
                                       timeout.count() > 0 ? timeout : settings_.timeout));
}

std::span<std::byte> CommunicatorImpl::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return {scratch_.data(), bytes};
}

std::span<std::byte> CommunicatorImpl::WireBuffer(size_t bytes) {
  if (wire_buffer_.size() < bytes) wire_buffer_.resize(bytes);
  return {wire_buffer_.data(), bytes};
}

void CommunicatorImpl::Run(std::string what, CallDescription call,
                           std::chrono::milliseconds timeout, Body body) {
  {
    std::unique_lock lock(mu_);
    if (busy_ || !queue_.empty()) {
      lock.unlock();
      Submit(std::move(what), std::move(call), timeout, std::move(body)).Wait();
      return;
    }
    busy_ = true;
  }
  // The caller is blocked in this communicator (the crossed-order check).
  call_state_->user_waits.fetch_add(1);
  std::exception_ptr error =
      Execute(what, call, timeout.count() > 0 ? timeout : settings_.timeout, body);
  call_state_->user_waits.fetch_sub(1);
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    busy_ = false;
    queued = !queue_.empty() || stopping_;
  }
  // Wake the communicator's thread only when it has work: a wake-up after
  // every operation run on the caller's thread cost the 2-core machine a
  // context switch per operation (docs/benchmarks.md, "The TCP path").
  if (queued) cv_.notify_all();
  if (error) std::rethrow_exception(error);
}

std::exception_ptr CommunicatorImpl::Execute(const std::string& what, const CallDescription& call,
                                             std::chrono::milliseconds timeout, const Body& body) {
  std::exception_ptr error;
  const auto start = std::chrono::steady_clock::now();
  try {
    OpContext ctx(mesh_, id_, sequence_++, members_, rank_, what, timeout, call, call_buffer_);
    ctx.CheckHealth();
    body(ctx, *this);
  } catch (...) {
    error = std::current_exception();
  }
  if (!error) {
    // "AllReduce of 'grad' (...)" -> op="allreduce" (docs/metrics.md).
    std::string op = what.substr(0, what.find(' '));
    std::transform(op.begin(), op.end(), op.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::map<std::string, std::string> args;
    if (ops_.tracing()) args = {{"what", what}, {"communicator", std::to_string(id_)}};
    ops_.Record(op, start, std::chrono::steady_clock::now(), args);
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      log_.V1("{}", e.what());
    }
  }
  return error;
}

void CommunicatorImpl::Loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.Add(-1);
      busy_ = true;
    }
    std::exception_ptr error = Execute(task.what, task.call, task.timeout, task.body);
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
    {
      std::lock_guard lock(task.state->mu);
      task.state->done = true;
      task.state->error = error;
    }
    task.state->cv.notify_all();
  }
}

}  // namespace tandem::collective
