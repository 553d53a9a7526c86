#!/usr/bin/env bash
# The CPU speed report (issue 6), reproducible: builds the release preset,
# writes the random-weight synth models (135m and 1b shapes; F16, Q8_0,
# Q4_0, BF16, Q4_K_M) if they are missing, then runs
#   1. tessera bench: pp512/tg128 tokens/s on 1 and 2 threads per model
#      (markdown table, and JSON with the reference bench tool's field names),
#      each as a fraction of the FMA peak or read bandwidth (--limits);
#   2. bench_ops: the machine's FMA peak, int8 peak and read bandwidth, and
#      the MUL_MAT kernels as fractions of them (AVX-512 build of this
#      machine and the AVX2 "haswell" build), fused vs unfused attention,
#      and bench_blas: the F32 GEMM against OpenBLAS (when it is installed).
# Run it on an otherwise idle machine: every figure is a ratio measured in
# the same run. Output goes to $OUT (default build/bench-report).
#
# Usage: scripts/bench.sh [quick]   (quick: 135m models only, 1 repetition)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/bench-report}
SYNTH=${SYNTH:-build/synth}
VOCAB=../shared/vocab/ggml-vocab-llama-spm.gguf
mode=${1:-full}

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
mkdir -p "$OUT" "$SYNTH"
bin=build/release/tessera
export TESSERA_BACKEND_PATH=build/release

presets="135m 1b"
reps=3
if [[ $mode == quick ]]; then presets="135m"; reps=1; fi

models=()
for preset in $presets; do
    for type in Q4_0 Q8_0 F16 BF16 Q4_K_M; do
        f=$SYNTH/synth-$preset-$type.gguf
        [[ -f $f ]] || "$bin" gguf synth --preset "$preset" --type "$type" --vocab "$VOCAB" -o "$f"
        models+=(-m "$f")
    done
done

echo "== uptime (load should be near 0) =="; uptime | tee "$OUT/uptime.txt"
echo "== tessera bench =="
"$bin" bench "${models[@]}" -p 512 -n 128 -t 1,2 -r "$reps" --limits | tee "$OUT/bench.md"
"$bin" bench "${models[@]}" -p 512 -n 128 -t 1,2 -r "$reps" --limits -o json >"$OUT/bench.json"

echo "== kernels as fractions of the machine limits =="
filter='BM_(fma_peak|int8_peak|read_bw)|BM_mul_mat/|BM_attention'
for b in build/release/bench/bench_ops_native build/release/bench/bench_ops_haswell build/release/bench/bench_ops; do
    [[ -x $b ]] || continue
    echo "-- $b"
    "$b" --benchmark_filter="$filter" | tee "$OUT/$(basename "$b").txt"
done
for b in build/release/bench/bench_blas_native build/release/bench/bench_blas_haswell; do
    [[ -x $b ]] || continue
    echo "-- $b"
    "$b" | tee "$OUT/$(basename "$b").txt"
done
echo "report written to $OUT"
