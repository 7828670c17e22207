#include "common/kv_protocol.h"

#include <charconv>

namespace moe {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

Status DecodeKeys(const std::vector<std::string_view>& words, size_t from, KvRequest* r) {
  for (size_t i = from; i < words.size(); ++i) {
    std::string key;
    if (!HexDecode(words[i], &key))
      return InvalidArgumentError("malformed request: a key is not hex");
    r->keys.push_back(std::move(key));
  }
  return OkStatus();
}

}  // namespace

std::string HexEncode(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

bool HexDecode(std::string_view hex, std::string* out) {
  if (hex.size() % 2) return false;
  out->clear();
  out->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int a = HexDigit(hex[i]), b = HexDigit(hex[i + 1]);
    if (a < 0 || b < 0) return false;
    *out += static_cast<char>(a * 16 + b);
  }
  return true;
}

std::string FormatKvRequest(const KvRequest& r) {
  switch (r.op) {
    case KvRequest::Op::kSet:
      return "SET " + HexEncode(r.keys.at(0)) + " " + HexEncode(r.value);
    case KvRequest::Op::kGet:
      return "GET " + HexEncode(r.keys.at(0));
    case KvRequest::Op::kWait:
      break;
  }
  std::string line = "WAIT " + std::to_string(r.timeout_ms);
  for (const auto& k : r.keys) line += " " + HexEncode(k);
  return line;
}

StatusOr<KvRequest> ParseKvRequest(std::string_view line) {
  const std::vector<std::string_view> w = Words(line);
  if (w.empty()) return InvalidArgumentError("empty request");
  KvRequest r;
  if (w[0] == "SET") {
    if (w.size() != 3)
      return InvalidArgumentError("malformed request: SET takes a key and a value");
    r.op = KvRequest::Op::kSet;
    if (!HexDecode(w[2], &r.value))
      return InvalidArgumentError("malformed request: the value is not hex");
    MOE_RETURN_IF_ERROR(DecodeKeys({w[0], w[1]}, 1, &r));
    return r;
  }
  if (w[0] == "GET") {
    if (w.size() != 2) return InvalidArgumentError("malformed request: GET takes one key");
    r.op = KvRequest::Op::kGet;
    MOE_RETURN_IF_ERROR(DecodeKeys(w, 1, &r));
    return r;
  }
  if (w[0] == "WAIT") {
    r.op = KvRequest::Op::kWait;
    const Status malformed =
        InvalidArgumentError("malformed request: WAIT takes a timeout in ms and at least one key");
    if (w.size() < 3) return malformed;
    const char* last = w[1].data() + w[1].size();
    const auto [end, ec] = std::from_chars(w[1].data(), last, r.timeout_ms);
    if (ec != std::errc() || end != last || r.timeout_ms < 0) return malformed;
    MOE_RETURN_IF_ERROR(DecodeKeys(w, 2, &r));
    return r;
  }
  return InvalidArgumentError("unknown request '" + std::string(w[0].substr(0, 16)) + "'");
}

std::string FormatKvValue(std::string_view value) { return "VAL " + HexEncode(value); }

std::string FormatKvReply(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NOTFOUND";
    case StatusCode::kDeadlineExceeded:
      return "TIMEOUT " + status.message();
    default:
      return "ERR " + status.message();
  }
}

Status ParseKvReply(std::string_view line, std::string* value) {
  if (line == "OK") return OkStatus();
  if (line == "NOTFOUND") return NotFoundError("key not found");
  if (line.rfind("VAL ", 0) == 0) {
    if (value == nullptr || !HexDecode(line.substr(4), value))
      return InternalError("rendezvous: malformed value");
    return OkStatus();
  }
  if (line.rfind("TIMEOUT ", 0) == 0) return DeadlineExceededError(std::string(line.substr(8)));
  if (line.rfind("ERR ", 0) == 0)
    return UnavailableError("rendezvous: " + std::string(line.substr(4)));
  return InternalError("rendezvous: unexpected reply '" + std::string(line.substr(0, 64)) + "'");
}

}  // namespace moe
