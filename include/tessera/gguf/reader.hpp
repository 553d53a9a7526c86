// tessera/gguf/reader.hpp — validated, zero-copy GGUF reader.
//
// File layout (GGUF specification, ggml repository docs/gguf.md; versions 2
// and 3, little-endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key; u32 value_type; value }
//   n_tensors x { string name; u32 n_dims; u64 ne[n_dims]; u32 type; u64 offset }
//   padding to general.alignment (default 32)
//   data section: tensor data at `offset` (relative to the section start),
//   each offset a multiple of the alignment.
// A file with no tensors may end right after the tensor infos (vocab-only files).
//
// Every count, length, size and offset is checked before use; every rejection
// throws tessera::error with a message "gguf: <file>: <problem> (at byte offset
// N[, key 'k'][, tensor 't'])". Allocations are bounded by the file size.
// Caveat of any mmap reader: a file truncated by another process while mapped
// makes later reads of the lost pages fault (SIGBUS); files are expected to be
// replaced atomically (as gguf::writer does), not rewritten in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/core/types.hpp"
#include "tessera/gguf/value.hpp"

namespace tessera::gguf {

// Format constants (GGUF spec).
inline constexpr uint32_t default_alignment = 32;  // when general.alignment is absent
inline constexpr uint64_t max_key_length = 65535;   // bytes; spec: keys are at most 2^16-1 bytes
inline constexpr uint64_t max_tensor_name = 64;     // bytes; spec: tensor names are at most 64 bytes
inline constexpr int max_array_depth = 8;           // nesting of ARRAY of ARRAY (ours, not the spec's)
// Arrays that are elements of arrays, in a whole file (ours, not the spec's;
// ggml's reader takes none): each is a value of its own in memory.
inline constexpr uint64_t max_nested_arrays = uint64_t(1) << 16;
// Metadata key/value pairs in a file (ours, not the spec's): each takes
// about 200 bytes in memory (its value and index entry) for as few as 14
// in the file, so 2 million of them in a 47 MB file took 400 MB. Real
// models hold tens (a tokenizer's vocabulary is one array).
inline constexpr uint64_t max_kv_count = uint64_t(1) << 16;

// Read-only bytes of a whole file: an mmap (PROT_READ, MAP_PRIVATE) or, for
// from_memory(), an owned 64-byte-aligned copy. Shared by the reader, its
// values and its tensor views; keep a shared_ptr to keep the bytes alive.
class mapping {
public:
    // Maps `path`. Throws tessera::error naming the path and errno text when it
    // cannot be opened, is not a regular file, or cannot be mapped. An empty
    // file maps to zero bytes (data() may then be null).
    explicit mapping(const std::filesystem::path & path);
    // Copies `bytes` into owned, 64-byte-aligned memory; `name` is used in messages.
    mapping(std::span<const uint8_t> bytes, std::string name);
    ~mapping();
    mapping(const mapping &) = delete;
    mapping & operator=(const mapping &) = delete;

    const uint8_t * data() const { return data_; }
    size_t size() const { return size_; }
    // The path as messages show it (escaped: printable_utf8), or the name
    // given to the in-memory constructor.
    const std::string & name() const { return name_; }
    // Gives back to the system the pages wholly inside [p, p + n) (a range
    // of data()) that this process has read, once their bytes have been
    // copied elsewhere: they leave the process's resident set, and the
    // bytes stay readable (a later read brings the page back from the
    // file). Nothing for the in-memory stand-in, an empty range or one not
    // inside the mapping. Never throws; madvise failing is ignored (advice).
    void release(const uint8_t * p, size_t n) const;
    // Maps the pages that hold [p, p + n) (a range of data()) into the
    // process now (madvise MADV_POPULATE_READ, Linux 5.14+), reading them
    // from the file where the page cache lacks them, so that the first
    // read of each does not fault later (bytes read at random while
    // generating, e.g. the token embedding's rows). Nothing for the
    // in-memory stand-in or a range not inside the mapping. Never throws;
    // madvise failing (an older kernel) is ignored: the pages then fault
    // in as they are read, as before.
    void populate(const uint8_t * p, size_t n) const;

private:
    const uint8_t * data_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false; // true: munmap on destruction; false: owned heap copy
    int slot_ = -1;       // mapped_file_at's entry for this mapping (-1: none)
    std::string name_;
};

// The name (printable: control bytes and invalid UTF-8 escaped, at most
// 511 bytes) of the file whose live `mapping` holds address p, or null.
// Async-signal-safe, for a SIGBUS handler: a read of a mapped page past
// the end of a file that shrank since it was mapped (truncated or
// rewritten in place while in use) faults with SIGBUS, and the handler can
// then name the file instead of the process dying with "Bus error". The
// first 64 live file mappings are tracked; others are not found.
const char * mapped_file_at(const void * p) noexcept;

// One tensor described by the file. `name` and `data` point into the mapping.
struct tensor_info {
    std::string_view name;    // at most max_tensor_name bytes
    tessera::type type = TSR_TYPE_F32; // a valid GGUF type id (type_is_valid)
    uint32_t n_dims = 0;      // 1..4
    int64_t ne[TSR_MAX_DIMS] = {1, 1, 1, 1}; // elements per dim, ne[0] innermost; unused dims 1
    uint64_t offset = 0;      // bytes, relative to the data section start (multiple of the alignment)
    uint64_t file_offset = 0; // bytes from the start of the file (data_offset + offset)
    uint64_t size = 0;        // bytes: (ne[0] / block_size) * type_size * ne[1] * ne[2] * ne[3]
    uint64_t info_offset = 0; // byte offset of this tensor's info record in the file (for messages)
    const uint8_t * data = nullptr; // = mapping base + file_offset; size bytes readable

    // Product of ne.
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // The tensor bytes as a span into the mapping.
    std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(size)}; }
};

// One metadata key/value pair; `key` points into the mapping.
struct kv {
    std::string_view key;
    value val;
    uint64_t offset = 0; // byte offset of the key's record in the file
};

// A parsed GGUF file. Construction validates the whole header and all tensor
// infos (not the tensor data contents). Movable, not copyable; views (values,
// tensor_info::data, names) stay valid while the reader or a shared_ptr from
// file_mapping() lives.
class reader {
public:
    // Maps and parses `path`. Throws tessera::error (see the file comment).
    explicit reader(const std::filesystem::path & path);
    // Parses a file image already in memory (copied). `name` is used in messages.
    static reader from_memory(std::span<const uint8_t> bytes, std::string name = "<memory>");
    // Parses an existing mapping (shared, not copied).
    explicit reader(std::shared_ptr<const mapping> m);

    reader(reader &&) noexcept;
    reader & operator=(reader &&) noexcept;
    ~reader();

    // --- file level -----------------------------------------------------------
    uint32_t version() const { return version_; }     // 2 or 3
    uint32_t alignment() const { return alignment_; } // general.alignment or 32
    // Byte offset of the data section (end of tensor infos rounded up to the
    // alignment). For a file without tensors it may lie past the end of the file.
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return map_->size(); }
    const std::string & name() const { return map_->name(); }
    // The shared bytes; hold it to keep tensor data alive beyond the reader.
    std::shared_ptr<const mapping> file_mapping() const { return map_; }

    // --- metadata -------------------------------------------------------------
    // All key/value pairs in file order.
    const std::vector<kv> & metadata() const { return kvs_; }
    size_t n_kv() const { return kvs_.size(); }
    // The value of `key`, or nullptr when absent.
    const value * find_key(std::string_view key) const;
    bool has_key(std::string_view key) const { return find_key(key) != nullptr; }
    // The value of `key`; throws tessera::error "missing key" when absent.
    const value & get(std::string_view key) const;
    // Byte offset of the key's record (for callers' own messages); throws when absent.
    uint64_t key_offset(std::string_view key) const;

    // Typed getters: throw tessera::error naming the key and offset when the key
    // is missing or its type differs (exact type match, see value::as_*).
    std::string_view get_string(std::string_view key) const;
    uint8_t get_u8(std::string_view key) const;
    int8_t get_i8(std::string_view key) const;
    uint16_t get_u16(std::string_view key) const;
    int16_t get_i16(std::string_view key) const;
    uint32_t get_u32(std::string_view key) const;
    int32_t get_i32(std::string_view key) const;
    uint64_t get_u64(std::string_view key) const;
    int64_t get_i64(std::string_view key) const;
    float get_f32(std::string_view key) const;
    double get_f64(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    // Any integer type widened to int64 (see value::as_int).
    int64_t get_int(std::string_view key) const;
    // Arrays (element type must match exactly). Strings are views into the mapping.
    std::vector<std::string_view> get_array_string(std::string_view key) const;
    std::vector<float> get_array_f32(std::string_view key) const;
    std::vector<int32_t> get_array_i32(std::string_view key) const;
    std::vector<uint32_t> get_array_u32(std::string_view key) const;

    // Optional variants: std::nullopt when the key is absent; still throw when
    // present with another type.
    std::optional<std::string_view> find_string(std::string_view key) const;
    std::optional<uint32_t> find_u32(std::string_view key) const;
    std::optional<int32_t> find_i32(std::string_view key) const;
    std::optional<uint64_t> find_u64(std::string_view key) const;
    std::optional<float> find_f32(std::string_view key) const;
    std::optional<bool> find_bool(std::string_view key) const;
    std::optional<int64_t> find_int(std::string_view key) const;

    // --- tensors --------------------------------------------------------------
    // All tensor infos in file order.
    const std::vector<tensor_info> & tensors() const { return tensors_; }
    size_t n_tensors() const { return tensors_.size(); }
    // The tensor named `name`, or nullptr.
    const tensor_info * find_tensor(std::string_view name) const;
    // The tensor named `name`; throws tessera::error "missing tensor" when absent.
    const tensor_info & tensor(std::string_view name) const;

private:
    void parse();
    [[noreturn]] void fail_key(std::string_view key, const std::string & problem) const;
    template <class T, class F> T typed(std::string_view key, F && f) const;
    template <class T, class F> std::optional<T> typed_opt(std::string_view key, F && f) const;

    std::shared_ptr<const mapping> map_;
    uint32_t version_ = 0;
    uint32_t alignment_ = default_alignment;
    uint64_t data_offset_ = 0;
    std::vector<kv> kvs_;
    std::vector<tensor_info> tensors_;
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
};

} // namespace tessera::gguf
