// edgevitd: the on-board inference daemon (docs/daemon.md, protocol in docs/protocol.md).
//
//   edgevitd --config /etc/edgevit/edgevitd.yaml
//   edgevitd --model config/models/vit-digits.yaml --device host-cpu --socket /tmp/edgevitd.sock
//
// Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads (the config file again, flags re-applied) on a
// thread of its own, with a deadline. The handler only writes to a pipe; the main thread does the work. Exit codes: base/status.h exit_code_for (1 a
// start-up self-test check failed, 3 config, 6 does not fit, 10 device (GPIO), ...).
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "platform/device_registry.h"
#include "selftest/selftest.h"
#include "serving/daemon_config.h"
#include "serving/json_text.h"
#include "serving/server.h"

namespace ev = edgevit;
namespace dm = edgevit::daemon;
namespace st = edgevit::selftest;

namespace {

// %* in a pattern: the message as a JSON string body (quotes, backslashes and control bytes escaped; a
// byte that is not valid UTF-8, e.g. from a quoted file, becomes \ufffd so every line stays valid JSON).
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const auto* p = reinterpret_cast<const unsigned char*>(msg.payload.data());
    const size_t n = msg.payload.size();
    for (size_t i = 0; i < n;) {
      const unsigned char c = p[i];
      const size_t len = dm::utf8_sequence_bytes(p + i, n - i);
      if (len == 0) {
        static constexpr char kReplacement[] = "\\ufffd";
        dest.append(kReplacement, kReplacement + 6);
      } else if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(static_cast<char>(c));
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        dest.append(buf, buf + 6);
      } else {
        dest.append(msg.payload.data() + i, msg.payload.data() + i + len);
      }
      i += len == 0 ? 1 : len;
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonEscapedMessage>(); }
};

void setup_logging(dm::LogFormat format, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("edgevitd");
  spdlog::set_default_logger(logger);
  if (format == dm::LogFormat::kJson) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","pid":%P,"thread":%t,"msg":"%*"})");
    spdlog::set_formatter(std::move(f));
  } else {
    // journald adds its own timestamps; keep lines short.
    spdlog::set_pattern("edgevitd: %l: %v");
  }
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::trace);
}

int g_signal_pipe[2] = {-1, -1};
struct SignalNote {
  int signo;
  pid_t pid;
};

void on_signal(int signo, siginfo_t* info, void*) {
  const int saved = errno;
  const SignalNote note{signo, info != nullptr ? info->si_pid : 0};
  // A pipe write of <= PIPE_BUF bytes is atomic and async-signal-safe.
  if (write(g_signal_pipe[1], &note, sizeof note) < 0) {
  }
  errno = saved;
}

int fail(const ev::Status& s) {
  std::fprintf(stderr, "edgevitd: error: %s\n", s.to_string().c_str());
  ev::daemon::notify_systemd(("STATUS=failed: " + s.message()).substr(0, 1024).c_str());
  return ev::exit_code_for(s.code());
}

// The self-test library's quick checks (edgevit-selftest --quick) of `model_path` on the configured device,
// run before the daemon creates its own engine (ServerOptions::model_check): the library's engine is freed
// before the daemon's arena exists, so the two never count against the budget together. A failing check is
// kCheckFailed (exit 1) naming it; a self-test that could not run keeps its code (e.g. 8, test data missing).
// memory.zero_allocations, memory.no_new_mappings and memory.arena_single_allocation measure the whole process
// (edgevitd links the exact malloc counter): while other threads serve (a reload) they also see those
// threads' work, so there a failure of theirs is logged as a warning and does not refuse the model.
ev::Status run_quick_selftest(const st::SelftestOptions& base, const std::string& model_path,
                              const dm::DaemonConfig& cfg, bool serving) {
  st::SelftestOptions o = base;
  o.models = {model_path};
  o.device = cfg.device;
  o.threads = cfg.threads;
  o.quick = true;
  const auto report = st::run_selftest(o);
  if (!report.ok()) return report.status().with_context("self-test of " + model_path + " could not run");
  std::string failed;
  int waived = 0;
  std::string counter;
  for (const st::CheckResult& c : report->checks) {
    const std::string what = c.name + (c.model.empty() ? "" : " (" + c.model + ")") + ": " + c.measured +
                             (c.bound.empty() ? "" : ", bound " + c.bound);
    if (c.name == "memory.zero_allocations") counter = c.detail;
    if (c.outcome == st::Outcome::kFail) {
      if (serving && (c.name == "memory.zero_allocations" || c.name == "memory.no_new_mappings" ||
                      c.name == "memory.arena_single_allocation")) {
        spdlog::warn("self-test: {} (not refused: other threads serve meanwhile)", what);
        ++waived;
        continue;
      }
      spdlog::error("self-test: FAIL {}", what);
      if (failed.empty()) failed = what;
    } else {
      spdlog::debug("self-test: {} {}{}", st::to_string(c.outcome), what, c.detail.empty() ? "" : " [" + c.detail + "]");
    }
  }
  for (const std::string& n : report->notes) spdlog::info("self-test: {}", n);
  spdlog::debug("self-test report:\n{}", st::format_report_text(*report));
  spdlog::info("self-test (quick, seed {}) of {}: {} pass, {} skip, {} fail{} in {:.2f} s; zero_allocations {}",
               report->seed, model_path, report->count(st::Outcome::kPass), report->count(st::Outcome::kSkip),
               report->count(st::Outcome::kFail), waived > 0 ? fmt::format(" ({} not refused)", waived) : "",
               report->seconds, counter);
  if (!failed.empty()) return ev::check_failed("self-test of " + model_path + ": FAIL " + failed);
  return ev::Status::Ok();
}

struct Overrides {
  std::string model, device, socket, log_format, log_level;
};

ev::Result<dm::DaemonConfig> load_config(const std::string& path, const Overrides& o) {
  dm::DaemonConfig c;
  if (!path.empty()) {
    EV_ASSIGN_OR_RETURN(c, dm::load_daemon_config(path));
  }
  auto abs = [](const std::string& p) { return std::filesystem::absolute(p).lexically_normal().string(); };
  if (!o.model.empty()) c.model = abs(o.model);
  if (!o.device.empty()) c.device = o.device;
  if (!o.socket.empty()) c.socket_path = abs(o.socket);
  if (!o.log_format.empty()) c.log_format = o.log_format == "json" ? dm::LogFormat::kJson : dm::LogFormat::kText;
  if (!o.log_level.empty()) c.log_level = o.log_level;
  EV_RETURN_IF_ERROR(dm::validate_daemon_config(c));
  return c;
}


// The main thread's loop: reads signals from the pipe until SIGTERM/SIGINT. A SIGHUP starts a reload on its
// own thread (one at a time; a SIGHUP during a reload is logged and dropped), so a slow or stuck reload never
// delays a stop; a reload running past `reload_timeout_ms` is abandoned (reported failed, installs nothing).
// Stops the server. Returns false when a reload thread is still running (it cannot be joined: exit).
bool serve_until_stop(dm::Server& server, int reload_timeout_ms) {
  std::thread reloader;
  std::atomic<bool> reloading{false};
  std::chrono::steady_clock::time_point deadline{};
  for (;;) {
    int wait_ms = -1;
    if (reloading) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        server.abandon_reload("reload did not finish within limits.reload_timeout_ms (" +
                              std::to_string(reload_timeout_ms) + " ms); abandoned");
        deadline = std::chrono::steady_clock::time_point::max();
      } else if (deadline != std::chrono::steady_clock::time_point::max()) {
        wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
      } else {
        wait_ms = 1000;
      }
    } else if (reloader.joinable()) {
      reloader.join();
    }
    pollfd pfd{g_signal_pipe[0], POLLIN, 0};
    const int r = poll(&pfd, 1, wait_ms);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    SignalNote note{};
    const ssize_t n = r > 0 ? read(g_signal_pipe[0], &note, sizeof note) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof note)) {
      spdlog::error("signal pipe: {}", n < 0 ? std::strerror(errno) : "short read");
      break;
    }
    if (note.signo == SIGHUP) {
      if (reloading) {
        spdlog::warn("SIGHUP from pid {} ignored: a reload is still running", note.pid);
        continue;
      }
      spdlog::info("SIGHUP from pid {}", note.pid);
      if (reloader.joinable()) reloader.join();
      reloading = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(reload_timeout_ms);
      // Logged and reported by health; a failed reload keeps serving.
      reloader = std::thread([&server, &reloading] {
        (void)server.reload();
        reloading = false;
      });
      continue;
    }
    spdlog::info("{} from pid {}", note.signo == SIGTERM ? "SIGTERM" : "SIGINT", note.pid);
    break;
  }
  if (reloading) server.abandon_reload("abandoned: the daemon is stopping");
  server.stop();
  if (reloader.joinable()) {
    if (reloading) {
      reloader.detach();
      return false;
    }
    reloader.join();
  }
  return true;
}

// The server's options from the loaded config: config and model directories (--config-dir first, then those
// beside the binary), the default model, the start-up self-test's setup and the test-only environment hooks.
ev::Result<dm::ServerOptions> server_options(const char* argv0, const dm::DaemonConfig& config,
                                             const std::string& config_dir, const std::string& testdata_dir) {
  std::vector<std::string> bases = ev::default_config_dirs(argv0);
  if (!config_dir.empty()) bases.insert(bases.begin(), config_dir);
#ifdef EDGEVIT_SOURCE_CONFIG_DIR
  if (bases.empty()) bases.push_back(EDGEVIT_SOURCE_CONFIG_DIR);
#endif
  dm::ServerOptions so;
  so.config = config;
  so.device_dirs = ev::config_subdirs(bases, "devices");
  for (const auto& d : ev::config_subdirs(bases, "models")) {
    const std::string p = d + "/vit-digits.yaml";
    if (std::filesystem::exists(p)) {
      so.default_model_path = p;
      break;
    }
  }
  if (const char* hang = std::getenv("EDGEVITD_TEST_HANG_AFTER")) so.test_hang_after_batches = std::atoi(hang);
  if (const char* delay = std::getenv("EDGEVITD_TEST_RELOAD_DELAY_MS")) so.test_reload_delay_ms = std::atoi(delay);
  // The start-up self-test resolves config and test data like edgevit-selftest (programs/edgevit-selftest/main.cpp).
  st::SelftestOptions selftest;
  selftest.config_dirs = bases;
  selftest.testdata_dir = testdata_dir;
  if (const char* fault = std::getenv("EDGEVITD_TEST_SELFTEST_FAULT")) {  // test-only: proves a failure refuses
    auto f = st::parse_fault(fault);
    if (!f.ok()) return f.status();
    selftest.fault = *f;
  }
  so.model_check = [selftest](const std::string& path, const dm::DaemonConfig& cfg, bool serving) {
    return run_quick_selftest(selftest, path, cfg, serving);
  };
  return so;
}

// Signals: a minimal handler writes {signo, sender pid} to a pipe and the main thread reads it, so no work
// happens in a handler. (Blocking the signals and sigwait()ing is not enough: threads created before main(),
// such as OpenBLAS's pool, would take a SIGTERM with its default action.)
ev::Status install_signal_pipe() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return ev::io_error(std::string("pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return ev::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"edgevitd: edgevit inference daemon (Unix socket API, systemd notify + watchdog, hot reload, GPIO)"};
  app.set_version_flag("--version", "edgevitd 0.1.0");
  std::string config_path, config_dir, testdata_dir;
  Overrides o;
  bool check_only = false;
  app.add_option("--config,-c", config_path, "daemon config (config/daemon/edgevitd.yaml)");
  app.add_option("--model,-m", o.model, "model config; overrides the file's `model`");
  app.add_option("--device,-d", o.device, "device profile name or path, or 'auto'; overrides `device`");
  app.add_option("--socket,-s", o.socket, "Unix socket path; overrides socket.path");
  app.add_option("--log-format", o.log_format, "text | json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", o.log_level, "trace | debug | info | warn | error | critical | off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--config-dir", config_dir, "extra base config directory (holds devices/ and models/)");
  app.add_option("--testdata", testdata_dir,
                 "directory holding digits/test_split.safetensors for the start-up self-test (default: searched)");
  app.add_flag("--check", check_only, "validate the configuration and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  auto config = load_config(config_path, o);
  if (!config.ok()) return fail(config.status());
  setup_logging(config->log_format, config->log_level);
  // Memory the daemon frees goes back to the system: allocations of 1 MiB and more (image decoding, a
  // reload's model) are mmapped and unmapped when freed, whatever sizes came before (glibc otherwise raises
  // its threshold to the largest block freed, up to 32 MiB, and keeps such blocks in the heap of the
  // connection thread that freed them), and few heaps are kept for the many connection threads.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 2);

  auto so = server_options(argv[0], *config, config_dir, testdata_dir);
  if (!so.ok()) return fail(so.status());
  so->reload_config = [config_path, o]() { return load_config(config_path, o); };
  if (check_only) {
    std::printf("%s: ok\n", config_path.empty() ? "flags" : config_path.c_str());
    return 0;
  }

  if (ev::Status st = install_signal_pipe(); !st.ok()) return fail(st);

  auto server = dm::Server::start(*so);
  if (!server.ok()) return fail(server.status());
  const bool finished = serve_until_stop(**server, config->reload_timeout_ms);
  if (!finished) {
    // A reload is still inside a read or a model build that cannot be interrupted: the server has stopped
    // (clients answered, GPIO lines safe, socket removed), so exit now rather than wait for it.
    spdlog::warn("exiting without waiting for the abandoned reload");
    spdlog::default_logger()->flush();
    _exit(0);
  }
  server->reset();
  return 0;
}
