// The line protocol between a rank and its worker agent's rendezvous proxy (a Unix socket): the
// engine's UnixSocketStore writes requests and reads replies, the agent's RendezvousProxy the
// reverse. One request or reply per line; keys and values hex-encoded, so any bytes travel:
//   SET <key> <value>            -> OK | ERR <message>
//   GET <key>                    -> VAL <value> | NOTFOUND | ERR <message>
//   WAIT <timeout_ms> <key>...   -> OK | TIMEOUT <message> | ERR <message>
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace moe {

std::string HexEncode(std::string_view s);
bool HexDecode(std::string_view hex, std::string* out);

struct KvRequest {
  enum class Op { kSet, kGet, kWait };
  Op op = Op::kGet;
  std::vector<std::string> keys;  // one for SET and GET
  std::string value;              // SET
  int64_t timeout_ms = 0;         // WAIT
};

std::string FormatKvRequest(const KvRequest& request);
// INVALID_ARGUMENT naming what is malformed.
StatusOr<KvRequest> ParseKvRequest(std::string_view line);

// Replies: a status (OK, NOT_FOUND, DEADLINE_EXCEEDED as TIMEOUT, anything else as ERR), or a GET's
// value.
std::string FormatKvReply(const Status& status);
std::string FormatKvValue(std::string_view value);
// The reply as the store's result; a VAL reply's value goes to `value`.
Status ParseKvReply(std::string_view line, std::string* value);

}  // namespace moe
