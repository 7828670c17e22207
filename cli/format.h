// Presentation for moectl: tables, durations, the live progress line, describe output.
#pragma once

#include <string>
#include <vector>

#include "moe/v1/job_service.pb.h"

namespace moe::cli {

// Columns padded to their widest cell.
std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows);
std::string Duration(double seconds);  // "1h02m", "3m05s", "42s"
std::string StateName(moe::v1::JobState s);
std::string WorkerStateName(moe::v1::WorkerState s);
// "step 120/400 [#########.....]  30% | loss 5.4321 | 0.1180 TFLOP/s/device | MFU 47.0% | 15.7k
// tok/s | ETA 1m10s"
std::string ProgressLine(const moe::v1::StepMetrics& m, int width = 30);
// A table's header and cells before padding (get -w compares rows between polls).
struct TableRows {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
// `wide` (-o wide) adds jobs' attempt, newest checkpoint, racks and reason; workers' address,
// memory, age.
TableRows JobRows(const std::vector<moe::v1::Job>& jobs, double now, bool wide = false);
TableRows WorkerRows(const std::vector<moe::v1::Worker>& workers, double now, bool wide = false);
std::string JobsTable(const std::vector<moe::v1::Job>& jobs, double now, bool wide = false);
std::string WorkersTable(const std::vector<moe::v1::Worker>& workers, double now,
                         bool wide = false);
std::string Describe(const moe::v1::Job& job, double now);
std::string DescribeWorker(const moe::v1::Worker& w, double now);
std::string QueuesTable(const std::vector<moe::v1::QueueStatus>& queues);
// One row per rack: its workers by state, and its spares (moe-controller --spares-per-rack).
std::string RacksTable(const std::vector<moe::v1::RackStatus>& racks);
// The job's events, oldest first (moectl events).
std::string EventsTable(const moe::v1::Job& job, double now);
std::string FormatNumber(double v, int precision = 4);

}  // namespace moe::cli
