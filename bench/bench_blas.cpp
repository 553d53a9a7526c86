// bench/bench_blas.cpp — tessera's F32 matrix multiplication against
// OpenBLAS (Debian's libopenblas) on the same product, the same buffers and
// in the same run, for issue 6's goal "F32 4096x512x4096: at least 85% of
// the FMA peak on one thread and at least as fast as OpenBLAS".
//
// The product is bench_ops' BM_mul_mat F32 N = 512 case:
//   weights W: tensor ne [K = 4096, M = 4096] (M rows of K contiguous F32)
//   activations X: ne [K = 4096, N = 512] (N rows of K contiguous F32)
//   dst: ne [M, N], dst[n][m] = sum_k W[m][k] * X[n][k]   (2 M N K FLOP)
// In row-major BLAS terms that is C (N x M) = X (N x K) * W^T (K x M):
//   cblas_sgemm(RowMajor, NoTrans, Trans, N, M, K, 1, X, K, W, K, 0, C, M).
//
// Benchmarks, in this order (Google Benchmark runs them in registration
// order):
//   BM_fma_peak/<bits>/<threads>  the machine's F32 FMA peak (machine_limits.hpp)
//                                 for the vector width this program's kernels use
//   BM_sgemm_agree                both products once: max |tessera - OpenBLAS|
//                                 over all of dst, and each one's largest error
//                                 against a double-precision dot product on
//                                 sampled elements; fails above the bounds
//   BM_sgemm_tessera/<threads>    MUL_MAT through the graph compute and thread pool
//   BM_sgemm_openblas/<threads>   cblas_sgemm, openblas_set_num_threads(threads)
// Counters: FLOP/s, of_fma_peak; the OpenBLAS case also tessera_over_openblas
// (FLOP/s ratio, > 1 = tessera faster). A summary table follows the run:
// wall-clock rates, and for one thread also rates by the thread's CPU time
// (what the core does while it runs this program: the figure to trust when
// other processes load the machine; the summary says when they did).
//
// OpenBLAS picks its kernels from CPUID when the library loads, whatever
// this program was compiled for; the summary prints its choice. A processor
// newer than the library (Debian 12's 0.3.21 on an Emerald Rapids Xeon)
// gets its generic "Prescott" core, SSE3 only, which would make the
// comparison meaningless: then, unless OPENBLAS_CORETYPE is set, the
// program runs itself again with OPENBLAS_CORETYPE=SkylakeX (this build
// uses AVX-512) or Haswell (AVX2). To compare the AVX2 build
// (bench_blas_haswell) with OpenBLAS's AVX2 kernels on an AVX-512 machine,
// run it with OPENBLAS_CORETYPE=Haswell.
// Built as bench_blas_haswell and bench_blas_native (bench/blas.cmake) when
// OpenBLAS is found. Run: build/<dir>/bench/bench_blas_native
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <strings.h>
#include <unistd.h>

#include "backends/cpu/thread_pool.hpp"
#include "machine_limits.hpp"
#include "tessera/core/graph.hpp"
#include "tessera/core/ops.hpp"
#include "tessera/core/tensor.hpp"

// OpenBLAS extensions (declared by OpenBLAS's cblas.h; repeated here for
// headers of other CBLAS builds that lack them).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char * openblas_get_corename(void);

namespace {

using namespace tessera;

constexpr int64_t k_K = 4096, k_M = 4096, k_N = 512;
constexpr double k_flop = 2.0 * k_M * k_N * k_K; // per product

#if defined(__AVX512F__)
constexpr int k_fma_bits = 512;
const std::map<int, double> & fma_peak() { return bench::limits().fma512; }
#else
constexpr int k_fma_bits = 256;
const std::map<int, double> & fma_peak() { return bench::limits().fma256; }
#endif

// The operands (uniform in [-1, 1), fixed seed), tessera's MUL_MAT node and
// OpenBLAS's output, made once for every benchmark of the run.
struct problem {
    context ctx{context::params{16, true}};
    tensor * w = ctx.new_tensor(TSR_TYPE_F32, {k_K, k_M});
    tensor * x = ctx.new_tensor(TSR_TYPE_F32, {k_K, k_N});
    tensor * dst = mul_mat(ctx, w, x); // F32 [M, N]
    graph g;
    std::vector<float> c = std::vector<float>(static_cast<size_t>(k_M * k_N)); // OpenBLAS: N x M row-major

    problem() {
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        for (tensor * t : {w, x}) {
            auto * p = static_cast<float *>(t->data);
            for (int64_t i = 0; i < nelements(t); ++i) p[i] = dist(rng);
        }
        g.build_forward(dst);
    }
    const float * wp() const { return static_cast<const float *>(w->data); }
    const float * xp() const { return static_cast<const float *>(x->data); }
    const float * dp() const { return static_cast<const float *>(dst->data); }

    void sgemm_openblas() {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(k_N), static_cast<int>(k_M),
                    static_cast<int>(k_K), 1.0f, xp(), static_cast<int>(k_K), wp(), static_cast<int>(k_K), 0.0f,
                    c.data(), static_cast<int>(k_M));
    }
};

problem & the_problem() {
    static problem p;
    return p;
}

// FLOP/s by (library, threads), for the ratio counter and the summary.
std::map<std::pair<std::string, int>, double> & results() {
    static std::map<std::pair<std::string, int>, double> r;
    return r;
}

void report(benchmark::State & state, const std::string & lib, int n_threads, double seconds) {
    const double rate = k_flop * static_cast<double>(state.iterations()) / seconds;
    results()[{lib, n_threads}] = rate;
    state.counters["FLOP/s"] = benchmark::Counter(rate, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
    state.counters["threads"] = n_threads;
    const auto it = fma_peak().find(n_threads);
    if (it != fma_peak().end() && it->second > 0) state.counters["of_fma_peak"] = rate / it->second;
}

void BM_sgemm_tessera(benchmark::State & state) {
    const int n_threads = static_cast<int>(state.range(0));
    problem & p = the_problem();
    cpu::thread_pool pool(n_threads);
    const tsr_graph_view v = p.g.view();
    if (pool.compute(v, n_threads) != TSR_STATUS_SUCCESS) { // warm-up
        state.SkipWithError("graph compute failed");
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        const tsr_status st = pool.compute(v, n_threads);
        benchmark::DoNotOptimize(st);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetLabel("F32 W 4096x4096 x X N=512");
    report(state, "tessera", n_threads, seconds);
}

void BM_sgemm_openblas(benchmark::State & state) {
    const int n_threads = static_cast<int>(state.range(0));
    problem & p = the_problem();
    openblas_set_num_threads(n_threads);
    p.sgemm_openblas(); // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        p.sgemm_openblas();
        benchmark::ClobberMemory();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetLabel(std::string("OpenBLAS core ") + openblas_get_corename());
    report(state, "openblas", n_threads, seconds);
    const auto t = results().find({"tessera", n_threads});
    if (t != results().end()) state.counters["tessera_over_openblas"] = t->second / results()[{"openblas", n_threads}];
}

// Both products once, on one thread. dst and C are both laid out N x M
// (element (n, m) at n * M + m). Each dot product in float has error at
// most gamma_K * sum_k |W[m][k] X[n][k]| with gamma_K = K u / (1 - K u),
// u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms",
// 2nd ed., section 3.1), whatever the summation order.
void BM_sgemm_agree(benchmark::State & state) {
    problem & p = the_problem();
    cpu::thread_pool pool(1);
    double max_diff = 0, max_err_tessera = 0, max_err_openblas = 0, max_ratio = 0;
    for (auto _ : state) {
        if (pool.compute(p.g.view(), 1) != TSR_STATUS_SUCCESS) {
            state.SkipWithError("graph compute failed");
            return;
        }
        openblas_set_num_threads(1);
        p.sgemm_openblas();
        for (size_t i = 0; i < p.c.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(p.dp()[i] - p.c[i])));
        const double u = std::ldexp(1.0, -24), gamma = k_K * u / (1 - k_K * u);
        std::mt19937 rng(7);
        std::uniform_int_distribution<int64_t> pick_n(0, k_N - 1), pick_m(0, k_M - 1);
        for (int s = 0; s < 1024; ++s) {
            const int64_t n = pick_n(rng), m = pick_m(rng);
            double dot = 0, abs_sum = 0;
            for (int64_t k = 0; k < k_K; ++k) {
                const double prod = double(p.wp()[m * k_K + k]) * double(p.xp()[n * k_K + k]);
                dot += prod;
                abs_sum += std::fabs(prod);
            }
            const double et = std::fabs(p.dp()[n * k_M + m] - dot), eo = std::fabs(p.c[size_t(n * k_M + m)] - dot);
            max_err_tessera = std::max(max_err_tessera, et);
            max_err_openblas = std::max(max_err_openblas, eo);
            max_ratio = std::max(max_ratio, std::max(et, eo) / (gamma * abs_sum));
        }
    }
    state.counters["max_abs_diff"] = max_diff;
    state.counters["max_err_tessera"] = max_err_tessera;
    state.counters["max_err_openblas"] = max_err_openblas;
    std::printf("agreement: max |tessera - OpenBLAS| over all %lld elements %.3g; against double on 1024 samples: "
                "tessera %.3g, OpenBLAS %.3g (largest error / its bound: %.3g)\n",
                static_cast<long long>(k_M * k_N), max_diff, max_err_tessera, max_err_openblas, max_ratio);
    // The sampled errors must be within the bound; over all elements, two
    // results each within it differ by at most 2 gamma_K sum|W X| <= 2
    // gamma_K K (|W|, |X| < 1): a tighter, empirical 1e-2 (the sums are ~20
    // in magnitude, float rounding leaves ~1e-4) still catches any layout
    // or indexing mistake, which makes differences of the order of the sums.
    if (max_ratio > 1.0) state.SkipWithError("a sampled element exceeds the rounding-error bound");
    else if (max_diff > 1e-2) state.SkipWithError("tessera and OpenBLAS results differ");
}

BENCHMARK(bench::BM_fma_peak)->Args({k_fma_bits, 1})->Args({k_fma_bits, 2})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_sgemm_agree)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
// About 0.2 s per product on one thread: five iterations.
BENCHMARK(BM_sgemm_tessera)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(BM_sgemm_openblas)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

// "-" for a missing value, else v printed with printf format f.
std::string cell(double v, const char * f) {
    if (!(v > 0)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// Wall time / CPU time of the calling thread, by (benchmark, threads), from
// the finished runs: 1 on an idle machine; above 1 when other processes
// took the core. The one-thread rates divided by CPU time (rate x this)
// are what the core does when it runs this program, whatever the load.
std::map<std::pair<std::string, int>, double> & wall_over_cpu() {
    static std::map<std::pair<std::string, int>, double> m;
    return m;
}

class summary_reporter : public benchmark::ConsoleReporter {
public:
    // Colours only on a terminal; counters after the times (the default
    // console output).
    summary_reporter() : ConsoleReporter(::isatty(::fileno(stdout)) ? OO_Color : OO_None) {}
    void ReportRuns(const std::vector<Run> & runs) override {
        for (const Run & r : runs) {
            const auto th = r.counters.find("threads");
            if (r.error_occurred || th == r.counters.end() || r.GetAdjustedCPUTime() <= 0) continue;
            const std::string & f = r.run_name.function_name;
            const std::string lib = f == "BM_sgemm_tessera" ? "tessera" : f == "BM_sgemm_openblas" ? "openblas" : "peak";
            wall_over_cpu()[{lib, static_cast<int>(th->second.value)}] = r.GetAdjustedRealTime() / r.GetAdjustedCPUTime();
        }
        ConsoleReporter::ReportRuns(runs);
    }
};

void print_summary() {
    if (results().empty()) return;
    std::printf("\nF32 GEMM M=%lld N=%lld K=%lld (tessera kernels for %d-bit vectors; OpenBLAS core %s)\n",
                static_cast<long long>(k_M), static_cast<long long>(k_N), static_cast<long long>(k_K), k_fma_bits,
                openblas_get_corename());
    std::printf("| threads | timed by | FMA peak GFLOP/s | tessera GFLOP/s | of peak | OpenBLAS GFLOP/s | of peak | tessera / OpenBLAS |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    auto get = [](const std::map<std::pair<std::string, int>, double> & m, const char * lib, int th) {
        const auto it = m.find({lib, th});
        return it == m.end() ? 0.0 : it->second;
    };
    for (int th : {1, 2}) {
        const double tv = get(results(), "tessera", th), ov = get(results(), "openblas", th);
        if (tv == 0 && ov == 0) continue;
        const auto pk = fma_peak().find(th);
        const double peak = pk == fma_peak().end() ? 0.0 : pk->second;
        // Wall clock for every thread count; for one thread also the
        // calling thread's CPU time (see wall_over_cpu).
        for (int by_cpu = 0; by_cpu <= (th == 1 ? 1 : 0); ++by_cpu) {
            const double sp = by_cpu ? get(wall_over_cpu(), "peak", th) : 1.0;
            const double st = by_cpu ? get(wall_over_cpu(), "tessera", th) : 1.0;
            const double so = by_cpu ? get(wall_over_cpu(), "openblas", th) : 1.0;
            const double p = peak * sp, t = tv * st, o = ov * so;
            std::printf("| %d | %s | %s | %s | %s | %s | %s | %s |\n", th, by_cpu ? "thread CPU time" : "wall clock",
                        cell(p / 1e9, "%.1f").c_str(), cell(t / 1e9, "%.1f").c_str(),
                        cell(p > 0 ? t / p : 0, "%.3f").c_str(), cell(o / 1e9, "%.1f").c_str(),
                        cell(p > 0 ? o / p : 0, "%.3f").c_str(), cell(o > 0 ? t / o : 0, "%.3f").c_str());
        }
    }
    double worst = 1;
    for (const auto & [key, v] : wall_over_cpu()) {
        if (key.second == 1) worst = std::max(worst, v);
    }
    if (worst > 1.05) {
        std::printf("machine busy: a one-thread run got only %.0f%% of a core (wall clock / CPU time %.2f); the "
                    "wall-clock figures are low, the two-thread ones most of all\n",
                    100.0 / worst, worst);
    }
}

// When OpenBLAS fell back to its generic core on a processor with AVX2,
// runs this program again with OPENBLAS_CORETYPE naming the core of this
// build's vectors (see the header); returns only when it does not.
void choose_openblas_core(char ** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
    const std::string core = openblas_get_corename();
    __builtin_cpu_init();
    if (strcasecmp(core.c_str(), "prescott") != 0 || !__builtin_cpu_supports("avx2")) return;
#ifdef __AVX512F__
    const char * want = __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell";
#else
    const char * want = "Haswell";
#endif
    std::fprintf(stderr, "bench_blas: OpenBLAS chose its generic core %s on this processor; running again with OPENBLAS_CORETYPE=%s\n",
                 core.c_str(), want);
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr, "bench_blas: cannot run again (%s); continuing with %s\n", std::strerror(errno), core.c_str());
}

} // namespace

int main(int argc, char ** argv) {
    choose_openblas_core(argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    summary_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    print_summary();
    return 0;
}
