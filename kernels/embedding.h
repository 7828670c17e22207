// Token embedding lookup and its gradient.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

// out[t] = table[ids[t]].            table [V, D], ids i32 [T], out [T, D]
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out);
// dtable[v] += sum over t with ids[t] = v of dout[t], summed in token order (deterministic).
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);
// acc (f64 [V, D]) += what EmbeddingBackward adds to a zeroed fp32 dtable (each used row's fp32
// sum in token order, rounded once), touching only the rows some token uses: deterministic
// training's embedding gradient without a table-sized scratch and its conversion pass.
// dout fp32 or bf16.
void EmbeddingBackwardAccumulate(const Tensor& dout, const Tensor& ids, const Tensor& acc);

}  // namespace moe::kernels
