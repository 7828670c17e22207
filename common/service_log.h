// The services' logging (moe-controller, moe-worker, moectl) on spdlog: levels, a log file rotated
// by size, and text or JSON lines. MOE_LOG and the ranks' relayed lines reach it through SetLogSink
// (common/log.h), so the engine keeps its dependency-free logger.
//
// Text:  I1201 20:40:01.123 controller] message        (as MOE_LOG writes to stderr)
//        [job-abc12 r0] a line the rank printed
// JSON:  {"time":"2026-12-01T20:40:01.123Z","level":"info","component":"worker
// w0","job":"job-abc12",
//         "rank":0,"message":"..."}                    (job and rank only on a rank's lines)
#pragma once

#include <cstdint>
#include <string>

#include "common/log.h"
#include "common/status.h"

namespace CLI {
class App;
}

namespace moe {

struct ServiceLogOptions {
  std::string component;       // "controller", "worker w0", "moectl"
  std::string level = "info";  // debug | info | warning | error
  std::string file;  // empty: stderr only; rotated as spdlog names them (w.log: w.1.log, w.2.log)
  int64_t max_file_mb = 100;    // the file rotates past this size
  int64_t max_files = 5;        // rotated files kept
  std::string format = "text";  // text | json
  bool to_stderr = true;        // false: the file only (tests)
};

// --log-level, --log-file, --log-max-file-mb, --log-max-files, --log-format.
void AddServiceLogFlags(CLI::App& app, ServiceLogOptions* o);
// Sends MOE_LOG and the ranks' lines to spdlog: stderr, and the file when one is named. The error
// names the flag.
Status InitServiceLog(const ServiceLogOptions& o);
// Flushes the file (at exit; records are flushed as they are written anyway).
void FlushServiceLog();

// A record as one line of the chosen format, without the newline (exposed for the tests).
std::string FormatLogRecord(const LogRecord& r, const std::string& component, bool json,
                            double unix_seconds);

}  // namespace moe
