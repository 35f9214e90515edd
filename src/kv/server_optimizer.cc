// The server's optimizer holder.
#include "kv/server_optimizer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "kv/checkpoint_directory.h"
#include "tandem/error.h"

namespace tandem::kv {

void ServerOptimizer::Set(const std::string& name, const OptimizerParams& params) {
  if (!factory_) throw InvalidArgument("this server was built without optimizers");
  auto fresh = factory_(name, params);  // may throw: the old one stays
  std::unique_lock lock(mu_);
  optimizer_ = std::move(fresh);
  params_ = params;
}

bool ServerOptimizer::active() const {
  std::shared_lock lock(mu_);
  return optimizer_ != nullptr;
}

void ServerOptimizer::Update(uint64_t key, const TensorView& weight, const TensorView& grad) {
  std::shared_lock lock(mu_);
  if (!optimizer_) throw InvalidArgument(fmt::format("key {}: no optimizer is set", key));
  optimizer_->Update(key, weight, grad);
}

void ServerOptimizer::UpdateRows(uint64_t key, const TensorView& weight,
                                 std::span<const int64_t> rows, const TensorView& grad) {
  std::shared_lock lock(mu_);
  if (!optimizer_) throw InvalidArgument(fmt::format("key {}: no optimizer is set", key));
  optimizer_->UpdateRows(key, weight, rows, grad);
}

void ServerOptimizer::Save(const std::string& path) const {
  std::string bytes;
  {
    std::unique_lock lock(mu_);
    if (!optimizer_) {
      throw InvalidArgument("cannot save optimizer states: no optimizer is set on the servers");
    }
    bytes = optimizer_->SaveStates();
  }
  WriteFileDurably(path, bytes);
}

void ServerOptimizer::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("open {}: {}", path, std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::unique_lock lock(mu_);
  if (!optimizer_) {
    throw InvalidArgument("cannot load optimizer states: no optimizer is set on the servers");
  }
  try {
    optimizer_->LoadStates(bytes);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("optimizer states file {}: {}", path, e.what()));
  } catch (const ProtocolError& e) {
    throw ProtocolError(fmt::format("optimizer states file {}: {}", path, e.what()));
  }
}

std::optional<std::pair<std::string, std::string>> ServerOptimizer::Snapshot() const {
  std::unique_lock lock(mu_);
  if (!optimizer_) return std::nullopt;
  return std::make_pair(optimizer_->name(), optimizer_->SaveStates());
}

std::unique_ptr<Optimizer> ServerOptimizer::LoadedCopy(const std::string& name,
                                                       std::string_view states) const {
  std::string current;
  OptimizerParams params;
  {
    std::shared_lock lock(mu_);
    if (!optimizer_) {
      throw InvalidArgument(fmt::format(
          "the checkpoint holds the states of optimizer '{}', but no optimizer is set on this "
          "server: call SetOptimizer before LoadCheckpoint",
          name));
    }
    current = optimizer_->name();
    params = params_;
  }
  if (current != name) {
    throw InvalidArgument(fmt::format(
        "the checkpoint holds the states of optimizer '{}', this server runs '{}'", name, current));
  }
  auto fresh = factory_(current, params);
  fresh->LoadStates(states);
  return fresh;
}

void ServerOptimizer::Replace(std::unique_ptr<Optimizer> loaded) {
  std::unique_lock lock(mu_);
  optimizer_ = std::move(loaded);
}

}  // namespace tandem::kv
