"""TFRecord framing, without TensorFlow: what turns payloads into a ``.tfrecords`` file and back.

* :func:`frame_records` wraps payloads in TFRecord frames (length, masked CRC32C of the
  length, data, masked CRC32C of the data), byte-identical to ``tf.io.TFRecordWriter``. Used by
  the TFRecord container (:mod:`bert_data.format.containers`) on the writer's hot path, in worker processes that must never
  import TensorFlow.
* :func:`iter_records` streams payloads back out of a plain or GZIP TFRecord file, verifying
  both CRCs (``inspect_tfrecords``' record printer, tests).
* :func:`tfrecord_compression` tells a GZIP file from a plain one by its first 12 bytes; every
  reader (``iter_records``, ``inspect_tfrecords``, the tf.data reader) uses it, so they agree on
  what a file is.
* :func:`crc32c` / :func:`masked_crc32c`: CRC32C (``google_crc32c``, else a pure-Python table).

The lowest of the three record modules: it imports neither of the others (only
:mod:`bert_data.format.native`, the optional C accelerator's binding). The payloads it frames
are ``tf.train.Example`` bytes (:mod:`bert_data.format.example_wire`); the batch reader of
``inspect_tfrecords --stats`` (:mod:`bert_data.format.batch_decode`) cuts frames with the
public helpers below (:func:`read_exact`, :func:`looks_like_frame_header`, :data:`U64`,
:data:`MASK_DELTA`).
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Union

from bert_data.errors import RecordFormatError

from .native import wire

__all__ = [
    "frame_records",
    "iter_records",
    "tfrecord_compression",
    "crc32c",
    "masked_crc32c",
    "CRC32C_IMPLEMENTATION",
]

# --------------------------------------------------------------------------------------
# CRC32C
# --------------------------------------------------------------------------------------


def _make_crc32c_table() -> List[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


def _crc32c_pure(data: bytes) -> int:
    """Pure-Python CRC32C (Castagnoli), table driven. Slow; used only without google_crc32c."""
    table = _CRC_TABLE
    crc = 0xFFFFFFFF
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_CRC_TABLE = _make_crc32c_table()

try:  # the C extension; google_crc32c itself may silently fall back to its own pure-Python code
    import google_crc32c as _gcrc

    crc32c = _gcrc.value
    CRC32C_IMPLEMENTATION = "google_crc32c:" + str(getattr(_gcrc, "implementation", "?"))
except ImportError:  # pragma: no cover - exercised by a test that monkeypatches the import
    crc32c = _crc32c_pure
    CRC32C_IMPLEMENTATION = "pure-python"

MASK_DELTA = 0xA282EAD8  # added to the rotated CRC (public: batch_decode masks CRCs in bulk)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: rotate right by 15 bits, then add a constant (mod 2**32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------
# TFRecord framing
# --------------------------------------------------------------------------------------

U64 = struct.Struct("<Q")  # a frame's length (public: batch_decode walks frames with it)
_U32 = struct.Struct("<I")
_HEADER_CACHE: Dict[int, bytes] = {}
_HEADER_CACHE_MAX = 1 << 16


def _frame_header(length: int) -> bytes:
    hdr = _HEADER_CACHE.get(length)
    if hdr is None:
        lb = U64.pack(length)
        hdr = lb + _U32.pack(masked_crc32c(lb))
        if len(_HEADER_CACHE) < _HEADER_CACHE_MAX:
            _HEADER_CACHE[length] = hdr
    return hdr


def frame_records(payloads: Iterable[bytes]) -> bytes:
    """TFRecord frames of ``payloads``, concatenated (what ``tf.io.TFRecordWriter`` writes).

    Each frame: uint64 LE length, uint32 LE masked CRC32C of those 8 bytes, the data,
    uint32 LE masked CRC32C of the data. One C loop with the accelerator
    (:func:`bert_data.format.native.wire`), else the loop below: the same bytes.
    """
    native = wire()
    if native is not None:
        return native.frame_records(payloads if isinstance(payloads, (list, tuple)) else list(payloads))
    parts: List[bytes] = []
    append = parts.append
    cache_get = _HEADER_CACHE.get
    pack32 = _U32.pack
    crc = crc32c
    for data in payloads:
        hdr = cache_get(len(data))
        if hdr is None:
            hdr = _frame_header(len(data))
        c = crc(data)
        append(hdr)
        append(data)
        append(pack32((((c >> 15) | (c << 17)) + MASK_DELTA) & 0xFFFFFFFF))
    return b"".join(parts)


# --------------------------------------------------------------------------------------
# TFRecord reading
# --------------------------------------------------------------------------------------


class _Prefixed(io.RawIOBase):
    """A read-only stream: ``prefix`` bytes, then the rest of ``fileobj`` (for non-seekable inputs)."""

    def __init__(self, prefix: bytes, fileobj: BinaryIO):
        super().__init__()
        self._prefix = prefix
        self._f = fileobj

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        if self._prefix:
            k = min(len(view), len(self._prefix))
            view[:k] = self._prefix[:k]
            self._prefix = self._prefix[k:]
            return k
        data = self._f.read(len(view))
        if not data:
            return 0
        view[: len(data)] = data
        return len(data)


_READ_CHUNK = 1 << 24


class _StrictGzip(io.RawIOBase):
    """A GZIP file's decompressed bytes, member after member, as TensorFlow's GZIP reader takes
    them: bytes after the last member that do not start another one (zero padding, garbage) are
    an error. ``gzip.GzipFile`` skips zero padding silently, so a shard that ``tf.data`` stops
    reading in the middle (``DataLossError``) read as whole here. Never closes ``raw``."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self._member = zlib.decompressobj(31)
        self._input = b""  # compressed bytes not yet given to the decompressor
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._done:
            if not self._input:
                self._input = self.raw.read(1 << 16)
                if not self._input:
                    if self._member.eof:
                        self._done = True
                        break
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            if self._member.eof:  # between members: the next must start here
                if len(self._input) < 2:
                    more = self.raw.read(1 << 16)
                    if more:
                        self._input += more
                        continue
                if self._input[:2] != GZIP_MAGIC:
                    raise OSError(f"{len(self._input)}+ bytes after the last gzip member that start no other "
                                  f"(TensorFlow's reader stops there with a DataLossError)")
                self._member = zlib.decompressobj(31)
            data = self._member.decompress(self._input, len(buffer))
            self._input = self._member.unconsumed_tail or self._member.unused_data
            if data:
                buffer[: len(data)] = data
                return len(data)
        return 0


def open_gzip(raw: BinaryIO) -> BinaryIO:
    """A GZIP TFRecord file's decompressed stream, read as TensorFlow reads it (:class:`_StrictGzip`)."""
    return io.BufferedReader(_StrictGzip(raw), buffer_size=1 << 16)


def read_exact(f: BinaryIO, size: int) -> bytes:
    """Read ``size`` bytes (fewer only at end of stream), looping over short reads and in bounded chunks."""
    first = f.read(min(size, _READ_CHUNK))
    if first is None:
        first = b""
    if len(first) == size or not first:
        return first
    chunks = [first]
    got = len(first)
    while got < size:
        chunk = f.read(min(size - got, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def iter_records(path_or_fileobj: Union[str, "os.PathLike[str]", BinaryIO], verify: bool = True) -> Iterator[bytes]:
    """Yield the payloads of a TFRecord file, plain or GZIP-compressed (:func:`tfrecord_compression`).

    Streams frame by frame. With ``verify`` both CRCs of every frame are checked. A truncated
    frame, a bad CRC or a corrupt gzip stream raises :class:`RecordFormatError` naming the file
    and the byte offset of the frame (an offset in the *uncompressed* stream for gzip files).
    """
    if isinstance(path_or_fileobj, (str, bytes, os.PathLike)):
        name = os.fsdecode(path_or_fileobj)
        try:
            f: BinaryIO = open(path_or_fileobj, "rb")
        except OSError as e:
            raise RecordFormatError(f"{name}: cannot open TFRecord file: {e.strerror or e}") from e
        owned = True
    else:
        f = path_or_fileobj
        name = str(getattr(f, "name", "<stream>"))
        owned = False
    try:
        yield from _iter_stream(f, name, verify)
    finally:
        if owned:
            f.close()


def looks_like_frame_header(head: bytes) -> bool:
    """Whether ``head`` is 12 bytes of a valid frame header: a length and its masked CRC32C."""
    return len(head) == 12 and masked_crc32c(head[:8]) == _U32.unpack_from(head, 8)[0]


GZIP_MAGIC = b"\x1f\x8b"


def tfrecord_compression(head: bytes) -> str:
    """``"gzip"`` or ``"none"``: the compression of a TFRecord file that starts with ``head``
    (its first 12 bytes, fewer only for a shorter file).

    GZIP files start with the magic bytes 1f 8b. So can a plain file, when its first record's
    length (uint64 LE) starts with those two bytes; such a file is recognised as plain because
    its first 12 bytes are a valid frame header (length + masked CRC32C of the length). Checking
    only the magic would try to gunzip it.
    """
    if head[:2] != GZIP_MAGIC or looks_like_frame_header(head[:12]):
        return "none"
    return "gzip"


def _iter_stream(f: BinaryIO, name: str, verify: bool) -> Iterator[bytes]:
    seekable = False
    try:
        seekable = f.seekable()
    except (AttributeError, OSError, ValueError):
        pass
    if seekable:
        start = f.tell()
        head = read_exact(f, 12)
        f.seek(start)
        stream: BinaryIO = f
    else:
        head = read_exact(f, 12)
        stream = io.BufferedReader(_Prefixed(head, f))  # type: ignore[arg-type]
    compressed = tfrecord_compression(head) == "gzip"
    where = "uncompressed byte offset" if compressed else "byte offset"

    if compressed:
        reader: BinaryIO = open_gzip(stream)

        def read(size: int, offset: int) -> bytes:
            try:
                return read_exact(reader, size)
            except (EOFError, OSError, zlib.error) as e:
                raise RecordFormatError(f"{name}: corrupt gzip stream near {where} {offset}: {e}") from e

    else:
        reader = stream

        def read(size: int, offset: int) -> bytes:
            return read_exact(reader, size)

    offset = 0
    try:
        while True:
            header = read(12, offset)
            if not header:
                return
            if len(header) < 12:
                raise RecordFormatError(
                    f"{name}: truncated record header at {where} {offset} ({len(header)} of 12 bytes)"
                )
            (length,) = U64.unpack_from(header, 0)
            if verify and not looks_like_frame_header(header):
                raise RecordFormatError(f"{name}: bad length CRC in record header at {where} {offset}")
            body = read(length + 4, offset)
            if len(body) < length + 4:
                raise RecordFormatError(
                    f"{name}: truncated record at {where} {offset} "
                    f"(frame needs {16 + length} bytes, {12 + len(body)} present)"
                )
            data = body[:length]
            if verify:
                (want,) = _U32.unpack_from(body, length)
                if masked_crc32c(data) != want:
                    raise RecordFormatError(f"{name}: bad data CRC in record at {where} {offset}")
            yield data
            offset += 16 + length
    finally:
        if compressed:
            reader.close()

