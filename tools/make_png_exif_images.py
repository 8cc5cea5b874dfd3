#!/usr/bin/env python3
"""Writes PNG copies of tests/data/preprocess/images/grey_exif{1..8}_48x32.jpg with the same orientation in a
PNG eXIf chunk, the ground truth for edgevit's PNG EXIF handling (tests/runtime/preprocess_test.cpp,
PngExifAsPil): grey_exif{o}_48x32.png has the chunk before the image data (where Pillow writes it), and
grey_exif{o}_tail_48x32.png after it (where some writers put it; Pillow reads it once the image is loaded).
The pixels are the JPEG's decoded pixels (flat 8x8 blocks at quality 100: every decoder agrees), so each PNG
must preprocess to the JPEG's golden tensor. The script checks with Pillow that ImageOps.exif_transpose gives
the same upright image for the PNG as for the JPEG.
Usage: /tmp/pil12env/bin/python tools/make_png_exif_images.py [IMAGES_DIR]  (Pillow 12.x, numpy)
"""
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps

DIR = sys.argv[1] if len(sys.argv) > 1 else "tests/data/preprocess/images"


def chunks(data):
    off = 8
    while off < len(data):
        n = struct.unpack(">I", data[off:off + 4])[0]
        yield data[off + 4:off + 8], data[off:off + 12 + n]
        off += 12 + n


def move_exif_after_idat(data):
    parts = list(chunks(data))
    exif = [c for t, c in parts if t == b"eXIf"]
    rest = [(t, c) for t, c in parts if t != b"eXIf"]
    out, done = [data[:8]], False
    for i, (t, c) in enumerate(rest):
        if t == b"IEND" and not done:
            out.extend(exif)
            done = True
        out.append(c)
    return b"".join(out)


for o in range(1, 9):
    jpg = os.path.join(DIR, f"grey_exif{o}_48x32.jpg")
    with Image.open(jpg) as im:
        pixels = np.asarray(im.convert("L"))
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    exif = Image.Exif()
    exif[0x0112] = o
    head = os.path.join(DIR, f"grey_exif{o}_48x32.png")
    Image.fromarray(pixels, "L").save(head, exif=exif.tobytes())
    tail = os.path.join(DIR, f"grey_exif{o}_tail_48x32.png")
    with open(head, "rb") as f:
        data = f.read()
    assert b"eXIf" in data, "Pillow wrote no eXIf chunk"
    with open(tail, "wb") as f:
        f.write(move_exif_after_idat(data))
    for path in (head, tail):
        with Image.open(path) as im:
            got = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        assert got.shape == want.shape and (got == want).all(), f"{path}: Pillow's upright image differs from the JPEG's"
    print(o, "ok")
