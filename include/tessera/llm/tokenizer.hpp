// tessera/llm/tokenizer.hpp — the tokenizers of GGUF models: SentencePiece-
// style ("SPM", `tokenizer.ggml.model` = "llama") and byte-level BPE ("gpt2":
// GPT-2, Llama 3, SmolLM and others).
//
// SPM algorithm (SentencePiece BPE mode, Kudo & Richardson 2018, "SentencePiece:
// A simple and language independent subword tokenizer", and the
// sentencepiece repository's bpe_model.cc): the text is split into one symbol
// per UTF-8 character; the adjacent pair whose concatenation is a vocabulary
// piece with the highest score is merged, repeatedly (leftmost pair on a tie),
// until no pair is in the vocabulary. A final symbol that is not a piece is
// emitted as byte-fallback tokens `<0xXX>`, one per UTF-8 byte.
//
// Observable behaviour (leading space, runs of spaces, newlines, special-token
// text, whole-sequence detokenizing) follows the reference implementation as
// described in shared/reference/tokenizer-notes.md.
//
// Byte-level BPE (Radford et al. 2019, GPT-2, and its encoder.py; Sennrich et
// al. 2016 for BPE): the text is split into words by the pre-tokenizer the
// vocabulary names (`tokenizer.ggml.pre`, see pre_tokenizer); each word's
// UTF-8 bytes are mapped one to one onto printable characters (encoder.py's
// bytes_to_unicode: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for
// themselves, the other 68 bytes for U+0100.. in byte order, so ' ' is 'Ġ');
// then the adjacent pair with the lowest rank in `tokenizer.ggml.merges`
// (rank = index; leftmost on a tie) is merged until no pair has a rank.
// A final symbol that is not a token becomes the tokens of its single bytes,
// where they exist. Decoding maps the characters back to bytes.
//
// Thread-safety: a tokenizer is immutable after construction; all const
// members may be called from several threads at once. A stream_decoder is
// single-threaded state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::gguf {
class reader;
}

namespace tessera::llm {

using token_id = int32_t;

// GGUF `tokenizer.ggml.token_type` values (the SentencePiece piece types).
enum class token_type : int32_t {
    normal = 1,       // ordinary piece, produced by merging
    unknown = 2,      // <unk>; never produced from text
    control = 3,      // <s>, </s>, ...: only from add_special or special-token text
    user_defined = 4, // always matched as a whole in the text, never split
    unused = 5,       // never produced, renders as nothing
    byte = 6,         // <0xXX> byte-fallback token
};

enum class vocab_kind {
    spm, // SentencePiece-style: `tokenizer.ggml.model` = "llama"
    bpe, // byte-level BPE: `tokenizer.ggml.model` = "gpt2"
};

// How a byte-level BPE vocabulary splits text into words before merging
// (`tokenizer.ggml.pre`); the patterns are listed in src/llm/pretokenizer.hpp.
enum class pre_tokenizer {
    gpt2,     // "gpt-2", "mellum": GPT-2's pattern
    llama3,   // "llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "midm-2.0":
              // Llama 3's pattern (numbers in groups of up to 3); a word that
              // is a token is not merged
    smaug,    // "smaug-bpe": Llama 3's pattern, every word merged
    tekken,   // "tekken" (Mistral Nemo): case-aware words, digits alone; a
              // word that is a token is not merged
    deepseek_llm,   // "deepseek-llm": newlines, cased-letter runs, symbol runs,
                    // trailing spaces, CJK runs, number runs, split in turn
    deepseek_coder, // "deepseek-coder": newlines, letter runs, punctuation runs,
                    // CJK runs, digits alone, split in turn
    smollm,   // "smollm": every digit alone, then GPT-2's pattern
    default_, // "default" or no key: punctuation runs, GPT-2's pattern, number
              // runs, ASCII digits in groups of 3
};

// A vocabulary as plain vectors (what GGUF stores). tokens/scores/types have
// one entry per token id. Special ids < 0 mean "absent".
struct vocab_data {
    vocab_kind kind = vocab_kind::spm;
    std::vector<std::string> tokens; // spm: U+2581 stands for a space; bpe: bytes_to_unicode text
    std::vector<float> scores;       // spm: merge priority, higher first; bpe: unused
    std::vector<token_type> types;
    std::vector<std::string> merges; // bpe: "left right" (split at the first space after the
                                     // first character), rank = index; the first of repeats counts
    pre_tokenizer pre = pre_tokenizer::default_; // bpe only
    token_id bos_id = 1;
    token_id eos_id = 2;
    token_id unk_id = 0;
    token_id eot_id = -1;          // end of turn: also ends generation
    token_id eom_id = -1;          // end of message: also ends generation
    token_id fim_pad_id = -1;      // fill-in-the-middle pad, repository and file
    token_id fim_rep_id = -1;      // separator tokens: also end generation (found
    token_id fim_sep_id = -1;      // by text when absent)
    bool add_bos = true;           // put BOS in front when add_special
    bool add_eos = false;          // put EOS at the end when add_special
    bool add_space_prefix = true;  // spm: prepend one space before each text run
};

// The tokenizer: vocabulary, piece -> id hash map, encode and decode.
class tokenizer {
public:
    // Validates and indexes `v`. Throws tessera::error when the three vectors
    // differ in length or are empty, a type is out of 1..6, a normal or
    // user-defined token's score is NaN, a byte token's text is not
    // "<0xXX>", or a present special id is outside [0, n_vocab).
    explicit tokenizer(vocab_data v);

    // Reads the GGUF tokenizer metadata:
    //   tokenizer.ggml.model (STRING, "llama" or "gpt2"), tokenizer.ggml.tokens
    //   (ARRAY of STRING) — required;
    //   llama: tokenizer.ggml.scores (ARRAY of FLOAT32) and
    //   tokenizer.ggml.token_type (ARRAY of INT32) required;
    //   tokenizer.ggml.{bos,eos,unknown}_token_id (UINT32, defaults 1/2/0,
    //   0xFFFFFFFF = absent), tokenizer.ggml.add_bos_token (BOOL, default true),
    //   tokenizer.ggml.add_eos_token (BOOL, default false),
    //   tokenizer.ggml.add_space_prefix (BOOL, default true) — optional.
    //   gpt2: tokenizer.ggml.merges (ARRAY of STRING) required;
    //   tokenizer.ggml.pre (STRING, see pre_tokenizer; absent = "default"),
    //   token_type (default all normal), scores (ignored) optional; BOS/EOS
    //   default to id 11 and no unknown token, add_bos defaults to true for
    //   the Llama 3 and Tekken pre-tokenizers only, add_space_prefix to false (the
    //   reference implementation's defaults).
    //   Both: tokenizer.ggml.eot_token_id, eom_token_id (UINT32) optional.
    // Throws tessera::error naming the key for a missing or mistyped key, and
    // naming the model or pre-tokenizer when it is not one of these.
    static tokenizer from_gguf(const gguf::reader & r);

    // --- encoding ----------------------------------------------------------
    // Text (UTF-8 bytes; not validated, see below) -> token ids.
    //   add_special: put BOS in front (add_bos) and EOS at the end (add_eos).
    //   parse_special: text equal to a control or unknown token's text (e.g.
    //     "<s>") becomes that token. User-defined tokens are always matched.
    //     The text after such a token gets the leading space again (spm).
    // The empty text gives [] (or [BOS] with add_special). spm: bytes are
    // grouped into characters by their lead byte alone (like the reference);
    // invalid UTF-8 ends up as byte tokens. Throws tessera::error only when
    // byte fallback is needed for a byte the vocabulary cannot express (no
    // <0xXX> token, no one-byte piece and no unknown token). bpe: invalid
    // UTF-8 is read as U+FFFD, one per byte that starts no valid sequence (as
    // the reference reads it); never throws for text.
    std::vector<token_id> encode(std::string_view text, bool add_special = true,
                                 bool parse_special = false) const;

    // --- decoding ----------------------------------------------------------
    // The text of one token as generated output: a normal token's text with
    // U+2581 turned into spaces (spm) or mapped back to bytes (bpe; a
    // character outside bytes_to_unicode's 256 is kept as UTF-8); a byte
    // token's single raw byte (spm; "" in bpe); a user-defined token's text as
    // is; control and unknown tokens give "" unless render_special (then their
    // text); unused tokens give "".
    // Throws tessera::error for an id outside [0, n_vocab).
    std::string token_to_piece(token_id id, bool render_special = false) const;

    // Whole-sequence detokenize: the pieces joined, except that the first
    // token loses one leading space (the one encode added, when
    // add_space_prefix) — unless the sequence starts with BOS, which then keeps
    // the space after it. bpe (except the smollm pre-tokenizer), as the
    // reference's llama_detokenize: a space goes before '?', '!', '.', ',',
    // around a lone "'", and before 's, 'm, 're and 've (so the text is not
    // always the one encoded: "a , b" comes back as "a, b").
    //   remove_special: drop a leading BOS (when add_bos) and a trailing EOS
    //     (when add_eos) before joining.
    // So detokenize(encode(t, false)) == t and detokenize(encode(t, true)) ==
    // " " + t for non-empty t. Throws tessera::error for an out-of-range id.
    std::string detokenize(std::span<const token_id> ids, bool remove_special = false,
                           bool render_special = false) const;

    // --- vocabulary ----------------------------------------------------------
    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    vocab_kind kind() const { return kind_; }
    pre_tokenizer pre() const { return pre_; } // bpe only
    token_id bos_id() const { return bos_id_; } // -1 when absent
    token_id eos_id() const { return eos_id_; } // -1 when absent
    token_id unk_id() const { return unk_id_; } // -1 when absent
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    token_id eot_id() const { return eot_id_; } // -1 when absent
    token_id eom_id() const { return eom_id_; } // -1 when absent
    // True for the tokens that end generation, as the reference picks them:
    // EOS, EOT and EOM, the fill-in-the-middle pad, repository and file
    // separator tokens, and any token whose text is one of <|endoftext|>,
    // <|end_of_text|>, </s>, <eos>, [EOS], <|eot_id|>, <|eom_id|>, <|im_end|>,
    // <|end|>, <end_of_turn>, <turn|>, <end_of_utterance>, <EOT>, _<EOT>,
    // [EOT], <|return|>, <|call|>, <|calls|>, <|flush|>, <|tool_response>,
    // [e~[ or DeepSeek's end of sentence (made a control token if it is not
    // one) — except <|end|> beside <|return|> or <|flush|> and <|call|> or
    // <|calls|> (gpt-oss, solar-open: it becomes user-defined) and </s> beside
    // <|tool_response> (it becomes normal). src/llm/special_tokens.hpp has
    // the rules.
    bool is_eog(token_id id) const { return id >= 0 && id < n_vocab() && eog_[static_cast<size_t>(id)] != 0; }
    // Raw vocabulary entries; throw tessera::error for an out-of-range id.
    const std::string & token_text(token_id id) const;
    float token_score(token_id id) const;
    token_type get_token_type(token_id id) const;
    // Id of a piece with exactly this text, or -1.
    token_id find_piece(std::string_view text) const;
    // Token emitted for raw byte b by byte fallback.
    token_id byte_token(uint8_t b) const { return byte_to_token_[b]; }

private:
    struct string_hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    void check_id(token_id id) const;
    void encode_spm(std::string_view text, bool space_prefix, std::vector<token_id> & out) const;
    void encode_spm_run(std::string_view escaped, std::vector<token_id> & out) const;
    void index_spm_joins();
    bool spm_joins(uint64_t pair) const;
    void encode_bpe(std::string_view text, std::vector<token_id> & out) const;
    // encode() less BOS/EOS: special-token text cut out, then each text run
    // encoded (a part of the text, for bpe).
    void encode_part(std::string_view text, bool parse_special, std::vector<token_id> & out) const;
    // bpe: whether the text of a special token encode() looks for (control
    // and unknown ones only with parse_special) occurs in `text` overlapping
    // the bytes [lo, hi).
    bool special_text_near(std::string_view text, size_t lo, size_t hi, bool parse_special) const;
    void index_merges(const std::vector<std::string> & merges);
    int32_t merge_rank(std::string_view left, std::string_view right) const;
    void append_piece(token_id id, bool render_special, int lstrip, std::string & out) const;

    std::vector<std::string> tokens_;
    std::vector<float> scores_;
    std::vector<token_type> types_;
    std::vector<int16_t> byte_value_; // byte tokens: 0..255; others: -1
    std::unordered_map<std::string, token_id, string_hash, std::equal_to<>> piece_to_id_;
    std::array<token_id, 256> byte_to_token_{};
    std::vector<token_id> special_by_length_; // control/unknown/user-defined, longest text first
    vocab_kind kind_ = vocab_kind::spm;
    pre_tokenizer pre_ = pre_tokenizer::default_;
    // spm: every pair of adjacent characters inside a piece merging may make
    // (normal and user-defined tokens), each character's bytes packed into 32
    // bits, the left one low; sorted. Text is cut between two characters that
    // form no such pair (no merge can cross there), so that long texts are
    // merged in bounded runs (tokenizer_encode.cpp).
    std::vector<uint64_t> spm_joins_;
    // bpe: merge rank by key (4-byte length of left, left, right).
    std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> merge_rank_;
    token_id bos_id_ = -1, eos_id_ = -1, unk_id_ = -1, eot_id_ = -1, eom_id_ = -1;
    std::vector<uint8_t> eog_; // per id: 1 when is_eog
    bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = true;
};

// Streaming detokenizer for generated tokens: each piece keeps its own
// leading space, and text is released only in whole UTF-8 characters. Bytes
// of an incomplete character are held until it completes; a byte that cannot
// start or continue a valid character is released as is (no replacement);
// finish() releases whatever is still held.
class stream_decoder {
public:
    // `tok` must outlive the decoder.
    explicit stream_decoder(const tokenizer & tok, bool render_special = false)
        : tok_(&tok), render_special_(render_special) {}

    // Appends token `id`'s piece; returns the text that is now complete (may
    // be empty). Throws tessera::error for an out-of-range id (state unchanged).
    std::string push(token_id id);
    // Returns the bytes still held (an incomplete or invalid tail) and resets.
    std::string finish();
    // Number of bytes currently held back.
    size_t pending() const { return held_.size(); }

private:
    const tokenizer * tok_;
    bool render_special_;
    std::string held_;
};

// Length in bytes of the longest prefix of `s` that ends on a character
// boundary and whose last character is not an incomplete (truncated) UTF-8
// sequence. Invalid bytes count as complete one-byte units. Used by
// stream_decoder; exposed for tests.
size_t utf8_complete_prefix(std::string_view s);

} // namespace tessera::llm
