// Read-only file mapping (POSIX mmap) and its in-memory stand-in.
#include "tessera/gguf/reader.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera::gguf {

namespace {
constexpr std::align_val_t heap_alignment{64};

// The live file mappings mapped_file_at looks up: a slot is claimed
// (free -> writing), filled, then published (live, release order); a
// lookup reads only live slots (acquire). Lock-free, so that a signal
// handler may read it.
constexpr int k_tracked = 64;
struct tracked_mapping {
    std::atomic<int> state{0}; // 0 free, 1 being written or cleared, 2 live
    uintptr_t begin = 0, end = 0;
    char name[512] = {};
};
tracked_mapping tracked[k_tracked];

// The slot now holding [p, p + n), or -1 when all are taken.
int track(const uint8_t * p, size_t n, const std::string & name) {
    for (int i = 0; i < k_tracked; ++i) {
        int expected = 0;
        if (!tracked[i].state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) continue;
        tracked[i].begin = reinterpret_cast<uintptr_t>(p);
        tracked[i].end = reinterpret_cast<uintptr_t>(p) + n;
        const std::string shown = printable_utf8(name, sizeof tracked[i].name - 1);
        const size_t len = std::min(shown.size(), sizeof tracked[i].name - 1);
        std::memcpy(tracked[i].name, shown.data(), len);
        tracked[i].name[len] = '\0';
        tracked[i].state.store(2, std::memory_order_release);
        return i;
    }
    return -1;
}

void untrack(int slot) {
    if (slot < 0) return;
    tracked[slot].state.store(1, std::memory_order_relaxed);
    tracked[slot].begin = tracked[slot].end = 0;
    tracked[slot].state.store(0, std::memory_order_release);
}

// Closes a descriptor on scope exit.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};
} // namespace

// The name every message shows is the path escaped (printable_utf8): a
// file name with control bytes must not drive the terminal.
mapping::mapping(const std::filesystem::path & path) : name_(printable_utf8(path.string())) {
    if (path.empty()) throw error("gguf: the path is empty"); // (not "gguf: : no such file")
    // O_NONBLOCK: opening a FIFO must not wait for a writer before the
    // S_ISREG check refuses it (it has no effect on a regular file).
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        // "no such file", as every command words a missing input.
        if (errno == ENOENT) throw error(fmt::format("gguf: {}: no such file", name_));
        throw error(fmt::format("gguf: {}: cannot open: {}", name_, std::strerror(errno)));
    }
    fd_guard guard{fd};
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        throw error(fmt::format("gguf: {}: cannot stat: {}", name_, std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) {
        throw error(fmt::format("gguf: {}: not a regular file", name_));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return; // nothing to map; the parser reports the missing header
    void * p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        throw error(fmt::format("gguf: {}: cannot mmap {} bytes: {}", name_, size_, std::strerror(errno)));
    }
    data_ = static_cast<const uint8_t *>(p);
    mapped_ = true;
    slot_ = track(data_, size_, path.string()); // (escaped there, once)
}

const char * mapped_file_at(const void * p) noexcept {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const tracked_mapping & t : tracked) {
        if (t.state.load(std::memory_order_acquire) == 2 && a >= t.begin && a < t.end) return t.name;
    }
    return nullptr;
}

mapping::mapping(std::span<const uint8_t> bytes, std::string name) : size_(bytes.size()), name_(std::move(name)) {
    if (size_ == 0) return;
    auto * p = static_cast<uint8_t *>(::operator new(size_, heap_alignment));
    std::memcpy(p, bytes.data(), size_);
    data_ = p;
}

void mapping::release(const uint8_t * p, size_t n) const {
    if (!mapped_ || p == nullptr || n == 0 || p < data_ || n > size_ || static_cast<size_t>(p - data_) > size_ - n) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    // MADV_DONTNEED on a private read-only file mapping drops only the page
    // table entries: the file's pages stay in the page cache, and a later
    // read maps them again with the same bytes (madvise(2)).
    if (begin < end) (void)::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
}

void mapping::populate(const uint8_t * p, size_t n) const {
    if (!mapped_ || p == nullptr || n == 0 || p < data_ || n > size_ || static_cast<size_t>(p - data_) > size_ - n) return;
#ifdef MADV_POPULATE_READ
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page; // pages of the mapping: its start is page-aligned
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
    (void)::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_POPULATE_READ);
#endif
}

mapping::~mapping() {
    if (data_ == nullptr) return;
    if (mapped_) {
        untrack(slot_);
        ::munmap(const_cast<uint8_t *>(data_), size_);
    } else {
        ::operator delete(const_cast<uint8_t *>(data_), heap_alignment);
    }
}

} // namespace tessera::gguf
