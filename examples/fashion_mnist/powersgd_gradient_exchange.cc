#include "powersgd_gradient_exchange.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>

#include "tandem/error.h"

namespace fashion_mnist {
namespace {

torch::Tensor AsTensor(const tandem::TensorView& v) {
  if (v.dtype != tandem::DType::kF32) {
    throw tandem::InvalidArgument(
        fmt::format("powersgd exchange: a gradient of dtype code {}, expected float32 ({})",
                    static_cast<int>(v.dtype), static_cast<int>(tandem::DType::kF32)));
  }
  return torch::from_blob(v.data, v.shape, torch::kFloat32);
}

tandem::TensorView AsView(const torch::Tensor& t) {
  return tandem::TensorView{t.data_ptr(), tandem::DType::kF32,
                            std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
}

// Replaces the columns of `a` by an orthonormal basis of a space holding
// them: Householder QR in float64. Gradient matrices are often
// ill-conditioned (the classifier's has rank classes - 1), where
// Gram-Schmidt in float32 leaves columns far from orthonormal.
void Orthonormalise(torch::Tensor& a) {
  a.copy_(std::get<0>(torch::linalg_qr(a.to(torch::kFloat64), "reduced")));
}

}  // namespace

PowerSgdGradientExchange::PowerSgdGradientExchange(std::unique_ptr<tandem::Collectives> collectives,
                                                   PowerSgdOptions options)
    : AllreduceGradientExchange(std::move(collectives), std::nullopt), options_(options) {
  if (options_.rank < 1 || options_.start_step < 0 || !(options_.min_compression_rate >= 0)) {
    throw tandem::InvalidArgument(
        fmt::format("powersgd: rank {} (expected >= 1), start step {} and minimum compression "
                    "rate {} (expected >= 0)",
                    options_.rank, options_.start_step, options_.min_compression_rate));
  }
}

std::string PowerSgdGradientExchange::mode() const {
  return fmt::format("allreduce powersgd (rank {}, from step {})", options_.rank,
                     options_.start_step);
}

int PowerSgdGradientExchange::RankFor(const std::vector<int64_t>& shape) const {
  if (shape.size() < 2) return 0;
  const int64_t n = shape[0];
  int64_t m = 1;
  for (size_t d = 1; d < shape.size(); ++d) m *= shape[d];
  const int64_t r = std::min({n, m, static_cast<int64_t>(options_.rank)});
  const double factors = static_cast<double>((n + m) * r) * options_.min_compression_rate;
  return factors < static_cast<double>(n * m) ? static_cast<int>(r) : 0;
}

int64_t PowerSgdGradientExchange::PayloadBytes(
    const std::vector<tandem::TensorView>& weights) const {
  int64_t bytes = 0;
  for (const tandem::TensorView& w : weights) {
    const int r = RankFor(w.shape);
    const int64_t n = w.shape.empty() ? 1 : w.shape[0];
    bytes += r > 0 ? (n + w.num_elements() / n) * r * 4 : static_cast<int64_t>(w.num_bytes());
  }
  return bytes;
}

void PowerSgdGradientExchange::Exchange(const std::vector<tandem::TensorView>& grads,
                                        const std::vector<tandem::TensorView>& weights) {
  const bool compress = steps_ >= options_.start_step;
  ++steps_;
  if (!compress) {
    AllreduceGradientExchange::Exchange(grads, weights);
    return;
  }
  const double workers = num_workers();
  struct Factors {
    size_t index;
    torch::Tensor g;  // the gradient, n x m, in the caller's memory
    torch::Tensor m;  // M_i: this worker's gradient plus its error
    torch::Tensor p;
    torch::Tensor q;
  };
  std::vector<Factors> factors;
  std::vector<tandem::CollectiveHandle> handles;
  for (size_t i = 0; i < grads.size(); ++i) {
    torch::Tensor g = AsTensor(grads[i]);
    const int r = RankFor(grads[i].shape);
    tandem::ReduceOptions sum;
    sum.name = fmt::format("gradient {}", i);
    if (r == 0) {
      handles.push_back(world().AllReduceAsync(grads[i], grads[i], sum));
      continue;
    }
    torch::Tensor g2 = g.view({g.size(0), -1});
    auto e = error_.find(i);
    torch::Tensor m = e == error_.end() ? g2.clone() : e->second.add_(g2);
    auto q = q_.find(i);
    if (q == q_.end()) {
      auto generator = at::detail::createCPUGenerator(options_.seed * 1000003 + i);
      q = q_.emplace(i, torch::randn({m.size(1), r}, generator, torch::kFloat32)).first;
    }
    Orthonormalise(q->second);
    torch::Tensor p = torch::mm(m, q->second);
    sum.name = fmt::format("gradient {} (powersgd P)", i);
    handles.push_back(world().AllReduceAsync(AsView(p), AsView(p), sum));
    factors.push_back({i, g2, m, p, q->second});
  }
  for (const tandem::CollectiveHandle& h : handles) h.Wait();
  handles.clear();
  for (Factors& f : factors) {
    Orthonormalise(f.p);
    // (P^T M)^T reads M row by row: faster than M^T P with a generic BLAS.
    f.q.copy_(torch::mm(f.p.t(), f.m).t());
    tandem::ReduceOptions sum;
    sum.name = fmt::format("gradient {} (powersgd Q)", f.index);
    handles.push_back(world().AllReduceAsync(AsView(f.q), AsView(f.q), sum));
  }
  for (const tandem::CollectiveHandle& h : handles) h.Wait();
  for (Factors& f : factors) {
    torch::mm_out(f.g, f.p, f.q.t());
    // e_i = M_i - (sum's approximation) / W, in M's buffer.
    error_[f.index] = f.m.sub_(f.g, 1.0 / workers);
  }
}

}  // namespace fashion_mnist
