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
#include <exception>
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
#include "runtime/daemon/json_text.h"
#include "runtime/daemon/protocol.h"
#include "runtime/daemon/server_impl.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/labels.h"

namespace edgevit::daemon {

void notify_systemd(const char* state) { sd_notify(0, state); }

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
  // The engine's own plan counts the threads it runs (threads 0: the cores it found): health's plan_hash
  // and the memory statement report that one.
  m->plan_hash = m->engine->plan().hash_hex();
  m->total_bytes = m->engine->plan().total_bytes;
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
  EV_RETURN_IF_ERROR(require_regular_file(path, "model config"));
  EV_ASSIGN_OR_RETURN(m->spec, load_model_spec(path));
  if (!m->spec.weights_path.empty()) {
    const Status w = require_regular_file(m->spec.weights_path, "checkpoint");  // a missing one: the loader says so
    if (!w.ok() && w.code() != StatusCode::kNotFound) return w;
  }
  EV_ASSIGN_OR_RETURN(m->device, resolve_device(cfg.device));
  if (!m->spec.labels_path.empty()) {
    EV_RETURN_IF_ERROR(require_regular_file(m->spec.labels_path, "labels"));
    EV_ASSIGN_OR_RETURN(m->labels, load_labels(m->spec.labels_path, m->spec.arch.num_classes));
    // Answers carry labels as valid UTF-8 of at most 64 bytes, cut on a character boundary.
    for (std::string& l : m->labels) {
      l = valid_utf8(l);
      l.resize(utf8_prefix_bytes(l, protocol::kMaxLabelBytes));
    }
  }
  m->batch = cfg.max_batch > 0 ? std::min(cfg.max_batch, m->spec.max_batch) : m->spec.max_batch;
  PlanOptions po;
  po.batch = m->batch;
  po.threads = cfg.threads;  // 0: the profile's cores (the engine's plan, with the cores it finds, replaces it)
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

namespace {

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

// A live daemon on socket.path is an error; checked first at start-up (before the model and its self-test)
// and again just before binding. A socket file left by a crashed daemon is removed by open_socket().
Status Server::Impl::check_socket_free() const {
  const std::string& path = config.socket_path;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) return io_error("socket.path " + path + " exists and is not a socket");
  const sockaddr_un addr = socket_address(path);
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live = probe >= 0 && connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  if (probe >= 0) close(probe);
  if (live) return io_error("socket.path " + path + ": another edgevitd is serving on it");
  return Status::Ok();
}

Status Server::Impl::open_socket() {
  const std::string& path = config.socket_path;
  const sockaddr_un addr = socket_address(path);
  EV_RETURN_IF_ERROR(check_socket_free());
  unlink(path.c_str());
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
  reload_abandoned = true;  // a reload still running installs nothing
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

  EV_RETURN_IF_ERROR(I.check_socket_free());  // before the self-test: a second daemon fails at once
  const auto t0 = Clock::now();
  EV_ASSIGN_OR_RETURN(std::shared_ptr<Model> m, I.load_model(I.model_path, I.config, true));
  m->generation = I.next_generation++;
  I.model = m;
  spdlog::info("model {} ({}) on {}: batch {}, plan {}, arena+context {} of {} bytes; self-check passed in {:.0f} ms",
               m->spec.name, I.model_path, m->device.name, m->batch, m->plan_hash, m->total_bytes, m->budget_bytes,
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count());

  // Pools, sized once.
  const DaemonConfig& c = I.config;
  I.decode_budget = std::make_unique<DecodeBudget>(c.decode_budget_bytes);
  spdlog::info("memory bound: plan {} + decode budget {} = {} bytes (limits.decode_budget_bytes)", m->total_bytes,
               c.decode_budget_bytes, m->total_bytes + c.decode_budget_bytes);
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
  bool prepared = false;
  try {
    prepared = I.prepare(s, I.current_model(), &err, Clock::now() + std::chrono::milliseconds(I.config.decode_wait_ms));
  } catch (const std::exception& e) {
    ++I.handler_exceptions;
    err = {ErrorCode::kInternal, std::string("could not prepare the input: ") + e.what()};
  }
  if (!prepared) {
    --I.preparing;
    s->model.reset();
    return err.code == ErrorCode::kInternal ? internal_error(err.message) : input_error(err.message);
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
