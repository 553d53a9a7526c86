// GGUF metadata values: type names, construction, typed access.
#include "tessera/gguf/value.hpp"

#include <bit>
#include <cstring>
#include <limits>

#include <fmt/core.h>

#include "tessera/core/error.hpp"

static_assert(std::endian::native == std::endian::little, "tessera's GGUF code assumes a little-endian host");

namespace tessera::gguf {

bool value_type_is_valid(uint32_t id) { return id <= static_cast<uint32_t>(value_type::FLOAT64); }

std::string value_type_name(value_type t) {
    switch (t) {
    case value_type::UINT8: return "UINT8";
    case value_type::INT8: return "INT8";
    case value_type::UINT16: return "UINT16";
    case value_type::INT16: return "INT16";
    case value_type::UINT32: return "UINT32";
    case value_type::INT32: return "INT32";
    case value_type::FLOAT32: return "FLOAT32";
    case value_type::BOOL: return "BOOL";
    case value_type::STRING: return "STRING";
    case value_type::ARRAY: return "ARRAY";
    case value_type::UINT64: return "UINT64";
    case value_type::INT64: return "INT64";
    case value_type::FLOAT64: return "FLOAT64";
    }
    return fmt::format("unknown({})", static_cast<uint32_t>(t));
}

size_t value_type_size(value_type t) {
    switch (t) {
    case value_type::UINT8:
    case value_type::INT8:
    case value_type::BOOL: return 1;
    case value_type::UINT16:
    case value_type::INT16: return 2;
    case value_type::UINT32:
    case value_type::INT32:
    case value_type::FLOAT32: return 4;
    case value_type::UINT64:
    case value_type::INT64:
    case value_type::FLOAT64: return 8;
    case value_type::STRING:
    case value_type::ARRAY: return 0;
    }
    return 0;
}

namespace {

template <class T> constexpr value_type type_of();
template <> constexpr value_type type_of<uint8_t>() { return value_type::UINT8; }
template <> constexpr value_type type_of<int8_t>() { return value_type::INT8; }
template <> constexpr value_type type_of<uint16_t>() { return value_type::UINT16; }
template <> constexpr value_type type_of<int16_t>() { return value_type::INT16; }
template <> constexpr value_type type_of<uint32_t>() { return value_type::UINT32; }
template <> constexpr value_type type_of<int32_t>() { return value_type::INT32; }
template <> constexpr value_type type_of<uint64_t>() { return value_type::UINT64; }
template <> constexpr value_type type_of<int64_t>() { return value_type::INT64; }
template <> constexpr value_type type_of<float>() { return value_type::FLOAT32; }
template <> constexpr value_type type_of<double>() { return value_type::FLOAT64; }

template <class T> value make_scalar(T v) {
    uint8_t b[8] = {};
    std::memcpy(b, &v, sizeof v);
    return value::scalar_view(type_of<T>(), b, nullptr);
}

template <class T> T read_bits(uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof v); // little-endian host: low bytes first
    return v;
}

template <class T> value make_array(std::span<const T> v) {
    return value::array_raw(type_of<T>(), v.size(),
                            std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(v.data()), v.size_bytes()));
}

} // namespace

value::value() = default;

value value::scalar_view(value_type t, const uint8_t * p, std::shared_ptr<const void>) {
    value r;
    r.type_ = t;
    std::memcpy(&r.bits_, p, value_type_size(t));
    return r;
}

value value::string_view_of(std::string_view s, std::shared_ptr<const void> owner) {
    value r;
    r.type_ = value_type::STRING;
    r.str_ = s;
    r.owner_ = std::move(owner);
    return r;
}

value value::array_view(value_type elem, uint64_t count, const uint8_t * p, std::shared_ptr<const void> owner) {
    value r;
    r.type_ = value_type::ARRAY;
    r.elem_type_ = elem;
    r.count_ = count;
    r.raw_ = p;
    r.owner_ = std::move(owner);
    return r;
}

value value::string_array_view(std::vector<std::string_view> items, std::shared_ptr<const void> owner) {
    value r;
    r.type_ = value_type::ARRAY;
    r.elem_type_ = value_type::STRING;
    r.count_ = items.size();
    r.strs_ = std::make_shared<const std::vector<std::string_view>>(std::move(items));
    r.owner_ = std::move(owner);
    return r;
}

value value::u8(uint8_t v) { return make_scalar(v); }
value value::i8(int8_t v) { return make_scalar(v); }
value value::u16(uint16_t v) { return make_scalar(v); }
value value::i16(int16_t v) { return make_scalar(v); }
value value::u32(uint32_t v) { return make_scalar(v); }
value value::i32(int32_t v) { return make_scalar(v); }
value value::u64(uint64_t v) { return make_scalar(v); }
value value::i64(int64_t v) { return make_scalar(v); }
value value::f32(float v) { return make_scalar(v); }
value value::f64(double v) { return make_scalar(v); }

value value::boolean(bool v) {
    uint8_t b = v ? 1 : 0;
    return scalar_view(value_type::BOOL, &b, nullptr);
}

value value::string(std::string_view v) {
    auto s = std::make_shared<const std::string>(v);
    std::string_view view(*s);
    return string_view_of(view, std::move(s));
}

value value::array_raw(value_type elem, uint64_t count, std::span<const uint8_t> bytes) {
    const size_t es = value_type_size(elem);
    if (es == 0) {
        throw error(fmt::format("gguf value: array_raw needs a fixed-size element type, got {}", value_type_name(elem)));
    }
    if (count > bytes.size() / es || count * es != bytes.size()) {
        throw error(fmt::format("gguf value: array of {} x {} needs {} bytes, got {}", count, value_type_name(elem),
                                count * es, bytes.size()));
    }
    if (elem == value_type::BOOL) {
        for (size_t i = 0; i < bytes.size(); ++i) {
            if (bytes[i] > 1) throw error(fmt::format("gguf value: BOOL array element {} is {}, not 0 or 1", i, bytes[i]));
        }
    }
    auto owned = std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end());
    const uint8_t * p = owned->data();
    return array_view(elem, count, p, std::move(owned));
}

value value::array_u8(std::span<const uint8_t> v) { return make_array(v); }
value value::array_i32(std::span<const int32_t> v) { return make_array(v); }
value value::array_u32(std::span<const uint32_t> v) { return make_array(v); }
value value::array_i64(std::span<const int64_t> v) { return make_array(v); }
value value::array_u64(std::span<const uint64_t> v) { return make_array(v); }
value value::array_f32(std::span<const float> v) { return make_array(v); }
value value::array_f64(std::span<const double> v) { return make_array(v); }

value value::array_bool(std::span<const bool> v) {
    std::vector<uint8_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] ? 1 : 0;
    return array_raw(value_type::BOOL, b.size(), b);
}

namespace {
// Owned storage of a string array: the strings and views into them.
struct string_store {
    std::vector<std::string> strings;
};
} // namespace

template <class S> static value make_string_array(std::span<const S> v) {
    auto store = std::make_shared<string_store>();
    store->strings.reserve(v.size());
    for (const auto & s : v) store->strings.emplace_back(s);
    std::vector<std::string_view> views;
    views.reserve(v.size());
    for (const auto & s : store->strings) views.emplace_back(s);
    return value::string_array_view(std::move(views), std::move(store));
}

value value::array_string(std::span<const std::string> v) { return make_string_array(v); }
value value::array_string(std::span<const std::string_view> v) { return make_string_array(v); }

value value::array_array(std::vector<value> items) {
    for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_array()) {
            throw error(fmt::format("gguf value: array_array element {} is {}, not ARRAY", i,
                                    value_type_name(items[i].type())));
        }
    }
    value r;
    r.type_ = value_type::ARRAY;
    r.elem_type_ = value_type::ARRAY;
    r.count_ = items.size();
    r.items_ = std::make_shared<const std::vector<value>>(std::move(items));
    return r;
}

void value::type_error(value_type expected) const {
    throw error(fmt::format("expected {}, got {}", value_type_name(expected),
                            is_array() ? fmt::format("ARRAY of {}", value_type_name(elem_type_)) : value_type_name(type_)));
}

void value::expect(value_type t) const {
    if (type_ != t) type_error(t);
}

uint8_t value::as_u8() const { expect(value_type::UINT8); return read_bits<uint8_t>(bits_); }
int8_t value::as_i8() const { expect(value_type::INT8); return read_bits<int8_t>(bits_); }
uint16_t value::as_u16() const { expect(value_type::UINT16); return read_bits<uint16_t>(bits_); }
int16_t value::as_i16() const { expect(value_type::INT16); return read_bits<int16_t>(bits_); }
uint32_t value::as_u32() const { expect(value_type::UINT32); return read_bits<uint32_t>(bits_); }
int32_t value::as_i32() const { expect(value_type::INT32); return read_bits<int32_t>(bits_); }
uint64_t value::as_u64() const { expect(value_type::UINT64); return bits_; }
int64_t value::as_i64() const { expect(value_type::INT64); return read_bits<int64_t>(bits_); }
float value::as_f32() const { expect(value_type::FLOAT32); return read_bits<float>(bits_); }
double value::as_f64() const { expect(value_type::FLOAT64); return read_bits<double>(bits_); }
bool value::as_bool() const { expect(value_type::BOOL); return bits_ != 0; }

std::string_view value::as_string() const {
    expect(value_type::STRING);
    return str_;
}

int64_t value::as_int() const {
    switch (type_) {
    case value_type::UINT8: return read_bits<uint8_t>(bits_);
    case value_type::INT8: return read_bits<int8_t>(bits_);
    case value_type::UINT16: return read_bits<uint16_t>(bits_);
    case value_type::INT16: return read_bits<int16_t>(bits_);
    case value_type::UINT32: return read_bits<uint32_t>(bits_);
    case value_type::INT32: return read_bits<int32_t>(bits_);
    case value_type::INT64: return read_bits<int64_t>(bits_);
    case value_type::UINT64:
        if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            throw error(fmt::format("UINT64 value {} does not fit in int64", bits_));
        }
        return static_cast<int64_t>(bits_);
    default:
        throw error(fmt::format("expected an integer type, got {}", value_type_name(type_)));
    }
}

double value::as_float() const {
    if (type_ == value_type::FLOAT32) return read_bits<float>(bits_);
    if (type_ == value_type::FLOAT64) return read_bits<double>(bits_);
    throw error(fmt::format("expected FLOAT32 or FLOAT64, got {}", value_type_name(type_)));
}

value_type value::array_type() const {
    expect(value_type::ARRAY);
    return elem_type_;
}

uint64_t value::array_size() const {
    expect(value_type::ARRAY);
    return count_;
}

std::span<const uint8_t> value::array_bytes() const {
    expect(value_type::ARRAY);
    const size_t es = value_type_size(elem_type_);
    if (es == 0) throw error(fmt::format("expected an array of fixed-size elements, got ARRAY of {}", value_type_name(elem_type_)));
    return {raw_, static_cast<size_t>(count_) * es};
}

template <class T> std::vector<T> value::as_array() const {
    constexpr value_type want = type_of<T>();
    if (type_ != value_type::ARRAY || elem_type_ != want) {
        throw error(fmt::format("expected ARRAY of {}, got {}", value_type_name(want),
                                is_array() ? fmt::format("ARRAY of {}", value_type_name(elem_type_)) : value_type_name(type_)));
    }
    std::vector<T> out(static_cast<size_t>(count_));
    if (count_ != 0) std::memcpy(out.data(), raw_, out.size() * sizeof(T)); // raw_ may be unaligned
    return out;
}

template std::vector<uint8_t> value::as_array<uint8_t>() const;
template std::vector<int8_t> value::as_array<int8_t>() const;
template std::vector<uint16_t> value::as_array<uint16_t>() const;
template std::vector<int16_t> value::as_array<int16_t>() const;
template std::vector<uint32_t> value::as_array<uint32_t>() const;
template std::vector<int32_t> value::as_array<int32_t>() const;
template std::vector<uint64_t> value::as_array<uint64_t>() const;
template std::vector<int64_t> value::as_array<int64_t>() const;
template std::vector<float> value::as_array<float>() const;
template std::vector<double> value::as_array<double>() const;

std::span<const std::string_view> value::as_string_array() const {
    if (type_ != value_type::ARRAY || elem_type_ != value_type::STRING) {
        throw error(fmt::format("expected ARRAY of STRING, got {}",
                                is_array() ? fmt::format("ARRAY of {}", value_type_name(elem_type_)) : value_type_name(type_)));
    }
    if (!strs_) return {};
    return *strs_;
}

std::span<const value> value::as_array_array() const {
    if (type_ != value_type::ARRAY || elem_type_ != value_type::ARRAY) {
        throw error(fmt::format("expected ARRAY of ARRAY, got {}",
                                is_array() ? fmt::format("ARRAY of {}", value_type_name(elem_type_)) : value_type_name(type_)));
    }
    if (!items_) return {};
    return *items_;
}

bool value::operator==(const value & o) const {
    if (type_ != o.type_) return false;
    if (type_ == value_type::STRING) return str_ == o.str_;
    if (type_ != value_type::ARRAY) return bits_ == o.bits_;
    if (elem_type_ != o.elem_type_ || count_ != o.count_) return false;
    if (elem_type_ == value_type::STRING) {
        auto a = as_string_array(), b = o.as_string_array();
        for (size_t i = 0; i < a.size(); ++i) {
            if (a[i] != b[i]) return false;
        }
        return true;
    }
    if (elem_type_ == value_type::ARRAY) {
        auto a = as_array_array(), b = o.as_array_array();
        for (size_t i = 0; i < a.size(); ++i) {
            if (!(a[i] == b[i])) return false;
        }
        return true;
    }
    auto a = array_bytes(), b = o.array_bytes();
    return a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace tessera::gguf
