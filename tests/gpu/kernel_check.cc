// Every CUDA kernel against its CPU reference on fresh random inputs: poisoned outputs, awkward
// shapes, fp32 relative error <= 1e-4 (reductions over long rows get a looser absolute floor).
// Exit 77 (ctest: skipped) with a loud message where there is no GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/router.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/optimizer.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "worker/engine/rng.h"

namespace {

using moe::Tensor;
namespace cu = moe::kernels::cuda;

int g_failures = 0;
std::vector<std::string> g_rows;

Tensor Random(const Tensor::Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::Empty(shape, moe::DType::kF32);
  moe::Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return t;
}

struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(const Tensor& t) : bytes(t.nbytes()) {
    cudaMalloc(&p, bytes);
    cudaMemcpy(p, t.raw(), bytes, cudaMemcpyHostToDevice);
  }
  Dev(size_t n, bool poison) : bytes(n * sizeof(float)) {
    cudaMalloc(&p, bytes);
    cudaMemset(p, poison ? 0xFF : 0, bytes);  // 0xFFFFFFFF is a NaN: an unwritten element shows
  }
  ~Dev() { cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
  int32_t* i() const { return static_cast<int32_t*>(p); }
  std::vector<float> Host() const {
    std::vector<float> out(bytes / sizeof(float));
    cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost);
    return out;
  }
};

void Compare(const std::string& name, const std::vector<float>& gpu, const Tensor& cpu, double rtol = 1e-4, double atol = 1e-5) {
  const float* ref = cpu.data<float>();
  double worst = 0;
  int64_t at = -1, bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double err = std::fabs(static_cast<double>(gpu[i]) - ref[i]), tol = atol + rtol * std::fabs(ref[i]);
    const double excess = std::isfinite(gpu[i]) ? err / tol : 1e30;
    if (excess > 1) ++bad;
    if (excess > worst) { worst = excess; at = static_cast<int64_t>(i); }
  }
  const std::string err = cu::LastError();
  const bool ok = bad == 0 && err.empty();
  char row[512];
  std::snprintf(row, sizeof(row), "%-22s %-6s %9zu elements  worst err/tol %.3g%s", name.c_str(), ok ? "ok" : "FAIL", gpu.size(), worst,
                err.empty() ? "" : ("  CUDA error " + err).c_str());
  if (!ok && at >= 0) {
    std::printf("  %s: %lld bad; worst at [%lld]: gpu %.8g, cpu %.8g\n", name.c_str(), static_cast<long long>(bad),
                static_cast<long long>(at), gpu[static_cast<size_t>(at)], ref[at]);
  }
  g_rows.push_back(row);
  g_failures += ok ? 0 : 1;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device here (%s); the GPU kernel checks run on a GPU machine: tests/gpu/check.sh\n",
                cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  cudaStream_t s = nullptr;
  const int64_t rows = 257, d = 259, f = 131, vocab = 1031, tokens = 97, k = 3;
  {  // GEMM, all transposes, awkward shapes.
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t m = 257, n = 259, kk = 131;
        Tensor a = Random(ta ? Tensor::Shape{kk, m} : Tensor::Shape{m, kk}, 1), b = Random(tb ? Tensor::Shape{n, kk} : Tensor::Shape{kk, n}, 2);
        Tensor c = Tensor::Empty({m, n}, moe::DType::kF32);
        moe::kernels::Gemm(a, ta, b, tb, c);
        Dev da(a), db(b), dc(static_cast<size_t>(m * n), true);
        cu::Gemm(ta, tb, m, n, kk, 1.f, da.f(), a.dim(1), db.f(), b.dim(1), 0.f, dc.f(), n, s);
        Compare("gemm t" + std::to_string(ta) + std::to_string(tb), dc.Host(), c, 1e-4, 1e-4);
      }
  }
  {  // Grouped GEMM with empty groups.
    const std::vector<int64_t> offsets = {0, 0, 37, 37, 101};
    const int64_t n = 67, kk = 45;
    Tensor x = Random({101, kk}, 3), w = Random({4, n, kk}, 4), y = Tensor::Empty({101, n}, moe::DType::kF32);
    moe::kernels::GroupedGemm(x, w, offsets, y);
    Dev dx(x), dw(w), dy(static_cast<size_t>(101 * n), true);
    cu::GroupedGemm(dx.f(), dw.f(), offsets, dy.f(), n, kk, s);
    Compare("grouped_gemm", dy.Host(), y, 1e-4, 1e-4);
  }
  {  // RMSNorm forward and backward.
    Tensor x = Random({rows, d}, 5), w = Random({d}, 6), g = Random({rows, d}, 7);
    Tensor y = Tensor::Empty({rows, d}, moe::DType::kF32), rstd = Tensor::Empty({rows}, moe::DType::kF32);
    moe::kernels::RmsNormForward(x, w, 1e-6, y, rstd);
    Tensor dx = Tensor::Empty({rows, d}, moe::DType::kF32), dwt = Tensor::Zeros({d}, moe::DType::kF32);
    moe::kernels::RmsNormBackward(g, x, w, rstd, dx, dwt);
    Dev dX(x), dW(w), dG(g), dY(static_cast<size_t>(rows * d), true), dR(static_cast<size_t>(rows), true),
        dDX(static_cast<size_t>(rows * d), true), dDW(static_cast<size_t>(d), false);
    cu::RmsNormForward(dX.f(), dW.f(), 1e-6f, dY.f(), dR.f(), rows, d, s);
    cu::RmsNormBackward(dG.f(), dX.f(), dW.f(), dR.f(), dDX.f(), dDW.f(), rows, d, s);
    Compare("rmsnorm fwd", dY.Host(), y);
    Compare("rmsnorm bwd dx", dDX.Host(), dx);
    Compare("rmsnorm bwd dw", dDW.Host(), dwt, 1e-4, 1e-4);
  }
  {  // RoPE forward and inverse.
    const int64_t heads = 3, hd = 18, seq = 7, t = 21;
    Tensor q = Random({t, 3 * heads * hd}, 8);
    Tensor ref = q.Clone();
    moe::kernels::RopeForward(ref, seq, heads, hd, 10000.0);
    Dev dq(q);
    cu::Rope(dq.f(), t, seq, heads, hd, 10000.0, false, s);
    Compare("rope fwd", dq.Host(), ref);
    moe::kernels::RopeBackward(ref, seq, heads, hd, 10000.0);
    cu::Rope(dq.f(), t, seq, heads, hd, 10000.0, true, s);
    Compare("rope bwd", dq.Host(), ref);
  }
  {  // SwiGLU.
    Tensor gu = Random({rows, 2 * f}, 9, -4, 4), g = Random({rows, f}, 10);
    Tensor out = Tensor::Empty({rows, f}, moe::DType::kF32), dgu = Tensor::Empty({rows, 2 * f}, moe::DType::kF32);
    moe::kernels::SwigluForward(gu, out);
    moe::kernels::SwigluBackward(gu, g, dgu);
    Dev dGU(gu), dG(g), dO(static_cast<size_t>(rows * f), true), dD(static_cast<size_t>(rows * 2 * f), true);
    cu::SwigluForward(dGU.f(), dO.f(), rows, f, s);
    cu::SwigluBackward(dGU.f(), dG.f(), dD.f(), rows, f, s);
    Compare("swiglu fwd", dO.Host(), out);
    Compare("swiglu bwd", dD.Host(), dgu);
  }
  {  // Cross-entropy and its gradient.
    Tensor logits = Random({tokens, vocab}, 11, -5, 5);
    Tensor targets = Tensor::Empty({tokens}, moe::DType::kI32);
    for (int64_t i = 0; i < tokens; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>((i * 37) % vocab);
    Tensor grad = Tensor::Empty({tokens, vocab}, moe::DType::kF32);
    const double loss = moe::kernels::CrossEntropy(logits, targets, 0.5, grad);
    Dev dL(logits), dT(targets), dGr(static_cast<size_t>(tokens * vocab), true);
    const double gl = cu::CrossEntropy(dL.f(), dT.i(), tokens, vocab, 0.5f, dGr.f(), s);
    Tensor lt = Tensor::FromVector<float>({static_cast<float>(loss)}, {1});
    Compare("cross_entropy loss", {static_cast<float>(gl)}, lt);
    Compare("cross_entropy grad", dGr.Host(), grad, 1e-4, 1e-7);
  }
  {  // AdamW.
    Tensor p = Random({10007}, 12), g = Random({10007}, 13), m = Random({10007}, 14, 0, 0.1), v = Random({10007}, 15, 0, 0.01);
    Dev dP(p), dG(g), dM(m), dV(v);
    moe::kernels::AdamWConfig c{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 7, .grad_scale = 0.5};
    moe::kernels::AdamW(p, g, m, v, c);
    cu::AdamW(dP.f(), dG.f(), dM.f(), dV.f(), 10007, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f, s);
    Compare("adamw param", dP.Host(), p, 1e-5, 1e-7);
    Compare("adamw m", dM.Host(), m);
    Compare("adamw v", dV.Host(), v);
  }
  {  // Dispatch helpers: gather, gather-sum, combine and its backward.
    const int64_t experts = 5;
    std::vector<int32_t> idx(static_cast<size_t>(tokens * k));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < k; ++j) idx[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((t + 2 * j) % experts);
    auto plan = moe::kernels::BuildDispatchPlan(idx.data(), tokens, k, experts);
    Tensor tor = Tensor::FromVector(plan.token_of_row, {tokens * k}), ros = Tensor::FromVector(plan.row_of_slot, {tokens, k});
    Tensor x = Random({tokens, d}, 16), yp = Random({tokens * k, d}, 17), w = Random({tokens, k}, 18), dy = Random({tokens, d}, 19);
    Tensor xp = Tensor::Empty({tokens * k, d}, moe::DType::kF32), dx = Tensor::Empty({tokens, d}, moe::DType::kF32);
    moe::kernels::GatherRows(x, tor, xp);
    moe::kernels::PermuteBackward(yp, ros, dx);
    Tensor y = Random({tokens, d}, 20);
    Dev dY0(y);
    moe::kernels::CombineForward(yp, ros, w, y);
    Tensor dyp = Tensor::Empty({tokens * k, d}, moe::DType::kF32), dw = Tensor::Empty({tokens, k}, moe::DType::kF32);
    moe::kernels::CombineBackward(dy, yp, ros, w, dyp, dw);
    Dev dX(x), dTor(tor), dRos(ros), dYP(yp), dW(w), dDY(dy), dXP(static_cast<size_t>(tokens * k * d), true),
        dDX(static_cast<size_t>(tokens * d), true), dDYP(static_cast<size_t>(tokens * k * d), true), dDW(static_cast<size_t>(tokens * k), true);
    cu::GatherRows(dX.f(), dTor.i(), dXP.f(), tokens * k, d, s);
    cu::PermuteBackward(dYP.f(), dRos.i(), dDX.f(), tokens, k, d, s);
    cu::CombineForward(dYP.f(), dRos.i(), dW.f(), dY0.f(), tokens, k, d, s);
    cu::CombineBackward(dDY.f(), dYP.f(), dRos.i(), dW.f(), dDYP.f(), dDW.f(), tokens, k, d, s);
    Compare("gather_rows", dXP.Host(), xp, 0, 0);
    Compare("permute bwd", dDX.Host(), dx);
    Compare("combine fwd", dY0.Host(), y);
    Compare("combine bwd dyp", dDYP.Host(), dyp);
    Compare("combine bwd dw", dDW.Host(), dw, 1e-4, 1e-5);
  }
  {  // Embedding forward and backward (the GPU's scatter-add order differs: a tolerance, not equality).
    const int64_t vocab_e = 53;
    Tensor table = Random({vocab_e, d}, 22), g = Random({tokens, d}, 23);
    Tensor ids = Tensor::Empty({tokens}, moe::DType::kI32);
    for (int64_t i = 0; i < tokens; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % vocab_e);
    Tensor out = Tensor::Empty({tokens, d}, moe::DType::kF32), dtab = Tensor::Zeros({vocab_e, d}, moe::DType::kF32);
    moe::kernels::EmbeddingForward(table, ids, out);
    moe::kernels::EmbeddingBackward(g, ids, dtab);
    Dev dT(table), dI(ids), dG(g), dO(static_cast<size_t>(tokens * d), true), dD(static_cast<size_t>(vocab_e * d), false);
    cu::EmbeddingForward(dT.f(), dI.i(), dO.f(), tokens, d, s);
    cu::EmbeddingBackward(dG.f(), dI.i(), dD.f(), tokens, d, s);
    Compare("embedding fwd", dO.Host(), out, 0, 0);
    Compare("embedding bwd", dD.Host(), dtab, 1e-5, 1e-6);
  }
  {  // Routing: scores, the chosen experts (exactly), weights; the backward; the balance loss.
    const int64_t e = 16, kk = 4, seqs = 3, len = 33, t = seqs * len;
    moe::kernels::RouterConfig cfg{.top_k = kk, .num_groups = 4, .topk_groups = 2, .sigmoid = true, .route_scale = 2.5, .use_bias = true};
    Tensor logits = Random({t, e}, 24, -3, 3), bias = Random({e}, 25, -0.2, 0.2), gw = Random({t, kk}, 26);
    Tensor scores = Tensor::Empty({t, e}, moe::DType::kF32), idx = Tensor::Empty({t, kk}, moe::DType::kI32),
           w = Tensor::Empty({t, kk}, moe::DType::kF32);
    moe::kernels::RouterForward(logits, bias, cfg, scores, idx, w);
    Tensor dscores = Tensor::Zeros({t, e}, moe::DType::kF32);
    const double aux = moe::kernels::SeqAuxLoss(scores, idx, seqs, len, 0.01, dscores);
    Tensor dlogits = Tensor::Empty({t, e}, moe::DType::kF32);
    moe::kernels::RouterBackward(scores, idx, gw, dscores, cfg, dlogits);
    Dev dL(logits), dB(bias), dGW(gw), dS(static_cast<size_t>(t * e), true), dIdx(static_cast<size_t>(t * kk), true),
        dW(static_cast<size_t>(t * kk), true), dDS(static_cast<size_t>(t * e), false), dDL(static_cast<size_t>(t * e), true);
    cu::RouterForward(dL.f(), dB.f(), t, e, kk, 4, 2, true, 2.5f, true, dS.f(), dIdx.i(), dW.f(), s);
    const double gaux = cu::SeqAuxLoss(dS.f(), dIdx.i(), seqs, len, e, kk, 0.01f, dDS.f(), s);
    cu::RouterBackward(dS.f(), dIdx.i(), dGW.f(), dDS.f(), t, e, kk, true, 2.5f, dDL.f(), s);
    std::vector<int32_t> gidx(static_cast<size_t>(t * kk));
    cudaMemcpy(gidx.data(), dIdx.p, gidx.size() * 4, cudaMemcpyDeviceToHost);
    std::vector<float> gidx_f(gidx.begin(), gidx.end());
    Tensor idx_f = Tensor::Empty({t, kk}, moe::DType::kF32);
    for (int64_t i = 0; i < t * kk; ++i) idx_f.data<float>()[i] = static_cast<float>(idx.data<int32_t>()[i]);
    Compare("router scores", dS.Host(), scores);
    Compare("router top-k", gidx_f, idx_f, 0, 0);
    Compare("router weights", dW.Host(), w);
    Compare("balance loss", {static_cast<float>(gaux)}, Tensor::FromVector<float>({static_cast<float>(aux)}, {1}), 1e-4, 1e-9);
    Compare("balance loss grad", dDS.Host(), dscores, 1e-4, 1e-9);
    Compare("router bwd", dDL.Host(), dlogits, 1e-4, 1e-6);
  }
  {  // Causal attention forward and backward, awkward sizes.
    const int64_t b = 2, seq = 37, heads = 3, hdim = 10, t = b * seq;
    Tensor qkv = Random({t, 3 * heads * hdim}, 27, -2, 2), g = Random({t, heads * hdim}, 28);
    Tensor out = Tensor::Empty({t, heads * hdim}, moe::DType::kF32), probs = Tensor::Empty({b, heads, seq, seq}, moe::DType::kF32);
    moe::kernels::AttentionForward(qkv, b, seq, heads, hdim, out, probs);
    Tensor dqkv = Tensor::Empty(qkv.shape(), moe::DType::kF32);
    moe::kernels::AttentionBackward(qkv, probs, g, b, seq, heads, hdim, dqkv);
    Dev dQ(qkv), dG(g), dO(static_cast<size_t>(t * heads * hdim), true), dP(static_cast<size_t>(b * heads * seq * seq), true),
        dD(static_cast<size_t>(qkv.numel()), true), dScratch(static_cast<size_t>(heads * seq * seq), true);
    cu::AttentionForward(dQ.f(), b, seq, heads, hdim, dO.f(), dP.f(), s);
    cu::AttentionBackward(dQ.f(), dP.f(), dG.f(), b, seq, heads, hdim, dD.f(), dScratch.f(), s);
    Compare("attention fwd", dO.Host(), out, 1e-4, 1e-5);
    Compare("attention probs", dP.Host(), probs, 1e-4, 1e-6);
    Compare("attention bwd", dD.Host(), dqkv, 1e-3, 1e-5);
  }
  {  // Sum of squares.
    Tensor t = Random({100003}, 21);
    Dev dt(t);
    const double ref = moe::kernels::SumSquares(t), got = cu::SumSquares(dt.f(), 100003, s);
    Compare("sum_squares", {static_cast<float>(got)}, Tensor::FromVector<float>({static_cast<float>(ref)}, {1}), 1e-6, 0);
  }
  std::printf("%-22s %-6s %s\n", "KERNEL", "RESULT", "DETAIL");
  for (const auto& r : g_rows) std::printf("%s\n", r.c_str());
  std::printf("%s: %d of %zu kernel checks failed\n", g_failures ? "FAIL" : "PASS", g_failures, g_rows.size());
  return g_failures ? 1 : 0;
}
