// llm::synth_model: layout and metadata of the written file, the documented
// value generator (re-implemented here from its description in synth.hpp),
// reproducibility, agreement with quantize_file, loading and decoding with
// tessera, and errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/quantize.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/synth.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

const fs::path vocab_path = fs::path(TESSERA_SHARED_DIR) / "vocab" / "ggml-vocab-llama-spm.gguf";

struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("synth") {}
};

std::vector<uint8_t> read_all(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

llm::synth_params tiny(type t, uint64_t seed = 1) {
    llm::synth_params p;
    p.shape = llm::synth_preset("tiny");
    p.wtype = t;
    p.vocab = vocab_path;
    p.seed = seed;
    return p;
}

// The generator as synth.hpp documents it, written out independently.
std::vector<float> documented_values(uint64_t seed, const std::string & name, int64_t fan_in, size_t n) {
    uint64_t h = 14695981039346656037ull; // FNV-1a 64
    for (unsigned char c : name) {
        h ^= c;
        h *= 1099511628211ull;
    }
    uint64_t z = (seed ^ h) + 0x9e3779b97f4a7c15ull; // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::mt19937_64 rng(z);
    const double a = std::sqrt(3.0 / double(fan_in));
    std::vector<float> v(n);
    for (auto & x : v) x = float((2.0 * (double(rng() >> 11) / 9007199254740992.0) - 1.0) * a);
    return v;
}

std::vector<float> f32_tensor(const gguf::tensor_info & t) {
    std::vector<float> v(size_t(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
}

} // namespace

TEST(Synth, Presets) {
    const auto b = llm::synth_preset("1b");
    EXPECT_EQ(b.n_embd, 2048u);
    EXPECT_EQ(b.n_layer, 22u);
    EXPECT_EQ(b.n_head, 32u);
    EXPECT_EQ(b.n_head_kv, 4u);
    EXPECT_EQ(b.n_ff, 5632u);
    const auto m = llm::synth_preset("135m");
    EXPECT_EQ(m.n_embd, 576u);
    EXPECT_EQ(m.n_layer, 30u);
    EXPECT_EQ(m.n_head, 9u);
    EXPECT_EQ(m.n_head_kv, 3u);
    EXPECT_EQ(m.n_ff, 1536u);
    EXPECT_THROW(llm::synth_preset("7b"), error);
    // Tensor data of the benchmark files, counted by hand: 2-D weights
    // 2 * n_embd * n_vocab + n_layer * (2 n_embd^2 + 2 n_embd n_embd_kv + 3 n_embd n_ff)
    // (1b: 1099956224 elements, 135m: 143032320) plus 1 + 2 n_layer F32 norm vectors.
    EXPECT_EQ(llm::synth_data_size(b, 32000, TSR_TYPE_Q4_0), 1099956224ull / 32 * 18 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(m, 32000, TSR_TYPE_F16), 143032320ull * 2 + 576ull * 61 * 4);
    EXPECT_EQ(llm::synth_data_size(m, 32000, TSR_TYPE_Q8_0), 143032320ull / 32 * 34 + 576ull * 61 * 4);
}

// synth_data_size of the mixes, counted by hand from the Q4_K_M rule: bytes
// per element Q4_K 144/256, Q6_K 210/256, Q5_0 22/32, Q8_0 34/32.
TEST(Synth, MixDataSizes) {
    const auto b = llm::synth_preset("1b");
    // 1b: n_embd 2048, n_ff 5632 = 22 * 256, n_embd_kv 256: no fallback.
    // Q6_K: output (2048 x 32000) and attn_v (2048 x 256) + ffn_down
    // (5632 x 2048) of the 10 layers 0, 1, 4, 7, 10, 13, 16, 19, 20, 21.
    const uint64_t E = 2048, V = 32000, F = 5632, EKV = 256;
    const uint64_t q6 = E * V + 10 * (E * EKV + F * E);
    const uint64_t q4 = E * V + 22 * (2 * E * E + E * EKV + 2 * E * F) + 12 * (E * EKV + F * E);
    EXPECT_EQ(q4 + q6, 1099956224ull);
    EXPECT_EQ(llm::synth_data_size(b, 32000, llm::file_type_q4_k_m), q4 / 256 * 144 + q6 / 256 * 210 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(b, 32000, llm::file_type_q4_k_s),
              (q4 + q6 - E * V) / 256 * 144 + E * V / 256 * 210 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(b, 32000, TSR_TYPE_Q6_K), 1099956224ull / 256 * 210 + 2048ull * 45 * 4);
    // 135m: n_embd 576 is no multiple of 256, n_ff 1536 is: every matrix but
    // ffn_down falls back (Q4_K -> Q5_0, Q6_K -> Q8_0). Q4_K_M's 14 layers
    // 0, 1, 2, 5, 8, ..., 23, 26..29 take attn_v as Q8_0 and ffn_down as Q6_K.
    const auto m = llm::synth_preset("135m");
    const uint64_t e = 576, f = 1536, ekv = 192;
    const uint64_t m_q50 = e * V + 30 * (2 * e * e + e * ekv + 2 * e * f) + 16 * e * ekv;
    const uint64_t m_q80 = e * V + 14 * e * ekv;
    const uint64_t m_q4k = 16 * f * e, m_q6k = 14 * f * e;
    EXPECT_EQ(m_q50 + m_q80 + m_q4k + m_q6k, 143032320ull);
    EXPECT_EQ(llm::synth_data_size(m, 32000, llm::file_type_q4_k_m),
              m_q50 / 32 * 22 + m_q80 / 32 * 34 + m_q4k / 256 * 144 + m_q6k / 256 * 210 + 576ull * 61 * 4);
    EXPECT_EQ(llm::synth_data_size(m, 32000, TSR_TYPE_Q5_0), 143032320ull / 32 * 22 + 576ull * 61 * 4);
    EXPECT_THROW(llm::synth_data_size(m, 32000, TSR_TYPE_Q3_K), error);
}

// The Q5_K mixes, counted the same way: Q5_K 176/256 bytes per element,
// Q5_1 24/32, in the places of Q4_K and Q5_0.
TEST(Synth, Q5MixDataSizes) {
    const auto b = llm::synth_preset("1b");
    const uint64_t E = 2048, V = 32000, F = 5632, EKV = 256;
    const uint64_t q6 = E * V + 10 * (E * EKV + F * E);
    const uint64_t q5 = E * V + 22 * (2 * E * E + E * EKV + 2 * E * F) + 12 * (E * EKV + F * E);
    EXPECT_EQ(llm::synth_data_size(b, 32000, llm::file_type_q5_k_m), q5 / 256 * 176 + q6 / 256 * 210 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(b, 32000, llm::file_type_q5_k_s),
              (q5 + q6 - E * V) / 256 * 176 + E * V / 256 * 210 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(b, 32000, TSR_TYPE_Q5_K), 1099956224ull / 256 * 176 + 2048ull * 45 * 4);
    EXPECT_EQ(llm::synth_data_size(b, 32000, TSR_TYPE_Q5_1), 1099956224ull / 32 * 24 + 2048ull * 45 * 4);
    // 135m: Q5_K falls back to Q5_1 wherever ne[0] = 576 (every matrix but
    // ffn_down), Q6_K to Q8_0; the 14 Q5_K_M layers as for Q4_K_M.
    const auto m = llm::synth_preset("135m");
    const uint64_t e = 576, f = 1536, ekv = 192;
    const uint64_t m_q51 = e * V + 30 * (2 * e * e + e * ekv + 2 * e * f) + 16 * e * ekv;
    const uint64_t m_q80 = e * V + 14 * e * ekv;
    const uint64_t m_q5k = 16 * f * e, m_q6k = 14 * f * e;
    EXPECT_EQ(m_q51 + m_q80 + m_q5k + m_q6k, 143032320ull);
    EXPECT_EQ(llm::synth_data_size(m, 32000, llm::file_type_q5_k_m),
              m_q51 / 32 * 24 + m_q80 / 32 * 34 + m_q5k / 256 * 176 + m_q6k / 256 * 210 + 576ull * 61 * 4);
    // Q5_K_S: output Q8_0 (Q6_K's fallback), ffn_down Q5_K, the rest Q5_1.
    EXPECT_EQ(llm::synth_data_size(m, 32000, llm::file_type_q5_k_s),
              (143032320ull - e * V - 30 * f * e) / 32 * 24 + e * V / 32 * 34 + 30 * f * e / 256 * 176 +
                  576ull * 61 * 4);
    EXPECT_EQ(llm::synth_data_size(m, 32000, TSR_TYPE_Q5_1), 143032320ull / 32 * 24 + 576ull * 61 * 4);
}

TEST(Synth, LayoutMetadataAndValues) {
    temp_dir dir;
    EXPECT_EQ(llm::synth_model(tiny(TSR_TYPE_F32, 7), dir / "m.gguf"), "llama"); // the tokenizer model it copied
    const gguf::reader r(dir / "m.gguf");
    const gguf::reader v(vocab_path);

    EXPECT_EQ(r.get_string("general.architecture"), "llama");
    EXPECT_EQ(r.get_string("general.name"), "synth-tiny");
    EXPECT_EQ(r.get_u32("llama.context_length"), 2048u);
    EXPECT_EQ(r.get_u32("llama.embedding_length"), 64u);
    EXPECT_EQ(r.get_u32("llama.block_count"), 2u);
    EXPECT_EQ(r.get_u32("llama.feed_forward_length"), 128u);
    EXPECT_EQ(r.get_u32("llama.attention.head_count"), 4u);
    EXPECT_EQ(r.get_u32("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(r.get_u32("llama.rope.dimension_count"), 16u);
    EXPECT_EQ(r.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_EQ(r.get_f32("llama.rope.freq_base"), 10000.0f);
    EXPECT_EQ(r.get_u32("general.file_type"), 0u);
    EXPECT_EQ(r.get_u32("llama.vocab_size"), 32000u);
    // Every tokenizer key of the vocabulary, unchanged.
    size_t n_tok_keys = 0;
    for (const auto & e : v.metadata()) {
        if (!e.key.starts_with("tokenizer.")) continue;
        ++n_tok_keys;
        ASSERT_TRUE(r.has_key(e.key)) << e.key;
        EXPECT_TRUE(r.get(e.key) == e.val) << e.key;
    }
    EXPECT_EQ(n_tok_keys, 10u);
    EXPECT_FALSE(r.has_key("llama.feed_forward_length") && r.get_u32("llama.feed_forward_length") == 11008u);

    ASSERT_EQ(r.n_tensors(), 3u + 2 * 9);
    struct want {
        const char * name;
        int64_t ne0, ne1;
        uint32_t n_dims;
    };
    for (const want & w : {want{"token_embd.weight", 64, 32000, 2}, want{"output_norm.weight", 64, 1, 1},
                           want{"output.weight", 64, 32000, 2}, want{"blk.1.attn_norm.weight", 64, 1, 1},
                           want{"blk.1.attn_q.weight", 64, 64, 2}, want{"blk.1.attn_k.weight", 64, 32, 2},
                           want{"blk.1.attn_v.weight", 64, 32, 2}, want{"blk.1.attn_output.weight", 64, 64, 2},
                           want{"blk.1.ffn_norm.weight", 64, 1, 1}, want{"blk.1.ffn_gate.weight", 64, 128, 2},
                           want{"blk.1.ffn_up.weight", 64, 128, 2}, want{"blk.1.ffn_down.weight", 128, 64, 2}}) {
        const auto & t = r.tensor(w.name);
        EXPECT_EQ(t.type, TSR_TYPE_F32) << w.name;
        EXPECT_EQ(t.n_dims, w.n_dims) << w.name;
        EXPECT_EQ(t.ne[0], w.ne0) << w.name;
        EXPECT_EQ(t.ne[1], w.ne1) << w.name;
    }
    // Norms are 1; weights follow the documented generator exactly.
    for (float x : f32_tensor(r.tensor("blk.0.ffn_norm.weight"))) EXPECT_EQ(x, 1.0f);
    for (const char * name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight"}) {
        const auto & t = r.tensor(name);
        const auto got = f32_tensor(t);
        EXPECT_EQ(got, documented_values(7, name, t.ne[0], got.size())) << name;
        // Spread: uniform on [-a, a], a = sqrt(3 / fan_in): mean ~0, std ~1/sqrt(fan_in).
        double s = 0, s2 = 0, mx = 0;
        for (float x : got) {
            s += x;
            s2 += double(x) * x;
            mx = std::max(mx, std::fabs(double(x)));
        }
        const double n = double(got.size());
        const double sd = std::sqrt(s2 / n - (s / n) * (s / n));
        EXPECT_LE(mx, std::sqrt(3.0 / double(t.ne[0]))) << name;
        EXPECT_NEAR(sd * std::sqrt(double(t.ne[0])), 1.0, 0.05) << name;
        EXPECT_NEAR(s / n, 0.0, 4.0 * sd / std::sqrt(n)) << name;
    }
    // synth_values is the same stream.
    std::vector<float> head(10);
    llm::synth_values(7, "blk.0.attn_q.weight", 64, head);
    EXPECT_EQ(head, documented_values(7, "blk.0.attn_q.weight", 64, 10));
    // Pinned values: a change to the generator changes every benchmark file.
    llm::synth_values(1, "blk.0.attn_q.weight", 64, head);
    const std::vector<float> pinned = {0x1.1a6476p-3f, 0x1.bbf0e8p-4f, -0x1.6d6162p-3f, 0x1.54793ap-5f};
    EXPECT_EQ(std::vector<float>(head.begin(), head.begin() + 4), pinned);
}

// --head-dim: the head size written as attention.key_length and value_length
// (and the RoPE dimensions), wq [n_embd, n_head x head size] and wo the
// transpose shape; wk and wv n_head_kv x head size.
TEST(Synth, HeadSizeKeysAndShapes) {
    temp_dir dir;
    auto p = tiny(TSR_TYPE_F16);
    p.shape.head_dim = 24;
    llm::synth_model(p, dir / "m.gguf");
    const gguf::reader r(dir / "m.gguf");
    EXPECT_EQ(r.get_u32("llama.attention.key_length"), 24u);
    EXPECT_EQ(r.get_u32("llama.attention.value_length"), 24u);
    EXPECT_EQ(r.get_u32("llama.rope.dimension_count"), 24u);
    EXPECT_EQ(r.find_tensor("blk.1.attn_q.weight")->ne[1], 96);
    EXPECT_EQ(r.find_tensor("blk.1.attn_output.weight")->ne[0], 96);
    EXPECT_EQ(r.find_tensor("blk.1.attn_k.weight")->ne[1], 48);
    EXPECT_EQ(r.find_tensor("blk.1.attn_v.weight")->ne[1], 48);
    // Without it the keys are left out, as converters do for n_embd / n_head.
    llm::synth_model(tiny(TSR_TYPE_F16), dir / "plain.gguf");
    EXPECT_FALSE(gguf::reader(dir / "plain.gguf").has_key("llama.attention.key_length"));
}

TEST(Synth, ReproducibleAndSeedDependent) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_Q8_0, 42), dir / "a.gguf");
    llm::synth_model(tiny(TSR_TYPE_Q8_0, 42), dir / "b.gguf");
    llm::synth_model(tiny(TSR_TYPE_Q8_0, 43), dir / "c.gguf");
    const auto a = read_all(dir / "a.gguf");
    EXPECT_EQ(a, read_all(dir / "b.gguf"));
    const auto c = read_all(dir / "c.gguf");
    ASSERT_EQ(a.size(), c.size());
    EXPECT_NE(a, c);
    const gguf::reader r(dir / "a.gguf");
    EXPECT_EQ(r.file_size() - r.data_offset(), llm::synth_data_size(llm::synth_preset("tiny"), 32000, TSR_TYPE_Q8_0));
}

TEST(Synth, EachTypeEqualsQuantizeOfTheF32Model) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_F32, 5), dir / "f32.gguf");
    for (type t : {TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q5_1}) {
        const std::string tn(type_name(t));
        llm::synth_model(tiny(t, 5), dir / ("s_" + tn + ".gguf"));
        llm::quantize_params qp;
        qp.target = t;
        llm::quantize_file(dir / "f32.gguf", dir / ("q_" + tn + ".gguf"), qp);
        EXPECT_EQ(read_all(dir / ("s_" + tn + ".gguf")), read_all(dir / ("q_" + tn + ".gguf"))) << tn;
        const gguf::reader r(dir / ("s_" + tn + ".gguf"));
        EXPECT_EQ(r.tensor("blk.0.ffn_up.weight").type, t);
        EXPECT_EQ(r.tensor("blk.0.ffn_norm.weight").type, TSR_TYPE_F32);
        EXPECT_EQ(r.get_u32("general.file_type"), llm::file_type_of(t));
    }
    // The K-quant targets on the tiny shape (n_embd 64): every matrix falls
    // back; Q4_K_M still gives layer 1's attn_v and ffn_down (and output)
    // Q6_K's fallback Q8_0; Q5_K_M the same with Q5_1 for Q5_0.
    for (const llm::file_type ft : {llm::file_type(TSR_TYPE_Q4_K), llm::file_type(TSR_TYPE_Q6_K), llm::file_type_q4_k_s,
                                    llm::file_type_q4_k_m, llm::file_type(TSR_TYPE_Q5_K), llm::file_type_q5_k_s,
                                    llm::file_type_q5_k_m}) {
        const std::string tn = llm::file_type_name(ft);
        auto sp = tiny(TSR_TYPE_F32, 5);
        sp.wtype = ft;
        llm::synth_model(sp, dir / ("s_" + tn + ".gguf"));
        llm::quantize_params qp;
        qp.target = ft;
        llm::quantize_file(dir / "f32.gguf", dir / ("q_" + tn + ".gguf"), qp);
        EXPECT_EQ(read_all(dir / ("s_" + tn + ".gguf")), read_all(dir / ("q_" + tn + ".gguf"))) << tn;
        const gguf::reader r(dir / ("s_" + tn + ".gguf"));
        EXPECT_EQ(r.get_u32("general.file_type"), llm::file_type_of(ft)) << tn;
        EXPECT_EQ(r.file_size() - r.data_offset(), llm::synth_data_size(sp.shape, 32000, ft)) << tn;
        if (ft == llm::file_type_q4_k_m) {
            EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.0.attn_v.weight").type, TSR_TYPE_Q5_0);
            EXPECT_EQ(r.tensor("blk.1.attn_v.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.1.ffn_up.weight").type, TSR_TYPE_Q5_0);
        }
        if (ft == llm::file_type_q5_k_m) {
            EXPECT_EQ(r.get_u32("general.file_type"), 17u);
            EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("token_embd.weight").type, TSR_TYPE_Q5_1);
            EXPECT_EQ(r.tensor("blk.0.attn_v.weight").type, TSR_TYPE_Q5_1);
            EXPECT_EQ(r.tensor("blk.0.ffn_down.weight").type, TSR_TYPE_Q5_1);
            EXPECT_EQ(r.tensor("blk.1.attn_v.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.1.ffn_up.weight").type, TSR_TYPE_Q5_1);
        }
        if (ft == llm::file_type_q5_k_s) {
            EXPECT_EQ(r.get_u32("general.file_type"), 16u);
            EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q8_0);
            EXPECT_EQ(r.tensor("blk.1.attn_v.weight").type, TSR_TYPE_Q5_1);
            EXPECT_EQ(r.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q5_1);
        }
    }
}

// Q8_K is only the activation format of the K-quant kernels: a model with a
// Q8_K weight is refused at load, naming the file, the tensor and the type.
TEST(Synth, AQ8KWeightIsRefusedAtLoad) {
    temp_dir dir;
    auto p = tiny(TSR_TYPE_F32, 11);
    p.shape = {"k256", 256, 3, 4, 2, 512, 64};
    llm::synth_model(p, dir / "f32.gguf");
    {
        const gguf::reader r(dir / "f32.gguf");
        gguf::writer w;
        w.copy_all_kv(r);
        for (const gguf::tensor_info & ti : r.tensors()) {
            const std::span<const int64_t> ne(ti.ne, ti.n_dims);
            if (ti.name != "blk.1.attn_q.weight") {
                w.add_tensor(ti.name, ti.type, ne, std::span<const uint8_t>(ti.data, ti.size));
                continue;
            }
            std::vector<uint8_t> q(row_size(TSR_TYPE_Q8_K, ti.ne[0]) * static_cast<size_t>(ti.ne[1]));
            get_type_traits(TSR_TYPE_Q8_K).from_float(reinterpret_cast<const float *>(ti.data), q.data(), ti.ne[0] * ti.ne[1]);
            w.add_tensor(ti.name, TSR_TYPE_Q8_K, ne, q);
        }
        w.write(dir / "q8k.gguf");
    }
    try {
        llm::model::load(dir / "q8k.gguf");
        ADD_FAILURE() << "expected an error";
    } catch (const error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("q8k.gguf: tensor 'blk.1.attn_q.weight' has type Q8_K, which this build cannot compute yet"),
                  std::string::npos)
            << msg;
    }
}

namespace {

// The logits of the last of four prompt tokens decoded with `file`.
std::vector<float> logits_of(const fs::path & file) {
    auto m = llm::model::load(file);
    llm::session_params sp;
    sp.n_ctx = 16;
    sp.n_threads = 2;
    llm::session s(*m, sp);
    const std::vector<int32_t> toks = {1, 450, 4996, 17354};
    const auto l = s.decode(toks); // a view into the session: copied
    return std::vector<float>(l.begin(), l.end());
}

// Pearson correlation of two equally long vectors of finite values.
double correlation(const std::vector<float> & a, const std::vector<float> & b) {
    EXPECT_EQ(a.size(), b.size());
    double sab = 0, saa = 0, sbb = 0, ma = 0, mb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(std::isfinite(b[i])) << i;
        ma += a[i];
        mb += b[i];
    }
    ma /= double(a.size());
    mb /= double(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / std::sqrt(saa * sbb);
}

} // namespace

// A shape whose matrices all hold whole 256-element super-blocks (n_embd
// 256, n_ff 512, 3 layers: the medium mixes give layer 2 Q6_K, since
// 2 >= 7*3/8): the Q4_K_M and Q5_K_M synth models equal quantize of the F32
// one, hold the K-quants the rule names, and decode to logits close to the
// F32 model's.
TEST(Synth, MediumMixesOfA256WideShapeMatchQuantizeAndDecode) {
    temp_dir dir;
    auto p = tiny(TSR_TYPE_F32, 11);
    p.shape = {"k256", 256, 3, 4, 2, 512, 64};
    llm::synth_model(p, dir / "f32.gguf");
    const auto a = logits_of(dir / "f32.gguf");
    for (const auto & [ft, base, id] : std::vector<std::tuple<llm::file_type, type, uint32_t>>{
             {llm::file_type_q4_k_m, TSR_TYPE_Q4_K, 15}, {llm::file_type_q5_k_m, TSR_TYPE_Q5_K, 17}}) {
        const std::string tn = llm::file_type_name(ft);
        p.wtype = ft;
        llm::synth_model(p, dir / ("s_" + tn + ".gguf"));
        llm::quantize_params qp;
        qp.target = ft;
        llm::quantize_file(dir / "f32.gguf", dir / ("q_" + tn + ".gguf"), qp);
        EXPECT_EQ(read_all(dir / ("s_" + tn + ".gguf")), read_all(dir / ("q_" + tn + ".gguf"))) << tn;
        {
            const gguf::reader r(dir / ("s_" + tn + ".gguf"));
            EXPECT_EQ(r.get_u32("general.file_type"), id) << tn;
            EXPECT_EQ(r.tensor("token_embd.weight").type, base) << tn;
            EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q6_K) << tn;
            for (int il = 0; il < 3; ++il) {
                const type more = il == 2 ? TSR_TYPE_Q6_K : base;
                EXPECT_EQ(r.tensor(fmt::format("blk.{}.attn_v.weight", il)).type, more) << tn << " " << il;
                EXPECT_EQ(r.tensor(fmt::format("blk.{}.ffn_down.weight", il)).type, more) << tn << " " << il;
                EXPECT_EQ(r.tensor(fmt::format("blk.{}.attn_k.weight", il)).type, base) << tn << " " << il;
                EXPECT_EQ(r.tensor(fmt::format("blk.{}.ffn_gate.weight", il)).type, base) << tn << " " << il;
            }
            EXPECT_EQ(r.file_size() - r.data_offset(), llm::synth_data_size(p.shape, 32000, ft)) << tn;
        }
        // Decoding: the quantized model's logits follow the F32 model's
        // (Pearson correlation measured 0.98 for Q4_K and Q4_0 alone, 0.998
        // for Q6_K, on this shape and seed).
        const auto b = logits_of(dir / ("s_" + tn + ".gguf"));
        ASSERT_EQ(a.size(), b.size());
        EXPECT_GT(correlation(a, b), 0.95) << tn;
    }
}

// Q5_K_M of a shape with the SmolLM-135M widths (n_embd 576: Q5_K falls back
// to Q5_1 and Q6_K to Q8_0; n_ff 1536 = 6 super-blocks: ffn_down keeps the
// K-quants) and 8 layers (more bits in layers 0, 3, 6, 7): the types per
// tensor name, equality with quantize of the F32 model, decoding.
TEST(Synth, Q5KMOfA576WideShapeFallsBackMatchesQuantizeAndDecodes) {
    temp_dir dir;
    auto p = tiny(TSR_TYPE_F32, 13);
    p.shape = {"w576", 576, 8, 9, 3, 1536, 64};
    llm::synth_model(p, dir / "f32.gguf");
    p.wtype = llm::file_type_q5_k_m;
    llm::synth_model(p, dir / "s.gguf");
    llm::quantize_params qp;
    qp.target = llm::file_type_q5_k_m;
    llm::quantize_file(dir / "f32.gguf", dir / "q.gguf", qp);
    EXPECT_EQ(read_all(dir / "s.gguf"), read_all(dir / "q.gguf"));
    {
        const gguf::reader r(dir / "s.gguf");
        EXPECT_EQ(r.get_u32("general.file_type"), 17u);
        EXPECT_EQ(r.tensor("token_embd.weight").type, TSR_TYPE_Q5_1);
        EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q8_0);
        EXPECT_EQ(r.tensor("output_norm.weight").type, TSR_TYPE_F32);
        const std::set<int> more = {0, 3, 6, 7};
        for (int il = 0; il < 8; ++il) {
            const bool m = more.count(il) != 0;
            EXPECT_EQ(r.tensor(fmt::format("blk.{}.attn_v.weight", il)).type, m ? TSR_TYPE_Q8_0 : TSR_TYPE_Q5_1) << il;
            EXPECT_EQ(r.tensor(fmt::format("blk.{}.ffn_down.weight", il)).type, m ? TSR_TYPE_Q6_K : TSR_TYPE_Q5_K) << il;
            for (const char * n : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
                EXPECT_EQ(r.tensor(fmt::format("blk.{}.{}.weight", il, n)).type, TSR_TYPE_Q5_1) << il << " " << n;
            }
            EXPECT_EQ(r.tensor(fmt::format("blk.{}.attn_norm.weight", il)).type, TSR_TYPE_F32) << il;
        }
        EXPECT_EQ(r.file_size() - r.data_offset(), llm::synth_data_size(p.shape, 32000, llm::file_type_q5_k_m));
    }
    const auto a = logits_of(dir / "f32.gguf");
    const auto b = logits_of(dir / "s.gguf");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_GT(correlation(a, b), 0.95);
}

TEST(Synth, LoadsAndDecodesWithSaneLogits) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_Q4_0), dir / "m.gguf");
    auto m = llm::model::load(dir / "m.gguf");
    EXPECT_EQ(m->hp().n_vocab, 32000u);
    EXPECT_EQ(m->hp().n_embd_kv(), 32u);
    EXPECT_EQ(m->type_summary(), "Q4_0");
    llm::session_params sp;
    sp.n_ctx = 16;
    sp.n_threads = 1;
    llm::session s(*m, sp);
    const std::vector<int32_t> toks = {1, 450, 4996, 17354};
    const auto logits = s.decode(toks);
    ASSERT_EQ(logits.size(), 32000u);
    double s1 = 0, s2 = 0;
    for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        s1 += x;
        s2 += double(x) * x;
    }
    const double sd = std::sqrt(s2 / 32000 - (s1 / 32000) * (s1 / 32000));
    EXPECT_GT(sd, 0.05); // not constant
    EXPECT_LT(sd, 20.0); // not blown up
}

TEST(Synth, Errors) {
    temp_dir dir;
    auto expect_error = [&](llm::synth_params p, const std::string & needle) {
        try {
            llm::synth_model(p, dir / "out.gguf");
            ADD_FAILURE() << "expected an error containing " << needle;
        } catch (const error & e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        EXPECT_FALSE(fs::exists(dir / "out.gguf"));
    };
    auto p = tiny(TSR_TYPE_Q4_0);
    p.vocab = dir / "nope.gguf";
    expect_error(p, "nope.gguf: no such file");
    p.vocab = fs::path(TESSERA_SHARED_DIR) / "models" / "mnist-fc-f32.gguf";
    expect_error(p, "no tokenizer.ggml.tokens");
    p = tiny(TSR_TYPE_Q3_K);
    expect_error(p, "synth: weight type Q3_K is not supported (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, "
                    "Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)");
    p = tiny(TSR_TYPE_Q4_K);
    p.shape.n_embd = 80; // fits neither a Q4_K super-block nor a Q4_0 block
    p.shape.n_head = 5;
    p.shape.n_head_kv = 5;
    expect_error(p, "the Q5_0 block size 32");
    p = tiny(TSR_TYPE_Q4_0);
    p.shape.n_embd = 80; // not a multiple of the 32-element block
    p.shape.n_head = 5;
    p.shape.n_head_kv = 5;
    expect_error(p, "block size 32");
    p = tiny(TSR_TYPE_F16);
    p.shape.n_head_kv = 3;
    expect_error(p, "not a multiple of n_head_kv");
    p = tiny(TSR_TYPE_F16);
    p.shape.head_dim = 9;
    expect_error(p, "synth: head size 9 must be even");
    p = tiny(TSR_TYPE_Q8_0);
    p.shape.head_dim = 20; // wo's rows: 4 heads x 20 = 80, no multiple of 32
    expect_error(p, "synth: blk.0.attn_output.weight: rows of 80 elements are not a multiple of the Q8_0 block size 32 "
                    "(n_embd 64, n_ff 128, n_head x head size 4 x 20 = 80)");
    EXPECT_TRUE(fs::is_empty(dir.path)); // no temporaries left

    // The vocabulary with one key's value replaced, written as dir / name.
    const auto vocab_with = [&](const std::string & key, gguf::value val, const std::string & name) {
        const gguf::reader v(vocab_path);
        gguf::writer w;
        for (const gguf::kv & e : v.metadata()) w.set(e.key, e.val);
        w.set(key, std::move(val));
        w.write(dir / name);
        return dir / name;
    };
    // A tokenizer.ggml.model that is not a string is no vocabulary; a BPE
    // one is copied, and synth says which it copied.
    p = tiny(TSR_TYPE_Q4_0);
    p.vocab = vocab_with("tokenizer.ggml.model", gguf::value::u32(1), "model-u32.gguf");
    expect_error(p, "model-u32.gguf: not a vocabulary: no tokenizer.ggml.model string");
    fs::remove(dir / "model-u32.gguf");
    // An empty token list is named as empty, not as missing.
    p.vocab = vocab_with("tokenizer.ggml.tokens", gguf::value::array_string(std::span<const std::string>{}), "tokens-empty.gguf");
    expect_error(p, "tokens-empty.gguf: not a vocabulary: tokenizer.ggml.tokens is empty");
    fs::remove(dir / "tokens-empty.gguf");
    p.vocab = fs::path(TESSERA_SHARED_DIR) / "vocab" / "ggml-vocab-gpt-2.gguf";
    EXPECT_EQ(llm::synth_model(p, dir / "bpe.gguf"), "gpt2");
    fs::remove(dir / "bpe.gguf");

    // -o naming the vocabulary file itself (or a link to it) is refused; the vocabulary stays.
    const fs::path vocab_copy = dir / "vocab.gguf", vocab_link = dir / "vocab-link.gguf";
    fs::copy_file(vocab_path, vocab_copy);
    fs::create_symlink("vocab.gguf", vocab_link);
    const auto size = fs::file_size(vocab_copy);
    p = tiny(TSR_TYPE_Q4_0);
    p.vocab = vocab_copy;
    for (const fs::path & o : {vocab_copy, vocab_link}) {
        const std::string e = tessera::test::error_of([&] { llm::synth_model(p, o); });
        EXPECT_NE(e.find("the output is the vocabulary file itself"), std::string::npos) << o << ": " << e;
    }
    EXPECT_EQ(fs::file_size(vocab_copy), size);
}

// An output name longer than the file system allows is refused before any
// tensor is generated.
TEST(Synth, TooLongOutputNameIsRefusedBeforeGenerating) {
    temp_dir dir;
    llm::synth_params p = tiny(TSR_TYPE_Q8_0, 1);
    size_t n_progress = 0;
    p.progress = [&](size_t, size_t, std::string_view) { ++n_progress; };
    const fs::path out = dir / (std::string(300, 'c') + ".gguf");
    EXPECT_EQ(tessera::test::error_of([&] { llm::synth_model(p, out); }),
              "gguf writer: " + out.string() + ": file name is 305 bytes, longer than the file system allows (255)");
    EXPECT_EQ(n_progress, 0u);
    EXPECT_EQ(dir.n_entries(), 0u);
}
