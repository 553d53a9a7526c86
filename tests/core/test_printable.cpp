// printable_lines: a message's text made safe for a terminal, its readable
// text (UTF-8, quotes, backslashes, line breaks) kept.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/printable.hpp"

using tessera::printable_lines;
using tessera::printable_utf8;

TEST(PrintableLines, EscapesControlBytesButKeepsLineBreaks) {
    EXPECT_EQ(printable_lines("plain text, 'quoted' and C:\\dir"), "plain text, 'quoted' and C:\\dir");
    EXPECT_EQ(printable_lines("a\x1b[31mred\x1b[0m\nnext line\n"), "a\\x1b[31mred\\x1b[0m\nnext line\n");
    EXPECT_EQ(printable_lines(std::string("\r\t\x7f\0z", 5)), "\\x0d\\x09\\x7f\\x00z");
    EXPECT_EQ(printable_lines(""), "");
}

TEST(PrintableLines, KeepsUtf8EscapesC1AndIllFormedBytes) {
    EXPECT_EQ(printable_lines("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    // U+009B (CSI as a C1 control), a lone 0x9b, a truncated sequence, a surrogate.
    EXPECT_EQ(printable_lines("\xc2\x9b" "2J|\x9b" "2J|\xe2\x82|\xed\xa0\x80"),
              "\\xc2\\x9b2J|\\x9b2J|\\xe2\\x82|\\xed\\xa0\\x80");
}

// Text printable_utf8 escaped once comes out of printable_lines unchanged.
TEST(PrintableLines, LeavesEscapedTextAsItIs) {
    const std::string shown = printable_utf8("/tmp/a\x1b[31m'b'\\c\n\xff\xc3\xa9");
    EXPECT_EQ(shown, "/tmp/a\\x1b[31m\\x27b\\x27\\x5cc\\x0a\\xff\xc3\xa9");
    EXPECT_EQ(printable_lines(shown), shown);
}
