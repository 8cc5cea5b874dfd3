#!/usr/bin/env bash
# Builds the libFuzzer targets here (clang, ASan + UBSan: tools/lib/hardening_build.sh, into
# build-fuzzbundle/) and packs them with their shared libraries (tools/lib/bundle_libs.sh), the checked-in
# seed corpora and the dictionaries into build-fuzz-bundle/ (git-ignored; pass it as `carry` to a device
# run), for long fuzzing runs on a many-core machine: tools/gpu/run_fuzz_on_gpu.sh there.
# docs/reliability.md records the runs.
#   usage: tools/gpu/make_fuzz_bundle.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export EDGEVIT_HARDENING_DIR=$root/build-fuzzbundle
. tools/lib/hardening_build.sh
. tools/lib/bundle_libs.sh
hardening_build -j2 --target fuzzers
bundle=$root/build-fuzz-bundle
stage=$hardening_dir/fuzz-bundle-stage
rm -rf "$bundle" "$stage"
mkdir -p "$bundle" "$stage/bin" "$stage/lib" "$stage/fuzz"
cp "$hardening_dir"/bin/fuzz_* "$stage/bin/"
cp -r tests/fuzz/corpus tests/fuzz/*.dict tests/fuzz/lsan.supp "$stage/fuzz/"
bundle_libs "$stage/lib" "$stage"/bin/*
tar cf - -C "$stage" bin lib fuzz | xz -T2 -6 >"$bundle/payload.tar.xz"
echo "fuzz bundle: $(du -sh "$bundle/payload.tar.xz" | cut -f1): $(ls "$stage/bin" | tr '\n' ' ')"
