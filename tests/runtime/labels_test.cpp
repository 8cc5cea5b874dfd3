// load_labels (runtime/labels.h): lines, the byte cap, non-regular files, and the count against the
// model's num_classes (issue #22 item 6).
#include "runtime/labels.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/config.h"
#include "runtime/engine.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

class LabelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "ev_labels_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(LabelsTest, OneLabelPerLineAsBefore) {
  auto l = load_labels(write("a.txt", "zero\r\none\n\nthree"), 0);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(*l, (std::vector<std::string>{"zero", "one", "", "three"}));
  l = load_labels(write("b.txt", "x\ny\n"), 0);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<std::string>{"x", "y"}));
  l = load_labels(write("empty.txt", ""), 0);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());
  EXPECT_EQ(load_labels(dir_ + "/missing.txt", 0).status().code(), StatusCode::kNotFound);
}

// The shipped labels file matches its model.
TEST_F(LabelsTest, ShippedDigitsLabelsMatchNumClasses) {
  auto spec = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  ASSERT_FALSE(spec->labels_path.empty());
  auto l = load_labels(spec->labels_path, spec->arch.num_classes);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(static_cast<int>(l->size()), spec->arch.num_classes);
}

// Before: any line count was accepted, so a labels file for another model named the wrong classes.
TEST_F(LabelsTest, LineCountMustMatchNumClasses) {
  const std::string path = write("nine.txt", "0\n1\n2\n3\n4\n5\n6\n7\n8\n");
  auto l = load_labels(path, 10);
  EXPECT_EQ(l.status().code(), StatusCode::kConfigError);
  EXPECT_NE(l.status().message().find(path + ": labels file has 9 lines, the model has num_classes 10"),
            std::string::npos)
      << l.status().message();
  EXPECT_TRUE(load_labels(path, 9).ok());
}

// Before: a 768 MB labels file was read whole and kept (issue #22 item 6). Now refused unread.
TEST_F(LabelsTest, FileOverTheByteCapIsRefusedUnread) {
  const std::string path = write("big.txt", "");
  fs::resize_file(path, static_cast<uintmax_t>(kMaxLabelsBytes) + 1);
  auto l = load_labels(path, 0);
  EXPECT_EQ(l.status().code(), StatusCode::kConfigError);
  EXPECT_NE(l.status().message().find(path + ": labels file is 16777217 bytes, more than the 16777216-byte limit"),
            std::string::npos)
      << l.status().message();
}

TEST_F(LabelsTest, DevZeroIsRefused) {
  auto l = load_labels("/dev/zero", 0);
  EXPECT_EQ(l.status().code(), StatusCode::kIoError);
  EXPECT_NE(l.status().message().find("/dev/zero: labels file is not a regular file (a character device)"),
            std::string::npos)
      << l.status().message();
}

}  // namespace
}  // namespace edgevit
