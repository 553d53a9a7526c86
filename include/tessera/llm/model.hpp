// tessera/llm/model.hpp — a Llama-family model loaded from GGUF: its
// hyper-parameters and weight tensors.
//
// Weights are tensors whose data points into the memory-mapped file (zero
// copy); the mapping lives as long as the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::llm {

// Hyper-parameters read from GGUF metadata (keys "<arch>.<name>").
struct hparams {
    std::string arch;          // general.architecture ("llama")
    std::string name;          // general.name (may be empty)
    uint32_t n_ctx_train = 0;  // context_length: tokens the model was trained on
    uint32_t n_embd = 0;       // embedding_length
    uint32_t n_layer = 0;      // block_count
    uint32_t n_ff = 0;         // feed_forward_length
    uint32_t n_head = 0;       // attention.head_count
    uint32_t n_head_kv = 0;    // attention.head_count_kv (defaults to n_head)
    uint32_t n_embd_head = 0;  // attention.key_length = value_length: the head size (0: n_embd / n_head;
                               // Mistral Nemo and Small 3 have 128 where n_embd / n_head is 160)
    uint32_t n_rot = 0;        // rope.dimension_count (defaults to head_dim; load refuses any other value)
    uint32_t n_vocab = 0;      // vocab_size, or the length of tokenizer.ggml.tokens
    float rms_eps = 1e-5f;     // attention.layer_norm_rms_epsilon
    float rope_freq_base = 10000.0f;  // rope.freq_base
    float rope_freq_scale = 1.0f;     // 1 / rope.scaling.factor (linear scaling)

    // Head size: n_embd_head where set, else n_embd / n_head (0 for hparams with no heads set).
    uint32_t head_dim() const { return n_embd_head != 0 ? n_embd_head : n_head == 0 ? 0 : n_embd / n_head; }
    uint32_t n_embd_q() const { return head_dim() * n_head; }     // rows of wq, columns of wo
    uint32_t n_embd_kv() const { return head_dim() * n_head_kv; } // rows of wk and wv
};

// Weights of one transformer block. Shapes (ne order, ne[0] fastest):
//   attn_norm [n_embd]; wq [n_embd, n_embd_q]; wk, wv [n_embd, n_embd_kv];
//   wo [n_embd_q, n_embd] (n_embd_q = n_embd unless the head size is given); ffn_norm [n_embd]; ffn_gate, ffn_up [n_embd, n_ff];
//   ffn_down [n_ff, n_embd].
struct layer_weights {
    tensor * attn_norm = nullptr;
    tensor * wq = nullptr;
    tensor * wk = nullptr;
    tensor * wv = nullptr;
    tensor * wo = nullptr;
    tensor * ffn_norm = nullptr;
    tensor * ffn_gate = nullptr;
    tensor * ffn_up = nullptr;
    tensor * ffn_down = nullptr;
};

// Handles of a model's weights: the tensors a forward graph reads.
struct weight_set {
    tensor * tok_embd = nullptr;    // [n_embd, n_vocab]
    tensor * output_norm = nullptr; // [n_embd]
    tensor * output = nullptr;      // [n_embd, n_vocab]; == tok_embd when tied
    std::vector<layer_weights> layers;
    tensor * rope_freqs = nullptr;  // F32 [n_rot / 2] RoPE frequency divisors (Llama 3.1), or null

    // Every tensor once (a tied output is tok_embd).
    std::vector<tensor *> all() const;
    // The tensors read only as MUL_MAT src[0]: every layer's attention and
    // feed-forward matrices, and output unless it is tied to tok_embd
    // (which GET_ROWS also reads).
    std::vector<tensor *> mul_mat() const;
};

class model {
public:
    // Opens and validates `path`: GGUF, architecture "llama", every tensor
    // present with the shape the hyper-parameters imply. Throws tessera::error
    // naming the file and the key or tensor that is missing or wrong.
    static std::unique_ptr<model> load(const std::filesystem::path & path);

    const hparams & hp() const { return hp_; }
    const gguf::reader & file() const { return *reader_; }

    tensor * tok_embd = nullptr;    // [n_embd, n_vocab]
    tensor * output_norm = nullptr; // [n_embd]
    tensor * output = nullptr;      // [n_embd, n_vocab]; == tok_embd when tied
    std::vector<layer_weights> layers;
    tensor * rope_freqs = nullptr;  // F32 [n_rot / 2] RoPE frequency divisors (Llama 3.1), or null

    // Number of weight elements and bytes of weight data.
    int64_t n_params() const { return n_params_; }
    uint64_t n_bytes() const { return n_bytes_; }
    // Most common weight type among 2-D tensors, e.g. "F32", "Q4_0".
    std::string type_summary() const;
    // The file's type as the reference names general.file_type ("Q4_0",
    // "Q5_K - Medium", "all F32"; llm::file_type_description), or
    // type_summary() when the file has no id this build knows.
    std::string type_description() const;
    // All weight tensors (for placing them in a device buffer).
    std::vector<tensor *> weights() const;
    // Copies of the weight handles, made in ctx (a context without data):
    // same type, shape, strides and name, data at the file's bytes, in no
    // buffer, tied tensors still tied. A session places its copies in its
    // own buffers and never changes this model's tensors, so several
    // sessions may run on one model at the same time. Throws
    // tessera::error when ctx cannot hold weights().size() more tensors.
    weight_set copy_weights(context & ctx) const;
    // The weights the graph uses only as MUL_MAT src[0]: every layer's
    // attention and feed-forward matrices, and `output` unless it is tied to
    // tok_embd (which GET_ROWS also reads). These may be stored in a
    // device's repacked weight layout (session_params::repack).
    std::vector<tensor *> mul_mat_weights() const;

    model(const model &) = delete;
    model & operator=(const model &) = delete;
    ~model();

private:
    model() = default;
    std::unique_ptr<gguf::reader> reader_;
    std::unique_ptr<context> ctx_;
    hparams hp_;
    int64_t n_params_ = 0;
    uint64_t n_bytes_ = 0;
};

} // namespace tessera::llm
