// The connections between a job's workers that every communicator of this
// process uses, and the matching of arriving pieces to posted receives.
// PeerMesh is one class; its member functions are defined by idea, each
// file opening with the part of the protocol it holds:
//
// - peer_mesh.cc: construction and the transport's entry point, which
//   hands each message type to its part;
// - peer_mesh_formation.cc: forming the mesh (hellos, their
//   acknowledgements, the same-host probe's verdicts);
// - peer_mesh_pieces.cc: sending pieces, posted receives and the matching
//   of arriving pieces to them, abandoning a receive;
// - peer_mesh_waits.cc: waiting for pieces (spinning, the doorbell, wait
//   reports) and completing a piece sent by reference;
// - peer_mesh_same_host_copy.cc: the same-host copy (probes, pieces sent
//   by reference and their answers);
// - peer_mesh_mailbox.cc: writing to the peers' mailboxes and draining
//   this process's;
// - peer_mesh_call_checks.cc: call checks, mismatches and crossed orders;
// - peer_mesh_failure.cc: failure (lost links, the first failure and the
//   later news, closing every link); mesh_failure.h: the failure's kinds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/doorbell.h"
#include "base/logger.h"
#include "base/wait_report.h"
#include "cluster/cluster_messages.h"
#include "collective/call_description.h"
#include "collective/collective_messages.h"
#include "collective/mesh_failure.h"
#include "collective/same_host_mailbox.h"
#include "net/metered_transport.h"
#include "net/transport.h"

namespace tandem::collective {

/// Thread-safety: transport callbacks run on the transport's thread; every
/// other method may be called from any thread. All state is guarded by
/// `mu_`; nothing is sent and no payload is copied while it is held. The
/// connection tables and the mailbox links are written only while the mesh
/// forms (Connect() and the formation callbacks) and read-only after, but
/// for a departed worker's rank when a worker takes its place (ExpectJoin
/// and its hellos): no communicator then in use has that rank, and the
/// regroup that makes one waits for its links (WaitJoined). One
/// thread at a time drains the mailbox (`draining_`).
class PeerMesh final : public net::TransportHandler {
 public:
  struct Options {
    int connections_per_peer = 1;
    std::chrono::milliseconds connect_timeout{120000};
    /// TANDEM_COLLECTIVE_SAME_HOST_COPY: offer and use the same-host copy.
    bool same_host_copy = true;
    /// TANDEM_COLLECTIVE_SAME_HOST_COPY=host: use it only with workers that
    /// announced this worker's host address, not with every process whose
    /// memory this one can read (a bed of network namespaces, whose
    /// "hosts" share one kernel).
    bool copy_same_address_only = false;
    /// TANDEM_COLLECTIVE_MAILBOX: share a mailbox with the peers the
    /// same-host copy reaches (needs same_host_copy).
    bool mailbox = true;
    /// TANDEM_COLLECTIVE_SPIN_US: how long a wait polls (yielding) before
    /// it sleeps on the doorbell; 0 sleeps at once. Unset: kMailboxSpin for
    /// a wait whose pieces all come from mailbox peers; kTcpSpin for one
    /// whose pieces all come over TCP, read by the waiting thread, while
    /// such waits have lately been shorter than kTcpSpin; else 0.
    std::optional<std::chrono::microseconds> spin;
    /// TANDEM_COLLECTIVE_READ_WHILE_WAITING: a wait for pieces that come
    /// over TCP reads the connections on its own thread
    /// (net::Transport::ReadWhileWaiting) instead of sleeping until the
    /// transport's thread has read them and rung the doorbell.
    bool read_while_waiting = true;
    /// TANDEM_WAIT_REPORT_SECONDS: how often forming the mesh, or a wait
    /// for pieces, logs what it still waits for.
    std::chrono::milliseconds wait_report_interval = base::kDefaultWaitReportInterval;
    /// TANDEM_MIN_WORKERS: with 1 <= min_workers < the worker count the job
    /// is elastic, and a lost link does not fail the mesh at once: the
    /// scheduler's verdict decides (ChangeMembership, or the job's failure).
    int min_workers = 0;
    /// How long an elastic mesh waits for that verdict after a link is lost
    /// before it fails as a fixed one does (PS_HEARTBEAT_TIMEOUT + 5 s: a
    /// frozen or cut-off worker is let go after the heartbeat time-out).
    std::chrono::milliseconds verdict_wait{15000};
  };
  /// The polling of waits on mailbox peers unless TANDEM_COLLECTIVE_SPIN_US
  /// says otherwise (docs/collectives.md "Waiting": 4 ranks on 2 cores,
  /// 4 KiB allreduce 50 -> 34 us, 1 MiB 754 -> 531 us).
  static constexpr std::chrono::microseconds kMailboxSpin{50};
  /// The polling of waits whose pieces come over TCP, while the average of
  /// such waits (kTcpWaitWeight) stays below it: a peer that answers within
  /// it is seen without a sleeping thread's wake-up (2 ranks on 2 cores,
  /// 4 KiB allreduce 65 -> 32 us); where ranks share cores the waits are
  /// longer, and the polling, which would take the core the peers need,
  /// stops (docs/collectives.md "Waiting").
  static constexpr std::chrono::microseconds kTcpSpin{50};
  /// The weight of the latest wait in that average: 1/kTcpWaitWeight.
  static constexpr int64_t kTcpWaitWeight = 4;
  /// How often a wait that reads the connections itself looks at what
  /// other threads report (a failure found by the membership's timers).
  static constexpr std::chrono::milliseconds kReadSlice{5};
  /// Pieces up to this size are read by a waiting thread itself; larger
  /// ones by the transport's thread, overlapping the waiter's arithmetic.
  static constexpr size_t kReadHereMaxBytes = 64 << 10;

  /// `transport`, `log` and `traffic` (null: nothing counted) are borrowed
  /// and must outlive the mesh; `traffic` counts the mailbox's records as
  /// the transport's meter counts messages. The caller registers the mesh
  /// with its dispatcher for msg::kHello..kLast before this node becomes
  /// known to its peers.
  PeerMesh(Options options, net::Transport& transport, base::Logger& log,
           net::TrafficMeter* traffic = nullptr);
  ~PeerMesh() override;

  /// Forms the mesh over the workers of `table`, this node being worker
  /// `self_rank` with node id `self_id`. Blocks until complete. Throws
  /// Timeout (naming the ranks missing), PeerLost, IoError, AuthFailed.
  /// Call once, from one thread.
  void Connect(const cluster::NodeTable& table, int self_rank, int self_id);

  /// Elastic jobs (docs/elastic.md, "Workers that join"): forms the links
  /// of a worker admitted into the running job at membership epoch
  /// `epoch`, in a departed worker's place. It connects to every worker of
  /// `members` (worker ranks; this one's too), lower and higher, with a
  /// join hello, and the others take it once they heard of the admission
  /// (ExpectJoin). Workers not in `members` count as departed. These links
  /// carry pieces over TCP only: this worker offers no same-host copy and
  /// shares no mailbox. Blocks until every link is acknowledged; throws as
  /// Connect() does. Call once, instead of Connect().
  void ConnectJoining(const cluster::NodeTable& table, int self_rank, int self_id, uint32_t epoch,
                      const std::vector<int>& members);
  /// Elastic jobs: `node` was admitted at membership epoch `epoch` in the
  /// place of departed worker node.rank (`text` says so). Retires every
  /// communicator of an older epoch (as ChangeMembership does), forgets the
  /// departed worker's links, mailbox and same-host copy, and takes the
  /// new worker's join hellos from now on (those that came first too). Any
  /// thread, also the membership's callback.
  void ExpectJoin(uint32_t epoch, const NodeInfo& node, const std::string& text);
  /// Waits until every worker admitted through ExpectJoin has all its
  /// links (or left again), the mesh failed, or `deadline`. Throws Timeout
  /// naming the workers not heard from, or the mesh's failure.
  void WaitJoined(std::chrono::steady_clock::time_point deadline);
  /// The workers admitted through ExpectJoin at an epoch after `epoch`,
  /// ascending. Any thread.
  std::vector<int> JoinedSince(uint32_t epoch) const;

  /// Worker count and this node's worker rank; valid after Connect().
  int size() const { return static_cast<int>(workers_.size()); }
  int rank() const { return self_rank_; }
  /// "rank 3 (127.0.0.5:41234)", for messages.
  std::string Describe(int rank) const;
  /// The host (address) worker `rank` announced (the one that took its
  /// place, after ExpectJoin); valid after Connect(). Throws
  /// InvalidArgument outside 0..size()-1.
  const std::string& Host(int rank) const;

  /// Pieces up to this size are copied into the message and written from
  /// the calling thread; larger ones are sent zero-copy from the caller's
  /// memory by the transport's thread.
  static constexpr size_t kCopySendBytes = 32 << 10;
  /// Larger worlds share no mailbox (a ring per worker rank would map
  /// ring bytes x workers in every process).
  static constexpr size_t kMaxMailboxRings = 256;

  /// Queues `bytes` (borrowed until `on_sent` ran) for worker `peer`.
  /// `on_sent` always runs, with the error if the send failed (a small
  /// piece's loss shows as the connection's loss instead). A piece sent by
  /// reference (same-host copy) is done once the peer copied it, so the
  /// bytes stay borrowed until the peer waited for that piece.
  ///
  /// With `ring_later`, a piece written into the peer's mailbox does not
  /// ring its doorbell: Send returns true and the caller owes Ring(peer)
  /// (OpContext rings before it waits, so that the sends of one step wake
  /// each peer once, after the last of them, and a woken peer does not
  /// preempt this thread between them). Else it returns false.
  bool Send(int peer, const MessageKey& key, std::span<const std::byte> bytes,
            std::function<void(std::exception_ptr)> on_sent, bool ring_later = false);
  /// Rings worker `peer`'s mailbox doorbell (owed after Send returned true).
  void Ring(int peer);

  /// Posts the receive of (peer, key) into `dest` (borrowed until Wait or
  /// Abandon returned). Throws InvalidArgument if it is already posted.
  void Post(int peer, const MessageKey& key, std::span<std::byte> dest);

  /// A piece: the worker it comes from and its key.
  struct SlotKey {
    int peer;
    MessageKey key;
    auto operator<=>(const SlotKey&) const = default;
  };

  /// kMismatch: the operation of the awaited pieces is mismatched
  /// (CallMismatched); the caller resolves it.
  enum class WaitResult { kDone, kTimedOut, kFailed, kMismatch };
  /// Waits until the receive (peer, key) is complete, the mesh failed, or
  /// `deadline`. kDone forgets the receive; throws ProtocolError (naming the
  /// peer and both sizes) when the peer sent a payload of the wrong size.
  WaitResult Wait(int peer, const MessageKey& key, std::chrono::steady_clock::time_point deadline);
  /// As Wait, for whichever of the posted receives `pieces` completes first
  /// (earlier entries win when several are complete); with kDone, the index
  /// of the piece, which is forgotten (the others stay posted).
  std::pair<WaitResult, size_t> WaitAny(std::span<const SlotKey> pieces,
                                        std::chrono::steady_clock::time_point deadline);

  /// Waits until `ready()` is true or `deadline`, draining the mailbox and
  /// sleeping on the doorbell in between; returns ready() at the end.
  /// `ready` must not block; whatever changes its answer must call Wake()
  /// afterwards (as the on_sent callbacks of OpContext do).
  bool WaitUntil(const std::function<bool()>& ready,
                 std::chrono::steady_clock::time_point deadline);

  /// Wakes every wait after a change of state (rings the doorbell and
  /// notifies the formation's condition variable). Any thread.
  void Wake();

  /// True when the posted receive (peer, key) is complete (for errors that
  /// name the peers not heard from).
  bool Complete(int peer, const MessageKey& key) const;

  /// True when Wait for (peer, key) would not wait for the network: the
  /// piece arrived, posted or not (or came by reference, for Wait to copy).
  bool Ready(int peer, const MessageKey& key) const;

  /// Forgets a posted receive that will not be waited for. If the transport
  /// is filling it right now, waits until the piece is complete; after 2 s
  /// closes the peer's connections, which ends the filling.
  void Abandon(int peer, const MessageKey& key);

  /// Marks the mesh failed (the first failure wins) and wakes every wait.
  /// Cheap and callable from any thread, also inside another component's
  /// callback: it sends nothing and closes nothing.
  void Fail(FailureKind kind, const std::string& text);
  /// The failure, if any.
  std::optional<MeshFailure> failure() const;

  /// Elastic jobs (docs/elastic.md, "Elastic collectives"): worker
  /// `departed` left, and the membership's epoch is now `epoch`; `text`
  /// says who and why. Every communicator registered for an older epoch is
  /// retired: its waits end, its later operations fail with
  /// MembershipChanged, the pieces of it that arrived or arrive are
  /// dropped (those sent by reference answered, so their senders let go),
  /// and the departed worker's links are closed. Epochs at or below the
  /// current one are ignored. Any thread, also the membership's callback.
  void ChangeMembership(uint32_t epoch, int departed, const std::string& text);
  /// Whether 1 <= Options::min_workers < size(); valid after Connect().
  bool elastic() const { return elastic_; }
  /// Options::verdict_wait.
  std::chrono::milliseconds verdict_wait() const { return options_.verdict_wait; }
  /// The membership epoch the mesh last heard of (0: no change).
  uint32_t epoch() const { return epoch_seen_.load(std::memory_order_acquire); }
  /// Whether worker `rank` left the job (ChangeMembership).
  bool Departed(int rank) const;
  /// The text of the change that retired `communicator`, or nothing while
  /// it is current. Lock-free until a change happened.
  std::optional<std::string> Retired(uint32_t communicator) const;
  /// The failure once news has had `settle` since the first of it to
  /// arrive (so that an error can name every lost peer), or nothing.
  std::optional<MeshFailure> SettledFailure(std::chrono::milliseconds settle) const;

  /// After a failure: answers every piece sent by reference that was not
  /// copied (it never will be), so that its sender lets go of the memory.
  /// Any thread; a no-op while the mesh is healthy.
  void ReleaseUncopiedRefs();

  /// Closes every mesh connection (a last resort after a failure, when sends
  /// do not complete): sends in flight fail and no more payload lands in
  /// posted buffers once OnDisconnected ran.
  void CloseAll();

  /// How long a mismatch waits for every member's word before the error
  /// names the ones not heard from.
  static constexpr std::chrono::milliseconds kMismatchPatience{500};
  /// How long a wait lasts before it looks for a crossed order of
  /// operations between communicators.
  static constexpr std::chrono::milliseconds kCrossWait{400};
  /// How often a wait for pieces that goes on logs what it waits for.
  /// Call notices about more communicators than this (a broken peer's) are
  /// ignored, so that they cannot grow the call states without bound.
  static constexpr size_t kMaxCommunicators = 1 << 16;
  /// Pieces of more operations than this that this worker has not begun
  /// (per communicator, operation and sender) are a broken peer's: the
  /// mesh fails rather than keep them.
  static constexpr size_t kMaxEarlyOperations = 1 << 16;
  /// Join hellos kept while their admission's notice is on its way; more
  /// are refused (a broken or hostile peer's).
  static constexpr size_t kMaxParkedJoinHellos = 1024;

  /// Turns the call checks off or on again, for a benchmark that measures
  /// their cost only: every member must switch alike, between operations
  /// (after a barrier), never a user setting.
  void SetCallChecksForBenchmark(bool on) { call_checks_.store(on); }
  /// Whether operations check their calls (true unless disabled above).
  bool call_checks() const { return call_checks_.load(std::memory_order_relaxed); }

  /// Makes communicator `communicator` over `members` (worker ranks, in
  /// group-rank order) known, so that notices about it reach its members.
  /// Any thread; once per communicator. Returns its call state, whose
  /// `user_waits` the communicator counts (see CallState).
  struct CallState;
  /// `epoch`: the membership epoch the communicator was made for; one
  /// made for an epoch older than the mesh's is retired from the start.
  CallState* RegisterCommunicator(uint32_t communicator, const std::vector<int>& members,
                                  uint32_t epoch = 0);
  /// This process begins operation `sequence` of `communicator` as `call`:
  /// pieces of it that arrived earlier are checked now, later ones as they
  /// arrive. Called by the operation's thread before it sends or posts
  /// anything. `call` is encoded into `buffer` before the mesh's lock is
  /// taken, and the buffer swapped with the one the mesh held, which the
  /// caller keeps for its next call (neither allocates once warm).
  struct Begun {
    CallState* state;      // for EndCall and CompleteCall
    uint64_t fingerprint;  // the call's, for this rank's pieces
    bool fine;             // false: already known to be mismatched
  };
  Begun BeginCall(uint32_t communicator, uint64_t sequence, const CallDescription& call,
                  std::string& buffer);
  /// The operation begun last on the communicator of `state` (BeginCall's)
  /// ended, either way; `completed`: CompleteCall returned true for it
  /// already. Takes no lock: it runs once per operation.
  static void EndCall(CallState* state, bool completed);
  /// The operation of `state` completed: false when it was found
  /// mismatched first (the caller throws). From then on, news of a
  /// mismatch of it fails the mesh instead. Takes no lock.
  static bool CompleteCall(CallState* state);
  /// True once operation `sequence` of `communicator` is known to be
  /// mismatched (by a piece, a member's notice, or a crossed order). Takes
  /// no lock while no mismatch is known in this process.
  bool CallMismatched(uint32_t communicator, uint64_t sequence) const;
  /// After CallMismatched: sends this process's word on the operation to
  /// its members (once), waits until every member's arrived or
  /// kMismatchPatience passed since the mismatch was known here, and
  /// returns the error text (MismatchMessage, or the crossed order's).
  std::string ResolveMismatch(uint32_t communicator, uint64_t sequence);

  /// Whether worker `rank` offered the same-host copy (its probe, or this
  /// process's setting): what every worker knows alike of every other once
  /// the mesh formed, unlike whether a copy works (which each side finds
  /// out for itself). Valid after Connect().
  bool OffersCopy(int rank) const;

  /// How many peers this process sends by reference (they read its memory)
  /// and reads by reference; for logs and tests.
  std::pair<int, int> SameHostPeers() const;

  /// How many peers this process writes through their mailbox; valid after
  /// Connect(). For logs and tests.
  int MailboxPeers() const;
  /// How many records found a peer's ring full and went over TCP instead.
  uint64_t MailboxFullCount() const { return mailbox_full_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Slot {
    // kRef: a kDataRef arrived; copied by Wait once posted.
    enum class State { kPosted, kFilling, kArrived, kRef, kDone } state = State::kPosted;
    bool posted = false;
    std::span<std::byte> dest;             // kPosted, kFilling, kDone, kRef once posted
    std::unique_ptr<std::byte[]> arrived;  // kArrived
    size_t arrived_size = 0;               // kArrived
    std::string error;                     // kDone with a bad payload
    uint64_t ref_address = 0;              // kRef
    uint64_t ref_length = 0;               // kRef
    net::ConnectionId ref_link = 0;        // kRef: where kDataRefDone goes
  };
  struct Link {
    int rank = -1;
    bool open = true;
    bool acked = false;  // outgoing links: the peer's kHelloAck arrived
  };
  // What this process knows of one communicator's calls (call checks).
  // Guarded by mu_, but for the atomics, which the operation's thread and
  // the blocking callers write without it. (Public, for them to hold.)
 public:
  struct CallState {
    static constexpr uint8_t kIdle = 0, kRunning = 1, kMismatched = 2;
    std::vector<int> members;  // worker ranks; empty until registered
    uint32_t epoch = 0;        // the membership epoch it was made for
    bool begun = false;        // an operation was begun
    // The latest operation: kRunning from BeginCall until it completes
    // (CompleteCall, EndCall: kIdle) or is found mismatched first
    // (kMismatched); a compare-and-swap decides which came first.
    std::atomic<uint8_t> status{kIdle};
    uint64_t sequence = 0;     // the latest begun
    uint64_t fingerprint = 0;  // its fingerprint and encoded description
    std::string description;
    std::atomic<std::chrono::steady_clock::rep> idle_since{0};  // steady_clock ticks
    // User threads blocked in a call of this communicator (a blocking
    // operation, or a handle's Wait): for the crossed-order check.
    std::atomic<int> user_waits{0};
    // The mismatched operation, once known, and when it was learnt.
    std::optional<uint64_t> mismatch;
    std::chrono::steady_clock::time_point mismatch_at{};
    bool notified = false;              // this process's description was sent
    bool told_not_reached = false;      // ... or that it had not reached it
    std::map<int, CallNotice> notices;  // by worker rank, for `mismatch`
    std::string abort_text;             // why it cannot complete, if told
    // Crossed-order check (for the operation at `sequence`): when each
    // awaited peer was last asked whether it is blocked elsewhere, and the
    // peers that said so (peer -> the sequence asked about).
    std::map<int, std::chrono::steady_clock::time_point> probed;
    std::map<int, uint64_t> blocked_peers;
  };

 private:
  // A piece that arrived ahead of its operation: whose, its fingerprint and
  // when.
  struct EarlyPiece {
    uint32_t communicator = 0;
    uint64_t sequence = 0;
    int peer = -1;
    uint64_t call = 0;
    std::chrono::steady_clock::time_point at{};
  };

  // net::TransportHandler (peer_mesh.cc; PayloadDestination in
  // peer_mesh_pieces.cc, OnDisconnected in peer_mesh_failure.cc).
  void OnConnected(net::ConnectionId id, const net::PeerInfo& peer) override;
  std::span<std::byte> PayloadDestination(net::ConnectionId id, const net::Header& h,
                                          const std::string& meta) override;
  void OnMessage(net::ConnectionId id, net::Message&& msg) override;
  void OnDisconnected(net::ConnectionId id, const std::string& reason) override;
  base::Doorbell& Bell() { return *doorbell_.load(std::memory_order_acquire); }

  // Formation (peer_mesh_formation.cc).
  // Connect()'s steps: the tables sized for `table`'s workers (and this
  // process's mailbox); the hellos to every lower rank; the ranks whose
  // links are not complete yet (requires mu_); the wait until none is,
  // which throws as Connect() does; the line saying what formed.
  void SetUpTables(const cluster::NodeTable& table, int self_rank, int self_id);
  // Opens the connections to each of `peers` and sends the hellos
  // (`joined_epoch` as in Hello).
  void SendHellos(const std::vector<int>& peers, uint32_t joined_epoch,
                  std::chrono::steady_clock::time_point deadline);
  // A join hello (Hello::joined_epoch > 0) from a worker ExpectJoin
  // admitted: records the link and returns true; false when it is not
  // (yet) admitted, or the hello is malformed (then `refuse` says why).
  bool AcceptJoinHelloLocked(net::ConnectionId id, const Hello& hello,
                             std::string& refuse);  // requires mu_
  // The entry of worker `rank` (ExpectJoin replaces a departed one's).
  const NodeInfo& Info(int rank) const {
    return *info_[static_cast<size_t>(rank)].load(std::memory_order_acquire);
  }
  std::vector<int> MissingLocked();
  void WaitFormedLocked(std::unique_lock<std::mutex>& lock,
                        std::chrono::steady_clock::time_point deadline);
  void LogFormedLocked();
  // Records the link; returns nothing (and fails the mesh) for a bad hello,
  // else whether this process can read the peer's memory.
  std::optional<bool> AcceptHelloLocked(net::ConnectionId id, const Hello& hello);  // mu_
  void SendAck(net::ConnectionId id, bool reads_you);
  // Handle kHello, kHelloAck and kCopyStatus; throw ProtocolError for a
  // malformed message.
  void OnHello(net::ConnectionId id, const net::Message& m);
  void OnHelloAck(net::ConnectionId id, const net::Message& m);
  void OnCopyStatus(net::ConnectionId id, const net::Message& m);

  // Pieces (peer_mesh_pieces.cc).
  // Handles kData; throws ProtocolError for a malformed message.
  void OnData(net::ConnectionId id, net::Message&& m);
  // A piece's bytes from `peer` (the mailbox's, or a TCP payload the
  // transport did not place; `owned`, when given, holds `bytes` and is kept
  // instead of a copy): fills the posted receive or keeps them. Throws
  // ProtocolError for a piece sent twice.
  void DeliverPiece(int peer, const MessageKey& key, std::span<const std::byte> bytes,
                    std::unique_ptr<std::byte[]> owned = nullptr);
  int OpenLinksLocked(int peer) const;  // requires mu_

  // Waits (peer_mesh_waits.cc).
  // One look at a posted receive (under `lock`, which it may release to
  // copy a piece sent by reference): kDone forgets it; throws ProtocolError
  // for a piece of the wrong size.
  enum class Progress { kPending, kDone, kFailed };
  Progress TryCompleteLocked(std::unique_lock<std::mutex>& lock, const SlotKey& sk);

  // Same-host copy (peer_mesh_same_host_copy.cc).
  // This process's probe (pid 0 without same-host copy).
  CopyProbe OwnProbe() const;
  // True when `probe`, worker `peer`'s, names a process whose cookie this
  // process can read (and, with copy_same_address_only, `peer` announced
  // this worker's host).
  bool CanRead(const CopyProbe& probe, int peer) const;
  // Copies `dest.size()` bytes at `address` of worker `peer`'s memory;
  // returns the error text (naming the peer), or empty.
  std::string CopyFromPeer(int peer, uint64_t address, std::span<std::byte> dest,
                           FailureKind& kind) const;
  // Takes the by-reference sends to `peer` still unanswered (requires mu_).
  std::vector<std::function<void(std::exception_ptr)>> TakeRefsLocked(int peer);
  void SendRefDone(int peer, net::ConnectionId id, const MessageKey& key);
  // Handle kDataRef and kDataRefDone.
  void OnDataRef(net::ConnectionId id, const net::Message& m);
  void OnDataRefDone(net::ConnectionId id, const net::Message& m);
  // The two above once the sender's rank is known (also from the mailbox;
  // `link` is where an answer goes over TCP).
  void AcceptDataRef(int peer, net::ConnectionId link, const DataRef& ref);
  void AcceptDataRefDone(int peer, const MessageKey& key);
  // The worker rank at the other end of mesh connection `id` (takes mu_);
  // throws ProtocolError for a connection that sent no hello.
  int LinkRank(net::ConnectionId id) const;

  // Mailbox (peer_mesh_mailbox.cc).
  // Drains every ring of this process's mailbox (if another thread is not
  // doing so already) and delivers the records; rings the doorbell when
  // any arrived. A malformed ring fails the mesh. Never holds mu_ on entry.
  void DrainMailbox();
  void DeliverRecord(int peer, const MailboxRecord& r);
  // Writes a record into `peer`'s mailbox: false when there is none or it
  // is full (the caller sends over TCP instead).
  bool WriteMailbox(int peer, uint16_t type, const MessageKey& key,
                    std::span<const std::byte> payload, uint64_t address = 0, uint64_t length = 0,
                    bool ring = true);
  // Maps the mailbox of the peer whose probe this process can read
  // (requires mu_, during formation); failing that, the pair uses TCP.
  void OpenMailboxLocked(int peer, const CopyProbe& probe);

  // Call checks (peer_mesh_call_checks.cc).
  // Checks an arriving piece's fingerprint (requires mu_): false when the
  // piece must be dropped unused (its operation is mismatched).
  bool AdmitLocked(int peer, const MessageKey& key);
  // An operation this process completed turned out mismatched (`why`):
  // nothing can be undone, so the mesh fails and no later operation runs.
  void FailCompletedLocked(uint32_t communicator, const CallState& st, uint64_t sequence,
                           const std::string& why);
  // Marks operation `sequence` of `st` (communicator `communicator`)
  // mismatched and wakes every wait; if this process already completed it,
  // fails the mesh instead (FailCompletedLocked, with `why`).
  void MarkMismatchLocked(uint32_t communicator, CallState& st, uint64_t sequence,
                          const std::string& why, std::string abort_text = {});
  // A wait on `pieces` that has lasted kCrossWait: the crossed order of
  // operations it found, if any, after marking the operation and queueing
  // the notices to send (requires mu_).
  std::optional<std::string> CrossedOrderLocked(std::span<const SlotKey> pieces,
                                                std::vector<std::pair<int, CallNotice>>& out);
  void OnCallNotice(net::ConnectionId id, const net::Message& m);
  // Sends notices (any thread, never under mu_); a lost link drops them.
  void SendNotices(const std::vector<std::pair<int, CallNotice>>& notices);

  // Failure (peer_mesh_failure.cc).
  void FailLocked(FailureKind kind, const std::string& text);  // requires mu_
  // Whether `communicator` is registered for an epoch older than the
  // mesh's (requires mu_).
  bool RetiredLocked(uint32_t communicator) const;
  // Elastic: fails the mesh for every lost link whose verdict did not come
  // within Options::verdict_wait (requires mu_).
  void CheckVerdictsLocked();

  const Options options_;
  net::Transport& transport_;
  base::Logger& log_;
  net::TrafficMeter* const traffic_;

  // Written in Connect() before any operation; read-only afterwards.
  std::vector<NodeInfo> workers_;  // by rank
  // Each rank's current entry: workers_'s, or one in joined_infos_ once a
  // worker took a departed one's place (a deque, so entries never move).
  std::unique_ptr<std::atomic<const NodeInfo*>[]> info_;
  std::deque<NodeInfo> joined_infos_;  // guarded by mu_
  // This process joined a running job (ConnectJoining): no same-host copy
  // or mailbox on its links.
  std::atomic<bool> joining_{false};
  // A joining process's own links formed (end of ConnectJoining): from then
  // on it takes the join hellos of workers admitted after it, as every
  // member does. Guarded by mu_.
  bool join_formed_ = false;
  // Elastic: the workers admitted into departed ones' places, by rank,
  // with the epoch of their latest admission (guarded by mu_), and join
  // hellos that came before the admission's notice.
  std::map<int, uint32_t> joined_at_;
  std::vector<std::pair<net::ConnectionId, Hello>> join_hellos_;
  std::vector<std::vector<net::ConnectionId>> outgoing_;  // [peer][k]
  int self_rank_ = -1;
  int self_id_ = -1;

  // This process's mailbox (null without one) and the peers' (by rank; null
  // where the pair uses TCP). The doorbell every wait sleeps on: the
  // mailbox's once it exists, else a private one.
  std::unique_ptr<MailboxRegion> mailbox_;
  std::atomic<MailboxRegion*> region_{nullptr};  // mailbox_, for DrainMailbox
  std::vector<std::unique_ptr<MailboxLink>> mailbox_to_;
  base::Doorbell own_doorbell_;
  std::atomic<base::Doorbell*> doorbell_{&own_doorbell_};
  std::atomic_flag draining_ = ATOMIC_FLAG_INIT;
  std::vector<char> ring_broken_;  // by rank; touched only by the drainer
  std::atomic<uint64_t> mailbox_full_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;               // Connect() and Abandon() sleep on it
  std::map<net::ConnectionId, Link> links_;  // every mesh connection, both directions
  std::map<SlotKey, Slot> slots_;
  std::atomic<bool> call_checks_{true};
  // The moving average of waits over TCP read by the waiting thread
  // (nanoseconds): whether the next one polls (kTcpSpin).
  std::atomic<int64_t> tcp_wait_average_ns_{0};
  std::atomic<bool> any_mismatch_{false};  // a CallState has `mismatch` set
  std::map<uint32_t, CallState> calls_;    // by communicator
  // Pieces that arrived before their operation began, one entry per
  // (communicator, sequence, peer): few, so a vector.
  std::vector<EarlyPiece> early_;
  // Hellos that arrived before Connect() knew the node table.
  std::vector<std::pair<net::ConnectionId, Hello>> early_hellos_;
  std::optional<MeshFailure> failure_;
  bool closing_ = false;
  // Elastic jobs: whether the mesh is elastic (set in Connect), the latest
  // membership epoch (written under mu_, read without it for the cheap
  // "no change yet" test), each change's text by epoch, the workers that
  // left (by rank), and the links lost to workers not (yet) known to have
  // left: rank -> (what was lost, when).
  bool elastic_ = false;
  std::atomic<uint32_t> epoch_seen_{0};
  std::map<uint32_t, std::string> changes_;
  std::vector<char> departed_;
  std::map<int, std::pair<std::string, std::chrono::steady_clock::time_point>> lost_links_;
  // Same-host copy: the cookie peers read, whether each peer reads this
  // process's memory (it said so), and the pid of each peer whose memory
  // this process reads (0: it does not); the by-reference sends awaiting
  // kDataRefDone.
  const uint64_t cookie_;
  std::vector<char> peer_reads_me_;  // by rank
  std::vector<int32_t> peer_pids_;   // by rank
  std::vector<char> peer_offers_;    // by rank: its probe offered the copy
  std::vector<char> status_heard_;   // by rank: its kCopyStatus arrived (higher ranks)
  std::map<SlotKey, std::function<void(std::exception_ptr)>> refs_out_;
};

}  // namespace tandem::collective
