// llm/quantize.cpp — converting a GGUF model's weights to another type.
//
// The per-tensor type rule and the file-type ids: llm/file_type.cpp.
#include "tessera/llm/quantize.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/gguf/writer.hpp"

namespace tessera::llm {

bool should_convert(const gguf::tensor_info & ti, const file_type & target, uint32_t n_layer, bool tied_output) {
    const auto to = tensor_type_for(target, ti.name, std::span<const int64_t>(ti.ne, ti.n_dims), n_layer, tied_output);
    return to && *to != ti.type;
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
        throw error(fmt::format("cannot quantize to {} (supported: {})", file_type_name(p.target),
                                quantize_target_names()));
    }
    if (in.empty()) throw error("quantize: the input path is empty");
    if (out.empty()) throw error("quantize: the output path is empty");
    std::error_code ec;
    if (!std::filesystem::exists(in, ec)) { // ec: why it could not be looked up (a symlink loop, a permission)
        throw error(fmt::format("{}: {}", in.string(), ec ? ec.message() : std::string("no such file")));
    }
    if (gguf::same_file(in, out)) {
        throw error(fmt::format("{}: input and output are the same file", out.string()));
    }
    auto r = std::make_shared<gguf::reader>(in);

    gguf::writer w;
    w.copy_all_kv(*r);
    w.set_u32("general.file_type", file_type_of(p.target));
    w.set_u32("general.quantization_version", quantization_version);

    const uint32_t n_layer = n_layer_of(*r);
    const bool tied_output = r->find_tensor("output.weight") == nullptr;
    quantize_result res;
    res.n_tensors = r->n_tensors();
    const size_t count = r->n_tensors();
    for (size_t i = 0; i < count; ++i) {
        const gguf::tensor_info & ti = r->tensors()[i];
        const std::span<const int64_t> ne(ti.ne, ti.n_dims);
        const std::optional<type> chosen = tensor_type_for(p.target, ti.name, ne, n_layer, tied_output);
        const bool convert = chosen && *chosen != ti.type;
        const type to = convert ? *chosen : ti.type;
        const type wanted = ti.n_dims == 2 ? rule_type_for(p.target, ti.name, n_layer, tied_output) : ti.type;
        if (convert) {
            // Check up front so nothing is written for a file that must fail.
            const type_traits & tf = get_type_traits(ti.type);
            if (tf.to_float == nullptr) {
                throw error(fmt::format("{}: tensor '{}' has type {}, which cannot be converted yet", r->name(),
                                        ti.name, tf.name));
            }
            if (tf.is_quantized && !p.allow_requantize) {
                // To a float type nothing rounds again, but the file would
                // hold the rounded weights in the original's clothes.
                const bool to_float = !get_type_traits(to).is_quantized;
                throw error(fmt::format("{}: tensor '{}' is already quantized ({}); converting it to {} {} "
                                        "(allow with --allow-requantize)",
                                        r->name(), ti.name, tf.name, type_name(to),
                                        to_float ? "gives back its rounded values, not the original weights"
                                                 : "would compound the rounding error"));
            }
        }
        const uint64_t bytes_out = convert ? row_size(to, ti.ne[0]) * static_cast<uint64_t>(ti.n_elements() / ti.ne[0])
                                           : ti.size;
        res.bytes_in += ti.size;
        res.bytes_out += bytes_out;
        if (convert) {
            ++res.n_converted;
            auto it = std::find_if(res.n_by_type.begin(), res.n_by_type.end(), [to](const auto & e) { return e.first == to; });
            if (it == res.n_by_type.end()) it = res.n_by_type.insert(it, {to, 0});
            ++it->second;
        }

        quantize_progress pr{i, count, ti.name, ti.type, to, wanted, ti.ne, ti.size, bytes_out};
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
    if (res.n_converted == 0) {
        // Nothing took the target type: the file keeps the input's own
        // type keys rather than claim one none of its tensors has.
        for (const char * key : {"general.file_type", "general.quantization_version"}) {
            if (r->find_key(key) != nullptr) {
                w.copy_kv(*r, key);
            } else {
                w.remove(key);
            }
        }
    }
    w.write(out);
    return res;
}

} // namespace tessera::llm
