// Implements docs/protocol-resend.md; see reliable_transport.h for the
// outline, the bounded-dedup invariant and the threading.
#include "net/reliable_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "base/byte_io.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using Duration = std::chrono::steady_clock::duration;

// The resend thread looks for expired messages this often (clock time),
// relative to the timeout: a message is resent at most a quarter timeout
// late.
Duration ScanInterval(std::chrono::milliseconds timeout) {
  auto quarter = std::chrono::duration_cast<Duration>(timeout) / 4;
  return std::clamp<Duration>(quarter, std::chrono::milliseconds(1),
                              std::chrono::milliseconds(100));
}

}  // namespace

ReliableOptions ReliableOptions::FromConfig(const base::Config& config) {
  ReliableOptions o;
  o.resend_timeout = config.resend_timeout;
  o.max_retries = config.resend_retries;
  o.window = config.resend_window;
  o.drop_percent = config.drop_percent;
  o.drop_seed = config.drop_seed;
  return o;
}

// One data message from its Send until its on_sent. Guarded by mu_ (the
// caller's message itself is immutable once numbered).
struct ReliableTransport::Pending {
  OutgoingMessage msg;  // the caller's: payload borrowed, on_sent its callback
  ConnectionId conn = 0;
  uint64_t id = 0;    // 0 while waiting behind the window
  int copies = 0;     // copies handed to the inner transport
  int in_flight = 0;  // copies the inner transport still reads from
  bool acked = false;
  bool fast_resent = false;  // resent once already because an ack showed a gap
  bool done = false;         // on_sent has been scheduled
  std::exception_ptr error;
  base::SteadyTime deadline = base::SteadyTime::max();  // next resend, on the clock
  base::SteadyTime first_sent{};                        // when its id was assigned
};

// Both directions of one connection. Guarded by mu_, except send_mu.
struct ReliableTransport::Connection {
  PeerInfo peer;
  std::string peer_name;
  bool closed = false;
  std::string failure;  // why we are closing it (retry budget, violation)
  std::mutex send_mu;   // id order == inner Send order; taken before mu_

  // Sending side.
  uint64_t next_id = 1;
  uint64_t acked_below = 1;  // every id below it is acknowledged
  std::map<uint64_t, std::shared_ptr<Pending>> unacked;
  std::deque<std::shared_ptr<Pending>> waiting;  // behind the window, no id yet

  // Receiving side: the whole dedup state (bounded, see the header).
  uint64_t expected = 1;  // every id below it was delivered
  std::map<uint64_t, Message> held;
  // The drop decision taken in PayloadDestination for the message in
  // progress, reused by OnMessage.
  bool rx_decided = false;
  uint64_t rx_id = 0;
  bool rx_drop = false;
};

ReliableTransport::ReliableTransport(ReliableOptions options, TransportHandler* upper,
                                     base::Logger& logger, const InnerFactory& make_inner,
                                     const base::Clock* clock)
    : options_(options),
      upper_(upper),
      logger_(logger),
      clock_(clock != nullptr ? *clock : steady_clock_) {
  if (upper_ == nullptr) throw InvalidArgument("ReliableTransport needs a TransportHandler");
  if (options_.resend_timeout.count() <= 0) {
    throw InvalidArgument(fmt::format("PS_RESEND_TIMEOUT must be positive, got {} ms",
                                      options_.resend_timeout.count()));
  }
  if (options_.max_retries < 0) {
    throw InvalidArgument(
        fmt::format("TANDEM_RESEND_RETRIES must be >= 0, got {}", options_.max_retries));
  }
  if (options_.window == 0) throw InvalidArgument("TANDEM_RESEND_WINDOW must be >= 1");
  if (options_.drop_percent < 0 || options_.drop_percent > 100) {
    throw InvalidArgument(
        fmt::format("PS_DROP_MSG must be a percentage 0..100, got {}", options_.drop_percent));
  }
  drop_rng_.seed(options_.drop_seed != 0 ? options_.drop_seed : std::random_device{}());
  if (options_.drop_percent > 0) {
    logger_.Warn("PS_DROP_MSG={}: discarding that share of received messages (test hook)",
                 options_.drop_percent);
  }
  inner_ = make_inner(this);
  if (!inner_) throw InvalidArgument("ReliableTransport: the inner transport factory gave null");
  resend_thread_ = std::thread([this] { ResendLoop(); });
}

ReliableTransport::~ReliableTransport() { Shutdown(); }

Endpoint ReliableTransport::Listen(const Endpoint& local) { return inner_->Listen(local); }

ConnectionId ReliableTransport::Connect(const Endpoint& remote, std::chrono::milliseconds timeout) {
  return inner_->Connect(remote, timeout);
}

void ReliableTransport::Close(ConnectionId id) { inner_->Close(id); }

PeerInfo ReliableTransport::Peer(ConnectionId id) const { return inner_->Peer(id); }

bool ReliableTransport::AllSettledLocked() const {
  for (const auto& [id, c] : connections_) {
    if (!c->unacked.empty() || !c->waiting.empty()) return false;
  }
  return true;
}

void ReliableTransport::Shutdown() {
  std::lock_guard guard(shutdown_mu_);
  {
    // Linger: a process that sends its last message (a "leave", a final
    // response) and exits at once would otherwise take the message's
    // resends with it, and its peer would see the connection end instead.
    // A grace period, so real time even on a manual clock (base/clock.h).
    std::unique_lock lock(mu_);
    if (!stopping_ && !abandoned_) {
      const auto linger = options_.resend_timeout * (options_.max_retries + 1);
      if (!settled_cv_.wait_for(lock, linger,
                                [this] { return AllSettledLocked() || abandoned_; })) {
        logger_.Warn("shutting down with messages still unacknowledged after {} ms",
                     linger.count());
      }
    }
    if (abandoned_ && !AllSettledLocked()) {
      logger_.V1(
          "shutting down without waiting for the acknowledgements still due (the job "
          "failed)");
    }
    stopping_ = true;
  }
  resend_cv_.notify_all();
  if (resend_thread_.joinable()) resend_thread_.join();
  if (inner_) inner_->Shutdown();
  if (!logged_summary_) {
    logged_summary_ = true;
    ReliableStats st = Stats();
    logger_.V1(
        "reliable delivery: {} messages sent, {} resent, {} acks sent, {} received copies "
        "dropped (PS_DROP_MSG), {} duplicates discarded, {} delivered, at most {} held out of "
        "order",
        st.data_sent, st.resent, st.acks_sent, st.dropped, st.duplicates, st.delivered,
        st.held_max);
  }
}

void ReliableTransport::AbandonUnacknowledged() noexcept {
  {
    std::lock_guard lock(mu_);
    abandoned_ = true;
  }
  settled_cv_.notify_all();
}

ReliableStats ReliableTransport::Stats() const {
  std::lock_guard lock(mu_);
  ReliableStats s = stats_;
  s.held_now = s.unacked_now = s.waiting_now = 0;
  for (const auto& [id, c] : connections_) {
    s.held_now += c->held.size();
    s.unacked_now += c->unacked.size();
    s.waiting_now += c->waiting.size();
  }
  return s;
}

// --- sending -----------------------------------------------------------------

void ReliableTransport::Send(ConnectionId id, OutgoingMessage msg) {
  std::shared_ptr<Connection> c;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end() && !stopping_) c = it->second;
  }
  if (!c) {
    // Unknown or closed: the inner transport reports PeerLost to on_sent on
    // its own thread, as the interface promises.
    inner_->Send(id, std::move(msg));
    return;
  }
  auto p = std::make_shared<Pending>();
  p->msg = std::move(msg);
  p->conn = id;
  std::lock_guard order(c->send_mu);
  {
    std::lock_guard lock(mu_);
    if (c->closed) {
      p->msg.may_wait = false;  // fails at once: the connection is closed
      inner_->Send(id, std::move(p->msg));
      return;
    }
    if (!c->waiting.empty() || c->next_id >= c->acked_below + options_.window) {
      c->waiting.push_back(std::move(p));
      return;
    }
    p->id = c->next_id++;
    p->msg.header.message_id = p->id;
    p->copies = 1;
    p->first_sent = clock_.Now();
    p->in_flight = 1;
    c->unacked.emplace(p->id, p);
    ++stats_.data_sent;
  }
  SendCopy(id, p);
}

void ReliableTransport::SendCopy(ConnectionId id, const std::shared_ptr<Pending>& p) {
  // Pending::msg is not modified after numbering, so reading it unlocked is
  // safe; the copy borrows the caller's payload spans (no bytes copied).
  OutgoingMessage copy;
  copy.header = p->msg.header;
  copy.meta = p->msg.meta;
  copy.payload = p->msg.payload;
  copy.on_sent = [this, p](std::exception_ptr error) { OnCopySent(p, std::move(error)); };
  // Callers may hold send_mu, which the inner loop thread takes in
  // DrainWaiting: never block on the inner send queue here (the resend
  // window bounds what is queued; docs/transport.md, "Back-pressure").
  copy.may_wait = false;
  inner_->Send(id, std::move(copy));
}

void ReliableTransport::OnCopySent(const std::shared_ptr<Pending>& p, std::exception_ptr error) {
  std::vector<std::shared_ptr<Pending>> done;
  {
    std::lock_guard lock(mu_);
    --p->in_flight;
    if (error) {
      if (!p->acked && !p->error) p->error = std::move(error);
    } else if (!p->acked && !p->error) {
      // The timer starts once the copy is in the kernel, so a long queue in
      // the inner transport never counts against the peer.
      p->deadline = clock_.Now() + options_.resend_timeout;
    }
    if ((p->acked || p->error) && p->in_flight == 0 && !p->done) {
      p->done = true;
      auto it = connections_.find(p->conn);
      if (it != connections_.end()) it->second->unacked.erase(p->id);
      done.push_back(p);
    }
  }
  settled_cv_.notify_all();
  Finish(done, logger_);
}

void ReliableTransport::DrainWaiting(ConnectionId id, const std::shared_ptr<Connection>& c) {
  std::lock_guard order(c->send_mu);
  std::vector<std::shared_ptr<Pending>> now;
  {
    std::lock_guard lock(mu_);
    while (!c->closed && !c->waiting.empty() && c->next_id < c->acked_below + options_.window) {
      auto p = std::move(c->waiting.front());
      c->waiting.pop_front();
      p->id = c->next_id++;
      p->msg.header.message_id = p->id;
      p->copies = 1;
      p->first_sent = clock_.Now();
      p->in_flight = 1;
      c->unacked.emplace(p->id, p);
      ++stats_.data_sent;
      now.push_back(std::move(p));
    }
  }
  for (auto& p : now) SendCopy(id, p);
}

void ReliableTransport::Finish(std::vector<std::shared_ptr<Pending>>& done, base::Logger& log) {
  for (auto& p : done) {
    if (!p->msg.on_sent) continue;
    try {
      p->msg.on_sent(p->acked ? nullptr : p->error);
    } catch (const std::exception& e) {
      log.Error("an on_sent callback threw: {}", e.what());
    }
  }
}

void ReliableTransport::SendAck(ConnectionId id, uint64_t expected,
                                const std::vector<uint64_t>& held) {
  base::ByteWriter w;
  w.Put<uint64_t>(expected);
  w.Put<uint32_t>(static_cast<uint32_t>(held.size()));
  for (uint64_t h : held) w.Put<uint64_t>(h);
  OutgoingMessage ack;
  ack.header.type = msgtype::kReliableAck;
  ack.meta = w.Take();
  ack.may_wait = false;  // sent on the inner loop thread, under locks
  inner_->Send(id, std::move(ack));
}

void ReliableTransport::ResendLoop() {
  const Duration tick = ScanInterval(options_.resend_timeout);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    base::WaitUntil(resend_cv_, lock, clock_, clock_.Now() + tick, [this] { return stopping_; });
    if (stopping_) break;
    const auto now = clock_.Now();
    std::vector<std::pair<ConnectionId, std::shared_ptr<Pending>>> resend;
    std::vector<std::pair<ConnectionId, std::string>> give_up;
    for (auto& [cid, c] : connections_) {
      if (c->closed || !c->failure.empty()) continue;
      if (abandoned_) {
        // The job failed: a message older than one resend timeout is bound
        // for a peer that does not answer; give its connection up now
        // instead of resending (its payload is released with the error).
        for (auto& [mid, p] : c->unacked) {
          if (p->acked || now - p->first_sent < options_.resend_timeout) continue;
          c->failure = fmt::format(
              "{} with message id {} to {} was not acknowledged within {} ms (PS_RESEND_TIMEOUT) "
              "and the job has failed; giving up the connection",
              MessageTypeName(p->msg.header.type), mid, c->peer_name,
              options_.resend_timeout.count());
          give_up.emplace_back(cid, c->failure);
          break;
        }
        continue;
      }
      for (auto& [mid, p] : c->unacked) {
        if (p->acked || p->error || p->in_flight > 0 || p->deadline > now) continue;
        if (p->copies > options_.max_retries) {
          const Header& h = p->msg.header;
          std::string node =
              h.recipient >= 0 ? fmt::format(" (node {})", h.recipient) : std::string();
          c->failure = fmt::format(
              "{} with message id {} to {}{} was not acknowledged after {} copies sent {} ms "
              "apart (PS_RESEND_TIMEOUT={}, TANDEM_RESEND_RETRIES={}); giving up the connection",
              MessageTypeName(h.type), mid, c->peer_name, node, p->copies,
              options_.resend_timeout.count(), options_.resend_timeout.count(),
              options_.max_retries);
          p->error = std::make_exception_ptr(Timeout(c->failure));
          give_up.emplace_back(cid, c->failure);
          break;
        }
        ++p->copies;
        ++p->in_flight;
        p->deadline = base::SteadyTime::max();
        ++stats_.resent;
        resend.emplace_back(cid, p);
      }
    }
    lock.unlock();
    for (auto& [cid, p] : resend) {
      logger_.V1("resending message {} ({}) on connection {}, copy {}", p->id,
                 MessageTypeName(p->msg.header.type), cid, p->copies);
      SendCopy(cid, p);
    }
    for (auto& [cid, why] : give_up) {
      logger_.Error("{}", why);
      inner_->Close(cid);  // OnDisconnected fails what is left, with `why`
    }
    lock.lock();
  }
}

// --- receiving ---------------------------------------------------------------

void ReliableTransport::OnConnected(ConnectionId id, const PeerInfo& peer) {
  {
    auto c = std::make_shared<Connection>();
    c->peer = peer;
    c->peer_name = peer.address.ToString();
    std::lock_guard lock(mu_);
    connections_[id] = std::move(c);
  }
  upper_->OnConnected(id, peer);
}

bool ReliableTransport::DecideDrop() {
  if (options_.drop_percent <= 0) return false;
  return static_cast<int>(drop_rng_() % 100) < options_.drop_percent;
}

std::span<std::byte> ReliableTransport::PayloadDestination(ConnectionId id, const Header& h,
                                                           const std::string& meta) {
  if (h.type == msgtype::kReliableAck) return {};  // refused in OnMessage
  bool to_upper = false;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end()) return {};
    Connection& c = *it->second;
    c.rx_decided = true;
    c.rx_id = h.message_id;
    c.rx_drop = DecideDrop();
    // Only the next message in order may land in the upper layer's buffer:
    // a duplicate must not overwrite a buffer the upper layer already owns
    // again, and a held message asks for its destination when delivered.
    to_upper = !c.rx_drop && h.message_id != 0 && h.message_id == c.expected;
  }
  if (!to_upper) return {};
  return upper_->PayloadDestination(id, h, meta);
}

void ReliableTransport::OnMessage(ConnectionId id, Message&& msg) {
  if (msg.header.type == msgtype::kReliableAck) {
    OnAck(id, std::move(msg));
  } else {
    OnData(id, std::move(msg));
  }
}

void ReliableTransport::OnData(ConnectionId id, Message&& msg) {
  const uint64_t mid = msg.header.message_id;
  std::vector<Message> deliver;
  uint64_t expected = 0;
  std::vector<uint64_t> held;
  std::string violation;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    Connection& c = *it->second;
    bool drop;
    if (msg.header.payload_length > 0 && c.rx_decided && c.rx_id == mid) {
      drop = c.rx_drop;
    } else {
      drop = DecideDrop();
    }
    c.rx_decided = false;
    if (drop) {
      ++stats_.dropped;
      return;
    }
    if (mid == 0) {
      violation = fmt::format(
          "protocol violation by {}: {} without a message id (is PS_RESEND=1 set on every "
          "process?)",
          c.peer_name, MessageTypeName(msg.header.type));
    } else if (mid >= c.expected + options_.window) {
      violation = fmt::format(
          "protocol violation by {}: message id {} is beyond the window (expected {}, "
          "TANDEM_RESEND_WINDOW={}; must be equal on every process)",
          c.peer_name, mid, c.expected, options_.window);
    }
    if (!violation.empty()) {
      c.failure = violation;
    } else if (mid < c.expected || c.held.contains(mid)) {
      ++stats_.duplicates;
    } else if (mid == c.expected) {
      deliver.push_back(std::move(msg));
      ++c.expected;
      for (auto h = c.held.begin(); h != c.held.end() && h->first == c.expected;
           h = c.held.erase(h)) {
        deliver.push_back(std::move(h->second));
        ++c.expected;
      }
    } else {
      c.held.emplace(mid, std::move(msg));
      stats_.held_max = std::max<uint64_t>(stats_.held_max, c.held.size());
    }
    if (violation.empty()) {
      expected = c.expected;
      held.reserve(c.held.size());
      for (const auto& [h, m] : c.held) held.push_back(h);
      stats_.delivered += deliver.size();
      ++stats_.acks_sent;
    }
  }
  if (!violation.empty()) {
    logger_.Warn("dropping connection {}: {}", id, violation);
    inner_->Close(id);
    return;
  }
  // Acknowledge before delivering: the message is ours now, whatever the
  // upper layer does with it.
  SendAck(id, expected, held);
  for (size_t i = 0; i < deliver.size(); ++i) {
    Message& m = deliver[i];
    if (i > 0 && !m.payload.bytes.empty()) {
      // A held message: its payload sits in our allocation. Give the upper
      // layer the same chance to receive it in place that an in-order
      // arrival gets (one copy, only on this loss path).
      std::span<std::byte> dest = upper_->PayloadDestination(id, m.header, m.meta);
      if (dest.size() == m.payload.bytes.size()) {
        std::memcpy(dest.data(), m.payload.bytes.data(), dest.size());
        m.payload.bytes = dest;
        m.payload.owned.reset();
      }
    }
    upper_->OnMessage(id, std::move(m));
  }
}

void ReliableTransport::OnAck(ConnectionId id, Message&& msg) {
  std::vector<std::shared_ptr<Pending>> done;
  std::shared_ptr<Connection> drain;
  std::vector<std::shared_ptr<Pending>> resend;
  std::string violation;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    std::shared_ptr<Connection> c = it->second;
    if (DecideDrop()) {
      ++stats_.dropped;
      return;
    }
    uint64_t expected = 0;
    std::vector<uint64_t> listed;
    try {
      if (!msg.payload.bytes.empty()) {
        throw ProtocolError(
            fmt::format("resend ack carries a {} B payload", msg.payload.bytes.size()));
      }
      base::ByteReader r(msg.meta, "resend ack");
      expected = r.Get<uint64_t>("expected");
      auto n = r.Get<uint32_t>("held count");
      if (n > options_.window) {
        throw ProtocolError(fmt::format("resend ack lists {} held ids, more than the window {}", n,
                                        options_.window));
      }
      listed.reserve(n);
      for (uint32_t i = 0; i < n; ++i) listed.push_back(r.Get<uint64_t>("held id"));
      r.ExpectEnd();
      if (expected > c->next_id) {
        throw ProtocolError(
            fmt::format("resend ack acknowledges ids up to {} but only {} were sent", expected - 1,
                        c->next_id - 1));
      }
    } catch (const ProtocolError& e) {
      violation = fmt::format("protocol violation by {}: {}", c->peer_name, e.what());
      c->failure = violation;
    }
    if (violation.empty()) {
      auto settle = [&](const std::shared_ptr<Pending>& p) {
        p->acked = true;
        if (p->in_flight == 0 && !p->done) {
          p->done = true;
          done.push_back(p);
        }
      };
      if (expected > c->acked_below) {
        c->acked_below = expected;
        auto end = c->unacked.lower_bound(expected);
        for (auto u = c->unacked.begin(); u != end; ++u) settle(u->second);
        c->unacked.erase(c->unacked.begin(), end);
      }
      for (uint64_t h : listed) {
        auto u = c->unacked.find(h);
        if (u == c->unacked.end()) continue;
        settle(u->second);
        // Kept for nothing else: the window counts from acked_below.
        c->unacked.erase(u);
      }
      // Fast retransmit: ids the receiver holds above a gap prove the gap's
      // messages were lost (copies on one connection arrive in order), so
      // each is resent at once, once, instead of after the timeout.
      if (!listed.empty()) {
        const uint64_t highest = *std::max_element(listed.begin(), listed.end());
        for (auto u = c->unacked.begin(); u != c->unacked.end() && u->first < highest; ++u) {
          auto& p = u->second;
          if (p->acked || p->error || p->fast_resent || p->in_flight > 0 ||
              p->deadline == base::SteadyTime::max() || p->copies > options_.max_retries) {
            continue;
          }
          p->fast_resent = true;
          ++p->copies;
          ++p->in_flight;
          p->deadline = base::SteadyTime::max();
          ++stats_.resent;
          resend.push_back(p);
        }
      }
      if (!c->waiting.empty()) drain = c;
    }
  }
  if (!violation.empty()) {
    logger_.Warn("dropping connection {}: {}", id, violation);
    inner_->Close(id);
    return;
  }
  settled_cv_.notify_all();
  Finish(done, logger_);
  for (auto& p : resend) SendCopy(id, p);
  if (drain) DrainWaiting(id, drain);
}

void ReliableTransport::OnDisconnected(ConnectionId id, const std::string& reason) {
  std::vector<std::shared_ptr<Pending>> done;
  std::string told = reason;
  {
    std::lock_guard lock(mu_);
    auto it = connections_.find(id);
    if (it != connections_.end()) {
      std::shared_ptr<Connection> c = it->second;
      connections_.erase(it);
      c->closed = true;
      if (!c->failure.empty()) told = fmt::format("{} ({})", c->failure, reason);
      auto lost = std::make_exception_ptr(
          PeerLost(fmt::format("message not acknowledged before the connection ended: {}", told)));
      auto fail = [&](const std::shared_ptr<Pending>& p) {
        if (!p->error) p->error = lost;
        if (p->in_flight == 0 && !p->done) {
          p->done = true;
          done.push_back(p);
        }
        // Otherwise OnCopySent finishes it once the inner transport lets go
        // of the payload.
      };
      for (auto& [mid, p] : c->unacked) fail(p);
      for (auto& p : c->waiting) fail(p);
      c->unacked.clear();
      c->waiting.clear();
      c->held.clear();
    }
  }
  settled_cv_.notify_all();
  Finish(done, logger_);
  upper_->OnDisconnected(id, told);
}

}  // namespace tandem::net
