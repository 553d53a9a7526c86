#!/usr/bin/env bash
# Installs dependencies, builds the release preset and generates a story with
# the demo model. Extra arguments are passed on to `tessera run`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target tessera
./build/release/tessera run -m ../shared/models/stories260K.gguf -p "Once upon a time" -n 64 "$@"
