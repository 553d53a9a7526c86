// backends/cpu/ops/mul_mat_k_repack.cpp — MUL_MAT with repacked Q4_K, Q5_K
// and Q6_K weights (groups of G interleaved rows, one per int32 lane:
// repack.hpp) and N < k_gemm_min_n columns: token generation. (More columns: gemm_k.cpp,
// which unpacks its panels from the same groups.)
//
// Each thread streams whole groups, front to back; the G rows of a group
// sit in the G int32 lanes of one vector (k_lanes.hpp), so nothing is
// reduced across lanes. P: the stream is prefetched `pf` bytes ahead (into L1 or L2),
// each super-block's lines spread over its loop (tuning.hpp: on Intel; on
// Zen 4 the hardware prefetcher alone read faster, BM_mul_mat_repack one
// column, medians of 5 interleaved runs, GFLOP/s with 4096 bytes ahead ->
// none: Q4_K 2048 x 5632 68.2 -> 83.4 on 1 thread and 104.7 -> 111.6 on 2,
// Q6_K 5632 x 2048 49.1 -> 54.8 and 63.2 -> 69.3, Q5_K 67.3 -> 68.7 and
// 89.8 -> 94.1).
//
// Per super-block of a Q4_K group (Q6_K: see
// q6_k_group_dot):
//   scales   the 12 G scale bytes (three vectors: bytes 0..3, 4..7, 8..11
//            of every row) unpack with the Q4_K bit operations
//            (vec_dot_k.hpp) into sc[j][r] and m[j][r], j = 0..7
//   dots     step j of the group (4 qs bytes of each row): its low nibbles
//            times the four activation quants 64 (j/8) + 4 (j%8) + 0..3
//            broadcast to every lane, its high nibbles times those + 32;
//            with VNNI vpdpbusd into int32 per sub-block, then times sc_j
//            (vpmulld); without, vpmaddubsw pair sums (at most 8 steps of
//            2 * 15 * 127: no int16 overflow) then vpmaddwd by (sc_j, sc_j)
//            (Q5_K: the fifth bits of the step's qh unit joined to the
//            nibbles as bit 4, runs of 4 steps without VNNI)
//   mins     msum = sum_j m_j * (block sum of sub-block j), as int16
//            pairs (m_2i, m_2i+1) times the column's pairs (vpmaddwd)
//   F32      acc = fma(d dx, isum, acc); acc = fma(-(dmin dx), msum, acc)
// These are the integers and F32 steps of vec_dot_k.hpp, per lane, so a
// product has the bits of the plain-row kernels (mul_mat_k.cpp, the
// portable one) and of the GEMM, on any number of threads.
#include <algorithm>

#include "backends/cpu/ops/k_lanes.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/repack.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "backends/cpu/ops/vec_dot_k.hpp"

namespace tessera::cpu {

#ifdef TSR_CPU_AVX2

namespace {

using V = lanes;
constexpr auto G = static_cast<size_t>(V::n); // rows per group: repack_group_rows(TSR_TYPE_Q4_K)
constexpr int k_cols = static_cast<int>(k_gemm_min_n) - 1;  // columns of this path
#ifdef TSR_CPU_VNNI256
constexpr bool k_vnni = true;
#else
constexpr bool k_vnni = false;
#endif

// A quantized column: the Q8_K blocks, then per super-block the eight
// pair words of q8_k_pair_words (k_lanes.hpp).
struct column {
    const block_q8_k * q;
    const int32_t * pairs;
};

size_t col_bytes(int64_t n_super) {
    return align64(static_cast<size_t>(n_super) * (k_q8_k_bytes + 8 * sizeof(int32_t)));
}

// Where a column's pair words start after its Q8_K blocks.
size_t pairs_offset(int64_t n_super) {
    return static_cast<size_t>(n_super) * k_q8_k_bytes;
}

// The column a quantize_column call stored at `mem`.
column column_at(const char * mem, int64_t n_super) {
    return {reinterpret_cast<const block_q8_k *>(mem), reinterpret_cast<const int32_t *>(mem + pairs_offset(n_super))};
}

// Quantizes column x (K floats) for weights of type T into `mem`.
template <int32_t T>
column quantize_column(const float * x, int64_t n_super, char * mem) {
    auto * q = reinterpret_cast<block_q8_k *>(mem);
    auto * pairs = reinterpret_cast<int32_t *>(mem + pairs_offset(n_super));
    quantize_q8_k_act(x, n_super, q);
    for (int64_t b = 0; b < n_super; ++b) q8_k_pair_words(T, q[b], pairs + 8 * b);
    return {q, pairs};
}

// Software prefetch (as P says) of part i of n of a group's super-block
// (`bytes` long, at blk), pf bytes ahead: spread over a block's loop rather
// than issued in one burst at its start.
template <stream_pf P>
inline void prefetch_part(const char * blk, size_t bytes, int i, int n, size_t pf) {
    const size_t lines = (bytes + 63) / 64;
    const size_t l0 = lines * static_cast<size_t>(i) / static_cast<size_t>(n), l1 = lines * static_cast<size_t>(i + 1) / static_cast<size_t>(n);
    for (size_t l = l0; l < l1; ++l) prefetch_line<P>(blk + pf + 64 * l);
}

// Per lane, the int16 pair (a, b) of two int32 lanes holding int16 values.
inline V::vi pairs16(V::vi a, V::vi b) {
    return V::or_(V::and_(a, V::bcast(0xffff)), V::slli32(b, 16));
}

// acc + the products of the four unsigned quant bytes of each lane of w
// with the four activation quants at x4: with VNNI exact int32 sums
// (vpdpbusd); without, int16 pair sums (vpmaddubsw), exact while a lane's
// pairs add up to at most 2^15 - 1 over the steps summed (8 steps of
// nibbles: 8 * 2 * 15 * 127; 2 steps of 6-bit quants: 2 * 2 * 63 * 127).
inline V::vi step4(V::vi acc, V::vi w, const char * x4) {
    if constexpr (k_vnni) {
        return V::dot4_bcast(acc, w, x4);
    } else {
        return V::add16(acc, V::maddubs(w, V::bcast(quad(x4))));
    }
}

// A sub-block's step4 sums times its scales sc (int32 lanes holding int8
// or uint8 values), as int32: vpmulld, or vpmaddwd by (sc, sc).
inline V::vi scaled(V::vi acc, V::vi sc) {
    if constexpr (k_vnni) {
        return V::mullo(acc, sc);
    } else {
        return V::madd16(acc, pairs16(sc, sc));
    }
}

// out[c][0..G) = the G rows of Q4_K (Five: Q5_K) group `grp` (n_super
// super-blocks) . column c; P: prefetch pf bytes ahead (or not).
template <int C, bool Five, stream_pf P>
__attribute__((optimize("no-tree-reassoc"))) void q4_k_group_dot(const char * grp, const column * x, int64_t n_super, float * const * out,
                                                                 [[maybe_unused]] size_t pf) {
    constexpr size_t group_block = k_block_bytes(Five ? TSR_TYPE_Q5_K : TSR_TYPE_Q4_K) * G;
    // Without VNNI, int16 pair sums over at most 8 steps of nibbles (8 * 2 *
    // 15 * 127) or 4 of 5-bit quants (4 * 2 * 31 * 127) before widening.
    constexpr int run = k_vnni ? 8 : Five ? 4 : 8;
    const V::vi nib = V::bcast8(0x0f), six = V::bcast8(0x3f), top = V::bcast8(0x30);
    V::vf acc[C];
    for (int c = 0; c < C; ++c) acc[c] = V::zerof();
    for (int64_t b = 0; b < n_super; ++b) {
        const char * blk = grp + static_cast<size_t>(b) * group_block;
        // sc[j * G + r], m[j * G + r]: the bit layout of unpack_q4_k_scales
        // on bytes 0..3 (A), 4..7 (B) and 8..11 (C8) of every row at once.
        alignas(64) uint8_t sc[8 * G], m[8 * G];
        const V::vi A = V::loadu(blk + 4 * G), B = V::loadu(blk + 8 * G), C8 = V::loadu(blk + 12 * G);
        V::storeu(sc, V::and_(A, six));
        V::storeu(sc + 4 * G, V::or_(V::and_(C8, nib), V::and_(V::srli16(A, 2), top)));
        V::storeu(m, V::and_(B, six));
        V::storeu(m + 4 * G, V::or_(V::and_(V::srli16(C8, 4), nib), V::and_(V::srli16(B, 2), top)));

        V::vi isum[C];
        for (int c = 0; c < C; ++c) isum[c] = V::zero();
        const char * steps = blk + (Five ? 48 : 16) * G;
        const char * qh = blk + 16 * G; // Q5_K: qh step s at qh + 4 G s
#pragma GCC unroll 1
        for (int h = 0; h < 4; ++h) { // sub-blocks 2h (low nibbles) and 2h + 1 (high)
            if constexpr (P != stream_pf::none) prefetch_part<P>(blk, group_block, h, 4, pf);
            const V::vi sc_lo = V::u8_to_i32(sc + 2 * h * G), sc_hi = V::u8_to_i32(sc + (2 * h + 1) * G);
            V::vi lo[C], hi[C];
            for (int c = 0; c < C; ++c) lo[c] = hi[c] = V::zero();
#pragma GCC unroll 8
            for (int s = 0; s < 8; ++s) {
                const V::vi w = V::loadu(steps + 4 * G * (8 * h + s));
                V::vi wl = V::and_(w, nib), wh = V::and_(V::srli16(w, 4), nib);
                if constexpr (Five) {
                    const V::vi hb = V::loadu(qh + 4 * G * s);
                    wl = V::or_(wl, q5_k_fifth_lanes(hb, 2 * h));
                    wh = V::or_(wh, q5_k_fifth_lanes(hb, 2 * h + 1));
                }
                for (int c = 0; c < C; ++c) {
                    const char * xq = reinterpret_cast<const char *>(x[c].q[b].qs) + 64 * h + 4 * s;
                    lo[c] = step4(lo[c], wl, xq);
                    hi[c] = step4(hi[c], wh, xq + 32);
                }
                if (s % run == run - 1) { // widen (exact integers: the same sums whatever the run)
                    for (int c = 0; c < C; ++c) {
                        isum[c] = V::add(isum[c], V::add(scaled(lo[c], sc_lo), scaled(hi[c], sc_hi)));
                        lo[c] = hi[c] = V::zero();
                    }
                }
            }
        }
        // msum: int16 pairs (m_2i, m_2i+1) of every row against the column's pair words.
        V::vi mpair[4];
        for (int i = 0; i < 4; ++i) mpair[i] = pairs16(V::u8_to_i32(m + 2 * i * G), V::u8_to_i32(m + (2 * i + 1) * G));
        const V::vf d = V::load_f16(blk), dmin = V::load_f16(blk + 2 * G);
        for (int c = 0; c < C; ++c) {
            const int32_t * pw = x[c].pairs + 8 * b;
            V::vi msum = V::madd16(mpair[0], V::bcast(pw[0]));
            for (int i = 1; i < 4; ++i) msum = V::add(msum, V::madd16(mpair[i], V::bcast(pw[i])));
            const V::vf dx = V::bcastf(x[c].q[b].d);
            acc[c] = V::fma(V::mul(d, dx), V::cvt(isum[c]), acc[c]);
            acc[c] = V::fma(V::neg(V::mul(dmin, dx)), V::cvt(msum), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) V::storeuf(out[c], acc[c]);
}

// The same for a Q6_K group (its units in first-read order,
// q6_k_group_block): quarter qq (0..3) of half h holds elements
// 128 h + 32 qq + 0..31; its step s (0..7) is built from ql step
// 16 h + 8 (qq % 2) + s (low nibbles for qq < 2, high ones else) and
// qh step 8 h + s (bits 2 qq, 2 qq + 1), and belongs to sub-block
// 8 h + 2 qq + s / 4. isum = sum_j sc_j (dot_j - 32 bsum_j) as in
// vec_dot_k.hpp: the dots per sub-block (vpdpbusd into int32, or
// vpmaddubsw over 2 steps, 2 * 2 * 63 * 127 < 2^15, then vpmaddwd by
// (sc_j, sc_j)), the offset as int16 pairs (sc_2i, sc_2i+1) times the
// column's (bsum_2i, bsum_2i+1).
template <int C, stream_pf P>
__attribute__((optimize("no-tree-reassoc"))) void q6_k_group_dot(const char * grp, const column * x, int64_t n_super, float * const * out,
                                                                 [[maybe_unused]] size_t pf) {
    const V::vi m4 = V::bcast8(0x0f), m2 = V::bcast8(0x30);
    V::vf acc[C];
    for (int c = 0; c < C; ++c) acc[c] = V::zerof();
    for (int64_t b = 0; b < n_super; ++b) {
        const q6_k_group_block B(grp, b);
        V::vi isum[C];
        for (int c = 0; c < C; ++c) isum[c] = V::zero();
#pragma GCC unroll 1
        for (int h = 0; h < 2; ++h) {
            // Step s (0..7) of the four quarters at once: ql steps 16h + s
            // (quarters 0, 2: low and high nibbles) and 16h + 8 + s
            // (quarters 1, 3) and qh step 8h + s (bits 2qq, 2qq + 1) are
            // loaded once. Quarter qq's step s belongs to sub-block
            // 8h + 2qq + s / 4, whose dot is dot[qq][c].
            V::vi dot[4][C];
            for (int qq = 0; qq < 4; ++qq) {
                for (int c = 0; c < C; ++c) dot[qq][c] = V::zero();
            }
            V::vi scj[4]; // the scales of the quarters' current sub-blocks
#pragma GCC unroll 8
            for (int s = 0; s < 8; ++s) {
                if constexpr (P != stream_pf::none) {
                    if (s % 2 == 0) prefetch_part<P>(B.blk, 210 * G, 4 * h + s / 2, 8, pf);
                }
                if (s % 4 == 0) { // the half's scales come first in the stream
                    for (int qq = 0; qq < 4; ++qq) scj[qq] = V::i8_to_i32(B.scale(8 * h + 2 * qq + s / 4));
                }
                const V::vi l0 = V::loadu(B.ql(16 * h + s)), l1 = V::loadu(B.ql(16 * h + 8 + s));
                const V::vi hb = V::loadu(B.qh(8 * h + s));
                const V::vi w[4] = {
                    V::or_(V::and_(l0, m4), V::and_(V::slli16(hb, 4), m2)),
                    V::or_(V::and_(l1, m4), V::and_(V::slli16(hb, 2), m2)),
                    V::or_(V::and_(V::srli16(l0, 4), m4), V::and_(hb, m2)),
                    V::or_(V::and_(V::srli16(l1, 4), m4), V::and_(V::srli16(hb, 2), m2)),
                };
                for (int qq = 0; qq < 4; ++qq) {
                    for (int c = 0; c < C; ++c) {
                        dot[qq][c] = step4(dot[qq][c], w[qq], reinterpret_cast<const char *>(x[c].q[b].qs) + 128 * h + 32 * qq + 4 * s);
                    }
                }
                // Fold into isum at the end of a sub-block (s = 3, 7), and
                // without VNNI every 2 steps (int16 sums of 6-bit quants:
                // 2 * 2 * 63 * 127 < 2^15).
                if (s % 4 == 3 || (!k_vnni && s % 2 == 1)) {
                    for (int qq = 0; qq < 4; ++qq) {
                        for (int c = 0; c < C; ++c) {
                            isum[c] = V::add(isum[c], scaled(dot[qq][c], scj[qq]));
                            dot[qq][c] = V::zero();
                        }
                    }
                }
            }
        }
        // minus 32 sum_j sc_j bsum_j: int16 pairs (sc_2i, sc_2i+1) of every row
        V::vi spair[8];
        for (int i = 0; i < 8; ++i) {
            spair[i] = pairs16(V::i8_to_i32(B.scale(2 * i)), V::i8_to_i32(B.scale(2 * i + 1)));
        }
        const V::vf d = V::load_f16(B.d());
        for (int c = 0; c < C; ++c) {
            const int32_t * pw = x[c].pairs + 8 * b;
            V::vi off = V::madd16(spair[0], V::bcast(pw[0]));
            for (int i = 1; i < 8; ++i) off = V::add(off, V::madd16(spair[i], V::bcast(pw[i])));
            const V::vf dx = V::bcastf(x[c].q[b].d);
            acc[c] = V::fma(V::mul(d, dx), V::cvt(V::sub(isum[c], V::shl5(off))), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) V::storeuf(out[c], acc[c]);
}

template <int32_t T, stream_pf P, int C = k_cols>
void group_dot_n(int cols, const char * grp, const column * x, int64_t n_super, float * const * out, size_t pf) {
    if constexpr (C > 1) {
        if (cols < C) return group_dot_n<T, P, C - 1>(cols, grp, x, n_super, out, pf);
    }
    if constexpr (T == TSR_TYPE_Q4_K || T == TSR_TYPE_Q5_K) {
        q4_k_group_dot<C, T == TSR_TYPE_Q5_K, P>(grp, x, n_super, out, pf);
    } else {
        q6_k_group_dot<C, P>(grp, x, n_super, out, pf);
    }
}

template <int32_t T>
void run(const compute_params & p, const mm_dims & d) {
    constexpr size_t bb = k_block_bytes(T);
    const int64_t n_super = d.K / k_qk_k;
    const size_t cbytes = col_bytes(n_super);
    char * cols = static_cast<char *>(p.wdata);
    auto * xbuf = reinterpret_cast<float *>(cols + k_cols * cbytes); // one gathered column
    const bool in_place = b_in_place(d);
    const int64_t n_groups = d.M / static_cast<int64_t>(G); // repack_eligible: M is whole groups
    const int64_t n_items = d.n_batch * n_groups;
    const size_t group_bytes = static_cast<size_t>(n_super) * bb * G;
    work_queue queue(p, n_items, chunk_for_bytes(group_bytes, n_items, p.nth));
    column x[k_cols];
    int64_t have_batch = -1;
    const int nc = static_cast<int>(d.N);
    const size_t pf = tuning().stream_prefetch;
    const stream_pf kind = stream_pf_of(tuning());
    constexpr int layout = 0x200 | T; // the pair words depend on T
    for (item_range items{}; queue.next(items);) {
        for (int64_t it = items.begin; it < items.end; ++it) {
            const int64_t batch = it / n_groups, g = it % n_groups;
            if (batch != have_batch) {
                // (false once this node recorded its own columns below)
                const bool reuse = memo_holds(p, d.b, layout, batch, 0, nc);
                for (int c = 0; c < nc; ++c) {
                    char * mem = cols + static_cast<size_t>(c) * cbytes;
                    x[c] = reuse ? column_at(mem, n_super)
                                 : quantize_column<T>(b_column(d, in_place, batch, c, xbuf), n_super, mem);
                }
                have_batch = batch;
                memo_record(p, d.dst, d.b, layout, batch, 0, nc);
            }
            float * out[k_cols];
            for (int c = 0; c < nc; ++c) out[c] = dst_column(d, batch, c) + g * static_cast<int64_t>(G);
            const char * grp = a_matrix(d, batch) + static_cast<size_t>(g) * group_bytes;
            with_stream_pf(kind, [&](auto k) { group_dot_n<T, decltype(k)::value>(nc, grp, x, n_super, out, pf); });
        }
    }
}

} // namespace

size_t mul_mat_k_repack_work_size(const mm_dims & d) {
    return k_cols * col_bytes(d.K / k_qk_k) + align64(static_cast<size_t>(d.K) * sizeof(float));
}

bool mul_mat_k_repack(const compute_params & p, const mm_dims & d) {
    if (d.N > k_cols) return false;
    switch (d.a->type) {
    case TSR_TYPE_Q4_K: run<TSR_TYPE_Q4_K>(p, d); return true;
    case TSR_TYPE_Q5_K: run<TSR_TYPE_Q5_K>(p, d); return true;
    case TSR_TYPE_Q6_K: run<TSR_TYPE_Q6_K>(p, d); return true;
    default: return false;
    }
}

#else // builds without AVX2 do not repack K-quants (repack.cpp)

size_t mul_mat_k_repack_work_size(const mm_dims &) { return 0; }
bool mul_mat_k_repack(const compute_params &, const mm_dims &) { return false; }

#endif

} // namespace tessera::cpu
