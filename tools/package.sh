#!/usr/bin/env bash
# Makes and checks the install packages of a built tree (tools/cmake/Packaging.cmake):
#   tools/package.sh [BUILD_DIR]      default build/ (native); build-aarch64/ (tools/cross_build.sh) gives arm64
# Writes BUILD_DIR/packages/:
#   edgevit_<version>_<arch>.deb              CPack; checked with dpkg-deb -I / -c (Depends, every file)
#   edgevit-<version>-linux-<arch>.tar.gz     relocatable: bin/, lib/ (bundled libraries), share/edgevit/
# and proves the tarball relocatable: extracted into a fresh temporary directory, its binaries resolve their
# bundled libraries from there (ldd; native only), and `edgevit-selftest --quick` and `edgevit run` on the
# digits demo pass from there (arm64: under qemu-aarch64).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || { echo "package: $build is not a configured build tree" >&2; exit 2; }
targets=(edgevit edgevit-selftest)
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
[ -n "$depends" ] || fail "$deb: no Depends"
for lib in libyaml-cpp libspdlog libfmt libopenblas libxxhash libgomp libstdc++6 libc6; do
  grep -q "$lib" <<<"$depends" || fail "$deb: Depends lacks $lib: $depends"
done
for f in ./usr/bin/edgevit ./usr/bin/edgevit-selftest ./usr/share/edgevit/config/models/vit-digits.yaml \
         ./usr/share/edgevit/config/models/vit-digits.safetensors ./usr/share/edgevit/config/models/vit-digits.labels.txt \
         ./usr/share/edgevit/config/devices/orin-nx-16gb.yaml ./usr/share/edgevit/testdata/digits/test_split.safetensors; do
  grep -q " $f\$" <<<"$contents" || fail "$deb: missing $f"
done
grep -q " ./usr/lib/.*\.so" <<<"$contents" && fail "$deb: bundles shared libraries (the .deb uses Depends)"
echo "package: $deb ok ($(echo "$contents" | wc -l) entries)"

# ---- relocatable tarball ------------------------------------------------------------------------------------
name="edgevit-$version-linux-$arch"
stage="$out/stage/$name"
cmake --install "$build" --prefix "$stage" >/dev/null
cmake --install "$build" --prefix "$stage" --component bundled >/dev/null
tar -C "$out/stage" -czf "$out/$name.tar.gz" "$name"
echo "package: $out/$name.tar.gz: $(ls "$stage/lib" | wc -l) bundled files: $(ls "$stage/lib" | tr '\n' ' ')"

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
  for b in "$root"/lib/*; do
    case "$(basename "$b")" in libcuda.so*|libcudart*|libcublas*|libnvidia-*) fail "$b: CUDA library bundled";; esac
  done
  [ -z "$cuda_dirs" ] || { echo "package: CUDA build: libraries from the target's CUDA installation ($cuda_dirs here)"; run=(env LD_LIBRARY_PATH="$cuda_dirs"); }
fi
if [ -z "${run[*]:-}" ] || [ -n "$cuda_dirs" ]; then
  for b in "$root"/bin/*; do
    # ldd's output captured first: `ldd | grep -q` under pipefail fails whenever grep exits before ldd has
    # written everything (SIGPIPE).
    deps=$("${run[@]}" ldd "$b")
    ! grep -q "not found" <<<"$deps" || fail "$b: unresolved libraries: $deps"
    grep -q "libyaml-cpp[^ ]* => $root/bin/../lib/" <<<"$deps" || fail "$b does not load the bundled libyaml-cpp: $deps"
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
