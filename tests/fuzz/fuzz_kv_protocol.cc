// The rendezvous proxy's line protocol (common/kv_protocol.h): requests from ranks, replies from
// the proxy, and a parsed request formats back to a line that parses to the same request.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/kv_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  if (auto req = moe::ParseKvRequest(line); req.ok()) {
    auto again = moe::ParseKvRequest(moe::FormatKvRequest(*req));
    if (!again.ok() || again->keys != req->keys || again->value != req->value) __builtin_trap();
  }
  std::string value;
  (void)moe::ParseKvReply(line, &value);
  std::string decoded;
  (void)moe::HexDecode(line, &decoded);
  return 0;
}
