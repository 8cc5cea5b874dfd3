// Shared helpers of the daemon tests: temp directories, an in-process server on the digits model, raw
// socket helpers, reference logits from an in-process Engine, and a process launcher for build/bin/edgevitd.
#pragma once

#include <sys/resource.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "serving/edgevit_client.h"
#include "serving/server.h"
#include "tests/testutil/testutil.h"

namespace edgevit::daemon::testing {

using Clock = std::chrono::steady_clock;

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/evd_test.XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? std::string(d) : std::string();
}

inline std::string digits_model() { return testutil::source_path("config/models/vit-digits.yaml"); }
inline std::string devices_dir() { return testutil::source_path("config/devices"); }

// A config for the digits model on host-cpu with one engine thread and a socket in `dir`.
inline DaemonConfig digits_config(const std::string& dir, int max_batch = 8) {
  DaemonConfig c;
  c.model = digits_model();
  c.device = "host-cpu";
  c.threads = 1;
  c.socket_path = dir + "/d.sock";
  c.max_batch = max_batch;
  c.read_deadline_ms = 500;
  return c;
}

inline ServerOptions server_options(const DaemonConfig& c) {
  ServerOptions o;
  o.config = c;
  o.device_dirs = {devices_dir()};
  o.default_model_path = digits_model();
  return o;
}

// Per-image input of the digits model: (1, 8, 8) floats.
constexpr int kDigitsPerImage = 64;
inline const uint32_t kDigitsDims[3] = {1, 8, 8};

inline std::vector<std::vector<float>> random_inputs(int count, uint32_t seed) {
  std::vector<std::vector<float>> v;
  for (int i = 0; i < count; ++i) v.push_back(testutil::random_floats(kDigitsPerImage, seed + i));
  return v;
}

// ref[n][row][i]: logits of inputs[i] computed in-process by an Engine with the daemon's plan, at `row` of
// a batch of n images. The daemon reports both for each answer: OpenBLAS picks its sgemm kernels (and
// their tail paths) by the row count, so the last bits may depend on n and the row, never on the other
// images.
using Reference = std::vector<std::vector<std::vector<std::vector<float>>>>;
inline Reference reference_logits(const std::vector<std::vector<float>>& inputs, int max_batch) {
  auto spec = load_model_spec(digits_model());
  auto dev = find_device_profile("host-cpu", {devices_dir()});
  EngineOptions eo;
  eo.plan.batch = max_batch;
  eo.threads = 1;
  auto e = Engine::create(*spec, *dev, eo);
  Reference ref(max_batch + 1);
  if (!e.ok()) return ref;
  const auto filler = testutil::random_floats(static_cast<size_t>(kDigitsPerImage) * max_batch, 999);
  for (int n = 1; n <= max_batch; ++n) {
    ref[n].resize(n);
    for (int row = 0; row < n; ++row) {
      for (const auto& in : inputs) {
        std::vector<float> batch(filler.begin(), filler.begin() + static_cast<size_t>(n) * kDigitsPerImage);
        std::copy(in.begin(), in.end(), batch.begin() + static_cast<size_t>(row) * kDigitsPerImage);
        if (!(*e)->infer(batch.data(), n).ok()) return {};
        const float* l = (*e)->logits() + static_cast<size_t>(row) * (*e)->output_dim();
        ref[n][row].emplace_back(l, l + (*e)->output_dim());
      }
    }
  }
  return ref;
}

inline int raw_connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline std::vector<uint8_t> frame(uint16_t op, const std::vector<uint8_t>& payload, uint32_t magic = protocol::kMagic,
                                  uint16_t version = protocol::kProtocolVersion, int64_t claimed_len = -1) {
  protocol::Header h;
  h.magic = magic;
  h.version = version;
  h.op = op;
  h.payload_bytes = claimed_len >= 0 ? static_cast<uint32_t>(claimed_len) : static_cast<uint32_t>(payload.size());
  h.request_id = 42;
  std::vector<uint8_t> out(protocol::kHeaderBytes + payload.size());
  protocol::encode_header(h, out.data());
  if (!payload.empty()) std::memcpy(out.data() + protocol::kHeaderBytes, payload.data(), payload.size());
  return out;
}

inline std::vector<uint8_t> tensor_payload(const float* data, const std::vector<uint32_t>& dims, size_t numel) {
  std::vector<uint8_t> p(protocol::kInferPrefixBytes + protocol::kTensorShapeBytes + numel * 4, 0);
  protocol::put_u32(p.data() + protocol::kInferPrefixBytes, static_cast<uint32_t>(dims.size()));
  for (size_t i = 0; i < dims.size(); ++i) protocol::put_u32(p.data() + protocol::kInferPrefixBytes + 4 + 4 * i, dims[i]);
  std::memcpy(p.data() + protocol::kInferPrefixBytes + protocol::kTensorShapeBytes, data, numel * 4);
  return p;
}

// Reads one answer frame from a raw fd with the client's reader. Returns the error code (0 = success,
// client::kTransportError when the daemon closed the connection).
inline uint32_t read_answer(int fd, int timeout_ms = 5000) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) <= 0) return 0xFFFFFFFFu;  // nothing within the timeout
  uint8_t head[protocol::kHeaderBytes];
  size_t got = 0;
  while (got < sizeof head) {
    const ssize_t r = recv(fd, head + got, sizeof head - got, 0);
    if (r <= 0) return client::kTransportError;
    got += static_cast<size_t>(r);
  }
  const protocol::Header h = protocol::decode_header(head);
  std::vector<uint8_t> payload(h.payload_bytes);
  got = 0;
  while (got < payload.size()) {
    const ssize_t r = recv(fd, payload.data() + got, payload.size() - got, 0);
    if (r <= 0) return client::kTransportError;
    got += static_cast<size_t>(r);
  }
  if ((h.flags & protocol::kFlagError) == 0) return 0;
  return payload.size() >= 4 ? protocol::get_u32(payload.data()) : client::kTransportError;
}

inline int count_fds(pid_t pid) {
  const std::string dir = pid == 0 ? "/proc/self/fd" : "/proc/" + std::to_string(pid) + "/fd";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

// A field of /proc/PID/status in KiB ("VmRSS:", "RssAnon:"), or -1.
inline long status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::atol(line.c_str() + n);
  return -1;
}
inline long rss_kib(pid_t pid) { return status_kib(pid, "VmRSS:"); }
// Anonymous resident memory (heap, arena, decode buffers): what the daemon allocates, without the pages of
// its code and libraries.
inline long anon_kib(pid_t pid) { return status_kib(pid, "RssAnon:"); }

// The resident bytes of a program's own image (its code and libraries: with the CUDA backend built in,
// libcudart and libcublasLt alone hold ~200 MB of pages before anything runs), in KiB: the peak RSS of
// `PROGRAM --version`, which loads everything and creates nothing. -1 when it cannot run.
inline long program_image_kib(const std::string& program) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execl(program.c_str(), program.c_str(), "--version", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return ru.ru_maxrss;
}

// build/bin/edgevitd as a child process; stderr goes to `log_path`.
struct DaemonProcess {
  pid_t pid = -1;
  std::string log_path;

  bool start(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& log) {
    log_path = log;
    // Everything the child needs is built before fork(): the parent has threads, the child only execs.
    static const std::string bin = testutil::binary_path("bin/edgevitd");
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("NOTIFY_SOCKET=", 0) != 0 && kv.rfind("WATCHDOG_", 0) != 0 && kv.rfind("EDGEVITD_", 0) != 0)
        envs.push_back(kv);
    }
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> argv{const_cast<char*>(bin.c_str())}, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid = fork();
    if (pid == 0) {
      if (fd >= 0) {
        dup2(fd, 2);
        dup2(fd, 1);
      }
      execve(bin.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    if (fd >= 0) close(fd);
    return pid > 0;
  }
  // Waits for the socket to accept connections (READY), up to timeout_ms.
  bool wait_socket(const std::string& path, int timeout_ms = 20000) const {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end) {
      const int fd = raw_connect(path);
      if (fd >= 0) {
        close(fd);
        return true;
      }
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Exit status after waiting up to timeout_ms (-1: still running, killed).
  int wait_exit(int timeout_ms) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string log() const {
    std::ifstream in(log_path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  ~DaemonProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// A datagram socket standing in for systemd's NOTIFY_SOCKET.
struct NotifySocket {
  int fd = -1;
  std::string path;
  explicit NotifySocket(const std::string& p) : path(p) {
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd);
      fd = -1;
    }
  }
  ~NotifySocket() {
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
  // Next message within timeout_ms ("" on timeout).
  std::string next(int timeout_ms) const {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0) return "";
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  // Waits for a message containing `what`; collects everything seen into *seen.
  bool wait_for(const std::string& what, int timeout_ms, std::vector<std::string>* seen = nullptr) const {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return false;
      const std::string m = next(static_cast<int>(left));
      if (seen && !m.empty()) seen->push_back(m);
      if (m.find(what) != std::string::npos) return true;
    }
  }
};

}  // namespace edgevit::daemon::testing
