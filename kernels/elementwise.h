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
// Row gather: dst[r] = src[index[r]].   src [S, D], index i32 [R], dst [R, D]
void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst);
// dst = src converted to dst's dtype (f32, f64, bf16; bf16 rounds to nearest even). Same numel, same
// device. The mixed-precision path uses it for the bf16 compute copies of fp32 master weights.
void Convert(const Tensor& src, const Tensor& dst);
// Fills t (f32, f64 or bf16, any device) with pseudo-random values uniform in [-1, 1) from `seed`: a
// block of at most 2^20 values made on the host and tiled over the tensor. The benchmarks' inputs
// (matrix units run faster on constant data than on random data).
void FillUniform(const Tensor& t, uint64_t seed);

}  // namespace moe::kernels
