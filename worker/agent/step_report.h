// A rank's step report (the JSON line moe-train writes on --report-fd) as the API's StepMetrics.
#pragma once

#include <string>

#include "common/status.h"
#include "moe/v1/job.pb.h"

namespace moe::worker {

Status StepMetricsFromJson(const std::string& line, moe::v1::StepMetrics* out);

}  // namespace moe::worker
