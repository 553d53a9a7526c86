// gguf::reader on the real files in shared/models and shared/vocab: every file
// parses, and values listed in shared/models/SOURCES.md are read back.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "gguf/gguf_bytes.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

gguf::reader open_model(const char * name) { return gguf::reader(shared_dir() / "models" / name); }
gguf::reader open_vocab(const char * name) { return gguf::reader(shared_dir() / "vocab" / name); }

// Last byte of tensor data (max of file_offset + size).
uint64_t data_end(const gguf::reader & r) {
    uint64_t end = 0;
    for (const auto & t : r.tensors()) end = std::max(end, t.file_offset + t.size);
    return end;
}

} // namespace

TEST(GgufReal, EveryFileParses) {
    const auto files = shared_gguf_files();
    ASSERT_EQ(files.size(), 7u); // 3 models + 4 vocab GGUFs (SOURCES.md)
    for (const auto & f : files) {
        SCOPED_TRACE(f.string());
        gguf::reader r(f);
        EXPECT_EQ(r.version(), 3u);
        EXPECT_EQ(r.alignment(), 32u);
        EXPECT_EQ(r.data_offset() % 32, 0u);
        EXPECT_TRUE(r.has_key("general.architecture"));
        // Zero-copy views: each tensor's bytes equal the file's bytes at file_offset.
        const auto bytes = read_file(f);
        ASSERT_EQ(bytes.size(), r.file_size());
        for (const auto & t : r.tensors()) {
            ASSERT_LE(t.file_offset + t.size, bytes.size());
            EXPECT_EQ(std::memcmp(t.data, bytes.data() + t.file_offset, t.size), 0) << t.name;
            EXPECT_EQ(t.file_offset, r.data_offset() + t.offset);
        }
    }
}

TEST(GgufReal, Stories260K) {
    auto r = open_model("stories260K.gguf");
    EXPECT_EQ(r.n_kv(), 19u);
    EXPECT_EQ(r.n_tensors(), 48u);
    EXPECT_EQ(r.data_offset(), 14176u);
    EXPECT_EQ(r.file_size(), 1185376u);
    EXPECT_EQ(data_end(r), 1185376u);
    EXPECT_EQ(r.get_string("general.architecture"), "llama");
    EXPECT_EQ(r.get_string("general.name"), "llama");
    EXPECT_EQ(r.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(r.get_u32("llama.context_length"), 2048u);
    EXPECT_EQ(r.get_u32("llama.embedding_length"), 64u);
    EXPECT_EQ(r.get_u32("llama.feed_forward_length"), 172u);
    EXPECT_EQ(r.get_u32("llama.attention.head_count"), 8u);
    EXPECT_EQ(r.get_u32("llama.attention.head_count_kv"), 4u);
    EXPECT_EQ(r.get_u32("llama.block_count"), 5u);
    EXPECT_EQ(r.get_u32("llama.rope.dimension_count"), 8u);
    EXPECT_EQ(r.get_f32("llama.attention.layer_norm_rms_epsilon"), 9.999999747378752e-06f);
    EXPECT_EQ(r.get_u32("tokenizer.ggml.seperator_token_id"), 4294967295u);
    EXPECT_EQ(r.get_u32("tokenizer.ggml.padding_token_id"), 4294967295u);
    EXPECT_EQ(r.get_int("tokenizer.ggml.bos_token_id"), 1);
    EXPECT_FALSE(r.has_key("general.file_type"));
    EXPECT_FALSE(r.find_f32("llama.rope.freq_base").has_value());

    const auto tokens = r.get_array_string("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 512u);
    EXPECT_EQ(tokens[0], "<unk>");
    EXPECT_EQ(tokens[1], "<s>");
    EXPECT_EQ(tokens[2], "</s>");
    EXPECT_EQ(tokens[3], "<0x00>");
    EXPECT_EQ(tokens[258], "<0xFF>");
    const auto types = r.get_array_i32("tokenizer.ggml.token_type");
    ASSERT_EQ(types.size(), 512u);
    EXPECT_EQ((std::vector<int32_t>(types.begin(), types.begin() + 8)), (std::vector<int32_t>{2, 3, 3, 6, 6, 6, 6, 6}));
    // 3 control/unknown, 256 byte tokens, 253 normal (SOURCES.md)
    EXPECT_EQ(std::count(types.begin(), types.end(), 6), 256);
    EXPECT_EQ(std::count(types.begin(), types.end(), 1), 253);
    EXPECT_EQ(r.get_array_f32("tokenizer.ggml.scores").size(), 512u);

    const auto & emb = r.tensor("token_embd.weight");
    EXPECT_EQ(emb.type, TSR_TYPE_F32);
    EXPECT_EQ(emb.n_dims, 2u);
    EXPECT_EQ(emb.ne[0], 64);
    EXPECT_EQ(emb.ne[1], 512);
    EXPECT_EQ(emb.ne[2], 1);
    EXPECT_EQ(emb.size, 131072u);
    const auto & k = r.tensor("blk.0.attn_k.weight");
    EXPECT_EQ(k.ne[0], 64);
    EXPECT_EQ(k.ne[1], 32);
    EXPECT_EQ(k.size, 8192u);
    const auto & down = r.tensor("blk.4.ffn_down.weight");
    EXPECT_EQ(down.ne[0], 172);
    EXPECT_EQ(down.ne[1], 64);
    EXPECT_EQ(down.size, 44032u);
    const auto & norm = r.tensor("output_norm.weight");
    EXPECT_EQ(norm.n_dims, 1u);
    EXPECT_EQ(norm.ne[0], 64);
    // The tied classifier is written twice, byte for byte.
    const auto & out = r.tensor("output.weight");
    ASSERT_EQ(out.size, emb.size);
    EXPECT_EQ(std::memcmp(out.data, emb.data, emb.size), 0);
    EXPECT_NE(out.data, emb.data);

    int64_t params = 0;
    for (const auto & t : r.tensors()) {
        EXPECT_EQ(t.type, TSR_TYPE_F32);
        params += t.n_elements();
    }
    EXPECT_EQ(params, 292800);
    EXPECT_EQ(r.find_tensor("blk.5.attn_q.weight"), nullptr);
    EXPECT_EQ(r.tensors()[0].name, "token_embd.weight"); // file order
}

TEST(GgufReal, LlamaTinyRandom) {
    auto r = open_model("llama-2-tiny-random.gguf");
    EXPECT_EQ(r.n_kv(), 18u);
    EXPECT_EQ(r.n_tensors(), 12u);
    EXPECT_EQ(r.data_offset(), 724416u);
    EXPECT_EQ(data_end(r), r.file_size());
    EXPECT_EQ(r.get_string("general.name"), "LLaMA v2");
    EXPECT_EQ(r.get_u32("general.file_type"), 1u);
    EXPECT_EQ(r.get_u32("llama.context_length"), 4096u);
    EXPECT_EQ(r.get_u32("llama.embedding_length"), 8u);
    EXPECT_EQ(r.get_u32("llama.rope.dimension_count"), 4u);
    const auto & emb = r.tensor("token_embd.weight");
    EXPECT_EQ(emb.type, TSR_TYPE_F16);
    EXPECT_EQ(emb.ne[0], 8);
    EXPECT_EQ(emb.ne[1], 32000);
    EXPECT_EQ(emb.size, 512000u);
    EXPECT_EQ(r.tensor("blk.0.ffn_down.weight").ne[0], 32);
    EXPECT_EQ(r.tensor("blk.0.attn_norm.weight").type, TSR_TYPE_F32);
    EXPECT_EQ(r.tensor("blk.0.attn_norm.weight").size, 32u);
    std::map<int, int> by_type;
    int64_t params = 0;
    for (const auto & t : r.tensors()) {
        ++by_type[t.type];
        params += t.n_elements();
    }
    EXPECT_EQ(by_type[TSR_TYPE_F16], 9);
    EXPECT_EQ(by_type[TSR_TYPE_F32], 3);
    EXPECT_EQ(params, 513048);
    // Same token arrays as the llama-spm vocabulary (SOURCES.md).
    auto v = open_vocab("ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(r.get_array_string("tokenizer.ggml.tokens"), v.get_array_string("tokenizer.ggml.tokens"));
    EXPECT_TRUE(r.get("tokenizer.ggml.scores") == v.get("tokenizer.ggml.scores"));
    EXPECT_TRUE(r.get("tokenizer.ggml.token_type") == v.get("tokenizer.ggml.token_type"));
}

TEST(GgufReal, MnistPaddedDataSection) {
    auto r = open_model("mnist-fc-f32.gguf");
    EXPECT_EQ(r.n_kv(), 1u);
    EXPECT_EQ(r.get_string("general.architecture"), "mnist-fc");
    EXPECT_EQ(r.n_tensors(), 4u);
    EXPECT_EQ(r.data_offset(), 256u);
    EXPECT_EQ(data_end(r), 1590312u);
    EXPECT_EQ(r.file_size(), 1590336u);
    const auto & fc1 = r.tensor("fc1.weight");
    EXPECT_EQ(fc1.ne[0], 784);
    EXPECT_EQ(fc1.ne[1], 500);
    EXPECT_EQ(fc1.size, 1568000u);
    const auto & b1 = r.tensor("fc1.bias");
    EXPECT_EQ(b1.n_dims, 1u);
    EXPECT_EQ(b1.ne[0], 500);
    EXPECT_EQ(b1.offset, 1568000u);
    EXPECT_EQ(r.tensor("fc2.weight").ne[1], 10);
    EXPECT_EQ(r.tensor("fc2.bias").size, 40u);
    // Trained weights: max |w| of fc1 is about 0.59 (SOURCES.md), all finite.
    float amax = 0;
    for (int64_t i = 0; i < fc1.n_elements(); ++i) {
        float w;
        std::memcpy(&w, fc1.data + 4 * i, 4);
        ASSERT_TRUE(std::isfinite(w));
        amax = std::max(amax, std::fabs(w));
    }
    EXPECT_GT(amax, 0.5f);
    EXPECT_LT(amax, 0.7f);
}

TEST(GgufReal, VocabFiles) {
    {
        auto r = open_vocab("ggml-vocab-bert-bge.gguf");
        EXPECT_EQ(r.n_kv(), 20u);
        EXPECT_EQ(r.n_tensors(), 0u);
        EXPECT_EQ(r.data_offset(), 627552u);
        EXPECT_GT(r.data_offset(), r.file_size()); // ends right after the metadata
        EXPECT_FALSE(r.get_bool("bert.attention.causal"));
        EXPECT_EQ(r.get_f32("bert.attention.layer_norm_epsilon"), 9.999999960041972e-13f);
        EXPECT_EQ(r.get_u32("tokenizer.ggml.cls_token_id"), 101u);
        const auto tokens = r.get_array_string("tokenizer.ggml.tokens");
        ASSERT_EQ(tokens.size(), 30522u);
        EXPECT_EQ(tokens[0], "[PAD]");
        EXPECT_EQ(tokens[1], "[unused0]");
    }
    {
        auto r = open_vocab("ggml-vocab-gpt-2.gguf");
        EXPECT_EQ(r.n_kv(), 16u);
        EXPECT_EQ(r.data_offset(), 1766816u);
        EXPECT_EQ(r.get_string("tokenizer.ggml.pre"), "gpt-2");
        EXPECT_EQ(r.get_u32("tokenizer.ggml.bos_token_id"), 50256u);
        const auto merges = r.get_array_string("tokenizer.ggml.merges");
        ASSERT_EQ(merges.size(), 50000u);
        EXPECT_EQ(merges[0], "\xC4\xA0 t"); // "Ġ t"
        EXPECT_EQ(merges[2], "h e");
        const auto tokens = r.get_array_string("tokenizer.ggml.tokens");
        ASSERT_EQ(tokens.size(), 50257u);
        EXPECT_EQ(tokens[0], "!");
        EXPECT_EQ(tokens[1], "\"");
    }
    {
        auto r = open_vocab("ggml-vocab-llama-spm.gguf");
        EXPECT_EQ(r.n_kv(), 22u);
        EXPECT_EQ(r.data_offset(), 723872u);
        EXPECT_TRUE(r.get_bool("tokenizer.ggml.add_bos_token"));
        EXPECT_FALSE(r.get_bool("tokenizer.ggml.add_eos_token"));
        EXPECT_EQ(r.get_u32("llama.vocab_size"), 32000u);
        EXPECT_EQ(r.get_array_string("tokenizer.ggml.tokens").size(), 32000u);
    }
    {
        auto r = open_vocab("ggml-vocab-phi-3.gguf");
        EXPECT_EQ(r.n_kv(), 26u);
        EXPECT_EQ(r.data_offset(), 726048u);
        EXPECT_EQ(r.get_f32("phi3.rope.freq_base"), 10000.0f);
        EXPECT_EQ(r.get_u32("tokenizer.ggml.eos_token_id"), 32000u);
        EXPECT_EQ(r.get_u32("general.quantization_version"), 2u);
        EXPECT_EQ(r.get_string("tokenizer.chat_template").substr(0, 15), "{{ bos_token }}");
        const auto scores = r.get_array_f32("tokenizer.ggml.scores");
        ASSERT_EQ(scores.size(), 32064u);
        EXPECT_EQ(scores[0], -1000.0f);
        EXPECT_EQ(scores[3], 0.0f);
        const auto types = r.get_array_i32("tokenizer.ggml.token_type");
        EXPECT_EQ((std::vector<int32_t>(types.begin(), types.begin() + 4)), (std::vector<int32_t>{3, 3, 4, 6}));
    }
}

TEST(GgufReal, TypedGettersFailClearly) {
    auto r = open_model("stories260K.gguf");
    const uint64_t off = r.key_offset("llama.block_count");
    try {
        (void)r.get_string("llama.block_count");
        FAIL() << "no exception";
    } catch (const error & e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("expected STRING, got UINT32"), std::string::npos) << m;
        EXPECT_NE(m.find("key 'llama.block_count'"), std::string::npos) << m;
        EXPECT_NE(m.find("at byte offset " + std::to_string(off)), std::string::npos) << m;
        EXPECT_NE(m.find("stories260K.gguf"), std::string::npos) << m;
    }
    EXPECT_THROW((void)r.get_i32("llama.block_count"), error); // exact type only
    EXPECT_THROW((void)r.get_u64("llama.block_count"), error);
    EXPECT_THROW((void)r.get_f32("llama.block_count"), error);
    EXPECT_THROW((void)r.get_array_f32("tokenizer.ggml.token_type"), error);
    EXPECT_THROW((void)r.get_array_string("tokenizer.ggml.scores"), error);
    EXPECT_THROW((void)r.get_u32("tokenizer.ggml.tokens"), error);
    EXPECT_THROW((void)r.find_u32("general.architecture"), error); // present, wrong type
    EXPECT_FALSE(r.find_u32("no.such.key").has_value());
    EXPECT_EQ(r.find_key("no.such.key"), nullptr);
    try {
        (void)r.get_u32("no.such.key");
        FAIL() << "no exception";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("missing key"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("no.such.key"), std::string::npos);
    }
    try {
        (void)r.tensor("nope.weight");
        FAIL() << "no exception";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("missing tensor 'nope.weight'"), std::string::npos);
    }
    EXPECT_EQ(*r.find_u32("llama.block_count"), 5u);
    EXPECT_EQ(*r.find_string("general.architecture"), "llama");
}

TEST(GgufReal, ViewsOutliveTheReader) {
    std::shared_ptr<const gguf::mapping> m;
    const uint8_t * data = nullptr;
    gguf::value tokens;
    {
        auto r = open_model("mnist-fc-f32.gguf");
        m = r.file_mapping();
        data = r.tensor("fc2.bias").data;
        auto v = open_model("stories260K.gguf");
        tokens = v.get("tokenizer.ggml.tokens");
    }
    // The mapping and the value's storage are still alive (ASan would flag otherwise).
    const auto bytes = read_file(shared_dir() / "models" / "mnist-fc-f32.gguf");
    EXPECT_EQ(std::memcmp(data, bytes.data() + 1590272, 40), 0);
    EXPECT_EQ(tokens.as_string_array()[1], "<s>");
    // A moved reader keeps working.
    auto r1 = open_model("mnist-fc-f32.gguf");
    gguf::reader r2 = std::move(r1);
    EXPECT_EQ(r2.tensor("fc1.bias").ne[0], 500);
    EXPECT_EQ(r2.get_string("general.architecture"), "mnist-fc");
}
