# Sourced (from the repository root) by the device run scripts (run_i8_on_gpu.sh, run_cutlass_on_gpu.sh,
# bench_mha_i8_run.sh):
#   gpu_env DIR         LD_LIBRARY_PATH: DIR/lib (a bundle's libraries), then CUDA's and the Python wheels'
#                       nvidia/*/lib; prints the GPU's name, driver and clocks into $step_dir/gpu.txt and stdout
#   step NAME CAP CMD   runs CMD capped at CAP seconds, its output in $step_dir/NAME.log, appends NAME=rc(seconds)
#                       to the summary array, prints the log's last ${step_tail:-4} lines; returns CMD's status
# The caller sets step_dir (the log folder) before either.
gpu_env() {
  local libdirs
  libdirs=$( (ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null;
              python3 -c 'import glob, site
for p in site.getsitepackages(): [print(d) for d in glob.glob(p + "/nvidia/*/lib")]' 2>/dev/null) | paste -sd:)
  export LD_LIBRARY_PATH="$1/lib:$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$step_dir/gpu.txt"
}
summary=()
step() {
  local name=$1 cap=$2
  shift 2
  local t0=$SECONDS
  timeout "$cap" "$@" >"$step_dir/$name.log" 2>&1
  local rc=$?
  summary+=("$name=$rc($((SECONDS - t0))s)")
  tail -n "${step_tail:-4}" "$step_dir/$name.log"
  return $rc
}
