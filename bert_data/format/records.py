"""TFRecord files and ``tf.train.Example`` wire bytes, without TensorFlow or protobuf.

One concern, kept whole on purpose (it is over 600 lines): the wire format, both directions, so
the encoder and the decoder that checks it sit side by side.

Writer side (hot path, used by worker processes that must never import TensorFlow):

* :func:`serialize_examples` encodes a whole batch of fixed-length features into
  ``tf.train.Example`` protobuf messages with vectorised numpy code. The bytes equal
  ``tf.train.Example(...).SerializeToString(deterministic=True)`` provided the caller passes
  the features in sorted key order (deterministic protobuf serialization sorts map keys).
* :func:`frame_records` wraps payloads in TFRecord frames (length, masked CRC32C of the
  length, data, masked CRC32C of the data), byte-identical to ``tf.io.TFRecordWriter``.

Reader side (tools and tests):

* :func:`iter_records` streams payloads back out of a plain or GZIP TFRecord file,
  verifying both CRCs.
* :func:`parse_example` decodes ``tf.train.Example`` bytes to ``name -> numpy array``.

Shared by every reader (``iter_records``, ``inspect_tfrecords``, the tf.data reader), so they
agree on what a file is:

* :func:`tfrecord_compression` tells a GZIP file from a plain one by its first 12 bytes;
* :func:`natural_key` orders shard files (``examples-2`` before ``examples-10``).

Wire layout produced for one record (all lengths are varints)::

    Example   := 0x0a len Features
    Features  := (0x0a len Entry)*                  # map<string, Feature>, one per feature
    Entry     := 0x0a len key 0x12 len Feature
    Feature   := 0x1a len Int64List | 0x12 len FloatList
    Int64List := [0x0a len packed-varints]          # omitted when the list is empty
    FloatList := [0x0a len packed-float32-LE]

How the batch encoder works: every record is the same sequence of *tokens* (constant
bytes, raw float bytes, varints), only the varints' byte lengths differ between records.
Each token gets fixed *slots* in a ``uint8`` matrix ``G[n_records, n_slots]``: one per byte
for constant and raw tokens, ``w`` for a varint column whose largest value needs ``w``
bytes. A boolean matrix of the same shape marks the slots that hold real bytes (built only
when some varint is shorter than its column's width); boolean indexing of the flattened
pair yields all records back to back, which are then sliced at the cumulative record
lengths. Everything is whole-batch numpy; the only per-record Python is the final slicing.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import struct
import zlib
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from bert_data.errors import RecordFormatError

__all__ = [
    "serialize_examples",
    "frame_records",
    "iter_records",
    "parse_example",
    "tfrecord_compression",
    "natural_key",
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

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: rotate right by 15 bits, then add a constant (mod 2**32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------
# Varint helpers
# --------------------------------------------------------------------------------------


def _varint_bytes(value: int) -> bytes:
    """Protobuf varint of a non-negative int (negative int64 -> 10-byte two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_len_scalar(value: int) -> int:
    return len(_varint_bytes(value))


def _varint_len_vec(u: np.ndarray) -> Tuple[np.ndarray, int, List[np.ndarray]]:
    """Varint byte lengths of an unsigned integer array.

    Returns ``(lens uint8 array, max length, [u >= 2**7, u >= 2**14, ...])``, the comparison
    masks being up to the maximum length present (they are the continuation bits).
    """
    if u.size == 0:
        return np.zeros(u.shape, np.uint8), 1, []
    width = _varint_len_scalar(int(u.max()))
    ge = [u >= (1 << (7 * j)) for j in range(1, width)]
    lens = np.ones(u.shape, np.uint8)
    for mask in ge:
        lens += mask
    return lens, width, ge


def _as_unsigned(values: np.ndarray, name: str) -> np.ndarray:
    """Integer array -> unsigned array (uint32 when every value fits, else the uint64 two's complement)."""
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)
    if values.dtype.kind not in "iu":
        raise TypeError(f"feature {name!r}: int64 feature needs an integer array, got dtype {values.dtype}")
    if values.size == 0:
        return values.astype(np.uint32)
    if values.dtype.kind == "u":
        if values.dtype.itemsize == 8 and int(values.max()) > 0x7FFFFFFFFFFFFFFF:
            raise ValueError(f"feature {name!r}: value {int(values.max())} does not fit in int64")
        if values.dtype.itemsize <= 4:
            return values.astype(np.uint32, copy=False)
        if int(values.max()) <= 0xFFFFFFFF:
            return values.astype(np.uint32)
        return values.astype(np.uint64, copy=False)
    lo, hi = int(values.min()), int(values.max())
    if lo >= 0 and hi <= 0xFFFFFFFF:
        return values.astype(np.uint32)
    return values.astype(np.int64, copy=False).view(np.uint64)


# --------------------------------------------------------------------------------------
# Batch serializer
# --------------------------------------------------------------------------------------

# Token kinds used while planning one record layout.
_CONST, _VARINT, _VALUES, _RAW = range(4)


def _plan_feature_tokens(
    name: str, dtype: str, array: np.ndarray, n: int
) -> Tuple[List[Tuple[Any, ...]], np.ndarray]:
    """Tokens of one map entry (``0x0a len Entry``) and its per-record byte length."""
    key = name.encode("utf-8")
    if array.ndim != 2 or array.shape[0] != n:
        raise ValueError(f"feature {name!r}: expected a 2-D array with {n} rows, got shape {array.shape}")
    k = array.shape[1]
    if dtype == "int64":
        u = _as_unsigned(np.asarray(array), name)
        lens, width, ge = _varint_len_vec(u)
        payload_len = lens.sum(axis=1, dtype=np.int64) if k else np.zeros(n, np.int64)
        body: Tuple[Any, ...] = (_VALUES, u, lens, width, ge)
        tag = b"\x1a"
    elif dtype == "float32":
        if array.dtype.kind not in "fiub":
            raise TypeError(f"feature {name!r}: float32 feature needs a numeric array, got dtype {array.dtype}")
        raw = np.ascontiguousarray(array, dtype="<f4").view(np.uint8).reshape(n, 4 * k)
        payload_len = np.full(n, 4 * k, np.int64)
        body = (_RAW, raw)
        tag = b"\x12"
    else:
        raise ValueError(f"feature {name!r}: unsupported dtype {dtype!r} (use 'int64' or 'float32')")

    if k:
        list_len = 1 + _vlen_small(payload_len) + payload_len
    else:
        list_len = np.zeros(n, np.int64)
    feat_len = 1 + _vlen_small(list_len) + list_len
    key_part = 1 + _varint_len_scalar(len(key)) + len(key)
    entry_len = key_part + 1 + _vlen_small(feat_len) + feat_len
    total = 1 + _vlen_small(entry_len) + entry_len

    tokens: List[Tuple[Any, ...]] = [
        (_CONST, b"\x0a"),
        (_VARINT, entry_len),
        (_CONST, b"\x0a" + _varint_bytes(len(key)) + key + b"\x12"),
        (_VARINT, feat_len),
        (_CONST, tag),
        (_VARINT, list_len),
    ]
    if k:
        tokens += [(_CONST, b"\x0a"), (_VARINT, payload_len), body]
    return tokens, total


def _vlen_small(v: np.ndarray) -> np.ndarray:
    """Varint lengths of a non-negative int64 array of message lengths (< 2**35)."""
    out = np.ones(v.shape, np.int64)
    for j in range(1, 5):
        out += v >= (1 << (7 * j))
    return out


def _merge_consts(tokens: List[Tuple[Any, ...]]) -> List[Tuple[Any, ...]]:
    merged: List[Tuple[Any, ...]] = []
    for tok in tokens:
        if tok[0] == _CONST and merged and merged[-1][0] == _CONST:
            merged[-1] = (_CONST, merged[-1][1] + tok[1])
        else:
            merged.append(tok)
    return merged


def serialize_examples(features: Mapping[str, np.ndarray], order: Sequence[Tuple[str, str]]) -> List[bytes]:
    # Over 80 lines on purpose: the three steps (plan, lay out slots, cut records) share the
    # plan's arrays, and this is the writer's hottest function (see the module docstring).
    """Serialize a batch of records to ``tf.train.Example`` wire bytes.

    ``features`` maps name -> 2-D array ``(n, k_name)`` (same ``n`` for all); ``order`` lists
    ``(name, dtype)`` with dtype ``"int64"`` or ``"float32"`` in the order the map entries are
    written. Pass names sorted (as :mod:`bert_data.schema` does) to get exactly the bytes of
    ``SerializeToString(deterministic=True)``. (Caveat for other schemas: when one key is a
    prefix of another, e.g. ``"a"`` and ``"ab"``, the upb protobuf backend that TensorFlow's
    Python API uses writes the longer key first, unlike C++ protobuf; the BERT names are
    prefix-free.) Negative int64 values are encoded as 10-byte varints, like protobuf; float
    inputs are rounded to float32. Names in ``features`` that are not in ``order`` are
    ignored. Returns ``n`` ``bytes`` objects.
    """
    names = [name for name, _ in order]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate feature names in order: {names}")
    missing = [name for name in names if name not in features]
    if missing:
        raise ValueError(f"features missing from the batch: {missing}")
    arrays = {name: np.asarray(features[name]) for name in names}
    if not names:
        raise ValueError("order names no features")
    first = arrays[names[0]]
    if first.ndim != 2:
        raise ValueError(f"feature {names[0]!r}: expected a 2-D array, got shape {first.shape}")
    n = first.shape[0]
    if n == 0:
        for name in names:
            if arrays[name].ndim != 2 or arrays[name].shape[0] != 0:
                raise ValueError(f"feature {name!r}: expected a 2-D array with 0 rows, got {arrays[name].shape}")
        return []

    # 1. Plan the token layout and the per-record lengths.
    tokens: List[Tuple[Any, ...]] = []
    features_len = np.zeros(n, np.int64)
    for name, dtype in order:
        toks, total = _plan_feature_tokens(name, dtype, arrays[name], n)
        tokens += toks
        features_len += total
    tokens = [(_CONST, b"\x0a"), (_VARINT, features_len)] + tokens
    tokens = _merge_consts(tokens)
    record_len = 1 + _vlen_small(features_len) + features_len

    # 2. Lay the tokens out in slots: a constant or raw token takes one slot per byte, a
    #    varint column takes as many slots as its widest value needs. G holds the bytes, M
    #    (created only if some token's length varies) says which slots are real bytes.
    slots = 0
    plan: List[Tuple[Any, ...]] = []
    for tok in tokens:
        kind = tok[0]
        if kind == _CONST:
            plan.append((kind, slots, np.frombuffer(tok[1], np.uint8)))
            slots += len(tok[1])
        elif kind == _RAW:
            plan.append((kind, slots, tok[1]))
            slots += tok[1].shape[1]
        elif kind == _VARINT:
            v = tok[1].astype(np.uint64)
            lens, w, ge = _varint_len_vec(v)
            plan.append((_VALUES, slots, v[:, None], lens[:, None], w, ge and [g[:, None] for g in ge]))
            slots += w
        else:  # _VALUES
            _, u, lens, w, ge = tok
            plan.append((kind, slots, u, lens, w, ge))
            slots += u.shape[1] * w

    G = np.empty((n, slots), np.uint8)
    M: Optional[np.ndarray] = None
    for item in plan:
        kind, s = item[0], item[1]
        if kind in (_CONST, _RAW):
            data = item[2]
            G[:, s : s + data.shape[-1]] = data
            continue
        u, lens, w, ge = item[2:]
        k = u.shape[1]
        view = G[:, s : s + k * w].reshape(n, k, w)
        if w == 1:
            view[:, :, 0] = u
            continue
        shift_t = u.dtype.type
        for j in range(w):
            g = (u >> shift_t(7 * j)).astype(np.uint8) if j else u.astype(np.uint8)
            if j < w - 1:
                g &= np.uint8(0x7F)
                g |= ge[j].view(np.uint8) << np.uint8(7)
            view[:, :, j] = g
        if ge[-1].all():  # every value uses all w bytes: no padding slots
            continue
        if M is None:
            M = np.ones((n, slots), np.bool_)
        mview = M[:, s : s + k * w].reshape(n, k, w)
        for j in range(1, w):
            mview[:, :, j] = ge[j - 1]

    # 3. Keep the real bytes, in record order, and cut the records apart.
    if M is None:
        buf = G.tobytes()
    else:
        buf = G.reshape(-1)[M.reshape(-1)].tobytes()
    ends = np.cumsum(record_len)
    if ends[-1] != len(buf):  # pragma: no cover - internal consistency check
        raise AssertionError(f"encoder length mismatch: planned {int(ends[-1])}, produced {len(buf)}")
    starts = (ends - record_len).tolist()
    return [buf[a:b] for a, b in zip(starts, ends.tolist())]


# --------------------------------------------------------------------------------------
# TFRecord framing
# --------------------------------------------------------------------------------------

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_HEADER_CACHE: Dict[int, bytes] = {}
_HEADER_CACHE_MAX = 1 << 16


def _frame_header(length: int) -> bytes:
    hdr = _HEADER_CACHE.get(length)
    if hdr is None:
        lb = _U64.pack(length)
        hdr = lb + _U32.pack(masked_crc32c(lb))
        if len(_HEADER_CACHE) < _HEADER_CACHE_MAX:
            _HEADER_CACHE[length] = hdr
    return hdr


def frame_records(payloads: Iterable[bytes]) -> bytes:
    """TFRecord frames of ``payloads``, concatenated (what ``tf.io.TFRecordWriter`` writes).

    Each frame: uint64 LE length, uint32 LE masked CRC32C of those 8 bytes, the data,
    uint32 LE masked CRC32C of the data.
    """
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
        append(pack32((((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF))
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


def _read_exact(f: BinaryIO, size: int) -> bytes:
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


def _looks_like_frame_header(head: bytes) -> bool:
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
    if head[:2] != GZIP_MAGIC or _looks_like_frame_header(head[:12]):
        return "none"
    return "gzip"


def natural_key(path: str) -> List[Any]:
    """Sort key of shard file names: ``examples-2`` before ``examples-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def _iter_stream(f: BinaryIO, name: str, verify: bool) -> Iterator[bytes]:
    seekable = False
    try:
        seekable = f.seekable()
    except (AttributeError, OSError, ValueError):
        pass
    if seekable:
        start = f.tell()
        head = _read_exact(f, 12)
        f.seek(start)
        stream: BinaryIO = f
    else:
        head = _read_exact(f, 12)
        stream = io.BufferedReader(_Prefixed(head, f))  # type: ignore[arg-type]
    compressed = tfrecord_compression(head) == "gzip"
    where = "uncompressed byte offset" if compressed else "byte offset"

    if compressed:
        reader: BinaryIO = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]

        def read(size: int, offset: int) -> bytes:
            try:
                return _read_exact(reader, size)
            except (EOFError, OSError, zlib.error) as e:
                raise RecordFormatError(f"{name}: corrupt gzip stream near {where} {offset}: {e}") from e

    else:
        reader = stream

        def read(size: int, offset: int) -> bytes:
            return _read_exact(reader, size)

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
            (length,) = _U64.unpack_from(header, 0)
            if verify and not _looks_like_frame_header(header):
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


# --------------------------------------------------------------------------------------
# tf.train.Example decoding
# --------------------------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise RecordFormatError("malformed tf.train.Example: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise RecordFormatError("malformed tf.train.Example: varint longer than 10 bytes")


def _fields(buf: bytes, pos: int, end: int) -> Iterator[Tuple[int, int, Any]]:
    """Yield ``(field number, wire type, value)``; value is an int, or a ``(start, stop)`` span for LEN."""
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise RecordFormatError("malformed tf.train.Example: field number 0")
        if wire == 0:
            value, pos = _read_varint(buf, pos, end)
            yield field, wire, value
        elif wire == 1:
            if pos + 8 > end:
                raise RecordFormatError("malformed tf.train.Example: truncated fixed64")
            yield field, wire, (pos, pos + 8)
            pos += 8
        elif wire == 2:
            size, pos = _read_varint(buf, pos, end)
            if pos + size > end:
                raise RecordFormatError("malformed tf.train.Example: length-delimited field overruns its message")
            yield field, wire, (pos, pos + size)
            pos += size
        elif wire == 5:
            if pos + 4 > end:
                raise RecordFormatError("malformed tf.train.Example: truncated fixed32")
            yield field, wire, (pos, pos + 4)
            pos += 4
        else:
            raise RecordFormatError(f"malformed tf.train.Example: unsupported wire type {wire}")
    if pos != end:
        raise RecordFormatError("malformed tf.train.Example: field overruns its message")


def _decode_packed_varints(buf: bytes, start: int, stop: int) -> np.ndarray:
    """Packed varints -> int64 array (vectorised)."""
    a = np.frombuffer(buf, np.uint8, stop - start, start)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.max() < 0x80:
        return a.astype(np.int64)
    term = a < 0x80
    if not term[-1]:
        raise RecordFormatError("malformed tf.train.Example: truncated packed varint")
    ends = np.flatnonzero(term)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if int((ends - starts).max()) >= 10:
        raise RecordFormatError("malformed tf.train.Example: varint longer than 10 bytes")
    index = np.arange(a.size)
    which = np.cumsum(term) - term  # varint number of each byte
    shift = (7 * (index - starts[which])).astype(np.uint64)
    parts = (a & 0x7F).astype(np.uint64) << shift
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def _parse_feature(buf: bytes, start: int, stop: int) -> Any:
    kind: Optional[int] = None
    values: List[Any] = []
    for field, wire, value in _fields(buf, start, stop):
        if field not in (1, 2, 3) or wire != 2:
            continue  # unknown field: skipped, as protobuf does
        if field != kind:
            kind, values = field, []  # oneof: the last member set wins
        a, b = value
        for f2, w2, v2 in _fields(buf, a, b):
            if f2 != 1:
                continue
            if field == 1:  # BytesList: repeated bytes
                if w2 == 2:
                    values.append(buf[v2[0] : v2[1]])
            elif field == 2:  # FloatList: packed (LEN) or unpacked (fixed32)
                if w2 == 2:
                    if (v2[1] - v2[0]) % 4:
                        raise RecordFormatError("malformed tf.train.Example: packed float list not a multiple of 4")
                    values.append(np.frombuffer(buf, "<f4", (v2[1] - v2[0]) // 4, v2[0]))
                elif w2 == 5:
                    values.append(np.frombuffer(buf, "<f4", 1, v2[0]))
            else:  # Int64List: packed (LEN) or unpacked (varint)
                if w2 == 2:
                    values.append(_decode_packed_varints(buf, *v2))
                elif w2 == 0:
                    values.append(np.array([v2], np.uint64).view(np.int64))
    if kind is None:
        return []
    if kind == 1:
        return values
    dtype = np.float32 if kind == 2 else np.int64
    if not values:
        return np.zeros(0, dtype)
    return np.concatenate(values).astype(dtype, copy=False)


def parse_example(data: bytes) -> Dict[str, Any]:
    """Decode ``tf.train.Example`` wire bytes to ``name -> value``.

    int64_list -> 1-D int64 array, float_list -> 1-D float32 array, bytes_list -> list of
    bytes; a Feature with no list set -> empty list. Packed and unpacked encodings are both
    accepted; unknown fields are skipped; a repeated map key keeps the last value.
    Raises :class:`RecordFormatError` on malformed bytes.
    """
    buf = bytes(data)
    out: Dict[str, Any] = {}
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field != 1 or wire != 2:
            continue
        for f2, w2, entry in _fields(buf, *value):
            if f2 != 1 or w2 != 2:
                continue
            key = ""
            feature: Any = []
            for f3, w3, v3 in _fields(buf, *entry):
                if w3 != 2:
                    continue
                if f3 == 1:
                    try:
                        key = buf[v3[0] : v3[1]].decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise RecordFormatError("malformed tf.train.Example: feature name is not UTF-8") from e
                elif f3 == 2:
                    feature = _parse_feature(buf, *v3)
            out[key] = feature
    return out
