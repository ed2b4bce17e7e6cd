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
import signal
import time
from collections import deque
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..config import Config
from ..errors import BertDataError
from ..faults import crash_point
from ..group import Resources, build_resources
from ..metadata import WorkItem
from .worker import GroupResult, make_group


class WorkerDiedError(BertDataError):
    """A worker process died mid-run; the journal is intact and ``--resume`` continues."""

    exit_code = 3

_WORKER_RESOURCES: Optional[Resources] = None
_WORKER_MAKE: Callable[..., object] = make_group  # what a worker does with a group (make_group; tokenize's writer)


def _alive(pid: int) -> bool:
    """Running, not a zombie: a SIGKILLed coordinator stays a zombie until its own parent reaps
    it, and a worker that waited for that could wait forever (its fork server waits for it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no /proc (not Linux): existence is the best we can tell
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _die_with_parent(parent_pid: int) -> None:
    """A worker must not outlive its coordinator (kill -9, OOM killer): it would keep computing
    and hold the coordinator's pipes open. Linux: PR_SET_PDEATHSIG; everywhere: a watchdog thread
    that polls the coordinator (a zombie counts as dead)."""
    import signal
    import threading

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while _alive(parent_pid):
            time.sleep(0.5)
        os._exit(1)

    if not _alive(parent_pid):
        os._exit(1)
    threading.Thread(target=watch, name="bert_data-parent-watchdog", daemon=True).start()


_STOP_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGXCPU") if hasattr(signal, name)}
WORKER_OUT_OF_MEMORY = 75  # a worker's exit code when it could not start for memory


def _init_worker(config: Config, parent_pid: int, bytes_read=None, make: Callable[..., object] = make_group) -> None:
    global _WORKER_RESOURCES, _WORKER_MAKE
    import signal

    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    if hasattr(signal, "SIGHUP"):  # so is a closed terminal: it stops the workers in order
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # spawned while _submit held the stop signals back: a worker
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # inherits that mask, and terminate() never landed
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
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = worker_context()
    with ProcessPoolExecutor(
        max_workers=config.num_workers, mp_context=context, initializer=_init_worker,
        initargs=(config, os.getpid(), bytes_read, make),
    ) as pool:
        pending: deque = deque()  # (group index, future), in group order
        workers: Dict[int, object] = {}  # every worker process started, kept to tell how one died
        try:
            for group_index, items in groups:
                pending.append((group_index, _submit(pool, group_index, items, work_dir)))
                workers.update(getattr(pool, "_processes", None) or {})
                if len(pending) >= 2 * config.num_workers:
                    yield _next_result(pending)
            while pending:
                yield _next_result(pending)
        except BrokenProcessPool:
            error = _worker_died(list(workers.values()), pending)
            _stop_pool(pool, pending)
            raise error from None
        except BaseException:
            _stop_pool(pool, pending)
            raise


def _next_result(pending: deque) -> GroupResult:
    """The first pending group's result, taken off ``pending`` only once it is in: a worker that
    died while making it leaves it there, so the error line names it among those in flight."""
    result = pending[0][1].result()
    pending.popleft()
    return result




def _submit(pool, group_index: int, items, work_dir: str):
    """``pool.submit`` with Ctrl-C (and SIGTERM) held back: the first submits start worker processes, and a
    start cut short leaves a half-started worker that prints a traceback on its way out."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        return pool.submit(_process_in_worker, group_index, items, work_dir)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return pool.submit(_process_in_worker, group_index, items, work_dir)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_died(processes: List, pending: deque) -> "WorkerDiedError":
    """A worker that died (OOM killer, kill -9, a crash in a native library) becomes one line
    naming the groups in flight and how to continue."""
    in_flight = [g for g, _ in pending]
    how = _how_workers_died(processes)
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


def _how_workers_died(processes: List) -> str:
    """`` (killed by SIGKILL: out of memory?)`` or the like, from the worker that died first."""
    import signal

    codes = []
    for process in processes:
        if process.exitcode is None:
            process.join(timeout=0.5)  # the pool's manager may be stopping it: let the code settle
        codes.append(process.exitcode)
    killed = [c for c in codes if c is not None and c < 0 and c != -signal.SIGTERM]  # SIGTERM: the pool's own teardown
    for code in sorted(killed, key=lambda c: c != -signal.SIGKILL):  # a SIGKILL (the OOM killer's) first
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = _why_sigkill() if name == "SIGKILL" else _cpu_limit() if name == "SIGXCPU" else ""
        return f" (killed by {name}{why})"
    failed = [c for c in codes if c is not None and c > 0]
    if WORKER_OUT_OF_MEMORY in failed:
        return " (out of memory while it started)"
    return f" (exit code {failed[0]})" if failed else " (killed, or crashed; out of memory?)"


def _cpu_limit() -> str:
    """A worker's SIGXCPU: the soft CPU-time limit (``ulimit -St``) it reached, which a worker
    does not survive (the coordinator does: errors.raise_on_sigterm)."""
    soft = _cpu_soft_limit()
    return f": its CPU-time limit (ulimit -t {soft}) ran out; raise it" if soft is not None else ": a CPU-time limit"


def _why_sigkill() -> str:
    """The OOM killer's signal, or the kernel's at a hard CPU-time limit (bash's ``ulimit -t``
    sets both limits, so SIGXCPU never comes first)."""
    soft = _cpu_soft_limit()
    return f": its CPU-time limit (ulimit -t {soft}) ran out, or memory did?" if soft is not None else ": out of memory?"


def _cpu_soft_limit() -> Optional[int]:
    """The soft CPU-time limit in seconds, None when there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    return None if soft == resource.RLIM_INFINITY else soft


def _stop_pool(pool, pending: deque) -> None:
    """Stop promptly (Ctrl-C, a failed group): cancel queued groups and end the workers; their
    fragments are discarded and remade by --resume. The executor's manager thread may still be
    handing back results of futures just cancelled: its errors then (InvalidStateError and
    friends) are noise of the shutdown, not failures, and must not print a traceback."""
    import threading

    previous = threading.excepthook

    def quiet(args) -> None:
        if args.thread is not None and ("ExecutorManagerThread" in type(args.thread).__name__
                                        or args.thread.name == "QueueFeederThread"):  # (see the feeder below)
            return
        previous(args)

    threading.excepthook = quiet
    # The call queue's feeder thread may be writing a group to a worker while the pool closes that
    # pipe under it: CPython's queue then prints "OSError: [Errno 9] Bad file descriptor" with a
    # traceback from that thread, at exit, after our last line. Nothing it could send matters now.
    call_queue = getattr(pool, "_call_queue", None)
    if call_queue is not None and hasattr(call_queue, "_on_queue_feeder_error"):
        call_queue._on_queue_feeder_error = lambda error, item: None
    for _, future in pending:
        future.cancel()
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + 5  # one wait for all of them, not 5 s each
    for process in processes:  # gone before the coordinator's semaphores are (no worker traceback)
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:  # one that SIGTERM did not end (stuck in a native call): the exit must not wait on it
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
    pool.shutdown(wait=False, cancel_futures=True)


def worker_context():
    """Workers are spawned: a fresh interpreter each, nothing inherited but what is pickled.
    (A fork server that preloads spaCy once was measured: no gain in wall time on 2 cores, and a
    Ctrl-C while it forks could leave a half-started worker printing a traceback.)"""
    import multiprocessing

    from ..errors import start_resource_tracker

    start_resource_tracker()
    return multiprocessing.get_context("spawn")
