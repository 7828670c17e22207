#include "worker/engine/train/describe.h"

#include <cstdio>
#include <sstream>

#include "common/flops.h"
#include "common/memory_model.h"
#include "common/param_count.h"

namespace moe::train {
namespace {

std::string Architecture(const ModelConfig& m) {
  std::ostringstream os;
  os << "model: " << (m.preset.empty() ? "custom" : m.preset) << ": " << m.num_layers << " layers ("
     << m.first_k_dense << " dense), hidden " << m.hidden_size << ", vocab " << m.vocab_size
     << "\n";
  if (m.is_mla()) {
    const auto& a = m.attention;
    os << "  attention: MLA, " << m.num_heads << " heads, q "
       << (a.q_lora_rank > 0 ? "LoRA " + std::to_string(a.q_lora_rank) : "direct") << ", kv LoRA "
       << a.kv_lora_rank << ", q/k head " << a.qk_nope_head_dim << " + " << a.qk_rope_head_dim
       << " (rope, pairwise), v head " << a.v_head_dim;
  } else {
    os << "  attention: MHA, " << m.num_heads << " heads of " << m.head_dim();
  }
  os << (m.rope_scaling.type == "yarn"
             ? "; YaRN x" + std::to_string(static_cast<int>(m.rope_scaling.factor)) + " above " +
                   std::to_string(m.rope_scaling.original_max_position_embeddings)
             : "")
     << "\n";
  if (m.num_moe_layers() > 0) {
    const auto& e = m.moe;
    os << "  MoE: " << e.num_experts << " routed experts top-" << e.top_k << " (" << e.topk_groups
       << " of " << e.num_groups << " groups), " << e.num_shared_experts << " shared, expert FFN "
       << e.ffn_hidden << ", " << e.score_function << " scores"
       << (e.has_bias() ? ", aux-loss-free bias" : "") << ", balance loss alpha "
       << e.seq_aux_loss_coeff << "\n";
  }
  os << "  MTP: " << (m.mtp_depth > 0 ? "depth " + std::to_string(m.mtp_depth) : "none")
     << (m.mtp_depth > 0 && !m.MtpTrains() ? " (lambda 0 throughout: not trained)" : "") << "\n";
  return os.str();
}

std::string Parameters(const ModelConfig& m) {
  const ParamCounts c = CountParameters(m);
  std::ostringstream os;
  os << "parameters: " << HumanCount(c.total()) << " total, " << HumanCount(c.activated())
     << " activated per token"
     << " (the model that serves; MTP below)\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-30s %12s %12s\n", "component", "total", "activated");
  os << line;
  auto row = [&](const ParamComponent& p) {
    std::snprintf(line, sizeof(line), "  %-30s %12s %12s\n", p.name.c_str(),
                  HumanCount(p.total).c_str(), HumanCount(p.activated).c_str());
    os << line;
  };
  for (const auto& p : c.main) row(p);
  for (const auto& p : c.mtp) row(p);
  if (!c.mtp.empty()) {
    os << "  with MTP: " << HumanCount(c.total() + c.mtp_total()) << " total, "
       << HumanCount(c.activated() + c.mtp_activated())
       << " activated (MTP shares the embedding and head)\n";
  }
  return os.str();
}

std::string Flops(const ModelConfig& m, int64_t seq) {
  std::ostringstream os;
  char buf[64];
  ModelConfig without = m;
  without.mtp_depth = 0;
  auto per_token = [&](const ModelConfig& c) {
    return MegatronFlopsPerStep(c, 1, seq) / static_cast<double>(seq);
  };
  if (m.MtpTrains()) {
    std::snprintf(buf, sizeof(buf), "%.4e", per_token(m));
    os << "flops per token: " << buf << " (seq " << seq << ", with MTP)\n";
  }
  std::snprintf(buf, sizeof(buf), "%.4e", per_token(without));
  os << "flops per token: " << buf << " (seq " << seq << ", without MTP)\n";
  return os.str();
}

}  // namespace

std::string DescribeJob(const JobSpec& spec, int64_t compute_bytes, double capacity_bytes) {
  std::string out =
      Architecture(spec.model) + Parameters(spec.model) + Flops(spec.model, spec.data.seq_length);
  auto plan = EstimateMemory(spec, compute_bytes);
  if (!plan.ok()) return out + "memory: " + plan.status().ToString() + "\n";
  return out + MemoryReport(spec, *plan, capacity_bytes);
}

}  // namespace moe::train
