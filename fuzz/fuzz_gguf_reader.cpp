// libFuzzer target for gguf::reader. Any input must either parse or throw
// tessera::error; a crash, sanitizer report, leak or hang is a bug. For inputs
// that parse, every value and tensor view is touched, and the file is written
// back with gguf::writer and re-read: metadata and tensor bytes must match.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"
#include "tessera/gguf/writer.hpp"

namespace {

using namespace tessera;

[[noreturn]] void die(const char * what) {
    std::fprintf(stderr, "fuzz_gguf_reader: invariant violated: %s\n", what);
    std::abort();
}

// Reads every part of a value so that a bad view would be caught by ASan.
uint64_t touch(const gguf::value & v) {
    uint64_t h = static_cast<uint64_t>(v.type());
    switch (v.type()) {
    case gguf::value_type::STRING:
        for (unsigned char c : v.as_string()) h = h * 31 + c;
        return h;
    case gguf::value_type::ARRAY:
        switch (v.array_type()) {
        case gguf::value_type::STRING:
            for (auto s : v.as_string_array()) h = h * 31 + s.size() + (s.empty() ? 0 : static_cast<unsigned char>(s.back()));
            break;
        case gguf::value_type::ARRAY:
            for (const auto & item : v.as_array_array()) h += touch(item);
            break;
        default:
            for (uint8_t b : v.array_bytes()) h = h * 31 + b;
        }
        return h;
    default:
        return h + static_cast<uint64_t>(v.is_array());
    }
}

// Bytes gguf::writer would produce for `r`'s tensors (to skip pathological
// alignments that would make the round trip allocate far more than the input).
uint64_t rewritten_data_bytes(const gguf::reader & r) {
    uint64_t total = 0;
    for (const auto & t : r.tensors()) total += (t.size + r.alignment() - 1) / r.alignment() * r.alignment();
    return total;
}

void round_trip(const gguf::reader & r, size_t input_size) {
    // Large inputs (the unmutated-size real seeds) are round-tripped by the unit
    // tests; here the time goes to the many small mutants.
    if (input_size > (256u << 10)) return;
    if (rewritten_data_bytes(r) > 4 * static_cast<uint64_t>(input_size) + (1u << 20)) return;
    gguf::writer w;
    try {
        w.copy_all_kv(r);
        for (const auto & t : r.tensors()) w.copy_tensor(r, t.name);
    } catch (const error &) {
        return; // the writer is stricter in places (e.g. general.alignment above 2^30)
    }
    const std::vector<uint8_t> bytes = w.to_bytes();
    gguf::reader back = gguf::reader::from_memory(bytes, "round-trip");
    if (back.n_kv() != r.n_kv() || back.n_tensors() != r.n_tensors()) die("round trip changed the counts");
    for (size_t i = 0; i < r.n_kv(); ++i) {
        if (back.metadata()[i].key != r.metadata()[i].key) die("round trip changed a key");
        if (!(back.metadata()[i].val == r.metadata()[i].val)) die("round trip changed a value");
    }
    for (size_t i = 0; i < r.n_tensors(); ++i) {
        const auto & a = r.tensors()[i];
        const auto & b = back.tensors()[i];
        if (a.name != b.name || a.type != b.type || a.size != b.size || a.n_dims != b.n_dims) die("round trip changed a tensor");
        if (std::memcmp(a.data, b.data, a.size) != 0) die("round trip changed tensor bytes");
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    try {
        auto r = gguf::reader::from_memory(std::span<const uint8_t>(data, size), "fuzz-input");
        uint64_t h = 0;
        for (const auto & kv : r.metadata()) {
            if (r.find_key(kv.key) != &kv.val) die("find_key does not return the parsed entry");
            h += touch(kv.val);
        }
        for (const auto & t : r.tensors()) {
            if (r.find_tensor(t.name) != &t) die("find_tensor does not return the parsed entry");
            if (t.file_offset + t.size > r.file_size() || t.offset % r.alignment() != 0) die("tensor outside the file");
            h += t.data[0] + t.data[t.size - 1];
        }
        (void)r.find_string("general.architecture");
        (void)r.find_u32("general.alignment");
        volatile uint64_t sink = h;
        (void)sink;
        round_trip(r, size);
    } catch (const error &) {
        // rejected cleanly
    }
    return 0;
}
