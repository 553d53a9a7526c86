// libFuzzer target for llm::tokenizer, two modes picked by the first byte:
//
// 'V' + a GGUF file: the vocabulary itself is fuzzed. tokenizer::from_gguf
//   must build a tokenizer or throw tessera::error (any other exception, a
//   crash, a sanitizer report, a hang or a huge allocation is a bug); a
//   tokenizer that builds encodes and decodes a fixed text and a text made
//   of its own pieces (ids in range, the same when cut everywhere, stream
//   decoding as below).
//
// anything else: text against the real vocabularies, loaded once: every
//   vocab-only GGUF of shared/vocab and every model of shared/models that
//   has a tokenizer tessera reads, plus the GPT-2 vocabulary once with each
//   other pre-tokenizer. byte 0 picks the vocabulary, byte 1 the options, the
//   rest is the text. Checked: every id is in [0, n_vocab); the ids are the
//   same when the text is encoded in the smallest parts the encoder may cut
//   it into (spm_part_bytes / bpe_part_bytes = 1), and with parse_special
//   flipped when the text holds no control or unknown token's text; decoding
//   never throws, for those ids and for the text's bytes read as ids; the
//   stream decoder's output joined is the pieces joined; utf8_complete_prefix
//   leaves at most an incomplete character; and, without special-token
//   parsing or rendering, valid UTF-8 comes back exactly (tokenizer.hpp: byte-level BPE
//   pieces are the text's bytes; SentencePiece detokenize gives the text,
//   with one leading space after a BOS) where the text holds no U+2581 and no
//   text of a token that is cut out of it whole.
//
// The shared data directory is $TESSERA_SHARED_DIR, else ../shared.
// TESSERA_FUZZ_MODE=text or vocab keeps a run to one mode: inputs of the
// other are skipped and kept out of the corpus (scripts/fuzz.sh runs each
// mode on its own corpus); unset, the first byte alone decides.
//
// With TESSERA_FUZZ_SEED_DIR set, the program writes seed inputs for both
// modes into that directory instead (the test texts of shared/vocab with
// several vocabulary/option bytes; small vocabularies cut from the real ones)
// and exits; scripts/fuzz.sh does this.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "llm/pair_merge.hpp"
#include "llm/pretokenizer.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/tokenizer.hpp"

namespace {

using namespace tessera;
using llm::token_id;
using llm::tokenizer;
namespace fs = std::filesystem;

constexpr uint8_t k_vocab_mode = 'V';

// The mode TESSERA_FUZZ_MODE keeps a run to: 't', 'v', or 0 for none.
char locked_mode() {
    static const char mode = [] {
        const char * env = std::getenv("TESSERA_FUZZ_MODE");
        const std::string m = env != nullptr ? env : "";
        if (m.empty()) return '\0';
        if (m == "text" || m == "vocab") return m[0];
        std::fprintf(stderr, "fuzz_tokenizer: TESSERA_FUZZ_MODE must be 'text' or 'vocab', not '%s'\n", m.c_str());
        std::exit(2);
    }();
    return mode;
}

[[noreturn]] void die(const char * what, const std::string & detail = "") {
    std::fprintf(stderr, "fuzz_tokenizer: invariant violated: %s%s%s\n", what, detail.empty() ? "" : ": ",
                 detail.c_str());
    std::abort();
}

std::string hex(std::string_view s) {
    std::string out;
    char buf[4];
    for (const unsigned char c : s.substr(0, 256)) {
        std::snprintf(buf, sizeof buf, "%02x", c);
        out += buf;
    }
    return out;
}

fs::path shared_dir() {
    const char * env = std::getenv("TESSERA_SHARED_DIR");
    return env != nullptr && *env != '\0' ? fs::path(env) : fs::path("../shared");
}

std::vector<fs::path> gguf_files(const fs::path & dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec)) {
        if (e.path().extension() == ".gguf") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n;
        uint32_t cp;
        if (c < 0x80) { ++i; continue; }
        if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
        else return false;
        if (i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n;
    }
    return true;
}

// A loaded vocabulary and the texts encode() cuts out of any text whole
// (user-defined tokens; control and unknown ones too with parse_special).
struct vocab {
    std::string name;
    std::unique_ptr<tokenizer> tok;
    std::vector<std::string> always_cut;
    std::vector<std::string> special_cut;
};

vocab make_vocab(std::string name, tokenizer tok) {
    vocab v{std::move(name), std::make_unique<tokenizer>(std::move(tok)), {}, {}};
    for (token_id id = 0; id < v.tok->n_vocab(); ++id) {
        const llm::token_type t = v.tok->get_token_type(id);
        const std::string & text = v.tok->token_text(id);
        if (text.empty()) continue;
        if (t == llm::token_type::user_defined) v.always_cut.push_back(text);
        if (t == llm::token_type::control || t == llm::token_type::unknown) v.special_cut.push_back(text);
    }
    return v;
}

// The GPT-2 vocabulary with tokenizer.ggml.pre set to `pre`.
tokenizer with_pre(const gguf::reader & src, const char * pre) {
    gguf::writer w;
    w.copy_all_kv(src);
    w.set_string("tokenizer.ggml.pre", pre);
    const std::vector<uint8_t> bytes = w.to_bytes();
    return tokenizer::from_gguf(gguf::reader::from_memory(bytes, std::string("gpt-2 with pre ") + pre));
}

const std::vector<vocab> & vocabs() {
    static const std::vector<vocab> all = [] {
        std::vector<vocab> out;
        const fs::path shared = shared_dir();
        std::vector<fs::path> files = gguf_files(shared / "vocab");
        for (const fs::path & f : gguf_files(shared / "models")) files.push_back(f);
        for (const fs::path & f : files) {
            try {
                const gguf::reader r(f);
                if (r.find_key("tokenizer.ggml.model") == nullptr) continue;
                out.push_back(make_vocab(f.filename().string(), tokenizer::from_gguf(r)));
                if (out.back().tok->kind() == llm::vocab_kind::bpe && f.filename() == "ggml-vocab-gpt-2.gguf") {
                    for (const char * pre : {"llama-bpe", "smaug-bpe", "tekken", "deepseek-llm", "deepseek-coder",
                                             "smollm", "default"}) {
                        out.push_back(make_vocab(f.filename().string() + " pre=" + pre, with_pre(r, pre)));
                    }
                }
            } catch (const error & e) {
                std::fprintf(stderr, "fuzz_tokenizer: skipping %s: %s\n", f.c_str(), e.what());
            }
        }
        if (out.empty()) {
            std::fprintf(stderr, "fuzz_tokenizer: no tokenizer loads from %s/vocab or %s/models\n", shared.c_str(),
                         shared.c_str());
            std::exit(2);
        }
        std::fprintf(stderr, "fuzz_tokenizer: %zu vocabularies\n", out.size());
        return out;
    }();
    return all;
}

bool contains_any(std::string_view text, const std::vector<std::string> & needles) {
    for (const std::string & n : needles) {
        if (text.find(n) != std::string_view::npos) return true;
    }
    return false;
}

void check_ids(const tokenizer & tok, const std::vector<token_id> & ids, const char * where) {
    for (const token_id id : ids) {
        if (id < 0 || id >= tok.n_vocab()) die("token id outside [0, n_vocab)", where);
    }
}

std::vector<token_id> encode_cut_everywhere(const tokenizer & tok, std::string_view text, bool add_special,
                                            bool parse_special) {
    const size_t spm = llm::spm_part_bytes.exchange(1);
    const size_t bpe = llm::bpe_part_bytes.exchange(1);
    std::vector<token_id> ids;
    try {
        ids = tok.encode(text, add_special, parse_special);
    } catch (...) {
        llm::spm_part_bytes = spm;
        llm::bpe_part_bytes = bpe;
        throw;
    }
    llm::spm_part_bytes = spm;
    llm::bpe_part_bytes = bpe;
    return ids;
}

// The stream decoder's output joined must be the pieces joined; it holds
// back at most an incomplete character (3 bytes).
std::string check_stream(const tokenizer & tok, const std::vector<token_id> & ids, bool render_special) {
    llm::stream_decoder dec(tok, render_special);
    std::string streamed;
    std::string pieces;
    for (const token_id id : ids) {
        streamed += dec.push(id);
        pieces += tok.token_to_piece(id, render_special);
        if (dec.pending() > 3) die("stream_decoder holds more than 3 bytes");
    }
    streamed += dec.finish();
    if (dec.pending() != 0) die("stream_decoder holds bytes after finish()");
    if (streamed != pieces) die("streamed text differs from the pieces joined", hex(pieces) + " vs " + hex(streamed));
    return pieces;
}

void check_complete_prefix(std::string_view s) {
    const size_t n = llm::utf8_complete_prefix(s);
    if (n > s.size()) die("utf8_complete_prefix beyond the text");
    const std::string_view rest = s.substr(n);
    if (rest.empty()) return;
    const auto lead = static_cast<unsigned char>(rest[0]);
    const size_t need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (need == 0 || rest.size() >= need) die("utf8_complete_prefix left more than an incomplete character", hex(s));
    for (size_t k = 1; k < rest.size(); ++k) {
        if ((static_cast<unsigned char>(rest[k]) & 0xC0) != 0x80) die("utf8_complete_prefix left a non-continuation byte", hex(s));
    }
    if (valid_utf8(s)) die("utf8_complete_prefix held back part of valid UTF-8", hex(s));
}

void fuzz_text(const uint8_t * data, size_t size) {
    const std::vector<vocab> & all = vocabs();
    if (size < 2) return;
    const vocab & v = all[data[0] % all.size()];
    const tokenizer & tok = *v.tok;
    const bool add_special = (data[1] & 1) != 0;
    const bool parse_special = (data[1] & 2) != 0;
    const bool render_special = (data[1] & 4) != 0;
    const bool remove_special = (data[1] & 8) != 0;
    const std::string_view text(reinterpret_cast<const char *>(data + 2), size - 2);

    check_complete_prefix(text);

    // The text's bytes as ids (two bytes each): any sequence decodes.
    std::vector<token_id> any_ids;
    for (size_t i = 0; i + 1 < text.size(); i += 2) {
        const unsigned v = static_cast<unsigned char>(text[i]) | unsigned(static_cast<unsigned char>(text[i + 1])) << 8;
        any_ids.push_back(static_cast<token_id>(v % static_cast<unsigned>(tok.n_vocab())));
    }
    (void)tok.detokenize(any_ids, remove_special, render_special);
    check_complete_prefix(check_stream(tok, any_ids, render_special));

    std::vector<token_id> ids;
    try {
        ids = tok.encode(text, add_special, parse_special);
    } catch (const error & e) {
        // Documented only for an SPM byte with no token at all.
        if (tok.kind() != llm::vocab_kind::spm) die("bpe encode threw", e.what());
        return;
    }
    check_ids(tok, ids, v.name.c_str());
    if (encode_cut_everywhere(tok, text, add_special, parse_special) != ids) {
        die("ids change when the text is cut into the smallest parts", v.name + " text " + hex(text));
    }

    // Special-token parsing changes nothing where no such text occurs.
    if (!contains_any(text, v.special_cut) && tok.encode(text, add_special, !parse_special) != ids) {
        die("parse_special changes the ids of a text without special-token text", v.name + " text " + hex(text));
    }

    const std::string detok = tok.detokenize(ids, remove_special, render_special);
    const std::string pieces = check_stream(tok, ids, render_special);
    check_complete_prefix(pieces);

    if (parse_special || render_special || !valid_utf8(text) || contains_any(text, v.always_cut)) return;
    if (tok.kind() == llm::vocab_kind::bpe) {
        if (pieces != text) die("byte-level BPE pieces do not give the text back", v.name + " text " + hex(text) + " got " + hex(pieces));
        return;
    }
    if (text.find("\xE2\x96\x81") != std::string_view::npos) return;
    const bool bos = add_special && tok.add_bos() && tok.bos_id() >= 0;
    const std::string expected = bos && tok.add_space_prefix() && !text.empty() ? " " + std::string(text) : std::string(text);
    if (detok != expected) die("SentencePiece detokenize does not give the text back", v.name + " text " + hex(text) + " got " + hex(detok));
}

// A text made of the vocabulary's own pieces (the first 64 tokens' and the
// last 16's), with spaces, letters and newlines between some: it reaches the
// merges and special texts a fuzzed vocabulary has.
std::string pieces_text(const tokenizer & tok) {
    static constexpr const char * k_seps[] = {"", " ", " a", "\n", "x\nb", "  "};
    std::string text;
    const token_id n = tok.n_vocab();
    for (token_id id = 0; id < n; id = id + 1 == 64 && n > 80 ? n - 16 : id + 1) {
        text += tok.token_to_piece(id, true);
        text += k_seps[static_cast<size_t>(id) % std::size(k_seps)];
    }
    return text;
}

void fuzz_vocab(const uint8_t * data, size_t size) {
    static const std::string fixed = "Hello world! <s>hi</s> <|endoftext|> 12345 \xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x8A\n\t  x\xFF";
    try {
        const gguf::reader r = gguf::reader::from_memory(std::span<const uint8_t>(data, size), "fuzz-vocab");
        const tokenizer tok = tokenizer::from_gguf(r);
        for (const std::string & text : {fixed, pieces_text(tok)}) {
            for (const bool special : {false, true}) {
                std::vector<token_id> ids;
                try {
                    ids = tok.encode(text, special, special);
                } catch (const error & e) {
                    if (tok.kind() != llm::vocab_kind::spm) die("bpe encode threw", e.what());
                    continue; // an SPM vocabulary that cannot encode some byte
                }
                check_ids(tok, ids, "fuzz-vocab");
                if (encode_cut_everywhere(tok, text, special, special) != ids) {
                    die("ids change when the text is cut into the smallest parts (fuzzed vocabulary)", hex(text));
                }
                (void)tok.detokenize(ids, special, special);
                check_complete_prefix(check_stream(tok, ids, special));
            }
        }
        if (tok.n_vocab() <= 4096) {
            for (token_id id = 0; id < tok.n_vocab(); ++id) {
                (void)tok.token_to_piece(id, true);
                (void)tok.is_eog(id);
            }
        }
    } catch (const error &) {
        // rejected cleanly
    } catch (const std::exception & e) {
        die("an exception other than tessera::error", e.what());
    }
}

// --- seeds (TESSERA_FUZZ_SEED_DIR) -------------------------------------------

void write_file(const fs::path & path, std::string_view prefix, std::span<const uint8_t> bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) die("cannot write a seed", path.string());
}

// The first `n` tokens of a real vocabulary (and its first `n_merges`
// merges), its other keys as they are (tokenizer.ggml.pre set to `pre` if
// given), special ids past the cut dropped.
std::vector<uint8_t> cut_vocab(const gguf::reader & r, size_t n, size_t n_merges, const char * pre = nullptr) {
    gguf::writer w;
    w.copy_all_kv(r);
    if (pre != nullptr) w.set_string("tokenizer.ggml.pre", pre);
    const std::vector<std::string_view> tokens = r.get_array_string("tokenizer.ggml.tokens");
    n = std::min(n, tokens.size());
    w.set("tokenizer.ggml.tokens", gguf::value::array_string(std::vector<std::string>(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n))));
    if (r.find_key("tokenizer.ggml.scores") != nullptr) {
        std::vector<float> s = r.get_array_f32("tokenizer.ggml.scores");
        s.resize(n);
        w.set("tokenizer.ggml.scores", gguf::value::array_f32(s));
    }
    if (r.find_key("tokenizer.ggml.token_type") != nullptr) {
        std::vector<int32_t> t = r.get_array_i32("tokenizer.ggml.token_type");
        t.resize(n);
        w.set("tokenizer.ggml.token_type", gguf::value::array_i32(t));
    }
    if (r.find_key("tokenizer.ggml.merges") != nullptr) {
        const std::vector<std::string_view> m = r.get_array_string("tokenizer.ggml.merges");
        w.set("tokenizer.ggml.merges", gguf::value::array_string(std::vector<std::string>(m.begin(), m.begin() + static_cast<ptrdiff_t>(std::min(n_merges, m.size())))));
    }
    for (const gguf::kv & e : r.metadata()) {
        if (e.key.find("token_id") != std::string::npos) {
            const std::optional<int64_t> id = r.find_int(e.key);
            if (id && *id >= 0 && static_cast<uint64_t>(*id) >= n) w.set_u32(e.key, 0xFFFFFFFFu);
        }
    }
    return w.to_bytes();
}

std::vector<std::string> read_inp(const fs::path & path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string data = ss.str();
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t start = 0;
    for (size_t pos = data.find(sep); pos != std::string::npos; pos = data.find(sep, start)) {
        texts.push_back(data.substr(start, pos - start));
        start = pos + sep.size();
    }
    return texts;
}

void write_seeds(const fs::path & dir) {
    fs::create_directories(dir / "text");
    fs::create_directories(dir / "vocab");
    const fs::path shared = shared_dir();
    const size_t n_vocabs = vocabs().size();
    size_t n_text = 0;
    std::vector<fs::path> inps;
    for (const auto & e : fs::directory_iterator(shared / "vocab")) {
        if (e.path().extension() == ".inp") inps.push_back(e.path());
    }
    std::sort(inps.begin(), inps.end());
    for (const fs::path & p : inps) {
        for (const std::string & t : read_inp(p)) {
            // Each text for one vocabulary, in turn, with rotating options.
            const char prefix[2] = {static_cast<char>(n_text % n_vocabs), static_cast<char>(n_text % 16)};
            write_file(dir / "text" / ("t" + std::to_string(n_text++)), std::string_view(prefix, 2),
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(t.data()), t.size()));
        }
    }
    size_t n_vocab = 0;
    std::vector<fs::path> files = gguf_files(shared / "vocab");
    for (const fs::path & f : gguf_files(shared / "models")) files.push_back(f);
    for (const fs::path & f : files) {
        const gguf::reader r(f);
        if (r.find_key("tokenizer.ggml.tokens") == nullptr) continue;
        const std::string stem = f.stem().string();
        write_file(dir / "vocab" / (stem + "-cut600.gguf"), "V", cut_vocab(r, 600, 400));
        write_file(dir / "vocab" / (stem + "-cut300.gguf"), "V", cut_vocab(r, 300, 60));
        n_vocab += 2;
        if (r.find_string("tokenizer.ggml.model") == "gpt2") {
            for (const char * pre : {"llama-bpe", "smaug-bpe", "tekken", "deepseek-llm", "deepseek-coder", "smollm",
                                     "default"}) {
                write_file(dir / "vocab" / (stem + "-cut300-" + pre + ".gguf"), "V", cut_vocab(r, 300, 60, pre));
                ++n_vocab;
            }
        }
    }
    std::fprintf(stderr, "fuzz_tokenizer: wrote %zu text and %zu vocabulary seeds to %s\n", n_text, n_vocab,
                 dir.c_str());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("TESSERA_FUZZ_SEED_DIR"); dir != nullptr && *dir != '\0') {
        try {
            write_seeds(dir);
        } catch (const std::exception & e) {
            std::fprintf(stderr, "fuzz_tokenizer: writing seeds failed: %s\n", e.what());
            std::exit(2);
        }
        std::exit(0);
    }
    if (locked_mode() != 'v') (void)vocabs(); // here, not in the first input's time limit
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) return 0;
    const bool vocab_mode = data[0] == k_vocab_mode;
    if (locked_mode() != '\0' && vocab_mode != (locked_mode() == 'v')) return -1; // the other mode's input
    if (vocab_mode) {
        fuzz_vocab(data + 1, size - 1);
    } else {
        fuzz_text(data, size);
    }
    return 0;
}
