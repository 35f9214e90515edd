// Uses an installed tandem the way a user's program would: only <tandem/...>
// headers and the tandem::tandem target. It catches a tandem error through
// the base class and calls into the library, so that both the headers and the
// link (shared, and static in tandem_consumer_static) are exercised.
#include <tandem/cluster.h>
#include <tandem/error.h>

#include <cstdio>
#include <string>

int main() {
  if (tandem::RoleName(tandem::Role::kWorker) != "worker") {
    std::fprintf(stderr, "tandem_consumer: RoleName(kWorker) is not \"worker\"\n");
    return 1;
  }
  try {
    throw tandem::PeerLost("worker 3 at 10.0.0.4:9000 stopped sending heartbeats");
  } catch (const tandem::Error& e) {
    const std::string what = e.what();
    if (what.find("worker 3") == std::string::npos) {
      std::fprintf(stderr, "tandem_consumer: unexpected message: %s\n", e.what());
      return 1;
    }
    std::printf("tandem_consumer: caught tandem::PeerLost through tandem::Error: %s\n", e.what());
    return 0;
  }
  return 1;
}
