// Internals of edgevitd's Server shared by its source files (not installed, not for other code):
//   server.cpp         start-up, stop, watchdog, LED state, the GPIO trigger's request
//   server_model.cpp   model host: device, model config, labels, plan, Engine, model check, self-check
//   server_conn.cpp    listener: socket, acceptor (slots, eviction, per-uid cap), connection threads, frame
//                      I/O, answers
//   server_worker.cpp  batcher: request queue, inference worker, batches, top-k answers, decode budget
//   server_reload.cpp  SIGHUP reload (beside / drain-and-replace / rollback)
//   server_stats.cpp   health / stats / version JSON
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "platform/gpio.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "serving/decode_budget.h"
#include "serving/gpio_service.h"
#include "serving/protocol.h"
#include "serving/server.h"

namespace edgevit::daemon {

using Clock = std::chrono::steady_clock;
using protocol::ErrorCode;
using protocol::Op;

constexpr int kPollSliceMs = 50;    // connection threads re-check the stop flag this often
constexpr int kStopGraceMs = 1000;  // a frame half-read when stopping gets at most this much longer
constexpr const char* kVersion = "edgevitd 0.1.0";

inline int64_t ms_until(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
}

// One loaded model: spec, labels, Engine (the only owner of its arena) and the batch input buffer.
struct Model {
  ModelSpec spec;
  DeviceProfile device;
  std::unique_ptr<Engine> engine;  // null only after a failed rollback (fault)
  std::vector<std::string> labels;
  uint64_t generation = 0;
  std::string plan_hash;
  int64_t total_bytes = 0;
  int64_t budget_bytes = 0;
  int batch = 1;
  int64_t per_image = 0;  // C*H*W
  int out_dim = 0;
  std::vector<float> batch_input;  // (batch, C, H, W)
};

// Latency histogram: 10 log-spaced buckets per decade from 1 us to 100 s; lock-free, fixed size.
class Histogram {
 public:
  static constexpr int kBuckets = 81;
  void add(uint64_t ns) {
    const double us = std::max(1.0, ns / 1e3);
    const int b = std::min(kBuckets - 1, static_cast<int>(std::floor(std::log10(us) * 10)));
    counts_[b].fetch_add(1, std::memory_order_relaxed);
  }
  // Upper edge of the bucket holding quantile q, in microseconds (0 when empty).
  double quantile_us(double q) const {
    uint64_t total = 0;
    for (const auto& c : counts_) total += c.load();
    if (total == 0) return 0;
    const uint64_t target = static_cast<uint64_t>(std::ceil(q * total));
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b].load();
      if (seen >= std::max<uint64_t>(1, target)) return std::pow(10.0, (b + 1) / 10.0);
    }
    return std::pow(10.0, kBuckets / 10.0);
  }

 private:
  std::atomic<uint64_t> counts_[kBuckets] = {};
};

// Whether build_engine runs ServerOptions::model_check first, and whether other threads serve meanwhile.
enum class ModelCheck { kNone, kAlone, kWhileServing };

struct ErrorInfo {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};


// A connection slot: one client connection at a time, its frame buffers and its in-flight request.
// Sized at start-up; the worker writes the answer straight into `out`.
struct Slot {
  int id = 0;
  int fd = -1;
  ucred peer{};
  size_t in_capacity = 0;
  std::unique_ptr<uint8_t[]> in;  // header + payload (max_frame_bytes); not value-initialised: untouched
                                  // pages stay virtual until a large frame arrives
  std::vector<uint8_t> out;       // the answer frame
  size_t out_bytes = 0;

  protocol::Header req;
  std::shared_ptr<Model> model;   // the model `input` was prepared for
  std::vector<float> input;       // (n, C, H, W)
  int n = 0;
  int topk = 5;
  bool want_logits = false;
  bool want_embedding = false;  // the embedding output section (protocol.h)
  bool want_tokens = false;     // the tokens output section
  Clock::time_point received;
  std::vector<int> order;         // top-k scratch, out_dim

  std::mutex mu;
  std::condition_variable cv;
  bool assigned = false;          // fd handed over by the acceptor
  bool done = false;              // answer ready in `out`
  std::thread thread;

  // Guarded by Impl::free_mu: the slot holds a connection (from the acceptor's hand-over until it is free
  // again), and the peer uid it belongs to (the per-uid cap).
  bool in_use = false;
  uint32_t owner_uid = 0;
  // Steady-clock time since which the connection has waited for the first byte of a frame (0: not idle).
  std::atomic<Clock::rep> idle_since{0};
  std::atomic<bool> evict{false};  // the acceptor asks this idle connection to make room
};

struct Server::Impl {
  Server* self = nullptr;  // the owner (health/stats answers)
  ServerOptions options;
  DaemonConfig config;
  std::string model_path;

  // Current model (the worker swaps it; connection threads take snapshots to prepare inputs).
  mutable std::mutex model_mu;
  std::shared_ptr<Model> model;
  uint64_t next_generation = 1;

  // Listening socket and acceptor.
  int listen_fd = -1;
  int wake_fd = -1;  // eventfd: wakes the acceptor on stop
  std::thread acceptor;

  // Connection slots.
  std::vector<std::unique_ptr<Slot>> slots;
  std::mutex free_mu;
  std::vector<Slot*> free_slots;  // capacity max_connections, reserved at start-up
  std::condition_variable free_cv;  // a slot became free
  std::unique_ptr<Slot> internal_slot;  // GPIO trigger requests
  std::mutex internal_mu;

  // Image decoding in flight, all connections together (limits.decode_budget_bytes).
  std::unique_ptr<DecodeBudget> decode_budget;

  // Request queue (bounded ring of slots) and the worker.
  mutable std::mutex q_mu;
  std::condition_variable q_cv;
  std::vector<Slot*> ring;
  size_t ring_head = 0, ring_count = 0;
  std::vector<Slot*> batch_slots;  // the worker's current batch, capacity = batch
  std::thread worker;
  bool worker_stop = false;               // guarded by q_mu
  bool worker_done = false;               // guarded by q_mu: the worker has returned (swap_cv is notified)
  std::shared_ptr<Model> pending_swap;    // guarded by q_mu: a model loaded beside the old one
  std::function<void()> pending_replace;  // guarded by q_mu: drain-and-replace, run by the worker
  std::condition_variable swap_cv;
  std::atomic<int> preparing{0};          // connections between "frame started" and "queued"
  std::atomic<bool> in_inference{false};
  std::atomic<uint64_t> heartbeat{0};
  int tick_ms = kPollSliceMs;

  // Test hang.
  std::mutex hang_mu;
  std::condition_variable hang_cv;

  // Watchdog.
  std::thread watchdog;
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool wd_stop = false;
  std::atomic<Clock::rep> last_progress{0};

  // GPIO.
  std::unique_ptr<GpioBackend> owned_gpio;
  std::unique_ptr<GpioService> gpio;

  // State.
  std::atomic<bool> stopping{false};
  std::atomic<bool> stopped{false};
  Clock::time_point stop_time;
  std::mutex stop_mu;
  std::mutex reload_mu;
  Clock::time_point started = Clock::now();
  mutable std::mutex reload_info_mu;
  std::string last_reload_result = "none";  // none | ok | failed | rolled_back
  std::string last_reload_message;
  int64_t last_reload_unix_ms = 0;
  std::atomic<bool> fault{false};
  std::atomic<bool> reload_abandoned{false};  // the running reload must not install its model

  // Stats.
  std::atomic<uint64_t> requests_ok{0}, images_ok{0}, batches{0}, busy{0}, accepted{0}, rejected_peers{0},
      no_slot{0}, active_connections{0}, reloads_ok{0}, reloads_failed{0}, evicted{0}, handler_exceptions{0};
  std::atomic<uint64_t> errors[16] = {};
  Histogram latency;
  Histogram infer_latency;

  // ---- model loading (server_model.cpp) ------------------------------------------------------------
  Result<DeviceProfile> resolve_device(const std::string& name) const;
  Result<std::shared_ptr<Model>> load_model(const std::string& path, const DaemonConfig& cfg, bool build_engine);
  Status build_engine(Model* m, const DaemonConfig& cfg, ModelCheck check);
  Status self_check(Model* m);

  // ---- serving ---------------------------------------------------------------------------------
  Status check_socket_free() const;
  Status open_socket();
  void accept_loop();
  void admit(int fd);
  Slot* take_slot(uint32_t uid);
  Slot* longest_idle(const uint32_t* uid);
  void refuse(int fd, const ucred& peer, ErrorCode code, const std::string& message);
  void refuse_backlog();
  void connection_loop(Slot* s);
  void serve_connection(Slot* s);
  bool serve_request(Slot* s, bool* keep_open);
  bool serve_infer(Slot* s);
  bool answer_error(Slot* s, ErrorCode code, const std::string& message);
  bool say_goodbye(Slot* s);
  std::string version_json() const;
  bool read_exact(Slot* s, uint8_t* p, size_t n, Clock::time_point deadline, bool idle, bool* timed_out);
  bool send_all(int fd, const uint8_t* p, size_t n);
  // `budget_deadline`: how long an image may wait for its decode budget (the worker, re-preparing after a
  // reload, passes now: it never waits).
  bool prepare(Slot* s, const std::shared_ptr<Model>& m, ErrorInfo* err, Clock::time_point budget_deadline);
  Status decode_within_budget(const uint8_t* image, size_t size, const Model& m, float* dst, ErrorInfo* err,
                              Clock::time_point budget_deadline);
  void encode_error(Slot* s, ErrorCode code, const std::string& message);
  void encode_json(Slot* s, const std::string& json);
  void log_request_error(const Slot* s, ErrorCode code, const std::string& message);
  bool enqueue(Slot* s);
  void wait_done(Slot* s);
  void worker_loop();
  void run_batch(const std::shared_ptr<Model>& m, size_t count);
  size_t gather_batch(const std::shared_ptr<Model>& m, size_t count, int* images);
  void infer_and_answer(const std::shared_ptr<Model>& m, size_t first, size_t count, int images);
  void answer_slot(Slot* s, const Model& m, const float* rows, int row, int images, uint64_t infer_ns);
  void fail_slot(Slot* s, ErrorCode code, const std::string& message);
  void finish_slot(Slot* s);
  void ensure_out_capacity(Slot* s, const Model& m, int n);
  void watchdog_loop(uint64_t usec);
  LedState led_state() const;
  std::shared_ptr<Model> current_model() const {
    std::lock_guard<std::mutex> lock(model_mu);
    return model;
  }
  void record_reload(const std::string& result, const std::string& message);
  // ---- reload (server_reload.cpp) ----------------------------------------------------------------
  void notify_reloading();
  Status reload_guarded(const DaemonConfig& cfg);
  Status reload_locked(const DaemonConfig& cfg);
  Status guarded_build(Model* m, const DaemonConfig& cfg, ModelCheck check);
  Status swap_beside(const std::shared_ptr<Model>& m, const DaemonConfig& cfg);
  Status replace_draining(const std::shared_ptr<Model>& old, const std::shared_ptr<Model>& m, const DaemonConfig& cfg,
                          std::string* outcome);
  Status finish_reload(const Status& s, const std::string& result);
  void stop();
};


}  // namespace edgevit::daemon
