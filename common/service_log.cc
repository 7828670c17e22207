#include "common/service_log.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/time.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

namespace moe {
namespace {

// Set at start, before other threads log, and never freed: gRPC's and detached threads may still
// log while static destructors run at exit.
spdlog::logger* g_logger = nullptr;
std::string* g_component = new std::string;
bool g_json = false;

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

spdlog::level::level_enum SpdLevel(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

double Now() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

void Sink(const LogRecord& r) {
  g_logger->log(SpdLevel(r.level), "{}", FormatLogRecord(r, *g_component, g_json, Now()));
}

}  // namespace

std::string FormatLogRecord(const LogRecord& r, const std::string& component, bool json,
                            double unix_seconds) {
  const time_t secs = static_cast<time_t>(std::floor(unix_seconds));
  const int ms = static_cast<int>((unix_seconds - static_cast<double>(secs)) * 1000);
  tm t;
  char stamp[64];
  if (json) {
    gmtime_r(&secs, &t);
    std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900,
                  t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms);
    std::string line = std::string("{\"time\":\"") + stamp + "\",\"level\":\"" +
                       LogLevelName(r.level) + "\",\"component\":" + JsonString(component);
    if (!r.job.empty())
      line += ",\"job\":" + JsonString(r.job) + ",\"rank\":" + std::to_string(r.rank);
    return line + ",\"message\":" + JsonString(r.message) + "}";
  }
  if (!r.job.empty())
    return "[" + std::string(r.job) + " r" + std::to_string(r.rank) + "] " + std::string(r.message);
  localtime_r(&secs, &t);
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::snprintf(stamp, sizeof(stamp), "%c%02d%02d %02d:%02d:%02d.%03d",
                kLetters[static_cast<int>(r.level)], t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min,
                t.tm_sec, ms);
  return std::string(stamp) + " " + component + "] " + std::string(r.message);
}

void AddServiceLogFlags(CLI::App& app, ServiceLogOptions* o) {
  app.add_option("--log-level", o->level, "debug | info | warning | error")->capture_default_str();
  app.add_option("--log-file", o->file,
                 "also write the log here, rotated by size (w.log: w.1.log, w.2.log, ...)");
  app.add_option("--log-max-file-mb", o->max_file_mb, "--log-file rotates past this many MiB")
      ->capture_default_str();
  app.add_option("--log-max-files", o->max_files, "rotated --log-file files kept")
      ->capture_default_str();
  app.add_option("--log-format", o->format,
                 "text | json (one object a line: time, level, component, job, rank, message)")
      ->capture_default_str();
}

Status InitServiceLog(const ServiceLogOptions& o) {
  LogLevel level;
  if (!ParseLogLevel(o.level, &level))
    return InvalidArgumentError("--log-level: unknown level '" + o.level + "'");
  if (o.format != "text" && o.format != "json") {
    return InvalidArgumentError("--log-format: '" + o.format + "' is not text or json");
  }
  if (o.max_file_mb < 1 || o.max_file_mb > 1 << 20)
    return InvalidArgumentError("--log-max-file-mb: must be in [1, 1048576]");
  if (o.max_files < 1 || o.max_files > 1000)
    return InvalidArgumentError("--log-max-files: must be in [1, 1000]");
  std::vector<spdlog::sink_ptr> sinks;
  if (o.to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (!o.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          o.file, static_cast<size_t>(o.max_file_mb) << 20, static_cast<size_t>(o.max_files)));
    } catch (const spdlog::spdlog_ex& e) {
      return InvalidArgumentError("--log-file: " + o.file + ": " + e.what());
    }
  }
  auto* logger =
      new spdlog::logger(o.component, sinks.begin(), sinks.end());  // never freed (see above)
  logger->set_pattern("%v");                // the line is formatted whole by FormatLogRecord
  logger->set_level(spdlog::level::trace);  // MOE_LOG filters by level before a record is made
  logger->flush_on(spdlog::level::trace);
  SetLogSink(nullptr);  // a second Init (the tests) swaps the logger while no record is written
  g_logger = logger;
  *g_component = o.component;
  g_json = o.format == "json";
  SetLogLevel(level);
  SetLogSink(&Sink);
  return OkStatus();
}

void FlushServiceLog() {
  if (g_logger) g_logger->flush();
}

}  // namespace moe
