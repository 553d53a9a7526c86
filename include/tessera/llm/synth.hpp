// tessera/llm/synth.hpp — random-weight Llama models of real shapes, for
// benchmarks and tests (`tessera gguf synth`).
//
// The file follows the GGUF specification's LLM conventions (ggml repository
// docs/gguf.md, "Standardized key-value pairs" and "Standardized tensor
// names") so tessera and llama.cpp both load it:
//   general.architecture = "llama", general.name, llama.context_length,
//   llama.embedding_length, llama.block_count, llama.feed_forward_length,
//   llama.rope.dimension_count, llama.attention.head_count,
//   llama.attention.head_count_kv, llama.attention.layer_norm_rms_epsilon,
//   llama.rope.freq_base, general.file_type, llama.vocab_size,
//   general.quantization_version, then every tokenizer.* key of the vocab file.
// Tensors (ne order, ne[0] innermost):
//   token_embd.weight [n_embd, n_vocab], output_norm.weight [n_embd] F32,
//   output.weight [n_embd, n_vocab], and per layer N: blk.N.attn_norm.weight
//   [n_embd] F32, blk.N.attn_q.weight [n_embd, n_embd], blk.N.attn_k.weight and
//   blk.N.attn_v.weight [n_embd, n_embd_kv], blk.N.attn_output.weight
//   [n_embd, n_embd], blk.N.ffn_norm.weight [n_embd] F32,
//   blk.N.ffn_gate.weight and blk.N.ffn_up.weight [n_embd, n_ff],
//   blk.N.ffn_down.weight [n_ff, n_embd]; the 2-D weights in the type the
//   target picks for each (matrix_type_for, tessera/llm/file_type.hpp: a
//   plain type for all of them, or the Q4_K_M / Q4_K_S / Q5_K_M / Q5_K_S
//   mix, with Q4_K, Q5_K and Q6_K falling back to Q5_0, Q5_1 and Q8_0 where
//   ne[0] is not a multiple of 256, e.g. every matrix of the tiny preset and
//   most of the 135m one).
//
// Values (reproducible on every platform: no std:: distributions, whose
// output is implementation-defined):
//   - each tensor has its own generator std::mt19937_64 (fully specified by
//     the C++ standard) seeded with splitmix64(seed ^ fnv1a64(tensor name)),
//     so a tensor's values do not depend on the other tensors or the type;
//   - 2-D weights: uniform in [-a, a], a = sqrt(3 / ne[0]) (standard deviation
//     1/sqrt(fan_in), fan_in = ne[0]), u = (x >> 11) * 2^-53 from each 64-bit
//     draw x, value = (2u - 1) * a, rounded to F32 and then encoded with the
//     type's reference from_float;
//   - norm weights: 1.
// Hence a synth model of type T (plain or mix) is byte-identical to
// `tessera quantize` of the F32 synth model with the same seed to T.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/types.hpp"
#include "tessera/llm/file_type.hpp"

namespace tessera::llm {

// Shape of a synthetic Llama model.
struct synth_shape {
    std::string name;          // preset name, written into general.name as "synth-<name>"
    uint32_t n_embd = 0;       // embedding_length
    uint32_t n_layer = 0;      // block_count
    uint32_t n_head = 0;       // attention.head_count
    uint32_t n_head_kv = 0;    // attention.head_count_kv
    uint32_t n_ff = 0;         // feed_forward_length
    uint32_t n_ctx = 2048;     // context_length (tokens)
    uint32_t head_dim = 0;     // attention.key_length = value_length, written when not 0 (the head
                               // size; 0: n_embd / n_head, the keys left out)

    uint32_t head_size() const { return head_dim != 0 ? head_dim : n_embd / n_head; }
};

// The presets: "1b" (n_embd 2048, 22 layers, 32 heads, 4 kv heads, n_ff 5632:
// the TinyLlama-1.1B shape), "135m" (576, 30, 9, 3, 1536: the SmolLM-135M
// shape) and "tiny" (64, 2, 4, 2, 128: for tests). Throws tessera::error
// listing the presets for an unknown name.
synth_shape synth_preset(std::string_view name);
std::vector<std::string> synth_preset_names();

struct synth_params {
    synth_shape shape;
    // The 2-D weights' target: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K,
    // Q6_K (a plain type converts implicitly) or file_type_q4_k_s / _q4_k_m /
    // _q5_k_s / _q5_k_m.
    file_type wtype = TSR_TYPE_F16;
    std::filesystem::path vocab;     // GGUF holding tokenizer.ggml.tokens etc. (tensors ignored)
    uint64_t seed = 1;
    float rms_eps = 1e-5f;           // attention.layer_norm_rms_epsilon
    float rope_freq_base = 10000.0f; // rope.freq_base
    // Also write rope_freqs.weight (F32 [head size / 2]) with Llama 3.1's RoPE
    // scaling (scale factor 8, low/high-frequency factors 1 and 4, original
    // context 8192), as its converter computes it from rope.freq_base.
    bool llama31_rope = false;
    // Called before tensor `index` (0-based) of `count` is written.
    std::function<void(size_t index, size_t count, std::string_view name)> progress;
};

// Writes the model to `out` atomically (gguf::writer), generating one tensor
// at a time while writing (memory bounded by the largest tensor). Throws
// tessera::error: unknown/unsupported target, a shape whose n_embd is not a
// multiple of n_head (without head_dim) or whose head size is odd, a matrix whose ne[0] (n_embd or n_ff) fits no block of
// its type even after the K-quant fallback, n_head not a
// multiple of n_head_kv, a vocab file that is missing, not GGUF, or lacks
// tokenizer.ggml.tokens, or a write failure (`out` then left as it was).
// Returns the value of the tokenizer.ggml.model key it copied ("llama",
// "gpt2", ...; printable() before showing it), which tells whether tessera's
// tokenizer can read the file.
std::string synth_model(const synth_params & p, const std::filesystem::path & out);

// The generator of one tensor's values (see the file comment), exposed for
// tests: fills `out` with the first out.size() values (row-major, ne[0]
// fastest) of the 2-D tensor named `name` whose ne[0] is `fan_in`.
void synth_values(uint64_t seed, std::string_view name, int64_t fan_in, std::span<float> out);

// Total bytes of tensor data a model of this shape, vocabulary size and
// target holds (not counting the header), each matrix counted in the type
// matrix_type_for gives it. Throws tessera::error where synth_model would
// refuse the shape or target. llama31_rope: with rope_freqs.weight.
uint64_t synth_data_size(const synth_shape & s, uint32_t n_vocab, const file_type & wtype, bool llama31_rope = false);

} // namespace tessera::llm
