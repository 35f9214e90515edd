#include "kv/optimizer/key_state_store.h"

#include <algorithm>
#include <mutex>

namespace tandem::kv {

KeyState* KeyStateStore::Find(uint64_t key) const {
  std::shared_lock lock(mu_);
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second.get();
}

std::pair<KeyState*, bool> KeyStateStore::FindOrInsert(
    uint64_t key, const std::function<std::unique_ptr<KeyState>()>& make) {
  if (KeyState* found = Find(key)) return {found, false};
  // Build outside the lock: a new key's buffers may be large.
  std::unique_ptr<KeyState> fresh = make();
  std::unique_lock lock(mu_);
  auto [it, inserted] = states_.try_emplace(key, std::move(fresh));
  return {it->second.get(), inserted};
}

void KeyStateStore::Replace(std::map<uint64_t, std::unique_ptr<KeyState>> states) {
  std::unordered_map<uint64_t, std::unique_ptr<KeyState>> fresh;
  for (auto& [key, state] : states) fresh.emplace(key, std::move(state));
  std::unique_lock lock(mu_);
  states_.swap(fresh);
}

void KeyStateStore::ForEach(const std::function<void(uint64_t, const KeyState&)>& f) const {
  std::shared_lock lock(mu_);
  std::vector<uint64_t> keys;
  keys.reserve(states_.size());
  for (const auto& [key, state] : states_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (uint64_t key : keys) f(key, *states_.at(key));
}

size_t KeyStateStore::size() const {
  std::shared_lock lock(mu_);
  return states_.size();
}

}  // namespace tandem::kv
