// tessera/core/ops.hpp — graph-building operations.
//
// Each function creates the result tensor in `ctx`, records the op and its
// sources, and checks shapes and types up front: a mismatch throws
// tessera::error naming the op, both shapes and the dimension that disagrees
// (e.g. "MUL_MAT: a [4096,32,1,1] and b [4000,7,1,1] disagree in ne[0]
// (4096 vs 4000)"). Nothing is computed here; results are computed by a
// backend's graph_compute.
//
// Activations are F32. "Weights" may be any type whose traits have to_float.
// Unless stated, results are new packed tensors.
//
// Sources: the tensor arguments are stored in argument order in
// result->src[0], src[1], ... (a null optional argument, e.g. soft_max's
// mask, leaves its slot null). Views (view*, reshape, permute, transpose)
// store a in src[0] and set view_src to the ROOT tensor that owns the data
// (a->view_src when a is itself a view; view_offs add up), and data =
// view_src->data + view_offs when the root already has data (else null).
// cpy and set_rows return a view of their destination (same ne/nb as the
// destination, view_src = its root) whose op is CPY / SET_ROWS.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "tessera/core/tensor.hpp"

namespace tessera {

// Matrix product with the weight matrix stored row-major as [K, M]:
//   a: [K, M, A2, A3] any type with to_float; rows must be row-contiguous
//      for block-quantized types, any strides otherwise
//   b: [K, N, B2, B3] F32, any strides
//   result: F32 [M, N, B2, B3], result[m, n] = sum_k a[k, m] * b[k, n]
// Broadcasting: B2 % A2 == 0 and B3 % A3 == 0; b's index i2 uses a's
// index i2 / (B2 / A2) (grouped-query attention shares a K head this way).
// A backend computes the types its supports_op accepts (the CPU: F32, F16,
// BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; not Q8_K). As the
// reference implementation does, it may round b first to the form its
// kernels multiply with a's type (b is used as given for F32 and F16
// weights): for block-quantized a, b is quantized to 8-bit blocks (Q8_0,
// Q5_0, Q5_1, Q4_0: 32 values with an F16 scale, so a block whose largest
// |b| is below about 1e-5 loses precision or becomes 0, one above about
// 8e6 overflows, and an infinite b gives NaN or inf; K-quants: 256 values with an
// F32 scale); for BF16 a on AVX512-BF16 CPUs, b is rounded to BF16 (its
// subnormals to 0), elsewhere kept in F32. CPU variants may add the terms
// in other orders (results can differ in the last bits) and, for BF16
// weights, round b differently.
tensor * mul_mat(context & ctx, tensor * a, tensor * b);

// Element-wise a + b and a * b. a: F32 any strides; b: F32 with
// a.ne[i] % b.ne[i] == 0 for every i (b is repeated to a's shape).
// Result: F32 packed, shape of a.
tensor * add(context & ctx, tensor * a, tensor * b);
tensor * mul(context & ctx, tensor * a, tensor * b);

// y = s * x + bias. op_params: [0] = s (f32), [1] = bias (f32).
tensor * scale(context & ctx, tensor * a, float s, float bias = 0.0f);

// RMS normalization over ne[0] (Zhang & Sennrich 2019):
//   y = x / sqrt(mean(x^2) + eps). op_params: [0] = eps (f32).
tensor * rms_norm(context & ctx, tensor * a, float eps);

// Rows of `a` picked by index: a: [E, R, A2, A3] any type with to_float;
// idx: I32 [n, A2, A3] (values in 0..R-1, checked at compute: out of range
// makes compute fail). Result: F32 [E, n, A2, A3].
tensor * get_rows(context & ctx, tensor * a, tensor * idx);

// Writes rows of `src` into `dst` at the row indices in `idx` and returns a
// view of dst (compute the returned tensor to perform the write).
//   dst: [E, R, D2, D3] of F32, F16 or BF16 (or a quantized type with from_float)
//   src: F32 [E, n, D2, D3]; idx: I32 or I64 [n, D2, D3]
// This is how a KV cache is filled.
// Result: op SET_ROWS, src[0] = dst, src[1] = src, src[2] = idx; ne/nb of dst.
tensor * set_rows(context & ctx, tensor * dst, tensor * src, tensor * idx);

// Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34).
//   x:   F32 [head_dim, n_head, n_tokens, 1], any strides
//   pos: I32 [n_tokens]: position of each token
//   freq_factors: null or F32 [>= n_dims/2], contiguous: per-pair divisors of
//     the frequency (the rope_freqs.weight tensor of Llama 3.1 files)
// The first n_dims (even, <= head_dim) elements of each head are rotated;
// the rest are copied. theta_i = pos * freq_scale * freq_base^(-2i/n_dims)
// / freq_factors[i] (1 without freq_factors).
// mode ROPE_NORMAL rotates adjacent pairs (x[2i], x[2i+1]); mode ROPE_NEOX
// rotates (x[i], x[i + n_dims/2]).
// op_params: [0] n_dims, [1] mode, [2] freq_base (f32), [3] freq_scale (f32);
// src[2] = freq_factors.
enum rope_mode : int32_t { ROPE_NORMAL = 0, ROPE_NEOX = 2 };
tensor * rope(context & ctx, tensor * x, tensor * pos, int n_dims, rope_mode mode,
              float freq_base, float freq_scale, tensor * freq_factors = nullptr);

// Row-wise soft-max of (scale * a + mask):
//   a: F32 [n, rows, A2, A3], any strides
//   mask: null or F32 [n, >= rows, M2, M3] with A2 % M2 == 0, A3 % M3 == 0
//         (typically the causal mask [n_kv, n_tokens], -inf where masked)
// A row whose entries are all -inf gives zeros. op_params: [0] scale (f32).
tensor * soft_max(context & ctx, tensor * a, tensor * mask, float scale);

// Fused scaled-dot-product attention, softmax(scale * K^T q + mask) V per
// query row and head, without materialising the [n_kv, T, n_head] score
// matrix (computed blockwise with an online soft-max: Milakov & Gimelshein
// 2018, "Online normalizer calculation for softmax"; Dao et al. 2022,
// "FlashAttention"). The same values as
//   permute(mul_mat(V^T, soft_max(mul_mat(K, q), mask, scale)), 0, 2, 1, 3)
// up to float rounding, with heads and tokens already swapped.
//   q:    F32 [head_dim, T, n_head, 1], any strides (e.g. the permuted view
//         of a [head_dim, n_head, T] projection)
//   k, v: F32 or F16 [head_dim, n_kv, n_head_kv, 1], elements packed along
//         ne[0] (nb[0] = type size), any other strides (views of a KV
//         cache whose rows hold the heads side by side)
//   mask: null or F32 [n_kv, >= T, M2, 1] with n_head % M2 == 0 (row i of
//         head h uses mask row (i, h % M2)); -inf hides a key
// Grouped-query attention: n_head % n_head_kv == 0, head h reads K/V head
// h / (n_head / n_head_kv). A row whose keys are all masked gives zeros.
// Result: F32 [head_dim, n_head, T, 1] packed (reshape to
// [head_dim * n_head, T] needs no copy). op_params: [0] scale (f32).
// src: [0] q, [1] k, [2] v, [3] mask (may be null).
tensor * flash_attn_ext(context & ctx, tensor * q, tensor * k, tensor * v, tensor * mask, float scale);

// SiLU(x) = x * sigmoid(x) (Elfwing et al. 2017). F32 in, F32 out.
tensor * silu(context & ctx, tensor * a);
// GELU, tanh approximation (Hendrycks & Gimpel 2016, section 2):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). F32 in, F32 out.
tensor * gelu(context & ctx, tensor * a);

// Copies a into b converting types (F32 <-> F16/BF16, F32 -> quantized with
// from_float); nelements must match, elements are visited in a's logical
// order. Returns a view of b: op CPY, src[0] = a, src[1] = b; ne/nb of b.
tensor * cpy(context & ctx, tensor * a, tensor * b);
// A packed copy of a (same type and shape). For quantized types a must be
// row-contiguous.
tensor * cont(context & ctx, tensor * a);

// Views (no data is copied; the result's data aliases the source).
// view: ne/nb given explicitly, starting `offset` bytes into a; the span
// must lie inside a's data (checked: offset + nbytes(view) <= nbytes(a)).
// nb has either ne.size() entries (nb[0] included) or ne.size() - 1
// (nb[1..]; nb[0] = type size). Missing trailing dims get ne = 1 and a
// packed stride. view_1d/2d/3d: nb[0] = type size, the last given stride
// continues packed (view_2d: nb[2] = nb1 * ne1). op VIEW.
tensor * view(context & ctx, tensor * a, std::span<const int64_t> ne,
              std::span<const uint64_t> nb, uint64_t offset);
tensor * view_1d(context & ctx, tensor * a, int64_t ne0, uint64_t offset);
tensor * view_2d(context & ctx, tensor * a, int64_t ne0, int64_t ne1, uint64_t nb1, uint64_t offset);
tensor * view_3d(context & ctx, tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
                 uint64_t nb1, uint64_t nb2, uint64_t offset);
// reshape: a must be contiguous; element count must match.
tensor * reshape(context & ctx, tensor * a, std::span<const int64_t> ne);
tensor * reshape(context & ctx, tensor * a, std::initializer_list<int64_t> ne);
// permute: axis i of a becomes axis perm[i] of the result (ggml convention):
// result.ne[perm[i]] = a.ne[i], result.nb[perm[i]] = a.nb[i].
// op_params[0..3] = p0..p3. Throws unless (p0..p3) is a permutation of 0..3.
tensor * permute(context & ctx, tensor * a, int p0, int p1, int p2, int p3);
// transpose: swaps dimensions 0 and 1.
tensor * transpose(context & ctx, tensor * a);

// Index of the largest value of each row (lowest index wins ties).
//   a: F32 [n, rows]; result: I32 [rows].
tensor * argmax(context & ctx, tensor * a);

// Name of an op ("MUL_MAT"); "UNKNOWN" for an invalid id.
const char * op_name(int32_t op);

} // namespace tessera
