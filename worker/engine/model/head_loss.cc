#include "worker/engine/model/head_loss.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/check.h"
#include "common/memory_model.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/parallel/step_profile.h"

namespace moe::model {

namespace {
std::atomic<int64_t> g_chunk_rows{0};
}  // namespace

void SetLossChunkRows(int64_t rows) {
  MOE_CHECK(rows >= 0) << "SetLossChunkRows: " << rows << " rows";
  g_chunk_rows.store(rows);
}
int64_t GetLossChunkRows() { return g_chunk_rows.load(); }

HeadLoss HeadLossForwardBackward(const Tensor& hn, const Param& head, DType logits_dtype,
                                 const Tensor& targets, double ce_scale, const LossSink& sink) {
  const int64_t rows = hn.dim(0), vocab = head.compute.dim(0);
  MOE_CHECK(hn.ndim() == 2 && head.compute.dim(1) == hn.dim(1))
      << "head loss: hidden states " << hn.ShapeString() << " for a head "
      << head.compute.ShapeString();
  MOE_CHECK(targets.numel() == rows)
      << "head loss: targets " << targets.ShapeString() << " for " << rows << " rows";
  MOE_CHECK(!head.fp8) << "head loss: the head never trains in FP8";
  const int64_t chunk_rows = GetLossChunkRows();
  const int64_t step =
      chunk_rows > 0 ? chunk_rows
                     : LossChunkRows(rows, vocab, static_cast<int64_t>(DTypeSize(logits_dtype)));
  HeadLoss out;
  out.dhn = Tensor::Empty(hn.shape(), hn.dtype(), hn.device());
  const Tensor tgt = targets.Reshape({rows});
  GradSink dw(head);
  for (int64_t b = 0; b < rows; b += step) {
    const int64_t e = std::min(rows, b + step);
    const Tensor x = hn.Rows(b, e), t = tgt.Rows(b, e);
    Tensor logits = Linear(x, head.compute, logits_dtype);
    // The gradient in the activations' dtype: over the logits when that is theirs, else its own
    // buffer, which the kernel writes from the fp32 values (the cast fused).
    const Tensor dlogits = logits.dtype() == hn.dtype()
                               ? logits
                               : Tensor::Empty(logits.shape(), hn.dtype(), hn.device());
    if (sink.set()) {
      kernels::CrossEntropyInto(logits, t, ce_scale, dlogits, sink.acc, sink.slot);
    } else {
      out.ce_sum += kernels::CrossEntropy(logits, t, ce_scale, dlogits);
    }
    logits = Tensor();  // its chunk's memory goes back before the next (dlogits holds it if shared)
    parallel::ProfilePhase phase("head, loss bwd");
    dw.AddGemm(dlogits, true, x, false);
    kernels::Gemm(dlogits, false, head.compute, false, out.dhn.Rows(b, e));
  }
  dw.Commit();
  return out;
}

}  // namespace moe::model
