#!/usr/bin/env bash
# The shared libraries a set of binaries needs on a machine they were not built on. Sourced by the bundle
# scripts (tools/gpu/make_e2e_bundle.sh, make_fuzz_bundle.sh, make_bundle.sh; tools/bench/make_cpu_bundle.sh,
# make_gemm_bundle.sh, make_cpu_variants_bundle.sh), or run:
#   tools/lib/bundle_libs.sh DEST BINARY...      copies what BINARY... need into DEST (created if missing)
# Functions:
#   bundle_libs_list BINARY...   the resolved paths (ldd) of the libraries to bundle, sorted, one a line
#   bundle_libs DEST BINARY...   copies each into DEST, symlinks followed (cp -L), under the name the binary
#                                asks for (libopenblas.so.0, not the alternatives target's file name)
# Left out, because every target machine has its own: glibc (libc, libm, libdl, librt, libpthread,
# ld-linux*), libgcc_s and libstdc++ (the GPU machines' is newer than ours), and CUDA's driver and toolkit
# libraries (libcuda, libcudart, libcublas, libcublasLt: the target's CUDA installation provides them,
# tools/cmake/Packaging.cmake says why). CPU-only builds link none of the CUDA ones, so one list serves
# every caller. Everything else is bundled: yaml-cpp, spdlog, fmt, OpenBLAS (and its libgfortran,
# libquadmath), libgomp, xxhash, libgpiod, ... The .deb and tarball of tools/package.sh bundle through
# CMake's install rules instead (tools/cmake/Packaging.cmake).
# A library ldd cannot resolve is an error.

bundle_libs_exclude='/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*'
bundle_libs_exclude+='|libcuda|libcudart|libcublas|libcublasLt)\.so'

bundle_libs_list() {
  local deps
  # ldd's output captured first: under pipefail a reader that stops early would fail the pipeline.
  deps=$(ldd "$@") || { echo "bundle_libs: ldd failed on: $*" >&2; return 1; }
  if grep -q "not found" <<<"$deps"; then
    echo "bundle_libs: unresolved libraries:" >&2
    grep "not found" <<<"$deps" >&2
    return 1
  fi
  awk '/=>/ {print $3}' <<<"$deps" | sort -u | { grep -v -E "$bundle_libs_exclude" || true; }
}

bundle_libs() {
  local dest=$1 libs lib
  shift
  libs=$(bundle_libs_list "$@") || return 1
  mkdir -p "$dest"
  for lib in $libs; do cp -L "$lib" "$dest/" || return 1; done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ $# -ge 2 ] || { echo "usage: $0 DEST BINARY..." >&2; exit 2; }
  bundle_libs "$@"
fi
