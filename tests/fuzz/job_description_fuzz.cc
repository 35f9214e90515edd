// libFuzzer target: arbitrary text through `tandem k8s render`'s reader of a
// job description (docs/deploy.md, "The job description"), a file a user
// wrote, and a description it accepts through every kind's renderer. The
// whole input is the file's text. An InvalidArgument that starts with the
// file's name is a correct answer; a crash (a stack overflow from deep
// nesting included), a sanitizer report, another exception, or an accepted
// description outside the documented ranges is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "k8s/job_description.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace {

constexpr const char* kTarget = "job_description_fuzz";
constexpr const char* kSource = "fuzzed.json";

void CheckRanges(const tandem::k8s::JobDescription& d) {
  FUZZ_CHECK(kTarget, !d.name.empty() && d.name.size() <= 40);
  FUZZ_CHECK(kTarget, !d.command.empty() && !d.command[0].empty());
  FUZZ_CHECK(kTarget, d.workers >= 1 && d.workers <= 65536);
  FUZZ_CHECK(kTarget, d.processes_per_node >= 1 && d.processes_per_node <= 4096);
  FUZZ_CHECK(kTarget, d.servers >= 0 && d.servers <= 65536);
  FUZZ_CHECK(kTarget, d.port >= 1 && d.port <= 65535);
  FUZZ_CHECK(kTarget, d.metrics_port >= 0 && d.metrics_port <= 65535);
  FUZZ_CHECK(kTarget, d.backoff_limit >= 0 && d.backoff_limit <= 1000);
  FUZZ_CHECK(kTarget, d.worker_resources.gpus >= 0 && d.worker_resources.gpus <= 1024);
  FUZZ_CHECK(kTarget, d.TotalPods() >= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace k8s = tandem::k8s;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  k8s::JobDescription d;
  try {
    d = k8s::ParseJobDescriptionText(text, kSource);
  } catch (const tandem::InvalidArgument& e) {
    FUZZ_CHECK(kTarget, std::string_view(e.what()).starts_with(std::string(kSource) + ": "));
    return 0;
  }
  CheckRanges(d);
  for (auto kind : k8s::AllKinds()) {
    try {
      const std::string yaml = k8s::ToYamlStream(k8s::Render(d, kind, "fuzz-secret"));
      FUZZ_CHECK(kTarget, yaml.starts_with("---"));
    } catch (const tandem::InvalidArgument&) {
      // A kind that cannot run this description says so (e.g. a parameter
      // server as a PyTorchJob).
    }
  }
  return 0;
}
