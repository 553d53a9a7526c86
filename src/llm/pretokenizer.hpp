// pretokenizer.hpp — the regex splits byte-level BPE vocabularies apply to a
// text before merging (GGUF `tokenizer.ggml.pre`), internal to the llm layer.
//
// Each kind is a sequence of patterns; every pattern splits each piece left
// by the one before into its matches and the text between them, and a piece's
// end counts as the end of the text for the lookahead (?!\S). Patterns, from
// the tokenizers the vocabularies come from (OpenAI GPT-2's encoder.py and
// Meta Llama 3's tokenizer.py; the sequences per name follow the reference
// implementation):
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   smaug:  llama3's pattern
//   tekken: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
//           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|
//           \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (Mistral's tokenizer.json), with the letter classes as the
//           reference approximates them (see match_tekken)
//   deepseek-llm: [\r\n], then \s?[cased letters]+ (an explicit list of
//           ranges), then \s?[!-/:-~！-／：-～‘-‟　-。]+, then \s+$, then
//           [一-龥ࠀ-一가-퟿]+, then \p{N}+ (DeepSeek LLM's tokenizer.json)
//   deepseek-coder: [\r\n], then \s?\p{L}+, then \s?\p{P}+, then
//           [一-龥ࠀ-一가-퟿]+, then \p{N} (DeepSeek Coder's tokenizer.json)
//   smollm: \p{N} (each digit alone), then gpt2
//   default (no `tokenizer.ggml.pre`): [\p{P}\$\+<=>\^~\|]+, then gpt2, then
//           \p{N}+, then [0-9][0-9][0-9]
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

// The kind named by a `tokenizer.ggml.pre` value: "gpt-2", "mellum";
// "llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "midm-2.0";
// "smaug-bpe"; "tekken"; "deepseek-llm"; "deepseek-coder"; "smollm";
// "default" (also for an absent key).
// nullopt for any other name.
std::optional<pre_tokenizer> pre_tokenizer_from_name(std::string_view name);

// Names accepted by pre_tokenizer_from_name, for error messages.
const char * pre_tokenizer_names();

// What else the reference ties to the kind: a word that is itself a token
// is taken whole, without merging (its ignore_merges; llama3, tekken); BOS is
// added when the file does not say (llama3, tekken); detokenizing removes
// spaces before punctuation (its clean_spaces; not smollm, tekken and the
// DeepSeek ones).
bool takes_whole_words(pre_tokenizer kind);
bool adds_bos_by_default(pre_tokenizer kind);
bool cleans_spaces(pre_tokenizer kind);

// Splits `text` (UTF-8; invalid bytes read as U+FFFD, see unicode_text.hpp)
// into words, each re-encoded as UTF-8, in order; their concatenation is the
// text with invalid bytes replaced.
std::vector<std::string> pre_tokenize(pre_tokenizer kind, std::string_view text);

// Bytes of text after which the byte-level BPE encoder cuts a long text at
// the next place word_cut_at accepts (tokenizer_encode.cpp): 64 KiB. Tests
// set it to 1 to cut at every such place (the ids must not change).
inline std::atomic<size_t> bpe_part_bytes{size_t(64) << 10};

// How far word_cut_at's rules read around a cut p: the bytes [p -
// k_word_cut_before, p + k_word_cut_after) (a character of up to 4 bytes
// before '\n' and one after it).
inline constexpr size_t k_word_cut_before = 5;
inline constexpr size_t k_word_cut_after = 4;

// The first byte offset p in [max(from, 1), text.size()) where every
// pre-tokenizer kind ends a word whatever the rest of the text holds, or
// text.size() when there is none: pre_tokenize(k, t) is pre_tokenize(k, t
// up to p) followed by pre_tokenize(k, t from p), for `text` and for any
// stretch t of it that holds the bytes [p - k_word_cut_before, p +
// k_word_cut_after) (from text's start where p is nearer; t itself starts at
// a character). The two places (characters as decode_utf8 reads them;
// "space": White_Space):
//   1. x ' ' A: p at the ' ', x any character but a space, A an ASCII letter;
//   2. x '\n' B: p at B, x any character but a space, B any character but
//      a space or '/'.
// pretokenizer.cpp argues, pattern by pattern, that no word spans p there
// and that no match before p depends on what follows p.
size_t word_cut_at(std::string_view text, size_t from);

} // namespace tessera::llm
