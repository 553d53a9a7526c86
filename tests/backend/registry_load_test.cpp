// Loading backend plugins: every failure's exact message, the registry left
// unchanged, libraries not left loaded; the C ABI version rules.
#include <atomic>
#include <chrono>
#include <thread>
#include <gtest/gtest.h>

#include <elf.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include <fmt/core.h>

#include "backend/score_probe.hpp"
#include "backend/test_support.hpp"
#include "tessera/core/error.hpp"

namespace tessera::test {
namespace {

class RegistryLoad : public ::testing::Test {
protected:
    void SetUp() override { log.attach(reg); }

    // Loads `lib`, expecting `message`; checks that nothing changed.
    void expect_load_fails(const fs::path & lib, const std::string & message) {
        const auto before = snapshot(reg);
        EXPECT_EQ(error_of([&] { reg.load(lib); }), message);
        EXPECT_EQ(snapshot(reg), before);
        EXPECT_FALSE(is_loaded(lib)) << lib << " was left loaded";
    }

    registry reg;
    log_capture log;
};

// The bounded wait for a killed probe child (reap_within): a child that
// ended is reaped with its status; one that is still running at the limit
// (as one in an uninterruptible sleep stays after SIGKILL; here it simply
// was not sent one) is handed to a reaper thread, and the call returns.
// The reaper reaps it once it ends: no zombie is left (kill(pid, 0) fails
// with ESRCH only once a process is reaped, not while it is a zombie).
TEST(ProbeReap, AChildThatDoesNotEndInTimeIsLeftToAReaperThread) {
    const pid_t quick = ::fork();
    ASSERT_GE(quick, 0);
    if (quick == 0) ::_exit(7);
    int status = 0;
    ASSERT_EQ(tessera::detail::reap_within(quick, std::chrono::milliseconds(10000), &status), tessera::detail::reap_result::ended);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7);
    EXPECT_EQ(tessera::detail::reap_within(quick, std::chrono::milliseconds(10), &status), tessera::detail::reap_result::not_a_child);

    const pid_t stuck = ::fork();
    ASSERT_GE(stuck, 0);
    if (stuck == 0) {
        for (;;) ::pause(); // until killed
    }
    EXPECT_EQ(tessera::detail::reap_within(stuck, std::chrono::milliseconds(50), &status), tessera::detail::reap_result::handed_off);
    EXPECT_EQ(::kill(stuck, 0), 0) << "still running when the call returned";
    ASSERT_EQ(::kill(stuck, SIGKILL), 0);
    bool gone = false;
    for (int i = 0; i < 2000 && !gone; ++i) { // up to 20 s on a loaded machine
        gone = ::kill(stuck, 0) < 0 && errno == ESRCH;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(gone) << "the reaper thread did not reap the child once it ended";
    if (!gone) ::waitpid(stuck, &status, 0);
}

TEST_F(RegistryLoad, LoadsGpuPluginAndInitBestPicksIt) {
    backend_reg cpu = reg.load(fake_plugin("cpu", "libtessera-fakecpu"));
    backend_reg gpu = reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
    EXPECT_STREQ(gpu.name(), "fakegpu");
    EXPECT_EQ(gpu.path(), fake_plugin("gpu", "libtessera-fakegpu").string());
    EXPECT_EQ(gpu.score(), 10);
    EXPECT_EQ(cpu.score(), -1); // no score function
    EXPECT_EQ(gpu.version().major, unsigned(TSR_BACKEND_API_MAJOR));
    ASSERT_EQ(reg.device_count(), 2u);
    EXPECT_STREQ(reg.device_at(0).name(), "FakeCPU0");
    EXPECT_STREQ(reg.device_at(1).name(), "FakeGPU0");

    backend be = reg.init_best();
    EXPECT_STREQ(be.get_device().name(), "FakeGPU0");
    EXPECT_EQ(be.get_device().type(), TSR_DEVICE_TYPE_GPU);
    EXPECT_STREQ(reg.best_device()->name(), "FakeGPU0");
    EXPECT_EQ(log.all(), "");
}

TEST_F(RegistryLoad, InitBestPrefersGpuThenIntegratedGpuThenCpu) {
    // Nothing loaded: it says where load_all looks (the test program's own
    // folder among them).
    const std::string none = error_of([&] { reg.init_best(); });
    const std::string head = "no GPU, integrated GPU or CPU device is available (no devices are registered; "
                             "load_all looks for backend plugins in: ";
    const std::string tail = "; TESSERA_BACKEND_PATH or load_all(dir) name another folder)";
    EXPECT_EQ(none.rfind(head, 0), 0u) << none;
    ASSERT_GT(none.size(), tail.size());
    EXPECT_EQ(none.substr(none.size() - tail.size()), tail) << none;
    EXPECT_NE(none.find(fs::read_symlink("/proc/self/exe").parent_path().string()), std::string::npos) << none;
    reg.load(fake_plugin("cpu", "libtessera-fakecpu"));
    EXPECT_STREQ(reg.init_best().get_device().name(), "FakeCPU0");
    reg.load(fake_plugin("igpu", "libtessera-fakeigpu"));
    EXPECT_STREQ(reg.init_best().get_device().name(), "FakeIGPU0");
    reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
    EXPECT_STREQ(reg.init_best().get_device().name(), "FakeGPU0");
}

TEST_F(RegistryLoad, MissingFileReportsLoaderMessage) {
    const fs::path lib = fake_dir("gpu") / "libtessera-nosuchfile.so";
    const auto before = snapshot(reg);
    const std::string msg = error_of([&] { reg.load(lib); });
    EXPECT_EQ(msg.rfind(fmt::format("backend library '{}': cannot open: ", lib.string()), 0), 0u)
        << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
    EXPECT_EQ(snapshot(reg), before);
}

TEST_F(RegistryLoad, LibraryWithoutEntryPointsIsRefused) {
    const fs::path lib = fake_plugin("noentry", "libtessera-noentry");
    expect_load_fails(lib, fmt::format("backend library '{}': has no 'tessera_backend_init' "
                                       "symbol (not a tessera backend)",
                                       lib.string()));
}

TEST_F(RegistryLoad, MissingInitSymbolIsRefused) {
    const fs::path lib = fake_plugin("noinit", "libtessera-fakenoinit");
    expect_load_fails(lib, fmt::format("backend library '{}': has no 'tessera_backend_init' "
                                       "symbol (not a tessera backend)",
                                       lib.string()));
}

TEST_F(RegistryLoad, InitReturningNullIsRefused) {
    const fs::path lib = fake_plugin("initnull", "libtessera-fakeinitnull");
    expect_load_fails(lib, fmt::format("backend library '{}': tessera_backend_init() returned null",
                                       lib.string()));
}

TEST_F(RegistryLoad, WrongApiMajorIsRefusedWithBothVersions) {
    const fs::path lib = fake_plugin("major", "libtessera-fakemajor");
    expect_load_fails(lib, fmt::format("backend library '{}': API version {}.3 is incompatible "
                                       "with this tessera's API version {}.{} (major versions "
                                       "differ)",
                                       lib.string(), TSR_BACKEND_API_MAJOR + 1,
                                       TSR_BACKEND_API_MAJOR, TSR_BACKEND_API_MINOR));
}

TEST_F(RegistryLoad, ScoreZeroIsRefused) {
    const fs::path lib = fake_plugin("score0", "libtessera-fakezero");
    expect_load_fails(lib, fmt::format("backend library '{}': score 0: not supported on this "
                                       "system",
                                       lib.string()));
}

TEST_F(RegistryLoad, DuplicateFamilyNameIsRefused) {
    const fs::path first = fake_plugin("gpu", "libtessera-fakegpu");
    const fs::path second = fake_plugin("gpu2", "libtessera-fakegpu");
    reg.load(first);
    expect_load_fails(second, fmt::format("backend library '{}': a backend named 'fakegpu' is "
                                          "already registered (from {})",
                                          second.string(), first.string()));
    EXPECT_TRUE(is_loaded(first));
}

TEST_F(RegistryLoad, NullDeviceIsSkippedAndNeverStored) {
    const fs::path lib = fake_plugin("nulldev", "libtessera-fakenull");
    backend_reg r = reg.load(lib);
    const auto devs = r.devices();
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_STREQ(devs[0].name(), "FakeNull0");
    EXPECT_STREQ(devs[1].name(), "FakeNull2");
    EXPECT_EQ(reg.device_count(), 2u);
    EXPECT_FALSE(reg.find_device("FakeNull1"));
    EXPECT_EQ(log.all(), fmt::format("backend library '{}': device 1 is null; skipped\n", lib.string()));
}

TEST_F(RegistryLoad, DeviceWithoutRequiredSlotIsSkipped) {
    const fs::path lib = fake_plugin("baddev", "libtessera-fakebad");
    backend_reg r = reg.load(lib);
    ASSERT_EQ(r.devices().size(), 1u);
    EXPECT_STREQ(r.devices()[0].name(), "FakeBad1");
    EXPECT_EQ(log.all(), fmt::format("backend library '{}': device 0 skipped: its device table "
                                     "has no get_caps (a required slot)\n",
                                     lib.string()));
}

TEST_F(RegistryLoad, OlderTablesWithoutOptionalSlotsAreNeverCalledThere) {
    // The plugin's tables end before their optional slots; the memory after
    // holds addresses that crash when called.
    backend_reg r = reg.load(fake_plugin("short", "libtessera-fakeshort"));
    EXPECT_EQ(r.version().minor, 0u);
    device d = *reg.find_device("FakeShort0");
    EXPECT_FALSE(d.host_buffer_type());
    EXPECT_FALSE(d.offload_op(nullptr));
    tsr_tensor t{};
    t.op = TSR_OP_ADD;
    EXPECT_FALSE(d.offload_op(&t));
    char mem[64];
    EXPECT_EQ(error_of([&] { d.buffer_from_host_ptr(mem, sizeof mem, sizeof mem); }),
              "device 'FakeShort0' cannot make buffers over host memory");
    buffer_type bt = d.default_buffer_type();
    EXPECT_EQ(bt.max_size(), SIZE_MAX);
    EXPECT_FALSE(bt.is_host());
    buffer b = bt.alloc(100);
    EXPECT_EQ(b.size(), 100u);
}

TEST_F(RegistryLoad, NewerMinorWithLongerTablesIsAccepted) {
    backend_reg r = reg.load(fake_plugin("long", "libtessera-fakelong"));
    EXPECT_EQ(r.version().minor, unsigned(TSR_BACKEND_API_MINOR + 3));
    device d = *reg.find_device("FakeLong0");
    EXPECT_EQ(d.memory(), std::make_pair(size_t(1000), size_t(2000)));
    backend be = d.init();
    EXPECT_STREQ(be.name(), "FakeLong");
}

TEST_F(RegistryLoad, WorksFromDirectoryWithSpacesAndNonAsciiName) {
    temp_dir tmp("plugins with spaces \u00fcn\u00efc\u00f8d\u00e9 \u65e5\u672c");
    const fs::path lib = tmp.path() / "libtessera-fakegpu-utf8.so";
    fs::copy_file(fake_plugin("gpu", "libtessera-fakegpu"), lib);
    load_report rep = reg.load_best("fakegpu", tmp.path());
    ASSERT_TRUE(rep.loaded) << (rep.candidates.empty() ? "" : rep.candidates[0].error);
    EXPECT_EQ(rep.loaded.path(), lib.string());
    EXPECT_EQ(rep.loaded.score(), 10);
    EXPECT_STREQ(reg.init_best().get_device().name(), "FakeGPU0");
    reg.unload(rep.loaded);
    EXPECT_FALSE(is_loaded(lib));

    // Direct load of the same path, and the message for a missing one.
    EXPECT_STREQ(reg.load(lib).name(), "fakegpu");
    const fs::path missing = tmp.path() / "libtessera-nothere.so";
    const std::string msg = error_of([&] { reg.load(missing); });
    EXPECT_EQ(msg.rfind(fmt::format("backend library '{}': cannot open: ", missing.string()), 0), 0u)
        << msg;
}

// Two libraries with the same best score: the first found is loaded and
// the other says it tied (not "score 7 is below 7").
TEST_F(RegistryLoad, LoadBestNamesATie) {
    temp_dir tmp("tie");
    const fs::path high = fake_plugin("variants", "libtessera-fakevar-high");
    fs::copy_file(high, tmp.path() / "libtessera-fakevar-a.so");
    fs::copy_file(high, tmp.path() / "libtessera-fakevar-b.so");
    load_report rep = reg.load_best("fakevar", tmp.path());
    ASSERT_TRUE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 2u);
    EXPECT_EQ(rep.candidates[0].error, "");
    EXPECT_EQ(rep.candidates[0].path, rep.loaded.path());
    EXPECT_EQ(rep.candidates[1].score, 7);
    EXPECT_EQ(rep.candidates[1].error, "not chosen: same score 7 as the library loaded, found earlier in the search");
}

// Symbolic links named as variants that lead nowhere (a dangling link, a
// loop) are considered and say why they cannot be opened; they were passed
// over without a word, so `tessera devices` did not show them at all. The
// working variant beside them is still loaded.
TEST_F(RegistryLoad, BrokenLinksAreListedWithTheirReason) {
    temp_dir tmp("links");
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-high"), tmp.path() / "libtessera-fakevar-high.so");
    fs::create_symlink(tmp.path() / "nowhere.so", tmp.path() / "libtessera-fakevar-dangling.so");
    fs::create_symlink("libtessera-fakevar-loop2.so", tmp.path() / "libtessera-fakevar-loop1.so");
    fs::create_symlink("libtessera-fakevar-loop1.so", tmp.path() / "libtessera-fakevar-loop2.so");
    load_report rep = reg.load_best("fakevar", tmp.path());
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.score(), 7);
    ASSERT_EQ(rep.candidates.size(), 4u);
    std::map<std::string, std::string> errors;
    for (const load_candidate & c : rep.candidates) errors[fs::path(c.path).filename().string()] = c.error;
    EXPECT_EQ(errors["libtessera-fakevar-high.so"], "");
    const std::string dangling = errors["libtessera-fakevar-dangling.so"];
    EXPECT_EQ(dangling.rfind("cannot open: ", 0), 0u) << dangling;
    EXPECT_NE(dangling.find("No such file or directory"), std::string::npos) << dangling;
    for (const char * loop : {"libtessera-fakevar-loop1.so", "libtessera-fakevar-loop2.so"}) {
        EXPECT_NE(errors[loop].find("Too many levels of symbolic links"), std::string::npos) << errors[loop];
    }
}

TEST_F(RegistryLoad, LoadBestLoadsOnlyTheHighestScoringVariant) {
    load_report rep = reg.load_best("fakevar", fake_dir("variants"));
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.name, "fakevar");
    EXPECT_FALSE(rep.already_registered);
    EXPECT_EQ(rep.loaded.score(), 7);
    const auto feats = rep.loaded.features();
    ASSERT_FALSE(feats.empty());
    EXPECT_EQ(feats[0], std::make_pair(std::string("VARIANT"), std::string("high")));

    const fs::path high = fake_plugin("variants", "libtessera-fakevar-high");
    const fs::path low = fake_plugin("variants", "libtessera-fakevar-low");
    const fs::path zero = fake_plugin("variants", "libtessera-fakevar-zero");
    const fs::path noscore = fake_plugin("variants", "libtessera-fakevar-noscore");
    ASSERT_EQ(rep.candidates.size(), 4u);
    EXPECT_EQ(rep.candidates[0].path, high.string());
    EXPECT_EQ(rep.candidates[0].score, 7);
    EXPECT_EQ(rep.candidates[0].error, "");
    EXPECT_EQ(rep.candidates[1].path, low.string());
    EXPECT_EQ(rep.candidates[1].score, 3);
    EXPECT_EQ(rep.candidates[1].error, "not chosen: score 3 is below 7");
    // Failed candidates follow, by score: zero (0), then noscore (-1, not asked).
    EXPECT_EQ(rep.candidates[2].path, zero.string());
    EXPECT_EQ(rep.candidates[2].error, "score 0: not supported on this system");
    EXPECT_EQ(rep.candidates[3].path, noscore.string());
    EXPECT_EQ(rep.candidates[3].score, -1);
    EXPECT_EQ(rep.candidates[3].error,
              "has no 'tessera_backend_score' symbol (every variant library needs one)");

    EXPECT_TRUE(is_loaded(high));
    EXPECT_FALSE(is_loaded(low));
    EXPECT_FALSE(is_loaded(zero));
    EXPECT_FALSE(is_loaded(noscore));
    // An unsupported variant is passed over without a word; a library
    // without a score symbol (e.g. another library given a plugin's name)
    // is reported, as other broken ones are.
    EXPECT_EQ(log.all(), "backend library '" + noscore.string() +
                             "': has no 'tessera_backend_score' symbol (every variant library needs one)\n");

    // A second load_best finds the family registered and loads nothing.
    load_report again = reg.load_best("FAKEVAR", fake_dir("variants"));
    EXPECT_TRUE(again.already_registered);
    EXPECT_TRUE(again.loaded == rep.loaded);
    EXPECT_TRUE(again.candidates.empty());
    EXPECT_EQ(reg.reg_count(), 1u);
}

TEST_F(RegistryLoad, LoadBestFallsBackToNextBestWhenBestFailsToLoad) {
    load_report rep = reg.load_best("fakefb", fake_dir("fallback"));
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.features()[0].second, "ok");
    const fs::path best = fake_plugin("fallback", "libtessera-fakefb-best");
    ASSERT_EQ(rep.candidates.size(), 2u);
    const std::string msg =
        fmt::format("backend library '{}': tessera_backend_init() returned null", best.string());
    EXPECT_EQ(rep.candidates[0].error, msg);
    EXPECT_EQ(log.all(), msg + "\n");
    EXPECT_FALSE(is_loaded(best));
}

TEST_F(RegistryLoad, LoadBestFallsBackToBaseLibrary) {
    load_report rep = reg.load_best("fakebase", fake_dir("base"));
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.features()[0].second, "base");
    EXPECT_EQ(rep.loaded.path(), fake_plugin("base", "libtessera-fakebase").string());
    ASSERT_EQ(rep.candidates.size(), 2u);
    EXPECT_EQ(rep.candidates[0].error, "score 0: not supported on this system");
    EXPECT_EQ(rep.candidates[1].error, "");
}

TEST_F(RegistryLoad, LoadBestReportsABaseLibraryWithoutEntryPoints) {
    const fs::path lib = fake_plugin("noentry", "libtessera-noentry");
    load_report rep = reg.load_best("noentry", fake_dir("noentry"));
    EXPECT_FALSE(rep.loaded);
    ASSERT_EQ(rep.candidates.size(), 1u);
    const std::string msg = fmt::format("backend library '{}': has no 'tessera_backend_init' "
                                        "symbol (not a tessera backend)",
                                        lib.string());
    EXPECT_EQ(rep.candidates[0].error, msg);
    EXPECT_EQ(log.all(), msg + "\n");
    EXPECT_EQ(reg.reg_count(), 0u);
    EXPECT_FALSE(is_loaded(lib));
}

TEST_F(RegistryLoad, LoadBestFindsNothingQuietly) {
    load_report rep = reg.load_best("nosuchfamily", fake_dir("variants"));
    EXPECT_FALSE(rep.loaded);
    EXPECT_TRUE(rep.candidates.empty());
    EXPECT_EQ(reg.reg_count(), 0u);
    EXPECT_EQ(error_of([&] { reg.load_best("../evil", {}); }),
              "load_best: '../evil' is not a backend name (1 to 64 of A-Z a-z 0-9 _)");
}

TEST_F(RegistryLoad, LibraryPlantedInWorkingDirectoryIsNotLoadedByDefault) {
    temp_dir cwd;
    fs::copy_file(fake_plugin("planted", "libtessera-planted-evil"),
                  cwd.path() / "libtessera-planted-evil.so");
    fs::copy_file(fake_plugin("planted", "libtessera-planted-evil"),
                  cwd.path() / "libtessera-cpu-evil.so");
    const fs::path old = fs::current_path();
    fs::current_path(cwd.path());
    for (const auto & p : reg.search_paths()) EXPECT_FALSE(fs::equivalent(p, cwd.path())) << p;
    load_report rep = reg.load_best("planted");
    EXPECT_FALSE(rep.loaded);
    EXPECT_TRUE(rep.candidates.empty());
    // Asked explicitly, the same file would win: the test above can fail.
    load_report rep2 = reg.load_best("planted", ".");
    fs::current_path(old);
    ASSERT_TRUE(rep2.loaded);
    EXPECT_EQ(rep2.loaded.score(), 1000);
}

TEST_F(RegistryLoad, EnvironmentVariableAddsFileOrDirectory) {
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", fake_dir("gpu").c_str(), 1), 0);
    auto reports = reg.load_all();
    EXPECT_TRUE(reg.find_reg("fakegpu"));
    {
        registry other;
        ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", fake_plugin("igpu", "libtessera-fakeigpu").c_str(), 1), 0);
        other.load_all();
        EXPECT_TRUE(other.find_reg("fakeigpu"));
        EXPECT_FALSE(other.find_reg("fakegpu"));
    }
    unsetenv("TESSERA_BACKEND_PATH");
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports.back().name, "fakegpu");
    EXPECT_TRUE(reports.back().loaded);
}

TEST_F(RegistryLoad, LookupsAreCaseInsensitiveAndByType) {
    reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
    reg.load(fake_plugin("cpu", "libtessera-fakecpu"));
    EXPECT_TRUE(reg.find_reg("FAKEGPU"));
    EXPECT_TRUE(reg.find_reg("FakeCpu"));
    EXPECT_FALSE(reg.find_reg("fakegp"));
    EXPECT_STREQ(reg.find_device("fakegpu0")->name(), "FakeGPU0");
    EXPECT_STREQ(reg.find_device(TSR_DEVICE_TYPE_CPU)->name(), "FakeCPU0");
    EXPECT_FALSE(reg.find_device(TSR_DEVICE_TYPE_IGPU));
    EXPECT_STREQ(reg.reg_at(1).name(), "fakecpu");
    EXPECT_EQ(error_of([&] { reg.reg_at(2); }), "backend index 2 out of range (2 registered)");
    EXPECT_EQ(error_of([&] { reg.device_at(5); }), "device index 5 out of range (2 registered)");
    EXPECT_STREQ(reg.init_by_name("FAKECPU0").get_device().name(), "FakeCPU0");
    EXPECT_STREQ(reg.init_by_type(TSR_DEVICE_TYPE_GPU).get_device().name(), "FakeGPU0");
    EXPECT_EQ(error_of([&] { reg.init_by_name("Vulkan0"); }),
              "no device named 'Vulkan0' (devices: FakeGPU0 (GPU) FakeCPU0 (CPU))");
    EXPECT_EQ(error_of([&] { reg.init_by_type(TSR_DEVICE_TYPE_ACCEL); }),
              "no device of type ACCEL (devices: FakeGPU0 (GPU) FakeCPU0 (CPU))");
    EXPECT_EQ(error_of([&] { reg.init_by_name("FakeCPU0", "fail"); }),
              "device 'FakeCPU0': could not create a backend (params 'fail')");
}

TEST_F(RegistryLoad, CompiledInRegistrationAndLoneDevices) {
    // Take a reg from a plugin without the loader, as a compiled-in backend would be.
    const fs::path lib = fake_plugin("gpu2", "libtessera-fakegpu");
    void * h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr);
    auto init = reinterpret_cast<tsr_backend_init_fn>(dlsym(h, "tessera_backend_init"));
    tsr_reg * raw = init();
    {
        registry r;
        backend_reg g = r.register_backend(raw);
        EXPECT_EQ(g.path(), "");
        EXPECT_EQ(g.score(), -1);
        EXPECT_EQ(error_of([&] { r.register_backend(raw); }),
                  "backend 'fakegpu': a backend named 'fakegpu' is already registered (compiled in)");
        EXPECT_EQ(error_of([&] { r.register_backend(nullptr); }), "backend '': the reg is null");
        EXPECT_EQ(error_of([&] { r.register_device(raw->iface->get_device(raw, 0)); }),
                  "device 'OtherGPU0': a device named 'OtherGPU0' is already registered by backend 'fakegpu'");
        EXPECT_EQ(r.device_count(), 1u);
    }
    {
        registry r;
        device d = r.register_device(raw->iface->get_device(raw, 0));
        EXPECT_EQ(r.reg_count(), 0u);
        EXPECT_EQ(r.device_count(), 1u);
        EXPECT_STREQ(r.init_best().get_device().name(), "OtherGPU0");
    }
    dlclose(h);
}

// ------------------------------------------------ damaged and foreign files
// Plugin files are checked with plain reads before dlopen maps them: a
// truncated copy used to kill the process with SIGBUS inside glibc's dlopen
// (every libtessera-<family>-*.so found is opened to be scored).

std::string read_bytes(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path & p, std::string_view bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

// Whether /proc/self/maps names `lib` (without asking dlopen about it).
bool mapped(const fs::path & lib) {
    return read_bytes("/proc/self/maps").find(lib.string()) != std::string::npos;
}

// The headers of a 64-bit ELF file as the test reads them itself.
struct elf_layout {
    Elf64_Ehdr eh{};
    std::vector<Elf64_Phdr> ph;
};

elf_layout read_layout(const std::string & bytes) {
    elf_layout l;
    std::memcpy(&l.eh, bytes.data(), sizeof l.eh);
    l.ph.resize(l.eh.e_phnum);
    std::memcpy(l.ph.data(), bytes.data() + l.eh.e_phoff, l.ph.size() * sizeof(Elf64_Phdr));
    return l;
}

std::string segment_type(uint32_t t) {
    switch (t) {
    case PT_LOAD: return "PT_LOAD";
    case PT_DYNAMIC: return "PT_DYNAMIC";
    case PT_NOTE: return "PT_NOTE";
    case PT_TLS: return "PT_TLS";
    case PT_GNU_EH_FRAME: return "PT_GNU_EH_FRAME";
    case PT_GNU_RELRO: return "PT_GNU_RELRO";
#ifdef PT_GNU_PROPERTY
    case PT_GNU_PROPERTY: return "PT_GNU_PROPERTY";
#endif
    default: return fmt::format("type {:#x}", t);
    }
}

// What the loader must say of the first `cut` bytes of a library laid out
// as `l`: the first of ELF header, program header table, segments (in
// table order) and section header table that does not fit.
std::string truncation_message(const elf_layout & l, uint64_t cut) {
    auto need = [&](const std::string & what, uint64_t off, uint64_t len) {
        return fmt::format("truncated shared library: {} needs bytes [{}, {}) but the file has {} bytes",
                           what, off, off + len, cut);
    };
    if (cut < sizeof(Elf64_Ehdr)) return need("the ELF header", 0, sizeof(Elf64_Ehdr));
    const uint64_t ph_bytes = l.ph.size() * sizeof(Elf64_Phdr);
    if (l.eh.e_phoff + ph_bytes > cut) return need("the program header table", l.eh.e_phoff, ph_bytes);
    for (size_t i = 0; i < l.ph.size(); ++i) {
        const Elf64_Phdr & p = l.ph[i];
        if (p.p_filesz > 0 && p.p_offset + p.p_filesz > cut) {
            return need(fmt::format("segment {} ({})", i, segment_type(p.p_type)), p.p_offset, p.p_filesz);
        }
    }
    const uint64_t sh_bytes = uint64_t(l.eh.e_shnum) * l.eh.e_shentsize;
    if (l.eh.e_shoff != 0 && l.eh.e_shoff + sh_bytes > cut) {
        return need("the section header table", l.eh.e_shoff, sh_bytes);
    }
    return "";
}

TEST_F(RegistryLoad, TruncatedLibrariesAreRefusedWithoutCrashing) {
    const std::string bytes = read_bytes(fake_plugin("variants", "libtessera-fakevar-high"));
    ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
    ASSERT_EQ(bytes[EI_CLASS], ELFCLASS64);
    const elf_layout l = read_layout(bytes);
    const uint64_t ph_end = l.eh.e_phoff + l.ph.size() * sizeof(Elf64_Phdr);
    const Elf64_Phdr * dynamic = nullptr;
    const Elf64_Phdr * last_load = nullptr;
    for (const auto & p : l.ph) {
        if (p.p_type == PT_DYNAMIC) dynamic = &p;
        if (p.p_type == PT_LOAD && p.p_filesz > 0) last_load = &p;
    }
    ASSERT_TRUE(dynamic && last_load);
    const std::vector<uint64_t> cuts = {
        20,                                          // inside the ELF header
        l.eh.e_phoff + sizeof(Elf64_Phdr) + 8,       // inside the program header table
        ph_end,                                      // just after the program headers
        dynamic->p_offset + dynamic->p_filesz / 2,   // mid PT_DYNAMIC
        last_load->p_offset + last_load->p_filesz / 2, // mid last PT_LOAD
        bytes.size() - 1,                            // one byte short
    };

    temp_dir tmp("truncated");
    const fs::path good = tmp.path() / "libtessera-fakevar-good.so";
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-low"), good);
    std::vector<std::pair<fs::path, std::string>> cut_files; // path, dynlib message
    for (size_t k = 0; k < cuts.size(); ++k) {
        SCOPED_TRACE(fmt::format("cut at {} of {} bytes", cuts[k], bytes.size()));
        const std::string why = truncation_message(l, cuts[k]);
        ASSERT_NE(why, "");
        const fs::path p = tmp.path() / fmt::format("libtessera-fakevar-cut{}.so", k);
        write_bytes(p, std::string_view(bytes).substr(0, cuts[k]));
        cut_files.emplace_back(p, fmt::format("{}: {}", p.string(), why));

        // Direct load: an error naming the path; nothing registered or mapped.
        const auto before = snapshot(reg);
        EXPECT_EQ(error_of([&] { reg.load(p); }),
                  fmt::format("backend library '{}': cannot open: {}", p.string(), cut_files.back().second));
        EXPECT_EQ(snapshot(reg), before);
        EXPECT_FALSE(mapped(p));
    }
    EXPECT_EQ(log.all(), "");

    // Among them, load_best still loads the good library.
    load_report rep = reg.load_best("fakevar", tmp.path());
    ASSERT_TRUE(rep.loaded);
    EXPECT_EQ(rep.loaded.path(), good.string());
    EXPECT_EQ(rep.loaded.score(), 3);
    ASSERT_EQ(rep.candidates.size(), cuts.size() + 1);
    EXPECT_EQ(rep.candidates[0].path, good.string());
    EXPECT_EQ(rep.candidates[0].error, "");
    std::string expected_log;
    for (size_t k = 0; k < cut_files.size(); ++k) {
        const auto & [p, why] = cut_files[k];
        const load_candidate & c = rep.candidates[k + 1];
        EXPECT_EQ(c.path, p.string());
        EXPECT_EQ(c.score, -1);
        EXPECT_EQ(c.error, "cannot open: " + why);
        EXPECT_FALSE(mapped(p));
        expected_log += fmt::format("backend library '{}': cannot open: {}\n", p.string(), why);
    }
    EXPECT_EQ(log.all(), expected_log);
    EXPECT_STREQ(reg.init_best().get_device().name(), "Fake0");
}

TEST_F(RegistryLoad, ForeignFilesAreRefusedByTheirHeaders) {
    const std::string bytes = read_bytes(fake_plugin("gpu", "libtessera-fakegpu"));
    ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
    temp_dir tmp("foreign");
    auto patched = [&](const char * name, auto && patch) {
        std::string b = bytes;
        Elf64_Ehdr eh;
        std::memcpy(&eh, b.data(), sizeof eh);
        patch(eh);
        std::memcpy(b.data(), &eh, sizeof eh);
        const fs::path p = tmp.path() / name;
        write_bytes(p, b);
        return p;
    };
    auto expect_refused = [&](const fs::path & p, const std::string & why) {
        expect_load_fails(p, fmt::format("backend library '{}': cannot open: {}: {}", p.string(),
                                         p.string(), why));
    };

    const fs::path empty = tmp.path() / "libtessera-empty.so";
    write_bytes(empty, "");
    expect_refused(empty, "empty file, not a shared library");

    const fs::path script = tmp.path() / "libtessera-script.so";
    write_bytes(script, "INPUT(libtessera-real.so)\n"); // a linker script, as some lib*.so are
    expect_refused(script, "not an ELF file (it does not begin with the ELF magic bytes 7f 45 4c 46)");

    expect_refused(patched("libtessera-elf32.so", [](Elf64_Ehdr & eh) { eh.e_ident[EI_CLASS] = ELFCLASS32; }),
                   "wrong ELF class: a 32-bit library; this tessera is a 64-bit program");
    expect_refused(patched("libtessera-msb.so", [](Elf64_Ehdr & eh) { eh.e_ident[EI_DATA] = ELFDATA2MSB; }),
                   "wrong byte order: a big-endian library on a little-endian machine");
    expect_refused(patched("libtessera-exec.so", [](Elf64_Ehdr & eh) { eh.e_type = ET_EXEC; }),
                   "not a shared library: an executable");
#if defined(__x86_64__)
    expect_refused(patched("libtessera-arm.so", [](Elf64_Ehdr & eh) { eh.e_machine = EM_AARCH64; }),
                   "wrong machine: built for AArch64; this tessera runs on x86-64");
#elif defined(__aarch64__)
    expect_refused(patched("libtessera-x86.so", [](Elf64_Ehdr & eh) { eh.e_machine = EM_X86_64; }),
                   "wrong machine: built for x86-64; this tessera runs on AArch64");
#endif
    expect_refused(patched("libtessera-phent.so", [](Elf64_Ehdr & eh) { eh.e_phentsize = 32; }),
                   "corrupt ELF header: program header entries of 32 bytes (this ELF class uses 56)");
    expect_refused(patched("libtessera-phoff.so", [](Elf64_Ehdr & eh) { eh.e_phoff = ~uint64_t(0) - 8; }),
                   fmt::format("corrupt shared library: the program header table claims {} bytes at "
                               "offset {} (past the end of any file)",
                               uint64_t(read_layout(bytes).eh.e_phnum) * 56, ~uint64_t(0) - 8));

    // Not regular files: refused at once (a FIFO must not block the loader).
    // (expect_load_fails's is_loaded would itself block on the FIFO.)
    const fs::path fifo = tmp.path() / "libtessera-fifo.so";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_EQ(error_of([&] { reg.load(fifo); }),
              fmt::format("backend library '{}': cannot open: {}: not a regular file", fifo.string(),
                          fifo.string()));
    EXPECT_EQ(reg.reg_count(), 0u);
    const fs::path dir = tmp.path() / "libtessera-dir.so";
    fs::create_directory(dir);
    expect_refused(dir, "not a regular file");
    EXPECT_EQ(log.all(), "");
}

// Entries named as variants that are no regular files (a directory, a
// FIFO, a link to a device) are candidates like any other: refused with
// the reason, each with a line on the log (they were passed over without a
// word, absent from `tessera devices`), and the good variant is loaded.
TEST_F(RegistryLoad, LoadBestListsAndRefusesVariantsThatAreNoFiles) {
    temp_dir tmp;
    fs::copy_file(fake_plugin("variants", "libtessera-fakevar-high"), tmp.path() / "libtessera-fakevar-high.so");
    fs::create_directory(tmp.path() / "libtessera-fakevar-dir.so");
    ASSERT_EQ(mkfifo((tmp.path() / "libtessera-fakevar-fifo.so").c_str(), 0600), 0);
    fs::create_symlink("/dev/zero", tmp.path() / "libtessera-fakevar-zero.so");
    const load_report rep = reg.load_best("fakevar", tmp.path());
    ASSERT_TRUE(rep.loaded) << log.all();
    EXPECT_EQ(rep.loaded.path(), (tmp.path() / "libtessera-fakevar-high.so").string());
    ASSERT_EQ(rep.candidates.size(), 4u);
    std::string want_log;
    for (const char * name : {"libtessera-fakevar-dir.so", "libtessera-fakevar-fifo.so", "libtessera-fakevar-zero.so"}) {
        const std::string path = (tmp.path() / name).string();
        const auto c = std::find_if(rep.candidates.begin(), rep.candidates.end(),
                                    [&](const load_candidate & x) { return x.path == path; });
        ASSERT_NE(c, rep.candidates.end()) << name;
        EXPECT_EQ(c->error, "cannot open: " + path + ": not a regular file");
        want_log += "backend library '" + path + "': cannot open: " + path + ": not a regular file\n";
    }
    EXPECT_EQ(log.all(), want_log);
}

// A variant must say who it is: a reg name that is a name, the family its
// file name gives, and at least one usable device. Each that does not is
// refused with a message naming the file, and the next best is loaded (a
// stray library with score 100 used to win and hide the real family).
TEST_F(RegistryLoad, LoadBestRefusesVariantsThatMisstateTheirIdentity) {
    const fs::path badname = fake_plugin("identity", "libtessera-fakeid-badname");
    const fs::path nodev = fake_plugin("identity", "libtessera-fakeid-nodev");
    const fs::path nulldev = fake_plugin("identity", "libtessera-fakeid-nulldev");
    const fs::path other = fake_plugin("identity", "libtessera-fakeid-other");
    const fs::path ok = fake_plugin("identity", "libtessera-fakeid-ok");
    const std::vector<std::pair<fs::path, std::string>> refused = {
        {badname, "its reg's name 'bad name/../x' is not a backend name (1 to 64 of A-Z a-z 0-9 _ -)"},
        {nodev, "it reports no devices (a backend library must offer at least one)"},
        {nulldev, "none of its 1 devices is usable"},
        {other, "its reg is named 'otherfam', but its file name says it holds the 'fakeid' backend"},
    };

    load_report rep = reg.load_best("fakeid", fake_dir("identity"));
    ASSERT_TRUE(rep.loaded);
    EXPECT_STREQ(rep.loaded.name(), "fakeid");
    EXPECT_EQ(rep.loaded.path(), ok.string());
    EXPECT_EQ(rep.loaded.score(), 8);
    ASSERT_EQ(rep.candidates.size(), refused.size() + 1);
    std::string expected_log;
    for (size_t k = 0; k < refused.size(); ++k) {
        const auto & [p, why] = refused[k];
        const std::string msg = fmt::format("backend library '{}': {}", p.string(), why);
        EXPECT_EQ(rep.candidates[k].path, p.string());
        EXPECT_EQ(rep.candidates[k].error, msg);
        if (p == nulldev) expected_log += fmt::format("backend library '{}': device 0 is null; skipped\n", p.string());
        expected_log += msg + "\n";
        EXPECT_FALSE(is_loaded(p)) << p;
    }
    EXPECT_EQ(rep.candidates.back().path, ok.string());
    EXPECT_EQ(rep.candidates.back().error, "");
    EXPECT_EQ(log.all(), expected_log);
    ASSERT_EQ(reg.reg_count(), 1u);
    ASSERT_EQ(reg.device_count(), 1u);
    EXPECT_STREQ(reg.device_at(0).name(), "FakeId0");
    reg.unload(rep.loaded);

    // load() refuses each the same way, leaving nothing behind.
    log.lines.clear();
    for (const auto & [p, why] : refused) {
        expect_load_fails(p, fmt::format("backend library '{}': {}", p.string(), why));
    }
}

TEST_F(RegistryLoad, RegisterBackendRefusesARegNameThatIsNoName) {
    const fs::path lib = fake_plugin("identity", "libtessera-fakeid-badname");
    void * h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr);
    auto init = reinterpret_cast<tsr_backend_init_fn>(dlsym(h, "tessera_backend_init"));
    ASSERT_NE(init, nullptr);
    EXPECT_EQ(error_of([&] { reg.register_backend(init()); }),
              "backend 'bad name/../x': its reg's name 'bad name/../x' is not a backend name (1 to "
              "64 of A-Z a-z 0-9 _ -)");
    EXPECT_EQ(reg.reg_count(), 0u);
    dlclose(h);
}

// TESSERA_BACKEND_PATH naming one CPU variant's library forces that
// variant: it is loaded before the family's best (it was loaded after, and
// refused: "a backend named 'cpu' is already registered"); the log stays
// quiet. Without the variable the best variant of the same folder loads.
TEST_F(RegistryLoad, EnvironmentFileTakesItsFamilysPlace) {
    const fs::path bin(TESSERA_BINARY_DIR);
    const fs::path x64 = bin / "libtessera-cpu-x64.so";
    if (!fs::exists(x64)) GTEST_SKIP() << "no CPU plugins in " << bin << " (TESSERA_CPU_STATIC build)";
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", x64.c_str(), 1), 0);
    reg.load_all(bin);
    unsetenv("TESSERA_BACKEND_PATH");
    const auto cpu = reg.find_reg("cpu");
    ASSERT_TRUE(cpu);
    EXPECT_EQ(fs::path(cpu->path()), x64);
    const std::string logged = log.all();
    EXPECT_EQ(logged.find("already registered"), std::string::npos) << logged;
    registry plain;
    plain.load_all(bin);
    const auto best = plain.find_reg("cpu");
    ASSERT_TRUE(best);
    EXPECT_GE(best->score(), cpu->score());
}

// A TESSERA_BACKEND_PATH file that cannot be loaded is reported under the
// family its file name claims, else under the variable's name: it was
// reported under an empty name, which `tessera devices` printed as
// "   libraries considered:" beneath another backend.
TEST_F(RegistryLoad, FailedEnvironmentFileIsReportedUnderAName) {
    temp_dir tmp("envname");
    for (const auto & [file, name] : std::vector<std::pair<std::string, std::string>>{
             {"libtessera-cpu-junk.so", "cpu"}, {"junk.so", "TESSERA_BACKEND_PATH"}}) {
        const fs::path p = tmp.path() / file;
        {
            std::ofstream f(p);
            f << "not a library\n";
        }
        registry r;
        r.set_log([](std::string_view) {});
        ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", p.c_str(), 1), 0);
        const auto reports = r.load_all(tmp.path());
        unsetenv("TESSERA_BACKEND_PATH");
        ASSERT_FALSE(reports.empty()) << file;
        EXPECT_EQ(reports.front().name, name) << file;
        ASSERT_EQ(reports.front().candidates.size(), 1u) << file;
        EXPECT_EQ(reports.front().candidates[0].path, p.string()) << file;
        EXPECT_NE(reports.front().candidates[0].error.find("not an ELF file"), std::string::npos)
            << reports.front().candidates[0].error;
    }
}

// A bare file name (no '/') is the file in the current folder, as any
// relative path is, for load() and for TESSERA_BACKEND_PATH: dlopen, given
// such a name, searched only the system's library folders, so
// TESSERA_BACKEND_PATH=libtessera-fakecpu.so beside the file failed with
// "cannot open shared object file: No such file or directory".
// A TESSERA_BACKEND_PATH folder this user may not list is named in the log;
// it was searched as an empty folder without a word. (As root, checked in a
// child that becomes nobody: root lists any folder.)
TEST_F(RegistryLoad, UnlistableEnvironmentFolderIsNamed) {
    temp_dir tmp("locked");
    ASSERT_EQ(::chmod(tmp.path().c_str(), 0), 0);
    const auto logged_as_user = [&]() -> std::string {
        int fds[2];
        if (::pipe(fds) != 0) return "pipe failed";
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            std::string out = "cannot become the user";
            const bool root = ::geteuid() == 0;
            if (!root || (::setgroups(0, nullptr) == 0 && ::setgid(65534) == 0 && ::setuid(65534) == 0)) {
                registry r;
                out.clear();
                r.set_log([&](std::string_view msg) { out += std::string(msg) + "\n"; });
                ::setenv("TESSERA_BACKEND_PATH", tmp.path().c_str(), 1);
                r.load_all();
            }
            (void)!::write(fds[1], out.data(), out.size());
            ::_exit(0);
        }
        ::close(fds[1]);
        std::string out;
        char buf[512];
        for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
        ::close(fds[0]);
        int status = 0;
        ::waitpid(pid, &status, 0);
        return out;
    };
    const std::string logged = logged_as_user();
    ::chmod(tmp.path().c_str(), 0700);
    EXPECT_NE(logged.find(fmt::format("TESSERA_BACKEND_PATH='{}': cannot list the folder: Permission denied; ignored",
                                      tmp.path().string())),
              std::string::npos)
        << logged;
}

TEST_F(RegistryLoad, BareFileNameIsTheFileInTheCurrentFolder) {
    temp_dir tmp("bare");
    fs::copy_file(fake_plugin("cpu", "libtessera-fakecpu"), tmp.path() / "libtessera-fakecpu.so");
    const fs::path cwd = fs::current_path();
    fs::current_path(tmp.path());
    std::string direct;
    {
        registry other;
        other.set_log([](std::string_view) {});
        direct = error_of([&] { other.load("libtessera-fakecpu.so"); });
    }
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", "libtessera-fakecpu.so", 1), 0);
    reg.load_all();
    unsetenv("TESSERA_BACKEND_PATH");
    fs::current_path(cwd);
    EXPECT_EQ(direct, "(no error)");
    EXPECT_TRUE(reg.find_reg("fakecpu")) << log.all();
    EXPECT_EQ(log.all().find("cannot open"), std::string::npos) << log.all();
}

// Each problem is logged once per registry: load_all runs again for every
// session (bench: one per model and thread count), and a bad
// TESSERA_BACKEND_PATH or a plugin that fails was named again each time
// (4 times for `bench -m M -m M -t 1,2`). The reports still list them.
TEST_F(RegistryLoad, EachProblemIsLoggedOnce) {
    temp_dir tmp("once");
    const std::string missing = (tmp.path() / "nonexistent").string();
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", missing.c_str(), 1), 0);
    reg.load_all();
    reg.load_all();
    unsetenv("TESSERA_BACKEND_PATH");
    const fs::path lib = fake_plugin("noentry", "libtessera-noentry");
    const std::string msg = fmt::format("backend library '{}': has no 'tessera_backend_init' symbol (not a tessera "
                                        "backend)",
                                        lib.string());
    for (int k = 0; k < 2; ++k) {
        const load_report rep = reg.load_best("noentry", fake_dir("noentry"));
        ASSERT_EQ(rep.candidates.size(), 1u);
        EXPECT_EQ(rep.candidates[0].error, msg);
    }
    EXPECT_EQ(log.all(), fmt::format("TESSERA_BACKEND_PATH='{}' is neither a regular file nor a directory; ignored\n", missing) +
                             msg + "\n");
}

// The reported case: libtessera-cpu-x.so (reg name "bad name/../x") and
// libtessera-cpu-nodev.so (no devices), both score 100, beside the real
// CPU variant plugins: a real one is loaded and its CPU device is used.
TEST_F(RegistryLoad, StrayLibrariesCannotTakeTheCpuFamily) {
    const fs::path bin(TESSERA_BINARY_DIR);
    if (!fs::exists(bin / "libtessera-cpu-x64.so")) {
        GTEST_SKIP() << "no CPU plugins in " << bin << " (TESSERA_CPU_STATIC build)";
    }
    const fs::path x = fake_plugin("cpuid", "libtessera-cpu-x");
    const fs::path nodev = fake_plugin("cpuid", "libtessera-cpu-nodev");
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", bin.c_str(), 1), 0);
    load_report rep = reg.load_best("cpu", fake_dir("cpuid"));
    unsetenv("TESSERA_BACKEND_PATH");
    ASSERT_TRUE(rep.loaded);
    EXPECT_STREQ(rep.loaded.name(), "cpu");
    EXPECT_EQ(fs::path(rep.loaded.path()).parent_path(), bin);
    EXPECT_GT(rep.loaded.score(), 0);
    EXPECT_LT(rep.loaded.score(), 100);
    ASSERT_TRUE(reg.best_device());
    EXPECT_EQ(reg.best_device()->type(), TSR_DEVICE_TYPE_CPU);
    ASSERT_GE(rep.candidates.size(), 3u);
    // Equal scores keep the search order (file names sorted).
    EXPECT_EQ(rep.candidates[0].path, nodev.string());
    EXPECT_EQ(rep.candidates[0].error,
              fmt::format("backend library '{}': it reports no devices (a backend library must "
                          "offer at least one)",
                          nodev.string()));
    EXPECT_EQ(rep.candidates[1].path, x.string());
    EXPECT_EQ(rep.candidates[1].error,
              fmt::format("backend library '{}': its reg's name 'bad name/../x' is not a backend "
                          "name (1 to 64 of A-Z a-z 0-9 _ -)",
                          x.string()));
    EXPECT_FALSE(is_loaded(x));
    EXPECT_FALSE(is_loaded(nodev));
}

// A C++ exception thrown across the C ABI while a library is loaded (from
// its score, its init, or a table function) refuses that library with a
// message naming it, and the next variant is loaded: it went up to the
// command, unnamed ("boom in ..."), and no backend of the family was loaded.
TEST_F(RegistryLoad, ExceptionsThrownAcrossTheCAbiRefuseTheLibrary) {
    const std::vector<std::pair<std::string, std::string>> refused = {
        {"score", "boom in tessera_backend_score"},
        {"init", "boom in tessera_backend_init"},
        {"regname", "boom in get_name"},
        {"count", "boom in get_device_count"},
        {"device", "boom in get_device"},
        {"devname", "an exception that is not a std::exception"},
    };
    const auto message = [](const fs::path & p, const std::string & why) {
        return fmt::format("backend library '{}': threw an exception across the C ABI ({})", p.string(), why);
    };
    load_report rep = reg.load_best("throwing", fake_dir("throwing"));
    ASSERT_TRUE(rep.loaded) << log.all();
    EXPECT_EQ(rep.loaded.path(), fake_plugin("throwing", "libtessera-throwing-ok").string());
    EXPECT_EQ(rep.loaded.score(), 1);
    ASSERT_EQ(reg.device_count(), 1u);
    EXPECT_STREQ(reg.device_at(0).name(), "NoThrow0");
    ASSERT_EQ(rep.candidates.size(), refused.size() + 1);
    std::string expected_log;
    // The one whose score threw has no score (-1): it is listed last but one.
    for (size_t k = 0; k < refused.size(); ++k) {
        const auto & [variant, why] = refused[k];
        const fs::path p = fake_plugin("throwing", "libtessera-throwing-" + variant);
        expected_log += message(p, why) + "\n";
        const size_t at = k == 0 ? refused.size() : k - 1;
        EXPECT_EQ(rep.candidates[at].path, p.string());
        EXPECT_EQ(rep.candidates[at].error, message(p, why));
        EXPECT_EQ(rep.candidates[at].score, k == 0 ? -1 : 100 - 10 * int(k));
        EXPECT_FALSE(is_loaded(p)) << p;
    }
    EXPECT_EQ(rep.candidates[refused.size() - 1].path, rep.loaded.path());
    EXPECT_EQ(log.all(), expected_log);
    reg.unload(rep.loaded);

    // load() refuses each the same way, leaving nothing behind.
    for (const auto & [variant, why] : refused) {
        const fs::path p = fake_plugin("throwing", "libtessera-throwing-" + variant);
        expect_load_fails(p, message(p, why));
    }
}

// The same refusals when the variants are scored in this process (another
// thread is running, so no probe process is forked): the score that threw
// is named alike, and the loader goes on to the good variant.
TEST_F(RegistryLoad, ExceptionsAreRefusedAlikeWhenScoredInProcess) {
    detail::set_probe_helper(std::string()); // no helper program: with a second thread, no probe at all
    std::atomic<bool> stop{false};
    std::thread other([&] {
        while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    load_report rep = reg.load_best("throwing", fake_dir("throwing"));
    stop = true;
    other.join();
    ASSERT_TRUE(rep.loaded) << log.all();
    EXPECT_EQ(rep.loaded.path(), fake_plugin("throwing", "libtessera-throwing-ok").string());
    const fs::path score = fake_plugin("throwing", "libtessera-throwing-score");
    bool seen = false;
    for (const load_candidate & c : rep.candidates) {
        if (c.path != score.string()) continue;
        seen = true;
        EXPECT_EQ(c.score, -1);
        EXPECT_EQ(c.error, fmt::format("backend library '{}': threw an exception across the C ABI (boom in "
                                       "tessera_backend_score)",
                                       score.string()));
    }
    EXPECT_TRUE(seen);
    EXPECT_NE(log.all().find("boom in tessera_backend_score"), std::string::npos) << log.all();
    detail::set_probe_helper(std::nullopt);
}

// A device whose default buffer type is unusable (here NULL) is skipped at
// load, and a library left without devices is refused, so load_best loads
// the next variant: it was accepted, then `devices` failed mid-listing
// ("unusable default buffer type: the buffer type is null") and a CPU
// variant with it that scored higher than the real one made `run` fail.
TEST_F(RegistryLoad, DeviceWithoutADefaultBufferTypeIsSkipped) {
    const fs::path bad = fake_plugin("nullbuft", "libtessera-fakebuft-null");
    const std::string skipped = fmt::format("backend library '{}': device 0 skipped: unusable default buffer type: "
                                            "the buffer type is null",
                                            bad.string());
    const std::string refused = fmt::format("backend library '{}': none of its 1 devices is usable", bad.string());
    load_report rep = reg.load_best("fakebuft", fake_dir("nullbuft"));
    ASSERT_TRUE(rep.loaded) << log.all();
    EXPECT_EQ(rep.loaded.path(), fake_plugin("nullbuft", "libtessera-fakebuft-ok").string());
    ASSERT_EQ(rep.candidates.size(), 2u);
    EXPECT_EQ(rep.candidates[0].path, bad.string());
    EXPECT_EQ(rep.candidates[0].error, refused);
    EXPECT_FALSE(is_loaded(bad));
    EXPECT_EQ(log.all(), skipped + "\n" + refused + "\n");
    ASSERT_EQ(reg.device_count(), 1u);
    EXPECT_STREQ(reg.device_at(0).name(), "OkBuft0");
    EXPECT_STREQ(reg.device_at(0).default_buffer_type().name(), "OkBuftHost");

    // One of two devices without one: the other is kept, and every device
    // listed has a default buffer type.
    log.lines.clear();
    const fs::path half = fake_plugin("nullbuft2", "libtessera-fakebuft2");
    backend_reg r = reg.load(half);
    ASSERT_EQ(r.devices().size(), 1u);
    EXPECT_STREQ(r.devices()[0].name(), "HalfBuft0");
    EXPECT_FALSE(reg.find_device("HalfBuft1"));
    for (const device & d : reg.devices()) EXPECT_EQ(d.default_buffer_type().alignment(), 32u) << d.name();
    EXPECT_EQ(log.all(), fmt::format("backend library '{}': device 1 skipped: unusable default buffer type: the "
                                     "buffer type is null\n",
                                     half.string()));
}

// A device's name and description are read once, at load: a backend whose
// getters return NULL on a later call crashed the registry (strlen(NULL) in
// add_entry when the next library was loaded, and in find_device).
TEST_F(RegistryLoad, DeviceNamesAreReadOnceAtLoad) {
    reg.load(fake_plugin("nameonce", "libtessera-fakeonce"));
    reg.load(fake_plugin("gpu", "libtessera-fakegpu")); // compares its device names with Once0
    ASSERT_EQ(reg.device_count(), 2u);
    const auto d = reg.find_device("once0");
    ASSERT_TRUE(d);
    EXPECT_STREQ(d->name(), "Once0");
    EXPECT_STREQ(d->description(), "a fake fakeonce device");
    EXPECT_STREQ(d->props().name, "Once0");
    EXPECT_STREQ(reg.find_device("FakeGPU0")->name(), "FakeGPU0");
    EXPECT_EQ(error_of([&] { reg.init_by_name("Nope"); }),
              "no device named 'Nope' (devices: Once0 (GPU) FakeGPU0 (GPU))");
    EXPECT_STREQ(reg.init_by_name("Once0").get_device().name(), "Once0");

    // A NULL description is an empty one.
    reg.load(fake_plugin("descnull", "libtessera-fakedesc"));
    EXPECT_STREQ(reg.find_device("NoDesc0")->description(), "");
    EXPECT_EQ(log.all(), "");
}

// A device name must be 1 to 64 printable ASCII characters other than space,
// quote and backslash: one with a newline, an escape sequence, a space, 65
// characters or UTF-8 is skipped, printed escaped; the library's other
// device is kept. Such names reached the terminal as they were.
TEST_F(RegistryLoad, DeviceNamesThatAreNoNamesAreSkipped) {
    const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
        {"libtessera-fakenl", "Evil\\x0a0", "Nl1"},
        {"libtessera-fakeesc", "\\x1b[31mRed", "Esc1"},
        {"libtessera-fakespace", "Two words", "Space1"},
        {"libtessera-fakelongname", "L" + std::string("1234567890123456789012345678901234567890123456789012345678901") +
                                         "23...",
         "Long1"},
        {"libtessera-fakeutf", "Gr\\xc3\\xbc\\xc3\\x9f", "Utf1"},
    };
    for (const auto & [stem, shown, kept] : cases) {
        log.lines.clear();
        const fs::path lib = fake_plugin("devnames", stem);
        backend_reg r = reg.load(lib);
        const auto devs = r.devices();
        ASSERT_EQ(devs.size(), 1u) << stem;
        EXPECT_STREQ(devs[0].name(), kept.c_str());
        EXPECT_EQ(log.all(), fmt::format("backend library '{}': device 0 is named '{}', which is not a device name "
                                         "(1 to 64 printable ASCII characters other than space, quote and "
                                         "backslash); skipped\n",
                                         lib.string(), shown));
    }
}

// A device whose name is already registered is skipped, naming the library
// that has it; a library left without devices is refused (load_best then
// loads the next variant) instead of taking its family's place with none.
TEST_F(RegistryLoad, DeviceNameClashesNameBothLibrariesAndRefuseAnEmptiedOne) {
    const fs::path gpu = fake_plugin("gpu", "libtessera-fakegpu");
    reg.load(gpu);
    const std::string owner = fmt::format("by backend 'fakegpu' ({})", gpu.string());
    const fs::path clash = fake_plugin("clash", "libtessera-fakeclash");
    expect_load_fails(clash, fmt::format("backend library '{}': none of its 1 devices can be registered: a device "
                                         "named 'FakeGPU0' is already registered {}",
                                         clash.string(), owner));

    const fs::path clash2 = fake_plugin("clash2", "libtessera-fakeclash2");
    backend_reg r = reg.load(clash2);
    ASSERT_EQ(r.devices().size(), 1u);
    EXPECT_STREQ(r.devices()[0].name(), "FakeGPU1");
    EXPECT_EQ(log.all(), fmt::format("backend library '{}': a device named 'FakeGPU0' is already registered {}; "
                                     "skipped\n",
                                     clash2.string(), owner));

    log.lines.clear();
    const fs::path high = fake_plugin("clashvar", "libtessera-fakedup-high");
    load_report rep = reg.load_best("fakedup", fake_dir("clashvar"));
    ASSERT_TRUE(rep.loaded) << log.all();
    EXPECT_EQ(rep.loaded.path(), fake_plugin("clashvar", "libtessera-fakedup-low").string());
    ASSERT_EQ(rep.candidates.size(), 2u);
    EXPECT_EQ(rep.candidates[0].error,
              fmt::format("backend library '{}': none of its 1 devices can be registered: a device named 'FakeGPU0' "
                          "is already registered {}",
                          high.string(), owner));
    EXPECT_FALSE(is_loaded(high));
    EXPECT_TRUE(reg.find_device("DupOk0"));
}

// The reported case: libtessera-blas.so naming its device "CPU" beside the
// real CPU plugins. The CPU family is loaded first, so the real CPU device
// keeps its name and the blas library is refused naming the CPU library
// (the CPU library lost its device, and `run` found no CPU backend).
TEST_F(RegistryLoad, APluginCannotTakeTheCpuDevicesName) {
    const fs::path bin(TESSERA_BINARY_DIR);
    if (!fs::exists(bin / "libtessera-cpu-x64.so")) GTEST_SKIP() << "no CPU plugins in " << bin;
    const fs::path blas = fake_plugin("hidecpu", "libtessera-blas");
    ASSERT_EQ(setenv("TESSERA_BACKEND_PATH", fake_dir("hidecpu").c_str(), 1), 0);
    const auto reports = reg.load_all(bin);
    unsetenv("TESSERA_BACKEND_PATH");
    const auto cpu = reg.find_reg("cpu");
    ASSERT_TRUE(cpu) << log.all();
    EXPECT_EQ(fs::path(cpu->path()).parent_path(), bin);
    EXPECT_FALSE(reg.find_reg("blas"));
    ASSERT_EQ(reg.device_count(), 1u);
    EXPECT_EQ(reg.device_at(0).reg().path(), cpu->path());
    EXPECT_STREQ(reg.device_at(0).name(), "CPU");
    EXPECT_NE(log.all().find(fmt::format("backend library '{}': none of its 1 devices can be registered: a device "
                                         "named 'CPU' is already registered by backend 'cpu' ({})\n",
                                         blas.string(), cpu->path())),
              std::string::npos)
        << log.all();
    EXPECT_FALSE(is_loaded(blas));
}

// Buffer type results that break backend.h are refused with the buffer
// type's name: an alignment that is not a power of two or absurd (it was
// used as it was), a buffer whose base address is NULL (tensors were placed
// at small addresses). The refused buffer is freed.
TEST_F(RegistryLoad, BufferTypeResultsAreChecked) {
    reg.load(fake_plugin("buftbad", "libtessera-fakealign48"));
    reg.load(fake_plugin("buftbad", "libtessera-fakealignmax"));
    reg.load(fake_plugin("buftbad", "libtessera-fakealignhuge"));
    backend_reg nullbase = reg.load(fake_plugin("buftbad", "libtessera-fakebasenull"));
    EXPECT_EQ(error_of([&] { reg.find_device("AlignHuge0")->default_buffer_type().alignment(); }),
              fmt::format("buffer type 'AlignHugeHost': its alignment {} is above {} (corrupt)", size_t(1) << 40,
                          buffer_type::max_alignment));
    EXPECT_EQ(error_of([&] { reg.find_device("Align480")->default_buffer_type().alignment(); }),
              "buffer type 'Align48Host': its alignment 48 is not a power of two (backend.h requires one)");
    EXPECT_EQ(error_of([&] { reg.find_device("AlignMax0")->default_buffer_type().alignment(); }),
              fmt::format("buffer type 'AlignMaxHost': its alignment {} is not a power of two (backend.h requires one)",
                          SIZE_MAX));
    EXPECT_EQ(error_of([&] { reg.find_device("BaseNull0")->default_buffer_type().alloc(64); }),
              "buffer of buffer type 'BaseNullHost': its base address is null (backend.h forbids it)");
    auto live = reinterpret_cast<int (*)()>(nullbase.proc_address("fake_live_objects"));
    ASSERT_NE(live, nullptr);
    EXPECT_EQ(live(), 0);
    EXPECT_EQ(reg.find_device("BaseNull0")->default_buffer_type().alignment(), 32u);
}

} // namespace
} // namespace tessera::test
