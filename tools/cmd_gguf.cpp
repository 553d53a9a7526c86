// tools/cmd_gguf.cpp — `tessera gguf info FILE [--json] [--full]`: prints a
// GGUF file's version, alignment, metadata and tensor table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tessera/core/types.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::tools {

namespace {

using gguf::value;
using gguf::value_type;
using json = nlohmann::ordered_json; // keeps fields in insertion order

constexpr size_t array_head = 8;     // array elements shown when abbreviated
constexpr size_t string_head = 120;  // string bytes shown when abbreviated
constexpr size_t column_most = 64;   // widest a name column is padded to (longer names overflow it)

// Length of the well-formed UTF-8 sequence at the start of `s` (1 to 4
// bytes, RFC 3629: no overlong forms, surrogates or code points above
// U+10FFFF); 0 when it does not start with one.
size_t utf8_sequence_length(std::string_view s) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = byte(0);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf; // range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0; // overlong
        if (c == 0xed) hi = 0x9f; // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90; // overlong
        if (c == 0xf4) hi = 0x8f; // above U+10FFFF
    } else {
        return 0; // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
    for (size_t i = 2; i < n; ++i) {
        if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
    }
    return n;
}

// `s` with control bytes, quotes and backslashes escaped, and every byte
// that is not part of well-formed UTF-8 as \xNN (so the text output is
// always valid UTF-8); at most `limit` bytes of `s` (then "..." and the full
// length; a character is never cut). Well-formed UTF-8 passes through.
std::string escaped(std::string_view s, size_t limit = std::string::npos) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const size_t len = utf8_sequence_length(s.substr(i));
        if (limit != std::string::npos && i + std::max<size_t>(len, 1) > limit) {
            out += fmt::format("...({} bytes)", s.size());
            return out;
        }
        if (len > 1) {
            out += s.substr(i, len);
            i += len;
            continue;
        }
        const unsigned char c = static_cast<unsigned char>(s[i++]);
        switch (c) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        case '\'': out += "\\'"; break;
        case '\\': out += "\\\\"; break;
        default:
            if (len == 0 || c < 0x20 || c == 0x7f) {
                out += fmt::format("\\x{:02x}", c);
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    return out;
}

// A string value for the text output: quoted, abbreviated unless `full`.
std::string quoted(std::string_view s, bool full) {
    return "'" + escaped(s, full ? std::string::npos : string_head) + "'";
}

std::string scalar_text(const value & v) {
    switch (v.type()) {
    case value_type::UINT8: return fmt::format("{}", v.as_u8());
    case value_type::INT8: return fmt::format("{}", v.as_i8());
    case value_type::UINT16: return fmt::format("{}", v.as_u16());
    case value_type::INT16: return fmt::format("{}", v.as_i16());
    case value_type::UINT32: return fmt::format("{}", v.as_u32());
    case value_type::INT32: return fmt::format("{}", v.as_i32());
    case value_type::UINT64: return fmt::format("{}", v.as_u64());
    case value_type::INT64: return fmt::format("{}", v.as_i64());
    case value_type::FLOAT32: return fmt::format("{}", v.as_f32());
    case value_type::FLOAT64: return fmt::format("{}", v.as_f64());
    case value_type::BOOL: return v.as_bool() ? "true" : "false";
    default: return "?";
    }
}

// Element i of a fixed-size-element array as a scalar value.
value element(const value & arr, size_t i) {
    const size_t es = gguf::value_type_size(arr.array_type());
    return value::scalar_view(arr.array_type(), arr.array_bytes().data() + i * es, nullptr);
}

std::string value_text(const value & v, bool full) {
    if (v.type() == value_type::STRING) return quoted(v.as_string(), full);
    if (!v.is_array()) return scalar_text(v);
    const uint64_t n = v.array_size();
    const size_t shown = full ? static_cast<size_t>(n) : static_cast<size_t>(std::min<uint64_t>(n, array_head));
    std::string items;
    for (size_t i = 0; i < shown; ++i) {
        if (i) items += ", ";
        switch (v.array_type()) {
        case value_type::STRING: items += quoted(v.as_string_array()[i], full); break;
        case value_type::ARRAY: items += value_text(v.as_array_array()[i], full); break;
        default: items += scalar_text(element(v, i)); break;
        }
    }
    if (shown < n) items += ", ...";
    return fmt::format("[{} x {}] [{}]", gguf::value_type_name(v.array_type()), n, items);
}

// A float as a JSON number; NaN and the infinities, which JSON numbers
// cannot hold (RFC 8259 section 6) and a JSON writer would turn into null,
// as the strings "nan", "inf" and "-inf" (the value's "type" still says it
// is a float).
json float_json(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return x;
}

json scalar_json(const value & v) {
    switch (v.type()) {
    case value_type::FLOAT32: return float_json(v.as_f32());
    case value_type::FLOAT64: return float_json(v.as_f64());
    case value_type::BOOL: return v.as_bool();
    case value_type::UINT64: return v.as_u64();
    default: return v.as_int();
    }
}

// {"type": ..., "value": ...}; arrays add "element_type", "length" and, when
// abbreviated, "truncated": true (only the first elements in "value");
// an abbreviated string adds "length" (its bytes) and "truncated": true.
json value_json(const value & v, bool full) {
    json j;
    j["type"] = gguf::value_type_name(v.type());
    if (v.type() == value_type::STRING) {
        // Abbreviated as in the text output: the first string_head bytes
        // (never cut inside a UTF-8 sequence), "length" the whole string's
        // bytes and "truncated": true.
        const std::string_view str = v.as_string();
        if (full || str.size() <= string_head) {
            j["value"] = std::string(str);
            return j;
        }
        size_t cut = string_head;
        while (cut > 0 && (static_cast<unsigned char>(str[cut]) & 0xc0) == 0x80) --cut;
        j["value"] = std::string(str.substr(0, cut));
        j["length"] = str.size();
        j["truncated"] = true;
        return j;
    }
    if (!v.is_array()) {
        j["value"] = scalar_json(v);
        return j;
    }
    const uint64_t n = v.array_size();
    const size_t shown = full ? static_cast<size_t>(n) : static_cast<size_t>(std::min<uint64_t>(n, array_head));
    j["element_type"] = gguf::value_type_name(v.array_type());
    j["length"] = n;
    json items = json::array();
    for (size_t i = 0; i < shown; ++i) {
        switch (v.array_type()) {
        case value_type::STRING: items.push_back(std::string(v.as_string_array()[i])); break;
        case value_type::ARRAY: items.push_back(value_json(v.as_array_array()[i], full)); break;
        default: items.push_back(scalar_json(element(v, i))); break;
        }
    }
    j["value"] = std::move(items);
    if (shown < n) j["truncated"] = true;
    return j;
}

// `j` as --json prints it: 2-space indents, bytes that are not UTF-8
// replaced by U+FFFD.
std::string dump(const json & j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

// Writes `,\n  "key": [...]` as the last member of a document dumped by
// dump(): `n` entries entry(i), each indented as an array element two
// levels down; `last`: then the document's closing brace.
template <class Entry>
void print_json_array(const char * key, size_t n, bool last, const Entry & entry) {
    fmt::print(",\n  \"{}\": {}", key, n == 0 ? "[]" : "[");
    for (size_t i = 0; i < n; ++i) {
        const std::string text = dump(entry(i));
        std::string indented = "    ";
        indented.reserve(text.size() + text.size() / 4);
        for (const char c : text) {
            indented += c;
            if (c == '\n') indented += "    ";
        }
        fmt::print("{}\n{}", i == 0 ? "" : ",", indented);
    }
    fmt::print("{}{}", n == 0 ? "" : "\n  ]", last ? "\n}\n" : "");
}

std::string shape_text(const gguf::tensor_info & t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
    return s + "]";
}

int run_info(const std::string & path, bool as_json, bool full) {
    gguf::reader r(path);
    if (as_json) {
        json j;
        j["file"] = path;
        j["version"] = r.version();
        j["alignment"] = r.alignment();
        j["data_offset"] = r.data_offset();
        j["file_size"] = r.file_size();
        // The metadata and the tensor table are written one entry at a
        // time, each formatted as the whole document's dump would indent
        // it, so that memory grows with neither count (a document of
        // 300,000 tensors took 435 MB); the largest single entry is what
        // is held (a value abbreviated without --full). The text is that
        // of the whole document's j.dump(2), byte for byte
        // (GgufCli.InfoJsonStreamsTheDocumentsText).
        std::string head = dump(j);
        head.resize(head.size() - 2); // the closing "\n}"
        fmt::print("{}", head);
        const auto & metadata = r.metadata();
        print_json_array("metadata", metadata.size(), false, [&](size_t i) {
            json k = value_json(metadata[i].val, full);
            k["key"] = std::string(metadata[i].key);
            return k;
        });
        const auto & tensors = r.tensors();
        print_json_array("tensors", tensors.size(), true, [&](size_t i) {
            const gguf::tensor_info & t = tensors[i];
            json ne = json::array();
            for (uint32_t d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
            return json{{"name", std::string(t.name)},
                        {"type", std::string(type_name(t.type))},
                        {"ne", std::move(ne)},
                        {"n_elements", t.n_elements()},
                        {"size", t.size},
                        {"offset", t.offset},
                        {"file_offset", t.file_offset}};
        });
        return 0;
    }
    fmt::print("file: {}\n", escaped(path)); // (a name with control bytes must not drive the terminal)
    // Without tensors the data offset (the aligned end of the header) can lie
    // past the end of the file: there is no data section to point at.
    const std::string data = r.n_tensors() == 0 ? std::string("no tensor data") : fmt::format("data offset {}", r.data_offset());
    fmt::print("GGUF version {}, alignment {}, {}, file size {} bytes\n", r.version(), r.alignment(), data, r.file_size());
    fmt::print("\nmetadata: {}\n", count_text(r.n_kv(), "key"));
    size_t width = 0;
    for (const auto & e : r.metadata()) width = std::min(std::max(width, escaped(e.key).size()), column_most);
    for (const auto & e : r.metadata()) {
        const std::string type = e.val.is_array() ? "ARRAY" : gguf::value_type_name(e.val.type());
        fmt::print("  {:<{}}  {:<7}  {}\n", escaped(e.key), width, type, value_text(e.val, full));
    }
    fmt::print("\ntensors: {}\n", r.n_tensors());
    if (r.n_tensors() == 0) return 0;
    size_t nw = 4;
    for (const auto & t : r.tensors()) nw = std::min(std::max(nw, escaped(t.name).size()), column_most);
    fmt::print("  {:<{}}  {:<7}  {:<24}  {:>12}  {:>12}\n", "name", nw, "type", "shape (ne)", "bytes", "offset");
    uint64_t total = 0, elements = 0;
    for (const auto & t : r.tensors()) {
        fmt::print("  {:<{}}  {:<7}  {:<24}  {:>12}  {:>12}\n", escaped(t.name), nw, type_name(t.type), shape_text(t), t.size,
                   t.offset);
        total += t.size;
        elements += static_cast<uint64_t>(t.n_elements());
    }
    fmt::print("\n{} elements, {} bytes of tensor data\n", elements, total);
    return 0;
}

} // namespace

command register_gguf(CLI::App & app) {
#ifdef TESSERA_HAVE_GGUF_SYNTH
    auto * sub = app.add_subcommand("gguf", "inspect GGUF files (info) and write random-weight test models (synth)");
#else
    auto * sub = app.add_subcommand("gguf", "inspect GGUF files (info)");
#endif
    sub->require_subcommand(1);
    auto * info = sub->add_subcommand("info", "print a GGUF file's header, metadata and tensor table");
    struct options {
        std::string path;
        bool json = false;
        bool full = false;
    };
    auto opts = std::make_shared<options>();
    info->add_option("FILE", opts->path, "GGUF file")->required();
    info->add_flag("--json", opts->json, "machine-readable JSON output");
    info->add_flag("--full", opts->full, "print arrays and strings in full instead of abbreviated");
#ifdef TESSERA_HAVE_GGUF_SYNTH
    const command synth = add_gguf_synth(*sub); // tools/cmd_synth.cpp
#else
    const command synth{nullptr, nullptr};
#endif
    return command{sub, [opts, info, synth]() -> int {
                       if (info->parsed()) return run_info(opts->path, opts->json, opts->full);
                       if (synth.sub != nullptr && synth.sub->parsed()) return synth.run();
                       return 1;
                   }};
}

} // namespace tessera::tools
