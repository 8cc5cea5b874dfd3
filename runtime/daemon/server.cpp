#include "runtime/daemon/server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "platform/detect.h"
#include "platform/device_registry.h"
#include "kernels/cpu/kernels.h"
#include "runtime/config.h"
#include "runtime/daemon/edgevit_client.h"
#include "runtime/daemon/gpio_service.h"
#include "runtime/daemon/protocol.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"

namespace edgevit::daemon {

using Clock = std::chrono::steady_clock;
using protocol::ErrorCode;
using protocol::Op;

void notify_systemd(const char* state) { sd_notify(0, state); }

namespace {

constexpr int kPollSliceMs = 50;    // connection threads re-check the stop flag this often
constexpr int kStopGraceMs = 1000;  // a frame half-read when stopping gets at most this much longer
constexpr const char* kVersion = "edgevitd 0.1.0";

int64_t ms_until(Clock::time_point t) {
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

}  // namespace

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
  Clock::time_point received;
  std::vector<int> order;         // top-k scratch, out_dim

  std::mutex mu;
  std::condition_variable cv;
  bool assigned = false;          // fd handed over by the acceptor
  bool done = false;              // answer ready in `out`
  std::thread thread;
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
  std::unique_ptr<Slot> internal_slot;  // GPIO trigger requests
  std::mutex internal_mu;

  // Request queue (bounded ring of slots) and the worker.
  mutable std::mutex q_mu;
  std::condition_variable q_cv;
  std::vector<Slot*> ring;
  size_t ring_head = 0, ring_count = 0;
  std::vector<Slot*> batch_slots;  // the worker's current batch, capacity = batch
  std::thread worker;
  bool worker_stop = false;               // guarded by q_mu
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

  // Stats.
  std::atomic<uint64_t> requests_ok{0}, images_ok{0}, batches{0}, busy{0}, accepted{0}, rejected_peers{0},
      no_slot{0}, active_connections{0}, reloads_ok{0}, reloads_failed{0};
  std::atomic<uint64_t> errors[16] = {};
  Histogram latency;
  Histogram infer_latency;

  // ---- model loading -----------------------------------------------------------------------------
  Result<DeviceProfile> resolve_device(const std::string& name) const;
  Result<std::shared_ptr<Model>> load_model(const std::string& path, const DaemonConfig& cfg, bool build_engine);
  Status build_engine(Model* m, const DaemonConfig& cfg, ModelCheck check);
  Status self_check(Model* m);

  // ---- serving ---------------------------------------------------------------------------------
  Status open_socket();
  void accept_loop();
  void connection_loop(Slot* s);
  void serve_connection(Slot* s);
  bool read_exact(Slot* s, uint8_t* p, size_t n, Clock::time_point deadline, bool idle, bool* timed_out);
  bool send_all(int fd, const uint8_t* p, size_t n);
  bool prepare(Slot* s, const std::shared_ptr<Model>& m, ErrorInfo* err);
  void encode_error(Slot* s, ErrorCode code, const std::string& message);
  void encode_json(Slot* s, const std::string& json);
  void log_request_error(const Slot* s, ErrorCode code, const std::string& message);
  bool enqueue(Slot* s);
  void wait_done(Slot* s);
  void worker_loop();
  void run_batch(const std::shared_ptr<Model>& m, size_t count);
  void finish_slot(Slot* s);
  void ensure_out_capacity(Slot* s, const Model& m, int n);
  void watchdog_loop(uint64_t usec);
  LedState led_state() const;
  std::shared_ptr<Model> current_model() const {
    std::lock_guard<std::mutex> lock(model_mu);
    return model;
  }
  void record_reload(const std::string& result, const std::string& message);
  void stop();
};

// ---- model loading -------------------------------------------------------------------------------

Result<DeviceProfile> Server::Impl::resolve_device(const std::string& name) const {
  if (name.empty() || name == "auto") {
    EV_ASSIGN_OR_RETURN(Detection d, detect_device(options.device_dirs));
    return d.profile;
  }
  return find_device_profile(name, options.device_dirs);
}

Status Server::Impl::build_engine(Model* m, const DaemonConfig& cfg, ModelCheck check) {
  if (check != ModelCheck::kNone && options.model_check) {
    EV_RETURN_IF_ERROR(options.model_check(m->spec.source_path, cfg, check == ModelCheck::kWhileServing));
  }
  EngineOptions eo;
  eo.plan.batch = m->batch;
  eo.threads = cfg.threads;
  eo.tune_gemms = cfg.kernel_tuning;
  eo.tune_attention = cfg.kernel_tuning;
  EV_ASSIGN_OR_RETURN(m->engine, Engine::create(m->spec, m->device, eo));
  return self_check(m);
}

// Warm-up and self-check on deterministic pseudo-random input (independent of any test data): the
// outputs must be finite and bit-identical over repeated full-batch runs, and an image's logits must not
// depend on its row in the batch. (They may differ in the last bits between batch sizes: OpenBLAS picks
// its sgemm kernel by M. Each answer reports the batch it ran in; docs/daemon.md.)
Status Server::Impl::self_check(Model* m) {
  Engine& e = *m->engine;
  uint32_t s = 0x9e3779b9u;
  for (float& v : m->batch_input) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  const size_t nout = static_cast<size_t>(m->batch) * m->out_dim;
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    EV_RETURN_IF_ERROR(e.infer(m->batch_input.data(), m->batch).with_context("self-check"));
    const float* out = e.logits();
    for (size_t i = 0; i < nout; ++i)
      if (!std::isfinite(out[i])) return check_failed("self-check: " + m->spec.name + ": non-finite logit at " + std::to_string(i));
    if (rep == 0) {
      first.assign(out, out + nout);
    } else if (std::memcmp(first.data(), out, nout * sizeof(float)) != 0) {
      return check_failed("self-check: " + m->spec.name + ": logits differ between identical runs");
    }
  }
  if (m->batch > 1) {
    // Rotate the batch by one image: every image must get the same logits in its new row.
    std::rotate(m->batch_input.begin(), m->batch_input.begin() + m->per_image, m->batch_input.end());
    EV_RETURN_IF_ERROR(e.infer(m->batch_input.data(), m->batch).with_context("self-check"));
    const size_t od = static_cast<size_t>(m->out_dim);
    for (int i = 0; i < m->batch; ++i) {
      const int was = (i + 1) % m->batch;
      if (std::memcmp(first.data() + was * od, e.logits() + i * od, od * sizeof(float)) != 0)
        return check_failed("self-check: " + m->spec.name + ": an image's logits depend on its row in the batch");
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<Model>> Server::Impl::load_model(const std::string& path, const DaemonConfig& cfg,
                                                        bool with_engine) {
  auto m = std::make_shared<Model>();
  EV_ASSIGN_OR_RETURN(m->spec, load_model_spec(path));
  EV_ASSIGN_OR_RETURN(m->device, resolve_device(cfg.device));
  if (!m->spec.labels_path.empty()) {
    EV_ASSIGN_OR_RETURN(m->labels, load_labels(m->spec.labels_path));
  }
  m->batch = cfg.max_batch > 0 ? std::min(cfg.max_batch, m->spec.max_batch) : m->spec.max_batch;
  PlanOptions po;
  po.batch = m->batch;
  EV_ASSIGN_OR_RETURN(Plan plan, make_plan(m->spec, m->device, po));
  if (!plan.fits) return does_not_fit(path + ": " + does_not_fit_message(plan));
  m->plan_hash = plan.hash_hex();
  m->total_bytes = plan.total_bytes;
  m->budget_bytes = plan.budget_bytes;
  const VitArch& a = m->spec.arch;
  m->per_image = static_cast<int64_t>(a.in_chans) * a.img_size * a.img_size;
  m->out_dim = a.num_classes > 0 ? a.num_classes : a.embed_dim;
  m->batch_input.assign(static_cast<size_t>(m->per_image) * m->batch, 0.f);
  if (with_engine) EV_RETURN_IF_ERROR(build_engine(m.get(), cfg, ModelCheck::kAlone));
  return m;
}

// ---- socket ---------------------------------------------------------------------------------------

Status Server::Impl::open_socket() {
  const std::string& path = config.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A socket file left by a crashed daemon is removed; a live daemon on it is an error.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return io_error("socket.path " + path + " exists and is not a socket");
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (live) return io_error("socket.path " + path + ": another edgevitd is serving on it");
    unlink(path.c_str());
  }
  listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd < 0) return io_error(std::string("socket: ") + std::strerror(errno));
  // Bind with the final mode already in the umask so the socket is never briefly more open than asked.
  const mode_t old = umask(static_cast<mode_t>(~config.socket_mode & 0777));
  const int rc = bind(listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) return io_error("bind " + path + ": " + std::strerror(bind_errno));
  if (chmod(path.c_str(), config.socket_mode) != 0)
    return io_error("chmod " + path + ": " + std::strerror(errno));
  if (!config.socket_group.empty()) {
    gid_t gid = 0;
    if (config.socket_group.find_first_not_of("0123456789") == std::string::npos) {
      gid = static_cast<gid_t>(std::stoul(config.socket_group));
    } else {
      const group* g = getgrnam(config.socket_group.c_str());
      if (g == nullptr) return not_found("socket.group '" + config.socket_group + "': no such group");
      gid = g->gr_gid;
    }
    if (chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0)
      return io_error("chown " + path + " to group " + config.socket_group + ": " + std::strerror(errno));
  }
  if (listen(listen_fd, std::max(16, config.max_connections)) != 0)
    return io_error("listen " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

void Server::Impl::accept_loop() {
  pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  while (!stopping) {
    const int r = poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (stopping || (fds[1].revents & POLLIN)) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR) spdlog::warn("accept: {}", std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ++accepted;
    ucred peer{};
    socklen_t len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) peer.pid = 0, peer.uid = peer.gid = static_cast<uid_t>(-1);
    const bool any = config.allow_uids.empty() && config.allow_gids.empty();
    const bool allowed =
        any || std::find(config.allow_uids.begin(), config.allow_uids.end(), peer.uid) != config.allow_uids.end() ||
        std::find(config.allow_gids.begin(), config.allow_gids.end(), peer.gid) != config.allow_gids.end();
    Slot* slot = nullptr;
    if (allowed) {
      std::lock_guard<std::mutex> lock(free_mu);
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      }
    }
    if (slot == nullptr) {
      // Answer with one error frame (a client reading it learns why) and close.
      Slot tmp;
      tmp.peer = peer;
      tmp.req.op = 0;
      const ErrorCode code = allowed ? ErrorCode::kBusy : ErrorCode::kPermissionDenied;
      const std::string msg = allowed ? "all " + std::to_string(config.max_connections) + " connection slots in use"
                                      : "peer uid " + std::to_string(peer.uid) + " gid " + std::to_string(peer.gid) +
                                            " is not allowed (socket.allow_uids / allow_gids)";
      if (allowed) ++no_slot; else ++rejected_peers;
      ++errors[static_cast<int>(code)];
      encode_error(&tmp, code, msg);
      log_request_error(&tmp, code, msg);
      send(fd, tmp.out.data(), tmp.out_bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->fd = fd;
      slot->peer = peer;
      slot->assigned = true;
    }
    slot->cv.notify_all();
  }
  close(listen_fd);
  listen_fd = -1;
  unlink(config.socket_path.c_str());
}

// ---- connections --------------------------------------------------------------------------------

void Server::Impl::connection_loop(Slot* s) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->assigned || stopping.load(); });
      if (!s->assigned) return;
    }
    ++active_connections;
    serve_connection(s);
    close(s->fd);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->fd = -1;
      s->assigned = false;
    }
    {
      std::lock_guard<std::mutex> lock(free_mu);
      free_slots.push_back(s);
    }
    // Counted down only once the slot is free again: stats showing `active` N mean max_connections - N
    // slots are ready for new clients.
    --active_connections;
    if (stopping) return;
  }
}

// Reads n bytes by `deadline`. `idle`: no byte of this frame has arrived yet, so a stop ends it quietly.
bool Server::Impl::read_exact(Slot* s, uint8_t* p, size_t n, Clock::time_point deadline, bool idle,
                              bool* timed_out) {
  *timed_out = false;
  while (n > 0) {
    if (stopping) {
      // Between frames a stop closes the connection, unless the next request has already arrived: that
      // one is in flight and is answered.
      if (idle) {
        pollfd pending{s->fd, POLLIN, 0};
        if (poll(&pending, 1, 0) <= 0 || (pending.revents & POLLIN) == 0) return false;
      }
      deadline = std::min(deadline, stop_time + std::chrono::milliseconds(kStopGraceMs));
    }
    const int64_t left = ms_until(deadline);
    if (left <= 0) {
      *timed_out = true;
      return false;
    }
    pollfd pfd{s->fd, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    const ssize_t got = recv(s->fd, p, n, MSG_DONTWAIT);
    if (got == 0) return false;  // the client went away
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
    idle = false;
  }
  return true;
}

bool Server::Impl::send_all(int fd, const uint8_t* p, size_t n) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.write_deadline_ms);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
    const int64_t left = ms_until(deadline);
    if (left <= 0) return false;
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(left));
  }
  return true;
}

void Server::Impl::log_request_error(const Slot* s, ErrorCode code, const std::string& message) {
  spdlog::warn("request error {} (op {}, id {}) from pid {} uid {} gid {}: {}", protocol::error_code_name(code),
               s->req.op, s->req.request_id, s->peer.pid, s->peer.uid, s->peer.gid, message);
}

void Server::Impl::encode_error(Slot* s, ErrorCode code, const std::string& message) {
  const size_t msg = std::min<size_t>(message.size(), 1024);
  const size_t total = protocol::kHeaderBytes + 8 + msg;
  if (s->out.size() < total) s->out.resize(total);
  protocol::Header h;
  h.op = s->req.op;
  h.flags = protocol::kFlagResponse | protocol::kFlagError;
  h.payload_bytes = static_cast<uint32_t>(8 + msg);
  h.request_id = s->req.request_id;
  protocol::encode_header(h, s->out.data());
  protocol::put_u32(s->out.data() + protocol::kHeaderBytes, static_cast<uint32_t>(code));
  protocol::put_u32(s->out.data() + protocol::kHeaderBytes + 4, static_cast<uint32_t>(msg));
  std::memcpy(s->out.data() + protocol::kHeaderBytes + 8, message.data(), msg);
  s->out_bytes = total;
}

void Server::Impl::encode_json(Slot* s, const std::string& json) {
  const size_t total = protocol::kHeaderBytes + json.size();
  if (s->out.size() < total) s->out.resize(total);
  protocol::Header h;
  h.op = s->req.op;
  h.flags = protocol::kFlagResponse;
  h.payload_bytes = static_cast<uint32_t>(json.size());
  h.request_id = s->req.request_id;
  protocol::encode_header(h, s->out.data());
  std::memcpy(s->out.data() + protocol::kHeaderBytes, json.data(), json.size());
  s->out_bytes = total;
}

void Server::Impl::serve_connection(Slot* s) {
  uint8_t* head = s->in.get();
  for (;;) {
    bool timed_out = false;
    s->req = protocol::Header();
    // Idle: wait for the first byte of the next frame (idle timeout); then the frame must be complete by
    // the read deadline.
    if (!read_exact(s, head, 1, Clock::now() + std::chrono::milliseconds(config.idle_timeout_ms), true, &timed_out))
      return;
    s->received = Clock::now();
    const auto deadline = s->received + std::chrono::milliseconds(config.read_deadline_ms);
    auto fail = [&](ErrorCode code, const std::string& message) {
      ++errors[static_cast<int>(code)];
      log_request_error(s, code, message);
      encode_error(s, code, message);
      return send_all(s->fd, s->out.data(), s->out_bytes);
    };
    if (!read_exact(s, head + 1, protocol::kHeaderBytes - 1, deadline, false, &timed_out)) {
      if (timed_out) fail(ErrorCode::kTimeout, "header not complete within " + std::to_string(config.read_deadline_ms) + " ms");
      else log_request_error(s, ErrorCode::kBadFrame, "connection closed inside a frame header");
      return;
    }
    s->req = protocol::decode_header(head);  // op and request_id for the error answer, even if refused
    protocol::ParseError perr;
    if (!protocol::check_header(head, protocol::kHeaderBytes, config.max_frame_bytes, &s->req, &perr))
      return (void)fail(perr.code, perr.message);
    const bool infer = s->req.op == static_cast<uint16_t>(Op::kInferImage) ||
                       s->req.op == static_cast<uint16_t>(Op::kInferTensor);
    if (infer) ++preparing;
    struct PreparingGuard {
      std::atomic<int>* counter;
      ~PreparingGuard() {
        if (counter) --*counter;
      }
    } guard{infer ? &preparing : nullptr};
    if (!read_exact(s, head + protocol::kHeaderBytes, s->req.payload_bytes, deadline, false, &timed_out)) {
      if (timed_out) fail(ErrorCode::kTimeout, "payload not complete within " + std::to_string(config.read_deadline_ms) + " ms");
      else log_request_error(s, ErrorCode::kBadFrame, "connection closed inside a frame payload");
      return;
    }
    if (infer) {
      ErrorInfo err;
      if (!prepare(s, current_model(), &err)) {
        if (!fail(err.code, err.message)) return;
        continue;
      }
      if (!enqueue(s)) {
        s->model.reset();
        ++busy;
        if (!fail(ErrorCode::kBusy, "request queue full (limits.queue_depth " + std::to_string(config.queue_depth) + ")"))
          return;
        continue;
      }
      guard.counter = nullptr;  // enqueue() already counted it down
      wait_done(s);
      if (!send_all(s->fd, s->out.data(), s->out_bytes)) {
        log_request_error(s, ErrorCode::kBadFrame, "client vanished before taking its answer");
        return;
      }
      continue;
    }
    // Health, stats, version, or an unknown op (the model input plays no part in those).
    protocol::ParsedRequest parsed;
    if (!protocol::parse_payload(s->req, head + protocol::kHeaderBytes, s->req.payload_bytes, protocol::ModelInput(),
                                 &parsed, &perr)) {
      if (!fail(perr.code, perr.message)) return;
      continue;
    }
    std::string json;
    if (parsed.op == Op::kVersion) {
      nlohmann::ordered_json j{{"daemon", kVersion}, {"protocol", protocol::kProtocolVersion}};
      json = j.dump();
    } else {
      json = parsed.op == Op::kHealth ? self->health_json() : self->stats_json();
    }
    encode_json(s, json);
    if (!send_all(s->fd, s->out.data(), s->out_bytes)) return;
  }
}

// Validates the request against model `m` (protocol::parse_payload) and fills s->input (n images). Tensor
// requests allocate nothing; image requests allocate inside the decoder.
bool Server::Impl::prepare(Slot* s, const std::shared_ptr<Model>& m, ErrorInfo* err) {
  const VitArch& a = m->spec.arch;
  protocol::ModelInput input;
  input.name = m->spec.name;
  input.in_chans = static_cast<uint32_t>(a.in_chans);
  input.img_size = static_cast<uint32_t>(a.img_size);
  input.max_batch = static_cast<uint32_t>(m->batch);
  protocol::ParsedRequest r;
  protocol::ParseError perr;
  if (!protocol::parse_payload(s->req, s->in.get() + protocol::kHeaderBytes, s->req.payload_bytes, input, &r,
                               &perr)) {
    err->code = perr.code;
    err->message = perr.message;
    return false;
  }
  s->topk = std::min(r.topk == 0 ? config.default_topk : static_cast<int>(r.topk), m->out_dim);
  s->want_logits = r.want_logits;
  s->model = m;
  const size_t need = static_cast<size_t>(m->per_image) * m->batch;
  if (s->input.size() < need) s->input.resize(need);
  if (s->order.size() < static_cast<size_t>(m->out_dim)) s->order.resize(m->out_dim);
  if (r.op == Op::kInferImage) {
    const Status st = decode_image(r.image, r.image_bytes, "request image", m->spec, s->input.data());
    if (!st.ok()) {
      err->code = ErrorCode::kBadImage;
      err->message = st.message();
      return false;
    }
  } else {
    std::memcpy(s->input.data(), r.tensor, r.tensor_bytes);  // r.n <= m->batch images
  }
  s->n = static_cast<int>(r.n);
  ensure_out_capacity(s, *m, s->n);
  return true;
}

void Server::Impl::ensure_out_capacity(Slot* s, const Model& m, int n) {
  const size_t k = static_cast<size_t>(std::min(m.out_dim, static_cast<int>(protocol::kMaxTopk)));
  const size_t need = protocol::kHeaderBytes + protocol::kInferAnswerFixedBytes +
                      static_cast<size_t>(n) * k * (12 + protocol::kMaxLabelBytes) +
                      static_cast<size_t>(n) * m.out_dim * sizeof(float) + 8 + 1024;
  if (s->out.size() < need) s->out.resize(need);
}

bool Server::Impl::enqueue(Slot* s) {
  {
    std::lock_guard<std::mutex> lock(q_mu);
    --preparing;
    if (ring_count == ring.size()) return false;
    s->done = false;
    ring[(ring_head + ring_count) % ring.size()] = s;
    ++ring_count;
  }
  q_cv.notify_one();
  return true;
}

void Server::Impl::wait_done(Slot* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [&] { return s->done; });
}

// ---- worker ----------------------------------------------------------------------------------------

void Server::Impl::worker_loop() {
  uint64_t batches_done = 0;
  // OpenMP's thread count is per calling thread (Engine::create set it in the thread that made the
  // engine): set it here too, or every parallel region of this thread uses all cores.
  if (model && model->engine) cpu_init_threads(model->engine->threads());
  for (;;) {
    heartbeat.fetch_add(1, std::memory_order_relaxed);
    last_progress = Clock::now().time_since_epoch().count();
    std::shared_ptr<Model> m;
    size_t count = 0;
    {
      std::unique_lock<std::mutex> lock(q_mu);
      q_cv.wait_for(lock, std::chrono::milliseconds(tick_ms),
                    [&] { return ring_count > 0 || worker_stop || pending_swap || pending_replace; });
      if (pending_swap) {
        std::lock_guard<std::mutex> ml(model_mu);
        model = std::move(pending_swap);
        pending_swap.reset();
        cpu_init_threads(model->engine->threads());
        swap_cv.notify_all();
      }
      if (pending_replace) {
        auto task = std::move(pending_replace);
        pending_replace = nullptr;
        lock.unlock();
        task();
        swap_cv.notify_all();
        continue;
      }
      if (ring_count == 0) {
        if (worker_stop) return;
        continue;
      }
      m = current_model();
      // Dynamic batching: take queued requests while they fit; wait up to max_wait_us for more only while
      // other connections are in the middle of sending one.
      const int cap = m->batch;
      int images = 0;
      const auto deadline = Clock::now() + std::chrono::microseconds(config.max_wait_us);
      for (;;) {
        while (ring_count > 0 && count < batch_slots.size() && images + ring[ring_head]->n <= cap) {
          Slot* s = ring[ring_head];
          ring_head = (ring_head + 1) % ring.size();
          --ring_count;
          images += s->n;
          batch_slots[count++] = s;
        }
        if (images >= cap || ring_count > 0 || count == batch_slots.size()) break;
        if (config.max_wait_us == 0 || preparing.load() == 0 || Clock::now() >= deadline) break;
        q_cv.wait_until(lock, deadline);
      }
    }
    if (options.test_hang_after_batches >= 0 && batches_done >= static_cast<uint64_t>(options.test_hang_after_batches)) {
      spdlog::warn("test hang: the worker stops making progress (EDGEVITD_TEST_HANG_AFTER)");
      std::unique_lock<std::mutex> lock(hang_mu);
      hang_cv.wait(lock, [&] { return stopping.load(); });
    }
    run_batch(m, count);
    ++batches_done;
  }
}

void Server::Impl::run_batch(const std::shared_ptr<Model>& m, size_t count) {
  in_inference = true;
  // Inputs prepared for an older model are prepared again for this one (after a reload).
  size_t ready = 0;
  int images = 0;
  for (size_t i = 0; i < count; ++i) {
    Slot* s = batch_slots[i];
    if (s->model != m) {
      ErrorInfo err;
      if (!m->engine || !prepare(s, m, &err) || images + s->n > m->batch) {
        if (!m->engine) err = {ErrorCode::kInternal, "no model loaded (a reload failed and its rollback failed)"};
        else if (err.message.empty()) err = {ErrorCode::kBusy, "model changed; retry"};
        ++errors[static_cast<int>(err.code)];
        log_request_error(s, err.code, err.message);
        encode_error(s, err.code, err.message);
        finish_slot(s);
        continue;
      }
    }
    std::memcpy(m->batch_input.data() + static_cast<size_t>(images) * m->per_image, s->input.data(),
                static_cast<size_t>(s->n) * m->per_image * sizeof(float));
    images += s->n;
    batch_slots[ready++] = s;
  }
  if (ready == 0) {
    in_inference = false;
    return;
  }
  const auto t0 = Clock::now();
  Status st = m->engine ? m->engine->infer(m->batch_input.data(), images)
                        : Status(StatusCode::kInternal, "no model loaded");
  const uint64_t infer_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  infer_latency.add(infer_ns);
  ++batches;
  const float* logits = st.ok() ? m->engine->logits() : nullptr;
  int row = 0;
  for (size_t i = 0; i < ready; ++i) {
    Slot* s = batch_slots[i];
    if (!st.ok()) {
      ++errors[static_cast<int>(ErrorCode::kInternal)];
      log_request_error(s, ErrorCode::kInternal, st.message());
      encode_error(s, ErrorCode::kInternal, st.message());
      finish_slot(s);
      continue;
    }
    const int k = s->topk;
    const int od = m->out_dim;
    uint8_t* o = s->out.data() + protocol::kHeaderBytes;
    protocol::put_u32(o, static_cast<uint32_t>(s->n));
    protocol::put_u32(o + 4, static_cast<uint32_t>(k));
    protocol::put_u32(o + 8, s->want_logits ? static_cast<uint32_t>(od) : 0u);
    protocol::put_u32(o + 12, 0);
    protocol::put_u64(o + 24, infer_ns);
    protocol::put_u32(o + 32, static_cast<uint32_t>(images));
    protocol::put_u32(o + 36, static_cast<uint32_t>(row));
    uint8_t* w = o + protocol::kInferAnswerFixedBytes;
    for (int img = 0; img < s->n; ++img) {
      const float* r = logits + static_cast<size_t>(row + img) * od;
      const float mx = *std::max_element(r, r + od);
      double sum = 0;
      for (int c = 0; c < od; ++c) sum += std::exp(static_cast<double>(r[c]) - mx);
      std::iota(s->order.begin(), s->order.begin() + od, 0);
      std::partial_sort(s->order.begin(), s->order.begin() + k, s->order.begin() + od,
                        [r](int a, int b) { return r[a] > r[b] || (r[a] == r[b] && a < b); });
      for (int j = 0; j < k; ++j) {
        const int c = s->order[j];
        const float score = static_cast<float>(std::exp(static_cast<double>(r[c]) - mx) / sum);
        const std::string* label = c < static_cast<int>(m->labels.size()) ? &m->labels[c] : nullptr;
        const uint32_t len = label ? static_cast<uint32_t>(std::min(label->size(), protocol::kMaxLabelBytes)) : 0u;
        protocol::put_u32(w, static_cast<uint32_t>(c));
        protocol::put_f32(w + 4, score);
        protocol::put_u32(w + 8, len);
        w += 12;
        if (len > 0) std::memcpy(w, label->data(), len);
        const uint32_t padded = (len + 3u) & ~3u;
        std::memset(w + len, 0, padded - len);
        w += padded;
      }
    }
    if (s->want_logits) {
      const size_t bytes = static_cast<size_t>(s->n) * od * sizeof(float);
      std::memcpy(w, logits + static_cast<size_t>(row) * od, bytes);
      w += bytes;
    }
    row += s->n;
    const uint64_t lat = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s->received).count();
    protocol::put_u64(o + 16, lat);
    latency.add(lat);
    protocol::Header h;
    h.op = s->req.op;
    h.flags = protocol::kFlagResponse;
    h.payload_bytes = static_cast<uint32_t>(w - o);
    h.request_id = s->req.request_id;
    protocol::encode_header(h, s->out.data());
    s->out_bytes = static_cast<size_t>(w - s->out.data());
    ++requests_ok;
    images_ok += s->n;
    finish_slot(s);
  }
  in_inference = false;
}

void Server::Impl::finish_slot(Slot* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->model.reset();
    s->done = true;
  }
  s->cv.notify_all();
}

// ---- watchdog ---------------------------------------------------------------------------------------

void Server::Impl::watchdog_loop(uint64_t usec) {
  const auto interval = std::chrono::microseconds(usec / 2);
  uint64_t seen = heartbeat.load();
  std::unique_lock<std::mutex> lock(wd_mu);
  while (!wd_cv.wait_for(lock, interval, [&] { return wd_stop; })) {
    const uint64_t now = heartbeat.load();
    if (now != seen) {
      sd_notify(0, "WATCHDOG=1");
      seen = now;
    } else {
      spdlog::error("watchdog: the inference worker made no progress for {} ms; not pinging systemd", usec / 2000);
    }
  }
}

LedState Server::Impl::led_state() const {
  if (stopping) return LedState::kOff;
  const auto last = Clock::time_point(Clock::duration(last_progress.load()));
  if (fault || Clock::now() - last > std::chrono::seconds(2)) return LedState::kFault;
  {
    std::lock_guard<std::mutex> lock(q_mu);
    if (ring_count > 0) return LedState::kBusy;
  }
  return in_inference ? LedState::kBusy : LedState::kReady;
}

void Server::Impl::record_reload(const std::string& result, const std::string& message) {
  std::lock_guard<std::mutex> lock(reload_info_mu);
  last_reload_result = result;
  last_reload_message = message;
  last_reload_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Server::Impl::stop() {
  std::lock_guard<std::mutex> lock(stop_mu);
  if (stopped) return;
  stop_time = Clock::now();
  stopping = true;
  sd_notify(0, "STOPPING=1");
  spdlog::info("stopping: no new connections; answering what is in flight");
  {
    std::lock_guard<std::mutex> hl(hang_mu);
  }
  hang_cv.notify_all();
  if (wake_fd >= 0) {
    const uint64_t one = 1;
    if (write(wake_fd, &one, sizeof one) < 0) spdlog::warn("stop: eventfd write: {}", std::strerror(errno));
  }
  if (acceptor.joinable()) acceptor.join();
  if (gpio) gpio->stop();  // its trigger may be waiting for the worker: stop it while the worker runs
  for (auto& s : slots) {
    {
      std::lock_guard<std::mutex> sl(s->mu);
    }
    s->cv.notify_all();
  }
  for (auto& s : slots)
    if (s->thread.joinable()) s->thread.join();
  {
    std::lock_guard<std::mutex> ql(q_mu);
    worker_stop = true;
  }
  q_cv.notify_all();
  if (worker.joinable()) worker.join();
  {
    std::lock_guard<std::mutex> wl(wd_mu);
    wd_stop = true;
  }
  wd_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  gpio.reset();
  if (listen_fd >= 0) {
    close(listen_fd);
    listen_fd = -1;
    unlink(config.socket_path.c_str());
  }
  if (wake_fd >= 0) close(wake_fd);
  wake_fd = -1;
  stopped = true;
  spdlog::info("stopped after {:.0f} ms", std::chrono::duration<double, std::milli>(Clock::now() - stop_time).count());
}

// ---- Server -----------------------------------------------------------------------------------------

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_) impl_->stop();
}

Result<std::unique_ptr<Server>> Server::start(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  Impl& I = *impl;
  I.options = options;
  I.config = options.config;
  EV_RETURN_IF_ERROR(validate_daemon_config(I.config));
  I.model_path = I.config.model.empty() ? options.default_model_path : I.config.model;
  if (I.model_path.empty()) return invalid_argument("no model: set `model` in the config or pass --model");

  const auto t0 = Clock::now();
  EV_ASSIGN_OR_RETURN(std::shared_ptr<Model> m, I.load_model(I.model_path, I.config, true));
  m->generation = I.next_generation++;
  I.model = m;
  spdlog::info("model {} ({}) on {}: batch {}, plan {}, arena+context {} of {} bytes; self-check passed in {:.0f} ms",
               m->spec.name, I.model_path, m->device.name, m->batch, m->plan_hash, m->total_bytes, m->budget_bytes,
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count());

  // Pools, sized once.
  const DaemonConfig& c = I.config;
  I.ring.assign(static_cast<size_t>(c.queue_depth), nullptr);
  I.batch_slots.assign(static_cast<size_t>(std::max(m->batch, 1)), nullptr);
  I.free_slots.reserve(static_cast<size_t>(c.max_connections));
  auto make_slot = [&](int id) {
    auto s = std::make_unique<Slot>();
    s->id = id;
    s->in_capacity = protocol::kHeaderBytes + static_cast<size_t>(c.max_frame_bytes);
    s->in.reset(new uint8_t[s->in_capacity]);
    s->input.resize(static_cast<size_t>(m->per_image) * m->batch);
    s->order.resize(static_cast<size_t>(m->out_dim));
    I.ensure_out_capacity(s.get(), *m, m->batch);
    return s;
  };
  for (int i = 0; i < c.max_connections; ++i) {
    I.slots.push_back(make_slot(i));
    I.free_slots.push_back(I.slots.back().get());
  }
  std::reverse(I.free_slots.begin(), I.free_slots.end());
  I.internal_slot = make_slot(-1);

  uint64_t wd_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0;
  if (watchdog) I.tick_ms = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(kPollSliceMs, wd_usec / 8000)));
  I.last_progress = Clock::now().time_since_epoch().count();

  I.wake_fd = eventfd(0, EFD_CLOEXEC);
  if (I.wake_fd < 0) return io_error(std::string("eventfd: ") + std::strerror(errno));

  std::unique_ptr<Server> server(new Server(std::move(impl)));
  Impl* P = server->impl_.get();
  P->self = server.get();
  // From here on a failure returns through ~Server, which stops whatever was started.
  P->worker = std::thread([P] { P->worker_loop(); });
  for (auto& s : P->slots) s->thread = std::thread([P, sp = s.get()] { P->connection_loop(sp); });
  if (watchdog) P->watchdog = std::thread([P, wd_usec] { P->watchdog_loop(wd_usec); });

  if (c.gpio.enabled) {
    GpioBackend* backend = options.gpio_backend;
    if (backend == nullptr) {
      EV_ASSIGN_OR_RETURN(P->owned_gpio, make_gpiod_backend());
      backend = P->owned_gpio.get();
    }
    GpioHooks hooks;
    hooks.led_state = [P] { return P->led_state(); };
    hooks.infer_image = [S = server.get()](const uint8_t* b, size_t n) { return S->infer_encoded_image(b, n); };
    EV_ASSIGN_OR_RETURN(P->gpio, GpioService::start(c.gpio, backend, std::move(hooks)));
  }

  EV_RETURN_IF_ERROR(P->open_socket());
  P->acceptor = std::thread([P] { P->accept_loop(); });
  sd_notify(0, "READY=1\nSTATUS=serving");
  spdlog::info("ready: serving {} on {} (max {} connections, queue {}, batch {} within {} us){}", P->model->spec.name,
               c.socket_path, c.max_connections, c.queue_depth, P->model->batch, c.max_wait_us,
               watchdog ? fmt::format(", watchdog every {} ms", wd_usec / 2000) : std::string());
  return server;
}

void Server::stop() { impl_->stop(); }
const DaemonConfig& Server::config() const { return impl_->config; }
std::string Server::socket_path() const { return impl_->config.socket_path; }

Status Server::reload() {
  DaemonConfig cfg = impl_->config;
  if (impl_->options.reload_config) {
    auto r = impl_->options.reload_config();
    if (!r.ok()) {
      sd_notify(0, "RELOADING=1");
      impl_->record_reload("failed", r.status().to_string());
      ++impl_->reloads_failed;
      spdlog::error("reload failed, the current model keeps serving: {}", r.status().to_string());
      sd_notify(0, "READY=1\nSTATUS=serving (last reload failed)");
      return r.status();
    }
    cfg = std::move(*r);
  }
  return reload_with(cfg);
}

Status Server::reload_with(const DaemonConfig& cfg) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> rl(I.reload_mu);
  const uint64_t mono = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
  sd_notify(0, fmt::format("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading", mono).c_str());
  spdlog::info("reload requested");
  auto finish = [&](const Status& s, const std::string& result) {
    I.record_reload(result, s.ok() ? "" : s.to_string());
    if (s.ok()) {
      ++I.reloads_ok;
      I.fault = false;
    } else {
      ++I.reloads_failed;
      I.fault = true;
      spdlog::error("reload failed ({}), serving {}: {}", result, I.current_model() ? I.current_model()->spec.name : "nothing",
                    s.to_string());
    }
    sd_notify(0, s.ok() ? "READY=1\nSTATUS=serving" : "READY=1\nSTATUS=serving (last reload failed)");
    return s;
  };
  Status v = validate_daemon_config(cfg);
  if (!v.ok()) return finish(v, "failed");
  const std::string path = cfg.model.empty() ? I.options.default_model_path : cfg.model;
  const std::shared_ptr<Model> old = I.current_model();
  auto fresh = I.load_model(path, cfg, false);  // spec, labels, plan: no arena yet
  if (!fresh.ok()) return finish(fresh.status(), "failed");
  std::shared_ptr<Model> m = std::move(*fresh);
  if (m->batch > static_cast<int>(I.batch_slots.size()))
    return finish(invalid_argument(path + ": batch " + std::to_string(m->batch) + " above the batch edgevitd started with (" +
                                   std::to_string(I.batch_slots.size()) + "); restart to grow it"),
                  "failed");
  const bool beside = old && old->engine && old->total_bytes + m->total_bytes <= m->budget_bytes;
  if (beside) {
    // Load next to the old model, then hand it to the worker: the swap happens between two batches.
    const Status s = I.build_engine(m.get(), cfg, ModelCheck::kWhileServing);
    if (!s.ok()) return finish(s, "failed");
    std::unique_lock<std::mutex> lock(I.q_mu);
    m->generation = I.next_generation++;
    I.pending_swap = m;
    I.q_cv.notify_all();
    I.swap_cv.wait(lock, [&] { return !I.pending_swap; });
  } else {
    // Both do not fit: the worker drains (finishes its batch), frees the old arena, builds the new model and
    // falls back to the old one if that fails. Requests wait in the queue meanwhile.
    Status result;
    std::string outcome = "ok";
    bool done = false;
    std::unique_lock<std::mutex> lock(I.q_mu);
    I.pending_replace = [&]() {
      std::unique_ptr<Engine> old_engine = old ? std::move(old->engine) : nullptr;
      old_engine.reset();  // free the old arena first
      Status s = I.build_engine(m.get(), cfg, ModelCheck::kWhileServing);
      std::lock_guard<std::mutex> ml(I.model_mu);
      if (s.ok()) {
        m->generation = I.next_generation++;
        I.model = m;
      } else {
        result = s;
        outcome = "rolled_back";
        if (old) {
          const Status back = I.build_engine(old.get(), I.config, ModelCheck::kNone);
          if (!back.ok()) {
            outcome = "failed";
            result = Status(s.code(), s.message() + "; rollback also failed: " + back.message());
            old->engine.reset();
          }
        }
      }
      std::lock_guard<std::mutex> ql(I.q_mu);
      done = true;
    };
    I.q_cv.notify_all();
    I.swap_cv.wait(lock, [&] { return done; });
    lock.unlock();
    if (!result.ok()) return finish(result, outcome);
  }
  {
    std::lock_guard<std::mutex> lock(I.model_mu);
    I.config.model = cfg.model;
    I.config.device = cfg.device;
    I.config.max_batch = cfg.max_batch;
    I.config.default_topk = cfg.default_topk;
  }
  spdlog::info("reloaded: serving {} ({}), plan {}, {}", m->spec.name, path, m->plan_hash,
               beside ? "loaded beside the old model" : "old model freed first (both did not fit the budget)");
  return finish(Status::Ok(), "ok");
}

std::string Server::health_json() const {
  const Impl& I = *impl_;
  const std::shared_ptr<Model> m = I.current_model();
  nlohmann::ordered_json j;
  j["status"] = I.stopping ? "stopping" : (!m || !m->engine) ? "fault" : I.fault ? "degraded" : "ready";
  j["model"] = m ? m->spec.name : "";
  j["model_config"] = m ? m->spec.source_path : "";
  j["device"] = m ? m->device.name : "";
  j["plan_hash"] = m ? m->plan_hash : "";
  j["generation"] = m ? m->generation : 0;
  j["batch"] = m ? m->batch : 0;
  j["uptime_s"] = std::chrono::duration<double>(Clock::now() - I.started).count();
  {
    std::lock_guard<std::mutex> lock(I.reload_info_mu);
    j["last_reload"] = {{"result", I.last_reload_result},
                        {"message", I.last_reload_message},
                        {"time_unix_ms", I.last_reload_unix_ms}};
  }
  return j.dump();
}

std::string Server::stats_json() const {
  const Impl& I = *impl_;
  nlohmann::ordered_json j;
  j["requests_ok"] = I.requests_ok.load();
  j["images_ok"] = I.images_ok.load();
  j["batches"] = I.batches.load();
  j["mean_batch_images"] = I.batches ? static_cast<double>(I.images_ok.load()) / I.batches.load() : 0.0;
  nlohmann::ordered_json errs = nlohmann::ordered_json::object();
  for (int c = 1; c <= static_cast<int>(ErrorCode::kInternal); ++c)
    errs[protocol::error_code_name(static_cast<ErrorCode>(c))] = I.errors[c].load();
  j["errors"] = errs;
  j["connections"] = {{"accepted", I.accepted.load()},
                      {"active", I.active_connections.load()},
                      {"rejected_peers", I.rejected_peers.load()},
                      {"no_slot", I.no_slot.load()}};
  j["latency_us"] = {{"p50", I.latency.quantile_us(0.5)}, {"p99", I.latency.quantile_us(0.99)}};
  j["infer_us"] = {{"p50", I.infer_latency.quantile_us(0.5)}, {"p99", I.infer_latency.quantile_us(0.99)}};
  j["reloads"] = {{"ok", I.reloads_ok.load()}, {"failed", I.reloads_failed.load()}};
  j["gpio"] = I.gpio ? nlohmann::ordered_json::parse(I.gpio->stats_json()) : nlohmann::ordered_json();
  return j.dump();
}

Result<TopResult> Server::infer_encoded_image(const uint8_t* bytes, size_t size) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lock(I.internal_mu);
  Slot* s = I.internal_slot.get();
  const size_t payload = protocol::kInferPrefixBytes + size;
  if (payload > static_cast<size_t>(I.config.max_frame_bytes)) return input_error("image of " + std::to_string(size) + " bytes over max_frame_bytes");
  s->req = protocol::Header();
  s->req.op = static_cast<uint16_t>(Op::kInferImage);
  s->req.payload_bytes = static_cast<uint32_t>(payload);
  s->received = Clock::now();
  uint8_t* p = s->in.get() + protocol::kHeaderBytes;
  std::memset(p, 0, protocol::kInferPrefixBytes);
  protocol::put_u16(p, 1);
  std::memcpy(p + protocol::kInferPrefixBytes, bytes, size);
  ErrorInfo err;
  ++I.preparing;
  if (!I.prepare(s, I.current_model(), &err)) {
    --I.preparing;
    return input_error(err.message);
  }
  if (!I.enqueue(s)) return unsupported("busy: the request queue is full");
  I.wait_done(s);
  std::vector<uint8_t> answer(s->out.begin() + protocol::kHeaderBytes, s->out.begin() + s->out_bytes);
  const protocol::Header h = protocol::decode_header(s->out.data());
  client::Error cerr;
  if ((h.flags & protocol::kFlagError) != 0) {
    client::Connection::decode_error(answer, &cerr);
    return internal_error(cerr.message);
  }
  client::InferAnswer a;
  if (!client::Connection::decode_infer_answer(answer, &a, &cerr) || a.topk.empty() || a.topk[0].empty())
    return internal_error("internal answer: " + cerr.message);
  return TopResult{a.topk[0][0].index, a.topk[0][0].score, a.topk[0][0].label};
}

}  // namespace edgevit::daemon
