#include "worker/engine/model/layers.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"

namespace moe::model {

Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype) {
  Tensor y = Tensor::Empty({x.dim(0), w.dim(0)}, out_dtype.value_or(x.dtype()), x.device());
  kernels::Gemm(x, false, w, true, y);
  return y;
}

Tensor Fp8View(const Tensor& x, int64_t tile_rows, int64_t tile_cols,
               const std::vector<int64_t>& row_groups) {
  Tensor out = Tensor::Empty(x.shape(), DType::kF32, x.device());
  kernels::Fp8QuantDequant(x, tile_rows, tile_cols, out, row_groups);
  return out;
}

void Fp8Forward(const Tensor& x, const Tensor& w, const Tensor& y32) {
  if (y32.device().is_cuda()) return kernels::Fp8GemmForward(x, w, y32);
  kernels::Gemm(Fp8View(x, 1, kFp8Tile), false, Fp8View(w, kFp8Tile, kFp8Tile), true, y32);
}

void Fp8Dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32) {
  if (dx32.device().is_cuda()) return kernels::Fp8GemmDgrad(dy, w, dx32);
  kernels::Gemm(Fp8View(dy, 1, kFp8Tile), false, Fp8View(w, kFp8Tile, kFp8Tile), false, dx32);
}

void Fp8Wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  if (!dw.device().is_cuda()) {
    kernels::Gemm(Fp8View(dy, kFp8Tile, 1), true, Fp8View(x, kFp8Tile, 1), false, dw, 1.0, 1.0);
  } else if (dw.dtype() == DType::kF32) {
    kernels::Fp8GemmWgrad(dy, x, dw, 1.f);
  } else {
    const Tensor part = Tensor::Empty(dw.shape(), DType::kF32, dw.device());
    kernels::Fp8GemmWgrad(dy, x, part, 0.f);
    kernels::Add(dw, dw, CastTo(part, dw.dtype()));
  }
}

Tensor Linear(const Tensor& x, const Param& w) {
  if (!w.fp8) return Linear(x, w.compute);
  Tensor y32 = Tensor::Empty({x.dim(0), w.compute.dim(0)}, DType::kF32, x.device());
  Fp8Forward(x, w.compute, y32);
  return CastTo(y32, x.dtype());
}

namespace {

Tensor Fp8LinearBackward(const Tensor& dy, const Tensor& x, const Param& w) {
  {
    GradSink dw(w);
    Fp8Wgrad(dy, x, dw.tensor());
    dw.Commit();
  }
  Tensor dx = Tensor::Empty({dy.dim(0), w.compute.dim(1)}, DType::kF32, dy.device());
  Fp8Dgrad(dy, w.compute, dx);
  return CastTo(dx, dy.dtype());
}

}  // namespace

Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w) {
  if (w.fp8) return Fp8LinearBackward(dy, x, w);
  GradSink dw(w);
  dw.AddGemm(dy, true, x, false);
  dw.Commit();
  Tensor dx = Tensor::Empty({dy.dim(0), w.compute.dim(1)}, dy.dtype(), dy.device());
  kernels::Gemm(dy, false, w.compute, false, dx);
  return dx;
}

Recompute Recompute::From(const std::vector<std::string>& names) {
  Recompute r;
  for (const auto& n : names) {
    if (n == "core_attn")
      r.core_attn = true;
    else if (n == "mla_up_proj")
      r.mla_up_proj = true;
    else if (n == "mlp")
      r.mlp = true;
    else if (n == "moe_act")
      r.moe_act = true;
    else if (n == "full")
      r.full = true;
    else
      MOE_CHECK(false) << "unknown recompute module '" << n
                       << "' (the spec's validation lists the known ones)";
  }
  return r;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  Tensor out = Tensor::Empty(t.shape(), dtype, t.device());
  kernels::Convert(t, out);
  return out;
}

// --- RmsNorm
// ---------------------------------------------------------------------------------------

RmsNorm::RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed)
    : eps_(eps) {
  w_ = params.Add(name, {dim}, seed, 0.0, 1.0, /*weight_decay=*/false);
}

Tensor RmsNorm::Forward(const Tensor& x) {
  Tensor rstd = Tensor::Empty({x.dim(0)}, AccumType(x.dtype()), x.device());
  Tensor y = Tensor::Empty(x.shape(), x.dtype(), x.device());
  kernels::RmsNormForward(x, w_->compute, eps_, y, rstd);
  saved_.Push({x, rstd});
  return y;
}

Tensor RmsNorm::AddForward(const Tensor& x, const Tensor& r, Tensor* sum) {
  Tensor rstd = Tensor::Empty({x.dim(0)}, AccumType(x.dtype()), x.device());
  Tensor y = Tensor::Empty(x.shape(), x.dtype(), x.device());
  *sum = Tensor::Empty(x.shape(), x.dtype(), x.device());
  kernels::AddRmsNormForward(x, r, w_->compute, eps_, *sum, y, rstd);
  saved_.Push({*sum, rstd});
  return y;
}

Tensor RmsNorm::Backward(const Tensor& dy, const Tensor& dres) {
  const Saved s = saved_.Pop();
  Tensor dx = Tensor::Empty(dy.shape(), dy.dtype(), dy.device());
  GradSink dw(*w_);
  if (dres.defined())
    kernels::RmsNormBackwardAdd(dy, s.x, w_->compute, s.rstd, dres, dx, dw.tensor());
  else
    kernels::RmsNormBackward(dy, s.x, w_->compute, s.rstd, dx, dw.tensor());
  dw.Commit();
  return dx;
}

// --- SwigluFfn
// -------------------------------------------------------------------------------------

SwigluFfn::SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn,
                     uint64_t seed, double std, double out_std, bool recompute)
    : recompute_(recompute) {
  w13_ = params.Fp8Gemm(params.Add(prefix + ".w13", {2 * ffn, hidden}, seed, std));
  w2_ = params.Fp8Gemm(params.Add(prefix + ".w2", {hidden, ffn}, seed, out_std));
}

namespace {

// gate|up and the activation of x.
void Activate(const Tensor& x, const Param& w13, int64_t ffn, Tensor* gate_up, Tensor* act) {
  *gate_up = Linear(x, w13);
  *act = Tensor::Empty({x.dim(0), ffn}, x.dtype(), x.device());
  kernels::SwigluForward(*gate_up, *act);
}

}  // namespace

Tensor SwigluFfn::Forward(const Tensor& x) {
  Saved s{x, Tensor(), Tensor()};
  Activate(x, *w13_, w2_->compute.dim(1), &s.gate_up, &s.act);
  Tensor y = Linear(s.act, *w2_);
  if (recompute_) s.gate_up = s.act = Tensor();
  saved_.Push(std::move(s));
  return y;
}

Tensor SwigluFfn::Backward(const Tensor& dy) {
  Saved s = saved_.Pop();
  if (recompute_) Activate(s.x, *w13_, w2_->compute.dim(1), &s.gate_up, &s.act);
  Tensor dact = LinearBackward(dy, s.act, *w2_);
  Tensor dgu = Tensor::Empty(s.gate_up.shape(), dy.dtype(), dy.device());
  kernels::SwigluBackward(s.gate_up, dact, dgu);
  return LinearBackward(dgu, s.x, *w13_);
}

}  // namespace moe::model
