// tessera/backend/backend.hpp — a compute stream on one device, graph
// plans, and thread pools of CPU-like backends.
#pragma once

#include <cstddef>
#include <memory>

#include "tessera/backend.h"
#include "tessera/backend/lease.hpp"
#include "tessera/core/graph.hpp"

namespace tessera {

class device;
class backend_reg;
class threadpool;

// Name of a compute status: "SUCCESS", "FAILED", "ALLOC_FAILED", "ABORTED",
// or "UNKNOWN" for another value.
const char * status_name(tsr_status s);

// An owned compute stream (tsr_backend), made by device::init. The
// destructor frees it through the backend's free slot; free its plans
// first. Move-only. One thread at a time.
//
// A C++ exception the backend lets escape from a call (backend.h forbids
// it) never reaches the caller as it is: methods that throw on failure
// throw tessera::error "backend '<name>' (<library>): <slot> threw an
// exception (<its message>); a backend must report failures through its
// return value"; graph_compute returns FAILED and writes that message to
// stderr; a free slot that throws (reset, the destructor, the same in
// graph_plan and threadpool) is reported on stderr with "; the <object>
// is leaked", and the backend's library then stays loaded.
class backend {
public:
    backend() = default;
    // Takes ownership of `b` (non-null), made by the backend `l` refers to.
    backend(tsr_backend * b, detail::lease l);
    ~backend() { reset(); }
    backend(backend && o) noexcept;
    backend & operator=(backend && o) noexcept;
    backend(const backend &) = delete;
    backend & operator=(const backend &) = delete;

    explicit operator bool() const { return be_ != nullptr; }
    tsr_backend * get() const { return be_; }
    void reset() noexcept;

    const char * name() const;
    device get_device() const;
    backend_reg reg() const;

    // Computes every node of `g` (all tensors need data: see
    // graph_allocator). Returns the backend's status; ABORTED when the abort
    // callback stopped it; FAILED, reported on stderr, when the backend
    // threw. Throws only for an empty handle.
    tsr_status graph_compute(graph & g);
    tsr_status graph_compute(const tsr_graph_view & g);

    // Async copies; without async support they are done synchronously
    // through the tensor's buffer (see tensor_set / tensor_get).
    void set_tensor_async(tsr_tensor * t, const void * data, size_t offset, size_t size);
    void get_tensor_async(const tsr_tensor * t, void * data, size_t offset, size_t size);
    // Waits for queued work (a no-op for synchronous backends).
    void synchronize();

    // Extension functions (tsr_backend_set_n_threads, ..._set_abort_callback,
    // ..._set_threadpool). Each throws tessera::error naming the backend
    // when it does not offer the function; has_* tells beforehand.
    bool has_n_threads() const;
    // Threads for later computes; throws for n_threads < 1.
    void set_n_threads(int n_threads);
    bool has_abort_callback() const;
    // Checked between nodes; returning true makes the compute return
    // ABORTED. nullptr removes it. `user_data` must outlive its use. A
    // compute the callback starts on a backend that shares this one's
    // thread pool (set_threadpool) returns FAILED: the pool is busy with
    // the compute that called it.
    void set_abort_callback(tsr_abort_callback cb, void * user_data);
    // Computes on `pool` (caller keeps ownership; it must outlive its use by
    // this backend); nullptr returns to the backend's own pool. Throws when
    // the pool was made by another backend family.
    void set_threadpool(threadpool * pool);

private:
    void * proc(const char * name) const;

    tsr_backend * be_ = nullptr;
    detail::lease lease_;
};

// A graph compiled once by a backend and computed many times, while the
// graph's tensors and their data pointers stay unchanged. Must not outlive
// its backend. Move-only.
class graph_plan {
public:
    graph_plan() = default;
    // Throws tessera::error when the backend has no plan support or plan
    // creation fails (naming the backend).
    graph_plan(backend & be, graph & g);
    ~graph_plan() { reset(); }
    graph_plan(graph_plan && o) noexcept;
    graph_plan & operator=(graph_plan && o) noexcept;
    graph_plan(const graph_plan &) = delete;
    graph_plan & operator=(const graph_plan &) = delete;

    explicit operator bool() const { return plan_ != nullptr; }
    // The backend's status (FAILED, reported on stderr, when it threw).
    tsr_status compute();
    void reset() noexcept;

    // True when `be` offers graph plans.
    static bool supported(const backend & be);

private:
    tsr_backend * be_ = nullptr;
    tsr_graph_plan plan_ = nullptr;
    std::shared_ptr<detail::reg_entry> entry_; // names the backend in messages
};

// A pool of worker threads of a CPU-like backend family (extension
// functions tsr_threadpool_*), shared by several backends of that family.
// Move-only; must outlive every backend it was set on.
class threadpool {
public:
    threadpool() = default;
    // A pool of n_threads workers made by `reg`. Throws tessera::error when
    // the reg has no thread pools, n_threads < 1, or creation fails.
    threadpool(const backend_reg & reg, int n_threads);
    ~threadpool() { reset(); }
    threadpool(threadpool && o) noexcept;
    threadpool & operator=(threadpool && o) noexcept;
    threadpool(const threadpool &) = delete;
    threadpool & operator=(const threadpool &) = delete;

    explicit operator bool() const { return pool_ != nullptr; }
    tsr_threadpool * get() const { return pool_; }
    int n_threads() const { return n_threads_; }
    // The family's tsr_threadpool_free (identifies the family that made it).
    void * free_fn() const { return reinterpret_cast<void *>(free_); }
    // Idle workers sleep while paused; a compute on the pool resumes it.
    void pause();
    void resume();
    void reset() noexcept;

private:
    tsr_threadpool * pool_ = nullptr;
    int n_threads_ = 0;
    tsr_threadpool_free_fn free_ = nullptr;
    tsr_threadpool_pause_fn pause_ = nullptr;
    tsr_threadpool_resume_fn resume_ = nullptr;
    detail::lease lease_;
};

} // namespace tessera
