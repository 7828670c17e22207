#include "common/log.h"

#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "common/escape.h"

namespace moe {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
std::string g_prefix;      // guarded by g_mu
LogSink g_sink = nullptr;  // guarded by g_mu
}  // namespace

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = sink;
}

const char* LogLevelName(LogLevel level) {
  static const char* kNames[] = {"debug", "info", "warning", "error"};
  return kNames[static_cast<int>(level)];
}

void LogRankLine(std::string_view job, int rank, std::string_view line) {
  const std::string text = EscapeControl(line);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink != nullptr) {
    g_sink(LogRecord{LogLevel::kInfo, text, job, rank});
    return;
  }
  std::fprintf(stderr, "[%.*s r%d] %s\n", static_cast<int>(job.size()), job.data(), rank,
               text.c_str());
  std::fflush(stderr);
}

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_prefix = std::move(prefix);
}

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "debug")
    *out = LogLevel::kDebug;
  else if (s == "info")
    *out = LogLevel::kInfo;
  else if (s == "warning")
    *out = LogLevel::kWarning;
  else if (s == "error")
    *out = LogLevel::kError;
  else
    return false;
  return true;
}

std::string EscapeControl(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '\n' && keep_newlines) {
      out += '\n';
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

namespace internal {

LogMessage::LogMessage(LogLevel level, const char*, int) : level_(level) {}

LogMessage::~LogMessage() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_sink != nullptr) {
      const std::string text = EscapeControl(stream_.str());
      g_sink(LogRecord{level_, text, {}, -1});
      return;
    }
  }
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  localtime_r(&tv.tv_sec, &t);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%c%02d%02d %02d:%02d:%02d.%03d",
                kLetters[static_cast<int>(level_)], t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min,
                t.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  std::lock_guard<std::mutex> lock(g_mu);
  // One message, one line: what a message quotes from outside cannot forge another.
  std::fprintf(stderr, "%s %s] %s\n", stamp, g_prefix.empty() ? "moe" : g_prefix.c_str(),
               EscapeControl(stream_.str()).c_str());
  std::fflush(stderr);
}

}  // namespace internal
}  // namespace moe
