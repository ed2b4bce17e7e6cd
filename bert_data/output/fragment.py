"""A group's fragment: the one file a worker writes, and the byte runs the assemblers copy.

Workers never share a file: each group is one fragment holding, for every (dupe pass, shard), a
run of records framed by the run's container (:mod:`bert_data.format.containers`). A
:class:`Segment` says where each run is. The coordinator (or a Beam shard writer) builds shard
*i* by appending, in group order, every group's runs for shard *i*, which is why an assembler
may only be used with a container whose runs concatenate (``container.concatenates``).

* :class:`FragmentWriter`: encoder + container -> the fragment (temporary name, renamed when whole);
* :class:`InPlaceWriter`: the same runs written straight to the ends of the partial shards, for a
  group the coordinator makes itself (``--num_workers 1``, a local output): no fragment to copy;
* :func:`copy_range`: a run appended to a local shard in the kernel (``copy_file_range``);
* :func:`publish_fragment`: a fragment copied shard-major to a shared work directory (URL outputs,
  Beam), so each shard's runs of a group are one byte range;
* :func:`copy_runs`: byte ranges of fragments appended to a shard, reading ahead in parallel.
"""

from __future__ import annotations

import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from .. import storage
from ..errors import OutputError

COPY_CHUNK = 8 << 20
FETCH_THREADS = 8


@dataclass
class Segment:
    """A run of records of one (dupe pass, shard) inside a fragment file."""

    shard: int
    offset: int
    length: int
    records: int


@dataclass(kw_only=True)
class FragmentWriter:
    """Writes one group's fragment file (temp name, renamed when complete). ``encoder`` turns a
    batch of features into payloads (:mod:`bert_data.format.encoders`), ``container`` frames a
    shard's payloads into bytes (:mod:`bert_data.format.containers`)."""

    path: str
    encoder: object
    container: object
    num_shards: int
    segments: List[Segment] = field(default_factory=list)
    seconds: Dict[str, float] = field(default_factory=dict)  # time spent serializing / writing

    def __post_init__(self) -> None:
        self._tmp_path = self.path + ".tmp"
        self._handle = open(self._tmp_path, "wb")
        self._offset = 0

    def write_batch(self, features: Mapping[str, np.ndarray], shard_of_row: np.ndarray) -> None:
        """Serialize one batch (rows already in output order) into per-shard segments."""
        started = time.perf_counter()
        shard_of_row = np.asarray(shard_of_row)
        if len(shard_of_row) and (shard_of_row.dtype.kind not in "iu" or shard_of_row.min() < 0
                                  or shard_of_row.max() >= self.num_shards):  # a bug upstream, never data: refuse
            raise ValueError(f"write_batch: shards of rows must be integers in [0, {self.num_shards}), "
                             f"got {shard_of_row.dtype} {shard_of_row.min()}..{shard_of_row.max()}")
        runs = self.container.frame_runs(self.encoder, features, shard_of_row)  # once per batch: per-call overhead is not small
        serialized = time.perf_counter()
        for shard, data, records in runs:
            self.segments.append(Segment(shard, self._put(shard, data), len(data), records))
        self.seconds["serialize"] = self.seconds.get("serialize", 0.0) + serialized - started
        self.seconds["write"] = self.seconds.get("write", 0.0) + time.perf_counter() - serialized

    def _put(self, shard: int, data: bytes) -> int:
        """One run into the fragment; its offset there."""
        offset = self._offset
        self._handle.write(data)
        self._offset += len(data)
        return offset

    def close(self) -> None:
        self._handle.close()
        os.replace(self._tmp_path, self.path)

    def abort(self) -> None:
        self._handle.close()
        if os.path.exists(self._tmp_path):
            os.unlink(self._tmp_path)


IN_PLACE = -1  # a Segment's offset when its run was written into the shard itself (InPlaceWriter)


@dataclass(kw_only=True)
class InPlaceWriter(FragmentWriter):
    """A :class:`FragmentWriter` whose runs go straight to the end of their partial shard
    (``shard_fds``: the assembler's open files), for a group the coordinator makes itself, in
    group order: the bytes a fragment would have held, appended where the assembler would have
    copied them (at MSL 512 the copy was ~0.1 s per 10 MB of text). Its segments' offsets are
    :data:`IN_PLACE` and its ``path`` is empty: the assembler only counts them. A group cut short
    leaves bytes past the shards' journaled sizes, which a resumed run truncates, as it does a
    group appended but not journaled."""

    path: str = ""
    shard_fds: Sequence[int] = ()

    def __post_init__(self) -> None:
        if len(self.shard_fds) != self.num_shards:
            raise ValueError(f"InPlaceWriter: {len(self.shard_fds)} shard files for {self.num_shards} shards")

    def _put(self, shard: int, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.shard_fds[shard], view):]
        return IN_PLACE

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def copy_range(src_fd: int, dst_fd: int, offset: int, length: int) -> None:
    """Append ``length`` bytes of src at ``offset`` to dst, in the kernel when possible."""
    copy_file_range = getattr(os, "copy_file_range", None)
    while length > 0:
        copied = 0
        if copy_file_range is not None:
            try:
                copied = copy_file_range(src_fd, dst_fd, length, offset)
            except OSError:
                copy_file_range = None
        if not copied:
            chunk = os.pread(src_fd, min(length, 1 << 24), offset)
            if not chunk:
                raise OutputError(f"fragment file ended {length} bytes early")
            os.write(dst_fd, chunk)
            copied = len(chunk)
        offset += copied
        length -= copied


def publish_fragment(local_path: str, segments: Sequence[Segment], shared_path: str) -> List[Tuple[int, int, int, int]]:
    """Copy a group's fragment to the shared work dir re-ordered *shard-major*; returns
    (shard, offset, length, records) per shard present. Each shard's runs (every dupe pass, in
    fragment order, as the local assembler appends them) become one contiguous byte range."""
    by_shard: Dict[int, list] = {}
    for segment in segments:
        by_shard.setdefault(segment.shard, []).append(segment)
    out, commit = storage.atomic_create(shared_path)
    entries = []
    offset = 0
    try:
        with open(local_path, "rb") as src:
            for shard in sorted(by_shard):
                start = offset
                for segment in by_shard[shard]:
                    src.seek(segment.offset)
                    left = segment.length
                    while left > 0:
                        data = src.read(min(left, COPY_CHUNK))
                        if not data:
                            raise RuntimeError(f"fragment {local_path} ended early")
                        out.write(data)
                        left -= len(data)
                    offset += segment.length
                entries.append((shard, start, offset - start, sum(s.records for s in by_shard[shard])))
    finally:
        out.close()
    commit()
    return entries


def copy_runs(runs: Sequence[Tuple[str, int, int]], out, threads: int = FETCH_THREADS) -> int:
    """Append the byte ranges (path, offset, length) to ``out`` in order, reading ahead in
    parallel (object stores are latency bound). Ranges are cut into pieces of at most
    ``COPY_CHUNK`` bytes and at most ``threads`` pieces are held: memory <= threads * chunk."""
    pieces = []
    for path, offset, length in runs:
        for start in range(offset, offset + length, COPY_CHUNK):
            pieces.append((path, start, min(COPY_CHUNK, offset + length - start)))
    written = 0
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending: deque = deque()
        for piece in pieces:
            pending.append(pool.submit(storage.read_range, *piece))
            if len(pending) >= threads:
                data = pending.popleft().result()
                out.write(data)
                written += len(data)
        while pending:
            data = pending.popleft().result()
            out.write(data)
            written += len(data)
    return written
