"""Reading whole batches of records at once, for ``inspect_tfrecords --stats``
(:mod:`bert_data.inspection.stats`): framing and decoding without per-record Python. (Over 600
lines on purpose: one concern, the batch decoder, whose numpy reference and C dispatch must be
read side by side; the pieces are not useful apart.)

* :func:`iter_record_batches` is :func:`~bert_data.format.tfrecord.iter_records` for a whole
  batch at once: frames cut apart by a loop that does little more than follow the lengths.
* :func:`decode_examples` is :func:`~bert_data.format.example_wire.parse_example` for a whole
  batch of records of one known layout, by whole-batch numpy code. A record the batch decoder
  cannot vouch for is left to ``parse_example``, so both read every record the same way (tests
  check it on random and damaged records).

Both use the optional C accelerator ``bert_data.format._wire`` (built by ``setup.py`` from
``_wire.c`` when a C compiler is there) when it is built and of
:data:`bert_data.format.native.WIRE_API`, else their numpy implementations here, which give the
same answers. ``_wire`` is None here when the accelerator is not used;
:mod:`bert_data.format.checks` (``clean_batch``) looks at this module's ``_wire`` too, so setting
it to None selects the numpy path of every reader (the writers' switch is ``native._wire``).

Built on :mod:`bert_data.format.tfrecord` (CRCs, frame headers) and
:mod:`bert_data.format.example_wire` (varints); neither imports this module.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from bert_data.errors import RecordFormatError

from . import native
from .example_wire import varint_bytes
from .tfrecord import (
    MASK_DELTA,
    U64,
    crc32c,
    iter_records,
    looks_like_frame_header,
    masked_crc32c,
    open_gzip,
    read_exact,
    tfrecord_compression,
)

__all__ = [
    "RecordBatch",
    "iter_record_batches",
    "decode_examples",
]

# The optional C accelerator of the batch loops below (bound, and a stale build refused, by
# native.py, where its API constant WIRE_API lives); None: the numpy implementations, same answers
_wire = native.wire()


def wire():
    """The C accelerator module, or None (numpy is used): read at call time, so a test that
    sets this module's ``_wire`` to None runs every caller's numpy path."""
    return _wire


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


def iter_record_batches(path: Union[str, "os.PathLike[str]"], chunk_bytes: int = READ_CHUNK_BYTES,
                        opener: Optional[Callable[[str], BinaryIO]] = None) -> Iterator[RecordBatch]:
    """The records of a TFRecord file (plain or GZIP) in batches of about ``chunk_bytes``, both
    CRCs of every frame verified: :func:`iter_records`' contract, minus its per-record generator.

    The file is read in large chunks and the frames of each chunk are cut apart by
    :func:`_cut_frames` (a loop over the lengths, one C CRC call per payload, the rest whole-batch
    numpy). At the first frame
    that is not whole and valid (truncated file, bad CRC, corrupt gzip stream) the batch reader
    hands over to :func:`iter_records` from the start of the file, skipping the records already
    yielded: it yields whatever more that reader accepts and raises its exact
    :class:`RecordFormatError` (message and offset), so a damaged file reads exactly as before.
    ``opener(name)`` opens the file when given (e.g. :func:`bert_data.storage.open_read` for URLs).
    """
    name = os.fsdecode(path)
    try:
        handle = opener(name) if opener is not None else open_regular(name)
    except OSError as e:
        raise RecordFormatError(f"{name}: cannot open TFRecord file: {e.strerror or e}") from e
    yielded = 0
    with handle:
        compressed = tfrecord_compression(read_exact(handle, 12)) == "gzip"
        handle.seek(0)
        stream: BinaryIO = open_gzip(handle) if compressed else handle
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
    yield from _batches_after(name, yielded, chunk_bytes, opener)


class _NamedStream:
    """A stream that :func:`iter_records` names ``name`` in its errors (URL handles have no name)."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream, self.name = stream, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.stream, attr)


class _BadFrame(Exception):
    """The frame at the current offset is not whole and valid (the reader hands over)."""


def open_regular(name: str) -> BinaryIO:
    """``name`` opened for reading without waiting, and only if it is a regular file: a file that
    became a FIFO after a reader listed it would otherwise block the open for ever."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
            need = max(need, 16 + U64.unpack_from(pending, 0)[0] - len(pending))
        chunk = read_exact(stream, need)
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


def cut_frames(data) -> Tuple[np.ndarray, np.ndarray, int, bool]:
    """(payload starts, payload lengths, end of the last whole valid frame, whether a bad frame
    was met) of the frames at the start of ``data`` (any contiguous buffer), both CRCs checked."""
    return _cut_frames(data if _wire is not None else bytes(data), {})


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
    unpack64 = U64.unpack_from
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
    if pos + 12 <= size and not looks_like_frame_header(data[pos : pos + 12]):
        bad = True  # the incomplete frame at the end is damaged: do not read on for it
    u8 = np.frombuffer(data, np.uint8)
    heads = np.asarray(frames, np.int64)
    starts = heads + 12
    lengths = np.diff(heads, append=pos) - 16
    header_crcs = _gather4(u8, heads + 8)
    distinct, which = np.unique(lengths, return_inverse=True)
    for length in distinct.tolist():
        if length not in valid_crcs:
            valid_crcs[length] = masked_crc32c(U64.pack(length))
    good = header_crcs == np.array([valid_crcs[v] for v in distinct.tolist()], np.uint32)[which.reshape(-1)]
    if len(frames):
        computed = np.asarray(crcs, np.uint64)
        masked = (((computed >> np.uint64(15)) | (computed << np.uint64(17))) + np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)
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


def _batches_after(name: str, skip: int, chunk_bytes: int,
                   opener: Optional[Callable[[str], BinaryIO]] = None) -> Iterator[RecordBatch]:
    """The records after the first ``skip`` as :func:`iter_records` reads them, in batches; then
    its error. Only reached for a damaged file."""
    parts: List[bytes] = []
    first = skip
    size = offset = 0
    error: Optional[RecordFormatError] = None
    source: Any = _NamedStream(opener(name), name) if opener is not None else name
    try:
        for index, payload in enumerate(iter_records(source)):
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
    finally:
        if opener is not None:
            source.close()
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
    (values below 2**63: the int64 :func:`~bert_data.format.example_wire.parse_example` gives);
    the others are left to it.
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
    (sorted names: :func:`~bert_data.format.example_wire.serialize_examples`' and TensorFlow's
    deterministic order). A record is decoded when its bytes are exactly that layout as those
    writers lay it out (see :mod:`bert_data.format.example_wire`'s docstring): one Features
    message, the entries in that order with those keys, each a packed list of exactly ``length``
    values, every nested length consistent with the next. Every record that is decoded is then
    one :func:`~bert_data.format.example_wire.parse_example` would read to the same arrays;
    every other one (another layout or length, another valid encoding such as unpacked values,
    or malformed bytes) is left out, for the caller to hand to ``parse_example``.

    Returns ``(name -> (n_decoded, length) array, decoded)``: the decoded rows, in order, and
    the boolean mask of the records decoded. float32 lists are float32 arrays; int64 lists are
    int64 arrays, or with ``small_ints`` int32 arrays whenever all of a feature's values in the
    batch are below 2**28 (half the memory traffic for a caller that only compares values).
    """
    entries = [
        (b"\x0a" + varint_bytes(len(name.encode("utf-8"))) + name.encode("utf-8") + b"\x12",
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


class _Head(io.RawIOBase):
    """The first ``size`` bytes of the file at ``path``, seekable: what a resume keeps of a partial
    shard (bytes after them, made by a group never journaled, are cut off)."""

    def __init__(self, path: str, size: int) -> None:
        super().__init__()
        self._file = open(path, "rb")
        self._size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._size - self._file.tell()
        if left <= 0:
            return 0
        view = memoryview(b).cast("B")
        return self._file.readinto(view[:left]) or 0

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            return self._file.seek(self._size + offset)
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


def check_head(path: str, size: int) -> int:
    """The records in the first ``size`` bytes of the TFRecord file at ``path`` (plain or GZIP
    members) are whole and both CRCs of each hold; returns how many there are, else raises the
    :class:`RecordFormatError` that names the first that does not (and where). A resume checks
    what it keeps of every partial shard so (:mod:`bert_data.output.journal`): a byte changed
    since the run wrote it would otherwise be published, and read only by a trainer."""
    count = 0
    if size:
        for batch in iter_record_batches(path, opener=lambda name: io.BufferedReader(_Head(name, size))):
            count += len(batch)
    return count
