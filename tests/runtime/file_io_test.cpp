// ReadOnlyFile (base/file_io.h) and every loader that reads a path through it: a FIFO, a character
// device and a directory are refused by name, at once (a FIFO with no writer used to block the reader
// forever; /dev/zero grew a labels load to 2.2 GB, issue #22 items 5 and 6), and sizes are capped before
// anything is read.
#include "base/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/labels.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "ev_file_io_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    fifo_ = dir_ + "/fifo";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
    subdir_ = dir_ + "/subdir";
    fs::create_directory(subdir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `load` with a deadline. If it blocks (reading a FIFO with no writer), a writer is opened and
  // closed so the reader sees end-of-file and the test fails instead of hanging.
  Status within_deadline(const std::function<Status()>& load) {
    auto future = std::async(std::launch::async, load);
    if (future.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
      const int w = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
      ADD_FAILURE() << "the load blocked for 5 s";
    }
    return future.get();
  }

  std::string dir_, fifo_, subdir_;
};

TEST_F(FileIoTest, ReadsARegularFileWhole) {
  const std::string path = dir_ + "/a.txt";
  std::ofstream(path) << "hello\n";
  auto text = read_regular_file(path, "test file", 100, StatusCode::kInputError);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "hello\n");
  auto small = read_regular_file(path, "test file", 5, StatusCode::kInputError);
  EXPECT_EQ(small.status().code(), StatusCode::kInputError);
  EXPECT_NE(small.status().message().find(path + ": test file is 6 bytes, more than the 5-byte limit"),
            std::string::npos)
      << small.status().message();
  EXPECT_EQ(read_regular_file(dir_ + "/missing", "test file", 100, StatusCode::kInputError).status().code(),
            StatusCode::kNotFound);
}

TEST_F(FileIoTest, FifoDeviceAndDirectoryAreRefusedByKind) {
  for (const auto& [file, kind] : {std::pair{fifo_, "(a FIFO)"}, std::pair{std::string("/dev/zero"), "(a character device)"},
                                   std::pair{subdir_, "(a directory)"}}) {
    const std::string path = file;  // a structured binding cannot be captured in C++17
    const Status s = within_deadline([&] { return ReadOnlyFile::open(path, "test file").status(); });
    EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
    EXPECT_NE(s.message().find(path + ": test file is not a regular file " + kind), std::string::npos) << s.message();
  }
}

// Issue #22 item 5: every path a loader reads. Before ReadOnlyFile, the model config and device profile
// readers (std::ifstream), the image and input readers and the labels reader blocked on a FIFO, and
// /dev/zero was read until memory ran out (labels) or a size limit (configs, images).
TEST_F(FileIoTest, EveryLoaderRefusesAFifoADeviceAndADirectoryAtOnce) {
  ModelSpec spec;  // 3x224x224
  std::vector<float> dst(3 * 224 * 224);
  const std::vector<std::pair<const char*, std::function<Status(const std::string&)>>> loaders = {
      {"model config", [](const std::string& p) { return load_model_spec(p).status(); }},
      {"device profile", [](const std::string& p) { return load_device_profile(p).status(); }},
      {"checkpoint", [](const std::string& p) { return WeightSource::open(p, WeightNaming::kTimm).status(); }},
      {"safetensors", [](const std::string& p) { return SafetensorsFile::open(p).status(); }},
      {"image", [&](const std::string& p) { return load_image_file(p, spec, dst.data()); }},
      {"input", [&](const std::string& p) { return load_input_file(p, spec).status(); }},
      {"labels with num_classes", [](const std::string& p) { return load_labels(p, 10).status(); }},
  };
  for (const auto& [name, load] : loaders) {
    for (const std::string& path : {fifo_, std::string("/dev/zero"), subdir_}) {
      SCOPED_TRACE(std::string(name) + " from " + path);
      const auto start = std::chrono::steady_clock::now();
      const Status s = within_deadline([&, &load = load] { return load(path); });
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
      EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
      EXPECT_NE(s.message().find(path + ": "), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("is not a regular file"), std::string::npos) << s.message();
    }
  }
}

// Writes a sparse safetensors input: tensor 'input' [n, 1, 8, 8] of `dtype` (2 or 4 bytes), data all zero.
std::string sparse_input(const std::string& path, int64_t n, const char* dtype, int bytes_per) {
  const int64_t nbytes = n * 64 * bytes_per;
  std::string header = std::string("{\"input\":{\"dtype\":\"") + dtype + "\",\"shape\":[" + std::to_string(n) +
                       ",1,8,8],\"data_offsets\":[0," + std::to_string(nbytes) + "]}}";
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out << header;
  out.close();
  fs::resize_file(path, 8 + header.size() + static_cast<uint64_t>(nbytes));
  return path;
}

ModelSpec digits_spec() {
  auto s = load_model_spec(testutil::source_path("config/models/vit-digits.yaml"));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : ModelSpec();
}

// Issue #22 item 9: a safetensors --input had no size cap, and an allocation failure aborted (exit 134).
// Now the file and the float32 batch built from it are both capped at kMaxInputBytes, checked before any
// allocation: a 300 MiB file is refused unread, and a 160 MiB F16 file (a 320 MiB float32 batch) is refused
// before the batch is allocated.
TEST_F(FileIoTest, SafetensorsInputIsCappedBeforeAllocating) {
  const ModelSpec spec = digits_spec();
  const std::string big = sparse_input(dir_ + "/big.safetensors", (int64_t{300} << 20) / 256, "F32", 4);
  auto r = load_input_file(big, spec);
  EXPECT_EQ(r.status().code(), StatusCode::kInputError) << r.status().to_string();
  EXPECT_NE(r.status().message().find(big + ": input file is"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("more than the 268435456-byte limit for inputs"), std::string::npos)
      << r.status().message();

  const std::string half = sparse_input(dir_ + "/half.safetensors", (int64_t{160} << 20) / 128, "F16", 2);
  ASSERT_LE(static_cast<int64_t>(fs::file_size(half)), kMaxInputBytes);
  r = load_input_file(half, spec);
  EXPECT_EQ(r.status().code(), StatusCode::kInputError) << r.status().to_string();
  EXPECT_NE(r.status().message().find(half + ": tensor 'input' 83886080 elements would take 335544320 bytes as "
                                             "float32, more than the 268435456-byte limit"),
            std::string::npos)
      << r.status().message();

  const std::string ok = sparse_input(dir_ + "/ok.safetensors", 2, "F16", 2);
  r = load_input_file(ok, spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->count, 2);
}

}  // namespace
}  // namespace edgevit
