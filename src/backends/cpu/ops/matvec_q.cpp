// backends/cpu/ops/matvec_q.cpp — MUL_MAT with Q8_0/Q4_0/Q5_0/Q5_1 weights and few
// columns (N < k_gemm_min_n), the token-generation case: each column is
// quantized to Q8_0 (q8_act.hpp), then the weights stream once through
// integer block dot products, eight rows at a time.
//
// Per block of 32 (block layouts in core/types.hpp):
//   Q4_0: the nibbles (0..15) as unsigned bytes times the activation quants
//         (vpmaddubsw + vpmaddwd, or vpdpbusd with VNNI), minus 8 * the
//         activation block's quant sum: the exact integer sum of
//         (nibble - 8) * q.
//   Q5_0: the same with the 5-bit quants q = w + 16 (0..31: the nibbles
//         with each row's fifth bits added as 0x10), minus 16 * the sum:
//         the exact sum of (q - 16) * x (vpmaddubsw pair sums
//         <= 2 * 31 * 127 fit int16).
//   Q5_1: the same 5-bit quants (x = d q + m) without the subtraction;
//         the offset is a second term float(sum) * (m_w * d_x) added after
//         the first.
//   Q8_0: with VNNI, (w + 128) as unsigned bytes times q minus 128 * sum;
//         without, |w| times q with w's sign (vpsignb), pairs summed by
//         vpmaddubsw (|w| <= 128, |q| <= 127: no saturation). Exact.
// Eight rows are processed together: their block sums are reduced into one
// vector (vphaddd), their scales fetched with one gather, and
// term = float(isum) * (d_w * d_x) is added with FMA to accumulator
// (block % 4) of each row; the result is (acc0 + acc1) + (acc2 + acc3),
// the order of vec_dot.hpp's dot_q8_0.
#include <algorithm>

#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/q8_act.hpp"
#include "backends/cpu/ops/simd.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

// Software prefetch of the weights (dot8): at least this many bytes ahead
// (whole groups of eight rows), into L1 while what is read ahead and the
// group being read take at most k_l1_ahead_bytes, else into L2.
constexpr size_t k_min_ahead_bytes = size_t{8} << 10;
constexpr size_t k_l1_ahead_bytes = size_t{16} << 10;
constexpr size_t k_act_block = 64; // bytes of one quantized activation block: [32 quants][d][sum], padded to a cache line

inline int32_t load_i32(const char * p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline float load_f32(const char * p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

size_t col_bytes_of(int64_t n_blocks) {
    return align64(static_cast<size_t>(n_blocks) * k_act_block);
}

template <int32_t T>
constexpr size_t block_bytes() {
    return q_block_bytes(T);
}

// Integer dot products of block b of row w with the activation quants xq
// (8 int32 lanes whose sum is the block's raw sum).
template <int32_t T>
inline __m256i block_dot(const char * w, int64_t b, __m256i xq) {
    if constexpr (T == TSR_TYPE_Q4_0) {
        const __m256i nib = simd::q4_nibbles(w + static_cast<size_t>(b) * k_q4_0_block_bytes + 2);
        return simd::dot4_u8s8(_mm256_setzero_si256(), nib, xq);
    } else {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + static_cast<size_t>(b) * k_q8_0_block_bytes + 2));
#ifdef TSR_CPU_VNNI256
        return simd::dot4_u8s8(_mm256_setzero_si256(), _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))), xq);
#else
        return simd::dot4_u8s8(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(xq, q));
#endif
    }
}

// How much of the activation sum the raw block sum carries (log2 of the
// unsigned offset of the weights), or -1 for none.
template <int32_t T>
constexpr int bias_shift() {
    if constexpr (T == TSR_TYPE_Q4_0) return 3; // nibble = (w + 8)
    if constexpr (T == TSR_TYPE_Q5_0) return 4; // q = (w + 16)
    if constexpr (T == TSR_TYPE_Q5_1) return -1; // x = d q + m: the m term is separate
#ifdef TSR_CPU_VNNI256
    return 7; // w + 128
#else
    return -1;
#endif
}

// Eight rows: row r at w0 + off[r] (byte offsets, int32).
struct rows8 {
    const char * w0;
    __m256i off;
    const char * w[8];
};

// The F16 scales of block b of the eight rows (Q5_1's m: at = 2), as F32
// (one gather of the 32-bit words starting at each; the low halves are the
// F16 values).
template <int32_t T>
inline __m256 scales8(const rows8 & r, int64_t b, size_t at = 0) {
    const __m256i g = _mm256_i32gather_epi32(reinterpret_cast<const int *>(r.w0 + static_cast<size_t>(b) * block_bytes<T>() + at), r.off, 1);
    const __m256i h = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xffff)), _mm256_setzero_si256());
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(h, 0x08)));
}

// Sum of the 8 int32 lanes of each of v[0..7]: lane r = total of v[r] (exact).
inline __m256i hsum8x8_epi32(const __m256i * v) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
    const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
    const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23); // [r0..r3 low halves | r0..r3 high halves]
    const __m256i c = _mm256_hadd_epi32(h45, h67); // the same for r4..r7
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, c, 0x20), _mm256_permute2x128_si256(a, c, 0x31));
}

// Q4_0, two rows (a, b) of block b0: int32 lanes 0..3 hold partial sums
// of row a, lanes 4..7 of row b. Both rows' 16 quant bytes share one
// vector, so one AND gives both rows' low nibbles (elements 0..15) and one
// shift + AND their high nibbles (elements 16..31), multiplied with the
// activation halves broadcast to both 128-bit lanes.
inline __m256i q4_pair(const char * wa, const char * wb, size_t off, __m256i xlo, __m256i xhi) {
    const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i *>(wa + off));
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), _mm_loadu_si128(reinterpret_cast<const __m128i *>(wb + off)), 1);
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(q, m);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
#if defined(TSR_CPU_VNNI256)
    return simd::dot4_u8s8(simd::dot4_u8s8(_mm256_setzero_si256(), lo, xlo), hi, xhi);
#else
    // pair sums <= 2 * 15 * 127; two of them still fit int16
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#endif
}

// Q5_0 (QH = 2: qh at block byte 2, qs at 6) or Q5_1 (QH = 4), two rows
// (a, b) of the block at byte offset off: as q4_pair, with each row's fifth
// bits (qh, bit j = element j) added as 0x10 to its bytes: bits 0..15 to
// the low nibbles (elements 0..15), bits 16..31 to the high ones. Pair
// sums <= 2 * 31 * 127, two of them still fit int16.
template <size_t QH>
inline __m256i q5_pair(const char * wa, const char * wb, size_t off, __m256i xlo, __m256i xhi) {
    const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i *>(wa + off + QH + 4));
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), _mm_loadu_si128(reinterpret_cast<const __m128i *>(wb + off + QH + 4)), 1);
    // Lane 0 starts with row a's qh, lane 1 with row b's.
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtsi32_si128(load_i32(wa + off + QH))),
                                              _mm_cvtsi32_si128(load_i32(wb + off + QH)), 1);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i five = _mm256_set1_epi8(0x10);
    // Byte j of a lane takes qh byte j / 8 (low half) or 2 + j / 8 (high
    // half) and keeps 0x10 where bit j % 8 is set.
    const __m256i h_lo = _mm256_shuffle_epi8(h, _mm256_setr_epi64x(0, 0x0101010101010101ll, 0, 0x0101010101010101ll));
    const __m256i h_hi = _mm256_shuffle_epi8(h, _mm256_setr_epi64x(0x0202020202020202ll, 0x0303030303030303ll,
                                                                    0x0202020202020202ll, 0x0303030303030303ll));
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m), _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h_lo, bit), bit), five));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m),
                                       _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h_hi, bit), bit), five));
#if defined(TSR_CPU_VNNI256)
    return simd::dot4_u8s8(simd::dot4_u8s8(_mm256_setzero_si256(), lo, xlo), hi, xhi);
#else
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#endif
}

// Q4_0, Q5_0 and Q5_1 take rows in pairs (q4_pair, q5_pair).
template <int32_t T>
constexpr bool paired() {
    return T == TSR_TYPE_Q4_0 || T == TSR_TYPE_Q5_0 || T == TSR_TYPE_Q5_1;
}

// One block of eight rows: term added to acc. For Q4_0 and Q5_0 the lanes
// hold the rows in the order of k_q4_lane_rows (rows8::off follows it).
template <int32_t T>
inline __m256 block8(const rows8 & r, int64_t b, const char * x, __m256 acc) {
    const char * xb = x + static_cast<size_t>(b) * k_act_block;
    __m256i s;
    if constexpr (paired<T>()) {
        const __m128i * xp = reinterpret_cast<const __m128i *>(xb);
        const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(xp));
        const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(xp + 1));
        const size_t off = static_cast<size_t>(b) * block_bytes<T>() + (T == TSR_TYPE_Q4_0 ? 2 : 0);
        constexpr auto pair = T == TSR_TYPE_Q4_0 ? q4_pair : T == TSR_TYPE_Q5_0 ? q5_pair<2> : q5_pair<4>;
        const __m256i p01 = pair(r.w[0], r.w[1], off, xlo, xhi);
        const __m256i p23 = pair(r.w[2], r.w[3], off, xlo, xhi);
        const __m256i p45 = pair(r.w[4], r.w[5], off, xlo, xhi);
        const __m256i p67 = pair(r.w[6], r.w[7], off, xlo, xhi);
        // [r0 r0 r2 r2 | r1 r1 r3 r3], then [r0 r2 r4 r6 | r1 r3 r5 r7]
        s = _mm256_hadd_epi32(_mm256_hadd_epi32(p01, p23), _mm256_hadd_epi32(p45, p67));
    } else {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb));
        __m256i v[8];
        for (int i = 0; i < 8; ++i) v[i] = block_dot<T>(r.w[i], b, xq);
        s = hsum8x8_epi32(v);
    }
    if constexpr (bias_shift<T>() >= 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(load_i32(xb + 36)));
    const __m256 dx = _mm256_set1_ps(load_f32(xb + 32));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(scales8<T>(r, b), dx), acc);
    if constexpr (T == TSR_TYPE_Q5_1) {
        const __m256 xsum = _mm256_set1_ps(static_cast<float>(load_i32(xb + 36)));
        acc = _mm256_fmadd_ps(xsum, _mm256_mul_ps(scales8<T>(r, b, 2), dx), acc);
    }
    return acc;
}

// Row held by each lane of a Q4_0/Q5_0/Q5_1 result (see q4_pair and block8).
constexpr int k_q4_lane_rows[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Lane r = row r . x. `next`: the first byte of a later group of eight
// rows (group_bytes long), read ahead while these are; to_l1: into L1.
template <int32_t T>
__m256 dot8(const rows8 & r, int64_t n_blocks, const char * x, const char * next, size_t group_bytes, bool to_l1) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t b = 0;
    // Software prefetch of the later group, front to back, an equal share
    // of whole lines each four blocks (the last share reaching the group's
    // end): the eight rows are eight streams, more than the hardware
    // prefetcher keeps ahead of, and a row's first lines would otherwise
    // come from memory while the kernel waits (reading ahead k_prefetch =
    // 768 bytes in each row left them to the hardware prefetcher: about
    // 0.2 of the read bandwidth on Zen 4, against 0.57 on Zen 5).
    const size_t n_steps = static_cast<size_t>(n_blocks / 4);
    const size_t share = n_steps == 0 ? 0 : (group_bytes / n_steps + 127) & ~size_t{63};
    for (; b + 4 <= n_blocks; b += 4) {
        const size_t ahead = static_cast<size_t>(b / 4) * share;
        for (size_t o = 0; o < share && ahead + o < group_bytes; o += 64) {
            if (to_l1) {
                _mm_prefetch(next + ahead + o, _MM_HINT_T0);
            } else {
                _mm_prefetch(next + ahead + o, _MM_HINT_T1);
            }
        }
        acc0 = block8<T>(r, b, x, acc0);
        acc1 = block8<T>(r, b + 1, x, acc1);
        acc2 = block8<T>(r, b + 2, x, acc2);
        acc3 = block8<T>(r, b + 3, x, acc3);
    }
    if (b < n_blocks) acc0 = block8<T>(r, b, x, acc0);
    if (b + 1 < n_blocks) acc1 = block8<T>(r, b + 1, x, acc1);
    if (b + 2 < n_blocks) acc2 = block8<T>(r, b + 2, x, acc2);
    return _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    const int64_t n_blocks = d.K / k_qblock;
    // Each column's blocks interleaved, [32 quants][scale][sum] (k_act_block bytes):
    // one pointer walks a column (the kernel is short of registers).
    const size_t col_bytes = col_bytes_of(n_blocks);
    char * base = static_cast<char *>(p.wdata);
    auto * xbuf = reinterpret_cast<float *>(base + k_gemm_min_n * col_bytes);
    q8_col cols[k_gemm_min_n];
    for (int64_t n = 0; n < k_gemm_min_n; ++n) {
        char * c = base + n * col_bytes;
        cols[n].qs = reinterpret_cast<int8_t *>(c);
        cols[n].d = reinterpret_cast<float *>(c + 32);
        cols[n].sum = reinterpret_cast<int32_t *>(c + 36);
        cols[n].qs_stride = cols[n].aux_stride = k_act_block;
    }

    const bool in_place = b_in_place(d);
    const int64_t n_groups = (d.M + 7) / 8;
    const int64_t n_items = d.n_batch * n_groups;
    work_queue queue(p, n_items, chunk_for_bytes(8 * static_cast<size_t>(d.a->nb[1]), n_items, p.nth));
    int64_t have_batch = -1;
    // The group read ahead (dot8): at least k_min_ahead_bytes on.
    const size_t group_bytes = 8 * static_cast<size_t>(d.a->nb[1]);
    const size_t groups_ahead = std::max<size_t>(1, (k_min_ahead_bytes + group_bytes - 1) / group_bytes);
    const bool to_l1 = (groups_ahead + 1) * group_bytes <= k_l1_ahead_bytes;
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const int64_t batch = it / n_groups;
            const int64_t m0 = (it % n_groups) * 8;
            if (batch != have_batch) {
                for (int64_t n = 0; n < d.N; ++n) quantize_q8_act(b_column(d, in_place, batch, n, xbuf), n_blocks, cols[n], std::max(bias_shift<T>(), 0));
                have_batch = batch;
            }
            rows8 r{};
            r.w0 = a_matrix(d, batch) + static_cast<size_t>(m0) * d.a->nb[1];
            alignas(32) int32_t off[8];
            for (int i = 0; i < 8; ++i) {
                const int64_t m = std::min<int64_t>(i, d.M - 1 - m0); // short last group: repeat the last row
                off[i] = static_cast<int32_t>(m * static_cast<int64_t>(d.a->nb[1]));
                r.w[i] = r.w0 + off[i];
            }
            alignas(32) int32_t lane_off[8];
            int lane_row[8];
            for (int l = 0; l < 8; ++l) {
                lane_row[l] = paired<T>() ? k_q4_lane_rows[l] : l;
                lane_off[l] = off[lane_row[l]];
            }
            r.off = _mm256_load_si256(reinterpret_cast<const __m256i *>(lane_off));
            for (int64_t n = 0; n < d.N; ++n) {
                alignas(32) float out[8];
                _mm256_store_ps(out, dot8<T>(r, n_blocks, reinterpret_cast<const char *>(cols[n].qs),
                                             r.w0 + groups_ahead * group_bytes, group_bytes, to_l1));
                float * y = dst_column(d, batch, n);
                for (int l = 0; l < 8; ++l) {
                    if (m0 + lane_row[l] < d.M) y[m0 + lane_row[l]] = out[l];
                }
            }
        }
    }
}

} // namespace

size_t matvec_q_work_size(const mm_dims & d) {
    return k_gemm_min_n * col_bytes_of(d.K / k_qblock) + align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool matvec_q(const compute_params & p, const mm_dims & d) {
    return for_q_type(d.a->type, false, [&](auto t) {
        run<decltype(t)::value>(p, d);
        return true;
    });
}

#else // portable build: the generic kernel is used instead

size_t matvec_q_work_size(const mm_dims &) { return 0; }
bool matvec_q(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu
