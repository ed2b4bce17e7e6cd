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
transformers, 1.3 CPU-s less a run).

Speed (issue 28): ``MDSWriter.write`` of one row is ~50 us of Python, 5x the rest of a run, so the
workers encode the samples (:func:`frame_samples`: the C accelerator's ``mds_frames`` from the
padded rows, else whole-batch numpy, :func:`encode_samples`, in streaming's own encodings and
column list, :func:`writer_columns`) into TFRecord frames; at publish the shard's writer reads the
frames (CRCs checked) and copies the samples once into their piece (:class:`PieceAppender`;
``MDSWriter``'s ``encode_joint_shard`` copies a piece twice), header before them; the
``MDSWriter``'s ``flush_shard`` names, hashes, writes and lists every piece, its ``finish`` the
index. ``tests/test_output_formats.py`` holds pieces and index byte for byte to ``MDSWriter.write``
row by row, ``tests/test_worker_encoding.py`` the C path to numpy.
"""

from __future__ import annotations

import copy
import errno
import functools
import importlib.util
import json
import os
import shutil
import stat
import sys
import threading
import types
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..output.naming import MDS_INDEX_NAME, MDS_SUFFIX
from ..storage import write_in_steps
from . import native
from .batch_decode import iter_record_batches
from .columns import (
    KIND_OF_COLUMN, ONE_KIND, ColumnBatch, ShardSpec, columns_of, from_columns, native_column, native_counts, rows_to_batch,
    shard_runs,
)
from .tfrecord import frame_records

PIECE_HASH = "xxh64"  # each piece's hash in index.json (streaming's own hashing; xxhash is installed beside it)
SIZE_LIMIT = 1 << 26  # bytes of one MDS piece (streaming's default; an MDS file must stay below 4 GiB)


_IMPORT_LOCK = threading.Lock()


def streaming_base():
    """``streaming.base`` (MDSWriter, StreamingDataset, the MDS reader).

    ``import streaming`` also imports its vision and text datasets, hence torchvision, which
    fails where torchvision is missing or does not match the installed torch (a CPU torch with
    PyPI's CUDA torchvision, say) although nothing here needs it. When that import fails for that reason,
    the package's ``base`` is imported without the package's ``__init__`` (the same code)."""
    with _IMPORT_LOCK:
        base = _import_streaming_base()
        _link_submodules()
        return base


def _import_streaming_base():
    try:
        import streaming.base as base  # noqa: F401

        return base
    except ImportError as exc:
        if (exc.name or "streaming").split(".")[0] == "streaming":
            raise  # streaming itself is not installed
    except Exception:  # noqa: BLE001 - torchvision's own import failing (RuntimeError), not streaming's
        pass
    spec = importlib.util.find_spec("streaming")
    package = types.ModuleType("streaming")
    package.__path__ = list(spec.submodule_search_locations)  # type: ignore[union-attr]
    package.__spec__ = spec
    for name in [m for m in sys.modules if m == "streaming" or m.startswith("streaming.")]:
        del sys.modules[name]
    sys.modules["streaming"] = package
    import streaming.base as base

    return base


_WRITER_CLASS = None  # MDSWriter as imported by mds_writer_class


def mds_writer_class():
    """``MDSWriter``, for a run that only writes: imported without the ``__init__`` of ``streaming``
    and ``streaming.base``, which import its datasets and data loader and with them transformers
    (1.3 CPU-s and ~25 MB in a run whose MDS writing costs about as much; the writer's own modules
    need torch only). Its modules stay imported, the two packages do not: a later ``import
    streaming`` (a reader, :func:`streaming_base`) imports them whole, as usual, around those
    modules. When ``streaming.base`` is already imported, its ``MDSWriter`` is the one used."""
    global _WRITER_CLASS
    with _IMPORT_LOCK:
        base = sys.modules.get("streaming.base")
        if base is not None and hasattr(base, "MDSWriter"):
            return base.MDSWriter
        if _WRITER_CLASS is None:
            _WRITER_CLASS = _import_writer_alone()
        return _WRITER_CLASS


def _import_writer_alone():
    if "torch" not in sys.modules:
        before = set(sys.modules)
        try:
            return _import_writer_modules(lazy_torch=True)
        except ImportError:  # another streaming release uses torch at import: its modules go, then with torch
            for name in set(sys.modules) - before:
                if name.split(".")[0] == "streaming":
                    del sys.modules[name]
    return _import_writer_modules(lazy_torch=False)


def _import_writer_modules(lazy_torch: bool):
    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'streaming'", name="streaming")
    packages = {name: sys.modules.get(name) for name in ("streaming", "streaming.base")}
    lazy = {name: _LazyModule(name) for name in _STAND_INS} if lazy_torch else {}
    for name, module in lazy.items():  # each an attribute of its parent (`import torch.distributed as dist` reads it)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(lazy[parent], child, module)
    root = types.ModuleType("streaming")
    root.__path__ = list(spec.submodule_search_locations)
    base = types.ModuleType("streaming.base")
    base.__path__ = [os.path.join(path, "base") for path in root.__path__]
    try:
        sys.modules["streaming"], sys.modules["streaming.base"] = root, base
        sys.modules.update(lazy)
        return importlib.import_module("streaming.base.format.mds.writer").MDSWriter
    finally:  # the two packages as they were (absent); the modules under them stay (upload.py looks itself up)
        for name, module in packages.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name, module in lazy.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]  # a later `import torch` is the real one; the writer's `dist` loads it when used


class _LazyModule(types.ModuleType):
    """A module (``torch``, ``torch.distributed``) that the MDS writer's modules import but that
    is loaded only when one of its attributes is first used. ``streaming.base.util`` imports
    ``torch.distributed`` at its top for functions the writer never calls (index merging): PyTorch
    would cost every MDS run 1.0 CPU-s and ~250 MB of imports. Once the writer is imported the
    stand-ins leave ``sys.modules``; an attribute read then imports the real module and returns
    its attribute (while they still stand in, nothing is read through them)."""

    __stand_in__ = True

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # (__path__, __file__...: what the import machinery asks hasattr() of)
            raise AttributeError(attribute)
        if sys.modules.get(self.__name__) is self:  # still standing in, while the writer's modules load
            kind = _STAND_INS[self.__name__].get(attribute)
            if kind == "annotation":
                return type(attribute, (), {"__module__": self.__name__, "__doc__": "bert_data's stand-in (annotations)"})
            if kind == "function":
                return _forwarding(self.__name__, attribute)
            raise ImportError(f"{self.__name__}.{attribute} is used while the MDS writer's modules load")
        return getattr(importlib.import_module(self.__name__), attribute)


def _forwarding(module: str, name: str):
    """A function that calls ``module.name``, importing the module at its first call."""

    def forward(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


# The torch modules the writer's modules of mosaicml-streaming 0.13 import, and the names they take from
# them as they load: classes only to annotate functions (streaming/base/distributed.py: `from torch
# import Tensor`), functions called only by readers (streaming/base/world.py: `get_worker_info`). Any
# other name read while they load makes the import start over with torch (another release's modules).
_STAND_INS: Dict[str, Dict[str, str]] = {
    "torch": {"Tensor": "annotation"},
    "torch.distributed": {},
    "torch.utils": {},
    "torch.utils.data": {"get_worker_info": "function"},
}


def _link_submodules() -> None:
    """Each imported ``streaming`` module an attribute of its package, as an import makes it: the
    packages imported after :func:`mds_writer_class` did not import the modules it left."""
    for name, module in list(sys.modules.items()):
        parent, _, child = name.rpartition(".")
        if parent.split(".")[0] == "streaming" and parent in sys.modules and not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, module)


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
    encode the samples (the C accelerator's ``mds_frames`` from the padded rows; else
    :func:`encode_samples`, the same bytes); at publish the writer only appends them."""
    return shard_runs(features, shard_of_row, layout, _native_frames,
                      lambda batch: frame_records([bytes(s) for s in encode_samples(writer_columns(layout), batch)]))


def _native_frames(native, features: Mapping[str, np.ndarray], shards, layout: str):
    """:func:`frame_samples` by the C accelerator (the same bytes); None where a row does not fit."""
    counts = native_counts(native, features)
    if counts is None:
        return None
    by_name = {c.name: c for c in columns_of(layout)}
    spec = [native_column(features, by_name[name], counts) for name in writer_columns(layout).column_names]
    runs = []
    for shard, rows in shards:
        frames = native.mds_frames(spec, rows)
        if frames is None:
            return None
        runs.append((shard, frames, len(rows)))
    return runs


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
        self.sidecar_entries: List[Dict] = []
        self._written: List[str] = []  # piece names renamed into directory (abort removes them)

    def write_partial(self, source: str, stopped: Callable[[], bool] = lambda: False) -> None:
        """The assembled shard ``source``: TFRecord frames of samples the workers encoded
        (:func:`frame_samples`), every CRC checked, appended to the ``MDSWriter``'s pieces a batch
        at a time (:class:`PieceAppender`); the writer hashes and writes each piece. ``stopped()``
        is asked between batches (~1 MB: the run is stopping, give up)."""
        for batch in iter_record_batches(source):
            if stopped():
                raise InterruptedError(self.name)
            self._pieces.append(batch.data, batch.starts, batch.lengths)

    def close(self) -> List[Tuple[str, int]]:
        self._pieces.finish()
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

    def abort(self) -> None:
        try:
            self._writer.cancel_future_jobs()
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
    a :class:`PieceAppender` made; everything else (naming, hashing, the index entry, the index)
    is the writer's own ``flush_shard`` and ``finish``, and so is writing the file (``_process_file``)
    but for its write() calls, made at most 1 MB each."""

    class PieceWriter(writer_class):
        piece: Optional[memoryview] = None

        def encode_joint_shard(self):
            return self.piece

        def _process_file(self, raw_data, raw_basename, zip_basename):  # (the writer's, written in steps)
            if zip_basename:
                return super()._process_file(raw_data, raw_basename, zip_basename)
            raw_info = self._hash(raw_data, raw_basename)
            with open(os.path.join(self.local, raw_basename), "wb") as out:
                write_in_steps(out, raw_data)
            return raw_info, None

    PieceWriter.__name__ = PieceWriter.__qualname__ = f"Piece{writer_class.__name__}"
    return PieceWriter


def piece_writer(out: str, layout: str, size_limit: Optional[int], writer_class=None):
    """An ``MDSWriter`` (``writer_class``, default :func:`mds_writer_class`) of ``layout``'s columns
    into ``out``, cutting pieces at ``size_limit`` bytes (None: never), for a :class:`PieceAppender`."""
    return _piece_writer_class(writer_class or mds_writer_class())(
        out=out, columns=mds_columns(layout), compression=None, hashes=[PIECE_HASH], size_limit=size_limit, max_workers=1)


_SPARE = threading.local()  # a finished PieceAppender's buffer, for the next one of its thread


class PieceAppender:
    """Encoded samples appended to an MDS writer (:func:`piece_writer`) as ``writer.write(row)``
    would append them, a batch at a time, each piece made in one copy.

    ``MDSWriter.write`` of one row costs ~50 us of Python, and its ``encode_joint_shard`` copies a
    64 MB piece twice into fresh memory (a join, then the header before it): ~3.5 s/GB at publish.
    Here the samples are copied once, from the frames they were read in, into one buffer kept for
    every piece (and the thread's next shard: its pages are mapped already), after a room for the
    header; when the piece is cut (where ``write`` cuts it: ``streaming/base/format/base/writer.py``,
    the sample that does not fit the size limit starts the next piece) its header (the count, the
    uint32 offsets, the writer's ``config_data``: ``encode_joint_shard`` of
    ``streaming/base/format/mds/writer.py``) goes just before them, and the writer's own
    ``flush_shard`` hashes, writes and lists that view. ``tests/test_output_formats.py`` holds the
    pieces and index to ``MDSWriter.write``'s, byte for byte."""

    HEADER_ROOM = 1 << 20  # bytes kept before the samples for a piece's header: 262,000 samples (a
    # 64 MB piece of ~256-byte samples); a piece with more gets its header by one more copy

    def __init__(self, writer) -> None:
        self.writer = writer
        self._buffer, _SPARE.buffer = getattr(_SPARE, "buffer", None), None  # (a fresh one: ~4 ms of page faults
        self._buffer = np.empty(0, np.uint8) if self._buffer is None else self._buffer  # per 9 MB shard here)
        self._view = memoryview(self._buffer)
        self._used = 0  # bytes of samples in the buffer, from HEADER_ROOM
        self._sizes: List[np.ndarray] = []  # each appended run's sample sizes

    def append(self, data, starts: np.ndarray, lengths: np.ndarray) -> None:
        """Samples ``data[starts[i] : starts[i] + lengths[i]]``, in order."""
        writer, view = self.writer, memoryview(data)
        sizes = lengths.astype(np.int64) + writer.extra_bytes_per_sample
        i, n = 0, len(lengths)
        while i < n:
            fit = n - i
            if writer.size_limit:
                room = writer.size_limit - writer.new_shard_size
                fit = int(np.searchsorted(np.cumsum(sizes[i:]), room, side="right"))
            self._copy(view, starts[i:i + fit], lengths[i:i + fit], int(sizes[i:i + fit].sum()))
            i += fit
            if i < n:  # sample i does not fit: the piece is written and sample i starts the next one
                self.flush()
                self._copy(view, starts[i:i + 1], lengths[i:i + 1], int(sizes[i]))
                i += 1

    def append_samples(self, samples: Sequence[memoryview]) -> None:
        """:meth:`append` of separate samples (``encode_samples``' rows)."""
        lengths = np.array([len(s) for s in samples], np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(samples) else lengths
        self.append(b"".join(samples), starts, lengths)

    def _copy(self, view: memoryview, starts: np.ndarray, lengths: np.ndarray, size: int) -> None:
        if not len(lengths):
            return
        total = int(lengths.sum())
        if self.HEADER_ROOM + self._used + total > len(self._buffer):
            self._grow(self.HEADER_ROOM + self._used + total)
        out, at = self._view, self.HEADER_ROOM + self._used
        wire = native.wire()
        if wire is not None:  # (one C loop of memcpy; the Python loop is the reference, ~1.4 us a sample)
            wire.copy_ranges(view, starts.astype(np.int64, copy=False), lengths.astype(np.int64, copy=False), out, at)
        else:
            for start, length in zip(starts.tolist(), lengths.tolist()):
                out[at:at + length] = view[start:start + length]
                at += length
        self._used += total
        self._sizes.append(lengths)
        self.writer.new_shard_size += size

    def _grow(self, need: int) -> None:
        """A buffer of at least ``need`` bytes (the size limit's: pieces are cut there), samples kept."""
        limit = self.writer.size_limit or 0
        grown = np.empty(max(need, self.HEADER_ROOM + limit, 2 * len(self._buffer)), np.uint8)
        grown[self.HEADER_ROOM:self.HEADER_ROOM + self._used] = self._buffer[self.HEADER_ROOM:self.HEADER_ROOM + self._used]
        self._buffer, self._view = grown, memoryview(grown)

    def flush(self) -> None:
        """The samples appended since the last piece as the writer's next piece (even none: where
        ``write`` flushes an empty piece, before a first sample larger than the size limit)."""
        writer = self.writer
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int64)
        count = len(sizes)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)  # as encode_joint_shard makes them
        offsets += 4 + 4 * (count + 1) + len(writer.config_data)
        header = np.uint32(count).tobytes() + offsets.tobytes() + writer.config_data
        if len(self._buffer) < self.HEADER_ROOM:  # (an empty first piece: nothing was copied yet)
            self._grow(self.HEADER_ROOM)
        body = self._view[self.HEADER_ROOM:self.HEADER_ROOM + self._used]
        if len(header) <= self.HEADER_ROOM:
            begin = self.HEADER_ROOM - len(header)
            self._view[begin:self.HEADER_ROOM] = header
            writer.piece = self._view[begin:self.HEADER_ROOM + self._used]
        else:
            writer.piece = memoryview(header + body.tobytes())
        writer.new_samples = [None] * count  # (flush_shard lists len(new_samples) as the piece's samples)
        try:
            writer.flush_shard()
        finally:
            writer.piece = None
        writer._reset_cache()
        self._used, self._sizes = 0, []

    def finish(self) -> None:
        """The last piece (if it holds samples), then the writer's index and its end."""
        if self._sizes:
            self.flush()
        self.writer.finish()
        if len(self._buffer) <= self.HEADER_ROOM + (self.writer.size_limit or 0):  # (not one grown for a huge sample)
            _SPARE.buffer = self._buffer


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
