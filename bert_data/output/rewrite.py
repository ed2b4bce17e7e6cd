"""The assembler of containers whose shards cannot be concatenated (Parquet, MDS, HDF5).

Their fragments hold runs that the outputs assemble, journal and resume exactly as TFRecords'
(see the protocol in :mod:`bert_data.format.containers`): a local run's partial shards, a URL
run's index objects. At ``publish`` each assembled shard becomes the container's own file(s) by
:func:`rewrite_shard`:

* Parquet's runs are pieces of data pages its workers encoded (:mod:`bert_data.format.parquet`):
  a copy of the shard is finished where it is (``finish_in_place``, its footer appended:
  :func:`_finished_copy`; a local run finishes its partial shards themselves and renames them);
* MDS's runs are TFRecord frames of samples its workers encoded (:mod:`bert_data.format.mds`): its
  writer reads the frames (every CRC checked) and hands the samples to streaming's ``MDSWriter``;
* HDF5's runs are TFRecord frames of NVIDIA's samples its workers checked and cut
  (:mod:`bert_data.format.nvidia_hdf5`): its writer reads them and hands them to h5py.

:func:`rewrite_shards` does every shard, several at once, and then the container's sidecar file,
if it has one. HDF5's writer holds the GIL (h5py writes vlen rows), so its threads take turns (at
most :data:`REWRITE_THREADS`): a publish of at least the container's ``process_min_bytes`` with 3
or more workers and shards rewrites them in child processes, as many as the run had workers
(:mod:`bert_data.runners.children`: spawned, dying with the coordinator, stopped with it; one
that dies is one line, exit 3, and ``--resume`` rewrites again). MDS's writer releases the GIL for
nearly all of its work (reads, CRCs, copies, xxh64 and writes of a window at a time: two threads
rewrite 92 MB 1.3-1.6x faster than one here), so it takes as many threads as the run had workers
and processes only for a publish large enough to pay for starting them. A smaller publish, and a
URL run's Parquet copies, run on threads.
The files are a pure function of the assembled shard of the same seed, so they are byte-identical
for any worker count, runner or resume (``tests/test_output_formats.py``).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import OutputError, RecordFormatError
from ..faults import crash_point
from ..format.columns import ShardSpec, layout_spec
from ..objectives import objective_of
from .fragment import copy_range

REWRITE_THREADS = 4  # shards rewritten at once by the coordinator's threads, at most, by a writer that holds the
# GIL (a container's rewrite_holds_gil: they take turns; and at most --num_workers)
PROCESS_MIN_BYTES = 256 << 20  # assembled bytes from which a GIL-bound writer's shards are rewritten in
# processes (a container's process_min_bytes, else this): ~1 s of one core's work at ~3.5 s/GB (MDS before
# 2026-11-28, HDF5 now), against ~0.3 s to start each process
PROCESS_MIN_SLOTS = 3  # and only with 3 or more at once: threads taking turns on the GIL already do ~1.3-1.7
# cores' worth, so 2 processes (352 MB of MDS, 328 MB of HDF5 on 2 cores) were no faster than 2 threads

Files = List[Tuple[str, int]]  # (file name, records) of one shard, in order


def shard_spec(config) -> ShardSpec:
    """What a shard writer is told about a run's records: its layout and their lengths."""
    return layout_spec(objective_of(config).layout, config.max_seq_length, config.max_predictions_per_seq,
                       getattr(config, "max_sequences_per_pack", None))


def rewrite_threads(config, container=None) -> int:
    """Shards rewritten at once on threads: the run's workers are done by then, so as many as it
    had (the cores and memory the user gave the run); at most :data:`REWRITE_THREADS` for a
    writer that holds the GIL (``container.rewrite_holds_gil``: its threads take turns)."""
    workers = rewrite_processes(config)
    return max(1, min(REWRITE_THREADS, workers) if getattr(container, "rewrite_holds_gil", True) else workers)


def rewrite_processes(config) -> int:
    """Shards rewritten at once in processes (a writer that holds the GIL, a big publish): as many
    as the run had workers, whose cores and memory are free by then."""
    return max(1, int(getattr(config, "num_workers", 1) or 1))


class RewriteStopped(Exception):
    """The run is stopping (a signal, an error in another shard): this shard's writer gave up."""


def rewrite_shard(tfrecord_path: str, container, directory: str, shard_name: str, spec: ShardSpec,
                  stop: Optional[threading.Event] = None, bound: Optional[int] = None) -> Tuple[Files, object]:
    """The TFRecord shard at ``tfrecord_path`` as ``container``'s file(s) for ``shard_name`` in
    ``directory``; returns the files written with their records, and the writer's sidecar entries.
    ``bound``: the container's ``rewritten_size_bound`` of the shard when the caller has it (room
    is checked for it here again: others may have filled the disk since)."""
    if bound is None:
        bound = container.rewritten_size_bound(tfrecord_path)
    _require_room(bound, os.path.join(directory, shard_name))
    if hasattr(container, "finish_in_place"):  # (Parquet: the shard is the file but for its ending)
        return [(shard_name, _finished_copy(tfrecord_path, container, directory, shard_name, spec, stop))], None
    writer = container.open_shard(directory, shard_name, spec)
    try:
        if hasattr(writer, "reserve"):  # (HDF5: the room taken before a byte is written; a full disk can crash h5py)
            writer.reserve(bound)
        try:  # (the records are the format's own, encoded by the workers: nothing is decoded)
            writer.write_partial(tfrecord_path, (lambda: False) if stop is None else stop.is_set)
            files = writer.close()  # (MDS writes its last piece here, reading its frames again)
        except InterruptedError:
            raise RewriteStopped(shard_name) from None
        except RecordFormatError as exc:  # (a journaled partial shard damaged since: --resume cannot mend it)
            if isinstance(exc.__cause__, OSError):  # (it could not be opened: an I/O error, not damage)
                raise exc.__cause__ from None
            raise OutputError(f"{exc}: the partial shard is damaged; start over with --overwrite") from None
    except BaseException:
        writer.abort()
        raise
    return files, getattr(writer, "sidecar_entries", None)


COPY_STEP = 64 << 20  # bytes copied between two looks at ``stop``


def _finished_copy(source: str, container, directory: str, shard_name: str, spec: ShardSpec,
                   stop: Optional[threading.Event]) -> int:
    """A copy of the assembled shard ``source`` as ``shard_name`` in ``directory`` (in the kernel
    where it can), finished there by the container (``finish_in_place``: what a local run does to
    its partial shard itself, so the bytes are the same); its records. Removed if anything fails."""
    target = os.path.join(directory, shard_name)
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size, done = os.fstat(src).st_size, 0
            while done < size:
                if stop is not None and stop.is_set():
                    raise RewriteStopped(shard_name)
                step = min(size - done, COPY_STEP)
                copy_range(src, dst, done, step)
                done += step
        finally:
            os.close(dst)
        return container.finish_in_place(target, spec)
    except BaseException:
        if os.path.exists(target):
            os.unlink(target)
        raise
    finally:
        os.close(src)


def _require_room(needed: int, target: str) -> None:
    """Room for the ``needed`` bytes of ``target`` (the container's bound on the file(s) made from
    an assembled shard: ``rewritten_size_bound``), and 1 MiB more, before they are written. Why
    first: HDF5 (h5py) that runs out of disk space mid-file can take the process down (a
    segmentation fault) instead of raising; an OSError here is one line and --resume continues
    once there is room."""
    free = shutil.disk_usage(os.path.dirname(target) or ".").free
    if free < needed + (1 << 20):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)


def rewrite_shards(  # (9 parameters: the shards, where and how they go; the last three say how many at once)
    sources: Sequence[str], names: Sequence[str], container, directory: str, spec: ShardSpec,
    place: Callable[[str], None], threads: int = REWRITE_THREADS, processes: int = 1, files_stay: bool = True,
) -> Tuple[Dict[str, int], Optional[bytes]]:
    """Every shard (``sources[i]``, a local TFRecord file, becomes ``names[i]``) rewritten into
    ``directory``; each file written is handed to ``place(file name)`` (which moves it to its
    final place) as soon as its shard is done. Returns the records of every file written, in
    shard order, and the container's sidecar bytes (None when it has none). ``threads`` and
    ``processes``: how many shards at once on threads, or in processes (see the module docstring).
    ``files_stay``: every file written stays on ``directory``'s file system until the run ends (a
    local run's, placed beside its partial shards), so room for all of them is checked first;
    else (a URL run's, uploaded and removed) room for those written at once."""
    os.makedirs(directory, exist_ok=True)
    parallel = in_processes(container, sources, processes)
    at_once = max(1, min(processes if parallel else threads, len(sources)))
    bounds = [container.rewritten_size_bound(source) for source in sources]
    if sources:  # room first, for the files together (each shard also checks for itself as it begins): h5py
        largest = sorted(bounds, reverse=True)  # out of room can crash
        _require_room(sum(largest if files_stay else largest[:at_once]), os.path.join(directory, names[0]))
    if parallel:
        done = _rewrite_in_processes(sources, names, container, directory, spec, place, processes, bounds)
    else:
        done = _rewrite_on_threads(sources, names, container, directory, spec, place, threads, bounds)
    per_file = {name: records for files, _ in done for name, records in files}
    sidecar = container.sidecar_bytes([entries for _, entries in done]) if container.sidecar else None
    return per_file, sidecar


def in_processes(container, sources: Sequence[str], processes: int) -> bool:
    """Whether :func:`rewrite_shards` uses processes: a container that may
    (``rewrite_in_processes``), at least :data:`PROCESS_MIN_SLOTS` shards and processes, and at
    least its ``process_min_bytes`` (None: :data:`PROCESS_MIN_BYTES`) to rewrite."""
    if min(processes, len(sources)) < PROCESS_MIN_SLOTS or not getattr(container, "rewrite_in_processes", False):
        return False
    least = getattr(container, "process_min_bytes", None)
    return sum(os.path.getsize(source) for source in sources) >= (PROCESS_MIN_BYTES if least is None else least)


Done = List[Tuple[Files, object]]  # each shard's files and sidecar entries, in shard order


def _rewrite_on_threads(sources: Sequence[str], names: Sequence[str], container, directory: str, spec: ShardSpec,
                        place: Callable[[str], None], threads: int, bounds: Sequence[int]) -> Done:
    """:func:`rewrite_shard` of every shard on ``threads`` threads; each shard's files are placed
    (``place``: an fsync, then a rename) on threads of their own while the next shards are
    rewritten: an fsync waits on the disk (~5 ms per 9 MB here), which the rewriting need not."""
    stop = threading.Event()  # set when the run stops: the other shards' writers give up within a batch
    failures: List[BaseException] = []  # a shard's own error, before it stopped the others
    at_once = max(1, min(threads, len(names)))
    placer = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="bert_data-place")
    placing: List[Future] = []

    def failed(exc: BaseException) -> None:
        failures.append(exc)  # (before the others stop: an earlier shard's RewriteStopped names this one)
        stop.set()  # one shard failed: the others stop too (the run fails with this shard's error)

    def place_files(files: Files) -> None:
        if stop.is_set():  # (another shard failed, or the run stops: nothing more is placed)
            raise RewriteStopped(files[0][0] if files else "")
        try:
            for name, _ in files:
                place(name)
        except BaseException as exc:
            failed(exc)
            raise

    def one(shard: int) -> Tuple[Files, object]:
        if stop.is_set():
            raise RewriteStopped(names[shard])
        try:
            files, entries = rewrite_shard(sources[shard], container, directory, names[shard], spec, stop, bounds[shard])
            # Placed once: submit() queues the work before it starts a thread, so where that start fails
            # (placed below instead) a thread started later finds it queued and would place it again (ENOENT).
            claimed = threading.Lock()

            def place_once() -> None:
                if claimed.acquire(blocking=False):
                    place_files(files)

            try:
                placing.append(placer.submit(place_once))
            except RuntimeError:  # (no thread to be had: placed here and now)
                place_once()
        except RewriteStopped:
            raise
        except BaseException as exc:
            if not failures or failures[-1] is not exc:
                failed(exc)
            raise
        return files, entries

    pool = ThreadPoolExecutor(max_workers=at_once)
    try:
        done = list(pool.map(one, range(len(names))))
        for future in list(placing):
            future.result()
    except BaseException as exc:  # SIGTERM / Ctrl-C in the coordinator, or a shard's error: stop the rest now
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        placer.shutdown(wait=True, cancel_futures=True)  # (files not placed stay in directory: --resume clears them)
        if isinstance(exc, RewriteStopped) and failures:  # (map gives results in shard order: an earlier shard
            raise failures[0] from None  # stopped by a later one's error comes first; that error is the run's)
        if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):  # (ulimit -v, a thread limit)
            raise MemoryError("no memory for the threads that rewrite the shards") from None
        raise
    pool.shutdown(wait=True)
    placer.shutdown(wait=True)
    if failures:  # (a placement no future of ``placing`` holds: one queued where its thread failed to start)
        raise failures[0]
    return done


def _rewrite_in_child(shard: int, source: str, container, directory: str, shard_name: str,
                      spec: ShardSpec, bound: int) -> Tuple[Files, object]:
    """:func:`rewrite_shard` in a child process (with the test hooks of :mod:`bert_data.faults`)."""
    crash_point("rewriter", shard)
    return rewrite_shard(source, container, directory, shard_name, spec, bound=bound)


def _rewrite_in_processes(sources: Sequence[str], names: Sequence[str], container, directory: str, spec: ShardSpec,
                          place: Callable[[str], None], processes: int, bounds: Sequence[int]) -> Done:
    """:func:`rewrite_shard` of every shard in spawned child processes, ``processes`` at once; each
    shard's files are placed by the coordinator as the shard is done. A shard's error, a stop
    signal or a child's death ends every child at once (what they were writing stays in
    ``directory``: a local run's next --resume clears it, a URL run's scratch goes), and is
    raised: the error as it is, a death as one line
    (:class:`~bert_data.runners.children.WorkerDiedError`)."""
    from concurrent.futures.process import BrokenProcessPool

    from ..runners.children import (
        WorkerDiedError, child_started, how_processes_died, process_pool, stop_pool_held, submit_held, wait_held,
    )

    pool = process_pool(min(processes, len(names)), child_started, (os.getpid(),))
    pending = []  # (shard, future)
    children: Dict[int, object] = {}  # every child started, kept to tell how one died
    done: Dict[int, Tuple[Files, object]] = {}
    finished_all = False
    try:
        for shard in range(len(names)):
            pending.append((shard, submit_held(pool, _rewrite_in_child, shard, sources[shard], container,
                                               directory, names[shard], spec, bounds[shard])))
            children.update(getattr(pool, "_processes", None) or {})
        remaining = dict(pending)  # shard -> future
        while remaining:  # each shard placed once done, a shard's error raised as soon as it is in
            finished = [shard for shard, future in remaining.items() if future.done()]
            for shard in finished:
                files, entries = remaining.pop(shard).result()
                for name, _ in files:
                    place(name)
                done[shard] = (files, entries)
            if remaining and not finished:
                wait_held(next(iter(remaining.values())), 0.05)
        finished_all = True
    except BrokenProcessPool:
        how = how_processes_died(list(children.values()))
        hint = " and fewer --num_workers (as many shards are rewritten at once)" if "SIGKILL" in how or "memory" in how else ""
        raise WorkerDiedError(f"a process rewriting the shards at publish died{how}; nothing was lost: continue with "
                              f"--resume (same flags){hint}") from None
    finally:  # (in a finally: a second stop even between the first one's except and this cannot skip it,
        if not finished_all:  # and children left working would keep the interpreter's exit waiting for them)
            stop_pool_held(pool, pending)
    pool.shutdown(wait=True)
    return [done[shard] for shard in range(len(names))]

