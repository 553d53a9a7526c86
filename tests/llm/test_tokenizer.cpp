// Tokenizer rules on small hand-made vocabularies, where every expected id
// follows from the merge rule by hand, plus the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/tokenizer.hpp"
#include "support/error_of.hpp"

using tessera::llm::token_id;
using tessera::llm::token_type;
using tessera::llm::tokenizer;
using tessera::llm::vocab_data;
using ids = std::vector<token_id>;

namespace {

const std::string S = "\xE2\x96\x81"; // U+2581

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then `pieces` from 259.
vocab_data make_vocab(const std::vector<std::pair<std::string, float>> & pieces,
                      const std::vector<token_type> & piece_types = {}) {
    vocab_data v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {token_type::unknown, token_type::control, token_type::control};
    v.scores = {0, 0, 0};
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(fmt::format("<0x{:02X}>", b));
        v.types.push_back(token_type::byte);
        v.scores.push_back(0);
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
        v.tokens.push_back(pieces[i].first);
        v.scores.push_back(pieces[i].second);
        v.types.push_back(i < piece_types.size() ? piece_types[i] : token_type::normal);
    }
    return v;
}

vocab_data no_prefix(vocab_data v) {
    v.add_space_prefix = false;
    return v;
}

constexpr token_id P = 259; // id of the first extra piece
token_id byte_id(uint8_t b) { return 3 + b; }

using tessera::test::error_of; // support/error_of.hpp

} // namespace

TEST(Tokenizer, HighestScorePairMergesFirst) {
    // "abc": pairs "ab" (-5) and "bc" (-1); "bc" wins, then "abc" is not a piece.
    tokenizer tok(no_prefix(make_vocab({{"a", -20}, {"b", -20}, {"c", -20}, {"ab", -5}, {"bc", -1}})));
    EXPECT_EQ(tok.encode("abc", false), (ids{P + 0, P + 4}));
    // With "ab" stronger: ab, c.
    tokenizer tok2(no_prefix(make_vocab({{"a", -20}, {"b", -20}, {"c", -20}, {"ab", -1}, {"bc", -5}})));
    EXPECT_EQ(tok2.encode("abc", false), (ids{P + 3, P + 2}));
}

TEST(Tokenizer, MergesRepeatUntilNoPairIsAPiece) {
    // "abcd": cd (-1) first, then ab (-2), then ab+cd = "abcd" (-3).
    tokenizer tok(no_prefix(make_vocab({{"a", -9}, {"b", -9}, {"c", -9}, {"d", -9}, {"cd", -1}, {"ab", -2},
                                        {"abcd", -3}, {"bc", -4}})));
    EXPECT_EQ(tok.encode("abcd", false), (ids{P + 6}));
    // A piece reachable only through a pair that loses: "bc" (-0.5) beats
    // "ab"/"cd", leaving a, bc, d; "abcd" is never formed.
    tokenizer tok2(no_prefix(make_vocab({{"a", -9}, {"b", -9}, {"c", -9}, {"d", -9}, {"cd", -1}, {"ab", -2},
                                         {"abcd", -3}, {"bc", -0.5f}})));
    EXPECT_EQ(tok2.encode("abcd", false), (ids{P + 0, P + 7, P + 3}));
}

TEST(Tokenizer, EqualScoresMergeLeftmostPairFirst) {
    // "aaa": both pairs are "aa"; the left one merges -> aa, a.
    tokenizer tok(no_prefix(make_vocab({{"a", -2}, {"aa", -1}})));
    EXPECT_EQ(tok.encode("aaa", false), (ids{P + 1, P + 0}));
    // "aaaaa" -> aa aa a.
    EXPECT_EQ(tok.encode("aaaaa", false), (ids{P + 1, P + 1, P + 0}));
    // Two different pairs with equal scores: "xy" and "yz" on "xyz" -> xy, z.
    tokenizer tok2(no_prefix(make_vocab({{"x", -5}, {"y", -5}, {"z", -5}, {"yz", -1}, {"xy", -1}})));
    EXPECT_EQ(tok2.encode("xyz", false), (ids{P + 4, P + 2}));
}

TEST(Tokenizer, SpacesBecomeMetaSymbolWithOneLeadingSpace) {
    tokenizer tok(make_vocab({{S, -1}, {"h", -2}, {"i", -2}, {S + "h", -0.5f}, {"hi", -0.7f}, {S + "hi", -0.1f}}));
    EXPECT_EQ(tok.encode("hi", false), (ids{P + 5}));          // ▁hi
    EXPECT_EQ(tok.encode(" hi", false), (ids{P + 0, P + 5}));  // ▁ ▁hi
    EXPECT_EQ(tok.encode("hi ", false), (ids{P + 5, P + 0}));  // ▁hi ▁
    EXPECT_EQ(tok.encode("", false), (ids{}));
    EXPECT_EQ(tok.encode("", true), (ids{1}));
    EXPECT_EQ(tok.encode(" ", true), (ids{1, P + 0, P + 0}));
    // Without the prefix option nothing is prepended.
    vocab_data v = make_vocab({{S, -1}, {"h", -2}, {"i", -2}, {S + "h", -0.5f}, {"hi", -0.7f}, {S + "hi", -0.1f}});
    v.add_space_prefix = false;
    tokenizer plain(std::move(v));
    EXPECT_EQ(plain.encode("hi", false), (ids{P + 4}));
    EXPECT_EQ(plain.detokenize(ids{P + 0, P + 4}), " hi"); // nothing to remove
}

TEST(Tokenizer, ByteFallbackPerUtf8Byte) {
    tokenizer tok(no_prefix(make_vocab({{"a", -1}})));
    // é (C3 A9) is not a piece: two byte tokens; a stays a piece.
    EXPECT_EQ(tok.encode("a\xC3\xA9" "a", false), (ids{P, byte_id(0xC3), byte_id(0xA9), P}));
    // Bytes are grouped by lead byte only (as the reference does): C3 followed
    // by 'a' forms one two-byte symbol, so that 'a' also falls back to a byte.
    EXPECT_EQ(tok.encode("\xC3" "aa", false), (ids{byte_id(0xC3), byte_id('a'), P}));
    // A truncated sequence at the end is cut to what is there.
    EXPECT_EQ(tok.encode("a\xF0\x9F", false), (ids{P, byte_id(0xF0), byte_id(0x9F)}));
}

TEST(Tokenizer, ByteFallbackWithoutByteTokens) {
    vocab_data v;
    v.tokens = {"<unk>", "<s>", "</s>", "a", "b"};
    v.types = {token_type::unknown, token_type::control, token_type::control, token_type::normal,
               token_type::normal};
    v.scores = {0, 0, 0, -1, -1};
    v.add_space_prefix = false;
    tokenizer tok(v);
    EXPECT_EQ(tok.encode("axb", false), (ids{3, 0, 4})); // x -> <unk>
    v.unk_id = -1;
    tokenizer no_unk(v);
    const std::string msg = error_of([&] { no_unk.encode("axb", false); });
    EXPECT_NE(msg.find("0x78"), std::string::npos) << msg;
    EXPECT_EQ(no_unk.encode("ab", false), (ids{3, 4}));
}

TEST(Tokenizer, NonNormalTokensAreNeverMergedFromText) {
    // "ab" exists only as a control token, "cd" only as unused, "ef" as unknown.
    tokenizer tok(no_prefix(make_vocab({{"a", -1}, {"b", -1}, {"ab", 0}, {"c", -1}, {"d", -1}, {"cd", 0},
                                        {"e", -1}, {"f", -1}, {"ef", 0}},
                                       {token_type::normal, token_type::normal, token_type::control,
                                        token_type::normal, token_type::normal, token_type::unused,
                                        token_type::normal, token_type::normal, token_type::unknown})));
    EXPECT_EQ(tok.encode("abcdef", false, false), (ids{P + 0, P + 1, P + 3, P + 4, P + 6, P + 7}));
    // The text of a byte token is plain text too.
    const auto lit = tok.encode("<0x41>", false);
    EXPECT_EQ(std::count(lit.begin(), lit.end(), byte_id(0x41)), 0);
    // parse_special turns the control ("ab") and unknown ("ef") texts into
    // their tokens, not the unused one.
    EXPECT_EQ(tok.encode("abcdef", false, true), (ids{P + 2, P + 3, P + 4, P + 8}));
}

TEST(Tokenizer, SpecialTokenTextAndLeadingSpace) {
    tokenizer tok(make_vocab({{S, -1}, {"x", -2}, {S + "x", -0.5f}, {"<|u|>", 0}, {"<|end|>", 0}, {"<|e", 0}},
                             {token_type::normal, token_type::normal, token_type::normal, token_type::user_defined,
                              token_type::control, token_type::control}));
    const token_id u = P + 3, end = P + 4, sx = P + 2;
    // User-defined tokens are matched even without parse_special; the text
    // after them gets the leading space again.
    EXPECT_EQ(tok.encode("x<|u|>x", false, false), (ids{sx, u, sx}));
    // Control text only with parse_special.
    EXPECT_EQ(tok.encode("<s>x</s>", true, true), (ids{1, 1, sx, 2}));
    EXPECT_EQ(tok.encode("x<|end|>", false, true), (ids{sx, end}));
    // Longest special text first: "<|end|>" wins over its prefix "<|e".
    EXPECT_EQ(tok.encode("<|end|><|e", false, true), (ids{end, P + 5}));
    // Adjacent special tokens, no text between: no ▁ emitted.
    EXPECT_EQ(tok.encode("<s></s>", false, true), (ids{1, 2}));
    // Without parse_special, "<s>" is ordinary text (here: bytes).
    const auto plain = tok.encode("<s>", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
    EXPECT_EQ(tok.detokenize(plain), "<s>");
}

TEST(Tokenizer, AddSpecialUsesBosAndEosFlags) {
    vocab_data v = make_vocab({{S, -1}, {"x", -2}, {S + "x", -0.5f}});
    v.add_eos = true;
    tokenizer with_eos(v);
    EXPECT_EQ(with_eos.encode("x", true), (ids{1, P + 2, 2}));
    EXPECT_EQ(with_eos.encode("x", false), (ids{P + 2}));
    EXPECT_EQ(with_eos.detokenize(ids{1, P + 2, 2}, /*remove_special=*/true), " x");
    v.add_eos = false;
    v.add_bos = false;
    tokenizer bare(v);
    EXPECT_EQ(bare.encode("x", true), (ids{P + 2}));
    v.add_bos = true;
    v.bos_id = -1; // absent BOS: nothing to add
    tokenizer no_bos(v);
    EXPECT_EQ(no_bos.encode("x", true), (ids{P + 2}));
    EXPECT_EQ(no_bos.bos_id(), -1);
}

TEST(Tokenizer, PiecesAndDetokenize) {
    tokenizer tok(make_vocab({{S, -1}, {"x", -2}, {S + "x" + S + "y", -0.5f}, {"<|u|>", 0}, {"[unused]", 0}},
                             {token_type::normal, token_type::normal, token_type::normal, token_type::user_defined,
                              token_type::unused}));
    EXPECT_EQ(tok.token_to_piece(P + 2), " x y");
    EXPECT_EQ(tok.token_to_piece(P + 3), "<|u|>");
    EXPECT_EQ(tok.token_to_piece(P + 4), "");
    EXPECT_EQ(tok.token_to_piece(P + 4, true), "");
    EXPECT_EQ(tok.token_to_piece(byte_id(0x20)), " ");
    // Only one space is removed, and only from the first token.
    EXPECT_EQ(tok.detokenize(ids{P + 0, P + 2}), " x y");
    EXPECT_EQ(tok.detokenize(ids{P + 2, P + 2}), "x y x y");
    EXPECT_EQ(tok.detokenize(ids{byte_id(0x20), P + 1}), "x"); // a byte-token space counts too
    EXPECT_EQ(tok.detokenize(ids{1, P + 2}), " x y");
    EXPECT_EQ(tok.detokenize(ids{2, P + 2}), " x y"); // a silent first token still uses up the removal
    EXPECT_EQ(tok.detokenize(ids{}), "");
    EXPECT_THROW(tok.token_to_piece(-1), tessera::error);
    EXPECT_THROW(tok.token_to_piece(tok.n_vocab()), tessera::error);
    EXPECT_THROW(tok.detokenize(ids{P, 100000}), tessera::error);
    EXPECT_THROW(tok.token_text(-5), tessera::error);
}

TEST(Tokenizer, Utf8CompletePrefix) {
    using tessera::llm::utf8_complete_prefix;
    EXPECT_EQ(utf8_complete_prefix(""), 0u);
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix("a\xC3"), 1u);                    // é cut after its lead byte
    EXPECT_EQ(utf8_complete_prefix("a\xC3\xA9"), 3u);
    EXPECT_EQ(utf8_complete_prefix("\xE6\x97"), 0u);                 // 3-byte char, 2 present
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x8A"), 4u);
    EXPECT_EQ(utf8_complete_prefix("\x80" "a"), 2u);                 // stray continuation: released
    EXPECT_EQ(utf8_complete_prefix("\xC3" "a"), 2u);                 // broken sequence: released
    EXPECT_EQ(utf8_complete_prefix("\xFF"), 1u);                     // never valid
    EXPECT_EQ(utf8_complete_prefix("\xC0"), 1u);                     // overlong lead: never valid
    EXPECT_EQ(utf8_complete_prefix("ok\xE6\x97\xA5\xE6"), 5u);
}

TEST(Tokenizer, InvalidVocabularyIsRejected) {
    const auto msg = [](vocab_data v) { return error_of([&] { tokenizer t(std::move(v)); }); };
    EXPECT_NE(msg(vocab_data{}).find("empty"), std::string::npos);
    vocab_data v = make_vocab({{"a", -1}});
    v.scores.pop_back();
    EXPECT_NE(msg(v).find("differ in length"), std::string::npos) << msg(v);
    v = make_vocab({{"a", -1}});
    v.types[P] = static_cast<token_type>(7);
    EXPECT_NE(msg(v).find("token 259 has invalid token type 7"), std::string::npos) << msg(v);
    v = make_vocab({{"a", -1}});
    v.tokens[3] = "<0xZZ>";
    EXPECT_NE(msg(v).find("byte token 3"), std::string::npos) << msg(v);
    // The file's text is shown escaped: no terminal control bytes, no
    // invalid UTF-8 reach the user's screen.
    v.tokens[3] = "<\x1b[2J\n\xed>";
    EXPECT_EQ(msg(v), "tokenizer: byte token 3 has text '<\\x1b[2J\\x0a\\xed>', expected <0xHH>") << msg(v);
    v = make_vocab({{"a", -1}});
    v.eos_id = 1000;
    EXPECT_NE(msg(v).find("EOS token id 1000"), std::string::npos) << msg(v);
    // A NaN merge score (the merge queue's order would be undefined) is
    // refused for the pieces merging reads; other tokens' scores are not read.
    v = make_vocab({{"a", -1}, {"b", -1}, {"ab", std::nanf("")}});
    EXPECT_EQ(msg(v), "tokenizer: token 261 has score nan (a merge score must be a number)");
    v = make_vocab({{"a", -1}}, {token_type::user_defined});
    v.scores[P] = std::nanf("");
    EXPECT_EQ(msg(v), "tokenizer: token 259 has score nan (a merge score must be a number)");
    v = make_vocab({{"a", -1}});
    v.scores[1] = std::nanf(""); // <s>, a control token
    v.scores[3] = std::nanf(""); // <0x00>
    EXPECT_EQ(msg(v), "(no error)");
}

namespace {

// A GGUF image with the tokenizer keys of make_vocab({"a"}), then `edit`.
template <class F> tessera::gguf::reader gguf_vocab(F && edit) {
    const vocab_data v = make_vocab({{S + "a", -1}});
    tessera::gguf::writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set("tokenizer.ggml.tokens", tessera::gguf::value::array_string(std::span<const std::string>(v.tokens)));
    w.set("tokenizer.ggml.scores", tessera::gguf::value::array_f32(v.scores));
    std::vector<int32_t> types;
    for (const auto t : v.types) {
        types.push_back(static_cast<int32_t>(t));
    }
    w.set("tokenizer.ggml.token_type", tessera::gguf::value::array_i32(types));
    edit(w);
    const auto bytes = w.to_bytes();
    return tessera::gguf::reader::from_memory(bytes, "vocab.gguf");
}

std::string gguf_error(void (*edit)(tessera::gguf::writer &)) {
    return error_of([&] { tokenizer::from_gguf(gguf_vocab(edit)); });
}

} // namespace

TEST(TokenizerGguf, DefaultsWhenOptionalKeysAreAbsent) {
    const tokenizer tok = tokenizer::from_gguf(gguf_vocab([](tessera::gguf::writer &) {}));
    EXPECT_EQ(tok.n_vocab(), 260);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.unk_id(), 0);
    EXPECT_TRUE(tok.add_bos());
    EXPECT_FALSE(tok.add_eos());
    EXPECT_TRUE(tok.add_space_prefix());
    EXPECT_EQ(tok.encode("a"), (ids{1, P}));
}

TEST(TokenizerGguf, ExplicitKeys) {
    const tokenizer tok = tokenizer::from_gguf(gguf_vocab([](tessera::gguf::writer & w) {
        w.set_u32("tokenizer.ggml.bos_token_id", 2);
        w.set_u32("tokenizer.ggml.eos_token_id", 1);
        w.set_u32("tokenizer.ggml.unknown_token_id", 0xFFFFFFFFu); // = absent
        w.set_bool("tokenizer.ggml.add_bos_token", false);
        w.set_bool("tokenizer.ggml.add_eos_token", true);
        w.set_bool("tokenizer.ggml.add_space_prefix", false);
    }));
    EXPECT_EQ(tok.bos_id(), 2);
    EXPECT_EQ(tok.eos_id(), 1);
    EXPECT_EQ(tok.unk_id(), -1);
    EXPECT_EQ(tok.encode("a"), (ids{byte_id('a'), 1}));
}

TEST(TokenizerGguf, BadMetadataNamesTheKey) {
    const auto has = [](const std::string & msg, const std::string & what) {
        return msg.find(what) != std::string::npos;
    };
    std::string m = gguf_error([](tessera::gguf::writer & w) { w.remove("tokenizer.ggml.model"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.model")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.set_string("tokenizer.ggml.model", "bert"); });
    EXPECT_TRUE(has(m, "unsupported tokenizer model 'bert' (tokenizer.ggml.model); supported: 'llama'")) << m;
    // A byte-level BPE vocabulary needs its merges, and a pre-tokenizer tessera knows.
    m = gguf_error([](tessera::gguf::writer & w) { w.set_string("tokenizer.ggml.model", "gpt2"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.merges")) << m;
    m = gguf_error([](tessera::gguf::writer & w) {
        w.set_string("tokenizer.ggml.model", "gpt2");
        const std::vector<std::string> merges = {"a b"};
        w.set("tokenizer.ggml.merges", tessera::gguf::value::array_string(merges));
        w.set_string("tokenizer.ggml.pre", "qwen2");
    });
    EXPECT_TRUE(has(m, "unsupported pre-tokenizer 'qwen2' (tokenizer.ggml.pre); supported: 'gpt-2'")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.set_u32("tokenizer.ggml.model", 1); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.model")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.remove("tokenizer.ggml.tokens"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.tokens")) << m;
    m = gguf_error([](tessera::gguf::writer & w) {
        const std::vector<float> f = {1.0f};
        w.set("tokenizer.ggml.tokens", tessera::gguf::value::array_f32(f));
    });
    EXPECT_TRUE(has(m, "tokenizer.ggml.tokens")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.remove("tokenizer.ggml.scores"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.scores")) << m;
    m = gguf_error([](tessera::gguf::writer & w) {
        const std::vector<float> f = {1.0f, 2.0f};
        w.set("tokenizer.ggml.scores", tessera::gguf::value::array_f32(f));
    });
    EXPECT_TRUE(has(m, "tokenizer.ggml.scores has 2 entries")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.remove("tokenizer.ggml.token_type"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.token_type")) << m;
    m = gguf_error([](tessera::gguf::writer & w) {
        std::vector<int32_t> t(260, 1);
        t[7] = 9;
        w.set("tokenizer.ggml.token_type", tessera::gguf::value::array_i32(t));
    });
    EXPECT_TRUE(has(m, "tokenizer.ggml.token_type[7] = 9")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.set_u32("tokenizer.ggml.bos_token_id", 260); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.bos_token_id = 260")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.set_string("tokenizer.ggml.eos_token_id", "2"); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.eos_token_id")) << m;
    m = gguf_error([](tessera::gguf::writer & w) { w.set_u32("tokenizer.ggml.add_bos_token", 1); });
    EXPECT_TRUE(has(m, "tokenizer.ggml.add_bos_token")) << m;
}

// End of generation, as the reference picks it (its llama_vocab_is_eog and
// tokenization on vocabularies with these tokens): EOS, the EOT and EOM
// keys, tokens of known end texts whatever their file type (made control
// tokens), fill-in-the-middle pad/repository/separator tokens; <|end|> not
// beside <|return|> and <|call|> (gpt-oss) or <|calls|> and <|flush|>
// (solar-open), where it becomes user-defined; </s> not beside
// <|tool_response> (gemma4), where it becomes normal.
TEST(TokenizerGguf, EndOfGenerationTokens) {
    auto v = make_vocab({{"a", -1}, {"<|endoftext|>", 0}, {"<|end|>", 0}, {"<|im_end|>", 0}, {"<|eot_id|>", 0},
                         {"<end_of_turn>", 0}, {"<|END_OF_TURN_TOKEN|>", 0}, {"<|im_start|>", 0}, {"x", -2},
                         {"[EOS]", 0}, {"<turn|>", 0}, {"[e~[", 0}, {"<PAD>", 0}, {"<|repo_name|>", 0},
                         {"<|fim_prefix|>", 0}},
                        {token_type::normal, token_type::control, token_type::control, token_type::normal,
                         token_type::user_defined, token_type::control, token_type::control, token_type::control,
                         token_type::normal, token_type::control, token_type::control, token_type::normal,
                         token_type::normal, token_type::control, token_type::normal});
    v.eos_id = 2;
    v.eom_id = 267; // "x"
    const tokenizer tok(v);
    std::vector<token_id> eog;
    for (token_id id = 0; id < tok.n_vocab(); ++id) {
        if (tok.is_eog(id)) eog.push_back(id);
    }
    EXPECT_EQ(eog, (ids{2, 260, 261, 262, 263, 264, 267, 268, 269, 270, 271, 272}));
    EXPECT_FALSE(tok.is_eog(-1));
    EXPECT_FALSE(tok.is_eog(tok.n_vocab()));
    // End texts and fill-in-the-middle texts filed as normal or user-defined
    // become control tokens: one token with parse_special, no text printed.
    for (const token_id id : {262, 263, 270, 271, 273}) {
        EXPECT_EQ(tok.get_token_type(id), token_type::control) << id;
    }
    EXPECT_EQ(tok.get_token_type(259), token_type::normal);
    EXPECT_EQ(tok.get_token_type(267), token_type::normal); // EOM by key keeps its type
    EXPECT_EQ(tok.encode("<|im_end|>", false, true), (ids{262}));
    EXPECT_EQ(tok.token_to_piece(263), "");
    EXPECT_EQ(tok.token_to_piece(263, true), "<|eot_id|>");

    auto g = make_vocab({{"<|end|>", 0}, {"<|return|>", 0}, {"<|call|>", 0}, {"<|channel|>", 0}},
                        {token_type::control, token_type::control, token_type::control, token_type::control});
    g.eot_id = 259; // even as EOT, <|end|> is not the end here
    const tokenizer gpt_oss(g);
    EXPECT_FALSE(gpt_oss.is_eog(259));
    EXPECT_TRUE(gpt_oss.is_eog(260));
    EXPECT_TRUE(gpt_oss.is_eog(261));
    EXPECT_TRUE(gpt_oss.is_eog(2));
    // <|end|> and <|channel|> are user-defined: matched in any text, printed.
    EXPECT_EQ(gpt_oss.get_token_type(259), token_type::user_defined);
    EXPECT_EQ(gpt_oss.get_token_type(262), token_type::user_defined);
    EXPECT_EQ(gpt_oss.encode("<|end|>", false, false), (ids{259}));
    EXPECT_EQ(gpt_oss.token_to_piece(259), "<|end|>");

    const tokenizer solar(make_vocab({{"<|end|>", 0}, {"<|calls|>", 0}, {"<|flush|>", 0}},
                                     {token_type::control, token_type::control, token_type::control}));
    EXPECT_FALSE(solar.is_eog(259));
    EXPECT_TRUE(solar.is_eog(260) && solar.is_eog(261));
    const tokenizer end_alone(make_vocab({{"<|end|>", 0}, {"<|calls|>", 0}}, {token_type::control, token_type::control}));
    EXPECT_TRUE(end_alone.is_eog(259));

    auto gemma = make_vocab({{"<|tool_response>", 0}}, {token_type::control});
    gemma.eos_id = 1; // </s> (id 2) is not EOS here
    const tokenizer gemma4(gemma);
    EXPECT_FALSE(gemma4.is_eog(2));
    EXPECT_EQ(gemma4.get_token_type(2), token_type::normal);
    EXPECT_TRUE(gemma4.is_eog(259));

    // Fill-in-the-middle roles by key: the key's token, not a text match.
    auto f = make_vocab({{"<PAD>", 0}, {"<|fim_pad|>", 0}}, {token_type::control, token_type::control});
    f.fim_pad_id = 260;
    const tokenizer fim(f);
    EXPECT_FALSE(fim.is_eog(259));
    EXPECT_TRUE(fim.is_eog(260));

    const tokenizer keys = tokenizer::from_gguf(gguf_vocab([](tessera::gguf::writer & w) {
        w.set_u32("tokenizer.ggml.eot_token_id", 259);
        w.set_u32("tokenizer.ggml.eom_token_id", 0);
        w.set_u32("tokenizer.ggml.fim_sep_token_id", 1);
    }));
    EXPECT_EQ(keys.eot_id(), 259);
    EXPECT_EQ(keys.eom_id(), 0);
    EXPECT_TRUE(keys.is_eog(259) && keys.is_eog(0) && keys.is_eog(2) && keys.is_eog(1));
    const std::string m = gguf_error([](tessera::gguf::writer & w) { w.set_u32("tokenizer.ggml.fim_pad_token_id", 999); });
    EXPECT_NE(m.find("tokenizer.ggml.fim_pad_token_id = 999 is outside the vocabulary [0, 260)"), std::string::npos) << m;
}
