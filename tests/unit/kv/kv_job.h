// A parameter-server job inside one test process: TestJob's scheduler,
// servers and workers, with a KvServer on every server node and a
// DistKVStore on every worker, run as threads over the in-process transport.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/dist_kvstore.h"
#include "kv/kv_client.h"
#include "kv/kv_server.h"
#include "kv/optimizer/optimizer.h"
#include "support/inproc_job.h"
#include "tandem/error.h"

namespace tandem::testing {

// A plain SGD for these tests only (w -= learning_rate * g on float32 and
// float64), so that the server's update path is tested on its own; the
// real optimizers are tested in tests/unit/kv/optimizer*.
class TestSgd final : public kv::Optimizer {
 public:
  // `log`, when set, records the key of every update in order.
  struct UpdateLog {
    std::mutex mu;
    std::vector<uint64_t> keys;
    int64_t slow_key = -1;  // its updates take 100 ms longer
  };
  explicit TestSgd(double lr, std::shared_ptr<UpdateLog> log = nullptr)
      : lr_(lr), log_(std::move(log)) {}
  const std::string& name() const override { return name_; }
  void Update(uint64_t key, const TensorView& w, const TensorView& g) override {
    if (w.dtype != g.dtype || w.num_elements() != g.num_elements()) {
      throw InvalidArgument(fmt::format("key {}: test sgd got mismatched tensors", key));
    }
    const auto n = static_cast<size_t>(w.num_elements());
    if (w.dtype == DType::kF32) {
      for (size_t i = 0; i < n; ++i)
        static_cast<float*>(w.data)[i] -=
            static_cast<float>(lr_) * static_cast<const float*>(g.data)[i];
    } else if (w.dtype == DType::kF64) {
      for (size_t i = 0; i < n; ++i)
        static_cast<double*>(w.data)[i] -= lr_ * static_cast<const double*>(g.data)[i];
    } else {
      throw InvalidArgument(fmt::format("key {}: test sgd takes float32 and float64", key));
    }
    {
      std::lock_guard lock(mu_);
      ++updates_[key];
    }
    if (log_ && static_cast<int64_t>(key) == log_->slow_key) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (log_) {
      std::lock_guard lock(log_->mu);
      log_->keys.push_back(key);
    }
  }
  // Lazy: only the given rows change.
  void UpdateRows(uint64_t key, const TensorView& w, std::span<const int64_t> rows,
                  const TensorView& g) override {
    if (w.shape.size() != 2 || g.shape.size() != 2 || w.dtype != DType::kF32 ||
        g.dtype != DType::kF32 || g.shape[0] != static_cast<int64_t>(rows.size())) {
      throw InvalidArgument(fmt::format("key {}: test sgd rows got mismatched tensors", key));
    }
    const auto len = static_cast<size_t>(w.shape[1]);
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t c = 0; c < len; ++c) {
        static_cast<float*>(w.data)[static_cast<size_t>(rows[i]) * len + c] -=
            static_cast<float>(lr_) * static_cast<const float*>(g.data)[i * len + c];
      }
    }
    std::lock_guard lock(mu_);
    ++updates_[key];
  }
  std::string SaveStates() const override {
    std::lock_guard lock(mu_);
    std::string s = "testsgd";
    for (auto [k, n] : updates_) s += fmt::format(" {}:{}", k, n);
    return s;
  }
  void LoadStates(std::string_view bytes) override {
    if (!bytes.starts_with("testsgd")) throw InvalidArgument("not test sgd states");
    std::lock_guard lock(mu_);
    updates_.clear();
    std::istringstream in{std::string(bytes.substr(7))};
    std::string item;
    while (in >> item) {
      auto colon = item.find(':');
      updates_[std::stoull(item.substr(0, colon))] = std::stoi(item.substr(colon + 1));
    }
  }
  int updates(uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = updates_.find(key);
    return it == updates_.end() ? 0 : it->second;
  }

 private:
  const std::string name_ = "sgd";
  const double lr_;
  std::shared_ptr<UpdateLog> log_;
  mutable std::mutex mu_;
  std::map<uint64_t, int> updates_;
};

inline kv::OptimizerFactory TestSgdFactory(
    std::shared_ptr<TestSgd::UpdateLog> update_log = nullptr) {
  return [update_log](const std::string& name,
                      const kv::OptimizerParams& p) -> std::unique_ptr<kv::Optimizer> {
    if (name != "sgd") throw InvalidArgument(fmt::format("unknown optimizer '{}'", name));
    double lr = 0.1;
    for (const auto& [k, v] : p) {
      if (k == "learning_rate") {
        lr = std::stod(v);
      } else {
        throw InvalidArgument(fmt::format("unknown parameter '{}'", k));
      }
    }
    return std::make_unique<TestSgd>(lr, update_log);
  };
}

struct KvJobOptions {
  int servers = 1;
  int workers = 2;
  int server_threads = 2;
  uint64_t big_array_bound = kv::kDefaultBigArrayBound;
  uint64_t inflight_bytes = uint64_t{64} << 20;         // each worker's KvClient
  uint64_t server_inflight_bytes = uint64_t{64} << 20;  // each server's RequestWindow
  std::shared_ptr<TestSgd::UpdateLog> update_log;       // the servers' updates, in order
  kv::OptimizerFactory optimizer_factory;               // the servers' optimizers; unset: TestSgd
  Timings timings{};
  std::map<std::string, std::string> env;  // further variables for every node
};

class KvJob {
 public:
  explicit KvJob(KvJobOptions o) : o_(o), job_(o.servers, o.workers, o.timings, nullptr, o.env) {
    job_.AddAll();
    for (int i = 0; i < o.servers; ++i) {
      kv::KvServer::Options so;
      so.threads = o.server_threads;
      so.optimizer_factory =
          o.optimizer_factory ? o.optimizer_factory : TestSgdFactory(o.update_log);
      so.inflight_bytes = o.server_inflight_bytes;
      servers_.push_back(
          std::make_unique<kv::KvServer>(job_.node(static_cast<size_t>(i)).services(), so));
    }
    for (int i = 0; i < o.workers; ++i) {
      kv::KvClient::Options co;
      co.inflight_bytes = o.inflight_bytes;
      co.timeout = std::chrono::seconds(20);
      clients_.push_back(std::make_unique<kv::KvClient>(
          job_.node(static_cast<size_t>(o.servers + i)).services(), co));
    }
  }

  // Transports stop before the services their callbacks reach.
  ~KvJob() {
    for (int i = 0; i < o_.servers + o_.workers; ++i)
      job_.node(static_cast<size_t>(i)).transport->Shutdown();
    job_.scheduler().transport->Shutdown();
    // The servers' shard threads stop while the nodes' metrics they count
    // in still exist; the memberships stop their heartbeats (the nodes go)
    // before the clients and servers they report failures to.
    for (auto& server : servers_) server->Stop();
    job_.Clear();
    clients_.clear();
    servers_.clear();
  }

  // Runs `worker(store, rank)` on every worker (the store is a `type`
  // DistKVStore) while the servers serve; returns each node's error
  // (nullptr when fine), servers first, then workers, scheduler last.
  std::vector<std::exception_ptr> Run(
      const std::string& type, const std::function<void(KVStore&, int)>& worker,
      const std::function<void(Membership&)>& server_extra = nullptr) {
    return job_.RunAll([&](Membership& m) {
      const int index = IndexOf(m);
      if (index < 0) {  // the scheduler
        m.Finalize();
        return;
      }
      if (index < o_.servers) {
        servers_[static_cast<size_t>(index)]->Start();
        if (server_extra) server_extra(m);
        m.Finalize();
        return;
      }
      kv::KvClient& client = *clients_[static_cast<size_t>(index - o_.servers)];
      client.Start();
      kv::StoreSettings settings;
      settings.big_array_bound = o_.big_array_bound;
      std::exception_ptr error;
      try {
        kv::DistKVStore store(type, client, settings);
        worker(store, m.self().rank);
      } catch (...) {
        error = std::current_exception();
      }
      // A failed worker still leaves in order, so the others are not stuck.
      if (error) {
        try {
          m.Finalize();
        } catch (...) {
        }
        std::rethrow_exception(error);
      }
      m.Finalize();
    });
  }

  TestNode& node(size_t i) { return job_.node(i); }
  TestJob& job() { return job_; }
  kv::KvClient& client(int worker) { return *clients_[static_cast<size_t>(worker)]; }

 private:
  int IndexOf(Membership& m) {
    for (int i = 0; i < o_.servers + o_.workers; ++i) {
      if (job_.node(static_cast<size_t>(i)).membership == &m) return i;
    }
    return -1;
  }

  KvJobOptions o_;
  TestJob job_;
  std::vector<std::unique_ptr<kv::KvServer>> servers_;
  std::vector<std::unique_ptr<kv::KvClient>> clients_;
};

inline void ExpectNoErrors(const std::vector<std::exception_ptr>& errors) {
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i]) ADD_FAILURE() << "node " << i << ": " << What(errors[i]);
  }
}

}  // namespace tandem::testing
