// The PMIx start-up contract (docs/contracts.md, "PMIx"): the contract from
// the server's facts, rank 0's address, and the put/fence/get exchange, run
// by every rank of an in-memory PMIx job (one thread per rank); and how
// DetectContract places PMIx among the other contracts, with this test
// process's real libpmix, which finds no server here.
#include "cluster/pmix_contract.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cluster/contract_detection.h"
#include "tandem/error.h"

namespace tandem::cluster {
namespace {

using Env = std::map<std::string, std::string>;
using std::chrono::milliseconds;

// A PMIx server of one job, in memory: a value put by a rank becomes
// visible to the others when every rank has reached the fence.
// Thread: any (one mutex).
class FakePmixJob {
 public:
  FakePmixJob(int size, int nodes, std::string nspace = "job.1")
      : size_(size), nodes_(nodes), nspace_(std::move(nspace)) {}

  PmixJobFacts Facts(int rank) const {
    const int per_node = (size_ + nodes_ - 1) / nodes_;
    PmixJobFacts f;
    f.nspace = nspace_;
    f.rank = rank;
    f.job_size = size_;
    f.local_rank = rank % per_node;
    f.local_size = per_node;
    f.node_id = rank / per_node;
    f.num_nodes = nodes_;
    f.hostname = "node-" + std::to_string(f.node_id);
    return f;
  }

  void Put(int rank, const std::string& key, const std::string& value) {
    std::lock_guard lock(mu_);
    ++puts_;
    pending_[{rank, key}] = value;
  }

  void Fence(int rank, milliseconds timeout) {
    std::unique_lock lock(mu_);
    ++fences_;
    const int generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      for (auto& [k, v] : pending_) visible_[k] = v;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, timeout, [&] { return generation_ != generation; })) {
      --arrived_;
      throw Timeout("rank " + std::to_string(rank) + " waited at the fake fence");
    }
  }

  std::string Get(int rank, const std::string& key) const {
    std::lock_guard lock(mu_);
    auto it = visible_.find({rank, key});
    if (it == visible_.end())
      throw ConfigError("no key " + key + " of rank " + std::to_string(rank));
    return it->second;
  }

  int puts() const {
    std::lock_guard lock(mu_);
    return puts_;
  }
  int fences() const {
    std::lock_guard lock(mu_);
    return fences_;
  }

 private:
  const int size_;
  const int nodes_;
  const std::string nspace_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, std::string>, std::string> pending_, visible_;
  int arrived_ = 0;
  int generation_ = 0;
  int puts_ = 0;
  int fences_ = 0;
};

// One rank's connection to a FakePmixJob.
class FakePmixSession final : public PmixSession {
 public:
  FakePmixSession(FakePmixJob& job, int rank) : job_(job), rank_(rank) {}
  PmixJobFacts Facts() override { return job_.Facts(rank_); }
  void Publish(const std::string& key, const std::string& value) override {
    job_.Put(rank_, key, value);
  }
  void Fence(milliseconds timeout) override { job_.Fence(rank_, timeout); }
  std::string Lookup(int rank, const std::string& key, milliseconds) override {
    return job_.Get(rank, key);
  }

 private:
  FakePmixJob& job_;
  const int rank_;
};

// Every rank of `job` completes its contract on its own thread; an error
// is kept per rank.
struct RankOutcome {
  std::optional<PmixContract> done;
  std::string error;
};

std::vector<RankOutcome> RunJob(FakePmixJob& job, int size, const Env& env,
                                milliseconds timeout = milliseconds(10000), int absent = -1) {
  std::vector<RankOutcome> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    if (r == absent) continue;
    threads.emplace_back([&, r] {
      FakePmixSession session(job, r);
      try {
        out[r].done = CompletePmixContract(session, base::Environment(env), timeout);
      } catch (const std::exception& e) {
        out[r].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// -- the exchange: every rank learns rank 0's address ---------------------------

class PmixExchange : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PmixExchange, EveryRankLearnsRankZerosAddressThroughOneFence) {
  const int size = std::get<0>(GetParam());
  const int nodes = std::get<1>(GetParam());
  FakePmixJob job(size, nodes);
  auto outcomes = RunJob(job, size, {});
  const std::string host = nodes == 1 ? "127.0.0.1" : "node-0";
  std::set<uint16_t> ports;
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(outcomes[r].done) << "rank " << r << ": " << outcomes[r].error;
    const PmixContract& got = *outcomes[r].done;
    const PmixJobFacts want = job.Facts(r);
    EXPECT_EQ(got.source, PmixCoordinatorSource::kExchanged);
    EXPECT_EQ(got.nspace, "job.1");
    EXPECT_EQ(got.contract.name, "pmix");
    EXPECT_EQ(got.contract.rank, r);
    EXPECT_EQ(got.contract.world_size, size);
    EXPECT_EQ(got.contract.local_rank, want.local_rank);
    EXPECT_EQ(got.contract.local_size, want.local_size);
    EXPECT_EQ(got.contract.node_rank, want.node_id);
    EXPECT_EQ(got.contract.node_count, nodes);
    EXPECT_EQ(got.contract.coordinator_host, host);
    EXPECT_NE(got.contract.coordinator_port, 0);
    ports.insert(got.contract.coordinator_port);
  }
  EXPECT_EQ(ports.size(), 1u) << "the ranks disagree on the port";
  EXPECT_EQ(job.puts(), 1) << "only rank 0 publishes";
  EXPECT_EQ(job.fences(), size) << "every rank fences exactly once";
}

INSTANTIATE_TEST_SUITE_P(SizesAndNodes, PmixExchange,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values(1, 2)));

// -- when there is nothing to exchange ------------------------------------------

struct NoExchangeCase {
  std::string label;
  int size;
  Env env;
  PmixCoordinatorSource source;
  std::string host;
  uint16_t port;
};

void PrintTo(const NoExchangeCase& c, std::ostream* os) { *os << c.label; }

class PmixWithoutExchange : public ::testing::TestWithParam<NoExchangeCase> {};

TEST_P(PmixWithoutExchange, NoRankPublishesOrFences) {
  const NoExchangeCase& c = GetParam();
  FakePmixJob job(c.size, 1);
  // With a fence, these ranks would wait for absent rank 0 and time out.
  auto outcomes = RunJob(job, c.size, c.env, milliseconds(300), c.size > 1 ? 0 : -1);
  for (int r = c.size > 1 ? 1 : 0; r < c.size; ++r) {
    ASSERT_TRUE(outcomes[r].done) << "rank " << r << ": " << outcomes[r].error;
    EXPECT_EQ(outcomes[r].done->source, c.source);
    EXPECT_EQ(outcomes[r].done->contract.coordinator_host, c.host);
    EXPECT_EQ(outcomes[r].done->contract.coordinator_port, c.port);
  }
  EXPECT_EQ(job.puts(), 0);
  EXPECT_EQ(job.fences(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PmixWithoutExchange,
    ::testing::Values(
        NoExchangeCase{"TANDEM_COORDINATOR wins",
                       3,
                       {{"TANDEM_COORDINATOR", "127.0.0.9:4000"}, {"MASTER_ADDR", "ignored"}},
                       PmixCoordinatorSource::kExplicit,
                       "127.0.0.9",
                       4000},
        NoExchangeCase{"MASTER_ADDR and MASTER_PORT win",
                       4,
                       {{"MASTER_ADDR", "node-a"}, {"MASTER_PORT", "1234"}},
                       PmixCoordinatorSource::kExplicit,
                       "node-a",
                       1234},
        NoExchangeCase{"an earlier exchange of this namespace is remembered",
                       2,
                       {{kPmixCoordinatorMemoVariable, "job.1 [::1]:5555"}},
                       PmixCoordinatorSource::kRemembered,
                       "::1",
                       5555},
        NoExchangeCase{"a job of one process", 1, {}, PmixCoordinatorSource::kAlone, "", 0}));

TEST(PmixExchangeMemo, AnotherNamespacesValueIsNotThisJobs) {
  FakePmixJob job(2, 1, "job.2");
  auto outcomes = RunJob(job, 2, {{kPmixCoordinatorMemoVariable, "job.1 127.0.0.1:5555"}});
  for (const auto& o : outcomes) {
    ASSERT_TRUE(o.done) << o.error;
    EXPECT_EQ(o.done->source, PmixCoordinatorSource::kExchanged);
    EXPECT_NE(o.done->contract.coordinator_port, 5555);
  }
  EXPECT_EQ(job.fences(), 2);
}

// -- what goes wrong ---------------------------------------------------------------

class PmixFenceTimeout : public ::testing::TestWithParam<int> {};

TEST_P(PmixFenceTimeout, ARankThatNeverArrivesTimesTheOthersOut) {
  const int absent = GetParam();
  FakePmixJob job(3, 1);
  auto outcomes = RunJob(job, 3, {}, milliseconds(200), absent);
  for (int r = 0; r < 3; ++r) {
    if (r == absent) continue;
    EXPECT_FALSE(outcomes[r].done) << "rank " << r;
    EXPECT_NE(outcomes[r].error.find("waited at the fake fence"), std::string::npos)
        << outcomes[r].error;
  }
}

INSTANTIATE_TEST_SUITE_P(AbsentRank, PmixFenceTimeout, ::testing::Values(0, 2));

class PmixBadPublishedValue : public ::testing::TestWithParam<std::string> {};

TEST_P(PmixBadPublishedValue, TheOtherRanksNameRankZeroAndTheKey) {
  FakePmixJob job(2, 1);
  std::thread rank0([&] {
    FakePmixSession session(job, 0);
    session.Publish(kPmixCoordinatorKey, GetParam());
    session.Fence(milliseconds(10000));
  });
  FakePmixSession session(job, 1);
  try {
    PmixContract c = CompletePmixContract(session, base::Environment(), milliseconds(10000));
    ADD_FAILURE() << "accepted '" << GetParam() << "': " << c.contract.ToString();
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("PMIx key tandem.coordinator of rank 0 in namespace job.1"),
        std::string::npos)
        << e.what();
  }
  rank0.join();
}

INSTANTIATE_TEST_SUITE_P(Values, PmixBadPublishedValue,
                         ::testing::Values("", "host:notaport", "host:0", "host", "[::1"));

// -- rank 0's address --------------------------------------------------------------

struct HostCase {
  std::string label;
  int nodes;
  std::string hostname;
  Env env;
  std::string host;  // empty: a ConfigError
};

void PrintTo(const HostCase& c, std::ostream* os) { *os << c.label; }

class PmixRankZeroHost : public ::testing::TestWithParam<HostCase> {};

TEST_P(PmixRankZeroHost, FollowsTheOrderOfANodesOwnAddress) {
  const HostCase& c = GetParam();
  PmixJobFacts f;
  f.nspace = "job.1";
  f.job_size = 4;
  f.num_nodes = c.nodes;
  f.hostname = c.hostname;
  if (c.host.empty()) {
    EXPECT_THROW(PmixCoordinatorHost(f, base::Environment(c.env)), ConfigError);
  } else {
    EXPECT_EQ(PmixCoordinatorHost(f, base::Environment(c.env)), c.host);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Order, PmixRankZeroHost,
    ::testing::Values(
        HostCase{
            "DMLC_NODE_HOST as given", 2, "n0", {{"DMLC_NODE_HOST", "127.1.2.3"}}, "127.1.2.3"},
        HostCase{"DMLC_INTERFACE's address", 2, "n0", {{"DMLC_INTERFACE", "lo"}}, "127.0.0.1"},
        HostCase{"one node: loopback", 1, "n0", {}, "127.0.0.1"},
        HostCase{"several nodes: PMIx's host name", 3, "gpu07", {}, "gpu07"},
        HostCase{"several nodes and no host name", 3, "", {}, ""}));

// -- the facts the server gives ------------------------------------------------------

class PmixFactsOutOfRange : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};

TEST_P(PmixFactsOutOfRange, AreRefusedNamingTheContract) {
  PmixJobFacts f;
  f.nspace = "job.1";
  f.job_size = 4;
  f.local_size = 2;
  f.num_nodes = 2;
  std::tie(f.rank, f.local_rank, f.node_id, f.job_size) = GetParam();
  try {
    LaunchContract c = PmixContractFromFacts(f, base::Environment());
    ADD_FAILURE() << "accepted " << c.ToString();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pmix"), std::string::npos) << e.what();
  }
}

// (rank, local rank, node, job size): each has one value out of range.
INSTANTIATE_TEST_SUITE_P(Facts, PmixFactsOutOfRange,
                         ::testing::Values(std::make_tuple(4, 0, 0, 4), std::make_tuple(1, 2, 0, 4),
                                           std::make_tuple(1, 1, 2, 4),
                                           std::make_tuple(-1, 0, 0, 4)));

// -- PMIx among the other contracts ---------------------------------------------------

// What a PMIx launcher's process has, with a server that is not there: no
// PMIx server runs for this test process, so PMIx_Init fails at once.
const Env kPmixMarkers = {{"PMIX_RANK", "1"},
                          {"PMIX_NAMESPACE", "gone.1"},
                          {"PMIX_VERSION", "4.2.2"},
                          {"PMIX_SERVER_URI41", "gone.0;tcp4://127.0.0.1:9"}};

Env WithPmix(Env more) {
  for (const auto& [k, v] : kPmixMarkers) more[k] = v;
  return more;
}

struct PlaceCase {
  std::string label;
  Env env;
  std::string winner;
  std::string also_present;  // a part of the log text after the winner
};

void PrintTo(const PlaceCase& c, std::ostream* os) { *os << c.label; }

class PmixAmongContracts : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(PmixAmongContracts, ExplicitContractsWinAndAnUnreachableServerFallsBack) {
  DetectedContract d = DetectContract(base::Environment(GetParam().env));
  EXPECT_EQ(d.name, GetParam().winner) << d.ToString();
  EXPECT_NE(d.ToString().find(GetParam().also_present), std::string::npos) << d.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Order, PmixAmongContracts,
    ::testing::Values(PlaceCase{"TANDEM_* beats PMIx without asking its server",
                                WithPmix({{"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_RANK", "1"}}),
                                "tandem", "[also present, ignored: pmix]"},
                      PlaceCase{"an explicit DMLC role beats PMIx",
                                WithPmix({{"DMLC_ROLE", "worker"},
                                          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                          {"DMLC_PS_ROOT_PORT", "9000"},
                                          {"DMLC_NUM_SERVER", "0"},
                                          {"DMLC_NUM_WORKER", "2"}}),
                                "dmlc", "[also present, ignored: pmix]"},
                      PlaceCase{"an unreachable PMIx server hands over to OMPI_*",
                                WithPmix({{"OMPI_COMM_WORLD_RANK", "1"},
                                          {"OMPI_COMM_WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", "4000"}}),
                                "ompi", "[also present, ignored: pmix (PMIx_Init failed: "},
                      PlaceCase{"an unreachable PMIx server hands over to Slurm",
                                WithPmix({{"SLURM_JOB_ID", "7"},
                                          {"SLURM_STEP_ID", "0"},
                                          {"SLURM_PROCID", "1"},
                                          {"SLURM_STEP_NUM_TASKS", "2"},
                                          {"SLURM_STEP_NUM_NODES", "1"},
                                          {"SLURM_NODEID", "0"},
                                          {"SLURM_LOCALID", "1"},
                                          {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                          {"SLURM_STEP_NODELIST", "n1"}}),
                                "slurm", "PMIX_NAMESPACE=gone.1, PMIX_RANK=1)"}),
    [](const ::testing::TestParamInfo<PlaceCase>& param_info) {
      std::string s = param_info.param.label;
      for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return s;
    });

TEST(PmixAmongContracts, AnUnreachableServerAndNoOtherContractIsAnError) {
  try {
    DetectedContract d = DetectContract(base::Environment(kPmixMarkers));
    ADD_FAILURE() << "accepted: " << d.ToString();
  } catch (const PmixUnavailable& e) {
    ADD_FAILURE() << "not handed over: " << e.what();
  } catch (const ConfigError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("PMIX_RANK=1 and PMIX_NAMESPACE=gone.1 mark a rank of a PMIx job"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("PMIx_Init failed"), std::string::npos) << text;
    EXPECT_NE(text.find("Unset the PMIX_* variables"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tandem::cluster
