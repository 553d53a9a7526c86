// Read-only file mapping (POSIX mmap) and its in-memory stand-in.
#include "tessera/gguf/reader.hpp"

#include <cerrno>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include "tessera/core/error.hpp"

namespace tessera::gguf {

namespace {
constexpr std::align_val_t heap_alignment{64};

// Closes a descriptor on scope exit.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};
} // namespace

mapping::mapping(const std::filesystem::path & path) : name_(path.string()) {
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
        ::munmap(const_cast<uint8_t *>(data_), size_);
    } else {
        ::operator delete(const_cast<uint8_t *>(data_), heap_alignment);
    }
}

} // namespace tessera::gguf
