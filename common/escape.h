// Text from outside (worker names, job messages, rank output) made safe to print: control
// characters (newlines, ANSI escape sequences, ...) become visible escapes, so nobody can forge a
// log line or repaint a terminal. Implemented in log.cc, whose every line goes through it.
#pragma once

#include <string>
#include <string_view>

namespace moe {

// "\n" -> "\\n", "\t" -> "\\t", other bytes below 0x20 and 0x7f -> "\\xHH" (ESC among them: no
// ANSI or OSC sequence survives); C1 controls (U+0080-U+009F) and the bidirectional overrides and
// isolates -> "\\uHHHH"; bytes that are not UTF-8 -> "\\xHH"; the rest (UTF-8 text) unchanged. With
// keep_newlines, '\n' stays (multi-line text whose lines are otherwise escaped).
std::string EscapeControl(std::string_view s, bool keep_newlines = false);
// For JSON and YAML text (moectl -o json|yaml): the same characters as escapes both read back
// ("\\u001b", "\\u009b"; bytes that are not UTF-8 as "\\ufffd"); newlines stay (they separate the
// document's lines; inside strings the writers escape them already).
std::string EscapeHiddenAsUnicode(std::string_view s);

}  // namespace moe
