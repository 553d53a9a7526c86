// backends/cpu/thread_pool.cpp — persistent workers, job hand-off, the
// run's barrier and per-thread scratch.
//
// Synchronization (all through std::atomic, so ThreadSanitizer sees it):
//   job hand-off  thread 0 writes job_fn_/job_ctx_, then stores job_word_
//                 (release, under state_mutex_ so a sleeping worker cannot
//                 miss the notify); workers load it (acquire).
//   barrier       a worker reads release_ (acquire), increments arrived_
//                 (acq_rel) and waits for release_ to change; thread 0 waits
//                 for arrived_ to reach the count (acquire), resets it, runs
//                 the hook and increments release_ (release).
//   vote barrier  (sync_vote) each thread stores its own word (release) and
//                 loads every other thread's (acquire); no shared counter.
//                 Sleepers on a word: wait_flag.
//   end of run    each worker increments arrived_ once more after its job
//                 returns; run() returns once all have (acquire), so the
//                 next run may reuse job_fn_ and the scratch.
// Waits spin a short while (cheap when nodes are short) and then block in
// std::atomic::wait, a futex or the condition variable, so idle or
// oversubscribed threads do not burn the CPU.
#include "backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <string>

#if defined(__linux__)
#include <climits>
#include <ctime>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backends/cpu/graph_compute.hpp"
#include "tessera/core/error.hpp"

namespace tessera::cpu {

namespace {

// Spin-then-block waits. A waiter first spins on the pause instruction for
// a bounded time, then blocks (futex through std::atomic::wait, or the
// condition variable). The bound is in time, not iterations, because the
// cost of one pause differs about 10x between CPUs (and sched_yield, which
// an older version used between the two, costs microseconds under a
// hypervisor and let the other thread's wake-up lag). Between the nodes of a
// graph the waits are a few microseconds, so the barrier budget keeps both
// threads awake through a whole token; an idle pool sleeps after the idle
// budget, and an oversubscribed one wastes at most that much per wait.
constexpr double k_spin_barrier_us = 100.0; // spin budget at the barrier / end of run
constexpr double k_spin_idle_us = 300.0;    // spin budget of an idle worker before it sleeps
constexpr size_t k_scratch_align = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

// Pause iterations per microsecond on this machine, measured once (a few
// hundred microseconds) the first time a pool is made.
double relax_per_us() {
    static const double rate = [] {
        using clock = std::chrono::steady_clock;
        constexpr int k_probe = 4096;
        double best = 0.0;
        for (int round = 0; round < 3; ++round) {
            const auto t0 = clock::now();
            for (int i = 0; i < k_probe; ++i) cpu_relax();
            const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
            if (us > 0.0) best = std::max(best, k_probe / us);
        }
        return best > 0.0 ? best : 100.0;
    }();
    return rate;
}

int spin_steps(double us) {
    return std::clamp(static_cast<int>(us * relax_per_us()), 64, 1 << 24);
}

// One step of a spin-then-block wait; false when the caller should block.
bool backoff(int & step, int limit) {
    if (step >= limit) return false;
    cpu_relax();
    ++step;
    return true;
}

constexpr uint64_t job_threads(uint64_t word) {
    return word & 0xffffu;
}

// A thread blocked on a word until it may have changed, and the wake-up of
// such threads: futex(2) FUTEX_WAIT_PRIVATE / FUTEX_WAKE_PRIVATE on Linux
// (the kernel compares the word with `seen` atomically, so a change before
// the wait is not missed), std::atomic wait/notify elsewhere. Spurious
// returns are allowed; the caller checks again.
// With `bounded`, the wait ends after a millisecond at most.
void block_on(std::atomic<uint32_t> & word, uint32_t seen, bool bounded) {
#if defined(__linux__)
    static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
    const timespec ms{0, 1000000};
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAIT_PRIVATE, seen, bounded ? &ms : nullptr, nullptr,
            0);
#else
    if (bounded) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
        word.wait(seen, std::memory_order_seq_cst);
    }
#endif
}

void wake_all(std::atomic<uint32_t> & word) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
#else
    word.notify_all();
#endif
}

// membarrier(2) registered for this process (once): true when
// MEMBARRIER_CMD_PRIVATE_EXPEDITED is available (Linux 4.14 and later).
bool register_membarrier() {
#if defined(__linux__) && defined(SYS_membarrier)
    static const bool ok = [] {
        const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
        if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
        return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    }();
    return ok;
#else
    return false;
#endif
}

// A full barrier on every running thread of this process (after
// register_membarrier() returned true); false if the call failed (it is not
// expected to, once registered).
bool heavy_fence() {
#if defined(__linux__) && defined(SYS_membarrier)
    return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
    return false;
#endif
}

constexpr uint32_t k_count_mask = 0x3fffffffu; // a vote word's barrier count (30 bits, wraps)

} // namespace

void thread_pool::aligned_delete::operator()(std::byte * p) const {
    ::operator delete[](p, std::align_val_t(k_scratch_align));
}

thread_pool::thread_pool(int n_threads)
    : n_threads_(n_threads), spin_barrier_(spin_steps(k_spin_barrier_us)), spin_idle_(spin_steps(k_spin_idle_us)),
      light_fence_(register_membarrier()) {
    if (n_threads < 1 || n_threads > max_threads) {
        throw error("thread_pool: n_threads = " + std::to_string(n_threads) + " is outside 1.." +
                    std::to_string(max_threads));
    }
    scratch_.resize(static_cast<size_t>(n_threads));
    flags_.reset(new vote_flag[static_cast<size_t>(n_threads)]);
    workers_.reserve(static_cast<size_t>(n_threads - 1));
    try {
        for (int i = 1; i < n_threads; ++i) workers_.emplace_back(&thread_pool::worker_main, this, i);
    } catch (...) {
        {
            std::lock_guard<std::mutex> lk(state_mutex_);
            stop_ = true;
            stop_flag_.store(true, std::memory_order_release);
        }
        state_cv_.notify_all();
        for (std::thread & t : workers_) t.join();
        throw;
    }
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lk(state_mutex_);
        stop_ = true;
        stop_flag_.store(true, std::memory_order_release);
    }
    state_cv_.notify_all();
    for (std::thread & t : workers_) t.join();
}

void thread_pool::pause() {
    paused_.store(true, std::memory_order_relaxed);
}

void thread_pool::resume() {
    paused_.store(false, std::memory_order_relaxed);
}

uint64_t thread_pool::wait_for_job(uint64_t seen) {
    if (!paused_.load(std::memory_order_relaxed)) {
        int step = 0;
        do {
            const uint64_t w = job_word_.load(std::memory_order_acquire);
            if (w != seen) return w;
            if (stop_flag_.load(std::memory_order_acquire)) return 0;
            if (paused_.load(std::memory_order_relaxed)) break;
        } while (backoff(step, spin_idle_));
    }
    std::unique_lock<std::mutex> lk(state_mutex_);
    state_cv_.wait(lk, [&] { return stop_ || job_word_.load(std::memory_order_relaxed) != seen; });
    if (stop_) return 0;
    return job_word_.load(std::memory_order_acquire);
}

void thread_pool::worker_main(int ith) {
    uint64_t seen = 0;
    for (;;) {
        const uint64_t w = wait_for_job(seen);
        if (w == 0) return;
        seen = w;
        if (static_cast<uint64_t>(ith) < job_threads(w)) {
            job_fn_(ith, job_ctx_);
            arrive();
        }
    }
}

void thread_pool::arrive() {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    arrived_.notify_one();
}

void thread_pool::wait_for_arrivals(int n_others) {
    int step = 0;
    for (;;) {
        const int v = arrived_.load(std::memory_order_acquire);
        if (v == n_others) break;
        if (!backoff(step, spin_barrier_)) arrived_.wait(v, std::memory_order_acquire);
    }
    arrived_.store(0, std::memory_order_relaxed);
}

namespace {
// A run() this thread is inside of, linked to the one it was started from:
// a run started again from inside any of them on the same pool (an abort
// callback computing on a backend that shares the pool, directly or through
// another pool's run) is refused rather than waiting forever for the run it
// is part of.
struct running_run {
    const void * pool;
    const running_run * outer;
};
thread_local const running_run * t_innermost_run = nullptr;
} // namespace

void thread_pool::run(int n_threads, size_t scratch_bytes, size_t shared_bytes, job_fn fn, void * ctx) {
    for (const running_run * r = t_innermost_run; r != nullptr; r = r->outer) {
        if (r->pool == this) {
            throw error("thread pool: a run was started from inside a run of the same pool (e.g. an abort callback "
                        "computing on a backend that shares its thread pool)");
        }
    }
    struct enter {
        running_run self;
        explicit enter(const void * pool) : self{pool, t_innermost_run} { t_innermost_run = &self; }
        ~enter() { t_innermost_run = self.outer; }
        enter(const enter &) = delete;
        enter & operator=(const enter &) = delete;
    } in_run(this);
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    const int n = std::clamp(n_threads, 1, n_threads_);
    reserve_scratch(n, scratch_bytes);
    reserve_block(shared_, shared_bytes);
    run_threads_ = n;
    if (n == 1) {
        fn(0, ctx);
        return;
    }
    job_fn_ = fn;
    job_ctx_ = ctx;
    // No thread is inside sync_vote between runs (each returned from its
    // job); the job word's release publishes the reset.
    for (int i = 0; i < n; ++i) flags_[static_cast<size_t>(i)].word.store(0, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(state_mutex_);
        ++generation_;
        job_word_.store((generation_ << 16) | static_cast<uint64_t>(n), std::memory_order_release);
    }
    state_cv_.notify_all();
    fn(0, ctx);
    wait_for_arrivals(n - 1);
}

void thread_pool::sync(int ith, void (*on_all_arrived)(void * ctx), void * ctx) {
    if (ith != 0) {
        const uint32_t g = release_.load(std::memory_order_acquire);
        arrive();
        int step = 0;
        while (release_.load(std::memory_order_acquire) == g) {
            if (!backoff(step, spin_barrier_)) release_.wait(g, std::memory_order_acquire);
        }
        return;
    }
    wait_for_arrivals(run_threads_ - 1);
    if (on_all_arrived != nullptr) on_all_arrived(ctx);
    release_.fetch_add(1, std::memory_order_release);
    release_.notify_all();
}

void thread_pool::sync_any(void (*on_all_arrived)(void * ctx), void * ctx, bool (*while_waiting)(void * wctx),
                           void * wctx) {
    const int n = run_threads_;
    if (n == 1) {
        if (on_all_arrived != nullptr) on_all_arrived(ctx);
        return;
    }
    // Read the generation before arriving: once the last thread arrives it
    // may be bumped at any moment.
    const uint32_t g = release_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
        arrived_.store(0, std::memory_order_relaxed); // no thread arrives again before the release
        if (on_all_arrived != nullptr) on_all_arrived(ctx);
        release_.fetch_add(1, std::memory_order_release);
        release_.notify_all();
        return;
    }
    bool busy = while_waiting != nullptr;
    int step = 0;
    while (release_.load(std::memory_order_acquire) == g) {
        if (busy) {
            busy = while_waiting(wctx);
        } else if (!backoff(step, spin_barrier_)) {
            release_.wait(g, std::memory_order_acquire);
        }
    }
}

// Sleeping: a waiter counts itself in `sleepers`, then reads the word
// again; the owner stores the word, then reads `sleepers`. Each must see
// the other's write or have its own seen (store-load order, which release
// and acquire do not give): either the waiter sees the new word and does
// not block, or the owner sees the sleeper and wakes it (a wake before the
// waiter blocks makes the futex return at once, the word no longer being
// `seen`). The owner's side runs at every barrier, the waiter's only after
// the spin budget, so the waiter pays for the order: membarrier(2)
// PRIVATE_EXPEDITED makes every running thread of the process pass a full
// barrier, the owner's store and load then being both before it or both
// after it (or the store before and the load after), and the owner needs
// only a compiler barrier. Where membarrier is not available the owner
// uses a full fence (thread_pool::light_fence_ false). On Zen 5 (2 vCPUs,
// synth 135M Q4_0 tg128, graph by graph in one process) the full fence
// took back about half of what the flag barrier gained over sync_any.
void thread_pool::wait_flag(vote_flag & flag, uint32_t seen) {
    flag.sleepers.fetch_add(1, std::memory_order_seq_cst);
    // Should membarrier fail after all, the order is not there: the wait is
    // then bounded, a wake-up lost costing at most a millisecond.
    const bool unordered = light_fence_ && !heavy_fence();
    if (flag.word.load(std::memory_order_seq_cst) == seen) block_on(flag.word, seen, unordered);
    flag.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

bool thread_pool::sync_vote(int ith, bool vote, bool (*while_waiting)(void * wctx), void * wctx) {
    const int n = run_threads_;
    if (n == 1) return vote;
    vote_flag & mine = flags_[static_cast<size_t>(ith)];
    const uint32_t last = mine.word.load(std::memory_order_relaxed);
    const uint32_t before = last >> 2; // barriers passed
    const uint32_t count = (before + 1) & k_count_mask;
    mine.word.store(count << 2 | (last & 1u) << 1 | (vote ? 1u : 0u), std::memory_order_release);
    // Store, then load `sleepers`: ordered by the sleeper's membarrier
    // (wait_flag) or, without it, a full fence here.
    if (light_fence_) {
        std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (mine.sleepers.load(std::memory_order_relaxed) != 0) wake_all(mine.word);
    // Another thread's word counts `before` (it has not arrived), `count`
    // (arrived; its vote here in bit 0) or count + 1 (it passed this
    // barrier and arrived at the next, its vote here now in bit 1; it can
    // go no further until this thread arrives there too).
    bool any = vote;
    bool busy = while_waiting != nullptr;
    for (int j = 0; j < n; ++j) {
        if (j == ith) continue;
        vote_flag & other = flags_[static_cast<size_t>(j)];
        int step = 0;
        for (;;) {
            const uint32_t w = other.word.load(std::memory_order_acquire);
            if ((w >> 2) != before) {
                any = any || (w >> ((w >> 2) == count ? 0 : 1) & 1u) != 0;
                break;
            }
            if (busy) {
                busy = while_waiting(wctx);
            } else if (!backoff(step, spin_barrier_)) {
                wait_flag(other, w);
            }
        }
    }
    return any;
}

void thread_pool::reserve_scratch(int n_threads, size_t bytes) {
    const int n = std::clamp(n_threads, 1, n_threads_);
    for (int i = 0; i < n; ++i) reserve_block(scratch_[static_cast<size_t>(i)], bytes);
}

void thread_pool::reserve_block(scratch_block & s, size_t bytes) {
    if (s.size >= bytes) return;
    if (bytes > SIZE_MAX - 4095) throw std::bad_alloc();
    const size_t rounded = (bytes + 4095) & ~static_cast<size_t>(4095);
    auto * p = static_cast<std::byte *>(::operator new[](rounded, std::align_val_t(k_scratch_align)));
    s.data.reset(p);
    s.size = rounded;
}

tsr_status thread_pool::compute(const tsr_graph_view & g, int n_threads, tsr_abort_callback cb, void * cb_data) {
    return graph_compute(*this, g, n_threads, cb, cb_data);
}

} // namespace tessera::cpu
