#include "common/param_count.h"

#include <cstdio>

namespace moe {
namespace {

double D(int64_t v) { return static_cast<double>(v); }

double FfnParams(const ModelConfig& m, int64_t ffn) { return 3 * D(m.hidden_size) * D(ffn); }

double RouterParams(const ModelConfig& m) { return D(m.moe.num_experts) * D(m.hidden_size); }

double SharedParams(const ModelConfig& m) {
  return FfnParams(m, m.moe.ffn_hidden * m.moe.num_shared_experts);
}

double Sum(const std::vector<ParamComponent>& v, bool activated) {
  double s = 0;
  for (const auto& c : v) s += activated ? c.activated : c.total;
  return s;
}

std::string Times(const std::string& what, int64_t n) { return what + " x" + std::to_string(n); }

}  // namespace

double AttentionParams(const ModelConfig& m) {
  const double h = D(m.hidden_size), n = D(m.num_heads);
  if (!m.is_mla()) return 4 * h * h;
  const auto& a = m.attention;
  const double dqk = D(a.qk_head_dim());
  const double q = a.q_lora_rank > 0
                       ? D(a.q_lora_rank) * h + D(a.q_lora_rank) + n * dqk * D(a.q_lora_rank)
                       : n * dqk * h;
  const double kv = D(a.kv_lora_rank + a.qk_rope_head_dim) * h + D(a.kv_lora_rank) +
                    n * D(a.qk_nope_head_dim + a.v_head_dim) * D(a.kv_lora_rank);
  return q + kv + h * n * D(a.v_head_dim);
}

double BlockExpertParams(const ModelConfig& m) {
  return D(m.moe.num_experts) * FfnParams(m, m.moe.ffn_hidden);
}

double BlockParams(const ModelConfig& m, bool moe) {
  const double norms = 2 * D(m.hidden_size);
  const double ffn = moe ? RouterParams(m) + BlockExpertParams(m) + SharedParams(m)
                         : FfnParams(m, m.dense_ffn_hidden);
  return norms + AttentionParams(m) + ffn;
}

ParamCounts CountParameters(const ModelConfig& m) {
  const double h = D(m.hidden_size), table = D(m.vocab_size) * h;
  const int64_t dense = m.first_k_dense, moe = m.num_moe_layers();
  const std::string attn = m.is_mla() ? "attention (MLA)" : "attention (MHA)";
  const double routed_act = D(m.moe.top_k) * FfnParams(m, m.moe.ffn_hidden);
  ParamCounts c;
  c.main.push_back({"embedding", table, table});
  c.main.push_back({Times(attn, m.num_layers), D(m.num_layers) * AttentionParams(m),
                    D(m.num_layers) * AttentionParams(m)});
  c.main.push_back({Times("norms", m.num_layers) + " + final", D(2 * m.num_layers + 1) * h,
                    D(2 * m.num_layers + 1) * h});
  if (dense > 0) {
    const double f = D(dense) * FfnParams(m, m.dense_ffn_hidden);
    c.main.push_back({Times("dense FFN", dense), f, f});
  }
  if (moe > 0) {
    c.main.push_back({Times("routers", moe), D(moe) * RouterParams(m), D(moe) * RouterParams(m)});
    c.main.push_back(
        {Times("routed experts", moe), D(moe) * BlockExpertParams(m), D(moe) * routed_act});
    if (m.moe.num_shared_experts > 0)
      c.main.push_back(
          {Times("shared experts", moe), D(moe) * SharedParams(m), D(moe) * SharedParams(m)});
  }
  c.main.push_back({"output head", table, table});
  if (m.mtp_depth <= 0) return c;
  // One depth: enorm, hnorm, eh_proj, its block, its final norm.
  const bool mtp_moe = m.MtpIsMoe();
  const double own = 3 * h + 2 * h * h;
  const double block = BlockParams(m, mtp_moe);
  const double block_act = mtp_moe ? block - BlockExpertParams(m) + routed_act : block;
  c.mtp.push_back({Times("MTP depth", m.mtp_depth), D(m.mtp_depth) * (own + block),
                   D(m.mtp_depth) * (own + block_act)});
  return c;
}

double ParamCounts::total() const { return Sum(main, false); }
double ParamCounts::activated() const { return Sum(main, true); }
double ParamCounts::mtp_total() const { return Sum(mtp, false); }
double ParamCounts::mtp_activated() const { return Sum(mtp, true); }

std::string HumanCount(double n) {
  char buf[32];
  if (n >= 1e12)
    std::snprintf(buf, sizeof(buf), "%.2fT", n / 1e12);
  else if (n >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.1fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

}  // namespace moe
