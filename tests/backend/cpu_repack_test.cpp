// The CPU device's "CPU_REPACK" buffer type (issue 6: Q8_0/Q4_0/Q5_0/Q5_1 and K-quant
// weight matrices stored row-interleaved) through the registry and the C tables:
// on the compiled-in backend and on every variant plugin in the build
// directory that this processor can run (a variant scoring 0 here is
// skipped). Per variant: it is listed as the device's extra buffer type;
// get_tensor returns exactly the bytes set_tensor was given (whole, partial,
// tensor_copy both ways); MUL_MAT products with the weights in CPU_REPACK
// equal those with the same bytes in plain host memory (tolerance below)
// and the double-precision reference from the ORIGINAL bytes, decoded here
// (GGUF block layouts: Q8_0 = F16 d + 32 int8, x = d q; Q4_0 = F16 d + 16
// bytes, element j in the low nibble of byte j, j + 16 in the high one,
// x = d (nibble - 8); Q5_0 = F16 d + 4 bytes qh + the 16 Q4_0 nibble bytes,
// x = d (nibble + 16 * (bit j of qh) - 16); Q5_1 = F16 d + F16 m + Q5_0's
// qh and nibbles, x = d q + m); Q4_K, Q5_K and Q6_K products equal
// the plain ones bit for
// bit (interleaved in groups of 8 or 16 rows by the AVX2 / AVX-512
// variants); 1, 2 and 3 threads give identical bytes; only MUL_MAT may read
// a repacked matrix (GET_ROWS is refused).
//
// Tolerances (per element): vs reference, the Q8_0 activation quantization
// bound sum_k |w_k| * 0.6 * amax_block(k) / 127 + 1e-5 sum |w_k x_k| (as in
// tests/backends/cpu/test_ops_mul_mat.cpp); vs plain, both paths add the
// same exact block terms in different orders: 2.4e-7 (K/32 + 6) (sum |w_k
// x_k| + the quantization bound); Q5_1's plain path (the portable kernel)
// takes F32 activations: twice the bound against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_graph.hpp"
#include "backend/test_support.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "tessera/backend/cpu.hpp"

namespace tessera::test {
namespace {

// Element (k, m) of a Q8_0/Q4_0/Q5_0 matrix in its original bytes, in double.
double quant_at(int32_t type, const uint8_t * bytes, int64_t K, int64_t k, int64_t m) {
    const size_t bb = type == TSR_TYPE_Q8_0 ? 34 : type == TSR_TYPE_Q5_0 ? 22 : type == TSR_TYPE_Q5_1 ? 24 : 18;
    const uint8_t * blk = bytes + (static_cast<size_t>(m) * (K / 32) + static_cast<size_t>(k / 32)) * bb;
    const double d = f16_value(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
    const int j = static_cast<int>(k % 32);
    if (type == TSR_TYPE_Q8_0) return d * static_cast<int8_t>(blk[2 + j]);
    if (type == TSR_TYPE_Q5_0) {
        const uint32_t qh = blk[2] | (blk[3] << 8) | (blk[4] << 16) | (static_cast<uint32_t>(blk[5]) << 24);
        const int q = (j < 16 ? (blk[6 + j] & 0x0f) : (blk[6 + j - 16] >> 4)) | static_cast<int>((qh >> j) & 1u) << 4;
        return d * (q - 16);
    }
    if (type == TSR_TYPE_Q5_1) {
        const double m = f16_value(static_cast<uint16_t>(blk[2] | (blk[3] << 8)));
        const uint32_t qh = blk[4] | (blk[5] << 8) | (blk[6] << 16) | (static_cast<uint32_t>(blk[7]) << 24);
        const int q = (j < 16 ? (blk[8 + j] & 0x0f) : (blk[8 + j - 16] >> 4)) | static_cast<int>((qh >> j) & 1u) << 4;
        return d * q + m;
    }
    const int q = j < 16 ? (blk[2 + j] & 0x0f) : (blk[2 + j - 16] >> 4);
    return d * (q - 8);
}

bool is_k_quant(int32_t type) {
    return type == TSR_TYPE_Q4_K || type == TSR_TYPE_Q5_K || type == TSR_TYPE_Q6_K;
}

size_t block_bytes(int32_t type) {
    switch (type) {
    case TSR_TYPE_Q8_0: return 34;
    case TSR_TYPE_Q4_0: return 18;
    case TSR_TYPE_Q5_0: return 22;
    case TSR_TYPE_Q5_1: return 24;
    case TSR_TYPE_Q4_K: return 144;
    case TSR_TYPE_Q5_K: return 176;
    default: return 210; // Q6_K
    }
}

// Random blocks: random bytes, the F16 scales (Q8_0/Q4_0/Q5_0/Q5_1 d at byte 0,
// Q5_1 m at 2; Q4_K and Q5_K
// d, dmin at 0, 2; Q6_K d at 208) random F16 of magnitude in [2^-9, 2^-5)
// (Q4_K's and Q5_K's positive).
std::vector<uint8_t> random_blocks(int32_t type, size_t n, std::mt19937 & rng) {
    const size_t bb = block_bytes(type);
    std::vector<size_t> scales{0};
    if (type == TSR_TYPE_Q4_K || type == TSR_TYPE_Q5_K) scales = {0, 2};
    if (type == TSR_TYPE_Q6_K) scales = {208};
    if (type == TSR_TYPE_Q5_1) scales = {0, 2};
    std::vector<uint8_t> v(n);
    std::uniform_int_distribution<int> byte(0, 255), e(6, 9), mant(0, 1023), s(0, 1);
    for (size_t b = 0; b + bb <= n; b += bb) {
        for (size_t j = 0; j < bb; ++j) v[b + j] = static_cast<uint8_t>(byte(rng));
        for (size_t o : scales) {
            const int sign = type == TSR_TYPE_Q4_K || type == TSR_TYPE_Q5_K ? 0 : s(rng);
            const auto h = static_cast<uint16_t>((sign << 15) | (e(rng) << 10) | mant(rng));
            v[b + o] = static_cast<uint8_t>(h & 0xff);
            v[b + o + 1] = static_cast<uint8_t>(h >> 8);
        }
    }
    return v;
}

std::optional<buffer_type> find_repack(const device & d) {
    for (const buffer_type & bt : d.extra_buffer_types()) {
        if (std::string(bt.name()) == "CPU_REPACK") return bt;
    }
    return std::nullopt;
}

// All checks on the device of a registered CPU family.
void check_device(const backend_reg & r) {
    const device d = r.devices().at(0);
    // Q4_0 groups: 16 rows where the kernels use AVX512-VNNI, else 8 (repack.hpp).
    const int64_t q4_rows = feature(r, "AVX512_VNNI") == "1" ? 16 : 8;
    const auto rbt = find_repack(d);
    ASSERT_TRUE(rbt.has_value()) << "no CPU_REPACK buffer type";
    EXPECT_FALSE(rbt->is_host());
    EXPECT_TRUE(d.supports_buft(*rbt));
    EXPECT_EQ(rbt->get_device(), d);
    backend be = d.init();
    struct shape {
        int32_t type;
        int64_t K, M;
    };
    const shape shapes[] = {{TSR_TYPE_Q8_0, 64, 8},   {TSR_TYPE_Q4_0, 64, 8},     {TSR_TYPE_Q8_0, 256, 24},
                            {TSR_TYPE_Q4_0, 256, 24}, {TSR_TYPE_Q8_0, 4096, 40},  {TSR_TYPE_Q4_0, 4096, 40},
                            {TSR_TYPE_Q8_0, 64, 12},  {TSR_TYPE_Q4_0, 256, 20}, // rows not a multiple of 8
                            {TSR_TYPE_Q4_0, 576, 32}, {TSR_TYPE_Q4_0, 64, 16},  // whole groups of 16
                            {TSR_TYPE_Q5_0, 64, 8},   {TSR_TYPE_Q5_0, 576, 24},   {TSR_TYPE_Q5_0, 256, 20},
                            {TSR_TYPE_Q5_1, 64, 8},   {TSR_TYPE_Q5_1, 576, 24},   {TSR_TYPE_Q5_1, 256, 20},
                            // K-quants: groups of 8 (AVX2) or 16 (AVX-512) rows; 24 rows are whole groups of 8 only
                            {TSR_TYPE_Q4_K, 512, 16}, {TSR_TYPE_Q4_K, 512, 48}, {TSR_TYPE_Q4_K, 256, 24},
                            {TSR_TYPE_Q5_K, 512, 16}, {TSR_TYPE_Q5_K, 256, 48}, {TSR_TYPE_Q5_K, 768, 24},
                            {TSR_TYPE_Q6_K, 512, 16}, {TSR_TYPE_Q6_K, 256, 48}, {TSR_TYPE_Q6_K, 512, 24}};
    for (const shape & s : shapes) {
        SCOPED_TRACE(std::string(type_name(s.type)) + " K=" + std::to_string(s.K) + " M=" + std::to_string(s.M));
        std::mt19937 rng(static_cast<unsigned>(s.K + 13 * s.M + s.type));
        context wctx(context::params{8, false});
        tsr_tensor * ar = wctx.new_tensor(static_cast<type>(s.type), {s.K, s.M});
        const size_t n = nbytes(ar);
        std::vector<uint8_t> orig = random_blocks(s.type, n, rng);
        buffer rbuf = rbt->alloc(rbt->alloc_size(ar));
        rbuf.place(ar, 0);
        tensor_set(ar, orig.data(), 0, n);
        std::vector<uint8_t> back(n);
        tensor_get(ar, back.data(), 0, n);
        ASSERT_EQ(back, orig) << "get_tensor does not return the bytes set";
        // Random bytes: a plain copy would be identical. Q5_0, Q5_1 and
        // Q8_0 with whole groups of 8 rows are interleaved in every build,
        // Q4_0 with whole groups of q4_rows (src/backends/cpu/ops/repack.hpp).
        const bool interleaved = std::memcmp(ar->data, orig.data(), n) != 0;
        if (s.M % 8 != 0) EXPECT_FALSE(interleaved);
        if (s.type == TSR_TYPE_Q4_0) {
            EXPECT_EQ(interleaved, s.M % q4_rows == 0);
        } else if (!is_k_quant(s.type) && s.M % 8 == 0) {
            EXPECT_TRUE(interleaved);
        }
        // partial reads at odd offsets
        for (size_t off : {size_t(1), size_t(35), n / 3, n - 7}) {
            const size_t len = std::min<size_t>(n - off, 101);
            std::vector<uint8_t> part(len);
            tensor_get(ar, part.data(), off, len);
            ASSERT_TRUE(std::equal(part.begin(), part.end(), orig.begin() + static_cast<ptrdiff_t>(off))) << off;
        }
        // tensor_copy out of and into the repacked tensor
        context hctx(context::params{64, true});
        tsr_tensor * a = hctx.new_tensor(static_cast<type>(s.type), {s.K, s.M});
        tensor_copy(ar, a);
        ASSERT_EQ(std::memcmp(a->data, orig.data(), n), 0) << "tensor_copy from CPU_REPACK";
        tensor_copy(a, ar);
        tensor_get(ar, back.data(), 0, n);
        ASSERT_EQ(back, orig) << "tensor_copy into CPU_REPACK";

        // Through views (a row, a reshape) the same original bytes: read,
        // written and set, row 1 only (they read and wrote the interleaved
        // storage at the view's offset, and a write into row 1 changed
        // bytes of the other rows).
        {
            const size_t row = n / static_cast<size_t>(s.M);
            tsr_tensor * row1 = view_2d(wctx, ar, s.K, 1, row, row);
            std::vector<uint8_t> got(row);
            tensor_get(row1, got.data(), 0, row);
            ASSERT_TRUE(std::equal(got.begin(), got.end(), orig.begin() + static_cast<ptrdiff_t>(row))) << "row 1 through a view";
            tsr_tensor * whole = reshape(wctx, ar, {s.K * s.M});
            std::vector<uint8_t> all(n);
            tensor_get(whole, all.data(), 0, n);
            ASSERT_EQ(all, orig) << "a reshape of the tensor";
            std::vector<uint8_t> want = orig;
            const std::vector<uint8_t> row_bytes = random_blocks(s.type, row, rng);
            tensor_set(row1, row_bytes.data(), 0, row);
            std::copy(row_bytes.begin(), row_bytes.end(), want.begin() + static_cast<ptrdiff_t>(row));
            tensor_get(ar, all.data(), 0, n);
            ASSERT_EQ(all, want) << "row 1 written through a view";
            tensor_memset(row1, 0, 2, row - 2);
            std::fill(want.begin() + static_cast<ptrdiff_t>(row + 2), want.begin() + static_cast<ptrdiff_t>(2 * row), uint8_t{0});
            tensor_get(ar, all.data(), 0, n);
            ASSERT_EQ(all, want) << "row 1 set through a view";
            tensor_set(ar, orig.data(), 0, n);
        }

        // GET_ROWS may not read it
        tsr_tensor * idx = hctx.new_tensor(TSR_TYPE_I32, {1});
        std::memset(idx->data, 0, 4);
        EXPECT_EQ(d.supports_op(get_rows(hctx, ar, idx)), !interleaved) << "GET_ROWS on CPU_REPACK weights";

        for (int64_t N : {1, 3, 5, 70}) {
            SCOPED_TRACE("N=" + std::to_string(N));
            tsr_tensor * b = hctx.new_tensor(TSR_TYPE_F32, {s.K, N});
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            for (int64_t i = 0; i < s.K * N; ++i) static_cast<float *>(b->data)[i] = u(rng);
            tsr_tensor * plain = mul_mat(hctx, a, b);
            tsr_tensor * packed = mul_mat(hctx, ar, b);
            ASSERT_TRUE(d.supports_op(packed));
            graph gp, gr;
            gp.build_forward(plain);
            gr.build_forward(packed);
            be.set_n_threads(2);
            ASSERT_EQ(be.graph_compute(gp), TSR_STATUS_SUCCESS);
            std::vector<float> first;
            for (int nth : {1, 2, 3}) {
                be.set_n_threads(nth);
                std::memset(packed->data, 0xff, nbytes(packed));
                ASSERT_EQ(be.graph_compute(gr), TSR_STATUS_SUCCESS);
                const auto * y = static_cast<const float *>(packed->data);
                if (first.empty()) {
                    first.assign(y, y + s.M * N);
                } else {
                    ASSERT_EQ(std::memcmp(first.data(), y, first.size() * sizeof(float)), 0) << nth << " threads";
                }
            }
            if (is_k_quant(s.type)) {
                // The K-quant paths compute the same integers and F32 steps
                // (their values against a double reference:
                // tests/backends/cpu/test_ops_mul_mat_k.cpp): equal bits.
                ASSERT_EQ(std::memcmp(first.data(), plain->data, first.size() * sizeof(float)), 0) << "repacked differs from plain";
                EXPECT_TRUE(std::any_of(first.begin(), first.end(), [](float v) { return std::fabs(v) > 1e-3f; }));
                continue;
            }
            std::vector<double> x(static_cast<size_t>(s.K)), amax(static_cast<size_t>(s.K));
            for (int64_t c = 0; c < N; ++c) {
                for (int64_t k = 0; k < s.K; ++k) x[k] = static_cast<const float *>(b->data)[c * s.K + k];
                for (int64_t k0 = 0; k0 < s.K; k0 += 32) {
                    double mx = 0;
                    for (int64_t k = k0; k < k0 + 32; ++k) mx = std::max(mx, std::fabs(x[k]));
                    for (int64_t k = k0; k < k0 + 32; ++k) amax[k] = mx;
                }
                for (int64_t m = 0; m < s.M; ++m) {
                    double want = 0, abs_sum = 0, q_err = 0;
                    for (int64_t k = 0; k < s.K; ++k) {
                        const double w = quant_at(s.type, orig.data(), s.K, k, m);
                        want += w * x[k];
                        abs_sum += std::fabs(w * x[k]);
                        q_err += std::fabs(w) * 0.6 * amax[k] / 127.0;
                    }
                    const double got = first[c * s.M + m];
                    const double pl = static_cast<const float *>(plain->data)[c * s.M + m];
                    ASSERT_NEAR(got, want, q_err + 1e-5 * abs_sum) << "m=" << m << " n=" << c;
                    const double vs_plain = s.type == TSR_TYPE_Q5_1 ? 2 * (q_err + 1e-5 * abs_sum)
                                                                    : 2.4e-7 * static_cast<double>(s.K / 32 + 6) * (abs_sum + q_err);
                    ASSERT_NEAR(got, pl, vs_plain + 1e-30) << "vs plain, m=" << m << " n=" << c;
                }
            }
        }
    }
}

TEST(CpuRepack, CompiledInBackend) {
    registry reg;
    backend_reg cpu = reg.register_backend(tessera::cpu::backend_reg());
    check_device(cpu);
}

// The repacked weights the process holds (live_repack_bytes, by which the
// one-token kernels choose between L1 and L2 prefetching) grow by each
// CPU_REPACK buffer's size while it lives and shrink back when it is freed;
// host buffers do not count. With the Intel default (L2 only above the L3
// size) the kind follows them.
TEST(CpuRepack, LiveRepackedBytesFollowTheBuffers) {
    registry reg;
    backend_reg cpu = reg.register_backend(tessera::cpu::backend_reg());
    const device dev = cpu.devices().at(0);
    const auto rbt = find_repack(dev);
    ASSERT_TRUE(rbt.has_value());
    auto & live = tessera::cpu::live_repack_bytes();
    const size_t before = live.load();
    {
        const buffer a = rbt->alloc(size_t{3} << 20);
        ASSERT_TRUE(a);
        EXPECT_EQ(live.load(), before + (size_t{3} << 20));
        {
            const buffer b = rbt->alloc(1000);
            ASSERT_TRUE(b);
            EXPECT_EQ(live.load(), before + (size_t{3} << 20) + 1000);
            const buffer host = dev.default_buffer_type().alloc(size_t{1} << 20);
            ASSERT_TRUE(host);
            EXPECT_EQ(live.load(), before + (size_t{3} << 20) + 1000);
        }
        EXPECT_EQ(live.load(), before + (size_t{3} << 20));
        tessera::cpu::cpu_tuning t;
        t.stream_prefetch = 4096;
        t.stream_prefetch_l2 = true;
        t.stream_prefetch_l2_above = before + (size_t{2} << 20);
        EXPECT_EQ(tessera::cpu::stream_pf_of(t), tessera::cpu::stream_pf::l2); // 3 MiB more: above
        t.stream_prefetch_l2_above = before + (size_t{4} << 20);
        EXPECT_EQ(tessera::cpu::stream_pf_of(t), tessera::cpu::stream_pf::l1);
    }
    EXPECT_EQ(live.load(), before);
}

// The kernel's THP mode ("always", "madvise" or "never": the bracketed
// word of /sys/kernel/mm/transparent_hugepage/enabled), or "" when unknown.
std::string thp_mode() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (!std::getline(in, line)) return "";
    const size_t open = line.find('['), close = line.find(']');
    return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : "";
}

// The THPeligible value (0 or 1) that /proc/self/smaps gives the mapping
// holding address p, or -1 when there is none (or no such line).
int thp_eligible(const void * p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::ifstream in("/proc/self/smaps");
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        unsigned long lo = 0, hi = 0;
        char tail = 0;
        // A mapping's header line, "lo-hi perms offset dev inode path", vs
        // its "Key: value" lines (keys start with a capital letter).
        if (!line.empty() && !(line[0] >= 'A' && line[0] <= 'Z') && std::sscanf(line.c_str(), "%lx-%lx%c", &lo, &hi, &tail) == 3) {
            inside = lo <= a && a < hi;
        } else if (inside && line.rfind("THPeligible:", 0) == 0) {
            return std::stoi(line.substr(12));
        }
    }
    return -1;
}

// Weight buffers of 4 MiB or more are advised onto huge pages when
// cpu_tuning::huge_pages is on (TESSERA_CPU_HUGE_PAGES; ctest runs this
// test once more with it 0): under THP mode "madvise" their mapping is
// eligible exactly then; a small buffer is not advised. (madvise gives the
// advised bytes a mapping of their own, whatever the allocator placed
// around them.)
TEST(CpuRepack, LargeBuffersAreAdvisedOntoHugePages) {
    const std::string mode = thp_mode();
    if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages: '" << mode << "'";
    registry reg;
    backend_reg cpu = reg.register_backend(tessera::cpu::backend_reg());
    const auto rbt = find_repack(cpu.devices().at(0));
    ASSERT_TRUE(rbt.has_value());
    const buffer big = rbt->alloc(size_t{8} << 20);
    ASSERT_TRUE(big);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.base()) % (size_t{2} << 20), 0u);
    const bool advised = tessera::cpu::tuning().huge_pages;
    if (const char * env = std::getenv(tessera::cpu::k_huge_pages_env); env != nullptr) {
        EXPECT_EQ(advised, std::string(env) == "1") << env;
    } else {
        EXPECT_TRUE(advised) << "the default";
    }
    const int eligible = thp_eligible(big.base());
    if (eligible < 0) GTEST_SKIP() << "/proc/self/smaps has no THPeligible lines (Linux before 5.0?)";
    EXPECT_EQ(eligible, mode == "always" || advised ? 1 : 0) << "mode " << mode << ", advice " << advised;
    if (mode == "madvise") {
        const buffer small = rbt->alloc(size_t{1} << 20);
        ASSERT_TRUE(small);
        EXPECT_EQ(thp_eligible(small.base()), 0);
    }
}

TEST(CpuRepack, EveryVariantPluginThisMachineRuns) {
    const fs::path dir(TESSERA_BINARY_DIR);
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto & e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("libtessera-cpu-", 0) == 0 && n.ends_with(".so")) files.push_back(e.path());
    }
    if (files.empty()) GTEST_SKIP() << "no CPU plugins in " << dir << " (TESSERA_CPU_STATIC build)";
    std::sort(files.begin(), files.end());
    int ran = 0;
    for (const fs::path & f : files) {
        SCOPED_TRACE(f.filename().string());
        registry reg;
        backend_reg r;
        try {
            r = reg.load(f);
        } catch (const error & e) {
            // score 0: this processor lacks the variant's instructions
            std::printf("[ skipped  ] %s: %s\n", f.filename().c_str(), e.what());
            continue;
        }
        check_device(r);
        ++ran;
    }
    EXPECT_GT(ran, 0);
}

} // namespace
} // namespace tessera::test
