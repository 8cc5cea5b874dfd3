// Model configs written for the self-test's tests (selftest_test, selftest_cli_test): a copy of vit-digits
// whose final LayerNorm weight holds an Inf (every inference gives non-finite outputs), and a small random
// model with head_dim 160, above the fused CPU kernel's limit (kMhaFusedMaxHeadDim).
#pragma once

#include <cmath>
#include <string>

#include "runtime/config.h"
#include "tests/runtime/checkpoint_fixtures.h"

namespace edgevit::testutil {

// Writes DIR/NAME.safetensors and DIR/NAME.yaml (fp32, batch `max_batch`); returns the YAML's path.
inline std::string write_model(const std::string& dir, const std::string& name, const VitArch& arch,
                               const TensorMap& tensors, int max_batch) {
  const std::string weights = dir + "/" + name + ".safetensors";
  EXPECT_TRUE(write_tensors(weights, tensors).ok()) << weights;
  ModelSpec spec;
  spec.name = name;
  spec.arch = arch;
  spec.weights_path = weights;
  spec.max_batch = max_batch;
  spec.preprocess.resize = arch.img_h;
  spec.preprocess.mean.assign(static_cast<size_t>(arch.in_chans), 0.5);
  spec.preprocess.std.assign(static_cast<size_t>(arch.in_chans), 0.5);
  const std::string yaml = dir + "/" + name + ".yaml";
  const Status s = save_model_spec(spec, yaml);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return yaml;
}

// vit-digits with norm.weight[0] = +Inf, named "vit-digits-inf" (so no stored expected outputs apply).
inline std::string write_nonfinite_digits_model(const std::string& dir) {
  TensorMap t = read_all_f32(source_path("config/models/vit-digits.safetensors"));
  EXPECT_TRUE(t.count("norm.weight")) << "vit-digits has no norm.weight";
  t["norm.weight"].data.at(0) = INFINITY;
  VitArch a;  // config/models/vit-digits.yaml
  a.img_h = a.img_w = 8;
  a.patch_size = 2;
  a.in_chans = 1;
  a.embed_dim = 64;
  a.depth = 4;
  a.num_heads = 2;
  a.num_classes = 10;
  return write_model(dir, "vit-digits-inf", a, t, 8);
}

// embed_dim 320 with 2 heads (head_dim 160), one block, 16x16 images of 8x8 patches (5 tokens), random
// weights: the shape of issue 21's NaN model at a size that runs in milliseconds.
inline VitArch head_dim_160_arch() {
  VitArch a;
  a.img_h = a.img_w = 16;
  a.patch_size = 8;
  a.in_chans = 3;
  a.embed_dim = 320;
  a.depth = 1;
  a.num_heads = 2;
  a.mlp_ratio = 1.0;
  a.num_classes = 4;
  return a;
}
inline std::string write_head_dim_160_model(const std::string& dir) {
  const VitArch a = head_dim_160_arch();
  return write_model(dir, "vit-hd160", a, random_checkpoint(a, 160), 2);
}

}  // namespace edgevit::testutil
