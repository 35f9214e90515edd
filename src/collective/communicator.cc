// tandem::Communicator: checks a call's arguments on the caller's thread,
// then queues the operation, which picks its algorithm (algorithms.h) on the
// communicator's thread.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "base/dtype_convert.h"
#include "base/reduce.h"
#include "collective/algorithms.h"
#include "collective/communicator_impl.h"
#include "tandem/collective.h"
#include "tandem/error.h"

namespace tandem {

using collective::CommunicatorImpl;
using collective::OpContext;

std::string ReductionName(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kAvg:
      return "avg";
    case Reduction::kMin:
      return "min";
    case Reduction::kMax:
      return "max";
    case Reduction::kProd:
      return "prod";
  }
  throw InvalidArgument(
      fmt::format("reduction {} is not one of sum, avg, min, max, prod", static_cast<int>(op)));
}

std::string AllReduceAlgorithmName(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kHalvingDoubling:
      return "halving_doubling";
    case AllReduceAlgorithm::kDirect:
      return "direct";
    case AllReduceAlgorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case AllReduceAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

void CollectiveHandle::Wait() const {
  if (!state_) throw InvalidArgument("waiting on an empty CollectiveHandle");
  std::unique_lock lock(state_->mu);
  if (!state_->done && state_->waiting != nullptr) {
    state_->waiting->fetch_add(1);
    state_->cv.wait(lock, [&] { return state_->done; });
    state_->waiting->fetch_sub(1);
  }
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool CollectiveHandle::Done() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

int CollectiveHandle::Source() const {
  if (!state_) return -1;
  std::lock_guard lock(state_->mu);
  return state_->source;
}

namespace {

std::byte* Bytes(const TensorView& t) { return static_cast<std::byte*>(t.data); }

void CheckTensor(const TensorView& t, const char* role, const std::string& op) {
  switch (t.dtype) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
      break;
    default:
      throw InvalidArgument(fmt::format("{}: {} has dtype value {}, not a tandem dtype", op, role,
                                        static_cast<int>(t.dtype)));
  }
  for (int64_t d : t.shape) {
    if (d < 0)
      throw InvalidArgument(fmt::format("{}: {} has a negative dimension {}", op, role, d));
  }
  if (t.data == nullptr && t.num_elements() > 0) {
    throw InvalidArgument(
        fmt::format("{}: {} is null but holds {} elements", op, role, t.num_elements()));
  }
}

std::string Describe(const char* op, const CollectiveOptions& o, const TensorView& t,
                     const CommunicatorImpl& c) {
  return fmt::format("{} of '{}' ({} x {}, group rank {} of {})", op,
                     o.name.empty() ? "unnamed tensor" : o.name, t.num_elements(),
                     base::DTypeName(t.dtype), c.rank(), c.size());
}

bool Overlap(const TensorView& a, const TensorView& b) {
  auto* a0 = Bytes(a);
  auto* b0 = Bytes(b);
  return a.num_bytes() > 0 && b.num_bytes() > 0 && a0 < b0 + b.num_bytes() &&
         b0 < a0 + a.num_bytes();
}

base::ReduceOp BaseOp(Reduction op) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAvg:
      return base::ReduceOp::kSum;
    case Reduction::kMin:
      return base::ReduceOp::kMin;
    case Reduction::kMax:
      return base::ReduceOp::kMax;
    case Reduction::kProd:
      return base::ReduceOp::kProd;
  }
  throw InvalidArgument(
      fmt::format("reduction {} is not one of sum, avg, min, max, prod", static_cast<int>(op)));
}

// avg and post-scaling of a fully reduced range. Floating point: one
// multiplication by postscale/n (avg) or postscale, in double, rounded once.
// Integers: avg divides, truncating toward zero; scaling is refused earlier.
collective::Finalize MakeFinalize(const ReduceOptions& o, DType dtype, int n) {
  const bool avg = o.op == Reduction::kAvg;
  if (base::IsFloatingPoint(dtype)) {
    const double factor = o.postscale / (avg ? n : 1);
    if (factor == 1.0) return nullptr;
    return
        [dtype, factor](std::byte* data, size_t count) { base::Scale(dtype, data, count, factor); };
  }
  if (!avg || n == 1) return nullptr;
  return [dtype, n](std::byte* data, size_t count) {
    base::VisitDType(dtype, [&](auto type) {
      using T = typename decltype(type)::type;
      if constexpr (std::is_integral_v<T>) {
        T* v = reinterpret_cast<T*>(data);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(v[i] / static_cast<T>(n));
      }
    });
  };
}

void CheckReduceOptions(const ReduceOptions& o, DType dtype, const std::string& what) {
  BaseOp(o.op);
  if (!base::IsFloatingPoint(dtype) && (o.prescale != 1.0 || o.postscale != 1.0)) {
    throw InvalidArgument(
        fmt::format("{}: pre- and post-scaling need a floating-point dtype, "
                    "got {} (prescale {}, postscale {})",
                    what, base::DTypeName(dtype), o.prescale, o.postscale));
  }
}

collective::ReduceSpec Spec(const ReduceOptions& o, DType dtype) {
  return {BaseOp(o.op), dtype, ElementSize(dtype)};
}

// An operation ready to queue or run.
struct Prepared {
  std::string what;
  std::chrono::milliseconds timeout;
  CommunicatorImpl::Body body;
  collective::CallDescription call;
};

// The description every member must agree on (call_description.h); the
// communicator fills in the members.
collective::CallDescription Call(collective::CallKind kind, const TensorView& t,
                                 const CollectiveOptions& o, const CommunicatorImpl& impl) {
  collective::CallDescription c;
  c.kind = kind;
  c.dtype = t.dtype;
  c.count = static_cast<uint64_t>(t.num_elements());
  c.segment_bytes = impl.settings().segment_bytes;
  c.name = o.name;
  c.shape = t.shape;
  return c;
}

collective::CallDescription ReduceCall(collective::CallKind kind, const TensorView& t,
                                       const ReduceOptions& o, const CommunicatorImpl& impl) {
  collective::CallDescription c = Call(kind, t, o, impl);
  c.reduction = static_cast<uint8_t>(o.op);
  c.prescale = o.prescale;
  c.postscale = o.postscale;
  return c;
}

// A body for an operation that moves no bytes on this rank: the ring
// algorithms would send nothing, so nothing would be checked and no rank
// would wait for another; a barrier (under the operation's own call)
// checks and synchronises like any other operation.
void NoBytes(OpContext& ctx, CommunicatorImpl&) { collective::DisseminationBarrier(ctx); }

// Runs the chosen allreduce algorithm from `from` into `dst` (may be the
// same) over `count` elements of spec's dtype.
void RunAllReduce(OpContext& ctx, CommunicatorImpl& c, AllReduceAlgorithm chosen,
                  const collective::ReduceSpec& spec, const std::byte* from, std::byte* dst,
                  size_t count, const collective::Finalize& finalize) {
  const size_t bytes = count * spec.element_size;
  if (chosen == AllReduceAlgorithm::kHierarchical && c.settings().layout.PerHost() > 0) {
    collective::HierarchicalAllReduce(ctx, spec, from, dst, count, c.settings().layout,
                                      c.Scratch(bytes),
                                      c.settings().segment_bytes / spec.element_size, finalize);
    return;
  }
  // Hierarchical with uneven hosts (asked for by name) runs the ring.
  if (chosen == AllReduceAlgorithm::kRing || chosen == AllReduceAlgorithm::kAuto ||
      chosen == AllReduceAlgorithm::kHierarchical) {
    collective::RingAllReduce(ctx, spec, from, dst, count, c.Scratch(bytes),
                              c.settings().segment_bytes / spec.element_size, finalize);
    return;
  }
  if (from != dst && bytes > 0) std::memcpy(dst, from, bytes);
  switch (chosen) {
    case AllReduceAlgorithm::kHalvingDoubling:
      collective::HalvingDoublingAllReduce(ctx, spec, dst, count, c.Scratch(bytes), finalize);
      return;
    case AllReduceAlgorithm::kDirect:
      collective::DirectAllReduce(ctx, spec, dst, count,
                                  c.Scratch(bytes * static_cast<size_t>(c.size())), finalize);
      return;
    case AllReduceAlgorithm::kRecursiveDoubling:
      collective::RecursiveDoublingAllReduce(ctx, spec, dst, count, c.Scratch(bytes), finalize);
      return;
    case AllReduceAlgorithm::kRing:
    case AllReduceAlgorithm::kAuto:
    case AllReduceAlgorithm::kHierarchical:
      return;  // above
  }
}

Prepared PrepareAllReduce(CommunicatorImpl& impl, const TensorView& in, const TensorView& out,
                          const ReduceOptions& o) {
  const std::string what = Describe("AllReduce", o, in, impl);
  CheckTensor(in, "input", what);
  CheckTensor(out, "output", what);
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements()) {
    throw InvalidArgument(fmt::format("{}: output is {} x {}, expected the input's {} x {}", what,
                                      out.num_elements(), base::DTypeName(out.dtype),
                                      in.num_elements(), base::DTypeName(in.dtype)));
  }
  if (in.data != out.data && Overlap(in, out)) {
    throw InvalidArgument(what + ": input and output overlap without being the same tensor");
  }
  CheckReduceOptions(o, in.dtype, what);
  const auto count = static_cast<size_t>(in.num_elements());
  const DType dtype = in.dtype;
  // The dtype the data travel and are reduced in.
  const DType wire = o.wire_dtype.value_or(dtype);
  if (wire != dtype && !(base::CanConvert(dtype, wire) && base::DTypeSize(wire) == 2)) {
    throw InvalidArgument(fmt::format(
        "{}: wire dtype {} for a {} tensor: tandem sends float32 and float64 as float16 or "
        "bfloat16",
        what, base::DTypeName(wire), base::DTypeName(dtype)));
  }
  const std::byte* src = Bytes(in);
  std::byte* dst = Bytes(out);
  const int n = impl.size();
  const collective::ReduceSpec spec = Spec(o, wire);
  // With a narrower wire dtype, kAvg's division and postscale run on the
  // widened result (in the tensor's dtype), not in the wire dtype.
  collective::Finalize finalize = MakeFinalize(o, dtype, n);
  const double prescale = o.prescale;
  // Chosen here, so that the call's description carries it: members whose
  // settings choose differently would exchange different pieces.
  const AllReduceAlgorithm chosen =
      impl.settings().table.Choose(count * spec.element_size, n, o.algorithm, impl.settings().path,
                                   impl.settings().layout.Spread());
  collective::CallDescription call = ReduceCall(collective::CallKind::kAllReduce, in, o, impl);
  call.algorithm = static_cast<uint8_t>(chosen);
  call.dtype = wire;
  if (count == 0) return Prepared{what, o.timeout, NoBytes, std::move(call)};
  if (wire != dtype) {
    return Prepared{what, o.timeout,
                    [=](OpContext& ctx, CommunicatorImpl& c) {
                      const std::byte* from = src;
                      if (prescale != 1.0) {
                        if (src != dst) std::memcpy(dst, src, count * base::DTypeSize(dtype));
                        base::Scale(dtype, dst, count, prescale);
                        from = dst;
                      }
                      std::span<std::byte> narrow = c.WireBuffer(count * spec.element_size);
                      base::Convert(dtype, from, wire, narrow.data(), count);
                      RunAllReduce(ctx, c, chosen, spec, narrow.data(), narrow.data(), count,
                                   nullptr);
                      base::Convert(wire, narrow.data(), dtype, dst, count);
                      if (finalize) finalize(dst, count);
                    },
                    std::move(call)};
  }
  return Prepared{what, o.timeout,
                  [=](OpContext& ctx, CommunicatorImpl& c) {
                    if (prescale != 1.0) {
                      const size_t bytes = count * spec.element_size;
                      if (src != dst && bytes > 0) std::memcpy(dst, src, bytes);
                      base::Scale(dtype, dst, count, prescale);
                    }
                    RunAllReduce(ctx, c, chosen, spec, prescale != 1.0 ? dst : src, dst, count,
                                 finalize);
                  },
                  std::move(call)};
}

Prepared PrepareBroadcast(CommunicatorImpl& impl, const TensorView& data, int root,
                          const CollectiveOptions& o) {
  const std::string what =
      Describe("Broadcast", o, data, impl) + fmt::format(" from root {}", root);
  CheckTensor(data, "tensor", what);
  if (root < 0 || root >= impl.size()) {
    throw InvalidArgument(
        fmt::format("{}: root {} is outside the group of {}", what, root, impl.size()));
  }
  std::span<std::byte> bytes(Bytes(data), data.num_bytes());
  collective::CallDescription call = Call(collective::CallKind::kBroadcast, data, o, impl);
  call.root = root;
  return Prepared{what, o.timeout,
                  [=](OpContext& ctx, CommunicatorImpl& c) {
                    collective::TreeBroadcast(ctx, bytes, root, c.settings().segment_bytes);
                  },
                  std::move(call)};
}

Prepared PrepareAllGatherV(CommunicatorImpl& impl, const TensorView& in, const TensorView& out,
                           const std::vector<int64_t>& counts, const CollectiveOptions& o) {
  const std::string what = Describe("AllGather", o, in, impl);
  CheckTensor(in, "input", what);
  CheckTensor(out, "output", what);
  const int n = impl.size();
  if (counts.size() != static_cast<size_t>(n)) {
    throw InvalidArgument(
        fmt::format("{}: {} counts given for a group of {}", what, counts.size(), n));
  }
  std::vector<size_t> sizes;
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) throw InvalidArgument(fmt::format("{}: negative count {}", what, c));
    sizes.push_back(static_cast<size_t>(c));
    total += c;
  }
  const int r = impl.rank();
  if (in.dtype != out.dtype || out.num_elements() != total ||
      in.num_elements() != counts[static_cast<size_t>(r)]) {
    throw InvalidArgument(fmt::format(
        "{}: input is {} x {} and output {} x {}; expected input {} (counts[{}]) and output {} "
        "(the sum of the counts) of one dtype",
        what, in.num_elements(), base::DTypeName(in.dtype), out.num_elements(),
        base::DTypeName(out.dtype), counts[static_cast<size_t>(r)], r, total));
  }
  collective::Blocks blocks = collective::Blocks::Of(sizes);
  const size_t es = ElementSize(in.dtype);
  std::byte* dst = Bytes(out);
  const std::byte* src = Bytes(in);
  std::byte* own = dst + blocks.offset[static_cast<size_t>(r)] * es;
  if (src != own && Overlap(in, out)) {
    throw InvalidArgument(what + ": input overlaps output other than at this rank's block");
  }
  // The gathered output: what every rank agrees on (AllGatherV's inputs
  // differ by design).
  collective::CallDescription call = Call(collective::CallKind::kAllGather, out, o, impl);
  // AllGatherV's inputs differ by design: the gathered count is what all
  // agree on. AllGather's counts are all its count: only AllGatherV's are
  // shown.
  call.count = static_cast<uint64_t>(total);
  if (std::any_of(counts.begin(), counts.end(), [&](int64_t c) { return c != counts[0]; })) {
    call.counts = counts;
  }
  if (total == 0) return Prepared{what, o.timeout, NoBytes, std::move(call)};
  return Prepared{what, o.timeout,
                  [=](OpContext& ctx, CommunicatorImpl& c) {
                    const size_t seg = c.settings().segment_bytes / es;
                    collective::RingAllGatherPost(ctx, dst, blocks, 0, es, seg);
                    const size_t own_bytes = blocks.count[static_cast<size_t>(ctx.rank())] * es;
                    if (src != own && own_bytes > 0) std::memcpy(own, src, own_bytes);
                    collective::RingAllGatherRun(ctx, dst, blocks, 0, es, seg);
                    ctx.Finish();
                  },
                  std::move(call)};
}

Prepared PrepareReduceScatter(CommunicatorImpl& impl, const TensorView& in, const TensorView& out,
                              const ReduceOptions& o) {
  const std::string what = Describe("ReduceScatter", o, in, impl);
  CheckTensor(in, "input", what);
  CheckTensor(out, "output", what);
  const int n = impl.size();
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements() * n) {
    throw InvalidArgument(fmt::format(
        "{}: output is {} x {}; expected {} x {} (the input's count over the group size {})", what,
        out.num_elements(), base::DTypeName(out.dtype), in.num_elements() / n,
        base::DTypeName(in.dtype), n));
  }
  if (Overlap(in, out)) throw InvalidArgument(what + ": output overlaps input");
  CheckReduceOptions(o, in.dtype, what);
  const auto count = static_cast<size_t>(out.num_elements());
  const DType dtype = in.dtype;
  const collective::ReduceSpec spec = Spec(o, dtype);
  collective::Finalize finalize = MakeFinalize(o, dtype, n);
  const double prescale = o.prescale;
  const std::byte* src = Bytes(in);
  std::byte* dst = Bytes(out);
  collective::CallDescription call = ReduceCall(collective::CallKind::kReduceScatter, in, o, impl);
  if (count == 0) return Prepared{what, o.timeout, NoBytes, std::move(call)};
  return Prepared{what, o.timeout,
                  [=](OpContext& ctx, CommunicatorImpl& c) {
                    const size_t es = spec.element_size;
                    const size_t total = count * static_cast<size_t>(n) * es;
                    auto scratch = c.Scratch(2 * total);
                    std::byte* work = scratch.data();
                    const std::byte* from = src;
                    if (prescale != 1.0) {
                      if (total > 0) std::memcpy(work, src, total);
                      base::Scale(dtype, work, count * static_cast<size_t>(n), prescale);
                      from = work;
                    }
                    const collective::Blocks blocks =
                        collective::Blocks::Even(count * static_cast<size_t>(n), n);
                    collective::RingReduceScatter(ctx, spec, from, work, blocks, -1,
                                                  scratch.subspan(total),
                                                  c.settings().segment_bytes / es);
                    const size_t own = blocks.offset[static_cast<size_t>(ctx.rank())] * es;
                    const std::byte* result = n == 1 ? from : work + own;
                    if (count > 0) std::memcpy(dst, result, count * es);
                    if (finalize) finalize(dst, count);
                    ctx.Finish();
                  },
                  std::move(call)};
}

Prepared PrepareAllToAll(CommunicatorImpl& impl, const TensorView& in, const TensorView& out,
                         const CollectiveOptions& o) {
  const std::string what = Describe("AllToAll", o, in, impl);
  CheckTensor(in, "input", what);
  CheckTensor(out, "output", what);
  const int n = impl.size();
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements() ||
      in.num_elements() % n != 0) {
    throw InvalidArgument(fmt::format(
        "{}: input {} x {} and output {} x {} must match and split into {} equal blocks", what,
        in.num_elements(), base::DTypeName(in.dtype), out.num_elements(),
        base::DTypeName(out.dtype), n));
  }
  if (Overlap(in, out)) throw InvalidArgument(what + ": output overlaps input");
  const size_t block = in.num_bytes() / static_cast<size_t>(n);
  const std::byte* src = Bytes(in);
  std::byte* dst = Bytes(out);
  return Prepared{what, o.timeout,
                  [=](OpContext& ctx, CommunicatorImpl&) {
                    collective::PairwiseAllToAll(ctx, src, dst, block);
                  },
                  Call(collective::CallKind::kAllToAll, in, o, impl)};
}

// "Send of 'x' (4 x float32, group rank 0 of 2) to rank 1".
std::string DescribePointToPoint(const char* op, const char* direction, const TensorView& data,
                                 int peer, const CollectiveOptions& o, const CommunicatorImpl& c) {
  const std::string what = Describe(op, o, data, c);
  CheckTensor(data, "the tensor", what);
  if (peer == Communicator::kAnySource) return what + " from any rank";
  return fmt::format("{} {} rank {}", what, direction, peer);
}

Prepared PrepareBarrier(CommunicatorImpl& impl, const CollectiveOptions& o) {
  std::string what =
      fmt::format("Barrier{} (group rank {} of {})", o.name.empty() ? "" : " '" + o.name + "'",
                  impl.rank(), impl.size());
  collective::CallDescription call;
  call.kind = collective::CallKind::kBarrier;
  call.name = o.name;
  return Prepared{what, o.timeout, NoBytes, std::move(call)};
}

}  // namespace

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
const std::vector<int>& Communicator::members() const { return impl_->members(); }

CollectiveHandle Communicator::AllGatherAsync(const TensorView& in, const TensorView& out,
                                              const CollectiveOptions& o) {
  std::vector<int64_t> counts(static_cast<size_t>(impl_->size()), in.num_elements());
  return AllGatherVAsync(in, out, counts, o);
}

void Communicator::AllGather(const TensorView& in, const TensorView& out,
                             const CollectiveOptions& o) {
  std::vector<int64_t> counts(static_cast<size_t>(impl_->size()), in.num_elements());
  AllGatherV(in, out, counts, o);
}

CollectiveHandle Communicator::AllReduceAsync(const TensorView& in, const TensorView& out,
                                              const ReduceOptions& o) {
  Prepared p = PrepareAllReduce(*impl_, in, out, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::AllReduce(const TensorView& in, const TensorView& out, const ReduceOptions& o) {
  Prepared p = PrepareAllReduce(*impl_, in, out, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::BroadcastAsync(const TensorView& data, int root,
                                              const CollectiveOptions& o) {
  Prepared p = PrepareBroadcast(*impl_, data, root, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::Broadcast(const TensorView& data, int root, const CollectiveOptions& o) {
  Prepared p = PrepareBroadcast(*impl_, data, root, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::AllGatherVAsync(const TensorView& in, const TensorView& out,
                                               const std::vector<int64_t>& counts,
                                               const CollectiveOptions& o) {
  Prepared p = PrepareAllGatherV(*impl_, in, out, counts, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::AllGatherV(const TensorView& in, const TensorView& out,
                              const std::vector<int64_t>& counts, const CollectiveOptions& o) {
  Prepared p = PrepareAllGatherV(*impl_, in, out, counts, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::ReduceScatterAsync(const TensorView& in, const TensorView& out,
                                                  const ReduceOptions& o) {
  Prepared p = PrepareReduceScatter(*impl_, in, out, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::ReduceScatter(const TensorView& in, const TensorView& out,
                                 const ReduceOptions& o) {
  Prepared p = PrepareReduceScatter(*impl_, in, out, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::AllToAllAsync(const TensorView& in, const TensorView& out,
                                             const CollectiveOptions& o) {
  Prepared p = PrepareAllToAll(*impl_, in, out, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::AllToAll(const TensorView& in, const TensorView& out,
                            const CollectiveOptions& o) {
  Prepared p = PrepareAllToAll(*impl_, in, out, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::BarrierAsync(const CollectiveOptions& o) {
  Prepared p = PrepareBarrier(*impl_, o);
  return impl_->Submit(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

void Communicator::Barrier(const CollectiveOptions& o) {
  Prepared p = PrepareBarrier(*impl_, o);
  impl_->Run(std::move(p.what), std::move(p.call), p.timeout, std::move(p.body));
}

CollectiveHandle Communicator::SendAsync(const TensorView& data, int peer, uint64_t tag,
                                         const CollectiveOptions& o) {
  std::string what = DescribePointToPoint("Send", "to", data, peer, o, *impl_);
  if (peer == kAnySource) throw InvalidArgument(what + ": a send needs a destination rank");
  return impl_->SendTo(std::move(what), peer, tag, {Bytes(data), data.num_bytes()}, o.timeout);
}

void Communicator::Send(const TensorView& data, int peer, uint64_t tag,
                        const CollectiveOptions& o) {
  SendAsync(data, peer, tag, o).Wait();
}

CollectiveHandle Communicator::RecvAsync(const TensorView& data, int peer, uint64_t tag,
                                         const CollectiveOptions& o) {
  std::string what = DescribePointToPoint("Recv", "from", data, peer, o, *impl_);
  return impl_->ReceiveFrom(std::move(what), peer, tag, {Bytes(data), data.num_bytes()}, o.timeout);
}

void Communicator::Recv(const TensorView& data, int peer, uint64_t tag,
                        const CollectiveOptions& o) {
  RecvAsync(data, peer, tag, o).Wait();
}

}  // namespace tandem
