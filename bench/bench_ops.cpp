// bench/bench_ops.cpp — microbenchmarks of the CPU kernels through the
// graph compute (thread pool included), on all hardware threads.
//   MUL_MAT: weights [K=4096, M=4096] of F32, F16, Q8_0, Q4_0 times F32
//            activations [4096, N] for N = 1 (decode) and N = 512 (prompt);
//            counters: FLOP/s (2*M*N*K per op) and weight GB/s (bytes of
//            the weight matrix read per op).
//   RMS_NORM: [4096, N] F32 on 1 or all threads; counter: GB/s (bytes read
//            + written).
// Run: build/<dir>/bench/bench_ops [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "backends/cpu/thread_pool.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/core/tensor.hpp"

namespace {

using namespace tessera;

int bench_threads() {
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Random weights: F32/F16 values in [-1, 1), quantized types through the
// core's reference quantizers.
void fill_weights(tensor * w, std::mt19937 & rng) {
    const int64_t n = nelements(w);
    std::vector<float> v(static_cast<size_t>(n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float & x : v) x = dist(rng);
    const type_traits & tr = get_type_traits(w->type);
    tr.from_float(v.data(), w->data, n);
}

void fill_f32(tensor * t, std::mt19937 & rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto * p = static_cast<float *>(t->data);
    for (int64_t i = 0; i < nelements(t); ++i) p[i] = dist(rng);
}

context::params data_params() {
    context::params p;
    p.alloc_data = true;
    return p;
}

void run_graph(benchmark::State & state, tensor * out, int n_threads = bench_threads()) {
    graph g;
    g.build_forward(out);
    cpu::thread_pool pool(n_threads);
    tsr_graph_view v = g.view();
    if (pool.compute(v, n_threads) != TSR_STATUS_SUCCESS) { // warm-up, checks the graph
        state.SkipWithError("graph compute failed");
        return;
    }
    for (auto _ : state) {
        const tsr_status st = pool.compute(v, n_threads);
        benchmark::DoNotOptimize(st);
    }
    state.counters["threads"] = n_threads;
}

void BM_mul_mat(benchmark::State & state) {
    const auto wtype = static_cast<type>(state.range(0));
    const int64_t N = state.range(1);
    const int64_t K = 4096, M = 4096;
    context ctx(data_params());
    std::mt19937 rng(1);
    tensor * w = ctx.new_tensor(wtype, {K, M});
    fill_weights(w, rng);
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    fill_f32(x, rng);
    tensor * y = mul_mat(ctx, w, x);
    state.SetLabel(std::string(type_name(wtype)) + " 4096x4096 x N=" + std::to_string(N));
    run_graph(state, y);
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
    state.counters["weight_B/s"] = benchmark::Counter(static_cast<double>(nbytes(w)),
                                                      benchmark::Counter::kIsIterationInvariantRate,
                                                      benchmark::Counter::kIs1000);
}

void mul_mat_args(benchmark::internal::Benchmark * b) {
    for (int t : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) b->Args({t, 1});
}
void mul_mat_args_prompt(benchmark::internal::Benchmark * b) {
    for (int t : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0}) b->Args({t, 512});
}

BENCHMARK(BM_mul_mat)->Apply(mul_mat_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
// N = 512 takes seconds per op on a few cores: two iterations.
BENCHMARK(BM_mul_mat)->Apply(mul_mat_args_prompt)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

void BM_rms_norm(benchmark::State & state) {
    const int64_t N = state.range(0);
    context ctx(data_params());
    std::mt19937 rng(2);
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {4096, N});
    fill_f32(x, rng);
    tensor * y = rms_norm(ctx, x, 1e-5f);
    run_graph(state, y, state.range(1) == 0 ? bench_threads() : static_cast<int>(state.range(1)));
    state.counters["B/s"] = benchmark::Counter(2.0 * static_cast<double>(nbytes(x)),
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
}

// Args: rows N, threads (0 = all hardware threads). N = 1 on one thread vs
// all threads shows the pool's per-graph overhead.
BENCHMARK(BM_rms_norm)->Args({1, 1})->Args({1, 0})->Args({512, 1})->Args({512, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
