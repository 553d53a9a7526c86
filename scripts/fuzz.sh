#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build/fuzz and runs
# each for N seconds (default 60), one run after another, each on its own
# seeds (see the runs list below). Corpora live in a temporary directory
# (never in the repository); crash inputs are kept in build/fuzz/artifacts/.
# Exits non-zero when a fuzzer finds a crash, sanitizer report, leak, timeout
# or out-of-memory (the runs after it are skipped).
#   usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shared="${TESSERA_SHARED_DIR:-$(cd .. && pwd)/shared}"
export TESSERA_SHARED_DIR="$shared"

# The runs: NAME PROGRAM PERCENT [VAR=VALUE...] [-OPTION...]. PROGRAM
# (fuzz/PROGRAM.cpp) runs for PERCENT of SECONDS, with the environment
# variables and libFuzzer options given, on the seeds that seeds_NAME DIR
# writes into DIR; the runs of one program add up to 100.
runs=(
  "gguf_reader fuzz_gguf_reader 100 -max_len=2000000"
  "tokenizer_text fuzz_tokenizer 70 TESSERA_FUZZ_MODE=text -max_len=4096"
  "tokenizer_vocab fuzz_tokenizer 30 TESSERA_FUZZ_MODE=vocab -max_len=65536"
  "model fuzz_model 100 -max_len=2000000"
)

# fuzz_gguf_reader: the real GGUF files of ../shared/models and ../shared/vocab,
# each file's first 4 KiB (small seeds reach the header paths faster), and a
# minimal valid file (one key, one F32 tensor of 4 elements).
seeds_gguf_reader() {
  local dir="$1" f
  local seeds=("$shared"/models/*.gguf "$shared"/vocab/*.gguf)
  if (( ${#seeds[@]} == 0 )); then echo "fuzz: no seed files under $shared" >&2; exit 2; fi
  cp "${seeds[@]}" "$dir"/
  for f in "${seeds[@]}"; do head -c 4096 "$f" > "$dir/head-$(basename "$f")"; done
  {
    printf 'GGUF'; le32 3; le64 1; le64 1
    le64 20; printf 'general.architecture'; le32 8; le64 4; printf 'tiny'
    le64 1; printf 'a'; le32 1; le64 4; le32 0; le64 0
  } > "$dir/tiny.gguf"
  local pad=$(( (32 - $(stat -c %s "$dir/tiny.gguf") % 32) % 32 ))
  head -c "$pad" /dev/zero >> "$dir/tiny.gguf"
  head -c 16 /dev/zero >> "$dir/tiny.gguf"
}
le32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(( $1 & 255 )) $(( ($1 >> 8) & 255 )) $(( ($1 >> 16) & 255 )) $(( ($1 >> 24) & 255 )))"; }
le64() { le32 $(( $1 & 0xffffffff )); le32 $(( ($1 >> 32) & 0xffffffff )); }

# fuzz_tokenizer writes its own seeds (fuzz_tokenizer.cpp): text mode, the test
# texts of ../shared/vocab; vocabulary mode, small vocabularies cut from the
# real ones.
tokenizer_seeds() {
  [[ -d "$2" ]] || TESSERA_FUZZ_SEED_DIR="$2" ./build/fuzz/fuzz_tokenizer >/dev/null
  cp "$2/$1"/* "$3"/
}
seeds_tokenizer_text() { tokenizer_seeds text "$corpus/tokenizer-seeds" "$1"; }
seeds_tokenizer_vocab() { tokenizer_seeds vocab "$corpus/tokenizer-seeds" "$1"; }

# fuzz_model: stories260K and small synth models (fuzz_model_seeds: 1-2
# layers, n_embd 32-256, a 16-token vocabulary) of several weight types and
# shapes.
seeds_model() {
  ./build/fuzz/fuzz_model_seeds "$1"
  cp "$shared"/models/stories260K.gguf "$1"/
}

cc=""; cxx=""
for v in "" -14 -15 -16 -17 -18; do
  if command -v "clang++$v" >/dev/null && command -v "clang$v" >/dev/null; then cc="clang$v"; cxx="clang++$v"; break; fi
done
if [[ -z "$cxx" ]]; then echo "fuzz: clang++ not found" >&2; exit 2; fi

cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DTESSERA_FUZZ=ON -DTESSERA_SANITIZE=address -DTESSERA_CPU_STATIC=ON \
  -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
programs=$(for r in "${runs[@]}"; do read -r _ p _ <<<"$r"; echo "$p"; done | sort -u)
# shellcheck disable=SC2086
cmake --build build/fuzz --target $programs fuzz_model_seeds -j "$(nproc)"

corpus="$(mktemp -d -t tessera-fuzz-corpus.XXXXXX)"
trap 'rm -rf "$corpus"' EXIT
shopt -s nullglob
mkdir -p build/fuzz/artifacts
for r in "${runs[@]}"; do
  read -r name program percent args <<<"$r"
  vars=(); options=()
  for a in $args; do if [[ "$a" == -* ]]; then options+=("$a"); else vars+=("$a"); fi; done
  mkdir -p "$corpus/$name"
  "seeds_$name" "$corpus/$name"
  secs=$(( seconds * percent / 100 > 0 ? seconds * percent / 100 : 1 ))
  echo "fuzz: running $program ($name) for ${secs} s on $(ls "$corpus/$name" | wc -l) seeds"
  env "${vars[@]}" "./build/fuzz/$program" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 "${options[@]}" \
    -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/ "$corpus/$name"
  echo "fuzz: $name: no crash in ${secs} s"
done
