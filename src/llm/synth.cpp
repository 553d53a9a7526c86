// llm/synth.cpp — writing random-weight Llama models (see synth.hpp for the
// layout and the value generator).
#include "tessera/llm/synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "tessera/core/printable.hpp"

#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/quantize.hpp"

namespace tessera::llm {

namespace {

// FNV-1a, 64-bit (Fowler, Noll, Vo: offset basis 14695981039346656037,
// prime 1099511628211).
uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

// splitmix64 finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom
// number generators", OOPSLA 2014): spreads nearby seeds apart.
uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Draws uniform values in [-a, a] from one tensor's stream.
struct value_stream {
    std::mt19937_64 rng;
    double a;
    value_stream(uint64_t seed, std::string_view name, int64_t fan_in)
        : rng(splitmix64(seed ^ fnv1a64(name))), a(std::sqrt(3.0 / static_cast<double>(fan_in))) {}
    void fill(std::span<float> out) {
        constexpr double two_pow_m53 = 1.0 / 9007199254740992.0; // 2^-53
        for (float & v : out) {
            const double u = static_cast<double>(rng() >> 11) * two_pow_m53; // [0, 1)
            v = static_cast<float>((2.0 * u - 1.0) * a);
        }
    }
};

struct tensor_plan {
    std::string name;
    int64_t ne[2] = {1, 1};
    uint32_t n_dims = 1;
    type t = TSR_TYPE_F32;
    std::vector<float> values; // 1-D tensors: the values (norm weights: ones)
};

// Llama 3.1's RoPE frequency divisors for n_rot dimensions, as its
// converter writes them into rope_freqs.weight (Meta's apply_scaling in the
// Llama 3.1 reference code: scale factor 8, low- and high-frequency factors 1
// and 4, original context 8192): 1 for wavelengths below 8192 / 4, 8 above
// 8192 / 1, and 1 / ((1 - s) / 8 + s), s = (8192 / wavelength - 1) / (4 - 1),
// between.
std::vector<float> llama31_rope_factors(uint32_t n_rot, double freq_base) {
    constexpr double factor = 8, low = 1, high = 4, old_ctx = 8192;
    constexpr double pi = 3.14159265358979323846;
    std::vector<float> out;
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
        const double freq = std::pow(freq_base, -2.0 * i / n_rot);
        const double wavelen = 2 * pi / freq;
        double f = 1;
        if (wavelen > old_ctx / low) {
            f = factor;
        } else if (wavelen >= old_ctx / high) {
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            f = 1 / ((1 - smooth) / factor + smooth);
        }
        out.push_back(static_cast<float>(f));
    }
    return out;
}

// The tensors of a model in file order, each weight matrix in the type
// matrix_type_for gives it. Throws when the target is not supported or a
// matrix fits no block of its type.
std::vector<tensor_plan> plan_tensors(const synth_shape & s, uint32_t n_vocab, const file_type & wtype,
                                      bool llama31_rope = false, double freq_base = 10000) {
    const int64_t E = s.n_embd, V = n_vocab, F = s.n_ff;
    const int64_t EKV = static_cast<int64_t>(s.head_size()) * s.n_head_kv;
    const int64_t EQ = static_cast<int64_t>(s.head_size()) * s.n_head;
    std::vector<tensor_plan> out;
    auto w = [&](std::string name, int64_t ne0, int64_t ne1) {
        const std::optional<type> t = matrix_type_for(wtype, name, ne0, s.n_layer);
        if (!t) {
            const type want = k_quant_fallback(rule_type_for(wtype, name, s.n_layer));
            // The row length is n_embd, n_ff or n_head x head size
            // (attn_output's, which --head-dim sets); say which.
            throw error(fmt::format("synth: {}: rows of {} elements are not a multiple of the {} block size {} (n_embd {}, n_ff {}, "
                                    "n_head x head size {} x {} = {})",
                                    name, ne0, type_name(want), get_type_traits(want).block_size, s.n_embd, s.n_ff, s.n_head,
                                    s.head_size(), EQ));
        }
        out.push_back({std::move(name), {ne0, ne1}, 2, *t, {}});
    };
    auto norm = [&](std::string name) {
        out.push_back({std::move(name), {E, 1}, 1, TSR_TYPE_F32, std::vector<float>(size_t(E), 1.0f)});
    };
    w("token_embd.weight", E, V);
    norm("output_norm.weight");
    w("output.weight", E, V);
    if (llama31_rope) {
        const uint32_t n_rot = s.head_size();
        out.push_back({"rope_freqs.weight", {n_rot / 2, 1}, 1, TSR_TYPE_F32, llama31_rope_factors(n_rot, freq_base)});
    }
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        norm(p + "attn_norm.weight");
        w(p + "attn_q.weight", E, EQ);
        w(p + "attn_k.weight", E, EKV);
        w(p + "attn_v.weight", E, EKV);
        w(p + "attn_output.weight", EQ, E);
        norm(p + "ffn_norm.weight");
        w(p + "ffn_gate.weight", E, F);
        w(p + "ffn_up.weight", E, F);
        w(p + "ffn_down.weight", F, E);
    }
    return out;
}

// Checks the target and the shape (the block sizes through plan_tensors).
void check_shape(const synth_shape & s, const file_type & wtype) {
    if (!is_quantize_target(wtype)) {
        throw error(fmt::format("synth: weight type {} is not supported ({})", file_type_name(wtype),
                                quantize_target_names()));
    }
    if (s.n_embd == 0 || s.n_layer == 0 || s.n_head == 0 || s.n_head_kv == 0 || s.n_ff == 0 || s.n_ctx == 0) {
        throw error(fmt::format("synth: shape '{}' has a zero dimension", s.name));
    }
    if (s.head_dim == 0 && (s.n_embd % s.n_head != 0 || (s.n_embd / s.n_head) % 2 != 0)) {
        throw error(fmt::format("synth: n_embd {} must be a multiple of n_head {} with an even head size", s.n_embd,
                                s.n_head));
    }
    if (s.head_dim % 2 != 0 || s.head_dim > 4096) {
        throw error(fmt::format("synth: head size {} must be even and at most 4096", s.head_dim));
    }
    if (s.n_head % s.n_head_kv != 0) {
        throw error(fmt::format("synth: n_head {} is not a multiple of n_head_kv {}", s.n_head, s.n_head_kv));
    }
    plan_tensors(s, 1, wtype);
}

} // namespace

synth_shape synth_preset(std::string_view name) {
    if (name == "1b") return {"1b", 2048, 22, 32, 4, 5632, 2048};
    if (name == "135m") return {"135m", 576, 30, 9, 3, 1536, 2048};
    if (name == "tiny") return {"tiny", 64, 2, 4, 2, 128, 2048};
    throw error(fmt::format("synth: unknown preset '{}' (known: 1b, 135m, tiny)", printable_utf8(name, 64)));
}

std::vector<std::string> synth_preset_names() { return {"1b", "135m", "tiny"}; }

void synth_values(uint64_t seed, std::string_view name, int64_t fan_in, std::span<float> out) {
    if (fan_in <= 0) throw error(fmt::format("synth: tensor '{}': fan_in {} must be positive", name, fan_in));
    value_stream(seed, name, fan_in).fill(out);
}

uint64_t synth_data_size(const synth_shape & s, uint32_t n_vocab, const file_type & wtype, bool llama31_rope) {
    check_shape(s, wtype);
    uint64_t total = 0;
    for (const tensor_plan & t : plan_tensors(s, n_vocab, wtype, llama31_rope)) {
        total += row_size(t.t, t.ne[0]) * static_cast<uint64_t>(t.ne[1]);
    }
    return total;
}

std::string synth_model(const synth_params & p, const std::filesystem::path & out) {
    const synth_shape & s = p.shape;
    check_shape(s, p.wtype);
    if (p.vocab.empty()) throw error("synth: the vocabulary path is empty");
    if (const std::string why = gguf::lookup_failure(p.vocab); !why.empty()) {
        throw error(fmt::format("{}: {} (vocabulary GGUF)", printable_utf8(p.vocab.string()), why));
    }
    if (gguf::same_file(p.vocab, out)) {
        throw error(fmt::format("{}: the output is the vocabulary file itself", printable_utf8(out.string())));
    }
    const gguf::reader vocab(p.vocab);
    const gguf::value * tokens = vocab.find_key("tokenizer.ggml.tokens");
    if (tokens == nullptr || !tokens->is_array() || tokens->array_type() != gguf::value_type::STRING) {
        throw error(fmt::format("{}: not a vocabulary: no tokenizer.ggml.tokens array of strings", vocab.name()));
    }
    if (tokens->array_size() == 0) throw error(fmt::format("{}: not a vocabulary: tokenizer.ggml.tokens is empty", vocab.name()));
    const gguf::value * tokenizer_model = vocab.find_key("tokenizer.ggml.model");
    if (tokenizer_model == nullptr || tokenizer_model->type() != gguf::value_type::STRING) {
        throw error(fmt::format("{}: not a vocabulary: no tokenizer.ggml.model string", vocab.name()));
    }
    std::string copied_model(tokenizer_model->as_string());
    if (tokens->array_size() > (uint64_t(1) << 30)) {
        throw error(fmt::format("{}: {} tokens is too many", vocab.name(), tokens->array_size()));
    }
    const auto n_vocab = static_cast<uint32_t>(tokens->array_size());

    gguf::writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "synth-" + s.name);
    w.set_u32("llama.context_length", s.n_ctx);
    w.set_u32("llama.embedding_length", s.n_embd);
    w.set_u32("llama.block_count", s.n_layer);
    w.set_u32("llama.feed_forward_length", s.n_ff);
    w.set_u32("llama.rope.dimension_count", s.head_size());
    if (s.head_dim != 0) {
        w.set_u32("llama.attention.key_length", s.head_dim);
        w.set_u32("llama.attention.value_length", s.head_dim);
    }
    w.set_u32("llama.attention.head_count", s.n_head);
    w.set_u32("llama.attention.head_count_kv", s.n_head_kv);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", p.rms_eps);
    w.set_f32("llama.rope.freq_base", p.rope_freq_base);
    w.set_u32("general.file_type", file_type_of(p.wtype));
    w.set_u32("llama.vocab_size", n_vocab);
    w.set_u32("general.quantization_version", quantization_version);
    for (const gguf::kv & e : vocab.metadata()) {
        if (e.key.starts_with("tokenizer.")) w.set(e.key, e.val); // values keep the vocab mapping alive
    }

    auto plan = std::make_shared<const std::vector<tensor_plan>>(
        plan_tensors(s, n_vocab, p.wtype, p.llama31_rope, p.rope_freq_base));
    const size_t count = plan->size();
    for (size_t i = 0; i < count; ++i) {
        const tensor_plan & t = (*plan)[i];
        const std::span<const int64_t> ne(t.ne, t.n_dims);
        w.add_tensor_fill(t.name, t.t, ne, [plan, &t, i, count, seed = p.seed, progress = p.progress](std::span<uint8_t> dst) {
            if (progress) progress(i, count, t.name);
            if (t.n_dims == 1) { // norm weights (ones), rope_freqs
                std::memcpy(dst.data(), t.values.data(), dst.size());
                return;
            }
            const type_traits & tt = get_type_traits(t.t);
            const size_t rs = row_size(t.t, t.ne[0]);
            // Rows per chunk: about 1 Mi values of F32 scratch.
            const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / t.ne[0]);
            std::vector<float> buf(static_cast<size_t>(std::min(chunk, t.ne[1]) * t.ne[0]));
            value_stream vs(seed, t.name, t.ne[0]);
            for (int64_t r0 = 0; r0 < t.ne[1]; r0 += chunk) {
                const int64_t nr = std::min(chunk, t.ne[1] - r0);
                const std::span<float> vals(buf.data(), static_cast<size_t>(nr * t.ne[0]));
                vs.fill(vals);
                for (int64_t r = 0; r < nr; ++r) {
                    tt.from_float(vals.data() + r * t.ne[0], dst.data() + static_cast<size_t>(r0 + r) * rs, t.ne[0]);
                }
            }
        });
    }
    w.write(out);
    return copied_model;
}

} // namespace tessera::llm
