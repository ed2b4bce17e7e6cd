"""``--runner local``: groups made on this machine, in-process or on a pool of worker processes.

:func:`run_groups` is one of the group runners of :data:`bert_data.runners.job.GROUP_RUNNERS`:
given the planned groups it yields their :class:`~bert_data.runners.worker.GroupResult` in group
order, whoever made them. At most ``2 * num_workers`` groups are in flight (memory and the plan
read ahead stay bounded). Workers are spawned interpreters that build their resources once
(:func:`bert_data.group.build_resources`) and run :func:`bert_data.runners.worker.make_group`; a
worker that dies (OOM killer, kill -9) ends the run with one line, resumable
(:class:`WorkerDiedError`, exit 3), and a worker never outlives its coordinator.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..config import Config
from ..faults import crash_point
from ..group import Resources, build_resources
from ..metadata import WorkItem
from .children import (
    WORKER_OUT_OF_MEMORY, WorkerDiedError, child_started, how_processes_died, process_pool, stop_pool_held, submit_held,
    wait_held,
)
from .worker import GroupResult, make_group


_WORKER_RESOURCES: Optional[Resources] = None
_WORKER_MAKE: Callable[..., object] = make_group  # what a worker does with a group (make_group; tokenize's writer)


def _init_worker(config: Config, parent_pid: int, bytes_read=None, make: Callable[..., object] = make_group) -> None:
    global _WORKER_RESOURCES, _WORKER_MAKE
    child_started(parent_pid)
    try:
        _WORKER_RESOURCES = build_resources(config)
    except MemoryError:  # (ulimit -v): the coordinator names it from the exit code, in its one line
        os._exit(WORKER_OUT_OF_MEMORY)
    _WORKER_RESOURCES.bytes_read = bytes_read
    _WORKER_MAKE = make


def _process_in_worker(group_index: int, items: Sequence[WorkItem], work_dir: str) -> GroupResult:
    if _WORKER_RESOURCES is None:
        raise RuntimeError("worker initializer did not run")
    crash_point("worker", group_index)  # test hook: this worker is killed (as by the OOM killer)
    return _WORKER_MAKE(group_index, items, _WORKER_RESOURCES, work_dir)


def run_groups(
    config: Config, groups: Iterable[Tuple[int, List[WorkItem]]], work_dir: str, bytes_read=None,
    make: Callable[..., object] = make_group, shard_files: Sequence[int] = (),
) -> Iterator[GroupResult]:
    """Results in group order. At most ``2 * num_workers`` groups are in flight, so memory
    (and the plan read ahead) stays bounded whatever the corpus size. ``bytes_read`` (a shared
    ``multiprocessing.Value``) is advanced by the workers as they read, for the progress bar.
    ``make(group_index, items, resources, work_dir)`` makes a group (a module-level function:
    it is pickled to the workers): :func:`make_group`, or `bert-data tokenize`'s writer.
    ``shard_files``: a local output's partial shards (``output.shard_files()``), which groups made
    in this process (``--num_workers 1``, in group order) write in place of a fragment (make_group only)."""
    if config.num_workers == 1:
        resources = build_resources(config)
        resources.bytes_read = bytes_read
        in_place = {"shard_files": shard_files} if shard_files else {}
        for group_index, items in groups:
            yield make(group_index, items, resources, work_dir, **in_place)
        return
    from concurrent.futures.process import BrokenProcessPool

    with process_pool(config.num_workers, _init_worker, (config, os.getpid(), bytes_read, make)) as pool:
        pending: deque = deque()  # (group index, future), in group order
        workers: Dict[int, object] = {}  # every worker process started, kept to tell how one died
        try:
            for group_index, items in groups:
                pending.append((group_index, submit_held(pool, _process_in_worker, group_index, items, work_dir)))
                workers.update(getattr(pool, "_processes", None) or {})
                if len(pending) >= 2 * config.num_workers:
                    yield _next_result(pending)
            while pending:
                yield _next_result(pending)
        except BrokenProcessPool:
            error = _worker_died(list(workers.values()), pending)
            stop_pool_held(pool, pending)
            raise error from None
        except BaseException:
            stop_pool_held(pool, pending)
            raise


def _next_result(pending: deque) -> GroupResult:
    """The first pending group's result, taken off ``pending`` only once it is in: a worker that
    died while making it leaves it there, so the error line names it among those in flight."""
    future = pending[0][1]
    while not future.done():
        wait_held(future, 0.1)
    result = future.result()
    pending.popleft()
    return result


def _worker_died(processes: List, pending: deque) -> "WorkerDiedError":
    """A worker that died (OOM killer, kill -9, a crash in a native library) becomes one line
    naming the groups in flight and how to continue."""
    in_flight = [g for g, _ in pending]
    how = how_processes_died(processes)
    groups = _in_flight_words(in_flight)
    hint = " and fewer --num_workers or a smaller --group_bytes" if "SIGKILL" in how or "memory" in how else ""
    return WorkerDiedError(
        f"a worker process died{how} while {groups}; nothing was published: continue with --resume (same flags){hint}"
    )


def _in_flight_words(in_flight: List[int]) -> str:
    """What was being made, in words: ``group 3 was being made``, ``groups 2-5 were ...``; a
    negative task index is not a group but ``bert-data tokenize``'s NSP pool task
    (:data:`bert_data.runners.tokenize.POOL_TASK`), named as such."""
    if not in_flight:
        return "the run"
    groups = [g for g in in_flight if g >= 0]
    parts = ["NSP's negative pool"] if len(groups) < len(in_flight) else []
    if groups:
        parts.append(f"group {groups[0]}" if len(groups) == 1 else f"groups {groups[0]}-{groups[-1]}")
    return f"{' and '.join(parts)} {'was' if len(in_flight) == 1 else 'were'} being made"


