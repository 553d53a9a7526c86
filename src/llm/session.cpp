// llm/session.cpp — model + backend + KV cache; the decode step.
#include "tessera/llm/session.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "finite.hpp"
#include "llama_graph.hpp"
#include "weight_repack.hpp"
#include "tessera/backend/graph_allocator.hpp"
#include "tessera/backend/registry.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::llm {

namespace {

// Tensors a Llama graph creates per layer, with room to spare.
size_t graph_tensor_budget(const hparams & hp) { return size_t(hp.n_layer) * 64 + 64; }

// Granularity of the attention span of a decode graph (positions); see decode().
constexpr uint32_t k_kv_graph_step = 256;

device choose_device(registry & reg, const std::string & name) {
    if (name.empty()) {
        auto best = reg.best_device();
        if (!best) {
            const std::vector<std::string> dirs = reg.searched_folders();
            throw error(fmt::format("no compute device found (no CPU backend could be loaded; looked for libtessera-cpu-*.so "
                                    "in: {}; set TESSERA_BACKEND_PATH to the folder that holds them)",
                                    dirs.empty() ? std::string("no existing folder") : fmt::format("{}", fmt::join(dirs, ", "))));
        }
        return *best;
    }
    if (auto d = reg.find_device(name)) return *d;
    std::string known;
    for (const device & d : reg.devices()) known += fmt::format("{}{}", known.empty() ? "" : ", ", d.name());
    throw error(fmt::format("unknown device '{}' (available: {})", tessera::printable_utf8(name, 256), known.empty() ? "none" : known));
}

// a * b, or UINT64_MAX when the product does not fit.
uint64_t mul_sat(uint64_t a, uint64_t b) {
    uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
uint64_t add_sat(uint64_t a, uint64_t b) {
    uint64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

// Bytes as "12.3 MiB" below a GiB, "4.5 GiB" below a TiB, else "2.0 TiB".
std::string mib_gib(uint64_t bytes) {
    const double mib = double(bytes) / (1024.0 * 1024.0);
    if (mib < 1024.0) return fmt::format("{:.1f} MiB", mib);
    if (mib < 1024.0 * 1024.0) return fmt::format("{:.1f} GiB", mib / 1024.0);
    return fmt::format("{:.1f} TiB", mib / (1024.0 * 1024.0));
}

} // namespace

uint64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return mul_sat(uint64_t(pages), uint64_t(page_size));
}

context_memory estimate_context_memory(const hparams & hp, uint32_t n_ctx, uint32_t n_batch, type kv_type,
                                       bool flash_attn) {
    context_memory m;
    const uint64_t kv_elem = type_is_valid(kv_type) ? get_type_traits(kv_type).type_size : 4;
    m.kv_cache = mul_sat(mul_sat(mul_sat(2 * uint64_t(hp.n_layer), hp.n_embd_kv()), n_ctx), kv_elem);
    const uint64_t scores = mul_sat(uint64_t(n_ctx), n_batch); // positions x tokens of one attention
    uint64_t attention = mul_sat(scores, 4);                   // the mask
    if (!flash_attn) attention = add_sat(attention, mul_sat(mul_sat(scores, hp.n_head), 2 * 4));
    // The mask is freed after the last layer, before the logits are computed.
    m.compute = std::max(attention, mul_sat(mul_sat(n_batch, hp.n_vocab), 4));
    return m;
}

struct session::impl {
    device dev;
    backend be;
    // This session's handles of the model's weights (model::copy_weights):
    // placed in its own buffers; the model's tensors are never changed.
    std::unique_ptr<context> weights_ctx;
    weight_set w;
    buffer weights_buf;
    buffer repack_buf; // MUL_MAT matrices in the device's repacked layout (session_params::repack)
    repack_summary repack;
    std::unique_ptr<context> kv_ctx;
    buffer kv_buf;
    kv_tensors kv;
    std::unique_ptr<graph_allocator> galloc;

    // The last graph computed, kept for the next decode step with the same
    // key: token generation builds and places its graph once per
    // k_kv_graph_step positions instead of once per token.
    struct cached_graph {
        std::unique_ptr<context> ctx;
        std::unique_ptr<graph> g;
        batch_graph bg;
        uint32_t n_tokens = 0;
        uint32_t n_kv = 0;
        bool all_logits = false;
        // The backend's plan of g, where it offers plans: the CPU backend
        // then checks and analyses the graph once, not once per token.
        // Declared last, so it is freed before the graph it refers to.
        graph_plan plan;
    };
    std::optional<cached_graph> last;
};

session::session(const model & m, session_params p) : impl_(std::make_unique<impl>()), model_(m), params_(p) {
    const hparams & hp = m.hp();
    if (params_.n_ctx == 0) params_.n_ctx = std::min<uint32_t>(hp.n_ctx_train, 4096);
    if (params_.n_ctx > hp.n_ctx_train) {
        throw error(fmt::format("context size {} exceeds the model's context length {}", params_.n_ctx,
                                hp.n_ctx_train));
    }
    if (params_.n_batch == 0) throw error("batch size must be at least 1");
    params_.n_batch = std::min(params_.n_batch, params_.n_ctx);
    if (params_.n_threads <= 0) params_.n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    if (params_.kv_type != TSR_TYPE_F32 && params_.kv_type != TSR_TYPE_F16) {
        throw error(fmt::format("KV cache type {} is not supported (F32 or F16)", type_name(params_.kv_type)));
    }

    registry & reg = registry::global();
    reg.load_all();
    impl_->dev = choose_device(reg, params_.device);
    impl_->be = impl_->dev.init();
    if (impl_->be.has_n_threads()) impl_->be.set_n_threads(params_.n_threads);

    // Weights: zero-copy over the mapped file where the device can, else copied.
    context::params wp;
    wp.max_tensors = m.weights().size() + 4;
    impl_->weights_ctx = std::make_unique<context>(wp);
    impl_->w = m.copy_weights(*impl_->weights_ctx);
    const auto mapping = m.file().file_mapping();
    std::vector<tensor *> weights = impl_->w.all();
    size_t max_tensor = 0;
    for (const tensor * t : weights) max_tensor = std::max(max_tensor, nbytes(t));
    if (impl_->dev.caps().buffer_from_host_ptr) {
        impl_->weights_buf = impl_->dev.buffer_from_host_ptr(const_cast<uint8_t *>(mapping->data()),
                                                             mapping->size(), max_tensor);
        for (tensor * t : weights) t->buffer = impl_->weights_buf.get();
    } else {
        buffer_type buft = impl_->dev.default_buffer_type();
        size_t total = 0;
        std::vector<size_t> offs;
        for (const tensor * t : weights) {
            total = (total + buft.alignment() - 1) / buft.alignment() * buft.alignment();
            offs.push_back(total);
            total += buft.alloc_size(t);
        }
        impl_->weights_buf = buft.alloc(total);
        for (size_t i = 0; i < weights.size(); ++i) {
            const void * src = weights[i]->data;
            impl_->weights_buf.place(weights[i], offs[i]);
            tensor_set(weights[i], src, 0, nbytes(weights[i]));
        }
    }
    impl_->weights_buf.set_usage(TSR_BUFFER_USAGE_WEIGHTS);
    if (params_.repack) {
        // With the weights mapped zero-copy, the moved ones' file pages are
        // no longer read: give them back (synth 1B Q8_0, `run`: peak
        // resident memory 2.25 GB -> 1.18 GB).
        std::function<void(const void *, size_t)> release;
        if (impl_->dev.caps().buffer_from_host_ptr && mapping) {
            release = [mapping](const void * p, size_t n) { mapping->release(static_cast<const uint8_t *>(p), n); };
        }
        impl_->repack_buf = place_repacked_weights(impl_->w.mul_mat(), impl_->dev, release);
    }
    if (impl_->dev.caps().buffer_from_host_ptr && mapping) {
        // The weights still read from the mapped file are mapped in now:
        // the token embedding's rows are read at random, one a token, and
        // each first read of a page faulted (synth 135M Q4_0, 2 threads:
        // GET_ROWS took 1.8% of a token's time, for one row).
        for (const tensor * t : weights) {
            if (t->buffer == impl_->weights_buf.get()) mapping->populate(static_cast<const uint8_t *>(t->data), nbytes(t));
        }
    }
    repack_summary & rs = impl_->repack;
    rs.requested = params_.repack;
    rs.available = bool(find_repack_buffer_type(impl_->dev));
    for (const tensor * t : weights) {
        if (t->ne[1] <= 1) continue; // norm weights
        ++rs.n_matrices;
        if (impl_->repack_buf && t->buffer == impl_->repack_buf.get()) {
            ++rs.n_repacked;
            rs.bytes += nbytes(t);
        }
    }

    // KV cache: per layer K and V of [n_embd_kv, n_ctx]; the tensors now,
    // their memory once the context is known to fit.
    context::params cp;
    cp.max_tensors = size_t(hp.n_layer) * 2 + 4;
    impl_->kv_ctx = std::make_unique<context>(cp);
    buffer_type buft = impl_->dev.default_buffer_type();
    kv_tensors & kv = impl_->kv;
    kv.n_ctx = params_.n_ctx;
    size_t total = 0;
    std::vector<size_t> offs;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        for (int which = 0; which < 2; ++which) {
            tensor * t = impl_->kv_ctx->new_tensor(params_.kv_type, {int64_t(hp.n_embd_kv()), int64_t(params_.n_ctx)});
            context::set_name(t, fmt::format("cache_{}_l{}", which == 0 ? "k" : "v", il));
            (which == 0 ? kv.k : kv.v).push_back(t);
            total = (total + buft.alignment() - 1) / buft.alignment() * buft.alignment();
            offs.push_back(total);
            total += buft.alloc_size(t);
        }
    }

    // The largest graph (n_batch tokens, full context), which sizes the
    // compute buffer. Fused attention unless turned off; in automatic mode
    // it is dropped again when the device cannot compute a FLASH_ATTN_EXT node.
    using fa_mode = session_params::flash_attn_mode;
    flash_attn_ = params_.flash_attn != fa_mode::off;
    context::params gp;
    gp.max_tensors = graph_tensor_budget(hp);
    std::unique_ptr<context> gctx;
    std::unique_ptr<graph> g;
    for (;;) {
        g.reset(); // before the context that holds its tensors
        gctx = std::make_unique<context>(gp);
        batch_graph bg = build_llama_graph(*gctx, hp, impl_->w, kv, params_.n_batch, params_.n_ctx, true, flash_attn_);
        g = std::make_unique<graph>(gp.max_tensors);
        build_forward(*g, bg);
        if (flash_attn_ && params_.flash_attn == fa_mode::automatic) {
            bool fa_ok = true;
            for (tensor * node : g->nodes()) {
                if (node->op == TSR_OP_FLASH_ATTN_EXT && !impl_->dev.supports_op(node)) fa_ok = false;
            }
            if (!fa_ok) {
                flash_attn_ = false;
                continue;
            }
        }
        for (tensor * node : g->nodes()) {
            if (!impl_->dev.supports_op(node)) {
                throw error(fmt::format("device {} cannot compute {} ({}, type {}){}", impl_->dev.name(),
                                        op_name(node->op), node->name, type_name(node->type),
                                        node->op == TSR_OP_FLASH_ATTN_EXT ? "; turn flash attention off" : ""));
            }
        }
        break;
    }

    // Refuse a context the machine cannot hold before allocating it (a
    // 16M-token context of a tiny model asked for 52 GiB and failed only
    // after filling the memory for minutes).
    const context_memory need =
        estimate_context_memory(hp, params_.n_ctx, params_.n_batch, params_.kv_type, flash_attn_);
    const bool machine = params_.memory_limit == 0;
    const uint64_t limit = machine ? physical_memory_bytes() : params_.memory_limit;
    if (limit != 0 && need.total() > limit) {
        throw error(fmt::format(
            "a context of {} tokens needs about {} besides the weights (KV cache {}: {} layers x K and V x {} x {} "
            "tokens x {}; compute buffer at least {}: the attention mask of {} x {} positions{}), more than {} ({}); "
            "use {}{} or {}",
            params_.n_ctx, mib_gib(need.total()), mib_gib(need.kv_cache), hp.n_layer, hp.n_embd_kv(), params_.n_ctx,
            type_name(params_.kv_type), mib_gib(need.compute), params_.n_batch, params_.n_ctx,
            flash_attn_ ? "" : " and the attention scores", machine ? "the machine's physical memory" : "the memory limit",
            mib_gib(limit), params_.advice.context,
            params_.kv_type == TSR_TYPE_F32 && !params_.advice.kv_f16.empty()
                ? fmt::format(", {} (half the KV cache)", params_.advice.kv_f16)
                : "",
            params_.advice.batch));
    }

    try {
        impl_->kv_buf = buft.alloc(std::max<size_t>(total, 1));
    } catch (const error & e) {
        throw error(fmt::format("KV cache for a context of {} tokens ({}, {}): {}", params_.n_ctx, mib_gib(total),
                                type_name(params_.kv_type), e.what()));
    }
    for (uint32_t il = 0, i = 0; il < hp.n_layer; ++il) {
        impl_->kv_buf.place(kv.k[il], offs[i++]);
        impl_->kv_buf.place(kv.v[il], offs[i++]);
    }
    impl_->kv_buf.clear(0);

    // Compute buffer sized once for the largest graph.
    impl_->galloc = std::make_unique<graph_allocator>(buft);
    try {
        impl_->galloc->reserve(*g);
    } catch (const error & e) {
        throw error(fmt::format("compute buffer for a context of {} tokens and batches of {}: {}", params_.n_ctx,
                                params_.n_batch, e.what()));
    }
}

session::~session() = default;

const weight_set & session::weights() const { return impl_->w; }
repack_summary session::repack() const { return impl_->repack; }

std::string session::device_name() const { return impl_->dev.name(); }
std::string session::device_description() const { return impl_->dev.description(); }
size_t session::compute_buffer_size() const { return impl_->galloc->buffer_size(); }

std::span<const float> session::decode(std::span<const int32_t> tokens, bool all_logits) {
    const hparams & hp = model_.hp();
    if (tokens.empty()) throw error("decode: no tokens given");
    if (uint64_t(n_past_) + tokens.size() > params_.n_ctx) {
        throw error(fmt::format("context is full: {} cached + {} new tokens exceed the context size {} (use -c "
                                "to raise it, up to the model's {})",
                                n_past_, tokens.size(), params_.n_ctx, hp.n_ctx_train));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || uint32_t(tokens[i]) >= hp.n_vocab) {
            throw error(fmt::format("decode: token {} at index {} is outside the vocabulary (0..{})", tokens[i], i,
                                    hp.n_vocab - 1));
        }
    }
    const size_t n_vocab = hp.n_vocab;
    logits_.resize(all_logits ? tokens.size() * n_vocab : n_vocab);
    const uint32_t n_past_before = n_past_;

    // Throws unless the rows just fetched (all_logits: the n of the batch
    // from token `start`; else the last token's) and the final norm's
    // output they come from are finite.
    auto require_finite = [&](size_t start, uint32_t n, const tensor * hidden) {
        const size_t n_embd = hp.n_embd;
        const size_t n_out = all_logits ? n : 1;
        hidden_.resize(n_out * n_embd);
        tensor_get(hidden, hidden_.data(), 0, hidden_.size() * sizeof(float));
        for (size_t r = 0; r < n_out; ++r) {
            const size_t i = all_logits ? start + r : tokens.size() - 1; // index in `tokens`
            const std::span<const float> l(logits_.data() + (all_logits ? i * n_vocab : 0), n_vocab);
            const std::span<const float> h(hidden_.data() + r * n_embd, n_embd);
            std::string what;
            if (const size_t j = first_non_finite(l); j < l.size()) {
                what = fmt::format("logit {} is {}", j, l[j]);
            } else if (const size_t k = first_non_finite(h); k < h.size()) {
                what = fmt::format("element {} of their input, the output norm, is {}", k, h[k]);
            } else {
                continue;
            }
            // Forget this call's positions and zero their cache rows: later
            // graphs read rows past n_past masked, and a NaN there would
            // survive the mask.
            for (const std::vector<tensor *> * side : {&impl_->kv.k, &impl_->kv.v}) {
                for (tensor * t : *side) {
                    tensor_memset(t, 0, size_t(n_past_before) * t->nb[1], size_t(n_past_ - n_past_before) * t->nb[1]);
                }
            }
            n_past_ = n_past_before;
            throw error(fmt::format("decode: the logits at position {} (token id {}) are not finite ({}): the "
                                    "model's weights or hyper-parameters hold NaN or Inf",
                                    n_past_before + i, tokens[i], what));
        }
    };

    for (size_t start = 0; start < tokens.size(); start += params_.n_batch) {
        const uint32_t n = uint32_t(std::min<size_t>(params_.n_batch, tokens.size() - start));
        const bool last_batch = start + n == tokens.size();
        // The graph attends over n_kv positions, rounded up to a multiple of
        // k_kv_graph_step (capped at the context size): the mask hides the
        // positions past the batch (softmax gives them weight 0; the cache
        // holds finite values there: zeros, or rows of an earlier sequence
        // after reset()), so one graph serves k_kv_graph_step tokens.
        const uint32_t n_kv_used = n_past_ + n;
        const uint32_t n_kv = std::min<uint32_t>(params_.n_ctx, (n_kv_used + k_kv_graph_step - 1) / k_kv_graph_step * k_kv_graph_step);

        auto & last = impl_->last;
        if (!last || last->n_tokens != n || last->n_kv != n_kv || last->all_logits != all_logits) {
            last.reset();
            impl::cached_graph cg;
            context::params gp;
            gp.max_tensors = graph_tensor_budget(hp);
            cg.ctx = std::make_unique<context>(gp);
            cg.bg = build_llama_graph(*cg.ctx, model_.hp(), impl_->w, impl_->kv, n, n_kv, all_logits, flash_attn_);
            cg.g = std::make_unique<graph>(gp.max_tensors);
            build_forward(*cg.g, cg.bg);
            impl_->galloc->allocate(*cg.g);
            cg.n_tokens = n;
            cg.n_kv = n_kv;
            cg.all_logits = all_logits;
            if (graph_plan::supported(impl_->be)) cg.plan = graph_plan(impl_->be, *cg.g);
            last = std::move(cg);
        }
        graph & g = *last->g;
        const batch_graph & bg = last->bg;

        std::vector<int32_t> pos(n);
        for (uint32_t i = 0; i < n; ++i) pos[i] = int32_t(n_past_ + i);
        std::vector<float> mask(size_t(n_kv) * n);
        const float neg_inf = -std::numeric_limits<float>::infinity();
        for (uint32_t i = 0; i < n; ++i) {
            for (uint32_t j = 0; j < n_kv; ++j) mask[size_t(i) * n_kv + j] = j <= n_past_ + i ? 0.0f : neg_inf;
        }
        tensor_set(bg.in.tokens, tokens.data() + start, 0, n * sizeof(int32_t));
        tensor_set(bg.in.pos, pos.data(), 0, n * sizeof(int32_t));
        tensor_set(bg.in.mask, mask.data(), 0, mask.size() * sizeof(float));

        const tsr_status st = last->plan ? last->plan.compute() : impl_->be.graph_compute(g);
        if (st != TSR_STATUS_SUCCESS) {
            throw error(fmt::format("decode: compute on {} returned {}", impl_->dev.name(), status_name(st)));
        }
        n_past_ += n;
        if (all_logits) {
            tensor_get(bg.logits, logits_.data() + start * n_vocab, 0, size_t(n) * n_vocab * sizeof(float));
        } else if (last_batch) {
            tensor_get(bg.logits, logits_.data(), 0, n_vocab * sizeof(float));
        }
        if (all_logits || last_batch) require_finite(start, n, bg.hidden);
    }
    return logits_;
}

} // namespace tessera::llm
