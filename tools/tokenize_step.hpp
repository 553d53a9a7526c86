// tools/tokenize_step.hpp — the tokenize step of run, tokenize and
// perplexity: a text the machine cannot tokenize ends in an error that names
// the step and the input, not in a bare std::bad_alloc.
#pragma once

#include <cstdint>
#include <new>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace tessera::tools {

// Bytes of memory tokenizing takes per byte of ordinary text, about, as
// measured (text included; 50 MB of text): SPM 4 (the ids, 4 bytes a token,
// and the merge state of one bounded part, src/llm/tokenizer_encode.cpp; a
// long stretch it cannot cut, where every two adjacent characters occur in
// some piece, takes about 30 bytes a byte of that stretch), byte-level BPE
// 2.5 to 3.3 (the text, and the ids at 0.35 to 0.6 tokens a byte; the
// pre-tokenizer and the merges work on one bounded part at a time,
// src/llm/tokenizer_encode.cpp; a text of one token a byte, e.g. digits
// with Tekken's pre-tokenizer, takes about 5, and a long stretch without a
// certain word boundary, llm::word_cut_at, about 20 bytes a byte of that
// stretch).
inline uint64_t tokenize_bytes_per_byte(llm::vocab_kind kind) { return kind == llm::vocab_kind::bpe ? 4 : 5; }

// Runs `encode()` (returning the token ids of `text`) for the input named
// `input` (e.g. "-f 'book.txt'" or "-p"). Throws tessera::error, before
// encoding, when text.size() x bytes_per_byte exceeds `memory`
// (the machine's physical memory; 0 = no check), and when encode() runs out
// of memory (std::bad_alloc): "out of memory tokenizing -f 'book.txt'
// (200000000 bytes)". Other exceptions pass through.
template <class Encode>
std::vector<llm::token_id> tokenize_step(std::string_view input, std::string_view text, uint64_t bytes_per_byte,
                                         uint64_t memory, Encode && encode) {
    const uint64_t need = uint64_t(text.size()) * bytes_per_byte;
    if (memory != 0 && need > memory) {
        throw error(fmt::format("tokenizing {} ({} bytes) needs about {} MiB ({} bytes a byte of text), more than the "
                                "machine's physical memory ({} MiB); use a shorter text",
                                input, text.size(), need >> 20, bytes_per_byte, memory >> 20));
    }
    try {
        return encode();
    } catch (const std::bad_alloc &) {
        throw error(fmt::format("out of memory tokenizing {} ({} bytes; ordinary text takes about {} bytes of memory a "
                                "byte); use a shorter text",
                                input, text.size(), bytes_per_byte));
    }
}

} // namespace tessera::tools
