// The structural checks of plugin files before dlopen (backend/elf_check.hpp,
// backend/elf_image.hpp): every real library passes; damaged copies of a
// built plugin are refused with a message naming the file and the problem
// (each of these damages used to crash the process inside ld.so).
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include <fmt/core.h>

#include "backend/elf_check.hpp"
#include "backend/test_support.hpp"

namespace tessera::test {
namespace {

using detail::check_elf_file;

std::string file_bytes(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether `p` is a 64-bit ELF shared object of this machine (the files
// check_elf_file checks in depth).
bool native_shared_object(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    Elf64_Ehdr eh{};
    if (!in.read(reinterpret_cast<char *>(&eh), sizeof eh)) return false;
    Elf64_Ehdr self{};
    std::ifstream me("/proc/self/exe", std::ios::binary);
    me.read(reinterpret_cast<char *>(&self), sizeof self);
    return std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
           eh.e_type == ET_DYN && eh.e_machine == self.e_machine;
}

std::vector<fs::path> files_in(const fs::path & dir, const std::function<bool(const std::string &)> & keep) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec)) {
        if (e.is_regular_file(ec) && keep(e.path().filename().string())) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(ElfCheck, BuiltPluginsAndTestPluginsPass) {
    const auto cpu = files_in(TESSERA_BINARY_DIR, [](const std::string & n) {
        return n.rfind("libtessera-", 0) == 0 && n.ends_with(".so");
    });
    std::vector<fs::path> fakes;
    for (const auto & d : fs::directory_iterator(TESSERA_FAKE_PLUGIN_DIR)) {
        for (const auto & f : files_in(d.path(), [](const std::string & n) { return n.ends_with(".so"); })) {
            fakes.push_back(f);
        }
    }
    EXPECT_GT(fakes.size(), 40u);
    // The CPU variants (none in a TESSERA_CPU_STATIC build).
    for (const auto & f : cpu) EXPECT_EQ(check_elf_file(f.string()), "") << f;
    for (const auto & f : fakes) EXPECT_EQ(check_elf_file(f.string()), "") << f;
}

// Every shared library this test process has loaded (libc, libstdc++,
// libfmt, gtest's, ...; read from /proc/self/maps): ld.so mapped, relocated
// and initialised each of them, so the checks of what it needs must pass
// them all, whatever system the test runs on. (On the Debian 12 machine of
// stop 35 all of /usr/lib/x86_64-linux-gnu's ~2,800 libraries passed too;
// that scan is not a test because its files differ from system to system.)
TEST(ElfCheck, LoadedLibrariesPass) {
    std::ifstream maps("/proc/self/maps");
    if (!maps) GTEST_SKIP() << "no /proc/self/maps";
    std::vector<std::string> seen;
    std::string line;
    while (std::getline(maps, line)) {
        const size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string path = line.substr(slash);
        const std::string name = fs::path(path).filename().string();
        if (name.find(".so") == std::string::npos || std::find(seen.begin(), seen.end(), path) != seen.end()) continue;
        seen.push_back(path);
        if (!native_shared_object(path)) continue;
        EXPECT_EQ(check_elf_file(path), "") << path;
    }
    std::cout << "checked " << seen.size() << " loaded libraries\n";
    EXPECT_GE(seen.size(), 3u); // libc, libstdc++ and the loader at least
}

// A copy of a built plugin, read as the loader will see it once mapped.
struct elf_copy {
    std::string b;

    explicit elf_copy(const fs::path & p) : b(file_bytes(p)) {}
    template <class T> T at(uint64_t off) const {
        T v;
        std::memcpy(&v, b.data() + off, sizeof v);
        return v;
    }
    template <class T> void put(uint64_t off, const T & v) { std::memcpy(b.data() + off, &v, sizeof v); }
    Elf64_Ehdr eh() const { return at<Elf64_Ehdr>(0); }
    uint64_t ph_off(size_t i) const { return eh().e_phoff + i * sizeof(Elf64_Phdr); }
    Elf64_Phdr ph(size_t i) const { return at<Elf64_Phdr>(ph_off(i)); }
    void set_ph(size_t i, const Elf64_Phdr & p) { put(ph_off(i), p); }
    std::vector<size_t> of_type(uint32_t t) const {
        std::vector<size_t> out;
        for (size_t i = 0; i < eh().e_phnum; ++i) {
            if (ph(i).p_type == t) out.push_back(i);
        }
        return out;
    }
    // File offset of virtual address `a` (inside a PT_LOAD's file bytes).
    uint64_t off(uint64_t a) const {
        for (size_t i : of_type(PT_LOAD)) {
            const Elf64_Phdr p = ph(i);
            if (a >= p.p_vaddr && a < p.p_vaddr + p.p_filesz) return p.p_offset + (a - p.p_vaddr);
        }
        ADD_FAILURE() << "address " << a << " is not in the file";
        return 0;
    }
    // File offset of the dynamic entry `tag`.
    uint64_t dyn_off(int64_t tag) const {
        const Elf64_Phdr d = ph(of_type(PT_DYNAMIC).at(0));
        for (uint64_t o = d.p_offset; o < d.p_offset + d.p_filesz; o += sizeof(Elf64_Dyn)) {
            if (at<Elf64_Dyn>(o).d_tag == tag) return o;
        }
        ADD_FAILURE() << "no dynamic entry " << tag;
        return 0;
    }
    uint64_t dyn(int64_t tag) const { return at<Elf64_Dyn>(dyn_off(tag)).d_un.d_val; }
    void set_dyn(int64_t tag, uint64_t v) { put(dyn_off(tag) + 8, v); }
    Elf64_Rela rela(uint64_t table_tag, size_t k) const { return at<Elf64_Rela>(off(dyn(table_tag)) + k * 24); }
    void set_rela(uint64_t table_tag, size_t k, const Elf64_Rela & r) { put(off(dyn(table_tag)) + k * 24, r); }
};

std::string rel_name(const char * x86, const char * arm) {
#if defined(__aarch64__)
    (void)x86;
    return arm;
#else
    (void)arm;
    return x86;
#endif
}
#if defined(__aarch64__)
constexpr uint32_t r_relative = R_AARCH64_RELATIVE, r_glob_dat = R_AARCH64_GLOB_DAT;
#else
constexpr uint32_t r_relative = R_X86_64_RELATIVE, r_glob_dat = R_X86_64_GLOB_DAT;
#endif

class ElfCheckDamaged : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_EQ(good.eh().e_ident[EI_CLASS], ELFCLASS64); }
    // Writes `c` as <tmp>/libtessera-fakevar-<name>.so and expects
    // check_elf_file, registry::load and load_best to refuse it with `why`.
    void expect_refused(const std::string & name, const elf_copy & c, const std::string & why) {
        SCOPED_TRACE(name);
        const fs::path p = tmp.path() / fmt::format("libtessera-fakevar-{}.so", name);
        std::ofstream(p, std::ios::binary).write(c.b.data(), std::streamsize(c.b.size()));
        EXPECT_EQ(check_elf_file(p.string()), why);
        registry reg;
        EXPECT_EQ(error_of([&] { reg.load(p); }),
                  fmt::format("backend library '{}': cannot open: {}: {}", p.string(), p.string(), why));
        EXPECT_EQ(reg.reg_count(), 0u);
        EXPECT_FALSE(file_bytes("/proc/self/maps").find(p.string()) != std::string::npos) << p << " is mapped";
        refused.emplace_back(p, why);
    }

    const fs::path plugin = fake_plugin("variants", "libtessera-fakevar-high");
    elf_copy good{plugin};
    temp_dir tmp{"elfdamage"};
    std::vector<std::pair<fs::path, std::string>> refused;
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
};

TEST_F(ElfCheckDamaged, SegmentsAreRefusedByTheirProblem) {
    const auto loads = good.of_type(PT_LOAD);
    ASSERT_GE(loads.size(), 2u);
    const size_t last = loads.back(), first = loads.front(), second = loads[1];
    {
        elf_copy c = good;
        Elf64_Phdr p = c.ph(last);
        p.p_memsz = p.p_filesz - 8;
        c.set_ph(last, p);
        expect_refused("filesz", c,
                       fmt::format("corrupt shared library: segment {} (PT_LOAD) has a file size ({:#x} bytes) larger "
                                   "than its memory size ({:#x} bytes)",
                                   last, p.p_filesz, p.p_memsz));
    }
    {
        elf_copy c = good;
        Elf64_Phdr p = c.ph(second);
        p.p_vaddr += 0x10;
        c.set_ph(second, p);
        expect_refused("congruent", c,
                       fmt::format("corrupt shared library: segment {} (PT_LOAD) has address {:#x} and file offset "
                                   "{:#x}, which differ by no multiple of the page size ({:#x})",
                                   second, p.p_vaddr, p.p_offset, page));
    }
    {
        elf_copy c = good;
        Elf64_Phdr p = c.ph(second);
        const Elf64_Phdr f = c.ph(first);
        p.p_vaddr = f.p_vaddr;
        p.p_offset = f.p_offset;
        c.set_ph(second, p);
        expect_refused("order", c,
                       fmt::format("corrupt shared library: segment {} (PT_LOAD) at addresses [{:#x}, {:#x}) does not "
                                   "follow segment {} (PT_LOAD) at [{:#x}, {:#x}) (PT_LOAD segments must be in "
                                   "ascending address order and must not overlap)",
                                   second, p.p_vaddr, p.p_vaddr + p.p_memsz, first, f.p_vaddr, f.p_vaddr + f.p_memsz));
    }
    const size_t dyn = good.of_type(PT_DYNAMIC).at(0);
    {
        elf_copy c = good;
        Elf64_Phdr p = c.ph(dyn);
        p.p_vaddr = 0x7ff00000;
        c.set_ph(dyn, p);
        expect_refused("dynvaddr", c,
                       fmt::format("corrupt shared library: segment {} (PT_DYNAMIC) at addresses [0x7ff00000, {:#x}) "
                                   "is not inside the file-backed bytes of any PT_LOAD segment",
                                   dyn, 0x7ff00000 + p.p_filesz));
    }
    {
        elf_copy c = good;
        Elf64_Phdr p = c.ph(dyn);
        p.p_type = PT_NULL;
        c.set_ph(dyn, p);
        expect_refused("nodyn", c, "corrupt shared library: no PT_DYNAMIC segment (no dynamic section)");
    }
    {
        // The file zeroed from its dynamic section to the end (what zeroing
        // the second half of a release build's plugin does).
        elf_copy c = good;
        std::fill(c.b.begin() + std::ptrdiff_t(c.ph(dyn).p_offset), c.b.end(), '\0');
        expect_refused("tailzero", c, "corrupt shared library: the dynamic section has no DT_STRTAB entry");
    }
}

TEST_F(ElfCheckDamaged, DynamicEntriesAreRefusedByTheirProblem) {
    const std::string outside = "addresses [0x7ff00000, {:#x}) are not within the file-backed bytes of any PT_LOAD "
                                "segment";
    auto moved = [&](int64_t tag) {
        elf_copy c = good;
        c.set_dyn(tag, 0x7ff00000);
        return c;
    };
    const uint64_t strsz = good.dyn(DT_STRSZ);
    expect_refused("strtab", moved(DT_STRTAB),
                   fmt::format(fmt::runtime("corrupt shared library: the string table (DT_STRTAB, DT_STRSZ {:#x}): " +
                                            outside),
                               strsz, 0x7ff00000 + strsz));
    expect_refused("gnuhash", moved(DT_GNU_HASH),
                   fmt::format(fmt::runtime("corrupt shared library: the DT_GNU_HASH header: " + outside), 0x7ff00010));
    const uint64_t relasz = good.dyn(DT_RELASZ);
    expect_refused("rela", moved(DT_RELA),
                   fmt::format(fmt::runtime("corrupt shared library: the DT_RELA relocation table ({:#x} bytes): " +
                                            outside),
                               relasz, 0x7ff00000 + relasz));
    expect_refused("initarray", moved(DT_INIT_ARRAY),
                   fmt::format(fmt::runtime("corrupt shared library: DT_INIT_ARRAY ({} bytes): " + outside),
                               good.dyn(DT_INIT_ARRAYSZ), 0x7ff00000 + good.dyn(DT_INIT_ARRAYSZ)));
    expect_refused("init", moved(DT_INIT),
                   "corrupt shared library: DT_INIT (0x7ff00000) is outside the code of every executable PT_LOAD "
                   "segment");
    {
        elf_copy c = good;
        c.set_dyn(DT_NEEDED, strsz + 5);
        expect_refused("needed", c,
                       fmt::format("corrupt shared library: DT_NEEDED names a string at offset {:#x}, outside the "
                                   "string table (DT_STRSZ {:#x})",
                                   strsz + 5, strsz));
    }
    {
        elf_copy c = good;
        c.set_dyn(DT_RELAENT, 16);
        expect_refused("relaent", c,
                       "corrupt shared library: DT_RELAENT is 16 (RELA entries of this ELF class are 24 bytes)");
    }
    {
        elf_copy c = good;
        c.set_dyn(DT_RELASZ, relasz + 8);
        expect_refused("relasz", c,
                       fmt::format("corrupt shared library: DT_RELASZ is {}, not a multiple of 24 bytes", relasz + 8));
    }
    {
        // No DT_NULL: every entry from it to the end of the section made DT_DEBUG.
        elf_copy c = good;
        const Elf64_Phdr d = c.ph(c.of_type(PT_DYNAMIC).at(0));
        for (uint64_t o = c.dyn_off(DT_NULL); o < d.p_offset + d.p_filesz; o += sizeof(Elf64_Dyn)) {
            c.put(o, Elf64_Dyn{DT_DEBUG, {0}});
        }
        expect_refused("nonull", c,
                       fmt::format("corrupt shared library: the dynamic section at {:#x} has no DT_NULL entry in its {} "
                                   "entries",
                                   d.p_vaddr, d.p_filesz / sizeof(Elf64_Dyn)));
    }
    {
        elf_copy c = good;
        c.put(c.off(c.dyn(DT_GNU_HASH)) + 8, uint32_t(3));
        expect_refused("bloom", c,
                       "corrupt shared library: the DT_GNU_HASH table has 3 Bloom filter words (a power of two is "
                       "required)");
    }
}

TEST_F(ElfCheckDamaged, RelocationsAreRefusedByTheirProblem) {
    const uint64_t rela = good.dyn(DT_RELA), jmprel = good.dyn(DT_JMPREL);
    const size_t n_rela = good.dyn(DT_RELASZ) / 24;
    const uint64_t relacount = good.dyn(DT_RELACOUNT);
    ASSERT_GT(relacount, 0u);
    ASSERT_LT(relacount, n_rela);
    {
        elf_copy c = good;
        Elf64_Rela r = c.rela(DT_RELA, 0);
        r.r_info = ELF64_R_INFO(0, 0);
        c.set_rela(DT_RELA, 0, r);
        expect_refused("relacount", c,
                       fmt::format("corrupt shared library: relocation 0 of DT_RELA (at {:#x}) has type {}, but "
                                   "DT_RELACOUNT says the first {} are relative relocations",
                                   rela, rel_name("R_X86_64_NONE", "R_AARCH64_NONE"), relacount));
    }
    {
        elf_copy c = good;
        Elf64_Rela r = c.rela(DT_RELA, n_rela - 1);
        r.r_info = ELF64_R_INFO(ELF64_R_SYM(r.r_info), 0xfe);
        c.set_rela(DT_RELA, n_rela - 1, r);
        expect_refused("reltype", c,
                       fmt::format("corrupt shared library: relocation {} of DT_RELA (at {:#x}) has type 254, which "
                                   "the dynamic loader does not apply on {}",
                                   n_rela - 1, rela + (n_rela - 1) * 24, rel_name("x86-64", "AArch64")));
    }
    {
        // A relative relocation writing into the (read-only) code.
        elf_copy c = good;
        Elf64_Rela r = c.rela(DT_RELA, 1);
        r.r_offset = c.dyn(DT_INIT);
        c.set_rela(DT_RELA, 1, r);
        expect_refused("relwhere", c,
                       fmt::format("corrupt shared library: relocation 1 of DT_RELA (at {:#x}, type {}) writes 8 bytes "
                                   "at [{:#x}, {:#x}), outside every writable PT_LOAD segment",
                                   rela + 24, rel_name("R_X86_64_RELATIVE", "R_AARCH64_RELATIVE"), r.r_offset,
                                   r.r_offset + 8));
    }
    {
        elf_copy c = good;
        c.put(c.off(jmprel) + 8, uint64_t(0)); // r_info of the first PLT relocation
        expect_refused("pltnone", c,
                       fmt::format("corrupt shared library: relocation 0 of DT_JMPREL (at {:#x}) has type {}, which is "
                                   "not a PLT relocation",
                                   jmprel, rel_name("R_X86_64_NONE", "R_AARCH64_NONE")));
    }
    {
        // A symbol relocation whose symbol lost its name (zeroed .dynsym).
        size_t k = relacount;
        while (k < n_rela && ELF64_R_TYPE(good.rela(DT_RELA, k).r_info) != r_glob_dat) ++k;
        ASSERT_LT(k, n_rela);
        const uint64_t sym = ELF64_R_SYM(good.rela(DT_RELA, k).r_info);
        elf_copy c = good;
        c.put(c.off(c.dyn(DT_SYMTAB)) + sym * sizeof(Elf64_Sym), Elf64_Sym{});
        expect_refused("noname", c,
                       fmt::format("corrupt shared library: relocation {} of DT_RELA (at {:#x}, type {}) refers to "
                                   "symbol {}, which has no name",
                                   k, rela + k * 24, rel_name("R_X86_64_GLOB_DAT", "R_AARCH64_GLOB_DAT"), sym));
    }
    {
        // The relocation filling DT_INIT_ARRAY[0] made to point at data.
        const uint64_t slot = good.dyn(DT_INIT_ARRAY);
        size_t k = 0;
        while (k < n_rela && !(good.rela(DT_RELA, k).r_offset == slot &&
                               ELF64_R_TYPE(good.rela(DT_RELA, k).r_info) == r_relative)) {
            ++k;
        }
        ASSERT_LT(k, n_rela);
        elf_copy c = good;
        Elf64_Rela r = c.rela(DT_RELA, k);
        r.r_addend = int64_t(c.dyn(DT_STRTAB));
        c.set_rela(DT_RELA, k, r);
        expect_refused("initdata", c,
                       fmt::format("corrupt shared library: DT_INIT_ARRAY entry 0 (at {:#x}) would call {:#x}, outside "
                                   "the code of every executable PT_LOAD segment",
                                   slot, c.dyn(DT_STRTAB)));
        // Without that relocation (moved to the next word) the entry keeps
        // the file's bytes, an address the loader would call as it is.
        r = good.rela(DT_RELA, k);
        r.r_offset = slot + 0x10;
        c.set_rela(DT_RELA, k, r);
        expect_refused("initabs", c,
                       fmt::format("corrupt shared library: DT_INIT_ARRAY entry 0 (at {:#x}) is not relocated, so the "
                                   "loader would call the absolute address {:#x}",
                                   slot, c.at<uint64_t>(c.off(slot))));
    }
}

// Among damaged copies, load_best still loads the good variant, and logs
// one line per refused file naming it.
TEST_F(ElfCheckDamaged, LoadBestSkipsDamagedVariants) {
    elf_copy c = good;
    c.set_dyn(DT_STRTAB, 0x7ff00000);
    const uint64_t strsz = good.dyn(DT_STRSZ);
    const std::string why =
        fmt::format("corrupt shared library: the string table (DT_STRTAB, DT_STRSZ {:#x}): addresses [0x7ff00000, "
                    "{:#x}) are not within the file-backed bytes of any PT_LOAD segment",
                    strsz, 0x7ff00000 + strsz);
    const fs::path p = tmp.path() / "libtessera-fakevar-strtab.so";
    std::ofstream(p, std::ios::binary).write(c.b.data(), std::streamsize(c.b.size()));
    const fs::path ok = tmp.path() / "libtessera-fakevar-good.so";
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-low"), ok);

    registry reg;
    log_capture log;
    log.attach(reg);
    load_report rep = reg.load_best("fakevar", tmp.path());
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), ok.string());
    EXPECT_EQ(log.all(), fmt::format("backend library '{}': cannot open: {}: {}\n", p.string(), p.string(), why));
    EXPECT_FALSE(file_bytes("/proc/self/maps").find(p.string()) != std::string::npos);
}

} // namespace
} // namespace tessera::test
