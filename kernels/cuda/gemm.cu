// GEMMs through cuBLAS (cublasGemmEx, fp32 compute): the dense Gemm and the grouped GEMMs over
// experts with their backward. A grouped GEMM is one cuBLAS call per non-empty expert (the expert
// loop of Megatron's non-grouped path) when the experts have many rows each, and one
// cublasGemmGroupedBatchedEx call (every expert a group of one GEMM, run side by side) when they
// have very few (below 128 rows each: on an H200 a call per expert was faster from 128 rows up).
// MOE_GROUPED_GEMM=loop|grouped overrides the choice (the benchmark compares them); without the
// grouped entry point (cuBLAS before 12.5), or for types it does not take, the loop runs.
// MOE_GROUPED_GEMM=cutlass runs the bf16 forward through CUTLASS's Hopper grouped GEMM
// (kernels/hopper_grouped_gemm.h) where it takes the call; GroupedGemmDeviceCounts always tries it,
// with the counts read from device memory.
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/gemm_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_state.h"
#ifdef MOE_WITH_SM90A
#include "kernels/hopper_grouped_gemm.h"
#endif
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

// Row-major C = alpha op(A) op(B) + beta C. A and B share one type (CUDA_R_32F or CUDA_R_16BF); C
// may be either (bf16 inputs into an fp32 C: weight gradients and fp32 logits).
void RowMajorGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, cudaDataType_t ab_type,
                  float beta, void* c, int64_t ldc, cudaDataType_t c_type) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. k == 0
  // makes a leading dimension 0, which cuBLAS rejects: it is a scale of C by beta (cuBLAS does that
  // with valid leading dimensions).
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  const cublasStatus_t st =
      Cublas().gemm_ex(static_cast<cublasHandle_t>(CublasHandle()),
                       trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                       static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                       ab_type, static_cast<int>(ldb), a, ab_type, static_cast<int>(lda), &beta, c,
                       c_type, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx failed: " << Cublas().status_string(st)
                                         << " (m " << m << ", n " << n << ", k " << k << ")";
}

// Row `row` of a [R, cols] tensor, as a byte address.
const void* RowPtr(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.raw()) +
         static_cast<size_t>(row * t.dim(1)) * DTypeSize(t.dtype());
}
void* RowPtrMut(const Tensor& t, int64_t row) { return const_cast<void*>(RowPtr(t, row)); }
// fn(group, first row, rows) for every non-empty group.
template <typename Fn>
void ForEachGroup(const std::vector<int64_t>& offsets, Fn&& fn) {
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    if (rows > 0) fn(static_cast<int64_t>(g), r0, rows);
  }
}
// Group g's [N, K] slice of a [G, N, K] tensor.
const void* Slice(const Tensor& w, int64_t g) {
  return static_cast<const char*>(w.raw()) +
         static_cast<size_t>(g * w.dim(1) * w.dim(2)) * DTypeSize(w.dtype());
}

// One row-major GEMM of a grouped call (the operands RowMajorGemm takes).
struct Piece {
  const void* a;
  const void* b;
  void* c;
  int64_t m, n, k, lda, ldb, ldc;
};

// Rows per expert (the mean over non-empty experts) below which the grouped call is chosen.
// Measured on an H200 (cuBLAS 13.0, w13's shape, 32 experts; docs/benchmarks.md, "GPU"): a call per
// expert reached 0.43, 0.92 and 1.02 of the dense rate at 128, 512 and 4,096 rows, the grouped call
// 0.36, 0.40 and 0.38, so the loop wins from 128 rows up; below that both are bound by their
// launches and the one grouped call is fewer of them (not yet measured there).
constexpr int64_t kGroupedBelowRows = 128;

bool ChooseGrouped(int64_t rows, int64_t pieces) {
  const GroupedGemmMode mode = GetGroupedGemmMode();
  if (Cublas().grouped_gemm == nullptr || pieces < 2 || mode == GroupedGemmMode::kLoop)
    return false;
  return mode == GroupedGemmMode::kGrouped || rows < kGroupedBelowRows * pieces;
}

// Up to kMaxPieces pieces, column-major as cuBLAS sees them (operands swapped, as RowMajorGemm
// does).
cublasStatus_t GroupedChunk(const Piece* p, int n, bool trans_a, bool trans_b, float alpha,
                            float beta, cudaDataType_t ab, cudaDataType_t ct) {
  PiecePointers ptrs;
  std::vector<int> m(n), nn(n), k(n), lda(n), ldb(n), ldc(n), size(n, 1);
  std::vector<cublasOperation_t> op_a(n, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N),
      op_b(n, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  std::vector<float> alphas(n, alpha), betas(n, beta);
  for (int i = 0; i < n; ++i) {
    ptrs.a[i] = p[i].b, ptrs.b[i] = p[i].a, ptrs.c[i] = p[i].c;
    m[i] = static_cast<int>(p[i].n), nn[i] = static_cast<int>(p[i].m),
    k[i] = static_cast<int>(p[i].k);
    lda[i] = static_cast<int>(std::max<int64_t>(p[i].ldb, 1)),
    ldb[i] = static_cast<int>(std::max<int64_t>(p[i].lda, 1));
    ldc[i] = static_cast<int>(p[i].ldc);
  }
  Tensor table =
      Tensor::Empty({3 * kMaxPieces}, DType::kI64, CurrentDevice());  // the three pointer arrays
  void** base = static_cast<void**>(table.raw());
  WritePointersKernel<<<1, kMaxPieces, 0, Stream()>>>(ptrs, n, const_cast<const void**>(base),
                                                      const_cast<const void**>(base + kMaxPieces),
                                                      base + 2 * kMaxPieces);
  return Cublas().grouped_gemm(
      static_cast<cublasHandle_t>(CublasHandle()), op_a.data(), op_b.data(), m.data(), nn.data(),
      k.data(), alphas.data(), const_cast<const void* const*>(base), ab, lda.data(),
      const_cast<const void* const*>(base + kMaxPieces), ab, ldb.data(), betas.data(),
      base + 2 * kMaxPieces, ct, ldc.data(), n, size.data(), CUBLAS_COMPUTE_32F);
}

// The pieces as grouped calls when chosen (false: the caller loops). Only A, B and C of one type go
// to the grouped call (cuBLAS documents no mixed ones: bf16 inputs into an fp32 weight gradient
// loop); if cuBLAS refuses the first chunk anyway, the loop runs from then on, said once.
bool RunGrouped(const std::vector<Piece>& pieces, int64_t rows, bool trans_a, bool trans_b,
                float alpha, float beta, cudaDataType_t ab, cudaDataType_t ct) {
  static std::atomic<bool> refused{false};
  if (ab != ct || refused.load() || !ChooseGrouped(rows, static_cast<int64_t>(pieces.size())))
    return false;
  for (size_t i = 0; i < pieces.size(); i += kMaxPieces) {
    const int n = static_cast<int>(std::min<size_t>(kMaxPieces, pieces.size() - i));
    const cublasStatus_t st =
        GroupedChunk(pieces.data() + i, n, trans_a, trans_b, alpha, beta, ab, ct);
    if (st != CUBLAS_STATUS_SUCCESS && i == 0) {  // nothing written yet: the loop does it all
      if (!refused.exchange(true)) {
        std::fprintf(stderr,
                     "cublasGemmGroupedBatchedEx refused a grouped GEMM (%s): a call per expert "
                     "from now on\n",
                     Cublas().status_string(st));
      }
      return false;
    }
    MOE_CHECK(st == CUBLAS_STATUS_SUCCESS)
        << "cublasGemmGroupedBatchedEx failed: " << Cublas().status_string(st) << " (" << n
        << " experts)";
  }
  return true;
}

// The grouped GEMM over `offsets`: piece(g, r0, rows) gives expert g's GEMM; one grouped call or a
// loop.
template <typename PieceFn>
void Grouped(const std::vector<int64_t>& offsets, bool trans_a, bool trans_b, float beta,
             cudaDataType_t ab, cudaDataType_t ct, PieceFn&& piece) {
  std::vector<Piece> pieces;
  ForEachGroup(offsets,
               [&](int64_t g, int64_t r0, int64_t rows) { pieces.push_back(piece(g, r0, rows)); });
  if (RunGrouped(pieces, offsets.back() - offsets.front(), trans_a, trans_b, 1.f, beta, ab, ct))
    return;
  for (const Piece& p : pieces) {
    RowMajorGemm(trans_a, trans_b, p.m, p.n, p.k, 1.f, p.a, p.lda, p.b, p.ldb, ab, beta, p.c, p.ldc,
                 ct);
  }
}

#ifdef MOE_WITH_SM90A
// Each reason CUTLASS's path refused a call, said once (cuBLAS runs it instead).
void SayCutlassRefused(const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mu);
  if (said.insert(why).second)
    std::fprintf(stderr, "CUTLASS's grouped GEMM refused a call (%s): cuBLAS instead\n",
                 why.c_str());
}

bool RanOnCutlass(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                  const Tensor& y) {
  std::string why;
  if (sm90a::GroupedGemmBf16(x.raw(), w.raw(), y.raw(), offsets, w.dim(1), w.dim(2), Stream(),
                             &why))
    return true;
  SayCutlassRefused(why);
  return false;
}
#endif

}  // namespace

bool GroupedGemmOnDeviceCounts(const Tensor& x, const Tensor& w, const Tensor& counts,
                               const Tensor& y) {
  CheckOnCuda({&x, &w, &counts, &y}, "GroupedGemmDeviceCounts");
  if (StorageType({&x, &w, &y}, "GroupedGemmDeviceCounts") != DType::kBF16) return false;
#ifdef MOE_WITH_SM90A
  std::string why;
  if (sm90a::GroupedGemmBf16DeviceCounts(x.raw(), w.raw(), y.raw(), Ptr<const int64_t>(counts),
                                         w.dim(0), x.dim(0), w.dim(1), w.dim(2), Stream(), &why)) {
    CheckLaunch("GroupedGemmDeviceCounts");
    return true;
  }
  SayCutlassRefused(why);
#endif
  return false;
}

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          double alpha, double beta) {
  CheckOnCuda({&a, &b, &c}, "Gemm");
  const DType ab = StorageType({&a, &b}, "Gemm");
  StorageType({&c}, "Gemm");
  const int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  RowMajorGemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), a.raw(), a.dim(1), b.raw(),
               b.dim(1), CudaType(ab), static_cast<float>(beta), c.raw(), c.dim(1),
               CudaType(c.dtype()));
  CheckLaunch("Gemm");
}

void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                 const Tensor& y) {
  CheckOnCuda({&x, &w, &y}, "GroupedGemm");
  const DType d = StorageType({&x, &w, &y}, "GroupedGemm");
#ifdef MOE_WITH_SM90A
  if (GetGroupedGemmMode() == GroupedGemmMode::kCutlass && d == DType::kBF16 &&
      RanOnCutlass(x, w, offsets, y))
    return CheckLaunch("GroupedGemm");
#endif
  const int64_t n = w.dim(1), k = w.dim(2);
  Grouped(offsets, false, true, 0.f, CudaType(d), CudaType(d),
          [&](int64_t g, int64_t r0, int64_t rows) {
            return Piece{RowPtr(x, r0), Slice(w, g), RowPtrMut(y, r0), rows, n, k, k, k, n};
          });
  CheckLaunch("GroupedGemm");
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets,
                             const Tensor& dx) {
  CheckOnCuda({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const DType d = StorageType({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const int64_t n = w.dim(1), k = w.dim(2);
  Grouped(offsets, false, false, 0.f, CudaType(d), CudaType(d),
          [&](int64_t g, int64_t r0, int64_t rows) {
            return Piece{RowPtr(dy, r0), Slice(w, g), RowPtrMut(dx, r0), rows, k, n, n, k, k};
          });
  CheckLaunch("GroupedGemmBackwardData");
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x,
                               const std::vector<int64_t>& offsets, const Tensor& dw) {
  CheckOnCuda({&dy, &x, &dw}, "GroupedGemmBackwardWeight");
  const DType d = StorageType({&dy, &x}, "GroupedGemmBackwardWeight");
  StorageType({&dw}, "GroupedGemmBackwardWeight");
  const int64_t n = dw.dim(1), k = dw.dim(2);
  Grouped(
      offsets, true, false, 1.f, CudaType(d), CudaType(dw.dtype()),
      [&](int64_t g, int64_t r0, int64_t rows) {
        return Piece{
            RowPtr(dy, r0), RowPtr(x, r0), const_cast<void*>(Slice(dw, g)), n, k, rows, n, k, k};
      });
  CheckLaunch("GroupedGemmBackwardWeight");
}

}  // namespace moe::kernels::cuda
