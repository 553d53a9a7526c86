// Test helpers: a raw little-endian byte builder for hand-made GGUF images
// (independent of gguf::writer), file reading, and a small valid file whose
// field offsets are known so tests can corrupt one field at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::test {

inline std::filesystem::path shared_dir() { return TESSERA_SHARED_DIR; }

inline std::vector<uint8_t> read_file(const std::filesystem::path & p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Every *.gguf in shared/models and shared/vocab, sorted.
inline std::vector<std::filesystem::path> shared_gguf_files() {
    std::vector<std::filesystem::path> out;
    for (const char * sub : {"models", "vocab"}) {
        for (const auto & e : std::filesystem::directory_iterator(shared_dir() / sub)) {
            if (e.path().extension() == ".gguf") out.push_back(e.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Appends little-endian fields.
struct raw {
    std::vector<uint8_t> b;
    size_t size() const { return b.size(); }
    template <class T> raw & put(T v) {
        const size_t at = b.size();
        b.resize(at + sizeof v);
        std::memcpy(b.data() + at, &v, sizeof v);
        return *this;
    }
    raw & u8(uint8_t v) { return put(v); }
    raw & u32(uint32_t v) { return put(v); }
    raw & u64(uint64_t v) { return put(v); }
    raw & i32(int32_t v) { return put(v); }
    raw & f32(float v) { return put(v); }
    raw & bytes(std::string_view s) {
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    raw & str(std::string_view s) { return u64(s.size()).bytes(s); }
    raw & pad_to(size_t a) {
        b.resize((b.size() + a - 1) / a * a, 0);
        return *this;
    }
    // GGUF header: magic, version, n_tensors, n_kv.
    raw & header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return bytes("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
};

template <class T> void poke(std::vector<uint8_t> & b, size_t off, T v) { std::memcpy(b.data() + off, &v, sizeof v); }

// A valid two-key, two-tensor file:
//   general.architecture = STRING "test"
//   test.list = ARRAY of UINT32 [1, 2, 3]
//   tensor "a" F32 ne [4, 2] at offset 0, values 0..7
//   tensor "b" F32 ne [8]    at offset 32, values 100..107
struct simple_file {
    std::vector<uint8_t> bytes;
    size_t kv0 = 0, kv0_type = 0, kv1 = 0, kv1_type = 0, kv1_count = 0;
    size_t t0 = 0, t0_ndims = 0, t0_ne0 = 0, t0_ne1 = 0, t0_type = 0, t0_offset = 0;
    size_t t1 = 0, t1_offset = 0;
    size_t data = 0; // data section start
};

inline simple_file make_simple_file() {
    simple_file s;
    raw r;
    r.header(2, 2);
    s.kv0 = r.size();
    r.str("general.architecture");
    s.kv0_type = r.size();
    r.u32(8).str("test");
    s.kv1 = r.size();
    r.str("test.list");
    s.kv1_type = r.size();
    r.u32(9).u32(4);
    s.kv1_count = r.size();
    r.u64(3).u32(1).u32(2).u32(3);
    s.t0 = r.size();
    r.str("a");
    s.t0_ndims = r.size();
    r.u32(2);
    s.t0_ne0 = r.size();
    r.u64(4);
    s.t0_ne1 = r.size();
    r.u64(2);
    s.t0_type = r.size();
    r.u32(0);
    s.t0_offset = r.size();
    r.u64(0);
    s.t1 = r.size();
    r.str("b").u32(1).u64(8).u32(0);
    s.t1_offset = r.size();
    r.u64(32);
    r.pad_to(32);
    s.data = r.size();
    for (int i = 0; i < 8; ++i) r.f32(static_cast<float>(i));
    for (int i = 0; i < 8; ++i) r.f32(static_cast<float>(100 + i));
    s.bytes = std::move(r.b);
    return s;
}

} // namespace tessera::test
