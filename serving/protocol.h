// The edgevitd wire protocol (docs/protocol.md), header-only and free of edgevit dependencies so that
// serving/edgevit_client.h can be copied into other programs.
//
// Every message, in both directions, is one frame: a fixed 24-byte little-endian header followed by
// `payload_bytes` bytes of payload.
//
//   offset size field
//   0      4    magic          0x54495645 ("EVIT" on the wire)
//   4      2    version        kProtocolVersion
//   6      2    op             Op
//   8      4    flags          request: kFlagWantLogits | kFlagWantEmbedding | kFlagWantTokens;
//                              response: kFlagResponse (| kFlagError)
//   12     4    payload_bytes  <= the daemon's max_frame_bytes (requests)
//   16     8    request_id     chosen by the client, echoed in the response
//
// Requests and responses alternate on a connection (no pipelining): the client sends one frame and
// reads one frame.
//
// The request parser (check_header, parse_payload, parse_request) is declared at the end and defined in
// protocol.cpp: the daemon's only validation of what arrives on its socket, kept free of sockets and
// engines so that tests/daemon/protocol_parse_test.cpp and tests/fuzz/fuzz_frame.cpp can call it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

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

constexpr uint32_t kFlagWantLogits = 1u << 0;     // request: include the raw logits in the answer
constexpr uint32_t kFlagWantEmbedding = 1u << 1;  // request: include the `embedding` output section
constexpr uint32_t kFlagWantTokens = 1u << 2;     // request: include the `tokens` output section (the model
                                                  // config must list tokens in runtime.outputs)
constexpr uint32_t kRequestFlags = kFlagWantLogits | kFlagWantEmbedding | kFlagWantTokens;
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
  kInternal = 11,         // inference failed, or the daemon failed to answer (an exception in a handler)
  kNonFinite = 12,        // the model's output holds NaN or Inf for this input: no prediction is given
  kNoSuchOutput = 13,     // the request wants an output (embedding, tokens) the served engine does not produce
};
constexpr ErrorCode kLastErrorCode = ErrorCode::kNoSuchOutput;

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
    case ErrorCode::kNonFinite: return "non_finite_output";
    case ErrorCode::kNoSuchOutput: return "no_such_output";
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
//   12 u32 sections (named output sections at the end: 0 unless embedding or tokens were requested),
//   16 u64 latency_ns (frame received -> answer ready), 24 u64 infer_ns (the batch's
//   Engine::infer), 32 u32 batch_images (images in the batch this request ran in), 36 u32 batch_row (the
//   row of this request's first image in that batch; with both, Engine::infer reproduces the logits bit
//   for bit: OpenBLAS picks sgemm kernels, and tail paths, by the batch's row count),
//   40: n * k entries, each: u32 index, f32 score (softmax probability), u32 label_bytes (<= 64),
//       label bytes, padded with zeros to a multiple of 4
//   then n * logits_per_image float32,
//   then `sections` named outputs, in the order embedding, tokens, each: u32 name_bytes (1..16), the name
//       ("embedding", "tokens") padded with zeros to a multiple of 4, u32 ndim (1..3), u32 dims[ndim] (per
//       image: embedding {dim}, tokens {tokens, embed}), then n * product(dims) float32.
constexpr size_t kInferAnswerFixedBytes = 40;
constexpr uint32_t kMaxSectionNameBytes = 16;
constexpr uint32_t kMaxSectionDims = 3;
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

// ---- request payload encoders (edgevit_client.h sends these; the fuzzer re-encodes with them) ----------

// kInferImage payload: prefix + the encoded image bytes.
inline std::vector<uint8_t> encode_infer_image_payload(const void* bytes, size_t size, int topk) {
  std::vector<uint8_t> payload(kInferPrefixBytes + size);
  put_u16(payload.data(), static_cast<uint16_t>(topk));
  if (size > 0) std::memcpy(payload.data() + kInferPrefixBytes, bytes, size);
  return payload;
}

// kInferTensor payload: prefix + shape + float32 data. dims = {C, H, W} (ndim 3) or {N, C, H, W} (ndim 4);
// the caller checks ndim.
inline std::vector<uint8_t> encode_infer_tensor_payload(const float* data /* product(dims) */,
                                                        const uint32_t* dims, int ndim, int topk) {
  size_t numel = 1;
  for (int i = 0; i < ndim; ++i) numel *= dims[i];
  std::vector<uint8_t> payload(kInferPrefixBytes + kTensorShapeBytes + numel * 4);
  uint8_t* p = payload.data();
  put_u16(p, static_cast<uint16_t>(topk));
  p += kInferPrefixBytes;
  put_u32(p, static_cast<uint32_t>(ndim));
  for (int i = 0; i < ndim; ++i) put_u32(p + 4 + 4 * i, dims[i]);
  if (numel > 0) std::memcpy(p + kTensorShapeBytes, data, numel * 4);
  return payload;
}

// ---- request parsing (protocol.cpp) ------------------------------------------------------------------

// What a tensor request must match: the served model's input.
struct ModelInput {
  std::string_view name;  // model name, for messages (not owned: parsing a valid request allocates nothing)
  uint32_t in_chans = 0;  // C
  uint32_t img_h = 0;     // H
  uint32_t img_w = 0;     // W
  uint32_t max_batch = 0; // N <= max_batch
};

struct RequestLimits {
  int64_t max_payload_bytes = 0;  // the daemon's limits.max_frame_bytes
  ModelInput input;
};

// A validated request. The pointers point into the payload passed to the parser (which keeps ownership).
struct ParsedRequest {
  Header header;
  Op op = Op::kHealth;
  // Infer requests only:
  uint16_t topk = 0;           // 0: the daemon's default
  bool want_logits = false;    // header.flags & kFlagWantLogits
  bool want_embedding = false; // header.flags & kFlagWantEmbedding
  bool want_tokens = false;    // header.flags & kFlagWantTokens
  uint32_t n = 0;              // images: 1 for kInferImage, N for kInferTensor
  const uint8_t* image = nullptr;   // kInferImage: the encoded image, image_bytes long (may be 0)
  size_t image_bytes = 0;
  const uint8_t* tensor = nullptr;  // kInferTensor: (n, C, H, W) float32 little-endian, unaligned
  size_t tensor_bytes = 0;
  uint32_t ndim = 0;                // kInferTensor: 3 or 4, dims as sent (unused trailing dims 0)
  uint32_t dims[4] = {0, 0, 0, 0};
};

// The error the daemon answers with (code + message, as sent in the error frame).
struct ParseError {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

// Checks the fixed header (`size` bytes at `bytes`): length, magic, version, payload_bytes against
// max_payload_bytes. The daemon calls it before it reads the payload. On success fills *out.
bool check_header(const uint8_t* bytes, size_t size, int64_t max_payload_bytes, Header* out, ParseError* err);

// Checks a request payload (`size` bytes, which must be header.payload_bytes) for an already checked
// header: the op, and for infer requests the prefix, the tensor shape against `input` and the data
// length (checked arithmetic). Image bytes are not decoded here.
bool parse_payload(const Header& header, const uint8_t* payload, size_t size, const ModelInput& input,
                   ParsedRequest* out, ParseError* err);

// check_header + parse_payload on a whole frame.
bool parse_request(const uint8_t* header, size_t header_size, const uint8_t* payload, size_t payload_size,
                   const RequestLimits& limits, ParsedRequest* out, ParseError* err);

}  // namespace edgevit::protocol
