// gguf::reader on malformed images built here: truncations of the real files,
// each header field corrupted, overflowing sizes, unknown types, duplicates,
// misaligned offsets and huge counts. Each must be rejected with a message of
// the expected kind, without a crash, and with bounded allocation.
#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include "gguf/alloc_tracker.hpp"
#include "gguf/gguf_bytes.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

// Heap a parse of an image of n bytes may use: the copy of the image plus a
// small multiple of it (views, tables), plus a fixed slack.
size_t alloc_bound(size_t n) { return 64 * 1024 + 24 * n; }

// Parses `bytes`; returns the error message, or nullopt when it parsed.
// Fails the test when the peak heap use exceeds alloc_bound().
std::optional<std::string> parse(const std::vector<uint8_t> & bytes) {
    std::optional<std::string> msg;
    alloc_reset_peak();
    try {
        auto r = gguf::reader::from_memory(bytes, "bad.gguf");
    } catch (const error & e) {
        msg = e.what();
    }
    EXPECT_LE(alloc_peak_since_reset(), alloc_bound(bytes.size())) << "image of " << bytes.size() << " bytes";
    return msg;
}

// Expects a rejection whose message contains every one of `parts`.
void expect_reject(const std::vector<uint8_t> & bytes, std::initializer_list<std::string> parts) {
    auto msg = parse(bytes);
    ASSERT_TRUE(msg.has_value()) << "accepted a malformed image; expected: " << *parts.begin();
    EXPECT_NE(msg->find("gguf: bad.gguf: "), std::string::npos) << *msg;
    EXPECT_NE(msg->find("at byte offset"), std::string::npos) << *msg;
    for (const auto & p : parts) EXPECT_NE(msg->find(p), std::string::npos) << "missing '" << p << "' in: " << *msg;
}

std::string at(size_t off) { return "at byte offset " + std::to_string(off); }

uint64_t data_end(const gguf::reader & r) {
    uint64_t end = 0;
    for (const auto & t : r.tensors()) end = std::max(end, t.file_offset + t.size);
    return end;
}

} // namespace

TEST(GgufMalformed, SimpleFileIsValid) {
    auto s = make_simple_file();
    ASSERT_FALSE(parse(s.bytes).has_value());
    auto r = gguf::reader::from_memory(s.bytes);
    EXPECT_EQ(r.data_offset(), s.data);
    EXPECT_EQ(r.get_string("general.architecture"), "test");
    EXPECT_EQ(r.get_array_u32("test.list"), (std::vector<uint32_t>{1, 2, 3}));
    const auto & b = r.tensor("b");
    float v;
    std::memcpy(&v, b.data + 4 * 7, 4);
    EXPECT_EQ(v, 107.0f);
    EXPECT_EQ(r.tensor("a").info_offset, s.t0);
}

TEST(GgufMalformed, TruncatedRealFiles) {
    for (const auto & f : shared_gguf_files()) {
        SCOPED_TRACE(f.string());
        const auto full = read_file(f);
        const auto r = gguf::reader(f);
        const uint64_t end = r.n_tensors() ? data_end(r) : full.size();
        std::vector<size_t> cuts;
        for (size_t n = 0; n < 600 && n < full.size(); ++n) cuts.push_back(n); // every header byte
        const size_t steps = 150;
        for (size_t i = 1; i < steps; ++i) cuts.push_back(static_cast<size_t>(end * i / steps));
        for (size_t d = 1; d <= 9 && d <= end; ++d) cuts.push_back(end - d);
        if (r.n_tensors()) {
            for (uint64_t d : {0, 1, 7}) cuts.push_back(r.data_offset() - d);
        }
        for (size_t n : cuts) {
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
            auto msg = parse(cut);
            ASSERT_TRUE(msg.has_value()) << "accepted a file cut at " << n;
            ASSERT_NE(msg->find("truncated file"), std::string::npos) << "cut at " << n << ": " << *msg;
        }
        // Cutting only trailing padding after the last tensor is fine (mnist has 24 bytes).
        for (size_t n = end; n <= full.size(); ++n) {
            std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
            ASSERT_FALSE(parse(cut).has_value()) << "cut at " << n;
        }
    }
}

TEST(GgufMalformed, Magic) {
    auto s = make_simple_file();
    auto b = s.bytes;
    b[3] = 'X';
    expect_reject(b, {"bad magic", "not a GGUF file", at(0)});
    b = s.bytes;
    std::memcpy(b.data(), "FUGG", 4);
    expect_reject(b, {"big-endian", at(0)});
    expect_reject({}, {"truncated file", "0 bytes"});
    expect_reject({'G', 'G', 'U'}, {"truncated file"});
}

TEST(GgufMalformed, Version) {
    auto s = make_simple_file();
    auto b = s.bytes;
    poke<uint32_t>(b, 4, 0x03000000u); // version 3 written big-endian
    expect_reject(b, {"big-endian", "0x03000000", at(4)});
    poke<uint32_t>(b, 4, 0x02000000u);
    expect_reject(b, {"big-endian", at(4)});
    poke<uint32_t>(b, 4, 1);
    expect_reject(b, {"version 1 is not supported", at(4)});
    for (uint32_t v : {0u, 4u, 77u, 0xffffffffu}) {
        poke<uint32_t>(b, 4, v);
        expect_reject(b, {"unsupported GGUF version " + std::to_string(v), at(4)});
    }
    poke<uint32_t>(b, 4, 2); // version 2 has the same layout
    EXPECT_EQ(gguf::reader::from_memory(b).version(), 2u);
}

TEST(GgufMalformed, HugeCounts) {
    auto s = make_simple_file();
    auto b = s.bytes;
    for (uint64_t n : {uint64_t(1) << 60, uint64_t(1) << 32, std::numeric_limits<uint64_t>::max(), uint64_t(1000)}) {
        b = s.bytes;
        poke<uint64_t>(b, 8, n);
        expect_reject(b, {"tensor count " + std::to_string(n) + " cannot fit", at(8)});
        b = s.bytes;
        poke<uint64_t>(b, 16, n);
        expect_reject(b, {"metadata count " + std::to_string(n) + " cannot fit", at(16)});
    }
}

TEST(GgufMalformed, EveryHeaderAndInfoByteCorrupted) {
    // Flipping any single byte before the data section must never crash or
    // over-allocate; the reader either rejects it or parses a consistent file.
    auto s = make_simple_file();
    for (size_t i = 0; i < s.data; ++i) {
        for (uint8_t x : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
            auto b = s.bytes;
            b[i] ^= x;
            auto msg = parse(b);
            if (msg) {
                EXPECT_NE(msg->find("at byte offset"), std::string::npos) << *msg;
            }
        }
    }
    // Specific fields with specific messages.
    auto b = s.bytes;
    poke<uint32_t>(b, s.kv0_type, 13);
    expect_reject(b, {"unknown value type 13", "key 'general.architecture'", at(s.kv0_type)});
    b = s.bytes;
    poke<uint32_t>(b, s.kv1_type + 4, 0xffffffffu);
    expect_reject(b, {"unknown array element value type 4294967295", "key 'test.list'"});
    b = s.bytes;
    poke<uint64_t>(b, s.kv1_count, uint64_t(1) << 61);
    expect_reject(b, {"array of 2305843009213693952 x UINT32 cannot fit", "key 'test.list'"});
    b = s.bytes;
    poke<uint64_t>(b, s.kv0, uint64_t(1) << 40); // key length
    expect_reject(b, {"key length 1099511627776 exceeds the limit of 65535", "metadata entry 0", at(s.kv0)});
    b = s.bytes;
    poke<uint64_t>(b, s.kv0, 0);
    expect_reject(b, {"empty key", at(s.kv0)});
    b = s.bytes;
    poke<uint64_t>(b, s.kv0_type + 4, uint64_t(1) << 40); // string value length
    expect_reject(b, {"truncated file", "string value of 1099511627776 bytes", "key 'general.architecture'"});
    b = s.bytes;
    poke<uint64_t>(b, s.t0, 65); // tensor name length
    expect_reject(b, {"tensor name length 65 exceeds the limit of 64", "tensor info 0", at(s.t0)});
    b = s.bytes;
    poke<uint64_t>(b, s.t0, 0);
    expect_reject(b, {"empty tensor name", at(s.t0)});
}

TEST(GgufMalformed, TensorShapesAndTypes) {
    auto s = make_simple_file();
    auto b = s.bytes;
    for (uint32_t nd : {0u, 5u, 0xffffffffu}) {
        b = s.bytes;
        poke<uint32_t>(b, s.t0_ndims, nd);
        expect_reject(b, {"dimension count " + std::to_string(nd) + " is outside 1..4", "tensor 'a'", at(s.t0_ndims)});
    }
    b = s.bytes;
    poke<uint64_t>(b, s.t0_ne1, 0);
    expect_reject(b, {"element count ne[1] = 0", "tensor 'a'", at(s.t0_ne1)});
    b = s.bytes;
    poke<uint64_t>(b, s.t0_ne0, uint64_t(1) << 63);
    expect_reject(b, {"element count ne[0] = 9223372036854775808", at(s.t0_ne0)});
    b = s.bytes;
    poke<uint64_t>(b, s.t0_ne0, uint64_t(1) << 32);
    poke<uint64_t>(b, s.t0_ne1, uint64_t(1) << 32);
    expect_reject(b, {"element count overflows at ne[1]", "tensor 'a'", at(s.t0_ne1)});
    b = s.bytes;
    poke<uint64_t>(b, s.t0_ne0, uint64_t(1) << 31);
    poke<uint64_t>(b, s.t0_ne1, uint64_t(1) << 31); // 2^62 elements * 4 bytes overflows
    expect_reject(b, {"tensor byte size overflows", "tensor 'a'"});
    b = s.bytes;
    poke<uint64_t>(b, s.t0_ne0, uint64_t(1) << 30);
    poke<uint64_t>(b, s.t0_ne1, uint64_t(1) << 30); // 2^62 bytes: fits in 64 bits, not in the file
    expect_reject(b, {"outside the data section", "tensor 'a'", at(s.t0_offset)});
    for (uint32_t t : {4u, 5u, 31u, 40u, 1000u, 0x80000000u, 0xffffffffu}) {
        b = s.bytes;
        poke<uint32_t>(b, s.t0_type, t);
        expect_reject(b, {"unknown tensor type id " + std::to_string(t), "tensor 'a'", at(s.t0_type)});
    }
    for (uint32_t t : {uint32_t{TSR_TYPE_Q8_0}, uint32_t{TSR_TYPE_Q5_1}}) { // ne[0] = 4 is not a multiple of 32
        b = s.bytes;
        poke<uint32_t>(b, s.t0_type, t);
        expect_reject(b, {"not a multiple of the " + std::string(type_name(static_cast<int32_t>(t))) + " block size 32", "tensor 'a'"});
    }
    // K-quant super-blocks of 256: a short row is refused by type; a whole
    // super-block row needs 144 / 176 / 210 bytes per row, more than the
    // file holds.
    for (uint32_t t : {uint32_t{TSR_TYPE_Q4_K}, uint32_t{TSR_TYPE_Q5_K}, uint32_t{TSR_TYPE_Q6_K}}) {
        const std::string name(type_name(static_cast<int32_t>(t)));
        b = s.bytes;
        poke<uint32_t>(b, s.t0_type, t); // ne[0] = 4
        expect_reject(b, {"not a multiple of the " + name + " block size 256", "tensor 'a'"});
        b = s.bytes;
        poke<uint32_t>(b, s.t0_type, t);
        poke<uint64_t>(b, s.t0_ne0, 256);
        expect_reject(b, {"outside the data section", "tensor 'a'", at(s.t0_offset)});
    }
    b = s.bytes;
    poke<uint32_t>(b, s.t0_type, TSR_TYPE_F16); // valid: half the bytes
    auto r = gguf::reader::from_memory(b);
    EXPECT_EQ(r.tensor("a").size, 16u);
}

TEST(GgufMalformed, OffsetsAndDuplicates) {
    auto s = make_simple_file();
    auto b = s.bytes;
    poke<uint64_t>(b, s.t1_offset, 36);
    expect_reject(b, {"tensor data offset 36 is misaligned (alignment 32)", "tensor 'b'", at(s.t1_offset)});
    b = s.bytes;
    poke<uint64_t>(b, s.t1_offset, 64); // aligned, but past the end
    expect_reject(b, {"outside the data section", "tensor 'b'", at(s.t1_offset)});
    b = s.bytes;
    poke<uint64_t>(b, s.t1_offset, std::numeric_limits<uint64_t>::max() - 31); // aligned, near 2^64
    expect_reject(b, {"outside the data section", "tensor 'b'"});
    b = s.bytes;
    poke<uint64_t>(b, s.t1_offset, 0); // b's data over a's (both 32 bytes)
    expect_reject(b, {"tensor data [0, +32) overlaps tensor 'a' at [0, +32)", "tensor 'b'", at(s.t1_offset)});
    b = s.bytes;
    poke<uint64_t>(b, s.t0_offset, 32); // a and b swap places: not in info order, but disjoint
    poke<uint64_t>(b, s.t1_offset, 0);
    EXPECT_EQ(parse(b), std::nullopt);
    b = s.bytes;
    b[s.t1 + 8] = 'a'; // rename "b" to "a"
    expect_reject(b, {"duplicate tensor name", "tensor 'a'", at(s.t1)});
    b = s.bytes;
    // Rename "test.list" to "general.xxxxxxxxxx..." with the same length? Easier: build a file with a duplicate key.
    raw d;
    d.header(0, 2).str("k").u32(4).u32(1);
    const size_t second = d.size();
    d.str("k").u32(8).str("x");
    expect_reject(d.b, {"duplicate key", "key 'k'", at(second)});
}

TEST(GgufMalformed, Alignment) {
    // general.alignment = 64: the data section and offsets follow it.
    raw r;
    r.header(1, 1).str("general.alignment").u32(4).u32(64);
    r.str("t").u32(1).u64(16).u32(0);
    const size_t off_field = r.size();
    r.u64(0).pad_to(64);
    const size_t data = r.size();
    for (int i = 0; i < 16; ++i) r.f32(1.5f);
    auto good = gguf::reader::from_memory(r.b);
    EXPECT_EQ(good.alignment(), 64u);
    EXPECT_EQ(good.data_offset(), data);
    EXPECT_EQ(data % 64, 0u);
    auto b = r.b;
    b.resize(b.size() + 64, 0);
    poke<uint64_t>(b, off_field, 32);
    expect_reject(b, {"misaligned (alignment 64)", "tensor 't'"});
    for (uint32_t a : {0u, 3u, 48u}) {
        b = r.b;
        poke<uint32_t>(b, 8 + 16 + 8 + 17 + 4, a);
        expect_reject(b, {"general.alignment " + std::to_string(a) + " is not a power of two", "key 'general.alignment'"});
    }
    raw w;
    w.header(0, 1).str("general.alignment").u32(10).u64(32);
    expect_reject(w.b, {"general.alignment must be UINT32, got UINT64"});
}

TEST(GgufMalformed, ValuesOfEveryType) {
    raw r;
    r.header(0, 14);
    r.str("u8").u32(0).u8(200);
    r.str("i8").u32(1).u8(0xfe);
    r.str("u16").u32(2).put<uint16_t>(60000);
    r.str("i16").u32(3).put<int16_t>(-3);
    r.str("u32").u32(4).u32(4000000000u);
    r.str("i32").u32(5).i32(-7);
    r.str("f32").u32(6).f32(0.25f);
    r.str("bool").u32(7).u8(1);
    r.str("str").u32(8).str("hi\n");
    r.str("u64").u32(10).u64(uint64_t(1) << 63);
    r.str("i64").u32(11).put<int64_t>(-(int64_t(1) << 40));
    r.str("f64").u32(12).put<double>(-2.5);
    r.str("arr.bool").u32(9).u32(7).u64(3).u8(1).u8(0).u8(1);
    r.str("arr.nested").u32(9).u32(9).u64(2);
    r.u32(8).u64(2).str("x").str(""); // [["x", ""], [
    r.u32(9).u64(1).u32(5).u64(2).i32(-1).i32(2); //   [[-1, 2]]]
    auto g = gguf::reader::from_memory(r.b);
    EXPECT_EQ(g.get_u8("u8"), 200);
    EXPECT_EQ(g.get_i8("i8"), -2);
    EXPECT_EQ(g.get_u16("u16"), 60000);
    EXPECT_EQ(g.get_i16("i16"), -3);
    EXPECT_EQ(g.get_u32("u32"), 4000000000u);
    EXPECT_EQ(g.get_i32("i32"), -7);
    EXPECT_EQ(g.get_f32("f32"), 0.25f);
    EXPECT_TRUE(g.get_bool("bool"));
    EXPECT_EQ(g.get_string("str"), "hi\n");
    EXPECT_EQ(g.get_u64("u64"), uint64_t(1) << 63);
    EXPECT_THROW((void)g.get_int("u64"), error); // does not fit in int64
    EXPECT_EQ(g.get_i64("i64"), -(int64_t(1) << 40));
    EXPECT_EQ(g.get_int("i8"), -2);
    EXPECT_EQ(g.get_f64("f64"), -2.5);
    const auto & ab = g.get("arr.bool");
    EXPECT_EQ(ab.array_type(), gguf::value_type::BOOL);
    EXPECT_EQ(std::vector<uint8_t>(ab.array_bytes().begin(), ab.array_bytes().end()), (std::vector<uint8_t>{1, 0, 1}));
    const auto & n = g.get("arr.nested");
    ASSERT_EQ(n.array_size(), 2u);
    auto outer = n.as_array_array();
    EXPECT_EQ(outer[0].as_string_array()[0], "x");
    EXPECT_EQ(outer[0].as_string_array()[1], "");
    EXPECT_EQ(outer[1].as_array_array()[0].as_i32_array(), (std::vector<int32_t>{-1, 2}));
}

TEST(GgufMalformed, BadValues) {
    raw r;
    r.header(0, 1).str("b").u32(7).u8(2);
    expect_reject(r.b, {"invalid BOOL value 2", "key 'b'", at(8 + 16 + 9 + 4)});
    raw a;
    a.header(0, 1).str("b").u32(9).u32(7).u64(3).u8(1).u8(5).u8(0);
    expect_reject(a.b, {"invalid BOOL value 5 in array element 1", "key 'b'"});
    raw s;
    s.header(0, 1).str("s").u32(9).u32(8).u64(uint64_t(1) << 40);
    expect_reject(s.b, {"array of 1099511627776 x STRING cannot fit"});
    raw s2; // plausible count, strings run out
    s2.header(0, 1).str("s").u32(9).u32(8).u64(2).str("a").u64(100).bytes("xy");
    expect_reject(s2.b, {"truncated file", "array string of 100 bytes", "key 's'"});
}

TEST(GgufMalformed, NestingDepth) {
    auto nested = [](int depth) {
        raw r;
        r.header(0, 1).str("deep").u32(9);
        for (int i = 1; i < depth; ++i) r.u32(9).u64(1); // ARRAY of ARRAY, one element
        r.u32(4).u64(1).u32(42);                          // innermost: [42]
        return r.b;
    };
    auto ok = gguf::reader::from_memory(nested(gguf::max_array_depth));
    const gguf::value * v = &ok.get("deep");
    for (int i = 1; i < gguf::max_array_depth; ++i) v = &v->as_array_array()[0];
    EXPECT_EQ(v->as_u32_array(), (std::vector<uint32_t>{42}));
    expect_reject(nested(gguf::max_array_depth + 1), {"arrays nested deeper than 8 levels", "key 'deep'"});
    expect_reject(nested(100000), {"arrays nested deeper than 8 levels"}); // no stack overflow
}

TEST(GgufMalformed, LargeClaimsAllocateLittle) {
    // A 100-byte image claiming 2^62 of something must be rejected before any
    // allocation proportional to the claim.
    raw r;
    r.header(uint64_t(1) << 62, uint64_t(1) << 62);
    r.b.resize(100, 0);
    alloc_reset_peak();
    EXPECT_THROW(gguf::reader::from_memory(r.b), error);
    EXPECT_LT(alloc_largest_since_reset(), 4096u);
    raw s; // many empty nested arrays: table size stays a small multiple of the file size
    s.header(0, 1).str("n").u32(9).u32(9).u64(20000);
    for (int i = 0; i < 20000; ++i) s.u32(4).u64(0);
    ASSERT_FALSE(parse(s.b).has_value());
}

// At most max_kv_count key/value pairs (each about 200 bytes in memory for
// 14 in the file): one more is refused from the header's count alone,
// before any is read; as many is read.
TEST(GgufMalformed, KeyValuePairsAreBoundedPerFile) {
    auto pairs = [](uint64_t claimed, uint64_t written) {
        raw r;
        r.header(0, claimed);
        for (uint64_t i = 0; i < written; ++i) r.str("k" + std::to_string(i)).u32(0).u8(1);
        return r.b;
    };
    const uint64_t max = gguf::max_kv_count;
    EXPECT_FALSE(parse(pairs(max, max)).has_value());
    expect_reject(pairs(max + 1, max + 1), {"metadata count 65537 is more than the 65536 key/value pairs"});
}

// Arrays held by arrays are values of their own in memory (about 100 bytes
// each for 12 in the file): the file may hold max_nested_arrays of them in
// all, counted over every key. A 120 MB file of 10 million empty arrays
// took 1.6 GB and 9 s for `gguf info`.
TEST(GgufMalformed, ArraysOfArraysAreBoundedPerFile) {
    auto empties = [](std::initializer_list<uint64_t> counts) {
        raw r;
        r.header(0, counts.size());
        int k = 0;
        for (const uint64_t n : counts) {
            r.str("n" + std::to_string(k++)).u32(9).u32(9).u64(n);
            for (uint64_t i = 0; i < n; ++i) r.u32(4).u64(0);
        }
        return r.b;
    };
    const uint64_t max = gguf::max_nested_arrays;
    EXPECT_FALSE(parse(empties({max})).has_value());
    EXPECT_FALSE(parse(empties({max - 10, 10})).has_value());
    expect_reject(empties({max + 1}), {"array of 65537 arrays: more than 65536 arrays nested in arrays in the file",
                                       "key 'n0'"});
    expect_reject(empties({max - 10, 11}), {"array of 11 arrays: more than 65536", "key 'n1'"});
}
