// Test fixtures for image decoding at scale: a PNG of any size written straight to a file (all-zero
// samples, deflated with fixed-Huffman run-length matches, so a 537 MB image is a ~3.4 MB file written
// without holding the image), and the peak resident memory a piece of code adds, measured in a forked
// child (Linux: /proc/self/clear_refs resets VmHWM).
#pragma once

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace edgevit::testutil {

namespace png_detail {

inline uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

inline void put_be32(std::vector<uint8_t>* out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out->push_back(static_cast<uint8_t>(v >> s));
}

inline void write_chunk(std::ofstream& f, const char* kind, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out;
  put_be32(&out, static_cast<uint32_t>(body.size()));
  out.insert(out.end(), kind, kind + 4);
  out.insert(out.end(), body.begin(), body.end());
  put_be32(&out, crc32(out.data() + 4, out.size() - 4));
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
}

// LSB-first bit writer for deflate; Huffman codes are written most significant bit first.
struct BitWriter {
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int nbits = 0;
  void bits(uint32_t v, int n) {
    for (int i = 0; i < n; ++i) put((v >> i) & 1);
  }
  void code(uint32_t v, int n) {
    for (int i = n - 1; i >= 0; --i) put((v >> i) & 1);
  }
  void put(uint32_t b) {
    acc |= b << nbits;
    if (++nbits == 8) {
      bytes.push_back(static_cast<uint8_t>(acc));
      acc = 0;
      nbits = 0;
    }
  }
  void flush() {
    if (nbits > 0) bytes.push_back(static_cast<uint8_t>(acc));
    acc = 0;
    nbits = 0;
  }
};

}  // namespace png_detail

// Writes a PNG (width x height, colour type 0/2/4/6, or 3 with a one-colour palette; depth 8 or 16)
// whose samples are all zero; `interlaced` (Adam7) and `trns` (a transparent colour, which stb turns into
// an alpha channel) as asked. Returns false if the file cannot be written.
inline bool write_zero_png(const std::string& path, uint32_t width, uint32_t height, int color_type, int depth,
                           bool interlaced = false, bool trns = false) {
  using namespace png_detail;
  const int chans = color_type == 0 || color_type == 3 ? 1 : color_type == 2 ? 3 : color_type == 4 ? 2 : 4;
  const uint64_t bytes_per_pixel = uint64_t(chans) * (depth / 8);
  uint64_t total = 0;  // zero bytes: filter type 0 and zero samples, per pass when interlaced
  if (!interlaced) {
    total = (1 + uint64_t{width} * bytes_per_pixel) * height;
  } else {
    const uint32_t x0[] = {0, 4, 0, 2, 0, 1, 0}, y0[] = {0, 0, 4, 0, 2, 0, 1};
    const uint32_t dx[] = {8, 8, 4, 4, 2, 2, 1}, dy[] = {8, 8, 8, 4, 4, 2, 2};
    for (int p = 0; p < 7; ++p) {
      const uint64_t w = width > x0[p] ? (width - x0[p] + dx[p] - 1) / dx[p] : 0;
      const uint64_t h = height > y0[p] ? (height - y0[p] + dy[p] - 1) / dy[p] : 0;
      if (w > 0) total += (1 + w * bytes_per_pixel) * h;
    }
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) return false;
  f.write("\x89PNG\r\n\x1a\n", 8);
  std::vector<uint8_t> ihdr;
  put_be32(&ihdr, width);
  put_be32(&ihdr, height);
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(depth), static_cast<uint8_t>(color_type), 0, 0,
                           static_cast<uint8_t>(interlaced ? 1 : 0)});
  write_chunk(f, "IHDR", ihdr);
  if (color_type == 3) write_chunk(f, "PLTE", {10, 20, 30});
  if (trns) write_chunk(f, "tRNS", std::vector<uint8_t>(color_type == 3 ? 1 : color_type == 2 ? 6 : 2, 0));
  // One fixed-Huffman block: a literal 0, then matches of length 258 (code 285) at distance 1, then the
  // remainder as a shorter match or literals, then end-of-block. Flushed to IDAT chunks as it grows.
  BitWriter w;
  w.bytes = {0x78, 0x01};
  w.bits(1, 1);  // BFINAL
  w.bits(1, 2);  // BTYPE = fixed Huffman
  auto literal0 = [&] { w.code(0x30, 8); };
  auto flush_idat = [&](bool all) {
    if (all) w.flush();
    if (w.bytes.size() >= (1u << 20) || (all && !w.bytes.empty())) {
      write_chunk(f, "IDAT", w.bytes);
      w.bytes.clear();
    }
  };
  literal0();
  uint64_t left = total - 1;
  while (left >= 258) {
    w.code(0xC5, 8);  // length code 285 (258), 8-bit code 11000101
    w.code(0, 5);     // distance code 0 (distance 1)
    left -= 258;
    if (w.bytes.size() >= (1u << 20)) flush_idat(false);
  }
  for (; left > 0; --left) literal0();
  w.code(0, 7);  // end of block (256)
  w.flush();
  const uint32_t adler = static_cast<uint32_t>(total % 65521) << 16 | 1;  // a = 1, b = n (all bytes zero)
  put_be32(&w.bytes, adler);
  flush_idat(true);
  write_chunk(f, "IEND", {});
  return static_cast<bool>(f);
}

// Peak resident bytes that `work` adds, measured in a forked child: the child returns the heap's free
// memory to the system, fixes glibc's mmap threshold at 64 KiB (so blocks freed by `work` are unmapped,
// not kept resident for reuse: the figure is the peak of live allocations), resets its high-water mark,
// runs `work`, and reports VmHWM minus the resident size it started from. -1 if the measurement failed.
inline int64_t peak_rss_growth_bytes(const std::function<void()>& work) {
  auto read_kib = [](const char* key) -> int64_t {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
    return -1;
  };
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    int64_t growth = -1;
    mallopt(M_MMAP_THRESHOLD, 64 << 10);
    malloc_trim(0);
    {
      std::ofstream clear("/proc/self/clear_refs");
      clear << "5";
    }
    const int64_t start = read_kib("VmRSS:");
    if (start >= 0 && read_kib("VmHWM:") <= start + 1024) {
      work();
      growth = (read_kib("VmHWM:") - start) * 1024;
    }
    (void)!write(fds[1], &growth, sizeof growth);
    _exit(0);
  }
  close(fds[1]);
  int64_t growth = -1;
  if (read(fds[0], &growth, sizeof growth) != static_cast<ssize_t>(sizeof growth)) growth = -1;
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  return growth;
}

}  // namespace edgevit::testutil
