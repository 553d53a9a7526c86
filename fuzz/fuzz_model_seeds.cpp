// Writes the small seed models of fuzz_model into a folder: random-weight
// Llama models made by llm::synth_model (the generator of `tessera gguf
// synth`) with shapes smaller than its presets and a 16-token vocabulary, so
// each seed is a few KiB to a few hundred KiB and the fuzzer runs many inputs
// a second. scripts/fuzz.sh adds the shared models to them.
//   usage: fuzz_model_seeds OUTPUT_DIR
#include <cstdio>
#include <filesystem>

#include "fuzz_model_vocab.hpp"
#include "tessera/core/error.hpp"
#include "tessera/llm/synth.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

struct seed {
    const char * name;
    llm::synth_shape shape; // name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, head_dim
    llm::file_type type;
    bool llama31_rope = false;
};

} // namespace

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: fuzz_model_seeds OUTPUT_DIR\n");
        return 2;
    }
    const fs::path out = argv[1];
    try {
        fs::create_directories(out);
        const fs::path vocab = out / "vocab.tmp";
        fuzz::write_micro_vocab(vocab);
        const seed seeds[] = {
            {"micro-f32.gguf", {"micro", 32, 1, 2, 1, 64, 16, 0}, TSR_TYPE_F32},
            {"micro-q4_0.gguf", {"micro", 32, 2, 4, 2, 64, 16, 0}, TSR_TYPE_Q4_0},
            {"micro-q8_0-head16.gguf", {"micro", 32, 1, 4, 2, 32, 16, 16}, TSR_TYPE_Q8_0},
            {"micro-f16-rope31.gguf", {"micro", 32, 1, 2, 2, 64, 16, 0}, TSR_TYPE_F16, true},
            {"micro-bf16.gguf", {"micro", 64, 1, 4, 1, 64, 16, 0}, TSR_TYPE_BF16},
            {"micro-q5_1.gguf", {"micro", 32, 1, 1, 1, 32, 16, 0}, TSR_TYPE_Q5_1},
            {"odd-f32.gguf", {"odd", 34, 1, 1, 1, 33, 4, 0}, TSR_TYPE_F32},
            {"head2-f16-ctx2.gguf", {"head2", 32, 1, 16, 4, 32, 2, 2}, TSR_TYPE_F16},
            {"small-q4_k_m.gguf", {"small", 256, 1, 2, 1, 256, 16, 0}, llm::file_type_q4_k_m},
        };
        for (const seed & s : seeds) {
            llm::synth_params p;
            p.shape = s.shape;
            p.wtype = s.type;
            p.vocab = vocab;
            p.llama31_rope = s.llama31_rope;
            llm::synth_model(p, out / s.name);
        }
        fs::remove(vocab);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "fuzz_model_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
