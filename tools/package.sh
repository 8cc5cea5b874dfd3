#!/usr/bin/env bash
# Makes and checks the install packages of a built tree (tools/cmake/Packaging.cmake):
#   tools/package.sh [BUILD_DIR]      default build/ (native); build-aarch64/ (tools/cross_build.sh) gives arm64
# Writes BUILD_DIR/packages/:
#   edgevit_<version>_<arch>.deb              CPack; checked with dpkg-deb -I / -c (Depends, every file,
#                                             conffiles), and every ELF file in it: each NEEDED library is in
#                                             the package or named by Depends, and the glibc / libstdc++ symbol
#                                             versions are at most Ubuntu 22.04's (GLIBC_2.35, GLIBCXX_3.4.30)
#   edgevit-<version>-linux-<arch>.tar.gz     relocatable: bin/, lib/ (libedgevit.so; lib/edgevit/: bundled
#                                             libraries), include/, share/edgevit/
# and proves the tarball relocatable: extracted into a fresh temporary directory, its binaries resolve their
# bundled libraries from there (ldd; native only), and `edgevit-selftest --quick` and `edgevit run` on the
# digits demo pass from there (arm64: under qemu-aarch64). Native builds also:
#   - build tests/consumer against the staged install (find_package(edgevit), and main.c through
#     pkg-config) and classify a digit with both programs;
#   - as root: tools/deb_install_test.sh (install the .deb in a throwaway mount namespace, edgevitd --check,
#     serve a digit as the service user, purge, nothing left). Not root: said, and not run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || { echo "package: $build is not a configured build tree" >&2; exit 2; }
targets=(edgevit edgevit-selftest edgevit_shared)
help=$(cmake --build "$build" --target help)
grep -qE "(^|[ .])edgevitd(:|$)" <<<"$help" && targets+=(edgevitd)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
if grep -q "^CMAKE_CROSSCOMPILING:.*=ON\|^CMAKE_TOOLCHAIN_FILE:.*aarch64" "$build/CMakeCache.txt"; then
  arch=arm64; run=(env OMP_NUM_THREADS=1 EDGEVIT_THREADS=1 qemu-aarch64)
  [ -z "${EDGEVIT_SYSROOT:-}" ] || run+=(-L "$EDGEVIT_SYSROOT")
else
  arch=$(dpkg --print-architecture); run=()
fi
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
out="$PWD/$build/packages"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "package: FAIL: $*" >&2; exit 1; }

# ---- .deb -------------------------------------------------------------------------------------------------
(cd "$build" && cpack -G DEB -B "$out/cpack" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; fail "cpack"; }
deb=$(ls "$out"/cpack/*.deb)
mv "$deb" "$out/" && deb="$out/$(basename "$deb")"
info=$(dpkg-deb -I "$deb")
contents=$(dpkg-deb -c "$deb")
echo "$info" | grep -E "^ (Package|Version|Architecture|Depends):"
grep -q "Architecture: $arch" <<<"$info" || fail "$deb: architecture is not $arch"
depends=$(echo "$info" | sed -n 's/^ Depends: //p')
# Depends: what Debian 12 and Ubuntu 22.04 both have (everything else is bundled in /usr/lib/edgevit).
for p in "libc6 (>= 2.34)" libstdc++6 libgcc-s1 libgomp1 libsystemd0; do
  grep -qF "$p" <<<"$depends" || fail "$deb: Depends lacks $p: $depends"
done
for p in libyaml-cpp libspdlog libfmt libopenblas libxxhash libgpiod; do
  grep -q "$p" <<<"$depends" && fail "$deb: Depends names $p (bundled instead: Ubuntu 22.04 has other versions): $depends"
done
cuda_build=0
readelf -d "$build/bin/edgevit" | grep -q "NEEDED.*\[libcudart\.so" && cuda_build=1
if [ "$cuda_build" = 1 ]; then
  grep -qE "cuda-cudart-[0-9]+-[0-9]+" <<<"$depends" && grep -qE "libcublas-[0-9]+-[0-9]+" <<<"$depends" ||
    fail "$deb: a CUDA build's Depends lack cuda-cudart-X-Y / libcublas-X-Y: $depends"
fi
for f in ./usr/bin/edgevit ./usr/bin/edgevit-selftest ./usr/share/edgevit/config/models/vit-digits.yaml \
         ./usr/share/edgevit/config/models/vit-digits.safetensors ./usr/share/edgevit/config/models/vit-digits.labels.txt \
         ./usr/share/edgevit/config/devices/orin-nx-16gb.yaml ./usr/share/edgevit/testdata/digits/test_split.safetensors \
         ./usr/lib/libedgevit.so.0 ./usr/include/edgevit/edgevit.h ./usr/include/edgevit/edgevit.hpp \
         ./usr/include/edgevit/runtime/engine.h ./usr/lib/cmake/edgevit/edgevitConfig.cmake \
         ./usr/lib/pkgconfig/edgevit.pc ./usr/share/edgevit/tools/board/int8_speed.sh \
         ./usr/share/edgevit/tools/int8/random_vits.py; do
  grep -q " $f\( -> .*\)\?\$" <<<"$contents" || fail "$deb: missing $f"
done
if grep -q " ./usr/bin/edgevitd\$" <<<"$contents"; then
  for f in ./etc/edgevit/edgevitd.yaml ./usr/lib/systemd/system/edgevitd.service ./usr/lib/sysusers.d/edgevit.conf \
           ./usr/lib/tmpfiles.d/edgevit.conf; do
    grep -q " $f\$" <<<"$contents" || fail "$deb: missing $f"
  done
  dpkg-deb -I "$deb" conffiles | grep -qx "/etc/edgevit/edgevitd.yaml" || fail "$deb: edgevitd.yaml is not a conffile"
fi
grep -q " ./usr/lib/edgevit/libyaml-cpp" <<<"$contents" || fail "$deb: yaml-cpp is not bundled in /usr/lib/edgevit"
grep -q " ./usr/include/edgevit/kernels/" <<<"$contents" && fail "$deb: kernel headers installed (internal)"

# Every ELF file: NEEDED libraries in the package or provided by Depends; symbol versions at most what
# Ubuntu 22.04 (JetPack 6) has: glibc 2.35, libstdc++ of GCC 12 (GLIBCXX_3.4.30, CXXABI_1.3.13).
debroot=$(mktemp -d)
dpkg-deb -x "$deb" "$debroot"
system_needed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|librt\.so\.1|libpthread\.so\.0|ld-linux[-a-z0-9_.]*\.so\.[0-9]|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libgomp\.so\.1|libsystemd\.so\.0)$'
[ "$cuda_build" = 0 ] || system_needed="${system_needed%)\$}|libcudart\\.so\\.[0-9]+|libcublas\\.so\\.[0-9]+|libcublasLt\\.so\\.[0-9]+|libcuda\\.so\\.1)\$"
shipped=$(find "$debroot" \( -type f -o -type l \) -name "*.so*" -printf "%f\n" | sort -u)
versions=""
nelf=0
while IFS= read -r -d '' f; do
  head -c4 "$f" | grep -q "ELF" || continue
  nelf=$((nelf + 1))
  for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    grep -qxF "$n" <<<"$shipped" || grep -qE "$system_needed" <<<"$n" ||
      fail "${f#"$debroot"}: needs $n, neither shipped nor in Depends"
  done
  versions+=$(readelf -W --dyn-syms "$f" | awk '$7 == "UND" {print $8}' | grep -oE "@(GLIBC|GLIBCXX|CXXABI)_[0-9.]+" || true)$'\n'
done < <(find "$debroot" -type f -print0)
max_version() { grep -oE "^@$1_[0-9.]+\$" <<<"$versions" | sed "s/^@$1_//" | sort -V | tail -n1; }
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ]; }
glibc=$(max_version GLIBC); glibcxx=$(max_version GLIBCXX); cxxabi=$(max_version CXXABI)
version_le "$glibc" 2.35 || fail "$deb: needs GLIBC_$glibc; Ubuntu 22.04 has 2.35"
version_le "$glibc" 2.34 || fail "$deb: needs GLIBC_$glibc but Depends says libc6 (>= 2.34)"
version_le "$glibcxx" 3.4.30 || fail "$deb: needs GLIBCXX_$glibcxx; Ubuntu 22.04 has 3.4.30"
version_le "$cxxabi" 1.3.13 || fail "$deb: needs CXXABI_$cxxabi; Ubuntu 22.04 has 1.3.13"
rm -rf "$debroot"
echo "package: $nelf ELF files: NEEDED all shipped or in Depends; newest versions GLIBC_$glibc GLIBCXX_$glibcxx CXXABI_$cxxabi (Ubuntu 22.04: 2.35, 3.4.30, 1.3.13)"
echo "package: $deb ok ($(echo "$contents" | wc -l) entries)"

# ---- relocatable tarball ------------------------------------------------------------------------------------
name="edgevit-$version-linux-$arch"
stage="$out/stage/$name"
cmake --install "$build" --prefix "$stage" >/dev/null
cmake --install "$build" --prefix "$stage" --component bundled >/dev/null
tar -C "$out/stage" -czf "$out/$name.tar.gz" "$name"
echo "package: $out/$name.tar.gz: $(ls "$stage/lib/edgevit" | wc -l) bundled files: $(ls "$stage/lib/edgevit" | tr '\n' ' ')"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xzf "$out/$name.tar.gz"
root="$tmp/$name"
# The CUDA libraries are not bundled (tools/cmake/Packaging.cmake says why): the target's CUDA installation
# provides them (JetPack puts /usr/local/cuda/lib64 on the loader path). Here they come from wherever the
# build tree's binary found them, passed explicitly, so the check below still proves everything else is
# bundled.
cuda_dirs=""
if [ ${#run[@]} -eq 0 ]; then
  cuda_dirs=$(ldd "$build/bin/edgevit" | awk '/lib(cudart|cublas|cublasLt)\.so/ {print $3}' | xargs -r -n1 dirname |
              sort -u | paste -sd: -)
  for b in "$root"/lib/edgevit/*; do
    case "$(basename "$b")" in libcuda.so*|libcudart*|libcublas*|libnvidia-*) fail "$b: CUDA library bundled";; esac
  done
  [ -z "$cuda_dirs" ] || { echo "package: CUDA build: libraries from the target's CUDA installation ($cuda_dirs here)"; run=(env LD_LIBRARY_PATH="$cuda_dirs"); }
fi
if [ -z "${run[*]:-}" ] || [ -n "$cuda_dirs" ]; then
  for b in "$root"/bin/* "$root"/lib/libedgevit.so.0; do
    # ldd's output captured first: `ldd | grep -q` under pipefail fails whenever grep exits before ldd has
    # written everything (SIGPIPE).
    deps=$("${run[@]}" ldd "$b")
    ! grep -q "not found" <<<"$deps" || fail "$b: unresolved libraries: $deps"
    grep -q "libyaml-cpp[^ ]* => $root/[a-z]*/\?\(\.\./\)\?lib/edgevit/" <<<"$deps" || fail "$b does not load the bundled libyaml-cpp: $deps"
  done
fi
(cd "$tmp" && env -u EDGEVIT_CONFIG_DIR "${run[@]}" "$root/bin/edgevit-selftest" --quick --json >"$tmp/selftest.json") ||
  { cat "$tmp/selftest.json"; fail "edgevit-selftest --quick from the extracted tarball"; }
grep -q "\"config\": \"$root/share/edgevit/config/models/vit-digits.yaml\"" "$tmp/selftest.json" ||
  fail "the self-test did not use the tarball's own config: $(grep '"config"' "$tmp/selftest.json")"
cp tests/data/digits/digit-7.png "$tmp/"
ran=$(cd "$tmp" && env -u EDGEVIT_CONFIG_DIR "${run[@]}" "$root/bin/edgevit" run "$root/share/edgevit/config/models/vit-digits.yaml" \
      --input "$tmp/digit-7.png") || fail "edgevit run from the extracted tarball"
grep -q "prediction: 7 " <<<"$ran" || fail "edgevit run did not predict 7: $ran"
echo "package: tarball relocated to $tmp: edgevit-selftest --quick passed, edgevit run predicted 7"

# ---- the installed library, used from outside the tree (native only) -----------------------------------
if [ ${#run[@]} -eq 0 ] || [ -n "$cuda_dirs" ]; then
  cons="$tmp/consumer"
  model="$root/share/edgevit/config/models/vit-digits.yaml"
  cmake -S tests/consumer -B "$cons" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release >"$tmp/consumer.log" 2>&1 &&
    cmake --build "$cons" -j"$(nproc)" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "tests/consumer against $root"; }
  for prog in consumer_cpp consumer_c; do
    ran=$(cd "$tmp" && env -u EDGEVIT_CONFIG_DIR "${run[@]}" "$cons/$prog" "$model" "$tmp/digit-7.png") || fail "$prog: $ran"
    grep -q "^prediction: 7 " <<<"$ran" || fail "$prog did not predict 7: $ran"
  done
  # The C program once more, compiled by hand from pkg-config's flags.
  flags=$(PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --cflags --libs edgevit) || fail "pkg-config edgevit"
  # shellcheck disable=SC2086  # flags are words
  cc -std=c11 -Wall -o "$cons/consumer_pc" tests/consumer/main.c $flags -Wl,-rpath,"$root/lib" || fail "cc with pkg-config edgevit"
  ran=$(cd "$tmp" && env -u EDGEVIT_CONFIG_DIR "${run[@]}" "$cons/consumer_pc" "$model" "$tmp/digit-7.png") || fail "consumer_pc: $ran"
  grep -q "^prediction: 7 " <<<"$ran" || fail "consumer_pc did not predict 7: $ran"
  echo "package: tests/consumer built against $root (find_package(edgevit) and pkg-config): C++ and C API predicted 7"
fi

# ---- the .deb, installed (amd64 on the build machine, as root) ------------------------------------------
# CUDA builds: this machine's CUDA toolkit may not come from packages, so the CUDA Depends are forced and
# the libraries come from where the build found them (as for the tarball above).
if { [ ${#run[@]} -eq 0 ] || [ -n "$cuda_dirs" ]; } && [ "$arch" = "$(dpkg --print-architecture)" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    EDGEVIT_DEBTEST_CUDA_LIBS="$cuda_dirs" tools/deb_install_test.sh "$deb" || fail "tools/deb_install_test.sh $deb"
  else
    echo "package: tools/deb_install_test.sh not run: needs root (CI runs it)"
  fi
fi
