// edgevitd's core, usable in-process (tests) and by programs/edgevitd/main.cpp.
//
//   start(): load model config + device profile -> plan -> budget check -> model_check (edgevitd: the
//            self-test library, quick) -> Engine (one arena) -> warm-up -> self-check (finite, bit-identical on
//            repeat, row-independent) -> pools (connection slots with their frame
//            buffers, request queue) -> threads -> bind + listen -> sd_notify READY=1.
//   Threads: one acceptor (poll on the listening socket), one thread per connection slot (created at
//            start-up, max_connections of them; each reads frames, prepares inputs, queues and answers),
//            one inference worker that owns the Engine and batches queued requests (dynamic batching),
//            a watchdog pinger (when WATCHDOG_USEC is set) and, when configured, GPIO threads.
//   reload(): SIGHUP. stop(): SIGTERM (drain and answer everything in flight).
//
// Static allocation: every buffer a tensor request touches (frame in, input tensor, answer out, top-k
// scratch, the batch input) is sized at start-up (or at a reload to a larger model); steady-state tensor
// requests allocate nothing (tests/daemon/daemon_alloc_test.cpp). Image requests allocate inside stb's
// decoder; health/stats/version answers build JSON text and allocate.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "platform/gpio.h"
#include "serving/daemon_config.h"

namespace edgevit::daemon {

struct ServerOptions {
  DaemonConfig config;
  std::vector<std::string> device_dirs;   // where device profile names are looked up
  std::string default_model_path;         // used when config.model is empty
  GpioBackend* gpio_backend = nullptr;    // not owned; null: libgpiod (when config.gpio.enabled)
  // Test-only: the worker stops making progress after this many batches (-1: never), until stop().
  // edgevitd reads it from EDGEVITD_TEST_HANG_AFTER.
  int test_hang_after_batches = -1;
  // Test-only: every reload sleeps this long before it reads anything (edgevitd: EDGEVITD_TEST_RELOAD_DELAY_MS),
  // standing in for a slow checkpoint.
  int test_reload_delay_ms = 0;
  // What reload() reads (edgevitd: the config file again, with the command-line overrides applied).
  // Null: the current configuration (the model config file is still read again).
  std::function<Result<DaemonConfig>()> reload_config;
  // Checks of a model run after its plan fit the budget and before the daemon creates its engine, so that an
  // engine the check creates is freed before the daemon's arena exists: at start-up, and for a reload's new
  // model (beside: while the old model serves; drain: after the old arena is freed, not on rollback).
  // edgevitd: the self-test library's quick checks (main.cpp). `serving`: other threads are serving requests
  // meanwhile (a reload). An error refuses the model (start-up: exit_code_for its code). Null: none.
  std::function<Status(const std::string& model_path, const DaemonConfig& config, bool serving)> model_check;
};

struct TopResult {
  int index = -1;
  float score = 0;
  std::string label;
};

class Server {
 public:
  // Everything up to READY=1. On error nothing is left running (no socket file, no threads, GPIO
  // released).
  static Result<std::unique_ptr<Server>> start(const ServerOptions& options);
  ~Server();  // stop() if still running

  // SIGHUP: re-reads the config file (or the model config when started without one) and swaps models
  // as documented in docs/daemon.md. Never takes the service down: on failure the old model keeps
  // serving and the error is returned (and reported by health).
  Status reload();
  // Same with an explicit new configuration (tests).
  Status reload_with(const DaemonConfig& config);
  // Called from another thread when a running reload passed its deadline (limits.reload_timeout_ms) or the
  // daemon stops: the reload is reported failed now (`why`), the old model keeps serving, and whatever the
  // reload still loads is never installed.
  void abandon_reload(const std::string& why);

  // SIGTERM: STOPPING=1, stop accepting, answer everything in flight, join every thread, remove the
  // socket, release GPIO lines. Idempotent.
  void stop();

  // JSON texts of the health / stats / version answers.
  std::string health_json() const;
  std::string stats_json() const;

  // Runs one image (encoded bytes) through the queue like a client request; used by the GPIO trigger.
  Result<TopResult> infer_encoded_image(const uint8_t* bytes, size_t size);

  const DaemonConfig& config() const;
  std::string socket_path() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// sd_notify(3) wrapper: a no-op when NOTIFY_SOCKET is unset.
void notify_systemd(const char* state);

}  // namespace edgevit::daemon
