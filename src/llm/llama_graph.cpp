// llm/llama_graph.cpp — the Llama forward graph (see llama_graph.hpp).
#include "llama_graph.hpp"

#include <cmath>

namespace tessera::llm {

batch_graph build_llama_graph(context & ctx, const hparams & hp, const weight_set & w, const kv_tensors & kv,
                              uint32_t n_tokens, uint32_t n_kv, bool all_logits, bool flash_attn) {
    const int64_t n_embd = hp.n_embd, head_dim = hp.head_dim(), n_head = hp.n_head, n_head_kv = hp.n_head_kv;
    const int64_t n_embd_kv = hp.n_embd_kv(), n_embd_q = hp.n_embd_q(), T = n_tokens;
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

    batch_graph g;
    g.in.tokens = context::set_name(ctx.new_tensor(TSR_TYPE_I32, {T}), "inp_tokens");
    g.in.pos = context::set_name(ctx.new_tensor(TSR_TYPE_I32, {T}), "inp_pos");
    g.in.mask = context::set_name(ctx.new_tensor(TSR_TYPE_F32, {int64_t(n_kv), T}), "inp_mask");
    for (tensor * t : {g.in.tokens, g.in.pos, g.in.mask}) t->flags |= TSR_FLAG_INPUT;

    tensor * x = get_rows(ctx, w.tok_embd, g.in.tokens); // [n_embd, T]
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const layer_weights & l = w.layers[il];
        tensor * h = mul(ctx, rms_norm(ctx, x, hp.rms_eps), l.attn_norm);

        tensor * q_mm = mul_mat(ctx, l.wq, h);
        tensor * k_mm = mul_mat(ctx, l.wk, h);
        tensor * v = mul_mat(ctx, l.wv, h); // [n_embd_kv, T]
        tensor * q = rope(ctx, reshape(ctx, q_mm, {head_dim, n_head, T}), g.in.pos, int(hp.n_rot), ROPE_NORMAL,
                          hp.rope_freq_base, hp.rope_freq_scale, w.rope_freqs);
        tensor * k = rope(ctx, reshape(ctx, k_mm, {head_dim, n_head_kv, T}), g.in.pos, int(hp.n_rot), ROPE_NORMAL,
                          hp.rope_freq_base, hp.rope_freq_scale, w.rope_freqs);

        // Write this batch's K and V rows into the cache at their positions.
        tensor * k_store = set_rows(ctx, kv.k[il], reshape(ctx, k, {n_embd_kv, T}), g.in.pos);
        tensor * v_store = set_rows(ctx, kv.v[il], v, g.in.pos);
        g.order.insert(g.order.end(), {q_mm, k_mm, v, v_store, k, q, k_store});

        // Views over the first n_kv cached positions; they depend on the
        // stores so the writes happen first.
        const uint64_t row = kv.k[il]->nb[1];
        const uint64_t esz = kv.k[il]->nb[0];
        tensor * K = view_3d(ctx, k_store, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
        tensor * Q = permute(ctx, q, 0, 2, 1, 3); // [head_dim, T, n_head]
        tensor * merged = nullptr;                // [head_dim, n_head, T]
        if (flash_attn) {
            tensor * V = view_3d(ctx, v_store, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
            merged = flash_attn_ext(ctx, Q, K, V, g.in.mask, kq_scale);
        } else {
            // V as the weight operand of a product: element (j, d, hkv) = V[pos j, head hkv, dim d].
            const int64_t v_ne[3] = {int64_t(n_kv), head_dim, n_head_kv};
            const uint64_t v_nb[3] = {row, esz, uint64_t(head_dim) * esz};
            tensor * Vt = view(ctx, v_store, v_ne, v_nb, 0);
            tensor * kq = mul_mat(ctx, K, Q); // [n_kv, T, n_head]
            kq = soft_max(ctx, kq, g.in.mask, kq_scale);
            tensor * kqv = mul_mat(ctx, Vt, kq); // [head_dim, T, n_head]
            merged = cont(ctx, permute(ctx, kqv, 0, 2, 1, 3));
        }
        tensor * attn = mul_mat(ctx, l.wo, reshape(ctx, merged, {n_embd_q, T}));
        x = add(ctx, x, attn);

        tensor * f = mul(ctx, rms_norm(ctx, x, hp.rms_eps), l.ffn_norm);
        tensor * gate_mm = mul_mat(ctx, l.ffn_gate, f);
        tensor * up = mul_mat(ctx, l.ffn_up, f);
        g.order.insert(g.order.end(), {gate_mm, up});
        tensor * gate = silu(ctx, gate_mm);
        x = add(ctx, x, mul_mat(ctx, l.ffn_down, mul(ctx, gate, up)));
    }
    if (!all_logits && T > 1) {
        x = view_2d(ctx, x, n_embd, 1, x->nb[1], uint64_t(T - 1) * x->nb[1]);
    }
    g.hidden = context::set_name(mul(ctx, rms_norm(ctx, x, hp.rms_eps), w.output_norm), "result_norm");
    g.hidden->flags |= TSR_FLAG_OUTPUT;
    g.logits = context::set_name(mul_mat(ctx, w.output, g.hidden), "logits");
    g.logits->flags |= TSR_FLAG_OUTPUT;
    return g;
}

void build_forward(graph & g, const batch_graph & bg) {
    for (tensor * t : bg.order) g.build_forward(t);
    g.build_forward(bg.logits);
}

} // namespace tessera::llm
