// tessera/llm/file_type.hpp — quantization targets ("file types"): the rule
// that picks the element type of each weight when `tessera quantize` or
// `tessera gguf synth` writes a model, and the general.file_type id stored
// for it.
//
// Targets and their per-tensor rule, for weight matrices only
// (is_weight_matrix: a name ending in "weight", 2-D once trailing 1s of the
// shape are dropped; quantize also needs an F32, F16, BF16 or
// block-quantized element type); every other tensor is copied:
//   F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: every weight
//           matrix that type.
//   Q4_K_M: output.weight -> Q6_K; blk.N.attn_v.weight and
//           blk.N.ffn_down.weight -> Q6_K when use_more_bits(N, n_layer),
//           else Q4_K; every other weight matrix -> Q4_K. In a model without
//           output.weight (tied embeddings: token_embd is also the output
//           projection) token_embd gets output.weight's Q6_K, as in
//           llama.cpp's quantizer.
//   Q4_K_S: output.weight (or a tied token_embd) -> Q6_K, every other weight
//           matrix -> Q4_K (a
//           simplification: llama.cpp's Q4_K_S also gives a few of the first
//           attn_v/ffn_down tensors more bits; ours does not).
//   Q5_K_M, Q5_K_S: the same rules with Q5_K in place of Q4_K (Q6_K stays
//           Q6_K), as in llama.cpp's quantizer.
// Fallback: K-quant super-blocks hold 256 elements, so a tensor whose ne[0]
// is not a multiple of 256 gets Q5_0 instead of Q4_K, Q5_1 instead of Q5_K
// and Q8_0 instead of Q6_K, the choices of llama.cpp's quantizer, so such
// files match real "Q4_K_M" / "Q5_K_M" downloads (the SmolLM-135M shape,
// n_embd 576, falls back for most matrices).
// A tensor whose ne[0] is not a multiple of the (fallen-back) type's block
// size is copied unchanged.
//
// general.file_type ids are llama.cpp's llama_ftype values: ALL_F32 0,
// MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8, MOSTLY_Q5_1 9,
// MOSTLY_Q4_K_S 14, MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_S 16, MOSTLY_Q5_K_M 17,
// MOSTLY_Q6_K 18, MOSTLY_BF16 32. llama.cpp has no id for "every tensor
// Q4_K" or "every tensor Q5_K"; plain Q4_K is written as 14 (MOSTLY_Q4_K_S,
// which is all Q4_K but for output.weight) and plain Q5_K as 16
// (MOSTLY_Q5_K_S, likewise).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::llm {

// A quantization target: a plain element type (every converted tensor that
// type) or a mix of types chosen per tensor. Converts implicitly from a
// plain type, so `params.target = TSR_TYPE_Q8_0` reads as before.
struct file_type {
    enum class mix : uint8_t { none, q4_k_s, q4_k_m, q5_k_s, q5_k_m };
    type base = TSR_TYPE_F16; // the plain type; for the mixes the type of most tensors (Q4_K, Q5_K)
    mix kind = mix::none;

    constexpr file_type() = default;
    constexpr file_type(type t) : base(t) {} // NOLINT(google-explicit-constructor): a plain type is a target
    constexpr file_type(type t, mix m) : base(t), kind(m) {}
    bool operator==(const file_type &) const = default;
};

inline constexpr file_type file_type_q4_k_s{TSR_TYPE_Q4_K, file_type::mix::q4_k_s};
inline constexpr file_type file_type_q4_k_m{TSR_TYPE_Q4_K, file_type::mix::q4_k_m};
inline constexpr file_type file_type_q5_k_s{TSR_TYPE_Q5_K, file_type::mix::q5_k_s};
inline constexpr file_type file_type_q5_k_m{TSR_TYPE_Q5_K, file_type::mix::q5_k_m};

// Every target quantize_file and synth_model can write, in the order the
// CLI lists them: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
// Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M.
std::vector<file_type> quantize_targets();

// "F32, F16, ..., Q5_K_M": the names of quantize_targets(), for messages.
std::string quantize_target_names();

// True when `ft` is one of quantize_targets() and its types have encoders.
bool is_quantize_target(const file_type & ft);

// The target's name as the CLI spells it: the type name ("Q8_0") or the
// mix name ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S").
std::string file_type_name(const file_type & ft);

// The target named `name` (case-insensitive: "q4_k_m" works). Throws
// tessera::error "unknown or unsupported quantization type '<name>'
// (supported: ...)" for anything else (Q3_K, Q4_1, "Q9_9", "").
file_type parse_file_type(std::string_view name);

// The general.file_type id of a target (see the file comment: 0, 1, 2, 7,
// 8, 9, 14, 15, 16, 17, 18, 32). Throws tessera::error for a type that is not a target.
uint32_t file_type_of(const file_type & ft);

// The reference bench tool's description of a general.file_type id: "all
// F32", "F16", "Q4_0", "Q8_0", "Q5_0", "Q5_1", "Q4_K - Small", "Q4_K - Medium",
// "Q5_K - Small", "Q5_K - Medium", "Q6_K", "BF16"; empty for other ids.
std::string_view file_type_description(int64_t id);

// True when layer i of n gets more bits in the Q4_K_M and Q5_K_M mixes:
//   i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2   (integer division; the
// rule of llama.cpp's quantizer). E.g. n = 22: layers 0, 1, 4, 7, 10, 13,
// 16, 19, 20, 21.
bool use_more_bits(int64_t i, int64_t n);

// The type the target's rule picks for the weight matrix `name`, before the
// ne[0] fallback. n_layer: the model's block count; tied_output: the model
// has no output.weight (token_embd is the output projection too).
type rule_type_for(const file_type & ft, std::string_view name, uint32_t n_layer, bool tied_output = false);

// The type used instead of `t` when ne[0] is not a multiple of 256: Q5_0
// for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K, `t` itself for every other type.
type k_quant_fallback(type t);

// The number of dimensions of shape `ne` (ne[0] innermost) with trailing 1s
// dropped, as the GGUF reference implementation counts them (ggml_n_dims):
// [64, 1] is 1-D, [64, 512, 1] 2-D, [64, 512, 4] 3-D. At least 1 for a
// non-empty `ne`, 0 for an empty one.
size_t n_dims_of(std::span<const int64_t> ne);

// True when quantize applies the targets' rules to tensor `name` of shape
// `ne`: its name ends in "weight" and it is 2-D counted by n_dims_of (so a
// norm weight stored as [64, 1] is not one, a token_embd stored as
// [64, 512, 1] is). The element type is the caller's to check (quantize
// converts only F32, F16, BF16 and block-quantized tensors).
bool is_weight_matrix(std::string_view name, std::span<const int64_t> ne);

// The type the weight matrix `name`, whose rows are ne0 elements long, gets
// under `ft`: rule_type_for, then the fallback (k_quant_fallback) when ne0
// % block_size != 0; nullopt when ne0 is not a multiple of the fallen-back
// type's block size either. For a caller that knows the tensor is a
// matrix (synth, whose token_embd has one row per token, even for a
// one-token vocabulary).
std::optional<type> matrix_type_for(const file_type & ft, std::string_view name, int64_t ne0, uint32_t n_layer,
                                    bool tied_output = false);

// The type tensor `name` of shape `ne` (ne[0] innermost) gets under `ft`:
// matrix_type_for when the shape is 2-D counted by n_dims_of (trailing 1s
// dropped: [64, 512, 1] is 2-D); nullopt when the tensor is copied
// unchanged: 1-D ([64], [64, 1]), 3-D or more, or ne[0] fitting no block.
// The name is not checked here (quantize also asks is_weight_matrix).
std::optional<type> tensor_type_for(const file_type & ft, std::string_view name, std::span<const int64_t> ne,
                                    uint32_t n_layer, bool tied_output = false);

// A model's layer count for the rules: `<general.architecture>.block_count`
// when present, else 1 + the largest N of the tensors named blk.N.*, else 0.
// Throws tessera::error when a key is present with the wrong type or a
// value outside 0..2^20, or when a tensor blk.N.* has N >= the key's value
// (the file has more layers than the key says; a larger value is accepted).
uint32_t n_layer_of(const gguf::reader & r);

} // namespace tessera::llm
