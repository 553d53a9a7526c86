// llm::quantize_file on fixed vectors: a small GGUF written here with known
// F32/F16 values is converted, read back, and its bytes compared with bytes
// computed in this file from the block-format definitions (hand-checked
// literals for exact cases, an independent encoder for the rest).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"
#include "tessera/llm/model.hpp"
#include "tessera/llm/quantize.hpp"
#include "llm/quantize_test_data.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

using tessera::test::f32_bytes;
using tessera::test::lcg_values;

// A fresh directory per test, removed afterwards.
struct temp_dir : tessera::test::temp_dir {
    temp_dir() : tessera::test::temp_dir("quant") {}
};

// --- independent encoders (the format definitions, written out here) -----------

// IEEE 754 binary16 bits of a float in the normal range or zero, rounded to
// nearest, ties to even (computed in double).
uint16_t f16_bits_of(float f) {
    if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0;
    const uint16_t sign = f < 0 ? 0x8000 : 0;
    double a = std::fabs(double(f));
    int e = int(std::floor(std::log2(a)));
    double m = a / std::ldexp(1.0, e); // [1, 2)
    double frac = std::nearbyint((m - 1.0) * 1024.0); // ties to even (default rounding mode)
    if (frac >= 1024.0) {
        frac = 0;
        ++e;
    }
    EXPECT_GE(e, -14) << "test encoder handles normal f16 values only";
    EXPECT_LE(e, 15);
    return uint16_t(sign | uint16_t((e + 15) << 10) | uint16_t(frac));
}

std::vector<uint8_t> le16(uint16_t v) { return {uint8_t(v & 0xff), uint8_t(v >> 8)}; }

// Q8_0 block (GGUF: f16 d, then 32 int8): d = amax / 127, q = round(x * (1/d)),
// the scale applied as float, d stored as f16.
std::vector<uint8_t> q8_0_expected(const std::vector<float> & x) {
    std::vector<uint8_t> out;
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (uint8_t byte : le16(f16_bits_of(d))) out.push_back(byte);
        for (size_t j = 0; j < 32; ++j) out.push_back(uint8_t(int8_t(std::lround(x[b * 32 + j] * id))));
    }
    return out;
}

// Q4_0 block (GGUF: f16 d, then 16 bytes): max = the signed value of largest
// magnitude (first wins), d = max / -8, q = min(15, trunc(x * (1/d) + 8.5));
// byte j holds element j in the low nibble and element j + 16 in the high one.
std::vector<uint8_t> q4_0_expected(const std::vector<float> & x) {
    std::vector<uint8_t> out;
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float max = 0, amax = 0;
        for (size_t j = 0; j < 32; ++j) {
            const float v = x[b * 32 + j];
            if (std::fabs(v) > amax) {
                amax = std::fabs(v);
                max = v;
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (uint8_t byte : le16(f16_bits_of(d))) out.push_back(byte);
        auto q = [&](size_t j) { return std::min(15, int(x[b * 32 + j] * id + 8.5f)); };
        for (size_t j = 0; j < 16; ++j) out.push_back(uint8_t(q(j) | (q(j + 16) << 4)));
    }
    return out;
}

// Q5_1 block (GGUF: f16 d, f16 m, uint8 qh[4], uint8 qs[16]): lo = min x,
// hi = max x, d = (hi - lo) / 31, id = 1 / d, q = trunc((x - lo) * id + 0.5)
// (0..31); qs byte j holds the low 4 bits of element j (low nibble) and of
// element j + 16 (high nibble); bit j of qh (a little-endian uint32) is the
// fifth bit of element j. Decoded: x = d * q + m.
std::vector<uint8_t> q5_1_expected(const std::vector<float> & x) {
    std::vector<uint8_t> out;
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float lo = x[b * 32], hi = x[b * 32];
        for (size_t j = 0; j < 32; ++j) {
            lo = std::min(lo, x[b * 32 + j]);
            hi = std::max(hi, x[b * 32 + j]);
        }
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (uint8_t byte : le16(f16_bits_of(d))) out.push_back(byte);
        for (uint8_t byte : le16(f16_bits_of(lo))) out.push_back(byte);
        int q[32];
        uint32_t qh = 0;
        for (size_t j = 0; j < 32; ++j) {
            q[j] = int((x[b * 32 + j] - lo) * id + 0.5f);
            EXPECT_TRUE(q[j] >= 0 && q[j] <= 31) << q[j];
            qh |= uint32_t((q[j] >> 4) & 1) << j;
        }
        for (int k = 0; k < 4; ++k) out.push_back(uint8_t(qh >> (8 * k)));
        for (size_t j = 0; j < 16; ++j) out.push_back(uint8_t((q[j] & 15) | ((q[j + 16] & 15) << 4)));
    }
    return out;
}

std::vector<uint8_t> f16_bytes(const std::vector<float> & v) {
    std::vector<uint8_t> b;
    for (float f : v) {
        for (uint8_t byte : le16(f16_bits_of(f))) b.push_back(byte);
    }
    return b;
}

std::vector<uint8_t> bytes_of(const gguf::tensor_info & t) { return {t.data, t.data + t.size}; }

// --- the fixed input file ------------------------------------------------------

// Hand-made Q8_0 block: amax = 127/64, so d = 1/64 exactly (f16 0x2400) and
// x * (1/d) = x * 64 exactly; values sit at known distances from the rounding points.
std::vector<float> exact_q8_block() {
    std::vector<float> x(32);
    x[0] = -127.0f / 64;       // -> -127
    x[1] = 127.0f / 64;        // -> 127
    x[2] = 0.0f;               // -> 0
    x[3] = 10.3f / 64;         // -> 10
    x[4] = 10.7f / 64;         // -> 11
    x[5] = -10.5f / 64;        // -> -11 (half away from zero)
    x[6] = 10.5f / 64;         // -> 11
    for (int j = 7; j < 32; ++j) x[j] = float(j - 20) / 64; // -> j - 20
    return x;
}
const std::array<int8_t, 32> exact_q8_qs = {-127, 127, 0, 10, 11, -11, 11, -13, -12, -11, -10, -9, -8, -7, -6, -5,
                                            -4,   -3,  -2, -1, 0,  1,   2,  3,   4,   5,   6,   7,  8,  9,  10, 11};

// Hand-made Q4_0 block: the first value of largest magnitude is +2 (x[3]), so
// d = 2 / -8 = -0.25 (f16 0xB400) and q = trunc(x * -4 + 8.5): +2 -> 0, -2 (x[7])
// -> 16.5 -> clamped 15, 0 -> 8, 0.25 -> 7, -0.25 -> 9, 1.1 -> 4 (4.1), -0.6 -> 10 (10.9).
std::vector<float> exact_q4_block() {
    std::vector<float> x(32, 0.0f);
    x[3] = 2.0f;
    x[7] = -2.0f;
    x[8] = 0.25f;
    x[9] = -0.25f;
    x[16] = 1.1f;
    x[17] = -0.6f;
    x[31] = -2.0f;
    return x;
}

struct input_file {
    std::vector<float> embd;   // token_embd.weight F32 [64, 3]: exact blocks + LCG values
    std::vector<float> wq_f16; // blk.0.attn_q.weight F16 [32, 2] (values exact in F16)
    std::vector<float> odd;    // odd.weight F32 [48, 2] (ne[0] not a multiple of 32)
    std::vector<float> norm;   // blk.0.attn_norm.weight F32 [64]
    std::vector<float> cube;   // cube.weight F32 [32, 2, 2] (3-D: unchanged)
};

input_file write_input(const fs::path & path, bool q4_blocks) {
    input_file in;
    std::vector<float> first = q4_blocks ? exact_q4_block() : exact_q8_block();
    std::vector<float> rest = lcg_values(64 * 3 - 32, 7, 3.0f);
    in.embd = first;
    in.embd.insert(in.embd.end(), rest.begin(), rest.end());
    in.wq_f16 = {0.5f, -2.0f, 1.0f / 1024, 3.0f, 0.125f, -0.75f};
    in.wq_f16.resize(64, 0.0625f);
    in.wq_f16[40] = -5.5f;
    in.odd = lcg_values(96, 11, 1.0f);
    in.norm = lcg_values(64, 13, 1.0f);
    in.cube = lcg_values(128, 17, 1.0f);

    gguf::writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "fixed");
    w.set_u32("general.file_type", 0);
    w.set_u32("llama.block_count", 1);
    const std::vector<std::string> toks = {"a", "b"};
    w.set("tokenizer.ggml.tokens", gguf::value::array_string(std::span<const std::string>(toks)));
    const int64_t ne_embd[] = {64, 3}, ne_wq[] = {32, 2}, ne_odd[] = {48, 2}, ne_norm[] = {64}, ne_cube[] = {32, 2, 2};
    w.add_tensor("token_embd.weight", TSR_TYPE_F32, ne_embd, f32_bytes(in.embd));
    w.add_tensor("blk.0.attn_norm.weight", TSR_TYPE_F32, ne_norm, f32_bytes(in.norm));
    w.add_tensor("blk.0.attn_q.weight", TSR_TYPE_F16, ne_wq, f16_bytes(in.wq_f16));
    w.add_tensor("odd.weight", TSR_TYPE_F32, ne_odd, f32_bytes(in.odd));
    w.add_tensor("cube.weight", TSR_TYPE_F32, ne_cube, f32_bytes(in.cube));
    w.write(path);
    return in;
}

// Metadata and the unchanged tensors are the same in both files.
void expect_common(const gguf::reader & in, const gguf::reader & out, uint32_t file_type) {
    EXPECT_EQ(out.get_u32("general.file_type"), file_type);
    EXPECT_EQ(out.get_u32("general.quantization_version"), 2u);
    EXPECT_EQ(out.get_string("general.name"), "fixed");
    EXPECT_EQ(out.get_u32("llama.block_count"), 1u);
    EXPECT_EQ(out.get_array_string("tokenizer.ggml.tokens"), (std::vector<std::string_view>{"a", "b"}));
    EXPECT_EQ(out.metadata()[0].key, "general.architecture"); // order kept
    EXPECT_EQ(out.metadata()[2].key, "general.file_type");    // replaced in place
    ASSERT_EQ(out.n_tensors(), in.n_tensors());
    for (size_t i = 0; i < in.n_tensors(); ++i) {
        EXPECT_EQ(out.tensors()[i].name, in.tensors()[i].name);
        EXPECT_EQ(out.tensors()[i].n_dims, in.tensors()[i].n_dims);
        for (int d = 0; d < 4; ++d) EXPECT_EQ(out.tensors()[i].ne[d], in.tensors()[i].ne[d]);
    }
    for (const char * name : {"blk.0.attn_norm.weight", "cube.weight"}) {
        EXPECT_EQ(out.tensor(name).type, TSR_TYPE_F32) << name;
        EXPECT_EQ(bytes_of(out.tensor(name)), bytes_of(in.tensor(name))) << name;
    }
}

} // namespace

TEST(QuantizeEncoders, TestEncoderMatchesKnownF16Bits) {
    // Known binary16 encodings (IEEE 754): guards the test's own encoder.
    EXPECT_EQ(f16_bits_of(1.0f), 0x3c00);
    EXPECT_EQ(f16_bits_of(-2.0f), 0xc000);
    EXPECT_EQ(f16_bits_of(1.0f / 3), 0x3555);
    EXPECT_EQ(f16_bits_of(0.1f), 0x2e66);
    EXPECT_EQ(f16_bits_of(65504.0f), 0x7bff);
    EXPECT_EQ(f16_bits_of(1.0f / 64), 0x2400);
    EXPECT_EQ(f16_bits_of(-0.25f), 0xb400);
}

TEST(Quantize, Q8_0FixedVectors) {
    temp_dir dir;
    const input_file in = write_input(dir / "in.gguf", false);
    std::vector<std::string> seen;
    llm::quantize_params p;
    p.target = TSR_TYPE_Q8_0;
    p.progress = [&](const llm::quantize_progress & pr) {
        seen.push_back(fmt::format("{}/{} {} {}->{}", pr.index + 1, pr.count, pr.name, type_name(pr.from),
                                   type_name(pr.to)));
    };
    const auto res = llm::quantize_file(dir / "in.gguf", dir / "out.gguf", p);
    EXPECT_EQ(res.n_tensors, 5u);
    EXPECT_EQ(res.n_converted, 2u);

    const gguf::reader r_in(dir / "in.gguf");
    const gguf::reader r(dir / "out.gguf");
    expect_common(r_in, r, 7);

    // The hand-checked block, literally.
    const auto & e = r.tensor("token_embd.weight");
    ASSERT_EQ(e.type, TSR_TYPE_Q8_0);
    ASSERT_EQ(e.size, 6u * 34);
    EXPECT_EQ(e.data[0], 0x00);
    EXPECT_EQ(e.data[1], 0x24);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(int8_t(e.data[2 + j]), exact_q8_qs[size_t(j)]) << "element " << j;
    // Every block against the independent encoder.
    EXPECT_EQ(bytes_of(e), q8_0_expected(in.embd));
    // F16 input: decoded to F32 first.
    const auto & q = r.tensor("blk.0.attn_q.weight");
    ASSERT_EQ(q.type, TSR_TYPE_Q8_0);
    EXPECT_EQ(bytes_of(q), q8_0_expected(in.wq_f16));
    // ne[0] = 48 is not a multiple of 32: unchanged.
    EXPECT_EQ(r.tensor("odd.weight").type, TSR_TYPE_F32);
    EXPECT_EQ(bytes_of(r.tensor("odd.weight")), f32_bytes(in.odd));

    ASSERT_EQ(seen.size(), 5u);
    EXPECT_EQ(seen[0], "1/5 token_embd.weight F32->Q8_0");
    EXPECT_EQ(seen[1], "2/5 blk.0.attn_norm.weight F32->F32");
    EXPECT_EQ(seen[2], "3/5 blk.0.attn_q.weight F16->Q8_0");
    EXPECT_EQ(seen[3], "4/5 odd.weight F32->F32");
}

TEST(Quantize, Q4_0FixedVectors) {
    temp_dir dir;
    const input_file in = write_input(dir / "in.gguf", true);
    llm::quantize_params p;
    p.target = TSR_TYPE_Q4_0;
    llm::quantize_file(dir / "in.gguf", dir / "out.gguf", p);
    const gguf::reader r_in(dir / "in.gguf");
    const gguf::reader r(dir / "out.gguf");
    expect_common(r_in, r, 2);

    const auto & e = r.tensor("token_embd.weight");
    ASSERT_EQ(e.type, TSR_TYPE_Q4_0);
    ASSERT_EQ(e.size, 6u * 18);
    // d = -0.25 -> f16 0xB400; nibbles: element j low, element j + 16 high.
    const std::array<uint8_t, 18> block0 = {0x00, 0xb4,
                                            0x48 /* x0=0 -> 8, x16=1.1 -> 4 */,
                                            0xa8 /* x1=0 -> 8, x17=-0.6 -> 10 */,
                                            0x88,
                                            0x80 /* x3=+2 -> 0 */,
                                            0x88, 0x88, 0x88,
                                            0x8f /* x7=-2 -> 16.5 -> 15 */,
                                            0x87 /* x8=0.25 -> 7 */,
                                            0x89 /* x9=-0.25 -> 9 */,
                                            0x88, 0x88, 0x88, 0x88, 0x88,
                                            0xf8 /* x31=-2 -> 15 */};
    EXPECT_EQ(std::vector<uint8_t>(e.data, e.data + 18), std::vector<uint8_t>(block0.begin(), block0.end()));
    EXPECT_EQ(bytes_of(e), q4_0_expected(in.embd));
    EXPECT_EQ(bytes_of(r.tensor("blk.0.attn_q.weight")), q4_0_expected(in.wq_f16));
    EXPECT_EQ(r.tensor("odd.weight").type, TSR_TYPE_F32);
}

// Q5_1: a hand-checked block (x_j = j / 2 - 4: lo = -4, hi = 11.5, d = 0.5
// exactly, so q_j = j), every block against the independent encoder above
// and against the core's reference quantizer, general.file_type 9.
TEST(Quantize, Q5_1FixedVectors) {
    temp_dir dir;
    input_file in = write_input(dir / "in.gguf", false);
    {
        // Replace token_embd's first block by the exact ramp.
        std::vector<float> ramp(32);
        for (int j = 0; j < 32; ++j) ramp[size_t(j)] = float(j) / 2 - 4;
        std::copy(ramp.begin(), ramp.end(), in.embd.begin());
        const gguf::reader r0(dir / "in.gguf");
        gguf::writer w;
        w.copy_all_kv(r0);
        for (const gguf::tensor_info & ti : r0.tensors()) {
            const std::span<const int64_t> ne(ti.ne, ti.n_dims);
            if (ti.name == "token_embd.weight") w.add_tensor(ti.name, ti.type, ne, f32_bytes(in.embd));
            else w.add_tensor(ti.name, ti.type, ne, std::span<const uint8_t>(ti.data, ti.size));
        }
        w.write(dir / "ramp.gguf");
    }
    llm::quantize_params p;
    p.target = TSR_TYPE_Q5_1;
    const auto res = llm::quantize_file(dir / "ramp.gguf", dir / "out.gguf", p);
    EXPECT_EQ(res.n_converted, 2u); // token_embd and attn_q; odd.weight (48) fits no block
    EXPECT_EQ(res.n_by_type, (std::vector<std::pair<type, size_t>>{{TSR_TYPE_Q5_1, 2}}));
    const gguf::reader r_in(dir / "ramp.gguf");
    const gguf::reader r(dir / "out.gguf");
    expect_common(r_in, r, 9);

    const auto & e = r.tensor("token_embd.weight");
    ASSERT_EQ(e.type, TSR_TYPE_Q5_1);
    ASSERT_EQ(e.size, 6u * 24);
    // d = 0.5 -> f16 0x3800, m = -4 -> 0xC400; q_j = j: the fifth bit is set
    // for j = 16..31 (qh 00 00 ff ff); qs[j] = j | (j + 16 & 15) << 4 = 0xjj.
    std::vector<uint8_t> block0 = {0x00, 0x38, 0x00, 0xc4, 0x00, 0x00, 0xff, 0xff};
    for (int j = 0; j < 16; ++j) block0.push_back(uint8_t(j | (j << 4)));
    EXPECT_EQ(std::vector<uint8_t>(e.data, e.data + 24), block0);
    EXPECT_EQ(bytes_of(e), q5_1_expected(in.embd));
    std::vector<block_q5_1> ref(in.embd.size() / 32);
    quantize_row_q5_1_ref(in.embd.data(), ref.data(), int64_t(in.embd.size()));
    EXPECT_EQ(std::memcmp(e.data, ref.data(), e.size), 0);
    // F16 input: decoded to F32 first.
    ASSERT_EQ(r.tensor("blk.0.attn_q.weight").type, TSR_TYPE_Q5_1);
    EXPECT_EQ(bytes_of(r.tensor("blk.0.attn_q.weight")), q5_1_expected(in.wq_f16));
    EXPECT_EQ(r.tensor("odd.weight").type, TSR_TYPE_F32);
    // Decoded back: the ramp exactly, the rest within half a step (plus the
    // F16 rounding of m) of the source.
    std::vector<float> back(in.embd.size());
    get_type_traits(TSR_TYPE_Q5_1).to_float(e.data, back.data(), int64_t(back.size()));
    for (size_t j = 0; j < 32; ++j) EXPECT_EQ(back[j], in.embd[j]) << j;
    for (size_t j = 32; j < back.size(); ++j) EXPECT_NEAR(back[j], in.embd[j], 0.11) << j; // values in [-3, 3): step 6/31
}

TEST(Quantize, F16ConvertsEveryTwoDimensionalTensor) {
    temp_dir dir;
    const input_file in = write_input(dir / "in.gguf", false);
    llm::quantize_params p;
    p.target = TSR_TYPE_F16;
    const auto res = llm::quantize_file(dir / "in.gguf", dir / "out.gguf", p);
    EXPECT_EQ(res.n_converted, 2u); // token_embd and odd (block size 1); attn_q is already F16
    const gguf::reader r_in(dir / "in.gguf");
    const gguf::reader r(dir / "out.gguf");
    expect_common(r_in, r, 1);
    EXPECT_EQ(r.tensor("token_embd.weight").type, TSR_TYPE_F16);
    EXPECT_EQ(bytes_of(r.tensor("token_embd.weight")), f16_bytes(in.embd));
    EXPECT_EQ(bytes_of(r.tensor("odd.weight")), f16_bytes(in.odd));
    EXPECT_EQ(bytes_of(r.tensor("blk.0.attn_q.weight")), bytes_of(r_in.tensor("blk.0.attn_q.weight")));
}

TEST(Quantize, RequantizeNeedsPermissionAndDecodesFirst) {
    temp_dir dir;
    const input_file in = write_input(dir / "in.gguf", false);
    llm::quantize_params p8;
    p8.target = TSR_TYPE_Q8_0;
    llm::quantize_file(dir / "in.gguf", dir / "q8.gguf", p8);

    llm::quantize_params p4;
    p4.target = TSR_TYPE_Q4_0;
    try {
        llm::quantize_file(dir / "q8.gguf", dir / "q4.gguf", p4);
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("already quantized (Q8_0)"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "q4.gguf"));
    // Back to F32: refused too, with the reason that applies.
    llm::quantize_params pf;
    pf.target = TSR_TYPE_F32;
    try {
        llm::quantize_file(dir / "q8.gguf", dir / "f32.gguf", pf);
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("already quantized (Q8_0); converting it to F32 gives back its rounded values"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "f32.gguf"));

    p4.allow_requantize = true;
    llm::quantize_file(dir / "q8.gguf", dir / "q4.gguf", p4);
    // Expected: decode the Q8_0 blocks (x = d * q, d from f16) independently, then encode Q4_0.
    const gguf::reader q8(dir / "q8.gguf");
    const auto & t8 = q8.tensor("token_embd.weight");
    std::vector<float> decoded;
    for (size_t b = 0; b < t8.size / 34; ++b) {
        const uint8_t * blk = t8.data + b * 34;
        const uint16_t h = uint16_t(blk[0] | (blk[1] << 8));
        // f16 -> f32 for normal numbers: (1 + m/1024) * 2^(e - 15)
        const int ex = (h >> 10) & 0x1f;
        ASSERT_TRUE(ex > 0 && ex < 31);
        const float d = float(std::ldexp(1.0 + (h & 0x3ff) / 1024.0, ex - 15)) * ((h & 0x8000) ? -1.0f : 1.0f);
        for (int j = 0; j < 32; ++j) decoded.push_back(d * float(int8_t(blk[2 + j])));
    }
    const gguf::reader q4(dir / "q4.gguf");
    EXPECT_EQ(bytes_of(q4.tensor("token_embd.weight")), q4_0_expected(decoded));
    EXPECT_EQ(q4.get_u32("general.file_type"), 2u);
}

TEST(Quantize, ErrorsLeaveNoOutput) {
    temp_dir dir;
    write_input(dir / "in.gguf", false);
    llm::quantize_params p;
    p.target = TSR_TYPE_Q8_0;
    // An existing output file must survive a failed run unchanged.
    { std::ofstream(dir / "out.gguf") << "previous contents"; }
    auto expect_error = [&](const fs::path & in, const std::string & needle, const llm::quantize_params & pp) {
        try {
            llm::quantize_file(in, dir / "out.gguf", pp);
            ADD_FAILURE() << "expected an error for " << in;
        } catch (const error & e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        std::ifstream f(dir / "out.gguf");
        std::string s((std::istreambuf_iterator<char>(f)), {});
        EXPECT_EQ(s, "previous contents");
    };
    expect_error(dir / "missing.gguf", "missing.gguf: no such file", p);
    { std::ofstream(dir / "text.gguf") << "this is not a GGUF file at all"; }
    expect_error(dir / "text.gguf", "text.gguf", p);
    llm::quantize_params bad = p;
    bad.target = TSR_TYPE_Q4_1;
    expect_error(dir / "in.gguf", "cannot quantize to Q4_1", bad);
    bad.target = TSR_TYPE_Q3_K;
    expect_error(dir / "in.gguf", "cannot quantize to Q3_K (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, "
                                  "Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M)", bad);
    expect_error(dir / "out.gguf", "same file", p);

    // A 2-D tensor of a type this build cannot decode.
    type undecodable = TSR_TYPE_COUNT;
    for (int t = 0; t < TSR_TYPE_COUNT; ++t) {
        if (type_is_valid(t) && get_type_traits(t).to_float == nullptr && get_type_traits(t).name != nullptr) {
            undecodable = type(t);
            break;
        }
    }
    if (undecodable != TSR_TYPE_COUNT) {
        const type_traits & tt = get_type_traits(undecodable);
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        const int64_t ne[] = {tt.block_size, 2};
        w.add_tensor("w.weight", undecodable, ne, std::vector<uint8_t>(tt.type_size * 2, 0));
        w.write(dir / "undecodable.gguf");
        expect_error(dir / "undecodable.gguf", fmt::format("tensor 'w.weight' has type {}", tt.name), p);
    }
    // Only the files made here remain: no temporaries.
    EXPECT_EQ(dir.n_entries(), undecodable != TSR_TYPE_COUNT ? 4u : 3u);
}

TEST(Quantize, FileTypeIds) {
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_F32), 0u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_F16), 1u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q4_0), 2u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q8_0), 7u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q5_0), 8u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q5_1), 9u); // MOSTLY_Q5_1
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_BF16), 32u);
    // K-quants: llama_ftype MOSTLY_Q4_K_S 14, MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_S
    // 16, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18; plain Q4_K and Q5_K have no id
    // of their own and are written as 14 and 16.
    EXPECT_EQ(llm::file_type_of(llm::file_type_q4_k_s), 14u);
    EXPECT_EQ(llm::file_type_of(llm::file_type_q4_k_m), 15u);
    EXPECT_EQ(llm::file_type_of(llm::file_type_q5_k_s), 16u);
    EXPECT_EQ(llm::file_type_of(llm::file_type_q5_k_m), 17u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q4_K), 14u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q5_K), 16u);
    EXPECT_EQ(llm::file_type_of(TSR_TYPE_Q6_K), 18u);
    EXPECT_THROW(llm::file_type_of(TSR_TYPE_Q3_K), error);
    EXPECT_THROW(llm::file_type_of(TSR_TYPE_Q2_K), error);
    EXPECT_THROW(llm::file_type_of(TSR_TYPE_Q4_1), error);
    // The reference bench's names of those ids.
    EXPECT_EQ(llm::file_type_description(0), "all F32");
    EXPECT_EQ(llm::file_type_description(2), "Q4_0");
    EXPECT_EQ(llm::file_type_description(8), "Q5_0");
    EXPECT_EQ(llm::file_type_description(9), "Q5_1");
    EXPECT_EQ(llm::file_type_description(14), "Q4_K - Small");
    EXPECT_EQ(llm::file_type_description(15), "Q4_K - Medium");
    EXPECT_EQ(llm::file_type_description(16), "Q5_K - Small");
    EXPECT_EQ(llm::file_type_description(17), "Q5_K - Medium");
    EXPECT_EQ(llm::file_type_description(18), "Q6_K");
    EXPECT_EQ(llm::file_type_description(32), "BF16");
    EXPECT_EQ(llm::file_type_description(10), ""); // MOSTLY_Q2_K: not written here
    EXPECT_EQ(llm::file_type_description(12), ""); // MOSTLY_Q3_K_M
}

TEST(Quantize, ConvertRowsChecksSizes) {
    std::vector<uint8_t> src(64 * 4), dst(34);
    EXPECT_THROW(llm::convert_rows("t", TSR_TYPE_F32, src, TSR_TYPE_Q8_0, dst, 64, 1), error); // dst too small
    dst.resize(68);
    EXPECT_NO_THROW(llm::convert_rows("t", TSR_TYPE_F32, src, TSR_TYPE_Q8_0, dst, 64, 1));
    // A row count whose byte size wraps to 0 (64 x 2^59) met two empty
    // spans and read past them (heap overflow under ASan).
    EXPECT_EQ(tessera::test::error_of([] {
                  llm::convert_rows("t", TSR_TYPE_F32, std::span<const uint8_t>(), TSR_TYPE_F16, std::span<uint8_t>(), 16,
                                    int64_t{1} << 59);
              }),
              "tensor 't': 576460752303423488 rows of 16 elements do not fit in memory");
    EXPECT_THROW(llm::convert_rows("t", TSR_TYPE_F32, src, TSR_TYPE_Q8_0, dst, 64, -1), error);
}

// --- values a conversion cannot carry ------------------------------------------

// What convert_rows says converting the F32 rows `x` (ne0 long) to `to`
// ("(no error)" when it converts them).
std::string convert_error(const std::vector<float> & x, int64_t ne0, type to) {
    const int64_t n_rows = int64_t(x.size()) / ne0;
    std::vector<uint8_t> dst(row_size(to, ne0) * size_t(n_rows));
    return tessera::test::error_of(
        [&] { llm::convert_rows("w", TSR_TYPE_F32, f32_bytes(x), to, dst, ne0, n_rows); });
}

const type all_targets[] = {TSR_TYPE_F32,  TSR_TYPE_F16,  TSR_TYPE_BF16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0,
                            TSR_TYPE_Q5_0, TSR_TYPE_Q5_1, TSR_TYPE_Q4_K, TSR_TYPE_Q5_K, TSR_TYPE_Q6_K};

// A NaN or infinite input value is refused, named by row, column and value,
// for every target (block types used to write it as zeros or garbage).
TEST(Quantize, ConvertRowsRefusesNonFiniteValues) {
    const float inf = std::numeric_limits<float>::infinity();
    for (type to : all_targets) {
        std::vector<float> x = lcg_values(2 * 256, 7, 1.0f);
        EXPECT_EQ(convert_error(x, 256, to), "(no error)") << type_name(to);
        for (const auto & [v, shown] : {std::pair{std::nanf(""), "nan"}, std::pair{inf, "inf"}, std::pair{-inf, "-inf"}}) {
            x[256 + 37] = v;
            EXPECT_EQ(convert_error(x, 256, to),
                      fmt::format("tensor 'w': value {} at row 1, column 37 is not a finite number (converting F32 to {})",
                                  shown, type_name(to)));
        }
    }
    // The value as decoded: an F16 +Inf (0x7C00) in an F16 tensor.
    std::vector<uint8_t> h(2 * 32 * 2, 0);
    h[2 * (32 + 5)] = 0x00;
    h[2 * (32 + 5) + 1] = 0x7c;
    std::vector<uint8_t> dst(2 * 34);
    EXPECT_EQ(tessera::test::error_of([&] { llm::convert_rows("h", TSR_TYPE_F16, h, TSR_TYPE_Q8_0, dst, 32, 2); }),
              "tensor 'h': value inf at row 1, column 5 is not a finite number (converting F16 to Q8_0)");
}

// Finite values whose encoding is not finite: an F16 or BF16 value past the
// type's largest, a block scale (or minimum) past F16's. Each field of each
// block layout, and the largest values that still fit.
TEST(Quantize, ConvertRowsRefusesValuesTheTypeCannotHold) {
    struct overflow_case {
        type to;
        int64_t from, to_col; // columns of row 1 set to `v`: [from, to_col)
        float v;
        std::string want; // "" = converts
    };
    const std::string at40 = "value 1e+30 at row 1, column 40 does not fit ";
    const overflow_case cases[] = {
        {TSR_TYPE_Q8_0, 40, 41, 1e30f, at40 + "Q8_0 (the scale of its block, columns 32..63, overflows F16)"},
        {TSR_TYPE_Q4_0, 40, 41, 1e30f, at40 + "Q4_0 (the scale of its block, columns 32..63, overflows F16)"},
        {TSR_TYPE_Q5_0, 40, 41, 1e30f, at40 + "Q5_0 (the scale of its block, columns 32..63, overflows F16)"},
        {TSR_TYPE_Q5_1, 40, 41, 1e30f, at40 + "Q5_1 (the scale of its block, columns 32..63, overflows F16)"},
        // Equal values: scale 0, minimum -1e30.
        {TSR_TYPE_Q5_1, 32, 64, -1e30f,
         "value -1e+30 at row 1, column 32 does not fit Q5_1 (the minimum of its block, columns 32..63, overflows F16)"},
        {TSR_TYPE_Q4_K, 40, 41, 1e30f, at40 + "Q4_K (the scale (d) of its super-block, columns 0..255, overflows F16)"},
        {TSR_TYPE_Q5_K, 40, 41, 1e30f, at40 + "Q5_K (the scale (d) of its super-block, columns 0..255, overflows F16)"},
        {TSR_TYPE_Q6_K, 40, 41, 1e30f, at40 + "Q6_K (the scale (d) of its super-block, columns 0..255, overflows F16)"},
        // All -1e7: d = 1e7 / 15 / 63 (Q5_K: / 31 / 63) fits F16, dmin = 1e7 / 63 does not.
        {TSR_TYPE_Q4_K, 0, 256, -1e7f,
         "value -10000000 at row 1, column 0 does not fit Q4_K (the scale of the minimums (dmin) of its super-block, "
         "columns 0..255, overflows F16)"},
        {TSR_TYPE_Q5_K, 0, 256, -1e7f,
         "value -10000000 at row 1, column 0 does not fit Q5_K (the scale of the minimums (dmin) of its super-block, "
         "columns 0..255, overflows F16)"},
        {TSR_TYPE_F16, 40, 41, 1e5f, "value 100000 at row 1, column 40 does not fit F16 (its largest finite value is 65504)"},
        {TSR_TYPE_BF16, 40, 41, std::numeric_limits<float>::max(),
         "value 3.4028235e+38 at row 1, column 40 does not fit BF16 (its largest finite value is 3.3895314e+38)"},
        {TSR_TYPE_F32, 40, 41, std::numeric_limits<float>::max(), ""},
        // The largest that fit: d = 8e6 / 127 = 62992; 65504 itself; BF16's largest.
        {TSR_TYPE_Q8_0, 40, 41, 8e6f, ""},
        {TSR_TYPE_Q5_1, 32, 64, -65504.0f, ""},
        {TSR_TYPE_F16, 40, 41, 65504.0f, ""},
        {TSR_TYPE_BF16, 40, 41, bf16_to_f32(0x7f7f), ""},
    };
    for (const overflow_case & c : cases) {
        std::vector<float> x = lcg_values(2 * 256, 11, 1.0f);
        for (int64_t i = c.from; i < c.to_col; ++i) x[size_t(256 + i)] = c.v;
        EXPECT_EQ(convert_error(x, 256, c.to), c.want.empty() ? "(no error)" : "tensor 'w': " + c.want)
            << type_name(c.to) << " " << c.v;
    }
}

// The output check knows the block layout of every type with an encoder
// (one without an entry would be refused rather than written unchecked).
TEST(Quantize, ConvertRowsChecksEveryEncodedType) {
    const std::vector<float> x = lcg_values(2 * 256, 5, 2.0f);
    for (int t = 0; t < TSR_TYPE_COUNT; ++t) {
        if (!type_is_valid(t) || get_type_traits(t).from_float == nullptr) continue;
        EXPECT_EQ(convert_error(x, 256, type(t)), "(no error)") << type_name(t);
    }
}

// quantize_file: the tensor is named after the input file, nothing is
// written and an existing output stays as it was; tensors copied unchanged
// are not looked at.
TEST(Quantize, NonFiniteOrOverflowingWeightsLeaveTheOutputAlone) {
    temp_dir dir;
    const float nan = std::nanf("");
    auto write = [&](const fs::path & path, float embd_2_5, float q_0_0, float norm_0) {
        gguf::writer w;
        w.set_string("general.architecture", "llama");
        w.set_u32("llama.block_count", 1);
        std::vector<float> embd = lcg_values(64 * 4, 1, 1.0f), q = lcg_values(64 * 64, 2, 1.0f), norm(64, 1.0f);
        embd[2 * 64 + 5] = embd_2_5;
        q[0] = q_0_0;
        norm[0] = norm_0;
        const int64_t ne_embd[] = {64, 4}, ne_q[] = {64, 64}, ne_norm[] = {64};
        w.add_tensor("token_embd.weight", TSR_TYPE_F32, ne_embd, f32_bytes(embd));
        w.add_tensor("blk.0.attn_norm.weight", TSR_TYPE_F32, ne_norm, f32_bytes(norm));
        w.add_tensor("blk.0.attn_q.weight", TSR_TYPE_F32, ne_q, f32_bytes(q));
        w.write(path);
    };
    write(dir / "nan.gguf", nan, 0.5f, 1.0f);
    write(dir / "big.gguf", 0.5f, 1e30f, 1.0f);
    write(dir / "nan_norm.gguf", 0.5f, 0.5f, nan);
    { std::ofstream(dir / "out.gguf") << "previous contents"; }
    auto expect_refused = [&](const fs::path & in, const llm::file_type & to, const std::string & want) {
        llm::quantize_params p;
        p.target = to;
        EXPECT_EQ(tessera::test::error_of([&] { llm::quantize_file(in, dir / "out.gguf", p); }),
                  in.string() + ": " + want);
        std::ifstream f(dir / "out.gguf");
        EXPECT_EQ(std::string((std::istreambuf_iterator<char>(f)), {}), "previous contents");
    };
    expect_refused(dir / "nan.gguf", TSR_TYPE_Q8_0,
                   "tensor 'token_embd.weight': value nan at row 2, column 5 is not a finite number (converting F32 to Q8_0)");
    expect_refused(dir / "nan.gguf", TSR_TYPE_F16,
                   "tensor 'token_embd.weight': value nan at row 2, column 5 is not a finite number (converting F32 to F16)");
    expect_refused(dir / "big.gguf", TSR_TYPE_Q8_0,
                   "tensor 'blk.0.attn_q.weight': value 1e+30 at row 0, column 0 does not fit Q8_0 (the scale of its "
                   "block, columns 0..31, overflows F16)");
    expect_refused(dir / "big.gguf", TSR_TYPE_F16,
                   "tensor 'blk.0.attn_q.weight': value 1e+30 at row 0, column 0 does not fit F16 (its largest finite "
                   "value is 65504)");
    expect_refused(dir / "big.gguf", llm::file_type_q4_k_m,
                   "tensor 'blk.0.attn_q.weight': value 1e+30 at row 0, column 0 does not fit Q5_0 (the scale of its "
                   "block, columns 0..31, overflows F16)"); // Q4_K falls back to Q5_0: rows of 64
    EXPECT_EQ(dir.n_entries(), 4u); // the inputs and out.gguf: no temporaries
    // The 1-D norm weight is copied as it is.
    llm::quantize_params p;
    p.target = TSR_TYPE_Q8_0;
    EXPECT_EQ(llm::quantize_file(dir / "nan_norm.gguf", dir / "out.gguf", p).n_converted, 2u);
}

// Which tensors the rules apply to: ranks counted with trailing 1s dropped
// (as ggml_n_dims counts them), names ending in "weight".
TEST(Quantize, WeightMatricesAreTwoDimensionalOnceTrailingOnesAreDropped) {
    const int64_t norm[] = {64, 1}, embd3[] = {64, 512, 1}, cube[] = {32, 2, 2}, one[] = {64}, ones[] = {1, 1, 1};
    EXPECT_EQ(llm::n_dims_of(norm), 1u);
    EXPECT_EQ(llm::n_dims_of(embd3), 2u);
    EXPECT_EQ(llm::n_dims_of(cube), 3u);
    EXPECT_EQ(llm::n_dims_of(one), 1u);
    EXPECT_EQ(llm::n_dims_of(ones), 1u);
    EXPECT_EQ(llm::n_dims_of({}), 0u);
    EXPECT_FALSE(llm::is_weight_matrix("output_norm.weight", norm));
    EXPECT_TRUE(llm::is_weight_matrix("token_embd.weight", embd3));
    EXPECT_FALSE(llm::is_weight_matrix("cube.weight", cube));
    EXPECT_FALSE(llm::is_weight_matrix("blk.0.attn_q.bias", embd3)); // not a weight by name
    EXPECT_FALSE(llm::tensor_type_for(TSR_TYPE_Q8_0, "output_norm.weight", norm, 1).has_value());
    EXPECT_EQ(llm::tensor_type_for(TSR_TYPE_Q8_0, "token_embd.weight", embd3, 1), TSR_TYPE_Q8_0);
    EXPECT_EQ(llm::tensor_type_for(llm::file_type_q4_k_m, "output.weight", embd3, 1), TSR_TYPE_Q8_0); // Q6_K, rows of 64
}

// stories260K with its norm weights stored as [64, 1] and token_embd as
// [64, 512, 1], plus an I32 matrix, an I32 "weight" and an F32 matrix whose
// name is not a weight's: quantized, the norms and the extra tensors are
// copied unchanged, token_embd is converted, every matrix gets the same
// bytes as from the plain file, and the result loads.
TEST(Quantize, StoredTrailingOnesIntegerAndNonWeightTensors) {
    temp_dir dir;
    const std::string stories = std::string(TESSERA_SHARED_DIR) + "/models/stories260K.gguf";
    const std::vector<uint8_t> ids = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0};
    const std::vector<float> extra = lcg_values(64 * 2, 3, 1.0f);
    {
        const gguf::reader src(stories);
        gguf::writer w;
        w.copy_all_kv(src);
        size_t n_norms = 0;
        for (const gguf::tensor_info & ti : src.tensors()) {
            std::vector<int64_t> ne(ti.ne, ti.ne + ti.n_dims);
            if (ti.name.ends_with("norm.weight")) {
                ne.push_back(1);
                ++n_norms;
            }
            if (ti.name == "token_embd.weight") ne.push_back(1);
            w.add_tensor(ti.name, ti.type, ne, ti.bytes());
        }
        ASSERT_EQ(n_norms, 11u); // 2 per layer and output_norm
        const int64_t ne_ids[] = {3, 2}, ne_extra[] = {64, 2};
        w.add_tensor("token_ids", TSR_TYPE_I32, ne_ids, ids);
        w.add_tensor("blk.0.ids.weight", TSR_TYPE_I32, ne_ids, ids);
        w.add_tensor("rope_cache", TSR_TYPE_F32, ne_extra, f32_bytes(extra));
        w.write(dir / "odd.gguf");
    }
    llm::quantize_params p;
    p.target = TSR_TYPE_Q8_0;
    std::vector<llm::quantize_progress> seen;
    p.progress = [&](const llm::quantize_progress & pr) { seen.push_back(pr); };
    const llm::quantize_result res = llm::quantize_file(dir / "odd.gguf", dir / "odd_q8.gguf", p);
    // token_embd, output and 5 layers x 6 matrices; ffn_down's rows of 172 fit no Q8_0 block.
    EXPECT_EQ(res.n_converted, 32u);
    p.progress = nullptr;
    llm::quantize_file(stories, dir / "plain_q8.gguf", p);

    const gguf::reader in(dir / "odd.gguf");
    const gguf::reader out(dir / "odd_q8.gguf");
    const gguf::reader plain(dir / "plain_q8.gguf");
    ASSERT_EQ(out.n_tensors(), plain.n_tensors() + 3);
    for (const gguf::tensor_info & ti : plain.tensors()) {
        const gguf::tensor_info & t = out.tensor(ti.name);
        EXPECT_EQ(t.type, ti.type) << ti.name;
        EXPECT_EQ(bytes_of(t), bytes_of(ti)) << ti.name;
        // The stored shape is kept, trailing 1 included.
        EXPECT_EQ(t.n_dims, in.tensor(ti.name).n_dims) << ti.name;
    }
    EXPECT_EQ(out.tensor("output_norm.weight").type, TSR_TYPE_F32);
    EXPECT_EQ(out.tensor("output_norm.weight").n_dims, 2u);
    EXPECT_EQ(out.tensor("blk.4.ffn_norm.weight").type, TSR_TYPE_F32);
    EXPECT_EQ(out.tensor("token_embd.weight").type, TSR_TYPE_Q8_0);
    EXPECT_EQ(out.tensor("token_embd.weight").n_dims, 3u);
    for (const char * name : {"token_ids", "blk.0.ids.weight"}) {
        EXPECT_EQ(out.tensor(name).type, TSR_TYPE_I32) << name;
        EXPECT_EQ(bytes_of(out.tensor(name)), ids) << name;
    }
    EXPECT_EQ(out.tensor("rope_cache").type, TSR_TYPE_F32);
    EXPECT_EQ(bytes_of(out.tensor("rope_cache")), f32_bytes(extra));

    // Progress: tensors the rules do not apply to report their own type as
    // the wanted one (no "kept" note), ffn_down Q8_0 (kept F32: rows of
    // 172), the other matrices token_embd included Q8_0.
    ASSERT_EQ(seen.size(), out.n_tensors());
    for (const llm::quantize_progress & pr : seen) {
        const std::string name(pr.name);
        if (name.ends_with("norm.weight") || name == "token_ids" || name == "blk.0.ids.weight" || name == "rope_cache") {
            EXPECT_EQ(pr.to, pr.from) << name;
            EXPECT_EQ(pr.wanted, pr.from) << name;
        } else if (name.ends_with("ffn_down.weight")) {
            EXPECT_EQ(pr.to, TSR_TYPE_F32) << name;
            EXPECT_EQ(pr.wanted, TSR_TYPE_Q8_0) << name;
        } else {
            EXPECT_EQ(pr.from, TSR_TYPE_F32) << name;
            EXPECT_EQ(pr.to, TSR_TYPE_Q8_0) << name;
            EXPECT_EQ(pr.wanted, TSR_TYPE_Q8_0) << name;
        }
    }
    EXPECT_NO_THROW(llm::model::load(dir / "odd_q8.gguf"));
}

// An output name longer than the file system allows is refused before any
// tensor is converted (it failed after the whole conversion, at the rename).
TEST(Quantize, TooLongOutputNameIsRefusedBeforeConverting) {
    temp_dir dir;
    write_input(dir / "in.gguf", false);
    llm::quantize_params p;
    p.target = TSR_TYPE_Q8_0;
    size_t n_progress = 0;
    p.progress = [&](const llm::quantize_progress &) { ++n_progress; };
    const fs::path out = dir / std::string(256, 'b');
    EXPECT_EQ(tessera::test::error_of([&] { llm::quantize_file(dir / "in.gguf", out, p); }),
              "gguf writer: " + out.string() + ": file name is 256 bytes, longer than the file system allows (255)");
    EXPECT_EQ(n_progress, 0u);
    EXPECT_EQ(dir.n_entries(), 1u); // the input only
}
