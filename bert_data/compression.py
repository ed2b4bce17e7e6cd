"""Compressed inputs: gzip, bzip2, xz (and zstd when the ``zstandard`` module is importable)
recognised by their magic bytes (or a compression extension) and decompressed as a stream.

Byte streams only: what a file is, how its bytes are counted and which errors are I/O rather
than damaged data is the reader's (:mod:`bert_data.documents`), which catches
:data:`DECOMPRESSION_ERRORS` and counts the file as ``corrupt_compressed``.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from typing import Iterator, List, Optional, Tuple

try:  # optional: zstd input is read only when the zstandard module happens to be installed
    import zstandard as _zstandard
except ImportError:  # pragma: no cover - depends on the environment
    _zstandard = None

COMPRESSION_EXTENSIONS = {".gz": "gz", ".bz2": "bz2", ".xz": "xz", ".zst": "zst"}
MAGIC_BYTES = 16  # enough of a file's start to recognise every format
_BZ2_BLOCK_MAGICS = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")  # first block / empty stream
_DECOMPRESS_CHUNK = 1 << 20


def sniff_compression(head: bytes, path: str = "") -> Optional[str]:
    """``"gz"``, ``"bz2"``, ``"xz"``, ``"zst"`` or None (plain) for a file starting with ``head``.

    Magic bytes decide; a non-empty file whose name ends in a compression extension but whose
    bytes carry no known magic is reported by its extension (and then fails as corrupt).
    """
    if head.startswith(b"\x1f\x8b"):
        return "gz"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zst"
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and len(head) >= 10 and head[4:10] in _BZ2_BLOCK_MAGICS:
        return "bz2"
    if head:
        return COMPRESSION_EXTENSIONS.get(os.path.splitext(path)[1].lower())
    return None


def zstd_available() -> bool:
    """Whether zstd input can be read (the optional ``zstandard`` module is importable)."""
    return _zstandard is not None


DECOMPRESSION_ERRORS: Tuple[type, ...] = (EOFError, OSError, ValueError, zlib.error, lzma.LZMAError)
if _zstandard is not None:  # pragma: no cover - depends on the environment
    DECOMPRESSION_ERRORS += (_zstandard.ZstdError,)


def open_decompressor(raw, compression: str):
    """A reader of the decompressed bytes of ``raw`` (a binary file), gzip, bzip2 or xz."""
    if compression == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[arg-type]
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[arg-type]
    return lzma.LZMAFile(raw, mode="rb")  # type: ignore[arg-type]


def zstd_chunks(raw) -> Iterator[bytes]:  # pragma: no cover - depends on the environment
    """zstd frames one after another; a frame cut short is an error (zstandard's stream reader
    would silently return what it had)."""
    dctx = _zstandard.ZstdDecompressor()
    obj = dctx.decompressobj()
    in_frame = False
    while True:
        data = raw.read(_DECOMPRESS_CHUNK)
        if not data:
            break
        while data:
            in_frame = True
            yield obj.decompress(data)
            if obj.eof:
                data, obj, in_frame = obj.unused_data, dctx.decompressobj(), False
            else:
                data = b""
    if in_frame:
        raise EOFError("zstd data ended inside a frame")


def decompress_stream(raw, compression: str) -> bytes:
    """All decompressed bytes of ``raw`` (a binary file), read chunk by chunk; multi-member /
    multi-frame streams are read to the end. Raises one of the decompression errors on bad data."""
    if compression == "zst":
        return b"".join(zstd_chunks(raw))
    chunks: List[bytes] = []
    with open_decompressor(raw, compression) as stream:
        while True:
            chunk = stream.read(_DECOMPRESS_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)
