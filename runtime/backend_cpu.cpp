// CPU backend (fp32): walks the plan's op list over one arena. The arena is the only allocation; every
// tensor is arena base + plan offset. infer() allocates nothing (tests/runtime/engine_alloc_test.cpp counts).
// infer() copies the input into the arena's input tensor, which is also Engine::input_buffer(): a caller
// that writes its images there saves the copy.
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "runtime/engine.h"
#include "runtime/weights.h"

namespace edgevit {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Plan& plan, int threads, const EngineOptions& options)
      : plan_(plan), threads_(threads), profile_(options.profile_ops), fault_(options.fault) {}
  ~CpuBackend() override {
    if (arena_ != nullptr) munmap(arena_, arena_bytes_);
  }

  Status init(WeightSource& weights) {
    const Graph& g = plan_.graph;
    // One anonymous mapping: page aligned (>= the plan's 256-byte alignment), zero-filled, and
    // returned to the OS whole on destruction.
    arena_bytes_ = static_cast<size_t>(plan_.arena_bytes);
    void* p = mmap(nullptr, arena_bytes_ == 0 ? 1 : arena_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return does_not_fit("cannot allocate the " + std::to_string(arena_bytes_) + "-byte arena: " + std::strerror(errno));
    arena_ = static_cast<uint8_t*>(p);
    for (const TensorDesc& t : g.tensors) {
      if (t.kind != TensorKind::kWeight) continue;
      EV_RETURN_IF_ERROR(weights.read_f32(t.name, f32(t.id), static_cast<size_t>(t.numel())));
    }
    if (fault_ == InjectedFault::kCorruptWeightByte) {
      // Flip the exponent's top bit of one weight of the first block's qkv projection.
      for (const TensorDesc& t : g.tensors) {
        if (t.name == "blocks.0.attn.qkv.weight") {
          reinterpret_cast<uint8_t*>(f32(t.id))[3] ^= 0x40;
          break;
        }
      }
    }
    timings_.resize(g.ops.size());
    blas_names_.resize(g.ops.size());
    ran_.assign(g.ops.size(), nullptr);
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const Op& o = g.ops[i];
      timings_[i].name = o.name;
      timings_[i].kernel = o.kernel;
      timings_[i].flops = o.flops;
      timings_[i].bytes = o.bytes;
      // What serves a linear layer without libxsmm (and what the kernels names it): linear_f32 over OpenBLAS.
      if (o.kind == OpKind::kLinear) blas_names_[i] = timings_[i].kernel = "cpu.sgemm_openblas" + epilogue_suffix(o);
    }
    prepare_libxsmm();
    return Status::Ok();
  }

  Status infer(const float* input, int n) override {
    // OpenMP's thread count is per calling thread: a daemon worker or any thread other than the one that
    // created the engine would otherwise run every parallel region on all cores.
    cpu_init_threads(threads_);
    // The kernels' stack tiles must not grow the calling thread's stack mid-inference (kernels.h).
    cpu_prefault_stack(cpu_kernel_stack_bytes());
    const Graph& g = plan_.graph;
    // The input tensor lives for the whole forward and no op writes it, so a caller that filled
    // input_buffer() needs no copy; memmove for one that passes a pointer inside it.
    if (input != f32(g.input))
      std::memmove(f32(g.input), input, sizeof(float) * static_cast<size_t>(g.tensors[g.input].numel() / g.batch * n));
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      run_op(i, g.ops[i], n);
      if (profile_)
        timings_[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return Status::Ok();
  }

  const float* logits() const override { return f32(plan_.graph.logits); }
  const float* pre_logits() const override { return f32(plan_.graph.pre_logits); }
  const std::vector<OpTiming>& op_timings() const override { return timings_; }
  std::vector<std::string> executed_kernels() const override {
    std::vector<std::string> names;
    for (const std::string* n : ran_) names.push_back(n != nullptr ? *n : std::string("(not run)"));
    return names;
  }
  int64_t device_bytes() const override { return static_cast<int64_t>(arena_bytes_); }
  float* input_buffer() override { return f32(plan_.graph.input); }

 private:
  float* f32(int tensor_id) const { return reinterpret_cast<float*>(arena_ + plan_.offsets[tensor_id]); }
  const float* weight(const Op& o, size_t i) const { return i < o.weights.size() ? f32(o.weights[i]) : nullptr; }
  const float* weight_named(const Op& o, const char* name) const {
    for (int id : o.weights)
      if (plan_.graph.tensors[id].name == name) return f32(id);
    return nullptr;
  }

  // With libxsmm built in (x86-64): the fused attention's tile kernels are generated now, and every linear
  // layer's weight is re-laid out in its own arena slot for the pre-packed GEMM (kernels/cpu/gemm_packed.cpp):
  // no byte outside the plan, the plan unchanged. The JIT kernels run on the calling thread's OpenMP team
  // like linear_f32, so --threads governs them too.
  // A layer libxsmm cannot serve keeps its torch-layout weight and OpenBLAS; its profile kernel name
  // says so ("FALLBACK"), and `run -v` / `bench` print it.
  void prepare_libxsmm() {
    const Graph& g = plan_.graph;
    packed_.resize(g.ops.size());
    if (!cpu_packed_gemm_available()) return;
    cpu_init_threads(threads_);
    if (g.attention == AttentionPath::kFused) {
      const VitArch& a = g.arch;
      // One preparation per distinct query length (the class-token tail's last block has 1).
      for (size_t i = 0; i < g.ops.size(); ++i) {
        if (g.ops[i].kind != OpKind::kAttention) continue;
        const AttnParams p = attn_params_packed_qkv(g.batch, a.num_tokens(), a.num_heads, a.head_dim(), 1.f,
                                                    static_cast<int>(g.ops[i].seq_q));
        if (mha_fused_prepare(p)) timings_[i].kernel = g.ops[i].kernel + "+libxsmm_tiles";
      }
    }
    // The class-token tail's qkv GEMM: its attention reads the queries of the first seq_q tokens of each
    // image only, so its Q columns (the first embed_dim of the packed (3, H, D) row) are computed for those
    // rows alone (K and V for every token). The other Q rows of that tensor are never read.
    lead_rows_.assign(g.ops.size(), 0);
    for (const Op& att : g.ops) {
      if (att.kind != OpKind::kAttention || att.seq_q >= g.arch.num_tokens()) continue;
      for (size_t j = 0; j < g.ops.size(); ++j)
        if (g.ops[j].kind == OpKind::kLinear && g.ops[j].outputs[0] == att.inputs[0])
          lead_rows_[j] = static_cast<int>(att.seq_q);
    }
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const Op& o = g.ops[i];
      if (o.kind != OpKind::kLinear || o.weights.empty()) continue;
      const std::string why = packed_[i].init(f32(o.weights[0]), static_cast<int>(o.m), static_cast<int>(o.n),
                                              static_cast<int>(o.k), epilogue_of(o));
      timings_[i].kernel = why.empty() ? "cpu.gemm_libxsmm_packed" + epilogue_suffix(o)
                                       : blas_names_[i] + " (FALLBACK from libxsmm: " + why + ")";
      if (!why.empty()) blas_names_[i] = timings_[i].kernel;
      if (why.empty() && lead_rows_[i] > 0) {
        // The profile's FLOPs are what runs: the Q columns for the lead rows of each image only.
        timings_[i].flops =
            packed_[i].flops(static_cast<int>(o.m), g.arch.embed_dim, g.arch.num_tokens(), lead_rows_[i]);
        timings_[i].kernel += "+lead_rows";
      }
    }
  }

  static Epilogue epilogue_of(const Op& o) {
    return o.epilogue == 1 ? Epilogue::kGelu : o.epilogue == 2 ? Epilogue::kResidualAdd : Epilogue::kNone;
  }
  static std::string epilogue_suffix(const Op& o) {
    return o.epilogue == 1 ? "+bias_gelu" : o.epilogue == 2 ? "+bias_residual" : "+bias";
  }

  void run_op(size_t index, const Op& o, int n) {
    const Graph& g = plan_.graph;
    const VitArch& a = g.arch;
    ran_[index] = &timings_[index].kernel;  // ops with one kernel; linear and attention say which below
    // Row counts scale with the batch actually run; the plan was laid out for g.batch.
    const int rows = static_cast<int>(o.m / g.batch * n);
    switch (o.kind) {
      case OpKind::kIm2col:
        im2col_patches_f32(f32(o.inputs[0]), f32(o.outputs[0]), n, a.in_chans, a.img_size, a.patch_size);
        break;
      case OpKind::kLinear:
        ran_[index] = packed_[index].ready() ? &timings_[index].kernel : &blas_names_[index];
        if (packed_[index].ready()) {
          if (lead_rows_[index] > 0) {
            packed_[index].run(f32(o.inputs[0]), weight(o, 1), f32(o.outputs[0]), rows, a.embed_dim, a.num_tokens(),
                               lead_rows_[index]);
          } else {
            packed_[index].run(f32(o.inputs[0]), weight(o, 1), f32(o.outputs[0]), rows);
          }
        } else {
          linear_f32(f32(o.inputs[0]), weight(o, 0), weight(o, 1), f32(o.outputs[0]), rows, static_cast<int>(o.n),
                     static_cast<int>(o.k), epilogue_of(o));
        }
        break;
      case OpKind::kAssembleTokens:
        assemble_tokens_f32(f32(o.inputs[0]), weight_named(o, "cls_token"), weight_named(o, "reg_token"),
                            a.reg_tokens, weight_named(o, "pos_embed"), a.no_embed_class, f32(o.outputs[0]), n,
                            a.num_patches(), a.embed_dim);
        break;
      case OpKind::kLayerNorm:
        layernorm_f32(f32(o.inputs[0]), weight(o, 0), weight(o, 1), f32(o.outputs[0]), rows, static_cast<int>(o.n),
                      static_cast<float>(o.eps), threads_);
        break;
      case OpKind::kAttention: {
        float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim()));
        if (fault_ == InjectedFault::kWrongAttentionScale) scale = 1.0f;  // the TensorRT 10.7 bug, on purpose
        AttnParams p = attn_params_packed_qkv(n, a.num_tokens(), a.num_heads, a.head_dim(), scale,
                                              static_cast<int>(o.seq_q));
        const float* qkv = f32(o.inputs[0]);
        const float* k = qkv + packed_k_offset(a.num_heads, a.head_dim());
        const float* v = qkv + packed_v_offset(a.num_heads, a.head_dim());
        ran_[index] = g.attention == AttentionPath::kFused ? &timings_[index].kernel : &kExplicitName;
        if (g.attention == AttentionPath::kFused) {
          mha_fused_f32(p, qkv, k, v, f32(o.outputs[0]), threads_);
        } else {
          // The plan reserved B*H score matrices; use no more threads than that.
          const int t = std::min(threads_, n * a.num_heads);
          mha_explicit_f32(p, qkv, k, v, f32(o.outputs[0]), f32(o.scratch), t);
        }
        break;
      }
      case OpKind::kPool:
        pool_f32(f32(o.inputs[0]), f32(o.outputs[0]), n, a.num_tokens(), a.embed_dim, o.avg_pool,
                 a.num_prefix_tokens());
        break;
    }
  }

  const Plan& plan_;
  int threads_;
  bool profile_;
  InjectedFault fault_;
  uint8_t* arena_ = nullptr;  // owned: the single allocation
  size_t arena_bytes_ = 0;
  std::vector<OpTiming> timings_;
  std::vector<PackedLinear> packed_;  // per op; ready() for linear layers libxsmm serves
  std::vector<int> lead_rows_;        // per op: > 0 for the tail's qkv (Q computed for these first rows only)
  std::vector<std::string> blas_names_;       // per linear op: its name when OpenBLAS serves it
  std::vector<const std::string*> ran_;       // per op: the name of what the last infer() dispatched
  inline static const std::string kExplicitName = "cpu.mha_explicit_f32";
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const Plan& plan, WeightSource& weights, int threads,
                                                  const EngineOptions& options) {
  auto backend = std::make_unique<CpuBackend>(plan, threads, options);
  EV_RETURN_IF_ERROR(backend->init(weights));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace edgevit
