#!/usr/bin/env bash
# Lists every skipped test of a tools/test.sh run with its reason, and fails (exit 1) when a skip's reason is
# not one the stage allows. Called by tools/test.sh at its end; by hand: tools/skips.sh REPORT_DIR.
#
# REPORT_DIR holds one folder per stage (native-cuda, native-slow, native-cpu, hardening, cross), each with
#   gtest/*.xml   GoogleTest's own report of each test binary (GTEST_OUTPUT=xml:DIR/): every GTEST_SKIP with
#                 its message
#   ctest.xml     ctest --output-junit: whole binaries ctest counted as skipped (exit 77, SKIP_RETURN_CODE),
#                 with the reason the binary printed
#   excluded.txt  "TEST<TAB>REASON" lines: binaries a script left out of ctest (-E), with why
# tools/test.sh writes the native ones; tools/sanitize.sh and tools/cross_build.sh write theirs when
# EDGEVIT_TEST_REPORTS names the folder (tools/test.sh sets it).
#
# The skips a stage may have, and why (docs/reliability.md, "Skipped tests"): a skip matches when its reason
# contains the text after the stage pattern's "|". Everything else fails the run.
allowed=(
  "*|no GPU"                                                  # CUDA tests and checks on a machine without one
  "*|no gpiochip"                                             # GPIO hardware tests on a machine without GPIO lines
  "*|no stored CPU output hashes for this instruction set"   # cpu_bits_test: bit hashes exist per ISA key
  "hardening|sanitizer build"                                 # exact malloc counters: the sanitizer owns malloc
  "hardening|ASan maps shadow pages"                          # stack-growth test: ASan's fake stacks
  "cross|too slow under emulation"                            # EDGEVIT_SKIP_IF_EMULATED (runs in the native stages)
  "cross|under emulation only the small models"               # engine_golden_test under qemu
  "cross|qemu-user's page faults"                             # stack-growth test: qemu's own mappings
  "cross|no packed GEMM in this build"                        # aarch64: libxsmm has no JIT there; OpenBLAS serves
  "cross|emulated: not run, qemu-user cannot start"           # cli_test, daemon_process_test without binfmt_misc
)
set -uo pipefail
dir=${1:?usage: tools/skips.sh REPORT_DIR}

# Prints "TEST<TAB>REASON" for each skip in a GoogleTest XML report, or a pytest --junitxml one written beside
# them (pytest puts every element on one line: split first).
gtest_skips() {
  sed 's/></>\n</g' "$1" | awk -v bin="$(basename "$1" .xml)" '
    function attr(line, name,   m) {
      # " name=": a leading blank, so that name= does not match inside classname=
      if (match(line, " " name "=\"[^\"]*\"")) { m = substr(line, RSTART + length(name) + 3, RLENGTH - length(name) - 4); return m }
      return ""
    }
    function unescape(s) {
      gsub(/&#x0A;/, " ", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "'"'"'", s)
      gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&amp;/, "\\&", s); return s
    }
    /<testcase / { test = attr($0, "classname") "." attr($0, "name") }
    /<skipped / {
      msg = unescape(attr($0, "message"))
      sub(/^[^ ]*:[0-9]+ /, "", msg)   # the file:line gtest puts first
      if (msg == "") msg = "(no reason given)"
      print bin ":" test "\t" msg
    }'
}

# Prints "TEST<TAB>REASON" for each test ctest skipped, the reason being the first line the test printed.
ctest_skips() {
  awk '
    /<testcase / { match($0, /name="[^"]*"/); test = substr($0, RSTART + 6, RLENGTH - 7); skipped = 0; next }
    /<skipped / { skipped = 1; match($0, /message="[^"]*"/); why = substr($0, RSTART + 9, RLENGTH - 10); next }
    skipped && /<system-out>/ {
      line = $0; sub(/.*<system-out>/, "", line); sub(/<\/system-out>.*/, "", line)
      print test "\t" (line != "" ? line : why) " (" why ")"; skipped = 0; next
    }
    /<\/testcase>/ { if (skipped) print test "\t" why; skipped = 0 }' "$1"
}

allowed_in() {  # allowed_in STAGE REASON
  local entry
  for entry in "${allowed[@]}"; do
    local stages=${entry%%|*} text=${entry#*|}
    [[ "$stages" == "*" || "$stages" == "$1" ]] || continue
    [[ "$2" == *"$text"* ]] && return 0
  done
  return 1
}

total=0
bad=0
echo "== skipped tests (reasons each stage allows: tools/skips.sh, docs/reliability.md)"
for stage_dir in "$dir"/*/; do
  [ -d "$stage_dir" ] || continue
  stage=$(basename "$stage_dir")
  while IFS=$'\t' read -r test reason; do
    [ -n "$test" ] || continue
    total=$((total + 1))
    if allowed_in "$stage" "$reason"; then
      printf '  %-11s %s: %s\n' "$stage" "$test" "$reason"
    else
      bad=$((bad + 1))
      printf '  %-11s %s: %s  <- NOT ALLOWED\n' "$stage" "$test" "$reason"
    fi
  done < <(
    for x in "$stage_dir"gtest/*.xml; do [ -f "$x" ] && gtest_skips "$x"; done
    [ -f "$stage_dir/ctest.xml" ] && ctest_skips "$stage_dir/ctest.xml"
    [ -f "$stage_dir/excluded.txt" ] && cat "$stage_dir/excluded.txt"
  )
done
echo "== $total skipped, $bad with a reason their stage does not allow"
[ "$bad" -eq 0 ]
