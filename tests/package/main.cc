// Uses an installed tandem: its public error types must be usable from a
// program that knows only <tandem/...> headers and tandem::tandem.
#include <tandem/error.h>

#include <cstdio>
#include <string>

int main() {
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
