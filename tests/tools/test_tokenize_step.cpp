// tests/tools/test_tokenize_step.cpp — the CLI's tokenize step names the
// step and the input when memory runs out, instead of a bare std::bad_alloc.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "../tools/tokenize_step.hpp"
#include "support/error_of.hpp"

namespace {

using tessera::llm::token_id;
using tessera::test::error_of;
using tessera::tools::tokenize_step;

TEST(TokenizeStep, BadAllocNamesTheStepAndTheInput) {
    const std::string text(1000, 'a');
    const std::string what = error_of([&] {
        (void)tokenize_step("-f '/tmp/b200.txt'", text, 5, 0, []() -> std::vector<token_id> { throw std::bad_alloc(); });
    });
    EXPECT_EQ(what.rfind("out of memory tokenizing -f '/tmp/b200.txt' (1000 bytes; ", 0), 0u) << what;
}

TEST(TokenizeStep, ATextOverTheMemoryIsRefusedBeforeEncoding) {
    const std::string text(4096, 'a');
    bool called = false;
    const auto encode = [&] {
        called = true;
        return std::vector<token_id>{1, 2};
    };
    // 4096 bytes at 5 bytes a byte: refused with one byte less, before encoding.
    const std::string what = error_of([&] { (void)tokenize_step("-p", text, 5, 4096 * 5 - 1, encode); });
    EXPECT_EQ(what.rfind("tokenizing -p (4096 bytes) needs about ", 0), 0u) << what;
    EXPECT_NE(what.find("more than the machine's physical memory"), std::string::npos) << what;
    EXPECT_FALSE(called);
    // Enough memory, or none known (0): encoded; other errors pass through as they are.
    EXPECT_EQ(tokenize_step("-p", text, 5, 4096 * 5, encode), (std::vector<token_id>{1, 2}));
    EXPECT_EQ(tokenize_step("-p", text, 5, 0, encode).size(), 2u);
    EXPECT_TRUE(called);
    EXPECT_EQ(error_of([&] {
                  (void)tokenize_step("-p", text, 5, 0, []() -> std::vector<token_id> { throw tessera::error("bad byte"); });
              }),
              "bad byte");
    EXPECT_THROW((void)tokenize_step("-p", text, 5, 0, []() -> std::vector<token_id> { throw std::runtime_error("x"); }),
                 std::runtime_error);
}

} // namespace
