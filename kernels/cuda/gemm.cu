// GEMMs through cuBLAS (cublasGemmEx, fp32 compute): the dense Gemm and the grouped GEMMs over
// experts with their backward, as one cuBLAS call per non-empty group (the expert loop of Megatron's
// non-grouped path); a persistent grouped kernel would save the launch per expert.
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_ops.h"

namespace moe::kernels::cuda {
namespace {

// Row-major C = alpha op(A) op(B) + beta C. A and B share one type (CUDA_R_32F or CUDA_R_16BF); C may
// be either (bf16 inputs into an fp32 C: weight gradients and fp32 logits).
void RowMajorGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                  const void* b, int64_t ldb, cudaDataType_t ab_type, float beta, void* c, int64_t ldc, cudaDataType_t c_type) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. k == 0 makes
  // a leading dimension 0, which cuBLAS rejects: it is a scale of C by beta (cuBLAS does that with
  // valid leading dimensions).
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  const cublasStatus_t st = Cublas().gemm_ex(
      static_cast<cublasHandle_t>(CublasHandle()), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ab_type, static_cast<int>(ldb), a, ab_type,
      static_cast<int>(lda), &beta, c, c_type, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx failed: " << Cublas().status_string(st) << " (m " << m << ", n " << n
                                         << ", k " << k << ")";
}

// Row `row` of a [R, cols] tensor, as a byte address.
const void* RowPtr(const Tensor& t, int64_t row) {
  return static_cast<const char*>(t.raw()) + static_cast<size_t>(row * t.dim(1)) * DTypeSize(t.dtype());
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
  return static_cast<const char*>(w.raw()) + static_cast<size_t>(g * w.dim(1) * w.dim(2)) * DTypeSize(w.dtype());
}

}  // namespace

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta) {
  CheckOnCuda({&a, &b, &c}, "Gemm");
  const DType ab = StorageType({&a, &b}, "Gemm");
  StorageType({&c}, "Gemm");
  const int64_t m = c.dim(0), n = c.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  RowMajorGemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), a.raw(), a.dim(1), b.raw(), b.dim(1), CudaType(ab),
               static_cast<float>(beta), c.raw(), c.dim(1), CudaType(c.dtype()));
  CheckLaunch("Gemm");
}

void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y) {
  CheckOnCuda({&x, &w, &y}, "GroupedGemm");
  const DType d = StorageType({&x, &w, &y}, "GroupedGemm");
  const int64_t n = w.dim(1), k = w.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    RowMajorGemm(false, true, rows, n, k, 1.f, RowPtr(x, r0), k, Slice(w, g), k, CudaType(d), 0.f, RowPtrMut(y, r0), n,
                 CudaType(d));
  });
  CheckLaunch("GroupedGemm");
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx) {
  CheckOnCuda({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const DType d = StorageType({&dy, &w, &dx}, "GroupedGemmBackwardData");
  const int64_t n = w.dim(1), k = w.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    RowMajorGemm(false, false, rows, k, n, 1.f, RowPtr(dy, r0), n, Slice(w, g), k, CudaType(d), 0.f, RowPtrMut(dx, r0), k,
                 CudaType(d));
  });
  CheckLaunch("GroupedGemmBackwardData");
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw) {
  CheckOnCuda({&dy, &x, &dw}, "GroupedGemmBackwardWeight");
  const DType d = StorageType({&dy, &x}, "GroupedGemmBackwardWeight");
  StorageType({&dw}, "GroupedGemmBackwardWeight");
  const int64_t n = dw.dim(1), k = dw.dim(2);
  ForEachGroup(offsets, [&](int64_t g, int64_t r0, int64_t rows) {
    RowMajorGemm(true, false, n, k, rows, 1.f, RowPtr(dy, r0), n, RowPtr(x, r0), k, CudaType(d), 1.f,
                 const_cast<void*>(Slice(dw, g)), k, CudaType(dw.dtype()));
  });
  CheckLaunch("GroupedGemmBackwardWeight");
}

}  // namespace moe::kernels::cuda
