// moectl top: a live table of running jobs (TFLOP/s per device, MFU, tokens/s, loss, step time,
// all-to-all share, stragglers) and of racks (workers busy/idle/lost, TFLOP/s).
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "moe/v1/job_service.pb.h"

namespace moe::cli {

using Fetch = std::function<Status(moe::v1::ListJobsResponse*, moe::v1::ListWorkersResponse*)>;
std::string TopScreen(const moe::v1::ListJobsResponse& jobs,
                      const moe::v1::ListWorkersResponse& workers);
int Top(const Fetch& fetch, double interval_seconds, bool once,
        const std::function<int(const Status&)>& fail);

}  // namespace moe::cli
