#include "collective/same_host_mailbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "tandem/error.h"

#if defined(__SANITIZE_THREAD__)
#define TANDEM_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_UNDER_TSAN 1
#endif
#endif
#ifndef TANDEM_UNDER_TSAN
#define TANDEM_UNDER_TSAN 0
#endif
#if TANDEM_UNDER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace tandem::collective {

namespace {

// Layout (docs/protocol-collective.md, "Mailbox"): a 128-byte region
// header, then per worker rank a 128-byte ring control block followed by
// the ring's bytes.
constexpr uint64_t kMagic = 0x31786f626d646e74ULL;  // "tndmbox1"
constexpr uint32_t kVersion = 2;
constexpr size_t kRegionHeaderBytes = 128;
constexpr size_t kDoorbellOffset = 64;
constexpr size_t kControlBytes = 128;
constexpr size_t kTailOffset = 64;
constexpr size_t kRecordHeaderBytes = 56;

struct RegionHeader {
  uint64_t magic;
  uint64_t cookie;
  uint32_t version;
  uint32_t rings;
  uint64_t ring_bytes;
};

// A record's fixed part, little-endian as the host (byte_io.h asserts it).
struct RecordHeader {
  uint32_t size;
  uint16_t type;  // 0: padding to the ring's end
  uint16_t reserved;
  uint32_t communicator;
  uint32_t payload_bytes;
  uint64_t sequence;
  uint64_t tag;
  uint64_t address;
  uint64_t length;
  uint64_t call;  // MessageKey::call
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

#if TANDEM_UNDER_TSAN
// The word that stands for ring `rank` of the region tagged `cookie`.
void* RingSyncWord(uint64_t cookie, size_t rank) {
  static std::byte words[1024];
  return &words[(cookie ^ (rank * 0x9E3779B97F4A7C15ull)) % sizeof words];
}
#endif

// ThreadSanitizer and the rings' ordering. A ring's writer publishes its
// head with a release store and the reader loads it with acquire; that
// orders everything the writer did before (such as reading a user buffer
// into a record) before everything the reader does after (such as a reply
// that lets the writer's buffer be overwritten). Where TSan runs, every
// rank is a thread of one test process, and the owner and each peer map
// the region at different addresses, so TSan cannot pair the two halves
// and reports the buffers this ordering protects. Under TSan both sides
// therefore also release and acquire a word of this process that stands
// for the ring (two rings sharing a word only add orderings).
void TsanRelease([[maybe_unused]] uint64_t cookie, [[maybe_unused]] size_t rank) {
#if TANDEM_UNDER_TSAN
  __tsan_release(RingSyncWord(cookie, rank));
#endif
}

void TsanAcquire([[maybe_unused]] uint64_t cookie, [[maybe_unused]] size_t rank) {
#if TANDEM_UNDER_TSAN
  __tsan_acquire(RingSyncWord(cookie, rank));
#endif
}

size_t RegionBytes(size_t rings, size_t ring_bytes) {
  return kRegionHeaderBytes + rings * (kControlBytes + ring_bytes);
}

std::atomic<uint64_t>& Head(std::byte* base, size_t ring_bytes, size_t rank) {
  return *std::launder(reinterpret_cast<std::atomic<uint64_t>*>(
      base + kRegionHeaderBytes + rank * (kControlBytes + ring_bytes)));
}

std::atomic<uint64_t>& Tail(std::byte* base, size_t ring_bytes, size_t rank) {
  return *std::launder(reinterpret_cast<std::atomic<uint64_t>*>(
      base + kRegionHeaderBytes + rank * (kControlBytes + ring_bytes) + kTailOffset));
}

std::byte* RingData(std::byte* base, size_t ring_bytes, size_t rank) {
  return base + kRegionHeaderBytes + rank * (kControlBytes + ring_bytes) + kControlBytes;
}

// Backs [begin, begin + bytes) of a shared mapping with memory without
// changing a byte of it: MADV_POPULATE_WRITE (Linux 5.14), else a read of
// every page.
void PopulateRange(std::byte* begin, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(begin) + bytes + page - 1) & ~(page - 1);
  if (::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0) return;
  for (uintptr_t a = std::max(from, reinterpret_cast<uintptr_t>(begin)); a < to; a += page) {
    (void)*reinterpret_cast<volatile const std::byte*>(a);
  }
}

base::DoorbellWords* DoorbellAt(std::byte* base) {
  return std::launder(reinterpret_cast<base::DoorbellWords*>(base + kDoorbellOffset));
}

bool KnownType(uint16_t type) {
  return type == msg::kData || type == msg::kDataRef || type == msg::kDataRefDone;
}

}  // namespace

size_t MailboxRecordSize(size_t payload_bytes) {
  return (kRecordHeaderBytes + payload_bytes + 7) & ~size_t{7};
}

void WriteMailboxRecord(std::byte* at, const MailboxRecord& record) {
  const RecordHeader h{static_cast<uint32_t>(MailboxRecordSize(record.payload.size())),
                       record.type,
                       0,
                       record.key.communicator,
                       static_cast<uint32_t>(record.payload.size()),
                       record.key.sequence,
                       record.key.tag,
                       record.address,
                       record.length,
                       record.key.call};
  std::memcpy(at, &h, sizeof h);
  if (!record.payload.empty()) {
    std::memcpy(at + sizeof h, record.payload.data(), record.payload.size());
  }
}

ParsedMailboxRecord ParseMailboxRecord(std::span<const std::byte> published, size_t to_end) {
  if (published.size() < 8 || published.size() > to_end) {
    throw ProtocolError(fmt::format("mailbox record: {} bytes published with {} to the ring's end",
                                    published.size(), to_end));
  }
  RecordHeader h{};
  std::memcpy(&h, published.data(), 8);
  ParsedMailboxRecord out;
  out.size = h.size;
  if (h.size < 8 || h.size % 8 != 0 || h.size > published.size()) {
    throw ProtocolError(fmt::format(
        "mailbox record: size {} is not a multiple of 8 between 8 and the {} bytes published",
        h.size, published.size()));
  }
  if (h.type == 0) {
    if (h.size != to_end) {
      throw ProtocolError(fmt::format(
          "mailbox record: padding of {} bytes does not reach the ring's end ({} bytes away)",
          h.size, to_end));
    }
    out.padding = true;
    return out;
  }
  if (!KnownType(h.type) || h.reserved != 0) {
    throw ProtocolError(
        fmt::format("mailbox record: type {} (reserved {}) is not a collective data, data ref or "
                    "data ref done",
                    h.type, h.reserved));
  }
  if (h.size < kRecordHeaderBytes) {
    throw ProtocolError(fmt::format("mailbox record: size {} is below the {}-byte header", h.size,
                                    kRecordHeaderBytes));
  }
  std::memcpy(&h, published.data(), kRecordHeaderBytes);
  if (h.type != msg::kData && h.payload_bytes != 0) {
    throw ProtocolError(
        fmt::format("mailbox record: type {} carries {} payload bytes", h.type, h.payload_bytes));
  }
  if (h.size != MailboxRecordSize(h.payload_bytes)) {
    throw ProtocolError(fmt::format("mailbox record: size {} does not fit a payload of {} bytes",
                                    h.size, h.payload_bytes));
  }
  out.record.type = h.type;
  out.record.key = MessageKey{h.communicator, h.sequence, h.tag, h.call};
  out.record.address = h.address;
  out.record.length = h.length;
  out.record.payload = published.subspan(kRecordHeaderBytes, h.payload_bytes);
  return out;
}

MailboxRegion::MailboxRegion(int rings, size_t ring_bytes, uint64_t cookie)
    : cookie_(cookie), rings_(rings), ring_bytes_(ring_bytes) {
  if (rings < 1 || ring_bytes < 4096 || ring_bytes % 64 != 0) {
    throw InvalidArgument(
        fmt::format("mailbox of {} rings of {} bytes: need at least one ring of a multiple of 64 "
                    "bytes, at least 4096",
                    rings, ring_bytes));
  }
  bytes_ = RegionBytes(static_cast<size_t>(rings), ring_bytes);
  fd_.Reset(::memfd_create("tandem-collective-mailbox", MFD_CLOEXEC));
  if (!fd_) throw IoError(fmt::format("memfd_create for the mailbox: {}", std::strerror(errno)));
  if (::ftruncate(fd_.get(), static_cast<off_t>(bytes_)) != 0) {
    throw IoError(fmt::format("sizing the mailbox to {} bytes: {}", bytes_, std::strerror(errno)));
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
  if (p == MAP_FAILED) {
    throw IoError(fmt::format("mapping the mailbox ({} bytes): {}", bytes_, std::strerror(errno)));
  }
  base_ = static_cast<std::byte*>(p);
  // The file starts zeroed: every head, tail and doorbell word is 0.
  for (size_t r = 0; r < static_cast<size_t>(rings); ++r) {
    new (base_ + kRegionHeaderBytes + r * (kControlBytes + ring_bytes)) std::atomic<uint64_t>(0);
    new (base_ + kRegionHeaderBytes + r * (kControlBytes + ring_bytes) + kTailOffset)
        std::atomic<uint64_t>(0);
  }
  doorbell_ = std::make_unique<base::Doorbell>(new (base_ + kDoorbellOffset) base::DoorbellWords);
  const RegionHeader h{kMagic, cookie, kVersion, static_cast<uint32_t>(rings), ring_bytes};
  std::memcpy(base_, &h, sizeof h);
}

MailboxRegion::~MailboxRegion() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

size_t MailboxRegion::Drain(int sender, const std::function<void(const MailboxRecord&)>& deliver) {
  if (sender < 0 || sender >= rings_) {
    throw InvalidArgument(fmt::format("mailbox: no ring for rank {} of {}", sender, rings_));
  }
  const auto r = static_cast<size_t>(sender);
  std::atomic<uint64_t>& head_word = Head(base_, ring_bytes_, r);
  std::atomic<uint64_t>& tail_word = Tail(base_, ring_bytes_, r);
  std::byte* data = RingData(base_, ring_bytes_, r);
  uint64_t tail = tail_word.load(std::memory_order_relaxed);  // only this side writes it
  size_t delivered = 0;
  for (;;) {
    const uint64_t head = head_word.load(std::memory_order_acquire);
    if (head == tail) return delivered;
    TsanAcquire(cookie_, r);
    if (head - tail > ring_bytes_) {
      throw ProtocolError(
          fmt::format("mailbox ring of worker rank {}: {} bytes published, more than the ring's {}",
                      sender, head - tail, ring_bytes_));
    }
    while (tail != head) {
      const size_t pos = static_cast<size_t>(tail % ring_bytes_);
      const size_t to_end = ring_bytes_ - pos;
      const size_t published = static_cast<size_t>(std::min<uint64_t>(head - tail, to_end));
      ParsedMailboxRecord rec;
      try {
        rec = ParseMailboxRecord({data + pos, published}, to_end);
      } catch (const ProtocolError& e) {
        throw ProtocolError(fmt::format("mailbox ring of worker rank {}: {}", sender, e.what()));
      }
      if (!rec.padding) {
        deliver(rec.record);
        ++delivered;
      }
      tail += rec.size;
      tail_word.store(tail, std::memory_order_release);
    }
  }
}

void MailboxRegion::Prefault(int sender) {
  if (sender < 0 || sender >= rings_) return;
  PopulateRange(
      base_ + kRegionHeaderBytes + static_cast<size_t>(sender) * (kControlBytes + ring_bytes_),
      kControlBytes + ring_bytes_);
}

MailboxLink::MailboxLink(int32_t pid, int32_t fd, uint64_t cookie, int self_rank)
    : cookie_(cookie), self_rank_(self_rank) {
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  base::UniqueFd file(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!file) throw IoError(fmt::format("opening the mailbox {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) {
    throw IoError(fmt::format("stat of the mailbox {}: {}", path, std::strerror(errno)));
  }
  if (st.st_size < static_cast<off_t>(kRegionHeaderBytes)) {
    throw ProtocolError(fmt::format("{} is not a mailbox: {} bytes", path, st.st_size));
  }
  bytes_ = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, file.get(), 0);
  if (p == MAP_FAILED) {
    throw IoError(fmt::format("mapping the mailbox {}: {}", path, std::strerror(errno)));
  }
  base_ = static_cast<std::byte*>(p);
  RegionHeader h{};
  std::memcpy(&h, base_, sizeof h);
  std::string wrong;
  if (h.magic != kMagic || h.version != kVersion) {
    wrong = fmt::format("magic {:#x} version {}, expected {:#x} version {}", h.magic, h.version,
                        kMagic, kVersion);
  } else if (h.cookie != cookie) {
    wrong = "its cookie is not the probe's";
  } else if (h.ring_bytes < 4096 || h.ring_bytes % 64 != 0 || h.rings < 1 ||
             h.ring_bytes > bytes_ || RegionBytes(h.rings, h.ring_bytes) > bytes_) {
    wrong =
        fmt::format("{} rings of {} bytes do not fit its {} bytes", h.rings, h.ring_bytes, bytes_);
  } else if (self_rank < 0 || static_cast<uint32_t>(self_rank) >= h.rings) {
    wrong = fmt::format("it has {} rings, none for rank {}", h.rings, self_rank);
  }
  if (!wrong.empty()) {
    ::munmap(base_, bytes_);
    base_ = nullptr;
    throw ProtocolError(fmt::format("the mailbox {} is refused: {}", path, wrong));
  }
  ring_bytes_ = h.ring_bytes;
  doorbell_ = std::make_unique<base::Doorbell>(DoorbellAt(base_));
  PopulateRange(
      base_ + kRegionHeaderBytes + static_cast<size_t>(self_rank) * (kControlBytes + ring_bytes_),
      kControlBytes + ring_bytes_);
}

MailboxLink::~MailboxLink() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

bool MailboxLink::TryWrite(uint16_t type, const MessageKey& key, std::span<const std::byte> payload,
                           uint64_t address, uint64_t length, bool ring) {
  const size_t need = MailboxRecordSize(payload.size());
  if (need > ring_bytes_ || payload.size() > UINT32_MAX) return false;
  const auto r = static_cast<size_t>(self_rank_);
  {
    std::lock_guard lock(mu_);
    std::atomic<uint64_t>& head_word = Head(base_, ring_bytes_, r);
    const uint64_t head = head_word.load(std::memory_order_relaxed);  // only we write it
    const uint64_t tail = Tail(base_, ring_bytes_, r).load(std::memory_order_acquire);
    if (head - tail > ring_bytes_) {
      throw ProtocolError(
          fmt::format("mailbox ring of worker rank {}: the reader's position {} is past ours {}",
                      self_rank_, tail, head));
    }
    const size_t pos = static_cast<size_t>(head % ring_bytes_);
    const size_t to_end = ring_bytes_ - pos;
    const size_t pad = need > to_end ? to_end : 0;
    if (ring_bytes_ - (head - tail) < pad + need) return false;
    std::byte* data = RingData(base_, ring_bytes_, r);
    size_t at = pos;
    if (pad > 0) {
      const RecordHeader p{static_cast<uint32_t>(pad), 0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(data + at, &p, 8);
      at = 0;
    }
    WriteMailboxRecord(data + at, MailboxRecord{type, key, address, length, payload});
    TsanRelease(cookie_, r);
    head_word.store(head + pad + need, std::memory_order_release);
  }
  if (ring) doorbell_->Ring();
  return true;
}

}  // namespace tandem::collective
