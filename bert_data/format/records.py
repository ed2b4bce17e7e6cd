"""TFRecord files and ``tf.train.Example`` wire bytes, without TensorFlow or protobuf.

One concern, kept whole on purpose (it is over 1,000 lines): the wire format, both directions,
so the encoder and the decoders that check it sit side by side.

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
* :func:`parse_example` decodes ``tf.train.Example`` bytes to ``name -> numpy array``: any valid
  encoding, one record at a time. The reference for what a record holds.
* :func:`iter_record_batches` and :func:`decode_examples` are the same two steps for a whole
  batch at once (``inspect_tfrecords --stats``): frames cut apart by a loop that does little more
  than follow the lengths, and records of one known layout decoded by whole-batch numpy code.
  A record the batch decoder cannot vouch for is left to :func:`parse_example`, so both read
  every record the same way (tests check it on random and damaged records).

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
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from bert_data.errors import RecordFormatError

__all__ = [
    "serialize_examples",
    "serialize_token_sequences",
    "token_sequence_elements",
    "frame_records",
    "iter_records",
    "parse_example",
    "tfrecord_compression",
    "natural_key",
    "RecordBatch",
    "iter_record_batches",
    "decode_examples",
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

WIRE_API = 1  # the interface of bert_data/format/_wire.c this module calls (its API constant)

try:  # the optional C accelerator of the batch loops below (see setup.py); same answers
    from bert_data.format import _wire  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the numpy implementations
    _wire = None
if _wire is not None and getattr(_wire, "API", None) != WIRE_API:  # a stale build
    import logging

    logging.getLogger(__name__).warning(
        "bert_data.format._wire was built from another version of _wire.c (API %s, expected %s): reading "
        "TFRecords with numpy; rebuild it with `pip install -e .` (or reinstall)", getattr(_wire, "API", None), WIRE_API,
    )
    _wire = None


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


def token_sequence_elements(tokens: Sequence[str]) -> List[bytes]:
    """Per vocabulary id, the bytes that id adds to a ``tokens`` FeatureList: one ``Feature``
    holding a one-value ``BytesList`` with the token's UTF-8 (precomputed once per worker)."""
    out = []
    for token in tokens:
        text = token.encode("utf-8")
        bytes_list = b"\x0a" + _varint_bytes(len(text)) + text
        feature = b"\x0a" + _varint_bytes(len(bytes_list)) + bytes_list
        out.append(b"\x0a" + _varint_bytes(len(feature)) + feature)
    return out


_TOKENS_KEY = b"\x0a\x06tokens"  # the map entry's key field: "tokens"


def serialize_token_sequences(input_ids: np.ndarray, input_mask: np.ndarray, elements: Sequence[bytes]) -> List[bytes]:
    """The Cerebras Model Zoo's ``--disable_masking`` records: per row, a ``tf.train.SequenceExample``
    with no context and ``feature_lists {"tokens": [one bytes Feature per WordPiece]}`` of the row's
    real tokens (``[CLS] ... [SEP]``, no padding), byte-identical to TensorFlow's deterministic
    serialization (tests/test_unmasked_tokens.py)."""
    lengths = input_mask.sum(axis=1).tolist()
    out = []
    for ids, n in zip(input_ids.tolist(), lengths):
        feature_list = b"".join([elements[i] for i in ids[:n]])
        entry = _TOKENS_KEY + b"\x12" + _varint_bytes(len(feature_list)) + feature_list
        lists = b"\x0a" + _varint_bytes(len(entry)) + entry
        out.append(b"\x12" + _varint_bytes(len(lists)) + lists)
    return out


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


# --------------------------------------------------------------------------------------
# Whole batches: framing and decoding without per-record Python (inspect_tfrecords --stats)
# --------------------------------------------------------------------------------------

READ_CHUNK_BYTES = 1 << 20  # bytes read (uncompressed) per batch: bounds a batch's arrays; larger is slower (caches)


@dataclass(frozen=True)
class RecordBatch:
    """The payloads of consecutive records of one file, without a ``bytes`` object per record:
    payload ``i`` is ``data[starts[i] : starts[i] + lengths[i]]``. ``first`` is the index in the
    file of the batch's first record; ``position`` how far into the file reading has got (the
    compressed bytes consumed, for a gzip file): what a progress bar shows."""

    data: bytes
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    first: int
    position: int

    def __len__(self) -> int:
        return len(self.starts)

    def payload(self, i: int) -> bytes:
        start = int(self.starts[i])
        return self.data[start : start + int(self.lengths[i])]


def iter_record_batches(path: Union[str, "os.PathLike[str]"], chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[RecordBatch]:
    """The records of a TFRecord file (plain or GZIP) in batches of about ``chunk_bytes``, both
    CRCs of every frame verified: :func:`iter_records`' contract, minus its per-record generator.

    The file is read in large chunks and the frames of each chunk are cut apart by
    :func:`_cut_frames` (a loop over the lengths, one C CRC call per payload, the rest whole-batch
    numpy). At the first frame
    that is not whole and valid (truncated file, bad CRC, corrupt gzip stream) the batch reader
    hands over to :func:`iter_records` from the start of the file, skipping the records already
    yielded: it yields whatever more that reader accepts and raises its exact
    :class:`RecordFormatError` (message and offset), so a damaged file reads exactly as before.
    """
    name = os.fsdecode(path)
    try:
        handle = open(path, "rb")
    except OSError as e:
        raise RecordFormatError(f"{name}: cannot open TFRecord file: {e.strerror or e}") from e
    yielded = 0
    with handle:
        compressed = tfrecord_compression(_read_exact(handle, 12)) == "gzip"
        handle.seek(0)
        stream: BinaryIO = gzip.GzipFile(fileobj=handle, mode="rb") if compressed else handle  # type: ignore[assignment]
        try:
            for batch in _chunked_batches(stream, chunk_bytes, handle.tell if compressed else None):
                yielded += len(batch)
                yield batch
            return  # every byte was whole, valid frames
        except _BadFrame:
            pass
        except (EOFError, OSError, zlib.error):
            if not compressed:
                raise  # reading a plain file failed: an I/O error, not a format error
            # a damaged gzip stream: iter_records says where and how
        finally:
            if compressed:
                stream.close()
    yield from _batches_after(name, yielded, chunk_bytes)


class _BadFrame(Exception):
    """The frame at the current offset is not whole and valid (the reader hands over)."""


def _chunked_batches(stream: BinaryIO, chunk_bytes: int, position: Optional[Any] = None) -> Iterator[RecordBatch]:
    """Frames of ``stream`` cut apart chunk by chunk; raises :class:`_BadFrame` at the first bad
    frame after yielding the good ones before it (the caller then hands over to
    :func:`iter_records`). ``position()`` (default: the stream offset) says how far reading is."""
    valid_crcs: Dict[int, int] = {}  # frame length -> its header's masked CRC
    pending = b""  # the start of a frame that continues in the next chunk
    first = 0
    offset = 0  # stream offset of data[0]
    while True:
        need = chunk_bytes
        if len(pending) >= 12:  # a frame larger than a chunk: read at least the rest of it
            need = max(need, 16 + _U64.unpack_from(pending, 0)[0] - len(pending))
        chunk = _read_exact(stream, need)
        data = pending + chunk if pending else chunk
        if not data:
            return
        starts, lengths, end, bad = _cut_frames(data, valid_crcs)
        if len(starts):
            where = position() if position is not None else offset + end
            yield RecordBatch(data, starts, lengths, first, where)
            first += len(starts)
        if bad:
            raise _BadFrame()
        if not chunk:
            if end != len(data):
                raise _BadFrame()  # a truncated frame at the end of the file
            return
        pending = data[end:]
        offset += end


def _cut_frames(data: bytes, valid_crcs: Dict[int, int]) -> Tuple[np.ndarray, np.ndarray, int, bool]:
    """(payload starts, payload lengths, end of the last whole valid frame, whether a bad frame
    was met) of the frames at the start of ``data``: :func:`_cut_frames_c` when the accelerator
    is built, else :func:`_cut_frames_numpy` (the tests check that they agree)."""
    if _wire is not None:
        return _cut_frames_c(data)
    return _cut_frames_numpy(data, valid_crcs)


def _cut_frames_c(data: bytes) -> Tuple[np.ndarray, np.ndarray, int, bool]:
    """:func:`_cut_frames_numpy` as one C loop (both CRCs of every frame, in order)."""
    capacity = len(data) // 16 + 1  # a frame is at least 16 bytes
    starts, lengths = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
    count, end, bad = _wire.cut_frames(data, starts, lengths)
    return starts[:count], lengths[:count], end, bool(bad)


def _cut_frames_numpy(data: bytes, valid_crcs: Dict[int, int]) -> Tuple[np.ndarray, np.ndarray, int, bool]:
    """:func:`_cut_frames` without the accelerator.

    The only per-frame Python is the walk from one length to the next and one C call per
    payload CRC; the header CRCs (one per distinct length, cached in ``valid_crcs``) and the
    comparisons are whole-batch numpy. A frame's length is trusted for walking on only after its
    header CRC checks out, so a damaged length never makes the caller read past the damage."""
    size = len(data)
    unpack64 = _U64.unpack_from
    crc = crc32c
    frames: List[int] = []
    crcs: List[int] = []
    add_frame, add_crc = frames.append, crcs.append
    pos, last_head = 0, size - 12
    while pos <= last_head:  # the one per-frame loop: walk, and each payload's CRC (a C call)
        stop = pos + 16 + unpack64(data, pos)[0]
        if stop > size:
            break
        add_frame(pos)
        add_crc(crc(data[pos + 12 : stop - 4]))
        pos = stop
    bad = False
    if pos + 12 <= size and not _looks_like_frame_header(data[pos : pos + 12]):
        bad = True  # the incomplete frame at the end is damaged: do not read on for it
    u8 = np.frombuffer(data, np.uint8)
    heads = np.asarray(frames, np.int64)
    starts = heads + 12
    lengths = np.diff(heads, append=pos) - 16
    header_crcs = _gather4(u8, heads + 8)
    distinct, which = np.unique(lengths, return_inverse=True)
    for length in distinct.tolist():
        if length not in valid_crcs:
            valid_crcs[length] = masked_crc32c(_U64.pack(length))
    good = header_crcs == np.array([valid_crcs[v] for v in distinct.tolist()], np.uint32)[which.reshape(-1)]
    if len(frames):
        computed = np.asarray(crcs, np.uint64)
        masked = (((computed >> np.uint64(15)) | (computed << np.uint64(17))) + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)
        good &= masked.astype(np.uint32) == _gather4(u8, starts + lengths)
    if not good.all():
        first_bad = int(np.argmin(good))
        return starts[:first_bad], lengths[:first_bad], int(heads[first_bad]), True
    return starts, lengths, pos, bad


def _gather4(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each offset ``at`` of ``u8``."""
    if not len(at):
        return np.zeros(0, np.uint32)
    return np.ascontiguousarray(u8[at[:, None] + np.arange(4)]).view("<u4").reshape(-1).astype(np.uint32)


def _batches_after(name: str, skip: int, chunk_bytes: int) -> Iterator[RecordBatch]:
    """The records after the first ``skip`` as :func:`iter_records` reads them, in batches; then
    its error. Only reached for a damaged file."""
    parts: List[bytes] = []
    first = skip
    size = offset = 0
    error: Optional[RecordFormatError] = None
    try:
        for index, payload in enumerate(iter_records(name)):
            offset += 16 + len(payload)
            if index < skip:
                continue
            parts.append(payload)
            size += len(payload) + 16
            if size >= chunk_bytes:
                yield _batch_of(parts, first, offset)
                first += len(parts)
                parts, size = [], 0
    except RecordFormatError as exc:
        error = exc
    if parts:
        yield _batch_of(parts, first, offset)  # the good records before the error
    if error is not None:
        raise error


def _batch_of(payloads: List[bytes], first: int, position: int) -> RecordBatch:
    lengths = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
    starts = np.cumsum(lengths) - lengths
    return RecordBatch(b"".join(payloads), starts, lengths, first, position)


class _Cursor:
    """Per-record read positions into one buffer (reads past its end are clipped to its last
    byte: only records that are not the layout get there, and they fail)."""

    def __init__(self, u8: np.ndarray, starts: np.ndarray) -> None:
        self.u8 = u8
        self.last = len(u8) - 1
        self.pos = starts.astype(np.int64)  # a copy

    def byte(self, offset: int = 0) -> np.ndarray:
        return self.u8[np.minimum(self.pos + offset, self.last)]

    def expect(self, constant: bytes) -> np.ndarray:
        """Rows whose bytes at the cursor are ``constant``; the cursor moves past it."""
        if len(constant) == 1:
            ok = self.byte() == constant[0]
        else:
            index = np.minimum(self.pos[:, None] + np.arange(len(constant)), self.last)
            ok = (self.u8[index] == np.frombuffer(constant, np.uint8)).all(axis=1)
        self.pos += len(constant)
        return ok

    def varint(self) -> Tuple[np.ndarray, np.ndarray]:
        """A message length (at most 5 bytes) at the cursor: (values, rows where it is one)."""
        b = self.byte()
        value = (b & 0x7F).astype(np.int64)
        width = np.ones(len(b), np.int64)
        more = b >= 0x80
        for j in range(1, 5):
            if not more.any():
                break
            b = self.byte(j)
            value |= np.where(more, (b & 0x7F).astype(np.int64) << (7 * j), 0)
            width += more
            more &= b >= 0x80
        self.pos += width
        return value, ~more


def _blocks(padded: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """(rows, width) matrix of the bytes ``padded[starts[r] : starts[r] + width]``: one strided
    copy per row, no index matrix (``padded`` extends the buffer by at least ``width`` bytes)."""
    return np.lib.stride_tricks.sliding_window_view(padded, width)[starts]


def _packed_varints(
    padded: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int, small: bool
) -> Tuple[np.ndarray, np.ndarray]:
    """Decode rows of exactly ``k`` packed varints each: ((rows, k) values, rows decoded).

    A row is decoded when its ``lengths[r]`` bytes are exactly ``k`` varints of at most 9 bytes
    (values below 2**63: the int64 :func:`parse_example` gives); the others are left to it.
    Values come back as int64, or as int32 with ``small`` when every varint has at most 4
    bytes (values below 2**28)."""
    n = len(starts)
    dtype = np.int32 if small else np.int64
    width = int(lengths.max()) if n else k
    if width == k and int(lengths.min(initial=k)) == k:  # k bytes per row: k one-byte varints unless a byte continues
        block = _blocks(padded, starts, k)
        if int(block.max(initial=0)) < 0x80:
            return block.astype(dtype), np.ones(n, bool)
    ok = lengths >= k
    stride = width + 3  # 3 more bytes per row: every varint's first 4 bytes can be read at once
    block = _blocks(padded, starts, stride)
    term = (block < 0x80) & (np.arange(stride) < lengths[:, None])
    ok &= np.count_nonzero(term, axis=1) == k
    ok &= term[np.arange(n), np.maximum(lengths - 1, 0)]  # the last byte ends a varint
    if ok.all():
        flat = block.reshape(-1)
        ends = np.flatnonzero(term.reshape(-1))
        begins = np.empty_like(ends)
        begins[1:] = ends[:-1] + 1
        begins[::k] = np.arange(n) * stride  # the first varint of a row starts the row
        size = ends - begins + 1
        longest = int(size.max(initial=1))
        if longest <= 4:  # the usual case (values below 2**28): each varint as one uint32
            return _short_varints(flat, begins, size, small).reshape(n, k), ok
        if longest <= 9:
            values = (flat[begins] & 0x7F).astype(np.int64)
            for j in range(1, longest):
                more = (flat[np.minimum(begins + j, ends)] & 0x7F).astype(np.int64) << (7 * j)
                values |= np.where(size > j, more, 0)
            return values.reshape(n, k), ok
        ok &= size.reshape(n, k).max(axis=1) <= 9
    values = np.zeros((n, k), dtype)
    rows = np.flatnonzero(ok)
    if len(rows):  # decode the good rows on their own (every check is per row: they all pass)
        sub, _ = _packed_varints(padded, starts[rows], lengths[rows], k, small)
        values = values.astype(sub.dtype, copy=False)
        values[rows] = sub
    return values, ok


Entry = Tuple[bytes, bytes]  # a map entry's constant bytes: 0a len(name) name 12, and the list's tag
Payloads = List[Tuple[np.ndarray, np.ndarray]]  # per feature: payload starts and sizes, per record


def _walk_bytewise(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, entries: Sequence[Entry]):
    """Walk every record's wire structure one byte column at a time, for records of any header
    layout: (records that are exactly the layout, the payloads). Each map entry is
    ``0a E <key> F <tag> L 0a P <payload>``; E, F, L, P are varint lengths that must agree."""
    cur = _Cursor(u8, starts)
    ok = cur.expect(b"\x0a")
    size, good = cur.varint()
    ok &= good & (cur.pos + size == ends)
    payloads: Payloads = []
    for key, tag in entries:
        ok &= cur.expect(b"\x0a")
        entry, good = cur.varint()
        entry_end = cur.pos + entry
        ok &= good & cur.expect(key)
        for constant in (tag, b"\x0a", None):  # the Feature, the list, the packed values
            size, good = cur.varint()
            ok &= good & (cur.pos + size == entry_end)
            if constant is not None:
                ok &= cur.expect(constant)
        payloads.append((cur.pos.copy(), size))
        cur.pos = entry_end
    ok &= cur.pos == ends
    return ok, payloads


def _scalar_varint(raw: bytes, i: int, end: int) -> Optional[Tuple[int, int]]:
    """(value, width) of a message length (at most 5 bytes) at ``raw[i]``, or None."""
    value = 0
    for j in range(5):
        if i + j >= end:
            return None
        value |= (raw[i + j] & 0x7F) << (7 * j)
        if raw[i + j] < 0x80:
            return value, j + 1
    return None


def _record_template(raw: bytes, start: int, end: int, entries: Sequence[Entry]) -> Optional[List[Tuple[bytes, List[Tuple[int, int]]]]]:
    """The header segments of the record at ``raw[start:end]``: the record's own ``0a len``,
    then each entry's header up to its payload, as ``(bytes, [(column, width) of each varint])``.
    None when the record is not exactly the layout (every length checked, as the walks do)."""
    segments = []
    i = start
    shapes = [[b"\x0a", None]] + [[b"\x0a", None, key, None, tag, None, b"\x0a", None] for key, tag in entries]
    for n, shape in enumerate(shapes):
        first, columns, bounds = i, [], []
        for constant in shape:
            if constant is not None:
                if raw[i : i + len(constant)] != constant:
                    return None
                i += len(constant)
                continue
            got = _scalar_varint(raw, i, end)
            if got is None:
                return None
            columns.append((i - first, got[1]))
            i += got[1]
            bounds.append(i + got[0])  # where the message this length announces ends
        if n == 0 and bounds != [end]:
            return None  # the Features message must fill the record
        if n and bounds[1:] != [bounds[0]] * 3:
            return None  # the Feature, the list and the values must all end where the entry ends
        segments.append((raw[first:i], columns))
        if n:
            i += got[0]  # the packed values
    return segments if i == end else None


def _walk(data: bytes, u8: np.ndarray, padded: np.ndarray, starts: np.ndarray, ends: np.ndarray, entries: Sequence[Entry]):
    """(records that are exactly the layout, their payloads): the records laid out like the
    first one in bulk, then those like the first of the rest (e.g. records whose lengths need a
    byte more), then once more; whatever is left byte by byte."""
    n = len(starts)
    ok = np.zeros(n, bool)
    payloads: Payloads = [(np.zeros(n, np.int64), np.zeros(n, np.int64)) for _ in entries]
    rest = np.arange(n)
    for attempt in range(4):
        if not len(rest):
            break
        if attempt < 3:
            got, found = _walk_as_first(data, u8, padded, starts[rest], ends[rest], entries)
        else:
            got, found = _walk_bytewise(u8, starts[rest], ends[rest], entries)
        for (pos, size), (found_pos, found_size) in zip(payloads, found):
            pos[rest[got]], size[rest[got]] = found_pos[got], found_size[got]
        ok[rest[got]] = True
        rest = rest[~got]
    return ok, payloads


def _walk_as_first(
    data: bytes, u8: np.ndarray, padded: np.ndarray, starts: np.ndarray, ends: np.ndarray, entries: Sequence[Entry]
):
    """:func:`_walk_bytewise` for the records whose headers are laid out byte for byte like the
    first record's (the same varint widths: nearly always all of them), in a few whole-batch
    operations: each entry header is cut out at its offset (which follows from the payload
    sizes before it), one comparison checks every constant byte and continuation bit, and the
    lengths are checked only where some record's differ from the first's (which were checked
    one by one). The other records come back not ok, for the byte-by-byte walk."""
    n = len(starts)
    payloads: Payloads = [(np.zeros(n, np.int64), np.zeros(n, np.int64)) for _ in entries]
    template = _record_template(data, int(starts[0]), int(ends[0]), entries) if n else None
    if template is None:
        return np.zeros(n, bool), payloads
    widest = max(len(header) for header, _ in template)
    if len(padded) - len(u8) < widest:  # pragma: no cover - keys longer than any sane feature name
        padded = np.concatenate([u8, np.zeros(widest, np.uint8)])
    windows = np.lib.stride_tricks.as_strided(padded, shape=(len(u8) + 1, widest), strides=(1, 1))
    reference = np.frombuffer(b"".join(header for header, _ in template), np.uint8)
    big = np.zeros((n, -(-len(reference) // 8) * 8), np.uint8)  # every header of a record side by side
    where: List[np.ndarray] = []  # where each header starts, per record
    pos, offset = starts.astype(np.int64), 0
    for s, (header, columns) in enumerate(template):
        at = np.minimum(pos, len(u8))  # (only records that are not the layout can run past the buffer)
        block = big[:, offset : offset + len(header)]
        block[:] = windows[at, : len(header)]
        where.append(at)
        pos = at + len(header)
        if s:
            payloads[s - 1][0][:] = pos
            payloads[s - 1][1][:] = size = _column_varint(block, *columns[-1])  # P: the payload's size
            pos = pos + size
        offset += len(header)
    differ = big[:, : len(reference)] ^ reference
    mask, offset = np.full(len(reference), 0xFF, np.uint8), 0
    for header, columns in template:
        for column, w in columns:
            mask[offset + column : offset + column + w] = 0x80  # a varint: only its continuation bits are fixed
        offset += len(header)
    masked = np.zeros(big.shape, np.uint8)
    np.bitwise_and(differ, mask, out=masked[:, : len(reference)])
    ok = np.bitwise_or.reduce(masked.view(np.uint64), axis=1) == 0
    ok &= pos == ends
    varies = np.bitwise_or.reduce(differ, axis=0) != 0  # the columns where some record is not the first
    offset = 0
    for s, (header, columns) in enumerate(template):
        if varies[offset : offset + len(header)].any():
            ok &= _lengths_agree(big[:, offset : offset + len(header)], columns, where[s], ends if s == 0 else None)
        offset += len(header)
    return ok, payloads


def _column_varint(block: np.ndarray, column: int, width: int) -> np.ndarray:
    """The varints of ``width`` bytes at ``column`` of each row of ``block`` (int64)."""
    value = (block[:, column] & 0x7F).astype(np.int64)
    for j in range(1, width):
        value |= (block[:, column + j] & 0x7F).astype(np.int64) << (7 * j)
    return value


def _lengths_agree(block: np.ndarray, columns: List[Tuple[int, int]], at: np.ndarray, ends: Optional[np.ndarray]) -> np.ndarray:
    """Rows whose header lengths nest: the record's ``0a len`` fills the record (``ends``
    given), or an entry's E, F, L and P all end where the entry ends."""
    if ends is not None:
        (column, width), = columns
        return at + column + width + _column_varint(block, column, width) == ends
    (e_col, e_w), *inner = columns
    entry_end = at + e_col + e_w + _column_varint(block, e_col, e_w)
    ok = np.ones(len(block), bool)
    for column, width in inner:
        ok &= at + column + width + _column_varint(block, column, width) == entry_end
    return ok


_SHORT_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], np.uint32)  # the bytes of a 1-4 byte varint


def _short_varints(flat: np.ndarray, begins: np.ndarray, size: np.ndarray, small: bool) -> np.ndarray:
    """Varints of at most 4 bytes starting at ``begins`` of the contiguous ``flat`` (with 3
    bytes to spare after the last): each varint's 4 bytes taken as one little-endian word
    (one ``np.take`` from an unaligned view, 2-3x faster than a gather per byte), the bytes
    past its own ``size`` masked off, then its four 7-bit groups shifted together."""
    words = np.ndarray(shape=(len(flat) - 3,), dtype="<u4", buffer=flat, strides=(1,))
    word = np.take(words, begins)
    word &= np.take(_SHORT_MASKS, size)
    value = word & 0x7F
    for group in (0x3F80, 0x1FC000, 0xFE00000):
        word >>= 1
        value |= word & group
    return value.view(np.int32) if small else value.astype(np.int64)


def decode_examples(
    data: bytes,
    starts: np.ndarray,
    lengths: np.ndarray,
    features: Sequence[Tuple[str, str, int]],
    small_ints: bool = False,
) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """Decode many ``tf.train.Example`` payloads of one fixed layout at once, with numpy.

    ``features`` lists ``(name, dtype, length)`` in the order the map entries are written
    (sorted names: :func:`serialize_examples`' and TensorFlow's deterministic order). A record
    is decoded when its bytes are exactly that layout as those writers lay it out (see the
    module docstring): one Features message, the entries in that order with those keys, each a
    packed list of exactly ``length`` values, every nested length consistent with the next. Every
    record that is decoded is then one :func:`parse_example` would read to the same arrays;
    every other one (another layout or length, another valid encoding such as unpacked values,
    or malformed bytes) is left out, for the caller to hand to :func:`parse_example`.

    Returns ``(name -> (n_decoded, length) array, decoded)``: the decoded rows, in order, and
    the boolean mask of the records decoded. float32 lists are float32 arrays; int64 lists are
    int64 arrays, or with ``small_ints`` int32 arrays whenever all of a feature's values in the
    batch are below 2**28 (half the memory traffic for a caller that only compares values).
    """
    entries = [
        (b"\x0a" + _varint_bytes(len(name.encode("utf-8"))) + name.encode("utf-8") + b"\x12",
         b"\x1a" if dtype == "int64" else b"\x12")
        for name, dtype, _ in features
    ]
    if _wire is not None and len(features) <= _WIRE_MAX_FEATURES:
        return _decode_examples_c(data, starts, lengths, features, [key for key, _ in entries], small_ints)
    return _decode_examples_numpy(data, starts, lengths, features, entries, small_ints)


_WIRE_MAX_FEATURES = 64  # _wire.decode_fixed's limit (our layouts have at most 7)


def _decode_examples_c(
    data: bytes, starts: np.ndarray, lengths: np.ndarray, features: Sequence[Tuple[str, str, int]],
    keys: List[bytes], small_ints: bool,
) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """:func:`decode_examples` as one C loop over the records (``_wire.decode_fixed``): the same
    records decoded to the same values; with ``small_ints`` an int feature is int32 unless one of
    its values in a decoded record is 2**28 or more (then int64, decoded again)."""
    n = len(starts)
    starts = np.ascontiguousarray(starts, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    kinds = b"".join(b"f" if dtype == "float32" else b"i" for _, dtype, _ in features)
    counts = tuple(k for _, _, k in features)
    small = sum(1 << f for f, (_, dtype, _) in enumerate(features) if small_ints and dtype == "int64")  # int32 outputs
    while True:
        outs = [
            np.empty((n, k), np.float32 if dtype == "float32" else (np.int32 if small >> f & 1 else np.int64))
            for f, (_, dtype, k) in enumerate(features)
        ]
        ok = np.empty(n, np.uint8)
        wide = _wire.decode_fixed(data, starts, lengths, tuple(keys), kinds, counts, tuple(outs), ok, small)
        if not wide:
            break
        small &= ~wide  # a feature with a value past the 28 bits promised for int32: int64, decoded again
    decoded = ok.view(bool)
    if decoded.all():
        return {name: a for (name, _, _), a in zip(features, outs)}, decoded
    return {name: a[decoded] for (name, _, _), a in zip(features, outs)}, decoded


def _decode_examples_numpy(
    data: bytes, starts: np.ndarray, lengths: np.ndarray, features: Sequence[Tuple[str, str, int]],
    entries: List[Entry], small_ints: bool,
) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """:func:`decode_examples` without the accelerator: whole-batch numpy."""
    u8 = np.frombuffer(data, np.uint8) if data else np.zeros(1, np.uint8)  # (empty records only)
    # Zeros after the buffer let every row's block be cut at one width, even at the end: enough
    # for an entry header and for a payload of the widest values (10 bytes each).
    padded = np.concatenate([u8, np.zeros(64 + 10 * max(k for _, _, k in features), np.uint8)])
    ends = starts + lengths
    ok, payloads = _walk(data, u8, padded, starts, ends, entries)
    out: Dict[str, np.ndarray] = {}
    rows = np.flatnonzero(ok)
    widest = max([4 * k for _, _, k in features] + [int(size[rows].max(initial=0)) for _, size in payloads])
    if len(padded) - len(u8) < widest + 8:  # (only with values wider than 10 bytes: refused anyway)
        padded = np.concatenate([u8, np.zeros(widest + 8, np.uint8)])
    for (name, dtype, k), (pos, size) in zip(features, payloads):
        pos, size = pos[rows], size[rows]
        if dtype == "float32":
            good = size == 4 * k
            block = _blocks(padded, np.where(good, pos, 0), 4 * k)
            out[name] = block.view("<f4").astype(np.float32, copy=False)
        else:
            out[name], good = _packed_varints(padded, pos, size, k, small_ints)
        ok[rows[~good]] = False
    keep = ok[rows]
    if keep.all():
        return out, ok
    return {name: a[keep] for name, a in out.items()}, ok
