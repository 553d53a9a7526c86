// Unloading backends (refused while objects are alive), repeated
// load/init/free/unload, and concurrent lookups while another family is
// loaded and unloaded.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <fmt/core.h>

#include "backend/test_support.hpp"
#include "tessera/core/error.hpp"

namespace tessera::test {
namespace {

using live_fn = int (*)();

int live_objects(const backend_reg & r) {
    auto fn = r.proc<live_fn>("fake_live_objects");
    return fn ? fn() : -1;
}

TEST(RegistryUnload, RefusedWhileABackendIsAlive) {
    registry reg;
    const fs::path lib = fake_plugin("gpu", "libtessera-fakegpu");
    backend_reg r = reg.load(lib);
    backend be = reg.init_by_name("FakeGPU0");
    const auto before = snapshot(reg);
    EXPECT_EQ(error_of([&] { reg.unload(r); }),
              fmt::format("cannot unload backend 'fakegpu' ({}): 1 backend(s), 0 buffer(s) and 0 "
                          "other object(s) made by it are still alive; free them first",
                          lib.string()));
    EXPECT_EQ(snapshot(reg), before);
    EXPECT_STREQ(be.name(), "FakeGPU"); // still usable
    EXPECT_EQ(live_objects(r), 1);
    be.reset();
    EXPECT_EQ(live_objects(r), 0);
    reg.unload(r);
    EXPECT_EQ(reg.reg_count(), 0u);
    EXPECT_EQ(reg.device_count(), 0u);
    EXPECT_FALSE(is_loaded(lib));
    // Handles kept from before fail cleanly: version() and get() read the
    // unloaded library's table (version() crashed); name, path and score
    // are kept.
    const std::string gone = fmt::format("backend 'fakegpu' ({}) was unloaded; its devices and buffer types can "
                                         "no longer be used",
                                         lib.string());
    EXPECT_EQ(error_of([&] { r.devices(); }), gone);
    EXPECT_EQ(error_of([&] { r.version(); }), gone);
    EXPECT_EQ(error_of([&] { r.get(); }), gone);
    EXPECT_STREQ(r.name(), "fakegpu");
    EXPECT_EQ(r.path(), lib.string());
    EXPECT_EQ(error_of([&] { reg.unload(r); }),
              fmt::format("unload: backend 'fakegpu' ({}) is not registered here", lib.string()));
}

TEST(RegistryUnload, RefusedWhileABufferIsAlive) {
    registry reg;
    backend_reg r = reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
    device d = r.devices().at(0);
    buffer_type bt = d.default_buffer_type();
    buffer b1 = bt.alloc(64);
    buffer b2 = bt.alloc(0);
    const std::string msg = error_of([&] { reg.unload(r); });
    EXPECT_NE(msg.find("0 backend(s), 2 buffer(s) and 0 other object(s)"), std::string::npos) << msg;
    b1.reset();
    buffer moved = std::move(b2);
    EXPECT_FALSE(b2);
    EXPECT_NE(error_of([&] { reg.unload(r); }).find("1 buffer(s)"), std::string::npos);
    moved = buffer();
    EXPECT_EQ(live_objects(r), 0);
    reg.unload(r);
    EXPECT_NE(error_of([&] { bt.alloc(8); }).find("was unloaded"), std::string::npos);
    EXPECT_NE(error_of([&] { d.init(); }).find("was unloaded"), std::string::npos);
}

TEST(RegistryUnload, ObjectsOutlivingTheRegistryKeepTheLibraryLoaded) {
    const fs::path lib = fake_plugin("igpu", "libtessera-fakeigpu");
    backend be;
    {
        registry reg;
        reg.load(lib);
        be = reg.init_best();
    }
    EXPECT_TRUE(is_loaded(lib));
    EXPECT_STREQ(be.name(), "FakeIGPU");
    be.reset();
    EXPECT_FALSE(is_loaded(lib));
}

TEST(RegistryUnload, LoadInitFreeUnloadLoop) {
    registry reg;
    const fs::path lib = fake_plugin("cpu", "libtessera-fakecpu");
    for (int i = 0; i < 100; ++i) {
        backend_reg r = reg.load(lib);
        {
            backend be = reg.init_by_type(TSR_DEVICE_TYPE_CPU);
            buffer b = be.get_device().default_buffer_type().alloc(size_t(1) << 12);
            b.clear(uint8_t(i));
            EXPECT_EQ(static_cast<uint8_t *>(b.base())[4095], uint8_t(i));
            EXPECT_EQ(live_objects(r), 2);
        }
        EXPECT_EQ(live_objects(r), 0);
        reg.unload(r);
        ASSERT_FALSE(is_loaded(lib)) << "iteration " << i;
    }
}

TEST(RegistryUnload, ConcurrentLookupsWhileAnotherFamilyLoadsAndUnloads) {
    registry reg;
    reg.set_log(nullptr);
    reg.load(fake_plugin("gpu", "libtessera-fakegpu"));
    reg.load(fake_plugin("cpu", "libtessera-fakecpu"));
    const fs::path churn = fake_plugin("igpu", "libtessera-fakeigpu");
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 6; ++t) {
        readers.emplace_back([&, t] {
            int iter = 0;
            while (!stop.load() || iter < 200) {
                ++iter;
                auto gpu = reg.find_device("fakegpu0");
                auto cpu = reg.find_device(TSR_DEVICE_TYPE_CPU);
                if (!gpu || !cpu || !reg.find_reg("FAKECPU")) ++failures;
                if (reg.device_count() < 2 || reg.devices().size() < 2) ++failures;
                // The best device is the GPU whether or not the IGPU is registered.
                backend be = reg.init_best();
                if (std::string(be.get_device().name()) != "FakeGPU0") ++failures;
                if (t % 2 == 0) {
                    buffer b = gpu->default_buffer_type().alloc(256);
                    if (b.size() != 256) ++failures;
                }
            }
        });
    }
    for (int i = 0; i < 50; ++i) {
        backend_reg r = reg.load(churn);
        reg.unload(r);
    }
    stop = true;
    for (auto & th : readers) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(reg.reg_count(), 2u);
}

} // namespace
} // namespace tessera::test
