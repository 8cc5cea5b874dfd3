// edgevitd: the Server's lifecycle: start() (model, pools, threads, socket, READY=1), stop(), the systemd
// watchdog, the LED state, and the GPIO trigger's request (infer_encoded_image). The model host is
// server_model.cpp, the listener server_conn.cpp, the batcher server_worker.cpp (server_impl.h lists them).
#include "serving/server.h"

#include <sys/eventfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "serving/edgevit_client.h"
#include "serving/gpio_service.h"
#include "serving/protocol.h"
#include "serving/server_impl.h"

namespace edgevit::daemon {

void notify_systemd(const char* state) { sd_notify(0, state); }

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
