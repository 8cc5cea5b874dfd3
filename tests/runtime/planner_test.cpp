// MemoryPlanner properties over 10,000 random lifetime sets, plus plan-level guarantees for the shipped
// models: arena within 5% of the lower bound, golden arena sizes (fail on a > 3% regression, TFLM's rule),
// and identical plans on repeat.
#include <gtest/gtest.h>

#include <random>

#include "kernels/mha_variants.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/plan.h"
#include "runtime/planner.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

struct Buf {
  int64_t size;
  int first, last;
};

TEST(MemoryPlanner, RandomLifetimeSetsNeverOverlapAndAreDeterministic) {
  std::mt19937 gen(20261122);
  for (int trial = 0; trial < 10000; ++trial) {
    const int n = 1 + static_cast<int>(gen() % 24);
    const int ops = 1 + static_cast<int>(gen() % 30);
    const int64_t align = int64_t{1} << (gen() % 9);  // 1 .. 256
    std::vector<Buf> bufs;
    MemoryPlanner a(align), b(align);
    for (int i = 0; i < n; ++i) {
      const int f = static_cast<int>(gen() % ops);
      const int l = f + static_cast<int>(gen() % (ops - f));
      // Mix of tiny, equal (ties) and large sizes, and zero.
      const int64_t size = (gen() % 5 == 0) ? 1024 : (gen() % 7 == 0) ? 0 : static_cast<int64_t>(gen() % 100000);
      bufs.push_back({size, f, l});
      a.AddBuffer(size, f, l);
      b.AddBuffer(size, f, l);
    }
    const int64_t arena = a.ArenaBytes();
    ASSERT_GE(arena, a.LowerBoundBytes()) << "trial " << trial;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(a.OffsetOf(i) % align, 0) << "trial " << trial;
      ASSERT_EQ(a.OffsetOf(i), b.OffsetOf(i)) << "trial " << trial << ": same input, different plan";
      ASSERT_LE(a.OffsetOf(i) + bufs[i].size, arena);
      for (int j = i + 1; j < n; ++j) {
        const bool live_together = !(bufs[i].last < bufs[j].first || bufs[j].last < bufs[i].first);
        if (!live_together || bufs[i].size == 0 || bufs[j].size == 0) continue;
        const int64_t ai = a.OffsetOf(i), aj = a.OffsetOf(j);
        const bool disjoint = ai + bufs[i].size <= aj || aj + bufs[j].size <= ai;
        ASSERT_TRUE(disjoint) << "trial " << trial << ": buffers " << i << " and " << j << " overlap";
      }
    }
  }
}

TEST(MemoryPlanner, HandPlannedExample) {
  MemoryPlanner p(256);
  const int a = p.AddBuffer(1000, 0, 1);  // 1024 aligned
  const int b = p.AddBuffer(500, 1, 2);   // 512
  const int c = p.AddBuffer(1000, 2, 3);  // 1024: may reuse a's bytes
  EXPECT_EQ(p.OffsetOf(a), 0);
  EXPECT_EQ(p.OffsetOf(c), 0);
  EXPECT_EQ(p.OffsetOf(b), 1024);
  EXPECT_EQ(p.ArenaBytes(), 1536);
  EXPECT_EQ(p.LowerBoundBytes(), 1536);
}

// Golden arena sizes per shipped model on host-cpu (fp32) and orin-nx-16gb (fp16), batch 1 and 8.
// Update deliberately when the graph changes; a > 3% growth fails.
struct GoldenArena {
  const char* model;
  const char* device;
  int batch;
  int64_t arena_bytes;
};
constexpr GoldenArena kGoldenArenas[] = {
#include "tests/data/golden_arena_sizes.inc"
};

TEST(Plan, ShippedModelsNearLowerBoundDeterministicAndGolden) {
  const std::string dev_dir = testutil::source_path("config/devices");
  for (const GoldenArena& g : kGoldenArenas) {
    SCOPED_TRACE(std::string(g.model) + " on " + g.device + " batch " + std::to_string(g.batch));
    auto spec = load_model_spec(testutil::source_path(std::string("config/models/") + g.model + ".yaml"));
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    auto dev = find_device_profile(g.device, {dev_dir});
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    PlanOptions o;
    o.batch = g.batch;
    auto p1 = make_plan(*spec, *dev, o);
    auto p2 = make_plan(*spec, *dev, o);
    ASSERT_TRUE(p1.ok()) << p1.status().to_string();
    EXPECT_EQ(p1->hash, p2->hash);
    EXPECT_EQ(format_plan_json(*p1), format_plan_json(*p2));
    EXPECT_GE(p1->arena_bytes, p1->lower_bound_bytes);
    EXPECT_LE(static_cast<double>(p1->activations_bytes), 1.05 * static_cast<double>(p1->activations_lower_bound_bytes));
    EXPECT_LE(static_cast<double>(p1->arena_bytes), 1.05 * static_cast<double>(p1->lower_bound_bytes));
    EXPECT_LE(static_cast<double>(p1->arena_bytes), 1.03 * static_cast<double>(g.arena_bytes))
        << "arena grew by more than 3% over the golden size";
    // No two tensors live at the same op overlap in the arena (all regions, weights included).
    const Graph& gr = p1->graph;
    for (size_t i = 0; i < gr.tensors.size(); ++i)
      for (size_t j = i + 1; j < gr.tensors.size(); ++j) {
        const TensorDesc &a = gr.tensors[i], &b = gr.tensors[j];
        if (a.last_op < b.first_op || b.last_op < a.first_op) continue;
        if (gr.logits == gr.pre_logits && (static_cast<int>(i) == gr.logits || static_cast<int>(j) == gr.logits)) continue;
        const int64_t ao = p1->offsets[a.id], bo = p1->offsets[b.id];
        ASSERT_TRUE(ao + a.bytes() <= bo || bo + b.bytes() <= ao) << a.name << " overlaps " << b.name;
        ASSERT_EQ(ao % kArenaAlignment, 0);
      }
  }
}

TEST(Plan, DoesNotFitIsReportedWithExactBytesAndASuggestion) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("orin-nano-4gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  PlanOptions o;
  o.batch = 4096;
  o.precision = Precision::kFp32;
  auto p = make_plan(*spec, *dev, o);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  const std::string msg = does_not_fit_message(*p);
  EXPECT_NE(msg.find("needs " + std::to_string(p->total_bytes) + " bytes, budget " + std::to_string(p->budget_bytes) + " bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("smaller batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp16"), std::string::npos) << msg;
}

TEST(Plan, Fp16OnCpuIsUnsupported) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  PlanOptions o;
  o.precision = Precision::kFp16;
  auto p = make_plan(*spec, *dev, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnsupported);
}

TEST(Plan, UnsupportedHeadDimFallsBackLoudlyOnOrin) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-micro.yaml"));  // head_dim 16
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  auto p = make_plan(*spec, *dev, {});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->attention_fallback);
  EXPECT_EQ(p->graph.attention, AttentionPath::kExplicit);
  EXPECT_NE(p->attention_reason.find("head_dim 16"), std::string::npos) << p->attention_reason;
  EXPECT_NE(format_plan_text(*p, false).find("FALLBACK"), std::string::npos);

  auto tiny = load_model_spec(testutil::source_path("config/models/vit-tiny-patch16-224.yaml"));  // head_dim 64
  ASSERT_TRUE(tiny.ok());
  auto pt = make_plan(*tiny, *dev, {});
  ASSERT_TRUE(pt.ok());
  EXPECT_FALSE(pt->attention_fallback);
  EXPECT_EQ(pt->graph.attention, AttentionPath::kFused);
  EXPECT_EQ(pt->graph.precision, Precision::kFp16);
}

// The class-token tail's attention (one query per image) is judged on its own grid: on Orin NX at batch 1,
// 12 heads x 1 query tile over 8 SMs, not the 197-query grid of the other blocks.
TEST(Plan, ClassTokenTailAttentionIsChosenForItsOwnGrid) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-base-patch16-224.yaml"));
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("orin-nx-16gb", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  PlanOptions o;
  o.batch = 1;
  auto p = make_plan(*spec, *dev, o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->class_token_tail);
  const VitArch& a = p->graph.arch;
  int tail = 0, full = 0;
  std::string tail_kernel, full_kernel;
  for (const Op& op : p->graph.ops) {
    if (op.kind != OpKind::kAttention) continue;
    const MhaGrid grid{1, a.num_heads, static_cast<int>(op.seq_q), dev->sm_count};
    const MhaChoice m = choose_mha(dev->compute_capability, dev->smem_per_block_optin_bytes, a.head_dim(), true,
                                   false, &grid);
    ASSERT_TRUE(m.fused) << m.reason;
    EXPECT_EQ(op.kernel, std::string("cuda.") + m.variant->name) << op.name;
    EXPECT_EQ(op.reason, m.reason) << op.name;
    (op.seq_q == 1 ? tail : full) += 1;
    (op.seq_q == 1 ? tail_kernel : full_kernel) = op.kernel;
  }
  // The comparison above has teeth only if the two grids choose differently: a plan that judged the tail
  // with the full blocks' grid must fail it.
  EXPECT_EQ(tail, 1);
  EXPECT_EQ(full, a.depth - 1);
  EXPECT_NE(tail_kernel, full_kernel);
  EXPECT_EQ(p->graph.ops.back().kind, OpKind::kLinear);  // the head; the tail's ops came before it
}

}  // namespace
}  // namespace edgevit
