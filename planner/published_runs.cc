#include "planner/published_runs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace moe {

const std::vector<PublishedRun>& PublishedRuns() {
  static const std::vector<PublishedRun> runs = {
      {"H800 (DeepSeek's own run)", "h800", 2048, 1, 16, 1, 64, "PP16 (DualPipe) EP64 ZeRO-1",
       "FP8 blockwise", 400, "DeepSeek-V3 report (derived: 180K GPU-hours per trillion tokens)"},
      {"H100", "h100", 1024, 2, 8, 1, 64, "TP2 PP8 EP64", "FP8", 380,
       "NVIDIA; a widely cited estimate (330-380)"},
      {"B200 (TorchTitan)", "b200", 256, 1, 1, 1, 0, "FSDP + EP, DeepEP", "MXFP8", 240,
       "PyTorch blog (about 918 tokens/s per GPU)"},
      {"GB200 NVL72, baseline", "gb200-nvl72", 256, 1, 8, 4, 32, "TP1 PP8 VPP4 EP32", "MXFP8", 494,
       "Megatron-LM guide; MBS1 GBS2048, recompute mlp + MLA up-proj"},
      {"GB200 NVL72, optimised", "gb200-nvl72", 256, 1, 8, 4, 32, "TP1 PP8 VPP4 EP32", "MXFP8", 970,
       "Megatron-LM guide (deepseek-v3-gb200-optimization)"},
      {"GB300 NVL72 (the record)", "gb300-nvl72", 256, 1, 2, 8, 32, "TP1 PP2 VPP8 EP32", "MXFP8",
       1648, "NVIDIA's announcement (1,635-1,670 reported)"},
  };
  return runs;
}

std::vector<PublishedRun> NearestPublishedRuns(const JobSpec& spec, const std::string& cluster,
                                               size_t n, int64_t tp) {
  const auto& par = spec.parallelism;
  const double world = static_cast<double>(std::max<int64_t>(1, par.world_size));
  auto distance = [&](const PublishedRun& r) {
    const double gpus = std::abs(std::log2(static_cast<double>(r.gpus) / world));
    const int layout =
        (r.tp != std::max<int64_t>(1, tp)) + (r.pp != std::max<int64_t>(1, par.pipeline_parallel)) +
        (r.vpp != std::max<int64_t>(1, par.virtual_pipeline)) + (r.ep != par.expert_parallel);
    return (r.cluster == cluster ? 0.0 : 100.0) + gpus + 0.5 * layout;
  };
  std::vector<PublishedRun> out = PublishedRuns();
  std::stable_sort(out.begin(), out.end(), [&](const PublishedRun& a, const PublishedRun& b) {
    return distance(a) < distance(b);
  });
  out.resize(std::min(n, out.size()));
  return out;
}

std::string PublishedRunsText(const std::vector<PublishedRun>& runs, double planned_tflops) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "published runs nearest this layout (DeepSeek-V3 671B, Megatron-counted TFLOP/s "
                "per GPU; this plan: %.0f):\n",
                planned_tflops);
  std::string out = buf;
  for (const auto& r : runs) {
    std::snprintf(buf, sizeof(buf), "  %-26s %5lld GPUs  %-28s %-14s %6.0f  (%s)\n",
                  r.system.c_str(), static_cast<long long>(r.gpus), r.layout.c_str(),
                  r.precision.c_str(), r.tflops_per_gpu, r.source.c_str());
    out += buf;
  }
  return out;
}

Node PublishedRunsNode(const std::vector<PublishedRun>& runs) {
  Node list = Node::List();
  for (const auto& r : runs) {
    Node n = Node::Map();
    n.Set("system", Node::Scalar(r.system, true));
    n.Set("cluster", Node::Scalar(r.cluster, true));
    n.Set("gpus", Node::Scalar(std::to_string(r.gpus)));
    n.Set("layout", Node::Scalar(r.layout, true));
    n.Set("precision", Node::Scalar(r.precision, true));
    char tflops[32];
    std::snprintf(tflops, sizeof(tflops), "%g", r.tflops_per_gpu);
    n.Set("tflops_per_gpu", Node::Scalar(tflops));
    n.Set("source", Node::Scalar(r.source, true));
    list.Append(std::move(n));
  }
  return list;
}

}  // namespace moe
