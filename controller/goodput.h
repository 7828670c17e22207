// Goodput accounting (issue 33): every second of a job's wall time since its submission, counted
// once, as productive or lost to a cause (docs/operations.md, "Goodput"). The account lives in the
// job record (moe.v1.Goodput), so it survives a controller restart, and moves at two kinds of
// moments only: a change of state (JobManager::Transition) and a step report (PublishMetrics).
//
//   state        the time from now on counts against
//   PENDING      queued
//   SCHEDULED    starting (placement to the first step report, that step included)
//   RUNNING      running: split at each step report into productive (a step not counted before),
//                redone (a step at or below the highest counted: trained again after a restart),
//                checkpoint and evaluation (the stalls the report names); when the attempt stops,
//                the part since the last report is redone (a failure, a requeue), checkpoint (the
//                final save of a success or a cancel) or preempted
//   RESTARTING   backoff until the restart's delay ends, then queued
//   PREEMPTED    preempted, until placed again
//   ended        nothing more
//
// Pure functions on the record: the caller holds whatever lock guards it.
#pragma once

#include <cstdint>

#include "moe/v1/job.pb.h"

namespace moe::controller {

// The job entered its current state (job.state()) at `now` (Unix seconds): the open interval is
// closed against its cause and the next one opened. A job never accounted before (just created, or
// stored before goodput existed) opens at its last change (updated_at).
void GoodputOnState(moe::v1::Job& job, double now);
// Before a transition to RESTARTING: the restart's delay, for the back-off cause.
void GoodputSetBackoff(moe::v1::Job& job, double until);
// A step report of the job (merged over its ranks) at `now`.
void GoodputOnStep(moe::v1::Job& job, const moe::v1::StepMetrics& m, double now);
// The account brought up to `now` for reading (the open interval counted as its cause would count
// it; a running step not yet reported is left out until it is): not stored.
moe::v1::Goodput GoodputAt(const moe::v1::Job& job, double now);

// The checkpoint interval that maximises this job's goodput (Young-Daly, planner/planner.h) from
// what it measured: its mean step time (run summary), its stall per save (checkpoint time over the
// saves its counted steps imply), its start-up per attempt, and `mtbf_hours` per device over its
// `devices` (the spec's world size). False (nothing advised) without an MTBF or before a measured
// step.
bool AdviseFromRun(const moe::v1::Job& job, int64_t devices, int64_t current_interval_steps,
                   double mtbf_hours, moe::v1::CheckpointAdvice* out);

// The causes of lost time, in the order shown (moectl describe, /metrics' cause label).
inline constexpr const char* kGoodputCauses[] = {"queued",  "starting",  "redone",    "checkpoint",
                                                 "backoff", "preempted", "evaluation"};
// Seconds of `cause` (one of kGoodputCauses) in `g`.
double GoodputLost(const moe::v1::Goodput& g, const char* cause);
// Seconds the job held workers up to `now`, over all its attempts (placement to end): starting,
// productive, redone, checkpoint and evaluation time (spec.time_limit counts these).
double GoodputHeldSeconds(const moe::v1::Job& job, double now);

}  // namespace moe::controller
