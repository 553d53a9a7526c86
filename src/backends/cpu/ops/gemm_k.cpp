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
// The columns are quantized once for all threads (gemm_k_prepare: each
// thread a share of the micro-tiles, into the node's shared scratch), and
// not again for the next product over the same activations (a layer's q
// and k, gate and up: mul_mat_same_prepared). Per thread instead, every
// thread quantized all of a 512-column prompt, and each product did it
// again: 9% of synth 1B Q4_K_M pp512 on 2 threads (AMX).
// AMX builds (TSR_CPU_AMX, where mul_mat_repack_uses_amx) compute the same
// integers on tiles, with the scales folded into the weights (namespace
// amx below).
#include <algorithm>
#include <array>
#include <stdexcept>

#include "backends/cpu/ops/amx_tiles.hpp"
#include "backends/cpu/ops/k_lanes.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
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
constexpr int64_t k_nq = 512; // most columns per work item (each packed panel meets all of them)

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

// Quantized activations of a micro-tile of KC columns, per super-block:
// [KC x 256 quants][KC x 8 int32 block-sum pair words][KC floats dx]
// (KC: k_c for the vector micro-kernel, 16 for the AMX one). Pair words of
// a column: q8_k_pair_words (k_lanes.hpp).
template <int KC>
struct xlayout {
    static constexpr size_t qs = 0;
    static constexpr size_t pairs = KC * 256;
    static constexpr size_t d = pairs + KC * 32;
    static constexpr size_t block = d + KC * 4;
};
constexpr size_t k_xqs = xlayout<k_c>::qs;
constexpr size_t k_xpairs = xlayout<k_c>::pairs;
constexpr size_t k_xd = xlayout<k_c>::d;
constexpr size_t k_xblock = xlayout<k_c>::block;

// Copies one quantized column into slot c of a micro-tile of KC columns
// (one xlayout<KC>::block per super-block).
// The pair words are those of weights of type t.
template <int KC>
void scatter_column(int32_t t_type, const block_q8_k * q, int64_t n_super, char * tile, int c) {
    using X = xlayout<KC>;
    for (int64_t b = 0; b < n_super; ++b) {
        char * t = tile + static_cast<size_t>(b) * X::block;
        std::memcpy(t + X::qs + c * 256, q[b].qs, 256);
        q8_k_pair_words(t_type, q[b], reinterpret_cast<int32_t *>(t + X::pairs + c * 32));
        std::memcpy(t + X::d + c * 4, &q[b].d, 4);
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

template <int KC = k_c>
size_t xtile_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * xlayout<KC>::block);
}

size_t panel_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * fmt<TSR_TYPE_Q6_K>::bytes); // the larger panel
}

#ifdef TSR_CPU_AMX

// --- AMX (Intel SDM vol. 1 ch. 18; TDPBSSD as in mul_mat_repack.cpp) ---
//
// The vector kernel multiplies each sub-block's dot by its scale sc_j; on
// tiles that would store every sub-block's C (1 KiB) to scale it, and a
// tile store costs about what a product does. Instead the scales go into
// the weights, in digits small enough for int8: sc_j = sum_i R^i dig_i(sc_j)
// and part i of a panel holds every quant w times dig_i of its sub-block's
// scale, so over a whole super-block
//   isum[row] = sum_j sc_j dot_j = sum_i R^i (part i . x),
// an integer identity, and each part . x is a run of TDPBSSDs with K = 64
// into one C tile: P tile stores per super-block instead of one per
// sub-block. Digits (|w dig| <= 127):
//   Q4_K  w in [0, 15], sc in [0, 63]: R = 8, digits [0, 7], P = 2;
//   Q5_K  w in [0, 31]: R = 4, digits [0, 3], P = 3;
//   Q6_K  w = q - 32 in [-32, 31], sc in [-128, 127]: balanced R = 7,
//         digits [-3, 3], P = 3 (7^2 * 3 + 7 * 3 + 3 = 171 >= 128); the
//         -32 is then inside isum, which is the vector kernel's
//         isum - 32 * (block-sum term), the same integer.
// (|part . x| <= 256 * 127 * 127 fits int32, as do the sums.) The
// remaining block-sum term (Q4_K/Q5_K mins) and the F32 steps are
// micro_kernel's, so the bits are the vector kernel's. Tiles: the parts
// are B (16 steps of 64 bytes per 64 k: the panel's step layout, dword r
// = row r), the activations of 16 columns (xlayout<16>, 256 bytes apart)
// A, and C row c = column c's 16 row sums.
//
// TDPBSSD's rate depends on the data on the Xeon this was written on
// (Emerald Rapids-class, 2 vCPUs): 12 TSC cycles per 16 x 16 x 64 product
// on zero tiles, 28 on random bytes, in a loop of this kernel's tile
// instructions alone. bench_ops BM_mul_mat_shape Q4_K 2048 x 2048 x 512,
// one thread, medians of 3-4 alternating processes in three sessions of a
// noisy host: 324-363 GFLOP/s on the vector kernel, 452-612 on this one
// (one tile store per sub-block instead measured 357 against 314).
namespace amx {

constexpr int k_cols = 16; // columns per tile
using X = xlayout<k_cols>;
using amx_tiles::tile_config;

// Digits of the scales (see above): P parts of radix R, balanced (digits
// in [-(R-1)/2, (R-1)/2], Q6_K: its quants taken as q - 32) or not.
template <int32_t T>
struct digits {
    static constexpr bool balanced = T == TSR_TYPE_Q6_K;
    static constexpr int R = T == TSR_TYPE_Q4_K ? 8 : T == TSR_TYPE_Q5_K ? 4 : 7;
    static constexpr int P = 3 - (T == TSR_TYPE_Q4_K ? 1 : 0);

    // Digit i of scale sc.
    static int of(int sc, int i) {
        for (int k = 0; k < i; ++k) sc = balanced ? (sc - low(sc)) / R : sc / R;
        return balanced ? low(sc) : sc % R;
    }
    // The balanced low digit of v: v mod R in [-(R-1)/2, (R-1)/2].
    static int low(int v) {
        const int m = ((v % R) + R) % R;
        return m > R / 2 ? m - R : m;
    }
    // Digit i of every scale (indexed by its low byte: Q6_K's int8 scales,
    // the others' 0..63) in both 16-bit halves of an int32, the multiplier
    // of make_parts.
    static const std::array<std::array<int32_t, P>, 256> & table() {
        static const auto t = [] {
            std::array<std::array<int32_t, P>, 256> r{};
            for (int v = 0; v < 256; ++v) {
                const int sc = balanced ? static_cast<int8_t>(v) : v;
                for (int i = 0; i < P; ++i) r[static_cast<size_t>(v)][static_cast<size_t>(i)] = static_cast<int32_t>(static_cast<uint32_t>(of(sc, i) & 0xffff) * 0x10001u);
            }
            return r;
        }();
        return t;
    }
    // v * R (Horner steps of the isum assembly).
    static __m512i times_r(__m512i v) {
        if constexpr (R == 7) return _mm512_sub_epi32(_mm512_slli_epi32(v, 3), v);
        return _mm512_slli_epi32(v, R == 8 ? 3 : 2);
    }
};

// Bytes of one super-block's parts.
template <int32_t T>
constexpr size_t parts_bytes() {
    return static_cast<size_t>(digits<T>::P) * 64 * k_p * 4;
}

// Tiles: A in tmm0; B in tmm1 (one part at a time); the P C tiles of even
// super-blocks in tmm2.., of odd ones in tmm(2 + P).., so that a
// super-block's products run while the last one's C is scaled.
template <int32_t T>
tile_config make_config() {
    tile_config c;
    c.rows[0] = 16;
    c.colsb[0] = 64;
    c.rows[1] = 16;
    c.colsb[1] = 64;
    for (int t = 2; t < 2 + 2 * digits<T>::P; ++t) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    return c;
}

// Whether the GEMM's tiles go to kernel (gemm_k runs for N >=
// k_gemm_min_n only): as for the Q8_0/Q4_0 tiles, the build, the OS grant
// and tuning().amx.
bool use() {
    return mul_mat_repack_uses_amx();
}

// The parts of a packed panel (pack_panel, pack_panel_repacked): per
// super-block P x 64 steps x [16 rows][4 bytes], part i's step s = the
// panel's step s (Q6_K: minus 32) times dig_i of its sub-block's scale in
// each row, bytewise through 16-bit products.
template <int32_t T>
void make_parts(const uint8_t * panel, int64_t n_super, int8_t * parts) {
    using F = fmt<T>;
    using D = digits<T>;
    const __m512i low = _mm512_set1_epi16(0x00ff);
    const auto & table = D::table(); // once, not behind its guard per row
    for (int64_t b = 0; b < n_super; ++b) {
        const uint8_t * pb = panel + static_cast<size_t>(b) * F::bytes;
        int8_t * out = parts + static_cast<size_t>(b) * parts_bytes<T>();
        const auto * sc = reinterpret_cast<const int32_t *>(pb + F::scales); // [n_sub][k_p], k_vnni: the scales
        for (int j = 0; j < F::n_sub; ++j) {
            for (int i = 0; i < D::P; ++i) {
                alignas(64) int32_t dig[k_p];
                for (int r = 0; r < k_p; ++r) dig[r] = table[static_cast<uint8_t>(sc[j * k_p + r])][i];
                const __m512i dig16 = _mm512_load_si512(dig);
                for (int s = F::steps_per_sub * j; s < F::steps_per_sub * (j + 1); ++s) {
                    __m512i q = _mm512_load_si512(pb + F::steps + s * k_p * 4);
                    __m512i even, odd;
                    if constexpr (D::balanced) { // signed q - 32
                        q = _mm512_sub_epi8(q, _mm512_set1_epi8(32));
                        even = _mm512_srai_epi16(_mm512_slli_epi16(q, 8), 8);
                        odd = _mm512_srai_epi16(q, 8);
                    } else {
                        even = _mm512_and_si512(q, low);
                        odd = _mm512_srli_epi16(q, 8);
                    }
                    even = _mm512_mullo_epi16(even, dig16);
                    odd = _mm512_mullo_epi16(odd, dig16);
                    _mm512_store_si512(out + (i * 64 + s) * k_p * 4, _mm512_or_si512(_mm512_and_si512(even, low), _mm512_slli_epi16(odd, 8)));
                }
            }
        }
    }
}

// The products of super-block b (parts at pt, activations at xq) into C
// set `set` (tile numbers are immediates: the cases; set and P are
// constants where this is inlined), and that set to c.
template <int P>
inline void products(int set, const int8_t * pt, const char * xq) {
    const int base = 2 + set * P;
    for (int i = 0; i < P; ++i) {
        switch (base + i) {
        case 2: _tile_zero(2); break;
        case 3: _tile_zero(3); break;
        case 4: _tile_zero(4); break;
        case 5: _tile_zero(5); break;
        case 6: _tile_zero(6); break;
        default: _tile_zero(7); break;
        }
    }
    for (int q = 0; q < 4; ++q) {
        _tile_loadd(0, xq + 64 * q, 256);
        for (int i = 0; i < P; ++i) {
            _tile_loadd(1, pt + (i * 64 + 16 * q) * k_p * 4, 64);
            switch (base + i) {
            case 2: _tile_dpbssd(2, 0, 1); break;
            case 3: _tile_dpbssd(3, 0, 1); break;
            case 4: _tile_dpbssd(4, 0, 1); break;
            case 5: _tile_dpbssd(5, 0, 1); break;
            case 6: _tile_dpbssd(6, 0, 1); break;
            default: _tile_dpbssd(7, 0, 1); break;
            }
        }
    }
}
template <int P>
inline void store(int set, int32_t * c) {
    const int base = 2 + set * P;
    for (int i = 0; i < P; ++i) {
        int32_t * o = c + i * k_cols * 16;
        switch (base + i) {
        case 2: _tile_stored(2, o, 64); break;
        case 3: _tile_stored(3, o, 64); break;
        case 4: _tile_stored(4, o, 64); break;
        case 5: _tile_stored(5, o, 64); break;
        case 6: _tile_stored(6, o, 64); break;
        default: _tile_stored(7, o, 64); break;
        }
    }
}

// out[c * 16 + r] = panel row r . column c of the 16-column tile at xt
// (parts: make_parts of the panel), with micro_kernel's integers and F32
// steps. The tile configuration must be loaded (make_config<T>).
template <int32_t T>
__attribute__((optimize("no-tree-reassoc"))) void kernel(const uint8_t * panel, const int8_t * parts, int64_t n_super, const char * xt,
                                                         float * out) {
    using F = fmt<T>;
    using V = lanes;
    using D = digits<T>;
    static_assert(V::n == k_cols && k_p == 16, "a C row is one vector of the panel's 16 rows");
    alignas(64) int32_t cbuf[D::P][k_cols * 16];
    #pragma GCC unroll 16
    for (int c = 0; c < k_cols; ++c) V::storef(out + c * 16, V::zerof());
    const auto pt = [&](int64_t b) { return parts + static_cast<size_t>(b) * parts_bytes<T>(); };
    const auto xq = [&](int64_t b) { return xt + static_cast<size_t>(b) * X::block + X::qs; };
    // Super-block b's stored parts . x (cbuf) into its F32 steps.
    const auto finish = [&](int64_t b) __attribute__((always_inline)) {
        const uint8_t * pb = panel + static_cast<size_t>(b) * F::bytes;
        const char * xb = xt + static_cast<size_t>(b) * X::block;
        V::vi pw[F::q4 ? F::n_pairs : 1] = {};
        V::vf dmin = V::zerof();
        if constexpr (F::q4) {
            #pragma GCC unroll 8
            for (int i = 0; i < F::n_pairs; ++i) pw[i] = V::load(pb + F::pairs + i * k_p * 4);
            dmin = V::loadf(pb + F::dmin);
        }
        const V::vf d = V::loadf(pb + F::d);
        #pragma GCC unroll 16
        for (int col = 0; col < k_cols; ++col) {
            V::vi isum = V::load(cbuf[D::P - 1] + col * 16);
            #pragma GCC unroll 4
            for (int i = D::P - 2; i >= 0; --i) isum = V::add(D::times_r(isum), V::load(cbuf[i] + col * 16));
            const V::vf dx = V::bcastf(scalar_f32(xb + X::d + col * 4));
            V::vf acc = V::loadf(out + col * 16);
            acc = V::fma(V::mul(d, dx), V::cvt(isum), acc); // Q6_K: isum is the vector kernel's isum - 32 bterm
            if constexpr (F::q4) {
                V::vi bterm = V::zero();
                #pragma GCC unroll 8
                for (int i = 0; i < F::n_pairs; ++i) bterm = _mm512_dpwssd_epi32(bterm, pw[i], V::bcast(quad(xb + X::pairs + col * 32 + i * 4)));
                acc = V::fma(V::neg(V::mul(dmin, dx)), V::cvt(bterm), acc);
            }
            V::storef(out + col * 16, acc);
        }
    };
    // Super-block b's products go to set b % 2 while b - 1's are stored
    // and scaled.
    for (int64_t b0 = 0; b0 < n_super; b0 += 2) {
        #pragma GCC unroll 2
        for (int set = 0; set < 2; ++set) {
            const int64_t b = b0 + set;
            if (b >= n_super) break;
            if (b > 0) store<D::P>(1 - set, cbuf[0]);
            products<D::P>(set, pt(b), xq(b));
            if (b > 0) finish(b - 1);
        }
    }
    if (n_super > 0) {
        store<D::P>(static_cast<int>((n_super - 1) % 2), cbuf[0]);
        finish(n_super - 1);
    }
}

} // namespace amx

#endif // TSR_CPU_AMX

// Columns per micro-tile of the quantized activations: 16 where this
// process uses the AMX kernel, else k_c.
int cols_per_tile() {
#ifdef TSR_CPU_AMX
    if (amx::use()) return amx::k_cols;
#endif
    return k_c;
}

// Bytes of one micro-tile of quantized columns (cols_per_tile wide).
size_t tile_bytes_of(int64_t n_super) {
    return cols_per_tile() == k_c ? xtile_bytes<k_c>(n_super) : xtile_bytes<16>(n_super);
}

// Micro-tiles per batch of b.
int64_t tiles_per_batch(const mm_dims & d) {
    return (d.N + cols_per_tile() - 1) / cols_per_tile();
}

// Bytes of a panel's AMX parts (amx::make_parts) where this process uses
// the AMX kernel, else 0.
size_t parts_bytes_of(int64_t n_super) {
#ifdef TSR_CPU_AMX
    if (amx::use()) return static_cast<size_t>(n_super) * std::max(amx::parts_bytes<TSR_TYPE_Q4_K>(), amx::parts_bytes<TSR_TYPE_Q6_K>());
#endif
    (void)n_super;
    return 0;
}

// Per-thread scratch (gemm_k_work_size): the parts last, so that without
// AMX the work size leaves them out.
struct scratch {
    uint8_t * panel;      // one packed panel
    block_q8_k * column;  // one quantized column
    float * xbuf;         // one gathered column (K floats)
    int8_t * parts;       // the panel's AMX parts (parts_bytes_of)
};

scratch carve(void * w, int64_t n_super) {
    scratch s{};
    char * p = static_cast<char *>(w);
    s.panel = reinterpret_cast<uint8_t *>(p);
    p += panel_bytes(n_super);
    s.column = reinterpret_cast<block_q8_k *>(p);
    p += align64(static_cast<size_t>(n_super) * k_q8_k_bytes);
    s.xbuf = reinterpret_cast<float *>(p);
    p += align64(static_cast<size_t>(n_super * k_qk_k) * sizeof(float));
    s.parts = reinterpret_cast<int8_t *>(p);
    return s;
}

// Quantizes this thread's share of b's micro-tiles of KC columns into the
// shared scratch (for_each_shared_tile), pair words for weights of type
// t_type.
template <int KC>
void prepare_tiles(const compute_params & p, const mm_dims & d, int32_t t_type) {
    const int64_t n_super = d.K / k_qk_k;
    const scratch sc = carve(p.wdata, n_super);
    const bool in_place = b_in_place(d);
    for_each_shared_tile(p, d, KC, xtile_bytes<KC>(n_super), [&](int64_t batch, int64_t n0, int64_t n1, char * tile) {
        for (int64_t n = n0; n < n1; ++n) {
            quantize_q8_k_act(b_column(d, in_place, batch, n, sc.xbuf), n_super, sc.column);
            scatter_column<KC>(t_type, sc.column, n_super, tile, static_cast<int>(n - n0));
        }
    });
}

// The panel GEMM with micro-tiles of KC columns, from the tiles
// prepare_tiles<KC> left in the shared scratch (shared_tiles): tile(ncols, sc, xt, out)
// computes one from the packed panel in sc (KC = k_c: the vector
// micro-kernel; 16: the AMX kernel); after_pack(sc) runs once per packed
// panel.
template <int32_t T, int KC, class AfterPack, class Tile>
void run_tiles(const compute_params & p, const mm_dims & d, const AfterPack & after_pack, const Tile & tile) {
    const int64_t n_super = d.K / k_qk_k;
    const size_t tile_bytes = xtile_bytes<KC>(n_super);
    const scratch sc = carve(p.wdata, n_super);
    const char * block = nullptr; // the first tile of the item's column block
    run_panel_gemm<k_p, KC>(
        p, d, k_nq, [&](int64_t batch, int64_t n0, int64_t) { block = shared_tiles(p, d, KC, tile_bytes, batch, n0); },
        [&](const char * a, int64_t m0, int64_t rows) {
            if (is_repacked(d.a)) {
                pack_panel_repacked<T>(a, m0, n_super, sc.panel); // rows == k_p: M is whole groups
            } else {
                pack_panel<T>(a, d.a->nb[1], m0, rows, n_super, sc.panel);
            }
            after_pack(sc, n_super);
        },
        [&](int ncols, int64_t ti, float * out) { tile(ncols, sc, n_super, block + static_cast<size_t>(ti) * tile_bytes, out); });
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
#ifdef TSR_CPU_AMX
    if (amx::use()) {
        static const amx::tile_config config = amx::make_config<T>();
        _tile_loadconfig(&config);
        run_tiles<T, amx::k_cols>(
            p, d, [](const scratch & sc, int64_t n_super) { amx::make_parts<T>(sc.panel, n_super, sc.parts); },
            [](int, const scratch & sc, int64_t n_super, const char * xt, float * out) {
                amx::kernel<T>(sc.panel, sc.parts, n_super, xt, out);
            });
        _tile_release(); // back to the init state: no tile data for the OS to save
        return;
    }
#endif
    run_tiles<T, k_c>(
        p, d, [](const scratch &, int64_t) {},
        [](int ncols, const scratch & sc, int64_t n_super, const char * xt, float * out) { tile<T>(ncols, sc.panel, n_super, xt, out); });
}

} // namespace

size_t gemm_k_work_size(const mm_dims & d) {
    const int64_t n_super = d.K / k_qk_k;
    return panel_bytes(n_super) + align64(static_cast<size_t>(n_super) * k_q8_k_bytes) +
           align64(static_cast<size_t>(d.K) * sizeof(float)) + parts_bytes_of(n_super);
}

size_t gemm_k_shared_size(const mm_dims & d) {
    size_t bytes = 0;
    const auto tiles = static_cast<size_t>(d.n_batch * tiles_per_batch(d));
    if (__builtin_mul_overflow(tiles, tile_bytes_of(d.K / k_qk_k), &bytes)) {
        throw std::length_error("gemm_k: quantized activations exceed the address space");
    }
    return bytes;
}

// The type whose block-sum pair words the columns carry for weights of
// type t: t's own for the vector kernel; on AMX always Q4_K's (Q4_K and
// Q5_K read them, Q6_K's tiles need no block-sum term), so that one
// quantization serves a layer's Q4_K and Q6_K products alike.
int32_t pairs_type(int32_t t) {
    return cols_per_tile() == k_c ? t : TSR_TYPE_Q4_K;
}

int gemm_k_prepared_layout(const mm_dims & d) {
    return 2 * cols_per_tile() + (has_k_mins(pairs_type(d.a->type)) ? 0 : 1);
}

bool gemm_k_prepare(const compute_params & p, const mm_dims & d) {
    if (!is_k_quant(d.a->type)) return false;
    if (cols_per_tile() == k_c) {
        prepare_tiles<k_c>(p, d, pairs_type(d.a->type));
    } else {
        prepare_tiles<16>(p, d, pairs_type(d.a->type));
    }
    return true;
}

bool gemm_k(const compute_params & p, const mm_dims & d) {
    if (p.shared == nullptr || p.shared_size < gemm_k_shared_size(d)) return false; // gemm_k_prepare's tiles missing
    switch (d.a->type) {
    case TSR_TYPE_Q4_K: run<TSR_TYPE_Q4_K>(p, d); return true;
    case TSR_TYPE_Q5_K: run<TSR_TYPE_Q5_K>(p, d); return true;
    case TSR_TYPE_Q6_K: run<TSR_TYPE_Q6_K>(p, d); return true;
    default: return false;
    }
}

#else // portable build: the generic kernel is used instead

size_t gemm_k_work_size(const mm_dims &) { return 0; }
size_t gemm_k_shared_size(const mm_dims &) { return 0; }
int gemm_k_prepared_layout(const mm_dims &) { return 0; }
bool gemm_k_prepare(const compute_params &, const mm_dims &) { return false; }
bool gemm_k(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu
