// FP8 numerics as DeepSeek-V3 trains with them (docs/reference): e4m3 values (OCP "E4M3FN": no
// infinities, largest finite 448, NaN 0x7F/0xFF), round to nearest even, saturating; activations
// scaled per 1x128 tile along the reduction dimension, weights per 128x128 block, each scale amax /
// 448 in fp32; and the Blackwell MXFP8 variant: 1x32 blocks with power-of-two (E8M0) scales.
//
// The CPU reference of the FP8 path: the CUDA kernels and cuBLASLt's block-scaled GEMM are checked
// against these, and the emulated FP8 GEMM is these scales and roundings followed by an fp32 GEMM
// of the dequantised values (Fp8QuantDequant below, which training with --precision fp8 runs on the
// inputs of its linear layers: worker/engine/model/layers.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/fp8_codec.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// What an FP8 GEMM sees of its input: out (f32, x's shape) = Dequantize(Quantize(x)) with tiles of
// tile_rows x tile_cols (power-of-two scales with `mxfp8`). x is f32 or bf16 (f64 on the CPU too):
//   2-D [rows, cols]: one matrix; `row_groups` (offsets 0 = g0 < g1 < ... = rows, optional) makes
//   the
//     tiles along rows restart at each offset, so no tile mixes two experts' tokens (the weight
//     gradient's 128 x 1 tiles over grouped rows);
//   3-D [G, rows, cols]: G matrices tiled each on its own (the experts' weights).
// The CPU path is fp8::Quantize and fp8::Dequantize element for element; the CUDA path converts
// with the hardware's e4m3 rounding (cvt.rn.satfinite) and must match it bitwise.
void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& row_groups = {}, bool mxfp8 = false);

// FP8 on tensor cores (CUDA only): cuBLASLt's block-scaled e4m3 GEMMs (cuBLAS 12.9 or later,
// compute capability 9.0), the three GEMMs of a linear layer with DeepSeek-V3's tiles, fp32
// accumulation:
//   Fp8GemmForward: y32 [M, N]  = x [M, K] (1 x 128 tiles) . w [N, K]^T (128 x 128 blocks)
//   Fp8GemmDgrad:   dx32 [M, K] = dy [M, N] (1 x 128 tiles) . w [N, K] (128 x 128 blocks)
//   Fp8GemmWgrad:   dw32 [N, K] = beta dw32 + dy [M, N]^T . x [M, K] (both 128 x 1 tiles along the
//   tokens)
// Each equals the emulation (Fp8QuantDequant of its inputs with those tiles, then an fp32 GEMM) up
// to the order of the fp32 sums. x, w, dy: f32 or bf16; outputs f32; N and K multiples of 128 (the
// weights' blocks), M any (the tokens).
// Fp8GemmSupport: OK where `device` runs them; else FAILED_PRECONDITION saying why (the CPU
// emulates FP8; another card; a cuBLAS without block scaling; or a disagreement with the emulation
// on the check it makes once per process before training uses them).
Status Fp8GemmSupport(Device device);
void Fp8GemmForward(const Tensor& x, const Tensor& w, const Tensor& y32);
void Fp8GemmDgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32);
void Fp8GemmWgrad(const Tensor& dy, const Tensor& x, const Tensor& dw32, float beta);

}  // namespace moe::kernels
