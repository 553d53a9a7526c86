// llm/quantize.cpp — converting a GGUF model's weights to another type.
//
// File-type ids: llama.cpp's llama_ftype enumeration (the values stored in
// general.file_type by its converters and quantizer).
#include "tessera/llm/quantize.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/gguf/writer.hpp"

namespace tessera::llm {

uint32_t file_type_of(type t) {
    switch (t) {
    case TSR_TYPE_F32: return 0;  // ALL_F32
    case TSR_TYPE_F16: return 1;  // MOSTLY_F16
    case TSR_TYPE_Q4_0: return 2; // MOSTLY_Q4_0
    case TSR_TYPE_Q8_0: return 7; // MOSTLY_Q8_0
    case TSR_TYPE_BF16: return 32; // MOSTLY_BF16
    default: break;
    }
    throw error(fmt::format("no model file type for element type {}", type_name(t)));
}

bool is_quantize_target(type t) {
    switch (t) {
    case TSR_TYPE_F32:
    case TSR_TYPE_F16:
    case TSR_TYPE_BF16:
    case TSR_TYPE_Q8_0:
    case TSR_TYPE_Q4_0: return get_type_traits(t).from_float != nullptr;
    default: return false;
    }
}

bool should_convert(const gguf::tensor_info & ti, type target) {
    if (ti.n_dims != 2 || ti.type == target) return false;
    return ti.ne[0] % get_type_traits(target).block_size == 0;
}

void convert_rows(std::string_view what, type from, std::span<const uint8_t> src, type to,
                  std::span<uint8_t> dst, int64_t ne0, int64_t n_rows) {
    const type_traits & tf = get_type_traits(from);
    const type_traits & tt = get_type_traits(to);
    if (tf.to_float == nullptr) {
        throw error(fmt::format("tensor '{}': type {} cannot be converted yet (no decoder for it)", what, tf.name));
    }
    if (tt.from_float == nullptr) {
        throw error(fmt::format("tensor '{}': type {} cannot be written yet (no encoder for it)", what, tt.name));
    }
    const size_t rs_in = row_size(from, ne0);
    const size_t rs_out = row_size(to, ne0);
    if (n_rows < 0 || src.size() != rs_in * static_cast<size_t>(n_rows) ||
        dst.size() != rs_out * static_cast<size_t>(n_rows)) {
        throw error(fmt::format("tensor '{}': {} rows of {} elements need {} bytes in and {} out, got {} and {}", what,
                                n_rows, ne0, rs_in * static_cast<size_t>(n_rows),
                                rs_out * static_cast<size_t>(n_rows), src.size(), dst.size()));
    }
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < n_rows; ++r) {
        tf.to_float(src.data() + static_cast<size_t>(r) * rs_in, row.data(), ne0);
        tt.from_float(row.data(), dst.data() + static_cast<size_t>(r) * rs_out, ne0);
    }
}

quantize_result quantize_file(const std::filesystem::path & in, const std::filesystem::path & out,
                              const quantize_params & p) {
    if (!is_quantize_target(p.target)) {
        throw error(fmt::format("cannot quantize to {} (supported: F32, F16, BF16, Q8_0, Q4_0)", type_name(p.target)));
    }
    std::error_code ec;
    if (!std::filesystem::exists(in, ec)) throw error(fmt::format("{}: no such file", in.string()));
    if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec)) {
        throw error(fmt::format("{}: input and output are the same file", out.string()));
    }
    auto r = std::make_shared<gguf::reader>(in);

    gguf::writer w;
    w.copy_all_kv(*r);
    w.set_u32("general.file_type", file_type_of(p.target));
    w.set_u32("general.quantization_version", quantization_version);

    quantize_result res;
    res.n_tensors = r->n_tensors();
    const size_t count = r->n_tensors();
    for (size_t i = 0; i < count; ++i) {
        const gguf::tensor_info & ti = r->tensors()[i];
        const bool convert = should_convert(ti, p.target);
        const type to = convert ? p.target : ti.type;
        const std::span<const int64_t> ne(ti.ne, ti.n_dims);
        if (convert) {
            // Check up front so nothing is written for a file that must fail.
            const type_traits & tf = get_type_traits(ti.type);
            if (tf.to_float == nullptr) {
                throw error(fmt::format("{}: tensor '{}' has type {}, which cannot be converted yet", r->name(),
                                        ti.name, tf.name));
            }
            if (tf.is_quantized && !p.allow_requantize) {
                throw error(fmt::format("{}: tensor '{}' is already quantized ({}); converting it to {} would "
                                        "compound the rounding error (allow with --allow-requantize)",
                                        r->name(), ti.name, tf.name, type_name(p.target)));
            }
        }
        const uint64_t bytes_out = convert ? row_size(to, ti.ne[0]) * static_cast<uint64_t>(ti.n_elements() / ti.ne[0])
                                           : ti.size;
        res.bytes_in += ti.size;
        res.bytes_out += bytes_out;
        if (convert) ++res.n_converted;

        quantize_progress pr{i, count, ti.name, ti.type, to, ti.ne, ti.size, bytes_out};
        auto report = [fn = p.progress, pr]() {
            if (fn) fn(pr);
        };
        if (!convert) {
            w.add_tensor_fill(ti.name, ti.type, ne, [r, &ti, report](std::span<uint8_t> dst) {
                report();
                std::copy(ti.data, ti.data + ti.size, dst.begin());
            });
        } else {
            w.add_tensor_fill(ti.name, to, ne, [r, &ti, to, report](std::span<uint8_t> dst) {
                report();
                convert_rows(ti.name, ti.type, ti.bytes(), to, dst, ti.ne[0], ti.n_elements() / ti.ne[0]);
            });
        }
    }
    w.write(out);
    return res;
}

} // namespace tessera::llm
