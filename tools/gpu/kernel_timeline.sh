#!/usr/bin/env bash
# Kernel timelines of CUDA graph replays where Nsight Systems is not installed (the lent GPU machine has ncu
# only): CUPTI's activity trace injected into any CUDA program (tools/gpu/kernel_trace_inject.cpp), then
# tools/gpu/kernel_timeline.py's per-replay summary (span, busy time, gaps, per-kernel medians).
#   here:  tools/gpu/kernel_timeline.sh build DIR
#            builds the injection library with this toolkit's CUPTI into DIR (with libcupti, so DIR can be
#            carried to the GPU machine beside an e2e bundle)
#   there: tools/gpu/kernel_timeline.sh trace DIR TRACE.csv COMMAND...
#            runs COMMAND with the library injected (CUDA_INJECTION64_PATH), writes TRACE.csv, summarises it
#            (kernel_timeline.py: by kernel name; kernel_positions.py: by position in the replay, i.e. by op)
set -euo pipefail
mode=${1:?usage: kernel_timeline.sh build DIR | trace DIR TRACE.csv COMMAND...}
dir=${2:?usage: kernel_timeline.sh build DIR | trace DIR TRACE.csv COMMAND...}
here=$(cd "$(dirname "$0")" && pwd)
case "$mode" in
  build)
    cuda=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
    mkdir -p "$dir"
    g++ -std=c++17 -O2 -shared -fPIC -I"$cuda/include" "$here/kernel_trace_inject.cpp" -L"$cuda/lib64" -lcupti \
      -Wl,-rpath,'$ORIGIN' -o "$dir/libedgevit_trace.so"
    cp -L "$cuda"/lib64/libcupti.so.[0-9]* "$dir/"
    cp "$here/kernel_timeline.py" "$here/kernel_positions.py" "$dir/"
    ls -la "$dir" ;;
  trace)
    trace=${3:?trace needs TRACE.csv}
    shift 3
    EDGEVIT_TRACE_OUT=$trace CUDA_INJECTION64_PATH=$(readlink -f "$dir/libedgevit_trace.so") \
      LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
    python3 "$dir/kernel_timeline.py" "$trace"
    python3 "$dir/kernel_positions.py" "$trace" ;;
  *) echo "kernel_timeline.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
