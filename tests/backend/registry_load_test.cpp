// Loading backend plugins: every failure's exact message, the registry left
// unchanged, libraries not left loaded; the C ABI version rules.
#include <gtest/gtest.h>

#include <fmt/core.h>

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
    EXPECT_EQ(error_of([&] { reg.init_best(); }),
              "no GPU, integrated GPU or CPU device is available (no devices are registered; "
              "were the backends loaded with load_all?)");
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
    EXPECT_EQ(log.all(), "");

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
                  "device 'OtherGPU0': a device named 'OtherGPU0' is already registered");
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

} // namespace
} // namespace tessera::test
