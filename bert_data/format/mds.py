"""``--output_format mds``: MosaicML streaming's MDS, written by its own ``MDSWriter``.

Layout of an output directory (names: :mod:`bert_data.output.naming`)::

    {name}-{i}.{j:05d}.mds    piece j of shard i: an MDS file of at most SIZE_LIMIT bytes
    index.json                MDS's index: every piece of every shard, in shard order
    data_params.json          the manifest (instances_per_shard: the records of each piece)

Why one index over all shards rather than one MDS dataset directory per shard:
``streaming.StreamingDataset(local=DIR)`` then reads the whole run as one dataset, as a glob
reads the TFRecords, and every record file stays a plain file beside the manifest (what the
readers, ``--overwrite`` and ``inspect_tfrecords`` expect). A shard is cut into pieces because an
MDS file holds uint32 offsets (at most 4 GiB) and ``MDSWriter`` holds a piece in memory until it
is written: :data:`SIZE_LIMIT` bounds both. The cut is where ``MDSWriter`` makes it (by the
bytes of the samples), so the pieces are a function of the rows.

Rows are the unpadded columns of :mod:`bert_data.format.columns` (``input_ids``, ``token_type_ids``,
``masked_lm_positions``, ``masked_lm_ids`` as ``ndarray`` columns, ``next_sentence_label`` a scalar),
uncompressed (a compressed MDS file is unpacked by the reader beside it, into the dataset's
directory), each piece's xxh64 in the index (a function of its bytes only; inspect checks every
piece's size and hash against it, as it checks TFRecords' CRCs). ``streaming`` is imported only
here: :func:`streaming_base` (readers), :func:`mds_writer_class` (the writer's own modules: no
transformers, 1.3 CPU-s less a run), both from :mod:`bert_data.format.streaming_import`.

Speed (issue 28): ``MDSWriter.write`` of one row is ~50 us of Python, 5x the rest of a run, so the
workers encode the samples (:func:`frame_samples`: the C accelerator's ``mds_shard_frames`` from the
padded rows, else whole-batch numpy, :func:`encode_samples`, in streaming's own encodings and
column list, :func:`writer_columns`) into TFRecord frames; at publish the shard's writer reads the
frames a window at a time (CRCs checked: :class:`FramedFile`) for the samples' sizes, which cut
the pieces and make each header, then reads each piece's frames again and writes header and
samples a window at a time (:class:`PieceAppender`, :class:`GatheredPiece`: no piece is held in
memory; ``MDSWriter``'s ``encode_joint_shard`` copies a piece twice); the ``MDSWriter``'s
``flush_shard`` names, hashes, writes and lists every piece, its ``finish`` the index.
``tests/test_output_formats.py`` holds pieces and index byte for byte to ``MDSWriter.write`` row
by row, ``tests/test_worker_encoding.py`` the C path to numpy.
"""

from __future__ import annotations

import copy
import errno
import functools
import json
import os
import shutil
import stat
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..output.naming import MDS_INDEX_NAME, MDS_SUFFIX
from ..storage import write_in_steps
from .columns import (
    KIND_OF_COLUMN, ONE_KIND, ColumnBatch, ShardSpec, columns_of, from_columns, native_column, native_counts, rows_to_batch,
    shard_runs,
)
from .framed import FramedFile
from .streaming_import import mds_writer_class, streaming_base
from .tfrecord import frame_records

PIECE_HASH = "xxh64"  # each piece's hash in index.json (streaming's own hashing; xxhash is installed beside it)
SIZE_LIMIT = 1 << 26  # bytes of one MDS piece (streaming's default; an MDS file must stay below 4 GiB)


def mds_columns(layout: str) -> Dict[str, str]:
    """MDS column encodings of a layout's rows."""
    return {c.name: c.dtype if c.kind == ONE_KIND else f"ndarray:{c.dtype}" for c in columns_of(layout)}


@dataclass(frozen=True)
class WriterColumns:
    """The column list an ``MDSWriter`` of a layout's columns keeps (``streaming``'s writer sorts
    them by name; a scalar's size is its dtype's, an ``ndarray`` column's None: variable), made
    without importing streaming, for the workers (the tests hold it to a real writer's)."""

    column_names: Tuple[str, ...]
    column_encodings: Tuple[str, ...]
    column_sizes: Tuple[Optional[int], ...]


@functools.lru_cache(maxsize=None)
def writer_columns(layout: str) -> WriterColumns:
    columns = mds_columns(layout)
    names = tuple(sorted(columns))
    sizes = tuple(None if columns[n].startswith("ndarray:") else np.dtype(columns[n]).itemsize for n in names)
    return WriterColumns(names, tuple(columns[n] for n in names), sizes)


def frame_samples(features: Mapping[str, np.ndarray], shard_of_row: np.ndarray, layout: str
                  ) -> List[Tuple[int, bytes, int]]:
    """A batch's padded rows (row i for shard ``shard_of_row[i]``) as MDS samples, one run of
    TFRecord frames per shard present, in shard order: ``(shard, frames, rows)``. The workers
    encode the samples (the C accelerator's ``mds_shard_frames`` from the padded rows; else
    :func:`encode_samples`, the same bytes); at publish the writer only appends them."""
    return shard_runs(features, shard_of_row, layout, _native_frames,
                      lambda batch: frame_records([bytes(s) for s in encode_samples(writer_columns(layout), batch)]))


def _native_frames(native, features: Mapping[str, np.ndarray], shards, layout: str):
    """:func:`frame_samples` by the C accelerator's ``mds_shard_frames`` (the same bytes; the rows
    read in batch order, each shard's frames made at once); None where a row does not fit."""
    counts = native_counts(native, features)
    if counts is None:
        return None
    by_name = {c.name: c for c in columns_of(layout)}
    spec = [native_column(features, by_name[name], counts) for name in writer_columns(layout).column_names]
    shard_of_row = np.empty(sum(len(rows) for _, rows in shards), np.int64)
    for shard, rows in shards:
        shard_of_row[rows] = shard
    by_shard = native.mds_shard_frames(spec, shard_of_row, shards[-1][0] + 1)
    return None if by_shard is None else [(shard, by_shard[shard], len(rows)) for shard, rows in shards]


def piece_name(shard_name: str, piece: int) -> str:
    """``examples-1.mds``, 0 -> ``examples-1.00000.mds``."""
    return f"{shard_name[: -len(MDS_SUFFIX)]}.{piece:05d}{MDS_SUFFIX}"


class ShardFileWriter:
    """One shard's MDS pieces in ``directory`` (the container's ``open_shard``): written by
    ``MDSWriter`` into a directory of its own, then renamed to the shard's piece names."""

    def __init__(self, directory: str, shard_name: str, spec: ShardSpec) -> None:
        self.directory, self.name, self.spec = directory, shard_name, spec
        self._scratch = os.path.join(directory, f".{shard_name}.mdswriter")
        shutil.rmtree(self._scratch, ignore_errors=True)
        self._writer = piece_writer(self._scratch, spec.layout, SIZE_LIMIT)
        self._pieces = PieceAppender(self._writer)
        self._framed: List[FramedFile] = []  # the partial shards its pieces read (closed with the writer)
        self.sidecar_entries: List[Dict] = []
        self._written: List[str] = []  # piece names renamed into directory (abort removes them)

    def write_partial(self, source: str, stopped: Callable[[], bool] = lambda: False) -> None:
        """The assembled shard ``source``: TFRecord frames of samples the workers encoded
        (:func:`frame_samples`), every CRC checked, appended to the ``MDSWriter``'s pieces a window
        at a time (:class:`PieceAppender`, :class:`FramedFile`); the writer hashes and writes each
        piece. ``stopped()`` is asked between windows (~1 MB: the run is stopping, give up)."""
        framed = FramedFile(source)
        self._framed.append(framed)
        for frames in framed.frames(stopped):
            self._pieces.append_framed(framed, frames.starts, frames.lengths)

    def close(self) -> List[Tuple[str, int]]:
        self._pieces.finish()
        self._close_framed()
        with open(os.path.join(self._scratch, MDS_INDEX_NAME), encoding="utf-8") as handle:
            entries = json.load(handle)["shards"]
        out = []
        for piece, entry in enumerate(entries):
            name = piece_name(self.name, piece)
            os.replace(os.path.join(self._scratch, entry["raw_data"]["basename"]), os.path.join(self.directory, name))
            self._written.append(name)
            entry["raw_data"]["basename"] = name
            out.append((name, int(entry["samples"])))
        shutil.rmtree(self._scratch, ignore_errors=True)
        self.sidecar_entries = entries
        return out

    def _close_framed(self) -> None:
        while self._framed:
            self._framed.pop().close()

    def abort(self) -> None:
        try:
            self._close_framed()
            # The writer's jobs are its local "uploads" of pieces written (no-ops: out is a local
            # directory): let them end. Its cancel_future_jobs() would cancel a queued one, whose
            # done-callback then logs a CancelledError traceback.
            self._writer.executor.shutdown(wait=True)
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)
            for name in self._written:
                path = os.path.join(self.directory, name)
                if os.path.exists(path):
                    os.unlink(path)


def encode_samples(writer, batch: ColumnBatch) -> List[memoryview]:
    """``writer.encode_sample(row)`` of every row of ``batch``, made by whole-batch numpy rather
    than row by row (``MDSWriter.write`` of one row costs ~50 us of Python: 5x the rest of a run).

    The bytes follow the MDS writer's own column list (``writer.column_names``, sorted, with their
    ``column_encodings`` and ``column_sizes``) and its encodings' layout (``streaming``'s
    ``mds/encodings.py``): a sample is the uint32 byte size of each variable-size column, then every
    column's bytes in that order; an ``ndarray:<dtype>`` column of a 1-D array is one byte
    ``ndim << 2 | shape dtype`` (uint8, uint16 or uint32, the smallest that holds the length), the
    length in that dtype, then the values; a scalar column its value's bytes. Empty arrays are
    refused as ``NDArray.encode`` refuses them. ``tests/test_output_formats.py`` checks the result
    against ``MDSWriter.write`` row by row, byte for byte."""
    n = batch.rows
    parts: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (bytes, start of each row's part, its length)
    variable: List[np.ndarray] = []
    for name, encoding, size in zip(writer.column_names, writer.column_encodings, writer.column_sizes):
        values = batch.values[name]
        if size is not None:  # a scalar column: a fixed number of bytes a row
            raw = np.ascontiguousarray(values.astype(np.dtype(encoding), copy=False)).view(np.uint8)
            parts.append((raw, np.arange(n, dtype=np.int64) * size, np.full(n, size, np.int64)))
            continue
        dtype = np.dtype(encoding.split(":", 1)[1])
        if values.dtype != dtype:
            raise ValueError(f"Wrong dtype: expected {dtype.name}, got {values.dtype.name}.")
        lengths = batch.lengths[KIND_OF_COLUMN[name]].astype(np.int64)
        if n and lengths.min() <= 0:
            raise ValueError("Attempting to encode a numpy array with 0 elements.")
        parts.append(_shape_header(lengths))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * dtype.itemsize
        parts.append((values.view(np.uint8), starts, lengths * dtype.itemsize))
        variable.append(parts[-2][2] + parts[-1][2])
    head = np.stack(variable, axis=1).astype("<u4") if variable else np.zeros((n, 0), "<u4")
    parts.insert(0, (head.view(np.uint8).reshape(-1), np.arange(n, dtype=np.int64) * 4 * len(variable),
                     np.full(n, 4 * len(variable), np.int64)))
    return _gather_rows(parts, n)


def _shape_header(lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``ndim << 2 | shape dtype`` byte and the shape of 1-D arrays of ``lengths`` (NDArray's
    ``_rightsize_shape_dtype``: uint8 below 256, uint16 below 65536, else uint32), as one part."""
    code = np.where(lengths < 1 << 8, 0, np.where(lengths < 1 << 16, 1, 2))
    width = 1 + (1 << code)  # the byte, then the length in 1, 2 or 4 bytes
    table = np.zeros((len(lengths), 5), np.uint8)
    table[:, 0] = (1 << 2) | code
    table[:, 1:] = lengths.astype("<u4")[:, None].view(np.uint8)
    return table.reshape(-1), np.arange(len(lengths), dtype=np.int64) * 5, width


def _gather_rows(parts: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]], n: int) -> List[memoryview]:
    """Each row's parts back to back (part ``p`` of row ``r``: ``length[r]`` bytes of ``parts[p]``'s
    bytes from ``start[r]``), as one buffer cut into a memoryview per row."""
    base = np.cumsum([0] + [len(raw) for raw, _, _ in parts])[:-1]
    source = np.concatenate([raw for raw, _, _ in parts]) if parts else np.zeros(0, np.uint8)
    starts = np.stack([b + start for b, (_, start, _) in zip(base, parts)], axis=1).reshape(-1)
    lengths = np.stack([length for _, _, length in parts], axis=1).reshape(-1)
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - lengths), lengths)
    data = memoryview(source[index])
    row_ends = ends.reshape(n, -1)[:, -1].tolist() if n else []
    return [data[a:b] for a, b in zip([0] + row_ends[:-1], row_ends)]


@functools.lru_cache(maxsize=None)
def _piece_writer_class(writer_class):
    """``writer_class`` (streaming's ``MDSWriter``) whose ``encode_joint_shard`` returns the piece
    a :class:`PieceAppender` made (a :class:`GatheredPiece`); everything else (naming, the index
    entry, the index) is the writer's own ``flush_shard`` and ``finish``, and so is writing the
    file (``_process_file``: hash, then write) but for its bytes, which come a window at a time,
    hashed as they are written, each write() at most 1 MB."""

    class PieceWriter(writer_class):
        piece: Optional["GatheredPiece"] = None

        def encode_joint_shard(self):
            return self.piece

        def _process_file(self, raw_data, raw_basename, zip_basename):  # (the writer's, a window at a time)
            if zip_basename or list(self.hashes) != [PIECE_HASH]:  # (never here: compression=None, hashes=[xxh64])
                return super()._process_file(raw_data.tobytes(), raw_basename, zip_basename)
            import xxhash  # (streaming's own xxh64: hashing.get_hash is xxhash.xxh64(data).hexdigest())

            digest, size = xxhash.xxh64(), 0
            with open(os.path.join(self.local, raw_basename), "wb") as out:
                for chunk in raw_data.chunks():
                    digest.update(chunk)
                    write_in_steps(out, chunk)
                    size += len(chunk)
            return {"basename": raw_basename, "bytes": size, "hashes": {PIECE_HASH: digest.hexdigest()}}, None

    PieceWriter.__name__ = PieceWriter.__qualname__ = f"Piece{writer_class.__name__}"
    return PieceWriter


def piece_writer(out: str, layout: str, size_limit: Optional[int], writer_class=None):
    """An ``MDSWriter`` (``writer_class``, default :func:`mds_writer_class`) of ``layout``'s columns
    into ``out``, cutting pieces at ``size_limit`` bytes (None: never), for a :class:`PieceAppender`."""
    return _piece_writer_class(writer_class or mds_writer_class())(
        out=out, columns=mds_columns(layout), compression=None, hashes=[PIECE_HASH], size_limit=size_limit, max_workers=1)


class PieceAppender:
    """Encoded samples appended to an MDS writer (:func:`piece_writer`) as ``writer.write(row)``
    would append them, a window of frames at a time, each piece gathered once when it is cut.

    ``MDSWriter.write`` of one row costs ~50 us of Python, and its ``encode_joint_shard`` copies a
    64 MB piece twice into fresh memory (a join, then the header before it). Here a piece is only
    the runs of frames of a partial shard it holds (:meth:`append_framed`)
    until it is cut (where ``write`` cuts it: ``streaming/base/format/base/writer.py``, the sample
    that does not fit the size limit starts the next piece); then its header (the count, the
    uint32 offsets, the writer's ``config_data``: ``encode_joint_shard`` of
    ``streaming/base/format/mds/writer.py``) and its samples are written a window at a time
    (:class:`GatheredPiece`) by the writer's own ``flush_shard``, which names, hashes and lists
    it. No piece is ever whole in memory: a 1 MB window per thread, used again for every piece
    (fresh memory is what costs here: 2.4 ms per MB of first touch in this VM).
    ``tests/test_output_formats.py`` holds the pieces and index to ``MDSWriter.write``'s, byte for byte."""

    def __init__(self, writer) -> None:
        self.writer = writer
        self._runs: List[Tuple[FramedFile, np.ndarray, np.ndarray]] = []  # (source, starts, lengths) of the piece

    def append_framed(self, source: FramedFile, starts: np.ndarray, lengths: np.ndarray) -> None:
        """The payloads of consecutive frames of ``source`` (their offsets in the file), in order:
        read again, and checked again, when the piece is written."""
        writer = self.writer
        starts, lengths = starts.astype(np.int64, copy=False), lengths.astype(np.int64, copy=False)
        sizes = lengths + writer.extra_bytes_per_sample
        i, n = 0, len(lengths)
        while i < n:
            fit = n - i
            if writer.size_limit:
                room = writer.size_limit - writer.new_shard_size
                fit = int(np.searchsorted(np.cumsum(sizes[i:]), room, side="right"))
            self._take(source, starts[i:i + fit], lengths[i:i + fit], int(sizes[i:i + fit].sum()))
            i += fit
            if i < n:  # sample i does not fit: the piece is written and sample i starts the next one
                self.flush()
                self._take(source, starts[i:i + 1], lengths[i:i + 1], int(sizes[i]))
                i += 1

    def _take(self, source: FramedFile, starts: np.ndarray, lengths: np.ndarray, size: int) -> None:
        if len(lengths):
            self._runs.append((source, starts, lengths))
            self.writer.new_shard_size += size

    def flush(self) -> None:
        """The samples appended since the last piece as the writer's next piece (even none: where
        ``write`` flushes an empty piece, before a first sample larger than the size limit)."""
        writer = self.writer
        sizes = np.concatenate([lengths for _, _, lengths in self._runs]) if self._runs else np.zeros(0, np.int64)
        count = len(sizes)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)  # as encode_joint_shard makes them
        offsets += 4 + 4 * (count + 1) + len(writer.config_data)
        header = np.uint32(count).tobytes() + offsets.tobytes() + writer.config_data
        writer.piece = GatheredPiece(header, self._runs)
        writer.new_samples = [None] * count  # (flush_shard lists len(new_samples) as the piece's samples)
        try:
            writer.flush_shard()
        finally:
            writer.piece = None
        writer._reset_cache()
        self._runs = []

    def finish(self) -> None:
        """The last piece (if it holds samples), then the writer's index and its end."""
        if self._runs:
            self.flush()
        self.writer.finish()


class GatheredPiece:
    """An MDS piece not held in memory: its header and the runs of samples it gathers
    (:class:`PieceAppender`), handed out a window at a time by :meth:`chunks` (each chunk is valid
    until the next is asked for)."""

    def __init__(self, header: bytes, runs: Sequence[Tuple[FramedFile, np.ndarray, np.ndarray]]) -> None:
        self.header, self.runs = header, runs

    def chunks(self) -> Iterator[memoryview]:
        yield memoryview(self.header)
        for source, starts, lengths in self.runs:
            yield from source.gather(starts, lengths)

    def tobytes(self) -> bytes:
        return b"".join([bytes(chunk) for chunk in self.chunks()])


def index_bytes(entries: Sequence[Sequence[Dict]]) -> bytes:
    """``index.json`` over every piece of every shard (each shard writer's ``sidecar_entries``,
    in shard order), as ``MDSWriter`` writes one (version 2, keys sorted)."""
    shards = [entry for shard in entries for entry in shard]
    return json.dumps({"shards": shards, "version": 2}, sort_keys=True).encode("utf-8")


def read_index(directory: str) -> List[Dict]:
    """The pieces ``index.json`` lists, in order."""
    with open(os.path.join(directory, MDS_INDEX_NAME), encoding="utf-8") as handle:
        data = json.load(handle)
    return list(data["shards"])


def index_entry(path: str) -> Optional[Dict]:
    """The ``index.json`` entry of the piece ``path`` (None when its directory's index lacks it)."""
    directory, name = os.path.split(path)
    index_path = os.path.join(directory or ".", MDS_INDEX_NAME)
    index = os.stat(index_path)
    if not stat.S_ISREG(index.st_mode):  # a FIFO would block the reader forever (a directory: an error anyway)
        raise OSError(errno.EINVAL, f"{index_path} is not a regular file")
    entry = _entries_by_name(directory or ".", index.st_mtime_ns, index.st_size).get(name)
    return copy.deepcopy(entry)  # the cached index stays as read, whatever a reader does with its copy


@functools.lru_cache(maxsize=8)
def _entries_by_name(directory: str, mtime_ns: int, size: int) -> Dict[str, Dict]:
    """A directory's index by piece name, read once per version of the file (inspect asks for
    every piece: re-reading the whole index each time grew with the square of the pieces)."""
    return {entry.get("raw_data", {}).get("basename"): entry for entry in read_index(directory)}


def check_piece(path: str, entry: Mapping) -> None:
    """The piece at ``path`` has the size and (when the index has one) the xxh64 its
    ``index.json`` entry records; else ValueError naming what differs."""
    raw = entry.get("raw_data") or {}
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size  # (before reading it whole: a huge sparse file is refused unread)
        if raw.get("bytes") is not None and size != raw["bytes"]:
            raise ValueError(f"{size} bytes where {MDS_INDEX_NAME} lists {raw['bytes']}: the file is damaged or replaced")
        data = handle.read()
    expected = (raw.get("hashes") or {}).get(PIECE_HASH)
    if expected is not None:
        from streaming.base.hashing import get_hash

        if get_hash(PIECE_HASH, data) != expected:
            raise ValueError(f"its {PIECE_HASH} is not the one {MDS_INDEX_NAME} lists: the file is damaged")


def read_column_batches(path: str, layout: str, batch_rows: int = 4096) -> Iterator[ColumnBatch]:
    """The rows of one MDS piece through streaming's own MDS reader, as column batches (the
    piece's size and hash checked against the index first)."""
    entry = index_entry(path)
    if entry is None:
        raise ValueError(f"{path} is not listed in {os.path.join(os.path.dirname(path), MDS_INDEX_NAME)}")
    streaming_base()  # makes streaming.base importable (see there)
    check_piece(path, entry)
    from streaming.base.format import reader_from_json

    reader = reader_from_json(os.path.dirname(path) or ".", None, entry)
    for start in range(0, reader.samples, batch_rows):
        rows = [reader.get_item(i) for i in range(start, min(start + batch_rows, reader.samples))]
        yield rows_to_batch(rows, layout)


def read_feature_batches(path: str, spec: ShardSpec) -> Iterator[Dict[str, np.ndarray]]:
    """The rows of an MDS piece as the padded arrays the TFRecord decoding of the same rows gives."""
    for batch in read_column_batches(path, spec.layout):
        yield from_columns(batch, spec.layout, spec.max_seq_length, spec.max_predictions_per_seq)
