// tessera/gguf/value.hpp — GGUF metadata value types and the value class.
//
// Value type ids and encodings follow the GGUF specification (ggml repository,
// docs/gguf.md, "gguf_metadata_value_type"): all numbers little-endian, bool is
// one byte (0 or 1), a string is a u64 byte length followed by the bytes (no
// NUL), an array is a u32 element type, a u64 count, then the elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::gguf {

// Metadata value type ids (GGUF spec numbering).
enum class value_type : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

// True when `id` is one of the 13 value type ids above.
bool value_type_is_valid(uint32_t id);
// Upper-case spec name ("UINT32", "STRING", ...), or "unknown(<id>)". Never throws.
std::string value_type_name(value_type t);
// Encoded size in bytes of a fixed-size type (1, 2, 4 or 8); 0 for STRING and ARRAY.
size_t value_type_size(value_type t);

// One metadata value: a scalar, a string or an array (of scalars, of strings, or
// of arrays). Values read by gguf::reader are views into the file mapping and
// hold a reference that keeps the mapping alive; values built with the factory
// functions own their storage. Copies are cheap-ish (share the storage) and
// immutable.
//
// Accessors check the type exactly (as_u32 on an INT32 value throws) and throw
// tessera::error "expected <TYPE>, got <TYPE>"; gguf::reader's getters rethrow
// with the key name and byte offset added.
class value {
public:
    // An empty UINT8 0; useful only as a placeholder.
    value();

    // --- building values (for gguf::writer) --------------------------------
    static value u8(uint8_t v);
    static value i8(int8_t v);
    static value u16(uint16_t v);
    static value i16(int16_t v);
    static value u32(uint32_t v);
    static value i32(int32_t v);
    static value u64(uint64_t v);
    static value i64(int64_t v);
    static value f32(float v);
    static value f64(double v);
    static value boolean(bool v);
    static value string(std::string_view v); // copies the bytes
    // Array of a fixed-size element type; `elem` must not be STRING or ARRAY.
    // `bytes` holds count * value_type_size(elem) little-endian bytes (copied).
    // Throws tessera::error when the size does not match or a BOOL byte is not 0/1.
    static value array_raw(value_type elem, uint64_t count, std::span<const uint8_t> bytes);
    // Typed conveniences for array_raw (copy the elements).
    static value array_u8(std::span<const uint8_t> v);
    static value array_i32(std::span<const int32_t> v);
    static value array_u32(std::span<const uint32_t> v);
    static value array_i64(std::span<const int64_t> v);
    static value array_u64(std::span<const uint64_t> v);
    static value array_f32(std::span<const float> v);
    static value array_f64(std::span<const double> v);
    static value array_bool(std::span<const bool> v);
    // Array of strings (copies the strings).
    static value array_string(std::span<const std::string> v);
    static value array_string(std::span<const std::string_view> v);
    // Array of arrays; every element must itself be an ARRAY value (throws otherwise).
    static value array_array(std::vector<value> items);

    // --- inspecting -----------------------------------------------------------
    value_type type() const { return type_; }
    bool is_array() const { return type_ == value_type::ARRAY; }

    // Exact-type scalar accessors; throw tessera::error on a type mismatch.
    uint8_t as_u8() const;
    int8_t as_i8() const;
    uint16_t as_u16() const;
    int16_t as_i16() const;
    uint32_t as_u32() const;
    int32_t as_i32() const;
    uint64_t as_u64() const;
    int64_t as_i64() const;
    float as_f32() const;
    double as_f64() const;
    bool as_bool() const;
    // STRING only; the view is valid as long as this value (or a copy) lives.
    std::string_view as_string() const;
    // Any of the eight integer types, widened; throws on a non-integer type or a
    // UINT64 above INT64_MAX.
    int64_t as_int() const;
    // FLOAT32 or FLOAT64 widened to double; throws on any other type.
    double as_float() const;

    // ARRAY only (throw otherwise): element type and element count.
    value_type array_type() const;
    uint64_t array_size() const;
    // Fixed-size element arrays: the raw little-endian element bytes
    // (array_size() * value_type_size(array_type()) bytes, unaligned).
    std::span<const uint8_t> array_bytes() const;
    // Typed array copies; the element type must match exactly (T = uint8_t ..
    // double; bool arrays read as uint8_t via array_bytes()). Throws otherwise.
    template <class T> std::vector<T> as_array() const;
    std::vector<float> as_f32_array() const { return as_array<float>(); }
    std::vector<int32_t> as_i32_array() const { return as_array<int32_t>(); }
    std::vector<uint32_t> as_u32_array() const { return as_array<uint32_t>(); }
    // Array of STRING: views valid as long as this value (or a copy) lives.
    std::span<const std::string_view> as_string_array() const;
    // Array of ARRAY: the inner array values.
    std::span<const value> as_array_array() const;

    // Exact equality of type and contents (floats compared bitwise).
    bool operator==(const value & other) const;

    // --- internal: used by the reader to build views into a mapping ----------
    static value scalar_view(value_type t, const uint8_t * p, std::shared_ptr<const void> owner);
    static value string_view_of(std::string_view s, std::shared_ptr<const void> owner);
    static value array_view(value_type elem, uint64_t count, const uint8_t * p,
                            std::shared_ptr<const void> owner);
    static value string_array_view(std::vector<std::string_view> items, std::shared_ptr<const void> owner);

private:
    [[noreturn]] void type_error(value_type expected) const;
    void expect(value_type t) const;

    value_type type_ = value_type::UINT8;
    value_type elem_type_ = value_type::UINT8; // ARRAY only
    uint64_t bits_ = 0;                        // scalar: raw little-endian bits, zero-extended
    uint64_t count_ = 0;                       // ARRAY only
    std::string_view str_;                     // STRING
    const uint8_t * raw_ = nullptr;            // fixed-size ARRAY elements
    std::shared_ptr<const std::vector<std::string_view>> strs_; // ARRAY of STRING
    std::shared_ptr<const std::vector<value>> items_;          // ARRAY of ARRAY
    std::shared_ptr<const void> owner_;        // keeps str_/raw_/strs_ targets alive
};

} // namespace tessera::gguf
