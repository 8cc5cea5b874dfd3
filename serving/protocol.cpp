#include "serving/protocol.h"

namespace edgevit::protocol {

namespace {

std::string hex32(uint32_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

bool fail(ParseError* err, ErrorCode code, std::string message) {
  err->code = code;
  err->message = std::move(message);
  return false;
}

}  // namespace

bool check_header(const uint8_t* bytes, size_t size, int64_t max_payload_bytes, Header* out, ParseError* err) {
  if (size < kHeaderBytes)
    return fail(err, ErrorCode::kBadFrame,
                "frame header is " + std::to_string(size) + " bytes, needs " + std::to_string(kHeaderBytes));
  const Header h = decode_header(bytes);
  if (h.magic != kMagic) return fail(err, ErrorCode::kBadFrame, "bad magic");
  if (h.version != kProtocolVersion)
    return fail(err, ErrorCode::kBadVersion,
                "protocol version " + std::to_string(h.version) + " not supported (this daemon speaks " +
                    std::to_string(kProtocolVersion) + ")");
  if (max_payload_bytes < 0 || h.payload_bytes > static_cast<uint64_t>(max_payload_bytes))
    return fail(err, ErrorCode::kTooLarge,
                "payload of " + std::to_string(h.payload_bytes) + " bytes over limits.max_frame_bytes " +
                    std::to_string(max_payload_bytes));
  *out = h;
  return true;
}

bool parse_payload(const Header& header, const uint8_t* payload, size_t size, const ModelInput& input,
                   ParsedRequest* out, ParseError* err) {
  if (size != header.payload_bytes)
    return fail(err, ErrorCode::kBadFrame,
                "payload is " + std::to_string(size) + " bytes, the header says " +
                    std::to_string(header.payload_bytes));
  if (!known_op(header.op)) return fail(err, ErrorCode::kUnknownOp, "unknown op " + std::to_string(header.op));
  // Reserved bits and fields must be zero, so that a later protocol can give them a meaning.
  if ((header.flags & ~kRequestFlags) != 0)
    return fail(err, ErrorCode::kBadFrame,
                "request flags 0x" + hex32(header.flags) +
                    " set reserved bits (a request may set only want_logits 0x1, want_embedding 0x2, want_tokens 0x4)");
  ParsedRequest r;
  r.header = header;
  r.op = static_cast<Op>(header.op);
  if (r.op != Op::kInferImage && r.op != Op::kInferTensor) {  // health, stats, version
    if (size != 0)
      return fail(err, ErrorCode::kBadFrame, "op " + std::to_string(header.op) + " takes no payload, got " +
                                                 std::to_string(size) + " bytes");
    *out = r;
    return true;
  }
  if (size < kInferPrefixBytes)
    return fail(err, ErrorCode::kBadFrame, "infer payload shorter than its 8-byte prefix");
  if (get_u16(payload + 2) != 0 || get_u32(payload + 4) != 0)
    return fail(err, ErrorCode::kBadFrame, "infer prefix: the reserved fields (bytes 2..7) must be 0");
  r.topk = get_u16(payload);
  r.want_logits = (header.flags & kFlagWantLogits) != 0;
  r.want_embedding = (header.flags & kFlagWantEmbedding) != 0;
  r.want_tokens = (header.flags & kFlagWantTokens) != 0;
  const uint8_t* body = payload + kInferPrefixBytes;
  const size_t body_size = size - kInferPrefixBytes;
  if (r.op == Op::kInferImage) {
    r.n = 1;
    r.image = body;
    r.image_bytes = body_size;
    *out = r;
    return true;
  }
  if (body_size < kTensorShapeBytes)
    return fail(err, ErrorCode::kBadFrame, "infer-tensor payload shorter than its shape");
  r.ndim = get_u32(body);
  for (int i = 0; i < 4; ++i) r.dims[i] = get_u32(body + 4 + 4 * i);
  if (r.ndim == 3 && r.dims[3] != 0)
    return fail(err, ErrorCode::kBadFrame, "tensor shape: ndim 3 leaves dims[3] unused, it must be 0");
  const uint32_t n = r.ndim == 4 ? r.dims[0] : 1;
  const uint32_t* chw = r.ndim == 4 ? r.dims + 1 : r.dims;
  if ((r.ndim != 3 && r.ndim != 4) || chw[0] != input.in_chans || chw[1] != input.img_h ||
      chw[2] != input.img_w || n == 0 || n > input.max_batch)
    return fail(err, ErrorCode::kBadShape,
                "tensor shape (ndim " + std::to_string(r.ndim) + ": " + std::to_string(r.dims[0]) + "," +
                    std::to_string(r.dims[1]) + "," + std::to_string(r.dims[2]) + "," +
                    std::to_string(r.dims[3]) + ") does not match the model input [N<=" +
                    std::to_string(input.max_batch) + "," + std::to_string(input.in_chans) + "," +
                    std::to_string(input.img_h) + "," + std::to_string(input.img_w) + "] of " +
                    std::string(input.name));
  // n, C, H, W are each < 2^32: their product can overflow 64 bits, so every step is checked.
  size_t bytes = sizeof(float);
  for (const uint32_t d : {n, chw[0], chw[1], chw[2]}) {
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes))
      return fail(err, ErrorCode::kBadShape,
                  "tensor shape (" + std::to_string(n) + "," + std::to_string(chw[0]) + "," +
                      std::to_string(chw[1]) + "," + std::to_string(chw[2]) + ") has more bytes than size_t holds");
  }
  const size_t data_bytes = body_size - kTensorShapeBytes;
  if (data_bytes != bytes)
    return fail(err, ErrorCode::kBadFrame,
                "tensor data is " + std::to_string(data_bytes) + " bytes, the shape needs " + std::to_string(bytes));
  r.n = n;
  r.tensor = body + kTensorShapeBytes;
  r.tensor_bytes = bytes;
  *out = r;
  return true;
}

bool parse_request(const uint8_t* header, size_t header_size, const uint8_t* payload, size_t payload_size,
                   const RequestLimits& limits, ParsedRequest* out, ParseError* err) {
  Header h;
  if (!check_header(header, header_size, limits.max_payload_bytes, &h, err)) return false;
  return parse_payload(h, payload, payload_size, limits.input, out, err);
}

}  // namespace edgevit::protocol
