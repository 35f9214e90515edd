#include "kv/optimizer/optimizer_base.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "base/byte_io.h"
#include "base/dtype.h"
#include "net/crc32c.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

// docs/optimizers.md, "Saved states": "OPST" little-endian, then a version.
constexpr uint32_t kStatesMagic = 0x5453504F;
constexpr uint16_t kStatesVersion = 1;
// Bytes of LrScheduler::SaveState: kind, base_lr, count, step index.
constexpr size_t kSchedulerStateBytes = 1 + 8 + 8 + 8;
// Keeps every size computation below far from overflow (2^56 elements is
// 512 PiB of float64).
constexpr uint64_t kMaxElements = uint64_t{1} << 56;
// Update counts stay far from int64's end, so that counting on never
// overflows.
constexpr int64_t kMaxUpdateCount = int64_t{1} << 62;

bool IsOptimizerDType(DType d) { return d == DType::kF32 || d == DType::kF64 || d == DType::kF16; }

// The dtype of a key's state arrays: the weight's, except float32 beside a
// float16 weight with a master copy.
DType StateDType(DType weight, bool master) { return master ? DType::kF32 : weight; }

std::string Describe(DType dtype, uint64_t elements) {
  return fmt::format("{}[{}]", base::DTypeName(dtype), elements);
}

// Half <-> float over a stage, in whole blocks so that the loops vectorise
// (see kKernelBlock).
void WidenHalves(const base::Half* __restrict in, float* __restrict out, size_t count) {
  ForEachBlock(count, [&](size_t first, auto n) {
    for (size_t i = 0; i < n; ++i) out[first + i] = base::HalfToFloat(in[first + i]);
  });
}

void NarrowToHalves(const float* __restrict in, base::Half* __restrict out, size_t count) {
  ForEachBlock(count, [&](size_t first, auto n) {
    for (size_t i = 0; i < n; ++i) out[first + i] = base::FloatToHalf(in[first + i]);
  });
}

}  // namespace

OptimizerBase::OptimizerBase(std::string name, OptimizerParamReader& params,
                             double default_learning_rate)
    : name_(std::move(name)), num_update_(0) {
  using Reader = OptimizerParamReader;
  common_.learning_rate =
      params.GetDoubleIn("learning_rate", default_learning_rate, Reader::kNonNegative);
  common_.wd = params.GetDoubleIn("wd", 0.0, Reader::kNonNegative);
  common_.rescale_grad = params.GetDoubleIn("rescale_grad", 1.0, Reader::kPositive);
  common_.clip_gradient = params.GetOptionalDouble("clip_gradient");
  common_.multi_precision = params.GetBool("multi_precision", false);
  common_.begin_num_update = params.GetInt("begin_num_update", 0);
  if (common_.begin_num_update < 0 || common_.begin_num_update > kMaxUpdateCount) {
    params.Fail("begin_num_update",
                fmt::format("is {}, must be in [0, 2^62]", common_.begin_num_update));
  }
  scheduler_ = LrScheduler::Create(params, common_.learning_rate);
  num_update_.store(common_.begin_num_update);
}

bool OptimizerBase::KernelClipsGradient() const {
  return common_.clip_gradient.has_value() && *common_.clip_gradient != 0.0 &&
         static_cast<float>(*common_.clip_gradient) >= 0.0f;
}

std::unique_ptr<KeyState> OptimizerBase::NewKeyState(const TensorView& weight) const {
  auto state = std::make_unique<KeyState>();
  state->weight_dtype = weight.dtype;
  state->elements = static_cast<uint64_t>(weight.num_elements());
  const bool master = common_.multi_precision && weight.dtype == DType::kF16;
  state->state_dtype = StateDType(weight.dtype, master);
  state->update_count = common_.begin_num_update;
  state->has_master = master;
  if (master) {
    state->master.resize(state->elements);
    const auto* half = static_cast<const base::Half*>(weight.data);
    for (uint64_t i = 0; i < state->elements; ++i) state->master[i] = base::HalfToFloat(half[i]);
  }
  state->arrays.assign(NumStates(),
                       std::vector<std::byte>(state->elements * ElementSize(state->state_dtype)));
  return state;
}

double OptimizerBase::ScheduledRate() {
  if (!scheduler_) return common_.learning_rate;
  std::lock_guard lock(scheduler_mu_);
  return scheduler_->Rate(num_update_.load());
}

void OptimizerBase::CheckDTypes(uint64_t key, const TensorView& weight,
                                const TensorView& grad) const {
  if (weight.dtype != grad.dtype) {
    throw InvalidArgument(fmt::format("optimizer '{}': key {}: weight is {} but gradient is {}",
                                      name_, key, base::DTypeName(weight.dtype),
                                      base::DTypeName(grad.dtype)));
  }
  if (!IsOptimizerDType(weight.dtype)) {
    throw InvalidArgument(fmt::format(
        "optimizer '{}': key {}: dtype {} is not supported (float32, float64 or float16)", name_,
        key, base::DTypeName(weight.dtype)));
  }
}

KeyState& OptimizerBase::StateFor(uint64_t key, const TensorView& weight) {
  const auto elements = static_cast<uint64_t>(weight.num_elements());
  auto [state, inserted] = states_.FindOrInsert(key, [&] { return NewKeyState(weight); });
  if (!inserted && (state->weight_dtype != weight.dtype || state->elements != elements)) {
    throw InvalidArgument(fmt::format("optimizer '{}': key {}: its state was made for {}, got {}",
                                      name_, key, Describe(state->weight_dtype, state->elements),
                                      Describe(weight.dtype, elements)));
  }
  return *state;
}

KernelCall OptimizerBase::BeginUpdate(KeyState& state) {
  // MXNet's _update_count, then _get_lr (which reads num_update).
  state.update_count += 1;
  int64_t seen = num_update_.load();
  while (seen < state.update_count &&
         !num_update_.compare_exchange_weak(seen, state.update_count)) {
  }
  KernelCall call;
  call.lr = ScheduledRate();
  call.t = state.update_count;
  return call;
}

void OptimizerBase::RunSlice(KeyState& state, KernelCall call, const TensorView& weight,
                             size_t first, size_t count, const void* grad, bool rows) {
  const auto run = [&](Precision precision, const KernelCall& part) {
    if (rows) {
      RunRowKernel(precision, part);
    } else {
      RunKernel(precision, part);
    }
  };
  if (state.has_master) {
    // The rule runs in float32 on the master copy and float32 states; the
    // float16 gradient is widened a stage at a time (exactly: every half is
    // a float), and the weight is the master copy rounded back.
    constexpr size_t kStage = 1024;
    float stage[kStage];
    auto* half_weight = static_cast<base::Half*>(weight.data) + first;
    const auto* half_grad = static_cast<const base::Half*>(grad);
    float* master = state.master.data() + first;
    for (size_t done = 0; done < count; done += kStage) {
      const size_t n = std::min(kStage, count - done);
      WidenHalves(half_grad + done, stage, n);
      KernelCall part = call;
      part.count = n;
      part.weight = master + done;
      part.grad = stage;
      for (size_t a = 0; a < state.arrays.size(); ++a) {
        part.states[a] = reinterpret_cast<float*>(state.arrays[a].data()) + first + done;
      }
      run(Precision::kF32, part);
      NarrowToHalves(master + done, half_weight + done, n);
    }
    return;
  }
  const size_t weight_size = ElementSize(weight.dtype);
  const size_t state_size = ElementSize(state.state_dtype);
  call.count = count;
  call.weight = static_cast<std::byte*>(weight.data) + first * weight_size;
  call.grad = grad;
  for (size_t a = 0; a < state.arrays.size(); ++a) {
    call.states[a] = state.arrays[a].data() + first * state_size;
  }
  switch (weight.dtype) {
    case DType::kF64:
      run(Precision::kF64, call);
      break;
    case DType::kF16:
      run(Precision::kF16, call);
      break;
    default:
      run(Precision::kF32, call);
      break;
  }
}

void OptimizerBase::Update(uint64_t key, const TensorView& weight, const TensorView& grad) {
  CheckDTypes(key, weight, grad);
  const int64_t n = weight.num_elements();
  if (n < 0 || grad.num_elements() != n) {
    throw InvalidArgument(fmt::format("optimizer '{}': key {}: weight has {} elements, gradient {}",
                                      name_, key, n, grad.num_elements()));
  }
  if (n > 0 && (weight.data == nullptr || grad.data == nullptr)) {
    throw InvalidArgument(
        fmt::format("optimizer '{}': key {}: null data for {} elements", name_, key, n));
  }
  KeyState& state = StateFor(key, weight);
  const KernelCall call = BeginUpdate(state);
  RunSlice(state, call, weight, 0, static_cast<size_t>(n), grad.data, false);
}

void OptimizerBase::UpdateRows(uint64_t key, const TensorView& weight,
                               std::span<const int64_t> rows, const TensorView& grad) {
  CheckDTypes(key, weight, grad);
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(
        fmt::format("optimizer '{}': key {}: row-sparse update: {}", name_, key, what));
  };
  if (weight.shape.empty()) fail("the weight is a scalar, it has no rows");
  if (grad.shape.size() != weight.shape.size()) {
    fail(fmt::format("gradient has {} dimensions, the weight {}", grad.shape.size(),
                     weight.shape.size()));
  }
  for (size_t d = 0; d < weight.shape.size(); ++d) {
    if (weight.shape[d] < 0 || grad.shape[d] < 0) fail("negative dimension");
    if (d > 0 && grad.shape[d] != weight.shape[d]) {
      fail(fmt::format("gradient dimension {} is {}, the weight's is {}", d, grad.shape[d],
                       weight.shape[d]));
    }
  }
  if (grad.shape[0] != static_cast<int64_t>(rows.size())) {
    fail(fmt::format("{} row ids for {} gradient rows", rows.size(), grad.shape[0]));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= weight.shape[0]) {
      fail(fmt::format("row {} is outside [0, {})", rows[i], weight.shape[0]));
    }
    if (i > 0 && rows[i] <= rows[i - 1]) {
      fail(fmt::format("row {} follows row {}: rows must be strictly increasing", rows[i],
                       rows[i - 1]));
    }
  }
  const int64_t n = weight.num_elements();
  if ((n > 0 && weight.data == nullptr) || (grad.num_elements() > 0 && grad.data == nullptr)) {
    fail("null data");
  }
  const size_t row_length = weight.shape[0] == 0 ? 0 : static_cast<size_t>(n / weight.shape[0]);
  // A key has a master copy exactly when it is float16 under
  // multi_precision (LoadStates enforces it too), so this is known before
  // the key's state is looked up or made.
  const bool lazy = LazyRows(common_.multi_precision && weight.dtype == DType::kF16);
  if (lazy) CheckLazyRows(key);
  KeyState& state = StateFor(key, weight);
  const size_t grad_size = ElementSize(grad.dtype);
  const auto* grad_bytes = static_cast<const std::byte*>(grad.data);
  std::vector<std::byte> dense;
  if (!lazy) {
    // MXNet's standard update: as a dense gradient, zero outside `rows`.
    dense.assign(static_cast<size_t>(n) * grad_size, std::byte{0});
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(dense.data() + static_cast<size_t>(rows[i]) * row_length * grad_size,
                  grad_bytes + i * row_length * grad_size, row_length * grad_size);
    }
  }
  const KernelCall call = BeginUpdate(state);
  if (!lazy) {
    RunSlice(state, call, weight, 0, static_cast<size_t>(n), dense.data(), false);
    return;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    RunSlice(state, call, weight, static_cast<size_t>(rows[i]) * row_length, row_length,
             grad_bytes + i * row_length * grad_size, true);
  }
}

std::string OptimizerBase::SaveStates() const {
  base::ByteWriter out;
  out.Put(kStatesMagic);
  out.Put(kStatesVersion);
  out.PutString(name_);
  out.Put(num_update_.load());
  out.Put(static_cast<uint8_t>(scheduler_ ? 1 : 0));
  if (scheduler_) scheduler_->SaveState(out);
  out.Put(static_cast<uint64_t>(states_.size()));
  states_.ForEach([&](uint64_t key, const KeyState& s) {
    out.Put(key);
    out.Put(static_cast<uint8_t>(s.weight_dtype));
    out.Put(static_cast<uint8_t>(s.has_master ? 1 : 0));
    out.Put(static_cast<uint8_t>(s.state_dtype));
    out.Put(s.update_count);
    out.Put(s.elements);
    out.Put(static_cast<uint32_t>(s.arrays.size()));
    out.PutBytes(std::as_bytes(std::span(s.master)));
    for (const auto& array : s.arrays) out.PutBytes(array);
  });
  const uint32_t crc =
      net::Crc32c(std::as_bytes(std::span(out.bytes().data(), out.bytes().size())));
  out.Put(crc);
  return out.Take();
}

void OptimizerBase::LoadStates(std::string_view bytes) {
  const auto fail = [&](const std::string& what) -> void {
    throw InvalidArgument(fmt::format("optimizer '{}': cannot load states ({} bytes): {}", name_,
                                      bytes.size(), what));
  };
  if (bytes.size() < 4 + 2 + 4) fail("too short to hold a header and a checksum");
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + body.size(), 4);
  {
    // The magic and version first, so that a foreign or newer blob gets a
    // clearer error than a checksum mismatch.
    base::ByteReader head(body, "optimizer states");
    const auto magic = head.Get<uint32_t>("magic");
    const auto version = head.Get<uint16_t>("version");
    if (magic != kStatesMagic)
      fail(fmt::format("bad magic {:#010x}, not tandem optimizer states", magic));
    if (version != kStatesVersion) {
      fail(fmt::format("version {} is not the supported version {}", version, kStatesVersion));
    }
  }
  const uint32_t crc = net::Crc32c(std::as_bytes(std::span(body.data(), body.size())));
  if (crc != stored_crc) {
    fail(fmt::format("checksum mismatch (stored {:#010x}, computed {:#010x}): truncated or corrupt",
                     stored_crc, crc));
  }

  std::map<uint64_t, std::unique_ptr<KeyState>> loaded;
  int64_t num_update = 0;
  std::span<const std::byte> scheduler_bytes;
  try {
    base::ByteReader in(body, "optimizer states");
    in.Get<uint32_t>("magic");
    in.Get<uint16_t>("version");
    const std::string saved_name = in.GetString("optimizer name", 64);
    if (saved_name != name_) fail(fmt::format("saved by optimizer '{}'", saved_name));
    num_update = in.Get<int64_t>("num_update");
    if (num_update < 0 || num_update > kMaxUpdateCount) {
      fail(fmt::format("num_update {} is outside [0, 2^62]", num_update));
    }
    const bool has_scheduler = in.Get<bool>("has lr_scheduler");
    if (has_scheduler != (scheduler_ != nullptr)) {
      fail(has_scheduler ? "saved with an lr_scheduler, this optimizer has none"
                         : "saved without an lr_scheduler, this optimizer has one");
    }
    if (has_scheduler) scheduler_bytes = in.GetBytes(kSchedulerStateBytes, "lr_scheduler state");
    const auto keys = in.Get<uint64_t>("key count");
    for (uint64_t k = 0; k < keys; ++k) {
      const auto key = in.Get<uint64_t>("key");
      auto s = std::make_unique<KeyState>();
      const auto weight_dtype = in.Get<uint8_t>("weight dtype");
      const bool master = in.Get<bool>("has master copy");
      const auto state_dtype = in.Get<uint8_t>("state dtype");
      s->update_count = in.Get<int64_t>("update count");
      s->elements = in.Get<uint64_t>("elements");
      const auto arrays = in.Get<uint32_t>("state array count");
      if (weight_dtype >= base::kDTypeCount ||
          !IsOptimizerDType(static_cast<DType>(weight_dtype))) {
        fail(fmt::format("key {}: weight dtype {} is not float32, float64 or float16", key,
                         static_cast<unsigned>(weight_dtype)));
      }
      s->weight_dtype = static_cast<DType>(weight_dtype);
      const bool want_master = common_.multi_precision && s->weight_dtype == DType::kF16;
      if (master != want_master) {
        fail(
            fmt::format("key {}: saved {} a float32 master copy, this optimizer has "
                        "multi_precision={} for {}",
                        key, master ? "with" : "without", common_.multi_precision,
                        base::DTypeName(s->weight_dtype)));
      }
      s->state_dtype = StateDType(s->weight_dtype, master);
      if (state_dtype != static_cast<uint8_t>(s->state_dtype)) {
        fail(fmt::format("key {}: state dtype {} does not match {} weights (expected {})", key,
                         static_cast<unsigned>(state_dtype), base::DTypeName(s->weight_dtype),
                         base::DTypeName(s->state_dtype)));
      }
      if (arrays != NumStates()) {
        fail(fmt::format("key {}: {} state arrays saved, this optimizer keeps {}", key, arrays,
                         NumStates()));
      }
      if (s->update_count < 0 || s->update_count > kMaxUpdateCount) {
        fail(fmt::format("key {}: update count {} is outside [0, 2^62]", key, s->update_count));
      }
      if (!loaded.empty() && key <= loaded.rbegin()->first) {
        fail(fmt::format("key {} follows key {}: keys must be strictly increasing", key,
                         loaded.rbegin()->first));
      }
      // Never trust a length. An optimizer without state arrays (sgd without
      // momentum) stores none, so the count is only bounded, not backed by
      // bytes; otherwise the arrays must fit in what is left.
      if (s->elements > kMaxElements) {
        fail(fmt::format("key {}: claims {} elements, the limit is {}", key, s->elements,
                         kMaxElements));
      }
      const uint64_t per_array = s->elements * ElementSize(s->state_dtype);
      const uint64_t needed = (master ? 4 : 0) * s->elements + uint64_t{arrays} * per_array;
      if (needed > in.remaining()) {
        fail(fmt::format("key {}: {} elements need {} bytes, only {} left", key, s->elements,
                         needed, in.remaining()));
      }
      s->has_master = master;
      if (master) {
        auto raw = in.GetBytes(4 * s->elements, "master copy");
        s->master.resize(s->elements);
        if (!raw.empty()) std::memcpy(s->master.data(), raw.data(), raw.size());
      }
      for (uint32_t a = 0; a < arrays; ++a) {
        auto raw = in.GetBytes(per_array, "state array");
        s->arrays.emplace_back(raw.begin(), raw.end());
      }
      loaded.emplace(key, std::move(s));
    }
    in.ExpectEnd();
    if (scheduler_) {
      // Applied last: everything else has been checked, and LoadState
      // changes nothing when it throws.
      base::ByteReader sched(scheduler_bytes, "lr_scheduler state");
      scheduler_->LoadState(sched);
    }
  } catch (const ProtocolError& e) {
    fail(e.what());
  }
  states_.Replace(std::move(loaded));
  num_update_.store(num_update);
}

}  // namespace tandem::kv
