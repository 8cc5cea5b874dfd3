#!/usr/bin/env bash
# Proves the relocatable tarball (tools/package.sh) runs on a machine it was not built on: run there from the
# repository root with the tarball's directory carried (default build-tarball/, holding one
# edgevit-*-linux-*.tar.gz). Extracts it into a fresh directory, shows where every library resolves from,
# and runs `edgevit-selftest --quick` and `edgevit run` on a digit from the extracted tree only.
# CUDA builds take cudart/cuBLASLt from the machine's own CUDA installation (never bundled): this script
# puts /usr/local/cuda's or pip's nvidia libraries on LD_LIBRARY_PATH, as JetPack's ld.so.conf does.
#   usage: tools/gpu/run_tarball_elsewhere.sh [DIR]       logs: $OUT/tarball.log
set -uo pipefail
dir=${1:-build-tarball}
out=${OUT:-/tmp/edgevit-out}
mkdir -p "$out"
log=$out/tarball.log
tgz=$(ls "$dir"/edgevit-*-linux-*.tar.gz | head -1)
tmp=$(mktemp -d)
tar -C "$tmp" -xzf "$tgz" || { echo "cannot extract $tgz" | tee "$log"; exit 1; }
root=$(ls -d "$tmp"/edgevit-*)
cuda=$( (ls -d /usr/local/cuda/lib64 2>/dev/null;
         python3 -c 'import glob, site; [print(d) for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
{
  echo "machine: $(uname -srm); $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"); glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
  echo "tarball: $(basename "$tgz") extracted to $root"
  echo "--- ldd bin/edgevit-selftest"
  LD_LIBRARY_PATH=$cuda ldd "$root/bin/edgevit-selftest"
  echo "--- edgevit-selftest --quick"
  (cd "$tmp" && env -u EDGEVIT_CONFIG_DIR LD_LIBRARY_PATH="$cuda" "$root/bin/edgevit-selftest" --quick); echo "rc=$?"
  echo "--- edgevit run (digit-7)"
  (cd "$tmp" && env -u EDGEVIT_CONFIG_DIR LD_LIBRARY_PATH="$cuda" "$root/bin/edgevit" run \
     "$root/share/edgevit/config/models/vit-digits.yaml" --input "$OLDPWD/tests/data/digits/digit-7.png" -v); echo "rc=$?"
} >"$log" 2>&1
grep -E "^machine|^rc=|prediction|PASS:|FAIL|not found" "$log"
