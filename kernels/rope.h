// Rotary position embedding, in place, on a block of columns of every head. Token t of a batch of
// sequences sits at position first_position + t % seq_len (first_position: where decoding with a
// cache continues a sequence; 0 in training); pair j rotates by angle position * inv_freq[j].
//   half-split (GPT-NeoX/Llama, our MHA): pairs (j, j + d/2)
//   pairs (DeepSeek's released weights, MLA): adjacent pairs (2j, 2j + 1)
// inv_freq carries the frequencies, so YaRN's corrected ones (worker/engine/model/rope_freqs.h)
// need nothing here.
#pragma once

#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels {

//   x [T, heads * stride]: head h's rotated columns are [h*stride + offset, h*stride + offset + d),
//     d = 2 * inv_freq.numel(), stride = x.dim(1) / heads
//   inv_freq [d/2] on x's device (f32; f64 for f64 x)
void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset,
                 const Tensor& inv_freq, RopeLayout layout, int64_t first_position = 0);
// The inverse rotation (a rotation's transpose), applied to a gradient in place.
void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset,
                  const Tensor& inv_freq, RopeLayout layout, int64_t first_position = 0);

}  // namespace moe::kernels
