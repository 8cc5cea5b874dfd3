// A small header-only C++17 client for edgevitd (docs/protocol.md). Depends only on POSIX and
// serving/protocol.h, so both files can be copied into another program.
//
//   edgevit::client::Connection c;
//   edgevit::client::Error err;
//   edgevit::client::InferAnswer a;
//   if (!c.connect("/run/edgevit/edgevitd.sock", &err) || !c.infer_image(png.data(), png.size(), 5, false, &a, &err))
//     fprintf(stderr, "%s\n", err.message.c_str());
//   else printf("%s %.3f\n", a.topk[0][0].label.c_str(), a.topk[0][0].score);
//
// One Connection is one socket; calls on it are sequential (not thread-safe). It reconnects never: after
// an error with code kTransportError the connection is closed and connect() must be called again.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "serving/protocol.h"

namespace edgevit::client {

// code: 0 = none, a protocol::ErrorCode value from the daemon, or kTransportError (connect/read/write
// failure, the daemon closed the connection, or a malformed answer).
constexpr uint32_t kTransportError = 1000;

struct Error {
  uint32_t code = 0;
  std::string message;
};

struct TopEntry {
  int index = 0;
  float score = 0;  // softmax probability
  std::string label;
};

// A named output section of the answer (protocol.h): "embedding" or "tokens".
struct OutputSection {
  std::string name;
  std::vector<uint32_t> dims;  // per image: embedding {dim}, tokens {tokens, embed}
  std::vector<float> values;   // (n, dims...)
};

struct InferAnswer {
  int n = 0;                                // images
  std::vector<std::vector<TopEntry>> topk;  // [n][k], best first
  int logits_per_image = 0;                 // 0 unless asked for
  std::vector<float> logits;                // (n, logits_per_image)
  std::vector<OutputSection> outputs;       // the sections asked for (kFlagWantEmbedding, kFlagWantTokens)
  uint64_t latency_ns = 0;                  // daemon side: frame received -> answer ready
  uint64_t infer_ns = 0;                    // the batch's Engine::infer
  int batch_images = 0;                     // images in the batch this request ran in
  int batch_row = 0;                        // row of this request's first image in that batch
};

class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { close(); }

  // `timeout_ms` bounds every later send and receive (0: none).
  bool connect(const std::string& socket_path, Error* err, int timeout_ms = 30000) {
    close();
    sockaddr_un addr{};
    if (socket_path.size() >= sizeof(addr.sun_path)) return fail(err, kTransportError, "socket path too long: " + socket_path);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return fail_errno(err, "socket");
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
      return fail_errno(err, "connect " + socket_path);
    timeout_ms_ = timeout_ms;
    return true;
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    if (pending_fd_ >= 0) ::close(pending_fd_);
    fd_ = pending_fd_ = -1;
  }

  // Encoded PNG/JPEG/PPM bytes; the daemon decodes and preprocesses them for its model. `want`: the request
  // flags kFlagWantLogits | kFlagWantEmbedding | kFlagWantTokens (true = kFlagWantLogits, as before).
  bool infer_image(const void* bytes, size_t size, int topk, uint32_t want, InferAnswer* out, Error* err) {
    const std::vector<uint8_t> payload = protocol::encode_infer_image_payload(bytes, size, topk);
    return infer(protocol::Op::kInferImage, payload, want, out, err);
  }

  // Normalized float32 input: dims = {C, H, W} (ndim 3) or {N, C, H, W} (ndim 4).
  bool infer_tensor(const float* data, const uint32_t* dims, int ndim, int topk, uint32_t want, InferAnswer* out,
                    Error* err) {
    if (ndim != 3 && ndim != 4) return fail(err, kTransportError, "infer_tensor: ndim must be 3 or 4");
    const std::vector<uint8_t> payload = protocol::encode_infer_tensor_payload(data, dims, ndim, topk);
    return infer(protocol::Op::kInferTensor, payload, want, out, err);
  }

  // kHealth, kStats or kVersion: the answer's JSON text.
  bool query(protocol::Op op, std::string* json, Error* err) {
    std::vector<uint8_t> answer;
    if (!call(op, nullptr, 0, 0, &answer, err)) return false;
    json->assign(answer.begin(), answer.end());
    return true;
  }

  // One request frame, one answer frame. A daemon error answer returns false with its code and message.
  bool call(protocol::Op op, const uint8_t* payload, size_t size, uint32_t flags, std::vector<uint8_t>* answer,
            Error* err) {
    protocol::Header h;
    h.op = static_cast<uint16_t>(op);
    h.flags = flags;
    h.payload_bytes = static_cast<uint32_t>(size);
    h.request_id = ++next_id_;
    uint8_t head[protocol::kHeaderBytes];
    protocol::encode_header(h, head);
    if (!send_all(head, sizeof head, err) || !send_all(payload, size, err)) {
      // The daemon may have answered before closing (permission_denied, busy, too_large): report that
      // answer rather than the broken pipe it caused.
      protocol::Header eh;
      std::vector<uint8_t> ea;
      Error ignored;
      if (pending_fd_ >= 0) {
        fd_ = pending_fd_;
        pending_fd_ = -1;
        const int saved_timeout = timeout_ms_;
        timeout_ms_ = 100;
        const bool got = read_frame(&eh, &ea, &ignored);
        timeout_ms_ = saved_timeout;
        close();
        if (got && (eh.flags & protocol::kFlagError) != 0) return decode_error(ea, err);
      }
      return false;
    }
    protocol::Header rh;
    if (!read_frame(&rh, answer, err)) return false;
    if ((rh.flags & protocol::kFlagError) != 0) return decode_error(*answer, err);
    if (rh.request_id != h.request_id || rh.op != h.op)
      return fail(err, kTransportError, "answer does not match the request (id or op)");
    return true;
  }

  bool send_all(const uint8_t* p, size_t n, Error* err) {
    while (n > 0) {
      if (!wait_for(POLLOUT, err)) return false;
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        // Keep the socket readable for call(): an error answer may be waiting in it.
        const int e = errno;
        pending_fd_ = fd_;
        fd_ = -1;
        return fail(err, kTransportError, std::string("send: ") + std::strerror(e));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  // Reads one frame (any flags) into *h and *payload.
  bool read_frame(protocol::Header* h, std::vector<uint8_t>* payload, Error* err) {
    uint8_t head[protocol::kHeaderBytes];
    if (!recv_all(head, sizeof head, err)) return false;
    *h = protocol::decode_header(head);
    if (h->magic != protocol::kMagic || h->version != protocol::kProtocolVersion ||
        (h->flags & protocol::kFlagResponse) == 0)
      return fail(err, kTransportError, "not an edgevitd answer (magic/version/flags)");
    if (h->payload_bytes > (256u << 20)) return fail(err, kTransportError, "answer too large");
    payload->resize(h->payload_bytes);
    return recv_all(payload->data(), payload->size(), err);
  }

  static bool decode_error(const std::vector<uint8_t>& a, Error* err) {
    if (a.size() < 8) return fail(err, kTransportError, "truncated error answer");
    const uint32_t code = protocol::get_u32(a.data());
    const uint32_t len = protocol::get_u32(a.data() + 4);
    if (a.size() < 8 + static_cast<size_t>(len)) return fail(err, kTransportError, "truncated error answer");
    return fail(err, code,
                std::string(protocol::error_code_name(static_cast<protocol::ErrorCode>(code))) + ": " +
                    std::string(reinterpret_cast<const char*>(a.data() + 8), len));
  }

  static bool decode_infer_answer(const std::vector<uint8_t>& a, InferAnswer* out, Error* err) {
    if (a.size() < protocol::kInferAnswerFixedBytes) return fail(err, kTransportError, "truncated infer answer");
    const uint8_t* p = a.data();
    const uint8_t* end = p + a.size();
    const uint32_t n = protocol::get_u32(p), k = protocol::get_u32(p + 4), lpi = protocol::get_u32(p + 8);
    out->n = static_cast<int>(n);
    out->logits_per_image = static_cast<int>(lpi);
    out->latency_ns = protocol::get_u64(p + 16);
    out->infer_ns = protocol::get_u64(p + 24);
    out->batch_images = static_cast<int>(protocol::get_u32(p + 32));
    out->batch_row = static_cast<int>(protocol::get_u32(p + 36));
    if (n > 4096 || k > protocol::kMaxTopk) return fail(err, kTransportError, "implausible infer answer");
    p += protocol::kInferAnswerFixedBytes;
    out->topk.assign(n, {});
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < k; ++j) {
        if (end - p < 12) return fail(err, kTransportError, "truncated infer answer");
        TopEntry e;
        e.index = static_cast<int>(protocol::get_u32(p));
        e.score = protocol::get_f32(p + 4);
        const uint32_t len = protocol::get_u32(p + 8);
        const size_t padded = (len + 3u) & ~size_t{3};
        p += 12;
        if (len > protocol::kMaxLabelBytes || static_cast<size_t>(end - p) < padded)
          return fail(err, kTransportError, "truncated infer answer");
        e.label.assign(reinterpret_cast<const char*>(p), len);
        p += padded;
        out->topk[i].push_back(std::move(e));
      }
    }
    const size_t nlog = static_cast<size_t>(n) * lpi;
    if (static_cast<size_t>(end - p) < nlog * 4) return fail(err, kTransportError, "infer answer size mismatch");
    out->logits.resize(nlog);
    if (nlog > 0) std::memcpy(out->logits.data(), p, nlog * 4);
    p += nlog * 4;
    out->outputs.clear();
    const uint32_t sections = protocol::get_u32(a.data() + 12);
    if (sections > 2)
      return fail(err, kTransportError, "implausible infer answer (" + std::to_string(sections) + " sections)");
    for (uint32_t i = 0; i < sections; ++i)
      if (!decode_section(&p, end, n, out, err)) return false;
    if (p != end) return fail(err, kTransportError, "infer answer size mismatch");
    return true;
  }

  // One named output section at *p (protocol.h), appended to out->outputs; advances *p.
  static bool decode_section(const uint8_t** p, const uint8_t* end, uint32_t n, InferAnswer* out, Error* err) {
    const uint8_t* q = *p;
    if (end - q < 4) return fail(err, kTransportError, "truncated output section");
    const uint32_t len = protocol::get_u32(q);
    const size_t padded = (len + 3u) & ~size_t{3};
    q += 4;
    if (len == 0 || len > protocol::kMaxSectionNameBytes || static_cast<size_t>(end - q) < padded + 4)
      return fail(err, kTransportError, "truncated output section");
    OutputSection s;
    s.name.assign(reinterpret_cast<const char*>(q), len);
    q += padded;
    const uint32_t ndim = protocol::get_u32(q);
    q += 4;
    if (ndim == 0 || ndim > protocol::kMaxSectionDims || static_cast<size_t>(end - q) < 4u * ndim)
      return fail(err, kTransportError, "output section '" + s.name + "': bad dims");
    size_t numel = n;
    for (uint32_t d = 0; d < ndim; ++d) {
      s.dims.push_back(protocol::get_u32(q));
      q += 4;
      if (s.dims.back() == 0 || __builtin_mul_overflow(numel, static_cast<size_t>(s.dims.back()), &numel))
        return fail(err, kTransportError, "output section '" + s.name + "': bad dims");
    }
    if (static_cast<size_t>(end - q) / 4 < numel) return fail(err, kTransportError, "truncated output section");
    s.values.resize(numel);
    std::memcpy(s.values.data(), q, numel * 4);
    *p = q + numel * 4;
    out->outputs.push_back(std::move(s));
    return true;
  }

 private:
  bool infer(protocol::Op op, const std::vector<uint8_t>& payload, uint32_t want, InferAnswer* out, Error* err) {
    std::vector<uint8_t> answer;
    if (!call(op, payload.data(), payload.size(), want, &answer, err))
      return false;
    return decode_infer_answer(answer, out, err);
  }

  bool recv_all(uint8_t* p, size_t n, Error* err) {
    while (n > 0) {
      if (!wait_for(POLLIN, err)) return false;
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return fail_errno(err, "recv");
      if (r == 0) {
        close();
        return fail(err, kTransportError, "the daemon closed the connection");
      }
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }

  bool wait_for(short events, Error* err) {
    if (fd_ < 0) return fail(err, kTransportError, "not connected");
    pollfd pfd{fd_, events, 0};
    for (;;) {
      const int r = ::poll(&pfd, 1, timeout_ms_ > 0 ? timeout_ms_ : -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return fail_errno(err, "poll");
      if (r == 0) {
        close();
        return fail(err, kTransportError, "timed out waiting for the daemon");
      }
      return true;
    }
  }

  static bool fail(Error* err, uint32_t code, std::string message) {
    if (err != nullptr) {
      err->code = code;
      err->message = std::move(message);
    }
    return false;
  }
  bool fail_errno(Error* err, const std::string& what) {
    const int e = errno;
    close();
    return fail(err, kTransportError, what + ": " + std::strerror(e));
  }

  int fd_ = -1;
  int pending_fd_ = -1;  // a socket whose send failed, kept only to read a final error answer
  int timeout_ms_ = 30000;
  uint64_t next_id_ = 0;
};

}  // namespace edgevit::client
