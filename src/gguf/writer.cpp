// gguf::writer: serializes metadata and tensors as GGUF version 3 and writes
// the file atomically (temporary file in the same directory + rename).
// Layout: GGUF specification (ggml repository, docs/gguf.md).
#include "tessera/gguf/writer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include "printable.hpp"
#include "writer_hooks.hpp"
#include "tessera/core/error.hpp"
#include "tessera/gguf/reader.hpp"

namespace tessera::gguf {

namespace detail {
void (*after_temp_created)() = nullptr;
} // namespace detail

namespace {

struct tensor_entry {
    std::string name;
    type t;
    uint32_t n_dims;
    int64_t ne[TSR_MAX_DIMS];
    std::span<const uint8_t> data;
    std::shared_ptr<const void> keep_alive;
    uint64_t size = 0;      // packed bytes (== data.size() unless fill is set)
    writer::fill_fn fill;   // set: bytes are produced at write time (add_tensor_fill)
};

// Appends little-endian encodings to a byte vector.
struct sink {
    std::vector<uint8_t> & out;
    template <class T> void put(T v) {
        bytes(&v, sizeof v); // host is little-endian (static_assert in value.cpp)
    }
    void bytes(const void * p, size_t n) {
        if (n == 0) return;
        const size_t at = out.size();
        out.resize(at + n);
        std::memcpy(out.data() + at, p, n);
    }
    void string(std::string_view s) {
        put<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
    }
};

// Writes a value's payload (not its type id).
void put_value(sink & s, const value & v) {
    switch (v.type()) {
    case value_type::STRING: s.string(v.as_string()); return;
    case value_type::ARRAY: {
        const value_type et = v.array_type();
        s.put<uint32_t>(static_cast<uint32_t>(et));
        s.put<uint64_t>(v.array_size());
        if (et == value_type::STRING) {
            for (auto str : v.as_string_array()) s.string(str);
        } else if (et == value_type::ARRAY) {
            for (const auto & item : v.as_array_array()) put_value(s, item);
        } else {
            auto b = v.array_bytes();
            s.bytes(b.data(), b.size());
        }
        return;
    }
    default: {
        // Scalars: re-encode through the typed accessor.
        switch (v.type()) {
        case value_type::UINT8: s.put(v.as_u8()); break;
        case value_type::INT8: s.put(v.as_i8()); break;
        case value_type::UINT16: s.put(v.as_u16()); break;
        case value_type::INT16: s.put(v.as_i16()); break;
        case value_type::UINT32: s.put(v.as_u32()); break;
        case value_type::INT32: s.put(v.as_i32()); break;
        case value_type::UINT64: s.put(v.as_u64()); break;
        case value_type::INT64: s.put(v.as_i64()); break;
        case value_type::FLOAT32: s.put(v.as_f32()); break;
        case value_type::FLOAT64: s.put(v.as_f64()); break;
        case value_type::BOOL: s.put<uint8_t>(v.as_bool() ? 1 : 0); break;
        default: break;
        }
    }
    }
}

// Packed byte size of a tensor; throws on a bad shape or overflow.
uint64_t packed_size(std::string_view name, type t, std::span<const int64_t> ne) {
    if (!type_is_valid(t)) throw error(fmt::format("gguf writer: tensor '{}': unknown type id {}", detail::printable(name), static_cast<int>(t)));
    if (ne.empty() || ne.size() > TSR_MAX_DIMS) {
        throw error(fmt::format("gguf writer: tensor '{}': {} dimensions (must be 1..{})", detail::printable(name), ne.size(), TSR_MAX_DIMS));
    }
    for (size_t d = 0; d < ne.size(); ++d) {
        if (ne[d] < 1) throw error(fmt::format("gguf writer: tensor '{}': ne[{}] = {} (must be >= 1)", detail::printable(name), d, ne[d]));
    }
    const type_traits & tr = get_type_traits(t);
    if (ne[0] % tr.block_size != 0) {
        throw error(fmt::format("gguf writer: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                                detail::printable(name), ne[0], tr.name, tr.block_size));
    }
    uint64_t size = static_cast<uint64_t>(ne[0] / tr.block_size);
    bool ok = !__builtin_mul_overflow(size, static_cast<uint64_t>(tr.type_size), &size);
    uint64_t n = static_cast<uint64_t>(ne[0]);
    for (size_t d = 1; d < ne.size() && ok; ++d) {
        ok = !__builtin_mul_overflow(size, static_cast<uint64_t>(ne[d]), &size) &&
             !__builtin_mul_overflow(n, static_cast<uint64_t>(ne[d]), &n);
    }
    if (!ok || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw error(fmt::format("gguf writer: tensor '{}': size overflows", detail::printable(name)));
    }
    return size;
}

// The temporary file being written, removed by the handler below when a
// signal ends the process mid-write (unlink, sigaction and raise are
// async-signal-safe, POSIX.1-2017 2.4.3): the ones a user, a shell or the
// system sends to end a process (Ctrl-C, Ctrl-\, kill, a closed terminal
// or pipe, alarm, the CPU time limit, the user signals), and SIGBUS, which
// a mapped input file raises when it shrinks while it is read. One write at
// a time owns it; a nested or concurrent write goes unguarded by signals. A
// signal the process ignores (nohup, a background job of a script) gets no
// handler: it would not end the process, so the write goes on. SIGXFSZ (the
// file size limit, `ulimit -f`) is ignored instead while the file is
// written, so that the write fails with EFBIG and is reported as an error.
std::atomic<const char *> g_signal_temp{nullptr};
constexpr int k_cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGBUS};
constexpr size_t k_n_cleanup = std::size(k_cleanup_signals);
struct sigaction g_old_actions[k_n_cleanup + 1]; // the dispositions before guard_signals; [k_n_cleanup]: SIGXFSZ's
bool g_guarded[k_n_cleanup + 1] = {};            // a disposition was replaced for the signal

void remove_temp_and_reraise(int sig, siginfo_t * info, void *) {
    if (const char * p = g_signal_temp.exchange(nullptr)) ::unlink(p);
    for (size_t i = 0; i < k_n_cleanup; ++i) {
        if (k_cleanup_signals[i] == sig) ::sigaction(sig, &g_old_actions[i], nullptr);
    }
    // A fault (SIGBUS from the kernel, si_code > 0): returning runs the
    // access again, which faults again under the previous disposition, with
    // its own details. Sent signals are raised again.
    if (sig == SIGBUS && info != nullptr && info->si_code > 0) return;
    ::raise(sig); // the previous disposition now runs (by default: the process ends)
}

// Blocks the cleanup signals in this thread while it lives (the mask
// before is restored after).
struct signals_held {
    sigset_t before;
    signals_held() {
        sigset_t set;
        sigemptyset(&set);
        for (int sig : k_cleanup_signals) sigaddset(&set, sig);
        ::pthread_sigmask(SIG_BLOCK, &set, &before);
    }
    ~signals_held() { ::pthread_sigmask(SIG_SETMASK, &before, nullptr); }
    signals_held(const signals_held &) = delete;
    signals_held & operator=(const signals_held &) = delete;
};

// Closes a descriptor and removes the temporary file unless released.
struct temp_guard {
    int fd = -1;
    std::string path;
    bool keep = false;
    bool signals = false; // handlers installed for this file
    // Removes the file if the process is interrupted before ~temp_guard.
    void guard_signals() {
        const char * expected = nullptr;
        if (!g_signal_temp.compare_exchange_strong(expected, path.c_str())) return;
        struct sigaction sa {};
        sa.sa_sigaction = remove_temp_and_reraise;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < k_n_cleanup; ++i) {
            struct sigaction now {};
            g_guarded[i] = ::sigaction(k_cleanup_signals[i], nullptr, &now) == 0 && now.sa_handler != SIG_IGN &&
                           ::sigaction(k_cleanup_signals[i], &sa, &g_old_actions[i]) == 0;
        }
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        sigemptyset(&ignore.sa_mask);
        g_guarded[k_n_cleanup] = ::sigaction(SIGXFSZ, &ignore, &g_old_actions[k_n_cleanup]) == 0;
        signals = true;
    }
    ~temp_guard() {
        if (signals) {
            for (size_t i = 0; i <= k_n_cleanup; ++i) {
                if (g_guarded[i]) ::sigaction(i < k_n_cleanup ? k_cleanup_signals[i] : SIGXFSZ, &g_old_actions[i], nullptr);
                g_guarded[i] = false;
            }
            g_signal_temp.store(nullptr);
        }
        if (fd >= 0) ::close(fd);
        if (!keep && !path.empty()) ::unlink(path.c_str());
    }
};

// `path` as messages show it (printable_utf8): a file name with control
// bytes must not drive the terminal.
std::string shown(const std::filesystem::path & path) { return printable_utf8(path.string()); }

// Writes n bytes at p to fd; `path`: the file's name as messages show it.
void write_all(int fd, const uint8_t * p, size_t n, const std::string & path) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw error(fmt::format("gguf writer: {}: write failed: {}", path, std::strerror(errno)));
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
}

} // namespace

// Hashes std::string and std::string_view alike (lookups by view).
struct name_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct writer::impl {
    std::vector<std::pair<std::string, value>> kvs; // in the order they are written
    // Where each key is in kvs, and the arrays nested in arrays over all
    // values (array_shape::nested), so that setting n keys takes time
    // linear in n (a linear search per key made `quantize` of a file with
    // 100,000 keys take 68 s).
    std::unordered_map<std::string, size_t, name_hash, std::equal_to<>> kv_index;
    uint64_t nested_total = 0;
    std::vector<tensor_entry> tensors;
    std::unordered_set<std::string, name_hash, std::equal_to<>> tensor_names;

    void add(std::string_view name, type t, std::span<const int64_t> ne, std::span<const uint8_t> data,
             std::shared_ptr<const void> keep_alive, writer::fill_fn fill = nullptr) {
        if (name.empty() || name.size() > max_tensor_name) {
            throw error(fmt::format("gguf writer: tensor name '{}' must be 1..{} bytes", detail::printable(name), max_tensor_name));
        }
        if (tensor_names.find(name) != tensor_names.end()) {
            throw error(fmt::format("gguf writer: duplicate tensor name '{}'", detail::printable(name)));
        }
        const uint64_t size = packed_size(name, t, ne);
        if (!fill && size != data.size()) {
            throw error(fmt::format("gguf writer: tensor '{}': {} bytes of data given, the shape needs {}",
                                    detail::printable(name), data.size(), size));
        }
        tensor_entry e{std::string(name), t, static_cast<uint32_t>(ne.size()), {1, 1, 1, 1}, data, std::move(keep_alive),
                       size, std::move(fill)};
        for (size_t d = 0; d < ne.size(); ++d) e.ne[d] = ne[d];
        tensor_names.emplace(name);
        try {
            tensors.push_back(std::move(e));
        } catch (...) {
            tensor_names.erase(tensor_names.find(name));
            throw;
        }
    }
};

writer::writer() : impl_(std::make_unique<impl>()) {}
writer::~writer() = default;
writer::writer(writer &&) noexcept = default;
writer & writer::operator=(writer &&) noexcept = default;

namespace {

// The arrays of `v` as the reader counts them (parser.cpp read_value): the
// deepest chain of arrays (0 for a scalar, 1 for an array of scalars or
// strings) and the arrays that are elements of arrays.
struct array_shape {
    int depth = 0;
    uint64_t nested = 0;
};

array_shape shape_of(const value & v) {
    array_shape s;
    if (v.type() != value_type::ARRAY) return s;
    s.depth = 1;
    if (v.array_type() != value_type::ARRAY) return s;
    const auto items = v.as_array_array();
    s.nested = items.size();
    for (const value & item : items) {
        const array_shape inner = shape_of(item);
        s.depth = std::max(s.depth, 1 + inner.depth);
        s.nested += inner.nested;
    }
    return s;
}

} // namespace

void writer::set(std::string_view key, value v) {
    if (key.empty() || key.size() > max_key_length) {
        throw error(fmt::format("gguf writer: key length {} must be 1..{}", key.size(), max_key_length));
    }
    // What the reader refuses is not written: arrays at most max_array_depth
    // deep, at most max_nested_arrays arrays in arrays over the whole file.
    const array_shape shape = shape_of(v);
    if (shape.depth > max_array_depth) {
        throw error(fmt::format("gguf writer: key '{}': arrays nested {} levels deep, more than the {} a GGUF reader takes",
                                detail::printable(key), shape.depth, max_array_depth));
    }
    const auto at = impl_->kv_index.find(key);
    const uint64_t replaced = at != impl_->kv_index.end() ? shape_of(impl_->kvs[at->second].second).nested : 0;
    if (shape.nested > 0) {
        const uint64_t others = impl_->nested_total - replaced;
        if (shape.nested > max_nested_arrays - std::min(others, max_nested_arrays)) {
            throw error(fmt::format("gguf writer: key '{}': {} arrays nested in arrays, with the other keys' {} more than "
                                    "the {} a GGUF file may hold",
                                    detail::printable(key), shape.nested, others, max_nested_arrays));
        }
    }
    if (key == "general.alignment") {
        if (v.type() != value_type::UINT32) {
            throw error(fmt::format("gguf writer: general.alignment must be UINT32, got {}", value_type_name(v.type())));
        }
        const uint32_t a = v.as_u32();
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30)) {
            throw error(fmt::format("gguf writer: general.alignment {} is not a power of two in 1..2^30", a));
        }
    }
    if (at != impl_->kv_index.end()) {
        impl_->kvs[at->second].second = std::move(v);
    } else {
        if (impl_->kvs.size() >= max_kv_count) {
            throw error(fmt::format("gguf writer: key '{}': more than the {} key/value pairs a GGUF reader takes",
                                    detail::printable(key), max_kv_count));
        }
        impl_->kvs.emplace_back(std::string(key), std::move(v));
        try {
            impl_->kv_index.emplace(std::string(key), impl_->kvs.size() - 1);
        } catch (...) {
            impl_->kvs.pop_back();
            throw;
        }
    }
    impl_->nested_total = impl_->nested_total - replaced + shape.nested;
}

bool writer::remove(std::string_view key) {
    const auto at = impl_->kv_index.find(key);
    if (at == impl_->kv_index.end()) return false;
    const size_t i = at->second;
    auto & kvs = impl_->kvs;
    impl_->nested_total -= shape_of(kvs[i].second).nested;
    impl_->kv_index.erase(at);
    kvs.erase(kvs.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t j = i; j < kvs.size(); ++j) impl_->kv_index.find(kvs[j].first)->second = j; // the later ones moved up
    return true;
}

void writer::copy_kv(const reader & src, std::string_view key) { set(key, src.get(key)); }

void writer::copy_all_kv(const reader & src) {
    for (const auto & e : src.metadata()) set(e.key, e.val);
}

const value * writer::find(std::string_view key) const {
    const auto at = impl_->kv_index.find(key);
    return at != impl_->kv_index.end() ? &impl_->kvs[at->second].second : nullptr;
}

size_t writer::n_kv() const { return impl_->kvs.size(); }

uint32_t writer::alignment() const {
    const value * v = find("general.alignment");
    return v ? v->as_u32() : default_alignment;
}

void writer::add_tensor(std::string_view name, type t, std::span<const int64_t> ne, std::span<const uint8_t> data) {
    auto owned = std::make_shared<const std::vector<uint8_t>>(data.begin(), data.end());
    std::span<const uint8_t> view(owned->data(), owned->size());
    impl_->add(name, t, ne, view, std::move(owned));
}

void writer::add_tensor(std::string_view name, type t, std::span<const int64_t> ne, std::vector<uint8_t> && data) {
    auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(data));
    std::span<const uint8_t> view(owned->data(), owned->size());
    impl_->add(name, t, ne, view, std::move(owned));
}

void writer::add_tensor_ref(std::string_view name, type t, std::span<const int64_t> ne, std::span<const uint8_t> data,
                            std::shared_ptr<const void> keep_alive) {
    impl_->add(name, t, ne, data, std::move(keep_alive));
}

void writer::copy_tensor(const reader & src, std::string_view name) {
    const tensor_info & ti = src.tensor(name);
    impl_->add(ti.name, ti.type, std::span<const int64_t>(ti.ne, ti.n_dims), ti.bytes(), src.file_mapping());
}

void writer::add_tensor_fill(std::string_view name, type t, std::span<const int64_t> ne, fill_fn fill) {
    if (!fill) throw error(fmt::format("gguf writer: tensor '{}': no fill function given", detail::printable(name)));
    impl_->add(name, t, ne, {}, nullptr, std::move(fill));
}

size_t writer::n_tensors() const { return impl_->tensors.size(); }

// Header, metadata and tensor infos, padded to the alignment (the data
// section's start); `offsets` receives each tensor's offset in the section.
static std::vector<uint8_t> build_head(const std::vector<std::pair<std::string, value>> & kvs,
                                       const std::vector<tensor_entry> & tensors, uint32_t alignment,
                                       std::vector<uint64_t> & offsets) {
    std::vector<uint8_t> out;
    sink s{out};
    s.bytes("GGUF", 4);
    s.put<uint32_t>(3);
    s.put<uint64_t>(tensors.size());
    s.put<uint64_t>(kvs.size());
    for (const auto & [k, v] : kvs) {
        s.string(k);
        s.put<uint32_t>(static_cast<uint32_t>(v.type()));
        put_value(s, v);
    }
    uint64_t offset = 0;
    offsets.clear();
    for (const auto & t : tensors) {
        s.string(t.name);
        s.put<uint32_t>(t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) s.put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
        s.put<uint32_t>(static_cast<uint32_t>(t.t));
        s.put<uint64_t>(offset);
        offsets.push_back(offset);
        offset = (offset + t.size + alignment - 1) / alignment * alignment;
    }
    if (!tensors.empty()) s.pad_to(alignment);
    return out;
}

std::vector<uint8_t> writer::to_bytes() const {
    const uint32_t a = alignment();
    std::vector<uint64_t> offsets;
    std::vector<uint8_t> out = build_head(impl_->kvs, impl_->tensors, a, offsets);
    sink s{out};
    for (const auto & t : impl_->tensors) {
        if (t.fill) {
            const size_t at = out.size();
            out.resize(at + t.size, 0);
            t.fill(std::span<uint8_t>(out.data() + at, t.size));
        } else {
            s.bytes(t.data.data(), t.data.size());
        }
        s.pad_to(a);
    }
    return out;
}

namespace {

// The file a path names once symbolic links are followed, as open(2) with
// O_CREAT finds it: a dangling link names the file to create (its target,
// relative to the link's folder unless absolute). Throws gguf::error after
// 40 links (Linux's MAXSYMLINKS: a loop) or on a link it cannot read.
std::filesystem::path follow_links(const std::filesystem::path & path) {
    std::filesystem::path p = path;
    for (int hops = 0; hops <= 40; ++hops) {
        std::error_code ec;
        if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) return p;
        const std::filesystem::path next = std::filesystem::read_symlink(p, ec);
        if (ec) throw error(fmt::format("gguf writer: {}: cannot read the symbolic link {}: {}", shown(path), shown(p), ec.message()));
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
    throw error(fmt::format("gguf writer: {}: too many levels of symbolic links", shown(path)));
}

// The longest file name (bytes) the file system of folder `dir` allows:
// pathconf's _PC_NAME_MAX, NAME_MAX (255) where it cannot say (a missing
// folder, which the temporary's creation then names).
size_t name_max_of(const std::filesystem::path & dir) {
    const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
    return n > 0 ? static_cast<size_t>(n) : size_t{NAME_MAX};
}

// The process's file-mode creation mask, read from /proc/self/status
// (Linux 4.7+) without changing it; where that is missing, umask(2) set
// and restored at once (a file another thread creates in that instant
// escapes the mask).
mode_t process_umask() {
    if (FILE * f = std::fopen("/proc/self/status", "re")) {
        char line[256];
        unsigned mask = 0;
        bool found = false;
        while (!found && std::fgets(line, sizeof line, f) != nullptr) found = std::sscanf(line, "Umask: %o", &mask) == 1;
        std::fclose(f);
        if (found) return static_cast<mode_t>(mask & 0777);
    }
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
}

} // namespace

bool same_file(const std::filesystem::path & in, const std::filesystem::path & out) {
    std::error_code ec;
    return std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec);
}

std::string lookup_failure(const std::filesystem::path & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return "";
    return errno == ENOENT ? "no such file" : std::strerror(errno);
}

void writer::write(const std::filesystem::path & path) const {
    // Paths that cannot name the file are refused before any data is made
    // (add_tensor_fill tensors are computed while writing).
    if (path.empty()) throw error("gguf writer: the output path is empty");
    const auto is_a_directory = [&] {
        return error(fmt::format("gguf writer: {}: is a directory, not a file name", shown(path)));
    };
    const auto not_a_regular_file = [&] {
        return error(fmt::format("gguf writer: {}: not a regular file (a device, FIFO or socket is not replaced)", shown(path)));
    };
    if (path.filename().empty()) { // "x/": a directory's name; say so when x is a file
        struct stat st {};
        if (::stat(path.parent_path().c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
            throw error(fmt::format("gguf writer: {}: not a directory (the trailing '/' names one)", shown(path)));
        }
        struct stat self {};
        if (::stat(path.c_str(), &self) == 0) throw is_a_directory();
        throw error(fmt::format("gguf writer: {}: ends in '/', a directory's name, not a file name", shown(path)));
    }
    // The file is written beside its final name and renamed over it, so a
    // symbolic link is followed to the file it names (the link stays), and
    // anything but a regular file (a directory; a device such as /dev/null,
    // a FIFO, a socket) is refused: renaming over it would replace it.
    // What the path opens, links followed by the kernel (/dev/stdout to a
    // pipe is a FIFO, though /proc/self/fd's link names no file).
    struct stat opened {};
    const bool opens = ::stat(path.c_str(), &opened) == 0;
    if (opens && !S_ISREG(opened.st_mode) && !S_ISDIR(opened.st_mode)) throw not_a_regular_file();
    const std::filesystem::path target = follow_links(path);
    // The link's text must name the file the kernel opens: a /proc/self/fd/N
    // of a deleted file reads "NAME (deleted)", of a memfd "/memfd:NAME
    // (deleted)", and renaming over that text would make a new, unrelated
    // file while the one meant stays as it was. (A dangling link, which
    // opens nothing, names the file to create.)
    if (target != path && opens) {
        struct stat named {};
        if (::stat(target.c_str(), &named) != 0 || named.st_dev != opened.st_dev || named.st_ino != opened.st_ino) {
            throw error(fmt::format("gguf writer: {}: names a deleted or unnamed file (its link reads '{}', which is "
                                    "not that file): cannot replace it by name",
                                    shown(path), shown(target)));
        }
    }
    struct stat st {};
    const bool exists = ::stat(target.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) throw is_a_directory();
    if (exists && !S_ISREG(st.st_mode)) throw not_a_regular_file();
    // Replacing goes by the directory's permissions, not the file's: refuse
    // a file this user may not write, as `>` would (root may write any).
    if (exists && ::faccessat(AT_FDCWD, target.c_str(), W_OK, AT_EACCESS) != 0) {
        throw error(fmt::format("gguf writer: {}: cannot replace it: {}", shown(path), std::strerror(errno)));
    }
    std::filesystem::path dir = target.parent_path();
    if (dir.empty()) dir = ".";
    // A name the file system cannot hold would fail only at the rename,
    // after all the tensor data was made (and name the temporary).
    const size_t name_max = name_max_of(dir);
    std::string base = target.filename().string();
    // Messages name the path given, and the file its link names if it is one.
    const std::string final_shown =
        target == path ? shown(path) : fmt::format("{} (its link names {})", shown(path), shown(target));
    if (base.size() > name_max) {
        throw error(fmt::format("gguf writer: {}: file name is {} bytes, longer than the file system allows ({})",
                                final_shown, base.size(), name_max));
    }
    const uint32_t a = alignment();
    std::vector<uint64_t> offsets;
    const std::vector<uint8_t> head = build_head(impl_->kvs, impl_->tensors, a, offsets);

    const std::string final_path = target.string();
    temp_guard tmp;
    // The temporary's name is the file's with ".tmp.XXXXXX" added, the
    // file's part cut to keep it within the longest name the file system
    // allows (a 250-byte name is legal where that is 255).
    constexpr size_t k_suffix = sizeof(".tmp.XXXXXX") - 1;
    if (base.size() + k_suffix > name_max) base.resize(name_max > k_suffix ? name_max - k_suffix : 1);
    std::string templ = (dir / (base + ".tmp.XXXXXX")).string();
    {
        // The cleanup signals wait (blocked in this thread) until the
        // temporary is guarded: one that came while it was being created
        // ended the process and left it behind, empty (1 run in 240 of
        // `timeout -s TERM 0.005 tessera gguf synth ...`).
        const signals_held held;
        tmp.fd = ::mkstemp(templ.data());
        if (tmp.fd < 0) {
            throw error(fmt::format("gguf writer: {}: cannot create a temporary file in {}: {}", final_shown, shown(dir),
                                    std::strerror(errno)));
        }
        tmp.path = templ;
        if (detail::after_temp_created != nullptr) detail::after_temp_created();
        tmp.guard_signals();
    } // (a signal held meanwhile is taken here: the handler removes the file)
    // A replaced file keeps its owner and group where this process may give
    // them (root; a group it is in), else it becomes this user's, as with
    // `sed -i`; then its permissions (after the chown, which may clear
    // set-id bits). A new file gets what open(2) would give it: 0666 less
    // the umask. (Hard links to a replaced file keep the old contents.)
    if (exists && (st.st_uid != ::geteuid() || st.st_gid != ::getegid())) (void)::fchown(tmp.fd, st.st_uid, st.st_gid);
    ::fchmod(tmp.fd, exists ? (st.st_mode & 07777) : (0666 & ~process_umask()));
    write_all(tmp.fd, head.data(), head.size(), final_shown);
    static const uint8_t zeros[4096] = {};
    uint64_t pos = 0; // position in the data section
    std::vector<uint8_t> filled; // reused buffer for add_tensor_fill tensors
    for (size_t i = 0; i < impl_->tensors.size(); ++i) {
        const auto & t = impl_->tensors[i];
        if (t.fill) {
            filled.assign(t.size, 0);
            t.fill(std::span<uint8_t>(filled.data(), filled.size()));
            write_all(tmp.fd, filled.data(), filled.size(), final_shown);
        } else {
            write_all(tmp.fd, t.data.data(), t.data.size(), final_shown);
        }
        pos = offsets[i] + t.size;
        uint64_t pad = (pos + a - 1) / a * a - pos;
        while (pad > 0) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
            write_all(tmp.fd, zeros, n, final_shown);
            pad -= n;
        }
    }
    if (::fsync(tmp.fd) != 0) {
        throw error(fmt::format("gguf writer: {}: fsync failed: {}", final_shown, std::strerror(errno)));
    }
    const int fd = tmp.fd;
    tmp.fd = -1;
    if (::close(fd) != 0) {
        throw error(fmt::format("gguf writer: {}: close failed: {}", final_shown, std::strerror(errno)));
    }
    if (::rename(tmp.path.c_str(), final_path.c_str()) != 0) {
        throw error(fmt::format("gguf writer: cannot rename {} to {}: {}", shown(tmp.path), final_shown, std::strerror(errno)));
    }
    tmp.keep = true;
    // Make the rename durable (best effort: some filesystems refuse fsync on a directory).
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

} // namespace tessera::gguf
