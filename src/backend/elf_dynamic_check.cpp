// backend/elf_dynamic_check.cpp — the dynamic section of a 64-bit shared
// library and the tables it points at, checked before dlopen follows them
// (check_dynamic, elf_image.hpp).
//
// Layouts: System V gABI, "Dynamic Section", "String Table", "Symbol Table"
// and "Hash Table"; the GNU hash table (DT_GNU_HASH: nbuckets, symoffset,
// bloom_size, bloom_shift, bloom words, buckets, chain values whose low bit
// ends a chain) and the symbol version tables (DT_VERSYM, DT_VERNEED,
// DT_VERDEF) as the Linux Standard Base Core specification, "Symbol
// Versioning", describes them. Structures and constants from <elf.h>.
#include <algorithm>

#include <fmt/core.h>

#include "backend/elf_image.hpp"

namespace tessera::detail::elf {

namespace {

std::string tag_name(int64_t tag) {
    switch (tag) {
    case DT_NEEDED: return "DT_NEEDED";
    case DT_STRTAB: return "DT_STRTAB";
    case DT_SYMTAB: return "DT_SYMTAB";
    case DT_HASH: return "DT_HASH";
    case DT_GNU_HASH: return "DT_GNU_HASH";
    case DT_SONAME: return "DT_SONAME";
    case DT_RPATH: return "DT_RPATH";
    case DT_RUNPATH: return "DT_RUNPATH";
    case DT_AUXILIARY: return "DT_AUXILIARY";
    case DT_FILTER: return "DT_FILTER";
    case DT_VERSYM: return "DT_VERSYM";
    case DT_VERNEED: return "DT_VERNEED";
    case DT_VERDEF: return "DT_VERDEF";
    default: return fmt::format("dynamic tag {:#x}", tag);
    }
}

// Most records a version chain may have (real libraries have tens).
constexpr uint64_t max_version_records = 1u << 16;

// Symbol count from the GNU hash table at `addr`; "" or why not.
std::string gnu_hash_symbols(const image & img, uint64_t addr, uint64_t & n_symbols) {
    uint32_t h[4]; // nbuckets, symoffset, bloom_size (64-bit words), bloom_shift
    if (!img.read(addr, h, sizeof h)) return not_in_file("the DT_GNU_HASH header", addr, sizeof h);
    const uint64_t nbuckets = h[0], symoffset = h[1], bloom_words = h[2];
    if (bloom_words == 0 || (bloom_words & (bloom_words - 1)) != 0) {
        return fmt::format("corrupt shared library: the DT_GNU_HASH table has {} Bloom filter words (a power of "
                           "two is required)",
                           bloom_words);
    }
    const uint64_t buckets_at = addr + 16 + bloom_words * 8;
    if (img.file_backed(addr, 16 + bloom_words * 8 + nbuckets * 4) == nullptr) {
        return not_in_file(fmt::format("the DT_GNU_HASH table ({} Bloom words, {} buckets)", bloom_words, nbuckets),
                           addr, 16 + bloom_words * 8 + nbuckets * 4);
    }
    std::vector<uint32_t> buckets;
    if (!img.read_array(buckets_at, nbuckets, buckets)) {
        return not_in_file("the DT_GNU_HASH buckets", buckets_at, nbuckets * 4);
    }
    uint64_t top = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
        if (buckets[b] != 0 && buckets[b] < symoffset) {
            return fmt::format("corrupt shared library: DT_GNU_HASH bucket {} starts at symbol {}, below the "
                               "table's first hashed symbol {}",
                               b, buckets[b], symoffset);
        }
        if (buckets[b] > top) top = buckets[b];
    }
    n_symbols = symoffset;
    if (top == 0) return {};
    // Every chain runs forward to a value with the low bit set; the one
    // from the highest bucket ends at the last hashed symbol, and no other
    // chain can run past it.
    const uint64_t chain_at = buckets_at + nbuckets * 4;
    uint64_t i = top;
    constexpr uint64_t block = 1024;
    for (;;) {
        const uint64_t at = chain_at + (i - symoffset) * 4;
        const load_segment * s = img.file_backed(at, 4);
        if (s == nullptr) {
            return fmt::format("corrupt shared library: the DT_GNU_HASH chain from bucket symbol {} runs past the "
                               "file-backed bytes of its segment (no chain end found)",
                               top);
        }
        const uint64_t n = std::min<uint64_t>(block, (s->vaddr + s->filesz - at) / 4);
        std::vector<uint32_t> chain;
        if (!img.read_array(at, n, chain)) return not_in_file("the DT_GNU_HASH chains", at, n * 4);
        for (uint64_t k = 0; k < n; ++k) {
            if (chain[size_t(k)] & 1) {
                n_symbols = i + k + 1;
                return {};
            }
        }
        i += n;
    }
}

// Symbol count (nchain) from the System V hash table at `addr`, whose
// chains must end (a cycle hangs every lookup); "" or why not.
std::string sysv_hash_symbols(const image & img, uint64_t addr, uint64_t & n_symbols) {
    uint32_t h[2]; // nbucket, nchain
    if (!img.read(addr, h, sizeof h)) return not_in_file("the DT_HASH header", addr, sizeof h);
    const uint64_t nbucket = h[0], nchain = h[1];
    std::vector<uint32_t> words;
    if (!img.read_array(addr + 8, nbucket + nchain, words)) {
        return not_in_file(fmt::format("the DT_HASH table ({} buckets, {} chain entries)", nbucket, nchain), addr,
                           8 + (nbucket + nchain) * 4);
    }
    std::vector<uint32_t> seen(size_t(nchain), 0); // bucket + 1 of the walk that reached each symbol
    for (uint64_t b = 0; b < nbucket; ++b) {
        for (uint64_t s = words[size_t(b)]; s != STN_UNDEF;) {
            if (s >= nchain) {
                return fmt::format("corrupt shared library: DT_HASH bucket {} reaches symbol {}, past the table's "
                                   "{} symbols",
                                   b, s, nchain);
            }
            if (seen[size_t(s)] == b + 1) {
                return fmt::format("corrupt shared library: DT_HASH bucket {}'s chain loops back to symbol {}", b, s);
            }
            if (seen[size_t(s)] != 0) break; // joins a chain already walked to its end
            seen[size_t(s)] = uint32_t(b + 1);
            s = words[size_t(nbucket + s)];
        }
    }
    n_symbols = nchain;
    return {};
}

// The version chains: names inside the string table; the highest version
// index they define or need, in `top`. "" or why not.
std::string check_versions(const image & img, const dynamic_info & d, uint64_t strsz, uint64_t & top) {
    uint64_t records = 0;
    if (d.has(DT_VERNEED)) {
        for (uint64_t at = d.get(DT_VERNEED);;) {
            Elf64_Verneed vn;
            if (++records > max_version_records) return "corrupt shared library: the DT_VERNEED chain does not end";
            if (!img.read(at, &vn, sizeof vn)) return not_in_file("a DT_VERNEED record", at, sizeof vn);
            if (vn.vn_file >= strsz) {
                return fmt::format("corrupt shared library: the DT_VERNEED record at {:#x} names a file at string "
                                   "offset {:#x}, outside the string table (DT_STRSZ {:#x})",
                                   at, vn.vn_file, strsz);
            }
            for (uint64_t aux = at + vn.vn_aux;;) {
                Elf64_Vernaux a;
                if (++records > max_version_records) return "corrupt shared library: the DT_VERNEED chain does not end";
                if (!img.read(aux, &a, sizeof a)) return not_in_file("a DT_VERNEED auxiliary record", aux, sizeof a);
                if (a.vna_name >= strsz) {
                    return fmt::format("corrupt shared library: the DT_VERNEED auxiliary record at {:#x} names a "
                                       "version at string offset {:#x}, outside the string table (DT_STRSZ {:#x})",
                                       aux, a.vna_name, strsz);
                }
                top = std::max<uint64_t>(top, a.vna_other & 0x7fff);
                if (a.vna_next == 0) break;
                aux += a.vna_next;
            }
            if (vn.vn_next == 0) break;
            at += vn.vn_next;
        }
    }
    if (d.has(DT_VERDEF)) {
        for (uint64_t at = d.get(DT_VERDEF);;) {
            Elf64_Verdef vd;
            if (++records > max_version_records) return "corrupt shared library: the DT_VERDEF chain does not end";
            if (!img.read(at, &vd, sizeof vd)) return not_in_file("a DT_VERDEF record", at, sizeof vd);
            top = std::max<uint64_t>(top, vd.vd_ndx & 0x7fff);
            for (uint64_t aux = at + vd.vd_aux, k = 0; k < vd.vd_cnt; ++k) {
                Elf64_Verdaux a;
                if (++records > max_version_records) return "corrupt shared library: the DT_VERDEF chain does not end";
                if (!img.read(aux, &a, sizeof a)) return not_in_file("a DT_VERDEF auxiliary record", aux, sizeof a);
                if (a.vda_name >= strsz) {
                    return fmt::format("corrupt shared library: the DT_VERDEF auxiliary record at {:#x} names a "
                                       "version at string offset {:#x}, outside the string table (DT_STRSZ {:#x})",
                                       aux, a.vda_name, strsz);
                }
                if (a.vda_next == 0) break;
                aux += a.vda_next;
            }
            if (vd.vd_next == 0) break;
            at += vd.vd_next;
        }
    }
    return {};
}

} // namespace

std::string check_dynamic(const image & img, dynamic_info & out) {
    // The loader takes the last PT_DYNAMIC and reads entries up to DT_NULL.
    const Elf64_Phdr * dyn_ph = nullptr;
    for (const Elf64_Phdr & p : img.ph) {
        if (p.p_type == PT_DYNAMIC) dyn_ph = &p;
    }
    std::vector<Elf64_Dyn> dyn;
    const uint64_t n = dyn_ph->p_filesz / sizeof(Elf64_Dyn);
    if (!img.read_array(dyn_ph->p_vaddr, n, dyn)) {
        return not_in_file("the dynamic section", dyn_ph->p_vaddr, dyn_ph->p_filesz);
    }
    size_t end = 0;
    while (end < dyn.size() && dyn[end].d_tag != DT_NULL) ++end;
    if (end == dyn.size()) {
        return fmt::format("corrupt shared library: the dynamic section at {:#x} has no DT_NULL entry in its {} "
                           "entries",
                           dyn_ph->p_vaddr, dyn.size());
    }
    out.tags.clear();
    std::vector<std::pair<int64_t, uint64_t>> strings; // tag, string offset
    for (size_t i = 0; i < end; ++i) {
        const int64_t tag = dyn[i].d_tag;
        const uint64_t v = dyn[i].d_un.d_val;
        out.tags[tag] = v;
        if (tag == DT_NEEDED || tag == DT_SONAME || tag == DT_RPATH || tag == DT_RUNPATH || tag == DT_AUXILIARY ||
            tag == DT_FILTER) {
            strings.emplace_back(tag, v);
        }
    }
    out.text_relocations = out.has(DT_TEXTREL) || (out.get(DT_FLAGS) & DF_TEXTREL) != 0;

    // The string table: the loader reads DT_NEEDED and the other names there.
    for (int64_t tag : {int64_t(DT_STRTAB), int64_t(DT_STRSZ), int64_t(DT_SYMTAB)}) {
        if (!out.has(tag)) {
            return fmt::format("corrupt shared library: the dynamic section has no {} entry",
                               tag == DT_STRSZ ? "DT_STRSZ" : tag_name(tag));
        }
    }
    if (!out.has(DT_GNU_HASH) && !out.has(DT_HASH)) {
        return "corrupt shared library: the dynamic section has no symbol hash table (DT_GNU_HASH or DT_HASH)";
    }
    const uint64_t strtab = out.get(DT_STRTAB), strsz = out.get(DT_STRSZ);
    if (strsz == 0) return "corrupt shared library: DT_STRSZ is 0 (an empty string table)";
    if (img.file_backed(strtab, strsz) == nullptr) {
        return not_in_file(fmt::format("the string table (DT_STRTAB, DT_STRSZ {:#x})", strsz), strtab, strsz);
    }
    char last = 1;
    if (!img.read(strtab + strsz - 1, &last, 1) || last != '\0') {
        return fmt::format("corrupt shared library: the string table at {:#x} does not end with a NUL byte at "
                           "DT_STRSZ {:#x}",
                           strtab, strsz);
    }
    for (const auto & [tag, off] : strings) {
        if (off >= strsz) {
            return fmt::format("corrupt shared library: {} names a string at offset {:#x}, outside the string "
                               "table (DT_STRSZ {:#x})",
                               tag_name(tag), off, strsz);
        }
    }

    // Sizes of entries the loader assumes (glibc asserts some of them).
    if (out.has(DT_SYMENT) && out.get(DT_SYMENT) != sizeof(Elf64_Sym)) {
        return fmt::format("corrupt shared library: DT_SYMENT is {} (symbols of this ELF class are {} bytes)",
                           out.get(DT_SYMENT), sizeof(Elf64_Sym));
    }

    // Hash tables give the symbol count: both must be sound when present.
    uint64_t n_symbols = 0;
    if (out.has(DT_GNU_HASH)) {
        uint64_t n = 0;
        if (std::string e = gnu_hash_symbols(img, out.get(DT_GNU_HASH), n); !e.empty()) return e;
        n_symbols = n;
    }
    if (out.has(DT_HASH)) {
        uint64_t n = 0;
        if (std::string e = sysv_hash_symbols(img, out.get(DT_HASH), n); !e.empty()) return e;
        n_symbols = std::max(n_symbols, n);
    }
    out.strsz = strsz;
    out.top_version = 1;
    if (std::string e = check_versions(img, out, strsz, out.top_version); !e.empty()) return e;
    out.symbols.clear();
    out.n_symbols = n_symbols;
    return extend_symbols(img, out, n_symbols, "the hash table");
}

std::string extend_symbols(const image & img, dynamic_info & d, uint64_t count, const std::string & user) {
    const uint64_t first = d.symbols.size();
    if (count <= first) return {};
    const uint64_t symtab = d.get(DT_SYMTAB);
    std::vector<Elf64_Sym> more;
    const uint64_t at = symtab + first * sizeof(Elf64_Sym);
    if (!img.read_array(at, count - first, more)) {
        return not_in_file(fmt::format("the symbol table (DT_SYMTAB) entries {} to {} that {} needs", first,
                                       count - 1, user),
                           at, (count - first) * sizeof(Elf64_Sym));
    }
    for (size_t i = 0; i < more.size(); ++i) {
        if (more[i].st_name >= d.strsz) {
            return fmt::format("corrupt shared library: symbol {} has its name at string offset {:#x}, outside the "
                               "string table (DT_STRSZ {:#x})",
                               first + i, more[i].st_name, d.strsz);
        }
    }
    // Symbol versions: DT_VERSYM has one index per symbol, each defined by
    // DT_VERDEF or needed by DT_VERNEED (0 and 1 are local and global).
    if (d.has(DT_VERSYM)) {
        std::vector<uint16_t> versym;
        const uint64_t vat = d.get(DT_VERSYM) + first * 2;
        if (!img.read_array(vat, count - first, versym)) {
            return not_in_file(fmt::format("the symbol version table (DT_VERSYM) entries {} to {}", first, count - 1),
                               vat, (count - first) * 2);
        }
        for (size_t i = 0; i < versym.size(); ++i) {
            if ((versym[i] & 0x7fff) > d.top_version) {
                return fmt::format("corrupt shared library: symbol {} has version index {}, which no DT_VERDEF "
                                   "or DT_VERNEED record defines (the highest is {})",
                                   first + i, versym[i] & 0x7fff, d.top_version);
            }
        }
    }
    d.symbols.insert(d.symbols.end(), more.begin(), more.end());
    return {};
}

} // namespace tessera::detail::elf
