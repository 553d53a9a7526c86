// backends/cpu/ops/gemm_q.cpp — MUL_MAT with Q8_0/Q4_0/Q5_0/Q5_1 weights and
// N >= k_gemm_min_n columns (prompt processing): integer GEMM on
// activations quantized to Q8_0 (q8_act.hpp).
//
// Weight rows are repacked, k_p at a time (AVX2: 8, AVX-512: 16), into a
// panel in which, for every block of 32, step j (0..7) holds the four
// quants 4j..4j+3 of each of the k_p rows side by side (one vector), then
// the k_p scales as F32 (Q5_1: then the k_p offsets m as F32):
//   panel block b: [8 steps][k_p rows][4 bytes] [k_p floats] ([k_p floats])
// The micro-kernel broadcasts four activation quants of a column and
// multiplies them with a whole step (vpdpbusd, or vpmaddubsw + vpmaddwd):
// one int32 lane per row accumulates the block's exact integer dot
// product, k_c columns at a time (AVX2: 4, AVX-512: 8), so each loaded
// weight vector serves k_c columns. Weights enter the byte multiply as
// unsigned values: Q4_0 nibbles (w + 8), Q5_0 5-bit quants (w + 16),
// Q8_0 with VNNI w + 128 — the
// offset times the activation block's quant sum is subtracted — and Q8_0
// without VNNI as |w| with w's sign moved onto the activation. Q5_1's
// 5-bit quants q (x = d q + m) enter as they are; its offset is a second
// term float(sum) * (m_w * d_x), added right after the first.
//
// Per element: term(b) = float(isum_b) * (d_w * d_x) added by FMA to a
// chain of k_chain blocks starting from zero; the chains' sums are added in
// order. The same operations for every element whatever the tiling, the
// thread split or the vector width.
#include <algorithm>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/simd.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

#ifdef TSR_CPU_AVX512
constexpr int k_p = 16; // rows per panel
constexpr int k_c = 8;  // columns per micro-tile
#else
constexpr int k_p = 8;
constexpr int k_c = 4;
#endif
constexpr int64_t k_chain = 16;                              // blocks per FMA chain
constexpr size_t k_pblock_max = static_cast<size_t>(k_p) * 40; // panel bytes per block, at most (Q5_1)
constexpr int64_t k_nq = 512;                                // columns quantized at a time
// Quantized activations of a micro-tile of k_c columns, per block:
// [k_c x 32 quants][k_c scales (F32)][k_c sums << shift (int32)].
constexpr q8_tile k_xtile{k_c};
constexpr size_t k_xblock = k_xtile.block_bytes();
constexpr size_t k_xd = k_xtile.d_offset();
constexpr size_t k_xsum = k_xtile.sum_offset();

// How the weights enter the unsigned side of the byte products.
enum class mode {
    nibble,   // Q4_0: w + 8 in 0..15; subtract 8 * sum
    five,     // Q5_0: w + 16 in 0..31; subtract 16 * sum
    offset,   // Q8_0 with VNNI: w + 128; subtract 128 * sum
    sign,     // Q8_0 without VNNI: |w|, sign moved to the activation
    five_min, // Q5_1: q in 0..31, x = d q + m; the m term added separately
};

// Panel bytes per block: the steps and d, and Q5_1's m.
template <mode M>
constexpr size_t pblock() {
    return static_cast<size_t>(k_p) * (M == mode::five_min ? 40 : 36);
}

template <int32_t T>
constexpr mode mode_of() {
    if constexpr (T == TSR_TYPE_Q4_0) return mode::nibble;
    if constexpr (T == TSR_TYPE_Q5_0) return mode::five;
    if constexpr (T == TSR_TYPE_Q5_1) return mode::five_min;
#ifdef TSR_CPU_VNNI256
    return mode::offset;
#else
    return mode::sign;
#endif
}

// Packs rows [m0, m0 + rows) (rows <= k_p) of matrix a into the panel;
// missing rows are zero.
template <int32_t T>
void pack_panel(const char * a, size_t nb1, int64_t m0, int64_t rows, int64_t n_blocks, uint8_t * panel) {
    constexpr size_t bb = q_block_bytes(T);
    constexpr size_t pbb = pblock<mode_of<T>()>();
    for (int g = 0; g < k_p / 8; ++g) {
        const int64_t gvalid = std::clamp<int64_t>(rows - g * 8, 0, 8);
        const char * rp[8];
        for (int i = 0; i < 8; ++i) {
            // Missing rows are zero below; their pointers only need to be valid.
            const int64_t m = m0 + std::min<int64_t>(g * 8 + i, rows - 1);
            rp[i] = a + static_cast<size_t>(m) * nb1;
        }
        for (int64_t b = 0; b < n_blocks; ++b) {
            uint8_t * pb = panel + static_cast<size_t>(b) * pbb;
            __m256 v[8];
            for (int i = 0; i < 8; ++i) {
                __m256i q = _mm256_setzero_si256();
                if (i < gvalid) {
                    const char * blk = rp[i] + static_cast<size_t>(b) * bb;
                    if constexpr (T == TSR_TYPE_Q4_0) {
                        q = simd::q4_nibbles(blk + 2);
                    } else if constexpr (T == TSR_TYPE_Q5_0) {
                        q = simd::q5_quants(blk);
                    } else if constexpr (T == TSR_TYPE_Q5_1) {
                        q = simd::q5_quants(blk + 2); // Q5_0's layout after the extra F16 m
                    } else {
                        q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 2));
                        if constexpr (mode_of<T>() == mode::offset) q = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
                    }
                }
                v[i] = _mm256_castsi256_ps(q);
            }
            simd::transpose8x8(v); // v[j]: dword j (quants 4j..4j+3) of the 8 rows
            for (int j = 0; j < 8; ++j) _mm256_store_ps(reinterpret_cast<float *>(pb + j * k_p * 4 + g * 32), v[j]);
            auto * d = reinterpret_cast<float *>(pb + k_p * 32);
            for (int i = 0; i < 8; ++i) d[g * 8 + i] = i < gvalid ? f16_to_f32_inline(read_u16(rp[i] + static_cast<size_t>(b) * bb)) : 0.0f;
            if constexpr (T == TSR_TYPE_Q5_1) {
                auto * mv = reinterpret_cast<float *>(pb + k_p * 36);
                for (int i = 0; i < 8; ++i) mv[g * 8 + i] = i < gvalid ? f16_to_f32_inline(read_u16(rp[i] + static_cast<size_t>(b) * bb + 2)) : 0.0f;
            }
        }
    }
}

inline int32_t quad(const char * p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline float scalar_f32(const char * p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <mode M>
constexpr int bias_shift() {
    return M == mode::nibble ? 3 : M == mode::five ? 4 : M == mode::offset ? 7 : -1;
}

#ifdef TSR_CPU_AVX512

// out[c][0..15] = the 16 panel rows . column c, for C columns.
template <int C, mode M>
void micro_kernel(const uint8_t * panel, int64_t n_blocks, const char * xt, float * out) {
    __m512 total[C];
    for (int c = 0; c < C; ++c) total[c] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < n_blocks; b0 += k_chain) {
        const int64_t b1 = std::min(n_blocks, b0 + k_chain);
        __m512 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * pb = panel + static_cast<size_t>(b) * pblock<M>();
            const char * xp = xt + static_cast<size_t>(b) * k_xblock;
            __m512i is[C];
#if !defined(TSR_CPU_VNNI512)
            if constexpr (M == mode::nibble || M == mode::five || M == mode::five_min) {
                // vpmaddubsw pair sums summed in int16 over G steps, then
                // widened: G * 2 * 15 * 127 (Q4_0, G = 8) and G * 2 * 31 * 127
                // (Q5_0 and Q5_1, G = 4) stay below 2^15.
                constexpr int G = M == mode::nibble ? 8 : 4; // Q5_0, Q5_1: 4
                for (int c = 0; c < C; ++c) is[c] = _mm512_setzero_si512();
                for (int j0 = 0; j0 < 8; j0 += G) {
                    __m512i s16[C];
                    for (int c = 0; c < C; ++c) s16[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
                    for (int j = j0; j < j0 + G; ++j) {
                        const __m512i w = _mm512_load_si512(pb + j * 64);
                        for (int c = 0; c < C; ++c) {
                            const __m512i xb = _mm512_set1_epi32(quad(xp + c * 32 + j * 4));
                            s16[c] = _mm512_add_epi16(s16[c], _mm512_maddubs_epi16(w, xb));
                        }
                    }
                    for (int c = 0; c < C; ++c) is[c] = _mm512_add_epi32(is[c], _mm512_madd_epi16(s16[c], _mm512_set1_epi16(1)));
                }
            } else
#endif
            {
                for (int c = 0; c < C; ++c) is[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int j = 0; j < 8; ++j) {
                    const __m512i w = _mm512_load_si512(pb + j * 64);
                    if constexpr (M == mode::sign) {
                        const __m512i aw = _mm512_abs_epi8(w);
                        const __mmask64 neg = _mm512_movepi8_mask(w);
                        for (int c = 0; c < C; ++c) {
                            const __m512i xb = _mm512_set1_epi32(quad(xp + c * 32 + j * 4));
                            is[c] = simd::dot4_u8s8(is[c], aw, _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb));
                        }
                    } else {
                        for (int c = 0; c < C; ++c) is[c] = simd::dot4_u8s8_bcast(is[c], w, xp + c * 32 + j * 4);
                    }
                }
            }
            const __m512 dw = _mm512_load_ps(pb + k_p * 32);
            for (int c = 0; c < C; ++c) {
                if constexpr (bias_shift<M>() >= 0) is[c] = _mm512_sub_epi32(is[c], _mm512_set1_epi32(quad(xp + k_xsum + c * 4)));
                const __m512 dx = _mm512_set1_ps(scalar_f32(xp + k_xd + c * 4));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[c]), _mm512_mul_ps(dw, dx), acc[c]);
                if constexpr (M == mode::five_min) {
                    const __m512 xsum = _mm512_set1_ps(static_cast<float>(quad(xp + k_xsum + c * 4)));
                    acc[c] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(_mm512_load_ps(pb + k_p * 36), dx), acc[c]);
                }
            }
        }
        for (int c = 0; c < C; ++c) total[c] = _mm512_add_ps(total[c], acc[c]);
    }
    for (int c = 0; c < C; ++c) _mm512_store_ps(out + c * k_p, total[c]);
}

#else

// out[c][0..7] = the 8 panel rows . column c, for C columns.
// (no-tree-reassoc: GCC would otherwise regroup the integer step sums into
// a tree, computing all products of a block first and spilling them.)
template <int C, mode M>
__attribute__((optimize("no-tree-reassoc"))) void micro_kernel(const uint8_t * panel, int64_t n_blocks, const char * xt, float * out) {
    __m256 total[C];
    for (int c = 0; c < C; ++c) total[c] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < n_blocks; b0 += k_chain) {
        const int64_t b1 = std::min(n_blocks, b0 + k_chain);
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t * pb = panel + static_cast<size_t>(b) * pblock<M>();
            const char * xp = xt + static_cast<size_t>(b) * k_xblock;
            __m256i is[C];
#if !defined(TSR_CPU_VNNI256)
            if constexpr (M == mode::nibble || M == mode::five || M == mode::five_min) {
                // vpmaddubsw pair sums summed in int16 over G steps, then
                // widened: G * 2 * 15 * 127 (Q4_0, G = 8) and G * 2 * 31 * 127
                // (Q5_0 and Q5_1, G = 4) stay below 2^15.
                // Column by column (the step vectors are reloaded from L1):
                // few live registers, so nothing spills.
                constexpr int G = M == mode::nibble ? 8 : 4; // Q5_0, Q5_1: 4
                for (int c = 0; c < C; ++c) {
                    is[c] = _mm256_setzero_si256();
                    for (int j0 = 0; j0 < 8; j0 += G) {
                        __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
                        for (int j = j0; j < j0 + G; ++j) {
                            const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i *>(pb + j * 32));
                            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w, _mm256_set1_epi32(quad(xp + c * 32 + j * 4))));
                        }
                        is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
                    }
                }
            } else
#endif
            {
                for (int c = 0; c < C; ++c) is[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int j = 0; j < 8; ++j) {
                    const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i *>(pb + j * 32));
                    if constexpr (M == mode::sign) {
                        const __m256i aw = _mm256_abs_epi8(w);
                        for (int c = 0; c < C; ++c) {
                            const __m256i xb = _mm256_set1_epi32(quad(xp + c * 32 + j * 4));
                            is[c] = simd::dot4_u8s8(is[c], aw, _mm256_sign_epi8(xb, w));
                        }
                    } else {
                        for (int c = 0; c < C; ++c) {
                            const __m256i xb = _mm256_set1_epi32(quad(xp + c * 32 + j * 4));
                            is[c] = simd::dot4_u8s8(is[c], w, xb);
                        }
                    }
                }
            }
            const __m256 dw = _mm256_load_ps(reinterpret_cast<const float *>(pb + k_p * 32));
            for (int c = 0; c < C; ++c) {
                if constexpr (bias_shift<M>() >= 0) is[c] = _mm256_sub_epi32(is[c], _mm256_set1_epi32(quad(xp + k_xsum + c * 4)));
                const __m256 dx = _mm256_set1_ps(scalar_f32(xp + k_xd + c * 4));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]), _mm256_mul_ps(dw, dx), acc[c]);
                if constexpr (M == mode::five_min) {
                    const __m256 xsum = _mm256_set1_ps(static_cast<float>(quad(xp + k_xsum + c * 4)));
                    acc[c] = _mm256_fmadd_ps(xsum, _mm256_mul_ps(_mm256_load_ps(reinterpret_cast<const float *>(pb + k_p * 36)), dx), acc[c]);
                }
            }
        }
        for (int c = 0; c < C; ++c) total[c] = _mm256_add_ps(total[c], acc[c]);
    }
    for (int c = 0; c < C; ++c) _mm256_store_ps(out + c * k_p, total[c]);
}

#endif

template <mode M, int C = k_c>
void tile(int cols, const uint8_t * panel, int64_t n_blocks, const char * xt, float * out) {
    if constexpr (C > 1) {
        if (cols < C) return tile<M, C - 1>(cols, panel, n_blocks, xt, out);
    }
    micro_kernel<C, M>(panel, n_blocks, xt, out);
}

// Bytes of the quantized activations of one micro-tile.
size_t xtile_bytes(int64_t n_blocks) {
    return align64(static_cast<size_t>(n_blocks) * k_xblock);
}

struct scratch {
    char * cols;     // k_nq / k_c quantized micro-tiles
    uint8_t * panel; // one packed panel
    float * xbuf;    // one gathered column
};

size_t panel_bytes(int64_t n_blocks) {
    return align64(static_cast<size_t>(n_blocks) * k_pblock_max);
}

scratch carve(void * w, int64_t n_blocks) {
    scratch s{};
    char * p = static_cast<char *>(w);
    s.cols = p;
    p += (k_nq / k_c) * xtile_bytes(n_blocks);
    s.panel = reinterpret_cast<uint8_t *>(p);
    p += panel_bytes(n_blocks);
    s.xbuf = reinterpret_cast<float *>(p);
    return s;
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    constexpr mode M = mode_of<T>();
    const int64_t n_blocks = d.K / k_qblock;
    const size_t tile_bytes = xtile_bytes(n_blocks);
    const scratch sc = carve(p.wdata, n_blocks);
    const bool in_place = b_in_place(d);
    run_panel_gemm<k_p, k_c>(
        p, d, k_nq,
        [&](int64_t batch, int64_t n0, int64_t n1) {
            quantize_q8_tiles(d, in_place, batch, n0, n1, k_xtile, sc.cols, tile_bytes, sc.xbuf, std::max(bias_shift<M>(), 0));
        },
        [&](const char * a, int64_t m0, int64_t rows) { pack_panel<T>(a, d.a->nb[1], m0, rows, n_blocks, sc.panel); },
        [&](int ncols, int64_t ti, float * out) { tile<M>(ncols, sc.panel, n_blocks, sc.cols + static_cast<size_t>(ti) * tile_bytes, out); });
}

} // namespace

size_t gemm_q_work_size(const mm_dims & d) {
    const int64_t n_blocks = d.K / k_qblock;
    return (k_nq / k_c) * xtile_bytes(n_blocks) + panel_bytes(n_blocks) + align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool gemm_q(const compute_params & p, const mm_dims & d) {
    return for_q_type(d.a->type, false, [&](auto t) {
        run<decltype(t)::value>(p, d);
        return true;
    });
}

#else // portable build: the generic kernel is used instead

size_t gemm_q_work_size(const mm_dims &) { return 0; }
bool gemm_q(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu
