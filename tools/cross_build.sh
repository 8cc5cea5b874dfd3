#!/usr/bin/env bash
# Cross-compiles edgevit for aarch64 (toolchain/aarch64-linux-gnu.cmake) into build-aarch64/ and proves the
# result under qemu-aarch64: the cpu tests (not slow; plan_hash_test is the cross-architecture determinism
# proof) and `edgevit-selftest --quick`. Used by tools/test.sh when EDGEVIT_CI_CROSS=1, and by hand.
#   tools/cross_build.sh              deps + configure + build + tests under qemu
#   tools/cross_build.sh --no-test    deps + configure + build (e.g. before tools/package.sh --arm64)
# Environment: EDGEVIT_SYSROOT (a board's root fs instead of Debian multiarch), EDGEVIT_CROSS_BUILD_DIR
# (default build-aarch64), EDGEVIT_CROSS_JOBS (default nproc), EDGEVIT_TEST_REPORTS (a folder: the tests'
# reports go to its cross/ for tools/skips.sh; tools/test.sh sets it).
#
# Dependencies: Debian packages only. g++-aarch64-linux-gnu, qemu-user, and the :arm64 twins of the library
# -dev packages of tools/deps.sh (Multi-Arch: same, installed beside the amd64 ones). libyaml-cpp-dev is not
# Multi-Arch: same in Debian 12 (installing :arm64 would remove the amd64 one and break the native build), so
# its arm64 .deb is fetched with `apt-get download` and unpacked into $build/deps (EDGEVIT_CROSS_EXTRA_ROOT);
# its runtime library libyaml-cpp0.7:arm64 is co-installable and installed normally.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${EDGEVIT_CROSS_BUILD_DIR:-build-aarch64}
jobs=${EDGEVIT_CROSS_JOBS:-$(nproc)}
run_tests=1
updated=0
[ "${1:-}" = "--no-test" ] && run_tests=0
start=$(date +%s)

# ---- dependencies ---------------------------------------------------------------------------------------
host_pkgs=(g++-aarch64-linux-gnu qemu-user dpkg-dev)
arm64_pkgs=(libc6 libstdc++6 libgomp1 libspdlog-dev libfmt-dev libopenblas-dev libstb-dev libgtest-dev
            libgmock-dev libxxhash-dev libgpiod-dev libsystemd-dev libyaml-dev libyaml-cpp0.7)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ -z "${EDGEVIT_SYSROOT:-}" ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
  missing=()
  for p in "${host_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  for p in "${arm64_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p:arm64" 2>/dev/null | grep -q "install ok installed" || missing+=("$p:arm64")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "cross_build: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    updated=1
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  extra="$PWD/$build/deps"
  if [ ! -f "$extra/usr/lib/aarch64-linux-gnu/cmake/yaml-cpp/yaml-cpp-config.cmake" ]; then
    mkdir -p "$extra" "$build/debs"
    [ "$updated" -eq 1 ] || $sudo apt-get update -qq
    ver=$(dpkg-query -W -f='${Version}' libyaml-cpp0.7:arm64)
    # Same version as the installed runtime library, so the unpacked .so matches what runs.
    (cd "$build/debs" && apt-get download -qq -o APT::Sandbox::User=root "libyaml-cpp-dev:arm64=$ver" "libyaml-cpp0.7:arm64=$ver")
    for d in "$build"/debs/*.deb; do dpkg-deb -x "$d" "$extra"; done
  fi
else
  extra=""
  dpkg-query -W -f='${Status}' g++-aarch64-linux-gnu 2>/dev/null | grep -q "install ok installed" ||
    { echo "cross_build: install g++-aarch64-linux-gnu (and qemu-user to run tests)" >&2; exit 1; }
fi

# ---- configure and build --------------------------------------------------------------------------------
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="$PWD/toolchain/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
      -DEDGEVIT_CROSS_EXTRA_ROOT="$extra" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
grep -E "^-- edgevit:" "$build/configure.log" || true
cmake --build "$build" -j"$jobs"
built=$(date +%s)
echo "cross_build: configure + build $((built - start)) s"
[ "$run_tests" -eq 1 ] || exit 0

# ---- tests under qemu -----------------------------------------------------------------------------------
# cli_test and daemon_process_test start build/bin/edgevit(d) from inside the test; an emulated process cannot
# start another aarch64 program without binfmt_misc, so they run only where one is registered (or on a board).
# (selftest_cli_test prefixes its child with $EDGEVIT_TEST_EMULATOR, set by the toolchain's emulator line.)
exclude="^$"
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || exclude="^(cli_test|daemon_process_test)$"
status=0
report=()
if [ -n "${EDGEVIT_TEST_REPORTS:-}" ]; then
  mkdir -p "$EDGEVIT_TEST_REPORTS/cross/gtest"
  export GTEST_OUTPUT="xml:$EDGEVIT_TEST_REPORTS/cross/gtest/"
  report=(--output-junit "$EDGEVIT_TEST_REPORTS/cross/ctest.xml")
  # Tests left out by -E are skips too: listed with their reason.
  if [ "$exclude" != "^$" ]; then
    for t in cli_test daemon_process_test; do
      printf '%s\t%s\n' "$t" "emulated: not run, qemu-user cannot start the aarch64 binary it drives (no binfmt_misc)"
    done >"$EDGEVIT_TEST_REPORTS/cross/excluded.txt"
  fi
fi
(cd "$build" && ctest -L cpu -LE slow -E "$exclude" -j"$jobs" --output-on-failure --timeout 600 "${report[@]}") || status=1
# No -L with multiarch: /lib/ld-linux-aarch64.so.1 (libc6:arm64) loads everything from /usr/lib/aarch64-linux-gnu;
# -L /usr/aarch64-linux-gnu would mix in the cross toolchain's libc/libgomp, where OpenMP regions hang.
qemu=(env OMP_NUM_THREADS=1 EDGEVIT_THREADS=1 qemu-aarch64)
[ -z "${EDGEVIT_SYSROOT:-}" ] || qemu=(env OMP_NUM_THREADS=1 EDGEVIT_THREADS=1 qemu-aarch64 -L "$EDGEVIT_SYSROOT")
echo "cross_build: edgevit-selftest --quick under qemu-aarch64"
"${qemu[@]}" "$build/bin/edgevit-selftest" --quick || status=1
echo "cross_build: tests $(( $(date +%s) - built )) s, total $(( $(date +%s) - start )) s"
exit $status
