// pretokenizer.cpp — the patterns of pretokenizer.hpp as hand-written
// matchers over code points. Each matcher returns the length of the match at
// `pos` (the alternatives tried left to right, each greedy, as a backtracking
// regex engine picks them); `end` is the end of the piece being split.
#include "pretokenizer.hpp"

#include <cstdint>

#include "unicode_text.hpp"

namespace tessera::llm {

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

using cps_t = std::vector<uint32_t>;

bool is_other(uint32_t cp) { return !is_whitespace(cp) && !is_letter(cp) && !is_number(cp); } // [^\s\p{L}\p{N}]
bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

template <class Pred> size_t run_end(const cps_t & c, size_t i, size_t end, Pred pred) {
    while (i < end && pred(c[i])) {
        ++i;
    }
    return i;
}

// 's|'t|'re|'ve|'m|'ll|'d, ASCII-case-insensitive when `fold`.
size_t match_contraction(const cps_t & c, size_t pos, size_t end, bool fold) {
    if (c[pos] != '\'' || pos + 1 >= end) {
        return 0;
    }
    const auto low = [&](size_t i) { return fold ? ascii_lower(c[i]) : c[i]; };
    const uint32_t a = low(pos + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        return 2;
    }
    if (pos + 2 < end) {
        const uint32_t b = low(pos + 2);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
            return 3;
        }
    }
    return 0;
}

// \s+(?!\S)|\s+ : a run of whitespace, less its last character when a
// non-space follows inside the piece and the run is longer than one.
size_t match_spaces(const cps_t & c, size_t pos, size_t end) {
    const size_t n = run_end(c, pos, end, is_whitespace) - pos;
    return n > 1 && pos + n < end ? n - 1 : n;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ : whitespace up to and including its last \r or
// \n, else match_spaces; 1 for anything else (every character matches some
// alternative of the patterns that end with these).
size_t match_newlines_or_spaces(const cps_t & c, size_t pos, size_t end) {
    const size_t ws_end = run_end(c, pos, end, is_whitespace);
    for (size_t i = ws_end; i > pos; --i) {
        if (is_newline(c[i - 1])) {
            return i - pos;
        }
    }
    const size_t n = match_spaces(c, pos, end);
    return n > 0 ? n : 1;
}

size_t match_gpt2(const cps_t & c, size_t pos, size_t end) {
    if (const size_t n = match_contraction(c, pos, end, false)) {
        return n;
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one leading ' ' joins the run.
    const size_t q = c[pos] == ' ' && pos + 1 < end ? pos + 1 : pos;
    if (is_letter(c[q])) {
        return run_end(c, q, end, is_letter) - pos;
    }
    if (is_number(c[q])) {
        return run_end(c, q, end, is_number) - pos;
    }
    if (is_other(c[q])) {
        return run_end(c, q, end, is_other) - pos;
    }
    const size_t n = match_spaces(c, pos, end);
    return n > 0 ? n : 1;
}

size_t match_llama3(const cps_t & c, size_t pos, size_t end) {
    if (const size_t n = match_contraction(c, pos, end, true)) {
        return n;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const bool lead = !is_newline(c[pos]) && !is_letter(c[pos]) && !is_number(c[pos]);
    const size_t ql = lead && pos + 1 < end ? pos + 1 : pos;
    if (is_letter(c[ql])) {
        return run_end(c, ql, end, is_letter) - pos;
    }
    // \p{N}{1,3}
    if (is_number(c[pos])) {
        size_t n = 1;
        while (n < 3 && pos + n < end && is_number(c[pos + n])) {
            ++n;
        }
        return n;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const size_t qo = c[pos] == ' ' && pos + 1 < end ? pos + 1 : pos;
    if (is_other(c[qo])) {
        return run_end(c, run_end(c, qo, end, is_other), end, is_newline) - pos;
    }
    return match_newlines_or_spaces(c, pos, end);
}

// Mistral's Tekken pattern as the reference runs it: its letter classes
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] become "a
// letter that is not a-z" and "a letter that is not A-Z" (its rewritten
// pattern ((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+, run by std::regex
// over one byte per code point, where every letter beyond ASCII is one
// stand-in byte: such a letter is in both classes, and marks are in neither).
bool is_upper_letter(uint32_t cp) { return is_letter(cp) && !(cp >= 'a' && cp <= 'z'); }
bool is_lower_letter(uint32_t cp) { return is_letter(cp) && !(cp >= 'A' && cp <= 'Z'); }
bool is_newline_or_slash(uint32_t cp) { return is_newline(cp) || cp == '/'; }

size_t match_tekken(const cps_t & c, size_t pos, size_t end) {
    // [^\r\n\p{L}\p{N}]?U*L+ | [^\r\n\p{L}\p{N}]?U+L* (U, L: the classes above)
    const bool lead = !is_newline(c[pos]) && !is_letter(c[pos]) && !is_number(c[pos]);
    const size_t q = lead && pos + 1 < end ? pos + 1 : pos;
    const size_t u_end = run_end(c, q, end, is_upper_letter);
    if (u_end < end && is_lower_letter(c[u_end])) {
        return run_end(c, u_end, end, is_lower_letter) - pos; // U* whole, then L+
    }
    // U* gives back letters until one that is also in L starts L+.
    for (size_t k = u_end; k > q; --k) {
        if (is_lower_letter(c[k - 1])) {
            return run_end(c, k - 1, end, is_lower_letter) - pos;
        }
    }
    if (u_end > q) {
        return u_end - pos; // U+ and an empty L*
    }
    // \p{N}
    if (is_number(c[pos])) {
        return 1;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    const size_t qo = c[pos] == ' ' && pos + 1 < end ? pos + 1 : pos;
    if (is_other(c[qo])) {
        return run_end(c, run_end(c, qo, end, is_other), end, is_newline_or_slash) - pos;
    }
    return match_newlines_or_spaces(c, pos, end);
}

// [\p{P}\$\+<=>\^~\|]+
size_t match_punctuation_run(const cps_t & c, size_t pos, size_t end) {
    const auto punct = [](uint32_t cp) {
        return unicode::is_punctuation(cp) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
               cp == '^' || cp == '~' || cp == '|';
    };
    return run_end(c, pos, end, punct) - pos;
}

size_t match_digit(const cps_t & c, size_t pos, size_t) { return is_number(c[pos]) ? 1 : 0; }

size_t match_number_run(const cps_t & c, size_t pos, size_t end) { return run_end(c, pos, end, is_number) - pos; }

// [0-9][0-9][0-9]
size_t match_ascii_triple(const cps_t & c, size_t pos, size_t end) {
    if (pos + 3 > end) {
        return 0;
    }
    for (size_t i = pos; i < pos + 3; ++i) {
        if (c[i] < '0' || c[i] > '9') {
            return 0;
        }
    }
    return 3;
}

using matcher = size_t (*)(const cps_t &, size_t, size_t);

// Splits every piece (given by its length) into the matches of `m` and the
// runs of text between them.
std::vector<size_t> split(const cps_t & c, const std::vector<size_t> & pieces, matcher m) {
    std::vector<size_t> out;
    out.reserve(pieces.size() * 2);
    size_t begin = 0;
    for (const size_t len : pieces) {
        const size_t end = begin + len;
        size_t gap = begin;
        for (size_t pos = begin; pos < end;) {
            const size_t n = m(c, pos, end);
            if (n == 0) {
                ++pos;
                continue;
            }
            if (pos > gap) {
                out.push_back(pos - gap);
            }
            out.push_back(n);
            pos += n;
            gap = pos;
        }
        if (end > gap) {
            out.push_back(end - gap);
        }
        begin = end;
    }
    return out;
}

} // namespace

std::optional<pre_tokenizer> pre_tokenizer_from_name(std::string_view name) {
    // Names of llama-architecture models the reference maps to the same
    // rules (checked against it on the GPT-2 vocabulary with each name).
    if (name == "gpt-2" || name == "mellum") {
        return pre_tokenizer::gpt2;
    }
    if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" || name == "pixtral" ||
        name == "midm-2.0") {
        return pre_tokenizer::llama3;
    }
    if (name == "smaug-bpe") {
        return pre_tokenizer::smaug;
    }
    if (name == "tekken") {
        return pre_tokenizer::tekken;
    }
    if (name == "smollm") {
        return pre_tokenizer::smollm;
    }
    if (name == "default") {
        return pre_tokenizer::default_;
    }
    return std::nullopt;
}

const char * pre_tokenizer_names() {
    return "'gpt-2' ('mellum'), 'llama-bpe' ('llama3', 'llama-v3', 'falcon3', 'pixtral', 'midm-2.0'), 'smaug-bpe', "
           "'tekken', 'smollm', 'default'";
}

bool takes_whole_words(pre_tokenizer kind) { return kind == pre_tokenizer::llama3 || kind == pre_tokenizer::tekken; }

bool adds_bos_by_default(pre_tokenizer kind) { return kind == pre_tokenizer::llama3 || kind == pre_tokenizer::tekken; }

bool cleans_spaces(pre_tokenizer kind) { return kind != pre_tokenizer::smollm && kind != pre_tokenizer::tekken; }

std::vector<std::string> pre_tokenize(pre_tokenizer kind, std::string_view text) {
    const cps_t c = unicode::decode_utf8(text);
    std::vector<size_t> pieces;
    if (!c.empty()) {
        pieces.push_back(c.size());
    }
    switch (kind) {
    case pre_tokenizer::gpt2:
        pieces = split(c, pieces, match_gpt2);
        break;
    case pre_tokenizer::llama3:
    case pre_tokenizer::smaug:
        pieces = split(c, pieces, match_llama3);
        break;
    case pre_tokenizer::tekken:
        pieces = split(c, pieces, match_tekken);
        break;
    case pre_tokenizer::smollm:
        pieces = split(c, split(c, pieces, match_digit), match_gpt2);
        break;
    case pre_tokenizer::default_:
        pieces = split(c, pieces, match_punctuation_run);
        pieces = split(c, pieces, match_gpt2);
        pieces = split(c, pieces, match_number_run);
        pieces = split(c, pieces, match_ascii_triple);
        break;
    }
    std::vector<std::string> words;
    words.reserve(pieces.size());
    size_t begin = 0;
    for (const size_t len : pieces) {
        std::string w;
        for (size_t i = begin; i < begin + len; ++i) {
            unicode::append_utf8(c[i], w);
        }
        words.push_back(std::move(w));
        begin += len;
    }
    return words;
}

} // namespace tessera::llm
