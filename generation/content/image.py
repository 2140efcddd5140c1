"""The image an ``--omni`` chat response carries (api.md 5.1.9): a 1x1 RGBA PNG, built once
at import with the standard library (zlib, struct) - the same bytes as the reference's fixed
image (one semi-transparent green pixel, its scanline Sub-filtered, zlib level 9)."""
from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_1x1(rgba: tuple[int, int, int, int] = (0, 255, 0, 127)) -> bytes:
    """A valid 1x1 8-bit RGBA PNG of one pixel ``rgba``."""
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)     # width, height, depth 8, RGBA, deflate, no interlace
    scanline = b"\x01" + bytes(rgba)                        # filter 1 (Sub): the first pixel is itself
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(scanline, 9)) + \
        _chunk(b"IEND", b"")


PNG = png_1x1()
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode("ascii")
IMAGE_PART = {"type": "image_url", "image_url": {"url": DATA_URL}}
