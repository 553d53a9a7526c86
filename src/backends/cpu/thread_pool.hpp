// backends/cpu/thread_pool.hpp — a persistent pool of worker threads that
// run one job at a time on a chosen number of threads, with a barrier for
// the job's threads and per-thread scratch memory. The CPU graph compute
// (graph_compute.hpp) runs on it.
//
// Thread 0 of every run is the thread that calls run()/compute(); workers
// 1..size()-1 wait between runs, spinning briefly and then sleeping on a
// condition variable. Internal to the CPU backend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::cpu {

class thread_pool {
public:
    // Most threads a pool may have.
    static constexpr int max_threads = 512;

    // Starts n_threads - 1 workers (the caller of run() is thread 0).
    // Throws tessera::error when n_threads is outside 1..max_threads and
    // std::system_error when a thread cannot be started (no thread is left
    // running then).
    explicit thread_pool(int n_threads);
    // Stops and joins the workers. Must not run concurrently with run().
    ~thread_pool();
    thread_pool(const thread_pool &) = delete;
    thread_pool & operator=(const thread_pool &) = delete;

    // Threads of the pool, the calling thread included.
    int size() const { return n_threads_; }

    // pause(): idle workers stop spinning and sleep until a run wakes them;
    // after that run they sleep again. resume(): idle workers spin briefly
    // again before sleeping (lower latency for the next run). Runs work the
    // same either way. Thread-safe.
    void pause();
    void resume();
    bool paused() const { return paused_.load(std::memory_order_relaxed); }

    // A job: called once on each of the run's threads with its index.
    // Must not throw.
    using job_fn = void (*)(int ith, void * ctx);

    // Runs fn(ith, ctx) on threads 0..n_threads-1 (clamped to 1..size());
    // the caller runs ith 0. Before the job starts, each of these threads'
    // scratch is grown to at least scratch_bytes (see scratch()) and the
    // scratch shared by all of them to at least shared_bytes (see
    // shared_scratch()); throws std::bad_alloc, with nothing run, when that
    // memory is not available. Returns when every thread's call has
    // returned. Runs are serialized: a second caller waits for the first.
    // Must not be called from inside a job; a call from inside a run of
    // this pool on the calling thread throws tessera::error (it would wait
    // for itself).
    void run(int n_threads, size_t scratch_bytes, size_t shared_bytes, job_fn fn, void * ctx);
    void run(int n_threads, size_t scratch_bytes, job_fn fn, void * ctx) { run(n_threads, scratch_bytes, 0, fn, ctx); }

    // Barrier for the threads of the current run: each of them calls
    // sync(ith, ...). Thread 0 waits until every other thread has arrived,
    // then calls on_all_arrived(ctx) (if not null) while they wait, then
    // releases them. Everything a thread wrote before arriving, and what
    // on_all_arrived wrote, is visible to every thread after sync returns.
    void sync(int ith, void (*on_all_arrived)(void * ctx), void * ctx);

    // The same barrier, but on_all_arrived runs on whichever thread arrives
    // last, which then releases the others at once: one cache-line hand-off
    // less when a worker arrives last (bench_ops BM_barrier, two threads on
    // Zen 5: 498 ns per barrier with sync, 297 ns with sync_any). For
    // callbacks that may run on any thread. While a thread waits, it calls
    // while_waiting(wctx) (if not null) between checks of the barrier until
    // that returns false: useful work for a thread that arrived early (the
    // graph walk prefetches the next product's weights). It must be short:
    // the release is only noticed between calls.
    void sync_any(void (*on_all_arrived)(void * ctx), void * ctx, bool (*while_waiting)(void * wctx) = nullptr,
                  void * wctx = nullptr);

    // A barrier that also agrees on a vote: every thread of the run calls
    // sync_vote(ith, vote) and gets the OR of all threads' votes at this
    // barrier (the same answer on every thread). Each thread announces its
    // arrival in a cache line of its own and waits for the others' lines,
    // so no line is shared by all: when one thread arrives well before the
    // other, as between a graph's nodes, the last arriver's store is the
    // only line the waiter must fetch. Everything a thread wrote before
    // arriving is visible to every thread after sync_vote returns.
    // while_waiting as in sync_any. Waits spin, then block in a futex
    // (Linux) or std::atomic::wait. Like sync and sync_any, every thread of
    // the run must reach each call; the three keep separate state, so one
    // run may use all of them. Costs about what sync_any does when threads
    // arrive together (bench_ops BM_barrier); between a decoded token's
    // nodes it made synth 135M Q4_0 tg128 on 2 threads 1.012-1.037x faster
    // (graph_compute.cpp). n^2 line reads a barrier: for few threads.
    bool sync_vote(int ith, bool vote, bool (*while_waiting)(void * wctx) = nullptr, void * wctx = nullptr);

    // Thread ith's scratch during a run: 64-byte aligned, scratch_size(ith)
    // >= the run's scratch_bytes; kept and reused across runs.
    void * scratch(int ith) const { return scratch_[static_cast<size_t>(ith)].data.get(); }
    size_t scratch_size(int ith) const { return scratch_[static_cast<size_t>(ith)].size; }
    // Scratch every thread of a run may read and write (the job orders the
    // accesses, e.g. with sync); 64-byte aligned, shared_scratch_size() >=
    // the run's shared_bytes (null when that is 0 and none was ever needed);
    // kept and reused across runs.
    void * shared_scratch() const { return shared_.data.get(); }
    size_t shared_scratch_size() const { return shared_.size; }

    // Computes a graph on n_threads threads of this pool (clamped to
    // 1..size()); see graph_compute() in graph_compute.hpp for the contract.
    tsr_status compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb = nullptr,
                       void * cb_data = nullptr);

private:
    struct aligned_delete {
        void operator()(std::byte * p) const;
    };
    struct scratch_block {
        std::unique_ptr<std::byte[], aligned_delete> data;
        size_t size = 0;
    };

    void worker_main(int ith);
    // Waits for a job generation other than `seen` (or shutdown); returns
    // the new job word, or 0 on shutdown.
    uint64_t wait_for_job(uint64_t seen);
    void arrive(); // a worker reaching the barrier
    void reserve_scratch(int n_threads, size_t bytes);
    static void reserve_block(scratch_block & s, size_t bytes);
    void wait_for_arrivals(int n_others);

    int n_threads_;
    int spin_barrier_; // pause steps before a barrier waiter blocks
    int spin_idle_;    // pause steps before an idle worker sleeps
    bool light_fence_; // sync_vote's store-load order comes from membarrier(2) (see wait_flag)
    std::vector<std::thread> workers_;
    std::vector<scratch_block> scratch_;
    scratch_block shared_;

    std::mutex run_mutex_; // one run at a time
    int run_threads_ = 1;  // threads of the current run (set before its job is published)

    // Job hand-off: job_word_ = (generation << 16) | n_threads of the run;
    // changed under state_mutex_ so sleepers cannot miss it.
    std::mutex state_mutex_;
    std::condition_variable state_cv_;
    std::atomic<uint64_t> job_word_{0};
    uint64_t generation_ = 0; // guarded by state_mutex_
    bool stop_ = false;       // guarded by state_mutex_
    std::atomic<bool> stop_flag_{false};
    std::atomic<bool> paused_{false};
    job_fn job_fn_ = nullptr; // valid for the run's threads during a run
    void * job_ctx_ = nullptr;

    // Barrier: workers increment arrived_, thread 0 waits for all of them,
    // resets it and bumps release_ (sync); or every thread increments it
    // and the last one resets it and bumps release_ (sync_any).
    alignas(64) std::atomic<int> arrived_{0};
    alignas(64) std::atomic<uint32_t> release_{0};

    // sync_vote: thread i's word is (barriers it reached in this run << 2)
    // | its vote at the one before << 1 | its vote at the last; only thread
    // i writes it (reset to 0 before each run). sleepers counts threads
    // blocked on the word (futex).
    struct alignas(64) vote_flag {
        std::atomic<uint32_t> word{0};
        std::atomic<uint32_t> sleepers{0};
    };
    std::unique_ptr<vote_flag[]> flags_;
    // Blocks until flag.word may differ from `seen` (called after the spin
    // budget; may return early: the caller checks again).
    void wait_flag(vote_flag & flag, uint32_t seen);
};

} // namespace tessera::cpu
