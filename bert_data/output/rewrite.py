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

Rewriting while the run goes on (:class:`LiveRewriter`): a local run does not wait for its last
group to start. Each time a group is accepted, every shard whose partial file has gained a whole
number of the container's ``live_rows`` (Parquet: a row group) since it was last read is read
that far, on the rewriter's threads, and fed to that shard's writer, which then holds nothing
pending (its row groups are cut at the same rows whatever the batches, so the bytes are those of
the rewrite at publish). At publish each shard's writer reads only the rest. The partial shards
stay the journaled truth: a failure of a live writer (a full disk, anything) only drops that
shard's live work, and the publish rewrites it from its first record as before, raising what
the failure was; a killed run resumes by rewriting from the partials, as before.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import OutputError
from ..format.batch_decode import RecordBatch, decode_examples, iter_record_batches, iter_record_run
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
    _require_room(os.path.getsize(tfrecord_path), os.path.join(directory, shard_name))
    writer = container.open_shard(directory, shard_name, spec)
    try:
        feed(writer, iter_record_batches(tfrecord_path), spec, tfrecord_path, shard_name, stop)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    return files, getattr(writer, "sidecar_entries", None)


def feed(writer, batches: Iterable[RecordBatch], spec: ShardSpec, source: str, shard_name: str,
         stop: Optional[threading.Event] = None) -> None:
    """Every record of ``batches`` (``source``'s, TFRecord frames) decoded into the layout's padded
    arrays and written by ``writer``, in order; checks ``stop`` a batch (~1 MB of records) at a time."""
    for batch in batches:
        arrays, decoded = decode_examples(batch.data, batch.starts, batch.lengths, spec.features, small_ints=True)
        if not decoded.all():  # every record was written by us in this layout: a bug, not data
            raise OutputError(
                f"{source}: record {batch.first + int((~decoded).argmax())} is not a {spec.layout} record "
                f"of this run's lengths; {shard_name} was not written (a bug: please report it)"
            )
        if stop is not None and stop.is_set():
            raise RewriteStopped(shard_name)
        writer.write(arrays)


def _require_room(needed: int, target: str) -> None:
    """Room for ``needed`` bytes of TFRecords rewritten as ``target`` before they are written (every
    format's file is smaller than its TFRecords, but for a small file's fixed overhead: 1 MiB
    more). Why first: HDF5 (h5py) that runs out of disk space mid-file can take the process down
    (a segmentation fault) instead of raising; an OSError here is one line and --resume continues
    once there is room."""
    free = shutil.disk_usage(os.path.dirname(target) or ".").free
    if free < needed + (1 << 20):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)


def rewrite_shards(
    sources: Sequence[str], names: Sequence[str], container, directory: str, spec: ShardSpec,
    place: Callable[[str], None], threads: int = REWRITE_THREADS, started: Sequence[Optional["LiveShard"]] = (),
) -> Tuple[Dict[str, int], Optional[bytes]]:
    """Every shard (``sources[i]``, a local TFRecord file, becomes ``names[i]``) rewritten into
    ``directory``; each file written is handed to ``place(file name)`` (which moves it to its
    final place) as soon as its shard is done. Returns the records of every file written, in
    shard order, and the container's sidecar bytes (None when it has none). ``started[i]``, when
    given and not None, is shard i's writer as a :class:`LiveRewriter` left it: only the rest of
    the shard is read (the whole shard again if that fails)."""
    os.makedirs(directory, exist_ok=True)

    stop = threading.Event()  # set when the run stops: the other shards' writers give up within a batch

    def one(shard: int) -> Tuple[Files, object]:
        if stop.is_set():
            raise RewriteStopped(names[shard])
        try:
            live = started[shard] if shard < len(started) else None
            done = live.finish(spec, stop) if live is not None else None
            files, entries = done or rewrite_shard(sources[shard], container, directory, names[shard], spec, stop)
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


LIVE_ROWS_PER_READ = 2  # live_rows written per step at most, so that one shard's backlog does not hold the
# threads while the others wait (a step's memory is a ~1 MB batch decoded and the writer's one row group)


LIVE_ROOM_MARGIN = 256 << 20  # free bytes a live step leaves besides its own: the groups still coming in write
# their partial shards meanwhile (a step that finds too little room drops the shard's live work; the
# publish checks again, with the disk to itself)


@dataclass
class LiveShard:
    """One shard's writer as the live rewriter has fed it: ``records`` records, the first
    ``offset`` bytes of its partial shard ``source``, are written (nothing of them pending in the
    writer, which writes ``name`` in ``directory``)."""

    name: str
    directory: str
    source: str
    writer: object = None
    offset: int = 0
    records: int = 0
    known_bytes: int = 0  # the partial shard's accepted bytes and records, as of the last group
    known_records: int = 0
    busy: bool = False  # a step of this shard is queued or running on the rewriter's threads
    failed: bool = False  # its live work was dropped: the publish rewrites it from the start

    def write_run(self, end: int, records: int, spec: ShardSpec, stop: threading.Event, margin: int = 0) -> None:
        """The next ``records`` records of the partial shard (within its first ``end`` bytes)
        written, after checking for room (their TFRecords' bytes and ``margin``)."""
        _require_room(end - self.offset + margin, os.path.join(self.directory, self.name))
        read = 0
        with open(self.source, "rb") as handle:
            handle.seek(self.offset)
            for batch in iter_record_run(handle, end - self.offset, records):
                feed(self.writer, (batch,), spec, self.source, self.name, stop)
                read = batch.position
        self.offset += read
        self.records += records

    def finish(self, spec: ShardSpec, stop: threading.Event) -> Optional[Tuple[Files, object]]:
        """The rest of the partial shard written and the file(s) closed, as :func:`rewrite_shard`
        returns them; None (the writer aborted) if anything failed, so the caller rewrites the
        whole shard and meets the failure, if it is one, there."""
        if self.writer is None:
            return None
        try:
            size = os.path.getsize(self.source)
            if size != self.known_bytes:  # (the partial is not what the last group left: never trust the writer)
                raise OutputError(f"{self.source} changed under the rewriter")
            self.write_run(size, self.known_records - self.records, spec, stop)
            files = self.writer.close()
        except RewriteStopped:
            self.abort()
            raise
        except Exception:
            self.abort()
            return None
        writer, self.writer = self.writer, None  # done: nothing of it is the rewriter's to remove now
        return files, getattr(writer, "sidecar_entries", None)

    def abort(self) -> None:
        """The live writer's file(s) removed; the shard is rewritten from the start if at all."""
        writer, self.writer, self.failed = self.writer, None, True
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # (its own error is not the run's: the publish writes the shard again)
                pass


class LiveRewriter:
    """Rewrites the shards of a local run while it is still making groups (the module docstring),
    on ``threads`` threads of the coordinator's; :meth:`advance` after each accepted group,
    :meth:`handover` before the publish, :meth:`close` when the run stops without publishing."""

    def __init__(self, container, directory: str, names: Sequence[str], partial_paths: Sequence[str],
                 spec: ShardSpec, threads: int) -> None:
        self.container = container
        self.directory = directory
        self.spec = spec
        self.rows = int(container.live_rows)
        self.shards = [LiveShard(name, directory, path) for name, path in zip(names, partial_paths)]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="bert_data-rewrite")
        self._taking = True  # steps may still be started (until handover, close, or no thread to be had)

    def advance(self, assembler) -> None:
        """The partial shards now hold the ``assembler``'s accepted bytes and records (its
        ``bytes_per_shard``, ``records_per_shard``): every shard with a whole ``live_rows`` more
        than its writer has gets a step on the rewriter's threads."""
        bytes_per_shard, records_per_shard = assembler.bytes_per_shard, assembler.records_per_shard
        with self._lock:
            for index, shard in enumerate(self.shards):
                shard.known_bytes, shard.known_records = int(bytes_per_shard[index]), int(records_per_shard[index])
                if not self._taking or shard.busy or shard.failed or shard.known_records - shard.records < self.rows:
                    continue
                shard.busy = True
                try:
                    self._pool.submit(self._steps, index)
                except RuntimeError:  # no thread to be had (ulimit -u): the publish does the rest, as without us
                    shard.busy = False
                    self._taking = False

    def _steps(self, index: int) -> None:
        """Shard ``index``'s live work, step by step, while there is a whole ``live_rows`` to do."""
        shard = self.shards[index]
        try:
            while True:
                with self._lock:
                    rows = min((shard.known_records - shard.records) // self.rows, LIVE_ROWS_PER_READ) * self.rows
                    if rows == 0 or shard.failed or self._stop.is_set():
                        shard.busy = False
                        return
                    end = shard.known_bytes
                self._step(index, rows, end)
        except BaseException:
            with self._lock:  # (failed with busy: no advance() may start a step on this writer meanwhile)
                shard.busy, shard.failed = False, True
            shard.abort()

    def _step(self, index: int, rows: int, end: int) -> None:
        """The next ``rows`` records of shard ``index`` (within its first ``end`` bytes) written."""
        shard = self.shards[index]
        os.makedirs(self.directory, exist_ok=True)
        if shard.writer is None:
            shard.writer = self.container.open_shard(self.directory, shard.name, self.spec)
        shard.write_run(end, rows, self.spec, self._stop, LIVE_ROOM_MARGIN)

    def handover(self) -> List[Optional[LiveShard]]:
        """Every step done (none is started after this), then each shard's live state for
        :func:`rewrite_shards` (None for a shard the rewriter never started or dropped)."""
        self._shutdown(wait_for_steps=True)
        return [shard if shard.writer is not None else None for shard in self.shards]  # (a dropped one has none)

    def close(self) -> None:
        """The run stops without publishing: steps give up within a batch, live files removed."""
        self._stop.set()
        self._shutdown(wait_for_steps=False)
        for shard in self.shards:
            shard.abort()

    def _shutdown(self, wait_for_steps: bool) -> None:
        """No step started from now on; the running ones awaited (queued ones dropped unless
        ``wait_for_steps``). Safe to call again: a signal in :meth:`handover`'s wait, then
        :meth:`close`, awaits the running steps again before their files go."""
        with self._lock:
            self._taking = False
        self._pool.shutdown(wait=True, cancel_futures=not wait_for_steps)


LIVE_MEMORY = 128 << 20  # what the open live writers may hold together (their estimate, live_writer_bytes)


def live_shards(config, container, shards: int) -> int:
    """How many of a run's ``shards`` (the first ones) are rewritten while it runs: none for a
    container without ``live_rows`` or with more shards than open files allow (each live shard
    holds one open file until the publish, beside its partial shard); else as many as
    :data:`LIVE_MEMORY` allows, an open writer holding memory of its own (Parquet's level buffers
    of a row group: ~8 MB at MSL 512). The others are rewritten at publish."""
    if not shards or not getattr(container, "live_rows", None):
        return 0
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        unlimited = soft == resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):
        soft, unlimited = 1024, False
    if not unlimited and 2 * shards + 256 > soft:
        return 0
    return min(shards, LIVE_MEMORY // max(1, container.live_writer_bytes(shard_spec(config))))


def live_rewriter(config, container, directory: str, names: Sequence[str], assembler) -> Optional[LiveRewriter]:
    """A :class:`LiveRewriter` of the first :func:`live_shards` shards of a run of ``container``
    (whose partial shards are the ``assembler``'s ``partial_paths``), started on what they hold
    already (a resumed run's journaled groups); None where every shard is rewritten at publish."""
    live = live_shards(config, container, len(names))
    if not live:
        return None
    rewriter = LiveRewriter(container, directory, list(names)[:live], list(assembler.partial_paths)[:live],
                            shard_spec(config), rewrite_threads(config))
    rewriter.advance(assembler)
    return rewriter
