// The checked-in hostile corpus (tests/data/hostile/, written by make_hostile.py): one file per failure
// class of every loader. Each row names the file, the loader that reads it, the status code it must
// return and a fragment of the message. Every load must fail cleanly (no crash, no exception), name the
// file, and stay quick and small: the limits are enforced before anything is allocated or recursed.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/inputs.h"
#include "runtime/labels.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/runtime/image_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

enum class Loader {
  kSafetensors,  // SafetensorsFile::open
  kCheckpoint,   // WeightSource::open + check() against vit-digits' architecture
  kModel,        // load_model_spec
  kDevice,       // load_device_profile
  kImage,        // load_image_file for vit-digits (1x8x8)
  kImageRgb224,  // load_image_file for a 3x224x224 model
  kInput,        // load_input_file for vit-digits
  kLabels,       // load_labels with vit-digits' num_classes (10)
};

struct HostileCase {
  const char* file;
  Loader loader;
  StatusCode code;
  const char* fragment;
};

using SC = StatusCode;
// clang-format off
const HostileCase kCases[] = {
  // safetensors: framing, header JSON, entries, offsets
  {"st_too_short.safetensors",          Loader::kSafetensors, SC::kCheckpointError, "shorter than the 8-byte header length"},
  {"st_header_length_huge.safetensors", Loader::kSafetensors, SC::kCheckpointError, "exceeds the 100000000-byte limit"},
  {"st_header_past_end.safetensors",    Loader::kSafetensors, SC::kCheckpointError, "runs past the end of the file"},
  {"st_header_not_json.safetensors",    Loader::kSafetensors, SC::kCheckpointError, "header is not valid JSON"},
  {"st_header_not_object.safetensors",  Loader::kSafetensors, SC::kCheckpointError, "header is not a JSON object"},
  {"st_deep_json.safetensors",          Loader::kSafetensors, SC::kCheckpointError, "nests JSON deeper than 3 levels"},
  {"st_duplicate_tensor.safetensors",   Loader::kSafetensors, SC::kCheckpointError, "tensor 'a': duplicate entry"},
  {"st_unknown_entry_key.safetensors",  Loader::kSafetensors, SC::kCheckpointError, "unknown key 'x'"},
  {"st_unsupported_dtype.safetensors",  Loader::kSafetensors, SC::kCheckpointError, "unsupported dtype 'I64'"},
  {"st_unknown_dtype.safetensors",      Loader::kSafetensors, SC::kCheckpointError, "unknown dtype 'F33'"},
  {"st_negative_dim.safetensors",       Loader::kSafetensors, SC::kCheckpointError, "must hold non-negative integers"},
  {"st_numel_overflow.safetensors",     Loader::kSafetensors, SC::kCheckpointError, "overflows 64-bit element count"},
  {"st_bytes_overflow.safetensors",     Loader::kSafetensors, SC::kCheckpointError, "overflows 64-bit byte count"},
  {"st_size_mismatch.safetensors",      Loader::kSafetensors, SC::kCheckpointError, "is 16 bytes but data_offsets [0,12] span 12"},
  {"st_offsets_backwards.safetensors",  Loader::kSafetensors, SC::kCheckpointError, "go backwards"},
  {"st_offsets_overlap.safetensors",    Loader::kSafetensors, SC::kCheckpointError, "overlap the previous tensor 'a'"},
  {"st_offsets_hole.safetensors",       Loader::kSafetensors, SC::kCheckpointError, "leave a hole of 4 bytes"},
  {"st_offsets_past_end.safetensors",   Loader::kSafetensors, SC::kCheckpointError, "extend beyond the data section"},
  {"st_offsets_huge.safetensors",       Loader::kSafetensors, SC::kCheckpointError, "data_offsets [18446744073709551611,18446744073709551615] extend beyond the data section (4 bytes)"},
  {"st_offsets_2p63_names_culprit.safetensors", Loader::kSafetensors, SC::kCheckpointError, "tensor 'a': data_offsets [9223372036854775808,9223372036854775812] extend beyond the data section (8 bytes)"},
  {"st_trailing_bytes.safetensors",     Loader::kSafetensors, SC::kCheckpointError, "4 trailing bytes after the last tensor 'a'"},
  {"st_metadata_not_string.safetensors",Loader::kSafetensors, SC::kCheckpointError, "value of 'format' is not a string"},
  // checkpoint contents against the model
  {"ckpt_missing_tensors.safetensors",  Loader::kCheckpoint,  SC::kCheckpointError, "missing"},
  // model configs: bombs, nests, bytes, numbers, derived sizes
  {"model_alias_bomb.yaml",             Loader::kModel,       SC::kConfigError,     "anchor not allowed"},
  {"model_self_alias.yaml",             Loader::kModel,       SC::kConfigError,     "anchor not allowed"},
  {"model_deep_flow.yaml",              Loader::kModel,       SC::kConfigError,     "nesting deeper than 64 levels"},
  {"model_deep_indent.yaml",            Loader::kModel,       SC::kConfigError,     "nesting deeper than 64 levels"},
  {"model_nul_byte.yaml",               Loader::kModel,       SC::kConfigError,     "NUL byte"},
  {"model_invalid_utf8.yaml",           Loader::kModel,       SC::kConfigError,     "invalid UTF-8"},
  {"model_int_overflow.yaml",           Loader::kModel,       SC::kConfigError,     "architecture.img_size: integer '99999999999999999999999' is out of range"},
  {"model_too_many_tokens.yaml",        Loader::kModel,       SC::kConfigError,     "16777217 tokens is longer than 65536"},
  {"model_leading_comma.yaml",          Loader::kModel,       SC::kConfigError,     "2:1: ',' outside a flow collection"},
  {"model_nbsp_escape.yaml",            Loader::kModel,       SC::kConfigError,     "1:9: escape '\\_' is not supported"},
  {"model_quote_comma.yaml",            Loader::kModel,       SC::kConfigError,     "2:6: ',' outside a flow collection"},
  {"model_block_comment_comma.yaml",    Loader::kModel,       SC::kConfigError,     "3:3: ',' outside a flow collection"},
  {"model_block_header_comment.yaml",   Loader::kModel,       SC::kConfigError,     "2:1: ',' outside a flow collection"},
  {"model_tag_comma.yaml",              Loader::kModel,       SC::kConfigError,     "2:6: ',' outside a flow collection"},
  {"model_tag_quote_comma.yaml",        Loader::kModel,       SC::kConfigError,     "1:2: YAML syntax error: did not find expected whitespace or line break"},
  {"model_not_a_mapping.yaml",          Loader::kModel,       SC::kConfigError,     "top level must be a mapping"},
  // device profiles
  {"device_budget_over_total.yaml",     Loader::kDevice,      SC::kConfigError,     "memory.budget_mib: 4096 is out of range [1, 1024]"},
  {"device_leading_comma.yaml",         Loader::kDevice,      SC::kConfigError,     "1:1: ',' outside a flow collection"},
  {"device_nel_escape.yaml",            Loader::kDevice,      SC::kConfigError,     "1:9: escape '\\N' is not supported"},
  {"device_flow_comma.yaml",            Loader::kDevice,      SC::kConfigError,     "1:5: ',' outside a flow collection"},
  {"device_quote_comma.yaml",           Loader::kDevice,      SC::kConfigError,     "1:5: text after the top-level node that YAML cannot place in the document"},
  {"device_docend_comma.yaml",          Loader::kDevice,      SC::kConfigError,     "2:5: ',' outside a flow collection"},
  {"device_flow_glued_comment.yaml",    Loader::kDevice,      SC::kConfigError,     "2:1: ',' outside a flow collection"},
  {"device_block_header_tag_comma.yaml", Loader::kDevice,     SC::kConfigError,     "3:1: text after the top-level node that YAML cannot place"},
  {"device_block_header_tag_comma_long.yaml", Loader::kDevice, SC::kConfigError,    "4:3: text after the top-level node that YAML cannot place"},
  {"device_block_scalar_dedent.yaml",   Loader::kDevice,      SC::kConfigError,     "3:2: ',' outside a flow collection"},
  {"model_lone_cr.yaml",                Loader::kModel,       SC::kConfigError,     "10:22: carriage return not followed by a line feed"},
  {"device_explicit_key.yaml",          Loader::kDevice,      SC::kConfigError,     "1:2: top level must be a mapping of keys, got a scalar"},
  {"model_explicit_key.yaml",           Loader::kModel,       SC::kConfigError,     "2:1: explicit mapping key ('? ') is not supported"},
  {"device_root_plain_scalar.yaml",     Loader::kDevice,      SC::kConfigError,     "3:2: ',' outside a flow collection"},
  {"device_plain_after_root.yaml",      Loader::kDevice,      SC::kConfigError,     "1:2: YAML syntax error: did not find expected key"},
  {"device_mismatched_bracket.yaml",    Loader::kDevice,      SC::kConfigError,     "3:1: ',' outside a flow collection"},
  {"device_context_over_budget.yaml",   Loader::kDevice,      SC::kConfigError,     "leaves nothing after the CUDA context estimate"},
  {"device_unclosed_flow.yaml",         Loader::kDevice,      SC::kConfigError,     "6:1: ',' outside a flow collection"},
  {"device_tag_comma.yaml",             Loader::kDevice,      SC::kConfigError,     "1:3: ',' outside a flow collection"},
  {"device_alias.yaml",                 Loader::kDevice,      SC::kConfigError,     "anchor not allowed"},
  {"device_gpu_on_cpu.yaml",            Loader::kDevice,      SC::kConfigError,     "gpu: not allowed for kind cpu"},
  {"device_name_mismatch.yaml",         Loader::kDevice,      SC::kConfigError,     "does not match the file name"},
  // images: empty, not an image, dimensions, corrupt data, resize bound
  {"img_empty.png",                     Loader::kImage,       SC::kInputError,      "empty file"},
  {"img_garbage.png",                   Loader::kImage,       SC::kInputError,      "not a decodable image"},
  {"img_huge_dims.png",                 Loader::kImage,       SC::kInputError,      "image 20000x20 exceeds the limits"},
  {"img_too_many_pixels.png",           Loader::kImage,       SC::kInputError,      "image 16384x16384 exceeds the limits"},
  {"img_huge_dims.ppm",                 Loader::kImage,       SC::kInputError,      "image 16385x16385 exceeds the limits"},
  {"img_truncated.png",                 Loader::kImage,       SC::kInputError,      "corrupt or truncated"},
  {"img_bad_zlib.png",                  Loader::kImage,       SC::kInputError,      "corrupt or truncated"},
  {"img_pnm16_channels.pgm",            Loader::kImageRgb224, SC::kInputError,      "16-bit PGM with 1 channel(s) for a model with 3 is not supported"},
  {"img_zlib_bomb.png",                 Loader::kImage,       SC::kInputError,      "bytes, the budget for a 8x8 image"},
  {"img_wide_strip.png",                Loader::kImageRgb224, SC::kInputError,      "would be resized to 3670016x224"},
  {"img_decode_budget_rgba16.png",      Loader::kImageRgb224, SC::kInputError,      "8192x8191 16-bit 4-channel image needs 1074667519 bytes (1024.9 MiB), more than the decode budget of 268435456 bytes"},
  // input files
  {"input_wrong_shape.safetensors",     Loader::kInput,       SC::kInputError,      "needs [N,1,8,8]"},
  {"input_no_tensor.safetensors",       Loader::kInput,       SC::kInputError,      "no tensor named 'input'"},
  // issue #22 item 9: a malformed input file is an input error (exit 5), not a checkpoint error (4)
  {"input_corrupt_header.safetensors",  Loader::kInput,       SC::kInputError,      "header is not valid JSON"},
  {"input_offsets_2p63.safetensors",    Loader::kInput,       SC::kInputError,      "tensor 'z': data_offsets [9223372036854775808,9223372036854775812] extend beyond the data section (256 bytes)"},
  {"input_offsets_past_end.safetensors", Loader::kInput,      SC::kInputError,      "tensor 'input': data_offsets [0,256] extend beyond the data section (16 bytes)"},
  // labels files
  {"labels_wrong_count.txt",            Loader::kLabels,      SC::kConfigError,     "labels file has 9 lines, the model has num_classes 10"},
};
// clang-format on

// Generous: ASan/UBSan builds run these too. Without the limits, the bombs take seconds and gigabytes.
constexpr double kMaxMs = 500;
constexpr long kMaxRssGrowthKib = 64 * 1024;

const ModelSpec& digits_spec() {
  static const ModelSpec spec = [] {
    auto s = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? *s : ModelSpec();
  }();
  return spec;
}

ModelSpec rgb224_spec() {
  ModelSpec s;  // ModelSpec's defaults: 3 channels, 224x224, ImageNet mean/std
  s.name = "rgb224";
  return s;
}

Status load(Loader loader, const std::string& path) {
  switch (loader) {
    case Loader::kSafetensors: return SafetensorsFile::open(path).status();
    case Loader::kCheckpoint: {
      EV_ASSIGN_OR_RETURN(WeightSource w, WeightSource::open(path, WeightNaming::kTimm));
      return w.check(digits_spec().arch);
    }
    case Loader::kModel: return load_model_spec(path).status();
    case Loader::kDevice: return load_device_profile(path).status();
    case Loader::kImage: {
      std::vector<float> dst(64);
      return load_image_file(path, digits_spec(), dst.data());
    }
    case Loader::kImageRgb224: {
      const ModelSpec spec = rgb224_spec();
      std::vector<float> dst(3 * 224 * 224);
      return load_image_file(path, spec, dst.data());
    }
    case Loader::kInput: return load_input_file(path, digits_spec()).status();
    case Loader::kLabels: return load_labels(path, digits_spec().arch.num_classes).status();
  }
  return internal_error("unknown loader");
}

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

class HostileInputTest : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileInputTest, FailsWithTheExpectedCodeAndMessage) {
  const HostileCase& c = GetParam();
  const std::string path = testutil::source_path(std::string("tests/data/hostile/") + c.file);
  ASSERT_TRUE(fs::exists(path)) << path << " (run tests/data/hostile/make_hostile.py)";
  (void)digits_spec();  // loaded outside the measurement
  const long rss_before = max_rss_kib();
  const auto start = std::chrono::steady_clock::now();
  const Status s = load(c.loader, path);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const long rss_growth = max_rss_kib() - rss_before;
  ASSERT_FALSE(s.ok()) << c.file << " loaded";
  EXPECT_EQ(s.code(), c.code) << s.to_string();
  EXPECT_NE(s.message().find(c.fragment), std::string::npos) << "expected '" << c.fragment << "' in\n" << s.message();
  EXPECT_NE(s.message().find(c.file), std::string::npos) << "the message does not name the file: " << s.message();
  EXPECT_LT(ms, kMaxMs) << c.file;
  EXPECT_LT(rss_growth, kMaxRssGrowthKib) << c.file << ": peak memory grew by " << rss_growth << " KiB";
}

INSTANTIATE_TEST_SUITE_P(Corpus, HostileInputTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<HostileCase>& info) {
                           std::string name = info.param.file;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(HostileCorpus, EveryFileHasARow) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(testutil::source_path("tests/data/hostile"))) {
    const std::string name = entry.path().filename().string();
    if (name == "make_hostile.py") continue;
    ++files;
    bool found = false;
    for (const auto& c : kCases) found = found || name == c.file;
    EXPECT_TRUE(found) << name << " has no row in kCases";
  }
  EXPECT_EQ(files, static_cast<int>(std::size(kCases)));
}

// The resize bound is a property of preprocessing, not of the PNG: raw pixels with an extreme aspect ratio
// are refused before the intermediate image is allocated, and ordinary ones still pass.
TEST(HostileCorpus, ExtremeAspectRatioIsRefusedBeforeResizing) {
  const ModelSpec spec = rgb224_spec();
  std::vector<float> dst(3 * 224 * 224);
  const std::vector<uint8_t> strip(16384 * 3, 128);
  const Status s = preprocess_pixels(strip.data(), 16384, 1, 3, "strip", spec, dst.data());
  EXPECT_EQ(s.code(), StatusCode::kInputError) << s.to_string();
  EXPECT_NE(s.message().find("aspect ratio too extreme"), std::string::npos) << s.message();
  const std::vector<uint8_t> wide(640 * 100 * 3, 128);
  EXPECT_TRUE(preprocess_pixels(wide.data(), 640, 100, 3, "wide", spec, dst.data()).ok());
  EXPECT_EQ(preprocess_pixels(wide.data(), 0, 100, 3, "zero", spec, dst.data()).code(), StatusCode::kInputError);
}

// Issue #22 item 2: a 522 KB 16-bit RGBA 8192x8191 PNG took ~1 GB to decode (edgevit run peaked at
// 1.18 GB). It is written at test time (all-zero samples, ~3.4 MB here) and must be refused from its
// header, naming the image, its size and depth and the budget, before stb_image allocates anything.
TEST(HostileCorpus, SixteenBitRgbaDecodeBombIsRefusedFromItsHeader) {
  const std::string path = testutil::temp_dir() + "decode_bomb_rgba16_8192x8191.png";
  ASSERT_TRUE(testutil::write_zero_png(path, 8192, 8191, 6, 16)) << path;
  EXPECT_LT(fs::file_size(path), size_t{4} << 20);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto need = image_decode_bytes(bytes.data(), bytes.size(), path);
  ASSERT_TRUE(need.ok()) << need.status().to_string();
  // stb holds the inflated 16-bit scanlines and the 16-bit image at once: 16 bytes per pixel.
  EXPECT_GE(*need, int64_t{16} * 8192 * 8191);
  const ModelSpec spec = rgb224_spec();
  std::vector<float> dst(3 * 224 * 224);
  const int64_t growth = testutil::peak_rss_growth_bytes([&] { (void)load_image_file(path, spec, dst.data()); });
  const Status s = load_image_file(path, spec, dst.data());
  EXPECT_EQ(s.code(), StatusCode::kInputError) << s.to_string();
  for (const char* fragment : {"decode_bomb_rgba16_8192x8191.png", "8192x8191 16-bit 4-channel", "max_decode_bytes",
                               "268435456 bytes"})
    EXPECT_NE(s.message().find(fragment), std::string::npos) << "expected '" << fragment << "' in " << s.message();
  ASSERT_GE(growth, 0) << "peak RSS measurement failed";
  EXPECT_LT(growth, int64_t{16} << 20) << "refusing the bomb added " << growth << " bytes of peak RSS";
  fs::remove(path);
}

// open_memory applies exactly open()'s checks: every safetensors file in the corpus fails the same way.
TEST(HostileCorpus, OpenMemoryAgreesWithOpen) {
  for (const auto& c : kCases) {
    if (c.loader != Loader::kSafetensors) continue;
    const std::string path = testutil::source_path(std::string("tests/data/hostile/") + c.file);
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto mem = SafetensorsFile::open_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    ASSERT_FALSE(mem.ok()) << c.file;
    EXPECT_EQ(mem.status().to_string(), SafetensorsFile::open(path).status().to_string()) << c.file;
  }
  auto good = SafetensorsFile::open(testutil::source_path("tests/data/digits/test_split.safetensors"));
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  std::ifstream in(good->path(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto mem = SafetensorsFile::open_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
  ASSERT_TRUE(mem.ok()) << mem.status().to_string();
  ASSERT_EQ(mem->tensors().size(), good->tensors().size());
  for (size_t i = 0; i < good->tensors().size(); ++i) {
    const TensorInfo& a = good->tensors()[i];
    const TensorInfo& b = mem->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(0, std::memcmp(good->data(a), mem->data(b), a.nbytes)) << a.name;
  }
}

}  // namespace
}  // namespace edgevit
