// backends/cpu/ops/work_queue.hpp — a node's work items split between its
// threads so that they finish together even when one core runs slower
// (a core shared with another guest, an interrupt): each thread computes
// its fixed share front to back, and a thread that has finished takes
// chunks from the back of another thread's share (work stealing). Internal
// to the CPU kernels.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/ops/tensor_access.hpp"

namespace tessera::cpu {

// Items per chunk for n_items items that each stream item_bytes bytes of
// weights, split between nth threads: enough items for k_min_chunk_bytes
// (each chunk costs a thief an atomic on the owner's share), unless that is more
// than an eighth of a thread's share (then the eighth, at least one item),
// so that a small matrix still leaves chunks to steal (135M Q4_0 token
// generation, 2 threads: a 576 x 576 matrix is 187 KiB, three 64 KiB
// chunks). item_bytes == 0 (compute-bound items, e.g. GEMM blocks): one
// item a chunk.
constexpr size_t k_min_chunk_bytes = size_t{64} << 10;
inline int64_t chunk_for_bytes(size_t item_bytes, int64_t n_items, int nth) {
    if (item_bytes == 0) return 1;
    const auto by_bytes = static_cast<int64_t>((k_min_chunk_bytes + item_bytes - 1) / item_bytes);
    return std::max<int64_t>(1, std::min(by_bytes, n_items / (8 * std::max(1, nth))));
}

// The items [0, n) of one node. Thread ith owns split_items(n, ith, nth)
// and takes it front to back, half of what is left at a time (at least
// `chunk` items); once its share is used up it takes `chunk` items at a
// time from the back of the other threads' shares, also
// of a thread that has not reached the node yet (whichever thread comes
// first sets a share up). Every item is taken exactly once: each share is
// one atomic [front, back) pair, zero until set up and changed only by
// compare-and-swap. What a kernel computes for an item must not depend on
// the thread that takes it: that keeps results bit-identical for any
// split. Without shared slots (p.slots null), on one thread, or for
// n >= 2^31 items, thread ith takes exactly its share.
class work_queue {
public:
    work_queue(const compute_params & p, int64_t n, int64_t chunk)
        : slots_(p.nth > 1 && n < (int64_t{1} << 31) ? p.slots : nullptr), n_(n), chunk_(std::max<int64_t>(1, chunk)),
          stride_(p.slot_stride), ith_(p.ith), nth_(p.nth) {
        if (slots_ == nullptr) fixed_ = split_items(n, p.ith, p.nth);
    }

    // The next range of items for this thread; false when none are left.
    bool next(item_range & r) {
        if (slots_ == nullptr) {
            r = fixed_;
            fixed_ = {0, 0};
            return r.begin < r.end;
        }
        if (take(ith_, true, r)) return true;
        for (int k = 1; k < nth_; ++k) {
            if (take((ith_ + k) % nth_, false, r)) return true;
        }
        return false;
    }

private:
    // Bit 63 marks a share that has been set up (zero: not yet).
    static uint64_t pack(int64_t front, int64_t back) {
        return static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32 | uint64_t{1} << 63;
    }

    // Takes items from the front (owner) or back (thief) of thread v's
    // share, setting the share up in the same compare-and-swap if nobody
    // has. A thief takes chunk_ items; the owner half of what is left, but
    // at least chunk_ (guided scheduling: while the share is long, a slower
    // owner still leaves the other half to thieves, and it takes its share
    // in about log2(share / chunk_) steps instead of share / chunk_). Each
    // step is a locked instruction, which on x86 waits for every earlier
    // load: on the 135M model's short products (a few 10 KB chunks a
    // thread) the mat-vec's own code, three quarters of it these steps,
    // took 11.3% of a 2-thread token's cycles, 6.8% with halving (perf;
    // tokens/s changed no more than this machine's noise).
    bool take(int v_ith, bool front, item_range & r) const {
        std::atomic<uint64_t> & slot = slots_[static_cast<size_t>(v_ith) * stride_].range;
        uint64_t v = slot.load(std::memory_order_relaxed);
        for (;;) {
            int64_t f = 0, b = 0;
            if (v == 0) {
                const item_range share = split_items(n_, v_ith, nth_);
                f = share.begin;
                b = share.end;
            } else {
                f = static_cast<int64_t>(v & 0x7fffffffu);
                b = static_cast<int64_t>((v >> 32) & 0x7fffffffu);
            }
            if (f >= b) return false;
            r = front ? item_range{f, std::min(b, f + std::max(chunk_, (b - f) / 2))} : item_range{std::max(f, b - chunk_), b};
            const uint64_t nv = front ? pack(r.end, b) : pack(f, r.begin);
            if (slot.compare_exchange_weak(v, nv, std::memory_order_relaxed)) return true;
        }
    }

    work_slot * slots_;
    int64_t n_, chunk_;
    size_t stride_;
    int ith_, nth_;
    item_range fixed_{0, 0};
};

} // namespace tessera::cpu
