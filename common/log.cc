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

namespace {

void Hex(std::string& out, const char* prefix, unsigned v, int digits) {
  static const char* kHex = "0123456789abcdef";
  out += prefix;
  for (int d = digits - 1; d >= 0; --d) out += kHex[(v >> (4 * d)) & 15];
}

// The length of the valid UTF-8 sequence at s[i] (2 to 4), or 0; *cp gets its code point.
size_t Utf8At(std::string_view s, size_t i, unsigned* cp) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  unsigned v = c & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3f);
  }
  const unsigned min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
    return 0;  // overlong, too big, a surrogate
  *cp = v;
  return n;
}

// C1 controls (CSI U+009B, OSC U+009D, ...) and the bidirectional overrides and isolates, which
// make a terminal or an editor show text in another order than it is.
bool Hidden(unsigned cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string EscapeHiddenAsUnicode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    unsigned cp = 0;
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x80) {  // C0 (ESC among them) and DEL
      Hex(out, "\\u", c, 4);
      ++i;
    } else if (const size_t n = Utf8At(s, i, &cp); n > 0) {
      if (Hidden(cp)) {
        Hex(out, "\\u", cp, 4);
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
    } else {
      out += "\\ufffd";  // not UTF-8
      ++i;
    }
  }
  return out;
}

std::string EscapeControl(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += keep_newlines ? "\n" : "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c < 0x20 ||
               c == 0x7f) {  // C0, ESC (every ANSI and OSC sequence starts with it), DEL
      Hex(out, "\\x", c, 2);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else if (unsigned cp = 0; const size_t n = Utf8At(s, i, &cp)) {
      if (Hidden(cp)) {
        Hex(out, "\\u", cp, 4);
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
    } else {  // not UTF-8: a lone 0x9b is CSI to an 8-bit terminal
      Hex(out, "\\x", c, 2);
      ++i;
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
