// Published DeepSeek-V3 671B pre-training runs (docs/reference, "Published DeepSeek-V3 671B
// pre-training throughput"), for moectl plan to print beside its answer: what was measured on
// hardware like the one asked about, in layouts like the one asked for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec_types.h"
#include "common/yaml.h"

namespace moe {

struct PublishedRun {
  std::string system;   // "GB300 NVL72 (the record)"
  std::string cluster;  // the cluster profile it ran on (deploy/clusters/<name>.yaml)
  int64_t gpus = 0, tp = 1, pp = 1, vpp = 1, ep = 0;  // ep 0: not published
  std::string layout;                                 // as the source states it
  std::string precision;                              // "FP8 blockwise", "MXFP8"
  double tflops_per_gpu = 0;
  std::string source;
};

const std::vector<PublishedRun>& PublishedRuns();
// The `n` runs nearest the job's layout on `cluster`: the same cluster first, then the nearest GPU
// count (by ratio), then the fewest differences in TP (the plan's: the job spec has none), PP, VPP
// and EP.
std::vector<PublishedRun> NearestPublishedRuns(const JobSpec& spec, const std::string& cluster,
                                               size_t n, int64_t tp = 1);
// "published runs nearest this layout ..." and one line a run, the planned figure beside them.
std::string PublishedRunsText(const std::vector<PublishedRun>& runs, double planned_tflops);
Node PublishedRunsNode(const std::vector<PublishedRun>& runs);

}  // namespace moe
