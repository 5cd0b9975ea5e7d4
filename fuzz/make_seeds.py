#!/usr/bin/python3
"""Writes the hand-made seeds of fuzz/corpus/{jpeg,png,wav}/: tiny files covering the
variants the decoders handle (JPEG subsamplings, progressive, gray, CMYK; PNG colour types,
bit depths, palette, tRNS, Adam7; WAV PCM 8/16/24/32, float, WAVE_FORMAT_EXTENSIBLE, extra
chunks). Run from the repository root: /usr/bin/python3 fuzz/make_seeds.py"""
import io
import os
import random
import struct
import zlib

from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
random.seed(1)


def write(name, data):
    os.makedirs(os.path.dirname(os.path.join(OUT, name)), exist_ok=True)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def img(mode, w, h):
    im = Image.new(mode, (w, h))
    if mode == "P":
        im.putpalette([random.randrange(256) for _ in range(768)])
    px = im.load()
    for y in range(h):
        for x in range(w):
            if mode == "RGB":
                px[x, y] = (x * 16 % 256, y * 16 % 256, (x * y) % 256)
            elif mode == "RGBA":
                px[x, y] = (x * 16 % 256, y * 16 % 256, 7, (x + y) * 8 % 256)
            elif mode == "LA":
                px[x, y] = (x * 16 % 256, y * 8 % 256)
            else:
                px[x, y] = (x * 16 + y) % 256
    return im


def encoded(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


write("jpeg/rgb_16x12_420.jpg", encoded(img("RGB", 16, 12), "JPEG", quality=75, subsampling=2))
write("jpeg/rgb_17x9_444.jpg", encoded(img("RGB", 17, 9), "JPEG", quality=90, subsampling=0))
write("jpeg/rgb_24x16_422.jpg", encoded(img("RGB", 24, 16), "JPEG", quality=50, subsampling=1))
write("jpeg/gray_8x8.jpg", encoded(img("L", 8, 8), "JPEG", quality=80))
write("jpeg/progressive_32x24.jpg",
      encoded(img("RGB", 32, 24), "JPEG", quality=70, progressive=True))
write("jpeg/optimized_40x8.jpg", encoded(img("RGB", 40, 8), "JPEG", quality=60, optimize=True))
write("jpeg/cmyk_8x8.jpg", encoded(img("RGB", 8, 8).convert("CMYK"), "JPEG", quality=80))

write("png/rgb_8x6.png", encoded(img("RGB", 8, 6), "PNG"))
write("png/gray_7x5.png", encoded(img("L", 7, 5), "PNG"))
write("png/palette_9x4.png", encoded(img("P", 9, 4), "PNG"))
write("png/rgba_6x6.png", encoded(img("RGBA", 6, 6), "PNG"))
write("png/gray_alpha_5x3.png", encoded(img("LA", 5, 3), "PNG"))
write("png/bilevel_9x9.png", encoded(img("L", 9, 9).convert("1"), "PNG"))


def chunk(kind, data):
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png(w, h, depth, ctype, raw, interlace=0, extra=b""):
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def rows(rs):
    return b"".join(b"\x00" + r for r in rs)


write("png/rgb16_3x2.png", png(3, 2, 16, 2, rows([bytes(range(i, i + 18)) for i in range(2)])))
write("png/gray16_4x2.png", png(4, 2, 16, 0, rows([bytes(range(i, i + 8)) for i in range(2)])))
write("png/gray_trns_4x2.png",
      png(4, 2, 8, 0, rows([bytes([1, 2, 3, 4])] * 2), extra=chunk(b"tRNS", b"\x00\x02")))


def adam7(w, h, pix):
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    out = b""
    for x0, y0, dx, dy in passes:
        for y in range(y0, h, dy):
            row = bytes(pix(x, y) for x in range(x0, w, dx))
            if row:
                out += b"\x00" + row
    return out


write("png/interlaced_gray_8x8.png",
      png(8, 8, 8, 0, adam7(8, 8, lambda x, y: (x * 30 + y) % 256), interlace=1))


def riff(fmt, data, extra=b""):
    pad = b"\x00" if len(data) % 2 else b""
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra + b"data" +
            struct.pack("<I", len(data)) + data + pad)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def fmt(tag, ch, rate, bits):
    block = ch * bits // 8
    return struct.pack("<HHIIHH", tag, ch, rate, rate * block, block, bits)


def extensible(ch, rate, bits, sub):
    guid = struct.pack("<H", sub) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    return fmt(0xFFFE, ch, rate, bits) + struct.pack("<HHI", 22, bits, 3 if ch == 2 else 4) + guid


pcm16 = b"".join(struct.pack("<h", 3000 * ((i % 16) - 8)) for i in range(32))
floats = b"".join(struct.pack("<f", (i - 8) / 8) for i in range(16))
write("wav/pcm16_mono.wav", riff(fmt(1, 1, 16000, 16), pcm16))
write("wav/pcm16_stereo.wav", riff(fmt(1, 2, 22050, 16), pcm16))
write("wav/pcm8_mono.wav", riff(fmt(1, 1, 8000, 8), bytes(range(0, 256, 9))))
write("wav/pcm24_stereo.wav", riff(fmt(1, 2, 48000, 24), bytes(range(36))))
write("wav/pcm32_mono.wav", riff(fmt(1, 1, 44100, 32), bytes(range(40))))
write("wav/float32_stereo.wav", riff(fmt(3, 2, 16000, 32), floats))
write("wav/extensible_pcm16.wav", riff(extensible(2, 16000, 16, 1), pcm16))
write("wav/extensible_float.wav", riff(extensible(1, 16000, 32, 3), floats[:40]))
write("wav/list_chunk.wav", riff(fmt(1, 1, 16000, 16), pcm16[:20],
                                 extra=b"LIST" + struct.pack("<I", 5) + b"INFOx\x00"))
write("wav/odd_data.wav", riff(fmt(1, 1, 8000, 8), b"\x80\x81\x82"))
