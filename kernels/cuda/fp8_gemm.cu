// FP8 GEMMs on tensor cores: cuBLASLt's block scaling (cuBLAS 12.9 or later, sm_90), the three
// GEMMs of a linear layer with DeepSeek-V3's tiles (kernels/fp8.h Fp8GemmForward/Dgrad/Wgrad).
//
// Each operand is quantised here into what cuBLASLt reads: e4m3 values with the reduction dimension
// contiguous, and fp32 scales, computed as the emulation computes them (amax / 448 per tile, the
// hardware's round-to-nearest-even saturating conversion), so the product differs from the
// emulation only in the order of its fp32 sums. cuBLASLt multiplies column-major and only "TN": for
// row-major Y [P, Q] = X [P, R] · W [Q, R]ᵀ it computes D (m = Q, n = P, k = R) = op_T(A = W) · B =
// X, and D column-major with ld Q is Y row-major. Scale layouts (cuBLAS docs, "Scaling factors
// layouts"):
//   VEC128_32F (1 x 128 along the reduction): one float per (outer index o, reduction block l) at
//     l * outer + o (outer-major);
//   BLK128x128_32F (128 x 128 blocks): one float per (outer block, reduction block l) at
//     outer_block * L4 + l, L4 the reduction blocks rounded up to a multiple of 4 (unpadded,
//     cuBLASLt reads wrong scales silently: pytorch#166752).
// The three GEMMs: forward y = x · wᵀ (x 1 x 128, w 128 x 128); dgrad dx = dy · w = dy · (wᵀ)ᵀ (dy
// 1 x 128, wᵀ quantised from w's blocks); wgrad dw = dyᵀ · x = dyᵀ · (xᵀ)ᵀ (both 128 x 1 along the
// tokens: quantised transposed, the tokens zero-padded to a multiple of 128).
//
// Nothing here has run on a GPU yet: Fp8GemmSupport checks all three against the emulation once per
// process before training uses them, and refuses FP8 with the figures when they disagree.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp8.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/fp8_gemm_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

// One operand as cuBLASLt reads it: e4m3 [outer, red] (red contiguous) and its scales.
struct Operand {
  Tensor q, scales;
  int64_t outer = 0, red = 0;
  int mode = 0;  // cublasLtMatmulMatrixScale_t
};

// The operand of x in 1 x 128 tiles (QuantVec128Kernel), its outer dimension padded to a multiple
// of 16: cuBLASLt wants the 1 x 128-scaled operand's outer dimension a multiple of 8 and its
// scales' outer stride a multiple of 4 (Transformer Engine's limits; the tokens are any number).
Operand QuantVec128(const Tensor& x, bool transpose, int64_t red_pad) {
  Operand op;
  op.outer = RoundUp(transpose ? x.dim(1) : x.dim(0), 16);
  op.red = red_pad;
  op.mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const int64_t blocks = CeilDiv(red_pad, kBlock);
  // e4m3 bytes live in an i32 tensor of a quarter the size (the allocator's unit is the tensor).
  op.q = Tensor::Empty({std::max<int64_t>(1, CeilDiv(op.outer * red_pad, 4))}, DType::kI32,
                       x.device());
  op.scales = Tensor::Empty({std::max<int64_t>(1, op.outer * blocks)}, DType::kF32, x.device());
  if (op.outer == 0 || red_pad == 0) return op;
  const dim3 grid(static_cast<unsigned>(op.outer), static_cast<unsigned>(blocks));
  MOE_CUDA_TYPED(StorageType({&x}, "Fp8Gemm"), T, {
    auto* q = static_cast<uint8_t*>(op.q.raw());
    if (transpose) {  // the Wgrad operands: staged through shared memory, read coalesced
      const dim3 tgrid(static_cast<unsigned>(CeilDiv(op.outer, kVecOuterTile)),
                       static_cast<unsigned>(blocks));
      QuantVec128TransposedKernel<T><<<tgrid, kBlock, 0, Stream()>>>(
          Ptr<T>(x), x.dim(0), x.dim(1), op.outer, red_pad, q, Ptr<float>(op.scales));
    } else {
      QuantVec128Kernel<T><<<grid, kBlock, 0, Stream()>>>(Ptr<T>(x), x.dim(0), x.dim(1), op.outer,
                                                          red_pad, q, Ptr<float>(op.scales));
    }
  });
  CheckLaunch("Fp8Gemm: quantise 1 x 128");
  return op;
}

Operand QuantBlk128(const Tensor& w, bool transpose) {
  Operand op;
  op.outer = transpose ? w.dim(1) : w.dim(0);
  op.red = transpose ? w.dim(0) : w.dim(1);
  op.mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int64_t ob = CeilDiv(op.outer, kBlock), l4 = CeilDiv(CeilDiv(op.red, kBlock), 4) * 4;
  op.q =
      Tensor::Empty({std::max<int64_t>(1, CeilDiv(op.outer * op.red, 4))}, DType::kI32, w.device());
  op.scales = Tensor::Empty({std::max<int64_t>(1, ob * l4)}, DType::kF32, w.device());
  const dim3 grid(static_cast<unsigned>(ob), static_cast<unsigned>(CeilDiv(op.red, kBlock)));
  MOE_CUDA_TYPED(StorageType({&w}, "Fp8Gemm"), T, {
    QuantBlk128Kernel<T><<<grid, kBlock, 0, Stream()>>>(Ptr<T>(w), w.dim(0), w.dim(1), transpose,
                                                        l4, static_cast<uint8_t*>(op.q.raw()),
                                                        Ptr<float>(op.scales));
  });
  CheckLaunch("Fp8Gemm: quantise 128 x 128");
  return op;
}

// ---- cuBLASLt, loaded on first use as cuBLAS is (kernels/cuda/cublas_api.h), from the same place
// ----

struct LtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetVersion) version = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  std::string problem;  // why it cannot be had
};

const LtApi& Lt() {
  static const LtApi api = [] {
    LtApi a;
    std::string tried;
    void* lib = OpenToolkitLibrary("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), &tried);
    if (lib == nullptr) {
      const char* err = dlerror();
      a.problem = "cannot load cuBLASLt (tried " + tried + "): " + (err != nullptr ? err : "");
      return a;
    }
    ResolveSymbol(lib, "cuBLASLt", "cublasLtCreate", &a.create, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtGetVersion", &a.version, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulDescCreate", &a.desc_create, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulDescSetAttribute", &a.desc_set, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulDescDestroy", &a.desc_destroy, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatrixLayoutCreate", &a.layout_create, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatrixLayoutDestroy", &a.layout_destroy, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulPreferenceCreate", &a.pref_create, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulPreferenceSetAttribute", &a.pref_set, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulPreferenceDestroy", &a.pref_destroy, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", &a.heuristic, &a.problem);
    ResolveSymbol(lib, "cuBLASLt", "cublasLtMatmul", &a.matmul, &a.problem);
    return a;
  }();
  return api;
}

// The handle and a 32 MiB workspace, made once (one process drives one device).
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t{32} << 20;
};

LtContext& Context() {
  static LtContext c = [] {
    LtContext ctx;
    MOE_CHECK(Lt().problem.empty()) << Lt().problem;
    MOE_CHECK(Lt().create(&ctx.handle) == CUBLAS_STATUS_SUCCESS) << "cublasLtCreate failed";
    MOE_CHECK(cudaMalloc(&ctx.workspace, ctx.workspace_bytes) == cudaSuccess) << LastError();
    return ctx;
  }();
  return c;
}

// The descriptors of one call, destroyed with it.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    const LtApi& lt = Lt();
    if (pref) lt.pref_destroy(pref);
    if (d) lt.layout_destroy(d);
    if (b) lt.layout_destroy(b);
    if (a) lt.layout_destroy(a);
    if (desc) lt.desc_destroy(desc);
  }
};

template <typename V>
bool SetDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  return Lt().desc_set(d, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
}

// y32 row-major [P, Q] = beta * y32 + X · Wᵀ with X = xop [P, R], W = wop [Q, R]. "" or what
// failed.
std::string LtGemm(const Operand& wop, const Operand& xop, const Tensor& y32, float beta) {
  const LtApi& lt = Lt();
  LtContext& ctx = Context();
  LtCall call;
  const int64_t m = wop.outer, n = xop.outer, k = wop.red;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int32_t amode = wop.mode, bmode = xop.mode;
  const int8_t fast = 0;
  const void* ascale = wop.scales.raw();
  const void* bscale = xop.scales.raw();
  if (lt.desc_create(&call.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
    return "cublasLtMatmulDescCreate";
  if (!SetDesc(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, tb) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, amode) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, bmode) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ascale) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, bscale) ||
      !SetDesc(call.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast)) {
    return "the matmul descriptor's block-scaling attributes (cuBLAS 12.9 or later needed)";
  }
  if (lt.layout_create(&call.a, CUDA_R_8F_E4M3, k, m, k) != CUBLAS_STATUS_SUCCESS ||
      lt.layout_create(&call.b, CUDA_R_8F_E4M3, k, n, k) != CUBLAS_STATUS_SUCCESS ||
      lt.layout_create(&call.d, CUDA_R_32F, m, n, m) != CUBLAS_STATUS_SUCCESS) {
    return "cublasLtMatrixLayoutCreate";
  }
  if (lt.pref_create(&call.pref) != CUBLAS_STATUS_SUCCESS ||
      lt.pref_set(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_bytes,
                  sizeof(ctx.workspace_bytes)) != CUBLAS_STATUS_SUCCESS) {
    return "the matmul preference";
  }
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  if (lt.heuristic(ctx.handle, call.desc, call.a, call.b, call.d, call.d, call.pref, 1, &heur,
                   &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    return "no cuBLASLt algorithm for block-scaled e4m3 (" + std::to_string(m) + " x " +
           std::to_string(n) + " x " + std::to_string(k) + ", fp32 out)";
  }
  const float alpha = 1.f;
  if (lt.matmul(ctx.handle, call.desc, &alpha, wop.q.raw(), call.a, xop.q.raw(), call.b, &beta,
                y32.raw(), call.d, y32.raw(), call.d, &heur.algo, ctx.workspace,
                ctx.workspace_bytes, Stream()) != CUBLAS_STATUS_SUCCESS) {
    return "cublasLtMatmul";
  }
  return "";
}

// y32 [P, Q] = beta y32 + X · Wᵀ; when X's rows were padded (xop.outer > P), through a scratch of
// the padded rows (beta 0 only: forward and dgrad, whose rows are the tokens). "" or what failed.
std::string RunGemm(const Operand& wop, const Operand& xop, const Tensor& y32, float beta) {
  Tensor out = y32;
  if (xop.outer != y32.dim(0)) {
    if (beta != 0.f) return "padded rows cannot accumulate";
    out = Tensor::Empty({xop.outer, y32.dim(1)}, DType::kF32, y32.device());
  }
  std::string failed = LtGemm(wop, xop, out, beta);
  if (failed.empty() && out.raw() != y32.raw()) y32.CopyFrom(out.Rows(0, y32.dim(0)));
  return failed;
}

// The three GEMMs (kernels/fp8.h), "" or what failed.
std::string TryForward(const Tensor& x, const Tensor& w, const Tensor& y32) {
  return RunGemm(QuantBlk128(w, false), QuantVec128(x, false, x.dim(1)), y32, 0.f);
}
std::string TryDgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32) {
  return RunGemm(QuantBlk128(w, true), QuantVec128(dy, false, dy.dim(1)), dx32, 0.f);
}
std::string TryWgrad(const Tensor& dy, const Tensor& x, const Tensor& dw32, float beta) {
  const int64_t pad = RoundUp(std::max<int64_t>(1, dy.dim(0)), kBlock);  // the tokens, zero-padded
  return RunGemm(QuantVec128(x, true, pad), QuantVec128(dy, true, pad), dw32, beta);
}

// The entry points' checks: CUDA tensors, 2-D, an f32 output, and `shapes_ok` (their shapes agree,
// the weights' dimensions in multiples of 16: cuBLASLt's alignment; partial 128 blocks are fine).
void CheckShapes(const Tensor& a, const Tensor& b, const Tensor& out, const char* op,
                 bool shapes_ok) {
  CheckOnCuda({&a, &b, &out}, op);
  CheckF32(out, op, "out");
  MOE_CHECK(a.ndim() == 2 && b.ndim() == 2 && out.ndim() == 2 && shapes_ok)
      << op << ": " << a.ShapeString() << " and " << b.ShapeString() << " into "
      << out.ShapeString() << " (2-D; the weights' dimensions in multiples of 16)";
}

void Succeeded(const std::string& failed, const char* op) {
  MOE_CHECK(failed.empty()) << op << ": " << failed;
}

}  // namespace

void Fp8GemmForward(const Tensor& x, const Tensor& w, const Tensor& y32) {
  CheckShapes(x, w, y32, "Fp8GemmForward",
              x.dim(1) == w.dim(1) && w.dim(1) % 16 == 0 && w.dim(0) % 16 == 0 &&
                  y32.dim(0) == x.dim(0) && y32.dim(1) == w.dim(0));
  if (x.dim(0) > 0) Succeeded(TryForward(x, w, y32), "Fp8GemmForward");
}

void Fp8GemmDgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32) {
  CheckShapes(dy, w, dx32, "Fp8GemmDgrad",
              dy.dim(1) == w.dim(0) && w.dim(1) % 16 == 0 && w.dim(0) % 16 == 0 &&
                  dx32.dim(0) == dy.dim(0) && dx32.dim(1) == w.dim(1));
  if (dy.dim(0) > 0) Succeeded(TryDgrad(dy, w, dx32), "Fp8GemmDgrad");
}

void Fp8GemmWgrad(const Tensor& dy, const Tensor& x, const Tensor& dw32, float beta) {
  CheckShapes(dy, x, dw32, "Fp8GemmWgrad",
              dy.dim(0) == x.dim(0) && dw32.dim(0) == dy.dim(1) && dw32.dim(1) == x.dim(1) &&
                  dy.dim(1) % 16 == 0 && x.dim(1) % 16 == 0);
  Succeeded(TryWgrad(dy, x, dw32, beta), "Fp8GemmWgrad");
}

std::string TryFp8Gemm(Fp8GemmKind which, const Tensor& a, const Tensor& b, const Tensor& out,
                       float beta) {
  switch (which) {
    case Fp8GemmKind::kForward:
      return TryForward(a, b, out);
    case Fp8GemmKind::kDgrad:
      return TryDgrad(a, b, out);
    case Fp8GemmKind::kWgrad:
      return TryWgrad(a, b, out, beta);
  }
  return "no such FP8 GEMM";
}

std::string Fp8GemmProblem() {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [] {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9) {
      problem =
          "cuBLASLt's 1 x 128 / 128 x 128 block-scaled FP8 runs on compute capability 9.0 (H100, "
          "H200); this "
          "device is " +
          std::to_string(major) + "." + std::to_string(minor) +
          " (Blackwell's MXFP8 GEMMs are not built yet: docs/architecture.md)";
      return;
    }
    if (!Lt().problem.empty()) {
      problem = Lt().problem;
      return;
    }
    if (const size_t v = Lt().version(); v < 120900) {
      problem = "cuBLASLt " + std::to_string(v) + " has no block-scaled FP8 (12.9 or later needed)";
      return;
    }
  });
  return problem;
}

}  // namespace moe::kernels::cuda
