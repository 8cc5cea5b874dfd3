// runtime/plan: graph + device profile -> kernel choice (with reasons), tensor offsets, budget verdict,
// plan hash. Pure function of its inputs: the same ModelSpec, profile and options give the same Plan, byte
// for byte, on every run and every architecture (no addresses, clocks, thread counts or hash-map order).
//
// The arena (one allocation at start-up; every tensor is arena base + offset):
//
//   0 ─► ┌───────────────────────┐
//        │ weights   (persistent) │  written once at load, read-only after
//        ├───────────────────────┤
//        │ io: input, pre_logits, │  caller writes input before infer(), reads outputs after
//        │     logits [, tokens,  │  (tokens and the pooler's embedding only when asked for)
//        │     embedding]         │
//        ├───────────────────────┤
//        │ activations + scratch  │  planned: buffers whose lifetimes do not intersect share bytes
//        ├───────────────────────┤
//        │ workspace (backend)    │  CUDA: the INT8 GEMMs' split-K workspace (INT8 plans only, zeroed at
//        │                        │  start-up), then cuBLASLt's workspace (the last bytes); empty on CPU
//        └───────────────────────┘  arena_bytes
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "platform/device_profile.h"
#include "runtime/graph.h"
#include "runtime/model_spec.h"
#include "base/status.h"

namespace edgevit {

constexpr int64_t kArenaAlignment = 256;
constexpr int64_t kCudaLtWorkspaceBytes = 4 << 20;  // cuBLASLt workspace, fixed so plans are stable
// The INT8 GEMMs' split-K workspace on CUDA (kernels/cuda/gemm_i8.h, "Split-K rows" in
// docs/kernels-gemm-i8.md): one counter per output tile for 16384 tiles (gpu::kGemmI8CounterBytes, checked
// where the runtime includes both), then room for the partial tiles of the plan's largest INT8 GEMM with any
// split row (tiles of at most 128 x 128, split at most 4), capped: start-up tuning times only the split rows
// whose partial tiles fit, and the cuBLASLt IMMA candidate only where its int32 product fits in the same room
// after the counters (runtime/cuda/ops_int8_cuda.cpp, runtime/int8_gemm_tuning.h).
constexpr int64_t kCudaI8SplitCounterBytes = int64_t{16384} * 4;
constexpr int64_t kCudaI8SplitPartialsMaxBytes = int64_t{16} << 20;

struct PlanOptions {
  int batch = 0;                          // 0: the model's max_batch
  int threads = 0;                        // CPU kernel threads the engine will run (0: the profile's cpu_cores)
  std::optional<Precision> precision;     // unset: fp32 on cpu, fp16 on cuda
  std::optional<AttentionImpl> attention; // unset: the model config's runtime.attention
  // precision int8 on CUDA: the other ops' precision (fp16 | fp32; `--int8-float`). Unset: the model
  // config's runtime.int8_float. CPU plans are fp32 whatever this says.
  std::optional<Precision> int8_float;
  // Keep every token through the last block (token-pooled models otherwise run the class-token tail,
  // runtime/graph.h: same outputs, fewer FLOPs). For comparisons and debugging.
  bool all_tokens = false;
  // Give every activation its own arena bytes so each can be read after a forward (calibration and
  // `compare`, docs/int8.md). Larger arena; same results.
  bool keep_activations = false;
  // The named outputs to produce (runtime/outputs.h; `run --tokens`, the daemon's request): unset or empty:
  // the model config's runtime.outputs, else default_outputs(arch). Only these are sized: the tokens output
  // (batch, tokens, embed) exists in the arena and the staging buffers only when asked for.
  std::optional<OutputSet> outputs;
  bool tokens = false;  // add the tokens output to those (`run --tokens`, the APIs' tokens option)
};

// The outputs a plan for `spec` with `options` produces (PlanOptions::outputs), or kInvalidArgument naming an
// output the model does not have.
Result<OutputSet> planned_outputs(const ModelSpec& spec, const PlanOptions& options);

enum class MemorySpace { kHost, kDevice };
const char* to_string(MemorySpace s);  // "host" | "device"

// One thing the process holds for the engine, from Engine::create until it is destroyed (or, with
// load_only, only while create() runs).
struct MemoryLine {
  std::string name;   // "arena", "pinned input staging", "CUDA graphs (6 captured)", ...
  MemorySpace space;
  int64_t bytes = 0;
  std::string basis;  // "planned", "from the plan's shapes", "measured on ...", "estimate (...)"
  bool load_only = false;
};

// One decision an engine's kernel made at start-up: what it timed and what it pinned (CUDA: the cuBLASLt
// algorithm per GEMM and captured size, the fused-attention row). A resolved plan carries them and its hash
// covers them, so the plan names the algorithm that runs.
struct TuningRecord {
  std::string op;      // op name
  int batch = 0;       // the batch size the decision is for (a captured size on CUDA)
  std::string choice;  // what was pinned, e.g. "id 21 tile 18 stages 8 splitK 1", "flash_fwd_f16_d64_q64_w4"
  std::string detail;  // what was timed, e.g. "8 candidates: first 5.2 us, chosen 4.7 us"
};

struct Plan {
  std::string model_name;
  DeviceProfile device;
  Graph graph;
  std::vector<int64_t> offsets;  // per tensor id: byte offset from the arena base

  int64_t weights_bytes = 0;     // region sizes (aligned)
  int64_t io_bytes = 0;
  int64_t activations_bytes = 0;
  int64_t workspace_bytes = 0;   // backend workspace region + the planned scratch tensors' peak
  int64_t int8_split_workspace_bytes = 0;  // of the backend region: the INT8 split-K workspace (0 but on CUDA INT8)
  int64_t arena_bytes = 0;
  int64_t activations_lower_bound_bytes = 0;
  int64_t lower_bound_bytes = 0;  // weights + io + activation lower bound + workspace region
  int64_t context_bytes = 0;      // CUDA context + libraries, device memory (0 on cpu)
  // Everything the engine holds, line by line (arena, staging, graphs, threads, context), and the sums per
  // memory space of the lines held after load. total_bytes is what counts against the budget: the host
  // sum on a CPU, the device sum on a discrete GPU, both on a unified-memory board (Jetson).
  std::vector<MemoryLine> memory;
  int64_t host_total_bytes = 0;
  int64_t device_total_bytes = 0;
  int64_t load_peak_extra_bytes = 0;  // held only while create() runs (load_only lines)
  int64_t budget_bytes = 0;
  int64_t total_bytes = 0;
  bool fits = false;

  bool class_token_tail = false;  // the last block runs on the class token only (runtime/graph.h)
  std::string attention_kernel;   // e.g. "cpu.mha_fused_f32", "cuda.mha_fused_d64_q64"
  std::string attention_reason;
  bool attention_fallback = false;  // true when the fused kernel was wanted but cannot serve
  std::vector<std::string> notes;   // other decisions worth telling the user

  // Kernel names: a forecast from the kernel tables (`plan` on any machine), until an engine resolves them to
  // what it runs on this machine (resolve_kernels: the GEMM library, tile kernels, cuBLASLt algorithm and
  // attention row pinned at start-up); the hash covers the names either way.
  bool resolved = false;
  std::vector<TuningRecord> tuning;  // resolved plans: the engine's start-up decisions (empty: none made)

  uint64_t hash = 0;
  std::string hash_hex() const;   // 16 lowercase hex digits

  // precision int8: the scale file the arena's loader reads the calibrated activation scales from
  // (runtime/int8_scales.h; empty with per-token scales).
  std::string int8_scales_path;
  bool keep_activations = false;  // PlanOptions::keep_activations
};

// Replaces every op's kernel name with what the engine runs (`kernels`, one per op, in op order), marks the
// plan resolved and recomputes its hash. An op whose name changes keeps its reason with the forecast added
// ("...; forecast: <name>").
// `tuning`: the engine's start-up decisions (Plan::tuning); `notes`: row substitutions made on this machine
// (resolve_rows), added to Plan::notes.
void resolve_kernels(Plan* plan, const std::vector<std::string>& kernels,
                     const std::vector<TuningRecord>& tuning = {}, const std::vector<std::string>& notes = {});

// Fills plan->memory and the totals from the plan's shapes and the device profile (runtime/plan_memory.cpp).
// `threads`: the CPU kernel threads (PlanOptions::threads).
void account_memory(Plan* plan, int threads);

// Builds the plan. Errors: kUnsupported (e.g. fp16 on a cpu device), kInvalidArgument (batch out of
// range). A plan that does not fit is still returned (fits == false): the caller decides.
Result<Plan> make_plan(const ModelSpec& spec, const DeviceProfile& device, const PlanOptions& options);

// Human report: tensor table, arena chart over the op sequence, totals vs budget, verdict.
std::string format_plan_text(const Plan& plan, bool verbose);
// One JSON object (see docs/plan.md): arena_bytes, lower_bound_bytes, weights_bytes, budget_bytes, fits,
// plan_hash, attention_kernel, attention_reason, ...
std::string format_plan_json(const Plan& plan);
// "needs N bytes, budget M bytes" + the suggestion of a smaller batch or precision.
std::string does_not_fit_message(const Plan& plan);

}  // namespace edgevit
