// tandem::elastic: the states of include/tandem/elastic.h and Run over a
// Collectives (the loop itself is collective/elastic_run.cc).
#include "tandem/elastic.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "collective/elastic_run.h"
#include "tandem/error.h"

namespace tandem::elastic {

void State::RegisterResetCallback(std::function<void()> callback) {
  if (!callback) throw InvalidArgument("RegisterResetCallback: an empty function");
  reset_callbacks_.push_back(std::move(callback));
}

void State::Commit() {
  Save();
  if (commit_check_) commit_check_();
}

void State::OnReset() {
  for (const auto& callback : reset_callbacks_) callback();
}

void TensorState::AddTensor(const std::string& name, const TensorView& view) {
  if (name.empty()) throw InvalidArgument("TensorState::AddTensor: an empty name");
  for (const Entry& e : tensors_) {
    if (e.name == name) {
      throw InvalidArgument(fmt::format("TensorState::AddTensor: '{}' was added already", name));
    }
  }
  if (view.num_elements() < 0) {
    throw InvalidArgument(
        fmt::format("TensorState::AddTensor: '{}' has a negative dimension", name));
  }
  if (view.data == nullptr && view.num_bytes() > 0) {
    throw InvalidArgument(fmt::format("TensorState::AddTensor: '{}' has {} elements but no data",
                                      name, view.num_elements()));
  }
  Entry e{name, view, std::vector<std::byte>(view.num_bytes())};
  if (!e.saved.empty()) std::memcpy(e.saved.data(), view.data, e.saved.size());
  tensors_.push_back(std::move(e));
}

int64_t& TensorState::AddCounter(const std::string& name, int64_t initial) {
  if (name.empty()) throw InvalidArgument("TensorState::AddCounter: an empty name");
  auto [it, added] = counters_.emplace(name, initial);
  if (!added) {
    throw InvalidArgument(fmt::format("TensorState::AddCounter: '{}' was added already", name));
  }
  saved_counters_[name] = initial;
  return it->second;
}

int64_t& TensorState::counter(const std::string& name) {
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    throw InvalidArgument(fmt::format("TensorState: no counter '{}' (AddCounter adds one)", name));
  }
  return it->second;
}

void TensorState::Save() {
  for (Entry& e : tensors_) {
    if (!e.saved.empty()) std::memcpy(e.saved.data(), e.view.data, e.saved.size());
  }
  saved_counters_ = counters_;
}

void TensorState::Restore() {
  for (const Entry& e : tensors_) {
    if (!e.saved.empty()) std::memcpy(e.view.data, e.saved.data(), e.saved.size());
  }
  // In place: the references AddCounter returned stay valid.
  for (auto& [name, value] : counters_) value = saved_counters_.at(name);
}

void TensorState::Sync(Communicator& world) {
  for (Entry& e : tensors_) world.Broadcast(e.view, 0, {"elastic state " + e.name, {}});
  std::vector<int64_t> values;
  for (const auto& [name, value] : counters_) values.push_back(value);
  if (!values.empty()) {
    TensorView v{values.data(), DType::kI64, {static_cast<int64_t>(values.size())}};
    world.Broadcast(v, 0, {"elastic state counters", {}});
    size_t i = 0;
    for (auto& [name, value] : counters_) value = values[i++];
  }
  Save();
}

void Run(Collectives& collectives, State& state, const std::function<void()>& train) {
  collective::RunElastic(
      state, [&]() -> Communicator& { return collectives.world(); },
      [&] { return collectives.Regroup(); }, train, [&] { collectives.CheckJoins(); });
}

}  // namespace tandem::elastic
