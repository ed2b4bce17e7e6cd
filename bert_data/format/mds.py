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

Rows are the unpadded columns of :mod:`bert_data.format.columns` (``input_ids``,
``token_type_ids``, ``masked_lm_positions``, ``masked_lm_ids`` as ``ndarray`` columns,
``next_sentence_label`` a scalar), uncompressed (a compressed MDS file is unpacked by the reader
beside it, into the dataset's directory), each piece's xxh64 in the index (a function of its bytes:
nothing in a piece or in the index depends on anything but the rows; inspect checks every piece's
size and hash against it, as it checks TFRecords' CRCs). ``streaming`` is imported only here, through
:func:`streaming_base`.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import shutil
import sys
import threading
import types
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..output.naming import MDS_INDEX_NAME, MDS_SUFFIX
from .columns import ONE_KIND, ColumnBatch, ShardSpec, columns_of, from_columns, rows_to_batch, to_columns

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
        return _import_streaming_base()


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


def mds_columns(layout: str) -> Dict[str, str]:
    """MDS column encodings of a layout's rows."""
    return {c.name: c.dtype if c.kind == ONE_KIND else f"ndarray:{c.dtype}" for c in columns_of(layout)}


def piece_name(shard_name: str, piece: int) -> str:
    """``examples-1.mds``, 0 -> ``examples-1.00000.mds``."""
    return f"{shard_name[: -len(MDS_SUFFIX)]}.{piece:05d}{MDS_SUFFIX}"


class ShardFileWriter:
    """One shard's MDS pieces in ``directory`` (the container's ``open_shard``): written by
    ``MDSWriter`` into a directory of its own, then renamed to the shard's piece names."""

    def __init__(self, directory: str, shard_name: str, spec: ShardSpec) -> None:
        self.directory = directory
        self.name = shard_name
        self.spec = spec
        self._scratch = os.path.join(directory, f".{shard_name}.mdswriter")
        shutil.rmtree(self._scratch, ignore_errors=True)
        writer_class = streaming_base().MDSWriter
        self._writer = writer_class(out=self._scratch, columns=mds_columns(spec.layout), compression=None,
                                    hashes=[PIECE_HASH], size_limit=SIZE_LIMIT, max_workers=1)
        self.sidecar_entries: List[Dict] = []
        self._written: List[str] = []

    def write(self, features: Mapping[str, np.ndarray]) -> None:
        for row in to_columns(features, self.spec.layout).iter_rows():
            self._writer.write(row)

    def close(self) -> List[Tuple[str, int]]:
        self._writer.finish()
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
    index = os.stat(os.path.join(directory or ".", MDS_INDEX_NAME))
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
        data = handle.read()
    if raw.get("bytes") is not None and len(data) != raw["bytes"]:
        raise ValueError(f"{len(data)} bytes where {MDS_INDEX_NAME} lists {raw['bytes']}: the file is damaged or replaced")
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
