// libFuzzer target: the daemon's request parser (protocol::parse_request, serving/protocol.cpp) on
// whole frames: the first 24 bytes are the header (fewer if the input is shorter), the rest the payload.
// Two served models: the digits model (1x8x8, batch 4) and a 3x8x8 one with batch 1. Beyond "no crash":
//   - a refusal carries a known error code and a non-empty message;
//   - an accepted infer request points inside the payload, its tensor is exactly n*C*H*W float32 with
//     1 <= n <= batch, its image is the payload after the prefix;
//   - the header re-encodes to the same 24 bytes, and re-encoding the request with the client's payload
//     encoders (the functions edgevit_client.h sends with) parses to the same request.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "serving/protocol.h"

namespace {

using namespace edgevit::protocol;

RequestLimits make_limits(const char* name, uint32_t chans, uint32_t img, uint32_t batch) {
  RequestLimits l;
  l.max_payload_bytes = 4096;
  l.input.name = name;
  l.input.in_chans = chans;
  l.input.img_h = l.input.img_w = img;
  l.input.max_batch = batch;
  return l;
}

void check(bool ok) {
  if (!ok) std::abort();
}

bool inside(const uint8_t* p, size_t n, const uint8_t* base, size_t size) {
  return p >= base && n <= size && static_cast<size_t>(p - base) <= size - n;
}

void same_request(const ParsedRequest& a, const ParsedRequest& b) {
  check(a.op == b.op && a.topk == b.topk && a.want_logits == b.want_logits && a.n == b.n);
  check(a.image_bytes == b.image_bytes && a.tensor_bytes == b.tensor_bytes && a.ndim == b.ndim);
  if (a.image_bytes > 0) check(std::memcmp(a.image, b.image, a.image_bytes) == 0);
  if (a.tensor_bytes > 0) check(std::memcmp(a.tensor, b.tensor, a.tensor_bytes) == 0);
  for (uint32_t i = 0; i < a.ndim && i < 4; ++i) check(a.dims[i] == b.dims[i]);
}

void run(const uint8_t* data, size_t size, const RequestLimits& limits) {
  const size_t header_size = size < kHeaderBytes ? size : kHeaderBytes;
  const uint8_t* payload = data + header_size;
  const size_t payload_size = size - header_size;
  ParsedRequest r;
  ParseError err;
  if (!parse_request(data, header_size, payload, payload_size, limits, &r, &err)) {
    check(!err.message.empty());
    check(err.code == ErrorCode::kBadFrame || err.code == ErrorCode::kBadVersion ||
          err.code == ErrorCode::kUnknownOp || err.code == ErrorCode::kTooLarge || err.code == ErrorCode::kBadShape);
    return;
  }
  check(header_size == kHeaderBytes && payload_size == r.header.payload_bytes);
  check(payload_size <= static_cast<uint64_t>(limits.max_payload_bytes));
  uint8_t header[kHeaderBytes];
  encode_header(r.header, header);
  check(std::memcmp(header, data, kHeaderBytes) == 0);
  check(known_op(static_cast<uint16_t>(r.op)));

  std::vector<uint8_t> again;
  if (r.op == Op::kInferImage) {
    check(r.n == 1 && r.tensor == nullptr && r.tensor_bytes == 0);
    check(r.image == payload + kInferPrefixBytes && r.image_bytes == payload_size - kInferPrefixBytes);
    again = encode_infer_image_payload(r.image, r.image_bytes, r.topk);
  } else if (r.op == Op::kInferTensor) {
    const ModelInput& in = limits.input;
    check(r.n >= 1 && r.n <= in.max_batch && (r.ndim == 3 || r.ndim == 4) && r.image == nullptr);
    check(r.tensor_bytes == static_cast<size_t>(r.n) * in.in_chans * in.img_h * in.img_w * sizeof(float));
    check(inside(r.tensor, r.tensor_bytes, payload, payload_size));
    check(r.tensor + r.tensor_bytes == payload + payload_size);  // nothing trails the data
    std::vector<float> values(r.tensor_bytes / sizeof(float));
    std::memcpy(values.data(), r.tensor, r.tensor_bytes);
    again = encode_infer_tensor_payload(values.data(), r.dims, static_cast<int>(r.ndim), r.topk);
  } else {
    check(r.image == nullptr && r.tensor == nullptr && r.n == 0);
    return;
  }
  Header h = r.header;
  h.payload_bytes = static_cast<uint32_t>(again.size());
  encode_header(h, header);
  ParsedRequest r2;
  check(parse_request(header, kHeaderBytes, again.data(), again.size(), limits, &r2, &err));
  same_request(r, r2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const RequestLimits kDigits = make_limits("digits", 1, 8, 4);
  static const RequestLimits kRgb = make_limits("rgb", 3, 8, 1);
  // A copy of exactly `size` bytes, so that ASan catches any read past the frame.
  const std::vector<uint8_t> frame(data, data + size);
  run(frame.data(), frame.size(), kDigits);
  run(frame.data(), frame.size(), kRgb);
  return 0;
}
