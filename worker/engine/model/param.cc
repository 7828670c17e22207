#include "worker/engine/model/param.h"

#include "common/rng.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/memory_stats.h"

namespace moe::model {

Param* ParamSet::Add(const std::string& name, const Tensor::Shape& shape, uint64_t seed, double std,
                     double fill, bool weight_decay, bool expert, int64_t expert_begin) {
  MOE_CHECK(Find(name) == nullptr) << "duplicate parameter " << name;
  auto p = std::make_unique<Param>();
  p->name = name;
  p->weight_decay = weight_decay;
  p->expert = expert;
  p->expert_begin = expert_begin;
  // Initialise on the host in f64, then convert: the values do not depend on the dtype's rounding
  // path.
  Tensor host = Tensor::Empty(shape, DType::kF64);
  double* h = host.data<double>();
  const int64_t n = host.numel();
  const int64_t slices = expert ? shape[0] : 1;
  const int64_t per_slice = n / slices;
  for (int64_t s = 0; s < slices; ++s) {
    uint64_t stream = HashCombine(seed, HashString(name));
    if (expert) stream = HashCombine(stream, static_cast<uint64_t>(expert_begin + s));
    Rng rng(stream);
    for (int64_t i = 0; i < per_slice; ++i)
      h[s * per_slice + i] = std == 0.0 ? fill : std * rng.Normal();
  }
  MemoryScope weights(MemoryCategory::kWeights);
  Tensor cast = Tensor::Empty(shape, dtype_);
  if (dtype_ == DType::kF64) {
    cast.CopyFrom(host);
  } else {
    MOE_CHECK(dtype_ == DType::kF32) << "parameters are f32 or f64";
    float* c = cast.data<float>();
    for (int64_t i = 0; i < n; ++i) c[i] = static_cast<float>(h[i]);
  }
  p->value = device_.is_cpu() ? cast : cast.Clone(device_);
  p->compute = p->value;
  if (compute_dtype_ != dtype_) {
    p->compute = Tensor::Empty(shape, compute_dtype_, device_);
    kernels::Convert(p->value, p->compute);
  }
  MemoryScope gradients(MemoryCategory::kGradients);
  p->grad = Tensor::Zeros(shape, dtype_, device_);  // the Optimizer moves it into its flat buffer
  params_.push_back(std::move(p));
  return params_.back().get();
}

Param* ParamSet::Find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

void ParamSet::ZeroGrads() const {
  for (const auto& p : params_) {
    p->grad.SetZero();
    if (p->accum.defined()) p->accum.SetZero();
  }
}

void ParamSet::SyncCompute() const {
  if (compute_dtype_ == dtype_) return;
  for (const auto& p : params_) {
    if (p->value.defined()) kernels::Convert(p->value, p->compute);
  }
}

GradSink::GradSink(const Param& p, int64_t first, int64_t count) {
  const bool whole = count < 0;
  grad_ = whole ? p.grad : p.grad.Rows(first, first + count);
  if (p.accum.defined()) accum_ = whole ? p.accum : p.accum.Rows(first, first + count);
}

const Tensor& GradSink::tensor() {
  if (!accum_.defined()) return grad_;
  if (!scratch_.defined()) scratch_ = Tensor::Zeros(grad_.shape(), grad_.dtype(), grad_.device());
  return scratch_;
}

namespace {
// The gradient's elements as [rows, cols]: its last dimension is the columns.
Tensor As2d(const Tensor& t) {
  const int64_t cols = t.dim(t.ndim() - 1);
  return t.Reshape({t.numel() / cols, cols});
}
}  // namespace

void GradSink::AddGemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  if (!accum_.defined()) return kernels::Gemm(a, trans_a, b, trans_b, As2d(tensor()), 1.0, 1.0);
  kernels::GemmAccumulate(a, trans_a, b, trans_b, As2d(accum_));
}

void GradSink::AddEmbedding(const Tensor& dout, const Tensor& ids) {
  if (!accum_.defined() || grad_.dtype() != DType::kF32 || dout.dtype() == DType::kF64)
    return kernels::EmbeddingBackward(dout, ids, tensor());
  kernels::EmbeddingBackwardAccumulate(dout, ids, accum_);
}

void GradSink::Commit() {
  if (scratch_.defined()) AddToAccumulator(accum_, scratch_);
}

void AddToAccumulator(const Tensor& accum, const Tensor& src) {
  MOE_CHECK(accum.dtype() == DType::kF64 && accum.numel() == src.numel())
      << "gradient accumulator " << DTypeName(accum.dtype()) << accum.ShapeString() << " for "
      << src.ShapeString();
  const Tensor a = accum.Reshape({accum.numel()}), x = src.Reshape({src.numel()});
  if (x.dtype() == DType::kF64) return kernels::Axpy(a, 1.0, x);
  constexpr int64_t kChunk = int64_t{1} << 20;  // the f64 staging stays at 8 MB whatever the tensor
  Tensor staging = Tensor::Empty({std::min(kChunk, x.numel())}, DType::kF64, x.device());
  for (int64_t i = 0; i < x.numel(); i += kChunk) {
    const int64_t e = std::min(i + kChunk, x.numel());
    const Tensor part = staging.Rows(0, e - i);
    kernels::Convert(x.Rows(i, e), part);
    kernels::Axpy(a.Rows(i, e), 1.0, part);
  }
}

int64_t ParamSet::NumElements(bool experts_only) const {
  int64_t n = 0;
  for (const auto& p : params_)
    if (!experts_only || p->expert) n += p->grad.numel();
  return n;
}

}  // namespace moe::model
