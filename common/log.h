// Minimal thread-safe logging for the whole tree (the engine cannot depend on spdlog; see DESIGN.md).
//   MOE_LOG(INFO) << "step " << n;
// Lines go to stderr as "I1129 17:20:01.123 rank0] message". SetLogPrefix names the process (rank,
// component); SetLogLevel filters.
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

#define MOE_LOG(severity)                                              \
  (MOE_LOG_LEVEL_##severity < ::moe::GetLogLevel())                    \
      ? (void)0                                                        \
      : ::moe::internal::LogVoidify() &                                \
            ::moe::internal::LogMessage(MOE_LOG_LEVEL_##severity, __FILE__, __LINE__)
