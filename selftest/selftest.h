// edgevit-selftest as a library: what an engineer runs on a freshly flashed board and what the daemon runs
// at start-up. run_selftest() reports the platform (device, power mode, clocks, memory), the plan's
// decisions for each configured model (fused or unfused attention and why, per-op kernels), and runs checks:
//
//   kernel.*   attention (the kernel the CPU plan runs, fused, explicit; CUDA fused/unfused on a CUDA build
//              with a GPU), LayerNorm and the three GEMM epilogues at each model's real shapes with fresh
//              random inputs, against the float64 references of kernels/cpu, bounds from
//              base/tolerances.h
//   e2e.*      the model against stored expected outputs (vit-digits: the 360-image test split; --quick: the
//              first batch): predictions identical, logits within the end-to-end tolerance
//   numerics.* every output (logits, pre_logits) of an inference on the model's inputs is finite, and
//              infer() said ok
//   memory.*   the plan fits the budget and the memory available now; what the engine's create() and first
//              infer() really allocated (heap, mappings, CUDA device memory, counted; alloc_counter.h) is the
//              plan's arena as one allocation, and at most unplanned_bytes_bound() more than the plan's total;
//              zero heap allocations over N inferences, outputs bit-identical over N inferences
//   int8.*     the model calibrated in memory on its calibration images and run at INT8 on the host CPU, against
//              fp32 on those images: logits within tol::kInt8EndToEnd, top-1 agreement >= 99% (docs/int8.md;
//              vit-digits: tests/data/digits/calib_split.safetensors; skipped for models without such images)
//   gpio.*     GPIO loopback when configured (skipped, with the reason, when not)
//
// Every check records what it measured and the bound it was held to, so a failure reads
// "FAIL kernel.attention.fused_vs_ref (vit-digits): rel_err 3.1e-01 > 1e-05".
// Exit codes of the binary (selftest_exit_code): 0 all pass, 1 a check failed, 2 could not run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "platform/detect.h"
#include "platform/device_profile.h"
#include "runtime/plan.h"

namespace edgevit {
class GpioBackend;  // platform/gpio.h
}

namespace edgevit::selftest {

// Test-only faults proving that the checks can fail (hidden flag --inject-fault of edgevit-selftest).
//   kAttentionScale: the attention kernels under test get scale 1 instead of 1/sqrt(D), and the engine runs
//                    with InjectedFault::kWrongAttentionScale.
//   kCorruptWeight:  the engine runs with InjectedFault::kCorruptWeightByte (one exponent bit of one weight).
//   kUnplannedAllocation: while the engine is created and runs its first inference, the self-test itself
//                    maps unplanned_fault_bytes() and allocates as many on the heap (touched), and holds both
//                    for the engine's lifetime: more host memory than every line of the plan together, which
//                    no plan accounts for, as an engine that allocated outside its plan would hold
//                    (memory.arena_single_allocation cannot tell who allocated inside its window, which is
//                    the point).
enum class Fault { kNone, kAttentionScale, kCorruptWeight, kUnplannedAllocation };
// memory.arena_single_allocation: the bytes an engine may hold beyond its plan's total (the Plan's own
// copy, op tables, libxsmm's generated code, allocator rounding), for a plan total of `planned` bytes.
int64_t unplanned_bytes_bound(int64_t planned);
// Fault::kUnplannedAllocation's size, each of its two blocks: together they exceed the plan's host lines
// plus the bound by 1 MiB, whatever else the engine allocated.
int64_t unplanned_fault_bytes(const Plan& plan);

// "attention-scale" | "corrupt-weight" | "unplanned-allocation" -> Fault; kInvalidArgument otherwise
// ("none" is kNone).
Result<Fault> parse_fault(const std::string& name);

// Where platform facts are read from; every path is injectable so tests can fake a Jetson.
struct PlatformPaths {
  DetectOptions detect;                                    // device tree, /proc/meminfo, /proc/cpuinfo, CUDA
  std::string nvpmodel_conf = "/etc/nvpmodel.conf";        // "< POWER_MODEL ID=0 NAME=MAXN >" lines
  std::string nvpmodel_status = "/var/lib/nvpmodel/status";  // "pmode:0002 ..." (current mode)
  // Directories whose entries are devfreq devices (each with cur_freq, min_freq, max_freq in Hz). Jetson:
  // /sys/devices/gpu.0/devfreq/17000000.ga10b; GPU devices are those named gpu*, ga10b, gv11b, gp10b.
  std::vector<std::string> devfreq_dirs = {"/sys/devices/gpu.0/devfreq", "/sys/class/devfreq"};
  std::string cpu_sysfs = "/sys/devices/system/cpu";       // cpuN/cpufreq/scaling_cur_freq (kHz)
};

struct ClockInfo {
  std::string name;      // "gpu 17000000.ga10b", "cpu0"
  std::string path;      // the file cur_hz was read from
  int64_t cur_hz = 0;
  int64_t min_hz = 0;    // 0 when not readable
  int64_t max_hz = 0;
};

struct PlatformInfo {
  Detection detected;                // the profile detection chose and why
  std::string power_mode;            // "MAXN (id 0, from /var/lib/nvpmodel/status)" or "" when unknown
  std::string power_mode_source;     // what was read, or why nothing was
  std::vector<ClockInfo> clocks;     // GPU devfreq devices, then CPU cores
  int64_t mem_total_bytes = 0;       // /proc/meminfo MemTotal (0: unreadable)
  int64_t mem_available_bytes = 0;   // MemAvailable
  std::string meminfo_source;
};

// Reads everything PlatformInfo holds; never fails for a missing optional file (it says so instead).
// Detection failing (no profile directories, unreadable profile) is an error: the self-test cannot run.
Result<PlatformInfo> read_platform_info(const std::vector<std::string>& device_dirs, const PlatformPaths& paths);

// One kernel choice of a plan, grouped over ops with the same kernel and reason.
struct OpChoice {
  std::string op_kind;   // "linear", "attention", ...
  std::string kernel;
  std::string reason;
  int count = 0;         // ops using it
  std::string first_op;  // e.g. "blocks.0.attn.qkv"
};

// The plan's decisions for one model on one device profile.
struct ModelDecision {
  std::string model;
  std::string config_path;
  std::string device;        // profile name
  std::string role;          // "detected device" or "execution device (...why...)"
  std::string precision;
  std::string attention_kernel;
  std::string attention_reason;
  bool attention_fallback = false;
  std::vector<OpChoice> ops;
  int batch = 0;
  int64_t arena_bytes = 0;
  int64_t total_bytes = 0;
  int64_t budget_bytes = 0;
  bool fits = false;
  std::string plan_hash;
};

enum class Outcome { kPass, kFail, kSkip };
const char* to_string(Outcome o);  // "pass" | "fail" | "skip"

struct CheckResult {
  std::string name;      // stable id, e.g. "kernel.attention.fused_vs_ref"
  std::string model;     // the model it ran for, or "" (platform-wide checks)
  Outcome outcome = Outcome::kSkip;
  std::string measured;  // "rel_err 3.1e-07", "0 allocations"
  std::string bound;     // "<= 1e-05"
  std::string detail;    // shapes, seed, the skip reason
  double seconds = 0;
};

// A GPIO loopback: an output line wired to an input line on the same chip.
struct GpioLoopback {
  std::string chip;   // "gpiochip0" or a path; empty: not configured
  int out_line = -1;
  int in_line = -1;
};

struct SelftestOptions {
  std::vector<std::string> models;        // model config paths or names; empty: vit-digits
  std::string device = "auto";            // profile name/path, or "auto" (detect)
  std::vector<std::string> config_dirs;   // base config dirs (hold devices/, models/); empty: defaults
  std::string testdata_dir;               // holds digits/test_split.safetensors; empty: searched
  bool quick = false;                     // < 5 s on a board: subsets, fewer runs
  int threads = 0;                        // CPU threads (0 = all cores)
  uint64_t seed = 0;                      // random inputs; 0 = fresh (std::random_device), reported
  int repeat_runs = 0;                    // inferences for memory.* (0: 20 quick, 200 full)
  GpioLoopback gpio;
  Fault fault = Fault::kNone;             // test-only
  PlatformPaths paths;
};

struct SelftestReport {
  PlatformInfo platform;
  std::vector<ModelDecision> decisions;
  std::vector<CheckResult> checks;
  std::vector<std::string> notes;  // things worth telling (fallbacks, execution device chosen, counters)
  uint64_t seed = 0;
  bool quick = false;
  std::string fault;               // "" or the injected fault's name
  double seconds = 0;

  int count(Outcome o) const;
  bool passed() const { return count(Outcome::kFail) == 0; }
};

// Runs every check. A Status error means the self-test could not run (a model config or its weights are
// missing, the expected outputs of a model that has some are missing, no device profile): exit 2.
// Failing checks are not errors: they are in the report (exit 1).
Result<SelftestReport> run_selftest(const SelftestOptions& options);

// gpio.loopback on `backend`: drives `out_line` through kLoopbackToggles level changes and requires an edge on
// `in_line` within kLoopbackTimeoutMs of each. run_selftest uses the libgpiod backend.
constexpr int kLoopbackToggles = 4;
constexpr int kLoopbackTimeoutMs = 200;
CheckResult run_gpio_loopback_on(GpioBackend& backend, const GpioLoopback& g);

std::string format_report_text(const SelftestReport& report);
std::string format_report_json(const SelftestReport& report);

// 0 all checks passed (skips allowed), 1 a check failed, 2 could not run.
int selftest_exit_code(const Result<SelftestReport>& result);

}  // namespace edgevit::selftest
