#include "worker/engine/train/metrics.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace moe::train {
namespace {
std::string Num(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);  // exact: resumed runs are compared bitwise
  return buf;
}
}  // namespace

std::string MetricsJson(const StepMetrics& m) {
  std::ostringstream os;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // NaN/Infinity are not JSON; write them as strings so a reader sees them rather than choking.
  auto n = [](double v) {
    std::string s = Num(v);
    return std::isfinite(v) ? s : "\"" + s + "\"";
  };
  os << "{\"step\":" << m.step << ",\"total_steps\":" << m.total_steps << ",\"loss\":" << n(m.loss)
     << ",\"aux_loss\":" << n(m.aux_loss) << ",\"mtp_loss\":" << n(m.mtp_loss)
     << ",\"mtp_loss_weight\":" << n(m.mtp_loss_weight) << ",\"lr\":" << n(m.lr)
     << ",\"grad_norm\":" << n(m.grad_norm) << ",\"step_seconds\":" << n(m.step_seconds)
     << ",\"tokens_per_second\":" << n(m.tokens_per_second)
     << ",\"tflops_per_device\":" << n(m.tflops_per_device) << ",\"mfu\":" << n(m.mfu)
     << ",\"mfu_peak_tflops\":" << n(m.peak_tflops) << ",\"mfu_peak_source\":\"" << m.peak_source
     << "\""
     << ",\"expert_load_imbalance\":" << n(m.expert_load_imbalance)
     << ",\"expert_load_imbalance_per_layer\":[";
  for (size_t i = 0; i < m.expert_load_imbalance_per_layer.size(); ++i) {
    os << (i ? "," : "") << n(m.expert_load_imbalance_per_layer[i]);
  }
  os << "],\"alltoall_seconds\":" << n(m.alltoall_seconds)
     << ",\"compute_seconds\":" << n(m.compute_seconds)
     << ",\"grad_sync_seconds\":" << n(m.grad_sync_seconds)
     << ",\"pipeline_bubble\":" << n(m.pipeline_bubble) << ",\"host_syncs\":" << m.host_syncs
     << ",\"memory_peak_bytes\":" << m.memory_peak_bytes
     << ",\"checkpoint_step\":" << m.checkpoint_step
     << ",\"checkpoint_stall_seconds\":" << n(m.checkpoint_stall_seconds)
     << ",\"eval_seconds\":" << n(m.eval_seconds) << ",\"memory_at_peak\":{";
  for (size_t i = 0; i < m.memory_at_peak.size(); ++i) {
    os << (i ? "," : "") << "\"" << m.memory_at_peak[i].first
       << "\":" << m.memory_at_peak[i].second;
  }
  os << "}";
  if (m.has_eval) {
    os << ",\"eval_loss\":" << n(m.eval_loss) << ",\"eval_ppl\":" << n(m.eval_ppl)
       << ",\"eval_mtp_loss\":" << n(m.eval_mtp_loss);
  }
  os << ",\"tokens\":" << m.tokens << ",\"consumed_samples\":" << m.consumed_samples
     << ",\"world_size\":" << m.world_size << ",\"rank\":" << m.rank << ",\"time\":" << Num(now)
     << "}";
  return os.str();
}

std::string MegatronLogLine(const StepMetrics& m) {
  char buf[640];
  const double a2a_share = m.step_seconds > 0 ? m.alltoall_seconds / m.step_seconds : 0;
  std::snprintf(
      buf, sizeof(buf),
      " iteration %8lld/%8lld | consumed samples: %10lld | elapsed time per iteration (ms): %.1f | "
      "learning rate: %.6E | lm loss: %.6E | mtp loss: %.6E | aux loss: %.3E | grad norm: %.3f | "
      "tokens/s: %.0f | "
      "TFLOP/s/device: %.4f | MFU: %.1f%% | expert load max/mean: %.2f | all-to-all: %.1f%%",
      static_cast<long long>(m.step), static_cast<long long>(m.total_steps),
      static_cast<long long>(m.consumed_samples), m.step_seconds * 1e3, m.lr, m.loss, m.mtp_loss,
      m.aux_loss, m.grad_norm, m.tokens_per_second, m.tflops_per_device, m.mfu * 100,
      m.expert_load_imbalance, a2a_share * 100);
  return buf;
}

}  // namespace moe::train
