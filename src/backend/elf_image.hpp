// backend/elf_image.hpp — the deeper checks of a 64-bit ELF shared library
// behind check_elf_file (elf_check.hpp): the structures the dynamic loader
// reads, and the addresses it writes to and calls, while it maps, relocates
// and initialises the library. Internal.
//
// Every check reads the file with plain reads (pread) and works on the
// virtual addresses of the library's PT_LOAD segments, the way the loader
// sees them once mapped. Messages are one phrase without the path,
// starting "corrupt shared library: ".
#pragma once

#include <elf.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::detail::elf {

// One PT_LOAD segment: virtual addresses [vaddr, vaddr + memsz), of which
// [vaddr, vaddr + filesz) hold the file's bytes [offset, offset + filesz).
struct load_segment {
    size_t index = 0; // in the program header table
    uint64_t vaddr = 0, memsz = 0, offset = 0, filesz = 0;
    uint32_t flags = 0; // PF_R | PF_W | PF_X
};

// A 64-bit shared library file whose ELF header and program header table
// have been read (and whose segments' file images lie inside the file).
struct image {
    int fd = -1;
    uint64_t file_size = 0;
    uint16_t machine = 0; // e_machine
    std::vector<Elf64_Phdr> ph;
    std::vector<load_segment> loads; // PT_LOAD entries in table order (check_segments)

    // The PT_LOAD segment whose file-backed addresses [vaddr, vaddr +
    // filesz) hold all of [addr, addr + len), or null (len 0: addr itself).
    const load_segment * file_backed(uint64_t addr, uint64_t len) const;
    // The PT_LOAD segment whose memory [vaddr, vaddr + memsz) holds all of
    // [addr, addr + len), or null.
    const load_segment * mapped(uint64_t addr, uint64_t len) const;
    // Reads `len` bytes at address `addr` (file_backed must hold them);
    // false when they are not file-backed or the read fails.
    bool read(uint64_t addr, void * dst, uint64_t len) const;
    // Reads `count` elements of type T at `addr`; false as for read, or
    // when count * sizeof(T) cannot be in the file at all.
    template <class T>
    bool read_array(uint64_t addr, uint64_t count, std::vector<T> & out) const {
        if (count > file_size / sizeof(T)) return false;
        out.resize(size_t(count));
        return read(addr, out.data(), count * sizeof(T));
    }
};

// What check_dynamic learned from the dynamic section, for check_relocations.
struct dynamic_info {
    std::map<int64_t, uint64_t> tags; // d_tag -> d_un of its last entry (the loader keeps the last)
    uint64_t n_symbols = 0;           // entries in DT_SYMTAB the hash table(s) cover (a lower bound)
    std::vector<Elf64_Sym> symbols;   // the entries read and checked so far (at least n_symbols)
    uint64_t strsz = 0;               // DT_STRSZ
    uint64_t top_version = 1;         // the highest version index DT_VERDEF / DT_VERNEED define
    bool text_relocations = false;    // DT_TEXTREL or DF_TEXTREL: relocations may write to any segment

    bool has(int64_t tag) const { return tags.count(tag) != 0; }
    uint64_t get(int64_t tag) const {
        auto it = tags.find(tag);
        return it == tags.end() ? 0 : it->second;
    }
};

// "[0x1000, 0x2000)"
std::string hex_range(uint64_t begin, uint64_t len);
// "corrupt shared library: <what>: addresses [a, b) are not within the
// file-backed bytes of any PT_LOAD segment".
std::string not_in_file(const std::string & what, uint64_t addr, uint64_t len);
// Reads up to `n` bytes at file offset `off` into `dst` (pread, retried on
// EINTR); returns how many were read before the end of the file or an
// error (elf_check.cpp).
size_t read_at(int fd, uint64_t off, void * dst, size_t n);
// The name of a segment type, e.g. "PT_LOAD" (elf_check.cpp).
std::string segment_name(uint32_t type);
// "segment <i> (<segment_name(type)>)", how messages name program header i.
std::string segment_label(size_t i, uint32_t type);

// The PT_LOAD segments (file size within memory size, sorted by address
// and not overlapping, address congruent to file offset modulo the page
// size, p_align a power of two) and the other segments the loader reads
// from the mapped image (PT_DYNAMIC, PT_NOTE, PT_GNU_PROPERTY, PT_TLS,
// PT_GNU_EH_FRAME, PT_PHDR; PT_GNU_RELRO, which it write-protects):
// each inside one PT_LOAD's file bytes (PT_GNU_RELRO: its memory). Fills
// img.loads. Returns "" or why not.
std::string check_segments(image & img);

// The dynamic section (ended by DT_NULL inside the file bytes), the
// address entries the loader dereferences (DT_STRTAB, DT_SYMTAB, DT_HASH,
// DT_GNU_HASH, DT_VERSYM, DT_VERNEED, DT_VERDEF), the entry sizes and
// pairings whose absence or wrong value makes ld.so fail an assertion or
// read through null, the string offsets (DT_NEEDED, DT_SONAME, DT_RPATH,
// DT_RUNPATH, symbol and version names), the hash tables' chains and the
// version records' chains. Fills `out`. Returns "" or why not.
std::string check_dynamic(const image & img, dynamic_info & out);

// Reads and checks (name inside the string table, version index defined)
// the symbols up to index `count` - 1 into d.symbols: relocations may
// refer to symbols the hash tables do not cover (undefined ones, which
// the GNU hash table leaves out). Returns "" or why not, naming `user`.
std::string extend_symbols(const image & img, dynamic_info & d, uint64_t count, const std::string & user);

// The relocation tables (DT_RELA, DT_JMPREL, DT_RELR): inside the file,
// every entry's type one this machine's loader applies, its symbol inside
// the symbol table and named, its target inside a writable PT_LOAD (any
// PT_LOAD with text relocations); DT_RELACOUNT's leading entries of type
// RELATIVE; IRELATIVE resolvers, IFUNC symbols, DT_INIT, DT_FINI and every
// DT_INIT_ARRAY / DT_FINI_ARRAY entry (its value after the relocations
// that target it) inside an executable PT_LOAD. Only x86-64 and AArch64
// relocations are checked; on other machines only the tables' extents.
std::string check_relocations(const image & img, dynamic_info & dyn);

} // namespace tessera::detail::elf
