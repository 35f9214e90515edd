// A worker of the fault and soak tests (tests/system/test_faults_netbed.py):
// push/pull rounds of a dist_sync store, every pulled value checked exactly
// in the program, with progress lines a test can wait for before it breaks
// something on purpose.
//
// Each round r (1-based) every worker pushes, on a small key (0) and on a
// big key (1, split across the servers when it exceeds
// MXNET_KVSTORE_BIGARRAY_BOUND), the gradient
//
//   g[i] = (rank + 1) * (i % 7 + r % 5 + 1)
//
// and pulls the round's sum, which must be W(W+1)/2 * (i % 7 + r % 5 + 1)
// for every element (small integers: exact in float32). A mismatch ends
// the program with the key, round, element, expected and got values.
//
// With --seconds S the workers agree when to stop: every --vote-every rounds
// each pushes on key 2 a vote (1: its S seconds are up) and pulls the sum, so
// every worker stops after the same round. --rounds N stops after round N.
//
// Output (stdout, flushed per line):
//   kv_rounds: rank=<r> round=<n> ok              (every --report-every rounds)
//   kv_rounds: done rank=<r> rounds=<n> workers=<W> servers=<S> elements=<e>
// On an error, stderr gets
//   kv_rounds (worker <r>, pid <p> on <hostname>): error: <what>
// and the exit code is tandem's for that error (200 for a lost peer,
// src/base/exit_code.h). A server or scheduler process serves its role.
//
//   kv_rounds [--rounds N] [--seconds S] [--small E] [--big E]
//             [--pause-ms M] [--report-every K] [--vote-every V]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/exit_code.h"
#include "tandem/cluster.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace {

using tandem::DType;
using tandem::KVStore;
using tandem::TensorView;

struct Options {
  long rounds = 0;  // 0: no limit (then --seconds must be given)
  double seconds = 0;
  int64_t small = 1000;
  int64_t big = 300000;
  int pause_ms = 0;
  long report_every = 10;
  long vote_every = 10;
};

long ParseLong(const std::string& flag, const char* text, long min) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    throw tandem::InvalidArgument("kv_rounds: " + flag + " needs an integer >= " +
                                  std::to_string(min) + ", got '" + text + "'");
  }
  return v;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw tandem::InvalidArgument("kv_rounds: " + a + " needs a value");
    const char* v = argv[++i];
    if (a == "--rounds") {
      o.rounds = ParseLong(a, v, 1);
    } else if (a == "--seconds") {
      o.seconds = static_cast<double>(ParseLong(a, v, 1));
    } else if (a == "--small") {
      o.small = ParseLong(a, v, 1);
    } else if (a == "--big") {
      o.big = ParseLong(a, v, 1);
    } else if (a == "--pause-ms") {
      o.pause_ms = static_cast<int>(ParseLong(a, v, 0));
    } else if (a == "--report-every") {
      o.report_every = ParseLong(a, v, 1);
    } else if (a == "--vote-every") {
      o.vote_every = ParseLong(a, v, 1);
    } else {
      throw tandem::InvalidArgument("kv_rounds: unknown argument '" + a + "'");
    }
  }
  if (o.rounds == 0 && o.seconds == 0) {
    throw tandem::InvalidArgument("kv_rounds: give --rounds N, --seconds S or both");
  }
  return o;
}

// One key's gradient and pulled value.
struct Key {
  int id;
  std::vector<float> grad;
  std::vector<float> value;
  explicit Key(int key, int64_t n) : id(key), grad(static_cast<size_t>(n)), value(grad.size()) {}
  TensorView GradView() { return {grad.data(), DType::kF32, {static_cast<int64_t>(grad.size())}}; }
  TensorView ValueView() {
    return {value.data(), DType::kF32, {static_cast<int64_t>(value.size())}};
  }
};

// Pushes round `r`'s gradient of `key`, pulls the sum and checks every element.
void Round(KVStore& kv, Key& key, long r, int rank, int workers) {
  const float tri = static_cast<float>(workers * (workers + 1) / 2);
  for (size_t i = 0; i < key.grad.size(); ++i) {
    key.grad[i] = static_cast<float>((rank + 1) * (static_cast<long>(i % 7) + r % 5 + 1));
  }
  kv.PushPull(key.id, key.GradView(), key.ValueView());
  for (size_t i = 0; i < key.value.size(); ++i) {
    const float want = tri * static_cast<float>(static_cast<long>(i % 7) + r % 5 + 1);
    if (key.value[i] != want) {
      throw std::runtime_error("key " + std::to_string(key.id) + " round " + std::to_string(r) +
                               " element " + std::to_string(i) + ": expected " +
                               std::to_string(want) + ", got " + std::to_string(key.value[i]));
    }
  }
}

// Every worker votes; true when any worker's time is up (all see the same sum).
bool AnyTimeUp(KVStore& kv, Key& vote, bool mine) {
  vote.grad[0] = mine ? 1.0f : 0.0f;
  kv.PushPull(vote.id, vote.GradView(), vote.ValueView());
  return vote.value[0] > 0.0f;
}

// Runs the rounds; sets `rank_out` as soon as the scheduler assigned the rank.
int RunWorker(const Options& o, int& rank_out) {
  auto kv = KVStore::Create("dist_sync");
  const int rank = kv->Rank();
  rank_out = rank;
  const int workers = kv->NumWorkers();
  Key small(0, o.small);
  Key big(1, o.big);
  Key vote(2, 1);
  for (Key* k : {&small, &big, &vote}) kv->Init(k->id, k->ValueView());
  const auto start = std::chrono::steady_clock::now();
  long r = 0;
  while (o.rounds == 0 || r < o.rounds) {
    ++r;
    Round(*kv, small, r, rank, workers);
    Round(*kv, big, r, rank, workers);
    if (r % o.report_every == 0) {
      std::printf("kv_rounds: rank=%d round=%ld ok\n", rank, r);
      std::fflush(stdout);
    }
    if (o.pause_ms > 0) usleep(static_cast<useconds_t>(o.pause_ms) * 1000);
    if (o.seconds > 0 && r % o.vote_every == 0) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (AnyTimeUp(*kv, vote, elapsed >= o.seconds)) break;
    }
  }
  std::printf("kv_rounds: done rank=%d rounds=%ld workers=%d servers=%d elements=%zu\n", rank, r,
              workers, kv->NumServers(), small.value.size() + big.value.size());
  std::fflush(stdout);
  return 0;
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    const Options o = Parse(argc, argv);
    if (auto code = tandem::ServeAssignedRole()) return *code;
    return RunWorker(o, rank);
  } catch (const std::exception& e) {
    const std::string who = rank >= 0 ? std::to_string(rank) : "?";
    std::fprintf(stderr, "kv_rounds (worker %s, pid %d on %s): error: %s\n", who.c_str(), getpid(),
                 Hostname().c_str(), e.what());
    return tandem::base::ExitCodeFor(e);
  }
}
