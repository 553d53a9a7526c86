// tessera/llm/quantize.hpp — converting the weights of a GGUF model file to
// another element type (F32, F16, Q8_0, Q4_0), as `tessera quantize` does.
//
// Which tensors change: every 2-D tensor whose ne[0] is a multiple of the
// target type's block size (token_embd and output included); 1-D tensors
// (norm weights, biases) and tensors of other ranks are copied unchanged.
// A converted tensor is decoded to F32 with its type's to_float, then encoded
// with the target's reference from_float (tessera/core/types.hpp), so Q8_0 and
// Q4_0 bytes are exactly those the GGUF block format defines.
//
// Metadata is copied in file order; general.file_type is set to the llama.cpp
// file-type id of the target (see file_type_of) and
// general.quantization_version to 2 (the current Q4_0/Q8_0 block layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::llm {

// general.quantization_version written by quantize and synth (GGUF
// spec: "general.quantization_version: version of quantization format").
inline constexpr uint32_t quantization_version = 2;

// The general.file_type id llama.cpp uses for a model whose weights are
// mostly `t` (llama_ftype: ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2,
// MOSTLY_Q8_0 = 7, MOSTLY_BF16 = 32). Throws tessera::error for other types.
uint32_t file_type_of(type t);

// True when `t` is a type quantize_file can write (F32, F16, BF16, Q8_0, Q4_0).
bool is_quantize_target(type t);

// True when quantize_file converts tensor `ti` to `target`: 2-D, ne[0] a
// multiple of target's block size, and not already of type `target`.
bool should_convert(const gguf::tensor_info & ti, type target);

// Converts `n_rows` rows of `ne0` elements from `src` (type `from`, packed rows)
// into `dst` (type `to`, packed rows) through F32. dst.size() must equal
// n_rows * row_size(to, ne0) and src.size() n_rows * row_size(from, ne0).
// Throws tessera::error when `from` has no to_float, `to` has no from_float,
// or the sizes disagree (`what` names the tensor in the message).
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
    const int64_t * ne = nullptr; // 4 entries
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
};
using quantize_progress_fn = std::function<void(const quantize_progress &)>;

struct quantize_params {
    type target = TSR_TYPE_Q8_0;
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
};

// Reads the GGUF file `in` and writes `out` atomically (gguf::writer: a
// temporary file renamed into place; `out` is never left half-written).
// Tensor data is converted one tensor at a time while writing, so memory use
// is bounded by the largest tensor. Throws tessera::error naming the file or
// tensor: `in` missing or not GGUF, target not a quantize target, a tensor to
// convert of a type without to_float, a quantized tensor without
// allow_requantize, `in` and `out` the same file.
quantize_result quantize_file(const std::filesystem::path & in, const std::filesystem::path & out,
                              const quantize_params & p);

} // namespace tessera::llm
