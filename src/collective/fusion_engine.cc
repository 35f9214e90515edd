// tandem::FusionEngine and its engine thread (fusion_engine.h describes a
// cycle; docs/collectives.md, "Framework engine", the semantics).
#include "collective/fusion_engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "base/dtype.h"
#include "base/environment.h"
#include "collective/communicator_impl.h"
#include "tandem/error.h"

namespace tandem {
namespace collective {

namespace {

// The cycle's pace is real time; stall ages come from the engine's clock_.
using RealClock = std::chrono::steady_clock;

// One rank's slot of the first exchange: u32 length, then the message's
// first kSlot - 4 bytes.
constexpr size_t kSlot = 256;
constexpr size_t kInline = kSlot - 4;

void CompleteState(const std::shared_ptr<OpState>& state, std::exception_ptr error) {
  {
    std::lock_guard lock(state->mu);
    state->done = true;
    state->error = error;
  }
  state->cv.notify_all();
}

std::string Ranks(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

// The order every rank executes ready requests in: compatible allreduces
// side by side (so that they fuse), then by name.
std::tuple<RequestKind, DType, Reduction, double, double, AllReduceAlgorithm, const std::string&>
OrderKey(const TensorRequest& d) {
  return {d.kind, d.dtype, d.op, d.prescale, d.postscale, d.algorithm, d.name};
}

bool Fusable(const TensorRequest& a, const TensorRequest& b) {
  return a.kind == RequestKind::kAllReduce && b.kind == RequestKind::kAllReduce &&
         a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.algorithm == b.algorithm;
}

}  // namespace

FusionEngineImpl::FusionEngineImpl(std::unique_ptr<Communicator> comm,
                                   FusionEngine::Options options, const base::Clock* clock)
    : comm_(std::move(comm)),
      options_(options),
      log_(comm_->impl_->log()),
      rank_(comm_->rank()),
      size_(comm_->size()),
      clock_(clock != nullptr ? *clock : steady_clock_),
      in_force_{options_.fusion_threshold, options_.cycle_time, AllReduceAlgorithm::kAuto},
      cache_capacity_in_force_(options_.cache_capacity) {
  // What every cycle message must carry within the decoder's limits.
  if (options_.fusion_threshold > CycleMessage::kMaxFusionThreshold ||
      options_.cycle_time.count() < 0 ||
      options_.cycle_time.count() > CycleMessage::kMaxCycleTimeUs ||
      options_.cache_capacity > CycleMessage::kMaxCacheBits) {
    throw InvalidArgument(fmt::format(
        "FusionEngine options out of range: fusion threshold {} (at most {}), cycle time {} us "
        "(0..{}), cache capacity {} (at most {})",
        options_.fusion_threshold, CycleMessage::kMaxFusionThreshold, options_.cycle_time.count(),
        CycleMessage::kMaxCycleTimeUs, options_.cache_capacity, CycleMessage::kMaxCacheBits));
  }
  if (options_.autotune && rank_ == 0) {
    AutotuneConfig config;
    config.warmup_samples = options_.autotune_warmup_samples;
    config.steps_per_sample = options_.autotune_steps_per_sample;
    config.max_samples = options_.autotune_max_samples;
    config.min_gain = options_.autotune_min_gain;
    config.log_path = options_.autotune_log;
    config.result_path = options_.autotune_result;
    std::vector<AllReduceAlgorithm> algorithms = {AllReduceAlgorithm::kRing,
                                                  AllReduceAlgorithm::kHalvingDoubling};
    // Across hosts of equal size the hierarchical allreduce is a candidate.
    if (comm_->impl_->settings().layout.Spread().FitsHierarchical()) {
      algorithms.push_back(AllReduceAlgorithm::kHierarchical);
    }
    tuner_ = std::make_unique<EngineAutotuner>(OwnSettings(), config, std::move(algorithms), log_);
  }
  thread_ = std::thread([this] { Loop(); });
}

std::unique_ptr<FusionEngine> FusionEngineImpl::MakeEngine(std::unique_ptr<Communicator> comm,
                                                           FusionEngine::Options options,
                                                           const base::Clock& clock) {
  if (!comm) throw InvalidArgument("FusionEngine needs a communicator, got null");
  return std::unique_ptr<FusionEngine>(
      new FusionEngine(std::make_unique<FusionEngineImpl>(std::move(comm), options, &clock)));
}

int64_t FusionEngineImpl::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now().time_since_epoch())
      .count();
}

FusionEngineImpl::~FusionEngineImpl() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CollectiveHandle FusionEngineImpl::Submit(TensorRequest request, const TensorView& in,
                                          const TensorView& out,
                                          std::chrono::milliseconds timeout) {
  auto p = std::make_shared<Pending>();
  p->in = in;
  p->out = out;
  p->timeout = timeout;
  p->state = std::make_shared<OpState>();
  p->desc = std::move(request);
  std::lock_guard lock(mu_);
  if (broken_) {
    CompleteState(p->state, broken_);
    return CollectiveHandle(p->state);
  }
  if (stopping_) {
    throw InvalidArgument(fmt::format(
        "framework engine: '{}' submitted while the engine is being destroyed", p->desc.name));
  }
  if (!names_.insert(p->desc.name).second) {
    throw InvalidArgument(fmt::format(
        "framework engine: a request named '{}' is already pending on rank {}; wait for it "
        "before submitting the name again",
        p->desc.name, rank_));
  }
  incoming_.push_back(p);
  return CollectiveHandle(p->state);
}

FusionEngine::Stats FusionEngineImpl::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void FusionEngineImpl::Complete(const std::shared_ptr<Pending>& p, std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    names_.erase(p->desc.name);
  }
  CompleteState(p->state, error);
}

void FusionEngineImpl::Succeed(const std::shared_ptr<Pending>& p) {
  if (tuner_) {
    succeeded_.push_back(p->desc.name);
    succeeded_bytes_ += p->in.num_bytes();
  }
  Complete(p, nullptr);
}

EngineSettings FusionEngineImpl::OwnSettings() const {
  if (tuner_) return tuner_->settings();
  return {options_.fusion_threshold, options_.cycle_time, AllReduceAlgorithm::kAuto};
}

void FusionEngineImpl::Loop() {
  std::exception_ptr failure;
  bool announced = false;
  auto next = RealClock::now();
  for (;;) {
    // Rank 0's cycle time, as the last exchange carried it.
    next += in_force_.cycle_time;
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next, [&] { return stopping_ && !announced; });
      stopping = stopping_;
      for (auto& p : incoming_) pending_[p->desc.name] = std::move(p);
      incoming_.clear();
    }
    // A cycle that overran does not make the next ones run back to back.
    if (const auto now = RealClock::now(); next < now) next = now;
    announced = stopping;
    try {
      if (Cycle(stopping)) break;
    } catch (...) {
      failure = std::current_exception();
      log_.Error("framework engine: negotiation failed; every pending and later request fails: {}",
                 [&] {
                   try {
                     std::rethrow_exception(failure);
                   } catch (const std::exception& e) {
                     return std::string(e.what());
                   }
                 }());
      break;
    }
  }
  std::vector<std::shared_ptr<Pending>> left;
  {
    std::lock_guard lock(mu_);
    if (failure) broken_ = failure;
    stopping_ = true;
    for (auto& p : incoming_) left.push_back(std::move(p));
    incoming_.clear();
  }
  for (auto& [name, p] : pending_) left.push_back(p);
  pending_.clear();
  for (auto& p : left) {
    Complete(p, failure ? failure
                        : std::make_exception_ptr(Error(fmt::format(
                              "framework engine: '{}' ({}) never ran: the engines stopped before "
                              "every rank submitted it",
                              p->desc.name, p->desc.Describe()))));
  }
}

std::vector<CycleMessage> FusionEngineImpl::Exchange(const CycleMessage& mine) {
  const std::string bytes = mine.Encode();
  std::vector<std::byte> slot(kSlot);
  const auto length = static_cast<uint32_t>(bytes.size());
  std::memcpy(slot.data(), &length, 4);
  std::memcpy(slot.data() + 4, bytes.data(), std::min(bytes.size(), kInline));
  std::vector<std::byte> slots(kSlot * static_cast<size_t>(size_));
  const auto slot_elements = static_cast<int64_t>(kSlot);
  comm_->AllGather({slot.data(), DType::kU8, {slot_elements}},
                   {slots.data(), DType::kU8, {slot_elements * size_}},
                   {"framework engine negotiation", {}});
  std::vector<uint32_t> lengths(static_cast<size_t>(size_));
  std::vector<int64_t> rest(static_cast<size_t>(size_));
  int64_t rest_total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    std::memcpy(&lengths[r], slots.data() + r * kSlot, 4);
    rest[r] = lengths[r] > kInline ? static_cast<int64_t>(lengths[r] - kInline) : 0;
    rest_total += rest[r];
  }
  std::string overflow(static_cast<size_t>(rest_total), '\0');
  if (rest_total > 0) {
    const int64_t my_rest = rest[static_cast<size_t>(rank_)];
    comm_->AllGatherV(
        {my_rest > 0 ? const_cast<char*>(bytes.data()) + kInline : nullptr, DType::kU8, {my_rest}},
        {overflow.data(), DType::kU8, {rest_total}}, rest,
        {"framework engine negotiation (long messages)", {}});
  }
  std::vector<CycleMessage> messages;
  size_t at = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    std::string whole(reinterpret_cast<const char*>(slots.data() + r * kSlot + 4),
                      std::min<size_t>(lengths[r], kInline));
    whole.append(overflow, at, static_cast<size_t>(rest[r]));
    at += static_cast<size_t>(rest[r]);
    try {
      messages.push_back(CycleMessage::Decode(whole));
    } catch (const ProtocolError& e) {
      throw ProtocolError(fmt::format("framework engine: the message of rank {}: {}", r, e.what()));
    }
  }
  return messages;
}

void FusionEngineImpl::Remember(const TensorRequest& desc) {
  auto it = cache_index_.find(desc.name);
  if (it != cache_index_.end()) {
    cache_[it->second] = desc;
  } else if (cache_.size() < cache_capacity_in_force_) {
    cache_index_.emplace(desc.name, static_cast<uint32_t>(cache_.size()));
    cache_.push_back(desc);
  }
}

bool FusionEngineImpl::Cycle(bool stopping) {
  const std::vector<CycleMessage> all = Exchange(OwnMessage(stopping));
  const Holdings holdings = Gather(all);
  if (holdings.all_stopped) return true;
  const int64_t now0 = all[0].clock_ms;
  // Rank 0's settings rule this cycle on every rank.
  in_force_ = all[0].settings;
  cache_capacity_in_force_ = all[0].cache_capacity;
  {
    std::lock_guard lock(mu_);
    ++stats_.cycles;
    stats_.fusion_threshold = in_force_.fusion_threshold;
    stats_.cycle_time = in_force_.cycle_time;
    stats_.algorithm = in_force_.algorithm;
  }

  // Decide, identically on every rank.
  std::set<std::string> names;
  for (const auto& h : holdings.held) {
    for (const auto& [name, q] : h) names.insert(name);
  }
  std::vector<std::shared_ptr<Pending>> ready;
  std::vector<TensorRequest> agreed;
  for (const std::string& name : names) DecideName(name, holdings, now0, ready, agreed);
  for (auto it = first_seen_.begin(); it != first_seen_.end();) {
    it = names.count(it->first) ? std::next(it) : first_seen_.erase(it);
  }
  // The cache grows in name order, identically on every rank.
  for (const TensorRequest& d : agreed) Remember(d);

  std::sort(ready.begin(), ready.end(),
            [](const auto& a, const auto& b) { return OrderKey(a->desc) < OrderKey(b->desc); });
  Execute(ready);
  if (tuner_) {
    tuner_->Observe(succeeded_, succeeded_bytes_, RealClock::now());
    succeeded_.clear();
    succeeded_bytes_ = 0;
    Count([&](FusionEngine::Stats& s) {
      s.autotune_samples = static_cast<uint64_t>(tuner_->samples());
      s.autotune_done = tuner_->done();
    });
  }
  return false;
}

CycleMessage FusionEngineImpl::OwnMessage(bool stopping) {
  CycleMessage mine;
  mine.stopping = stopping;
  mine.clock_ms = NowMs();
  mine.settings = OwnSettings();
  mine.cache_capacity = static_cast<uint32_t>(options_.cache_capacity);  // checked at start
  mine.cached.assign(cache_.size(), false);
  for (auto& [name, p] : pending_) {
    auto it = cache_index_.find(name);
    p->sent_in_full = it == cache_index_.end() || !(cache_[it->second] == p->desc);
    if (p->sent_in_full) {
      mine.requests.push_back(p->desc);
    } else {
      mine.cached[it->second] = true;
    }
  }
  return mine;
}

FusionEngineImpl::Holdings FusionEngineImpl::Gather(const std::vector<CycleMessage>& all) const {
  Holdings h;
  h.held.resize(all.size());
  h.in_full.resize(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const CycleMessage& m = all[r];
    h.all_stopped = h.all_stopped && m.stopping;
    if (m.cached.size() != cache_.size()) {
      throw ProtocolError(fmt::format(
          "framework engine: rank {} sent {} response-cache bits, rank {} has {} entries (the "
          "engines diverged)",
          r, m.cached.size(), rank_, cache_.size()));
    }
    for (size_t i = 0; i < m.cached.size(); ++i) {
      if (m.cached[i]) h.held[r][cache_[i].name] = &cache_[i];
    }
    for (const TensorRequest& q : m.requests) {
      if (!h.held[r].emplace(q.name, &q).second) {
        throw ProtocolError(fmt::format(
            "framework engine: rank {} sent request '{}' twice in one cycle", r, q.name));
      }
      h.in_full[r].insert(q.name);
    }
  }
  return h;
}

FusionEngineImpl::Survey FusionEngineImpl::SurveyName(const std::string& name,
                                                      const Holdings& holdings) {
  Survey s;
  for (size_t r = 0; r < holdings.held.size(); ++r) {
    auto it = holdings.held[r].find(name);
    if (it == holdings.held[r].end()) {
      s.missing.push_back(static_cast<int>(r));
      continue;
    }
    s.have.push_back(static_cast<int>(r));
    s.full = s.full || holdings.in_full[r].count(name) > 0;
    if (s.first == nullptr) {
      s.first = it->second;
    } else {
      s.same = s.same && *it->second == *s.first;
    }
  }
  return s;
}

void FusionEngineImpl::DecideName(const std::string& name, const Holdings& holdings, int64_t now0,
                                  std::vector<std::shared_ptr<Pending>>& ready,
                                  std::vector<TensorRequest>& agreed) {
  const Survey survey = SurveyName(name, holdings);
  const std::string sent = survey.same ? std::string() : WhatEachSent(name, survey, holdings);
  // A disagreement is decided once every rank submitted, so that every
  // submitter gets the same error for the same request.
  if (!survey.same && survey.missing.empty()) {
    const std::string text = fmt::format(
        "framework engine: tensor '{}': the ranks disagree, so it fails on every rank: {}", name,
        sent);
    log_.Error("{}", text);
    Count([&](FusionEngine::Stats& s) {
      ++s.mismatches;
      s.last_report = text;
    });
    Fail(name, std::make_exception_ptr(CallMismatch(text)));
    return;
  }
  if (survey.missing.empty()) {
    Count([&](FusionEngine::Stats& s) { ++(survey.full ? s.negotiated : s.cached); });
    auto local = pending_.find(name);
    agreed.push_back(*survey.first);
    ready.push_back(local->second);
    pending_.erase(local);
    first_seen_.erase(name);
    stall_reported_.erase(name);
    return;
  }
  CheckStall(name, survey, sent, now0);
}

std::string FusionEngineImpl::WhatEachSent(const std::string& name, const Survey& survey,
                                           const Holdings& holdings) {
  std::string sent;
  for (int r : survey.have) {
    sent += fmt::format("{}rank {} sent {}", sent.empty() ? "" : "; ", r,
                        holdings.held[static_cast<size_t>(r)].at(name)->Describe());
  }
  if (!survey.missing.empty()) {
    sent += fmt::format("; rank(s) {} sent nothing yet", Ranks(survey.missing));
  }
  return sent;
}

void FusionEngineImpl::CheckStall(const std::string& name, const Survey& survey,
                                  const std::string& sent, int64_t now0) {
  const int64_t age = now0 - first_seen_.emplace(name, now0).first->second;
  const std::string text =
      survey.same
          ? fmt::format(
                "framework engine: tensor '{}' ({}) stalled for {:.1f} s: submitted by rank(s) "
                "{}, missing on rank(s) {}",
                name, survey.first->Describe(), static_cast<double>(age) / 1000.0,
                Ranks(survey.have), Ranks(survey.missing))
          : fmt::format(
                "framework engine: tensor '{}' stalled for {:.1f} s, and the ranks disagree: "
                "{}; missing on rank(s) {}",
                name, static_cast<double>(age) / 1000.0, sent, Ranks(survey.missing));
  if (options_.stall_shutdown.count() > 0 && age >= options_.stall_shutdown.count()) {
    const std::string final_text = fmt::format(
        "{}; the stall shutdown time ({} s) passed, so it fails on the rank(s) that submitted it",
        text, static_cast<double>(options_.stall_shutdown.count()) / 1000.0);
    log_.Error("{}", final_text);
    Count([&](FusionEngine::Stats& s) {
      ++s.stalls_failed;
      s.last_report = final_text;
    });
    Fail(name, survey.same ? std::make_exception_ptr(Timeout(final_text))
                           : std::make_exception_ptr(CallMismatch(final_text)));
  } else if (options_.stall_check.count() > 0 && age >= options_.stall_check.count() &&
             stall_reported_.insert(name).second) {
    log_.Warn("{}", text);
    Count([&](FusionEngine::Stats& s) {
      ++s.stalls_reported;
      s.last_report = text;
    });
  }
}

void FusionEngineImpl::Fail(const std::string& name, std::exception_ptr error) {
  auto local = pending_.find(name);
  if (local != pending_.end()) {
    Complete(local->second, error);
    pending_.erase(local);
  }
  first_seen_.erase(name);
  stall_reported_.erase(name);
}

void FusionEngineImpl::Execute(std::vector<std::shared_ptr<Pending>>& ready) {
  size_t i = 0;
  try {
    while (i < ready.size()) {
      const TensorRequest& d = ready[i]->desc;
      if (d.kind == RequestKind::kBroadcast) {
        comm_->Broadcast(ready[i]->in, d.root, {d.name, ready[i]->timeout});
        Count([](FusionEngine::Stats& s) { ++s.collectives; });
        Succeed(ready[i]);
        ++i;
        continue;
      }
      // A run of compatible allreduces within the threshold; a request at
      // least as large as the threshold runs alone, from its own memory.
      size_t j = i + 1;
      size_t bytes = ready[i]->in.num_bytes();
      while (j < ready.size() && Fusable(d, ready[j]->desc) &&
             bytes + ready[j]->in.num_bytes() <= in_force_.fusion_threshold) {
        bytes += ready[j]->in.num_bytes();
        ++j;
      }
      ReduceOptions o;
      o.op = d.op;
      o.prescale = d.prescale;
      o.postscale = d.postscale;
      o.algorithm = d.algorithm == AllReduceAlgorithm::kAuto ? in_force_.algorithm : d.algorithm;
      o.timeout = ready[i]->timeout;
      if (j == i + 1) {
        o.name = d.name;
        comm_->AllReduce(ready[i]->in, ready[i]->out, o);
        Count([](FusionEngine::Stats& s) { ++s.collectives; });
        Succeed(ready[i]);
        i = j;
        continue;
      }
      if (fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
      size_t at = 0;
      std::vector<std::string> fused;
      for (size_t k = i; k < j; ++k) {
        const size_t b = ready[k]->in.num_bytes();
        if (b > 0) std::memcpy(fusion_buffer_.data() + at, ready[k]->in.data, b);
        at += b;
        fused.push_back(ready[k]->desc.name);
      }
      const auto count = static_cast<int64_t>(bytes / ElementSize(d.dtype));
      const TensorView buffer{fusion_buffer_.data(), d.dtype, {count}};
      o.name = fmt::format("fusion buffer [{}]", fmt::join(fused, ", "));
      comm_->AllReduce(buffer, buffer, o);
      Count([&](FusionEngine::Stats& s) {
        ++s.collectives;
        s.fused_tensors += j - i;
      });
      at = 0;
      for (size_t k = i; k < j; ++k) {
        const size_t b = ready[k]->out.num_bytes();
        if (b > 0) std::memcpy(ready[k]->out.data, fusion_buffer_.data() + at, b);
        at += b;
        Succeed(ready[k]);
      }
      i = j;
    }
  } catch (...) {
    // The communicator failed: what did not run fails alike, then the engine.
    for (; i < ready.size(); ++i) Complete(ready[i], std::current_exception());
    throw;
  }
}

}  // namespace collective

namespace {

void CheckView(const TensorView& t, const char* role, const std::string& what) {
  if (ElementSize(t.dtype) == 0) {
    throw InvalidArgument(fmt::format("{}: {} has dtype value {}, not a tandem dtype", what, role,
                                      static_cast<int>(t.dtype)));
  }
  for (int64_t d : t.shape) {
    if (d < 0)
      throw InvalidArgument(fmt::format("{}: {} has a negative dimension {}", what, role, d));
  }
  if (t.data == nullptr && t.num_elements() > 0) {
    throw InvalidArgument(
        fmt::format("{}: {} is null but holds {} elements", what, role, t.num_elements()));
  }
}

void CheckName(const std::string& name, const char* op) {
  if (name.empty())
    throw InvalidArgument(fmt::format("framework engine: {} needs a tensor name", op));
  if (name.size() > collective::CycleMessage::kMaxNameBytes) {
    throw InvalidArgument(fmt::format("framework engine: a tensor name of {} bytes (limit {})",
                                      name.size(), collective::CycleMessage::kMaxNameBytes));
  }
}

// Milliseconds as Horovod's HOROVOD_CYCLE_TIME (a decimal number).
std::chrono::microseconds ParseCycleTime(const base::Environment& env, const std::string& name,
                                         std::chrono::microseconds fallback) {
  const double ms = env.GetDouble(name, static_cast<double>(fallback.count()) / 1000.0, 0, 60000);
  return std::chrono::microseconds(std::llround(ms * 1000.0));
}

}  // namespace

FusionEngine::Options FusionEngine::Options::FromEnvironment(
    const std::map<std::string, std::string>& vars) {
  const base::Environment env(vars);
  auto pick = [&](const std::string& suffix) {
    return env.Get("TANDEM_" + suffix) ? "TANDEM_" + suffix : "HOROVOD_" + suffix;
  };
  Options o;
  o.fusion_threshold = static_cast<size_t>(env.GetInt(
      pick("FUSION_THRESHOLD"), static_cast<int64_t>(o.fusion_threshold), 0, int64_t{1} << 36));
  o.cycle_time = ParseCycleTime(env, pick("CYCLE_TIME"), o.cycle_time);
  o.cache_capacity =
      static_cast<size_t>(env.GetInt(pick("CACHE_CAPACITY"), static_cast<int64_t>(o.cache_capacity),
                                     0, collective::CycleMessage::kMaxCacheBits));
  // TANDEM_STALL_WARNING_SECONDS is tandem's own name (docs/collectives.md);
  // the Horovod-shaped names are honoured as well.
  o.stall_check = env.GetSeconds("TANDEM_STALL_WARNING_SECONDS",
                                 env.GetSeconds(pick("STALL_CHECK_TIME_SECONDS"), o.stall_check));
  if (env.GetBool(pick("STALL_CHECK_DISABLE"), false)) o.stall_check = std::chrono::milliseconds(0);
  o.stall_shutdown = env.GetSeconds(pick("STALL_SHUTDOWN_TIME_SECONDS"),
                                    env.GetSeconds("TANDEM_COLLECTIVE_TIMEOUT", o.stall_shutdown));
  o.autotune = env.GetBool(pick("AUTOTUNE"), false);
  o.autotune_warmup_samples = static_cast<int>(
      env.GetInt(pick("AUTOTUNE_WARMUP_SAMPLES"), o.autotune_warmup_samples, 0, 1000));
  o.autotune_steps_per_sample = static_cast<int>(
      env.GetInt(pick("AUTOTUNE_STEPS_PER_SAMPLE"), o.autotune_steps_per_sample, 1, 100000));
  o.autotune_max_samples = static_cast<int>(env.GetInt(
      "TANDEM_AUTOTUNE_MAX_SAMPLES",
      env.GetInt("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", o.autotune_max_samples, 1, 1000), 1,
      1000));
  o.autotune_min_gain = env.GetDouble("TANDEM_AUTOTUNE_MIN_GAIN", o.autotune_min_gain, 0, 1);
  o.autotune_log = env.Get(pick("AUTOTUNE_LOG")).value_or("");
  o.autotune_result = env.Get("TANDEM_AUTOTUNE_RESULT").value_or("");
  return o;
}

FusionEngine::Options FusionEngine::Options::FromEnvironment() {
  return FromEnvironment(base::Environment::FromProcess().vars());
}

FusionEngine::FusionEngine(std::unique_ptr<Communicator> communicator, Options options) {
  if (!communicator) throw InvalidArgument("FusionEngine needs a communicator, got null");
  impl_ = std::make_unique<collective::FusionEngineImpl>(std::move(communicator), options);
}

FusionEngine::FusionEngine(std::unique_ptr<collective::FusionEngineImpl> impl)
    : impl_(std::move(impl)) {}

FusionEngine::~FusionEngine() = default;

int FusionEngine::rank() const { return impl_->communicator().rank(); }
int FusionEngine::size() const { return impl_->communicator().size(); }

CollectiveHandle FusionEngine::AllReduce(const std::string& name, const TensorView& in,
                                         const TensorView& out, const ReduceOptions& options) {
  CheckName(name, "AllReduce");
  const std::string what = fmt::format("framework engine: AllReduce of '{}'", name);
  CheckView(in, "input", what);
  CheckView(out, "output", what);
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements()) {
    throw InvalidArgument(fmt::format("{}: output is {} x {}, expected the input's {} x {}", what,
                                      out.num_elements(), base::DTypeName(out.dtype),
                                      in.num_elements(), base::DTypeName(in.dtype)));
  }
  const auto* a = static_cast<const std::byte*>(in.data);
  const auto* b = static_cast<const std::byte*>(out.data);
  if (a != b && in.num_bytes() > 0 && a < b + out.num_bytes() && b < a + in.num_bytes()) {
    throw InvalidArgument(what + ": input and output overlap without being the same tensor");
  }
  ReductionName(options.op);  // throws for a value outside the enum
  if (!base::IsFloatingPoint(in.dtype) && (options.prescale != 1.0 || options.postscale != 1.0)) {
    throw InvalidArgument(fmt::format(
        "{}: pre- and post-scaling need a floating-point dtype, got {} (prescale {}, postscale {})",
        what, base::DTypeName(in.dtype), options.prescale, options.postscale));
  }
  if (static_cast<uint8_t>(options.algorithm) >
      static_cast<uint8_t>(AllReduceAlgorithm::kHierarchical)) {
    throw InvalidArgument(fmt::format("{}: algorithm {} is not one of tandem's", what,
                                      static_cast<int>(options.algorithm)));
  }
  collective::TensorRequest r;
  r.name = name;
  r.kind = collective::RequestKind::kAllReduce;
  r.dtype = in.dtype;
  r.shape = in.shape;
  r.op = options.op;
  r.prescale = options.prescale;
  r.postscale = options.postscale;
  r.algorithm = options.algorithm;
  return impl_->Submit(std::move(r), in, out, options.timeout);
}

CollectiveHandle FusionEngine::Broadcast(const std::string& name, const TensorView& data,
                                         int root) {
  CheckName(name, "Broadcast");
  const std::string what = fmt::format("framework engine: Broadcast of '{}'", name);
  CheckView(data, "tensor", what);
  if (root < 0 || root >= size()) {
    throw InvalidArgument(
        fmt::format("{}: root {} is outside the group of {} ranks", what, root, size()));
  }
  collective::TensorRequest r;
  r.name = name;
  r.kind = collective::RequestKind::kBroadcast;
  r.dtype = data.dtype;
  r.shape = data.shape;
  r.root = root;
  return impl_->Submit(std::move(r), data, data, std::chrono::milliseconds(0));
}

FusionEngine::Stats FusionEngine::stats() const { return impl_->stats(); }

}  // namespace tandem
