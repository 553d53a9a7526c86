// tessera/gguf/writer.hpp — builds a GGUF (version 3, little-endian) file and
// writes it atomically.
//
// Layout written (GGUF specification, ggml repository docs/gguf.md): header,
// key/values in insertion order, tensor infos in insertion order, zero padding
// to the alignment, then each tensor's bytes at an aligned offset (zero padding
// between tensors and after the last one). The alignment is 32 unless the
// key general.alignment (UINT32, power of two) says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/types.hpp"
#include "tessera/gguf/value.hpp"

namespace tessera::gguf {

class reader;

class writer {
public:
    writer();
    ~writer();
    writer(writer &&) noexcept;
    writer & operator=(writer &&) noexcept;

    // --- metadata -------------------------------------------------------------
    // Sets `key` to `v`: replaces an existing key in place (keeps its position),
    // otherwise appends. Throws tessera::error for an empty key, a key longer
    // than max_key_length, general.alignment that is not a power-of-two UINT32,
    // or arrays the reader refuses: nested deeper than max_array_depth, or
    // more than max_nested_arrays arrays in arrays over all the keys.
    void set(std::string_view key, value v);
    void set_string(std::string_view key, std::string_view v) { set(key, value::string(v)); }
    void set_u32(std::string_view key, uint32_t v) { set(key, value::u32(v)); }
    void set_i32(std::string_view key, int32_t v) { set(key, value::i32(v)); }
    void set_u64(std::string_view key, uint64_t v) { set(key, value::u64(v)); }
    void set_f32(std::string_view key, float v) { set(key, value::f32(v)); }
    void set_bool(std::string_view key, bool v) { set(key, value::boolean(v)); }
    // Sets general.alignment (bytes, power of two, 1..2^30).
    void set_alignment(uint32_t alignment) { set("general.alignment", value::u32(alignment)); }
    // Removes `key` if present; returns whether it was.
    bool remove(std::string_view key);
    // Copies one key (throws when `src` lacks it) or every key from a reader.
    // Values read from a file keep its mapping alive until the writer is destroyed.
    void copy_kv(const reader & src, std::string_view key);
    void copy_all_kv(const reader & src);
    // The value of `key`, or nullptr.
    const value * find(std::string_view key) const;
    size_t n_kv() const;
    uint32_t alignment() const; // effective alignment (bytes)

    // --- tensors --------------------------------------------------------------
    // Adds a tensor whose bytes are copied now. `ne` has 1..4 positive entries,
    // ne[0] a multiple of the type's block size; `data.size()` must equal the
    // packed size. Throws tessera::error on a bad name (empty, > max_tensor_name
    // bytes, duplicate), type, shape or size.
    void add_tensor(std::string_view name, type t, std::span<const int64_t> ne,
                    std::span<const uint8_t> data);
    // As add_tensor but takes ownership of `data` (no copy).
    void add_tensor(std::string_view name, type t, std::span<const int64_t> ne,
                    std::vector<uint8_t> && data);
    // As add_tensor but only references `data`: `keep_alive` (may be null when
    // the caller guarantees the bytes outlive write()) is held until destruction.
    void add_tensor_ref(std::string_view name, type t, std::span<const int64_t> ne,
                        std::span<const uint8_t> data, std::shared_ptr<const void> keep_alive);
    // Adds tensor `name` of `src` by reference (keeps src's mapping alive).
    void copy_tensor(const reader & src, std::string_view name);
    // Adds a tensor whose bytes are produced while the file is written (so a
    // large file never has to be held in memory): write()/to_bytes() call
    // `fill` once per call, in tensor order, with a zeroed span of exactly the
    // packed size. Shape and name are checked as for add_tensor. An exception
    // from `fill` aborts write() (the temporary file is removed, `path` is
    // left as it was) and propagates. [additive: tools/synth + quantize]
    using fill_fn = std::function<void(std::span<uint8_t> out)>;
    void add_tensor_fill(std::string_view name, type t, std::span<const int64_t> ne, fill_fn fill);
    size_t n_tensors() const;

    // --- output ---------------------------------------------------------------
    // Writes the file atomically: a temporary file in the same directory
    // ("<name>.tmp.XXXXXX"), fsync, then rename over `path`. On any error the
    // temporary is removed, `path` is left as it was, and tessera::error is
    // thrown naming the path and the failing step. A symbolic link is written
    // through (the link stays; a dangling one creates its target, as `>`
    // would) and a replaced file keeps its permissions; an empty path, a
    // directory and anything not a regular file (a device, FIFO, socket)
    // are refused before any tensor data is made, and so is a link whose
    // text no longer names the file it opens (/proc/self/fd/N of a deleted
    // file or of a memfd: "<path>: names a deleted or unnamed file (...):
    // cannot replace it by name"), and a file name longer than its folder's
    // file system allows (pathconf _PC_NAME_MAX, else NAME_MAX: "<path>:
    // file name is N bytes, longer than the file system allows (255)").
    // SIGINT, SIGTERM or SIGHUP during the
    // write remove the temporary, then take their previous disposition.
    void write(const std::filesystem::path & path) const;
    // The whole file image in memory (same bytes write() produces).
    std::vector<uint8_t> to_bytes() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// True when `out` exists and is the file `in` names (the same inode, through
// links and hard links): writing `out` would replace the input being read.
// False when either cannot be looked up. Never throws.
bool same_file(const std::filesystem::path & in, const std::filesystem::path & out);

// Why the input `path` cannot be looked up (stat(2)): "no such file" where
// it does not exist (ENOENT), else the system's message, e.g. "Not a
// directory" for "model.gguf/" (a file's name with a trailing '/'); ""
// when it can. Never throws.
std::string lookup_failure(const std::filesystem::path & path);

} // namespace tessera::gguf
