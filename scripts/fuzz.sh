#!/usr/bin/env bash
# Builds the GGUF reader fuzzer (clang, libFuzzer, ASan + UBSan) in build/fuzz
# and runs it for N seconds (default 60), seeded with the real GGUF files of
# ../shared/models and ../shared/vocab plus small derived seeds. The corpus
# lives in a temporary directory (never in the repository); crash inputs are
# kept in build/fuzz/artifacts/. Exits non-zero when the fuzzer finds a crash,
# sanitizer report, leak, timeout or out-of-memory.
#   usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shared="${TESSERA_SHARED_DIR:-$(cd .. && pwd)/shared}"

cc=""; cxx=""
for v in "" -14 -15 -16 -17 -18; do
  if command -v "clang++$v" >/dev/null && command -v "clang$v" >/dev/null; then cc="clang$v"; cxx="clang++$v"; break; fi
done
if [[ -z "$cxx" ]]; then echo "fuzz: clang++ not found" >&2; exit 2; fi

cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DTESSERA_FUZZ=ON -DTESSERA_SANITIZE=address \
  -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
cmake --build build/fuzz --target fuzz_gguf_reader -j "$(nproc)"

corpus="$(mktemp -d -t tessera-fuzz-corpus.XXXXXX)"
trap 'rm -rf "$corpus"' EXIT
shopt -s nullglob
seeds=("$shared"/models/*.gguf "$shared"/vocab/*.gguf)
if (( ${#seeds[@]} == 0 )); then echo "fuzz: no seed files under $shared" >&2; exit 2; fi
cp "${seeds[@]}" "$corpus"/
# Small seeds reach the header paths faster: each file's first 4 KiB, and a
# minimal valid file (one key, one F32 tensor of 4 elements).
for f in "${seeds[@]}"; do head -c 4096 "$f" > "$corpus/head-$(basename "$f")"; done
le32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(( $1 & 255 )) $(( ($1 >> 8) & 255 )) $(( ($1 >> 16) & 255 )) $(( ($1 >> 24) & 255 )))"; }
le64() { le32 $(( $1 & 0xffffffff )); le32 $(( ($1 >> 32) & 0xffffffff )); }
{
  printf 'GGUF'; le32 3; le64 1; le64 1
  le64 20; printf 'general.architecture'; le32 8; le64 4; printf 'tiny'
  le64 1; printf 'a'; le32 1; le64 4; le32 0; le64 0
} > "$corpus/tiny.gguf"
pad=$(( (32 - $(stat -c %s "$corpus/tiny.gguf") % 32) % 32 ))
head -c "$pad" /dev/zero >> "$corpus/tiny.gguf"
head -c 16 /dev/zero >> "$corpus/tiny.gguf"

mkdir -p build/fuzz/artifacts
echo "fuzz: running fuzz_gguf_reader for ${seconds} s on $(ls "$corpus" | wc -l) seeds"
./build/fuzz/fuzz_gguf_reader -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
  -max_len=2000000 -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/ "$corpus"
echo "fuzz: no crash in ${seconds} s"
