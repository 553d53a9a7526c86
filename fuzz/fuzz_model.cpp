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
// byte, so the mutations reach each of them. With TESSERA_FUZZ_VERBOSE set
// the message of each rejected input is printed.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/sampler.hpp"
#include "tessera/llm/session.hpp"

namespace {

using namespace tessera;

// Inputs above this are skipped (the seeds are about 1-2 MiB).
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

// The file each input is written to (one per process: libFuzzer's -jobs
// workers are separate processes).
const std::filesystem::path & input_path() {
    static const std::filesystem::path p = [] {
        std::error_code ec;
        const std::filesystem::path dir =
            std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                          : std::filesystem::temp_directory_path();
        return dir / ("tessera-fuzz-model-" + std::to_string(::getpid()) + ".gguf");
    }();
    return p;
}

// Removes the input file when the fuzzer exits normally.
struct input_file_remover {
    ~input_file_remover() {
        std::error_code ec;
        std::filesystem::remove(input_path(), ec);
    }
};

void write_input(const uint8_t * data, size_t size) {
    static input_file_remover remover;
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

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size > k_max_input) return -1; // not added to the corpus
    write_input(data, size);
    try {
        const std::unique_ptr<llm::model> m = llm::model::load(input_path());
        evaluate(*m, size != 0 ? data[size - 1] : 0);
    } catch (const error & e) {
        // rejected cleanly; TESSERA_FUZZ_VERBOSE=1 shows why (for triage)
        static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
        if (verbose) std::fprintf(stderr, "fuzz_model: rejected: %s\n", e.what());
    }
    return 0;
}
