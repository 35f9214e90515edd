// TcpConnection, the send queue (see tcp_connection.h, "Sending" and
// "Back-pressure"): Send() appends under mu_; whoever finds the queue idle
// writes it with sendmsg(), gathering the pieces of as many messages as fit
// one call straight from the callers' memory; the rest waits for EPOLLOUT.
// on_sent callbacks always run on the loop thread.
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <limits>

#include "net/socket_address.h"
#include "net/tcp_connection.h"
#include "tandem/error.h"

namespace tandem::net {

namespace {

// iovecs gathered into one sendmsg(); several small messages share a call.
constexpr size_t kMaxIov = 128;

}  // namespace

std::span<const std::byte> TcpConnection::PendingSend::Piece(size_t i) const {
  if (i == 0) return header;
  if (i == 1) return std::as_bytes(std::span(msg.meta.data(), msg.meta.size()));
  return msg.payload[i - 2];
}

void TcpConnection::Send(OutgoingMessage msg) {
  if (msg.meta.size() > std::numeric_limits<uint32_t>::max()) {
    throw InvalidArgument(
        fmt::format("message to {}: metadata of {} bytes exceeds the {} bytes a "
                    "header can describe",
                    peer_name_, msg.meta.size(), std::numeric_limits<uint32_t>::max()));
  }
  if (!established()) {
    Completions failed;
    if (msg.on_sent) failed.push_back(std::move(msg.on_sent));
    Complete(std::move(failed),
             std::make_exception_ptr(PeerLost(fmt::format(
                 "connection {} to {} has not finished authentication", id_, peer_name_))));
    return;
  }
  if (ctx_.logger->verbosity() >= 2) {
    uint64_t payload = 0;
    for (auto s : msg.payload) payload += s.size();
    ctx_.logger->V2(
        "send to {} (connection {}): type {} flags {:#x} request {} meta {} B "
        "payload {} B in {} spans",
        peer_name_, id_, msg.header.type, msg.header.flags, msg.header.request_id, msg.meta.size(),
        payload, msg.payload.size());
  }
  const bool may_wait = msg.may_wait;
  Enqueue(std::move(msg), may_wait);
}

uint64_t TcpConnection::queued_bytes() const {
  std::lock_guard lock(mu_);
  return queued_bytes_;
}

void TcpConnection::Enqueue(OutgoingMessage msg, bool may_wait) {
  msg.header.meta_length = static_cast<uint32_t>(msg.meta.size());
  msg.header.payload_length = 0;
  for (auto s : msg.payload) msg.header.payload_length += s.size();
  PendingSend pending{std::move(msg), {}, 0, 0};
  EncodeHeader(pending.msg.header, pending.header);
  pending.bytes = kHeaderSize + pending.msg.meta.size() + pending.msg.header.payload_length;
  SendQueueMeter* meter = ctx_.send_queue->meter;
  if (meter) pending.role = meter->RoleOf(pending.msg.header.recipient);
  const bool on_loop = ctx_.loop->InCallback();

  Completions done;
  Completions failed;
  std::string error;
  bool post_flush = false;
  {
    std::unique_lock lock(mu_);
    // The loop thread never waits: it is the thread that drains the queue.
    if (may_wait && !on_loop) WaitForRoomLocked(lock, pending.bytes, pending.role);
    if (write_closed_) {
      if (pending.msg.on_sent) failed.push_back(std::move(pending.msg.on_sent));
      error = write_error_;
    } else {
      // With TLS the queue empties as soon as its messages are encrypted,
      // while their ciphertext may still wait for EPOLLOUT; then the loop
      // writes, and a sender only appends (no wake-up per message).
      bool idle = queue_.empty() && !want_write_;
      bool has_callback = static_cast<bool>(pending.msg.on_sent);
      queued_bytes_ += pending.bytes;
      if (meter) meter->AddQueued(pending.role, static_cast<int64_t>(pending.bytes));
      queue_.push_back(std::move(pending));
      // Who writes (docs/transport.md, "Zero-copy send"):
      //  - a non-empty queue, or one a posted flush will look at: the loop;
      //  - an idle queue, from the loop thread or for a message without
      //    on_sent: the calling thread, at once (no thread hop);
      //  - an idle queue, from another thread, for a message with on_sent:
      //    the loop, woken once. on_sent must run there anyway, and while it
      //    writes, further sends pile up behind and leave in one sendmsg();
      //    writing here instead would wake the loop once per message just
      //    for the callbacks, which measured several times slower for 4 KiB
      //    streams (docs/benchmarks.md).
      if (idle && !flush_posted_) {
        if (!on_loop && has_callback) {
          flush_posted_ = true;
          post_flush = true;
        } else {
          FlushLocked(done);
        }
      }
      if (write_closed_) {
        error = write_error_;
        DropQueueLocked(failed);
      }
    }
  }
  if (post_flush) ctx_.loop->Post([self = shared_from_this()] { self->OnWritable(true); });
  Complete(std::move(done), nullptr);
  if (!error.empty()) Complete(std::move(failed), NotSent(error));
}

void TcpConnection::WaitForRoomLocked(std::unique_lock<std::mutex>& lock, uint64_t bytes,
                                      int role) {
  const uint64_t limit = ctx_.send_queue->max_queued_bytes;
  auto has_room = [&] {
    return write_closed_ || limit == 0 || queued_bytes_ == 0 || queued_bytes_ + bytes <= limit;
  };
  if (has_room()) return;
  SendQueueMeter* meter = ctx_.send_queue->meter;
  if (meter) meter->CountWait(role);
  const auto timeout = ctx_.send_queue->wait_timeout;
  const base::SteadyClock steady;
  base::WaitReport report(steady, ctx_.options->wait_report_interval);
  while (!room_cv_.wait_for(lock, std::min(report.NextIn(), timeout - report.Waited()), has_room)) {
    if (report.Waited() >= timeout) break;
    if (report.TakeDue()) {
      ctx_.logger->Warn(
          "still waiting for room in the send queue to {} (connection {}) {}: {} B queued of "
          "the {} B allowed; the peer is not reading (gives up after {} s, "
          "TANDEM_SEND_WAIT_TIMEOUT)",
          peer_name_, id_, report.Lasted(), queued_bytes_, limit,
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
    }
  }
  if (has_room()) return;
  if (meter) meter->CountTimeout(role);
  throw Timeout(fmt::format(
      "sending {} B to {} (connection {}): waited {} ms for room in the send queue, which still "
      "holds {} B in {} messages of the {} B allowed (TANDEM_MAX_INFLIGHT_BYTES); the peer is "
      "not reading (TANDEM_SEND_WAIT_TIMEOUT)",
      bytes, peer_name_, id_, timeout.count(), queued_bytes_, queue_.size(), limit));
}

void TcpConnection::ReleaseLocked(const PendingSend& p) {
  queued_bytes_ -= p.bytes;
  if (ctx_.send_queue->meter)
    ctx_.send_queue->meter->AddQueued(p.role, -static_cast<int64_t>(p.bytes));
}

void TcpConnection::DropQueueLocked(Completions& failed) {
  for (auto& p : queue_) {
    if (p.msg.on_sent) failed.push_back(std::move(p.msg.on_sent));
    ReleaseLocked(p);
  }
  queue_.clear();
  room_cv_.notify_all();
}

void TcpConnection::OnWritable(bool posted_flush) {
  Completions done;
  Completions failed;
  std::string error;
  {
    std::lock_guard lock(mu_);
    bool write = !write_closed_;
    if (posted_flush) {
      flush_posted_ = false;
      // A queue that waits for EPOLLOUT is written when it comes.
      write = write && !queue_.empty() && !want_write_;
    }
    if (write) FlushLocked(done);
    if (write_closed_) {
      error = write_error_;
      DropQueueLocked(failed);
    }
  }
  // The loop thread, outside anybody's Send(): run on_sent now.
  RunCompletions(done, nullptr);
  if (!error.empty()) RunCompletions(failed, NotSent(error));
}

std::exception_ptr TcpConnection::NotSent(const std::string& why) const {
  return std::make_exception_ptr(
      PeerLost(fmt::format("message to {} not sent: {}", peer_name_, why)));
}

void TcpConnection::FlushLocked(Completions& done) {
  if (tls_) {
    FlushTlsLocked(done);
    return;
  }
  while (!queue_.empty()) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t total = 0;
    for (const PendingSend& p : queue_) {
      for (size_t i = p.piece; i < p.piece_count() && count < kMaxIov; ++i) {
        auto piece = p.Piece(i);
        size_t skip = i == p.piece ? p.offset : 0;
        if (piece.size() == skip) continue;
        iov[count].iov_base = const_cast<std::byte*>(piece.data() + skip);
        iov[count].iov_len = piece.size() - skip;
        total += iov[count].iov_len;
        ++count;
      }
      if (count == kMaxIov) break;
    }
    ssize_t n = SendLocked(iov, count);
    if (n < 0) return;
    AdvanceLocked(static_cast<size_t>(n), done);
    if (static_cast<size_t>(n) < total) {
      // The socket buffer is full; another call would only say EAGAIN.
      SetWantWriteLocked(true);
      return;
    }
  }
  SetWantWriteLocked(false);
}

ssize_t TcpConnection::SendLocked(iovec* iov, size_t count) {
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = count;
  for (;;) {
    ssize_t n = ::sendmsg(fd_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      SetWantWriteLocked(true);
    } else {
      StopWritingLocked(fmt::format("write to {} failed: {}", peer_name_, ErrnoText(errno)));
    }
    return -1;
  }
}

void TcpConnection::AdvanceLocked(size_t n, Completions& done) {
  size_t left = n;
  while (!queue_.empty()) {
    PendingSend& p = queue_.front();
    while (p.piece < p.piece_count()) {
      size_t rest = p.Piece(p.piece).size() - p.offset;
      if (left < rest) {
        p.offset += left;
        left = 0;
        break;
      }
      left -= rest;
      ++p.piece;
      p.offset = 0;
    }
    if (p.piece < p.piece_count()) break;
    if (p.msg.on_sent) done.push_back(std::move(p.msg.on_sent));
    ReleaseLocked(p);
    queue_.pop_front();
    room_cv_.notify_all();
    if (left == 0) break;
  }
}

void TcpConnection::StopWritingLocked(std::string reason) {
  write_error_ = std::move(reason);
  write_closed_ = true;
  SetWantWriteLocked(false);
  // The loop closes the connection; Enqueue/OnWritable fail the queue.
  ctx_.loop->Post([self = shared_from_this(), reason = write_error_] {
    self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
  });
}

void TcpConnection::SetWantWriteLocked(bool want) {
  if (want == want_write_ || !registered_) return;
  try {
    ctx_.loop->ModifyFd(watch_, EPOLLIN | (want ? EPOLLOUT : 0u));
    want_write_ = want;
  } catch (const IoError& e) {
    // Cannot happen for a registered socket; if it did, writes would stall
    // silently, so stop writing and let the loop close the connection.
    write_closed_ = true;
    write_error_ = fmt::format("cannot wait for {} to accept data: {}", peer_name_, e.what());
    ctx_.loop->Post([self = shared_from_this(), reason = write_error_] {
      self->Close(reason, std::make_exception_ptr(PeerLost(reason)));
    });
  }
}

void TcpConnection::Complete(Completions done, std::exception_ptr error) {
  if (done.empty()) return;
  // on_sent always runs on the loop thread, after the current callback, so a
  // caller never sees it run inside its own Send().
  ctx_.loop->Post([self = shared_from_this(), done = std::move(done), error]() mutable {
    self->RunCompletions(done, error);
  });
}

void TcpConnection::RunCompletions(Completions& done, std::exception_ptr error) {
  for (auto& fn : done) {
    try {
      fn(error);
    } catch (const std::exception& e) {
      ctx_.logger->Error("an on_sent callback for {} threw: {}", peer_name_, e.what());
    }
  }
}

}  // namespace tandem::net
