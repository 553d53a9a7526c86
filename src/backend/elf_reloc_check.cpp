// backend/elf_reloc_check.cpp — the relocations and the initialisation and
// termination functions of a 64-bit shared library, checked before dlopen
// applies and calls them (check_relocations, elf_image.hpp).
//
// Sources: System V gABI, "Relocation" and "Dynamic Section" (DT_RELA,
// DT_RELASZ, DT_RELAENT, DT_JMPREL, DT_PLTREL, DT_PLTRELSZ, DT_INIT,
// DT_FINI, DT_INIT_ARRAY, DT_FINI_ARRAY and their sizes, DT_TEXTREL);
// the x86-64 psABI ("Relocation Types") and the ARM ELF for the Arm 64-bit
// Architecture ("Dynamic relocations") for the types a dynamic loader
// applies and how wide each is; the generic-ABI RELR proposal for DT_RELR
// (an even word is an address to relocate, an odd word a bitmap of the 63
// words after the last address). DT_RELACOUNT is the GNU extension giving
// the number of leading R_*_RELATIVE entries, which glibc applies without
// looking at their type beyond an assertion.
#include <fmt/core.h>

#include "backend/elf_image.hpp"

namespace tessera::detail::elf {

namespace {

// How the loader treats one relocation type of a machine.
struct reloc_kind {
    const char * name = nullptr; // null: not applied by the loader
    unsigned width = 8;          // bytes written at r_offset
    bool relative = false;       // base + addend
    bool irelative = false;      // calls the resolver at base + addend
    bool plt = false;            // may appear in DT_JMPREL
    bool copy = false;           // a copy relocation (executables only)
    bool symbol_value = false;   // symbol's address + addend
};

reloc_kind kind_of(uint16_t machine, uint32_t type) {
    if (machine == EM_X86_64) {
        switch (type) {
        case R_X86_64_NONE: return {"R_X86_64_NONE", 0};
        case R_X86_64_64: return {"R_X86_64_64", 8, false, false, false, false, true};
        case R_X86_64_PC32: return {"R_X86_64_PC32", 4};
        case R_X86_64_32: return {"R_X86_64_32", 4};
        case R_X86_64_COPY: return {"R_X86_64_COPY", 8, false, false, false, true};
        case R_X86_64_GLOB_DAT: return {"R_X86_64_GLOB_DAT", 8, false, false, false, false, true};
        case R_X86_64_JUMP_SLOT: return {"R_X86_64_JUMP_SLOT", 8, false, false, true, false, true};
        case R_X86_64_RELATIVE: return {"R_X86_64_RELATIVE", 8, true};
        case R_X86_64_DTPMOD64: return {"R_X86_64_DTPMOD64"};
        case R_X86_64_DTPOFF64: return {"R_X86_64_DTPOFF64"};
        case R_X86_64_TPOFF64: return {"R_X86_64_TPOFF64"};
        case R_X86_64_SIZE32: return {"R_X86_64_SIZE32", 4};
        case R_X86_64_SIZE64: return {"R_X86_64_SIZE64"};
        case R_X86_64_TLSDESC: return {"R_X86_64_TLSDESC", 16, false, false, true};
        case R_X86_64_IRELATIVE: return {"R_X86_64_IRELATIVE", 8, false, true, true};
        default: return {nullptr};
        }
    }
    if (machine == EM_AARCH64) {
        switch (type) {
        case R_AARCH64_NONE: return {"R_AARCH64_NONE", 0};
        case R_AARCH64_ABS64: return {"R_AARCH64_ABS64", 8, false, false, false, false, true};
        case R_AARCH64_COPY: return {"R_AARCH64_COPY", 8, false, false, false, true};
        case R_AARCH64_GLOB_DAT: return {"R_AARCH64_GLOB_DAT", 8, false, false, false, false, true};
        case R_AARCH64_JUMP_SLOT: return {"R_AARCH64_JUMP_SLOT", 8, false, false, true, false, true};
        case R_AARCH64_RELATIVE: return {"R_AARCH64_RELATIVE", 8, true};
        case R_AARCH64_TLS_DTPMOD: return {"R_AARCH64_TLS_DTPMOD"};
        case R_AARCH64_TLS_DTPREL: return {"R_AARCH64_TLS_DTPREL"};
        case R_AARCH64_TLS_TPREL: return {"R_AARCH64_TLS_TPREL"};
        case R_AARCH64_TLSDESC: return {"R_AARCH64_TLSDESC", 16, false, false, true};
        case R_AARCH64_IRELATIVE: return {"R_AARCH64_IRELATIVE", 8, false, true, true};
        default: return {nullptr};
        }
    }
    return {nullptr};
}

std::string machine_label(uint16_t m) { return m == EM_X86_64 ? "x86-64" : "AArch64"; }

// Whether the loader may call `addr`: inside the file-backed bytes of an
// executable PT_LOAD segment.
bool is_code(const image & img, uint64_t addr) {
    const load_segment * s = img.file_backed(addr, 1);
    return s != nullptr && (s->flags & PF_X) != 0;
}

// Whether a relocation may write [addr, addr + width).
bool is_writable(const image & img, const dynamic_info & d, uint64_t addr, unsigned width) {
    const load_segment * s = img.mapped(addr, width);
    return s != nullptr && ((s->flags & PF_W) != 0 || d.text_relocations);
}

// A function pointer slot of DT_INIT_ARRAY / DT_FINI_ARRAY and what the
// relocations leave in it.
struct slot {
    const char * array;
    uint64_t index;
    uint64_t file_value;  // the bytes in the file
    enum { absolute, relative, unknown } state = absolute;
    uint64_t value = 0;   // with state relative: the address in the library
};

// Checks one RELA table; records what it leaves in `slots`.
std::string check_rela(const image & img, dynamic_info & d, const char * table, uint64_t addr, uint64_t size,
                       uint64_t relative_count, std::map<uint64_t, slot> & slots) {
    std::vector<Elf64_Rela> rela;
    if (!img.read_array(addr, size / sizeof(Elf64_Rela), rela)) {
        return not_in_file(fmt::format("the {} relocation table ({:#x} bytes)", table, size), addr, size);
    }
    const bool jmprel = std::string_view(table) == "DT_JMPREL";
    for (size_t k = 0; k < rela.size(); ++k) {
        const Elf64_Rela & r = rela[k];
        const uint32_t type = uint32_t(ELF64_R_TYPE(r.r_info));
        const uint64_t sym = ELF64_R_SYM(r.r_info);
        const reloc_kind kind = kind_of(img.machine, type);
        const uint64_t at = addr + k * sizeof(Elf64_Rela);
        const std::string head = fmt::format("corrupt shared library: relocation {} of {} (at {:#x})", k, table, at);
        if (kind.name == nullptr) {
            return fmt::format("{} has type {}, which the dynamic loader does not apply on {}", head, type,
                               machine_label(img.machine));
        }
        const std::string typed =
            fmt::format("corrupt shared library: relocation {} of {} (at {:#x}, type {})", k, table, at, kind.name);
        if (k < relative_count && !kind.relative) {
            return fmt::format("{} has type {}, but DT_RELACOUNT says the first {} are relative relocations", head,
                               kind.name, relative_count);
        }
        if (jmprel && !kind.plt) {
            return fmt::format("{} has type {}, which is not a PLT relocation", head, kind.name);
        }
        if (kind.copy) {
            return fmt::format("{} is a copy relocation, which only an executable may have", typed);
        }
        if (kind.width == 0) continue; // R_*_NONE: nothing is written
        if (sym >= d.symbols.size()) {
            std::string e = extend_symbols(img, d, sym + 1, fmt::format("relocation {} of {}", k, table));
            if (!e.empty()) return e;
        }
        const Elf64_Sym & s = d.symbols[size_t(sym)];
        if (sym != 0 && s.st_name == 0 && ELF64_ST_TYPE(s.st_info) != STT_SECTION) {
            return fmt::format("{} refers to symbol {}, which has no name", typed, sym);
        }
        if (!is_writable(img, d, r.r_offset, kind.width)) {
            return fmt::format("{} writes {} bytes at {}, outside every writable PT_LOAD segment", typed, kind.width,
                               hex_range(r.r_offset, kind.width));
        }
        if (kind.irelative && !is_code(img, uint64_t(r.r_addend))) {
            return fmt::format("{} would call its resolver at {:#x}, outside the code of every executable PT_LOAD "
                               "segment",
                               typed, uint64_t(r.r_addend));
        }
        auto it = slots.find(r.r_offset);
        if (it == slots.end()) continue;
        slot & sl = it->second;
        if (kind.relative) {
            sl.state = slot::relative;
            sl.value = uint64_t(r.r_addend);
        } else if (kind.symbol_value && s.st_shndx != SHN_UNDEF && s.st_shndx != SHN_ABS &&
                   ELF64_ST_TYPE(s.st_info) != STT_GNU_IFUNC) {
            sl.state = slot::relative;
            sl.value = s.st_value + uint64_t(r.r_addend);
        } else if (kind.symbol_value && s.st_shndx == SHN_ABS) {
            sl.state = slot::absolute;
            sl.file_value = s.st_value + uint64_t(r.r_addend);
        } else {
            sl.state = slot::unknown; // another library's symbol, or a resolver's result
        }
    }
    return {};
}

// Checks the RELR table (every word it relocates inside a writable segment).
std::string check_relr(const image & img, const dynamic_info & d, uint64_t addr, uint64_t size,
                       std::map<uint64_t, slot> & slots) {
    std::vector<uint64_t> words;
    if (!img.read_array(addr, size / 8, words)) {
        return not_in_file(fmt::format("the DT_RELR relocation table ({:#x} bytes)", size), addr, size);
    }
    uint64_t where = 0;
    bool have_address = false;
    auto apply = [&](size_t k, uint64_t at) -> std::string {
        if (!is_writable(img, d, at, 8)) {
            return fmt::format("corrupt shared library: DT_RELR word {} relocates 8 bytes at {}, outside every "
                               "writable PT_LOAD segment",
                               k, hex_range(at, 8));
        }
        if (auto it = slots.find(at); it != slots.end()) {
            it->second.state = slot::relative;
            it->second.value = it->second.file_value;
        }
        return {};
    };
    for (size_t k = 0; k < words.size(); ++k) {
        const uint64_t w = words[k];
        if ((w & 1) == 0) {
            if (std::string e = apply(k, w); !e.empty()) return e;
            where = w + 8;
            have_address = true;
            continue;
        }
        if (!have_address) {
            return fmt::format("corrupt shared library: DT_RELR word {} is a bitmap with no address before it", k);
        }
        uint64_t bits = w >> 1;
        for (uint64_t i = 0; bits != 0; ++i, bits >>= 1) {
            if (bits & 1) {
                if (std::string e = apply(k, where + i * 8); !e.empty()) return e;
            }
        }
        where += 63 * 8;
    }
    return {};
}

// Reads the function pointer array `tag` (size entry `size_tag`) into `slots`.
std::string read_array_slots(const image & img, const dynamic_info & d, int64_t tag, int64_t size_tag,
                             const char * name, std::map<uint64_t, slot> & slots) {
    if (!d.has(tag)) return {};
    if (!d.has(size_tag)) {
        return fmt::format("corrupt shared library: {} has no size entry ({}SZ)", name, name);
    }
    const uint64_t addr = d.get(tag), size = d.get(size_tag);
    if (size % 8 != 0) {
        return fmt::format("corrupt shared library: {}SZ is {}, not a multiple of 8 bytes", name, size);
    }
    std::vector<uint64_t> v;
    if (!img.read_array(addr, size / 8, v)) {
        return not_in_file(fmt::format("{} ({} bytes)", name, size), addr, size);
    }
    for (uint64_t i = 0; i < v.size(); ++i) slots[addr + i * 8] = slot{name, i, v[size_t(i)]};
    return {};
}

} // namespace

std::string check_relocations(const image & img, dynamic_info & d) {
    const bool known_machine = img.machine == EM_X86_64 || img.machine == EM_AARCH64;

    // Pairs and entry sizes glibc's loader assumes (it asserts DT_RELAENT
    // and DT_RELRENT, and reads the size entries without checking them).
    if (d.has(DT_RELA)) {
        if (!d.has(DT_RELASZ)) return "corrupt shared library: DT_RELA has no size entry (DT_RELASZ)";
        if (d.get(DT_RELAENT) != sizeof(Elf64_Rela)) {
            return fmt::format("corrupt shared library: DT_RELAENT is {} (RELA entries of this ELF class are {} "
                               "bytes)",
                               d.has(DT_RELAENT) ? fmt::format("{}", d.get(DT_RELAENT)) : "missing",
                               sizeof(Elf64_Rela));
        }
        if (d.get(DT_RELASZ) % sizeof(Elf64_Rela) != 0) {
            return fmt::format("corrupt shared library: DT_RELASZ is {}, not a multiple of {} bytes",
                               d.get(DT_RELASZ), sizeof(Elf64_Rela));
        }
    }
    if (d.has(DT_JMPREL)) {
        if (!d.has(DT_PLTRELSZ)) return "corrupt shared library: DT_JMPREL has no size entry (DT_PLTRELSZ)";
        if (d.get(DT_PLTRELSZ) % sizeof(Elf64_Rela) != 0) {
            return fmt::format("corrupt shared library: DT_PLTRELSZ is {}, not a multiple of {} bytes",
                               d.get(DT_PLTRELSZ), sizeof(Elf64_Rela));
        }
    }
    if (known_machine && (d.has(DT_JMPREL) || d.has(DT_PLTREL)) && d.get(DT_PLTREL) != DT_RELA) {
        return fmt::format("corrupt shared library: DT_PLTREL is {} (this machine's PLT relocations are DT_RELA, "
                           "{})",
                           d.has(DT_PLTREL) ? fmt::format("{}", d.get(DT_PLTREL)) : "missing", int(DT_RELA));
    }
    if (d.has(DT_RELR)) {
        if (!d.has(DT_RELRSZ)) return "corrupt shared library: DT_RELR has no size entry (DT_RELRSZ)";
        if (d.get(DT_RELRENT) != 8) {
            return fmt::format("corrupt shared library: DT_RELRENT is {} (RELR entries of this ELF class are 8 "
                               "bytes)",
                               d.has(DT_RELRENT) ? fmt::format("{}", d.get(DT_RELRENT)) : "missing");
        }
        if (d.get(DT_RELRSZ) % 8 != 0) {
            return fmt::format("corrupt shared library: DT_RELRSZ is {}, not a multiple of 8 bytes", d.get(DT_RELRSZ));
        }
    }

    // The function pointer arrays, as the file holds them.
    std::map<uint64_t, slot> slots;
    if (std::string e = read_array_slots(img, d, DT_INIT_ARRAY, DT_INIT_ARRAYSZ, "DT_INIT_ARRAY", slots); !e.empty()) {
        return e;
    }
    if (std::string e = read_array_slots(img, d, DT_FINI_ARRAY, DT_FINI_ARRAYSZ, "DT_FINI_ARRAY", slots); !e.empty()) {
        return e;
    }
    if (!known_machine) {
        for (auto [tag, size_tag, name] : {std::tuple{DT_RELA, DT_RELASZ, "DT_RELA"},
                                           std::tuple{DT_JMPREL, DT_PLTRELSZ, "DT_JMPREL"},
                                           std::tuple{DT_RELR, DT_RELRSZ, "DT_RELR"}}) {
            if (d.has(tag) && img.file_backed(d.get(tag), d.get(size_tag)) == nullptr) {
                return not_in_file(fmt::format("the {} relocation table", name), d.get(tag), d.get(size_tag));
            }
        }
        return {};
    }

    // In the order glibc applies them: RELR, then RELA, then the PLT's.
    if (d.has(DT_RELR)) {
        if (std::string e = check_relr(img, d, d.get(DT_RELR), d.get(DT_RELRSZ), slots); !e.empty()) return e;
    }
    if (d.has(DT_RELA)) {
        std::string e = check_rela(img, d, "DT_RELA", d.get(DT_RELA), d.get(DT_RELASZ), d.get(DT_RELACOUNT), slots);
        if (!e.empty()) return e;
    }
    if (d.has(DT_JMPREL)) {
        std::string e = check_rela(img, d, "DT_JMPREL", d.get(DT_JMPREL), d.get(DT_PLTRELSZ), 0, slots);
        if (!e.empty()) return e;
    }

    // What the loader calls: IFUNC resolvers of symbols defined here,
    // DT_INIT, DT_FINI, and every array entry as relocated.
    for (size_t i = 0; i < d.symbols.size(); ++i) {
        const Elf64_Sym & s = d.symbols[i];
        if (ELF64_ST_TYPE(s.st_info) == STT_GNU_IFUNC && s.st_shndx != SHN_UNDEF && s.st_shndx != SHN_ABS &&
            !is_code(img, s.st_value)) {
            return fmt::format("corrupt shared library: symbol {} is an indirect function whose resolver at {:#x} is "
                               "outside the code of every executable PT_LOAD segment",
                               i, s.st_value);
        }
    }
    for (auto [tag, name] : {std::pair{DT_INIT, "DT_INIT"}, std::pair{DT_FINI, "DT_FINI"}}) {
        if (d.has(tag) && !is_code(img, d.get(tag))) {
            return fmt::format("corrupt shared library: {} ({:#x}) is outside the code of every executable PT_LOAD "
                               "segment",
                               name, d.get(tag));
        }
    }
    for (const auto & [at, sl] : slots) {
        if (sl.state == slot::absolute) {
            return fmt::format("corrupt shared library: {} entry {} (at {:#x}) is not relocated, so the loader "
                               "would call the absolute address {:#x}",
                               sl.array, sl.index, at, sl.file_value);
        }
        if (sl.state == slot::relative && !is_code(img, sl.value)) {
            return fmt::format("corrupt shared library: {} entry {} (at {:#x}) would call {:#x}, outside the code "
                               "of every executable PT_LOAD segment",
                               sl.array, sl.index, at, sl.value);
        }
    }
    return {};
}

} // namespace tessera::detail::elf
