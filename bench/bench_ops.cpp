// bench/bench_ops.cpp — microbenchmarks of the CPU kernels through the
// graph compute (thread pool included).
//   limits:  FMA and int8 peaks and read bandwidth of this machine, 1 and 2
//            threads (machine_limits.hpp), measured first in the same run.
//   MUL_MAT: weights [K=4096, M=4096] of F32, F16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K times F32
//            activations [4096, N] for N = 1 (decode) and N = 512 (prompt),
//            on 1 and 2 threads; counters: FLOP/s (2*M*N*K per op), weight
//            GB/s (bytes of the weight matrix read per op), and as
//            fractions of the limits measured with the same thread count:
//            of_fma_peak (FMA peak of the widest vectors this program's
//            kernels were compiled for: 512-bit with AVX-512, else 256),
//            of_int8_peak (quantized weights: vpdpbusd peak with
//            AVX512-VNNI, else vpmaddubsw), of_read_bw (N = 1: weight bytes
//            per second / streaming read bandwidth).
//   MUL_MAT repacked: Q4_0/Q8_0/Q5_0/F16/Q4_K/Q5_K/Q6_K weights in the CPU_REPACK layouts at
//            the 1B preset's shapes: streamed, chained behind barriers, and
//            cache-resident (the kernel's compute rate); F16 also at the
//            shapes BM_mul_mat measures plain.
//   Attention: the two MUL_MATs of one decode step over an F16 KV cache
//            (K view with strided heads, transposed V view); one layer's
//            attention fused (FLASH_ATTN_EXT) vs unfused (BM_attention);
//            one token's fused attention over 64 layers' caches that
//            stream from memory (BM_attn_decode_layers).
// Built three times (bench/CMakeLists.txt): bench_ops (baseline kernels),
// bench_ops_haswell (AVX2/FMA/F16C kernels), bench_ops_native
// (-march=native kernels).
//   RMS_NORM: [4096, N] F32 on 1 or all threads; counter: GB/s (bytes read
//            + written).
// Run: build/<dir>/bench/bench_ops [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "tessera/backend.h"
#include "backends/cpu/thread_pool.hpp"
#include "machine_limits.hpp"
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

// Runs the graph of `outs` on n_threads; returns the seconds spent in the
// timed iterations (0 when the graph failed).
double run_graph(benchmark::State & state, const std::vector<tensor *> & outs, int n_threads = bench_threads()) {
    graph g;
    for (tensor * out : outs) g.build_forward(out);
    cpu::thread_pool pool(n_threads);
    tsr_graph_view v = g.view();
    if (pool.compute(v, n_threads) != TSR_STATUS_SUCCESS) { // warm-up, checks the graph
        state.SkipWithError("graph compute failed");
        return 0.0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        const tsr_status st = pool.compute(v, n_threads);
        benchmark::DoNotOptimize(st);
    }
    state.counters["threads"] = n_threads;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double run_graph(benchmark::State & state, tensor * out, int n_threads = bench_threads()) {
    return run_graph(state, std::vector<tensor *>{out}, n_threads);
}

// Limit measured earlier in this run for n threads, or 0.
double limit_for(const std::map<int, double> & m, int n) {
    const auto it = m.find(n);
    return it == m.end() ? 0.0 : it->second;
}

#if defined(__AVX512F__)
const std::map<int, double> & fma_peak() { return bench::limits().fma512; }
#else
const std::map<int, double> & fma_peak() { return bench::limits().fma256; }
#endif
#if defined(__AVX512VNNI__)
const std::map<int, double> & int8_peak() { return bench::limits().int8_512; }
#else
const std::map<int, double> & int8_peak() { return bench::limits().int8_256; }
#endif

// The limits first: Google Benchmark runs benchmarks in registration order.
BENCHMARK(bench::BM_fma_peak)->Args({256, 1})->Args({256, 2})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(bench::BM_int8_peak)->Args({256, 1})->Args({256, 2})->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(bench::BM_read_bw)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

// Runs the products `outs` (copies of a K x M weight matrix of wbytes
// bytes, each times N columns) and sets the counters: FLOP/s, weight_B/s
// and the fractions of this run's limits (of_fma_peak, of_int8_peak for
// quantized weights, of_read_bw for N = 1).
void run_mul_mat(benchmark::State & state, const std::vector<tensor *> & outs, type wtype, int64_t K, int64_t M,
                 int64_t N, size_t wbytes, int64_t copies, int n_threads) {
    const double seconds = run_graph(state, outs, n_threads);
    if (seconds <= 0.0) return;
    const double per_iter = static_cast<double>(copies) * static_cast<double>(state.iterations()) / seconds;
    const double flops = 2.0 * static_cast<double>(M * N * K) * per_iter;
    const double wrate = static_cast<double>(wbytes) * per_iter;
    if (const double peak = limit_for(fma_peak(), n_threads); peak > 0) state.counters["of_fma_peak"] = flops / peak;
    if (wtype == TSR_TYPE_Q8_0 || wtype == TSR_TYPE_Q4_0 || wtype == TSR_TYPE_Q5_0 || wtype == TSR_TYPE_Q4_K ||
        wtype == TSR_TYPE_Q5_K || wtype == TSR_TYPE_Q6_K) {
        if (const double peak = limit_for(int8_peak(), n_threads); peak > 0) state.counters["of_int8_peak"] = flops / peak;
    }
    if (N == 1) {
        if (const double bw = limit_for(bench::limits().read_bw, n_threads); bw > 0) state.counters["of_read_bw"] = wrate / bw;
    }
    state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["weight_B/s"] = benchmark::Counter(wrate, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
}

// Weights [K, M] of one type times [K, N]; for N = 1 the graph multiplies
// by enough copies of the weights (at least 256 MiB together) that they
// stream from memory, not from the last-level cache.
void mul_mat_bench(benchmark::State & state, type wtype, int64_t K, int64_t M, int64_t N, int n_threads) {
    context ctx(data_params());
    std::mt19937 rng(1);
    tensor * w = ctx.new_tensor(wtype, {K, M});
    fill_weights(w, rng);
    const size_t wbytes = nbytes(w);
    const int64_t copies = N == 1 ? std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 20) / wbytes)) : 1;
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    fill_f32(x, rng);
    std::vector<tensor *> outs{mul_mat(ctx, w, x)};
    for (int64_t c = 1; c < copies; ++c) {
        tensor * wc = ctx.new_tensor(wtype, {K, M});
        std::memcpy(wc->data, w->data, wbytes);
        outs.push_back(mul_mat(ctx, wc, x));
    }
    state.SetLabel(std::string(type_name(wtype)) + " " + std::to_string(K) + "x" + std::to_string(M) + " x N=" + std::to_string(N) +
                   (copies > 1 ? " (" + std::to_string(copies) + " weight copies)" : ""));
    run_mul_mat(state, outs, wtype, K, M, N, wbytes, copies, n_threads);
}

// Args: weight type, N, threads (weights 4096 x 4096).
void BM_mul_mat(benchmark::State & state) {
    mul_mat_bench(state, static_cast<type>(state.range(0)), 4096, 4096, state.range(1), static_cast<int>(state.range(2)));
}

// Args: weight type, K, M, N, threads: the shapes of real models (the
// 135M preset: n_embd 576, n_ff 1536, where rows are short; the 1B
// preset's attention products in a 512-token prompt, where 2048 or 256
// rows make few GEMM row blocks to share between threads).
void BM_mul_mat_shape(benchmark::State & state) {
    mul_mat_bench(state, static_cast<type>(state.range(0)), state.range(1), state.range(2), state.range(3),
                  static_cast<int>(state.range(4)));
}

void mul_mat_args(benchmark::internal::Benchmark * b) {
    for (int th : {1, 2}) {
        for (int t : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q4_K, TSR_TYPE_Q6_K}) {
            b->Args({t, 1, th});
        }
    }
}
void mul_mat_args_prompt(benchmark::internal::Benchmark * b) {
    for (int th : {1, 2}) {
        for (int t : {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_Q8_0, TSR_TYPE_Q4_0, TSR_TYPE_Q5_0, TSR_TYPE_Q4_K, TSR_TYPE_Q6_K}) {
            b->Args({t, 512, th});
        }
    }
}

BENCHMARK(BM_mul_mat)->Apply(mul_mat_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_mul_mat_shape)
    ->Args({TSR_TYPE_Q4_0, 576, 1536, 1, 1})->Args({TSR_TYPE_Q4_0, 1536, 576, 1, 1})
    ->Args({TSR_TYPE_Q5_0, 576, 1536, 1, 1})->Args({TSR_TYPE_Q5_0, 1536, 576, 1, 1})
    ->Args({TSR_TYPE_Q8_0, 576, 1536, 1, 1})->Args({TSR_TYPE_F16, 576, 1536, 1, 1})
    ->Args({TSR_TYPE_Q4_0, 576, 1536, 64, 1})->Args({TSR_TYPE_Q5_0, 576, 1536, 64, 1})->Args({TSR_TYPE_F16, 576, 1536, 64, 1})
    ->Args({TSR_TYPE_F16, 2048, 2048, 512, 1})->Args({TSR_TYPE_F16, 2048, 2048, 512, 2})->Args({TSR_TYPE_F16, 2048, 256, 512, 2})
    ->Args({TSR_TYPE_Q4_K, 2048, 2048, 512, 1})->Args({TSR_TYPE_Q4_K, 2048, 2048, 512, 2})->Args({TSR_TYPE_Q4_0, 2048, 2048, 512, 1})
    // Q5_K (Q5_K_M files) in plain rows: the 1B preset's n_ff product, one token and a prompt.
    ->Args({TSR_TYPE_Q5_K, 2048, 5632, 1, 1})->Args({TSR_TYPE_Q5_K, 2048, 5632, 1, 2})->Args({TSR_TYPE_Q5_K, 2048, 2048, 512, 1})
    // Q6_K (Q4_K_M's output and some ffn_down/attn_v): the 1B ffn_down shape, a prompt.
    ->Args({TSR_TYPE_Q6_K, 5632, 2048, 512, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
// N = 512 takes seconds per op on a few cores: two iterations.
BENCHMARK(BM_mul_mat)->Apply(mul_mat_args_prompt)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

// A stand-in for a CPU_REPACK buffer (as tests/backends/cpu/
// test_repack_kernels.cpp builds one): only buft->context is read.
struct repack_buffer_stub {
    tsr_buffer_type bt{nullptr, nullptr, const_cast<void *>(cpu::repack_tag())};
    tsr_buffer buf{};
    repack_buffer_stub() { buf.buft = &bt; }
    // A new tensor of src's type and shape in this buffer, holding src's
    // bytes repacked; null when the shape or type cannot be repacked.
    tensor * repacked(context & ctx, const tensor * src) {
        tensor * w = ctx.new_tensor(static_cast<type>(src->type), {src->ne[0], src->ne[1]});
        if (!cpu::repack_eligible(w)) return nullptr;
        w->buffer = &buf;
        w->extra = const_cast<void *>(cpu::repack_tag());
        cpu::repack_store(w, src->data, 0, nbytes(src));
        return w;
    }
};

// MUL_MAT with Q8_0/Q4_0/Q5_0/F16/Q4_K/Q5_K/Q6_K weights in the interleaved layouts (ops/repack.hpp),
// as the CPU_REPACK buffer type stores a model's matrices. Args: weight
// type, K, M, N, threads, mode:
//   0  N = 1 streams weight copies of at least 256 MiB from memory, like
//      BM_mul_mat: independent products, so no barriers between them;
//   1  one matrix, read from the caches every iteration: weight_B/s is the
//      kernel's compute rate;
//   2  as 0 but chained (each product's input is the previous output; K =
//      M), so a barrier separates every two, as between a model's layers;
//   3  any N: independent copies of at least 96 MiB together, so each
//      product reads its weights from memory (a model's prompt), not
//      from the last-level cache as mode 0 does for N > 1.
// Counters as BM_mul_mat's (run_mul_mat).
void BM_mul_mat_repack(benchmark::State & state) {
    const auto wtype = static_cast<type>(state.range(0));
    const int64_t K = state.range(1), M = state.range(2), N = state.range(3);
    const int n_threads = static_cast<int>(state.range(4));
    const int64_t mode = state.range(5);
    const bool resident = mode == 1;
    context ctx(data_params());
    std::mt19937 rng(5);
    tensor * src = ctx.new_tensor(wtype, {K, M});
    fill_weights(src, rng);
    const size_t wbytes = nbytes(src);
    const size_t stream_bytes = mode == 3 ? size_t{96} << 20 : N == 1 && !resident ? size_t{256} << 20 : 0;
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(stream_bytes / wbytes));
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {K, N});
    fill_f32(x, rng);
    repack_buffer_stub stub;
    std::vector<tensor *> outs;
    for (int64_t c = 0; c < copies; ++c) {
        tensor * w = stub.repacked(ctx, src);
        if (w == nullptr) {
            state.SkipWithError("weights not eligible for repacking");
            return;
        }
        if (mode == 2 && !outs.empty()) outs.back() = mul_mat(ctx, w, outs.back());
        else outs.push_back(mul_mat(ctx, w, x));
    }
    state.SetLabel(std::string(type_name(wtype)) + " repacked " + std::to_string(K) + "x" + std::to_string(M) + " x N=" + std::to_string(N) +
                   (resident ? " (cache-resident)" : copies > 1 ? " (" + std::to_string(copies) + (mode == 2 ? " chained" : "") + " weight copies)" : ""));
    run_mul_mat(state, outs, wtype, K, M, N, wbytes, copies, n_threads);
}

// The 1B preset's shapes (n_embd 2048, n_ff 5632): one token streaming the
// weights; 2048 x 2048 products independent and chained; one token against
// cache-resident weights (256 x 2048: 288 KiB of Q4_0, 544 KiB of Q8_0,
// within L2); a 64-token batch.
BENCHMARK(BM_mul_mat_repack)
    ->Args({TSR_TYPE_Q4_0, 2048, 5632, 1, 1, 0})->Args({TSR_TYPE_Q4_0, 2048, 5632, 1, 2, 0})
    ->Args({TSR_TYPE_Q8_0, 2048, 5632, 1, 1, 0})->Args({TSR_TYPE_Q8_0, 2048, 5632, 1, 2, 0})
    ->Args({TSR_TYPE_Q4_0, 5632, 2048, 1, 1, 0})->Args({TSR_TYPE_Q8_0, 5632, 2048, 1, 1, 0}) // ffn_down
    ->Args({TSR_TYPE_Q4_0, 2048, 2048, 1, 2, 0})->Args({TSR_TYPE_Q4_0, 2048, 2048, 1, 2, 2})
    ->Args({TSR_TYPE_Q4_0, 2048, 256, 1, 1, 1})->Args({TSR_TYPE_Q8_0, 2048, 256, 1, 1, 1})
    ->Args({TSR_TYPE_Q4_0, 2048, 5632, 64, 1, 0})->Args({TSR_TYPE_Q8_0, 2048, 5632, 64, 1, 0})
    // F16 in groups of 16 rows (builds with F16C): BM_mul_mat's and
    // BM_mul_mat_shape's F16 shapes, plain there.
    ->Args({TSR_TYPE_F16, 4096, 4096, 1, 1, 0})->Args({TSR_TYPE_F16, 4096, 4096, 1, 2, 0})
    ->Args({TSR_TYPE_F16, 576, 1536, 1, 1, 0})->Args({TSR_TYPE_F16, 1536, 576, 1, 1, 0})
    ->Args({TSR_TYPE_F16, 2048, 5632, 1, 1, 0})->Args({TSR_TYPE_F16, 5632, 2048, 1, 1, 0})->Args({TSR_TYPE_F16, 2048, 2048, 1, 1, 0})
    // The 135M preset's short rows (n_embd 576, n_ff 1536), streamed.
    ->Args({TSR_TYPE_Q4_0, 576, 1536, 1, 1, 0})->Args({TSR_TYPE_Q4_0, 1536, 576, 1, 1, 0})
    // Q5_0, which the Q4_K mixes use for rows not a multiple of 256 (the
    // 135M shapes): streamed, cache-resident and a 64-token batch, against
    // BM_mul_mat_shape's plain Q5_0 cases of the same shapes.
    ->Args({TSR_TYPE_Q5_0, 576, 1536, 1, 1, 0})->Args({TSR_TYPE_Q5_0, 576, 1536, 1, 1, 1})
    ->Args({TSR_TYPE_Q5_0, 576, 1536, 64, 1, 0})->Args({TSR_TYPE_Q4_0, 576, 1536, 64, 1, 0})
    ->Args({TSR_TYPE_F16, 2048, 2048, 512, 1, 0})->Args({TSR_TYPE_F16, 2048, 2048, 512, 2, 0})
    ->Args({TSR_TYPE_F16, 2048, 5632, 512, 2, 0})->Args({TSR_TYPE_F16, 5632, 2048, 512, 2, 0})->Args({TSR_TYPE_F16, 2048, 256, 512, 2, 0})
    ->Args({TSR_TYPE_F16, 2048, 2048, 512, 2, 3})->Args({TSR_TYPE_F16, 2048, 5632, 512, 2, 3})
    ->Args({TSR_TYPE_BF16, 2048, 2048, 512, 1, 0})->Args({TSR_TYPE_BF16, 2048, 5632, 1, 1, 0})
    // Q4_K / Q6_K in groups of 8 or 16 rows (AVX2 / AVX-512 builds): the
    // 1B preset's shapes streamed and cache-resident, BM_mul_mat's 4096 x
    // 4096 (plain there), a prompt GEMM.
    ->Args({TSR_TYPE_Q4_K, 2048, 5632, 1, 1, 0})->Args({TSR_TYPE_Q4_K, 2048, 5632, 1, 2, 0})
    ->Args({TSR_TYPE_Q6_K, 5632, 2048, 1, 1, 0})->Args({TSR_TYPE_Q6_K, 5632, 2048, 1, 2, 0})
    ->Args({TSR_TYPE_Q4_K, 4096, 4096, 1, 1, 0})->Args({TSR_TYPE_Q6_K, 4096, 4096, 1, 1, 0})
    ->Args({TSR_TYPE_Q4_K, 2048, 256, 1, 1, 1})->Args({TSR_TYPE_Q6_K, 2048, 256, 1, 1, 1})
    ->Args({TSR_TYPE_Q4_K, 2048, 2048, 512, 1, 0})
    // Q5_K the same, against BM_mul_mat_shape's plain Q5_K cases.
    ->Args({TSR_TYPE_Q5_K, 2048, 5632, 1, 1, 0})->Args({TSR_TYPE_Q5_K, 2048, 5632, 1, 2, 0})
    ->Args({TSR_TYPE_Q5_K, 2048, 256, 1, 1, 1})->Args({TSR_TYPE_Q5_K, 2048, 2048, 512, 1, 0})
    // Prompt GEMMs of Q4_0/Q8_0/Q5_0 (on AMX where the build and the
    // processor have it; TESSERA_CPU_AMX=0 for the AVX-512 kernels).
    ->Args({TSR_TYPE_Q4_0, 2048, 2048, 512, 1, 0})->Args({TSR_TYPE_Q4_0, 2048, 2048, 512, 2, 0})
    ->Args({TSR_TYPE_Q8_0, 2048, 2048, 512, 1, 0})->Args({TSR_TYPE_Q8_0, 2048, 2048, 512, 2, 0})
    ->Args({TSR_TYPE_Q5_0, 2048, 2048, 512, 1, 0})->Args({TSR_TYPE_Q4_0, 5632, 2048, 512, 2, 3})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// One token through the products of the 1B preset's layers (n_embd 2048,
// 4 kv heads of 64, n_ff 5632), repacked, each product's input the output
// before it so that a barrier separates them as in the model: q, k, v
// (2048 x 2048, 2048 x 256 twice), o, gate, up (2048 x 5632), down (5632 x
// 2048), the next layer's q from down, each input through RMS norm;
// layers of their own weights (at
// least 256 MiB together), so they stream from memory. The kernels'
// rate between matrices of 0.3 to 6.5 MB, against BM_mul_mat_repack's
// one matrix streamed in copies. Args: weight type, threads. Counters as
// BM_mul_mat_repack's, of all the layers' weights.
void BM_mul_mat_repack_layers(benchmark::State & state) {
    const auto wtype = static_cast<type>(state.range(0));
    const int n_threads = static_cast<int>(state.range(1));
    const int64_t shapes[7][2] = {{2048, 2048}, {2048, 256}, {2048, 256}, {2048, 2048}, {2048, 5632}, {2048, 5632}, {5632, 2048}};
    // The input of each product, by index: x for q, k, v; q for o; o for
    // gate, up; gate for down (K = 5632).
    const int input_of[7] = {-1, -1, -1, 0, 3, 3, 4};
    context ctx(data_params());
    std::mt19937 rng(7);
    tensor * src[7];
    size_t layer_bytes = 0;
    int64_t layer_weights = 0;
    for (int i = 0; i < 7; ++i) {
        src[i] = ctx.new_tensor(wtype, {shapes[i][0], shapes[i][1]});
        fill_weights(src[i], rng);
        layer_bytes += nbytes(src[i]);
        layer_weights += shapes[i][0] * shapes[i][1];
    }
    const int64_t layers = std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 20) / layer_bytes));
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {2048, 1});
    fill_f32(x, rng);
    repack_buffer_stub stub;
    tensor * out[7] = {};
    std::vector<tensor *> outs; // all of them, in the model's order (k, v and up lead nowhere)
    for (int64_t l = 0; l < layers; ++l) {
        for (int i = 0; i < 7; ++i) {
            tensor * w = stub.repacked(ctx, src[i]);
            if (w == nullptr) {
                state.SkipWithError("weights not eligible for repacking");
                return;
            }
            // Inputs through RMS norm, as the model's are (the layer's
            // norms, attention and SwiGLU left out): the values neither
            // grow to inf nor shrink to subnormals along the chain.
            out[i] = mul_mat(ctx, w, rms_norm(ctx, input_of[i] < 0 ? x : out[input_of[i]], 1e-5f));
            outs.push_back(out[i]);
        }
        x = out[6];
    }
    state.SetLabel(std::string(type_name(wtype)) + " repacked, 1B layer products x " + std::to_string(layers) + " layers, chained");
    // As one product of K = 1, M = the layer's weights, in `layers` copies.
    run_mul_mat(state, outs, wtype, 1, layer_weights, 1, layer_bytes, layers, n_threads);
}
BENCHMARK(BM_mul_mat_repack_layers)
    ->Args({TSR_TYPE_Q4_0, 1})->Args({TSR_TYPE_Q4_0, 2})->Args({TSR_TYPE_Q8_0, 1})->Args({TSR_TYPE_Q8_0, 2})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// One decode step's attention products over an F16 KV cache of n_kv
// positions, the Llama graph's views (llm/llama_graph.cpp): K
// [head_dim, n_kv, n_head_kv] with rows strided by the cache row, V^T
// [n_kv, head_dim, n_head_kv] with elements strided by the cache row.
// Args: n_kv, threads. Counter: KV bytes read per second.
void BM_attn_decode(benchmark::State & state) {
    const int64_t n_kv = state.range(0);
    const int n_threads = static_cast<int>(state.range(1));
    const int64_t head_dim = 64, n_head_kv = 4, n_head = 32;
    context ctx(data_params());
    std::mt19937 rng(3);
    tensor * kc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
    tensor * vc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
    fill_weights(kc, rng);
    fill_weights(vc, rng);
    const uint64_t row = kc->nb[1], esz = kc->nb[0];
    tensor * K = view_3d(ctx, kc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
    const int64_t v_ne[3] = {n_kv, head_dim, n_head_kv};
    const uint64_t v_nb[3] = {row, esz, uint64_t(head_dim) * esz};
    tensor * Vt = view(ctx, vc, v_ne, v_nb, 0);
    tensor * q = ctx.new_tensor(TSR_TYPE_F32, {head_dim, 1, n_head});
    fill_f32(q, rng);
    tensor * kq = mul_mat(ctx, K, q);   // [n_kv, 1, n_head]
    tensor * kqv = mul_mat(ctx, Vt, kq); // [head_dim, 1, n_head]
    state.SetLabel("F16 KV n_kv=" + std::to_string(n_kv));
    const double seconds = run_graph(state, kqv, n_threads);
    if (seconds <= 0.0) return;
    state.counters["KV_B/s"] = benchmark::Counter(static_cast<double>(nbytes(kc) + nbytes(vc)),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
}

BENCHMARK(BM_attn_decode)->Args({512, 1})->Args({512, 2})->Args({4096, 1})->Args({4096, 2})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Attention of one layer as the Llama graph computes it
// (llm/llama_graph.cpp), fused (FLASH_ATTN_EXT) or unfused (MUL_MAT K.Q,
// SOFT_MAX with the causal mask, MUL_MAT with the transposed V view, CONT of
// the permuted result): head_dim 64, 9 query heads over 3 KV heads, F16 KV
// cache of n_kv positions, T queries at the last T positions. Args: fused
// (0/1), T, n_kv, threads.
void BM_attention(benchmark::State & state) {
    const bool fused = state.range(0) != 0;
    const int64_t T = state.range(1), n_kv = state.range(2);
    const int n_threads = static_cast<int>(state.range(3));
    const int64_t head_dim = 64, n_head = state.range(4), n_head_kv = state.range(5);
    context ctx(data_params());
    std::mt19937 rng(4);
    tensor * kc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
    tensor * vc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
    fill_weights(kc, rng);
    fill_weights(vc, rng);
    tensor * q = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, T});
    fill_f32(q, rng);
    tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, T});
    auto * m = static_cast<float *>(mask->data);
    for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j < n_kv; ++j) m[i * n_kv + j] = j <= n_kv - T + i ? 0.0f : -INFINITY;
    }
    const uint64_t row = kc->nb[1], esz = kc->nb[0];
    const float scale = 0.125f;
    tensor * K = view_3d(ctx, kc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
    tensor * Q = permute(ctx, q, 0, 2, 1, 3);
    tensor * out = nullptr;
    if (fused) {
        tensor * V = view_3d(ctx, vc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
        out = flash_attn_ext(ctx, Q, K, V, mask, scale);
    } else {
        const int64_t v_ne[3] = {n_kv, head_dim, n_head_kv};
        const uint64_t v_nb[3] = {row, esz, uint64_t(head_dim) * esz};
        tensor * Vt = view(ctx, vc, v_ne, v_nb, 0);
        tensor * kq = soft_max(ctx, mul_mat(ctx, K, Q), mask, scale);
        out = cont(ctx, permute(ctx, mul_mat(ctx, Vt, kq), 0, 2, 1, 3));
    }
    state.SetLabel(std::string(fused ? "fused" : "unfused") + " T=" + std::to_string(T) + " n_kv=" + std::to_string(n_kv) + " heads " +
                   std::to_string(n_head) + "/" + std::to_string(n_head_kv));
    const double seconds = run_graph(state, out, n_threads);
    if (seconds <= 0.0) return;
    // Useful work: q.k and the weighted sum of V over the visible keys
    // (query i sees n_kv - T + i + 1), 2 FLOP per multiply-add each.
    double visible = 0;
    for (int64_t i = 0; i < T; ++i) visible += static_cast<double>(n_kv - T + i + 1);
    const double flops = 4.0 * static_cast<double>(head_dim * n_head) * visible * static_cast<double>(state.iterations()) / seconds;
    state.counters["FLOP/s"] = flops;
    if (const double peak = limit_for(fma_peak(), n_threads); peak > 0) state.counters["of_fma_peak"] = flops / peak;
}

// One decoded token's fused attention (FLASH_ATTN_EXT, as BM_attention)
// in `layers` layers, each with its own F16 KV cache of n_kv positions
// (head_dim 64, 9 heads over 3 KV heads), together larger than the
// last-level cache: the caches stream from memory as in a model, where a
// token's weights evict them between uses (BM_attention keeps its one
// cache hot). Args: n_kv, layers, threads. Counters: KV bytes per second
// and the fraction of the read bandwidth. n_kv 64 is a short generation's
// cache (tg128 averages 64 keys), against BM_attention/1/1/64 hot: on Zen 4
// (2 vCPUs, shared host) 9-12 us a layer cold against 3.2 hot, and
// prefetching the first block's K and V rows at the start of a tile, or
// the next KV head's during the current one, measured the same.
void BM_attn_decode_layers(benchmark::State & state) {
    const int64_t n_kv = state.range(0), layers = state.range(1);
    const int n_threads = static_cast<int>(state.range(2));
    const int64_t head_dim = 64, n_head = 9, n_head_kv = 3;
    context ctx(data_params());
    std::mt19937 rng(6);
    tensor * mask = ctx.new_tensor(TSR_TYPE_F32, {n_kv, 1});
    std::fill_n(static_cast<float *>(mask->data), n_kv, 0.0f);
    std::vector<tensor *> outs;
    for (int64_t l = 0; l < layers; ++l) {
        tensor * kc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
        tensor * vc = ctx.new_tensor(TSR_TYPE_F16, {head_dim * n_head_kv, n_kv});
        fill_weights(kc, rng);
        fill_weights(vc, rng);
        tensor * q = ctx.new_tensor(TSR_TYPE_F32, {head_dim, n_head, 1});
        fill_f32(q, rng);
        const uint64_t row = kc->nb[1], esz = kc->nb[0];
        tensor * K = view_3d(ctx, kc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
        tensor * V = view_3d(ctx, vc, head_dim, n_kv, n_head_kv, row, head_dim * esz, 0);
        outs.push_back(flash_attn_ext(ctx, permute(ctx, q, 0, 2, 1, 3), K, V, mask, 0.125f));
    }
    state.SetLabel("fused T=1 n_kv=" + std::to_string(n_kv) + " x " + std::to_string(layers) + " layers");
    const double seconds = run_graph(state, outs, n_threads);
    if (seconds <= 0.0) return;
    const double bytes = 2.0 * static_cast<double>(n_kv * head_dim * n_head_kv * 2 * layers) * static_cast<double>(state.iterations()) / seconds;
    state.counters["KV_B/s"] = benchmark::Counter(bytes, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    if (const double bw = limit_for(bench::limits().read_bw, n_threads); bw > 0) state.counters["of_read_bw"] = bytes / bw;
}

BENCHMARK(BM_attn_decode_layers)->Args({1024, 64, 1})->Args({1024, 64, 2})->Args({64, 1024, 1})->Args({64, 1024, 2})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Args: fused, T, n_kv, threads, heads, KV heads (135M's 9 over 3, 1B's 32 over 4).
BENCHMARK(BM_attention)
    ->Args({0, 512, 512, 1, 9, 3})->Args({1, 512, 512, 1, 9, 3})->Args({0, 512, 512, 2, 9, 3})->Args({1, 512, 512, 2, 9, 3})
    ->Args({0, 1, 2048, 1, 9, 3})->Args({1, 1, 2048, 1, 9, 3})->Args({1, 1, 64, 1, 9, 3})->Args({0, 1, 2048, 2, 9, 3})->Args({1, 1, 2048, 2, 9, 3})
    ->Args({1, 512, 512, 1, 32, 4})->Args({1, 512, 512, 2, 32, 4})->Args({1, 1, 2048, 1, 32, 4})->Args({1, 1, 2048, 2, 32, 4})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

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

// The quantization of activations to Q8_0 blocks (every quantized product
// does it to its F32 columns): one prompt's 512 columns of 576 values (the
// 135M preset's width) into the 8-column tiles of the repacked kernels, on
// one thread. Counter: values per second.
void BM_quantize_q8_act(benchmark::State & state) {
    constexpr int64_t K = 576, N = 512, n_blocks = K / 32;
    constexpr cpu::q8_tile tile{8};
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(K * N));
    for (float & v : x) v = dist(rng);
    std::vector<char> tiles(static_cast<size_t>(N / tile.cols) * tile.block_bytes() * n_blocks);
    for (auto _ : state) {
        for (int64_t n = 0; n < N; ++n) {
            char * t = tiles.data() + static_cast<size_t>(n / tile.cols) * tile.block_bytes() * n_blocks;
            cpu::quantize_q8_act(x.data() + n * K, n_blocks, tile.column(t, static_cast<int>(n % tile.cols)), 0);
        }
        benchmark::DoNotOptimize(tiles.data());
        benchmark::ClobberMemory();
    }
    state.counters["values/s"] = benchmark::Counter(static_cast<double>(K * N), benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1000);
}
BENCHMARK(BM_quantize_q8_act)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same for the K-quant kernels' Q8_K super-blocks (quantize_q8_k_act):
// 512 columns of 2048 values (the 1B preset's width), on one thread.
// Counter: values per second.
void BM_quantize_q8_k_act(benchmark::State & state) {
    constexpr int64_t K = 2048, N = 512, n_super = K / 256;
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(K * N));
    for (float & v : x) v = dist(rng);
    std::vector<block_q8_k> q(static_cast<size_t>(n_super));
    for (auto _ : state) {
        for (int64_t n = 0; n < N; ++n) {
            cpu::quantize_q8_k_act(x.data() + n * K, n_super, q.data());
            benchmark::DoNotOptimize(q.data());
            benchmark::ClobberMemory();
        }
    }
    state.counters["values/s"] = benchmark::Counter(static_cast<double>(K * N), benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1000);
}
BENCHMARK(BM_quantize_q8_k_act)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One barrier of the thread pool between 2 threads: sync (thread 0 always
// releases the others), sync_any (the last to arrive releases) and
// sync_vote (a flag line per thread), as the graph walk uses them with an
// abort callback, and without (more than 8 threads / up to 8). Args: mode
// 0 = sync, 1 = sync_any, 2 = sync_vote; staggered 1 = before each barrier
// one thread, in turn, first spins 24 pause steps (about half a microsecond on
// Zen 5: one arrives well before the other, as between a graph's nodes).
// Counter: nanoseconds per barrier (the spin included when staggered).
void BM_barrier(benchmark::State & state) {
    const int mode = static_cast<int>(state.range(0));
    const bool staggered = state.range(1) != 0;
    constexpr int n_barriers = 100000;
    cpu::thread_pool pool(2);
    struct ctx_t {
        cpu::thread_pool * pool;
        int mode;
        bool staggered;
    } c{&pool, mode, staggered};
    for (auto _ : state) {
        pool.run(2, 0, [](int ith, void * p) {
            auto * c = static_cast<ctx_t *>(p);
            for (int i = 0; i < n_barriers; ++i) {
                if (c->staggered && (i & 1) == ith) {
                    for (int k = 0; k < 24; ++k) {
#if defined(__x86_64__) || defined(__i386__)
                        __builtin_ia32_pause();
#else
                        benchmark::ClobberMemory();
#endif
                    }
                }
                if (c->mode == 2) c->pool->sync_vote(ith, false);
                else if (c->mode == 1) c->pool->sync_any(nullptr, nullptr);
                else c->pool->sync(ith, nullptr, nullptr);
            }
        }, &c);
    }
    state.SetLabel(std::string(mode == 2 ? "sync_vote" : mode == 1 ? "sync_any" : "sync") + (staggered ? " staggered" : ""));
    state.counters["ns_per_barrier"] = benchmark::Counter(static_cast<double>(n_barriers),
                                                          benchmark::Counter::kIsIterationInvariantRate |
                                                              benchmark::Counter::kInvert,
                                                          benchmark::Counter::kIs1000);
}
BENCHMARK(BM_barrier)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

} // namespace

BENCHMARK_MAIN();
