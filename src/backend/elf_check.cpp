// backend/elf_check.cpp — validates an ELF shared library's headers and
// file extents with plain reads before dlopen maps it (elf_check.hpp).
//
// The layout checked is the one of the System V ABI, generic ABI chapter
// "Object Files" (sections "ELF Header", "Sections", "Program Header"), as
// summarised in elf(5); structures and constants come from <elf.h>.
#include "backend/elf_check.hpp"

#include "backend/elf_image.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/core.h>

namespace tessera::detail {

namespace {

// This process's ELF class: a library of the other class cannot be loaded.
#if UINTPTR_MAX > 0xffffffffu
using ehdr_t = Elf64_Ehdr;
using phdr_t = Elf64_Phdr;
using shdr_t = Elf64_Shdr;
constexpr unsigned char host_class = ELFCLASS64;
#else
using ehdr_t = Elf32_Ehdr;
using phdr_t = Elf32_Phdr;
using shdr_t = Elf32_Shdr;
constexpr unsigned char host_class = ELFCLASS32;
#endif

constexpr unsigned char host_data =
    std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB;

// e_machine of this process's code; 0 where not listed here (then the
// machine is left to dlopen to check).
constexpr unsigned host_machine =
#if defined(__x86_64__)
    EM_X86_64;
#elif defined(__aarch64__)
    EM_AARCH64;
#elif defined(__i386__)
    EM_386;
#elif defined(__arm__)
    EM_ARM;
#elif defined(__riscv)
    EM_RISCV;
#elif defined(__powerpc64__)
    EM_PPC64;
#elif defined(__powerpc__)
    EM_PPC;
#elif defined(__s390__)
    EM_S390;
#else
    0;
#endif

std::string class_name(unsigned c) {
    if (c == ELFCLASS32) return "32-bit";
    if (c == ELFCLASS64) return "64-bit";
    return fmt::format("invalid class {}", c);
}

std::string machine_name(unsigned m) {
    switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_386: return "x86 (32-bit)";
    case EM_AARCH64: return "AArch64";
    case EM_ARM: return "ARM (32-bit)";
    case EM_RISCV: return "RISC-V";
    case EM_PPC64: return "PowerPC 64-bit";
    case EM_PPC: return "PowerPC 32-bit";
    case EM_S390: return "s390";
    default: return fmt::format("ELF machine {}", m);
    }
}

std::string type_name(unsigned t) {
    switch (t) {
    case ET_REL: return "a relocatable object (.o)";
    case ET_EXEC: return "an executable";
    case ET_CORE: return "a core dump";
    default: return fmt::format("ELF type {}", t);
    }
}

// Owns a file descriptor.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// Whether the bytes [off, off + len) lie inside a file of `size` bytes.
bool inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// The message for `what` (e.g. "segment 2 (PT_LOAD)") reaching past the
// end of a file of `size` bytes.
std::string past_end(const std::string & what, uint64_t off, uint64_t len, uint64_t size) {
    if (len > UINT64_MAX - off) {
        return fmt::format("corrupt shared library: {} claims {} bytes at offset {} (past the end "
                           "of any file)",
                           what, len, off);
    }
    return fmt::format("truncated shared library: {} needs bytes [{}, {}) but the file has {} bytes",
                       what, off, off + len, size);
}

} // namespace

namespace elf {

size_t read_at(int fd, uint64_t off, void * dst, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t r = ::pread(fd, static_cast<char *>(dst) + done, n - done, off_t(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += size_t(r);
    }
    return done;
}

std::string segment_name(uint32_t t) {
    switch (t) {
    case PT_LOAD: return "PT_LOAD";
    case PT_DYNAMIC: return "PT_DYNAMIC";
    case PT_INTERP: return "PT_INTERP";
    case PT_NOTE: return "PT_NOTE";
    case PT_PHDR: return "PT_PHDR";
    case PT_TLS: return "PT_TLS";
    case PT_GNU_EH_FRAME: return "PT_GNU_EH_FRAME";
    case PT_GNU_STACK: return "PT_GNU_STACK";
    case PT_GNU_RELRO: return "PT_GNU_RELRO";
#ifdef PT_GNU_PROPERTY
    case PT_GNU_PROPERTY: return "PT_GNU_PROPERTY";
#endif
    default: return fmt::format("type {:#x}", t);
    }
}

} // namespace elf

using elf::read_at;

std::string check_elf_file(const std::string & path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
    if (f.fd < 0) return {}; // dlopen says why, in its own words
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) return {};
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    const uint64_t size = uint64_t(st.st_size);

    // ELF header: identification bytes first (gABI "ELF Identification").
    ehdr_t eh{};
    const size_t got = read_at(f.fd, 0, &eh, sizeof eh);
    if (size == 0) return "empty file, not a shared library";
    if (got < SELFMAG || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        return "not an ELF file (it does not begin with the ELF magic bytes 7f 45 4c 46)";
    }
    if (got > EI_CLASS && eh.e_ident[EI_CLASS] != host_class) {
        return fmt::format("wrong ELF class: a {} library; this tessera is a {} program",
                           class_name(eh.e_ident[EI_CLASS]), class_name(host_class));
    }
    if (got > EI_DATA && eh.e_ident[EI_DATA] != host_data) {
        return fmt::format("wrong byte order: a {} library on a {} machine",
                           eh.e_ident[EI_DATA] == ELFDATA2MSB ? "big-endian" : "little-endian",
                           host_data == ELFDATA2MSB ? "big-endian" : "little-endian");
    }
    if (got < sizeof eh) return past_end("the ELF header", 0, sizeof eh, size);
    if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT) {
        return fmt::format("unknown ELF version {} (only {} exists)", unsigned(eh.e_ident[EI_VERSION]),
                           EV_CURRENT);
    }
    if (eh.e_type != ET_DYN) return fmt::format("not a shared library: {}", type_name(eh.e_type));
    if (host_machine != 0 && eh.e_machine != host_machine) {
        return fmt::format("wrong machine: built for {}; this tessera runs on {}",
                           machine_name(eh.e_machine), machine_name(host_machine));
    }

    // Program header table (gABI "Program Header"): every segment's file
    // image [p_offset, p_offset + p_filesz) must be in the file, since
    // dlopen maps PT_LOAD segments and reads PT_DYNAMIC through them.
    if (eh.e_phnum == 0) return "no program headers (nothing the loader could map)";
    if (eh.e_phnum == PN_XNUM) return "extended program header numbering (PN_XNUM) is not supported";
    if (eh.e_phentsize != sizeof(phdr_t)) {
        return fmt::format("corrupt ELF header: program header entries of {} bytes (this ELF "
                           "class uses {})",
                           eh.e_phentsize, sizeof(phdr_t));
    }
    const uint64_t ph_bytes = uint64_t(eh.e_phnum) * sizeof(phdr_t);
    if (!inside(eh.e_phoff, ph_bytes, size)) {
        return past_end("the program header table", eh.e_phoff, ph_bytes, size);
    }
    std::vector<phdr_t> ph(eh.e_phnum);
    if (read_at(f.fd, eh.e_phoff, ph.data(), ph_bytes) != ph_bytes) {
        return past_end("the program header table", eh.e_phoff, ph_bytes, size);
    }
    for (size_t i = 0; i < ph.size(); ++i) {
        if (ph[i].p_filesz == 0) continue; // no bytes from the file (e.g. PT_GNU_STACK)
        if (!inside(ph[i].p_offset, ph[i].p_filesz, size)) {
            return past_end(elf::segment_label(i, ph[i].p_type),
                            ph[i].p_offset, ph[i].p_filesz, size);
        }
    }

    // Section header table (gABI "Sections"), when there is one. With more
    // than SHN_LORESERVE sections e_shnum is 0 and entry 0's sh_size holds
    // the count.
    if (eh.e_shoff != 0) {
        uint64_t count = eh.e_shnum;
        if (count == 0) {
            if (eh.e_shentsize < sizeof(shdr_t)) {
                return fmt::format("corrupt ELF header: section header entries of {} bytes (this "
                                   "ELF class uses {})",
                                   eh.e_shentsize, sizeof(shdr_t));
            }
            shdr_t s0{};
            if (!inside(eh.e_shoff, sizeof s0, size) ||
                read_at(f.fd, eh.e_shoff, &s0, sizeof s0) != sizeof s0) {
                return past_end("section header 0", eh.e_shoff, sizeof s0, size);
            }
            count = s0.sh_size == 0 ? 1 : uint64_t(s0.sh_size);
        }
        if (count > UINT64_MAX / (eh.e_shentsize ? eh.e_shentsize : 1)) {
            return fmt::format("corrupt ELF header: {} section headers", count);
        }
        const uint64_t sh_bytes = count * eh.e_shentsize;
        if (!inside(eh.e_shoff, sh_bytes, size)) {
            return past_end("the section header table", eh.e_shoff, sh_bytes, size);
        }
    }

#if UINTPTR_MAX > 0xffffffffu
    // What the loader reads, writes and calls once the segments are mapped
    // (elf_image.hpp): a damaged copy used to crash inside dlopen.
    elf::image img;
    img.fd = f.fd;
    img.file_size = size;
    img.machine = eh.e_machine;
    img.ph = std::move(ph);
    if (std::string why = elf::check_segments(img); !why.empty()) return why;
    elf::dynamic_info dyn;
    if (std::string why = elf::check_dynamic(img, dyn); !why.empty()) return why;
    if (std::string why = elf::check_relocations(img, dyn); !why.empty()) return why;
#endif
    return {};
}

} // namespace tessera::detail
