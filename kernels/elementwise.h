// Elementwise ops and reductions over whole tensors.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace moe::kernels {

void Fill(const Tensor& t, double value);
// y += alpha * x
void Axpy(const Tensor& y, double alpha, const Tensor& x);
// out = a + b (out may alias a or b)
void Add(const Tensor& out, const Tensor& a, const Tensor& b);
// t *= s
void Scale(const Tensor& t, double s);
// Sum of squares, accumulated in double in fixed-size chunks so the result does not depend on the
// thread count.
double SumSquares(const Tensor& t);
// acc[slot] += SumSquares(t) on t's device, without a host read (acc: f64 [n] on t's device). The
// same sum as SumSquares, added in the same order, so the CPU's values are bitwise those of the
// host path.
void SumSquaresInto(const Tensor& t, const Tensor& acc, int64_t slot);
// acc[slot] = the device's bad-index bits (kernels/runtime.h BadIndexKind) gathered since the last
// call, which clears them; on the device, without a host read (acc: f64 [n]). 0 on the CPU, whose
// kernels stop at a bad index with MOE_CHECK.
void FoldBadIndices(const Tensor& acc, int64_t slot);
// Row gather: dst[r] = src[index[r]].   src [S, D], index i32 [R], dst [R, D]
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
// Its backward: dst[index[r]] += src[r], with the indices distinct.   src [R, D], index i32 [R],
// dst [S, D]
void ScatterAddRows(const Tensor& src, const Tensor& index, const Tensor& dst);
// A block of columns between 2-D tensors, each dst row taking src row r / broadcast:
//   dst[r, dst_col + c] = src[r / broadcast, src_col + c]   for c < width;  dst rows = src rows *
//   broadcast
// (splitting and joining MLA's projections; broadcast = heads gives the shared rotary key to every
// head).
void CopyColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                 int64_t width, int64_t broadcast = 1);
// The backward of CopyColumns: sums each group of `group` consecutive src rows into one dst row.
//   dst[r, dst_col + c] += sum_{i < group} src[r * group + i, src_col + c];  src rows = dst rows *
//   group
void SumColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                int64_t width, int64_t group = 1);
// dst = src converted to dst's dtype (f32, f64, bf16; bf16 rounds to nearest even). Same numel,
// same device. The mixed-precision path uses it for the bf16 compute copies of fp32 master weights.
void Convert(const Tensor& src, const Tensor& dst);
// Fills t (f32 or bf16 on any device, f64 on the CPU) with pseudo-random values uniform in [-1, 1)
// from `seed`,
// every element its own draw (kernel_types.h UniformAt), made where t lives: the same values on the
// CPU and on a GPU. The benchmarks' inputs (matrix units run faster on constant or repeating data
// than on random data) and force-balanced routing's scores (moe.force_balanced_routing).
void FillUniform(const Tensor& t, uint64_t seed);

}  // namespace moe::kernels
