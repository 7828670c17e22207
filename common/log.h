// Minimal thread-safe logging for the whole tree (the engine cannot depend on spdlog; see
// docs/architecture.md, "Layers").
//   MOE_LOG(INFO) << "step " << n;
// Lines go to stderr as "I1129 17:20:01.123 rank0] message". SetLogPrefix names the process (rank,
// component); SetLogLevel filters. The services (controller, worker, moectl) hand every record to
// spdlog instead (common/service_log.h: rotating files, JSON lines) through SetLogSink.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace moe {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void SetLogPrefix(std::string prefix);
// Parses "debug|info|warning|error"; returns false on anything else.
bool ParseLogLevel(std::string_view s, LogLevel* out);
const char* LogLevelName(LogLevel level);  // "info", ...

// One log record: a message of this process, or a line a rank printed (job and rank set).
struct LogRecord {
  LogLevel level = LogLevel::kInfo;
  std::string_view message;  // control characters already escaped
  std::string_view job;      // empty: not a rank's line
  int rank = -1;
};
// Where records go instead of stderr (nullptr: back to stderr). Called under the log's lock.
using LogSink = void (*)(const LogRecord& record);
void SetLogSink(LogSink sink);
// A line the rank `rank` of `job` printed: "[job rR] line" on stderr, or a record with job and
// rank.
void LogRankLine(std::string_view job, int rank, std::string_view line);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  template <typename T>
  LogMessage& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
struct LogVoidify {
  void operator&(const LogMessage&) {}
};
}  // namespace internal

}  // namespace moe

#define MOE_LOG_LEVEL_DEBUG ::moe::LogLevel::kDebug
#define MOE_LOG_LEVEL_INFO ::moe::LogLevel::kInfo
#define MOE_LOG_LEVEL_WARNING ::moe::LogLevel::kWarning
#define MOE_LOG_LEVEL_ERROR ::moe::LogLevel::kError

#define MOE_LOG(severity)                           \
  (MOE_LOG_LEVEL_##severity < ::moe::GetLogLevel()) \
      ? (void)0                                     \
      : ::moe::internal::LogVoidify() &             \
            ::moe::internal::LogMessage(MOE_LOG_LEVEL_##severity, __FILE__, __LINE__)
