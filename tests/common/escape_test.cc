// What reaches a terminal from outside text: no control character, no escape sequence raw.
#include "common/escape.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(EscapeControl, C0C1AnsiOscAndBidiBecomeVisibleText) {
  EXPECT_EQ(EscapeControl("plain text, äöü 漢字 ✓"), "plain text, äöü 漢字 ✓")
      << "UTF-8 text passes";
  EXPECT_EQ(EscapeControl("a\033[2Jb"), "a\\x1b[2Jb") << "ANSI CSI";
  EXPECT_EQ(EscapeControl("\033]0;title\007"), "\\x1b]0;title\\x07") << "OSC with BEL";
  EXPECT_EQ(EscapeControl("x\xc2\x9b"
                          "31m"),
            "x\\u009b31m")
      << "C1 CSI as UTF-8";
  EXPECT_EQ(EscapeControl("x\x9b"
                          "31m"),
            "x\\x9b31m")
      << "a lone C1 byte (8-bit terminals)";
  EXPECT_EQ(EscapeControl("evil\xe2\x80\xae"
                          "txt.exe"),
            "evil\\u202etxt.exe")
      << "a bidi override";
  EXPECT_EQ(EscapeControl("a\nb\tc\x7f"), "a\\nb\\tc\\x7f");
  EXPECT_EQ(EscapeControl("a\nb", /*keep_newlines=*/true), "a\nb");
  EXPECT_EQ(EscapeControl("\xc0\xaf \xed\xa0\x80"), "\\xc0\\xaf \\xed\\xa0\\x80")
      << "overlong and surrogate bytes";
}

TEST(EscapeHiddenAsUnicode, EscapesReadBackInJsonAndYaml) {
  EXPECT_EQ(EscapeHiddenAsUnicode("{\"m\": \"a\033[2J\xc2\x9b\"}\n"),
            "{\"m\": \"a\\u001b[2J\\u009b\"}\n");
  EXPECT_EQ(EscapeHiddenAsUnicode("ok ✓\n"), "ok ✓\n");
  EXPECT_EQ(EscapeHiddenAsUnicode("\xff"), "\\ufffd");
}

}  // namespace
}  // namespace moe
