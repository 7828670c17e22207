// Cross-entropy over a vocabulary, fused with the softmax of the logits.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

// Returns the sum over rows of -log softmax(logits)[target]. When dlogits is defined it receives
// (softmax - onehot(target)) * grad_scale; it may alias logits (the logits are then overwritten),
// or be bf16 where the logits are f32 (computed in f32, rounded once on the way out).
//   logits [T, V], targets i32 [T], dlogits [T, V] or undefined
double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                    const Tensor& dlogits);
// The same, its loss added to acc[slot] on the device (acc: f64 [n] on the logits' device): no host
// read.
void CrossEntropyInto(const Tensor& logits, const Tensor& targets, double grad_scale,
                      const Tensor& dlogits, const Tensor& acc, int64_t slot);

}  // namespace moe::kernels
