"""
Compressed payloads that inflate far beyond any sane batch ("bombs"), one
per codec, built at run time from zeros (small to keep, slow-ish to make:
cached per process).
"""

from __future__ import annotations

import zlib
from functools import cache

import cramjam
import lz4.frame
import zstandard

from kafkatwist.protocol.compression import _XERIAL_HEADER, _INT32

_CHUNK = b"\x00" * (1 << 20)


@cache
def bomb(codec: str, mebibytes: int = 256) -> bytes:
    """
    @return: C{codec}'s compression of C{mebibytes} MiB of zeros.
    """
    if codec == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(c.compress(_CHUNK) for _ in range(mebibytes)) + c.flush()
    if codec == "zstd":
        c = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
        return b"".join(c.compress(_CHUNK) for _ in range(mebibytes)) + c.flush()
    if codec == "lz4":
        c = lz4.frame.LZ4FrameCompressor(block_linked=False)
        parts = [c.begin()]
        parts += [c.compress(_CHUNK) for _ in range(mebibytes)]
        parts.append(c.flush())
        return b"".join(parts)
    if codec == "snappy":
        # xerial frames of 1 MiB raw blocks (snappy's ratio is capped near
        # 21:1, so the bomb is in the block count)
        block = bytes(cramjam.snappy.compress_raw(_CHUNK))
        return _XERIAL_HEADER + (_INT32.pack(len(block)) + block) * mebibytes
    raise ValueError(codec)
