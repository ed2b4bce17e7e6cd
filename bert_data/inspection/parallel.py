"""Reading the files of ``inspect_tfrecords --stats`` in several processes.

Each file is read by :func:`bert_data.inspection.file_stats.read_file` into an accumulator of its
own; the parent merges them in file order, so the report does not depend on the number of
workers. One thing does flow from file to file: what a directory's records are checked against
(layout and lengths) is learnt from its first records when ``data_params.json`` does not say.
So before the workers start, the parent learns it the same way, from the first records of each
directory's first file (usually one record). The worker reading that first file starts from
what the manifest says and learns exactly as a single process would; every other file starts
from what was learnt. When a directory's first file does not teach it (every record of it
malformed), :func:`read_files_in_parallel` returns None and the caller reads in one process.

This process reads files too: it claims them from the back of the list while the spawned
workers claim them from the front, one at a time through two shared counters, until they meet;
so ``--num_workers 2`` starts one process, no core waits for the workers' start-up and no file
is promised to a busy worker (an executor queues work ahead: one file too many for a slow
starter, a 20% longer wall time on 10 shards and 2 cores). Workers are spawned, never forked
(the caller may hold threads); they report progress through two more shared counters that this
process polls. A file that cannot be read does not stop the others: every file is read and the
error of the first such file in the list is raised, whatever the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import RecordFormatError, start_resource_tracker
from ..format.example_wire import parse_example
from ..format.tfrecord import iter_records
from . import InspectError
from .inputs import Group, VocabInfo, load_vocab_info
from ..memory import keep_freed_memory
from .file_stats import FileResult, Progress, read_file

__all__ = ["MIN_BYTES_PER_WORKER", "worker_count", "read_files_in_parallel"]

# A worker costs a process start (~0.5 s before it reads: Python, numpy, the vocabulary), in
# which this process alone reads ~150 MB with the compiled reader (~350 MB/s a core); below this
# much input per worker the start costs more than reading in parallel saves (measured: 200 MB,
# 0.70 s with one process, 0.65-0.80 s with two; 760 MB, 2.2-2.4 s with one, 1.6 s with two).
MIN_BYTES_PER_WORKER = 128 << 20
POLL_SECONDS = 0.2

_vocab: Optional[VocabInfo] = None
_counters: Any = None
_claims: Any = None  # [next file from the front, one past the next file from the back]


def worker_count(paths: Sequence[str], num_workers: int) -> int:
    """Processes worth starting for ``paths``: at most one per file and per
    :data:`MIN_BYTES_PER_WORKER` of input, at most ``num_workers``."""
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return max(1, min(num_workers, len(paths), total // max(1, MIN_BYTES_PER_WORKER)))


def _learnt(group: Group, path: str) -> Group:
    """``group`` after learning from the first records of ``path``, as :func:`read_file` learns:
    records decoded one by one until the layout and lengths are known (or the file ends)."""
    group = group.snapshot()
    try:
        for index, data in enumerate(iter_records(path)):
            if group.ready():
                break
            try:
                example = parse_example(data)
            except RecordFormatError:
                continue  # a malformed record teaches nothing
            group.learn(f"{path} record {index}", example)
    except (RecordFormatError, OSError):
        pass  # the worker reading the file reports it
    return group


def _start_states(tasks: Sequence[Tuple[str, Group]]) -> Optional[List[Group]]:
    """The group each file starts from (see the module docstring), or None when some
    directory's first file does not teach its layout and lengths."""
    first: Dict[int, Group] = {}  # id(group) -> the group as learnt from its first file
    states: List[Group] = []
    for path, group in tasks:
        key = id(group)
        if key not in first:
            learnt = group.snapshot() if group.ready() else _learnt(group, path)
            if not learnt.ready():
                return None
            first[key] = learnt
            states.append(group.snapshot())  # the first file learns for itself
        else:
            states.append(first[key].snapshot())
    return states


def _init_worker(vocab_path: Optional[str], vocab_size: int, counters: Any, claims: Any) -> None:
    """Load the vocabulary here rather than receive it: pickling 30,000 tokens to a process that
    is still importing would block the parent until the worker is up (~0.5 s). (Forking would
    save the start-up, but a forked worker read 1.7x slower here: copy-on-write faults.)"""
    global _vocab, _counters, _claims
    _counters, _claims = counters, claims
    keep_freed_memory()
    if vocab_path is not None:
        _vocab = load_vocab_info(vocab_path)
        if _vocab.size != vocab_size:
            raise InspectError(f"{vocab_path} changed while it was being read")


def _count(records: int, nbytes: int) -> None:
    with _counters.get_lock():
        _counters[0] += records
        _counters[1] += nbytes


def _claim(claims: Any, from_back: bool) -> Optional[int]:
    """The index of the next file nobody has claimed (from the front or the back), or None."""
    with claims.get_lock():
        front, back = claims[0], claims[1]
        if front >= back:
            return None
        if from_back:
            claims[1] = back - 1
            return back - 1
        claims[0] = front + 1
        return front


Outcome = Tuple[Optional[FileResult], Group, Optional[BaseException]]  # a file's result, or its error


def _read_one(path: str, group: Group, vocab: Optional[VocabInfo], progress: Optional[Progress]) -> Outcome:
    try:
        return read_file(path, group, vocab, progress), group, None
    except Exception as exc:  # reported after every file is read: the first file's error wins
        return None, group, exc


def _drain(tasks: Sequence[Tuple[str, Group]]) -> Dict[int, Outcome]:
    """A worker's job: read the files it claims from the front until none is left."""
    done: Dict[int, Outcome] = {}
    while (i := _claim(_claims, from_back=False)) is not None:
        done[i] = _read_one(*tasks[i], _vocab, _count)
    return done


class _Progress:
    """The parent's own progress plus the workers' (two shared counters), passed on as one."""

    def __init__(self, counters: Any, progress: Optional[Progress]) -> None:
        self.counters = counters
        self.progress = progress
        self.seen = (0, 0)

    def own(self, records: int, nbytes: int) -> None:
        if self.progress is not None:
            self.progress(records, nbytes)
            self.poll()

    def poll(self) -> None:
        if self.progress is None:
            return
        now = (self.counters[0], self.counters[1])
        if now != self.seen:
            self.progress(now[0] - self.seen[0], now[1] - self.seen[1])
            self.seen = now


def read_files_in_parallel(
    tasks: Sequence[Tuple[str, Group]], vocab: Optional[VocabInfo], num_workers: int, progress: Optional[Progress]
) -> Optional[List[FileResult]]:
    """Read ``(path, directory group)`` tasks with ``num_workers`` processes, this one included;
    the results in task order, each group updated with what its files taught. None when the
    files must be read in one process (see the module docstring).

    ``num_workers - 1`` processes are spawned and take files from the front; meanwhile this
    process takes them from the back (cancelling their futures before a worker starts them), so
    no core waits for the workers' start-up and the last file does not wait for a free worker."""
    states = _start_states(tasks)
    if states is None:
        return None
    start_resource_tracker()  # (one that outlives a hang-up: bert_data.errors)
    context = multiprocessing.get_context("spawn")  # not fork: the caller may hold threads
    counters = context.Array("q", 2)
    claims = context.Array("q", [0, len(tasks)])
    tracker = _Progress(counters, progress)
    vocab_args = (vocab.path, vocab.size) if vocab is not None else (None, 0)
    initargs = (*vocab_args, counters, claims)
    pool = ProcessPoolExecutor(num_workers - 1, mp_context=context, initializer=_init_worker, initargs=initargs)
    work = [(path, state) for (path, _), state in zip(tasks, states)]
    futures: List["Future[Dict[int, Outcome]]"] = []
    done: Dict[int, Outcome] = {}
    try:
        futures += [pool.submit(_drain, work) for _ in range(num_workers - 1)]
        while (i := _claim(claims, from_back=True)) is not None:
            done[i] = _read_one(*work[i], vocab, tracker.own)
        _wait(futures, tracker)
        for future in futures:
            done.update(future.result())
    except BaseException:  # a worker died, Ctrl-C: stop the workers now, not after every file
        for future in futures:
            future.cancel()
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    for i in range(len(tasks)):  # in file order: the first error is the first file's
        error = done[i][2]
        if error is not None:
            raise error
    for i, (_, group) in enumerate(tasks):
        if not group.ready():  # the first file of the directory: what it learnt
            learnt = done[i][1]
            group.layout, group.layout_from = learnt.layout, learnt.layout_from
            group.seq, group.pred, group.lengths_from = learnt.seq, learnt.pred, learnt.lengths_from
    return [done[i][0] for i in range(len(tasks))]  # type: ignore[misc]


def _wait(futures: List["Future[Any]"], tracker: _Progress) -> None:
    """Wait for every future that was not cancelled, passing the workers' progress on."""
    pending = {f for f in futures if not f.cancelled()}
    while pending:
        _, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        tracker.poll()
    tracker.poll()
