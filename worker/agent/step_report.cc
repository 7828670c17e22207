#include "worker/agent/step_report.h"

#include "common/yaml.h"

namespace moe::worker {

Status StepMetricsFromJson(const std::string& line, moe::v1::StepMetrics* mm) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(line));
  if (!doc.IsMap()) return InvalidArgumentError("a step report is a JSON object");
  auto num = [&](const char* k) {
    const Node* v = doc.Find(k);
    if (v == nullptr) return 0.0;
    auto d = v->AsDouble(k);
    return d.ok() ? *d : 0.0;
  };
  // Counts are integers in range: a double past int64 (1e300, found by fuzz_step_report) would be
  // undefined behaviour to cast, so the report is refused, naming the field.
  Status bad = OkStatus();
  auto count = [&](const char* k) -> int64_t {
    const Node* v = doc.Find(k);
    if (v == nullptr) return 0;
    auto i = v->AsInt(k);
    if (!i.ok() && bad.ok()) bad = InvalidArgumentError("step report: " + i.status().message());
    return i.ok() ? *i : 0;
  };
  mm->set_step(count("step"));
  mm->set_total_steps(count("total_steps"));
  mm->set_loss(num("loss"));
  mm->set_aux_loss(num("aux_loss"));
  mm->set_mtp_loss(num("mtp_loss"));
  mm->set_mtp_loss_weight(num("mtp_loss_weight"));
  mm->set_lr(num("lr"));
  mm->set_grad_norm(num("grad_norm"));
  mm->set_step_seconds(num("step_seconds"));
  mm->set_tokens_per_second(num("tokens_per_second"));
  mm->set_tflops_per_device(num("tflops_per_device"));
  mm->set_mfu(num("mfu"));
  mm->set_mfu_peak_tflops(num("mfu_peak_tflops"));
  if (const Node* v = doc.Find("mfu_peak_source")) mm->set_mfu_peak_source(v->scalar());
  mm->set_expert_load_imbalance(num("expert_load_imbalance"));
  if (const Node* v = doc.Find("expert_load_imbalance_per_layer")) {
    for (const auto& x : v->elements()) {
      auto d = x.AsDouble("imbalance");
      mm->add_expert_load_imbalance_per_layer(d.ok() ? *d : 0.0);
    }
  }
  mm->set_alltoall_seconds(num("alltoall_seconds"));
  mm->set_compute_seconds(num("compute_seconds"));
  mm->set_grad_sync_seconds(num("grad_sync_seconds"));
  mm->set_pipeline_bubble(num("pipeline_bubble"));
  mm->set_memory_peak_bytes(count("memory_peak_bytes"));
  mm->set_checkpoint_step(count("checkpoint_step"));
  mm->set_checkpoint_stall_seconds(num("checkpoint_stall_seconds"));
  mm->set_eval_seconds(num("eval_seconds"));
  if (doc.Find("eval_loss") != nullptr) {
    mm->set_eval_loss(num("eval_loss"));
    mm->set_eval_ppl(num("eval_ppl"));
    mm->set_eval_mtp_loss(num("eval_mtp_loss"));
  }
  mm->set_tokens(count("tokens"));
  mm->set_time(num("time"));
  return bad;
}

}  // namespace moe::worker
