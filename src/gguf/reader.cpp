// gguf::reader: construction and typed lookups (the parsing is in parser.cpp).
#include "tessera/gguf/reader.hpp"

#include <fmt/core.h>

#include "printable.hpp"
#include "tessera/core/error.hpp"

namespace tessera::gguf {

reader::reader(const std::filesystem::path & path) : map_(std::make_shared<const mapping>(path)) { parse(); }

reader::reader(std::shared_ptr<const mapping> m) : map_(std::move(m)) {
    if (!map_) throw error("gguf: reader constructed from a null mapping");
    parse();
}

reader reader::from_memory(std::span<const uint8_t> bytes, std::string name) {
    return reader(std::make_shared<const mapping>(bytes, std::move(name)));
}

reader::reader(reader &&) noexcept = default;
reader & reader::operator=(reader &&) noexcept = default;
reader::~reader() = default;

const value * reader::find_key(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].val;
}

void reader::fail_key(std::string_view key, const std::string & problem) const {
    auto it = kv_index_.find(key);
    if (it == kv_index_.end()) {
        throw error(fmt::format("gguf: {}: {} (key '{}')", name(), problem, detail::printable(key)));
    }
    throw error(fmt::format("gguf: {}: {} (at byte offset {}, key '{}')", name(), problem, kvs_[it->second].offset,
                            detail::printable(key)));
}

const value & reader::get(std::string_view key) const {
    const value * v = find_key(key);
    if (v == nullptr) fail_key(key, "missing key");
    return *v;
}

uint64_t reader::key_offset(std::string_view key) const {
    auto it = kv_index_.find(key);
    if (it == kv_index_.end()) fail_key(key, "missing key");
    return kvs_[it->second].offset;
}

// Runs `f(value)` for `key`, turning a type mismatch into an error that names
// the key and its byte offset.
template <class T, class F> T reader::typed(std::string_view key, F && f) const {
    const value & v = get(key);
    try {
        return f(v);
    } catch (const error & e) {
        fail_key(key, e.what());
    }
}

template <class T, class F> std::optional<T> reader::typed_opt(std::string_view key, F && f) const {
    if (find_key(key) == nullptr) return std::nullopt;
    return typed<T>(key, std::forward<F>(f));
}

std::string_view reader::get_string(std::string_view k) const {
    return typed<std::string_view>(k, [](const value & v) { return v.as_string(); });
}
uint8_t reader::get_u8(std::string_view k) const { return typed<uint8_t>(k, [](const value & v) { return v.as_u8(); }); }
int8_t reader::get_i8(std::string_view k) const { return typed<int8_t>(k, [](const value & v) { return v.as_i8(); }); }
uint16_t reader::get_u16(std::string_view k) const { return typed<uint16_t>(k, [](const value & v) { return v.as_u16(); }); }
int16_t reader::get_i16(std::string_view k) const { return typed<int16_t>(k, [](const value & v) { return v.as_i16(); }); }
uint32_t reader::get_u32(std::string_view k) const { return typed<uint32_t>(k, [](const value & v) { return v.as_u32(); }); }
int32_t reader::get_i32(std::string_view k) const { return typed<int32_t>(k, [](const value & v) { return v.as_i32(); }); }
uint64_t reader::get_u64(std::string_view k) const { return typed<uint64_t>(k, [](const value & v) { return v.as_u64(); }); }
int64_t reader::get_i64(std::string_view k) const { return typed<int64_t>(k, [](const value & v) { return v.as_i64(); }); }
float reader::get_f32(std::string_view k) const { return typed<float>(k, [](const value & v) { return v.as_f32(); }); }
double reader::get_f64(std::string_view k) const { return typed<double>(k, [](const value & v) { return v.as_f64(); }); }
bool reader::get_bool(std::string_view k) const { return typed<bool>(k, [](const value & v) { return v.as_bool(); }); }
int64_t reader::get_int(std::string_view k) const { return typed<int64_t>(k, [](const value & v) { return v.as_int(); }); }

std::vector<std::string_view> reader::get_array_string(std::string_view k) const {
    return typed<std::vector<std::string_view>>(k, [](const value & v) {
        auto s = v.as_string_array();
        return std::vector<std::string_view>(s.begin(), s.end());
    });
}
std::vector<float> reader::get_array_f32(std::string_view k) const {
    return typed<std::vector<float>>(k, [](const value & v) { return v.as_array<float>(); });
}
std::vector<int32_t> reader::get_array_i32(std::string_view k) const {
    return typed<std::vector<int32_t>>(k, [](const value & v) { return v.as_array<int32_t>(); });
}
std::vector<uint32_t> reader::get_array_u32(std::string_view k) const {
    return typed<std::vector<uint32_t>>(k, [](const value & v) { return v.as_array<uint32_t>(); });
}

std::optional<std::string_view> reader::find_string(std::string_view k) const {
    return typed_opt<std::string_view>(k, [](const value & v) { return v.as_string(); });
}
std::optional<uint32_t> reader::find_u32(std::string_view k) const {
    return typed_opt<uint32_t>(k, [](const value & v) { return v.as_u32(); });
}
std::optional<int32_t> reader::find_i32(std::string_view k) const {
    return typed_opt<int32_t>(k, [](const value & v) { return v.as_i32(); });
}
std::optional<uint64_t> reader::find_u64(std::string_view k) const {
    return typed_opt<uint64_t>(k, [](const value & v) { return v.as_u64(); });
}
std::optional<float> reader::find_f32(std::string_view k) const {
    return typed_opt<float>(k, [](const value & v) { return v.as_f32(); });
}
std::optional<bool> reader::find_bool(std::string_view k) const {
    return typed_opt<bool>(k, [](const value & v) { return v.as_bool(); });
}
std::optional<int64_t> reader::find_int(std::string_view k) const {
    return typed_opt<int64_t>(k, [](const value & v) { return v.as_int(); });
}

const tensor_info * reader::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const tensor_info & reader::tensor(std::string_view name) const {
    const tensor_info * t = find_tensor(name);
    if (t == nullptr) {
        throw error(fmt::format("gguf: {}: missing tensor '{}'", this->name(), detail::printable(name)));
    }
    return *t;
}

} // namespace tessera::gguf
