// Writes the generated seed files of the fuzz corpora (the shipped YAMLs and digit PNGs are copied by
// tools/fuzz.sh --seeds instead): small valid safetensors files made with write_safetensors plus F16/BF16
// variants, images in every format decode_image accepts, made with stb_image_write, and daemon request
// frames made with the client's encoders (protocol.h: the payload encoders edgevit_client.h sends with).
// Usage: make_fuzz_seeds CORPUS_DIR   (writes CORPUS_DIR/safetensors/*, CORPUS_DIR/image/*, CORPUS_DIR/frame/*)
#include <stb_image_write.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/safetensors.h"
#include "serving/protocol.h"

namespace {

bool write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// A safetensors file with one 2x3 tensor of a 2-byte dtype; `header` is the JSON text.
std::string half_file(const char* dtype) {
  const std::string header = std::string("{\"w\":{\"dtype\":\"") + dtype +
                             "\",\"shape\":[2,3],\"data_offsets\":[0,12]},\"__metadata__\":{\"format\":\"pt\"}}";
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  const uint16_t values[6] = {0x3c00, 0xbc00, 0x0001, 0x7bff, 0x7c00, 0x3555};
  for (uint16_t v : values) out += std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
  return out;
}

void append(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

std::vector<uint8_t> gradient(int w, int h, int c) {
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[(static_cast<size_t>(y) * w + x) * c + k] = static_cast<uint8_t>(x * 17 + y * 29 + k * 71);
  return p;
}

std::string netpbm(const char* magic, int w, int h, int c) {
  const std::vector<uint8_t> p = gradient(w, h, c);
  return std::string(magic) + "\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n" +
         std::string(p.begin(), p.end());
}

// One request frame as edgevit_client.h sends it: header + payload.
std::string request_frame(edgevit::protocol::Op op, const std::vector<uint8_t>& payload, uint32_t flags, uint64_t id) {
  namespace protocol = edgevit::protocol;
  protocol::Header h;
  h.op = static_cast<uint16_t>(op);
  h.flags = flags;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.request_id = id;
  uint8_t head[protocol::kHeaderBytes];
  protocol::encode_header(h, head);
  return std::string(head, head + sizeof head) + std::string(payload.begin(), payload.end());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;

  const std::vector<float> a = {1.f, -2.f, 0.5f, 3.25f, 0.f, -0.f};
  const std::vector<float> b = {42.f};
  const std::vector<float> input(2 * 1 * 8 * 8, 0.25f);
  const auto st = [&](const std::string& name, const std::vector<edgevit::NamedTensorView>& t,
                      const std::map<std::string, std::string>& meta) {
    const edgevit::Status s = edgevit::write_safetensors(dir + "/safetensors/" + name, t, meta);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.to_string().c_str());
    ok = ok && s.ok();
  };
  st("two_f32.safetensors", {{"a", {2, 3}, a.data()}, {"b", {}, b.data()}}, {{"format", "pt"}});
  st("empty_tensor.safetensors", {{"e", {0, 4}, nullptr}, {"b", {1}, b.data()}}, {});
  st("input_batch.safetensors", {{"input", {2, 1, 8, 8}, input.data()}}, {{"note", "digits input"}});
  st("no_tensors.safetensors", {}, {{"format", "pt"}});
  ok = ok && write_bytes(dir + "/safetensors/f16.safetensors", half_file("F16"));
  ok = ok && write_bytes(dir + "/safetensors/bf16.safetensors", half_file("BF16"));

  const std::string img = dir + "/image/";
  for (int c : {1, 3, 4}) {
    const int w = 12, h = 9;
    const std::vector<uint8_t> p = gradient(w, h, c);
    std::string png, jpg, bmp, tga;
    stbi_write_png_to_func(append, &png, w, h, c, p.data(), w * c);
    stbi_write_jpg_to_func(append, &jpg, w, h, c, p.data(), 90);
    stbi_write_bmp_to_func(append, &bmp, w, h, c, p.data());
    stbi_write_tga_to_func(append, &tga, w, h, c, p.data());
    const std::string tag = "c" + std::to_string(c);
    ok = ok && write_bytes(img + tag + ".png", png) && write_bytes(img + tag + ".jpg", jpg) &&
         write_bytes(img + tag + ".bmp", bmp) && write_bytes(img + tag + ".tga", tga);
  }
  ok = ok && write_bytes(img + "grey.pgm", netpbm("P5", 8, 8, 1)) && write_bytes(img + "rgb.ppm", netpbm("P6", 7, 5, 3));

  // Daemon frames for fuzz_frame's two models (1x8x8 batch 4, 3x8x8 batch 1).
  namespace protocol = edgevit::protocol;
  using protocol::Op;
  const std::string fr = dir + "/frame/";
  ok = ok && write_bytes(fr + "health.frame", request_frame(Op::kHealth, {}, 0, 1)) &&
       write_bytes(fr + "stats.frame", request_frame(Op::kStats, {}, 0, 2)) &&
       write_bytes(fr + "version.frame", request_frame(Op::kVersion, {}, 0, 3));
  {
    const std::vector<uint8_t> p = gradient(8, 8, 1);
    std::string png;
    stbi_write_png_to_func(append, &png, 8, 8, 1, p.data(), 8);
    ok = ok && write_bytes(fr + "image_png.frame",
                           request_frame(Op::kInferImage, protocol::encode_infer_image_payload(png.data(), png.size(), 5),
                                         protocol::kFlagWantLogits, 4));
  }
  const std::vector<float> values = [] {
    std::vector<float> v(4 * 64);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) * 0.125f - 1.f;
    return v;
  }();
  const uint32_t chw1[3] = {1, 8, 8}, chw3[3] = {3, 8, 8}, nchw2[4] = {2, 1, 8, 8}, nchw4[4] = {4, 1, 8, 8};
  ok = ok &&
       write_bytes(fr + "tensor_1x8x8.frame",
                   request_frame(Op::kInferTensor, protocol::encode_infer_tensor_payload(values.data(), chw1, 3, 3), 0, 5)) &&
       write_bytes(fr + "tensor_3x8x8.frame",
                   request_frame(Op::kInferTensor, protocol::encode_infer_tensor_payload(values.data(), chw3, 3, 0),
                                 protocol::kFlagWantLogits, 6)) &&
       write_bytes(fr + "tensor_2x1x8x8.frame",
                   request_frame(Op::kInferTensor, protocol::encode_infer_tensor_payload(values.data(), nchw2, 4, 10),
                                 protocol::kFlagWantLogits, 7)) &&
       write_bytes(fr + "tensor_4x1x8x8.frame",
                   request_frame(Op::kInferTensor, protocol::encode_infer_tensor_payload(values.data(), nchw4, 4, 1), 0, 8));
  // Frames the parser refuses for their reserved fields (issue #22): the response flag on a request, a
  // payload on health, a non-zero prefix reserved field, dims[3] set with ndim 3.
  {
    std::vector<uint8_t> prefix_reserved = protocol::encode_infer_image_payload("\x89PNG", 4, 1);
    prefix_reserved[2] = 7;
    std::vector<uint8_t> dims3 = protocol::encode_infer_tensor_payload(values.data(), chw1, 3, 1);
    protocol::put_u32(dims3.data() + protocol::kInferPrefixBytes + 16, 5);
    ok = ok && write_bytes(fr + "refused_response_flag.frame", request_frame(Op::kHealth, {}, protocol::kFlagResponse, 10)) &&
         write_bytes(fr + "refused_health_payload.frame", request_frame(Op::kHealth, {9, 9}, 0, 11)) &&
         write_bytes(fr + "refused_prefix_reserved.frame", request_frame(Op::kInferImage, prefix_reserved, 0, 12)) &&
         write_bytes(fr + "refused_dims3_set.frame", request_frame(Op::kInferTensor, dims3, 0, 13));
  }
  if (!ok) std::fprintf(stderr, "make_fuzz_seeds: writing into %s failed\n", dir.c_str());
  return ok ? 0 : 1;
}
