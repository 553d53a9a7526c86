// backend/elf_image.cpp — reading a shared library by virtual address, and
// the checks of its segments (elf_image.hpp).
//
// The rules are those of the System V gABI, chapter "Program Loading and
// Dynamic Linking" ("Program Header": PT_LOAD entries "appear in ascending
// order, sorted on the p_vaddr member", "p_filesz may not be larger than
// p_memsz", p_vaddr congruent to p_offset modulo the page size, p_align 0, 1
// or a power of two), and of what glibc's loader does with the GNU segment
// types (PT_GNU_RELRO made read-only after relocation; PT_GNU_PROPERTY and
// PT_TLS read from the mapped image; PT_PHDR taken as where the mapped
// program headers are).
#include "backend/elf_image.hpp"

#include <unistd.h>

#include <cerrno>

#include <fmt/core.h>

namespace tessera::detail::elf {

namespace {

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Whether [a, a + alen) lies inside [b, b + blen) (no overflow).
bool within(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
    return a >= b && a - b <= blen && alen <= blen - (a - b);
}

} // namespace

std::string hex_range(uint64_t begin, uint64_t len) {
    if (len > UINT64_MAX - begin) return fmt::format("[{:#x}, {:#x} + {:#x})", begin, begin, len);
    return fmt::format("[{:#x}, {:#x})", begin, begin + len);
}

std::string segment_label(size_t i, uint32_t type) { return fmt::format("segment {} ({})", i, segment_name(type)); }

std::string not_in_file(const std::string & what, uint64_t addr, uint64_t len) {
    return fmt::format("corrupt shared library: {}: addresses {} are not within the file-backed bytes of any "
                       "PT_LOAD segment",
                       what, hex_range(addr, len));
}

const load_segment * image::file_backed(uint64_t addr, uint64_t len) const {
    for (const load_segment & s : loads) {
        if (within(addr, len, s.vaddr, s.filesz) && (len > 0 || addr < s.vaddr + s.filesz)) return &s;
    }
    return nullptr;
}

const load_segment * image::mapped(uint64_t addr, uint64_t len) const {
    for (const load_segment & s : loads) {
        if (within(addr, len, s.vaddr, s.memsz) && (len > 0 || addr < s.vaddr + s.memsz)) return &s;
    }
    return nullptr;
}

bool image::read(uint64_t addr, void * dst, uint64_t len) const {
    if (len == 0) return true;
    const load_segment * s = file_backed(addr, len);
    if (s == nullptr) return false;
    return read_at(fd, s->offset + (addr - s->vaddr), dst, size_t(len)) == len;
}

std::string check_segments(image & img) {
    const long page = ::sysconf(_SC_PAGESIZE);
    const uint64_t page_size = page > 0 ? uint64_t(page) : 4096;
    img.loads.clear();
    for (size_t i = 0; i < img.ph.size(); ++i) {
        const Elf64_Phdr & p = img.ph[i];
        if (p.p_type != PT_LOAD) continue;
        const std::string what = segment_label(i, p.p_type);
        if (p.p_filesz > p.p_memsz) {
            return fmt::format("corrupt shared library: {} has a file size ({:#x} bytes) larger than its "
                               "memory size ({:#x} bytes)",
                               what, p.p_filesz, p.p_memsz);
        }
        if (p.p_memsz > UINT64_MAX - p.p_vaddr) {
            return fmt::format("corrupt shared library: {} at address {:#x} with {:#x} bytes ends past the end "
                               "of the address space",
                               what, p.p_vaddr, p.p_memsz);
        }
        if (p.p_align > 1 && !power_of_two(p.p_align)) {
            return fmt::format("corrupt shared library: {} has alignment {:#x}, not a power of two", what,
                               p.p_align);
        }
        if ((p.p_vaddr - p.p_offset) % page_size != 0) {
            return fmt::format("corrupt shared library: {} has address {:#x} and file offset {:#x}, which "
                               "differ by no multiple of the page size ({:#x})",
                               what, p.p_vaddr, p.p_offset, page_size);
        }
        if (p.p_memsz == 0) continue; // maps nothing
        if (!img.loads.empty()) {
            const load_segment & prev = img.loads.back();
            if (p.p_vaddr < prev.vaddr + prev.memsz) {
                return fmt::format("corrupt shared library: {} at addresses {} does not follow {} at {} (PT_LOAD "
                                   "segments must be in ascending address order and must not overlap)",
                                   what, hex_range(p.p_vaddr, p.p_memsz), segment_label(prev.index, PT_LOAD),
                                   hex_range(prev.vaddr, prev.memsz));
            }
        }
        img.loads.push_back({i, p.p_vaddr, p.p_memsz, p.p_offset, p.p_filesz, p.p_flags});
    }
    if (img.loads.empty()) return "corrupt shared library: no PT_LOAD segment (nothing the loader could map)";

    bool have_dynamic = false;
    for (size_t i = 0; i < img.ph.size(); ++i) {
        const Elf64_Phdr & p = img.ph[i];
        uint64_t len = p.p_filesz; // the bytes the loader reads from the mapped image
        bool file = true;
        switch (p.p_type) {
        case PT_DYNAMIC:
            if (p.p_filesz < sizeof(Elf64_Dyn)) {
                return fmt::format("corrupt shared library: {} holds {} bytes, not even one entry",
                                   segment_label(i, p.p_type), p.p_filesz);
            }
            have_dynamic = true;
            break;
        case PT_TLS:
            if (p.p_filesz > p.p_memsz) {
                return fmt::format("corrupt shared library: {} has a file size ({:#x} bytes) larger than its "
                                   "memory size ({:#x} bytes)",
                                   segment_label(i, p.p_type), p.p_filesz, p.p_memsz);
            }
            if (p.p_align > 1 && !power_of_two(p.p_align)) {
                return fmt::format("corrupt shared library: {} has alignment {:#x}, not a power of two",
                                   segment_label(i, p.p_type), p.p_align);
            }
            break;
        case PT_NOTE:
#ifdef PT_GNU_PROPERTY
        case PT_GNU_PROPERTY:
#endif
        case PT_GNU_EH_FRAME:
        case PT_PHDR: break;
        case PT_GNU_RELRO:
            len = p.p_memsz; // made read-only in memory, whatever backs it
            file = false;
            break;
        default: continue; // not read by the loader
        }
        if (len == 0) continue;
        bool inside;
        if (file) {
            inside = img.file_backed(p.p_vaddr, len) != nullptr;
        } else {
            // glibc protects whole pages [round down(start), round down(end)),
            // and lld rounds PT_GNU_RELRO's end up to the page past the
            // segment's memory: it must start inside a PT_LOAD's memory and
            // end within the pages mapped for it.
            const load_segment * s = img.mapped(p.p_vaddr, 0);
            const uint64_t end = s ? s->vaddr + s->memsz : 0;
            const uint64_t rounded = end + (page_size - end % page_size) % page_size;
            inside = s != nullptr && rounded >= end && len <= rounded - p.p_vaddr;
        }
        if (!inside) {
            return fmt::format("corrupt shared library: {} at addresses {} is not inside the {} of any PT_LOAD "
                               "segment",
                               segment_label(i, p.p_type), hex_range(p.p_vaddr, len),
                               file ? "file-backed bytes" : "memory");
        }
    }
    if (!have_dynamic) return "corrupt shared library: no PT_DYNAMIC segment (no dynamic section)";
    return {};
}

} // namespace tessera::detail::elf
