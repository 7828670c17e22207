// moe-train --describe: what a job's model is, how many parameters it has (total and activated per
// token, per component), and its Megatron FLOPs per token at the job's sequence length, with and
// without MTP. Needs no data and no device: it describes the 671B model on a laptop.
#pragma once

#include <cstdint>
#include <string>

#include "common/job_spec.h"

namespace moe::train {

// The model (architecture, parameters, FLOPs per token) and, for the job's layout, the memory each
// pipeline rank will hold (common/memory_model.h). compute_bytes: 2 for bf16 activations, 4 for
// fp32; capacity_bytes > 0: say whether the fullest rank fits and, if not, why.
std::string DescribeJob(const JobSpec& spec, int64_t compute_bytes = 4, double capacity_bytes = 0);

}  // namespace moe::train
