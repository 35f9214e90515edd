// libFuzzer target: arbitrary bytes fed to Optimizer::LoadStates
// (docs/optimizers.md, "Saved states"). A blob must either load or be
// refused with InvalidArgument; a refusal must leave the optimizer's state
// byte for byte as it was; a blob that loads must save back to the same
// bytes (the format is canonical) and leave the optimizer usable.
//
// Input layout (seeds in tests/fuzz/corpus/optimizer_states_fuzz/):
//   byte 0   bits 0-2: which optimizer configuration loads the blob (see
//            kConfigs); bit 3: 1 appends a valid CRC-32C to the rest, so
//            that the fuzzer explores the parser behind the checksum, 0
//            feeds the rest as it is
//   rest     the blob (or its body, without the checksum)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "kv/optimizer/optimizer.h"
#include "net/crc32c.h"
#include "tandem/error.h"

namespace {

using tandem::DType;
using tandem::TensorView;
using tandem::kv::Optimizer;
using tandem::kv::OptimizerParams;

[[noreturn]] void Violated(const char* what) {
  std::fprintf(stderr, "optimizer_states_fuzz: invariant violated: %s\n", what);
  std::abort();
}

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) {       \
      Violated(#cond);   \
    }                    \
  } while (false)

struct Config {
  const char* name;
  OptimizerParams params;
};

const Config kConfigs[8] = {
    {"sgd", {}},
    {"sgd", {{"momentum", "0.9"}}},
    {"nag", {{"momentum", "0.9"}, {"multi_precision", "true"}}},
    {"adam", {}},
    {"adam", {{"multi_precision", "true"}, {"lr_scheduler", "factor"}, {"lr_scheduler.step", "2"}}},
    {"adagrad", {}},
    {"rmsprop", {{"centered", "true"}}},
    {"rmsprop", {{"lr_scheduler", "multifactor"}, {"lr_scheduler.step", "1,5"}}},
};

// Gives the optimizer some state of its own so that "unchanged" means
// something: keys 1 (float32) and 2 (float16), one update each.
void Prime(Optimizer& opt) {
  float w = 1, g = 0.5f;
  opt.Update(1, TensorView{&w, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  uint16_t hw[3] = {0x3C00, 0x3C00, 0x3C00}, hg[3] = {0x3800, 0x3800, 0x3800};  // 1.0, 0.5
  opt.Update(2, TensorView{hw, DType::kF16, {3}}, TensorView{hg, DType::kF16, {3}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Config& config = kConfigs[data[0] & 7];
  const bool seal = (data[0] & 8) != 0;
  std::string blob(reinterpret_cast<const char*>(data + 1), size - 1);
  if (seal) {
    const uint32_t crc = tandem::net::Crc32c(std::as_bytes(std::span(blob.data(), blob.size())));
    blob.append(reinterpret_cast<const char*>(&crc), 4);
  }

  std::unique_ptr<Optimizer> opt = Optimizer::Create(config.name, config.params);
  Prime(*opt);
  const std::string before = opt->SaveStates();
  try {
    opt->LoadStates(blob);
  } catch (const tandem::InvalidArgument&) {
    FUZZ_CHECK(opt->SaveStates() == before);
    return 0;
  }
  // Loaded: canonical, reloadable, and the optimizer still works (an update
  // that does not fit a loaded key's state is refused, never a crash).
  const std::string saved = opt->SaveStates();
  FUZZ_CHECK(saved == blob);
  std::unique_ptr<Optimizer> twin = Optimizer::Create(config.name, config.params);
  twin->LoadStates(saved);
  FUZZ_CHECK(twin->SaveStates() == saved);
  float w = 1, g = 0.25f;
  try {
    opt->Update(1, TensorView{&w, DType::kF32, {1}}, TensorView{&g, DType::kF32, {1}});
  } catch (const tandem::InvalidArgument&) {
  }
  return 0;
}
