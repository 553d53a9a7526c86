// libFuzzer target for llm::model::load and a first forward step. The input is
// a whole GGUF file; it is written to a file of its own (/dev/shm, else the
// temporary folder) and loaded as a Llama model. Any input must either load or
// throw tessera::error; one that loads is bound to the CPU backend in a
// session of a tiny context, evaluates one or two tokens and one more, and the
// logits go through argmax and the sampler chain. A crash, sanitizer report,
// leak, hang or huge allocation is a bug.
//
// The CPU backend is compiled in (TESSERA_CPU_STATIC, see fuzz.cmake), so the
// fuzzer is one program that loads no plugin. Options of the session
// (repacked weights, fused attention, F16 cache) come from the input's last
// byte, so the mutations reach each of them.
//
// Mutation is structure-aware in part: one time in four the input is replaced
// by a fresh llm::synth_model file of a random shape, weight type and
// hyper-parameters (valid models the byte mutations rarely reach: other head
// sizes and GQA ratios, odd row lengths, every weight type), one in four a
// number-valued key of a file that parses is set to an edge value (0, 1, -1,
// the type's extremes, its neighbours, twice or half of it; for floats also
// subnormals, huge values, Inf and NaN), the rest are libFuzzer's own byte
// mutations. With TESSERA_FUZZ_VERBOSE set the message of each rejected input
// is printed.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fuzz_model_vocab.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/sampler.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/synth.hpp"

namespace {

using namespace tessera;

// Inputs above this are skipped (the seeds: 8 KiB to 1.2 MiB).
constexpr size_t k_max_input = 4u << 20;
// Models whose forward step would be slow are not evaluated (loading them is
// still checked): more layers or weight bytes than this.
constexpr uint32_t k_max_layers = 64;
constexpr uint64_t k_max_weight_bytes = 8u << 20;
// The session's context and memory limit (KV cache + compute buffer).
constexpr uint32_t k_n_ctx = 8;
constexpr uint64_t k_memory_limit = 64u << 20;

[[noreturn]] void die(const char * what) {
    std::fprintf(stderr, "fuzz_model: invariant violated: %s\n", what);
    std::abort();
}

// A file of this process (libFuzzer's -jobs workers are separate processes)
// in /dev/shm, else the temporary folder: "tessera-fuzz-<what>-<pid>.gguf".
std::filesystem::path scratch_path(const char * what) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm", ec)
                                          ? std::filesystem::path("/dev/shm")
                                          : std::filesystem::temp_directory_path();
    return dir / (std::string("tessera-fuzz-") + what + "-" + std::to_string(::getpid()) + ".gguf");
}

// The file each input is written to.
const std::filesystem::path & input_path() {
    static const std::filesystem::path p = scratch_path("model");
    return p;
}

void write_input(const uint8_t * data, size_t size) {
    std::FILE * f = std::fopen(input_path().c_str(), "wb");
    if (f == nullptr) die("cannot create the input file");
    if (size != 0 && std::fwrite(data, 1, size, f) != size) die("cannot write the input file");
    if (std::fclose(f) != 0) die("cannot write the input file");
}

void evaluate(const llm::model & m, uint8_t options) {
    const llm::hparams & hp = m.hp();
    if (hp.n_layer > k_max_layers || m.n_bytes() > k_max_weight_bytes) return;
    llm::session_params p;
    p.n_ctx = std::min(k_n_ctx, hp.n_ctx_train);
    p.n_batch = 2;
    p.n_threads = 1;
    p.repack = (options & 1) == 0;
    p.flash_attn = (options & 2) != 0 ? llm::session_params::flash_attn_mode::off
                                      : llm::session_params::flash_attn_mode::automatic;
    p.kv_type = (options & 4) != 0 ? TSR_TYPE_F16 : TSR_TYPE_F32;
    p.memory_limit = k_memory_limit;
    llm::session s(m, p);
    if (s.n_ctx() != p.n_ctx) die("the session's context size differs from the one asked for");

    const int32_t n_vocab = static_cast<int32_t>(hp.n_vocab);
    std::vector<int32_t> prompt{1 % n_vocab};
    if (p.n_ctx >= 3) prompt.push_back(n_vocab - 1);
    std::span<const float> logits = s.decode(prompt);
    if (logits.size() != hp.n_vocab) die("decode returned a logits row of the wrong length");
    if (s.n_past() != prompt.size()) die("decode did not advance n_past");
    const int32_t next = llm::argmax(logits);
    if (next < 0 || next >= n_vocab) die("argmax outside the vocabulary");
    if (s.n_past() < s.n_ctx()) {
        logits = s.decode(std::span<const int32_t>(&next, 1));
        if (logits.size() != hp.n_vocab) die("decode returned a logits row of the wrong length");
        llm::sampler_params sp;
        sp.seed = options;
        llm::sampler smp(sp);
        const int32_t t = smp.sample(logits);
        if (t < 0 || t >= n_vocab) die("sampled token outside the vocabulary");
    }
}

// Writes a random synth model (shape, weight type and hyper-parameters drawn
// from `seed`) into data; returns its size, or 0 when none of the shapes drawn
// was valid or the file would exceed max_size.
size_t synth_input(uint8_t * data, size_t max_size, unsigned seed) {
    const std::filesystem::path vocab = scratch_path("vocab");
    static const std::vector<llm::file_type> targets = llm::quantize_targets();
    std::mt19937 rng(seed);
    auto uniform = [&](uint32_t lo, uint32_t hi) { return lo + uint32_t(rng() % (hi - lo + 1)); };
    llm::synth_params p;
    p.vocab = vocab;
    p.seed = rng();
    p.wtype = targets[rng() % targets.size()];
    const bool blocks = get_type_traits(p.wtype.base).block_size > 1;
    bool found = false;
    for (int attempt = 0; attempt < 64 && !found; ++attempt) {
        llm::synth_shape & sh = p.shape;
        sh.name = "fuzz";
        sh.n_head_kv = uniform(1, 4);
        sh.n_head = sh.n_head_kv * uniform(1, 4);
        sh.head_dim = rng() % 2 == 0 ? 0 : 2 * uniform(1, 16);
        sh.n_embd = blocks ? 32 * uniform(1, 3) : uniform(1, 48);
        if (sh.head_dim == 0) sh.n_embd = blocks ? sh.n_embd : sh.n_head * 2 * uniform(1, 8);
        sh.n_ff = blocks ? 32 * uniform(1, 3) : uniform(1, 96);
        if (rng() % 8 == 0) sh.n_embd = sh.n_ff = 256; // the K-quants' own blocks
        sh.n_layer = uniform(1, 3);
        sh.n_ctx = uniform(1, 16);
        p.llama31_rope = rng() % 4 == 0;
        try {
            found = llm::synth_data_size(sh, 16, p.wtype, p.llama31_rope) <= std::min<size_t>(max_size / 2, 256u << 10);
        } catch (const error &) {
        }
    }
    if (!found) return 0;
    static const float eps[] = {1e-5f, 1e-6f, 1e-30f, 0.5f};
    static const float base[] = {10000.0f, 500000.0f, 1.0f, 0.25f};
    p.rms_eps = eps[rng() % 4];
    p.rope_freq_base = base[rng() % 4];
    const std::filesystem::path out = scratch_path("synth");
    std::vector<char> bytes;
    try {
        fuzz::write_micro_vocab(vocab);
        llm::synth_model(p, out);
        std::ifstream in(out, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception &) {
    }
    std::error_code ec;
    std::filesystem::remove(vocab, ec);
    std::filesystem::remove(out, ec);
    if (bytes.empty() || bytes.size() > max_size) return 0;
    std::copy(bytes.begin(), bytes.end(), data);
    data[bytes.size() - 1] = uint8_t(rng() & 7); // the session options (see evaluate)
    return bytes.size();
}

// Sets one number-valued key of the GGUF file in data[0, size) to an edge
// value (see the file comment); returns the new size, 0 when the input does
// not parse, has no such key or the result would exceed max_size.
size_t mutate_key(uint8_t * data, size_t size, size_t max_size, unsigned seed) {
    std::mt19937 rng(seed);
    try {
        const gguf::reader r = gguf::reader::from_memory(std::span<const uint8_t>(data, size), "mutant");
        std::vector<size_t> numbers;
        for (size_t i = 0; i < r.n_kv(); ++i) {
            const gguf::value_type t = r.metadata()[i].val.type();
            if (t != gguf::value_type::STRING && t != gguf::value_type::ARRAY && t != gguf::value_type::BOOL) {
                numbers.push_back(i);
            }
        }
        if (numbers.empty()) return 0;
        const gguf::kv & kv = r.metadata()[numbers[rng() % numbers.size()]];
        gguf::value v = kv.val;
        if (kv.val.type() == gguf::value_type::FLOAT32 || kv.val.type() == gguf::value_type::FLOAT64) {
            const double x = kv.val.as_float();
            const double edges[] = {0.0, -0.0, 1.0, -1.0, 1e-40, 1e-45, 3e-39, 3.4e38, 1e300, -1e38,
                                    std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                                    x * 2, x / 2, -x, x * 1e-30};
            const double e = edges[rng() % std::size(edges)];
            v = kv.val.type() == gguf::value_type::FLOAT32 ? gguf::value::f32(float(e)) : gguf::value::f64(e);
        } else {
            const int64_t x = kv.val.as_int();
            const int64_t edges[] = {0, 1, 2, 3, -1, x + 1, x - 1, x * 2, x / 2, int64_t(1) << 30, (int64_t(1) << 30) + 1,
                                     int64_t(1) << 31, INT32_MAX, int64_t(UINT32_MAX), INT64_MAX, INT64_MIN};
            const int64_t e = edges[rng() % std::size(edges)];
            switch (kv.val.type()) {
            case gguf::value_type::UINT8: v = gguf::value::u8(uint8_t(e)); break;
            case gguf::value_type::INT8: v = gguf::value::i8(int8_t(e)); break;
            case gguf::value_type::UINT16: v = gguf::value::u16(uint16_t(e)); break;
            case gguf::value_type::INT16: v = gguf::value::i16(int16_t(e)); break;
            case gguf::value_type::UINT32: v = gguf::value::u32(uint32_t(e)); break;
            case gguf::value_type::INT32: v = gguf::value::i32(int32_t(e)); break;
            case gguf::value_type::UINT64: v = gguf::value::u64(uint64_t(e)); break;
            default: v = gguf::value::i64(e); break;
            }
        }
        gguf::writer w;
        w.copy_all_kv(r);
        w.set(kv.key, std::move(v));
        for (const gguf::tensor_info & t : r.tensors()) w.copy_tensor(r, t.name);
        const std::vector<uint8_t> bytes = w.to_bytes();
        if (bytes.size() > max_size) return 0;
        std::copy(bytes.begin(), bytes.end(), data);
        return bytes.size();
    } catch (const error &) {
        return 0;
    }
}

} // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t * data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t * data, size_t size, size_t max_size, unsigned int seed) {
    if (seed % 4 == 0) {
        if (const size_t n = synth_input(data, max_size, seed / 4); n != 0) return n;
    } else if (seed % 4 == 1) {
        if (const size_t n = mutate_key(data, size, max_size, seed / 4); n != 0) return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size > k_max_input) return -1; // not added to the corpus
    write_input(data, size);
    try {
        std::unique_ptr<llm::model> m;
        try {
            m = llm::model::load(input_path());
        } catch (...) {
            std::error_code ec;
            std::filesystem::remove(input_path(), ec);
            throw;
        }
        // The model holds its own mapping of the file: no file is left behind.
        std::error_code ec;
        std::filesystem::remove(input_path(), ec);
        evaluate(*m, size != 0 ? data[size - 1] : 0);
    } catch (const error & e) {
        // rejected cleanly; TESSERA_FUZZ_VERBOSE=1 shows why (for triage)
        static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
        if (verbose) std::fprintf(stderr, "fuzz_model: rejected: %s\n", e.what());
    }
    return 0;
}
