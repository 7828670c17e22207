// Token embedding lookup and its gradient.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

// out[t] = table[ids[t]].            table [V, D], ids i32 [T], out [T, D]
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out);
// dtable[v] += sum over t with ids[t] = v of dout[t], summed in token order (deterministic).
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);

}  // namespace moe::kernels
