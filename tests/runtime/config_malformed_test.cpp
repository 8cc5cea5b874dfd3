// Malformed model configs: each must give kConfigError naming the file, the key path and (where a line
// is meaningful) the line, quickly. Files live in tests/data/configs/malformed/; the hostile ones (bombs,
// deep nests, binary, huge) are generated here. Both tables are data: add a row to add a case.
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/config.h"
#include "base/yaml_guard.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

struct FileCase {
  const char* file;      // under tests/data/configs/malformed/
  const char* key_path;  // "" when the error is about the document, not a key
  const char* reason;    // fragment of the reason
  int line;              // 1-based line the message must name; 0: no line check
};

// clang-format off
const FileCase kFileCases[] = {
  {"empty.yaml",                  "",                            "empty document", 1},
  {"only_comment.yaml",           "",                            "empty document", 1},
  {"top_level_list.yaml",         "",                            "top level must be a mapping of keys, got a list", 1},
  {"top_level_scalar.yaml",       "",                            "top level must be a mapping of keys, got a scalar", 1},
  {"unknown_top_key.yaml",        "colour",                      "unknown key (allowed here: name, architecture", 14},
  {"unknown_nested_key.yaml",     "architecture.depthh",         "unknown key", 7},
  {"string_for_int.yaml",         "architecture.img_size",       "expected an integer, got 'thirty-two'", 3},
  {"quoted_int.yaml",             "architecture.img_size",       "expected an integer, got the string '32'", 3},
  {"float_for_int.yaml",          "architecture.depth",          "expected an integer, got the number 2.5", 6},
  {"list_for_map.yaml",           "architecture",                "expected a mapping, got a list", 2},
  {"map_for_int.yaml",            "architecture.embed_dim",      "expected an integer, got a mapping", 5},
  {"null_value.yaml",             "architecture.embed_dim",      "expected an integer, got null", 5},
  {"negative_depth.yaml",         "architecture.depth",          "-1 is out of range [1, 256]", 6},
  {"zero_patch.yaml",             "architecture.patch_size",     "0 is out of range [1, 4096]", 4},
  {"int_overflow.yaml",           "architecture.img_size",       "out of range", 3},
  {"embed_not_divisible.yaml",    "architecture.num_heads",      "embed_dim 64 is not divisible by num_heads 5", 7},
  {"img_not_divisible.yaml",      "architecture.patch_size",     "img_size 32 is not divisible by patch_size 7", 4},
  {"mean_length.yaml",            "preprocess.mean",             "has 2 values, expected in_chans = 3", 12},
  {"mean_not_list.yaml",          "preprocess.mean",             "expected a list of numbers, got a scalar", 12},
  {"in_chans_without_mean.yaml",  "preprocess.mean",             "required when architecture.in_chans is 1", 0},
  {"std_zero.yaml",               "preprocess.std[1]",           "0 is out of range (0", 13},
  {"resize_too_small.yaml",       "preprocess.resize",           "must be >= architecture.img_size 32", 12},
  {"img_hw_not_divisible.yaml",   "architecture.patch_size",     "img_size [48, 30]: width 30 is not divisible by patch_size 8", 4},
  {"img_size_three.yaml",         "architecture.img_size",       "expected N or [height, width], two integers; got a list of 3", 3},
  {"img_size_float.yaml",         "architecture.img_size",       "expected N or [height, width], two integers", 3},
  {"img_size_string_item.yaml",   "architecture.img_size[1]",    "expected a finite number, got 'big'", 3},
  {"img_size_zero_side.yaml",     "architecture.img_size[0]",    "0 is out of range [1.0, 4096.0]", 3},
  {"pos_embed_grid_three.yaml",   "architecture.pos_embed_grid", "expected [rows, columns], two positive integers", 4},
  {"pos_embed_grid_float.yaml",   "architecture.pos_embed_grid", "expected [rows, columns], two positive integers", 4},
  {"pos_embed_grid_zero.yaml",    "architecture.pos_embed_grid[0]", "0 is out of range [1.0, 4096.0]", 4},
  {"resize_nonsquare_too_small.yaml", "preprocess.resize",       "must be >= 48, the longer side of architecture.img_size [48, 32]", 12},
  {"keep_ratio_too_small.yaml",   "preprocess.resize_keep_ratio", "must be >= architecture.img_size [48, 32] side by side", 12},
  {"resize_two_kinds.yaml",       "preprocess.resize_keep_ratio", "give one of resize, resize_exact, resize_keep_ratio and crop_pct", 13},
  {"bad_pool.yaml",               "architecture.global_pool",    "'max' is not one of: token, avg", 9},
  {"bad_act.yaml",                "architecture.act",            "'relu' is not one of: gelu", 9},
  {"bad_precision.yaml",          "runtime.precision",           "'int4' is not one of: fp32, fp16", 15},
  {"bool_yes.yaml",               "architecture.qkv_bias",       "expected true or false, got 'yes'", 9},
  {"nan_eps.yaml",                "architecture.layer_norm_eps", "expected a finite number, got '.nan'", 9},
  {"max_batch_too_big.yaml",      "runtime.max_batch",           "100000 is out of range [1, 4096]", 15},
  {"token_pool_without_cls.yaml", "architecture.global_pool",    "needs class_token: true", 10},
  {"duplicate_key.yaml",          "architecture.depth",          "duplicate key (first given at line 6)", 8},
  {"missing_num_classes.yaml",    "architecture.num_classes",    "required key is missing", 0},
  {"missing_weights.yaml",        "weights",                     "required section is missing", 0},
  {"tab_indent.yaml",             "",                            "tab character in indentation", 6},
  {"syntax_error.yaml",           "",                            "YAML syntax error", 0},
  {"two_documents.yaml",          "",                            "more than 1 YAML document", 0},
  {"anchor_alias.yaml",           "",                            "anchor not allowed", 13},
};
// clang-format on

constexpr double kMaxMsPerFile = 200;  // plain malformed files: generous, they are tiny
constexpr double kMaxMsHostile = 100;  // bombs and nests: the guard must answer without parsing

std::string malformed_path(const char* file) {
  return testutil::source_path(std::string("tests/data/configs/malformed/") + file);
}

class MalformedFileTest : public ::testing::TestWithParam<FileCase> {};

TEST_P(MalformedFileTest, GivesConfigErrorNamingFileKeyAndLine) {
  const FileCase& c = GetParam();
  const std::string path = malformed_path(c.file);
  ASSERT_TRUE(fs::exists(path)) << path;
  const auto start = std::chrono::steady_clock::now();
  auto spec = load_model_spec(path);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(spec.ok()) << c.file << " loaded";
  const std::string& m = spec.status().message();
  EXPECT_EQ(spec.status().code(), StatusCode::kConfigError) << m;
  EXPECT_NE(m.find(path), std::string::npos) << m;
  if (*c.key_path != '\0') {
    EXPECT_NE(m.find(std::string(": ") + c.key_path + ": "), std::string::npos) << m;
  }
  EXPECT_NE(m.find(c.reason), std::string::npos) << m;
  if (c.line > 0) {
    EXPECT_NE(m.find(path + ":" + std::to_string(c.line) + ":"), std::string::npos) << m;
  }
  EXPECT_LT(ms, kMaxMsPerFile) << c.file;
}

INSTANTIATE_TEST_SUITE_P(Files, MalformedFileTest, ::testing::ValuesIn(kFileCases),
                         [](const ::testing::TestParamInfo<FileCase>& info) {
                           std::string name = fs::path(info.param.file).stem().string();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(MalformedFiles, EveryFileInTheDirectoryHasARow) {
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(testutil::source_path("tests/data/configs/malformed"))) {
    ++files;
    const std::string name = entry.path().filename().string();
    bool found = false;
    for (const auto& c : kFileCases) found = found || name == c.file;
    EXPECT_TRUE(found) << name << " has no expectation in kFileCases";
  }
  // An empty (or missing-on-checkout) directory would pass the loop above vacuously.
  EXPECT_EQ(files, std::size(kFileCases));
}

// ---- generated hostile inputs --------------------------------------------------------------------------

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string indentation_nest(int depth) {
  std::string out;
  for (int i = 0; i < depth; ++i) out += std::string(static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  return out;
}

// "-" entries, each indented one more than the last: a sequence nested `depth` deep.
std::string sequence_nest(int depth) {
  std::string out;
  for (int i = 0; i < depth; ++i) out += std::string(static_cast<size_t>(i), ' ') + "-\n";
  return out;
}

// The classic "billion laughs": 9 levels of 9 aliases, about 300 bytes, 9^9 nodes if expanded.
std::string billion_laughs() {
  std::string out = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  const char* names = "abcdefghi";
  for (int i = 1; i < 9; ++i) {
    const char prev = names[i - 1];
    const char cur = names[i];
    out += std::string(1, cur) + ": &" + cur + " [";
    for (int k = 0; k < 9; ++k) out += std::string(k ? "," : "") + "*" + prev;
    out += "]\n";
  }
  return out;
}

struct TextCase {
  const char* name;
  std::function<std::string()> make;
  const char* reason;
  int line;  // 0: no line check
};

const std::vector<TextCase>& text_cases() {
  static const std::vector<TextCase> cases = {
      {"deep_flow_sequences", [] { return "a: " + repeat("[", 20000) + repeat("]", 20000) + "\n"; },
       "nesting deeper than 64 levels", 1},
      {"deep_flow_maps", [] { return "a: " + repeat("{b: ", 20000) + "1" + repeat("}", 20000) + "\n"; },
       "nesting deeper than 64 levels", 1},
      {"deep_unclosed_brackets", [] { return repeat("[", 20000); }, "nesting deeper than 64 levels", 1},
      // Indentation nests grow quadratically: 1400 levels is the deepest that fits in 1 MiB.
      {"deep_indentation", [] { return indentation_nest(1400); }, "nesting deeper than 64 levels", 65},
      {"deep_sequence_lines", [] { return "a:\n" + sequence_nest(1400); }, "nesting deeper than 64 levels", 0},
      {"deep_block_sequences", [] { return "a:\n" + repeat("- ", 20000) + "x\n"; },
       "nesting deeper than 64 levels", 2},
      {"deep_quoted_keys", [] { return repeat("[\"x\", ", 20000) + "\n"; }, "nesting deeper than 64 levels", 1},
      {"billion_laughs", billion_laughs, "anchor not allowed", 1},
      {"self_reference", [] { return std::string("a: &a [*a]\n"); }, "anchor not allowed", 1},
      {"alias_only", [] { return std::string("a: *undefined\n"); }, "alias not allowed", 1},
      {"anchor_after_tag", [] { return std::string("a: !!seq &x [1]\nb: *x\n"); }, "anchor not allowed", 1},
      {"nul_byte", [] { return std::string("name: a\0b\n", 10); }, "NUL byte", 1},
      {"control_char", [] { return std::string("name: a\x07\n"); }, "control character 0x07", 1},
      {"invalid_utf8", [] { return std::string("name: \xc3\x28\n"); }, "invalid UTF-8", 1},
      {"overlong_utf8", [] { return std::string("name: \xc0\xaf\n"); }, "invalid UTF-8", 1},
      {"garbage_bytes",
       [] {
         std::string s;
         uint32_t x = 12345;
         for (int i = 0; i < 4096; ++i) {
           x = x * 1664525u + 1013904223u;
           s += static_cast<char>(0x80 | (x >> 24));
         }
         return s;
       },
       "UTF-8", 1},
      {"unterminated_quote", [] { return std::string("name: \"abc\narchitecture: {}\n"); }, "unterminated quoted string", 0},
      {"huge_text", [] { return "name: x\n" + repeat("# padding padding padding padding padding\n", 30000); },
       "limit for configs", 0},
  };
  return cases;
}

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(MalformedText, HostileInputsAreRejectedQuicklyAndCheaply) {
  const std::string display = "hostile.yaml";
  for (const auto& c : text_cases()) {
    SCOPED_TRACE(c.name);
    const std::string text = c.make();
    const long rss_before = max_rss_kib();
    const auto start = std::chrono::steady_clock::now();
    auto spec = parse_model_spec(text, display, "/base");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const long rss_growth_kib = max_rss_kib() - rss_before;
    ASSERT_FALSE(spec.ok());
    const std::string& m = spec.status().message();
    EXPECT_EQ(spec.status().code(), StatusCode::kConfigError) << m;
    EXPECT_EQ(m.rfind(display + ":", 0), 0u) << m;
    EXPECT_NE(m.find(c.reason), std::string::npos) << m;
    if (c.line > 0) {
      EXPECT_NE(m.find(display + ":" + std::to_string(c.line) + ":"), std::string::npos) << m;
    }
    EXPECT_LT(ms, kMaxMsHostile * testutil::emulation_time_scale()) << m;
    EXPECT_LT(rss_growth_kib, 8 * 1024) << "peak memory grew by " << rss_growth_kib << " KiB";
  }
}

TEST(MalformedText, GuardAloneRejectsDepthOverTheLimitAndAcceptsAtTheLimit) {
  YamlLimits limits;
  limits.max_depth = 8;
  // 7 brackets + the top-level mapping's indentation level = 8.
  EXPECT_TRUE(check_yaml_text("a: " + repeat("[", 7) + repeat("]", 7) + "\n", "t", limits).ok());
  const Status deep = check_yaml_text("a: " + repeat("[", 8) + repeat("]", 8) + "\n", "t", limits);
  EXPECT_EQ(deep.code(), StatusCode::kConfigError);
  EXPECT_NE(deep.message().find("t:1:11: nesting deeper than 8 levels"), std::string::npos) << deep.message();
}

TEST(MalformedText, GuardAllowsAliasesOnlyWhenAsked) {
  YamlLimits limits;
  limits.allow_aliases = true;
  EXPECT_TRUE(check_yaml_text("a: &x 1\nb: *x\n", "t", limits).ok());
  EXPECT_FALSE(check_yaml_text("a: &x 1\nb: *x\n", "t", YamlLimits()).ok());
}

TEST(MalformedText, GuardAcceptsLegitimateTextThatLooksSuspicious) {
  const char* texts[] = {
      "a: b & c\n",                        // '&' inside a plain scalar
      "a: x*y\nb: 2 * 3\n",                // '*' inside plain scalars
      "a: \"*not an alias\"\n",            // quoted
      "a: '&not an anchor'\n",
      "a: |\n  *text\n  &more [[[[\n",     // block scalar content
      "a: b # [[[[ comment\n",             // comment
      "a: 'it''s [ fine'\n",
      "a: \"multi\n  line [ quote\"\nb: 1\n",
      "a:\n  - [1, 2]\n  - {x: 1}\n",
      ("\xef\xbb\xbf" "a: 1\n"),           // UTF-8 byte order mark
      "a: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n",
  };
  for (const char* t : texts) EXPECT_TRUE(check_yaml_text(t, "t").ok()) << t << "\n" << check_yaml_text(t, "t").message();
}

TEST(MalformedFiles, FileOverOneMiBIsRefusedBeforeReading) {
  const fs::path dir = fs::temp_directory_path() / ("edgevit_malformed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "huge.yaml").string();
  {
    std::ofstream out(path);
    out << "name: huge\n" << std::string((1 << 20) + 16, '#') << "\n";
  }
  const auto start = std::chrono::steady_clock::now();
  auto spec = load_model_spec(path);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kConfigError);
  EXPECT_NE(spec.status().message().find(path + ": file is larger than the 1048576-byte limit"), std::string::npos)
      << spec.status().message();
  EXPECT_LT(ms, kMaxMsHostile * testutil::emulation_time_scale());
  fs::remove_all(dir);
}

TEST(MalformedFiles, MissingFileIsNotFound) {
  auto spec = load_model_spec(malformed_path("does_not_exist.yaml"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("does_not_exist.yaml"), std::string::npos);
}

}  // namespace
}  // namespace edgevit
