// The distributed store's side of the checkpoint protocol (docs/checkpoints.md,
// "Protocol": SaveCheckpoint, LoadCheckpoint and the steps they share) and of
// saving and loading the servers' optimizer states. DistKVStore member
// definitions; the data path is in dist_kvstore.cc.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>

#include "base/byte_io.h"
#include "cluster/node_services.h"
#include "kv/checkpoint_directory.h"
#include "kv/dist_kvstore.h"
#include "tandem/error.h"

namespace tandem::kv {

namespace {

// A store checkpoint holds one file per worker rank of the job as it started
// (docs/checkpoints.md); after a worker left an elastic job that set is gone.
void RequireStartingWorkers(const cluster::Membership& membership, const char* what) {
  if (const uint32_t epoch = membership.epoch(); epoch > 0) {
    throw InvalidArgument(fmt::format(
        "{}: {} of this elastic job's {} workers left (membership epoch {}); a store checkpoint "
        "needs every worker the job started with (docs/elastic.md)",
        what, membership.table().num_workers - membership.num_workers(),
        membership.table().num_workers, epoch));
  }
}

}  // namespace

void DistKVStore::SaveOptimizerStates(const std::string& path) {
  FirstWorkerThenBarrier(fmt::format("save of optimizer states to {}", path), [&] {
    // Every server writes its own shard next to the others: <path>.server<rank>.
    auto op = std::make_shared<KvOperation>(fmt::format("save of optimizer states to {}", path),
                                            client_.timeout());
    std::vector<ClientRequest> requests;
    for (int s = 0; s < client_.num_servers(); ++s) {
      ClientRequest r;
      r.server = s;
      r.type = kvmsg::kSaveOptimizerStates;
      r.key = UINT64_MAX;
      r.meta = StatesCommand{fmt::format("{}.server{}", path, s)}.Encode();
      requests.push_back(std::move(r));
    }
    client_.Submit(op, std::move(requests));
    op->Wait();
  });
}

void DistKVStore::LoadOptimizerStates(const std::string& path) {
  FirstWorkerThenBarrier(fmt::format("load of optimizer states from {}", path), [&] {
    auto op = std::make_shared<KvOperation>(fmt::format("load of optimizer states from {}", path),
                                            client_.timeout());
    std::vector<ClientRequest> requests;
    for (int s = 0; s < client_.num_servers(); ++s) {
      ClientRequest r;
      r.server = s;
      r.type = kvmsg::kLoadOptimizerStates;
      r.key = UINT64_MAX;
      r.meta = StatesCommand{fmt::format("{}.server{}", path, s)}.Encode();
      requests.push_back(std::move(r));
    }
    client_.Submit(op, std::move(requests));
    op->Wait();
  });
}

uint64_t DistKVStore::CurrentRound() {
  std::lock_guard lock(mu_);
  uint64_t most = 0;
  keys_.ForEach([&](KeyInfo& info) { most = std::max(most, info.pushes); });
  return round_base_ + most;
}

void DistKVStore::CheckpointCommandToServers(CheckpointCommand::Phase phase, const std::string& dir,
                                             uint64_t round) {
  CheckpointCommand cmd;
  cmd.phase = phase;
  cmd.dir = dir;
  cmd.round = round;
  static constexpr const char* kPhase[] = {"save", "stage", "commit", "discard"};
  Broadcast(
      kvmsg::kCheckpoint, cmd.Encode(),
      fmt::format("checkpoint {} of round {} in {}", kPhase[static_cast<int>(phase)], round, dir));
}

void DistKVStore::ReportOutcome(bool found, uint64_t round, const std::exception_ptr& error) {
  CheckpointOutcome o;
  o.found = found;
  o.round = round;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      o.error = e.what();
    } catch (...) {
      o.error = "unknown error";
    }
  }
  try {
    auto op = std::make_shared<KvOperation>("checkpoint outcome to server 0", client_.timeout());
    ClientRequest r;
    r.server = 0;
    r.type = kvmsg::kCheckpointOutcome;
    r.key = UINT64_MAX;
    r.meta = o.Encode();
    std::vector<ClientRequest> requests;
    requests.push_back(std::move(r));
    client_.Submit(op, std::move(requests));
    op->Wait();
  } catch (const std::exception& e) {
    client_.services().log.Error("checkpoint: could not tell server 0 the outcome: {}", e.what());
  }
}

std::pair<bool, uint64_t> DistKVStore::QueryOutcome() {
  std::array<std::byte, CheckpointOutcome::kReplyBytes> reply{};
  auto op =
      std::make_shared<KvOperation>("checkpoint outcome query to server 0", client_.timeout());
  ClientRequest r;
  r.server = 0;
  r.type = kvmsg::kCheckpointQuery;
  r.key = UINT64_MAX;
  r.destination = reply;
  std::vector<ClientRequest> requests;
  requests.push_back(std::move(r));
  client_.Submit(op, std::move(requests));
  op->Wait();
  base::ByteReader in(std::span<const std::byte>(reply), "checkpoint outcome reply");
  const bool found = in.Get<bool>("found");
  in.GetBytes(7, "padding");
  return {found, in.Get<uint64_t>("round")};
}

void DistKVStore::WriteOwnCheckpoint(const std::string& dir, uint64_t round,
                                     std::string_view user_state) {
  WorkerCheckpoint c;
  c.header.kind = CheckpointKind::kWorker;
  c.header.round = round;
  c.header.rank = static_cast<uint32_t>(client_.rank());
  c.header.ranks = static_cast<uint32_t>(client_.num_workers());
  c.user_state = std::string(user_state);
  {
    std::lock_guard lock(mu_);
    keys_.ForEach([&](KeyInfo& info) {
      if (!info.residual.empty()) c.residuals.push_back({info.id, info.residual});
    });
  }
  std::sort(c.residuals.begin(), c.residuals.end(),
            [](const SavedResidual& a, const SavedResidual& b) { return a.key < b.key; });
  WriteFileDurably(CheckpointRoundDir(dir, round) + "/" + WorkerCheckpointName(c.header.rank),
                   EncodeWorkerCheckpoint(c));
}

WorkerCheckpoint DistKVStore::ReadOwnCheckpoint(const std::string& dir, uint64_t round) {
  const auto rank = static_cast<uint32_t>(client_.rank());
  const auto workers = static_cast<uint32_t>(client_.num_workers());
  const std::string path = CheckpointRoundDir(dir, round) + "/" + WorkerCheckpointName(rank);
  WorkerCheckpoint c = DecodeWorkerCheckpoint(ReadCheckpointFile(path), path);
  if (c.header.round != round || c.header.rank != rank || c.header.ranks != workers) {
    throw InvalidArgument(fmt::format(
        "checkpoint file {}: header says round {} worker {} of {}, expected round {} worker {} of "
        "{} (a checkpoint loads only into a job of as many workers as saved it)",
        path, c.header.round, c.header.rank, c.header.ranks, round, rank, workers));
  }
  std::lock_guard lock(mu_);
  // Every residual must belong to a compressed key of this worker, of its size.
  for (const SavedResidual& s : c.residuals) {
    const KeyInfo* info = keys_.FindById(s.key);
    if (info == nullptr || info->residual.size() != s.values.size()) {
      throw InvalidArgument(fmt::format(
          "checkpoint file {}: holds a compression residual of {} floats for key number {}, "
          "this worker has {}",
          path, s.values.size(), s.key,
          info ? fmt::format("{} floats for it", info->residual.size())
               : std::string("no such key (Init every key, and set the same compression, "
                             "before LoadCheckpoint)")));
    }
  }
  return c;
}

KVCheckpoint DistKVStore::ApplyOwnCheckpoint(WorkerCheckpoint c) {
  const uint64_t round = c.header.round;
  std::lock_guard lock(mu_);
  keys_.ForEach([&](KeyInfo& info) {
    std::fill(info.residual.begin(), info.residual.end(), 0.0f);
    info.pushes = 0;
  });
  for (SavedResidual& s : c.residuals) keys_.FindById(s.key)->residual = std::move(s.values);
  round_base_ = round;
  return KVCheckpoint{round, std::move(c.user_state)};
}

uint64_t DistKVStore::SaveCheckpoint(const std::string& dir, std::string_view user_state) {
  if (dir.empty()) throw InvalidArgument("SaveCheckpoint: empty checkpoint directory");
  auto& membership = client_.services().membership;
  RequireStartingWorkers(membership, "SaveCheckpoint");
  const uint64_t round = CurrentRound();
  membership.Barrier(group::kWorkers);  // every worker's pushes are done
  std::exception_ptr error;             // worker 0's part
  if (client_.rank() == 0) {
    try {
      // A round saved again: it stops counting before any file changes.
      const std::string manifest = CheckpointRoundDir(dir, round) + "/" + kManifestName;
      if (std::remove(manifest.c_str()) == 0) {
        client_.services().log.Info("checkpoint: replacing the complete round {} in {}", round,
                                    dir);
      }
      CheckpointCommandToServers(CheckpointCommand::Phase::kSave, dir, round);
    } catch (const PeerLost&) {
      throw;
    } catch (...) {
      error = std::current_exception();
    }
  }
  membership.Barrier(group::kWorkers);  // the servers' files are durable
  std::exception_ptr own;
  try {
    WriteOwnCheckpoint(dir, round, user_state);
  } catch (...) {
    own = std::current_exception();
  }
  membership.Barrier(group::kWorkers);  // every worker's file is durable
  if (client_.rank() == 0) {
    if (!error) {
      try {
        WriteCheckpointManifest(dir, round, static_cast<uint32_t>(client_.num_servers()),
                                static_cast<uint32_t>(client_.num_workers()));
        const auto removed = PruneCheckpointRounds(dir, 2);
        client_.services().log.V1("checkpoint: round {} complete in {}{}", round, dir,
                                  removed.empty()
                                      ? std::string()
                                      : fmt::format(" (removed {} older rounds)", removed.size()));
      } catch (...) {
        error = std::current_exception();
      }
    }
    ReportOutcome(!error, round, error);
  }
  membership.Barrier(group::kWorkers);  // the outcome is on server 0
  if (error) std::rethrow_exception(error);
  if (own) std::rethrow_exception(own);
  if (client_.rank() != 0) QueryOutcome();  // throws worker 0's failure
  return round;
}

std::optional<KVCheckpoint> DistKVStore::LoadCheckpoint(const std::string& dir) {
  if (dir.empty()) throw InvalidArgument("LoadCheckpoint: empty checkpoint directory");
  auto& membership = client_.services().membership;
  RequireStartingWorkers(membership, "LoadCheckpoint");
  membership.Barrier(group::kWorkers);  // nobody pushes while the values change
  if (client_.rank() != 0) {
    membership.Barrier(group::kWorkers);  // worker 0 chose, verified and loaded
    const auto [found, round] = QueryOutcome();
    if (!found) return std::nullopt;
    return ApplyOwnCheckpoint(ReadOwnCheckpoint(dir, round));
  }
  std::exception_ptr error;
  std::optional<KVCheckpoint> result;
  std::optional<uint64_t> round;
  try {
    const auto manifest = FindNewestConsistentRound(dir, [&](uint64_t r, const std::string& why) {
      client_.services().log.Error("checkpoint: refused round {} of {}: {}; trying an older round",
                                   r, dir, why);
    });
    if (manifest) {
      round = manifest->header.round;
      if (manifest->num_servers != static_cast<uint32_t>(client_.num_servers()) ||
          manifest->num_workers != static_cast<uint32_t>(client_.num_workers())) {
        throw InvalidArgument(fmt::format(
            "checkpoint round {} of {} was written by a job of {} servers and {} workers; this job "
            "has {} servers and {} workers",
            *round, dir, manifest->num_servers, manifest->num_workers, client_.num_servers(),
            client_.num_workers()));
      }
      // This worker's own file first: nothing is staged unless it fits.
      WorkerCheckpoint own = ReadOwnCheckpoint(dir, *round);
      try {
        CheckpointCommandToServers(CheckpointCommand::Phase::kStage, dir, *round);
      } catch (const PeerLost&) {
        throw;
      } catch (...) {
        try {
          CheckpointCommandToServers(CheckpointCommand::Phase::kDiscard, dir, *round);
        } catch (const std::exception& e) {
          client_.services().log.Error("checkpoint: discard after a failed stage: {}", e.what());
        }
        throw;
      }
      CheckpointCommandToServers(CheckpointCommand::Phase::kCommit, dir, *round);
      result = ApplyOwnCheckpoint(std::move(own));
      client_.services().log.Info("checkpoint: loaded round {} of {}", *round, dir);
    }
  } catch (const PeerLost&) {
    throw;
  } catch (...) {
    error = std::current_exception();
  }
  ReportOutcome(result.has_value(), round.value_or(0), error);
  membership.Barrier(group::kWorkers);
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace tandem::kv
