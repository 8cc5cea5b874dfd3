// edgevitd: the listener: the listening socket, the acceptor (peer check, slots, eviction of the longest-idle
// connection, per-uid cap), the connection threads, frame reading and the answers they send (docs/daemon.md,
// Serving).
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include <spdlog/spdlog.h>

#include "serving/json_text.h"
#include "serving/server_impl.h"

namespace edgevit::daemon {

namespace {

constexpr int kEvictWaitMs = 500;  // the acceptor waits this long for an evicted connection's slot
// Only a connection idle at least this long may be evicted: a client between two requests of a busy
// stream (idle for microseconds) keeps its connection, one that sends `version` every few seconds does not.
constexpr auto kMinIdleToEvict = std::chrono::milliseconds(1000);

ucred peer_of(int fd) {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    peer.pid = 0;
    peer.uid = peer.gid = static_cast<uid_t>(-1);
  }
  return peer;
}

bool input_pending(int fd) {
  pollfd pending{fd, POLLIN, 0};
  return poll(&pending, 1, 0) > 0 && (pending.revents & POLLIN) != 0;
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

// ---- listening socket -----------------------------------------------------------------------------

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

// ---- acceptor -------------------------------------------------------------------------------------

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
    try {
      admit(fd);
    } catch (const std::exception& e) {  // e.g. bad_alloc: this connection is lost, the acceptor goes on
      ++handler_exceptions;
      spdlog::error("accept: {}", e.what());
      close(fd);
    }
  }
  refuse_backlog();
  close(listen_fd);
  listen_fd = -1;
  unlink(config.socket_path.c_str());
}

// Connections the kernel accepted but the acceptor had not taken when the stop came: each gets the
// shutting_down answer instead of a reset.
void Server::Impl::refuse_backlog() {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    ++accepted;
    refuse(fd, peer_of(fd), ErrorCode::kShuttingDown, "the daemon is stopping");
  }
}

// Answers one error frame on a connection that gets no slot (a client reading it learns why) and closes it.
void Server::Impl::refuse(int fd, const ucred& peer, ErrorCode code, const std::string& message) {
  Slot tmp;
  tmp.peer = peer;
  tmp.req.op = 0;
  ++errors[static_cast<int>(code)];
  encode_error(&tmp, code, message);
  log_request_error(&tmp, code, message);
  send(fd, tmp.out.data(), tmp.out_bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

void Server::Impl::admit(int fd) {
  const ucred peer = peer_of(fd);
  const bool any = config.allow_uids.empty() && config.allow_gids.empty();
  const bool allowed =
      any || std::find(config.allow_uids.begin(), config.allow_uids.end(), peer.uid) != config.allow_uids.end() ||
      std::find(config.allow_gids.begin(), config.allow_gids.end(), peer.gid) != config.allow_gids.end();
  if (!allowed) {
    ++rejected_peers;
    return refuse(fd, peer, ErrorCode::kPermissionDenied,
                  "peer uid " + std::to_string(peer.uid) + " gid " + std::to_string(peer.gid) +
                      " is not allowed (socket.allow_uids / allow_gids)");
  }
  Slot* slot = take_slot(peer.uid);
  if (slot == nullptr) {
    ++no_slot;
    return refuse(fd, peer, ErrorCode::kBusy,
                  "all " + std::to_string(config.max_connections) + " connection slots are taken (or uid " +
                      std::to_string(peer.uid) + " holds its limits.max_connections_per_uid " +
                      std::to_string(config.max_connections_per_uid) + ") and none has been idle for 1 s; retry");
  }
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->fd = fd;
    slot->peer = peer;
    slot->assigned = true;
  }
  slot->cv.notify_all();
}

// The connection that has waited longest for its next frame (of `uid` only, when given), if it has waited
// at least kMinIdleToEvict; else null. Called with free_mu held.
Slot* Server::Impl::longest_idle(const uint32_t* uid) {
  Slot* best = nullptr;
  Clock::rep oldest = 0;
  const Clock::rep latest = (Clock::now() - kMinIdleToEvict).time_since_epoch().count();
  for (auto& s : slots) {
    if (!s->in_use || (uid != nullptr && s->owner_uid != *uid)) continue;
    const Clock::rep since = s->idle_since.load();
    if (since != 0 && since <= latest && (best == nullptr || since < oldest)) {
      best = s.get();
      oldest = since;
    }
  }
  return best;
}

// A free slot for a connection of `uid`. When every slot is taken, or the uid holds
// limits.max_connections_per_uid already, the longest-idle connection (of that uid, at its cap) is asked to
// close and its slot is taken; null when no connection is idle (all are mid-request).
Slot* Server::Impl::take_slot(uint32_t uid) {
  std::unique_lock<std::mutex> lock(free_mu);
  const auto deadline = Clock::now() + std::chrono::milliseconds(kEvictWaitMs);
  Slot* victim = nullptr;
  for (;;) {
    const int cap = config.max_connections_per_uid;
    const int held = static_cast<int>(std::count_if(slots.begin(), slots.end(), [&](const std::unique_ptr<Slot>& s) {
      return s->in_use && s->owner_uid == uid;
    }));
    const bool uid_full = cap > 0 && held >= cap;
    if (!uid_full && !free_slots.empty()) {
      Slot* s = free_slots.back();
      free_slots.pop_back();
      s->in_use = true;
      s->owner_uid = uid;
      s->idle_since = 0;
      s->evict = false;
      return s;
    }
    if (victim == nullptr || !victim->in_use) {
      victim = longest_idle(uid_full ? &uid : nullptr);
      if (victim == nullptr) return nullptr;
      victim->evict = true;
    }
    if (free_cv.wait_until(lock, deadline) == std::cv_status::timeout) return nullptr;
  }
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
    try {
      serve_connection(s);
    } catch (const std::exception& e) {
      // No exception ends the daemon: this connection gets an internal error (when it can still take one)
      // and is closed; every other connection is untouched.
      ++handler_exceptions;
      answer_error(s, ErrorCode::kInternal, std::string("the daemon failed to answer: ") + e.what());
    }
    close(s->fd);
    s->idle_since = 0;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->fd = -1;
      s->assigned = false;
    }
    {
      std::lock_guard<std::mutex> lock(free_mu);
      s->in_use = false;
      s->evict = false;
      free_slots.push_back(s);
    }
    free_cv.notify_all();
    // Counted down only once the slot is free again: stats showing `active` N mean max_connections - N
    // slots are ready for new clients.
    --active_connections;
    if (stopping) return;
  }
}

// Before the first byte of a frame: a stop or an eviction closes the connection with a last error frame
// (shutting_down or busy), so a client that sends meanwhile reads why instead of a bare EOF. Returns false
// when the connection is to close.
bool Server::Impl::say_goodbye(Slot* s) {
  if (input_pending(s->fd)) {
    s->evict = false;  // a request is arriving: not idle; the acceptor looks elsewhere or answers busy
    return true;
  }
  if (stopping) {
    answer_error(s, ErrorCode::kShuttingDown, "the daemon is stopping");
  } else {
    ++evicted;
    answer_error(s, ErrorCode::kBusy,
                 "closed: the longest-idle connection while all connection slots (limits.max_connections " +
                     std::to_string(config.max_connections) + ", max_connections_per_uid " +
                     std::to_string(config.max_connections_per_uid) + ") were wanted; reconnect");
  }
  return false;
}

// Reads n bytes by `deadline`. `idle`: no byte of this frame has arrived yet (stop and eviction end it).
bool Server::Impl::read_exact(Slot* s, uint8_t* p, size_t n, Clock::time_point deadline, bool idle,
                              bool* timed_out) {
  *timed_out = false;
  while (n > 0) {
    if (idle && (stopping || s->evict) && !say_goodbye(s)) return false;
    if (stopping) deadline = std::min(deadline, stop_time + std::chrono::milliseconds(kStopGraceMs));
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

// The message travels as valid UTF-8 of at most 1024 bytes, cut on a character boundary (json_text.h).
void Server::Impl::encode_error(Slot* s, ErrorCode code, const std::string& message) {
  const std::string text = valid_utf8(message);
  const size_t msg = utf8_prefix_bytes(text, 1024);
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
  std::memcpy(s->out.data() + protocol::kHeaderBytes + 8, text.data(), msg);
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

// Counts, logs and sends one error answer; false when the client did not take it.
bool Server::Impl::answer_error(Slot* s, ErrorCode code, const std::string& message) {
  ++errors[static_cast<int>(code)];
  log_request_error(s, code, message);
  encode_error(s, code, message);
  return send_all(s->fd, s->out.data(), s->out_bytes);
}

void Server::Impl::serve_connection(Slot* s) {
  for (;;) {
    bool timed_out = false;
    s->req = protocol::Header();
    // Idle: wait for the first byte of the next frame (idle timeout); then the frame must be complete by
    // the read deadline.
    s->idle_since = Clock::now().time_since_epoch().count();
    const bool started =
        read_exact(s, s->in.get(), 1, Clock::now() + std::chrono::milliseconds(config.idle_timeout_ms), true, &timed_out);
    s->idle_since = 0;
    if (!started) return;
    s->received = Clock::now();
    bool keep_open = true;
    if (!serve_request(s, &keep_open) || !keep_open) return;
  }
}

// One frame whose first byte has arrived: read the rest, validate, answer. Returns false when the
// connection is to close. Exceptions are caught by connection_loop (an internal error answer).
bool Server::Impl::serve_request(Slot* s, bool* keep_open) {
  uint8_t* head = s->in.get();
  bool timed_out = false;
  const auto deadline = s->received + std::chrono::milliseconds(config.read_deadline_ms);
  if (!read_exact(s, head + 1, protocol::kHeaderBytes - 1, deadline, false, &timed_out)) {
    if (timed_out) answer_error(s, ErrorCode::kTimeout, "header not complete within " + std::to_string(config.read_deadline_ms) + " ms");
    else log_request_error(s, ErrorCode::kBadFrame, "connection closed inside a frame header");
    return false;
  }
  s->req = protocol::decode_header(head);  // op and request_id for the error answer, even if refused
  protocol::ParseError perr;
  if (!protocol::check_header(head, protocol::kHeaderBytes, config.max_frame_bytes, &s->req, &perr)) {
    answer_error(s, perr.code, perr.message);
    return false;  // bad magic, version or length: the rest of the stream cannot be trusted
  }
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
    if (timed_out) answer_error(s, ErrorCode::kTimeout, "payload not complete within " + std::to_string(config.read_deadline_ms) + " ms");
    else log_request_error(s, ErrorCode::kBadFrame, "connection closed inside a frame payload");
    return false;
  }
  if (stopping) {
    // Arrived while the daemon drains: answered, not run (requests already queued are still answered).
    *keep_open = false;
    return answer_error(s, ErrorCode::kShuttingDown, "the daemon is stopping");
  }
  if (infer) {
    guard.counter = nullptr;  // serve_infer counts it down (enqueue, or its own refusal)
    return serve_infer(s);
  }
  // Health, stats, version, or an unknown op (the model input plays no part in those).
  protocol::ParsedRequest parsed;
  if (!protocol::parse_payload(s->req, head + protocol::kHeaderBytes, s->req.payload_bytes, protocol::ModelInput(),
                               &parsed, &perr))
    return answer_error(s, perr.code, perr.message);
  std::string json;
  try {
    json = parsed.op == Op::kVersion ? version_json() : parsed.op == Op::kHealth ? self->health_json() : self->stats_json();
  } catch (const std::exception& e) {
    ++handler_exceptions;
    return answer_error(s, ErrorCode::kInternal, std::string("could not build the answer: ") + e.what());
  }
  encode_json(s, json);
  return send_all(s->fd, s->out.data(), s->out_bytes);
}

// An infer request whose frame is complete: prepare its input, queue it, send the worker's answer.
// `preparing` was counted up by the caller; this counts it down.
bool Server::Impl::serve_infer(Slot* s) {
  ErrorInfo err;
  bool prepared = false;
  try {
    prepared = prepare(s, current_model(), &err, Clock::now() + std::chrono::milliseconds(config.decode_wait_ms));
  } catch (const std::exception& e) {  // e.g. bad_alloc in the decoder
    ++handler_exceptions;
    err = {ErrorCode::kInternal, std::string("could not prepare the input: ") + e.what()};
  }
  if (!prepared) {
    --preparing;
    s->model.reset();
    return answer_error(s, err.code, err.message);
  }
  if (!enqueue(s)) {  // enqueue counts `preparing` down
    s->model.reset();
    ++busy;
    return answer_error(s, ErrorCode::kBusy, "request queue full (limits.queue_depth " + std::to_string(config.queue_depth) + ")");
  }
  wait_done(s);
  if (!send_all(s->fd, s->out.data(), s->out_bytes)) {
    log_request_error(s, ErrorCode::kBadFrame, "client vanished before taking its answer");
    return false;
  }
  return true;
}

}  // namespace edgevit::daemon
