# Sourced by tools/sanitize.sh and tools/fuzz.sh: one clang build, build-hardening/, that serves both.
# Every library, test and fuzzer is compiled with -fsanitize=fuzzer-no-link,address,undefined (UBSan not
# recoverable, asserts on, -O1 -g, CUDA off): the test binaries run under ASan + UBSan (the coverage
# callbacks are the sanitizer runtime's no-ops there) and the fuzz_* targets link libFuzzer on top.
# One build instead of two halves the hardening stage's compile time on CI's 2 cores.
#   hardening_build [cmake --build arguments...]   installs clang if missing, configures, builds
hardening_dir=${EDGEVIT_HARDENING_DIR:-$PWD/build-hardening}

hardening_deps() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v clang++ >/dev/null; then
    echo "edgevit: installing clang for the sanitizer/fuzz build" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
  fi
  # libFuzzer and the sanitizer runtimes: Debian 12 ships them in libclang-rt-N-dev, Ubuntu 22.04 in
  # libclang-common-N-dev (a dependency of clang). Probe with a link, install only when it fails.
  local probe
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe/p.cpp"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
    local major
    major=$(clang++ -dumpversion | cut -d. -f1)
    echo "edgevit: installing libclang-rt-$major-dev (libFuzzer, sanitizer runtimes)" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "libclang-rt-$major-dev" >/dev/null
  fi
  rm -rf "$probe"
}

hardening_build() {
  hardening_deps
  mkdir -p "$hardening_dir"
  cmake -S . -B "$hardening_dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DEDGEVIT_CUDA=OFF -DEDGEVIT_FUZZ=ON \
    -DEDGEVIT_TESTS=ON >"$hardening_dir/configure.log" 2>&1 || { cat "$hardening_dir/configure.log"; return 1; }
  cmake --build "$hardening_dir" "$@"
}
