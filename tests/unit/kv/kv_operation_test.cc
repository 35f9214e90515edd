// KvOperation::Wait's errors: a lost peer is reported as the job's failure
// when the root-cause lookup finds one (the peer left because of it), and as
// itself otherwise; other errors never consult the lookup.
#include "kv/kv_operation.h"

#include <gtest/gtest.h>

#include <string>

#include "tandem/error.h"

namespace tandem::kv {
namespace {

struct RootCaseParam {
  const char* name;
  bool lost_peer;      // the operation failed with PeerLost (else InvalidArgument)
  bool failure_known;  // the lookup returns the job's failure
  const char* expected;
};

class KvOperationRootCause : public ::testing::TestWithParam<RootCaseParam> {};

TEST_P(KvOperationRootCause, WaitThrowsTheCauseWhenTheJobFailed) {
  const RootCaseParam& p = GetParam();
  KvOperation op("push of key 3", std::chrono::seconds(5));
  int lookups = 0;
  op.SetRootCause([&]() -> std::exception_ptr {
    ++lookups;
    if (!p.failure_known) return nullptr;
    return std::make_exception_ptr(
        PeerLost("lost worker 1 (node 3, 127.0.0.1:4000): no heartbeat for 4.0 s"));
  });
  op.Expect(0, 1);
  op.Event(0, p.lost_peer
                  ? std::make_exception_ptr(PeerLost(
                        "lost server 0 (node 1, 127.0.0.1:4001): peer closed the connection"))
                  : std::make_exception_ptr(InvalidArgument("key 3: bad shape")));
  try {
    op.Wait();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.expected), std::string::npos) << e.what();
  }
  EXPECT_EQ(lookups, p.lost_peer ? 1 : 0);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, KvOperationRootCause,
    ::testing::Values(RootCaseParam{"lost_peer_job_failed", true, true, "lost worker 1"},
                      RootCaseParam{"lost_peer_no_failure", true, false, "lost server 0"},
                      RootCaseParam{"other_error_job_failed", false, true, "bad shape"},
                      RootCaseParam{"other_error_no_failure", false, false, "bad shape"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(KvOperationRootCause, WithoutLookupTheErrorIsThrownAsItCame) {
  KvOperation op("pull of key 1", std::chrono::seconds(5));
  op.Expect(0, 1);
  op.Event(0, std::make_exception_ptr(PeerLost("lost server 0: peer closed the connection")));
  EXPECT_THROW(op.Wait(), PeerLost);
}

}  // namespace
}  // namespace tandem::kv
