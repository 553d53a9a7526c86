// backends/cpu/ops/mul_mat_repack.cpp — MUL_MAT on repacked Q8_0/Q4_0/Q5_0/
// Q5_1 weights (layout: repack.hpp), for any number of columns.
//
// Columns are quantized to Q8_0 (q8_act.hpp) into micro-tiles of k_c
// columns (AVX-512 builds 8, others 4), per block [k_c x 32 quants][k_c
// scales F32][k_c sums << shift]. The micro-kernel computes one group of 8
// rows against C <= k_c columns (AVX-512 builds: two groups, 16 rows, in
// 512-bit vectors when the product has at least k_gemm_min_n columns; Q4_0
// in AVX512-VNNI builds: its one group of 16 rows, for any columns):
// per block it loads the group's 8 scales (one F16x8 load) and each step
// (four quant bytes of each of the 8 rows) once, and multiplies every step
// with four activation quants of each column broadcast to all lanes, so
// one weight load feeds the accumulators of 8 rows x C columns and int32
// lane r ends with row r's exact block dot product:
//   Q4_0      nibbles (w + 8, 0..15) as unsigned bytes: AND / shift+AND of
//             a step give elements 4j..4j+3 and 16+4j..16+4j+3; vpmaddubsw
//             pair sums (<= 2 * 15 * 127) of the 8 products per lane fit
//             int16, one vpmaddwd widens them (with VNNI: vpdpbusd); then
//             8 * (the activation block's quant sum) is subtracted.
//   Q5_0      the 5-bit quants (w + 16, 0..31) as unsigned bytes: a step's
//             nibbles as in Q4_0, plus 0x10 in each byte whose fifth bit
//             is set (the group's qh is one 32-byte load, lane r row r's;
//             vpshufb spreads the qh byte of a step over the lane's 4
//             bytes, AND + compare picks bit 4 j + k for byte k); pair
//             sums <= 2 * 31 * 127, so without VNNI the int16 sums are
//             widened every two steps; minus 16 * sum.
//   Q5_1      the same unsigned quants q (x = d q + m), nothing subtracted:
//             isum = sum q x_q; the offset enters as a second F32 term,
//             float(sum) * (m_w * d_x), after the first.
//   Q8_0      with VNNI: (w + 128) as unsigned bytes, vpdpbusd, minus 128 *
//             sum; without: |w| times the activation quants with w's sign
//             (vpsignb), vpmaddubsw (|w| <= 128, |q| <= 127: no
//             saturation) + vpmaddwd per step.
// Then term = float(isum) * (d_w * d_x) is added (FMA on the vector builds)
// to one F32 accumulator per element, blocks in order: the 8- and 16-row
// kernels do the same operations per lane, so the result of an element
// never depends on the kernel, the tiling or the thread split. The scalar
// build (no AVX2) computes the same integers and adds the same terms with a
// multiply and an add.
//
// Work items are (batch, row block of 8 or 16 rows, column block of at
// most cols_max_of columns), row blocks fastest, so a thread quantizes each
// column block once (kept in L2) and then streams the weight groups past
// it; with few columns (token generation) the 8-row (16-row) kernel reads
// the weights once, front to back, one stream per thread. AVX512-VNNI builds
// compute a single column with matvec_kernel512 instead: the 8-row
// kernel's operations per lane in half the instructions (16-row pairs of
// groups would be two streams per thread, which measured slower: 0.5 of
// the single stream in a stand-alone test). Their Q4_0 is interleaved in
// groups of 16 rows (group_rows): micro_kernel16 reads one group in place
// of a pair, and one column takes matvec16_kernel512.
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backends/cpu/ops/amx_tiles.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>


#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/simd.hpp"
#include "backends/cpu/ops/tuning.hpp"

namespace tessera::cpu {

namespace {

constexpr int k_rows = static_cast<int>(k_repack_rows); // rows per group (8 = one 256-bit vector of int32)
#ifdef TSR_CPU_AVX512
constexpr int k_c = 8; // columns per micro-tile
constexpr int k_pair = 2; // groups per 512-bit micro-kernel call (16 rows)
#else
constexpr int k_c = 4;
constexpr int k_pair = 1;
#endif
// Rows per group of type T in this build's layout: repack_group_rows(T)
// (repack.cpp; keep the two in step). AVX512-VNNI builds interleave Q4_0 in
// groups of 16 rows, so that one 512-bit load holds a step of all 16 rows
// and the one-token kernel (matvec16_kernel512) multiplies it with
// activations broadcast from memory: no vpermd, half the loads and no
// halves to add per 16 rows. Every other type and build: k_rows.
template <int32_t T>
constexpr int group_rows() {
#ifdef TSR_CPU_VNNI512
    if constexpr (T == TSR_TYPE_Q4_0) return 2 * k_rows;
#endif
    return k_rows;
}

// group_rows of a type (0: not one of the four types of these kernels).
int group_rows_of(int32_t type) {
    return for_q_type(type, 0, [](auto t) { return group_rows<decltype(t)::value>(); });
}
constexpr int64_t k_cols_limit = 256;                   // most columns per work item
// Software prefetch distance in a row group's stream, bytes, of the 8- and
// 16-row kernels (not the one-column ones, matvec_kernel512 and
// matvec16_kernel512: cpu_tuning::stream_prefetch). 4096 against
// 1024 (A/B medians, Zen 5, 2 vCPUs): token generation 1B Q8_0 21.0 ->
// 22.7 (1 thread) and 39.7 -> 43.4 t/s (2), 135M Q4_0 266 -> 311 and
// 392 -> 436 t/s; 8192 measured the same as 4096.
// The AVX2 one-column kernel (tile) prefetches so too on more than one
// thread, also where stream_prefetch is 0 (AMD before Zen 5); on one
// thread it follows stream_prefetch. Measured with the haswell build on a
// Zen 4 (2 vCPUs), no prefetch against this one: its streamed bench
// (BM_mul_mat_repack/2/2048/5632/1/1/0) 23.5-24.8 -> 26.7-28.8 GB/s;
// `tessera bench -p 0 -n 64 -t 1,2 -r 3`, medians of 6 alternating runs,
// 135M Q4_0 344 -> 376 t/s on 1 thread but 510 -> 488 on 2, 1B Q4_0 40.2
// -> 40.0 on 1 and 58.4 -> 55.3 on 2.
constexpr size_t k_prefetch = 4096;
constexpr size_t k_act_budget = 256 * 1024;             // bytes of quantized columns per item (L2)
constexpr q8_tile k_xtile{k_c}; // quantized activations of a micro-tile
// One column quantized alone, for the one-column kernels of 8-row groups
// in the vector builds (micro_kernel<T, 1, P, 1>, matvec_kernel512): 40
// bytes per block, against k_xtile's 160 (AVX2) or 320 (AVX-512), so that
// the column stays in L1 beside the weights streaming through it. With
// k_xtile, 1B's ffn_down (K = 5632: 28 KiB of tile) streamed at half the
// rate of the other products (bench_ops_haswell, Zen 4,
// BM_mul_mat_repack/2/5632/2048/1/1/0: 13.1 GB/s against 26.8 for
// 2048 x 5632). matvec_kernel512 (Zen 4, bench_ops_native, 6 alternating
// runs) read Q8_0 5632 x 2048 at 26.6-27.1 GB/s with it against 25.4-26.5,
// and 2048 x 256 from cache at 73 against 67 GB/s (medians of 3).
// matvec16_kernel512 (Q4_0's 16-row groups) keeps the tile: with the column
// alone 5632 x 2048 read at 24.3-26.0 against 26.0-27.2 GB/s (2048 x 256
// from cache 54 against 49). Token generation (1B and 135M, tessera bench,
// both kernels switched) measured level.
constexpr q8_tile k_xtile1{1};
constexpr size_t k_xblock = k_xtile.block_bytes();
constexpr size_t k_xd = k_xtile.d_offset();
constexpr size_t k_xsum = k_xtile.sum_offset();

template <int32_t T>
constexpr size_t block_bytes() {
    return q_block_bytes(T);
}

// Nibble-packed types (Q4_0, Q5_0, Q5_1): 4 steps, low and high nibbles.
template <int32_t T>
constexpr bool nibbles() {
    return T == TSR_TYPE_Q4_0 || T == TSR_TYPE_Q5_0 || T == TSR_TYPE_Q5_1;
}

// Types with a fifth bit per quant (qh).
template <int32_t T>
constexpr bool five_bits() {
    return T == TSR_TYPE_Q5_0 || T == TSR_TYPE_Q5_1;
}

// Byte offsets in a group's block (repack.hpp): the rows' qh (Q5_0, Q5_1),
// the rows' m (Q5_1) and step 0.
template <int32_t T>
constexpr size_t qh_at() {
    return T == TSR_TYPE_Q5_1 ? 32 : 16;
}
constexpr size_t k_q5_1_m_at = 16;
template <int32_t T>
constexpr size_t steps_at() {
    return T == TSR_TYPE_Q5_1 ? 64 : T == TSR_TYPE_Q5_0 ? 48 : 2 * group_rows<T>();
}

// Bytes of one step (4 quant bytes of each row of a group).
template <int32_t T>
constexpr size_t step_bytes() {
    return 4 * static_cast<size_t>(group_rows<T>());
}

// Bytes of one group's block: the rows' scales + the steps.
template <int32_t T>
constexpr size_t group_block() {
    return static_cast<size_t>(group_rows<T>()) * block_bytes<T>();
}

// Steps of 4 quant bytes per row and block.
template <int32_t T>
constexpr int n_steps() {
    return nibbles<T>() ? 4 : 8;
}

// log2 of the unsigned offset the vector kernel gives the weights (the
// activation sums are stored shifted by it), or 0 when none is used.
template <int32_t T>
constexpr int sum_shift() {
#ifdef TSR_CPU_AVX2
    if constexpr (T == TSR_TYPE_Q4_0) return 3;
    if constexpr (T == TSR_TYPE_Q5_0) return 4;
    if constexpr (T == TSR_TYPE_Q5_1) return 0; // the offset is a separate term
#ifdef TSR_CPU_VNNI256
    return 7;
#else
    return 0;
#endif
#else
    return 0;
#endif
}

size_t tile_bytes_of(int64_t n_blocks, q8_tile tile = k_xtile) {
    return align64(static_cast<size_t>(n_blocks) * tile.block_bytes());
}

// Columns per work item: as many quantized columns as fit the budget (so
// they stay in L2 while the weight groups stream past), a multiple of k_c
// between 32 and k_cols_limit.
int64_t cols_max_of(int64_t n_blocks) {
    const auto fit = static_cast<int64_t>(k_act_budget / (static_cast<size_t>(n_blocks) * (k_xblock / k_c)));
    return std::clamp<int64_t>(fit / k_c * k_c, 32, k_cols_limit);
}

// Per-thread scratch (mul_mat_repack_work_size): the quantized columns of
// an item (cols_max_of columns in tiles of k_c; the AMX kernel's tiles of
// 16 take no more bytes), then at this offset one column as packed F32
// (xbuf, K floats), then, for the AMX kernel, the unpacked rows.
size_t xbuf_at(int64_t n_blocks) {
    return static_cast<size_t>(cols_max_of(n_blocks) / k_c) * tile_bytes_of(n_blocks);
}

// Quantizes this thread's share of a GEMM's tiles into the shared scratch
// (for_each_shared_tile; read back through shared_tiles).
void prepare_tiles(const compute_params & p, const mm_dims & d, q8_tile tile, size_t tile_bytes, int sum_shift) {
    auto * xbuf = reinterpret_cast<float *>(static_cast<char *>(p.wdata) + xbuf_at(d.K / k_qblock));
    const bool in_place = b_in_place(d);
    for_each_shared_tile(p, d, tile.cols, tile_bytes, [&](int64_t batch, int64_t n0, int64_t n1, char * out) {
        quantize_q8_tiles(d, in_place, batch, n0, n1, tile, out, tile_bytes, xbuf, sum_shift);
    });
}

inline int32_t load_i32(const char * p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

#ifdef TSR_CPU_AVX2

inline __m256i bcast4(const char * p) {
    return _mm256_set1_epi32(load_i32(p));
}

// a + b in int16 lanes, as one instruction the compiler keeps in place:
// GCC otherwise regroups a column's chain of wrapping integer adds, first
// computing every product of a block and spilling them to the stack.
inline __m256i add_epi16_in_order(__m256i a, __m256i b) {
    __asm__("vpaddw %[b], %[a], %[a]" : [a] "+x"(a) : [b] "x"(b));
    return a;
}

// The same for int32 lanes.
inline __m256i add_epi32_in_order(__m256i a, __m256i b) {
    __asm__("vpaddd %[b], %[a], %[a]" : [a] "+x"(a) : [b] "x"(b));
    return a;
}

// v, held in a register: GCC otherwise loads a vector used twice once
// for each use (a load folded into each instruction); Zen 4 issues two
// vector loads per cycle.
inline __m256i in_register(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
}

// Q5_0/Q5_1 fifth bits of step j (repack.hpp), as 0x10 per byte: lane r of h
// holds row r's qh; byte k of lane r gets 0x10 when bit 4 j + k (high
// nibbles, Hi: 16 + 4 j + k) of it is set. vpshufb copies qh byte
// (Hi ? 2 : 0) + j / 2 to the lane's 4 bytes, and byte k keeps bit
// 4 (j % 2) + k.
template <bool Hi>
inline __m256i q5_fifth(__m256i h, int j) {
    const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
    const __m256i pick = _mm256_add_epi8(lane, _mm256_set1_epi8(static_cast<char>((Hi ? 2 : 0) + j / 2)));
    const __m256i bit = _mm256_set1_epi32(j % 2 == 0 ? 0x08040201 : static_cast<int>(0x80402010u));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, pick), bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// out[c * 8 + r] = row r of the group at w . column c of the tile at xt.
// The group's stream is prefetched k_prefetch bytes ahead as P says.
// (no-tree-reassoc: else GCC regroups the integer sums of a block into a
// tree, computing every product first and spilling them to the stack.)
// Each chain of integer sums starts with its first term, not an add to
// zero, and a step's weights are loaded once (in_register): per block of
// the one-column Q4_0 kernel 54 instructions instead of 58, 4 loads of
// weights instead of 8; its cache-resident rate (bench_ops_haswell
// BM_mul_mat_repack/2/2048/256/1/1/1, Zen 4) 31.3 -> 32.2-33.6 GB/s.
// XC: the columns of the tile's layout (q8_tile{XC}); k_c, or 1 for one
// column quantized alone (k_xtile1).
template <int32_t T, int C, stream_pf P = stream_pf::l1, int XC = k_c>
__attribute__((optimize("no-tree-reassoc"))) void micro_kernel(const char * w, int64_t n_blocks, const char * xt, float * out) {
    static_assert(group_rows<T>() == k_rows, "8-row groups");
    static_assert(C <= XC, "the tile holds the columns");
    constexpr q8_tile xtile{XC};
    constexpr size_t x_block = xtile.block_bytes(), x_d = xtile.d_offset(), x_sum = xtile.sum_offset();
    __m256 acc[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const char * pb = w + static_cast<size_t>(b) * group_block<T>();
        const char * xp = xt + static_cast<size_t>(b) * x_block;
        // Software prefetch k_prefetch bytes ahead in the group's stream.
        for (size_t o = 0; o < group_block<T>(); o += 64) prefetch_line<P>(pb + k_prefetch + o);
        const __m256 dw = simd::load_f16x8(pb);
        __m256i is[C];
        if constexpr (nibbles<T>()) {
            // Step by step, every column: few live registers (no spills).
            const __m256i m = _mm256_set1_epi8(0x0f);
            __m256i s[C];
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256(); // (VNNI: the accumulators)
            __m256i h = _mm256_setzero_si256();
            if constexpr (five_bits<T>()) h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pb + qh_at<T>()));
#pragma GCC unroll 8
            for (int j = 0; j < 4; ++j) {
                const __m256i v = in_register(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(pb + steps_at<T>() + 32 * j)));
                __m256i lo = _mm256_and_si256(v, m);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
                if constexpr (five_bits<T>()) {
                    lo = _mm256_or_si256(lo, q5_fifth<false>(h, j));
                    hi = _mm256_or_si256(hi, q5_fifth<true>(h, j));
                }
#pragma GCC unroll 8
                for (int c = 0; c < C; ++c) {
                    const char * xq = xp + c * 32;
#if defined(TSR_CPU_VNNI256)
                    s[c] = simd::dot4_u8s8(simd::dot4_u8s8(s[c], lo, bcast4(xq + 4 * j)), hi, bcast4(xq + 16 + 4 * j));
#else
                    // int16 pair sums: 8 of at most 2 * 15 * 127 (Q4_0), 4
                    // of at most 2 * 31 * 127 (Q5_0, Q5_1) per lane fit
                    const __m256i pl = _mm256_maddubs_epi16(lo, bcast4(xq + 4 * j));
                    s[c] = j == 0 || (five_bits<T>() && j == 2) ? pl : add_epi16_in_order(s[c], pl);
                    s[c] = add_epi16_in_order(s[c], _mm256_maddubs_epi16(hi, bcast4(xq + 16 + 4 * j)));
                    if (j == 3 || (five_bits<T>() && j == 1)) {
                        const __m256i p32 = _mm256_madd_epi16(s[c], _mm256_set1_epi16(1));
                        is[c] = j == 1 || !five_bits<T>() ? p32 : add_epi32_in_order(is[c], p32);
                    }
#endif
                }
            }
#if defined(TSR_CPU_VNNI256)
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) is[c] = s[c];
#endif
        } else {
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) is[c] = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pb + 16 + 32 * j));
#if defined(TSR_CPU_VNNI256)
                const __m256i u = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
                #pragma GCC unroll 8
                for (int c = 0; c < C; ++c) is[c] = simd::dot4_u8s8(is[c], u, bcast4(xp + c * 32 + 4 * j));
#else
                const __m256i u = _mm256_abs_epi8(v);
                #pragma GCC unroll 8
                for (int c = 0; c < C; ++c) {
                    const __m256i xs = _mm256_sign_epi8(bcast4(xp + c * 32 + 4 * j), v);
                    const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), _mm256_set1_epi16(1));
                    is[c] = j == 0 ? p32 : add_epi32_in_order(is[c], p32);
                }
#endif
            }
        }
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            if constexpr (sum_shift<T>() > 0) is[c] = _mm256_sub_epi32(is[c], _mm256_set1_epi32(load_i32(xp + x_sum + c * 4)));
            const __m256 dx = _mm256_set1_ps(read_f32(xp + x_d + c * 4));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]), _mm256_mul_ps(dw, dx), acc[c]);
            if constexpr (T == TSR_TYPE_Q5_1) {
                const __m256 xsum = _mm256_set1_ps(static_cast<float>(load_i32(xp + x_sum + c * 4)));
                acc[c] = _mm256_fmadd_ps(xsum, _mm256_mul_ps(simd::load_f16x8(pb + k_q5_1_m_at), dx), acc[c]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + c * k_rows, acc[c]);
}

#ifdef TSR_CPU_AVX512

// Step j of two groups (w0: rows 0..7, w1: rows 8..15) in one vector.
inline __m512i step2(const char * p0, const char * p1) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p0));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p1)), 1);
}

// The 16 rows of block b that micro_kernel16 reads: two groups of 8 rows
// (p0: rows 0..7, p1: rows 8..15), or one group of 16 (group_rows<T>() ==
// 16; p1 unused), lane r row r either way.
template <int32_t T>
struct rows16 {
    const char * p0;
    const char * p1;
    static constexpr bool one_group = group_rows<T>() == 16;

    // The 16 F16 scales as F32.
    __m512 scales() const {
        if constexpr (one_group) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p0)));
        const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p0))),
                                                  _mm_loadu_si128(reinterpret_cast<const __m128i *>(p1)), 1);
        return _mm512_cvtph_ps(h);
    }
    // Step j.
    __m512i step(int j) const {
        const size_t at = steps_at<T>() + step_bytes<T>() * static_cast<size_t>(j);
        if constexpr (one_group) return _mm512_loadu_si512(p0 + at);
        return step2(p0 + at, p1 + at);
    }
    // Software prefetch of the block `ahead` bytes on, as P says.
    template <stream_pf P = stream_pf::l1>
    void prefetch(size_t ahead) const {
        for (size_t o = 0; o < group_block<T>(); o += 64) {
            prefetch_line<P>(p0 + ahead + o);
            if constexpr (!one_group) prefetch_line<P>(p1 + ahead + o);
        }
    }
};

// Q5_0/Q5_1 fifth bits as in q5_fifth, on 512-bit vectors: v (the step's
// nibbles) with 0x10 added in each byte whose bit is set (pick: the qh
// byte per lane, bit: the bit per byte).
inline __m512i q5_add_fifth512(__m512i v, __m512i h, __m512i pick, __m512i bit) {
    const __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(h, pick), bit);
    return _mm512_mask_add_epi8(v, set, v, _mm512_set1_epi8(0x10));
}

// The vpshufb index of q5_fifth for 512-bit vectors: qh byte `byte` of
// each 32-bit lane.
inline __m512i q5_pick512(int byte) {
    const __m512i lane = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
    return _mm512_add_epi8(lane, _mm512_set1_epi8(static_cast<char>(byte)));
}

// out[c * 16 + r] = row r of the two groups at w0 (rows 0..7) and w1 (rows
// 8..15), or of the 16-row group at w0 (rows16; w1 unused), . column c:
// per lane the same operations as micro_kernel (integer sums are exact, so
// their order does not matter).
template <int32_t T, int C>
__attribute__((optimize("no-tree-reassoc"))) void micro_kernel16(const char * w0, const char * w1, int64_t n_blocks, const char * xt, float * out) {
    __m512 acc[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const size_t off = static_cast<size_t>(b) * group_block<T>();
        const char * p0 = w0 + off;
        const char * p1 = w1 + off;
        const rows16<T> rows{p0, p1};
        static_assert(!five_bits<T>() || !rows16<T>::one_group, "qh and m are read as two groups of 8 rows");
        const char * xp = xt + static_cast<size_t>(b) * k_xblock;
        rows.prefetch(k_prefetch);
        const __m512 dw = rows.scales();
        __m512i is[C];
        if constexpr (nibbles<T>()) {
            const __m512i m = _mm512_set1_epi8(0x0f);
            __m512i lo[4], hi[4];
            __m512i h = _mm512_setzero_si512(); // the 16 rows' qh (Q5_0, Q5_1)
            if constexpr (five_bits<T>()) h = step2(p0 + qh_at<T>(), p1 + qh_at<T>());
            #pragma GCC unroll 8
            for (int j = 0; j < 4; ++j) {
                const __m512i v = rows.step(j);
                lo[j] = _mm512_and_si512(v, m);
                hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
                if constexpr (five_bits<T>()) {
                    const __m512i bit = _mm512_set1_epi32(j % 2 == 0 ? 0x08040201 : static_cast<int>(0x80402010u));
                    lo[j] = q5_add_fifth512(lo[j], h, q5_pick512(j / 2), bit);
                    hi[j] = q5_add_fifth512(hi[j], h, q5_pick512(2 + j / 2), bit);
                }
            }
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
                const char * xq = xp + c * 32;
#if defined(TSR_CPU_VNNI512)
                __m512i s = _mm512_setzero_si512();
                #pragma GCC unroll 8
                for (int j = 0; j < 4; ++j) {
                    s = simd::dot4_u8s8_bcast(s, lo[j], xq + 4 * j);
                    s = simd::dot4_u8s8_bcast(s, hi[j], xq + 16 + 4 * j);
                }
                is[c] = s;
#else
                // int16 sums widened every 4 steps (Q4_0) or 2 (Q5_0,
                // Q5_1), as in micro_kernel
                __m512i s16 = _mm512_setzero_si512(), s32 = _mm512_setzero_si512();
                #pragma GCC unroll 8
                for (int j = 0; j < 4; ++j) {
                    s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(lo[j], _mm512_set1_epi32(load_i32(xq + 4 * j))));
                    s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(hi[j], _mm512_set1_epi32(load_i32(xq + 16 + 4 * j))));
                    if (j == 3 || (five_bits<T>() && j == 1)) {
                        s32 = _mm512_add_epi32(s32, _mm512_madd_epi16(s16, _mm512_set1_epi16(1)));
                        s16 = _mm512_setzero_si512();
                    }
                }
                is[c] = s32;
#endif
            }
        } else {
            #pragma GCC unroll 8
            for (int c = 0; c < C; ++c) is[c] = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m512i v = rows.step(j);
#if defined(TSR_CPU_VNNI512)
                const __m512i u = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
                #pragma GCC unroll 8
                for (int c = 0; c < C; ++c) is[c] = simd::dot4_u8s8_bcast(is[c], u, xp + c * 32 + 4 * j);
#else
                // |w| times x with w's sign (AVX-512 has no vpsignb): pair
                // sums of at most 2 * 128 * 127 fit int16.
                const __m512i u = _mm512_abs_epi8(v);
                const __mmask64 neg = _mm512_movepi8_mask(v);
                #pragma GCC unroll 8
                for (int c = 0; c < C; ++c) {
                    const __m512i xb = _mm512_set1_epi32(load_i32(xp + c * 32 + 4 * j));
                    const __m512i xs = _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb);
                    is[c] = _mm512_add_epi32(is[c], _mm512_madd_epi16(_mm512_maddubs_epi16(u, xs), _mm512_set1_epi16(1)));
                }
#endif
            }
        }
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            if constexpr (sum_shift<T>() > 0) is[c] = _mm512_sub_epi32(is[c], _mm512_set1_epi32(load_i32(xp + k_xsum + c * 4)));
            const __m512 dx = _mm512_set1_ps(read_f32(xp + k_xd + c * 4));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[c]), _mm512_mul_ps(dw, dx), acc[c]);
            if constexpr (T == TSR_TYPE_Q5_1) {
                const __m256i mh = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p0 + k_q5_1_m_at))),
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(p1 + k_q5_1_m_at)), 1);
                const __m512 xsum = _mm512_set1_ps(static_cast<float>(load_i32(xp + k_xsum + c * 4)));
                acc[c] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(_mm512_cvtph_ps(mh), dx), acc[c]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + c * 2 * k_rows, acc[c]);
}

#ifdef TSR_CPU_VNNI512

// out[r] = row r of the group at w . column 0 of the tile at xt (layout
// q8_tile{XC}), for one column (token generation): the 8-row kernel's
// result, bit for bit, with half the instructions. One 512-bit load takes
// two adjacent steps of the group (lanes 0..7 step j, 8..15 step j + 1),
// so the weights stay one stream; vpermd spreads activation dwords j and
// j + 1 over the two halves; the two halves' exact int32 sums are added
// before the same scale and FMA as micro_kernel's. P: each block's lines
// are prefetched (L1 or L2) `pf` bytes ahead (tuning.hpp: on Intel; on
// Zen 4 the hardware prefetcher alone read faster: Q8_0 2048 x 5632 36.9
// -> 46.8 GFLOP/s without, Q4_0 576 x 1536 68.0 -> 76.2 on 1 thread; 2
// threads: Q8_0 47.4 -> 57.2, Q4_0 106.7 -> 110.1).
template <int32_t T, stream_pf P, int XC = k_c>
void matvec_kernel512(const char * w, int64_t n_blocks, const char * xt, float * out, size_t pf) {
    static_assert(group_rows<T>() == k_rows, "8-row groups");
    constexpr q8_tile xtile{XC};
    const __m512i pair[4] = {
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
        _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6),
    };
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const char * pb = w + static_cast<size_t>(b) * group_block<T>();
        const char * xp = xt + static_cast<size_t>(b) * xtile.block_bytes();
        for (size_t o = 0; P != stream_pf::none && o < group_block<T>(); o += 64) prefetch_line<P>(pb + pf + o);
        const __m256 dw = simd::load_f16x8(pb);
        // Activation dwords 0..7: Q4_0/Q5_0/Q5_1 low-nibble steps 0..3 then
        // high-nibble steps 0..3; Q8_0 steps 0..7.
        const __m512i xv = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xp)));
        __m512i s = _mm512_setzero_si512();
        if constexpr (nibbles<T>()) {
            const __m512i m = _mm512_set1_epi8(0x0f);
            const __m512i v01 = _mm512_loadu_si512(pb + steps_at<T>());
            const __m512i v23 = _mm512_loadu_si512(pb + steps_at<T>() + 64);
            __m512i lo01 = _mm512_and_si512(v01, m), lo23 = _mm512_and_si512(v23, m);
            __m512i hi01 = _mm512_and_si512(_mm512_srli_epi16(v01, 4), m), hi23 = _mm512_and_si512(_mm512_srli_epi16(v23, 4), m);
            if constexpr (five_bits<T>()) {
                // Both halves read the rows' qh: the low one for the even
                // step (bits 0..3 of a qh byte), the high one for the odd.
                const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(pb + qh_at<T>())));
                const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi32(0x08040201), _mm256_set1_epi32(static_cast<int>(0x80402010u)), 1);
                lo01 = q5_add_fifth512(lo01, h, q5_pick512(0), bit);
                lo23 = q5_add_fifth512(lo23, h, q5_pick512(1), bit);
                hi01 = q5_add_fifth512(hi01, h, q5_pick512(2), bit);
                hi23 = q5_add_fifth512(hi23, h, q5_pick512(3), bit);
            }
            s = _mm512_dpbusd_epi32(s, lo01, _mm512_permutexvar_epi32(pair[0], xv));
            s = _mm512_dpbusd_epi32(s, lo23, _mm512_permutexvar_epi32(pair[1], xv));
            s = _mm512_dpbusd_epi32(s, hi01, _mm512_permutexvar_epi32(pair[2], xv));
            s = _mm512_dpbusd_epi32(s, hi23, _mm512_permutexvar_epi32(pair[3], xv));
        } else {
            const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(pb + 16 + 64 * j), bias);
                s = _mm512_dpbusd_epi32(s, v, _mm512_permutexvar_epi32(pair[j], xv));
            }
        }
        __m256i is = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        if constexpr (sum_shift<T>() > 0) is = _mm256_sub_epi32(is, _mm256_set1_epi32(load_i32(xp + xtile.sum_offset())));
        const __m256 dx = _mm256_set1_ps(read_f32(xp + xtile.d_offset()));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, dx), acc);
        if constexpr (T == TSR_TYPE_Q5_1) {
            const __m256 xsum = _mm256_set1_ps(static_cast<float>(load_i32(xp + xtile.sum_offset())));
            acc = _mm256_fmadd_ps(xsum, _mm256_mul_ps(simd::load_f16x8(pb + k_q5_1_m_at), dx), acc);
        }
    }
    _mm256_storeu_ps(out, acc);
}

// out[r] = row r of the 16-row group at w (Q4_0, group_rows<T>() == 16) .
// column 0 of the tile at xt, for one column (token generation): per lane
// micro_kernel16's operations, so the same bits. A step is one 512-bit
// load of all 16 rows; its low and high nibbles are multiplied with the
// activation dwords j and 4 + j broadcast from memory (vpdpbusd m32bcst)
// into two chains, whose exact int32 sums are added. Against
// matvec_kernel512 on the 8-row groups that is half the loads and no
// vpermd per 16 rows: streaming synth-1B-shaped Q4_0 products in a
// stand-alone test (Zen 4, 1 thread, weights on huge pages) ran at 1.0 of
// the read bandwidth against 0.9. P as in matvec_kernel512.
template <int32_t T, stream_pf P>
void matvec16_kernel512(const char * w, int64_t n_blocks, const char * xt, float * out, size_t pf) {
    static_assert(T == TSR_TYPE_Q4_0 && group_rows<T>() == 16, "the 16-row groups of Q4_0");
    const __m512i m = _mm512_set1_epi8(0x0f);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const rows16<T> rows{w + static_cast<size_t>(b) * group_block<T>(), nullptr};
        const char * xp = xt + static_cast<size_t>(b) * k_xblock;
        if constexpr (P != stream_pf::none) rows.template prefetch<P>(pf);
        const __m512 dw = rows.scales();
        __m512i lo = _mm512_setzero_si512(), hi = lo;
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            const __m512i v = rows.step(j);
            lo = simd::dot4_u8s8_bcast(lo, _mm512_and_si512(v, m), xp + 4 * j);
            hi = simd::dot4_u8s8_bcast(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), m), xp + 16 + 4 * j);
        }
        const __m512i is = _mm512_sub_epi32(_mm512_add_epi32(lo, hi), _mm512_set1_epi32(load_i32(xp + k_xsum)));
        const __m512 dx = _mm512_set1_ps(read_f32(xp + k_xd));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, dx), acc);
    }
    _mm512_storeu_ps(out, acc);
}

#endif // TSR_CPU_VNNI512

// The 16 rows at w0, w1 (as micro_kernel16) . the tile's `cols` columns;
// one column of a 16-row group with AVX512-VNNI: matvec16_kernel512 (its
// prefetch as `tu` says, as tile's).
template <int32_t T, int C = k_c>
void tile16(int cols, const char * w0, const char * w1, int64_t n_blocks, const char * xt, float * out, [[maybe_unused]] const cpu_tuning & tu) {
#ifdef TSR_CPU_VNNI512
    if constexpr (rows16<T>::one_group) {
        if (cols == 1) {
            return with_stream_pf(stream_pf_of(tu), [&](auto k) {
                matvec16_kernel512<T, decltype(k)::value>(w0, n_blocks, xt, out, tu.stream_prefetch);
            });
        }
    }
#endif
    if constexpr (C > 1) {
        if (cols < C) return tile16<T, C - 1>(cols, w0, w1, n_blocks, xt, out, tu);
    }
    micro_kernel16<T, C>(w0, w1, n_blocks, xt, out);
}

#ifdef TSR_CPU_AMX

// --- AMX (Intel SDM vol. 1 ch. 18 "Intel AMX"; instruction reference:
// LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBSSD, TILERELEASE) ---
//
// TDPBSSD adds to C (M x N int32) the products A (M x K int8) . B (K x N
// int8), B stored as K/4 rows of N dwords, dword n of row i holding B's
// elements 4i..4i+3 of column n. With K = 32 (one block) and N = 16 weight
// rows, B row i is step i of a 16-row block with the quants as signed
// values: Q8_0's steps as they are; Q4_0/Q5_0/Q5_1 steps 0..3 give rows
// 0..3 (low nibbles: elements 4i..) and rows 4..7 (high nibbles: 16 + 4i..)
// minus the offset (8, 16; Q5_1: none, its offset term is added apart).
// A is M = 16 columns quantized together (q8_tile{16}: per block their 16
// x 32 quants 32 bytes apart, then the 16 scales and sums), so C row c
// holds the exact block dot products of column c with the 16 rows, the
// integers micro_kernel16 gets in is[c]. Each block's C is stored and added
// with micro_kernel16's operations (float(isum) * (d_w * d_x) by FMA into
// one accumulator per element, blocks in order), so the bits are those of
// the AVX-512 kernels.
// What bounds it: a block's 16 x 16 x 32 products take one TDPBSSD, but its
// C must go through memory to be scaled (AMX has no tile-to-vector move
// here). Measured on an Emerald Rapids-class Xeon (2 vCPUs, rdtsc at 2.1
// GHz, each alone in a loop): TDPBSSD 13 cycles, TILELOADD of A (16 x 32
// bytes) 14, of B (8 x 64) 10, TILESTORED of C 18; the sequence of a
// block 40 cycles, and the 16 scaled FMAs of C come on top (in bench_ops,
// the tile instructions alone took 6.7 ms of a 2048 x 2048 x 512 Q4_0
// product, the scaling alone 5.1, both 9.5-12). Issuing products 1, 3 or 5
// blocks ahead measured the same. bench_ops BM_mul_mat_repack 2048 x 2048 x
// 512, GFLOP/s, AVX-512 -> AMX, alternating processes: Q4_0 397 -> 504 on
// 1 thread, 787 -> 920 on 2; Q8_0 407 -> 493 and 711 -> 920; Q5_0 307 ->
// 527 (1 thread).
namespace amx {

constexpr int k_cols = 16;                               // columns per tile
constexpr q8_tile k_xtile16{k_cols};                     // their quantized activations
constexpr size_t k_b_bytes = 8 * 64;                     // a block's B tile
constexpr size_t k_group_block = k_b_bytes + 64 + 64;    // per block: B, the 16 scales d (F32), Q5_1's m (F32)

using amx_tiles::tile_config;
using amx_tiles::permitted;

// B (8 rows x 64 bytes) in tmm0, A (16 columns x 32 bytes) in tmm1, C (16
// x 16 int32) of k_depth blocks in tmm2.. in turn, so that the tile unit
// multiplies k_depth - 1 blocks ahead of the block being added.
constexpr int k_depth = 4;
tile_config make_config() {
    tile_config c;
    for (int t = 0; t < 2 + k_depth; ++t) {
        c.rows[t] = t == 0 ? 8 : 16;
        c.colsb[t] = t == 1 ? 32 : 64;
    }
    return c;
}

// AMX for a product: a GEMM, where mul_mat_repack_uses_amx.
bool use(const mm_dims & d) {
    return d.N >= k_gemm_min_n && mul_mat_repack_uses_amx();
}

// Columns per work item: as many whole tiles as k_amx_act_budget holds (at
// least 32 columns, at most k_amx_cols_limit). AMX processors (Sapphire Rapids
// and later) have 2 MiB of L2 per core, so the budget is four times the
// vector kernels' (cols_max_of's 256 KiB): each 16-row group's weights are
// read from L3 or memory once per column block, and at 256 KiB a 512-token
// prompt took 6 blocks (K = 2048) or 16 (K = 5632), at 1 MiB 2 and 4.
// Emerald Rapids-class Xeon (2 vCPUs), synth 1B pp512, `tessera bench -r
// 2`, medians of 3 processes alternating the two builds, t/s, 256 KiB -> 1
// MiB: Q4_0 215 -> 259 on 1 thread and 475 -> 520 on 2, Q8_0 193 -> 234
// and 401 -> 508. 135M Q4_0 (K 576 and 1536: 256 columns already fit)
// measured the same; 2 MiB like 1 MiB (CPU time, 1 thread).
constexpr size_t k_amx_act_budget = size_t{1} << 20;
constexpr int64_t k_amx_cols_limit = 512;
int64_t cols_max(int64_t n_blocks) {
    const size_t tile_bytes = std::max<size_t>(tile_bytes_of(n_blocks, k_xtile16), 1); // (K = 0: no bytes)
    const auto tiles = static_cast<int64_t>(std::min<size_t>(k_amx_act_budget / tile_bytes, k_amx_cols_limit));
    return std::clamp<int64_t>(tiles * k_cols, 32, k_amx_cols_limit);
}

// The B tiles and scales of the 16 rows at w0, w1 (as micro_kernel16; w1 =
// w0 for 8-row groups repeats rows 0..7), every block: out + b *
// k_group_block.
template <int32_t T>
void unpack_rows16(const char * w0, const char * w1, int64_t n_blocks, char * out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const size_t off = static_cast<size_t>(b) * group_block<T>();
        const char * p0 = w0 + off;
        const char * p1 = w1 + off;
        const rows16<T> rows{p0, p1};
        char * o = out + static_cast<size_t>(b) * k_group_block;
        if constexpr (nibbles<T>()) {
            const __m512i m = _mm512_set1_epi8(0x0f);
            const __m512i bias = _mm512_set1_epi8(T == TSR_TYPE_Q4_0 ? 8 : T == TSR_TYPE_Q5_0 ? 16 : 0);
            __m512i h = _mm512_setzero_si512();
            if constexpr (five_bits<T>()) h = step2(p0 + qh_at<T>(), p1 + qh_at<T>());
            #pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m512i v = rows.step(j);
                __m512i lo = _mm512_and_si512(v, m);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
                if constexpr (five_bits<T>()) {
                    const __m512i bit = _mm512_set1_epi32(j % 2 == 0 ? 0x08040201 : static_cast<int>(0x80402010u));
                    lo = q5_add_fifth512(lo, h, q5_pick512(j / 2), bit);
                    hi = q5_add_fifth512(hi, h, q5_pick512(2 + j / 2), bit);
                }
                _mm512_store_si512(o + 64 * j, _mm512_sub_epi8(lo, bias));
                _mm512_store_si512(o + 64 * (4 + j), _mm512_sub_epi8(hi, bias));
            }
        } else {
            #pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) _mm512_store_si512(o + 64 * j, rows.step(j));
        }
        _mm512_store_ps(o + k_b_bytes, rows.scales());
        if constexpr (T == TSR_TYPE_Q5_1) {
            const __m256i mh = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p0 + k_q5_1_m_at))),
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(p1 + k_q5_1_m_at)), 1);
            _mm512_store_ps(o + k_b_bytes + 64, _mm512_cvtph_ps(mh));
        }
    }
}

// A block's products into C tile 2 + slot (the tile numbers are
// immediates: the intrinsics paste them into the instruction, hence the
// cases; slot is a constant where this is inlined), and that C to c (16
// rows of 16 int32, row = column of the tile).
inline void products(int slot, const char * bt, const char * xt) {
    _tile_loadd(0, bt, 64);
    _tile_loadd(1, xt, 32);
    switch (slot) {
    case 0: _tile_zero(2); _tile_dpbssd(2, 1, 0); break;
    case 1: _tile_zero(3); _tile_dpbssd(3, 1, 0); break;
    case 2: _tile_zero(4); _tile_dpbssd(4, 1, 0); break;
    default: _tile_zero(5); _tile_dpbssd(5, 1, 0); break;
    }
}
inline void store(int slot, int32_t * c) {
    switch (slot) {
    case 0: _tile_stored(2, c, 64); break;
    case 1: _tile_stored(3, c, 64); break;
    case 2: _tile_stored(4, c, 64); break;
    default: _tile_stored(5, c, 64); break;
    }
}

// acc[c] += the block's terms (c: its stored products; bb: its unpacked
// rows; xp: its quantized columns), micro_kernel16's operations per lane.
template <int32_t T>
inline void add_block(__m512 * acc, const int32_t * c, const char * bb, const char * xp) {
    const __m512 dw = _mm512_load_ps(bb + k_b_bytes);
    #pragma GCC unroll 16
    for (int j = 0; j < k_cols; ++j) {
        const __m512 dx = _mm512_set1_ps(read_f32(xp + k_xtile16.d_offset() + j * 4));
        const __m512i is = _mm512_load_si512(c + j * 16);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dw, dx), acc[j]);
        if constexpr (T == TSR_TYPE_Q5_1) {
            const __m512 xsum = _mm512_set1_ps(static_cast<float>(load_i32(xp + k_xtile16.sum_offset() + j * 4)));
            acc[j] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(_mm512_load_ps(bb + k_b_bytes + 64), dx), acc[j]);
        }
    }
}

// out[c * 16 + r] = row r of the unpacked 16 rows at bt (unpack_rows16) .
// column c of the tile at xt (k_xtile16), as micro_kernel16 computes them.
// The tile configuration must be loaded (make_config). The next block's
// products are issued before a block's C is stored, so the tile unit
// multiplies while the stored block is added.
template <int32_t T>
__attribute__((optimize("no-tree-reassoc"))) void kernel(const char * bt, int64_t n_blocks, const char * xt, float * out) {
    alignas(64) int32_t cbuf[2][k_cols * 16];
    __m512 acc[k_cols];
    #pragma GCC unroll 16
    for (int c = 0; c < k_cols; ++c) acc[c] = _mm512_setzero_ps();
    const auto bb = [&](int64_t b) { return bt + static_cast<size_t>(b) * k_group_block; };
    const auto xb = [&](int64_t b) { return xt + static_cast<size_t>(b) * k_xtile16.block_bytes(); };
    if (n_blocks <= 0) { // no terms (K = 0)
        #pragma GCC unroll 16
        for (int c = 0; c < k_cols; ++c) _mm512_store_ps(out + c * 16, acc[c]);
        return;
    }
    for (int64_t b = 0; b < std::min<int64_t>(k_depth - 1, n_blocks); ++b) products(static_cast<int>(b), bb(b), xb(b));
    for (int64_t b0 = 0; b0 < n_blocks; b0 += k_depth) {
        #pragma GCC unroll 4
        for (int s = 0; s < k_depth; ++s) {
            const int64_t b = b0 + s;
            if (b >= n_blocks) break;
            if (b + k_depth - 1 < n_blocks) products((s + k_depth - 1) % k_depth, bb(b + k_depth - 1), xb(b + k_depth - 1));
            // Block b's C is stored a block before it is added.
            store(s, cbuf[s % 2]);
            if (b > 0) add_block<T>(acc, cbuf[(s + 1) % 2], bb(b - 1), xb(b - 1));
        }
    }
    add_block<T>(acc, cbuf[(n_blocks - 1) % 2], bb(n_blocks - 1), xb(n_blocks - 1));
    #pragma GCC unroll 16
    for (int c = 0; c < k_cols; ++c) _mm512_store_ps(out + c * 16, acc[c]);
}

// Layout ids of the quantized columns (mul_mat_repack_prepared_layout):
// distinct from act_layout's, the tiles being 16 columns wide.
template <int32_t T>
constexpr int act_layout() {
    return 0x200 | sum_shift<T>();
}

// run<T> on AMX: items of 16-row steps x whole tiles of 16 columns; the
// columns quantized in tiles of 16 (shared_tiles; the unused ones of the
// last tile zero), each item's rows unpacked once (unpack_rows16) for all
// its tiles.
template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    const int64_t n_blocks = d.K / k_qblock;
    const size_t tile_bytes = tile_bytes_of(n_blocks, k_xtile16);
    const char * tiles = nullptr; // the item's column block (shared_tiles)
    const int64_t n_cols = cols_max(n_blocks);
    char * bt = static_cast<char *>(p.wdata) + xbuf_at(n_blocks) + align64(static_cast<size_t>(d.K) * sizeof(float));
    const auto * a = static_cast<const char *>(d.a->data);
    constexpr int G = group_rows<T>();
    const size_t group_bytes = static_cast<size_t>(n_blocks) * group_block<T>();
    const mm_grid g = make_mm_grid(d, p.nth, G, 2 * k_rows, k_cols, n_cols);
    work_queue queue(p, g.n_items, 1);
    alignas(64) float otile[k_cols * 16];
    int64_t have_cols = -1;
    static const tile_config config = make_config();
    _tile_loadconfig(&config);
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const mm_item item = item_of(g, d, it);
            const int64_t batch = item.batch, m0 = item.m0, m1 = item.m1, n0 = item.n0, n1 = item.n1;
            if (item.bc != have_cols) {
                tiles = shared_tiles(p, d, k_cols, tile_bytes, batch, n0);
                have_cols = item.bc;
            }
            for (int64_t mg = m0; mg < m1;) {
                const char * w = a + static_cast<size_t>(mg / G) * group_bytes;
                // 16 rows: one group, or two of 8; a last group of 8 alone
                // (unpacked twice over, the repeat not copied out).
                const int rows = static_cast<int>(std::min<int64_t>(2 * k_rows, m1 - mg));
                unpack_rows16<T>(w, G == k_rows && rows == 2 * k_rows ? w + group_bytes : w, n_blocks, bt);
                for (int64_t n = n0; n < n1; n += k_cols) {
                    kernel<T>(bt, n_blocks, tiles + static_cast<size_t>((n - n0) / k_cols) * tile_bytes, otile);
                    const int ncols = static_cast<int>(std::min<int64_t>(k_cols, n1 - n));
                    for (int c = 0; c < ncols; ++c) copy_column(otile + c * 16, rows, dst_column(d, batch, n + c) + mg);
                }
                mg += rows;
            }
        }
    }
    _tile_release(); // back to the init state: no tile data for the OS to save
}

} // namespace amx

#endif // TSR_CPU_AMX

#endif // TSR_CPU_AVX512

#else

// The portable micro-kernel: the same integers, element by element.
template <int32_t T, int C>
void micro_kernel(const char * w, int64_t n_blocks, const char * xt, float * out) {
    static_assert(group_rows<T>() == k_rows, "8-row groups");
    float acc[C][k_rows] = {};
    for (int64_t b = 0; b < n_blocks; ++b) {
        const char * pb = w + static_cast<size_t>(b) * group_block<T>();
        const char * xp = xt + static_cast<size_t>(b) * k_xblock;
        float dw[k_rows];
        for (int r = 0; r < k_rows; ++r) dw[r] = f16_to_f32_inline(read_u16(pb + 2 * r));
        for (int c = 0; c < C; ++c) {
            const auto * xq = reinterpret_cast<const int8_t *>(xp + c * 32);
            const float dx = read_f32(xp + k_xd + c * 4);
            for (int r = 0; r < k_rows; ++r) {
                int32_t isum = 0;
                uint32_t qh = 0; // Q5_0, Q5_1: the row's fifth bits
                if constexpr (five_bits<T>()) std::memcpy(&qh, pb + qh_at<T>() + 4 * r, sizeof qh);
                for (int j = 0; j < n_steps<T>(); ++j) {
                    for (int k = 0; k < 4; ++k) {
                        const auto byte = static_cast<uint8_t>(pb[steps_at<T>() + 32 * j + 4 * r + k]);
                        if constexpr (T == TSR_TYPE_Q4_0) {
                            isum += ((byte & 0x0f) - 8) * xq[4 * j + k] + ((byte >> 4) - 8) * xq[16 + 4 * j + k];
                        } else if constexpr (five_bits<T>()) {
                            const int e = 4 * j + k;
                            const int off = T == TSR_TYPE_Q5_0 ? 16 : 0; // Q5_1: the offset is a separate term
                            const int lo = (byte & 0x0f) | static_cast<int>((qh >> e) & 1u) << 4;
                            const int hi = (byte >> 4) | static_cast<int>((qh >> (16 + e)) & 1u) << 4;
                            isum += (lo - off) * xq[e] + (hi - off) * xq[16 + e];
                        } else {
                            isum += static_cast<int8_t>(byte) * xq[4 * j + k];
                        }
                    }
                }
                const float scale = dw[r] * dx;
                const float term = static_cast<float>(isum) * scale;
                acc[c][r] += term;
                if constexpr (T == TSR_TYPE_Q5_1) {
                    const float mscale = f16_to_f32_inline(read_u16(pb + k_q5_1_m_at + 2 * r)) * dx;
                    acc[c][r] += static_cast<float>(load_i32(xp + k_xsum + c * 4)) * mscale;
                }
            }
        }
    }
    for (int c = 0; c < C; ++c) {
        for (int r = 0; r < k_rows; ++r) out[c * k_rows + r] = acc[c][r];
    }
}

#endif

// tu: the one-column kernel's prefetch (cpu_tuning::stream_prefetch and
// stream_into_l2; the AVX2 micro-kernel keeps its own distance, and
// follows stream_prefetch only when the node runs on one thread: `alone`).
// single: the tile at xt is one column in k_xtile1's layout (the vector
// builds; cols is 1).
template <int32_t T, int C = k_c>
void tile(int cols, const char * w, int64_t n_blocks, const char * xt, float * out, [[maybe_unused]] const cpu_tuning & tu,
          [[maybe_unused]] bool alone, [[maybe_unused]] bool single) {
#ifdef TSR_CPU_VNNI512
    if (cols == 1) {
        return with_stream_pf(stream_pf_of(tu), [&](auto k) {
            if (single) return matvec_kernel512<T, decltype(k)::value, 1>(w, n_blocks, xt, out, tu.stream_prefetch);
            matvec_kernel512<T, decltype(k)::value>(w, n_blocks, xt, out, tu.stream_prefetch);
        });
    }
#elif defined(TSR_CPU_AVX2)
    if (cols == 1) {
        const stream_pf pf = alone ? stream_pf_of(tu) : stream_into_l2(tu) ? stream_pf::l2 : stream_pf::l1;
        return with_stream_pf(pf, [&](auto k) {
            if (single) return micro_kernel<T, 1, decltype(k)::value, 1>(w, n_blocks, xt, out);
            micro_kernel<T, 1, decltype(k)::value>(w, n_blocks, xt, out);
        });
    }
#endif
    if constexpr (C > 1) {
        if (cols < C) return tile<T, C - 1>(cols, w, n_blocks, xt, out, tu, alone, single);
    }
    micro_kernel<T, C>(w, n_blocks, xt, out);
}

// Marks the memo layout of a column quantized alone (k_xtile1).
constexpr int k_layout_single = 0x200;

// repack_act_layout of T: the tiles differ only by the sums' shift.
template <int32_t T>
constexpr int act_layout() {
    return 0x100 | sum_shift<T>();
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    const int64_t n_blocks = d.K / k_qblock;
    const size_t tile_bytes = tile_bytes_of(n_blocks);
    // A GEMM's columns: quantized by mul_mat_repack_prepare into the shared
    // scratch; a few columns' (token generation): by each thread into its
    // own, or taken from the node before (memo_holds).
    const bool gemm = d.N >= k_gemm_min_n;
    char * own_tiles = static_cast<char *>(p.wdata);
    const char * tiles = nullptr; // the item's column block
    const int64_t cols_max = cols_max_of(n_blocks);
    auto * xbuf = reinterpret_cast<float *>(own_tiles + xbuf_at(n_blocks));
    const bool in_place = b_in_place(d);
    const auto * a = static_cast<const char *>(d.a->data); // 2-D: one matrix for every batch
    constexpr int G = group_rows<T>();
    const size_t group_bytes = static_cast<size_t>(n_blocks) * group_block<T>();
    const mm_grid g = make_mm_grid(d, p.nth, G, std::max(G, k_pair * k_rows), k_c, cols_max);
    // GEMM items are compute-bound; mat-vec items stream their row groups.
    const size_t item_bytes = d.N >= k_gemm_min_n ? 0 : static_cast<size_t>(g.rows_per_item / G) * group_bytes;
    work_queue queue(p, g.n_items, chunk_for_bytes(item_bytes, g.n_items, p.nth));
    alignas(64) float otile[k_c * k_pair * k_rows];
    const cpu_tuning & tu = tuning();
    int64_t have_cols = -1; // (batch, column block) quantized in tiles
    constexpr int layout = act_layout<T>();
    // One-column items (not GEMMs) of 8-row groups in the vector builds:
    // the column in k_xtile1's layout (memo: layout | k_layout_single).
#if defined(TSR_CPU_AVX2)
    constexpr bool single_ok = G == k_rows;
#else
    constexpr bool single_ok = false;
#endif
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const mm_item item = item_of(g, d, it);
            const int64_t bc = item.bc, batch = item.batch;
            const int64_t m0 = item.m0, m1 = item.m1, n0 = item.n0, n1 = item.n1;
            const bool single = single_ok && !gemm && n1 - n0 == 1;
            if (bc != have_cols) {
                if (gemm) {
                    tiles = shared_tiles(p, d, k_c, tile_bytes, batch, n0);
                } else {
                    // (Once this node recorded its own tiles, memo_holds is
                    // false: they are no longer the previous node's.)
                    tiles = own_tiles;
                    const int lay = single ? layout | k_layout_single : layout;
                    if (!memo_holds(p, d.b, lay, batch, n0, n1)) {
                        const q8_tile xtile = single ? k_xtile1 : k_xtile;
                        quantize_q8_tiles(d, in_place, batch, n0, n1, xtile, own_tiles, tile_bytes_of(n_blocks, xtile), xbuf, sum_shift<T>());
                    }
                    memo_record(p, d.dst, d.b, lay, batch, n0, n1);
                }
                have_cols = bc;
            }
            for (int64_t mg = m0; mg < m1;) {
                const char * w = a + static_cast<size_t>(mg / G) * group_bytes;
                // Rows of this step: its group; 16 on AVX-512 GEMMs over 8-row
                // groups (two groups in 512-bit vectors).
                int rows = G;
#ifdef TSR_CPU_AVX512
                if (G == k_rows && d.N >= k_gemm_min_n && mg + 2 * k_rows <= m1) rows = 2 * k_rows;
#endif
                for (int64_t n = n0; n < n1; n += k_c) {
                    const int ncols = static_cast<int>(std::min<int64_t>(k_c, n1 - n));
                    const char * xt = tiles + static_cast<size_t>((n - n0) / k_c) * tile_bytes;
#ifdef TSR_CPU_AVX512
                    if (rows == 2 * k_rows) {
                        tile16<T>(ncols, w, G == k_rows ? w + group_bytes : w, n_blocks, xt, otile, tu);
                    } else
#endif
                    {
                        if constexpr (G == k_rows) tile<T>(ncols, w, n_blocks, xt, otile, tu, p.nth == 1, single);
                    }
                    for (int c = 0; c < ncols; ++c) copy_column(otile + c * rows, rows, dst_column(d, batch, n + c) + mg);
                }
                mg += rows;
            }
        }
    }
}

} // namespace

bool mul_mat_repack_supported(const tsr_tensor * node) {
    const auto aligned = [](uint64_t v) { return v % alignof(float) == 0; };
    return node->nb[0] == sizeof(float) && aligned(reinterpret_cast<uintptr_t>(node->data)) &&
           aligned(node->nb[1]) && aligned(node->nb[2]) && aligned(node->nb[3]) && repack_eligible(node->src[0]) &&
           (group_rows_of(node->src[0]->type) == 0 || // other types: their own kernels' checks
            repack_group_rows(node->src[0]->type) == group_rows_of(node->src[0]->type)); // these kernels read that layout
}

bool mul_mat_repack_uses_amx() {
#ifdef TSR_CPU_AMX
    return tuning().amx && amx::permitted();
#else
    return false;
#endif
}

int repack_act_layout(int32_t type) {
    return for_q_type(type, 0, [](auto t) { return act_layout<decltype(t)::value>(); });
}

size_t mul_mat_repack_work_size(const mm_dims & d) {
    const int64_t n_blocks = d.K / k_qblock;
    size_t bytes = xbuf_at(n_blocks) + align64(static_cast<size_t>(d.K) * sizeof(float));
#ifdef TSR_CPU_AMX
    if (amx::use(d)) bytes += static_cast<size_t>(n_blocks) * amx::k_group_block; // the unpacked rows
#endif
    return bytes;
}

size_t mul_mat_repack_shared_size(const mm_dims & d) {
    if (d.N < k_gemm_min_n) return 0;
    const int64_t n_blocks = d.K / k_qblock;
    int cols = k_c;
    size_t tile_bytes = tile_bytes_of(n_blocks);
#ifdef TSR_CPU_AMX
    if (amx::use(d)) {
        cols = amx::k_cols;
        tile_bytes = tile_bytes_of(n_blocks, amx::k_xtile16);
    }
#endif
    size_t bytes = 0;
    const auto tiles = static_cast<size_t>(d.n_batch * ((d.N + cols - 1) / cols));
    if (__builtin_mul_overflow(tiles, tile_bytes, &bytes)) {
        throw std::length_error("mul_mat_repack: quantized activations exceed the address space");
    }
    return bytes;
}

int mul_mat_repack_prepared_layout(const mm_dims & d) {
    return for_q_type(d.a->type, 0, [&](auto t) {
#ifdef TSR_CPU_AMX
        if (amx::use(d)) return amx::act_layout<decltype(t)::value>();
#endif
        return act_layout<decltype(t)::value>();
    });
}

bool mul_mat_repack_prepare(const compute_params & p, const mm_dims & d) {
    if (d.N < k_gemm_min_n || p.shared == nullptr) return false;
    return for_q_type(d.a->type, false, [&](auto t) {
        constexpr int32_t T = decltype(t)::value;
        const int64_t n_blocks = d.K / k_qblock;
#ifdef TSR_CPU_AMX
        if (amx::use(d)) {
            prepare_tiles(p, d, amx::k_xtile16, tile_bytes_of(n_blocks, amx::k_xtile16), sum_shift<T>());
            return true;
        }
#endif
        prepare_tiles(p, d, k_xtile, tile_bytes_of(n_blocks), sum_shift<T>());
        return true;
    });
}

bool mul_mat_repack(const compute_params & p, const mm_dims & d) {
    // A GEMM reads the columns mul_mat_repack_prepare left in the shared scratch.
    if (d.N >= k_gemm_min_n && (p.shared == nullptr || p.shared_size < mul_mat_repack_shared_size(d))) return false;
    return for_q_type(d.a->type, false, [&](auto t) {
#ifdef TSR_CPU_AMX
        if (amx::use(d)) {
            amx::run<decltype(t)::value>(p, d);
            return true;
        }
#endif
        run<decltype(t)::value>(p, d);
        return true;
    });
}

} // namespace tessera::cpu
