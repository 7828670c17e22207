#include "common/host_id.h"

#include <unistd.h>

#include "common/file_util.h"

namespace moe {

std::string ThisHostId() {
  std::string h;
  if (auto id = ReadFileToString("/etc/machine-id"); id.ok()) h = *id;
  while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return h + "/" + host;
}

}  // namespace moe
