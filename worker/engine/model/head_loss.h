// The output head and the cross-entropy of a micro-batch's last hidden states, with their backward
// done at once when gradients are on (Liger's fused linear cross-entropy, in our kernels): a chunk
// of rows at a time, the fp32 logits (one GEMM), the loss and its gradient in one kernel (written
// as bf16 straight from the fp32 logits when the activations are bf16), then the head's weight
// gradient and the rows' gradient (two GEMMs). Vocabulary-wide tensors exist one chunk at a time
// and none is kept for the backward: at DeepSeek-V3's 129,280 words, 4,096 tokens of fp32 logits
// are 2.1 GB, which the unfused head kept from its forward to its backward, with a bf16 copy on
// top.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"
#include "worker/engine/model/moe_layer.h"
#include "worker/engine/model/param.h"

namespace moe::model {

struct HeadLoss {
  Tensor dhn;         // the loss's gradient on hn: hn's shape and dtype
  double ce_sum = 0;  // the rows' losses summed (0 when they went to a device sink)
};

// Rows per chunk for every head loss of this process: 0 (the default) leaves it to LossChunkRows; a
// positive count forces it (tests check the chunked path at small sizes with it; a job short of
// memory could trade GEMM efficiency for a smaller chunk).
void SetLossChunkRows(int64_t rows);
int64_t GetLossChunkRows();

// The loss sum_r -log softmax(hn_r . head^T)[targets_r], the logits in `logits_dtype` (the master
// dtype); with g = ce_scale * (softmax - onehot(targets)) per row, in hn's dtype:
// head.grad += g^T . hn (through a GradSink) and dhn = g . head.
// `sink` set: the losses are added to sink.acc[sink.slot] on the device (no host read).
// Chunks: SetLossChunkRows's rows, else as many as common/memory_model.h's LossChunkRows allows
// (the memory model's own figure; a micro-batch of a small vocabulary is one chunk, the unfused
// sequence of kernels).
//   hn [rows, hidden], head [vocab, hidden], targets i32 [rows]
HeadLoss HeadLossForwardBackward(const Tensor& hn, const Param& head, DType logits_dtype,
                                 const Tensor& targets, double ce_scale, const LossSink& sink);

}  // namespace moe::model
