// moectl logs: the controller asks the worker that runs (or ran) a rank for a slice of its log file
// over the worker's stream, and answers the client when the worker's LogReply arrives, or fails the
// request when the worker goes or does not answer within 10 s.
//
// Not thread-safe: the Controller calls it under its mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/status.h"
#include "controller/clock.h"
#include "controller/job_manager.h"
#include "controller/worker_registry.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

class LogRequests {
 public:
  // `done` is called once, with the slice or with why there is none.
  using Done = std::function<void(StatusOr<moe::v1::GetLogsResponse>)>;
  LogRequests(JobManager& jobs, WorkerRegistry& workers, Clock& clock)
      : jobs_(jobs), workers_(workers), clock_(clock) {}

  void Request(const moe::v1::GetLogsRequest& req, Done done);
  void Reply(const std::string& agent, const moe::v1::LogReply& r);  // from the rank's node agent
  // Fails the requests sent to `worker` ("": every one) that it can no longer answer, or whose
  // deadline passed (now > 0).
  void Fail(const std::string& worker, double now, const std::string& why);

 private:
  struct Pending {
    std::string worker;
    double deadline = 0;  // monotonic
    Done done;
    moe::v1::GetLogsResponse response;  // attempt and worker filled in
  };
  JobManager& jobs_;
  WorkerRegistry& workers_;
  Clock& clock_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
};

}  // namespace moe::controller
