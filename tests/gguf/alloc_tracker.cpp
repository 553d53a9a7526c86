// Replaces the global (unaligned) operator new/delete of the test program with
// versions that count live bytes; see alloc_tracker.hpp. Each block carries a
// 16-byte prefix holding its size. Aligned new/delete are left alone.
#include "gguf/alloc_tracker.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<size_t> g_live{0};
std::atomic<size_t> g_base{0};
std::atomic<size_t> g_peak{0};
std::atomic<size_t> g_largest{0};
constexpr size_t prefix = 16;

void * counted_alloc(size_t n) {
    size_t cur = g_largest.load(std::memory_order_relaxed);
    while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
    }
    void * p = std::malloc(n + prefix);
    if (p == nullptr) return nullptr;
    *static_cast<size_t *>(p) = n;
    const size_t live = g_live.fetch_add(n) + n;
    size_t peak = g_peak.load(std::memory_order_relaxed);
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    return static_cast<char *>(p) + prefix;
}

void counted_free(void * p) {
    if (p == nullptr) return;
    void * base = static_cast<char *>(p) - prefix;
    g_live.fetch_sub(*static_cast<size_t *>(base));
    std::free(base);
}

} // namespace

void * operator new(size_t n) {
    void * p = counted_alloc(n);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}
void * operator new[](size_t n) {
    void * p = counted_alloc(n);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}
void * operator new(size_t n, const std::nothrow_t &) noexcept { return counted_alloc(n); }
void * operator new[](size_t n, const std::nothrow_t &) noexcept { return counted_alloc(n); }
void operator delete(void * p) noexcept { counted_free(p); }
void operator delete[](void * p) noexcept { counted_free(p); }
void operator delete(void * p, size_t) noexcept { counted_free(p); }
void operator delete[](void * p, size_t) noexcept { counted_free(p); }
void operator delete(void * p, const std::nothrow_t &) noexcept { counted_free(p); }
void operator delete[](void * p, const std::nothrow_t &) noexcept { counted_free(p); }

namespace tessera::test {

void alloc_reset_peak() {
    const size_t live = g_live.load();
    g_base.store(live);
    g_peak.store(live);
    g_largest.store(0);
}

size_t alloc_peak_since_reset() {
    const size_t peak = g_peak.load(), base = g_base.load();
    return peak > base ? peak - base : 0;
}

size_t alloc_largest_since_reset() { return g_largest.load(); }

} // namespace tessera::test
