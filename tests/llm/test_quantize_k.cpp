// The K-quant targets of llm::quantize_file: the Q4_K_M / Q4_K_S and
// Q5_K_M / Q5_K_S per-tensor rules (expected layer lists worked out by hand
// below), the fallback for ne[0] not a multiple of 256, target names, and a
// small GGUF converted to Q4_K_M and Q5_K_M whose bytes must equal the core
// reference quantizers' output for the source values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/quantize.hpp"
#include "llm/quantize_test_data.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

using tessera::test::f32_bytes;
using tessera::test::lcg_values;

struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("quant_k") {}
};

std::vector<uint8_t> bytes_of(const gguf::tensor_info & t) { return {t.data, t.data + t.size}; }

// The reference quantizers of the core, row by row: the bytes Quantize
// writes for x (QK elements per block).
template <typename Block, void (*Quantize)(const float *, Block *, int64_t), size_t QK>
std::vector<uint8_t> ref_bytes(const std::vector<float> & x) {
    std::vector<Block> b(x.size() / QK);
    Quantize(x.data(), b.data(), int64_t(x.size()));
    std::vector<uint8_t> out(b.size() * sizeof(Block));
    std::memcpy(out.data(), b.data(), out.size());
    return out;
}
constexpr auto q4_k_ref = ref_bytes<block_q4_k, quantize_row_q4_k_ref, 256>;
constexpr auto q5_k_ref = ref_bytes<block_q5_k, quantize_row_q5_k_ref, 256>;
constexpr auto q6_k_ref = ref_bytes<block_q6_k, quantize_row_q6_k_ref, 256>;
constexpr auto q5_1_ref = ref_bytes<block_q5_1, quantize_row_q5_1_ref, 32>;
constexpr auto q8_0_ref = ref_bytes<block_q8_0, quantize_row_q8_0_ref, 32>;
constexpr auto q5_0_ref = ref_bytes<block_q5_0, quantize_row_q5_0_ref, 32>;

// The layers whose attn_v / ffn_down get Q6_K in the medium mix `ft`
// (Q4_K_M or Q5_K_M), from the rule; every other layer must get `base`.
std::set<uint32_t> q6_layers(uint32_t n_layer, const llm::file_type & ft = llm::file_type_q4_k_m,
                             type base = TSR_TYPE_Q4_K) {
    std::set<uint32_t> out;
    const int64_t ne[2] = {2048, 256};
    for (uint32_t il = 0; il < n_layer; ++il) {
        const auto v = llm::tensor_type_for(ft, fmt::format("blk.{}.attn_v.weight", il), ne, n_layer);
        const auto d = llm::tensor_type_for(ft, fmt::format("blk.{}.ffn_down.weight", il), ne, n_layer);
        EXPECT_EQ(v, d) << il;
        if (v == TSR_TYPE_Q6_K) out.insert(il);
        else EXPECT_EQ(v, base) << il;
    }
    return out;
}

} // namespace

TEST(QuantizeRules, UseMoreBitsLayerLists) {
    // n = 22: n/8 = 2, 7n/8 = 154/8 = 19 -> 0, 1 and 19, 20, 21; (i - 2) % 3 == 2
    // -> 4, 7, 10, 13, 16 (19 already in).
    EXPECT_EQ(q6_layers(22), (std::set<uint32_t>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
    // n = 30: n/8 = 3, 7n/8 = 210/8 = 26 -> 0, 1, 2 and 26..29; (i - 3) % 3 == 2
    // -> 5, 8, 11, 14, 17, 20, 23.
    EXPECT_EQ(q6_layers(30), (std::set<uint32_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}));
    // n = 2 (the tiny preset): n/8 = 0, 7n/8 = 1 -> layer 1 only.
    EXPECT_EQ(q6_layers(2), (std::set<uint32_t>{1}));
    // Q5_K_M picks the same layers, Q5_K elsewhere.
    EXPECT_EQ(q6_layers(22, llm::file_type_q5_k_m, TSR_TYPE_Q5_K),
              (std::set<uint32_t>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
    EXPECT_EQ(q6_layers(30, llm::file_type_q5_k_m, TSR_TYPE_Q5_K),
              (std::set<uint32_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}));
    // n = 8: n/8 = 1, 7n/8 = 7 -> 0 and 7; (i - 1) % 3 == 2 -> 3, 6.
    EXPECT_EQ(q6_layers(8, llm::file_type_q5_k_m, TSR_TYPE_Q5_K), (std::set<uint32_t>{0, 3, 6, 7}));
    EXPECT_TRUE(llm::use_more_bits(21, 22));
    EXPECT_FALSE(llm::use_more_bits(18, 22));
}

TEST(QuantizeRules, Q4KMOtherTensorsAndQ4KSAndPlain) {
    const int64_t mat[2] = {2048, 2048}, vec[1] = {2048};
    const auto m = llm::file_type_q4_k_m;
    EXPECT_EQ(llm::tensor_type_for(m, "output.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m, "token_embd.weight", mat, 22), TSR_TYPE_Q4_K);
    for (const char * n : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
        EXPECT_EQ(llm::tensor_type_for(m, fmt::format("blk.0.{}.weight", n), mat, 22), TSR_TYPE_Q4_K) << n;
    }
    // Names that only look like the rule's: not blk.N.attn_v.weight.
    EXPECT_EQ(llm::tensor_type_for(m, "blk.x.attn_v.weight", mat, 22), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.0.attn_v.bias", mat, 22), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(m, "attn_v.weight", mat, 22), TSR_TYPE_Q4_K);
    // 1-D tensors are never converted.
    EXPECT_EQ(llm::tensor_type_for(m, "output_norm.weight", vec, 22), std::nullopt);
    // Q4_K_S: output Q6_K, everything else Q4_K.
    const auto s = llm::file_type_q4_k_s;
    EXPECT_EQ(llm::tensor_type_for(s, "output.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(s, "blk.0.attn_v.weight", mat, 22), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(s, "blk.21.ffn_down.weight", mat, 22), TSR_TYPE_Q4_K);
    // Plain targets: one type for all, output too.
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q4_K, "output.weight", mat, 22), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q6_K, "blk.3.attn_q.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q8_0, "output.weight", mat, 22), TSR_TYPE_Q8_0);
}

TEST(QuantizeRules, Q5KMAndQ5KSAndPlainQ5) {
    const int64_t mat[2] = {2048, 2048}, vec[1] = {2048};
    const auto m = llm::file_type_q5_k_m;
    EXPECT_EQ(llm::tensor_type_for(m, "output.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m, "token_embd.weight", mat, 22), TSR_TYPE_Q5_K);
    for (const char * n : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
        EXPECT_EQ(llm::tensor_type_for(m, fmt::format("blk.0.{}.weight", n), mat, 22), TSR_TYPE_Q5_K) << n;
        EXPECT_EQ(llm::tensor_type_for(m, fmt::format("blk.21.{}.weight", n), mat, 22), TSR_TYPE_Q5_K) << n;
    }
    EXPECT_EQ(llm::tensor_type_for(m, "blk.0.attn_v.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.2.attn_v.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.4.ffn_down.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.x.attn_v.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(m, "output_norm.weight", vec, 22), std::nullopt);
    // Q5_K_S: output Q6_K, everything else Q5_K (attn_v / ffn_down too).
    const auto s = llm::file_type_q5_k_s;
    EXPECT_EQ(llm::tensor_type_for(s, "output.weight", mat, 22), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(s, "token_embd.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(s, "blk.0.attn_v.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(s, "blk.21.ffn_down.weight", mat, 22), TSR_TYPE_Q5_K);
    // Plain Q5_K and Q5_1: one type for all, output too.
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_K, "output.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_K, "blk.0.attn_v.weight", mat, 22), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_1, "output.weight", mat, 22), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_1, "blk.0.ffn_down.weight", mat, 22), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_1, "output_norm.weight", vec, 22), std::nullopt);
}

TEST(QuantizeRules, FallbackWhenNe0IsNotAMultipleOf256) {
    const int64_t n576[2] = {576, 576}, n1536[2] = {1536, 576}, n48[2] = {48, 4}, n64[2] = {64, 2};
    const auto m = llm::file_type_q4_k_m;
    // The 135m shape: n_embd 576 = 2.25 super-blocks.
    EXPECT_EQ(llm::tensor_type_for(m, "blk.3.attn_q.weight", n576, 30), TSR_TYPE_Q5_0);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.0.attn_v.weight", n576, 30), TSR_TYPE_Q8_0);
    EXPECT_EQ(llm::tensor_type_for(m, "output.weight", n576, 30), TSR_TYPE_Q8_0);
    // n_ff 1536 = 6 super-blocks: ffn_down keeps the K-quants.
    EXPECT_EQ(llm::tensor_type_for(m, "blk.0.ffn_down.weight", n1536, 30), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m, "blk.3.ffn_down.weight", n1536, 30), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q4_K, "w", n64, 1), TSR_TYPE_Q5_0);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_s, "blk.0.ffn_up.weight", n576, 30), TSR_TYPE_Q5_0);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q6_K, "w", n64, 1), TSR_TYPE_Q8_0);
    // Q5_K_M on the 135m shape: Q5_K -> Q5_1, Q6_K -> Q8_0 where ne[0] = 576.
    const auto m5 = llm::file_type_q5_k_m;
    EXPECT_EQ(llm::tensor_type_for(m5, "blk.3.attn_q.weight", n576, 30), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(m5, "token_embd.weight", n576, 30), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(m5, "blk.0.attn_v.weight", n576, 30), TSR_TYPE_Q8_0);
    EXPECT_EQ(llm::tensor_type_for(m5, "blk.3.attn_v.weight", n576, 30), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(m5, "output.weight", n576, 30), TSR_TYPE_Q8_0);
    EXPECT_EQ(llm::tensor_type_for(m5, "blk.0.ffn_down.weight", n1536, 30), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(m5, "blk.3.ffn_down.weight", n1536, 30), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q5_k_s, "blk.0.ffn_up.weight", n576, 30), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q5_k_s, "blk.0.ffn_down.weight", n1536, 30), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_K, "w", n64, 1), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_1, "w", n64, 1), TSR_TYPE_Q5_1);
    // Not even a 32-element block: copied unchanged.
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q4_K, "w", n48, 1), std::nullopt);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_K, "w", n48, 1), std::nullopt);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_1, "w", n48, 1), std::nullopt);
    // As llama.cpp's quantizer: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0.
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q4_K), TSR_TYPE_Q5_0);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q5_K), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q5_1), TSR_TYPE_Q5_1);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q4_0), TSR_TYPE_Q4_0);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q5_0), TSR_TYPE_Q5_0);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_Q6_K), TSR_TYPE_Q8_0);
    EXPECT_EQ(llm::k_quant_fallback(TSR_TYPE_F16), TSR_TYPE_F16);
    // rule_type_for is the choice before the fallback.
    EXPECT_EQ(llm::rule_type_for(m, "output.weight", 30), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::rule_type_for(m5, "blk.3.attn_q.weight", 30), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::rule_type_for(m5, "blk.0.attn_v.weight", 30), TSR_TYPE_Q6_K);
}

TEST(QuantizeRules, TargetNames) {
    EXPECT_EQ(llm::quantize_target_names(),
              "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M");
    EXPECT_EQ(llm::parse_file_type("q5_0"), llm::file_type(TSR_TYPE_Q5_0));
    EXPECT_EQ(llm::parse_file_type("q4_k_m"), llm::file_type_q4_k_m);
    EXPECT_EQ(llm::parse_file_type("Q4_K_S"), llm::file_type_q4_k_s);
    EXPECT_EQ(llm::parse_file_type("Q6_K"), llm::file_type(TSR_TYPE_Q6_K));
    EXPECT_EQ(llm::parse_file_type("f16"), llm::file_type(TSR_TYPE_F16));
    EXPECT_EQ(llm::file_type_name(llm::file_type_q4_k_m), "Q4_K_M");
    EXPECT_EQ(llm::file_type_name(TSR_TYPE_Q4_K), "Q4_K");
    EXPECT_EQ(llm::parse_file_type("q5_k_m"), llm::file_type_q5_k_m);
    EXPECT_EQ(llm::parse_file_type("Q5_K_S"), llm::file_type_q5_k_s);
    EXPECT_EQ(llm::parse_file_type("Q5_K"), llm::file_type(TSR_TYPE_Q5_K));
    EXPECT_EQ(llm::parse_file_type("q5_1"), llm::file_type(TSR_TYPE_Q5_1));
    EXPECT_EQ(llm::file_type_name(llm::file_type_q5_k_m), "Q5_K_M");
    EXPECT_EQ(llm::file_type_name(llm::file_type_q5_k_s), "Q5_K_S");
    EXPECT_EQ(llm::file_type_name(TSR_TYPE_Q5_1), "Q5_1");
    EXPECT_EQ(llm::file_type_q5_k_m.base, TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::file_type_q5_k_s.base, TSR_TYPE_Q5_K);
    for (const char * bad : {"Q3_K", "Q2_K", "Q4_1", "Q3_K_M", "Q4_K_L", "Q5_K_L", "Q6_K_M", "", "Q9_9"}) {
        try {
            llm::parse_file_type(bad);
            ADD_FAILURE() << "expected an error for '" << bad << "'";
        } catch (const error & e) {
            EXPECT_EQ(std::string(e.what()),
                      fmt::format("unknown or unsupported quantization type '{}' (supported: F32, F16, BF16, Q8_0, Q4_0, "
                                  "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)",
                                  bad));
        }
    }
    EXPECT_FALSE(llm::is_quantize_target(TSR_TYPE_Q3_K));
    EXPECT_FALSE(llm::is_quantize_target(TSR_TYPE_Q4_1));
    EXPECT_TRUE(llm::is_quantize_target(TSR_TYPE_Q5_K));
    EXPECT_TRUE(llm::is_quantize_target(TSR_TYPE_Q5_1));
    EXPECT_TRUE(llm::is_quantize_target(llm::file_type_q4_k_m));
    EXPECT_TRUE(llm::is_quantize_target(llm::file_type_q5_k_m));
    EXPECT_TRUE(llm::is_quantize_target(llm::file_type_q5_k_s));
    // A mix with a base it does not name is no target.
    EXPECT_FALSE(llm::is_quantize_target(llm::file_type(TSR_TYPE_Q4_K, llm::file_type::mix::q5_k_m)));
    EXPECT_FALSE(llm::is_quantize_target(llm::file_type(TSR_TYPE_Q5_K, llm::file_type::mix::q4_k_s)));
}

TEST(QuantizeRules, LayerCountFromKeyOrTensorNames) {
    temp_dir dir;
    const int64_t ne[] = {32};
    const std::vector<uint8_t> data(32 * 4, 0);
    {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        w.set_u32("llama.block_count", 22);
        w.add_tensor("blk.3.attn_norm.weight", TSR_TYPE_F32, ne, data);
        w.write(dir / "key.gguf");
    }
    {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        w.add_tensor("blk.3.attn_norm.weight", TSR_TYPE_F32, ne, data);
        w.add_tensor("blk.11.attn_norm.weight", TSR_TYPE_F32, ne, data);
        w.add_tensor("blk.7.attn_norm.weight", TSR_TYPE_F32, ne, data);
        w.write(dir / "names.gguf");
    }
    EXPECT_EQ(llm::n_layer_of(gguf::reader(dir / "key.gguf")), 22u);
    EXPECT_EQ(llm::n_layer_of(gguf::reader(dir / "names.gguf")), 12u);
}

// A block_count below the layers the tensor names show is refused, naming
// the key, its value and a tensor past it: stories260K (blk.0 .. blk.4)
// with block_count 0 was quantized with every attn_v taken for a "more
// bits" layer, exit 0, into a file run refuses. A larger count stays
// allowed (LayerCountFromKeyOrTensorNames: 22 with blk.3 only).
TEST(QuantizeRules, BlockCountBelowTheTensorLayersIsRefused) {
    temp_dir dir;
    const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    for (const uint32_t n : {0u, 4u}) {
        SCOPED_TRACE(n);
        const fs::path in = dir / fmt::format("short{}.gguf", n);
        {
            const gguf::reader src(stories);
            gguf::writer w;
            w.copy_all_kv(src);
            w.set_u32("llama.block_count", n);
            for (const gguf::tensor_info & ti : src.tensors()) w.copy_tensor(src, ti.name);
            w.write(in);
        }
        const std::string want = fmt::format("key 'llama.block_count' = {}, but tensor 'blk.4.", n);
        const std::string what = tessera::test::error_of([&] { (void)llm::n_layer_of(gguf::reader(in)); });
        EXPECT_NE(what.find(want), std::string::npos) << what;
        EXPECT_NE(what.find("belongs to layer 4 (the tensors name 5 layers)"), std::string::npos) << what;
        llm::quantize_params p;
        p.target = llm::file_type_q4_k_m;
        const fs::path out = dir / "out.gguf";
        const std::string q = tessera::test::error_of([&] { llm::quantize_file(in, out, p); });
        EXPECT_NE(q.find(want), std::string::npos) << q;
        EXPECT_FALSE(fs::exists(out));
    }
    EXPECT_EQ(llm::n_layer_of(gguf::reader(stories)), 5u);
}

// A 22-layer-style file (block_count 22, a few of its tensors) converted to
// Q4_K_M: each tensor's type follows the rule and its bytes are the core
// reference quantizer's output for the source values.
TEST(QuantizeK, Q4KMBytesEqualTheReferenceQuantizers) {
    temp_dir dir;
    struct src {
        std::string name;
        int64_t ne0, ne1;
        type want; // expected type after quantize
    };
    const std::vector<src> srcs = {
        {"token_embd.weight", 512, 3, TSR_TYPE_Q4_K},
        {"output.weight", 256, 3, TSR_TYPE_Q6_K},
        {"blk.0.attn_v.weight", 256, 2, TSR_TYPE_Q6_K},   // layer 0 < 22/8
        {"blk.2.attn_v.weight", 256, 2, TSR_TYPE_Q4_K},   // (2 - 2) % 3 = 0
        {"blk.4.ffn_down.weight", 512, 2, TSR_TYPE_Q6_K}, // (4 - 2) % 3 = 2
        {"blk.5.ffn_down.weight", 256, 2, TSR_TYPE_Q4_K},
        {"blk.20.attn_q.weight", 256, 2, TSR_TYPE_Q4_K},  // not attn_v/ffn_down
        {"blk.1.attn_k.weight", 64, 2, TSR_TYPE_Q5_0},    // 64 % 256 != 0: fallback
        {"blk.1.ffn_down.weight", 96, 2, TSR_TYPE_Q8_0},  // Q6_K's fallback
        {"odd.weight", 48, 2, TSR_TYPE_F32},              // fits no block: kept
    };
    std::vector<std::vector<float>> vals;
    {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        w.set_u32("general.file_type", 0);
        w.set_u32("llama.block_count", 22);
        uint64_t seed = 100;
        for (const src & s : srcs) {
            vals.push_back(lcg_values(size_t(s.ne0 * s.ne1), seed++, 0.5f));
            const int64_t ne[] = {s.ne0, s.ne1};
            w.add_tensor(s.name, TSR_TYPE_F32, ne, f32_bytes(vals.back()));
        }
        const int64_t ne_norm[] = {256};
        w.add_tensor("output_norm.weight", TSR_TYPE_F32, ne_norm, f32_bytes(lcg_values(256, 1, 1.0f)));
        w.write(dir / "in.gguf");
    }
    llm::quantize_params p;
    p.target = llm::file_type_q4_k_m;
    std::vector<std::string> notes;
    p.progress = [&](const llm::quantize_progress & pr) {
        if (pr.wanted != pr.to) notes.push_back(fmt::format("{} {}->{}", pr.name, type_name(pr.wanted), type_name(pr.to)));
    };
    const auto res = llm::quantize_file(dir / "in.gguf", dir / "out.gguf", p);
    EXPECT_EQ(res.n_converted, srcs.size() - 1);
    EXPECT_EQ(res.n_by_type, (std::vector<std::pair<type, size_t>>{
                                 {TSR_TYPE_Q4_K, 4}, {TSR_TYPE_Q6_K, 3}, {TSR_TYPE_Q5_0, 1}, {TSR_TYPE_Q8_0, 1}}));
    EXPECT_EQ(notes, (std::vector<std::string>{"blk.1.attn_k.weight Q4_K->Q5_0", "blk.1.ffn_down.weight Q6_K->Q8_0",
                                               "odd.weight Q4_K->F32"}));

    const gguf::reader r(dir / "out.gguf");
    EXPECT_EQ(r.get_u32("general.file_type"), 15u);
    EXPECT_EQ(r.get_u32("general.quantization_version"), 2u);
    for (size_t i = 0; i < srcs.size(); ++i) {
        const src & s = srcs[i];
        const auto & t = r.tensor(s.name);
        ASSERT_EQ(t.type, s.want) << s.name;
        std::vector<uint8_t> want;
        switch (s.want) {
        case TSR_TYPE_Q4_K: want = q4_k_ref(vals[i]); break;
        case TSR_TYPE_Q6_K: want = q6_k_ref(vals[i]); break;
        case TSR_TYPE_Q5_0: want = q5_0_ref(vals[i]); break;
        case TSR_TYPE_F32: want = f32_bytes(vals[i]); break;
        default: {
            std::vector<block_q8_0> b(vals[i].size() / 32);
            quantize_row_q8_0_ref(vals[i].data(), b.data(), int64_t(vals[i].size()));
            want.resize(b.size() * sizeof(block_q8_0));
            std::memcpy(want.data(), b.data(), want.size());
        }
        }
        EXPECT_EQ(bytes_of(t), want) << s.name;
        // Decoded back, the values stay near the source (Q4_K: 16 levels
        // over a sub-block's range; Q6_K: 64).
        std::vector<float> back(vals[i].size());
        get_type_traits(t.type).to_float(t.data, back.data(), int64_t(back.size()));
        double err = 0;
        for (size_t j = 0; j < back.size(); ++j) err = std::max(err, std::fabs(double(back[j]) - vals[i][j]));
        EXPECT_LT(err, s.want == TSR_TYPE_Q6_K ? 0.02 : 0.07) << s.name;
    }
}

// The same kind of file converted to Q5_K_M: Q5_K where Q4_K_M has Q4_K,
// Q5_1 where it has Q5_0 (the Q5_K fallback), Q6_K and Q8_0 unchanged; each
// tensor's bytes are the core reference quantizer's output.
TEST(QuantizeK, Q5KMBytesEqualTheReferenceQuantizers) {
    temp_dir dir;
    struct src {
        std::string name;
        int64_t ne0, ne1;
        type want; // expected type after quantize
    };
    const std::vector<src> srcs = {
        {"token_embd.weight", 512, 3, TSR_TYPE_Q5_K},
        {"output.weight", 256, 3, TSR_TYPE_Q6_K},
        {"blk.0.attn_v.weight", 256, 2, TSR_TYPE_Q6_K},   // layer 0 < 22/8
        {"blk.2.attn_v.weight", 256, 2, TSR_TYPE_Q5_K},   // (2 - 2) % 3 = 0
        {"blk.4.ffn_down.weight", 512, 2, TSR_TYPE_Q6_K}, // (4 - 2) % 3 = 2
        {"blk.5.ffn_down.weight", 256, 2, TSR_TYPE_Q5_K},
        {"blk.21.attn_q.weight", 256, 2, TSR_TYPE_Q5_K},  // not attn_v/ffn_down
        {"blk.1.attn_k.weight", 64, 2, TSR_TYPE_Q5_1},    // 64 % 256 != 0: Q5_K's fallback
        {"blk.3.attn_v.weight", 96, 2, TSR_TYPE_Q5_1},    // (3 - 2) % 3 = 1: Q5_K, falls back
        {"blk.1.ffn_down.weight", 96, 2, TSR_TYPE_Q8_0},  // Q6_K's fallback
        {"odd.weight", 48, 2, TSR_TYPE_F32},              // fits no block: kept
    };
    std::vector<std::vector<float>> vals;
    {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        w.set_u32("general.file_type", 0);
        w.set_u32("llama.block_count", 22);
        uint64_t seed = 200;
        for (const src & s : srcs) {
            vals.push_back(lcg_values(size_t(s.ne0 * s.ne1), seed++, 0.5f));
            const int64_t ne[] = {s.ne0, s.ne1};
            w.add_tensor(s.name, TSR_TYPE_F32, ne, f32_bytes(vals.back()));
        }
        w.write(dir / "in.gguf");
    }
    llm::quantize_params p;
    p.target = llm::file_type_q5_k_m;
    std::vector<std::string> notes;
    p.progress = [&](const llm::quantize_progress & pr) {
        if (pr.wanted != pr.to) notes.push_back(fmt::format("{} {}->{}", pr.name, type_name(pr.wanted), type_name(pr.to)));
    };
    const auto res = llm::quantize_file(dir / "in.gguf", dir / "out.gguf", p);
    EXPECT_EQ(res.n_converted, srcs.size() - 1);
    EXPECT_EQ(res.n_by_type, (std::vector<std::pair<type, size_t>>{
                                 {TSR_TYPE_Q5_K, 4}, {TSR_TYPE_Q6_K, 3}, {TSR_TYPE_Q5_1, 2}, {TSR_TYPE_Q8_0, 1}}));
    EXPECT_EQ(notes, (std::vector<std::string>{"blk.1.attn_k.weight Q5_K->Q5_1", "blk.3.attn_v.weight Q5_K->Q5_1",
                                               "blk.1.ffn_down.weight Q6_K->Q8_0", "odd.weight Q5_K->F32"}));

    const gguf::reader r(dir / "out.gguf");
    EXPECT_EQ(r.get_u32("general.file_type"), 17u);
    for (size_t i = 0; i < srcs.size(); ++i) {
        const src & s = srcs[i];
        const auto & t = r.tensor(s.name);
        ASSERT_EQ(t.type, s.want) << s.name;
        std::vector<uint8_t> want;
        switch (s.want) {
        case TSR_TYPE_Q5_K: want = q5_k_ref(vals[i]); break;
        case TSR_TYPE_Q6_K: want = q6_k_ref(vals[i]); break;
        case TSR_TYPE_Q5_1: want = q5_1_ref(vals[i]); break;
        case TSR_TYPE_Q8_0: want = q8_0_ref(vals[i]); break;
        default: want = f32_bytes(vals[i]);
        }
        EXPECT_EQ(bytes_of(t), want) << s.name;
        // Decoded back, the values stay near the source (32 levels over a
        // sub-block's or block's range of about 1: half a step 0.016).
        std::vector<float> back(vals[i].size());
        get_type_traits(t.type).to_float(t.data, back.data(), int64_t(back.size()));
        double err = 0;
        for (size_t j = 0; j < back.size(); ++j) err = std::max(err, std::fabs(double(back[j]) - vals[i][j]));
        EXPECT_LT(err, 0.035) << s.name;
    }
}

TEST(QuantizeK, PlainTargetsAndRequantizeRule) {
    temp_dir dir;
    const auto x = lcg_values(512 * 2, 5, 1.0f);
    {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        const int64_t ne[] = {512, 2};
        w.add_tensor("output.weight", TSR_TYPE_F32, ne, f32_bytes(x));
        w.write(dir / "in.gguf");
    }
    for (const auto & [ft, id, t] : std::vector<std::tuple<llm::file_type, uint32_t, type>>{
             {TSR_TYPE_Q4_K, 14, TSR_TYPE_Q4_K},
             {TSR_TYPE_Q6_K, 18, TSR_TYPE_Q6_K},
             {llm::file_type_q4_k_s, 14, TSR_TYPE_Q6_K},
             {TSR_TYPE_Q5_K, 16, TSR_TYPE_Q5_K},
             {TSR_TYPE_Q5_1, 9, TSR_TYPE_Q5_1},
             {llm::file_type_q5_k_s, 16, TSR_TYPE_Q6_K},
             {llm::file_type_q5_k_m, 17, TSR_TYPE_Q6_K}}) {
        llm::quantize_params p;
        p.target = ft;
        const fs::path out = dir / (llm::file_type_name(ft) + ".gguf");
        llm::quantize_file(dir / "in.gguf", out, p);
        const gguf::reader r(out);
        EXPECT_EQ(r.get_u32("general.file_type"), id) << llm::file_type_name(ft);
        EXPECT_EQ(r.tensor("output.weight").type, t) << llm::file_type_name(ft);
        const std::vector<uint8_t> want = t == TSR_TYPE_Q4_K   ? q4_k_ref(x)
                                          : t == TSR_TYPE_Q5_K ? q5_k_ref(x)
                                          : t == TSR_TYPE_Q5_1 ? q5_1_ref(x)
                                                               : q6_k_ref(x);
        EXPECT_EQ(bytes_of(r.tensor("output.weight")), want) << llm::file_type_name(ft);
    }
    // Q5_K is a block type too: a Q5_K file to Q6_K needs permission as well.
    {
        llm::quantize_params q;
        q.target = TSR_TYPE_Q6_K;
        EXPECT_THROW(llm::quantize_file(dir / "Q5_K.gguf", dir / "requant5.gguf", q), error);
        EXPECT_FALSE(fs::exists(dir / "requant5.gguf"));
    }
    // A Q4_K file to Q6_K: already quantized, refused unless allowed.
    llm::quantize_params p;
    p.target = TSR_TYPE_Q6_K;
    try {
        llm::quantize_file(dir / "Q4_K.gguf", dir / "requant.gguf", p);
        ADD_FAILURE() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("already quantized (Q4_K); converting it to Q6_K"), std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "requant.gguf"));
    p.allow_requantize = true;
    llm::quantize_file(dir / "Q4_K.gguf", dir / "requant.gguf", p);
    EXPECT_EQ(gguf::reader(dir / "requant.gguf").tensor("output.weight").type, TSR_TYPE_Q6_K);
    // A Q4_K input to plain Q4_K is copied, not requantized.
    p.allow_requantize = false;
    p.target = TSR_TYPE_Q4_K;
    llm::quantize_file(dir / "Q4_K.gguf", dir / "same.gguf", p);
    EXPECT_EQ(bytes_of(gguf::reader(dir / "same.gguf").tensor("output.weight")), q4_k_ref(x));
}

// Tied embeddings (no output.weight): token_embd is the output projection
// too and gets output.weight's Q6_K in the mixes; with output.weight
// present it stays Q4_K.
TEST(QuantizeK, TiedTokenEmbdGetsTheOutputType) {
    const int64_t mat[2] = {512, 64};
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_m, "token_embd.weight", mat, 22, true), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_s, "token_embd.weight", mat, 22, true), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_m, "token_embd.weight", mat, 22, false), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q4_K, "token_embd.weight", mat, 22, true), TSR_TYPE_Q4_K); // plain: one type
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_m, "blk.0.attn_q.weight", mat, 22, true), TSR_TYPE_Q4_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q5_k_m, "token_embd.weight", mat, 22, true), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q5_k_s, "token_embd.weight", mat, 22, true), TSR_TYPE_Q6_K);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q5_k_m, "token_embd.weight", mat, 22, false), TSR_TYPE_Q5_K);
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q5_K, "token_embd.weight", mat, 22, true), TSR_TYPE_Q5_K);

    temp_dir dir;
    const auto x = lcg_values(512 * 4, 9, 1.0f);
    for (const bool with_output : {false, true}) {
        const fs::path in = dir / (with_output ? "untied.gguf" : "tied.gguf");
        {
            gguf::writer w;
            w.set_string("general.architecture", "llama");
            const int64_t ne[] = {512, 4};
            w.add_tensor("token_embd.weight", TSR_TYPE_F32, ne, f32_bytes(x));
            if (with_output) w.add_tensor("output.weight", TSR_TYPE_F32, ne, f32_bytes(x));
            w.write(in);
        }
        llm::quantize_params p;
        p.target = llm::file_type_q4_k_m;
        const fs::path out = dir / (with_output ? "untied-q4km.gguf" : "tied-q4km.gguf");
        llm::quantize_file(in, out, p);
        const gguf::reader r(out);
        const type want = with_output ? TSR_TYPE_Q4_K : TSR_TYPE_Q6_K;
        EXPECT_EQ(r.tensor("token_embd.weight").type, want) << with_output;
        EXPECT_EQ(bytes_of(r.tensor("token_embd.weight")), with_output ? q4_k_ref(x) : q6_k_ref(x));

        p.target = llm::file_type_q5_k_m;
        const fs::path out5 = dir / (with_output ? "untied-q5km.gguf" : "tied-q5km.gguf");
        llm::quantize_file(in, out5, p);
        const gguf::reader r5(out5);
        EXPECT_EQ(r5.tensor("token_embd.weight").type, with_output ? TSR_TYPE_Q5_K : TSR_TYPE_Q6_K) << with_output;
        EXPECT_EQ(bytes_of(r5.tensor("token_embd.weight")), with_output ? q5_k_ref(x) : q6_k_ref(x));
        if (with_output) {
            EXPECT_EQ(r5.tensor("output.weight").type, TSR_TYPE_Q6_K);
            EXPECT_EQ(bytes_of(r5.tensor("output.weight")), q6_k_ref(x));
        }
    }
}
