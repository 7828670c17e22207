// moectl watch: a job followed live until it ends (a progress line and its events, or one JSON
// object per message for scripts). Returns 0 when it succeeded, 10 failed, 11 cancelled.
#pragma once

#include <string>

#include "cli/client.h"

namespace moe::cli {

// A watch that loses the controller (a restart) reconnects for up to `reconnect_seconds` and goes
// on from the last event it printed, saying so on stderr.
int Watch(Client& c, const std::string& id, bool json, double reconnect_seconds);

}  // namespace moe::cli
