#!/usr/bin/env bash
# Runs on a many-core machine (the lent GPU machine's 16-core host), from the repository root, with
# build-fuzz-bundle/ carried (tools/gpu/make_fuzz_bundle.sh): every fuzz_NAME target with PROCS processes
# for SECONDS, all processes of a target sharing one corpus directory (libFuzzer reloads it every second),
# seeded from the checked-in corpus. Writes $OUT/fuzz/NAME-K.log per process, $OUT/fuzz/artifacts/NAME/
# (any crash, leak, timeout or OOM reproducer), and $OUT/fuzz/summary.txt: per target the executions
# summed over its processes, the final coverage and the number of findings.
#   usage: tools/gpu/run_fuzz_on_gpu.sh SECONDS PROCS [NAME[:PROCS]...]   (e.g. 480 3 image:4 frame:2)
set -uo pipefail
seconds=${1:?seconds}
procs=${2:?processes per target}
shift 2
out=${OUT:-/tmp/edgevit-out}/fuzz
mkdir -p "$out"
B=$(pwd -P)/build-fuzz-bundle
tar xJf "$B/payload.tar.xz" -C "$B" || { echo "cannot unpack $B/payload.tar.xz"; exit 1; }
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$B/fuzz/lsan.supp:print_suppressions=0
declare -A max_len=([safetensors]=16384 [model_config]=4096 [device_profile]=4096 [image]=16384 [frame]=4096)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for b in "$B"/bin/fuzz_*; do n=$(basename "$b"); names+=("${n#fuzz_}"); done
fi
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$out/cpu.txt"
pids=()
declare -A nprocs=()
plain=()
for arg in "${names[@]}"; do
  name=${arg%%:*}
  nprocs[$name]=$procs
  [ "$arg" = "$name" ] || nprocs[$name]=${arg#*:}
  plain+=("$name")
done
names=("${plain[@]}")
for name in "${names[@]}"; do
  corpus=/tmp/fuzz-corpus/$name
  mkdir -p "$corpus" "$out/artifacts/$name"
  dict=()
  [ -f "$B/fuzz/$name.dict" ] && dict=(-dict="$B/fuzz/$name.dict")
  for k in $(seq 1 "${nprocs[$name]}"); do
    "$B/bin/fuzz_$name" "$corpus" "$B/fuzz/corpus/$name" -max_total_time="$seconds" -max_len="${max_len[$name]:-4096}" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -seed="$((k * 7919))" \
      -artifact_prefix="$out/artifacts/$name/" "${dict[@]}" >"$out/$name-$k.log" 2>&1 &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait "$p"; done
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ), $seconds s per process"
  for name in "${names[@]}"; do
    execs=$(cat "$out/$name"-*.log | grep -o 'stat::number_of_executed_units: *[0-9]*' | grep -o '[0-9]*$' | awk '{s += $1} END {print s + 0}')
    cov=$(grep -h -o 'cov: [0-9]*' "$out/$name"-*.log | grep -o '[0-9]*' | sort -n | tail -1)
    findings=$(ls "$out/artifacts/$name" | wc -l)
    deadly=$(grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$out/$name"-*.log | wc -l)
    echo "fuzz_$name: ${nprocs[$name]} processes, executions $execs, max cov $cov, corpus $(ls /tmp/fuzz-corpus/$name | wc -l), findings $findings, logs with errors $deadly"
  done
} | tee "$out/summary.txt"
