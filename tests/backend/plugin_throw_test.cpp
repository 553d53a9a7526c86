// A C++ exception a loaded backend plugin lets escape from one of its C
// functions (backend.h forbids it) becomes that call's error or failure
// value, with a message naming the backend library and the call, and the
// program goes on: free slots called from destructors ended it in
// std::terminate (noexcept), and the other calls let the exception unwind
// through the plugin's C frames unnamed ("boom in ...").
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <string>

#include "backend/test_support.hpp"
#include "tessera/backend/backend.hpp"
#include "tessera/backend/buffer_type.hpp"
#include "tessera/backend/device.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/tensor.hpp"

namespace tessera::test {
namespace {

class PluginThrow : public ::testing::Test {
protected:
    void SetUp() override {
        r = reg.load(lib);
        set_throw = r.proc<void (*)(const char *)>("throwing_set_throw");
        live = r.proc<int (*)()>("throwing_live_objects");
        auto reset = r.proc<void (*)()>("throwing_reset");
        ASSERT_TRUE(set_throw && live && reset);
        reset(); // the library stays loaded after a test that leaked an object
        dev = *reg.find_device("Throwing0");
    }
    void TearDown() override {
        if (set_throw) set_throw(nullptr);
    }

    // The message for `call` throwing std::runtime_error("boom in <call>").
    std::string message(const std::string & call) const {
        return fmt::format("backend 'throwafter' ({}): {} threw an exception (boom in {}); a backend must "
                           "report failures through its return value",
                           lib.string(), call, call);
    }
    // What the host writes on stderr for a report of `msg`.
    static std::string reported(const std::string & msg) { return "tessera: " + msg + "\n"; }

    const fs::path lib = fake_plugin("throwafter", "libtessera-throwafter");
    registry reg;
    backend_reg r;
    device dev;
    void (*set_throw)(const char *) = nullptr;
    int (*live)() = nullptr;
};

// The buffer's destructor (buffer::reset) reports it and leaks the buffer;
// its library stays loaded (unload refuses), and the backend still works.
TEST_F(PluginThrow, BufferFreeThatThrowsIsReportedAndTheBufferLeaked) {
    {
        buffer b = dev.default_buffer_type().alloc(64);
        EXPECT_EQ(live(), 1);
        set_throw("free_buffer");
        ::testing::internal::CaptureStderr();
    } // ~buffer
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              reported(message("free_buffer") + "; the buffer is leaked"));
    EXPECT_EQ(live(), 1); // not freed, and not tried again
    set_throw(nullptr);
    EXPECT_EQ(error_of([&] { reg.unload(r); }),
              fmt::format("cannot unload backend 'throwafter' ({}): 0 backend(s), 1 buffer(s) and 0 other "
                          "object(s) made by it are still alive; free them first",
                          lib.string()));
    buffer again = dev.default_buffer_type().alloc(64);
    EXPECT_EQ(live(), 2);
    again.reset();
    EXPECT_FALSE(again);
    EXPECT_EQ(live(), 1);
}

TEST_F(PluginThrow, BackendFreeThatThrowsIsReportedAndTheBackendLeaked) {
    backend be = dev.init();
    EXPECT_EQ(live(), 1);
    set_throw("free");
    ::testing::internal::CaptureStderr();
    be.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("free") + "; the backend is leaked"));
    EXPECT_FALSE(be);
    EXPECT_EQ(live(), 1);
    // Moving over a handle frees what it held the same way.
    backend other = dev.init();
    ::testing::internal::CaptureStderr();
    other = backend();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("free") + "; the backend is leaked"));
    EXPECT_EQ(live(), 2);
}

// graph_compute returns FAILED (what a failed compute returns) and reports
// why; the next compute runs.
TEST_F(PluginThrow, GraphComputeThatThrowsReturnsFailed) {
    backend be = dev.init();
    const tsr_graph_view empty{};
    set_throw("graph_compute");
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(be.graph_compute(empty), TSR_STATUS_FAILED);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("graph_compute")));
    set_throw(nullptr);
    EXPECT_EQ(be.graph_compute(empty), TSR_STATUS_SUCCESS);
}

TEST_F(PluginThrow, GraphPlanCallsThatThrow) {
    backend be = dev.init();
    graph g;
    set_throw("graph_plan_create");
    EXPECT_EQ(error_of([&] { graph_plan p(be, g); }), message("graph_plan_create"));
    EXPECT_EQ(live(), 1);

    set_throw(nullptr);
    graph_plan p(be, g);
    EXPECT_EQ(live(), 2);
    set_throw("graph_plan_compute");
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(p.compute(), TSR_STATUS_FAILED);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("graph_plan_compute")));

    set_throw("graph_plan_free");
    ::testing::internal::CaptureStderr();
    p.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              reported(message("graph_plan_free") + "; the graph plan is leaked"));
    EXPECT_FALSE(p);
    EXPECT_EQ(live(), 2);
}

// tensor_set / tensor_get (and tensor_memset through set_tensor) throw
// tessera::error, as for their other failures; a tensor reached through its
// buffer is named by the buffer's type.
TEST_F(PluginThrow, SetAndGetTensorThatThrowAreErrors) {
    buffer b = dev.default_buffer_type().alloc(64);
    context ctx;
    tsr_tensor * t = ctx.new_tensor(TSR_TYPE_F32, {4});
    b.place(t, 0);
    const float in[4] = {1, 2, 3, 4};
    float out[4] = {};
    const auto msg = [](const char * call) {
        return fmt::format("buffer type 'ThrowingHost': {} threw an exception (boom in {}); a backend must report "
                           "failures through its return value",
                           call, call);
    };
    set_throw("set_tensor");
    EXPECT_EQ(error_of([&] { tensor_set(t, in, 0, sizeof in); }), msg("set_tensor"));
    EXPECT_EQ(error_of([&] { tensor_memset(t, 0, 0, sizeof in); }), msg("set_tensor"));
    set_throw(nullptr);
    tensor_set(t, in, 0, sizeof in);
    set_throw("get_tensor");
    EXPECT_EQ(error_of([&] { tensor_get(t, out, 0, sizeof out); }), msg("get_tensor"));
    set_throw(nullptr);
    tensor_get(t, out, 0, sizeof out);
    EXPECT_EQ(out[3], 4.0f);
}

TEST_F(PluginThrow, DeviceMemoryThatThrowsIsAnError) {
    set_throw("get_memory");
    EXPECT_EQ(error_of([&] { dev.memory(); }), message("get_memory"));
    EXPECT_EQ(error_of([&] { dev.props(); }), message("get_memory"));
    set_throw(nullptr);
    EXPECT_EQ(dev.memory(), std::make_pair(size_t(1000), size_t(1000)));
}

// Calls whose wrapper throws when the backend refuses become that error.
TEST_F(PluginThrow, MakingObjectsThatThrowIsAnError) {
    set_throw("alloc_buffer");
    EXPECT_EQ(error_of([&] { dev.default_buffer_type().alloc(64); }), message("alloc_buffer"));
    set_throw("init_backend");
    EXPECT_EQ(error_of([&] { dev.init(); }), message("init_backend"));
    set_throw(TSR_EXT_THREADPOOL_NEW);
    EXPECT_EQ(error_of([&] { threadpool pool(r, 2); }), message(TSR_EXT_THREADPOOL_NEW));
    EXPECT_EQ(live(), 0);
    // Nothing was leased: the library unloads.
    set_throw(nullptr);
    set_throw = nullptr; // (it goes with the library)
    reg.unload(r);
    EXPECT_EQ(reg.reg_count(), 0u);
}

// Queries answer "no" (their failure value) and report why.
TEST_F(PluginThrow, QueriesThatThrowAnswerNo) {
    context ctx;
    tsr_tensor * t = ctx.new_tensor(TSR_TYPE_F32, {4});
    EXPECT_TRUE(dev.supports_op(t));
    set_throw("supports_op");
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(dev.supports_op(t));
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("supports_op")));

    backend be = dev.init();
    set_throw("get_proc_address");
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(be.has_n_threads());
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), reported(message("get_proc_address")));
}

TEST_F(PluginThrow, ThreadPoolCallsThatThrow) {
    threadpool pool(r, 2);
    EXPECT_EQ(live(), 1);
    set_throw(TSR_EXT_THREADPOOL_PAUSE);
    EXPECT_EQ(error_of([&] { pool.pause(); }), message(TSR_EXT_THREADPOOL_PAUSE));
    set_throw(TSR_EXT_THREADPOOL_FREE);
    ::testing::internal::CaptureStderr();
    pool.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              reported(message(TSR_EXT_THREADPOOL_FREE) + "; the thread pool is leaked"));
    EXPECT_FALSE(pool);
    EXPECT_EQ(live(), 1);
}

} // namespace
} // namespace tessera::test
