// Text from outside (worker names, job messages, rank output) made safe to print: control
// characters (newlines, ANSI escape sequences, ...) become visible escapes, so nobody can forge a
// log line or repaint a terminal. Implemented in log.cc, whose every line goes through it.
#pragma once

#include <string>
#include <string_view>

namespace moe {

// "\n" -> "\\n", "\t" -> "\\t", other bytes below 0x20 and 0x7f -> "\\xHH"; the rest unchanged.
// With keep_newlines, '\n' stays (multi-line text whose lines are otherwise escaped).
std::string EscapeControl(std::string_view s, bool keep_newlines = false);

}  // namespace moe
