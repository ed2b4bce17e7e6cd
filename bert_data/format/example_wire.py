"""``tf.train.Example`` wire bytes of single records, both directions, without TensorFlow or protobuf.

Writer side (hot path, used by the writer's worker processes, :mod:`bert_data.format.encoders`
and :mod:`bert_data.runners.worker`, which must never import TensorFlow):

* :func:`serialize_examples` encodes a whole batch of fixed-length features into
  ``tf.train.Example`` protobuf messages with vectorised numpy code. The bytes equal
  ``tf.train.Example(...).SerializeToString(deterministic=True)`` provided the caller passes
  the features in sorted key order (deterministic protobuf serialization sorts map keys).
* :func:`token_sequence_elements` and :func:`serialize_token_sequences` write the Model Zoo's
  ``--disable_masking`` records (``tf.train.SequenceExample`` of WordPiece strings).

Reader side (``inspect_tfrecords``, :mod:`bert_data.inspection`, and tests):

* :func:`parse_example` decodes ``tf.train.Example`` bytes to ``name -> numpy array``: any valid
  encoding, one record at a time. The reference for what a record holds; the batch decoder
  (:mod:`bert_data.format.batch_decode`) leaves every record it cannot vouch for to it.

The payloads are framed into files by :mod:`bert_data.format.tfrecord`; this module imports
neither of the other two record modules. :func:`varint_bytes` is public for
:mod:`bert_data.format.batch_decode`, which builds the map-entry headers it expects with it.

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

import functools
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_data.errors import RecordFormatError

from .native import wire
from .row_runs import runs_of

__all__ = [
    "serialize_examples",
    "serialize_token_sequences",
    "token_sequence_elements",
    "parse_example",
]

# --------------------------------------------------------------------------------------
# Varint helpers
# --------------------------------------------------------------------------------------


def varint_bytes(value: int) -> bytes:
    """Protobuf varint of a non-negative int (negative int64 -> 10-byte two's complement).
    Public: :mod:`bert_data.format.batch_decode` builds map-entry headers with it."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_len_scalar(value: int) -> int:
    return len(varint_bytes(value))


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


def _check_fits_int64(values: np.ndarray, name: str) -> None:
    """An unsigned 64-bit feature's values must fit in int64 (what an Int64List holds)."""
    if values.dtype.kind == "u" and values.dtype.itemsize == 8 and values.size and int(values.max()) > 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"feature {name!r}: value {int(values.max())} does not fit in int64")


def _as_unsigned(values: np.ndarray, name: str) -> np.ndarray:
    """Integer array -> unsigned array (uint32 when every value fits, else the uint64 two's complement)."""
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)
    if values.dtype.kind not in "iu":
        raise TypeError(f"feature {name!r}: int64 feature needs an integer array, got dtype {values.dtype}")
    if values.size == 0:
        return values.astype(np.uint32)
    if values.dtype.kind == "u":
        _check_fits_int64(values, name)
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


def _check_feature(name: str, dtype: str, array: np.ndarray, n: int) -> None:
    """The checks of one feature that both encoders (numpy and C) make, in the same order."""
    if array.ndim != 2 or array.shape[0] != n:
        raise ValueError(f"feature {name!r}: expected a 2-D array with {n} rows, got shape {array.shape}")
    if dtype not in ("int64", "float32"):
        raise ValueError(f"feature {name!r}: unsupported dtype {dtype!r} (use 'int64' or 'float32')")


def _float32_values(array: np.ndarray, name: str) -> np.ndarray:
    """A float32 feature's values as C-contiguous little-endian float32 (the bytes written)."""
    if array.dtype.kind not in "fiub":
        raise TypeError(f"feature {name!r}: float32 feature needs a numeric array, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype="<f4")


def _plan_feature_tokens(
    name: str, dtype: str, array: np.ndarray, n: int
) -> Tuple[List[Tuple[Any, ...]], np.ndarray]:
    """Tokens of one map entry (``0x0a len Entry``) and its per-record byte length."""
    key = name.encode("utf-8")
    _check_feature(name, dtype, array, n)
    k = array.shape[1]
    if dtype == "int64":
        u = _as_unsigned(np.asarray(array), name)
        lens, width, ge = _varint_len_vec(u)
        payload_len = lens.sum(axis=1, dtype=np.int64) if k else np.zeros(n, np.int64)
        body: Tuple[Any, ...] = (_VALUES, u, lens, width, ge)
        tag = b"\x1a"
    else:
        raw = _float32_values(array, name).view(np.uint8).reshape(n, 4 * k)
        payload_len = np.full(n, 4 * k, np.int64)
        body = (_RAW, raw)
        tag = b"\x12"

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
        (_CONST, b"\x0a" + varint_bytes(len(key)) + key + b"\x12"),
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
        bytes_list = b"\x0a" + varint_bytes(len(text)) + text
        feature = b"\x0a" + varint_bytes(len(bytes_list)) + bytes_list
        out.append(b"\x0a" + varint_bytes(len(feature)) + feature)
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
        entry = _TOKENS_KEY + b"\x12" + varint_bytes(len(feature_list)) + feature_list
        lists = b"\x0a" + varint_bytes(len(entry)) + entry
        out.append(b"\x12" + varint_bytes(len(lists)) + lists)
    return out


NATIVE_MAX_FEATURES = 64  # _wire.serialize_examples' limit (our layouts have at most 10)


@functools.lru_cache(maxsize=64)
def _entry_prefixes(order: Tuple[Tuple[str, str], ...]) -> Tuple[Tuple[bytes, ...], bytes]:
    """What ``_wire.serialize_examples`` takes besides the values: per feature its map entry's
    constant bytes (``0a`` + the key's length + the key + ``12``) and its kind (``i`` or ``f``)."""
    prefixes = tuple(b"\x0a" + varint_bytes(len(key)) + key + b"\x12" for key in (name.encode("utf-8") for name, _ in order))
    return prefixes, b"".join(b"f" if dtype == "float32" else b"i" for _, dtype in order)


def _native_values(name: str, dtype: str, array: np.ndarray, n: int) -> np.ndarray:
    """One feature as ``_wire.serialize_examples`` takes it: C-contiguous int32 or int64 (every
    integer dtype whose values it holds exactly), or float32; checked as the numpy encoder checks."""
    _check_feature(name, dtype, array, n)
    if dtype == "float32":
        return _float32_values(array, name)
    kind, size = array.dtype.kind, array.dtype.itemsize
    if kind == "b" or (kind in "iu" and size < 4) or (kind == "i" and size == 4):
        return np.ascontiguousarray(array, dtype=np.int32)
    if kind not in "iu":
        raise TypeError(f"feature {name!r}: int64 feature needs an integer array, got dtype {array.dtype}")
    _check_fits_int64(array, name)
    return np.ascontiguousarray(array, dtype=np.int64)  # uint32, and uint64 below 2**63: exact


def _batch_arrays(features: Mapping[str, np.ndarray], order: Sequence[Tuple[str, str]]) -> Tuple[List[str], Dict[str, np.ndarray], int]:
    """The batch's arrays of ``order``'s names and its row count, checked as every encoder needs."""
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
    return names, arrays, n


def serialize_shard_runs(features: Mapping[str, np.ndarray], order: Sequence[Tuple[str, str]],
                         shard_of_row: np.ndarray, num_shards: int) -> Optional[List[bytes]]:
    """For each shard in ``range(num_shards)``, the records of :func:`serialize_examples` of the
    batch rows ``r`` with ``shard_of_row[r] == shard``, in batch order, each in its TFRecord frame
    (the bytes of ``tfrecord.frame_records``), as one ``bytes`` (``b""`` for a shard without rows):
    a worker's hottest step, made by the C accelerator in one pass without an object per record,
    reading the rows in batch order and writing each frame into its shard's bytes (one shard's rows
    at a time jumped from row to row: a cold MSL-512 batch of 3,544 rows 10.3 against 6.9 ms). A
    :class:`~bert_data.format.row_runs.MaskRuns` mask is written from its runs. None
    without the accelerator (or with more features than it takes): the caller then frames
    :func:`serialize_examples`' records itself, since this module does not import the framing one."""
    native = wire()
    if native is None or len(order) > NATIVE_MAX_FEATURES:
        return None
    runs = [runs_of(features.get(name)) if dtype == "int64" else None for name, dtype in order]  # row_runs.py
    shaped = {name: features[name] if run is None else np.empty((len(run), 0), np.int32)  # (shape only: never made)
              for (name, _), run in zip(order, runs) if name in features}
    names, arrays, n = _batch_arrays(shaped, order)
    shard_of_row = np.ascontiguousarray(shard_of_row, dtype=np.int64)
    if shard_of_row.shape != (n,):
        raise ValueError(f"shard_of_row: {shard_of_row.shape} for a batch of {n} rows")
    if n == 0:
        return [b""] * num_shards
    prefixes, kinds = _entry_prefixes(tuple(map(tuple, order)))
    values = tuple(_native_values(name, dtype, arrays[name], n) if run is None else run
                   for (name, dtype), run in zip(order, runs))
    kinds = bytes(kind if run is None else ord("r") for kind, run in zip(kinds, runs))
    return native.serialize_shard_runs(values, prefixes, kinds, shard_of_row, num_shards)


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
    names, arrays, n = _batch_arrays(features, order)
    if n == 0:
        return []
    native = wire()
    if native is not None and len(names) <= NATIVE_MAX_FEATURES:  # the same bytes, one C loop per record
        values = tuple(_native_values(name, dtype, arrays[name], n) for name, dtype in order)
        return native.serialize_examples(values, *_entry_prefixes(tuple(map(tuple, order))))

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
