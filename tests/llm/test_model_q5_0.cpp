// Models with Q5_0 weights: the Q4_K_M mix on a shape whose rows are not a
// multiple of 256 puts Q5_0 where llama.cpp's quantizer does (Q4_K's
// fallback), with the core reference quantizer's bytes; such a model and a
// plain Q5_0 one load and decode to logits that follow the F32 model's; a
// Q5_0 tensor whose ne[0] is not a multiple of 32 is refused at load with an
// error naming the file, the tensor and the block size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/quantize.hpp"
#include "tessera/llm/session.hpp"
#include "tessera/llm/synth.hpp"
#include "support/temp_dir.hpp"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const fs::path vocab_path = fs::path(TESSERA_SHARED_DIR) / "vocab" / "ggml-vocab-llama-spm.gguf";

struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("q5_0") {}
};

std::vector<uint8_t> read_all(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_all(const fs::path & p, const std::vector<uint8_t> & bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

llm::synth_params tiny(const llm::file_type & t, uint64_t seed) {
    llm::synth_params p;
    p.shape = llm::synth_preset("tiny");
    p.wtype = t;
    p.vocab = vocab_path;
    p.seed = seed;
    return p;
}

std::vector<float> logits_of(const fs::path & file) {
    auto m = llm::model::load(file);
    llm::session_params sp;
    sp.n_ctx = 16;
    sp.n_threads = 2;
    llm::session s(*m, sp);
    const std::vector<int32_t> toks = {1, 450, 4996, 17354, 263};
    const auto l = s.decode(toks); // a view into the session: copied
    return std::vector<float>(l.begin(), l.end());
}

// Pearson correlation of two logit vectors (all finite).
double correlation(const std::vector<float> & a, const std::vector<float> & b) {
    double ma = 0, mb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        ma += a[i];
        mb += b[i];
    }
    ma /= double(a.size());
    mb /= double(b.size());
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / std::sqrt(saa * sbb);
}

} // namespace

// The tiny preset (n_embd 64, n_ff 128): no matrix holds a 256-element
// super-block, so Q4_K_M writes Q5_0 for Q4_K and Q8_0 for Q6_K (layer 1 of
// 2 gets the more-bits types; output.weight Q6_K -> Q8_0).
TEST(Q5_0Model, TinyQ4KMFallsBackToQ5_0WithTheReferenceBytes) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_F32, 21), dir / "f32.gguf");
    llm::synth_model(tiny(llm::file_type_q4_k_m, 21), dir / "s.gguf");
    llm::quantize_params qp;
    qp.target = llm::file_type_q4_k_m;
    llm::quantize_file(dir / "f32.gguf", dir / "q.gguf", qp);
    EXPECT_EQ(read_all(dir / "s.gguf"), read_all(dir / "q.gguf"));

    const gguf::reader f(dir / "f32.gguf");
    const gguf::reader r(dir / "s.gguf");
    EXPECT_EQ(r.get_u32("general.file_type"), 15u);
    EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q8_0);
    EXPECT_EQ(r.tensor("blk.1.attn_v.weight").type, TSR_TYPE_Q8_0);
    EXPECT_EQ(r.tensor("blk.1.ffn_down.weight").type, TSR_TYPE_Q8_0);
    for (const char * name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                              "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                              "blk.0.ffn_down.weight", "blk.1.ffn_up.weight"}) {
        const gguf::tensor_info & t = r.tensor(name);
        ASSERT_EQ(t.type, TSR_TYPE_Q5_0) << name;
        // The bytes are the reference quantizer's on the F32 model's values.
        const gguf::tensor_info & src = f.tensor(name);
        std::vector<float> x(static_cast<size_t>(src.n_elements()));
        std::memcpy(x.data(), src.data, x.size() * sizeof(float));
        std::vector<block_q5_0> want(x.size() / 32);
        quantize_row_q5_0_ref(x.data(), want.data(), static_cast<int64_t>(x.size()));
        ASSERT_EQ(t.size, want.size() * sizeof(block_q5_0)) << name;
        EXPECT_EQ(std::memcmp(t.data, want.data(), t.size), 0) << name;
    }
}

// Loading and decoding: the logits of the Q4_K_M model (Q5_0 + Q8_0) and of
// a plain Q5_0 model follow the F32 model's, closer than the plain Q4_0
// model's do (one more bit per weight).
TEST(Q5_0Model, LoadsAndDecodesLikeTheF32Model) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_F32, 23), dir / "f32.gguf");
    llm::synth_model(tiny(llm::file_type_q4_k_m, 23), dir / "q4km.gguf");
    llm::synth_model(tiny(TSR_TYPE_Q5_0, 23), dir / "q5.gguf");
    llm::synth_model(tiny(TSR_TYPE_Q4_0, 23), dir / "q4.gguf");
    {
        const gguf::reader r(dir / "q5.gguf");
        EXPECT_EQ(r.get_u32("general.file_type"), 8u); // MOSTLY_Q5_0
        EXPECT_EQ(r.tensor("output.weight").type, TSR_TYPE_Q5_0);
    }
    const auto ref = logits_of(dir / "f32.gguf");
    const auto q4km = logits_of(dir / "q4km.gguf");
    const auto q5 = logits_of(dir / "q5.gguf");
    const auto q4 = logits_of(dir / "q4.gguf");
    ASSERT_EQ(ref.size(), 32000u);
    for (const auto * l : {&q4km, &q5, &q4}) {
        ASSERT_EQ(l->size(), ref.size());
        for (float v : *l) ASSERT_TRUE(std::isfinite(v));
    }
    const double c_q4km = correlation(ref, q4km), c_q5 = correlation(ref, q5), c_q4 = correlation(ref, q4);
    RecordProperty("corr_q4_k_m", std::to_string(c_q4km));
    RecordProperty("corr_q5_0", std::to_string(c_q5));
    RecordProperty("corr_q4_0", std::to_string(c_q4));
    // Measured on this shape and seed: Q4_K_M 0.988, Q5_0 0.986, Q4_0 0.946.
    EXPECT_GT(c_q4km, 0.97) << "Q4_K_M " << c_q4km;
    EXPECT_GT(c_q5, 0.97) << "Q5_0 " << c_q5;
    EXPECT_GT(c_q5, c_q4) << "Q5_0 " << c_q5 << " vs Q4_0 " << c_q4;
    std::printf("correlation with the F32 logits: Q4_K_M %.4f, Q5_0 %.4f, Q4_0 %.4f\n", c_q4km, c_q5, c_q4);
}

// A Q5_0 tensor whose ne[0] (48) is not a multiple of the 32-element block
// (the file's tensor header patched after writing) is refused at load.
TEST(Q5_0Model, MalformedQ5_0TensorIsRefused) {
    temp_dir dir;
    llm::synth_model(tiny(TSR_TYPE_Q5_0, 25), dir / "ok.gguf");
    std::vector<uint8_t> bytes = read_all(dir / "ok.gguf");
    // The tensor info: name (u64 length + bytes), n_dims (u32), ne[0] (u64), ...
    const std::string name = "blk.0.attn_q.weight";
    std::vector<uint8_t> key(8 + name.size());
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    std::memcpy(key.data() + 8, name.data(), name.size());
    const auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
    ASSERT_NE(it, bytes.end());
    const size_t ne0_at = static_cast<size_t>(it - bytes.begin()) + key.size() + 4;
    uint64_t ne0 = 0;
    std::memcpy(&ne0, bytes.data() + ne0_at, 8);
    ASSERT_EQ(ne0, 64u); // n_embd of the tiny preset
    ne0 = 48;
    std::memcpy(bytes.data() + ne0_at, &ne0, 8);
    write_all(dir / "bad.gguf", bytes);

    try {
        llm::model::load(dir / "bad.gguf");
        ADD_FAILURE() << "expected an error";
    } catch (const error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ne[0] = 48 is not a multiple of the Q5_0 block size 32"), std::string::npos) << msg;
        EXPECT_NE(msg.find("tensor 'blk.0.attn_q.weight'"), std::string::npos) << msg;
    }
    // The unpatched file loads.
    EXPECT_NO_THROW(llm::model::load(dir / "ok.gguf"));
}
