// protocol::check_header / parse_payload / parse_request (serving/protocol.cpp), the daemon's
// validation of request frames, without a socket: one row per accepted request kind and per rejection,
// each checking the error code and the exact message the daemon sends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "serving/protocol.h"

namespace edgevit::protocol {
namespace {

// The digits model's input (1x8x8), batch 4, and a 4 KiB payload limit.
RequestLimits limits() {
  RequestLimits l;
  l.max_payload_bytes = 4096;
  l.input.name = "vit-digits";
  l.input.in_chans = 1;
  l.input.img_h = l.input.img_w = 8;
  l.input.max_batch = 4;
  return l;
}

struct Frame {
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};

Frame frame(uint16_t op, std::vector<uint8_t> payload, uint32_t flags = 0) {
  Header h;
  h.op = op;
  h.flags = flags;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.request_id = 42;
  Frame f;
  f.header.resize(kHeaderBytes);
  encode_header(h, f.header.data());
  f.payload = std::move(payload);
  return f;
}

constexpr uint16_t kImage = static_cast<uint16_t>(Op::kInferImage);
constexpr uint16_t kTensor = static_cast<uint16_t>(Op::kInferTensor);

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 3.f;
  return v;
}

// A tensor request with `numel` floats after the shape, whatever the shape says (rows lie about it).
Frame tensor_frame(std::vector<uint32_t> dims, size_t numel, int topk = 3, uint32_t flags = kFlagWantLogits) {
  const std::vector<float> data = ramp(numel);
  std::vector<uint8_t> p(kInferPrefixBytes + kTensorShapeBytes, 0);
  put_u16(p.data(), static_cast<uint16_t>(topk));
  put_u32(p.data() + kInferPrefixBytes, static_cast<uint32_t>(dims.size()));
  for (size_t i = 0; i < dims.size() && i < 4; ++i) put_u32(p.data() + kInferPrefixBytes + 4 + 4 * i, dims[i]);
  for (float v : data) {
    uint8_t b[4];
    put_f32(b, v);
    p.insert(p.end(), b, b + 4);
  }
  return frame(kTensor, std::move(p), flags);
}

Frame with_header_field(Frame f, size_t offset, uint32_t value, size_t width) {
  if (width == 2) put_u16(f.header.data() + offset, static_cast<uint16_t>(value));
  else put_u32(f.header.data() + offset, value);
  return f;
}

Frame with_payload_byte(Frame f, size_t offset, uint8_t value) {
  f.payload[offset] = value;
  return f;
}

Frame with_ndim(Frame f, uint32_t ndim) {
  put_u32(f.payload.data() + kInferPrefixBytes, ndim);
  return f;
}

struct Row {
  const char* name;
  Frame f;
  RequestLimits lim;
  ErrorCode code;
  std::string message;  // exact
};

TEST(ProtocolParse, RejectsEachMalformedFrameWithTheDaemonsCodeAndMessage) {
  const RequestLimits L = limits();
  RequestLimits huge = L;  // a model whose input is so large that N*C*H*W*4 overflows 64 bits
  huge.input.in_chans = 0xffffffffu;
  huge.input.img_h = huge.input.img_w = 0xffffffffu;
  huge.input.max_batch = 0xffffffffu;
  huge.max_payload_bytes = 1 << 20;
  Frame truncated_header = tensor_frame({1, 8, 8}, 64);
  truncated_header.header.resize(kHeaderBytes - 1);
  Frame short_payload = tensor_frame({1, 8, 8}, 64);
  short_payload.payload.pop_back();  // the header still says the full length
  const std::vector<Row> rows = {
      {"bad magic", with_header_field(tensor_frame({1, 8, 8}, 64), 0, 0xdeadbeef, 4), L, ErrorCode::kBadFrame,
       "bad magic"},
      {"truncated header", truncated_header, L, ErrorCode::kBadFrame, "frame header is 23 bytes, needs 24"},
      {"bad version", with_header_field(tensor_frame({1, 8, 8}, 64), 4, 99, 2), L, ErrorCode::kBadVersion,
       "protocol version 99 not supported (this daemon speaks 1)"},
      {"oversize length", with_header_field(frame(kTensor, {}), 12, 1 << 20, 4), L, ErrorCode::kTooLarge,
       "payload of 1048576 bytes over limits.max_frame_bytes 4096"},
      {"length 2^32-1", with_header_field(frame(kTensor, {}), 12, 0xffffffffu, 4), L, ErrorCode::kTooLarge,
       "payload of 4294967295 bytes over limits.max_frame_bytes 4096"},
      {"payload shorter than the header says", short_payload, L, ErrorCode::kBadFrame,
       "payload is 283 bytes, the header says 284"},
      {"unknown op", frame(77, {1, 2, 3}), L, ErrorCode::kUnknownOp, "unknown op 77"},
      {"op 0", frame(0, {}), L, ErrorCode::kUnknownOp, "unknown op 0"},
      {"image without prefix", frame(kImage, {1, 2, 3}), L, ErrorCode::kBadFrame,
       "infer payload shorter than its 8-byte prefix"},
      {"tensor without prefix", frame(kTensor, {}), L, ErrorCode::kBadFrame,
       "infer payload shorter than its 8-byte prefix"},
      {"tensor without shape", frame(kTensor, std::vector<uint8_t>(kInferPrefixBytes + kTensorShapeBytes - 1)), L,
       ErrorCode::kBadFrame, "infer-tensor payload shorter than its shape"},
      {"shape mismatch (channels)", tensor_frame({3, 8, 8}, 192), L, ErrorCode::kBadShape,
       "tensor shape (ndim 3: 3,8,8,0) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"shape mismatch (width)", tensor_frame({1, 8, 4}, 32), L, ErrorCode::kBadShape,
       "tensor shape (ndim 3: 1,8,4,0) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"ndim 2", tensor_frame({8, 8}, 64), L, ErrorCode::kBadShape,
       "tensor shape (ndim 2: 8,8,0,0) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"ndim 5", with_ndim(tensor_frame({1, 1, 8, 8}, 64), 5), L, ErrorCode::kBadShape,
       "tensor shape (ndim 5: 1,1,8,8) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"batch over the limit", tensor_frame({5, 1, 8, 8}, 320), L, ErrorCode::kBadShape,
       "tensor shape (ndim 4: 5,1,8,8) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"batch 0", tensor_frame({0, 1, 8, 8}, 0), L, ErrorCode::kBadShape,
       "tensor shape (ndim 4: 0,1,8,8) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"batch 2^32-1", tensor_frame({0xffffffffu, 1, 8, 8}, 0), L, ErrorCode::kBadShape,
       "tensor shape (ndim 4: 4294967295,1,8,8) does not match the model input [N<=4,1,8,8] of vit-digits"},
      {"numel overflow", tensor_frame({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0), huge,
       ErrorCode::kBadShape,
       "tensor shape (4294967295,4294967295,4294967295,4294967295) has more bytes than size_t holds"},
      {"data one float short", tensor_frame({1, 8, 8}, 63), L, ErrorCode::kBadFrame,
       "tensor data is 252 bytes, the shape needs 256"},
      {"data one float long", tensor_frame({2, 1, 8, 8}, 129), L, ErrorCode::kBadFrame,
       "tensor data is 516 bytes, the shape needs 512"},
      // Reserved fields (issue #22): refused, so that a later protocol can give them a meaning.
      {"response flag on a request", tensor_frame({1, 8, 8}, 64, 3, kFlagResponse), L, ErrorCode::kBadFrame,
       "request flags 0x00010000 set reserved bits (a request may set only want_logits 0x1, want_embedding 0x2, want_tokens 0x4)"},
      {"error and response flags on health", frame(3, {}, kFlagResponse | kFlagError), L, ErrorCode::kBadFrame,
       "request flags 0x00030000 set reserved bits (a request may set only want_logits 0x1, want_embedding 0x2, want_tokens 0x4)"},
      {"unknown flag bit", frame(kImage, std::vector<uint8_t>(kInferPrefixBytes + 4), 0x80000000u), L,
       ErrorCode::kBadFrame, "request flags 0x80000000 set reserved bits (a request may set only want_logits 0x1, want_embedding 0x2, want_tokens 0x4)"},
      {"payload on health", frame(3, {9, 9}), L, ErrorCode::kBadFrame, "op 3 takes no payload, got 2 bytes"},
      {"payload on stats", frame(4, {0}), L, ErrorCode::kBadFrame, "op 4 takes no payload, got 1 bytes"},
      {"payload on version", frame(5, std::vector<uint8_t>(100)), L, ErrorCode::kBadFrame,
       "op 5 takes no payload, got 100 bytes"},
      {"prefix reserved u16", with_payload_byte(tensor_frame({1, 8, 8}, 64), 2, 1), L, ErrorCode::kBadFrame,
       "infer prefix: the reserved fields (bytes 2..7) must be 0"},
      {"prefix reserved u32", with_payload_byte(frame(kImage, std::vector<uint8_t>(kInferPrefixBytes + 4)), 7, 0x80), L,
       ErrorCode::kBadFrame, "infer prefix: the reserved fields (bytes 2..7) must be 0"},
      {"ndim 3 with dims[3] set", with_payload_byte(tensor_frame({1, 8, 8}, 64), kInferPrefixBytes + 16, 1), L,
       ErrorCode::kBadFrame, "tensor shape: ndim 3 leaves dims[3] unused, it must be 0"},
  };
  for (const Row& r : rows) {
    ParsedRequest out;
    ParseError err;
    EXPECT_FALSE(parse_request(r.f.header.data(), r.f.header.size(), r.f.payload.data(), r.f.payload.size(), r.lim,
                               &out, &err))
        << r.name;
    EXPECT_EQ(err.code, r.code) << r.name << ": " << err.message;
    EXPECT_EQ(err.message, r.message) << r.name;
  }
}

TEST(ProtocolParse, AcceptsEachRequestKind) {
  const RequestLimits L = limits();
  for (const uint16_t op : {uint16_t{3}, uint16_t{4}, uint16_t{5}}) {
    {
      const Frame f = frame(op, {});
      ParsedRequest r;
      ParseError err;
      ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err))
          << "op " << op << ": " << err.message;
      EXPECT_EQ(static_cast<uint16_t>(r.op), op);
      EXPECT_EQ(r.header.request_id, 42u);
      EXPECT_EQ(r.tensor, nullptr);
      EXPECT_EQ(r.image, nullptr);
    }
  }

  const uint8_t png_magic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  {
    const Frame f = frame(kImage, encode_infer_image_payload(png_magic, sizeof png_magic, 7), 0);
    ParsedRequest r;
    ParseError err;
    ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err))
        << err.message;
    EXPECT_EQ(r.op, Op::kInferImage);
    EXPECT_EQ(r.topk, 7);
    EXPECT_FALSE(r.want_logits);
    EXPECT_FALSE(r.want_embedding);
    EXPECT_FALSE(r.want_tokens);
    EXPECT_EQ(r.n, 1u);
    ASSERT_EQ(r.image_bytes, sizeof png_magic);
    EXPECT_EQ(r.image, f.payload.data() + kInferPrefixBytes);
    EXPECT_EQ(std::memcmp(r.image, png_magic, sizeof png_magic), 0);
  }
  for (const uint32_t flags : {kFlagWantEmbedding, kFlagWantTokens, kRequestFlags}) {  // the output sections
    const Frame f = frame(kImage, encode_infer_image_payload(png_magic, sizeof png_magic, 1), flags);
    ParsedRequest r;
    ParseError err;
    ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err))
        << err.message;
    EXPECT_EQ(r.want_logits, (flags & kFlagWantLogits) != 0);
    EXPECT_EQ(r.want_embedding, (flags & kFlagWantEmbedding) != 0);
    EXPECT_EQ(r.want_tokens, (flags & kFlagWantTokens) != 0);
  }
  {  // an empty image is the decoder's to refuse, not the parser's
    const Frame f = frame(kImage, encode_infer_image_payload(nullptr, 0, 0));
    ParsedRequest r;
    ParseError err;
    ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err));
    EXPECT_EQ(r.image_bytes, 0u);
  }
  for (const std::vector<uint32_t>& dims :
       {std::vector<uint32_t>{1, 8, 8}, std::vector<uint32_t>{1, 1, 8, 8}, std::vector<uint32_t>{4, 1, 8, 8}}) {
    const size_t numel = dims.size() == 4 ? dims[0] * 64 : 64;
    const Frame f = tensor_frame(dims, numel, 0, kFlagWantLogits);
    const std::vector<float> values = ramp(numel);  // the client's encoder writes the same bytes
    EXPECT_EQ(encode_infer_tensor_payload(values.data(), dims.data(), static_cast<int>(dims.size()), 0), f.payload);
    ParsedRequest r;
    ParseError err;
    ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err))
        << err.message;
    EXPECT_EQ(r.op, Op::kInferTensor);
    EXPECT_EQ(r.topk, 0);
    EXPECT_TRUE(r.want_logits);
    EXPECT_EQ(r.n, dims.size() == 4 ? dims[0] : 1u);
    EXPECT_EQ(r.ndim, dims.size());
    ASSERT_EQ(r.tensor_bytes, numel * 4);
    EXPECT_EQ(r.tensor, f.payload.data() + kInferPrefixBytes + kTensorShapeBytes);
    const std::vector<float> want = ramp(numel);
    EXPECT_EQ(std::memcmp(r.tensor, want.data(), r.tensor_bytes), 0);
  }
  {  // the largest payload the limit allows is accepted: the limit is inclusive
    RequestLimits exact = L;
    const Frame f = tensor_frame({4, 1, 8, 8}, 256);
    exact.max_payload_bytes = static_cast<int64_t>(f.payload.size());
    ParsedRequest r;
    ParseError err;
    EXPECT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), exact, &r, &err))
        << err.message;
    exact.max_payload_bytes -= 1;
    EXPECT_FALSE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), exact, &r, &err));
    EXPECT_EQ(err.code, ErrorCode::kTooLarge);
  }
}

// A model whose input is not square (8 high, 16 wide): [C, H, W] in that order is accepted, the transposed
// shape refused naming the model's [N<=batch, C, H, W].
TEST(ProtocolParse, NonSquareInputChecksHeightThenWidth) {
  RequestLimits L = limits();
  L.input.img_h = 8;
  L.input.img_w = 16;
  {
    const Frame f = tensor_frame({2, 1, 8, 16}, 2 * 128);
    ParsedRequest r;
    ParseError err;
    ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err))
        << err.message;
    EXPECT_EQ(r.n, 2u);
    EXPECT_EQ(r.tensor_bytes, 2u * 128 * 4);
  }
  const Frame f = tensor_frame({2, 1, 16, 8}, 2 * 128);
  ParsedRequest r;
  ParseError err;
  EXPECT_FALSE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), L, &r, &err));
  EXPECT_EQ(err.code, ErrorCode::kBadShape);
  EXPECT_EQ(err.message, "tensor shape (ndim 4: 2,1,16,8) does not match the model input [N<=4,1,8,16] of vit-digits");
}

// The daemon does not inspect tensor values: NaN and infinities pass the parser bit for bit (the model
// computes with them; refusing them would be a protocol change).
TEST(ProtocolParse, TensorValuesAreNotInspected) {
  std::vector<float> v(64, 1.f);
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[1] = std::numeric_limits<float>::infinity();
  const uint32_t dims[3] = {1, 8, 8};
  const Frame f = frame(kTensor, encode_infer_tensor_payload(v.data(), dims, 3, 1));
  ParsedRequest r;
  ParseError err;
  ASSERT_TRUE(parse_request(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), limits(), &r, &err));
  EXPECT_TRUE(std::isnan(get_f32(r.tensor)));
  EXPECT_TRUE(std::isinf(get_f32(r.tensor + 4)));
}

}  // namespace
}  // namespace edgevit::protocol
