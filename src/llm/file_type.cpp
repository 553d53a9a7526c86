// llm/file_type.cpp — quantization targets and their per-tensor type rule
// (see tessera/llm/file_type.hpp for the rules and the id table).
#include "tessera/llm/file_type.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::llm {

namespace {

// The layer index N of a tensor named "blk.N.<rest>", with <rest> stored in
// `rest`; nullopt for other names.
std::optional<int64_t> block_index(std::string_view name, std::string_view & rest) {
    constexpr std::string_view prefix = "blk.";
    if (!name.starts_with(prefix)) return std::nullopt;
    const char * b = name.data() + prefix.size();
    const char * e = name.data() + name.size();
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(b, e, n);
    if (ec != std::errc() || p == b || p == e || *p != '.' || n < 0) return std::nullopt;
    rest = std::string_view(p + 1, static_cast<size_t>(e - (p + 1)));
    return n;
}

// True for the "medium" mixes, whose attn_v / ffn_down get Q6_K in the
// use_more_bits layers.
bool is_medium(file_type::mix m) { return m == file_type::mix::q4_k_m || m == file_type::mix::q5_k_m; }

std::string upper(std::string_view s) {
    std::string u(s);
    std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return u;
}

} // namespace

std::vector<file_type> quantize_targets() {
    return {TSR_TYPE_F32,     TSR_TYPE_F16,     TSR_TYPE_BF16,    TSR_TYPE_Q8_0,   TSR_TYPE_Q4_0,
            TSR_TYPE_Q5_0,    TSR_TYPE_Q5_1,    TSR_TYPE_Q4_K,    TSR_TYPE_Q5_K,   TSR_TYPE_Q6_K,
            file_type_q4_k_s, file_type_q4_k_m, file_type_q5_k_s, file_type_q5_k_m};
}

std::string quantize_target_names() {
    std::string s;
    for (const file_type & ft : quantize_targets()) s += (s.empty() ? "" : ", ") + file_type_name(ft);
    return s;
}

bool is_quantize_target(const file_type & ft) {
    const std::vector<file_type> all = quantize_targets();
    if (std::find(all.begin(), all.end(), ft) == all.end()) return false;
    // The mixes also write Q6_K and its fallback Q8_0; every K-quant its
    // fallback (Q5_0, Q5_1).
    std::vector<type> used = {ft.base, k_quant_fallback(ft.base)};
    if (ft.kind != file_type::mix::none) used.insert(used.end(), {TSR_TYPE_Q6_K, TSR_TYPE_Q8_0});
    return std::all_of(used.begin(), used.end(), [](type t) { return get_type_traits(t).from_float != nullptr; });
}

std::string file_type_name(const file_type & ft) {
    switch (ft.kind) {
    case file_type::mix::q4_k_s: return "Q4_K_S";
    case file_type::mix::q4_k_m: return "Q4_K_M";
    case file_type::mix::q5_k_s: return "Q5_K_S";
    case file_type::mix::q5_k_m: return "Q5_K_M";
    case file_type::mix::none: break;
    }
    return std::string(type_name(ft.base));
}

file_type parse_file_type(std::string_view name) {
    const std::string up = upper(name);
    for (const file_type & ft : quantize_targets()) {
        if (up == file_type_name(ft) && is_quantize_target(ft)) return ft;
    }
    throw error(fmt::format("unknown or unsupported quantization type '{}' (supported: {})", printable_utf8(name, 64),
                            quantize_target_names()));
}

uint32_t file_type_of(const file_type & ft) {
    switch (ft.kind) {
    case file_type::mix::q4_k_s: return 14; // MOSTLY_Q4_K_S
    case file_type::mix::q4_k_m: return 15; // MOSTLY_Q4_K_M
    case file_type::mix::q5_k_s: return 16; // MOSTLY_Q5_K_S
    case file_type::mix::q5_k_m: return 17; // MOSTLY_Q5_K_M
    case file_type::mix::none: break;
    }
    switch (ft.base) {
    case TSR_TYPE_F32: return 0;   // ALL_F32
    case TSR_TYPE_F16: return 1;   // MOSTLY_F16
    case TSR_TYPE_Q4_0: return 2;  // MOSTLY_Q4_0
    case TSR_TYPE_Q8_0: return 7;  // MOSTLY_Q8_0
    case TSR_TYPE_Q5_0: return 8;  // MOSTLY_Q5_0
    case TSR_TYPE_Q5_1: return 9;  // MOSTLY_Q5_1
    case TSR_TYPE_Q4_K: return 14; // no id of its own: MOSTLY_Q4_K_S (see the header)
    case TSR_TYPE_Q5_K: return 16; // no id of its own: MOSTLY_Q5_K_S
    case TSR_TYPE_Q6_K: return 18; // MOSTLY_Q6_K
    case TSR_TYPE_BF16: return 32; // MOSTLY_BF16
    default: break;
    }
    throw error(fmt::format("no model file type for element type {}", type_name(ft.base)));
}

std::string_view file_type_description(int64_t id) {
    switch (id) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return {};
    }
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

type rule_type_for(const file_type & ft, std::string_view name, uint32_t n_layer, bool tied_output) {
    if (ft.kind == file_type::mix::none) return ft.base;
    if (name == "output.weight" || (tied_output && name == "token_embd.weight")) return TSR_TYPE_Q6_K;
    if (is_medium(ft.kind)) {
        std::string_view rest;
        if (const auto il = block_index(name, rest);
            il && (rest == "attn_v.weight" || rest == "ffn_down.weight") && use_more_bits(*il, n_layer)) {
            return TSR_TYPE_Q6_K;
        }
    }
    return ft.base; // Q4_K or Q5_K
}

type k_quant_fallback(type t) {
    switch (t) {
    case TSR_TYPE_Q4_K: return TSR_TYPE_Q5_0;
    case TSR_TYPE_Q5_K: return TSR_TYPE_Q5_1;
    case TSR_TYPE_Q6_K: return TSR_TYPE_Q8_0;
    default: return t;
    }
}

size_t n_dims_of(std::span<const int64_t> ne) {
    size_t n = ne.size();
    while (n > 1 && ne[n - 1] == 1) --n;
    return n;
}

bool is_weight_matrix(std::string_view name, std::span<const int64_t> ne) {
    return name.ends_with("weight") && n_dims_of(ne) == 2;
}

std::optional<type> matrix_type_for(const file_type & ft, std::string_view name, int64_t ne0, uint32_t n_layer,
                                    bool tied_output) {
    type t = rule_type_for(ft, name, n_layer, tied_output);
    if (ne0 % get_type_traits(t).block_size != 0) t = k_quant_fallback(t);
    if (ne0 % get_type_traits(t).block_size != 0) return std::nullopt;
    return t;
}

std::optional<type> tensor_type_for(const file_type & ft, std::string_view name, std::span<const int64_t> ne,
                                    uint32_t n_layer, bool tied_output) {
    if (n_dims_of(ne) != 2) return std::nullopt;
    return matrix_type_for(ft, name, ne[0], n_layer, tied_output);
}

uint32_t n_layer_of(const gguf::reader & r) {
    // The layers the tensor names show: 1 + the largest N of blk.N.*; and
    // the same without absurd layer numbers (N of 2^20 or more).
    int64_t n_named = 0, n_plausible = 0;
    std::string_view last_layer_tensor;
    for (const gguf::tensor_info & ti : r.tensors()) {
        std::string_view rest;
        const auto il = block_index(ti.name, rest);
        if (!il) continue;
        if (*il >= n_named) {
            n_named = *il + 1;
            last_layer_tensor = ti.name;
        }
        if (*il < int64_t(1) << 20) n_plausible = std::max(n_plausible, *il + 1);
    }
    if (const auto arch = r.find_string("general.architecture")) {
        const std::string key = fmt::format("{}.block_count", *arch);
        if (const auto n = r.find_int(key)) {
            if (*n < 0 || *n > int64_t(1) << 20) {
                throw error(fmt::format("{}: key '{}' = {} is not a layer count", r.name(), key, *n));
            }
            // Fewer layers than the tensors have would make the rules pick
            // types by the wrong layer count (every layer "past the end");
            // the model loader refuses such a file too. More is allowed (a
            // file may hold some of a model's tensors).
            if (n_named > *n) {
                throw error(fmt::format("{}: key '{}' = {}, but tensor '{}' belongs to layer {} (the tensors name {} "
                                        "layers)",
                                        r.name(), key, *n, tessera::printable(last_layer_tensor), n_named - 1, n_named));
            }
            return static_cast<uint32_t>(*n);
        }
    }
    // Without the key: tensors of absurd layer numbers are not counted.
    return static_cast<uint32_t>(n_plausible);
}

} // namespace tessera::llm
