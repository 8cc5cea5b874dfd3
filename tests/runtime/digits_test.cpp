// The embedded default model end to end, through the path a user's image takes: every test-split digit
// is encoded as a PNG, decoded and preprocessed by runtime/inputs (decode_image), and run through the
// engine. Predictions must equal PyTorch's exactly, accuracy must be >= 97%, and the logits must be within
// the fp32 end-to-end tolerance of PyTorch's.
#include <gtest/gtest.h>
#include <stb_image_write.h>

#include <cstring>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/safetensors.h"
#include "tests/runtime/digits_data.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

using digits::read;

void append_bytes(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(ctx);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

TEST(Digits, EveryTestImageThroughThePngPathMatchesPyTorch) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  ASSERT_TRUE(dev.ok());
  auto split = SafetensorsFile::open(testutil::source_path("tests/data/digits/test_split.safetensors"));
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  const auto pixels = read(*split, "pixels"), input = read(*split, "input"), labels = read(*split, "labels"),
             logits = read(*split, "logits"), preds = read(*split, "predictions");
  const int n = static_cast<int>(labels.size());
  ASSERT_EQ(n, 360);

  EngineOptions o;
  o.plan.batch = 1;
  o.threads = 2;
  auto engine = Engine::create(*spec, *dev, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;

  std::vector<float> ours(static_cast<size_t>(n) * 10);
  std::vector<float> x(64);
  int correct = 0, same_pred = 0, bit_exact_inputs = 0;
  for (int i = 0; i < n; ++i) {
    uint8_t px[64];
    for (int j = 0; j < 64; ++j) px[j] = static_cast<uint8_t>(pixels[i * 64 + j]);
    std::vector<uint8_t> png;
    ASSERT_NE(stbi_write_png_to_func(append_bytes, &png, 8, 8, 1, px, 8), 0);
    ASSERT_TRUE(decode_image(png.data(), png.size(), "test image " + std::to_string(i), *spec, x.data()).ok());
    bit_exact_inputs += std::memcmp(x.data(), input.data() + i * 64, 64 * sizeof(float)) == 0;
    ASSERT_TRUE(e.infer(x.data(), 1).ok());
    std::memcpy(ours.data() + i * 10, e.logits(), 10 * sizeof(float));
    const int p = testutil::argmax_rows(e.logits(), 1, 10)[0];
    same_pred += p == static_cast<int>(preds[i]);
    correct += p == static_cast<int>(labels[i]);
  }
  EXPECT_EQ(bit_exact_inputs, n) << "PNG -> preprocessing must reproduce the training inputs bit for bit";
  EXPECT_EQ(same_pred, n) << "predictions differ from PyTorch's";
  const double acc = static_cast<double>(correct) / n;
  EXPECT_GE(acc, 0.97);
  const double err = testutil::rel_error(ours.data(), logits.data(), logits.size());
  EXPECT_LE(err, tol::kFp32EndToEnd);
  std::printf("digits: accuracy %.4f (%d/%d), logits rel err vs PyTorch %.3g\n", acc, correct, n, err);
}

TEST(Digits, ShippedDemoPngsAreClassifiedAsTheirDigit) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  ASSERT_TRUE(spec.ok());
  auto dev = find_device_profile("host-cpu", {testutil::source_path("config/devices")});
  auto engine = Engine::create(*spec, *dev, {});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<float> x(64);
  for (int d = 0; d < 10; ++d) {
    const std::string path = testutil::source_path("tests/data/digits/digit-" + std::to_string(d) + ".png");
    ASSERT_TRUE(load_image_file(path, *spec, x.data()).ok()) << path;
    ASSERT_TRUE((*engine)->infer(x.data(), 1).ok());
    EXPECT_EQ(testutil::argmax_rows((*engine)->logits(), 1, 10)[0], d) << path;
  }
}

}  // namespace
}  // namespace edgevit
