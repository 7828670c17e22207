// What the JobManager publishes, in the manner of Ray's GCS listeners: the managers that care about
// jobs (the MetricsAggregator, the watch streams) subscribe instead of being called by hand after
// every change. Knows nothing of gRPC, so a test subscribes a recorder.
//
// A change reaches listeners only after it was stored and applied in memory; listeners cannot fail
// (they return nothing) and must not call back into the JobManager. They run on the thread that
// made the change, under the Controller's mutex.
#pragma once

#include <string>

#include "moe/v1/job.pb.h"

namespace moe::controller {

class JobListener {
 public:
  virtual ~JobListener() = default;
  // JobStateChanged: `job` is the record after the change, `from` the state before it;
  // JOB_STATE_UNSPECIFIED when the job is new to this controller (submitted now, or loaded at
  // start-up).
  virtual void OnJobStateChanged(const moe::v1::Job& /*job*/, moe::v1::JobState /*from*/) {}
  // JobEventRecorded: an event stored in the job's history (a transition's event reaches listeners
  // before its state change).
  virtual void OnJobEventRecorded(const moe::v1::Job& /*job*/, const moe::v1::JobEvent& /*event*/) {
  }
  // JobMetrics: the job-level metrics of a step every rank has reported.
  virtual void OnJobMetrics(const moe::v1::Job& /*job*/, const moe::v1::StepMetrics& /*metrics*/) {}
  // JobDeleted: a finished job removed from the store and from memory (moectl delete job).
  virtual void OnJobDeleted(const std::string& /*job_id*/) {}
};

}  // namespace moe::controller
