#!/usr/bin/env python3
"""Writes tests/data/hostile/: one small file per failure class of edgevit's loaders (safetensors,
checkpoints, model and device YAML, images, input files). tests/runtime/hostile_inputs_test.cpp holds the
table of expected status codes and message fragments; every file here must have a row there.
Usage: python3 tests/data/hostile/make_hostile.py   (standard library only; rewrites the files in place)"""
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
files = {}


def st(header, data=b"", length=None):
    """A safetensors file: u64 header length, header text, data section."""
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def f32(n):
    return b"\x00\x00\x80\x3f" * n


def png(width, height, color_type, raw=None, truncate=None, depth=8):
    """A PNG with the given IHDR; raw scanlines are compressed as given (None: none at all)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0))
    if raw is not None:
        out += chunk(b"IDAT", zlib.compress(raw))
    out += chunk(b"IEND", b"")
    return out if truncate is None else out[:truncate]


# ---- safetensors (SafetensorsFile::open) ---------------------------------------------------------------
files["st_too_short.safetensors"] = b"\x10\x00\x00"
files["st_header_length_huge.safetensors"] = st(b"{}", length=1 << 62)
files["st_header_past_end.safetensors"] = st(b"{}", length=4096)
files["st_header_not_json.safetensors"] = st(b'{"a": {"dtype": "F32", ')
files["st_header_not_object.safetensors"] = st(b"[1, 2, 3]")
# 200000 nested arrays in a shape: nlohmann parses them iteratively, but dump() in an error message
# recursed once per level and overflowed the stack before the depth limit existed.
files["st_deep_json.safetensors"] = st(b'{"a":{"dtype":"F32","shape":' + b"[" * 200000 + b"]" * 200000 +
                                       b',"data_offsets":[0,0]}}')
files["st_duplicate_tensor.safetensors"] = st(
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
    f32(2))
files["st_unknown_entry_key.safetensors"] = st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, f32(1))
files["st_unsupported_dtype.safetensors"] = st({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8)
files["st_unknown_dtype.safetensors"] = st({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, f32(1))
files["st_negative_dim.safetensors"] = st({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32(1))
files["st_numel_overflow.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [1 << 32, 1 << 32, 1 << 32], "data_offsets": [0, 4]}}, f32(1))
files["st_bytes_overflow.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [1 << 62], "data_offsets": [0, 4]}}, f32(1))
files["st_size_mismatch.safetensors"] = st({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, f32(3))
files["st_offsets_backwards.safetensors"] = st({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}, f32(2))
files["st_offsets_overlap.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
    f32(3))
files["st_offsets_hole.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}},
    f32(3))
files["st_offsets_past_end.safetensors"] = st({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32(2))
files["st_offsets_huge.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [(1 << 64) - 5, (1 << 64) - 1]}}, f32(1))
files["st_trailing_bytes.safetensors"] = st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1) + b"junk")
files["st_metadata_not_string.safetensors"] = st({"__metadata__": {"format": 1}})

# ---- checkpoints (WeightSource::open + check against vit-digits' architecture) ---------------------------
files["ckpt_missing_tensors.safetensors"] = st({"cls_token": {"dtype": "F32", "shape": [1, 1, 64], "data_offsets": [0, 256]}},
                                               f32(64))

# ---- model configs (load_model_spec) --------------------------------------------------------------------
laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
for prev, cur in zip("abcdefgh", "bcdefghi"):
    laughs += cur + ": &" + cur + " [" + ",".join("*" + prev for _ in range(9)) + "]\n"
files["model_alias_bomb.yaml"] = laughs.encode()
files["model_self_alias.yaml"] = b"a: &a [*a]\n"
files["model_deep_flow.yaml"] = b"name: " + b"[" * 100000 + b"]" * 100000 + b"\n"
files["model_deep_indent.yaml"] = "".join(" " * i + "k%d:\n" % i for i in range(200)).encode()
files["model_nul_byte.yaml"] = b"name: a\x00b\n"
files["model_invalid_utf8.yaml"] = b"name: \xc3\x28\n"
files["model_int_overflow.yaml"] = b"architecture:\n  img_size: 99999999999999999999999\n"
files["model_too_many_tokens.yaml"] = (
    b"architecture:\n  img_size: 4096\n  patch_size: 1\n  embed_dim: 8\n  depth: 1\n  num_heads: 1\n"
    b"  num_classes: 10\nweights:\n  path: x.safetensors\n")
# A document that starts with ',' (after a comment): yaml-cpp 0.7 never returns (refused by the guard).
files["model_leading_comma.yaml"] = b"# a comment\n, 7 classes\nname: x\n"
files["device_leading_comma.yaml"] = b","
# The same loop behind a tag: a shorthand tag ends at ',', so `!!str,` leaves a node starting with ','
# (found by fuzz_model_config as a libFuzzer timeout; refused by the guard).
files["model_tag_comma.yaml"] = b"# a comment\n!!str,7 classes\n"
files["device_tag_comma.yaml"] = b"!t,"
# ...and after a quoted scalar or a flow collection, where yaml-cpp's scanner starts a new token (fuzz_model_config,
# fuzz_device_profile timeouts).
files["model_quote_comma.yaml"] = b"# a comment\n'e:' , x\n"
files["device_flow_comma.yaml"] = b"[a] ,x"
files["device_quote_comma.yaml"] = b'"a" "b",x'
files["device_docend_comma.yaml"] = b"name: x\n... ,x\n"
# fuzz_model_config: a lone CR (no LF) stayed inside the scalar: weights.path "x.safetensors\r".
files["model_lone_cr.yaml"] = b"name: x\narchitecture:\n  img_size: 8\n  patch_size: 2\n  embed_dim: 8\n  depth: 1\n  num_heads: 1\n  num_classes: 2\nweights:\n  path: x.safetensors\r"
# fuzz_device_profile: a tagged key, then an explicit key: yaml-cpp 0.7 LoadAll loops (minimised reproducer).
files["device_explicit_key.yaml"] = b" !: mNUL\n ? mAE"
# (that file is now refused earlier, as a top-level plain scalar; the explicit-key rule itself, in a mapping:)
files["model_explicit_key.yaml"] = b"name: x\n? b\n"
# fuzz_device_profile: '[' closed by '}' loops yaml-cpp 0.7 (minimised reproducer).
files["device_mismatched_bracket.yaml"] = b" A Xib: s *\n  [da\n,p\n}   \n"
# fuzz_device_profile: no cuda_context_mib, so its 384 MiB default, with a 4 MiB budget.
files["device_context_over_budget.yaml"] = b"".join(
    line for line in open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../config/devices/orin-nx-16gb.yaml"), "rb")
    if b"cuda_context_mib" not in line).replace(b"budget_mib: 12288", b"budget_mib: 4").replace(b"name: orin-nx-16gb", b"name: device_context_over_budget")
# fuzz_device_profile: a flow sequence never closed, with block-scalar indicators inside, loops yaml-cpp 0.7.
files["device_unclosed_flow.yaml"] = b'#l\n | \n s$wd:# Jetson AGX O rin 32Gmodel: re G CPN and GPU share !RAM\n >>>>> rint8_ |r^eEe: dense16GB (SM8b: [[>>>smem_per_im_kib: >              #  share DRAM\n >l2_kib: >>> \n,     #\n\n\n\n\n\n\n\n\n>:\n>\n\n\n\n\n\n\n\netso\n\n\n\n\n\n\n\n>-\r\r\r\r\r\r\r\r\r\r\r\r\r\n>-\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\r\n\n\n\n\n\n:\n:bt>G:btGB::tGlbk3i_>\n\n\n\n>-\r\r\r\r\r\r\r\r\r\r\r\r\r\n>-\r\r\r\r\r\r\r\r kib: ueo D\n\n\n\n\n\n\n>\n\n>-\r\r\r\r\r\r\r\r\r\r\r\r\r\n>-\r\r\r\r\r\r\r\r\r\r\r\r\r\r\n\nU share zRAM\n >l2_kib: >>>>>>>>>>>>>>>>>>>\n>'.replace(b"\r", b" ")  # (its CRs, now refused first, replaced: it still loops yaml-cpp)
files["model_block_comment_comma.yaml"] = b">\n# a comment ends the block scalar\n  ,x\n"
# yaml-cpp 0.7 takes a '#' with no space before it for a comment after a block scalar header or a flow
# indicator; the guard read the rest of the line, so `[` there hid a later top-level ',' (fuzz_model_config
# timeout, 179 bytes, minimised; fuzz_device_profile loops on both too).
files["model_block_header_comment.yaml"] = b">#: [\n,]\n"
files["device_flow_glued_comment.yaml"] = b"[x]#: [\n,]\n"
# fuzz_model_config: a tag ends at the first character outside yaml-cpp's tag set, here a quote; the guard took
# the quote for part of the tag and the rest for a quoted scalar holding the ',' (minimised reproducer).
files["model_tag_quote_comma.yaml"] = b'!" ","\n'
# fuzz_device_profile: a block scalar's text lines need the indentation of its first text line (raised by
# longer blank lines before it); a line indented less ends it, even when deeper than the header (minimised).
files["device_block_scalar_dedent.yaml"] = b"|\n  \n ,\n"
# fuzz_device_profile: a top-level plain scalar runs on over the next lines for yaml-cpp ("V - |"); the guard
# read a block scalar there and skipped the ',' (minimised reproducer).
files["device_root_plain_scalar.yaml"] = b"V\n- | #\n ,\n"
files["device_plain_after_root.yaml"] = b" :\n7\n| #\n ,\n"  # the same once the root mapping has ended
# fuzz_device_profile, 16-core host, 2026-11-22 18:13 and 18:17 (timeouts, on the guard of finding 16): block
# scalar headers followed by a tag indicator (|!) and a later top-level ','; the guard passed both, and
# yaml-cpp 0.7's LoadAll looped. Refused now by the bounded document count (finding 17), not by a guard rule.
files["device_block_header_tag_comma.yaml"] = b'#6      |!\n| \n|\n           # compu*!s09 + gpu:\n  s  V              |!\n| \n|            #mo pc9 + minor!\n ,'
files["device_block_header_tag_comma_long.yaml"] = b"# Jetson AGX Orin 32GB:ompu\n | \n     |  GgpGgpu:\n  sm:mA1}}in}}in }}V   &| }}V   & 8u\n|            # compu\n | \n   or)\n\n , u 10.2  |     cuda_context_mib:    # compu     # compunor! minor)\n\n , ,ompu     # compu.10 + minor*10 + of the moompu\n | \n     |  GgpGgpu:\n  sm: 8u\n|            # compu\n | \n   or)\n\n , u 10.2  |     cuda_context_mib:    # compu     # compunor! minor)\n\n , ,ompu     # compu.10 + minor*10 + of the module's top power mode\n  max_threads_per_sm: 1536\n  max_blocks_p: 164          blminor! mdule's top power mode\n  max_threads_per_sm: 1536\n  max_blocks_p: 164          blminor! minor)\n\n , u 10.2$  |     cuda_context_mib:    # compu     # compu.10 + minor*10 + minor! minor)\n\n ,ock with cudaFuncAttributeMaxDynamicSharedMemorySize\n  registers_per_sm: 65536         # 32-bit r ,egisters\n  l2_kib: 4,096\n  fp16_dense_tflops: 26.92         # 2 dense fp16 FLOP/clock/SM (fp32 accumulate) x "
# yaml-cpp 0.7 decodes the double-quoted escapes \_ and \N to a lone byte (0xA0, 0x85): invalid UTF-8 in a
# parsed string (found by fuzz_model_config; refused by the guard).
files["model_nbsp_escape.yaml"] = b'name: "a\\_b"\n'
files["device_nel_escape.yaml"] = b'name: "a\\Nb"\nkind: cpu\n'
files["model_not_a_mapping.yaml"] = b"- just\n- a list\n"

# ---- device profiles (load_device_profile) --------------------------------------------------------------
files["device_budget_over_total.yaml"] = (
    b"name: device_budget_over_total\nkind: cpu\nmemory:\n  total_mib: 1024\n  budget_mib: 4096\n"
    b"  bandwidth_gbps: 10\ncpu:\n  cores: 4\n")
files["device_alias.yaml"] = b"name: device_alias\nkind: &k cpu\n"
files["device_gpu_on_cpu.yaml"] = (
    b"name: device_gpu_on_cpu\nkind: cpu\ngpu:\n  sm: 87\nmemory:\n  total_mib: 1024\n  bandwidth_gbps: 10\n"
    b"cpu:\n  cores: 4\n")
files["device_name_mismatch.yaml"] = b"name: someone-else\nkind: cpu\n"

# ---- images (load_image_file for vit-digits, 1x8x8; the rgb224 rows use a 3x224x224 model) ----------------
files["img_empty.png"] = b""
files["img_garbage.png"] = bytes((i * 73 + 11) & 0xFF for i in range(256))
files["img_huge_dims.png"] = png(20000, 20, 0)
files["img_too_many_pixels.png"] = png(16384, 16384, 0)
files["img_truncated.png"] = png(8, 8, 0, raw=b"".join(b"\x00" + bytes(range(8)) for _ in range(8)), truncate=60)
files["img_bad_zlib.png"] = png(8, 8, 0, raw=b"")[:33] + b"\x00\x00\x00\x04IDATjunk\x00\x00\x00\x00" + png(1, 1, 0)[-12:]
files["img_huge_dims.ppm"] = b"P6\n16385 16385\n255\n" + b"\x00" * 64
# 16-bit PGM fed to a 3-channel model: stb 2.27 overflows its buffer converting it (refused before decoding).
files["img_pnm16_channels.pgm"] = b"P5\n4 4\n65535\n" + b"\x12\x34" * 16
files["img_wide_strip.png"] = png(16384, 1, 0, raw=b"\x00" + b"\x80" * 16384)
# zlib bomb: an 8x8 grey PNG (72 bytes of scanlines) whose IDAT inflates to 128 MiB (a ~128 KB file).
# stb_image grows its output buffer past what IHDR allows; the per-decode budget (what the header says the
# decode needs, ~1.3 MB here) stops it.
files["img_zlib_bomb.png"] = png(8, 8, 0, raw=b"\x00" * (128 << 20))
# Issue #22 item 2, header only: a 16-bit RGBA 8192x8191 PNG needs 1074667519 bytes to decode (stb_image
# holds the inflated scanlines and the 16-bit image at once); refused from IHDR, before its (here
# truncated) data is read. tests/runtime/image_fixtures.h writes the whole 3.4 MB file at test time.
files["img_decode_budget_rgba16.png"] = png(8192, 8191, 6, raw=b"\x00" * 4096, depth=16)

# ---- input files (load_input_file for vit-digits) -------------------------------------------------------
files["input_wrong_shape.safetensors"] = st({"input": {"dtype": "F32", "shape": [1, 3, 8, 8], "data_offsets": [0, 768]}}, f32(192))
files["input_no_tensor.safetensors"] = st({"pixels": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1))
files["input_corrupt_header.safetensors"] = st(b'{"input": [', b"", length=40) + b" " * 40
# issue #22 item 9: the tensor at offset 2^63 is the one named, and the code is input_error (exit 5)
files["input_offsets_2p63.safetensors"] = st(
    {"input": {"dtype": "F32", "shape": [1, 1, 8, 8], "data_offsets": [0, 256]},
     "z": {"dtype": "F32", "shape": [1], "data_offsets": [1 << 63, (1 << 63) + 4]}}, f32(64))
# the tensor with the absurd offset is named, not the one after the hole it leaves ('b' was named before)
files["st_offsets_2p63_names_culprit.safetensors"] = st(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [1 << 63, (1 << 63) + 4]},
     "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(2))
files["input_offsets_past_end.safetensors"] = st(
    {"input": {"dtype": "F32", "shape": [1, 1, 8, 8], "data_offsets": [0, 256]}}, f32(4))

# ---- labels files (load_labels for vit-digits, num_classes 10) --------------------------------------------
# issue #22 item 6: a labels file for another model (9 lines) named the wrong classes without a word
files["labels_wrong_count.txt"] = b"".join(b"%d\n" % i for i in range(9))

for name, data in files.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
print("wrote %d files to %s" % (len(files), HERE))
