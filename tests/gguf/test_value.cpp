// gguf::value: construction, exact-type accessors and their messages.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "tessera/core/error.hpp"
#include "tessera/gguf/value.hpp"

using namespace tessera;
using gguf::value;
using gguf::value_type;

namespace {
std::string message_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const error & e) {
        return e.what();
    }
    return "(no exception)";
}
} // namespace

TEST(GgufValue, TypeNamesAndSizes) {
    EXPECT_EQ(gguf::value_type_name(value_type::UINT8), "UINT8");
    EXPECT_EQ(gguf::value_type_name(value_type::FLOAT64), "FLOAT64");
    EXPECT_EQ(gguf::value_type_name(static_cast<value_type>(13)), "unknown(13)");
    EXPECT_TRUE(gguf::value_type_is_valid(12));
    EXPECT_FALSE(gguf::value_type_is_valid(13));
    EXPECT_EQ(gguf::value_type_size(value_type::BOOL), 1u);
    EXPECT_EQ(gguf::value_type_size(value_type::INT16), 2u);
    EXPECT_EQ(gguf::value_type_size(value_type::FLOAT32), 4u);
    EXPECT_EQ(gguf::value_type_size(value_type::INT64), 8u);
    EXPECT_EQ(gguf::value_type_size(value_type::STRING), 0u);
}

TEST(GgufValue, ExactTypeAccess) {
    const value v = value::u32(7);
    EXPECT_EQ(v.as_u32(), 7u);
    EXPECT_EQ(v.as_int(), 7);
    EXPECT_EQ(message_of([&] { (void)v.as_i32(); }), "expected INT32, got UINT32");
    EXPECT_EQ(message_of([&] { (void)v.as_string(); }), "expected STRING, got UINT32");
    EXPECT_EQ(message_of([&] { (void)v.array_size(); }), "expected ARRAY, got UINT32");
    const value a = value::array_f32(std::vector<float>{1, 2});
    EXPECT_EQ(message_of([&] { (void)a.as_i32_array(); }), "expected ARRAY of INT32, got ARRAY of FLOAT32");
    EXPECT_EQ(message_of([&] { (void)a.as_u32(); }), "expected UINT32, got ARRAY of FLOAT32");
    EXPECT_EQ(message_of([&] { (void)a.as_string_array(); }), "expected ARRAY of STRING, got ARRAY of FLOAT32");
    EXPECT_EQ(a.as_f32_array(), (std::vector<float>{1, 2}));
    EXPECT_EQ(value::i8(-5).as_int(), -5);
    EXPECT_EQ(value::u16(65535).as_int(), 65535);
    EXPECT_EQ(value::f32(0.5f).as_float(), 0.5);
    EXPECT_EQ(value::f64(0.25).as_float(), 0.25);
    EXPECT_THROW((void)value::string("x").as_int(), error);
    EXPECT_THROW((void)value::u32(1).as_float(), error);
    EXPECT_THROW((void)value::u64(uint64_t(1) << 63).as_int(), error);
    EXPECT_FALSE(value::boolean(false).as_bool());
}

TEST(GgufValue, Equality) {
    EXPECT_TRUE(value::u32(1) == value::u32(1));
    EXPECT_FALSE(value::u32(1) == value::i32(1));
    EXPECT_FALSE(value::string("a") == value::string("b"));
    const std::vector<std::string> s1{"a", "b"}, s2{"a", "c"};
    EXPECT_TRUE(value::array_string(s1) == value::array_string(s1));
    EXPECT_FALSE(value::array_string(s1) == value::array_string(s2));
    EXPECT_FALSE(value::array_u32(std::vector<uint32_t>{1}) == value::array_i32(std::vector<int32_t>{1}));
    // Bitwise for floats: NaN equals itself, -0 differs from +0.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(value::f32(nan) == value::f32(nan));
    EXPECT_FALSE(value::f32(0.0f) == value::f32(-0.0f));
}

TEST(GgufValue, OwnedStorageOutlivesSources) {
    value v;
    {
        std::string s = "temporary";
        std::vector<std::string> list{"x", "y"};
        v = value::array_array({value::array_string(list), value::array_u8(std::vector<uint8_t>{9})});
        list[0] = "changed";
        s.clear();
    }
    EXPECT_EQ(v.as_array_array()[0].as_string_array()[0], "x");
    EXPECT_EQ(v.as_array_array()[1].as_array<uint8_t>(), (std::vector<uint8_t>{9}));
}
