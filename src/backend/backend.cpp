// backend/backend.cpp — backend, graph plan and thread pool handles (backend.hpp).
#include "tessera/backend/backend.hpp"

#include <utility>

#include <fmt/core.h>

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/backend/backend_reg.hpp"
#include "tessera/backend/buffer.hpp"
#include "tessera/backend/device.hpp"
#include "tessera/core/error.hpp"

namespace tessera {

const char * status_name(tsr_status s) {
    switch (s) {
    case TSR_STATUS_SUCCESS: return "SUCCESS";
    case TSR_STATUS_FAILED: return "FAILED";
    case TSR_STATUS_ALLOC_FAILED: return "ALLOC_FAILED";
    case TSR_STATUS_ABORTED: return "ABORTED";
    }
    return "UNKNOWN";
}

// ------------------------------------------------------------------- backend

backend::backend(tsr_backend * b, detail::lease l) : be_(b), lease_(std::move(l)) {}

backend::backend(backend && o) noexcept : be_(o.be_), lease_(std::move(o.lease_)) {
    o.be_ = nullptr;
}

backend & backend::operator=(backend && o) noexcept {
    if (this != &o) {
        reset();
        be_ = o.be_;
        o.be_ = nullptr;
        lease_ = std::move(o.lease_);
    }
    return *this;
}

void backend::reset() noexcept {
    if (be_) {
        tsr_backend * b = std::exchange(be_, nullptr);
        if (!detail::guarded_free({lease_.entry().get()}, "free", "backend", [&] { b->iface->free(b); })) {
            detail::abandon_lease(std::move(lease_));
        }
    }
    lease_.reset();
}

static tsr_backend * need(tsr_backend * b) {
    if (b == nullptr) throw error("backend: use of an empty backend handle");
    return b;
}

const char * backend::name() const {
    tsr_backend * b = need(be_);
    const char * s = detail::guarded({lease_.entry().get()}, "get_name", [&] { return b->iface->get_name(b); });
    return detail::str_or_empty(s);
}

device backend::get_device() const { return device(need(be_)->device, lease_.entry()); }

backend_reg backend::reg() const {
    need(be_);
    return backend_reg(lease_.entry());
}

tsr_status backend::graph_compute(graph & g) {
    const tsr_graph_view v = g.view();
    return graph_compute(v);
}

tsr_status backend::graph_compute(const tsr_graph_view & g) {
    tsr_backend * b = need(be_);
    return detail::guarded_or({lease_.entry().get()}, "graph_compute", TSR_STATUS_FAILED,
                              [&] { return b->iface->graph_compute(b, &g); });
}

void backend::set_tensor_async(tsr_tensor * t, const void * data, size_t offset, size_t size) {
    tsr_backend * b = need(be_);
    auto fn = TSR_OPT_SLOT(tsr_backend_i, b->iface, set_tensor_async);
    if (fn == nullptr || t == nullptr || t->data == nullptr) {
        tensor_set(t, data, offset, size); // also reports the errors
        return;
    }
    detail::check_tensor_range(t, offset, size, "set_tensor_async");
    if (size > 0) detail::guarded({lease_.entry().get()}, "set_tensor_async", [&] { fn(b, t, data, offset, size); });
}

void backend::get_tensor_async(const tsr_tensor * t, void * data, size_t offset, size_t size) {
    tsr_backend * b = need(be_);
    auto fn = TSR_OPT_SLOT(tsr_backend_i, b->iface, get_tensor_async);
    if (fn == nullptr || t == nullptr || t->data == nullptr) {
        tensor_get(t, data, offset, size);
        return;
    }
    detail::check_tensor_range(t, offset, size, "get_tensor_async");
    if (size > 0) detail::guarded({lease_.entry().get()}, "get_tensor_async", [&] { fn(b, t, data, offset, size); });
}

void backend::synchronize() {
    tsr_backend * b = need(be_);
    if (auto fn = TSR_OPT_SLOT(tsr_backend_i, b->iface, synchronize)) {
        detail::guarded({lease_.entry().get()}, "synchronize", [&] { fn(b); });
    }
}

void * backend::proc(const char * name) const {
    tsr_backend * b = need(be_);
    tsr_reg * r = b->device ? b->device->reg : nullptr;
    if (r == nullptr && lease_.entry()) r = lease_.entry()->reg;
    return detail::reg_proc(r, name, lease_.entry().get());
}

bool backend::has_n_threads() const { return proc(TSR_EXT_BACKEND_SET_N_THREADS) != nullptr; }

void backend::set_n_threads(int n_threads) {
    auto fn = reinterpret_cast<tsr_backend_set_n_threads_fn>(proc(TSR_EXT_BACKEND_SET_N_THREADS));
    if (fn == nullptr) throw error(fmt::format("backend '{}' has no thread count setting", name()));
    if (n_threads < 1 ||
        !detail::guarded({lease_.entry().get()}, TSR_EXT_BACKEND_SET_N_THREADS, [&] { return fn(be_, n_threads); })) {
        throw error(fmt::format("backend '{}': invalid thread count {} (at least 1, and no more than the backend allows)",
                                name(), n_threads));
    }
}

bool backend::has_abort_callback() const {
    return proc(TSR_EXT_BACKEND_SET_ABORT_CALLBACK) != nullptr;
}

void backend::set_abort_callback(tsr_abort_callback cb, void * user_data) {
    auto fn = reinterpret_cast<tsr_backend_set_abort_callback_fn>(
        proc(TSR_EXT_BACKEND_SET_ABORT_CALLBACK));
    if (fn == nullptr) throw error(fmt::format("backend '{}' has no abort callback", name()));
    detail::guarded({lease_.entry().get()}, TSR_EXT_BACKEND_SET_ABORT_CALLBACK, [&] { fn(be_, cb, user_data); });
}

void backend::set_threadpool(threadpool * pool) {
    auto fn = reinterpret_cast<tsr_backend_set_threadpool_fn>(proc(TSR_EXT_BACKEND_SET_THREADPOOL));
    if (fn == nullptr) throw error(fmt::format("backend '{}' has no thread pools", name()));
    // A pool of another family would be misread: the same family hands out
    // the same free function.
    if (pool != nullptr && (!*pool || pool->free_fn() != proc(TSR_EXT_THREADPOOL_FREE))) {
        throw error(fmt::format("backend '{}': the thread pool was made by another backend "
                                "family (or is empty)",
                                name()));
    }
    tsr_threadpool * p = pool ? pool->get() : nullptr;
    detail::guarded({lease_.entry().get()}, TSR_EXT_BACKEND_SET_THREADPOOL, [&] { fn(be_, p); });
}

// ---------------------------------------------------------------- graph plan

bool graph_plan::supported(const backend & be) {
    tsr_backend * b = be.get();
    if (b == nullptr) return false;
    return TSR_OPT_SLOT(tsr_backend_i, b->iface, graph_plan_create) != nullptr &&
           TSR_OPT_SLOT(tsr_backend_i, b->iface, graph_plan_free) != nullptr &&
           TSR_OPT_SLOT(tsr_backend_i, b->iface, graph_plan_compute) != nullptr;
}

graph_plan::graph_plan(backend & be, graph & g) {
    if (!supported(be)) {
        throw error(fmt::format("backend '{}' does not offer graph plans",
                                be ? be.name() : "(empty)"));
    }
    const tsr_graph_view v = g.view();
    tsr_backend * b = be.get();
    entry_ = be.reg().entry();
    plan_ = detail::guarded({entry_.get()}, "graph_plan_create",
                            [&] { return b->iface->graph_plan_create(b, &v); });
    if (plan_ == nullptr) {
        throw error(fmt::format("backend '{}' could not create a plan for a graph of {} nodes",
                                be.name(), v.n_nodes));
    }
    be_ = be.get();
}

graph_plan::graph_plan(graph_plan && o) noexcept
    : be_(o.be_), plan_(o.plan_), entry_(std::move(o.entry_)) {
    o.be_ = nullptr;
    o.plan_ = nullptr;
}

graph_plan & graph_plan::operator=(graph_plan && o) noexcept {
    if (this != &o) {
        reset();
        be_ = o.be_;
        plan_ = o.plan_;
        entry_ = std::move(o.entry_);
        o.be_ = nullptr;
        o.plan_ = nullptr;
    }
    return *this;
}

tsr_status graph_plan::compute() {
    if (plan_ == nullptr) throw error("graph_plan: use of an empty plan");
    return detail::guarded_or({entry_.get()}, "graph_plan_compute", TSR_STATUS_FAILED,
                              [&] { return be_->iface->graph_plan_compute(be_, plan_); });
}

void graph_plan::reset() noexcept {
    if (plan_) {
        tsr_backend * b = be_;
        tsr_graph_plan p = plan_;
        // (A plan holds no lease: its backend's keeps the library loaded.)
        detail::guarded_free({entry_.get()}, "graph_plan_free", "graph plan",
                             [&] { b->iface->graph_plan_free(b, p); });
    }
    plan_ = nullptr;
    be_ = nullptr;
    entry_.reset();
}

// ---------------------------------------------------------------- thread pool

threadpool::threadpool(const backend_reg & reg, int n_threads) {
    auto make = reg.proc<tsr_threadpool_new_fn>(TSR_EXT_THREADPOOL_NEW);
    free_ = reg.proc<tsr_threadpool_free_fn>(TSR_EXT_THREADPOOL_FREE);
    pause_ = reg.proc<tsr_threadpool_pause_fn>(TSR_EXT_THREADPOOL_PAUSE);
    resume_ = reg.proc<tsr_threadpool_resume_fn>(TSR_EXT_THREADPOOL_RESUME);
    if (!make || !free_ || !pause_ || !resume_) {
        throw error(fmt::format("backend '{}' has no thread pools", reg.name()));
    }
    if (n_threads < 1) {
        throw error(fmt::format("backend '{}': thread pool needs at least 1 thread, not {}",
                                reg.name(), n_threads));
    }
    detail::lease l(reg.entry(), detail::lease_kind::other);
    pool_ = detail::guarded({l.entry().get()}, TSR_EXT_THREADPOOL_NEW, [&] { return make(n_threads); });
    if (pool_ == nullptr) {
        throw error(fmt::format("backend '{}': could not create a pool of {} threads",
                                reg.name(), n_threads));
    }
    n_threads_ = n_threads;
    lease_ = std::move(l);
}

threadpool::threadpool(threadpool && o) noexcept
    : pool_(o.pool_), n_threads_(o.n_threads_), free_(o.free_), pause_(o.pause_),
      resume_(o.resume_), lease_(std::move(o.lease_)) {
    o.pool_ = nullptr;
}

threadpool & threadpool::operator=(threadpool && o) noexcept {
    if (this != &o) {
        reset();
        pool_ = o.pool_;
        n_threads_ = o.n_threads_;
        free_ = o.free_;
        pause_ = o.pause_;
        resume_ = o.resume_;
        lease_ = std::move(o.lease_);
        o.pool_ = nullptr;
    }
    return *this;
}

void threadpool::pause() {
    if (pool_ == nullptr) throw error("threadpool: use of an empty pool");
    detail::guarded({lease_.entry().get()}, TSR_EXT_THREADPOOL_PAUSE, [&] { pause_(pool_); });
}

void threadpool::resume() {
    if (pool_ == nullptr) throw error("threadpool: use of an empty pool");
    detail::guarded({lease_.entry().get()}, TSR_EXT_THREADPOOL_RESUME, [&] { resume_(pool_); });
}

void threadpool::reset() noexcept {
    if (pool_) {
        tsr_threadpool * p = pool_;
        if (!detail::guarded_free({lease_.entry().get()}, TSR_EXT_THREADPOOL_FREE, "thread pool",
                                  [&] { free_(p); })) {
            detail::abandon_lease(std::move(lease_));
        }
    }
    pool_ = nullptr;
    n_threads_ = 0;
    lease_.reset();
}

} // namespace tessera
