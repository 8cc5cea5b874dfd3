// The edgevitd wire protocol (docs/protocol.md), header-only and free of edgevit dependencies so that
// runtime/daemon/edgevit_client.h can be copied into other programs.
//
// Every message, in both directions, is one frame: a fixed 24-byte little-endian header followed by
// `payload_bytes` bytes of payload.
//
//   offset size field
//   0      4    magic          0x54495645 ("EVIT" on the wire)
//   4      2    version        kProtocolVersion
//   6      2    op             Op
//   8      4    flags          request: kFlagWantLogits; response: kFlagResponse (| kFlagError)
//   12     4    payload_bytes  <= the daemon's max_frame_bytes (requests)
//   16     8    request_id     chosen by the client, echoed in the response
//
// Requests and responses alternate on a connection (no pipelining): the client sends one frame and
// reads one frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace edgevit::protocol {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the protocol is little-endian and floats travel as raw bytes: big-endian hosts need swapping");

constexpr uint32_t kMagic = 0x54495645u;  // bytes 'E' 'V' 'I' 'T'
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kHeaderBytes = 24;

enum class Op : uint16_t {
  kInferImage = 1,   // payload: InferPrefix + encoded PNG/JPEG/PPM bytes
  kInferTensor = 2,  // payload: InferPrefix + TensorShape + float32 data
  kHealth = 3,       // payload: empty; answer: JSON text
  kStats = 4,        // payload: empty; answer: JSON text
  kVersion = 5,      // payload: empty; answer: JSON text
};

constexpr uint32_t kFlagWantLogits = 1u << 0;  // request: include the raw logits in the answer
constexpr uint32_t kFlagResponse = 1u << 16;   // set on every frame the daemon sends
constexpr uint32_t kFlagError = 1u << 17;      // response carries ErrorCode + message

// Typed errors (response payload: u32 code, u32 message_bytes, message UTF-8).
enum class ErrorCode : uint32_t {
  kBadFrame = 1,          // bad magic, truncated or inconsistent payload
  kBadVersion = 2,        // unsupported protocol version
  kUnknownOp = 3,
  kTooLarge = 4,          // payload_bytes over max_frame_bytes (the connection is closed after it)
  kBadShape = 5,          // tensor shape does not match the model input, or batch too large
  kBadImage = 6,          // undecodable or oversized image
  kBusy = 7,              // request queue full, or no free connection slot: retry later
  kShuttingDown = 8,      // the daemon is stopping
  kPermissionDenied = 9,  // peer uid/gid not in the allow-list (the connection is closed after it)
  kTimeout = 10,          // frame not complete within the read deadline (closed after it)
  kInternal = 11,         // inference failed
};

inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kBadFrame: return "bad_frame";
    case ErrorCode::kBadVersion: return "bad_version";
    case ErrorCode::kUnknownOp: return "unknown_op";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kBadShape: return "bad_shape";
    case ErrorCode::kBadImage: return "bad_image";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kShuttingDown: return "shutting_down";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t op = 0;
  uint32_t flags = 0;
  uint32_t payload_bytes = 0;
  uint64_t request_id = 0;
};

// Infer requests start with this prefix (8 bytes).
//   0 u16 topk (0: the daemon's default, 5), 2 u16 reserved (0), 4 u32 reserved (0)
constexpr size_t kInferPrefixBytes = 8;
// Then, for kInferTensor, the shape (20 bytes): u32 ndim (3: C,H,W or 4: N,C,H,W), u32 dims[4]
// (unused trailing dims 0), followed by product(dims) float32 values, row-major, little-endian.
constexpr size_t kTensorShapeBytes = 20;

// Successful infer answer:
//   0  u32 n (images), 4 u32 k (entries per image), 8 u32 logits_per_image (0 unless requested),
//   12 u32 reserved, 16 u64 latency_ns (frame received -> answer ready), 24 u64 infer_ns (the batch's
//   Engine::infer), 32 u32 batch_images (images in the batch this request ran in), 36 u32 batch_row (the
//   row of this request's first image in that batch; with both, Engine::infer reproduces the logits bit
//   for bit: OpenBLAS picks sgemm kernels, and tail paths, by the batch's row count),
//   40: n * k entries, each: u32 index, f32 score (softmax probability), u32 label_bytes (<= 64),
//       label bytes, padded with zeros to a multiple of 4
//   then n * logits_per_image float32.
constexpr size_t kInferAnswerFixedBytes = 40;
constexpr size_t kMaxLabelBytes = 64;
constexpr uint32_t kMaxTopk = 1000;

// Little-endian field access on byte buffers (no alignment assumed).
inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline uint16_t get_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t get_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t get_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
inline float get_f32(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }

inline void encode_header(const Header& h, uint8_t* out /* kHeaderBytes */) {
  put_u32(out + 0, h.magic);
  put_u16(out + 4, h.version);
  put_u16(out + 6, h.op);
  put_u32(out + 8, h.flags);
  put_u32(out + 12, h.payload_bytes);
  put_u64(out + 16, h.request_id);
}

inline Header decode_header(const uint8_t* in /* kHeaderBytes */) {
  Header h;
  h.magic = get_u32(in + 0);
  h.version = get_u16(in + 4);
  h.op = get_u16(in + 6);
  h.flags = get_u32(in + 8);
  h.payload_bytes = get_u32(in + 12);
  h.request_id = get_u64(in + 16);
  return h;
}

inline bool known_op(uint16_t op) { return op >= 1 && op <= 5; }

}  // namespace edgevit::protocol
