#!/usr/bin/env bash
# Installs the Debian 12 packages tessera builds with; skips what is present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev nlohmann-json3-dev
      clang libclang-rt-14-dev qemu-user
      libicu-dev
      python3 # tests/tools/test_compare_reference.cpp runs scripts/compare_reference.py
      libopenblas-dev) # optional: only bench/bench_blas.cpp (tessera vs OpenBLAS) uses it
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
