// pretokenizer.cpp — the patterns of pretokenizer.hpp as hand-written
// matchers over code points. Each matcher returns the length of the match at
// `pos` (the alternatives tried left to right, each greedy, as a backtracking
// regex engine picks them); `end` is the end of the piece being split.
#include "pretokenizer.hpp"

#include <cstdint>
#include <iterator>

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

// The position after a pattern's optional first character ("x?"), when
// `pred` accepts c[pos] and another character follows it in the piece.
template <class Pred> size_t skip_optional(const cps_t & c, size_t pos, size_t end, Pred pred) {
    return pred(c[pos]) && pos + 1 < end ? pos + 1 : pos;
}

bool is_space_char(uint32_t cp) { return cp == ' '; }
bool is_word_lead(uint32_t cp) { return !is_newline(cp) && !is_letter(cp) && !is_number(cp); } // [^\r\n\p{L}\p{N}]

// ' ?[^\s\p{L}\p{N}]+T*' for a trailing class T; 0 when no such run starts at pos.
template <class Tail> size_t match_other_run(const cps_t & c, size_t pos, size_t end, Tail tail) {
    const size_t q = skip_optional(c, pos, end, is_space_char);
    return is_other(c[q]) ? run_end(c, run_end(c, q, end, is_other), end, tail) - pos : 0;
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
    const size_t q = skip_optional(c, pos, end, is_space_char);
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
    const size_t ql = skip_optional(c, pos, end, is_word_lead);
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
    if (const size_t n = match_other_run(c, pos, end, is_newline)) {
        return n;
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
    const size_t q = skip_optional(c, pos, end, is_word_lead);
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
    if (const size_t n = match_other_run(c, pos, end, is_newline_or_slash)) {
        return n;
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

// --- DeepSeek LLM and DeepSeek Coder (their tokenizer.json Split patterns,
// each run over the pieces the one before left) ---

// [\r\n]
size_t match_newline(const cps_t & c, size_t pos, size_t) { return is_newline(c[pos]) ? 1 : 0; }

// \s?X+ for a class X.
template <class Pred> size_t match_space_then_run(const cps_t & c, size_t pos, size_t end, Pred in_class) {
    const size_t q = skip_optional(c, pos, end, is_whitespace);
    return in_class(c[q]) ? run_end(c, q, end, in_class) - pos : 0;
}

size_t match_space_letters(const cps_t & c, size_t pos, size_t end) { return match_space_then_run(c, pos, end, is_letter); }

size_t match_space_punctuation(const cps_t & c, size_t pos, size_t end) {
    return match_space_then_run(c, pos, end, unicode::is_punctuation);
}

// [一-龥ࠀ-一가-퟿]+ : U+0800..U+9FA5 and U+AC00..U+D7FF. The reference reads
// whitespace beyond ASCII (U+3000, U+2000..) as \v before matching, so it is
// not in the class.
bool is_cjk_block(uint32_t cp) {
    return ((cp >= 0x0800 && cp <= 0x9FA5) || (cp >= 0xAC00 && cp <= 0xD7FF)) && !is_whitespace(cp);
}

size_t match_cjk_run(const cps_t & c, size_t pos, size_t end) { return run_end(c, pos, end, is_cjk_block) - pos; }

// DeepSeek LLM's letter class (its pattern's explicit ranges: the cased
// letters, Latin to Adlam), inclusive and sorted.
struct cp_range {
    uint32_t lo, hi;
};
constexpr cp_range k_deepseek_letters[] = {
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6}, {0x00F8, 0x01BA},
    {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373}, {0x0376, 0x0376}, {0x0377, 0x0377},
    {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C}, {0x038E, 0x03A1},
    {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F}, {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5},
    {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139},
    {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2183}, {0x2184, 0x2184}, {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF2}, {0x2CF3, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B},
    {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},};

bool is_deepseek_letter(uint32_t cp) {
    size_t lo = 0, hi = std::size(k_deepseek_letters);
    while (lo < hi) { // the first range whose end is >= cp
        const size_t mid = (lo + hi) / 2;
        if (k_deepseek_letters[mid].hi < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < std::size(k_deepseek_letters) && k_deepseek_letters[lo].lo <= cp && !is_whitespace(cp);
}

// [!-/:-~！-／：-～‘-‟　-。] (U+3000 is whitespace, read as \v: not in it).
bool is_deepseek_symbol(uint32_t cp) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
           (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3001 && cp <= 0x3002);
}

size_t match_deepseek_letters(const cps_t & c, size_t pos, size_t end) {
    return match_space_then_run(c, pos, end, is_deepseek_letter);
}

size_t match_deepseek_symbols(const cps_t & c, size_t pos, size_t end) {
    return match_space_then_run(c, pos, end, is_deepseek_symbol);
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

// \s+$ : splits each piece's trailing whitespace off (the one match a
// piece can have: the leftmost position from which whitespace runs to the
// piece's end). Linear, where trying every position would not be.
std::vector<size_t> split_trailing_spaces(const cps_t & c, const std::vector<size_t> & pieces) {
    std::vector<size_t> out;
    out.reserve(pieces.size() + pieces.size() / 2);
    size_t begin = 0;
    for (const size_t len : pieces) {
        const size_t end = begin + len;
        size_t ws = end;
        while (ws > begin && is_whitespace(c[ws - 1])) {
            --ws;
        }
        if (ws > begin) out.push_back(ws - begin);
        if (end > ws) out.push_back(end - ws);
        begin = end;
    }
    return out;
}

} // namespace

// --- Certain word boundaries (word_cut_at) ---
//
// Cutting a piece at p gives the same words as splitting it whole when
// (i) every kind's splits end a word at p, and (ii) every matcher called at a
// position before p returns the same whether the piece goes on after p or
// ends there (then the scan of the part before p is the whole scan's, and the
// whole scan restarts at p exactly as a scan of the part from p does: the
// matchers read only forward). At x ' ' A (cut at the ' ') and x '\n' B (cut
// at B), x not a space, A an ASCII letter, B neither a space nor '/':
//
// (i) ' ' sits inside a match only as its first character ( ?X+,
// [^\r\n\p{L}\p{N}]?\p{L}+, \s?X+) or inside a whitespace run, which x (not a
// space) cannot be part of: so a match starts at the ' '. '\n' sits inside a
// match only in a whitespace run (B is not a space), in the tails [\r\n]* and
// [\r\n/]* (B is none of them) or alone ([\r\n] of the DeepSeek kinds): so a
// match ends before B. That settles the kinds whose patterns match every
// character (gpt2, llama3, smaug, tekken). The others leave gaps: DeepSeek's
// first split isolates the '\n', and at the ' ' their \s?[letters]+ starts a
// match (A is a letter of both their classes); smollm's digits and default's
// punctuation runs (' ' and '\n' are neither) cut at p or leave p inside a
// gap piece, which GPT-2's pattern then cuts at p as above. Later splits only
// divide the pieces these leave, which already end at p.
//
// (ii) A run before p of letters, numbers, other, punctuation, CJK or a
// DeepSeek class stops at the ' ' or the '\n'; a whitespace run or a
// [\r\n]* / [\r\n/]* tail that takes the '\n' stops at B, at p, as at the
// piece's end. The remaining look-ahead: an optional first character ('x?', \s?) at p - 1 is
// taken only before a character of the class after it; ' ' (after x) is in
// none of those classes, '\n' is never such a character in the patterns
// that match everything (' ?' and [^\r\n...]? leave it out) and a piece of
// its own in the DeepSeek ones. The contractions' letters after the
// apostrophe: ' ' and '\n' are none of them.
// \s+(?!\S) on the run "\n" (x before it is not a space) gives one
// character either way; a longer run before B would not, which is why x
// must not be a space there. (Only ASCII letters after the ' ': DeepSeek
// LLM's letters leave out, e.g., CJK, whose runs would then keep the ' '.)

namespace {

bool is_ascii_letter(unsigned char b) { return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'); }

// Whether the character that ends at byte e (0 < e < text.size(), text[e]
// ASCII, so a character starts at e) is whitespace, as decode_utf8 reads
// the text from its start: a byte that is not 10xxxxxx always starts a
// character, so the character ending at e starts at the last such byte
// among the four before e when its sequence reaches exactly e; otherwise byte
// e - 1 is a stray continuation byte (U+FFFD).
bool space_ends_at(std::string_view text, size_t e) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    size_t j = e - 1;
    while (j > 0 && e - j < 4 && (byte(j) & 0xC0) == 0x80) {
        --j;
    }
    if ((byte(j) & 0xC0) == 0x80) {
        return false;
    }
    const unicode::decoded d = unicode::next_code_point(text, j);
    return j + d.length == e && is_whitespace(d.cp);
}

} // namespace

size_t word_cut_at(std::string_view text, size_t from) {
    const size_t n = text.size();
    for (size_t p = from > 0 ? from : 1; p < n; ++p) {
        const auto b = static_cast<unsigned char>(text[p]);
        if (b == ' ') {
            if (p + 1 < n && is_ascii_letter(static_cast<unsigned char>(text[p + 1])) && !space_ends_at(text, p)) {
                return p;
            }
        } else if (text[p - 1] == '\n' && p >= 2 && b != '/' && !space_ends_at(text, p - 1)) {
            const uint32_t a = unicode::next_code_point(text, p).cp; // a character starts after the '\n'
            if (!is_whitespace(a)) {
                return p;
            }
        }
    }
    return n;
}

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
    if (name == "deepseek-llm") {
        return pre_tokenizer::deepseek_llm;
    }
    if (name == "deepseek-coder") {
        return pre_tokenizer::deepseek_coder;
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
           "'tekken', 'deepseek-llm', 'deepseek-coder', 'smollm', 'default'";
}

bool takes_whole_words(pre_tokenizer kind) { return kind == pre_tokenizer::llama3 || kind == pre_tokenizer::tekken; }

bool adds_bos_by_default(pre_tokenizer kind) { return kind == pre_tokenizer::llama3 || kind == pre_tokenizer::tekken; }

bool cleans_spaces(pre_tokenizer kind) {
    return kind != pre_tokenizer::smollm && kind != pre_tokenizer::tekken && kind != pre_tokenizer::deepseek_llm &&
           kind != pre_tokenizer::deepseek_coder;
}

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
    case pre_tokenizer::deepseek_llm:
        pieces = split(c, pieces, match_newline);
        pieces = split(c, pieces, match_deepseek_letters);
        pieces = split(c, pieces, match_deepseek_symbols);
        pieces = split_trailing_spaces(c, pieces);
        pieces = split(c, pieces, match_cjk_run);
        pieces = split(c, pieces, match_number_run);
        break;
    case pre_tokenizer::deepseek_coder:
        pieces = split(c, pieces, match_newline);
        pieces = split(c, pieces, match_space_letters);
        pieces = split(c, pieces, match_space_punctuation);
        pieces = split(c, pieces, match_cjk_run);
        pieces = split(c, pieces, match_digit);
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
