// The host discovery script (launch/host_discovery.h): its answers, its
// failures named, and the poller that follows it.
#include "launch/host_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// A directory with an executable script of `body` (after #!/bin/sh).
class Script {
 public:
  explicit Script(const std::string& body) {
    char dir_template[] = "/tmp/tandem-discovery-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) throw IoError("mkdtemp failed");
    dir_ = dir_template;
    path_ = dir_ + "/hosts.sh";
    std::ofstream(path_) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path_.c_str(), 0755);
  }
  ~Script() { std::filesystem::remove_all(dir_); }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string path_;
};

const std::map<std::string, std::string> kEnv = {{"PATH", "/usr/bin:/bin"}};

TEST(DiscoverHostsTest, ReadsTheHostsItPrints) {
  Script script("echo '# now'; echo h1; echo 'h2:4'; echo 'bob@h3 slots=2'");
  const std::vector<HostSlots> hosts = DiscoverHosts(script.path(), kEnv, milliseconds(5000));
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "h1");
  EXPECT_EQ(hosts[0].slots, 1);
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].login, "bob@h3");
  EXPECT_EQ(hosts[2].slots, 2);
  EXPECT_EQ(DescribeHosts(hosts), "h1:1, h2:4, bob@h3:2");
}

struct FailureCase {
  const char* name;
  const char* body;
  int timeout_ms;
  const char* message;  // after "the host discovery script <path> "
};

class DiscoverHostsFailure : public ::testing::TestWithParam<FailureCase> {};

TEST_P(DiscoverHostsFailure, NamesTheScriptAndWhy) {
  const FailureCase& c = GetParam();
  Script script(c.body);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT([&] { DiscoverHosts(script.path(), kEnv, milliseconds(c.timeout_ms)); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("the host discovery script " + script.path() + c.message)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DiscoverHostsFailure,
    ::testing::Values(FailureCase{"ExitCode", "echo h1; echo 'the cloud API said no' >&2; exit 3",
                                  5000, " exited 3: the cloud API said no"},
                      FailureCase{"Signal", "kill -9 $$", 5000, " was killed by signal 9"},
                      FailureCase{"NoHost", "echo '# nothing free'", 5000,
                                  "'s output names no host"},
                      FailureCase{"BadLine", "echo h1:x", 5000, "'s output"},
                      FailureCase{"Hangs", "echo h1; exec sleep 30", 300,
                                  " gave no answer within 300 ms (killed)"},
                      FailureCase{"HangsQuietly", "exec sleep 30 > /dev/null 2>&1", 300,
                                  " gave no answer within 300 ms (killed)"}),
    [](const auto& test) { return std::string(test.param.name); });

TEST(HostDiscoveryTest, FollowsTheScriptAndKeepsTheHostsThroughAFailure) {
  Script script("cat \"$(dirname \"$0\")/hosts\"");
  const std::string file = script.dir() + "/hosts";
  { std::ofstream(file) << "h1\n"; }
  std::map<std::string, std::string> env = kEnv;
  HostDiscovery discovery(script.path(), env, milliseconds(20), milliseconds(5000),
                          DiscoverHosts(script.path(), env, milliseconds(5000)));
  auto first = discovery.Changed();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(DescribeHosts(*first), "h1:1");
  EXPECT_FALSE(discovery.Changed().has_value());  // nothing new

  auto wait_for = [&](auto done) {
    for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(milliseconds(10));
  };
  { std::ofstream(file + ".new") << "h1\nh2:2\n"; }
  std::filesystem::rename(file + ".new", file);
  std::optional<std::vector<HostSlots>> changed;
  wait_for([&] { return (changed = discovery.Changed()).has_value(); });
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(DescribeHosts(*changed), "h1:1, h2:2");

  std::filesystem::remove(file);  // the script fails: cat exits 1
  std::optional<std::string> error;
  wait_for([&] { return (error = discovery.TakeError()).has_value(); });
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(*error, HasSubstr("exited 1"));
  EXPECT_FALSE(discovery.TakeError().has_value());  // said once
  EXPECT_FALSE(discovery.Changed().has_value());    // the hosts stay
}

}  // namespace
}  // namespace tandem::launch
