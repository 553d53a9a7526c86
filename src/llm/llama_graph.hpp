// llm/llama_graph.hpp — the Llama forward graph for one micro-batch.
// Internal to the llm layer.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/llm/model.hpp"

namespace tessera::llm {

// The per-layer KV cache tensors: k[il], v[il] are [n_embd_kv, n_ctx]
// (one row per position, heads side by side in a row).
struct kv_tensors {
    std::vector<tensor *> k;
    std::vector<tensor *> v;
    uint32_t n_ctx = 0;
};

// Inputs of one micro-batch graph (leafs the caller fills before compute).
struct batch_inputs {
    tensor * tokens = nullptr; // I32 [n_tokens]: token ids
    tensor * pos = nullptr;    // I32 [n_tokens]: positions (also the KV cache rows written)
    tensor * mask = nullptr;   // F32 [n_kv, n_tokens]: 0 where key j is visible to query i, -inf elsewhere
};

struct batch_graph {
    batch_inputs in;
    tensor * logits = nullptr; // F32 [n_vocab, n_out]: n_out = n_tokens (all) or 1 (last)
    // F32 [n_embd, n_out]: the final norm's output, the logits' input (kept
    // after compute like the logits, so decode can check it is finite).
    tensor * hidden = nullptr;
    // Nodes to add to a graph before the logits, in this order: per layer
    // the Q, K and V products, then the V store and the Q and K rotations,
    // then the K store; the gate and up products. Independent nodes next to
    // each other can share one barrier on a multi-threaded backend (the CPU
    // backend's graph walk), where depth-first order would interleave them
    // with their consumers.
    std::vector<tensor *> order;
};

// Adds bg's nodes to g: bg.order first, then everything the logits need.
void build_forward(graph & g, const batch_graph & bg);

// Builds the graph for n_tokens new tokens whose attention spans the first
// n_kv cache positions (n_kv = positions already cached + n_tokens).
// Standard pre-norm Llama block (Touvron et al. 2023): RMS norm, Q/K/V
// projections, RoPE (normal mode), KV cache write, causal grouped-query
// attention softmax(QK^T / sqrt(head_dim) + mask) V, output projection and
// residual; RMS norm, SwiGLU feed-forward (Shazeer 2020) and residual.
// flash_attn: the attention as one FLASH_ATTN_EXT node per layer (no
// [n_kv, n_tokens, n_head] score matrix); else MUL_MAT, SOFT_MAX, MUL_MAT
// and a CONT of the permuted result. Same values up to float rounding.
// w: the weights of a model with hyper-parameters hp (a session's copies).
batch_graph build_llama_graph(context & ctx, const hparams & hp, const weight_set & w, const kv_tensors & kv,
                              uint32_t n_tokens, uint32_t n_kv, bool all_logits, bool flash_attn = false);

} // namespace tessera::llm
