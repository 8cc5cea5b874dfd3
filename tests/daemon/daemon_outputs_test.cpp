// The daemon's named output sections (docs/protocol.md "Output sections"): a request with want_embedding gets
// the embedding of each image (the in-process engine's, per image), want_tokens on a model whose config does
// not list tokens is refused as no_such_output, and a model config with runtime.outputs including tokens
// serves them (the class token's row of the tokens is the embedding of a token-pooled model); `edgevit client
// --embedding` prints each embedding's L2 norm and first values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "base/tolerances.h"
#include "serving/client.h"
#include "tests/daemon/daemon_fixture.h"

namespace edgevit::daemon {
namespace {

using namespace testing;

class DaemonOutputs : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// The digits model with every output, tokens included (runtime.outputs), saved beside the test's socket.
std::string digits_with_tokens(const std::string& dir) {
  auto spec = load_model_spec(digits_model());
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  spec->outputs = OutputSet().add(OutputKind::kLogits).add(OutputKind::kEmbedding).add(OutputKind::kPreLogits)
                      .add(OutputKind::kTokens);
  const std::string path = dir + "/digits-tokens.yaml";
  EXPECT_TRUE(save_model_spec(*spec, path).ok());
  return path;
}

// The in-process engine's embedding of one image (batch 1, as the daemon runs a lone request).
std::vector<float> reference_embedding(const std::vector<float>& x) {
  auto spec = load_model_spec(digits_model());
  auto dev = find_device_profile("host-cpu", {devices_dir()});
  EngineOptions eo;
  eo.plan.batch = 8;
  eo.threads = 1;
  auto e = Engine::create(*spec, *dev, eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok() || !(*e)->infer(x.data(), 1).ok()) return {};
  return std::vector<float>((*e)->embedding(), (*e)->embedding() + 64);
}

TEST_F(DaemonOutputs, EmbeddingSectionMatchesTheEngine) {
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err)) << err.message;
  const auto x = testutil::random_floats(kDigitsPerImage, 5);
  client::InferAnswer a;
  ASSERT_TRUE(c.infer_tensor(x.data(), kDigitsDims, 3, 1, protocol::kFlagWantLogits | protocol::kFlagWantEmbedding,
                             &a, &err))
      << err.message;
  EXPECT_EQ(a.logits_per_image, 10);
  ASSERT_EQ(a.outputs.size(), 1u);
  EXPECT_EQ(a.outputs[0].name, "embedding");
  EXPECT_EQ(a.outputs[0].dims, std::vector<uint32_t>{64});
  ASSERT_EQ(a.outputs[0].values.size(), 64u);
  const std::vector<float> want = reference_embedding(x);
  ASSERT_EQ(want.size(), 64u);
  EXPECT_LE(testutil::rel_error(a.outputs[0].values.data(), want.data(), 64), tol::kFp32EndToEnd);

  // Tokens were not asked for in the model config: refused, and the connection stays usable.
  EXPECT_FALSE(c.infer_tensor(x.data(), kDigitsDims, 3, 1, protocol::kFlagWantTokens, &a, &err));
  EXPECT_EQ(err.code, static_cast<uint32_t>(protocol::ErrorCode::kNoSuchOutput)) << err.message;
  EXPECT_NE(err.message.find("runtime.outputs"), std::string::npos) << err.message;
  EXPECT_TRUE(c.infer_tensor(x.data(), kDigitsDims, 3, 1, 0u, &a, &err)) << err.message;
  EXPECT_TRUE(a.outputs.empty());
}

TEST_F(DaemonOutputs, TokensSectionFromAModelThatListsThem) {
  DaemonConfig cfg = digits_config(dir_, 4);
  cfg.model = digits_with_tokens(dir_);
  ServerOptions so = server_options(cfg);
  so.default_model_path = cfg.model;
  auto server = Server::start(so);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  client::Connection c;
  client::Error err;
  ASSERT_TRUE(c.connect(cfg.socket_path, &err)) << err.message;
  std::vector<float> x = testutil::random_floats(2 * kDigitsPerImage, 9);
  const uint32_t dims[4] = {2, 1, 8, 8};
  client::InferAnswer a;
  ASSERT_TRUE(c.infer_tensor(x.data(), dims, 4, 1, protocol::kFlagWantEmbedding | protocol::kFlagWantTokens, &a, &err))
      << err.message;
  ASSERT_EQ(a.outputs.size(), 2u);
  EXPECT_EQ(a.outputs[0].name, "embedding");
  EXPECT_EQ(a.outputs[1].name, "tokens");
  ASSERT_EQ(a.outputs[1].dims.size(), 2u);
  const uint32_t tokens = a.outputs[1].dims[0];
  EXPECT_EQ(a.outputs[1].dims[1], 64u);
  EXPECT_GT(tokens, 1u);
  ASSERT_EQ(a.outputs[1].values.size(), 2u * tokens * 64);
  for (size_t i = 0; i < 2; ++i)
    for (size_t v = 0; v < 64; ++v)
      EXPECT_EQ(a.outputs[0].values[i * 64 + v], a.outputs[1].values[i * tokens * 64 + v]) << "image " << i;
}

TEST_F(DaemonOutputs, ClientPrintsTheEmbeddingNorm) {
  DaemonConfig cfg = digits_config(dir_, 8);
  auto server = Server::start(server_options(cfg));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ClientOptions o;
  o.socket_path = cfg.socket_path;
  o.inputs = {testutil::source_path("tests/data/digits/digit-3.png")};
  o.topk = 1;
  o.embedding = true;
  std::ostringstream out;
  const Status s = run_client(o, out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_NE(out.str().find("embedding [64]: L2 norm "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("first values ["), std::string::npos) << out.str();
  o.embedding = false;
  o.tokens = true;
  std::ostringstream refused;
  const Status t = run_client(o, refused);
  EXPECT_EQ(t.code(), StatusCode::kUnsupported) << t.to_string();
  EXPECT_NE(t.message().find("no_such_output"), std::string::npos) << t.to_string();
}

}  // namespace
}  // namespace edgevit::daemon
