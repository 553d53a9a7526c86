// The GGUF parser behind gguf::reader: walks the header, key/values and tensor
// infos with a bounds-checked cursor, validating every number before use.
// Format: GGUF specification (ggml repository, docs/gguf.md), versions 2 and 3.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/core.h>

#include "printable.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::gguf {

namespace {

// Smallest possible encodings, used to bound counts by the bytes left.
constexpr uint64_t header_bytes = 24;          // magic, version, n_tensors, n_kv
constexpr uint64_t min_kv_bytes = 8 + 1 + 4 + 1; // key length, 1-byte key, value type, 1-byte value
constexpr uint64_t min_tensor_info_bytes = 8 + 1 + 4 + 8 + 4 + 8; // name len, 1-byte name, n_dims, ne[0], type, offset
constexpr uint64_t min_array_bytes = 4 + 8;    // element type, count
constexpr uint64_t min_string_bytes = 8;       // length
constexpr size_t reserve_cap = 1u << 16;       // never reserve more elements than this up front

uint32_t bswap32(uint32_t v) {
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

// Bounds-checked little-endian reader over the mapping. Every failure throws
// tessera::error with the file name, the byte offset and the current context
// (the key or tensor being read).
class cursor {
public:
    cursor(const mapping & m) : base_(m.data()), size_(m.size()), name_(m.name()) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    uint64_t size() const { return size_; }
    const uint8_t * at(uint64_t off) const { return base_ + off; }

    // Context for messages: "key 'x'" or "tensor 'y'" (empty for the header).
    void set_context(std::string ctx) { ctx_ = std::move(ctx); }

    [[noreturn]] void fail(uint64_t offset, const std::string & problem) const {
        throw error(fmt::format("gguf: {}: {} (at byte offset {}{}{})", name_, problem, offset,
                                ctx_.empty() ? "" : ", ", ctx_));
    }

    // Makes sure `n` more bytes exist; `what` names them in the message.
    void need(uint64_t n, const char * what) const {
        if (n > left()) {
            fail(pos_, fmt::format("truncated file: {} needs {} bytes but only {} remain of {}", what, n, left(), size_));
        }
    }

    template <class T> T read(const char * what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof v);
        pos_ += sizeof v;
        return v;
    }

    // A GGUF string (u64 length + bytes), at most `max_len` bytes long.
    std::string_view read_string(const char * what, uint64_t max_len) {
        const uint64_t start = pos_;
        const uint64_t len = read<uint64_t>(what);
        if (len > max_len) {
            fail(start, fmt::format("{} length {} exceeds the limit of {} bytes", what, len, max_len));
        }
        if (len > left()) {
            fail(start, fmt::format("truncated file: {} of {} bytes but only {} remain of {}", what, len, left(), size_));
        }
        std::string_view s(reinterpret_cast<const char *>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

    void skip(uint64_t n, const char * what) {
        need(n, what);
        pos_ += n;
    }

private:
    const uint8_t * base_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string & name_;
    std::string ctx_;
};

// Reads one value of type `t` (already read and validated) at the cursor.
// `depth` counts enclosing arrays; `nested` counts the arrays read so far
// as elements of arrays, in the whole file (at most max_nested_arrays).
value read_value(cursor & c, value_type t, int depth, uint64_t & nested, const std::shared_ptr<const void> & owner) {
    const uint64_t start = c.pos();
    switch (t) {
    case value_type::STRING:
        return value::string_view_of(c.read_string("string value", std::numeric_limits<uint64_t>::max()), owner);
    case value_type::ARRAY: {
        if (depth >= max_array_depth) {
            c.fail(start, fmt::format("arrays nested deeper than {} levels", max_array_depth));
        }
        const uint32_t elem_id = c.read<uint32_t>("array element type");
        if (!value_type_is_valid(elem_id)) {
            c.fail(start, fmt::format("unknown array element value type {}", elem_id));
        }
        const auto elem = static_cast<value_type>(elem_id);
        const uint64_t count = c.read<uint64_t>("array length");
        const size_t es = value_type_size(elem);
        const uint64_t min_each = es != 0 ? es : elem == value_type::STRING ? min_string_bytes : min_array_bytes;
        if (count > c.left() / min_each) {
            c.fail(start, fmt::format("array of {} x {} cannot fit in the {} bytes left in the file (truncated file or corrupt length)", count,
                                      value_type_name(elem), c.left()));
        }
        if (es != 0) {
            const uint8_t * p = c.at(c.pos());
            if (elem == value_type::BOOL) {
                for (uint64_t i = 0; i < count; ++i) {
                    if (p[i] > 1) c.fail(c.pos() + i, fmt::format("invalid BOOL value {} in array element {}", p[i], i));
                }
            }
            c.skip(count * es, "array elements");
            return value::array_view(elem, count, p, owner);
        }
        if (elem == value_type::STRING) {
            std::vector<std::string_view> items;
            items.reserve(static_cast<size_t>(std::min<uint64_t>(count, reserve_cap)));
            for (uint64_t i = 0; i < count; ++i) items.push_back(c.read_string("array string", std::numeric_limits<uint64_t>::max()));
            return value::string_array_view(std::move(items), owner);
        }
        // Each element is a value of its own in memory (about 100 bytes
        // for 12 in the file): without a bound, a 120 MB file of empty
        // arrays took 1.6 GB and 9 s to read.
        if (count > max_nested_arrays - nested) {
            c.fail(start, fmt::format("array of {} arrays: more than {} arrays nested in arrays in the file", count,
                                      max_nested_arrays));
        }
        nested += count;
        std::vector<value> items;
        items.reserve(static_cast<size_t>(std::min<uint64_t>(count, reserve_cap)));
        for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(c, value_type::ARRAY, depth + 1, nested, owner));
        return value::array_array(std::move(items));
    }
    case value_type::BOOL: {
        const uint8_t b = c.read<uint8_t>("BOOL value");
        if (b > 1) c.fail(start, fmt::format("invalid BOOL value {} (must be 0 or 1)", b));
        return value::boolean(b != 0);
    }
    default: {
        const size_t n = value_type_size(t);
        c.need(n, "scalar value");
        value v = value::scalar_view(t, c.at(c.pos()), nullptr);
        c.skip(n, "scalar value");
        return v;
    }
    }
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t & out) { return !__builtin_mul_overflow(a, b, &out); }

} // namespace

void reader::parse() {
    const mapping & m = *map_;
    cursor c(m);
    // The values hold the mapping through a shared_ptr<const void>.
    const std::shared_ptr<const void> owner = map_;

    // --- header ---
    if (m.size() < 4) c.fail(0, fmt::format("truncated file: {} bytes is too small for the GGUF magic", m.size()));
    const uint8_t * p = m.data();
    if (std::memcmp(p, "FUGG", 4) == 0) {
        c.fail(0, "big-endian GGUF file (magic is byte-swapped); only little-endian files are supported");
    }
    if (std::memcmp(p, "GGUF", 4) != 0) {
        c.fail(0, fmt::format("bad magic {:02x} {:02x} {:02x} {:02x} (expected 'GGUF'): not a GGUF file", p[0], p[1],
                              p[2], p[3]));
    }
    c.skip(4, "magic");
    const uint32_t version = c.read<uint32_t>("version");
    if (version != 2 && version != 3) {
        const uint32_t swapped = bswap32(version);
        if (swapped >= 1 && swapped <= 3) {
            c.fail(4, fmt::format("big-endian GGUF file (version field reads {:#010x}, i.e. {} byte-swapped); only "
                                  "little-endian files are supported",
                                  version, swapped));
        }
        if (version == 1) c.fail(4, "GGUF version 1 is not supported (supported: 2, 3)");
        c.fail(4, fmt::format("unsupported GGUF version {} (supported: 2, 3)", version));
    }
    version_ = version;
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    const uint64_t body = m.size() - header_bytes;
    if (n_kv > body / min_kv_bytes) {
        c.fail(16, fmt::format("metadata count {} cannot fit in the {} bytes after the header (truncated file or corrupt count)", n_kv, body));
    }
    if (n_tensors > body / min_tensor_info_bytes) {
        c.fail(8, fmt::format("tensor count {} cannot fit in the {} bytes after the header (truncated file or corrupt count)", n_tensors, body));
    }
    if (n_kv > max_kv_count) {
        c.fail(16, fmt::format("metadata count {} is more than the {} key/value pairs a GGUF file may hold here", n_kv, max_kv_count));
    }

    // --- key/values ---
    uint64_t nested_arrays = 0; // arrays read as elements of arrays (max_nested_arrays)
    for (uint64_t i = 0; i < n_kv; ++i) {
        const uint64_t off = c.pos();
        c.set_context(fmt::format("metadata entry {}", i));
        const std::string_view key = c.read_string("key", max_key_length);
        if (key.empty()) c.fail(off, "empty key");
        c.set_context(fmt::format("key '{}'", detail::printable(key)));
        const uint64_t type_off = c.pos();
        const uint32_t type_id = c.read<uint32_t>("value type");
        if (!value_type_is_valid(type_id)) c.fail(type_off, fmt::format("unknown value type {}", type_id));
        value v = read_value(c, static_cast<value_type>(type_id), 0, nested_arrays, owner);
        if (!kv_index_.emplace(key, kvs_.size()).second) c.fail(off, "duplicate key");
        if (key == "general.alignment") {
            if (v.type() != value_type::UINT32) {
                c.fail(type_off, fmt::format("general.alignment must be UINT32, got {}", value_type_name(v.type())));
            }
            const uint32_t a = v.as_u32();
            if (a == 0 || (a & (a - 1)) != 0) {
                c.fail(type_off + 4, fmt::format("general.alignment {} is not a power of two", a));
            }
            alignment_ = a;
        }
        kvs_.push_back(kv{key, std::move(v), off});
    }

    // --- tensor infos ---
    for (uint64_t i = 0; i < n_tensors; ++i) {
        tensor_info t;
        t.info_offset = c.pos();
        c.set_context(fmt::format("tensor info {}", i));
        t.name = c.read_string("tensor name", max_tensor_name);
        if (t.name.empty()) c.fail(t.info_offset, "empty tensor name");
        c.set_context(fmt::format("tensor '{}'", detail::printable(t.name)));
        const uint64_t dims_off = c.pos();
        t.n_dims = c.read<uint32_t>("dimension count");
        if (t.n_dims < 1 || t.n_dims > TSR_MAX_DIMS) {
            c.fail(dims_off, fmt::format("dimension count {} is outside 1..{}", t.n_dims, TSR_MAX_DIMS));
        }
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            const uint64_t ne_off = c.pos();
            const uint64_t ne = c.read<uint64_t>("dimension size");
            if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                c.fail(ne_off, fmt::format("element count ne[{}] = {} is not in 1..2^63-1", d, ne));
            }
            if (!checked_mul(n_elements, ne, n_elements) ||
                n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                c.fail(ne_off, fmt::format("element count overflows at ne[{}] = {}", d, ne));
            }
            t.ne[d] = static_cast<int64_t>(ne);
        }
        const uint64_t type_off = c.pos();
        const uint32_t type_id = c.read<uint32_t>("tensor type");
        if (!type_is_valid(static_cast<int32_t>(type_id)) || type_id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
            c.fail(type_off, fmt::format("unknown tensor type id {}", type_id));
        }
        t.type = static_cast<tessera::type>(type_id);
        const type_traits & tr = get_type_traits(t.type);
        if (t.ne[0] % tr.block_size != 0) {
            c.fail(dims_off, fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], tr.name,
                                         tr.block_size));
        }
        uint64_t size = static_cast<uint64_t>(t.ne[0] / tr.block_size);
        bool ok = checked_mul(size, tr.type_size, size);
        for (int d = 1; d < TSR_MAX_DIMS && ok; ++d) ok = checked_mul(size, static_cast<uint64_t>(t.ne[d]), size);
        if (!ok) c.fail(dims_off, "tensor byte size overflows 64 bits");
        t.size = size;
        const uint64_t offset_off = c.pos();
        t.offset = c.read<uint64_t>("tensor data offset");
        if (!tensor_index_.emplace(t.name, tensors_.size()).second) c.fail(t.info_offset, "duplicate tensor name");
        t.file_offset = offset_off; // temporary: where the offset field is, for messages below
        tensors_.push_back(t);
    }
    c.set_context("");

    // --- data section ---
    const uint64_t infos_end = c.pos();
    data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_; // infos_end <= file size: no overflow
    const uint64_t file_size = m.size();
    struct placed {
        uint64_t offset, size, field_off;
        size_t index;
    };
    std::vector<placed> by_offset;
    by_offset.reserve(tensors_.size());
    for (auto & t : tensors_) {
        const uint64_t field_off = t.file_offset;
        by_offset.push_back({t.offset, t.size, field_off, by_offset.size()});
        c.set_context(fmt::format("tensor '{}'", detail::printable(t.name)));
        if (t.offset % alignment_ != 0) {
            c.fail(field_off, fmt::format("tensor data offset {} is misaligned (alignment {})", t.offset, alignment_));
        }
        if (data_offset_ > file_size) {
            c.fail(infos_end, fmt::format("data section would start at {} but the file has only {} bytes (truncated file)",
                                          data_offset_, file_size));
        }
        const uint64_t section = file_size - data_offset_;
        if (t.offset > section || t.size > section - t.offset) {
            c.fail(field_off, fmt::format("tensor data [{}, +{}) lies outside the data section of {} bytes (truncated "
                                          "file or bad offset)",
                                          t.offset, t.size, section));
        }
        t.file_offset = data_offset_ + t.offset;
        t.data = m.data() + t.file_offset;
    }
    // Each tensor owns its bytes: two whose data overlap (one's offset
    // pointing into another's bytes) would alias weights silently. The
    // GGUF specification lays tensors out one after another; llama.cpp's
    // reader also requires it.
    std::sort(by_offset.begin(), by_offset.end(),
              [](const placed & a, const placed & b) { return a.offset != b.offset ? a.offset < b.offset : a.index < b.index; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const placed & prev = by_offset[i - 1];
        const placed & next = by_offset[i];
        if (next.offset < prev.offset + prev.size) { // both within the section: no overflow
            c.set_context(fmt::format("tensor '{}'", detail::printable(tensors_[next.index].name)));
            c.fail(next.field_off, fmt::format("tensor data [{}, +{}) overlaps tensor '{}' at [{}, +{})", next.offset,
                                               next.size, detail::printable(tensors_[prev.index].name), prev.offset,
                                               prev.size));
        }
    }
    c.set_context("");
}

} // namespace tessera::gguf
