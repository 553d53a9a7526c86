// llm/model.cpp — loading a Llama-family model from GGUF.
//
// Key and tensor names follow the GGUF specification's LLM conventions
// (ggml repository docs/gguf.md, "Standardized key-value pairs" and
// "Standardized tensor names").
#include "tessera/llm/model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"
#include "tessera/llm/file_type.hpp"

namespace tessera::llm {

namespace {

// Reads "<arch>.<suffix>" as an unsigned integer; `fallback` when absent (a
// negative fallback makes the key required). Rejects values that do not fit.
uint32_t read_u32(const gguf::reader & r, const std::string & arch, const char * suffix,
                  int64_t fallback) {
    const std::string key = arch + "." + suffix;
    const auto v = r.find_int(key);
    if (!v) {
        if (fallback < 0) {
            throw error(fmt::format("{}: missing metadata key '{}'", r.name(), key));
        }
        return static_cast<uint32_t>(fallback);
    }
    if (*v <= 0 || *v > (int64_t(1) << 30)) {
        throw error(fmt::format("{}: metadata key '{}' has an out-of-range value {} (allowed: 1..2^30)", r.name(), key, *v));
    }
    return static_cast<uint32_t>(*v);
}

float read_f32(const gguf::reader & r, const std::string & key, float fallback) {
    const gguf::value * v = r.find_key(key);
    if (!v) return fallback;
    double x = 0;
    try {
        x = v->as_float();
    } catch (const error & e) {
        throw error(fmt::format("{}: metadata key '{}': {}", r.name(), key, e.what()));
    }
    // A FLOAT64 value must fit a float: a larger one has no float value (the
    // conversion is undefined), a tiny nonzero one would become 0 (a RoPE
    // scaling factor of 1e-300 was read as "no scaling").
    const double a = std::fabs(x);
    if (std::isfinite(x) && (a > std::numeric_limits<float>::max() ||
                             (a != 0 && a < double(std::numeric_limits<float>::denorm_min())))) {
        throw error(fmt::format("{}: metadata key '{}' = {} is outside the range of a float", r.name(), key, x));
    }
    return static_cast<float>(x);
}

} // namespace

model::~model() = default;

std::unique_ptr<model> model::load(const std::filesystem::path & path) {
    std::unique_ptr<model> m(new model());
    m->reader_ = std::make_unique<gguf::reader>(path);
    const gguf::reader & r = *m->reader_;
    hparams & hp = m->hp_;

    hp.arch = std::string(r.get_string("general.architecture"));
    if (hp.arch != "llama") {
        throw error(fmt::format("{}: unsupported architecture '{}' (supported: llama)", r.name(), tessera::printable(hp.arch)));
    }
    if (auto n = r.find_string("general.name")) hp.name = std::string(*n);
    const std::string & a = hp.arch;
    // Mixtral-style files say architecture "llama" too; their expert
    // feed-forward tensors (blk.N.ffn_*_exps) would otherwise fail as a
    // missing dense tensor, or a dense file with an expert count would run
    // as if it had none.
    if (const gguf::value * e = r.find_key(a + ".expert_count")) {
        std::optional<int64_t> n; // none: not an integer
        try {
            n = e->as_int();
        } catch (const error &) {
        }
        if (!n || *n != 0) {
            throw error(fmt::format("{}: mixture-of-experts models are not supported ({}.expert_count = {})", r.name(), a,
                                    n ? std::to_string(*n) : "a " + std::string(gguf::value_type_name(e->type()))));
        }
    }
    hp.n_ctx_train = read_u32(r, a, "context_length", -1);
    hp.n_embd = read_u32(r, a, "embedding_length", -1);
    hp.n_layer = read_u32(r, a, "block_count", -1);
    hp.n_ff = read_u32(r, a, "feed_forward_length", -1);
    hp.n_head = read_u32(r, a, "attention.head_count", -1);
    hp.n_head_kv = read_u32(r, a, "attention.head_count_kv", hp.n_head);
    // The head size: attention.key_length where the file gives it (then the
    // query and output projections are n_head * key_length wide, not
    // n_embd), else n_embd / n_head. A Llama layer needs value_length equal
    // to it (the reference implementation asserts the same).
    const uint32_t key_length = read_u32(r, a, "attention.key_length", 0);
    if (key_length == 0 && hp.n_embd % hp.n_head != 0) {
        throw error(fmt::format("{}: embedding_length {} is not a multiple of head_count {} (and no "
                                "{}.attention.key_length gives the head size)",
                                r.name(), hp.n_embd, hp.n_head, a));
    }
    const uint32_t head_size = key_length != 0 ? key_length : hp.n_embd / hp.n_head;
    const uint32_t value_length = read_u32(r, a, "attention.value_length", head_size);
    if (value_length != head_size) {
        throw error(fmt::format("{}: {}.attention.value_length {} differs from the key head size {}; a Llama layer "
                                "needs one head size",
                                r.name(), a, value_length, head_size));
    }
    if (head_size % 2 != 0 || uint64_t{head_size} * hp.n_head > (uint64_t{1} << 30)) {
        throw error(fmt::format("{}: the head size {} must be even (RoPE rotates pairs) and at most 2^30 / "
                                "head_count {}",
                                r.name(), head_size, hp.n_head));
    }
    hp.n_embd_head = key_length;
    if (hp.n_head % hp.n_head_kv != 0) {
        throw error(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", r.name(),
                                hp.n_head, hp.n_head_kv));
    }
    // A Llama layer rotates whole heads: a rotary part shorter than the
    // head (GPT-NeoX's rotary_pct) belongs to other architectures, and the
    // reference implementation refuses it for llama files too.
    hp.n_rot = read_u32(r, a, "rope.dimension_count", hp.head_dim());
    if (hp.n_rot != hp.head_dim()) {
        throw error(fmt::format("{}: {}.rope.dimension_count {} differs from the head size {} ({}); a Llama model "
                                "rotates whole heads",
                                r.name(), a, hp.n_rot, hp.head_dim(),
                                hp.n_embd_head != 0 ? fmt::format("{}.attention.key_length", a)
                                                    : fmt::format("embedding_length {} / head_count {}", hp.n_embd,
                                                                  hp.n_head)));
    }
    // Required, as by the reference (a default would run every norm with
    // another epsilon than the model was trained with, without a word).
    if (r.find_key(a + ".attention.layer_norm_rms_epsilon") == nullptr) {
        throw error(fmt::format("{}: missing metadata key '{}.attention.layer_norm_rms_epsilon' (the RMS norm's epsilon)",
                                r.name(), a));
    }
    hp.rms_eps = read_f32(r, a + ".attention.layer_norm_rms_epsilon", 0.0f);
    hp.rope_freq_base = read_f32(r, a + ".rope.freq_base", 10000.0f);
    // RoPE scaling: the ROPE op computes none and linear (positions times
    // rope_freq_scale = 1 / factor; factor 0 or absent: none), and divides
    // each pair's frequency by the rope_freqs.weight tensor where the file
    // has one (Llama 3.1's scaling, computed by the converter). YaRN and
    // LongRoPE are not implemented: refused rather than run with the wrong
    // positions.
    // Type "none" scales nothing whatever factor the file also gives (as
    // the reference does: the factor is then not read); an absent type
    // with a factor is linear.
    bool scaling_none = false;
    if (const gguf::value * type = r.find_key(a + ".rope.scaling.type")) {
        const bool is_string = type->type() == gguf::value_type::STRING;
        const std::string_view t = is_string ? type->as_string() : std::string_view{};
        if (t != "none" && t != "linear") {
            throw error(fmt::format("{}: {}.rope.scaling.type {} is not supported (supported: none, linear)", r.name(), a,
                                    is_string ? "'" + tessera::printable(t) + "'" : std::string("(not a string)")));
        }
        scaling_none = t == "none";
    }
    const float rope_factor = scaling_none ? 0.0f : read_f32(r, a + ".rope.scaling.factor", 0.0f);
    if (!(rope_factor >= 0.0f) || !std::isfinite(rope_factor)) {
        throw error(fmt::format("{}: {}.rope.scaling.factor = {} must be a finite number >= 0 (0: no scaling)", r.name(), a,
                                rope_factor));
    }
    hp.rope_freq_scale = rope_factor > 0.0f ? 1.0f / rope_factor : 1.0f;
    // A factor below 1 / FLT_MAX (a subnormal float) makes the position
    // scale infinite: every rotation angle past position 0 would be NaN.
    if (!std::isfinite(hp.rope_freq_scale)) {
        throw error(fmt::format("{}: {}.rope.scaling.factor = {} is too small: the position scale 1 / factor is not a "
                                "finite float",
                                r.name(), a, rope_factor));
    }
    if (const gguf::value * tokens = r.find_key("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
        hp.n_vocab = static_cast<uint32_t>(tokens->array_size());
    } else if (tokens != nullptr) {
        throw error(fmt::format("{}: tokenizer.ggml.tokens is a {}, expected an ARRAY of STRING", r.name(),
                                gguf::value_type_name(tokens->type())));
    }
    if (hp.n_vocab == 0 && !r.find_int(a + ".vocab_size")) {
        throw error(fmt::format("{}: no vocabulary: neither a tokenizer.ggml.tokens array nor the key '{}.vocab_size'",
                                r.name(), a));
    }
    const uint32_t n_tokens = hp.n_vocab;
    hp.n_vocab = read_u32(r, a, "vocab_size", n_tokens > 0 ? int64_t(n_tokens) : -1);
    // The tokenizer's ids index the embedding and the logits: a vocab_size
    // that disagrees with the tokens would fail only mid-generation (a
    // sampled id without a piece, or a prompt id past the embedding).
    if (n_tokens > 0 && hp.n_vocab != n_tokens) {
        throw error(fmt::format("{}: {}.vocab_size is {} but tokenizer.ggml.tokens has {} entries (they must agree)",
                                r.name(), a, hp.n_vocab, n_tokens));
    }
    auto require_positive_finite = [&](const char * key, float v) {
        if (!(v > 0.0f) || !std::isfinite(v)) {
            throw error(fmt::format("{}: {}.{} = {} must be a positive finite number", r.name(), a, key, v));
        }
    };
    require_positive_finite("attention.layer_norm_rms_epsilon", hp.rms_eps);
    require_positive_finite("rope.freq_base", hp.rope_freq_base);

    context::params cp;
    cp.max_tensors = r.n_tensors() + 16;
    cp.alloc_data = false;
    m->ctx_ = std::make_unique<context>(cp);

    // Creates the tensor for `name` with the expected shape, pointing at the
    // mapped bytes. Throws naming the tensor when it is missing or mis-shaped.
    auto take = [&](const std::string & name, std::initializer_list<int64_t> shape,
                    bool required = true) -> tensor * {
        const gguf::tensor_info * info = r.find_tensor(name);
        if (!info) {
            if (!required) return nullptr;
            throw error(fmt::format("{}: missing tensor '{}'", r.name(), name));
        }
        int64_t want[4] = {1, 1, 1, 1};
        size_t i = 0;
        for (int64_t d : shape) want[i++] = d;
        bool ok = true;
        for (int d = 0; d < 4; ++d) ok = ok && info->ne[d] == want[d];
        if (!ok) {
            throw error(fmt::format("{}: tensor '{}' has shape [{},{},{},{}], expected [{},{},{},{}]", r.name(),
                                    name, info->ne[0], info->ne[1], info->ne[2], info->ne[3], want[0], want[1],
                                    want[2], want[3]));
        }
        const type_traits & tt = get_type_traits(info->type);
        // Q8_K is only the activation format of the K-quant kernels: no
        // MUL_MAT takes it as weights.
        if (tt.to_float == nullptr || info->type == TSR_TYPE_Q8_K) {
            throw error(fmt::format("{}: tensor '{}' has type {}, which this build cannot compute yet",
                                    r.name(), name, tt.name));
        }
        tensor * t = m->ctx_->new_tensor(info->type, std::span<const int64_t>(info->ne, 4));
        context::set_name(t, name);
        t->data = const_cast<uint8_t *>(info->data); // read-only mapping: kernels never write weights
        t->flags |= TSR_FLAG_PARAM;
        m->n_params_ += info->n_elements();
        m->n_bytes_ += info->size;
        return t;
    };

    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, EKV = hp.n_embd_kv(), EQ = hp.n_embd_q();
    m->tok_embd = take("token_embd.weight", {E, V});
    m->output_norm = take("output_norm.weight", {E});
    m->output = take("output.weight", {E, V}, false);
    if (m->output == nullptr) m->output = m->tok_embd; // tied embeddings
    m->rope_freqs = take("rope_freqs.weight", {int64_t(hp.n_rot / 2)}, false);
    // Each layer has 9 weight tensors (below) besides token_embd and
    // output_norm: a block_count the file cannot hold is refused before the
    // layers are allocated (2^30 ran out of memory; 2^24 took 1.2 GB first).
    constexpr uint64_t k_layer_tensors = 9;
    if (uint64_t{hp.n_layer} * k_layer_tensors + 2 > r.n_tensors()) {
        throw error(fmt::format("{}: {}.block_count {} needs at least {} tensors ({} a layer, token_embd, output_norm); "
                                "the file has {}",
                                r.name(), a, hp.n_layer, uint64_t{hp.n_layer} * k_layer_tensors + 2, k_layer_tensors,
                                r.n_tensors()));
    }
    m->layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        layer_weights & l = m->layers[il];
        l.attn_norm = take(p + "attn_norm.weight", {E});
        l.wq = take(p + "attn_q.weight", {E, EQ});
        l.wk = take(p + "attn_k.weight", {E, EKV});
        l.wv = take(p + "attn_v.weight", {E, EKV});
        l.wo = take(p + "attn_output.weight", {EQ, E});
        l.ffn_norm = take(p + "ffn_norm.weight", {E});
        l.ffn_gate = take(p + "ffn_gate.weight", {E, F});
        l.ffn_up = take(p + "ffn_up.weight", {E, F});
        l.ffn_down = take(p + "ffn_down.weight", {F, E});
    }
    // Tensors of layers past block_count would be ignored: a block_count
    // lower than the file's layers is an error, not a shorter model.
    for (const gguf::tensor_info & ti : r.tensors()) {
        const std::string_view name = ti.name;
        if (!name.starts_with("blk.")) continue;
        const std::string_view rest = name.substr(4);
        const size_t dot = rest.find('.');
        const std::string_view digits = rest.substr(0, dot);
        if (dot == std::string_view::npos || digits.empty() ||
            digits.find_first_not_of("0123456789") != std::string_view::npos) {
            continue; // not "blk.<number>.<name>": not a layer's tensor
        }
        uint64_t il = 0;
        const std::from_chars_result parsed = std::from_chars(digits.data(), digits.data() + digits.size(), il);
        if (parsed.ec == std::errc() && il < hp.n_layer) continue;
        throw error(fmt::format("{}: tensor '{}' belongs to layer {} but {}.block_count is {}", r.name(), name,
                                digits, a, hp.n_layer));
    }
    // Norm weights are applied with MUL to F32 activations: they must be F32.
    auto require_f32 = [&](const tensor * t) {
        if (t->type != TSR_TYPE_F32) {
            throw error(fmt::format("{}: tensor '{}' must be F32, has type {}", r.name(), t->name,
                                    type_name(t->type)));
        }
    };
    require_f32(m->output_norm);
    if (m->rope_freqs != nullptr) {
        require_f32(m->rope_freqs);
        const auto * f = static_cast<const float *>(m->rope_freqs->data);
        for (int64_t i = 0; i < m->rope_freqs->ne[0]; ++i) {
            if (!(f[i] > 0.0f) || !std::isfinite(f[i])) {
                throw error(fmt::format("{}: tensor 'rope_freqs.weight' [{}] = {} must be a finite number > 0 (it "
                                        "divides a RoPE frequency)",
                                        r.name(), i, f[i]));
            }
        }
    }
    for (const layer_weights & l : m->layers) {
        require_f32(l.attn_norm);
        require_f32(l.ffn_norm);
    }
    return m;
}

std::string model::type_summary() const {
    std::map<std::string, int64_t> count;
    for (const tensor * t : weights()) {
        if (t->ne[1] > 1) count[std::string(type_name(t->type))] += nelements(t);
    }
    std::string best = "F32";
    int64_t best_n = -1;
    for (const auto & [name, n] : count) {
        if (n > best_n) {
            best = name;
            best_n = n;
        }
    }
    return best;
}

std::string model::type_description() const {
    if (const auto ft = file().find_int("general.file_type")) {
        const std::string_view d = file_type_description(*ft);
        if (!d.empty()) return std::string(d);
    }
    return type_summary();
}

std::vector<tensor *> model::weights() const {
    std::vector<tensor *> out;
    for (size_t i = 0; i < ctx_->n_tensors(); ++i) out.push_back(ctx_->tensor_at(i));
    return out;
}

std::vector<tensor *> weight_set::all() const {
    std::vector<tensor *> out{tok_embd, output_norm};
    if (output != tok_embd) out.push_back(output);
    if (rope_freqs != nullptr) out.push_back(rope_freqs);
    for (const layer_weights & l : layers) {
        for (tensor * t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down}) out.push_back(t);
    }
    return out;
}

std::vector<tensor *> weight_set::mul_mat() const {
    std::vector<tensor *> out;
    for (const layer_weights & l : layers) {
        for (tensor * t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) out.push_back(t);
    }
    if (output != tok_embd) out.push_back(output);
    return out;
}

weight_set model::copy_weights(context & ctx) const {
    auto copy = [&](const tensor * t) {
        tensor * c = ctx.new_tensor(static_cast<type>(t->type), std::span<const int64_t>(t->ne, TSR_MAX_DIMS));
        std::copy(std::begin(t->nb), std::end(t->nb), std::begin(c->nb));
        c->flags = t->flags;
        c->data = t->data;
        c->buffer = nullptr;
        context::set_name(c, t->name);
        return c;
    };
    weight_set w;
    w.tok_embd = copy(tok_embd);
    w.output_norm = copy(output_norm);
    w.output = output == tok_embd ? w.tok_embd : copy(output);
    w.rope_freqs = rope_freqs != nullptr ? copy(rope_freqs) : nullptr;
    for (const layer_weights & l : layers) {
        layer_weights c;
        c.attn_norm = copy(l.attn_norm);
        c.wq = copy(l.wq);
        c.wk = copy(l.wk);
        c.wv = copy(l.wv);
        c.wo = copy(l.wo);
        c.ffn_norm = copy(l.ffn_norm);
        c.ffn_gate = copy(l.ffn_gate);
        c.ffn_up = copy(l.ffn_up);
        c.ffn_down = copy(l.ffn_down);
        w.layers.push_back(c);
    }
    return w;
}

std::vector<tensor *> model::mul_mat_weights() const {
    return weight_set{tok_embd, output_norm, output, layers}.mul_mat();
}

} // namespace tessera::llm
