// check_yaml_text's libyaml pass (base/yaml_limits.cpp): one test per limit in YamlLimits, each at the
// limit (accepted) and past it (refused with the file, line, column, the limit and its value), plus the
// hostile classics (a 100000-deep bracket nest, "billion laughs", a huge node count) and malformed text.
// Every refusal must come quickly: the pass stops at the first violation.
#include <chrono>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "base/yaml_guard.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

// Generous for a linear scan of at most 1 MiB natively (the node-count case takes ~10 ms idle); x10 under a
// sanitizer (ASan + UBSan under the load of parallel builds took 115 ms) and scaled under emulation
// (testutil::emulation_time_scale). A guard against super-linear scans, not a speed target.
#ifdef EDGEVIT_SANITIZER_BUILD
constexpr double kMaxMs = 1000;
#else
constexpr double kMaxMs = 100;
#endif

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// Runs check_yaml_text, and checks that it is refused with `expected` in the message, in time.
void expect_refused(const std::string& text, const YamlLimits& limits, const std::string& expected) {
  const auto start = std::chrono::steady_clock::now();
  const Status s = check_yaml_text(text, "t.yaml", limits);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok()) << expected;
  EXPECT_EQ(s.code(), StatusCode::kConfigError) << s.message();
  EXPECT_EQ(s.message().rfind("t.yaml:", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  EXPECT_LT(ms, kMaxMs * testutil::emulation_time_scale()) << s.message();
}

void expect_accepted(const std::string& text, const YamlLimits& limits = YamlLimits()) {
  const Status s = check_yaml_text(text, "t.yaml", limits);
  EXPECT_TRUE(s.ok()) << s.message();
}

// "billion laughs": 9 levels of 9 aliases, about 300 bytes, 9^9 nodes if expanded.
std::string billion_laughs() {
  std::string out = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  const char* names = "abcdefghi";
  for (int i = 1; i < 9; ++i) {
    out += std::string(1, names[i]) + ": &" + names[i] + " [";
    for (int k = 0; k < 9; ++k) out += std::string(k ? "," : "") + "*" + names[i - 1];
    out += "]\n";
  }
  return out;
}

TEST(YamlLimits, SizeOverMaxBytes) {
  YamlLimits limits;
  limits.max_bytes = 16;
  expect_accepted("a: 123456789012\n", limits);  // exactly 16 bytes
  expect_refused("a: 1234567890123\n", limits, "t.yaml: file is 17 bytes, more than the 16-byte limit");
}

TEST(YamlLimits, DepthAtAndOverTheLimit) {
  YamlLimits limits;
  limits.max_depth = 4;
  expect_accepted("a: [[[1]]]\n", limits);  // the mapping and 3 lists
  expect_refused("a: [[[[1]]]]\n", limits, "t.yaml:1:7: nesting deeper than 4 levels");
  expect_accepted("a:\n  b:\n    c:\n      - 1\n", limits);
  expect_refused("a:\n  b:\n    c:\n      d:\n        - 1\n", limits, "t.yaml:5:9: nesting deeper than 4 levels");
}

TEST(YamlLimits, HundredThousandOpenBracketsAreRefusedFastWithoutRecursion) {
  for (const char* open : {"[", "{"}) {
    SCOPED_TRACE(open);
    expect_refused("a: " + repeat(open, 100000), YamlLimits(), "t.yaml:1:67: nesting deeper than 64 levels");
    expect_refused(repeat(open, 100000), YamlLimits(), "t.yaml:1:65: nesting deeper than 64 levels");
  }
  // Block nests: "- - - ... x" on one line, and one key per line indented one more each time.
  expect_refused("a:\n" + repeat("- ", 100000) + "x\n", YamlLimits(), "nesting deeper than 64 levels");
  std::string keys;
  for (int i = 0; i < 1000; ++i) keys += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  expect_refused(keys, YamlLimits(), "t.yaml:65:65: nesting deeper than 64 levels");
}

TEST(YamlLimits, BillionLaughs) {
  expect_refused(billion_laughs(), YamlLimits(), "t.yaml:1:4: anchor not allowed in edgevit configs");
  YamlLimits limits;
  limits.allow_aliases = true;
  expect_refused(billion_laughs(), limits, "more than 65536 YAML nodes");
  // 16 nodes with the aliases expanded: small expansions pass.
  expect_accepted("a: &a [1, 2]\nb: [*a, *a, *a]\n", limits);
}

TEST(YamlLimits, AliasCountAndReferences) {
  YamlLimits limits;
  limits.allow_aliases = true;
  limits.max_aliases = 3;
  expect_accepted("a: &x 1\nb: [*x, *x, *x]\n", limits);
  expect_refused("a: &x 1\nb: [*x, *x, *x, *x]\n", limits, "t.yaml:2:17: more than 3 aliases");
  expect_refused("a: &x [*x]\n", limits, "t.yaml:1:8: alias '*x' refers to a node that contains it");
  expect_refused("a: *nowhere\n", limits, "t.yaml:1:4: alias '*nowhere' names no anchor defined before it");
  expect_refused("a: *x\n", YamlLimits(), "t.yaml:1:4: alias not allowed in edgevit configs");
}

TEST(YamlLimits, NodeCount) {
  YamlLimits limits;
  limits.max_nodes = 6;  // the mapping, 'a', the list and 3 items
  expect_accepted("a: [1, 2, 3]\n", limits);
  expect_refused("a: [1, 2, 3, 4]\n", limits, "t.yaml:1:14: more than 6 YAML nodes");
  // The default limit against a flat list of 100000 numbers (200 KB).
  expect_refused("a: [" + repeat("1,", 100000) + "1]\n", YamlLimits(), "more than 65536 YAML nodes");
}

TEST(YamlLimits, ScalarLength) {
  YamlLimits limits;
  limits.max_scalar_bytes = 8;
  expect_accepted("a: \"12345678\"\n", limits);
  expect_refused("a: \"123456789\"\n", limits, "t.yaml:1:4: scalar of 9 bytes is longer than the 8-byte limit");
  expect_refused("a: " + repeat("x", 70000) + "\n", YamlLimits(), "scalar of 70000 bytes is longer than the 65536-byte");
}

TEST(YamlLimits, Documents) {
  expect_refused("a: 1\n---\nb: 2\n", YamlLimits(), "t.yaml:2:1: more than 1 YAML document(s) in one file");
  YamlLimits limits;
  limits.max_documents = 2;
  expect_accepted("a: 1\n---\nb: 2\n", limits);
}

TEST(YamlLimits, TopLevelScalarIsRefusedAndEmptyTextPasses) {
  expect_refused("just text\n", YamlLimits(), "t.yaml:1:1: top level must be a mapping of keys, got a scalar");
  expect_accepted("");
  expect_accepted("# only a comment\n");
  expect_accepted("- a list is the caller's to name\n");
}

TEST(YamlLimits, MalformedDocumentNamesLineColumnAndLibyamlsProblem) {
  expect_refused("a: [1, 2\nb: 3\n", YamlLimits(),
                 "t.yaml:2:2: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at 1:4)");
  expect_refused("a: 1\n b: 2\n", YamlLimits(), "t.yaml:2:3: YAML syntax error: mapping values are not allowed");
  expect_refused("a: \"abc\nb: 1\n", YamlLimits(), "unterminated quoted string; YAML syntax error: found unexpected end of stream");
  expect_refused("a: 1\n,b\n", YamlLimits(), "t.yaml:2:1: ',' outside a flow collection ([...] or {...}); YAML syntax error");
  expect_refused("a: [1}\n", YamlLimits(), "t.yaml:1:6: '}' closes a '[' (expected ']'); YAML syntax error");
  expect_refused("a: 1\n\tb: 2\n", YamlLimits(), "t.yaml:2:1: tab character in indentation");
  expect_refused("a: [1, [2\n", YamlLimits(), "'[' opened at 1:4 is never closed; YAML syntax error");
}

TEST(YamlLimits, BytesAreCheckedFirst) {
  expect_refused(std::string("a: x\0y\n", 7), YamlLimits(), "t.yaml:1:5: NUL byte in text");
  expect_refused("a: \xc3\x28\n", YamlLimits(), "t.yaml:1:4: invalid UTF-8");
  expect_refused("a: x\ry\n", YamlLimits(), "t.yaml:1:5: carriage return not followed by a line feed");
  expect_refused("a: x\xe2\x80\xa8y\n", YamlLimits(), "t.yaml:1:5: U+2028 (line separator) in text");
  expect_accepted("a: x\r\nb: y\r\n");
}

TEST(YamlLimits, YamlCppQuirksAreRefused) {
  expect_refused("name: x\n? b\n", YamlLimits(), "t.yaml:2:1: explicit mapping key ('? ') is not supported");
  expect_refused("a: \"x\\_y\"\n", YamlLimits(), "t.yaml:1:6: escape '\\_' is not supported");
  expect_refused("a: \"x\n  \\Ny\"\n", YamlLimits(), "t.yaml:2:3: escape '\\N' is not supported");
  expect_accepted("a: \"x\\\\_y \\\\N\"\n");  // escaped backslashes, then plain '_' and 'N'
  expect_accepted("?x: 1\n");                 // a plain key that starts with '?'
}

TEST(YamlLimits, ParseYamlMappingRunsThePassFirst) {
  YamlLimits limits;
  limits.max_nodes = 3;
  auto root = parse_yaml_mapping("a: [1, 2]\n", "t.yaml", limits);
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("t.yaml:1:5: more than 3 YAML nodes"), std::string::npos)
      << root.status().message();
  EXPECT_TRUE(parse_yaml_mapping("a: [1, 2]\n", "t.yaml").ok());
}

}  // namespace
}  // namespace edgevit
