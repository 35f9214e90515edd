#include "process_group_tandem.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>

#include "base/environment.h"
#include "store_rendezvous.h"
#include "tandem/error.h"

namespace tandem::c10d_backend {
namespace {

using ::c10d::OpType;

template <typename T>
std::string Text(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

std::optional<DType> TandemDType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DType::kF32;
    case at::kDouble:
      return DType::kF64;
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kInt:
      return DType::kI32;
    case at::kLong:
      return DType::kI64;
    case at::kByte:
      return DType::kU8;
    default:
      return std::nullopt;
  }
}

// Dense, on the CPU, contiguous: what tandem can read as one span of memory.
void CheckTensor(const at::Tensor& t, const std::string& op, const std::string& what) {
  if (!t.defined()) throw InvalidArgument(fmt::format("{}: {} is an undefined tensor", op, what));
  if (t.layout() != at::kStrided) {
    throw InvalidArgument(
        fmt::format("{}: {} is a {} tensor; the tandem backend takes dense (strided) tensors{}", op,
                    what, Text(t.layout()), t.is_sparse() ? " (call .to_dense())" : ""));
  }
  if (!t.device().is_cpu()) {
    throw InvalidArgument(fmt::format(
        "{}: {} is on device {}; the tandem backend moves CPU tensors (copy it with .cpu())", op,
        what, Text(t.device())));
  }
  if (!t.is_contiguous()) {
    throw InvalidArgument(
        fmt::format("{}: {} is not contiguous (sizes {}, strides {}); pass tensor.contiguous()", op,
                    what, Text(t.sizes()), Text(t.strides())));
  }
}

// A tensor that an operation reduces: its dtype must be one tandem has.
TensorView ReducedView(const at::Tensor& t, const std::string& op, const std::string& what) {
  CheckTensor(t, op, what);
  std::optional<DType> dtype = TandemDType(t.scalar_type());
  if (!dtype) {
    throw InvalidArgument(fmt::format(
        "{}: {} has dtype {}, which tandem does not reduce (it reduces float32, float64, "
        "float16, bfloat16, int32, int64 and uint8)",
        op, what, Text(t.scalar_type())));
  }
  return TensorView{t.data_ptr(), *dtype, {t.numel()}};
}

// A tensor that an operation only moves: any dtype, as bytes when tandem
// has no such dtype. `units` is how many view elements one tensor element
// is (1, or the element size for bytes).
struct MovedView {
  TensorView view;
  int64_t units = 1;
};

MovedView MovedViewOf(const at::Tensor& t, const std::string& op, const std::string& what) {
  CheckTensor(t, op, what);
  if (std::optional<DType> dtype = TandemDType(t.scalar_type())) {
    return {TensorView{t.data_ptr(), *dtype, {t.numel()}}, 1};
  }
  const auto units = static_cast<int64_t>(t.element_size());
  return {TensorView{t.data_ptr(), DType::kU8, {t.numel() * units}}, units};
}

void CheckSameDType(const at::Tensor& t, const at::Tensor& reference, const std::string& op,
                    const std::string& what, const std::string& reference_what) {
  if (t.scalar_type() != reference.scalar_type()) {
    throw InvalidArgument(fmt::format("{}: {} has dtype {} but {} has dtype {}", op, what,
                                      Text(t.scalar_type()), reference_what,
                                      Text(reference.scalar_type())));
  }
}

// Every tensor of `blocks` ("<kind> tensor r") readable, of `reference`'s
// dtype and element count; `reduced`: a dtype tandem reduces.
void CheckBlocks(const std::vector<at::Tensor>& blocks, const at::Tensor& reference,
                 const std::string& op, const char* kind, const char* reference_what,
                 bool reduced) {
  for (size_t r = 0; r < blocks.size(); ++r) {
    const std::string what = fmt::format("{} tensor {}", kind, r);
    if (reduced) {
      ReducedView(blocks[r], op, what);
    } else {
      MovedViewOf(blocks[r], op, what);
    }
    CheckSameDType(blocks[r], reference, op, what, reference_what);
    if (blocks[r].numel() != reference.numel()) {
      throw InvalidArgument(fmt::format("{}: {} holds {} elements but {} holds {}", op, what,
                                        blocks[r].numel(), reference_what, reference.numel()));
    }
  }
}

void CheckCount(size_t got, size_t expected, const std::string& op, const std::string& what) {
  if (got != expected) {
    throw InvalidArgument(fmt::format("{}: expected {} {}, got {}", op, expected, what, got));
  }
}

const char* ReduceOpName(::c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case ::c10d::ReduceOp::SUM:
      return "SUM";
    case ::c10d::ReduceOp::AVG:
      return "AVG";
    case ::c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case ::c10d::ReduceOp::MIN:
      return "MIN";
    case ::c10d::ReduceOp::MAX:
      return "MAX";
    case ::c10d::ReduceOp::BAND:
      return "BAND";
    case ::c10d::ReduceOp::BOR:
      return "BOR";
    case ::c10d::ReduceOp::BXOR:
      return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

// A flat tensor holding `tensors` one after the other (same dtype).
at::Tensor Concatenated(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  at::Tensor flat = at::empty({total}, tensors.at(0).options());
  int64_t offset = 0;
  for (const auto& t : tensors) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
  return flat;
}

// An uninitialised flat tensor the size of `tensors` together (same dtype).
at::Tensor FlatLike(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  return at::empty({total}, tensors.at(0).options());
}

// Copies consecutive blocks of `flat` into `tensors`.
void SplitInto(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.view({-1}).copy_(flat.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

Communicator& CommunicatorOf(const std::shared_ptr<SharedWorld>& world,
                             const std::unique_ptr<Communicator>& own) {
  return own ? *own : world->collectives().world();
}

}  // namespace

SharedWorld::SharedWorld(std::unique_ptr<Collectives> collectives)
    : collectives_(std::move(collectives)) {}

SharedWorld::~SharedWorld() {
  try {
    Finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: leaving the process group's tandem job: %s\n", e.what());
  }
}

void SharedWorld::Finalize() {
  std::call_once(finalized_, [&] { collectives_->Finalize(); });
}

ProcessGroupTandem::ProcessGroupTandem(std::shared_ptr<SharedWorld> world,
                                       std::unique_ptr<Communicator> own_communicator,
                                       std::vector<int> global_ranks,
                                       std::chrono::milliseconds timeout)
    : ::c10d::ProcessGroup(CommunicatorOf(world, own_communicator).rank(),
                           CommunicatorOf(world, own_communicator).size()),
      world_(std::move(world)),
      own_communicator_(std::move(own_communicator)),
      communicator_(&CommunicatorOf(world_, own_communicator_)),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      completions_(std::make_unique<CompletionQueue>(GroupName())) {}

ProcessGroupTandem::~ProcessGroupTandem() {
  WithoutGil([&] {
    completions_->Drain();
    own_communicator_.reset();
    world_.reset();
  });
}

void ProcessGroupTandem::Shutdown() {
  WithoutGil([&] {
    std::lock_guard lock(submit_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    completions_->Drain();
    communicator_ = nullptr;
    own_communicator_.reset();
    std::shared_ptr<SharedWorld> world = std::move(world_);
    if (world.use_count() == 1) world->Finalize();
  });
}

c10::intrusive_ptr<ProcessGroupTandem> ProcessGroupTandem::CreateWorld(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, bool default_group) {
  auto env = base::Environment::FromProcess().vars();
  const WorldRendezvous agreed = ExchangeCoordinator(*store, rank, size, env, default_group);
  auto collectives = Collectives::Join(WorldEnvironment(env, rank, size, agreed));
  return c10::make_intrusive<ProcessGroupTandem>(
      std::make_shared<SharedWorld>(std::move(collectives)), nullptr, Iota(size), timeout);
}

c10::intrusive_ptr<ProcessGroupTandem> ProcessGroupTandem::CreateSubGroup(
    const ProcessGroupTandem& parent, const std::vector<int>& global_ranks,
    std::chrono::milliseconds timeout) {
  if (parent.own_communicator_) {
    throw InvalidArgument(fmt::format(
        "new_group: {} is itself a sub-group; sub-groups are made from the default group",
        parent.GroupName()));
  }
  auto communicator = parent.world_->collectives().NewGroup(global_ranks);
  return c10::make_intrusive<ProcessGroupTandem>(parent.world_, std::move(communicator),
                                                 global_ranks, timeout);
}

std::string ProcessGroupTandem::GroupName() const {
  return fmt::format("the tandem group of ranks [{}]", fmt::join(global_ranks_, ", "));
}

ProcessGroupTandem::Call ProcessGroupTandem::Begin(OpType type, const char* op,
                                                   std::chrono::milliseconds requested) {
  if (shut_down_) {
    throw InvalidArgument(fmt::format("{}: {} was shut down", op, GroupName()));
  }
  const uint64_t n = sequence_.fetch_add(1) + 1;
  const auto bound = requested > std::chrono::milliseconds(0) ? requested : timeout_;
  return Call{type, fmt::format("{} #{}", op, n), bound};
}

CollectiveOptions ProcessGroupTandem::Options(const Call& call) const {
  CollectiveOptions o;
  o.name = call.name;
  o.timeout = call.timeout;
  return o;
}

ReduceOptions ProcessGroupTandem::Reduce(const Call& call, const ::c10d::ReduceOp& op) const {
  ReduceOptions o;
  o.name = call.name;
  o.timeout = call.timeout;
  const auto type = static_cast<::c10d::ReduceOp::RedOpType>(op);
  switch (type) {
    case ::c10d::ReduceOp::SUM:
      o.op = Reduction::kSum;
      break;
    case ::c10d::ReduceOp::AVG:
      o.op = Reduction::kAvg;
      break;
    case ::c10d::ReduceOp::PRODUCT:
      o.op = Reduction::kProd;
      break;
    case ::c10d::ReduceOp::MIN:
      o.op = Reduction::kMin;
      break;
    case ::c10d::ReduceOp::MAX:
      o.op = Reduction::kMax;
      break;
    default:
      throw InvalidArgument(
          fmt::format("{}: reduce op {} is not one tandem has (SUM, AVG, PRODUCT, MIN, MAX)",
                      call.name, ReduceOpName(type)));
  }
  return o;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::Submit(const Call& call,
                                                            PendingOperation pending,
                                                            std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<TandemWork>(
      getRank(), call.type, fmt::format("{} of {}", call.name, GroupName()), std::move(outputs));
  completions_->Push(std::move(pending), work);
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::BROADCAST, "broadcast", opts.timeout);
  CheckCount(tensors.size(), 1, call.name, "tensor per call");
  if (opts.rootTensor != 0) {
    throw InvalidArgument(fmt::format("{}: root tensor {} of one", call.name, opts.rootTensor));
  }
  MovedView v = MovedViewOf(tensors[0], call.name, "the tensor");
  PendingOperation p;
  p.handles.push_back(
      communicator_->BroadcastAsync(v.view, static_cast<int>(opts.rootRank), Options(call)));
  p.keep = tensors;
  return Submit(call, std::move(p), tensors);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLREDUCE, "allreduce", opts.timeout);
  CheckCount(tensors.size(), 1, call.name, "tensor per call");
  TensorView v = ReducedView(tensors[0], call.name, "the tensor");
  PendingOperation p;
  p.handles.push_back(communicator_->AllReduceAsync(v, v, Reduce(call, opts.reduceOp)));
  p.keep = tensors;
  return Submit(call, std::move(p), tensors);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", opts.timeout);
  if (tensors.empty()) throw InvalidArgument(fmt::format("{}: no tensors", call.name));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = fmt::format("tensor {}", i);
    ReducedView(tensors[i], call.name, what);
    CheckSameDType(tensors[i], tensors[0], call.name, what, "tensor 0");
  }
  at::Tensor flat = Concatenated(tensors);
  TensorView v = ReducedView(flat, call.name, "the coalesced tensors");
  PendingOperation p;
  p.handles.push_back(communicator_->AllReduceAsync(v, v, Reduce(call, opts.reduceOp)));
  p.finish = [flat, tensors] { SplitInto(flat, tensors); };
  p.keep = {flat};
  return Submit(call, std::move(p), tensors);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::reduce(std::vector<at::Tensor>& tensors,
                                                            const ::c10d::ReduceOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::REDUCE, "reduce", opts.timeout);
  CheckCount(tensors.size(), 1, call.name, "tensor per call");
  TensorView in = ReducedView(tensors[0], call.name, "the tensor");
  if (opts.rootRank < 0 || opts.rootRank >= getSize()) {
    throw InvalidArgument(
        fmt::format("{}: root {} is outside 0..{}", call.name, opts.rootRank, getSize() - 1));
  }
  // An allreduce whose result only the root keeps: the others reduce into
  // scratch, so that their tensor is left as it was.
  PendingOperation p;
  p.keep = tensors;
  if (opts.rootRank == getRank()) {
    p.handles.push_back(communicator_->AllReduceAsync(in, in, Reduce(call, opts.reduceOp)));
  } else {
    at::Tensor scratch = at::empty_like(tensors[0]);
    TensorView out = ReducedView(scratch, call.name, "scratch");
    p.handles.push_back(communicator_->AllReduceAsync(in, out, Reduce(call, opts.reduceOp)));
    p.keep.push_back(scratch);
  }
  return Submit(call, std::move(p), tensors);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLGATHER, "allgather", opts.timeout);
  CheckCount(inputs.size(), 1, call.name, "input tensor");
  CheckCount(outputs.size(), 1, call.name, "output list");
  CheckCount(outputs[0].size(), static_cast<size_t>(getSize()), call.name,
             "output tensors (one per rank)");
  MovedView in = MovedViewOf(inputs[0], call.name, "the input");
  std::vector<int64_t> counts;
  bool even = true;
  for (size_t r = 0; r < outputs[0].size(); ++r) {
    const std::string what = fmt::format("output tensor {}", r);
    MovedViewOf(outputs[0][r], call.name, what);
    CheckSameDType(outputs[0][r], inputs[0], call.name, what, "the input");
    counts.push_back(outputs[0][r].numel() * in.units);
    even = even && outputs[0][r].numel() == inputs[0].numel();
  }
  if (outputs[0][static_cast<size_t>(getRank())].numel() != inputs[0].numel()) {
    throw InvalidArgument(fmt::format(
        "{}: output tensor {} (this rank's block) holds {} elements but the input holds {}",
        call.name, getRank(), outputs[0][static_cast<size_t>(getRank())].numel(),
        inputs[0].numel()));
  }
  const std::vector<at::Tensor> blocks = outputs[0];
  at::Tensor flat = FlatLike(blocks);
  MovedView out = MovedViewOf(flat, call.name, "the gathered tensors");
  PendingOperation p;
  p.handles.push_back(
      even ? communicator_->AllGatherAsync(in.view, out.view, Options(call))
           : communicator_->AllGatherVAsync(in.view, out.view, counts, Options(call)));
  p.finish = [flat, blocks] { SplitInto(flat, blocks); };
  p.keep = {inputs[0], flat};
  return Submit(call, std::move(p), blocks);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::_ALLGATHER_BASE, "_allgather_base", opts.timeout);
  MovedView in = MovedViewOf(input, call.name, "the input");
  MovedView out = MovedViewOf(output, call.name, "the output");
  CheckSameDType(output, input, call.name, "the output", "the input");
  if (output.numel() != input.numel() * getSize()) {
    throw InvalidArgument(fmt::format(
        "{}: the output holds {} elements; expected the group size {} times the input's {}",
        call.name, output.numel(), getSize(), input.numel()));
  }
  PendingOperation p;
  p.handles.push_back(communicator_->AllGatherAsync(in.view, out.view, Options(call)));
  p.keep = {input, output};
  return Submit(call, std::move(p), {output});
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLGATHER_COALESCED, "allgather_coalesced", opts.timeout);
  CheckCount(output_lists.size(), static_cast<size_t>(getSize()), call.name,
             "output lists (one per rank)");
  for (size_t r = 0; r < output_lists.size(); ++r) {
    CheckCount(output_lists[r].size(), inputs.size(), call.name,
               fmt::format("tensors in output list {} (one per input)", r));
  }
  // One allgather per input tensor, queued together; the work completes
  // when the last did.
  PendingOperation p;
  std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> copies;
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = fmt::format("input {}", i);
    MovedView in = MovedViewOf(inputs[i], call.name, what);
    std::vector<at::Tensor> blocks;
    for (size_t r = 0; r < output_lists.size(); ++r) {
      const at::Tensor& o = output_lists[r][i];
      const std::string out_what = fmt::format("output {} of rank {}", i, r);
      MovedViewOf(o, call.name, out_what);
      CheckSameDType(o, inputs[i], call.name, out_what, what);
      if (o.numel() != inputs[i].numel()) {
        throw InvalidArgument(fmt::format("{}: {} holds {} elements but {} holds {}", call.name,
                                          out_what, o.numel(), what, inputs[i].numel()));
      }
      blocks.push_back(o);
      results.push_back(o);
    }
    at::Tensor flat = FlatLike(blocks);
    MovedView out = MovedViewOf(flat, call.name, "the gathered tensors");
    CollectiveOptions o = Options(call);
    o.name = fmt::format("{} (input {})", call.name, i);
    p.handles.push_back(communicator_->AllGatherAsync(in.view, out.view, o));
    p.keep.push_back(inputs[i]);
    p.keep.push_back(flat);
    copies.emplace_back(flat, std::move(blocks));
  }
  p.finish = [copies] {
    for (const auto& [flat, blocks] : copies) SplitInto(flat, blocks);
  };
  return Submit(call, std::move(p), results);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::GatherOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::GATHER, "gather", opts.timeout);
  CheckCount(inputs.size(), 1, call.name, "input tensor");
  MovedView in = MovedViewOf(inputs[0], call.name, "the input");
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> blocks;
  if (root) {
    CheckCount(outputs.size(), 1, call.name, "output list on the root");
    CheckCount(outputs[0].size(), static_cast<size_t>(getSize()), call.name,
               "output tensors on the root (one per rank)");
    CheckBlocks(outputs[0], inputs[0], call.name, "output", "the input", false);
    blocks = outputs[0];
  } else if (!outputs.empty()) {
    throw InvalidArgument(
        fmt::format("{}: rank {} is not the root ({}) and must pass no output tensors", call.name,
                    getRank(), opts.rootRank));
  }
  // An allgather whose result only the root keeps.
  at::Tensor flat = at::empty({inputs[0].numel() * getSize()}, inputs[0].options());
  MovedView out = MovedViewOf(flat, call.name, "the gathered tensors");
  PendingOperation p;
  p.handles.push_back(communicator_->AllGatherAsync(in.view, out.view, Options(call)));
  if (root) p.finish = [flat, blocks] { SplitInto(flat, blocks); };
  p.keep = {inputs[0], flat};
  return Submit(call, std::move(p), blocks);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ScatterOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::SCATTER, "scatter", opts.timeout);
  CheckCount(outputs.size(), 1, call.name, "output tensor");
  MovedViewOf(outputs[0], call.name, "the output");
  const bool root = opts.rootRank == getRank();
  at::Tensor flat;
  if (root) {
    CheckCount(inputs.size(), 1, call.name, "input list on the root");
    CheckCount(inputs[0].size(), static_cast<size_t>(getSize()), call.name,
               "input tensors on the root (one per rank)");
    CheckBlocks(inputs[0], outputs[0], call.name, "input", "the output", false);
    flat = Concatenated(inputs[0]);
  } else {
    if (!inputs.empty()) {
      throw InvalidArgument(
          fmt::format("{}: rank {} is not the root ({}) and must pass no input tensors", call.name,
                      getRank(), opts.rootRank));
    }
    flat = at::empty({outputs[0].numel() * getSize()}, outputs[0].options());
  }
  // A broadcast of the root's inputs, of which each rank keeps its block.
  MovedView data = MovedViewOf(flat, call.name, "the scattered tensors");
  PendingOperation p;
  p.handles.push_back(
      communicator_->BroadcastAsync(data.view, static_cast<int>(opts.rootRank), Options(call)));
  const at::Tensor output = outputs[0];
  const int64_t offset = output.numel() * getRank();
  p.finish = [flat, output, offset] {
    output.view({-1}).copy_(flat.narrow(0, offset, output.numel()));
  };
  p.keep = {flat, output};
  return Submit(call, std::move(p), outputs);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::REDUCE_SCATTER, "reduce_scatter", opts.timeout);
  CheckCount(outputs.size(), 1, call.name, "output tensor");
  CheckCount(inputs.size(), 1, call.name, "input list");
  CheckCount(inputs[0].size(), static_cast<size_t>(getSize()), call.name,
             "input tensors (one per rank)");
  TensorView out = ReducedView(outputs[0], call.name, "the output");
  CheckBlocks(inputs[0], outputs[0], call.name, "input", "the output", true);
  at::Tensor flat = Concatenated(inputs[0]);
  TensorView in = ReducedView(flat, call.name, "the inputs");
  PendingOperation p;
  p.handles.push_back(communicator_->ReduceScatterAsync(in, out, Reduce(call, opts.reduceOp)));
  p.keep = {flat, outputs[0]};
  return Submit(call, std::move(p), outputs);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", opts.timeout);
  TensorView in = ReducedView(input, call.name, "the input");
  TensorView out = ReducedView(output, call.name, "the output");
  CheckSameDType(output, input, call.name, "the output", "the input");
  if (input.numel() != output.numel() * getSize()) {
    throw InvalidArgument(fmt::format(
        "{}: the input holds {} elements; expected the group size {} times the output's {}",
        call.name, input.numel(), getSize(), output.numel()));
  }
  PendingOperation p;
  p.handles.push_back(communicator_->ReduceScatterAsync(in, out, Reduce(call, opts.reduceOp)));
  p.keep = {input, output};
  return Submit(call, std::move(p), {output});
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const ::c10d::AllToAllOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLTOALL_BASE, "alltoall_base", opts.timeout);
  MovedView in = MovedViewOf(input, call.name, "the input");
  MovedView out = MovedViewOf(output, call.name, "the output");
  CheckSameDType(output, input, call.name, "the output", "the input");
  const auto n = static_cast<size_t>(getSize());
  // Splits count rows (the first dimension); no splits: n equal blocks.
  auto blocks_of = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<int64_t> counts;
    if (t.dim() == 0) {
      throw InvalidArgument(
          fmt::format("{}: {} is a scalar; it needs a first dimension to split", call.name, what));
    }
    const int64_t row = t.size(0) == 0 ? 0 : t.numel() / t.size(0);
    if (splits.empty()) {
      if (t.size(0) % getSize() != 0) {
        throw InvalidArgument(fmt::format(
            "{}: {} has {} rows, which the group size {} does not divide (give split sizes)",
            call.name, what, t.size(0), getSize()));
      }
      counts.assign(n, t.numel() / getSize());
      return counts;
    }
    CheckCount(splits.size(), n, call.name, fmt::format("{} split sizes (one per rank)", what));
    int64_t rows = 0;
    for (int64_t s : splits) {
      if (s < 0) {
        throw InvalidArgument(fmt::format("{}: {} split size {} is negative", call.name, what, s));
      }
      rows += s;
      counts.push_back(s * row);
    }
    if (rows != t.size(0)) {
      throw InvalidArgument(fmt::format("{}: {} split sizes add up to {} rows but it has {}",
                                        call.name, what, rows, t.size(0)));
    }
    return counts;
  };
  std::vector<int64_t> send = blocks_of(input, input_split_sizes, "the input");
  std::vector<int64_t> receive = blocks_of(output, output_split_sizes, "the output");
  if (input_split_sizes.empty() && output_split_sizes.empty()) {
    if (input.numel() != output.numel()) {
      throw InvalidArgument(fmt::format("{}: the input holds {} elements and the output {}",
                                        call.name, input.numel(), output.numel()));
    }
    PendingOperation p;
    p.handles.push_back(communicator_->AllToAllAsync(in.view, out.view, Options(call)));
    p.keep = {input, output};
    return Submit(call, std::move(p), {output});
  }
  std::vector<at::Tensor> receive_blocks;
  at::Tensor flat_out = output.view({-1});
  int64_t offset = 0;
  for (int64_t c : receive) {
    receive_blocks.push_back(flat_out.narrow(0, offset, c));
    offset += c;
  }
  return AllToAllUneven(call, input, send, std::move(receive_blocks), {output});
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const ::c10d::AllToAllOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::ALLTOALL, "alltoall", opts.timeout);
  const auto n = static_cast<size_t>(getSize());
  CheckCount(inputs.size(), n, call.name, "input tensors (one per rank)");
  CheckCount(outputs.size(), n, call.name, "output tensors (one per rank)");
  std::vector<int64_t> send;
  bool even = true;
  for (size_t r = 0; r < n; ++r) {
    const std::string in_what = fmt::format("input tensor {}", r);
    const std::string out_what = fmt::format("output tensor {}", r);
    MovedViewOf(inputs[r], call.name, in_what);
    MovedViewOf(outputs[r], call.name, out_what);
    CheckSameDType(inputs[r], inputs[0], call.name, in_what, "input tensor 0");
    CheckSameDType(outputs[r], inputs[0], call.name, out_what, "input tensor 0");
    send.push_back(inputs[r].numel());
    even =
        even && inputs[r].numel() == inputs[0].numel() && outputs[r].numel() == inputs[0].numel();
  }
  at::Tensor flat_in = Concatenated(inputs);
  if (even) {
    at::Tensor flat_out = at::empty_like(flat_in);
    MovedView in = MovedViewOf(flat_in, call.name, "the inputs");
    MovedView out = MovedViewOf(flat_out, call.name, "the outputs");
    PendingOperation p;
    p.handles.push_back(communicator_->AllToAllAsync(in.view, out.view, Options(call)));
    p.finish = [flat_out, outputs] { SplitInto(flat_out, outputs); };
    p.keep = {flat_in, flat_out};
    return Submit(call, std::move(p), outputs);
  }
  std::vector<at::Tensor> receive_blocks;
  for (const auto& o : outputs) receive_blocks.push_back(o.view({-1}));
  return AllToAllUneven(call, flat_in, send, std::move(receive_blocks), outputs);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::AllToAllUneven(
    const Call& call, const at::Tensor& input, const std::vector<int64_t>& send_counts,
    std::vector<at::Tensor> receive_blocks, std::vector<at::Tensor> outputs) {
  const int n = getSize();
  const auto un = static_cast<size_t>(n);
  // Row r of the gathered table: rank r's send counts, then its receive
  // counts (in elements of the input's dtype).
  at::Tensor mine = at::empty({2 * n}, at::kLong);
  int64_t* m = mine.data_ptr<int64_t>();
  for (size_t j = 0; j < un; ++j) {
    m[j] = send_counts[j];
    m[un + j] = receive_blocks[j].numel();
  }
  at::Tensor table = at::empty({2 * n * n}, at::kLong);
  CollectiveOptions counts_options = Options(call);
  counts_options.name = call.name + " (split sizes)";
  communicator_->AllGather(ReducedView(mine, call.name, "split sizes"),
                           ReducedView(table, call.name, "split sizes"), counts_options);
  const int64_t* t = table.data_ptr<int64_t>();
  auto sent = [&](int from, int to) { return t[from * 2 * n + to]; };
  auto expected = [&](int at, int from) { return t[at * 2 * n + n + from]; };
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (sent(from, to) != expected(to, from)) {
        throw InvalidArgument(fmt::format(
            "{}: rank {} sends {} elements to rank {}, whose output split for rank {} holds {}",
            call.name, from, sent(from, to), to, from, expected(to, from)));
      }
    }
  }
  // Every rank's whole input, gathered; rank j's block for this rank starts
  // after what rank j sends to lower ranks.
  std::vector<int64_t> totals(un, 0);
  std::vector<int64_t> starts(un, 0);
  int64_t all = 0;
  for (int from = 0; from < n; ++from) {
    int64_t before_me = 0;
    for (int to = 0; to < n; ++to) {
      totals[static_cast<size_t>(from)] += sent(from, to);
      if (to < getRank()) before_me += sent(from, to);
    }
    starts[static_cast<size_t>(from)] = all + before_me;
    all += totals[static_cast<size_t>(from)];
  }
  at::Tensor gathered = at::empty({all}, input.options());
  MovedView in = MovedViewOf(input, call.name, "the input");
  MovedView out = MovedViewOf(gathered, call.name, "every rank's input");
  std::vector<int64_t> unit_totals;
  for (int64_t c : totals) unit_totals.push_back(c * in.units);
  PendingOperation p;
  p.handles.push_back(
      communicator_->AllGatherVAsync(in.view, out.view, unit_totals, Options(call)));
  p.finish = [gathered, starts, receive_blocks] {
    for (size_t j = 0; j < receive_blocks.size(); ++j) {
      receive_blocks[j].copy_(gathered.narrow(0, starts[j], receive_blocks[j].numel()));
    }
  };
  p.keep = {input, gathered};
  return Submit(call, std::move(p), std::move(outputs));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::barrier(const ::c10d::BarrierOptions& opts) {
  std::lock_guard lock(submit_mu_);
  const Call call = Begin(OpType::BARRIER, "barrier", opts.timeout);
  PendingOperation p;
  p.handles.push_back(communicator_->BarrierAsync(Options(call)));
  return Submit(call, std::move(p), {});
}

void ProcessGroupTandem::monitoredBarrier(const ::c10d::BarrierOptions& opts,
                                          bool /*wait_all_ranks*/) {
  CollectiveHandle handle;
  {
    std::lock_guard lock(submit_mu_);
    const Call call = Begin(OpType::BARRIER, "monitored_barrier", opts.timeout);
    handle = communicator_->BarrierAsync(Options(call));
  }
  handle.Wait();
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::PointToPoint(std::vector<at::Tensor>& tensors,
                                                                  const char* op, int peer,
                                                                  int tag) {
  std::lock_guard lock(submit_mu_);
  const bool is_send = std::string_view(op) == "send";
  if (shut_down_) {
    throw InvalidArgument(fmt::format("{}: {} was shut down", op, GroupName()));
  }
  // Numbered apart from the collectives, whose names every rank must
  // agree on: only two ranks take part in a message.
  const Call call{is_send                            ? OpType::SEND
                  : peer == Communicator::kAnySource ? OpType::RECVANYSOURCE
                                                     : OpType::RECV,
                  fmt::format("{} #{}", op, ++messages_), timeout_};
  CheckCount(tensors.size(), 1, call.name, "tensor per call");
  if (tag < 0) {
    throw InvalidArgument(
        fmt::format("{}: tag {} is negative; tags are 0 or more", call.name, tag));
  }
  MovedView v = MovedViewOf(tensors[0], call.name, "the tensor");
  PendingOperation p;
  const auto t = static_cast<uint64_t>(tag);
  p.handles.push_back(is_send ? communicator_->SendAsync(v.view, peer, t, Options(call))
                              : communicator_->RecvAsync(v.view, peer, t, Options(call)));
  p.keep = tensors;
  auto work = c10::make_intrusive<TandemWork>(getRank(), call.type,
                                              fmt::format("{} of {}", call.name, GroupName()),
                                              is_send ? std::vector<at::Tensor>{} : tensors);
  if (!is_send) work->SetReceive(p.handles.front());
  completions_->PushUnordered(std::move(p), work);
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::send(std::vector<at::Tensor>& tensors,
                                                          int dst_rank, int tag) {
  return PointToPoint(tensors, "send", dst_rank, tag);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::recv(std::vector<at::Tensor>& tensors,
                                                          int src_rank, int tag) {
  return PointToPoint(tensors, "recv", src_rank, tag);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupTandem::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                   int tag) {
  return PointToPoint(tensors, "recvAnysource", Communicator::kAnySource, tag);
}

void ProcessGroupTandem::setSequenceNumberForGroup() { sequence_ = 0; }

uint64_t ProcessGroupTandem::getSequenceNumberForGroup() { return sequence_; }

}  // namespace tandem::c10d_backend
