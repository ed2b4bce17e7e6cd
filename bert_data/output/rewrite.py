"""The assembler of containers whose shards cannot be concatenated (Parquet, MDS, HDF5).

Their fragments hold TFRecord-framed runs like every other run's (see the rewriting protocol in
:mod:`bert_data.format.containers`), so the outputs assemble, journal and resume their shards
exactly as for TFRecords: a local run's partial shards, a URL run's index objects. At
``publish`` each assembled shard, a TFRecord stream, is rewritten into the container's own
file(s) by :func:`rewrite_shard`: read in bounded batches (:func:`~bert_data.format.batch_decode.
iter_record_batches`, every CRC checked), decoded into the layout's padded arrays
(:func:`~bert_data.format.batch_decode.decode_examples`), written by the container's shard writer.
:func:`rewrite_shards` does every shard (several at once: each is independent, and the writers
spend their time in pyarrow, zstd or numpy) and then the container's sidecar file, if it has one.

The rewritten files are a pure function of the TFRecord shard of the same seed, so they are
byte-identical for any worker count, runner or resume, and hold the same records in the same
order (``tests/test_output_formats.py`` compares them record by record).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import OutputError
from ..format.batch_decode import decode_examples, iter_record_batches
from ..format.columns import ShardSpec, layout_spec
from ..objectives import objective_of

REWRITE_THREADS = 4  # shards rewritten at once by the coordinator, at most (and at most --num_workers:
# each thread holds a shard's decoded batch and row group, ~100 MB at MSL 512, and a core)

Files = List[Tuple[str, int]]  # (file name, records) of one shard, in order


def shard_spec(config) -> ShardSpec:
    """What a shard writer is told about a run's records: its layout and their lengths."""
    return layout_spec(objective_of(config).layout, config.max_seq_length, config.max_predictions_per_seq,
                       getattr(config, "max_sequences_per_pack", None))


def rewrite_threads(config) -> int:
    """Shards rewritten at once: the run's workers are done by then, so as many as it had (the
    cores and memory the user gave the run), at most :data:`REWRITE_THREADS`."""
    return max(1, min(REWRITE_THREADS, int(getattr(config, "num_workers", 1) or 1)))


class RewriteStopped(Exception):
    """The run is stopping (a signal, an error in another shard): this shard's writer gave up."""


def rewrite_shard(tfrecord_path: str, container, directory: str, shard_name: str, spec: ShardSpec,
                  stop: Optional[threading.Event] = None) -> Tuple[Files, object]:
    """The TFRecord shard at ``tfrecord_path`` as ``container``'s file(s) for ``shard_name`` in
    ``directory``; returns the files written with their records, and the writer's sidecar entries."""
    _require_room(tfrecord_path, os.path.join(directory, shard_name))
    writer = container.open_shard(directory, shard_name, spec)
    try:
        for batch in iter_record_batches(tfrecord_path):
            arrays, decoded = decode_examples(batch.data, batch.starts, batch.lengths, spec.features, small_ints=True)
            if not decoded.all():  # every record was written by us in this layout: a bug, not data
                raise OutputError(
                    f"{tfrecord_path}: record {batch.first + int((~decoded).argmax())} is not a {spec.layout} record "
                    f"of this run's lengths; {shard_name} was not written (a bug: please report it)"
                )
            if stop is not None and stop.is_set():  # checked a batch (~1 MB of records) at a time
                raise RewriteStopped(shard_name)
            writer.write(arrays)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    return files, getattr(writer, "sidecar_entries", None)


def _require_room(source: str, target: str) -> None:
    """Room for a rewritten shard before it is written: as much as its TFRecord shard (which every
    format's file is smaller than, but for a small file's fixed overhead: 1 MiB more). Why first:
    HDF5 (h5py) that runs out of disk space mid-file can take the process down (a segmentation fault) instead of raising; an OSError here is one
    line and --resume continues once there is room."""
    free = shutil.disk_usage(os.path.dirname(target) or ".").free
    if free < os.path.getsize(source) + (1 << 20):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)


def rewrite_shards(
    sources: Sequence[str], names: Sequence[str], container, directory: str, spec: ShardSpec,
    place: Callable[[str], None], threads: int = REWRITE_THREADS,
) -> Tuple[Dict[str, int], Optional[bytes]]:
    """Every shard (``sources[i]``, a local TFRecord file, becomes ``names[i]``) rewritten into
    ``directory``; each file written is handed to ``place(file name)`` (which moves it to its
    final place) as soon as its shard is done. Returns the records of every file written, in
    shard order, and the container's sidecar bytes (None when it has none)."""
    os.makedirs(directory, exist_ok=True)

    stop = threading.Event()  # set when the run stops: the other shards' writers give up within a batch

    def one(shard: int) -> Tuple[Files, object]:
        if stop.is_set():
            raise RewriteStopped(names[shard])
        try:
            files, entries = rewrite_shard(sources[shard], container, directory, names[shard], spec, stop)
            for name, _ in files:
                place(name)
        except BaseException:
            stop.set()  # one shard failed: the others stop too (the run fails with this shard's error)
            raise
        return files, entries

    pool = ThreadPoolExecutor(max_workers=max(1, min(threads, len(names))))
    try:
        done = list(pool.map(one, range(len(names))))
    except BaseException:  # SIGTERM / Ctrl-C in the coordinator, or a shard's error: stop the rest now
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    per_file = {name: records for files, _ in done for name, records in files}
    sidecar = container.sidecar_bytes([entries for _, entries in done]) if container.sidecar else None
    return per_file, sidecar
