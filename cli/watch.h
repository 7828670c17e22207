// moectl watch: a job followed live until it ends (a progress line and its events, or one JSON
// object per message for scripts). Returns 0 when it succeeded, 10 failed, 11 cancelled.
#pragma once

#include <string>

#include "cli/client.h"

namespace moe::cli {

int Watch(Client& c, const std::string& id, bool json);

}  // namespace moe::cli
