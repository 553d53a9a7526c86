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

} // namespace tessera::llm
