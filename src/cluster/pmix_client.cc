// docs/contracts.md, "PMIx": what is read and exchanged, and why each wait
// has a limit.
#include "cluster/pmix_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "cluster/pmix_contract.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

std::string StatusText(pmix_status_t rc) { return PMIx_Error_string(rc); }

// PMIX_TIMEOUT takes whole seconds; a limit below one second asks for one.
int TimeoutSeconds(std::chrono::milliseconds timeout) {
  auto s = (timeout.count() + 999) / 1000;
  return static_cast<int>(std::clamp<int64_t>(s, 1, std::numeric_limits<int>::max()));
}

// Servers differ in the integer type of a key (Open MPI's gives uint32 for
// PMIX_JOB_SIZE and uint16 for PMIX_LOCAL_RANK, as does Slurm's): any
// integer is taken.
std::optional<int64_t> IntegerOf(const pmix_value_t& v) {
  switch (v.type) {
    case PMIX_INT:
      return v.data.integer;
    case PMIX_INT8:
      return v.data.int8;
    case PMIX_INT16:
      return v.data.int16;
    case PMIX_INT32:
      return v.data.int32;
    case PMIX_INT64:
      return v.data.int64;
    case PMIX_UINT:
      return v.data.uint;
    case PMIX_UINT8:
      return v.data.uint8;
    case PMIX_UINT16:
      return v.data.uint16;
    case PMIX_UINT32:
      return v.data.uint32;
    case PMIX_UINT64:
      if (v.data.uint64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return std::nullopt;
      }
      return static_cast<int64_t>(v.data.uint64);
    case PMIX_SIZE:
      return static_cast<int64_t>(v.data.size);
    default:
      return std::nullopt;
  }
}

// A value PMIx_Get returned, released when this goes.
struct ValueHolder {
  pmix_value_t* value = nullptr;
  ~ValueHolder() {
    if (value != nullptr) PMIX_VALUE_RELEASE(value);
  }
};

// The value of `key` for `proc`: nothing when the server does not have it.
// Throws ConfigError when it is there but not an integer in [min, max].
std::optional<int> GetInteger(const pmix_proc_t& proc, const char* key, int min, int max) {
  ValueHolder got;
  pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &got.value);
  if (rc != PMIX_SUCCESS || got.value == nullptr) return std::nullopt;
  std::optional<int64_t> n = IntegerOf(*got.value);
  if (!n || *n < min || *n > max) {
    throw ConfigError(fmt::format(
        "the PMIx server gives {} (type {}) for key {} of rank {} in namespace {}: expected an "
        "integer in {}..{}",
        n ? std::to_string(*n) : std::string("a non-integer"),
        PMIx_Data_type_string(got.value->type), key, proc.rank, proc.nspace, min, max));
  }
  return static_cast<int>(*n);
}

// What one PMIx_Fence_nb call and its callback share. libpmix may call back
// after Fence gave up waiting, so both hold it (the callback through a heap
// shared_ptr it deletes); `info` must live until the callback too.
struct FenceWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  pmix_info_t info[2];

  explicit FenceWait(int timeout_seconds) {
    bool collect = true;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_seconds, PMIX_INT);
  }
  ~FenceWait() {
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
};

// Called on libpmix's progress thread.
void FenceDone(pmix_status_t status, void* cbdata) {
  auto* holder = static_cast<std::shared_ptr<FenceWait>*>(cbdata);
  {
    std::lock_guard lock((*holder)->mu);
    (*holder)->done = true;
    (*holder)->status = status;
  }
  (*holder)->cv.notify_all();
  delete holder;
}

}  // namespace

PmixClient::PmixClient() {
  pmix_status_t rc = PMIx_Init(&self_, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    throw PmixUnavailable(fmt::format(
        "PMIx_Init failed: {} (the PMIx server that this process's PMIX_SERVER_URI* variables "
        "name does not answer)",
        StatusText(rc)));
  }
}

PmixClient::~PmixClient() { PMIx_Finalize(nullptr, 0); }

PmixJobFacts PmixClient::Facts() {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, self_.nspace, PMIX_RANK_WILDCARD);
  constexpr int kMax = 1 << 24;
  PmixJobFacts f;
  f.nspace = self_.nspace;
  f.rank = static_cast<int>(self_.rank);
  std::optional<int> size = GetInteger(job, PMIX_JOB_SIZE, 1, kMax);
  if (!size) {
    throw ConfigError(fmt::format(
        "the PMIx server of namespace {} does not give {} (the job's number of processes)",
        f.nspace, PMIX_JOB_SIZE));
  }
  f.job_size = *size;
  f.local_rank = GetInteger(self_, PMIX_LOCAL_RANK, 0, kMax).value_or(0);
  f.local_size = GetInteger(job, PMIX_LOCAL_SIZE, 1, kMax).value_or(1);
  f.node_id = GetInteger(self_, PMIX_NODEID, 0, kMax).value_or(0);
  f.num_nodes = GetInteger(job, PMIX_NUM_NODES, 1, kMax).value_or(1);
  ValueHolder host;
  if (PMIx_Get(&self_, PMIX_HOSTNAME, nullptr, 0, &host.value) == PMIX_SUCCESS &&
      host.value != nullptr && host.value->type == PMIX_STRING &&
      host.value->data.string != nullptr) {
    f.hostname = host.value->data.string;
  }
  return f;
}

void PmixClient::Publish(const std::string& key, const std::string& value) {
  pmix_value_t v;
  PMIX_VALUE_LOAD(&v, value.c_str(), PMIX_STRING);
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
  PMIX_VALUE_DESTRUCT(&v);
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) {
    throw ConfigError(fmt::format("rank {} of PMIx namespace {} could not publish {}='{}': {}",
                                  self_.rank, self_.nspace, key, value, StatusText(rc)));
  }
}

void PmixClient::Fence(std::chrono::milliseconds timeout) {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, self_.nspace, PMIX_RANK_WILDCARD);
  auto wait = std::make_shared<FenceWait>(TimeoutSeconds(timeout));
  auto* holder = new std::shared_ptr<FenceWait>(wait);
  pmix_status_t rc = PMIx_Fence_nb(&job, 1, wait->info, 2, FenceDone, holder);
  if (rc == PMIX_OPERATION_SUCCEEDED) {
    delete holder;
    return;
  }
  if (rc != PMIX_SUCCESS) {
    delete holder;
    throw ConfigError(fmt::format("rank {} of PMIx namespace {}: PMIx_Fence failed: {}", self_.rank,
                                  self_.nspace, StatusText(rc)));
  }
  std::unique_lock lock(wait->mu);
  bool done = wait->cv.wait_for(lock, timeout, [&] { return wait->done; });
  if (!done || wait->status == PMIX_ERR_TIMEOUT) {
    throw Timeout(fmt::format(
        "rank {} waited {} ms (TANDEM_START_TIMEOUT) at the PMIx fence of namespace {} for every "
        "rank of the job to reach tandem's start-up (rank 0 publishes the rendezvous address "
        "there); a rank that failed before it, or that never starts tandem, keeps the others "
        "waiting",
        self_.rank, timeout.count(), self_.nspace));
  }
  if (wait->status != PMIX_SUCCESS) {
    throw ConfigError(fmt::format("rank {} of PMIx namespace {}: the PMIx fence failed: {}",
                                  self_.rank, self_.nspace, StatusText(wait->status)));
  }
}

std::string PmixClient::Lookup(int rank, const std::string& key,
                               std::chrono::milliseconds timeout) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, self_.nspace, static_cast<pmix_rank_t>(rank));
  pmix_info_t info;
  int seconds = TimeoutSeconds(timeout);
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &seconds, PMIX_INT);
  ValueHolder got;
  pmix_status_t rc = PMIx_Get(&proc, key.c_str(), &info, 1, &got.value);
  PMIX_INFO_DESTRUCT(&info);
  if (rc == PMIX_ERR_TIMEOUT) {
    throw Timeout(fmt::format("rank {} waited {} ms for key {} of rank {} in PMIx namespace {}",
                              self_.rank, timeout.count(), key, rank, self_.nspace));
  }
  if (rc != PMIX_SUCCESS || got.value == nullptr) {
    throw ConfigError(fmt::format("rank {} found no key {} of rank {} in PMIx namespace {}: {}",
                                  self_.rank, key, rank, self_.nspace, StatusText(rc)));
  }
  if (got.value->type != PMIX_STRING || got.value->data.string == nullptr) {
    throw ConfigError(fmt::format(
        "key {} of rank {} in PMIx namespace {} holds a {}, not the string tandem publishes", key,
        rank, self_.nspace, PMIx_Data_type_string(got.value->type)));
  }
  return got.value->data.string;
}

}  // namespace tandem::cluster
