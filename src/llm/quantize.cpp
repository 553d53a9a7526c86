// llm/quantize.cpp — converting a GGUF model's weights to another type.
//
// The per-tensor type rule and the file-type ids: llm/file_type.cpp.
#include "tessera/llm/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/gguf/writer.hpp"

namespace tessera::llm {

namespace {

// True when every one of the n values is finite (no NaN, no +-Inf): one
// branch-free pass over the exponent bits, which the compiler vectorizes.
bool all_finite(const float * x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, x + i, sizeof bits);
        bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

// A stored field of an encoded block that must hold a finite number: its
// byte offset in the block, its width (F16 or BF16) and what it is, for
// the message.
struct finite_field {
    size_t offset;
    type t; // TSR_TYPE_F16 or TSR_TYPE_BF16
    const char * what;
};

bool field_is_finite(const uint8_t * p, type t) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    const uint16_t exp = t == TSR_TYPE_F16 ? 0x7c00 : 0x7f80; // F16: 5 exponent bits; BF16: 8
    return (h & exp) != exp;
}

// The fields of one block (one element for F16 and BF16) of type `t` that
// hold numbers in floating point, per the block layouts of
// tessera/core/types.hpp; empty where finite input cannot give a
// non-finite field (F32, whose values are the checked input; Q8_K).
// Throws for a type with an encoder but no entry here, so a new encoder
// cannot skip the check unnoticed.
std::vector<finite_field> finite_fields_of(type t) {
    switch (t) {
    case TSR_TYPE_F32: return {};
    case TSR_TYPE_F16: return {{0, TSR_TYPE_F16, "value"}};
    case TSR_TYPE_BF16: return {{0, TSR_TYPE_BF16, "value"}};
    case TSR_TYPE_Q8_0: return {{offsetof(block_q8_0, d), TSR_TYPE_F16, "scale"}};
    case TSR_TYPE_Q4_0: return {{offsetof(block_q4_0, d), TSR_TYPE_F16, "scale"}};
    case TSR_TYPE_Q5_0: return {{offsetof(block_q5_0, d), TSR_TYPE_F16, "scale"}};
    case TSR_TYPE_Q5_1:
        return {{offsetof(block_q5_1, d), TSR_TYPE_F16, "scale"}, {offsetof(block_q5_1, m), TSR_TYPE_F16, "minimum"}};
    case TSR_TYPE_Q4_K:
        return {{offsetof(block_q4_k, d), TSR_TYPE_F16, "scale (d)"},
                {offsetof(block_q4_k, dmin), TSR_TYPE_F16, "scale of the minimums (dmin)"}};
    case TSR_TYPE_Q5_K:
        return {{offsetof(block_q5_k, d), TSR_TYPE_F16, "scale (d)"},
                {offsetof(block_q5_k, dmin), TSR_TYPE_F16, "scale of the minimums (dmin)"}};
    case TSR_TYPE_Q6_K: return {{offsetof(block_q6_k, d), TSR_TYPE_F16, "scale (d)"}};
    // Q8_K's F32 d is 1 / (-127 / v) for a finite v: finite (0 where -127 / v overflows).
    case TSR_TYPE_Q8_K: return {};
    default: break;
    }
    throw error(fmt::format("cannot check the values written as {}: its block layout has no entry in the "
                            "converter's list",
                            type_name(t)));
}

// Column (in the row) of the first value of largest magnitude among x[0, n).
int64_t largest_magnitude(const float * x, int64_t n) {
    int64_t at = 0;
    for (int64_t i = 1; i < n; ++i) {
        if (std::fabs(x[i]) > std::fabs(x[at])) at = i;
    }
    return at;
}

// True for the element types quantize may convert: F32, F16, BF16 and the
// block-quantized ones (whether a decoder exists is checked later, with a
// message); integer tensors and F64 are not weights and are copied.
bool is_convertible_type(type t) {
    return t == TSR_TYPE_F32 || t == TSR_TYPE_F16 || t == TSR_TYPE_BF16 || get_type_traits(t).is_quantized;
}

// The type the target's rule picks for tensor `ti` (before the ne[0]
// fallback), or nullopt where the rules do not apply to it: not a weight
// matrix (is_weight_matrix) or not of a convertible type.
std::optional<type> rule_type_of(const gguf::tensor_info & ti, const file_type & target, uint32_t n_layer,
                                 bool tied_output) {
    if (!is_convertible_type(ti.type) || !is_weight_matrix(ti.name, std::span<const int64_t>(ti.ne, ti.n_dims))) {
        return std::nullopt;
    }
    return rule_type_for(target, ti.name, n_layer, tied_output);
}

// The type tensor `ti` is written in under `target`: tensor_type_for's for
// a tensor the rules apply to (rule_type_of), nullopt for one copied.
std::optional<type> chosen_type_of(const gguf::tensor_info & ti, const file_type & target, uint32_t n_layer,
                                   bool tied_output) {
    if (!rule_type_of(ti, target, n_layer, tied_output)) return std::nullopt;
    return tensor_type_for(target, ti.name, std::span<const int64_t>(ti.ne, ti.n_dims), n_layer, tied_output);
}

} // namespace

bool should_convert(const gguf::tensor_info & ti, const file_type & target, uint32_t n_layer, bool tied_output) {
    const auto to = chosen_type_of(ti, target, n_layer, tied_output);
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
    if (n_rows < 0) throw error(fmt::format("tensor '{}': {} rows (must be >= 0)", what, n_rows));
    size_t need_in = 0, need_out = 0; // a product that overflows needs more than any span holds
    if (__builtin_mul_overflow(rs_in, static_cast<size_t>(n_rows), &need_in) ||
        __builtin_mul_overflow(rs_out, static_cast<size_t>(n_rows), &need_out)) {
        throw error(fmt::format("tensor '{}': {} rows of {} elements do not fit in memory", what, n_rows, ne0));
    }
    if (src.size() != need_in || dst.size() != need_out) {
        throw error(fmt::format("tensor '{}': {} rows of {} elements need {} bytes in and {} out, got {} and {}", what,
                                n_rows, ne0, need_in, need_out, src.size(), dst.size()));
    }
    const std::vector<finite_field> fields = finite_fields_of(to);
    const int64_t bs = tt.block_size;
    const int64_t n_blocks = ne0 / bs;
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < n_rows; ++r) {
        tf.to_float(src.data() + static_cast<size_t>(r) * rs_in, row.data(), ne0);
        if (!all_finite(row.data(), ne0)) {
            const auto c = std::find_if(row.begin(), row.end(), [](float v) { return !std::isfinite(v); }) - row.begin();
            throw error(fmt::format("tensor '{}': value {} at row {}, column {} is not a finite number (converting {} "
                                    "to {})",
                                    tessera::printable(what), row[size_t(c)], r, c, tf.name, tt.name));
        }
        uint8_t * out = dst.data() + static_cast<size_t>(r) * rs_out;
        tt.from_float(row.data(), out, ne0);
        if (fields.empty()) continue;
        // Finite values can still overflow what is stored: an F16 value past
        // 65504, a block scale computed from a huge value.
        for (int64_t b = 0; b < n_blocks; ++b) {
            const uint8_t * blk = out + static_cast<size_t>(b) * tt.type_size;
            for (const finite_field & f : fields) {
                if (field_is_finite(blk + f.offset, f.t)) continue;
                const int64_t c0 = b * bs;
                const int64_t c = c0 + largest_magnitude(row.data() + c0, bs);
                const std::string why =
                    bs == 1 ? fmt::format("its largest finite value is {}",
                                          to == TSR_TYPE_F16 ? f16_to_f32(0x7bff) : bf16_to_f32(0x7f7f))
                            : fmt::format("the {} of its {}, columns {}..{}, overflows {}", f.what,
                                          bs == qk_k ? "super-block" : "block", c0, c0 + bs - 1, type_name(f.t));
                throw error(fmt::format("tensor '{}': value {} at row {}, column {} does not fit {} ({})", tessera::printable(what),
                                        row[size_t(c)], r, c, tt.name, why));
            }
        }
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
    // Why it cannot be looked up: missing, a symlink loop, a permission, "x.gguf/".
    if (const std::string why = gguf::lookup_failure(in); !why.empty()) {
        throw error(fmt::format("{}: {}", printable_utf8(in.string()), why));
    }
    if (gguf::same_file(in, out)) {
        throw error(fmt::format("{}: input and output are the same file", printable_utf8(out.string())));
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
        const std::optional<type> chosen = chosen_type_of(ti, p.target, n_layer, tied_output);
        const bool convert = chosen && *chosen != ti.type;
        const type to = convert ? *chosen : ti.type;
        const type wanted = rule_type_of(ti, p.target, n_layer, tied_output).value_or(ti.type);
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
                try {
                    convert_rows(ti.name, ti.type, ti.bytes(), to, dst, ti.ne[0], ti.n_elements() / ti.ne[0]);
                } catch (const error & e) {
                    throw error(fmt::format("{}: {}", r->name(), e.what())); // which input file
                }
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
