// backends/cpu/ops/gemm_k.cpp — MUL_MAT with Q4_K / Q5_K / Q6_K weights and
// N >= k_gemm_min_n columns (prompt processing): an integer GEMM on the
// columns quantized to Q8_K, with the integer sums and F32 steps of
// vec_dot_k.hpp, so every element has the bits the one-token kernel
// (mul_mat_k.cpp) and the portable one give it.
//
// Weight rows are unpacked k_p at a time (AVX-512: 16, AVX2: 8) into a
// panel; per super-block:
//   steps   64 x [k_p rows][4 bytes]: quants 4s..4s+3 of each row (Q4_K
//           0..15, Q5_K 0..31, Q6_K 0..63, unsigned), one vector per step
//   scales  n_sub x [k_p int32]: sub-block scale sc_j of each row (Q4_K/Q5_K 8
//           sub-blocks of 32, Q6_K 16 of 16); without VNNI the int16 pair
//           (sc_j, sc_j), the multiplier of vpmaddwd
//   pairs   [k_p int32] x (Q4_K/Q5_K 4: mins (m_2i, m_2i+1); Q6_K 8: scales
//           (sc_2i, sc_2i+1)) as int16 pairs, for the block-sum terms
//   d, dmin [k_p floats] (Q6_K: d only)
// The micro-kernel broadcasts four activation quants of a column against a
// step (vpdpbusd, or vpmaddubsw pair sums in int16 — at most 8 steps of
// 2 * 15 * 127 for Q4_K, 4 of 2 * 31 * 127 for Q5_K, 2 steps of
// 2 * 63 * 127 for Q6_K — then
// vpmaddwd by the scale pair), k_c columns at a time:
//   isum[row] = sum_j sc_j * (sub-block j's dot), exact in int32;
//   Q4_K/Q5_K msum[row] = sum_j m_j * (block sum of sub-block j) (vpmaddwd of
//   the min pairs with the column's block-sum pairs);
//   Q6_K isum -= 32 * sum_j sc_j * (block sum of j);
//   then the F32 steps per super-block, in order.
#include <algorithm>

#include "backends/cpu/ops/k_lanes.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"

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
#ifdef TSR_CPU_VNNI256
constexpr bool k_vnni = true;
#else
constexpr bool k_vnni = false;
#endif
constexpr int64_t k_nq = 512; // columns quantized at a time

template <int32_t T>
struct fmt {
    static constexpr bool q4 = has_k_mins(T);      // Q4_K's structure (Q4_K, Q5_K)
    static constexpr bool five = T == TSR_TYPE_Q5_K; // plus a fifth bit per quant
    static constexpr int n_sub = q4 ? 8 : 16;      // sub-blocks per super-block
    static constexpr int steps_per_sub = 64 / n_sub;
    static constexpr int n_pairs = q4 ? 4 : 8;     // int16 pair words of the block-sum term
    // Panel bytes per super-block and the offsets of its parts.
    static constexpr size_t steps = 0;
    static constexpr size_t scales = 64 * k_p * 4;
    static constexpr size_t pairs = scales + n_sub * k_p * 4;
    static constexpr size_t d = pairs + n_pairs * k_p * 4;
    static constexpr size_t dmin = d + k_p * 4;
    static constexpr size_t bytes = dmin + (q4 ? k_p * 4 : 0);
};

// Quantized activations of a micro-tile of k_c columns, per super-block:
// [k_c x 256 quants][k_c x 8 int32 block-sum pair words][k_c floats dx].
// Pair words of a column: q8_k_pair_words (k_lanes.hpp).
constexpr size_t k_xqs = 0;
constexpr size_t k_xpairs = k_c * 256;
constexpr size_t k_xd = k_xpairs + k_c * 32;
constexpr size_t k_xblock = k_xd + k_c * 4;

// Copies one quantized column into slot c of the tiles (one tile of
// k_xblock bytes per super-block).
template <int32_t T>
void scatter_column(const block_q8_k * q, int64_t n_super, char * tile, int c) {
    for (int64_t b = 0; b < n_super; ++b) {
        char * t = tile + static_cast<size_t>(b) * k_xblock;
        std::memcpy(t + k_xqs + c * 256, q[b].qs, 256);
        q8_k_pair_words(T, q[b], reinterpret_cast<int32_t *>(t + k_xpairs + c * 32));
        std::memcpy(t + k_xd + c * 4, &q[b].d, 4);
    }
}

// The 256 quants of super-block b of a row as bytes in element order.
template <int32_t T>
void unpack_quants(const char * blk, uint8_t * q) {
    if constexpr (fmt<T>::q4) {
        constexpr bool five = fmt<T>::five;
        const __m256i nib = _mm256_set1_epi8(0x0f);
        __m256i qh = _mm256_setzero_si256();
        if constexpr (five) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_q5_k_qh));
        for (int p = 0; p < 4; ++p) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + (five ? k_q5_k_qs : k_q4_k_qs) + 32 * p));
            __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
            if constexpr (five) {
                // Q5_K: sub-blocks 2p (lo) and 2p + 1 (hi).
                lo = _mm256_or_si256(lo, simd::q5_k_fifth(qh, 2 * p));
                hi = _mm256_or_si256(hi, simd::q5_k_fifth(qh, 2 * p + 1));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * p), lo);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * p + 32), hi);
        }
    } else {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        const __m256i m2 = _mm256_set1_epi8(0x30);
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_q6_k_ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_q6_k_ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_q6_k_qh + 32 * h));
            auto * o = reinterpret_cast<__m256i *>(q + 128 * h);
            _mm256_storeu_si256(o, _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)));
            _mm256_storeu_si256(o + 1, _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)));
            _mm256_storeu_si256(o + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)));
            _mm256_storeu_si256(o + 3,
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2)));
        }
    }
}

// Row r's scales, mins, d and dmin of a Q4_K super-block (scales: its 12
// scale bytes; d, dmin: F16 bits) into the panel block pb.
void put_q4_k_row(const char * scales, uint16_t d, uint16_t dmin, uint8_t * pb, int r) {
    using F = fmt<TSR_TYPE_Q4_K>;
    const q4_k_scales s = unpack_q4_k_scales(scales);
    const uint32_t sw[2] = {s.sc_lo, s.sc_hi}, mw[2] = {s.m_lo, s.m_hi};
    int scv[8], mv[8];
    for (int j = 0; j < 8; ++j) {
        scv[j] = static_cast<int>((sw[j / 4] >> (8 * (j % 4))) & 0xff);
        mv[j] = static_cast<int>((mw[j / 4] >> (8 * (j % 4))) & 0xff);
    }
    auto * sc = reinterpret_cast<int32_t *>(pb + F::scales);
    auto * pr = reinterpret_cast<int32_t *>(pb + F::pairs);
    for (int j = 0; j < 8; ++j) sc[j * k_p + r] = k_vnni ? scv[j] : pair16(scv[j], scv[j]);
    for (int j = 0; j < 4; ++j) pr[j * k_p + r] = pair16(mv[2 * j], mv[2 * j + 1]);
    reinterpret_cast<float *>(pb + F::d)[r] = _cvtsh_ss(d);
    reinterpret_cast<float *>(pb + F::dmin)[r] = _cvtsh_ss(dmin);
}

// The same for a Q6_K super-block (scales: its 16 int8 scales).
void put_q6_k_row(const int8_t * s, uint16_t d, uint8_t * pb, int r) {
    using F = fmt<TSR_TYPE_Q6_K>;
    auto * sc = reinterpret_cast<int32_t *>(pb + F::scales);
    auto * pr = reinterpret_cast<int32_t *>(pb + F::pairs);
    for (int j = 0; j < 16; ++j) sc[j * k_p + r] = k_vnni ? s[j] : pair16(s[j], s[j]);
    for (int j = 0; j < 8; ++j) pr[j * k_p + r] = pair16(s[2 * j], s[2 * j + 1]);
    reinterpret_cast<float *>(pb + F::d)[r] = _cvtsh_ss(d);
}

// Packs rows [m0, m0 + rows) (rows <= k_p) of matrix a into the panel;
// missing rows are zero.
template <int32_t T>
void pack_panel(const char * a, size_t nb1, int64_t m0, int64_t rows, int64_t n_super, uint8_t * panel) {
    using F = fmt<T>;
    alignas(32) uint8_t q[8][256];
    for (int64_t b = 0; b < n_super; ++b) {
        uint8_t * pb = panel + static_cast<size_t>(b) * F::bytes;
        auto * sc = reinterpret_cast<int32_t *>(pb + F::scales);
        auto * pr = reinterpret_cast<int32_t *>(pb + F::pairs);
        auto * dv = reinterpret_cast<float *>(pb + F::d);
        for (int g = 0; g < k_p / 8; ++g) {
            for (int i = 0; i < 8; ++i) {
                const int r = g * 8 + i;
                if (r >= rows) {
                    std::memset(q[i], 0, 256);
                    for (int j = 0; j < F::n_sub; ++j) sc[j * k_p + r] = 0;
                    for (int j = 0; j < F::n_pairs; ++j) pr[j * k_p + r] = 0;
                    dv[r] = 0.0f;
                    if constexpr (F::q4) reinterpret_cast<float *>(pb + F::dmin)[r] = 0.0f;
                    continue;
                }
                const char * blk = a + static_cast<size_t>(m0 + r) * nb1 + static_cast<size_t>(b) * k_block_bytes(T);
                unpack_quants<T>(blk, q[i]);
                if constexpr (F::q4) {
                    put_q4_k_row(blk + k_q4_k_scales, read_u16(blk + k_q4_k_d), read_u16(blk + k_q4_k_dmin), pb, r);
                } else {
                    put_q6_k_row(reinterpret_cast<const int8_t *>(blk + k_q6_k_scales), read_u16(blk + k_q6_k_d), pb, r);
                }
            }
            // Steps: dword s of the 8 rows side by side, 8 steps at a time.
            for (int s0 = 0; s0 < 64; s0 += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; ++i) v[i] = _mm256_load_ps(reinterpret_cast<const float *>(q[i] + 4 * s0));
                simd::transpose8x8(v);
                for (int j = 0; j < 8; ++j) _mm256_store_ps(reinterpret_cast<float *>(pb + F::steps + (s0 + j) * k_p * 4 + g * 32), v[j]);
            }
        }
    }
}

inline float scalar_f32(const char * p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// out[c][0..k_p) = the k_p panel rows . column c, for C columns.
// The panel of a repacked K-quant matrix's group m0 / k_p (repack.hpp: its
// groups are lanes::n = k_p rows): the same bytes pack_panel makes of
// those rows. Q4_K: a step's low nibbles are panel step 16 (j / 8) + j % 8,
// its high nibbles that + 8 (Q5_K: with the fifth bits of qh step j % 8).
// Q6_K: panel step 32 h + 8 qq + s (elements 128 h + 32 qq + 4 s ..) from
// ql step 16 h + 8 (qq % 2) + s and qh step 8 h + s (q6_k_group_block),
// as in mul_mat_k_repack.cpp.
static_assert(k_p == lanes::n, "a repacked K-quant group is one panel");
template <int32_t T>
void pack_panel_repacked(const char * a, int64_t m0, int64_t n_super, uint8_t * panel) {
    using F = fmt<T>;
    using V = lanes;
    constexpr size_t G = k_p, bb = k_block_bytes(T), group_block = bb * G;
    const char * grp = a + static_cast<size_t>(m0 / k_p) * static_cast<size_t>(n_super) * group_block;
    const V::vi m4 = V::bcast8(0x0f), m2 = V::bcast8(0x30);
    for (int64_t b = 0; b < n_super; ++b) {
        const char * blk = grp + static_cast<size_t>(b) * group_block;
        uint8_t * pb = panel + static_cast<size_t>(b) * F::bytes;
        auto put_step = [&](int s, V::vi v) { V::storeu(pb + F::steps + static_cast<size_t>(s) * k_p * 4, v); };
        if constexpr (F::q4) {
            for (int j = 0; j < 32; ++j) {
                const V::vi w = V::loadu(blk + (F::five ? 48 : 16) * G + 4 * G * j);
                V::vi lo = V::and_(w, m4), hi = V::and_(V::srli16(w, 4), m4);
                if constexpr (F::five) { // fifth bits: qh step j % 8, bits 2 (j / 8) and 2 (j / 8) + 1
                    const V::vi hb = V::loadu(blk + 16 * G + 4 * G * (j % 8));
                    lo = V::or_(lo, q5_k_fifth_lanes(hb, 2 * (j / 8)));
                    hi = V::or_(hi, q5_k_fifth_lanes(hb, 2 * (j / 8) + 1));
                }
                put_step(16 * (j / 8) + j % 8, lo);
                put_step(16 * (j / 8) + j % 8 + 8, hi);
            }
            for (int r = 0; r < k_p; ++r) {
                char scales[12];
                for (size_t k = 0; k < 12; ++k) scales[k] = blk[4 * G + G * k + static_cast<size_t>(r)];
                put_q4_k_row(scales, read_u16(blk + 2 * r), read_u16(blk + 2 * G + 2 * r), pb, r);
            }
        } else {
            const q6_k_group_block B(grp, b);
            for (int h = 0; h < 2; ++h) {
                for (int s = 0; s < 8; ++s) {
                    const V::vi l0 = V::loadu(B.ql(16 * h + s)), l1 = V::loadu(B.ql(16 * h + 8 + s));
                    const V::vi hb = V::loadu(B.qh(8 * h + s));
                    put_step(32 * h + s, V::or_(V::and_(l0, m4), V::and_(V::slli16(hb, 4), m2)));
                    put_step(32 * h + 8 + s, V::or_(V::and_(l1, m4), V::and_(V::slli16(hb, 2), m2)));
                    put_step(32 * h + 16 + s, V::or_(V::and_(V::srli16(l0, 4), m4), V::and_(hb, m2)));
                    put_step(32 * h + 24 + s, V::or_(V::and_(V::srli16(l1, 4), m4), V::and_(V::srli16(hb, 2), m2)));
                }
            }
            for (int r = 0; r < k_p; ++r) {
                int8_t scales[16];
                for (int k = 0; k < 16; ++k) scales[k] = static_cast<int8_t>(B.scale(k)[r]);
                put_q6_k_row(scales, read_u16(B.d() + 2 * r), pb, r);
            }
        }
    }
}

template <int32_t T, int C>
__attribute__((optimize("no-tree-reassoc"))) void micro_kernel(const uint8_t * panel, int64_t n_super, const char * xt, float * out) {
    using F = fmt<T>;
    using V = lanes;
    typename V::vf acc[C];
    for (int c = 0; c < C; ++c) acc[c] = V::zerof();
    for (int64_t b = 0; b < n_super; ++b) {
        const uint8_t * pb = panel + static_cast<size_t>(b) * F::bytes;
        const char * xb = xt + static_cast<size_t>(b) * k_xblock;
        typename V::vi isum[C];
        for (int c = 0; c < C; ++c) isum[c] = V::zero();
        for (int j = 0; j < F::n_sub; ++j) {
            const typename V::vi scj = V::load(pb + F::scales + j * k_p * 4);
            const uint8_t * st = pb + F::steps + static_cast<size_t>(j * F::steps_per_sub) * k_p * 4;
            const char * xs = xb + k_xqs + j * F::steps_per_sub * 4;
            if constexpr (k_vnni) {
                typename V::vi is[C];
                for (int c = 0; c < C; ++c) is[c] = V::zero();
#pragma GCC unroll 8
                for (int s = 0; s < F::steps_per_sub; ++s) {
                    const typename V::vi w = V::load(st + s * k_p * 4);
                    for (int c = 0; c < C; ++c) is[c] = V::dot4_bcast(is[c], w, xs + c * 256 + s * 4);
                }
                for (int c = 0; c < C; ++c) isum[c] = V::add(isum[c], V::mullo(is[c], scj));
            } else {
                // int16 pair sums over at most 8 (Q4_K), 4 (Q5_K) or 2 (Q6_K) steps, then
                // vpmaddwd by the (sc_j, sc_j) pairs.
                constexpr int run = F::five ? 4 : F::q4 ? 8 : 2;
                for (int s0 = 0; s0 < F::steps_per_sub; s0 += run) {
                    for (int c = 0; c < C; ++c) {
                        typename V::vi s16 = V::zero();
#pragma GCC unroll 8
                        for (int s = s0; s < s0 + run; ++s) {
                            s16 = V::add16(s16, V::maddubs(V::load(st + s * k_p * 4), V::bcast(quad(xs + c * 256 + s * 4))));
                        }
                        isum[c] = V::add(isum[c], V::madd16(s16, scj));
                    }
                }
            }
        }
        // The block-sum terms: sum over pair words i of pairs_i . (the column's word i).
        typename V::vi bterm[C];
        for (int c = 0; c < C; ++c) bterm[c] = V::zero();
        for (int i = 0; i < F::n_pairs; ++i) {
            const typename V::vi pw = V::load(pb + F::pairs + i * k_p * 4);
            for (int c = 0; c < C; ++c) bterm[c] = V::add(bterm[c], V::madd16(pw, V::bcast(quad(xb + k_xpairs + c * 32 + i * 4))));
        }
        const typename V::vf d = V::loadf(pb + F::d);
        for (int c = 0; c < C; ++c) {
            const typename V::vf dx = V::bcastf(scalar_f32(xb + k_xd + c * 4));
            if constexpr (F::q4) {
                const typename V::vf dmin = V::loadf(pb + F::dmin);
                acc[c] = V::fma(V::mul(d, dx), V::cvt(isum[c]), acc[c]);
                acc[c] = V::fma(V::neg(V::mul(dmin, dx)), V::cvt(bterm[c]), acc[c]);
            } else {
                acc[c] = V::fma(V::mul(d, dx), V::cvt(V::sub(isum[c], V::shl5(bterm[c]))), acc[c]);
            }
        }
    }
    for (int c = 0; c < C; ++c) V::storef(out + c * k_p, acc[c]);
}

template <int32_t T, int C = k_c>
void tile(int cols, const uint8_t * panel, int64_t n_super, const char * xt, float * out) {
    if constexpr (C > 1) {
        if (cols < C) return tile<T, C - 1>(cols, panel, n_super, xt, out);
    }
    micro_kernel<T, C>(panel, n_super, xt, out);
}

size_t xtile_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * k_xblock);
}

size_t panel_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * fmt<TSR_TYPE_Q6_K>::bytes); // the larger panel
}

struct scratch {
    char * cols;          // k_nq / k_c quantized micro-tiles
    uint8_t * panel;      // one packed panel
    block_q8_k * column;  // one quantized column
    float * xbuf;         // one gathered column
};

scratch carve(void * w, int64_t n_super) {
    scratch s{};
    char * p = static_cast<char *>(w);
    s.cols = p;
    p += (k_nq / k_c) * xtile_bytes(n_super);
    s.panel = reinterpret_cast<uint8_t *>(p);
    p += panel_bytes(n_super);
    s.column = reinterpret_cast<block_q8_k *>(p);
    p += align64(static_cast<size_t>(n_super) * k_q8_k_bytes);
    s.xbuf = reinterpret_cast<float *>(p);
    return s;
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    const int64_t n_super = d.K / k_qk_k;
    const size_t tile_bytes = xtile_bytes(n_super);
    const scratch sc = carve(p.wdata, n_super);
    const bool in_place = b_in_place(d);
    run_panel_gemm<k_p, k_c>(
        p, d, k_nq,
        [&](int64_t batch, int64_t n0, int64_t n1) {
            for (int64_t n = n0; n < n1; ++n) {
                quantize_q8_k_act(b_column(d, in_place, batch, n, sc.xbuf), n_super, sc.column);
                scatter_column<T>(sc.column, n_super, sc.cols + static_cast<size_t>((n - n0) / k_c) * tile_bytes,
                                  static_cast<int>((n - n0) % k_c));
            }
        },
        [&](const char * a, int64_t m0, int64_t rows) {
            if (is_repacked(d.a)) {
                pack_panel_repacked<T>(a, m0, n_super, sc.panel); // rows == k_p: M is whole groups
            } else {
                pack_panel<T>(a, d.a->nb[1], m0, rows, n_super, sc.panel);
            }
        },
        [&](int ncols, int64_t ti, float * out) { tile<T>(ncols, sc.panel, n_super, sc.cols + static_cast<size_t>(ti) * tile_bytes, out); });
}

} // namespace

size_t gemm_k_work_size(const mm_dims & d) {
    const int64_t n_super = d.K / k_qk_k;
    return (k_nq / k_c) * xtile_bytes(n_super) + panel_bytes(n_super) + align64(static_cast<size_t>(n_super) * k_q8_k_bytes) +
           align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool gemm_k(const compute_params & p, const mm_dims & d) {
    switch (d.a->type) {
    case TSR_TYPE_Q4_K: run<TSR_TYPE_Q4_K>(p, d); return true;
    case TSR_TYPE_Q5_K: run<TSR_TYPE_Q5_K>(p, d); return true;
    case TSR_TYPE_Q6_K: run<TSR_TYPE_Q6_K>(p, d); return true;
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t gemm_k_work_size(const mm_dims &) { return 0; }
bool gemm_k(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu
