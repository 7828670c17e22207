#include "common/flops.h"

namespace moe {

int64_t PaddedVocab(int64_t vocab_size, int64_t multiple) {
  return (vocab_size + multiple - 1) / multiple * multiple;
}

FlopsBreakdown MegatronFlops(const ModelConfig& m, int64_t batch, int64_t seq_length) {
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq_length);
  const double sqsum = static_cast<double>(batch) * static_cast<double>(seq_length) *
                       static_cast<double>(seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double expansion = 3.0;  // SwiGLU: three matrices per FFN
  // MTP counts only when it trains (MtpTrains: depths, and a loss weight that is not always 0).
  const int64_t mtp = m.MtpTrains() ? m.mtp_depth : 0;
  int64_t n_moe = m.num_layers - m.first_k_dense;
  int64_t n_dense = m.first_k_dense;
  // MTP layers take the type of the last layer.
  if (mtp > 0) {
    if (n_moe > 0)
      n_moe += mtp;
    else
      n_dense += mtp;
  }
  const double n_attn = static_cast<double>(m.num_layers + mtp);
  const double heads = static_cast<double>(m.num_heads);

  FlopsBreakdown f;
  f.dense_ffn = tokens * 6 * h * static_cast<double>(m.dense_ffn_hidden) * expansion *
                static_cast<double>(n_dense);
  if (n_moe > 0) {
    f.routed = tokens * 6 * h * static_cast<double>(m.moe.ffn_hidden * m.moe.top_k) * expansion *
               static_cast<double>(n_moe);
    f.shared = tokens * 6 * h * static_cast<double>(m.moe.ffn_hidden * m.moe.num_shared_experts) *
               expansion * static_cast<double>(n_moe);
  }
  double proj = 0;
  double core_per_sq = 0;
  if (m.attention.type == "mla") {
    const auto& a = m.attention;
    const double qk = static_cast<double>(a.qk_nope_head_dim),
                 rope = static_cast<double>(a.qk_rope_head_dim);
    const double v = static_cast<double>(a.v_head_dim);
    const double q_term = a.q_lora_rank > 0
                              ? static_cast<double>(a.q_lora_rank) * (h + heads * (qk + rope) + 1)
                              : h * heads * (qk + rope);
    proj = q_term + static_cast<double>(a.kv_lora_rank) * (h + heads * (qk + v) + 1) + h * rope +
           heads * v * h;
    core_per_sq = heads * (qk + rope) / 2 + heads * v / 2;
  } else {
    // Standard multi-head attention: q, k, v and o projections, each h x h.
    proj = 4 * h * h;
    const double d = static_cast<double>(m.head_dim());
    core_per_sq = heads * d / 2 + heads * d / 2;
  }
  f.attn_proj = tokens * n_attn * 6 * proj;
  f.attn_core = sqsum * n_attn * 6 * core_per_sq;
  f.mtp = tokens * 6 * static_cast<double>(mtp) * (3 * h + 2 * h * h);
  f.logits = tokens * 6 * h * static_cast<double>(PaddedVocab(m.vocab_size)) *
             static_cast<double>(mtp + 1);
  return f;
}

}  // namespace moe
