// moe-train --describe: what a job's model is, how many parameters it has (total and activated per
// token, per component), and its Megatron FLOPs per token at the job's sequence length, with and
// without MTP. Needs no data and no device: it describes the 671B model on a laptop.
#pragma once

#include <string>

#include "common/job_spec.h"

namespace moe {

std::string DescribeJob(const JobSpec& spec);

}  // namespace moe
