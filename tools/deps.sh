#!/usr/bin/env bash
# Installs edgevit's build dependencies from the distribution (Debian 12 / Ubuntu 22.04+), only those
# missing. Called by tools/demo.sh and tools/test.sh; safe to run again. Never downloads anything else.
# The CUDA toolkit is not installed here: with nvcc on PATH (or in /usr/local/cuda) the CUDA backend is
# built too (EDGEVIT_CUDA=AUTO).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libyaml-cpp-dev libyaml-dev libspdlog-dev libfmt-dev libopenblas-dev
      nlohmann-json3-dev libcli11-dev libstb-dev libgtest-dev libgmock-dev libbenchmark-dev
      libxxhash-dev libgpiod-dev libsystemd-dev
      python3-dev pybind11-dev python3-numpy python3-pytest python3-setuptools python3-wheel python3-venv)
# The Python packages: the `edgevit` module (api/python, pybind11), its pytest suite (ctest), and an offline
# `pip install --no-build-isolation .` (README.md, section "Embedding").
# x86-64: libxsmm's JIT GEMM kernels serve the CPU backend's linear layers (EDGEVIT_LIBXSMM=AUTO finds it);
# elsewhere OpenBLAS does (libxsmm 1.17 has no aarch64 JIT).
if [ "$(uname -m)" = x86_64 ]; then
  pkgs+=(libxsmm-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "edgevit: installing missing packages: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
