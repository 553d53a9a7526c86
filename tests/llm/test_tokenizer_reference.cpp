// Tokenizer against the reference data in shared/: the SentencePiece test
// vocabularies (vocab/*.inp / *.out) and the prompts and greedy continuations
// of reference/*.json (tokenizer-notes.md describes the rules checked here).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.hpp"
#include "llm/bpe_reference_data.hpp"
#include "llm/bpe_pre_reference_data.hpp"
#include "llm/pair_merge.hpp"
#include "llm/pretokenizer.hpp"
#include "support/temp_dir.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/tokenizer.hpp"

using tessera::llm::token_id;
using tessera::llm::tokenizer;

namespace {

const std::string k_shared = TESSERA_SHARED_DIR;

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Loaded once per file for the whole test program (the 32000-token ones are
// the slow part under ASan).
const tokenizer & load(const std::string & rel) {
    static std::map<std::string, std::unique_ptr<tokenizer>> cache;
    auto & slot = cache[rel];
    if (!slot) {
        slot = std::make_unique<tokenizer>(tokenizer::from_gguf(tessera::gguf::reader(k_shared + "/" + rel)));
    }
    return *slot;
}

// Texts of a .inp file: separated by "\n__ggml_vocab_test__\n"; the file ends
// with one such separator (see shared/vocab/README.md).
std::vector<std::string> read_inp(const std::string & path) {
    const std::string data = read_file(path);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t start = 0;
    for (size_t pos = data.find(sep); pos != std::string::npos; pos = data.find(sep, start)) {
        texts.push_back(data.substr(start, pos - start));
        start = pos + sep.size();
    }
    EXPECT_EQ(start, data.size()) << "text after the last separator in " << path;
    return texts;
}

// Lines of a .out file, each a list of ids.
std::vector<std::vector<token_id>> read_out(const std::string & path) {
    std::istringstream in(read_file(path));
    std::vector<std::vector<token_id>> cases;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::vector<token_id> ids;
        token_id id;
        while (ls >> id) {
            ids.push_back(id);
        }
        cases.push_back(ids);
    }
    return cases;
}

std::string to_hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (const unsigned char c : s) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

// True when `s` is well-formed UTF-8 (RFC 3629).
bool valid_utf8(const std::string & s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            n = 1, cp = c;
        } else if ((c & 0xE0) == 0xC0) {
            n = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n > s.size()) {
            return false;
        }
        for (size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n;
    }
    return true;
}

// The reference's detokenized text of case `index`: from `overrides` where
// listed, else the text itself.
std::string detokenized(std::span<const tessera::test::detokenized_case> overrides, size_t index,
                        const std::string & text) {
    for (const auto & o : overrides) {
        if (size_t(o.index) == index) return o.text;
    }
    return text;
}

void check_vocab_file(const std::string & name, std::span<const tessera::test::detokenized_case> overrides = {}) {
    const tokenizer & tok = load("vocab/" + name);
    const auto texts = read_inp(k_shared + "/vocab/" + name + ".inp");
    const auto expected = read_out(k_shared + "/vocab/" + name + ".out");
    ASSERT_EQ(texts.size(), 46u);
    ASSERT_EQ(expected.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        SCOPED_TRACE("case " + std::to_string(i) + ": \"" + texts[i] + "\"");
        EXPECT_EQ(tok.encode(texts[i], /*add_special=*/false, /*parse_special=*/false), expected[i]);
        EXPECT_EQ(tok.encode(texts[i], false, true), expected[i]);
        // With special tokens: BOS in front where the vocabulary adds it
        // (SentencePiece; not GPT-2), nothing at the end.
        std::vector<token_id> with_bos;
        if (tok.add_bos()) with_bos.push_back(tok.bos_id());
        with_bos.insert(with_bos.end(), expected[i].begin(), expected[i].end());
        EXPECT_EQ(tok.encode(texts[i], true, false), with_bos);
        // SentencePiece is lossless (only its added leading space goes away);
        // byte-level BPE too, less the reference's clean-up of spaces.
        EXPECT_EQ(tok.detokenize(expected[i]), detokenized(overrides, i, texts[i]));
    }
}

} // namespace

TEST(TokenizerReference, LlamaSpmVocabMatchesAllCases) { check_vocab_file("ggml-vocab-llama-spm.gguf"); }

TEST(TokenizerReference, Phi3VocabMatchesAllCases) { check_vocab_file("ggml-vocab-phi-3.gguf"); }

// The SentencePiece encoder merges a long text in parts, cut where no merge
// can cross (tokenizer_encode.cpp); cut at every such place, the reference's
// ids are unchanged, and so are those of a text of every case in a row.
TEST(TokenizerReference, SpmTextCutWhereverNoMergeCrossesGivesTheSameIds) {
    struct restore {
        size_t was = tessera::llm::spm_part_bytes.exchange(1);
        ~restore() { tessera::llm::spm_part_bytes = was; }
    } cut_everywhere;
    check_vocab_file("ggml-vocab-llama-spm.gguf");
    check_vocab_file("ggml-vocab-phi-3.gguf");
    const tokenizer & tok = load("vocab/ggml-vocab-llama-spm.gguf");
    std::string all;
    for (const std::string & t : read_inp(k_shared + "/vocab/ggml-vocab-llama-spm.gguf.inp")) all += t + " \n";
    const std::vector<token_id> cut = tok.encode(all, false);
    tessera::llm::spm_part_bytes = size_t(64) << 10; // one part: nothing is cut
    EXPECT_EQ(cut, tok.encode(all, false));
}

TEST(TokenizerReference, Gpt2VocabMatchesAllCases) {
    const tokenizer & tok = load("vocab/ggml-vocab-gpt-2.gguf");
    ASSERT_EQ(tok.kind(), tessera::llm::vocab_kind::bpe);
    EXPECT_EQ(tok.pre(), tessera::llm::pre_tokenizer::gpt2);
    EXPECT_FALSE(tok.add_bos());
    check_vocab_file("ggml-vocab-gpt-2.gguf", tessera::test::k_gpt2_inp_detokenized);
}

TEST(TokenizerReference, VocabularyMetadata) {
    const tokenizer & tok = load("models/stories260K.gguf");
    EXPECT_EQ(tok.n_vocab(), 512);
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.unk_id(), 0);
    EXPECT_TRUE(tok.add_bos());
    EXPECT_FALSE(tok.add_eos());
    EXPECT_TRUE(tok.add_space_prefix());
    EXPECT_TRUE(tok.is_eog(2));
    EXPECT_FALSE(tok.is_eog(1));
    EXPECT_EQ(tok.find_piece("\xE2\x96\x81Once"), 403);
    EXPECT_EQ(tok.find_piece("\xE2\x96\x81"), 410);
    EXPECT_EQ(tok.find_piece("no such piece"), -1);
    EXPECT_EQ(tok.byte_token(0x0A), 13);
    EXPECT_EQ(tok.byte_token(0x09), 12);
    EXPECT_EQ(tok.byte_token(0xFF), 258);
    EXPECT_EQ(tok.get_token_type(1), tessera::llm::token_type::control);
    EXPECT_EQ(tok.get_token_type(0), tessera::llm::token_type::unknown);
    EXPECT_EQ(tok.get_token_type(13), tessera::llm::token_type::byte);
    EXPECT_FLOAT_EQ(tok.token_score(300), -41.0f); // score -(id - 259)

    const tokenizer & phi3 = load("vocab/ggml-vocab-phi-3.gguf");
    EXPECT_EQ(phi3.n_vocab(), 32064);
    EXPECT_EQ(phi3.eos_id(), 32000);
    EXPECT_TRUE(phi3.is_eog(32000));
}

class ReferenceJson : public ::testing::TestWithParam<const char *> {};

TEST_P(ReferenceJson, PromptIdsPiecesAndRoundTrips) {
    const nlohmann::json ref = nlohmann::json::parse(read_file(k_shared + "/reference/" + GetParam()));
    const tokenizer & tok = load("models/" + ref["model"].get<std::string>());
    ASSERT_EQ(tok.n_vocab(), ref["n_vocab"].get<int>());
    ASSERT_EQ(tok.add_bos(), ref["add_bos"].get<bool>());
    ASSERT_EQ(tok.add_eos(), ref["add_eos"].get<bool>());
    for (const token_id eog : ref["eog_ids"].get<std::vector<token_id>>()) {
        EXPECT_TRUE(tok.is_eog(eog));
    }
    ASSERT_EQ(ref["cases"].size(), 7u);
    for (const auto & c : ref["cases"]) {
        const std::string prompt = c["prompt"].get<std::string>();
        SCOPED_TRACE("prompt \"" + prompt + "\"");
        const auto prompt_ids = c["prompt_ids"].get<std::vector<token_id>>();
        EXPECT_EQ(tok.encode(prompt, true, false), prompt_ids);
        EXPECT_EQ(tok.encode(prompt, true, true), prompt_ids);

        // Whole-sequence detokenize: BOS in front keeps the space after it.
        const std::vector<token_id> no_bos(prompt_ids.begin() + 1, prompt_ids.end());
        EXPECT_EQ(tok.detokenize(no_bos), prompt);
        EXPECT_EQ(tok.detokenize(prompt_ids), prompt.empty() ? "" : " " + prompt);
        EXPECT_EQ(tok.detokenize(prompt_ids, /*remove_special=*/true), prompt.empty() ? "" : " " + prompt);

        // Generated text: plain concatenation of pieces, each keeping its space.
        const auto greedy = c["greedy_ids"].get<std::vector<token_id>>();
        std::string joined;
        for (const token_id id : greedy) {
            joined += tok.token_to_piece(id);
        }
        EXPECT_EQ(to_hex(joined), c["greedy_text_hex"].get<std::string>());
        EXPECT_EQ(joined, c["greedy_text"].get<std::string>());

        // Streaming gives the same bytes, each chunk whole UTF-8 characters.
        tessera::llm::stream_decoder dec(tok);
        std::string streamed;
        for (const token_id id : greedy) {
            const std::string chunk = dec.push(id);
            EXPECT_TRUE(valid_utf8(chunk)) << "chunk " << to_hex(chunk);
            streamed += chunk;
        }
        EXPECT_EQ(dec.pending(), 0u);
        streamed += dec.finish();
        EXPECT_EQ(streamed, joined);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceJson,
                         ::testing::Values("stories260K.json", "stories260K.f32.json", "llama-2-tiny-random.json",
                                           "llama-2-tiny-random.f32.json"));

// The examples of tokenizer-notes.md, id for id.
TEST(TokenizerReference, NotesExamplesStories) {
    const tokenizer & tok = load("models/stories260K.gguf");
    EXPECT_EQ(tok.encode("Once upon a time"), (std::vector<token_id>{1, 403, 407, 261, 378}));
    EXPECT_EQ(tok.encode(""), (std::vector<token_id>{1}));
    EXPECT_EQ(tok.encode("", false), (std::vector<token_id>{}));
    // A text starting with a space: a lone ▁ then ▁l.
    const auto leading = tok.encode(" leading", false);
    ASSERT_GE(leading.size(), 2u);
    EXPECT_EQ(leading[0], 410);
    EXPECT_EQ(tok.token_text(leading[1]), "\xE2\x96\x81l");
    // A trailing space becomes a final lone ▁.
    EXPECT_EQ(tok.encode("time ", false).back(), 410);
    // Runs of spaces: ▁He ll o ▁ ▁w or ld.
    const auto hw = tok.encode("Hello  world", false);
    std::vector<std::string> pieces;
    for (const token_id id : hw) {
        pieces.push_back(tok.token_text(id));
    }
    EXPECT_EQ(pieces, (std::vector<std::string>{"\xE2\x96\x81He", "ll", "o", "\xE2\x96\x81", "\xE2\x96\x81w", "or",
                                                "ld"}));
    // Newline: byte token, and a text starting with one begins ▁ <0x0A>.
    EXPECT_EQ(tok.encode("\nx", false).at(0), 410);
    EXPECT_EQ(tok.encode("\nx", false).at(1), 13);
    EXPECT_EQ(tok.encode("\t", false), (std::vector<token_id>{410, 12}));
    // ASCII missing from the vocabulary falls back to bytes: '=' is <0x3D> = 64.
    const auto eq = tok.encode("x = 1", false);
    EXPECT_NE(std::find(eq.begin(), eq.end(), 64), eq.end());
    // Special-token text: parsed -> control tokens, text after gets ▁ again.
    EXPECT_EQ(tok.encode("<s>Hi</s>", true, true), (std::vector<token_id>{1, 1, 320, 417, 2}));
    const auto raw = tok.encode("<s>Hi</s>", true, false);
    ASSERT_GE(raw.size(), 4u);
    EXPECT_EQ(raw[1], 410);                    // ▁
    EXPECT_EQ(raw[2], tok.find_piece("<"));
    EXPECT_EQ(std::count(raw.begin(), raw.end(), 1), 1); // only the added BOS
    EXPECT_EQ(std::count(raw.begin(), raw.end(), 2), 0);
    EXPECT_EQ(tok.detokenize(raw), " <s>Hi</s>");

    // Detokenizing.
    const std::vector<token_id> once = {1, 403, 407, 261, 378};
    EXPECT_EQ(tok.detokenize(once), " Once upon a time");
    EXPECT_EQ(tok.detokenize(once, true), " Once upon a time");
    EXPECT_EQ(tok.detokenize(std::span(once).subspan(1)), "Once upon a time");
    EXPECT_EQ(tok.detokenize(once, false, /*render_special=*/true), "<s> Once upon a time");
    EXPECT_EQ(tok.detokenize(tok.encode("  two", false)), "  two"); // only one space removed
    EXPECT_EQ(tok.token_to_piece(403), " Once");
    EXPECT_EQ(tok.token_to_piece(1), "");
    EXPECT_EQ(tok.token_to_piece(2), "");
    EXPECT_EQ(tok.token_to_piece(0), "");
    EXPECT_EQ(tok.token_to_piece(1, true), "<s>");
    EXPECT_EQ(tok.token_to_piece(2, true), "</s>");
    EXPECT_EQ(tok.token_to_piece(0, true), "<unk>");
    EXPECT_EQ(tok.token_to_piece(13), "\n");
    EXPECT_EQ(tok.token_to_piece(3), std::string(1, '\0'));
    EXPECT_EQ(tok.token_to_piece(258), "\xFF");
}

TEST(TokenizerReference, NotesExamplesLlama2) {
    const tokenizer & tok = load("models/llama-2-tiny-random.gguf");
    EXPECT_EQ(tok.encode("Hello  world", false), (std::vector<token_id>{15043, 29871, 3186}));
    const auto three = tok.encode("a   there", false); // ▁a ▁▁ ▁there
    ASSERT_EQ(three.size(), 3u);
    EXPECT_EQ(three[1], 259);
    EXPECT_EQ(tok.token_text(three[2]), "\xE2\x96\x81there");
    const auto five = tok.encode("a     y", false); // ▁a ▁▁▁▁ ▁y
    ASSERT_EQ(five.size(), 3u);
    EXPECT_EQ(five[1], 268);
    EXPECT_EQ(tok.token_text(five[2]), "\xE2\x96\x81y");
    EXPECT_EQ(tok.token_text(tok.encode("Café", false).at(0)), "\xE2\x96\x81" "C");
}

TEST(TokenizerReference, StreamingHoldsSplitCharacters) {
    const tokenizer & tok = load("models/stories260K.gguf");
    // 😊 = F0 9F 98 8A as four byte tokens (243, 162, 155, 141).
    tessera::llm::stream_decoder dec(tok);
    EXPECT_EQ(dec.push(403), " Once");
    EXPECT_EQ(dec.push(243), "");
    EXPECT_EQ(dec.push(162), "");
    EXPECT_EQ(dec.push(155), "");
    EXPECT_EQ(dec.pending(), 3u);
    EXPECT_EQ(dec.push(141), "\xF0\x9F\x98\x8A");
    // A character cut short by the end of generation is flushed as is.
    EXPECT_EQ(dec.push(233), ""); // E6
    EXPECT_EQ(dec.finish(), "\xE6");
    EXPECT_EQ(dec.pending(), 0u);
    // A lead byte followed by a non-continuation byte is released raw.
    EXPECT_EQ(dec.push(233), "");
    EXPECT_EQ(dec.push(410), "\xE6 ");
    // A stray continuation byte is released at once.
    EXPECT_EQ(dec.push(0x80 + 3), "\x80");
    // Bad id: error, held bytes unchanged.
    EXPECT_EQ(dec.push(243), "");
    EXPECT_THROW(dec.push(512), tessera::error);
    EXPECT_EQ(dec.pending(), 1u);
    // Special tokens are silent unless rendered.
    EXPECT_EQ(dec.push(2), "");
    tessera::llm::stream_decoder special(tok, true);
    EXPECT_EQ(special.push(2), "</s>");
}

TEST(TokenizerReference, LargeVocabularyEncodesLongText) {
    // 200 lines: exercises the merge queue on a long input. A newline is a
    // byte token that no piece contains, so merging never crosses it and the
    // result is the first line's ids, then 199 times the ids of a line that
    // follows a newline (no ▁ in front), each ending with <0x0A> (13).
    const tokenizer & tok = load("models/llama-2-tiny-random.gguf");
    const std::string line = "One day, a little girl named Sue found a shiny red ball in the garden.";
    std::string text;
    for (int i = 0; i < 200; ++i) {
        text += line + "\n";
    }
    std::vector<token_id> expected = tok.encode(line + "\n", false);
    const auto after_newline = tok.encode("\n" + line, false); // ▁ <0x0A> One ...
    ASSERT_EQ(after_newline.at(0), 29871);
    ASSERT_EQ(after_newline.at(1), 13);
    for (int i = 1; i < 200; ++i) {
        expected.insert(expected.end(), after_newline.begin() + 2, after_newline.end());
        expected.push_back(13);
    }
    const auto ids = tok.encode(text, false);
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(tok.detokenize(ids), text);
}

TEST(TokenizerReference, RandomTextRoundTrip) {
    // Valid UTF-8 text encodes and decodes back to itself (byte fallback makes
    // the tokenizer lossless; U+2581 itself is left out, it would come back
    // as a space). Arbitrary bytes always encode to normal and byte tokens.
    // (With invalid UTF-8 the round trip is not guaranteed: characters are
    // grouped by lead byte alone, as in the reference, so a lead byte can
    // swallow part of an escaped space.)
    std::mt19937 gen(2024);
    const std::vector<std::string> chars = {"a", "b", " ", "  ", "Z", "\n", "\t", "<", ">", "s", "/", "<s>",
                                            "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x8A", "\x01", "\x7F"};
    for (const char * name : {"models/stories260K.gguf", "models/llama-2-tiny-random.gguf"}) {
        const tokenizer & tok = load(name);
        for (int i = 0; i < 200; ++i) {
            SCOPED_TRACE(name + std::string(" text ") + std::to_string(i));
            std::string text;
            const size_t n = gen() % 30;
            for (size_t k = 0; k < n; ++k) {
                text += chars[gen() % chars.size()];
            }
            const auto ids = tok.encode(text, false, false);
            EXPECT_EQ(tok.detokenize(ids), text);
            EXPECT_EQ(tok.detokenize(tok.encode(text, true, false), true), text.empty() ? "" : " " + text);
            for (const token_id id : ids) {
                const auto type = tok.get_token_type(id);
                EXPECT_TRUE(type == tessera::llm::token_type::normal || type == tessera::llm::token_type::byte);
            }

            std::string bytes;
            for (size_t k = gen() % 30; k > 0; --k) {
                bytes += static_cast<char>(gen() & 0xFF);
            }
            for (const token_id id : tok.encode(bytes, true, true)) {
                const auto type = tok.get_token_type(id);
                EXPECT_TRUE(type != tessera::llm::token_type::unknown && type != tessera::llm::token_type::unused);
            }
        }
    }
}

// Byte-level BPE against the reference's ids (bpe_reference_data.hpp): the
// GPT-2 vocabulary with each pre-tokenizer tessera knows (the same tokens
// and merges, tokenizer.ggml.pre changed in a copy).
namespace {

// A copy of the GPT-2 vocabulary with tokenizer.ggml.pre set to `pre` (null:
// the key left out), with `drop_merges` every merge whose index is 3 modulo 7
// removed, and with `eot_text` the text of token 50256 (the control token
// <|endoftext|>) replaced.
std::unique_ptr<tokenizer> gpt2_with_pre(const char * pre, bool drop_merges = false,
                                         const char * eot_text = nullptr) {
    const tessera::gguf::reader src(k_shared + "/vocab/ggml-vocab-gpt-2.gguf");
    tessera::gguf::writer w;
    for (const tessera::gguf::kv & e : src.metadata()) {
        if (e.key != "tokenizer.ggml.pre" && !(drop_merges && e.key == "tokenizer.ggml.merges") &&
            !(eot_text != nullptr && e.key == "tokenizer.ggml.tokens")) {
            w.set(e.key, e.val);
        }
    }
    if (eot_text != nullptr) {
        const std::vector<std::string_view> view = src.get_array_string("tokenizer.ggml.tokens");
        std::vector<std::string> tokens(view.begin(), view.end());
        tokens.at(50256) = eot_text;
        w.set("tokenizer.ggml.tokens", tessera::gguf::value::array_string(tokens));
    }
    if (pre != nullptr) w.set_string("tokenizer.ggml.pre", pre);
    if (drop_merges) {
        std::vector<std::string> merges;
        const std::vector<std::string_view> all = src.get_array_string("tokenizer.ggml.merges");
        for (size_t i = 0; i < all.size(); ++i) {
            if (i % 7 != 3) merges.emplace_back(all[i]);
        }
        w.set("tokenizer.ggml.merges", tessera::gguf::value::array_string(merges));
    }
    const tessera::test::temp_dir dir("bpe");
    const auto path = dir.path / "vocab.gguf";
    w.write(path);
    return std::make_unique<tokenizer>(tokenizer::from_gguf(tessera::gguf::reader(path)));
}

} // namespace

TEST(TokenizerReference, ByteLevelBpeMatchesEachPreTokenizer) {
    using tessera::llm::pre_tokenizer;
    const tokenizer & gpt2 = load("vocab/ggml-vocab-gpt-2.gguf");
    const auto llama3 = gpt2_with_pre("llama-bpe");
    const auto smollm = gpt2_with_pre("smollm");
    const auto absent = gpt2_with_pre(nullptr);
    EXPECT_EQ(llama3->pre(), pre_tokenizer::llama3);
    EXPECT_TRUE(llama3->add_bos()); // the reference's default for Llama 3 vocabularies
    EXPECT_EQ(smollm->pre(), pre_tokenizer::smollm);
    EXPECT_FALSE(smollm->add_bos());
    EXPECT_EQ(absent->pre(), pre_tokenizer::default_);
    EXPECT_EQ(gpt2_with_pre("llama3")->pre(), pre_tokenizer::llama3);
    EXPECT_EQ(gpt2_with_pre("falcon3")->pre(), pre_tokenizer::llama3);
    EXPECT_TRUE(gpt2_with_pre("pixtral")->add_bos());
    EXPECT_EQ(gpt2_with_pre("mellum")->pre(), pre_tokenizer::gpt2);
    EXPECT_EQ(gpt2_with_pre("")->pre(), pre_tokenizer::default_); // as the reference reads an empty name
    int n = 0;
    for (const auto & c : tessera::test::k_bpe_cases) {
        const std::string text(c.text, c.text_len);
        SCOPED_TRACE("case " + std::to_string(n++) + ": " + to_hex(text));
        EXPECT_EQ(gpt2.encode(text, false, false), c.gpt2);
        EXPECT_EQ(llama3->encode(text, false, false), c.llama_bpe);
        EXPECT_EQ(smollm->encode(text, false, false), c.smollm);
        EXPECT_EQ(absent->encode(text, false, false), c.default_pre);
        EXPECT_EQ(gpt2.encode(text, true, true), c.gpt2_special);
        // With BOS: Llama 3's default adds it.
        std::vector<token_id> with_bos = {llama3->bos_id()};
        with_bos.insert(with_bos.end(), c.llama_bpe.begin(), c.llama_bpe.end());
        EXPECT_EQ(llama3->encode(text, true, false), with_bos);
        // The text again, less the reference's clean-up of spaces (and with
        // invalid bytes read as U+FFFD); smollm does not clean up.
        const std::string back = detokenized(tessera::test::k_bpe_cases_detokenized, size_t(n - 1), text);
        EXPECT_EQ(gpt2.detokenize(c.gpt2), back);
        EXPECT_EQ(absent->detokenize(c.default_pre), back);
        if (valid_utf8(text)) EXPECT_EQ(smollm->detokenize(c.smollm), text);
    }
    EXPECT_EQ(n, 41);
}

TEST(TokenizerReference, Gpt2PiecesAreTheReferencesBytes) {
    const tokenizer & tok = load("vocab/ggml-vocab-gpt-2.gguf");
    for (const bool special : {false, true}) {
        uint64_t h = 0xcbf29ce484222325ull; // FNV-1a 64
        for (token_id id = 0; id < tok.n_vocab(); ++id) {
            for (const unsigned char ch : tok.token_to_piece(id, special) + "\n") {
                h = (h ^ ch) * 0x100000001b3ull;
            }
        }
        EXPECT_EQ(h, special ? tessera::test::k_gpt2_pieces_special_fnv : tessera::test::k_gpt2_pieces_fnv) << special;
    }
    EXPECT_EQ(tok.token_to_piece(18435), " Hello");  // "ĠHello"
    EXPECT_EQ(tok.token_to_piece(198), "\n");        // "Ċ"
    EXPECT_EQ(tok.token_to_piece(50256), "");        // <|endoftext|>, control
    EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
}

// Llama 3 takes a word that is a token whole, even where no sequence of
// merges reaches it; GPT-2 merges: the GPT-2 vocabulary with a seventh of its
// merges removed, against the reference's ids.
TEST(TokenizerReference, Llama3TakesWholeWordsThatAreTokens) {
    for (const char * pre : {"gpt-2", "llama-bpe"}) {
        SCOPED_TRACE(pre);
        const auto dropped = gpt2_with_pre(pre, true);
        const tokenizer & tok = *dropped;
        const bool llama3 = std::string(pre) == "llama-bpe";
        EXPECT_EQ(tok.encode(tessera::test::k_common_words, false),
                  llama3 ? tessera::test::k_common_words_dropped_merges_llama_bpe
                         : tessera::test::k_common_words_dropped_merges_gpt2);
        EXPECT_EQ(tok.detokenize(tok.encode(tessera::test::k_common_words, false)), tessera::test::k_common_words);
        EXPECT_EQ(tok.detokenize(tok.encode("a , b ' c don 't I 'm", false)), "a, b'c don 't I'm"); // clean-up
    }
}

// The other pre-tokenizers of llama-architecture files, against the
// reference's ids: Mistral's Tekken (letter case, digits alone, '/' after
// punctuation; whole words; BOS by default; no clean-up of spaces), Smaug's
// (Llama 3's pattern, every word merged) and DeepSeek LLM's and Coder's
// (splits in turn; no clean-up of spaces).
TEST(TokenizerReference, TekkenSmaugAndDeepSeekMatchTheReference) {
    using tessera::llm::pre_tokenizer;
    const auto tekken = gpt2_with_pre("tekken");
    const auto smaug = gpt2_with_pre("smaug-bpe");
    const auto deepseek_llm = gpt2_with_pre("deepseek-llm");
    const auto deepseek_coder = gpt2_with_pre("deepseek-coder");
    const auto tekken_dropped = gpt2_with_pre("tekken", true);
    EXPECT_EQ(tekken->pre(), pre_tokenizer::tekken);
    EXPECT_EQ(smaug->pre(), pre_tokenizer::smaug);
    EXPECT_EQ(deepseek_llm->pre(), pre_tokenizer::deepseek_llm);
    EXPECT_EQ(deepseek_coder->pre(), pre_tokenizer::deepseek_coder);
    EXPECT_EQ(gpt2_with_pre("midm-2.0")->pre(), pre_tokenizer::llama3);
    EXPECT_TRUE(tekken->add_bos()); // the reference's defaults
    EXPECT_FALSE(smaug->add_bos());
    EXPECT_FALSE(deepseek_coder->add_bos());
    int n = 0, tekken_differs = 0, deepseek_differs = 0;
    for (const auto & c : tessera::test::k_bpe_pre_cases) {
        const std::string text(c.text, c.text_len);
        SCOPED_TRACE("case " + std::to_string(n++) + ": " + to_hex(text));
        EXPECT_EQ(tekken->encode(text, false, false), c.tekken);
        EXPECT_EQ(smaug->encode(text, false, false), c.smaug);
        EXPECT_EQ(tekken_dropped->encode(text, false, false), c.tekken_dropped_merges);
        EXPECT_EQ(deepseek_llm->encode(text, false, false), c.deepseek_llm);
        EXPECT_EQ(deepseek_coder->encode(text, false, false), c.deepseek_coder);
        std::vector<token_id> with_bos = {tekken->bos_id()};
        with_bos.insert(with_bos.end(), c.tekken.begin(), c.tekken.end());
        EXPECT_EQ(tekken->encode(text, true, false), with_bos);
        if (valid_utf8(text)) { // spaces kept as they are
            EXPECT_EQ(tekken->detokenize(c.tekken), text);
            EXPECT_EQ(deepseek_llm->detokenize(c.deepseek_llm), text);
        }
        tekken_differs += c.tekken != c.smaug ? 1 : 0;
        deepseek_differs += c.deepseek_llm != c.deepseek_coder ? 1 : 0;
    }
    EXPECT_EQ(n, 50);
    // The cases tell the patterns apart.
    EXPECT_EQ(tekken_differs, 5);
    EXPECT_EQ(deepseek_differs, 4);
    EXPECT_EQ(tekken->detokenize(tekken->encode("a , b ' c don 't I 'm", false)), "a , b ' c don 't I 'm");
}

// The byte-level BPE encoder pre-tokenizes and merges a long text in parts,
// cut only where every pre-tokenizer certainly ends a word and no special
// token's text is near (word_cut_at, tokenizer_encode.cpp). Cut at every such
// place, the reference's ids are unchanged for every pre-tokenizer, and so
// are those of all the cases in a row and of random texts, special-token text
// across the places included; the pre-tokenizers' words too.
namespace {

// The ids of `text` (no BOS) taken whole, in one part.
std::vector<token_id> encode_whole(const tokenizer & tok, const std::string & text, bool parse_special) {
    const size_t was = tessera::llm::bpe_part_bytes.exchange(std::numeric_limits<size_t>::max());
    std::vector<token_id> ids = tok.encode(text, false, parse_special);
    tessera::llm::bpe_part_bytes = was;
    return ids;
}

// pre_tokenize of the parts of `text` cut at every place word_cut_at finds.
std::vector<std::string> pre_tokenize_cut(tessera::llm::pre_tokenizer kind, std::string_view text) {
    std::vector<std::string> words;
    while (!text.empty()) {
        const size_t cut = tessera::llm::word_cut_at(text, 1);
        for (std::string & w : tessera::llm::pre_tokenize(kind, text.substr(0, cut))) words.push_back(std::move(w));
        text.remove_prefix(cut);
    }
    return words;
}

} // namespace

TEST(TokenizerReference, BpeTextCutWhereWordsCertainlyEndGivesTheSameIds) {
    using tessera::llm::pre_tokenizer;
    struct restore {
        size_t was = tessera::llm::bpe_part_bytes.exchange(1);
        ~restore() { tessera::llm::bpe_part_bytes = was; }
    } cut_everywhere;
    check_vocab_file("ggml-vocab-gpt-2.gguf", tessera::test::k_gpt2_inp_detokenized);

    const tokenizer & gpt2 = load("vocab/ggml-vocab-gpt-2.gguf");
    const auto llama3 = gpt2_with_pre("llama-bpe"), smollm = gpt2_with_pre("smollm"), absent = gpt2_with_pre(nullptr);
    const auto tekken = gpt2_with_pre("tekken"), smaug = gpt2_with_pre("smaug-bpe");
    const auto deepseek_llm = gpt2_with_pre("deepseek-llm"), deepseek_coder = gpt2_with_pre("deepseek-coder");
    const auto tekken_dropped = gpt2_with_pre("tekken", true);
    std::string all;
    int n = 0;
    for (const auto & c : tessera::test::k_bpe_cases) {
        const std::string text(c.text, c.text_len);
        SCOPED_TRACE("bpe case " + std::to_string(n++) + ": " + to_hex(text));
        EXPECT_EQ(gpt2.encode(text, false, false), c.gpt2);
        EXPECT_EQ(gpt2.encode(text, true, true), c.gpt2_special);
        EXPECT_EQ(llama3->encode(text, false, false), c.llama_bpe);
        EXPECT_EQ(smollm->encode(text, false, false), c.smollm);
        EXPECT_EQ(absent->encode(text, false, false), c.default_pre);
        all += text + "\n";
    }
    n = 0;
    for (const auto & c : tessera::test::k_bpe_pre_cases) {
        const std::string text(c.text, c.text_len);
        SCOPED_TRACE("pre case " + std::to_string(n++) + ": " + to_hex(text));
        EXPECT_EQ(tekken->encode(text, false, false), c.tekken);
        EXPECT_EQ(smaug->encode(text, false, false), c.smaug);
        EXPECT_EQ(tekken_dropped->encode(text, false, false), c.tekken_dropped_merges);
        EXPECT_EQ(deepseek_llm->encode(text, false, false), c.deepseek_llm);
        EXPECT_EQ(deepseek_coder->encode(text, false, false), c.deepseek_coder);
        all += text + " ";
    }
    EXPECT_EQ(gpt2_with_pre("gpt-2", true)->encode(tessera::test::k_common_words, false),
              tessera::test::k_common_words_dropped_merges_gpt2);
    EXPECT_EQ(gpt2_with_pre("llama-bpe", true)->encode(tessera::test::k_common_words, false),
              tessera::test::k_common_words_dropped_merges_llama_bpe);
    all += tessera::test::k_common_words;
    for (const std::string & t : read_inp(k_shared + "/vocab/ggml-vocab-gpt-2.gguf.inp")) all += t + "\n";

    // Every case in a row: cut at some hundreds of places, the same ids as
    // the text taken whole, and the same words.
    size_t places = 0;
    for (size_t p = tessera::llm::word_cut_at(all, 1); p < all.size(); p = tessera::llm::word_cut_at(all, p + 1)) {
        ++places;
    }
    EXPECT_GT(places, 200u);
    const tokenizer * kinds[] = {&gpt2, llama3.get(), smollm.get(), absent.get(), tekken.get(), smaug.get(),
                                 deepseek_llm.get(), deepseek_coder.get()};
    for (const tokenizer * tok : kinds) {
        SCOPED_TRACE("pre-tokenizer " + std::to_string(static_cast<int>(tok->pre())));
        EXPECT_EQ(pre_tokenize_cut(tok->pre(), all), tessera::llm::pre_tokenize(tok->pre(), all));
        for (const bool parse_special : {false, true}) {
            EXPECT_EQ(tok->encode(all, false, parse_special), encode_whole(*tok, all, parse_special));
        }
    }

    // Special-token text over a place is never cut: "o w" spans the place
    // at the ' ' of "hello world", "d\nW" the one after its '\n'.
    const auto o_w = gpt2_with_pre("gpt-2", false, "o w"), d_nl_w = gpt2_with_pre("llama-bpe", false, "d\nW");
    ASSERT_EQ(o_w->get_token_type(50256), tessera::llm::token_type::control);
    ASSERT_EQ(tessera::llm::word_cut_at("hello world", 1), 5u);
    ASSERT_EQ(tessera::llm::word_cut_at("old\nWorld", 1), 4u);
    const std::vector<token_id> hello = o_w->encode("hello world", false, true);
    EXPECT_EQ(std::count(hello.begin(), hello.end(), 50256), 1);
    EXPECT_EQ(hello, encode_whole(*o_w, "hello world", true));
    const std::vector<token_id> old = d_nl_w->encode("old\nWorld", false, true);
    EXPECT_EQ(std::count(old.begin(), old.end(), 50256), 1);
    EXPECT_EQ(old, encode_whole(*d_nl_w, "old\nWorld", true));

    // Random texts of pieces that sit around the places: spaces of every
    // kind, newlines, apostrophes, digits, letters of both cases, CJK,
    // invalid and cut-short UTF-8, and the special texts.
    const std::vector<std::string> bits = {
        "a", "Z", "o", "w", "d", "W", "s", "re", " ", "  ", "\n", "\r", "\r\n", "\t", "\v", "'", "'s", "'LL", "1",
        "123", "4567", ",", ".", "/", "!?", "$", "\xC2\xA0", "\xC2\x85", "\xE3\x80\x80", "\xE2\x80\x83",
        "\xE6\x97\xA5", "\xEF\xBC\x8C", "\xC3\xA9", "\xC3\x89", "\xF0\x9F\x98\x8A", "\xE2\x85\xA0", "\xFF", "\x80",
        "\xE6\x97", "\xF0\x9F\x98", "<|endoftext|>", "o w", "d\nW"};
    std::mt19937 gen(2026);
    for (int i = 0; i < 300; ++i) {
        std::string text;
        for (size_t k = gen() % 40; k > 0; --k) text += bits[gen() % bits.size()];
        SCOPED_TRACE("random text " + std::to_string(i) + ": " + to_hex(text));
        for (const tokenizer * tok : kinds) {
            EXPECT_EQ(pre_tokenize_cut(tok->pre(), text), tessera::llm::pre_tokenize(tok->pre(), text))
                << "pre-tokenizer " << static_cast<int>(tok->pre());
            EXPECT_EQ(tok->encode(text, false, true), encode_whole(*tok, text, true));
        }
        for (const tokenizer * tok : {o_w.get(), d_nl_w.get()}) {
            for (const bool parse_special : {false, true}) {
                EXPECT_EQ(tok->encode(text, false, parse_special), encode_whole(*tok, text, parse_special));
            }
        }
    }
}
