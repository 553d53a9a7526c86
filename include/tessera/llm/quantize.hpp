// tessera/llm/quantize.hpp — converting the weights of a GGUF model file to
// another element type or mix of types (F32, F16, BF16, Q8_0, Q4_0, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M), as `tessera
// quantize` does.
//
// Which tensors change, and to which type: tensor_type_for
// (tessera/llm/file_type.hpp) — weight matrices only (is_weight_matrix: a
// name ending in "weight", 2-D once trailing 1s of the shape are dropped;
// token_embd and output included) of an F32, F16, BF16 or block-quantized
// type, the mixes choosing per tensor, Q4_K falling back to Q5_0, Q5_K to
// Q5_1 and Q6_K to Q8_0 where ne[0] is not a multiple of 256; 1-D tensors
// (norm weights, biases, also when stored as [n, 1]), tensors of other
// ranks, of integer or F64 type or whose name does not end in "weight", and
// tensors whose ne[0] fits no block are copied unchanged, keeping their
// stored shape. A converted tensor is decoded to F32 with its
// type's to_float, then encoded with the chosen type's reference from_float
// (tessera/core/types.hpp), so Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K
// bytes are exactly those quantize_row_*_ref writes in the GGUF block
// layouts.
//
// Metadata is copied in file order; general.file_type is set to the llama.cpp
// file-type id of the target (file_type_of: e.g. 15 for Q4_K_M) and
// general.quantization_version to 2 (the current block layouts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/llm/file_type.hpp"

namespace tessera::llm {

// general.quantization_version written by quantize and synth (GGUF
// spec: "general.quantization_version: version of quantization format").
inline constexpr uint32_t quantization_version = 2;

// file_type_of, is_quantize_target, tensor_type_for: tessera/llm/file_type.hpp.

// True when quantize_file converts tensor `ti` under `target` (n_layer: the
// model's layer count, n_layer_of; tied_output: the model has no
// output.weight): `ti` is of an F32, F16, BF16 or block-quantized type,
// tensor_type_for gives a type and `ti` is not already of that type.
bool should_convert(const gguf::tensor_info & ti, const file_type & target, uint32_t n_layer, bool tied_output = false);

// Converts `n_rows` rows of `ne0` elements from `src` (type `from`, packed rows)
// into `dst` (type `to`, packed rows) through F32. dst.size() must equal
// n_rows * row_size(to, ne0) and src.size() n_rows * row_size(from, ne0).
// Throws tessera::error when `from` has no to_float, `to` has no from_float,
// or the sizes disagree (`what` names the tensor in the message). Also
// refuses, naming the tensor, the row and column (of the packed rows) and
// the value, an input value (as decoded to F32) that is NaN or infinite,
// and a finite one that the encoding turns into a non-finite number: an F16
// or BF16 value past the type's largest, or a block whose stored F16 scale
// or minimum (d; Q5_1's m; the K types' d and dmin) overflows; the error
// then names the type and the block's columns. dst is then partly written.
// Cost: one pass over each decoded row and one over the encoded block
// scales (or F16/BF16 values).
void convert_rows(std::string_view what, type from, std::span<const uint8_t> src, type to,
                  std::span<uint8_t> dst, int64_t ne0, int64_t n_rows);

// One step of progress: called before tensor `index` (0-based) of `count` is
// written; `from` == `to` for a tensor copied unchanged. Sizes in bytes.
struct quantize_progress {
    size_t index = 0;
    size_t count = 0;
    std::string_view name;
    type from = TSR_TYPE_F32;
    type to = TSR_TYPE_F32;
    // The type the target's rule picked (rule_type_for) for a weight matrix
    // the rules apply to (is_weight_matrix, of a float or block-quantized
    // type), `from` for the others; differs from `to` when ne[0] made it fall back
    // (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0) or fit no block (copied
    // unchanged).
    type wanted = TSR_TYPE_F32;
    const int64_t * ne = nullptr; // 4 entries
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
};
using quantize_progress_fn = std::function<void(const quantize_progress &)>;

struct quantize_params {
    file_type target = TSR_TYPE_Q8_0; // a plain type or a mix (file_type_q4_k_m, file_type_q5_k_m, ...)
    // Converting a tensor that is already block-quantized (Q8_0 -> Q4_0, ...)
    // compounds the rounding errors: refused unless this is set.
    bool allow_requantize = false;
    quantize_progress_fn progress; // may be empty
};

// Summary of a finished quantize_file.
struct quantize_result {
    size_t n_tensors = 0;
    size_t n_converted = 0;
    uint64_t bytes_in = 0;  // tensor data bytes read
    uint64_t bytes_out = 0; // tensor data bytes written
    // Converted tensors per written type, in order of first use.
    std::vector<std::pair<type, size_t>> n_by_type;
};

// Reads the GGUF file `in` and writes `out` atomically (gguf::writer: a
// temporary file renamed into place; `out` is never left half-written).
// Tensor data is converted one tensor at a time while writing, so memory use
// is bounded by the largest tensor. Throws tessera::error naming the file or
// tensor: `in` missing or not GGUF, target not a quantize target (the
// message lists quantize_target_names()), a tensor to
// convert of a type without to_float, a quantized tensor without
// allow_requantize, `in` and `out` the same file, a tensor to convert that
// holds NaN or Inf or a value its new type cannot hold (convert_rows; the
// message starts with `in`'s name; an existing `out` is left as it was).
// Tensors copied unchanged are not checked. When no tensor is
// converted (n_converted 0) `out` keeps `in`'s general.file_type and
// general.quantization_version (or has none), not the target's.
quantize_result quantize_file(const std::filesystem::path & in, const std::filesystem::path & out,
                              const quantize_params & p);

} // namespace tessera::llm
