// tessera/llm/session.hpp — a model bound to a backend with its KV cache:
// evaluates token batches and returns logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/llm/model.hpp"

namespace tessera::llm {

struct session_params {
    uint32_t n_ctx = 0;       // tokens of context (KV cache rows); 0 = min(model's, 4096)
    uint32_t n_batch = 512;   // micro-batch: most tokens evaluated in one graph
    int n_threads = 0;        // CPU threads; 0 (or less) = all hardware threads
    std::string device;       // device name (ASCII case-insensitive); empty = the best one
    type kv_type = TSR_TYPE_F32; // K/V cache element type: F32 (default) or F16
    // Fused attention (one FLASH_ATTN_EXT node per layer instead of
    // MUL_MAT + SOFT_MAX + MUL_MAT): automatic = on when the device supports
    // it, else the unfused graph; on = required (the session constructor
    // throws if the device cannot compute it); off = the unfused graph.
    enum class flash_attn_mode { automatic, on, off };
    flash_attn_mode flash_attn = flash_attn_mode::automatic;
    // Copy the MUL_MAT weight matrices into the device's repacked-weight
    // buffer ("CPU_REPACK": on 2 MiB pages, Q4_0/Q8_0 rows, and with F16C
    // F16/BF16 rows, interleaved for the CPU kernels) when it has one;
    // off: the kernels read the memory-mapped file.
    bool repack = true;
    // Bytes the context may take besides the weights (the KV cache and the
    // compute buffer, as estimate_context_memory counts them); a larger
    // context is refused before anything is allocated. 0 = the machine's
    // physical memory (sysconf _SC_PHYS_PAGES x _SC_PAGE_SIZE; no check
    // where it is unknown); UINT64_MAX = no check.
    uint64_t memory_limit = 0;
    // The caller's own words for the ways to make a context smaller, named
    // in the refusal of a context over memory_limit ("use {context}, {kv_f16}
    // (half the KV cache) or {batch}"; kv_f16 only with an F32 cache, empty =
    // not offered). The defaults are run's and perplexity's options.
    struct advice_text {
        std::string context = "a smaller context (-c)";
        std::string kv_f16 = "--kv-type F16";
        std::string batch = "a smaller batch (-b)";
    };
    advice_text advice;
};

// Memory a session's context takes besides the weights, in bytes.
struct context_memory {
    // K and V of every layer: 2 x n_layer x n_embd_kv x n_ctx x the KV
    // type's size (the alignment padding between them, a few hundred bytes,
    // not counted).
    uint64_t kv_cache = 0;
    // A lower bound of the compute buffer: the larger of the tensors that
    // are live at once while attending (the F32 attention mask,
    // n_ctx x n_batch x 4, and without fused attention the F32 scores and
    // their softmax, 2 x n_head x n_ctx x n_batch x 4) and the F32 logits
    // of a batch, n_batch x n_vocab x 4.
    uint64_t compute = 0;
    uint64_t total() const { return kv_cache + compute; }
};

// The machine's physical memory in bytes (sysconf _SC_PHYS_PAGES x
// _SC_PAGE_SIZE, saturating), 0 when it cannot tell.
uint64_t physical_memory_bytes();

// The memory a session of `n_ctx` tokens and micro-batches of `n_batch`
// (already at most n_ctx) needs for model hyper-parameters `hp`, KV type
// `kv_type` and fused attention or not. Products that overflow 64 bits
// saturate at UINT64_MAX. Never throws.
context_memory estimate_context_memory(const hparams & hp, uint32_t n_ctx, uint32_t n_batch, type kv_type,
                                       bool flash_attn);

// Where a session put the model's weight matrices (session_params::repack).
struct repack_summary {
    bool requested = false;  // session_params::repack
    bool available = false;  // the device has a "CPU_REPACK" buffer type
    size_t n_repacked = 0;   // matrices placed in it: the MUL_MAT ones when requested and available, else 0
    size_t n_matrices = 0;   // the model's weight matrices (its 2-D weights, token_embd included)
    uint64_t bytes = 0;      // bytes of the n_repacked matrices (their size in the file)
};

class session {
public:
    // Binds `m` (which must outlive the session) to a backend on the chosen
    // device (loading backend plugins through the global registry), places
    // the weights (zero-copy on host devices) and allocates the KV cache.
    // The session places its own copies of the weight handles
    // (model::copy_weights) and never changes m: sessions on one model may
    // be created, used and destroyed on different threads at once.
    // Throws tessera::error for an unknown device (listing the known ones),
    // n_ctx above the model's context length, n_batch = 0, a device that
    // cannot compute the model's ops, or a context whose memory
    // (estimate_context_memory) exceeds session_params::memory_limit: the
    // message names the context size, the estimate (KV cache and compute
    // buffer) and the limit, and suggests a smaller context or an F16 KV
    // cache. A failed allocation of the KV cache or of the compute buffer
    // is a tessera::error saying which, for what context size.
    session(const model & m, session_params p);
    ~session();
    session(const session &) = delete;
    session & operator=(const session &) = delete;

    // Evaluates `tokens` at positions n_past() .. n_past() + size - 1, in
    // micro-batches of at most n_batch, and appends them to the cache.
    // Returns the logits of the last token ([n_vocab]) or, with all_logits,
    // of every token ([n_tokens][n_vocab], row-major). The span is valid
    // until the next decode. Throws tessera::error when the tokens would run
    // past n_ctx, a token id is outside the vocabulary, or compute fails
    // (the cache then holds only the positions before the failing batch).
    // Also throws, naming the position and token id of the first bad row,
    // when a returned logits row, or the final norm's output it is computed
    // from, holds NaN or Inf (weights or hyper-parameters that hold them;
    // a quantized product can turn a NaN input into finite logits, hence
    // the second check); n_past() is then as before the call, and the
    // cache rows the call wrote are zeroed.
    std::span<const float> decode(std::span<const int32_t> tokens, bool all_logits = false);

    uint32_t n_past() const { return n_past_; }
    uint32_t n_ctx() const { return params_.n_ctx; }
    // CPU threads used for compute (the resolved value when 0 was asked).
    int n_threads() const { return params_.n_threads; }
    // Whether the graphs use fused attention (flash_attn resolved for the device).
    bool flash_attn() const { return flash_attn_; }
    // Forgets every cached position.
    void reset() { n_past_ = 0; }
    // Name and description of the device computing the model.
    std::string device_name() const;
    std::string device_description() const;
    // Bytes of the compute buffer (peak of the largest graph).
    size_t compute_buffer_size() const;
    // This session's weight handles, as placed (e.g. which buffer each is in).
    const weight_set & weights() const;
    // How many weight matrices were placed in the device's CPU_REPACK
    // buffer, of how many, and their bytes.
    repack_summary repack() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
    const model & model_;
    session_params params_;
    uint32_t n_past_ = 0;
    bool flash_attn_ = false;
    std::vector<float> logits_;
    std::vector<float> hidden_; // the final norm's output rows of the last batch (decode's check)
};

} // namespace tessera::llm
