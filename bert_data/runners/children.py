"""The coordinator's child processes: how they start, die with it, and are stopped.

Every process the coordinator starts for a run (the pool's group workers,
:mod:`bert_data.runners.pool`; the processes that rewrite shards at publish,
:mod:`bert_data.output.rewrite`) is a spawned interpreter (:func:`spawn_context`) that leaves
Ctrl-C and a hang-up to the coordinator and never outlives it (:func:`child_started`), is
started with the stop signals held back (:func:`submit_held`), is stopped promptly and quietly
when the run stops (:func:`stop_pool`), and, when it dies, is named by how
(:func:`how_processes_died`: the OOM killer's SIGKILL, a CPU-time limit).
"""

from __future__ import annotations

import contextlib
import multiprocessing.context as mp_context
import multiprocessing.util as mp_util
import os
import signal
import threading
import time
from typing import Iterable, Iterator, List, Optional

from concurrent.futures import CancelledError

from ..errors import BertDataError


class WorkerDiedError(BertDataError):
    """A child process (a group's worker, a shard's rewriter) died mid-run; the journal is intact
    and ``--resume`` continues."""

    exit_code = 3


def alive(pid: int) -> bool:
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


def die_with_parent(parent_pid: int) -> None:
    """A worker must not outlive its coordinator (kill -9, OOM killer): it would keep computing
    and hold the coordinator's pipes open. Linux: PR_SET_PDEATHSIG; everywhere: a watchdog thread
    that polls the coordinator (a zombie counts as dead)."""
    import threading

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while alive(parent_pid):
            time.sleep(0.5)
        os._exit(1)

    if not alive(parent_pid):
        os._exit(1)
    threading.Thread(target=watch, name="bert_data-parent-watchdog", daemon=True).start()


STOP_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGXCPU") if hasattr(signal, name)}
WORKER_OUT_OF_MEMORY = 75  # a worker's exit code when it could not start for memory


def how_processes_died(processes: List) -> str:
    """`` (killed by SIGKILL: out of memory?)`` or the like, from the child that died first."""
    codes, deadline = [], time.monotonic() + 0.5
    for process in processes:  # the pool's manager may be reaping it too: the thread that lost that race
        while process.exitcode is None and time.monotonic() < deadline:  # sees no code until the winner sets it
            process.join(timeout=0.05)
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


def stop_pool(pool, pending: Iterable = ()) -> None:
    """Stop promptly (Ctrl-C, a failed group or shard): cancel the queued work (``pending``: pairs
    whose second item is a future) and end the children; what they were writing is discarded and
    remade by --resume. The executor's manager thread may still be handing back results of
    futures just cancelled: its errors then (InvalidStateError and friends) are noise of the
    shutdown, not failures, and must not print a traceback."""
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


def stop_pool_held(pool, pending: Iterable = ()) -> None:
    """:func:`stop_pool` that a further stop cannot cut short (a second Ctrl-C, a SIGTERM after
    it): cut short, it would leave children working, and the interpreter's exit would then wait
    for them. It runs with the stop signals held (:func:`stops_held`), and again if one came as
    they were held or released: the caller is stopping already, with its own exception."""
    while True:
        try:
            with stops_held():
                stop_pool(pool, pending)
            return
        except BaseException:  # (KeyboardInterrupt, Terminated: another stop while stopping)
            continue


def wait_held(future, timeout: float) -> None:
    """Wait at most ``timeout`` seconds for ``future`` with the stop signals held: a stop's
    handler run inside the future's lock (between two bytecodes of its ``Condition``) left it
    held, and the pool's manager thread, then the interpreter's exit, waited on it for ever. A
    stop meanwhile is raised when the wait is done, outside the lock (:func:`stops_held`)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    with stops_held():
        try:
            future.exception(timeout=timeout)
        except (FutureTimeout, CancelledError):
            pass


def process_pool(workers: int, initializer, initargs: tuple):
    """A ``ProcessPoolExecutor`` of ``workers`` spawned children (:func:`spawn_context`), made with
    the stop signals held (a stop while it makes its queues' semaphores would leave one registered,
    which the resource tracker then reports as leaked). Its children start on the first submits
    (:func:`submit_held`)."""
    from concurrent.futures import ProcessPoolExecutor

    context = spawn_context()
    with stops_held():
        return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=initializer,
                                   initargs=initargs)


def spawn_context():
    """Workers are spawned: a fresh interpreter each, nothing inherited but what is pickled.
    (A fork server that preloads spaCy once was measured: no gain in wall time on 2 cores, and a
    Ctrl-C while it forks could leave a half-started worker printing a traceback.) Each child
    leaves without its interpreter's teardown once its work has ended (:class:`QuickExitProcess`)."""
    from ..errors import start_resource_tracker

    start_resource_tracker()
    return QuickExitContext()


class QuickExitProcess(mp_context.SpawnProcess):
    """A spawned child that, once its work has ended normally, does what multiprocessing does after
    it (``BaseProcess._bootstrap``: the exit function, whose finalizers remove a worker's scratch
    directory; its non-daemon threads joined; its streams flushed) and then ``os._exit(0)``, not
    the interpreter's teardown. That teardown (numpy's, spaCy's, the vocabulary's objects freed)
    took a pool's workers 0.12-0.17 s at the end of every 2-worker run, which
    ``ProcessPoolExecutor.shutdown`` waits for; 0.013-0.017 s without it. A child whose work
    raised never gets there (its exit code is the usual one); without those functions (another
    Python) it exits as usual."""

    def run(self) -> None:
        super().run()
        steps = [getattr(mp_util, "_exit_function", None), getattr(threading, "_shutdown", None),
                 getattr(mp_util, "_flush_std_streams", None)]
        if all(step is not None for step in steps):
            for step in steps:
                step()  # type: ignore[misc]
            os._exit(0)


class QuickExitContext(mp_context.SpawnContext):
    """multiprocessing's spawn context whose children are :class:`QuickExitProcess` ones."""

    Process = QuickExitProcess


def child_started(parent_pid: int) -> None:
    """What every child does first: it dies with the coordinator, leaves Ctrl-C and a closed
    terminal to it (the coordinator stops the children in order), and unblocks the stop signals
    it inherited from :func:`submit_held` (else a ``terminate()`` would never land)."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def submit_held(pool, function, *args):
    """``pool.submit(function, *args)`` with the stop signals held back (:func:`stops_held`): the
    first submits start child processes, and a start cut short leaves a half-started child that
    prints a traceback on its way out."""
    with stops_held():
        return pool.submit(function, *args)


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM, SIGHUP and SIGXCPU held back until the block is done (starting a child,
    making a process pool: a stop in the middle leaves a half-started child printing a traceback,
    or a semaphore registered whose finalizer was never made, which the resource tracker then
    reports as leaked). Blocking the signals in this thread is not enough: another thread of the
    coordinator (the journal's) may take one, and Python then runs the handler here all the same.
    So the handlers themselves are deferred: a stop signal meanwhile is only noted, then raised
    again once the block is done (in this thread's handler, as the user asked)."""
    import threading

    if threading.current_thread() is not threading.main_thread():  # (handlers are the main thread's to set)
        with _masked():
            yield
        return
    noted: List[int] = []
    previous = {}
    try:
        for number in STOP_SIGNALS:
            handler = signal.getsignal(number)
            if callable(handler):  # (one ignored, or left at the default, is as it was)
                previous[number] = handler
                signal.signal(number, lambda signum, frame: noted.append(signum))
    except BaseException:  # a stop that was pending ran as a handler was swapped: put them all back, raise it
        _restore(previous)
        raise
    try:
        with _masked():
            yield
    finally:
        _restore(previous)
        if noted:
            signal.raise_signal(noted[0])


def _restore(handlers: dict) -> None:
    """Every handler put back, even when a stop comes meanwhile: ``signal.signal`` runs a pending
    handler first (one already restored raises there), so each one is retried until it is back,
    and that stop is raised once all are."""
    stop = None
    for number, handler in handlers.items():
        while True:
            try:
                signal.signal(number, handler)
                break
            except BaseException as exc:  # (KeyboardInterrupt, Terminated: a stop's own handler ran)
                stop = stop or exc
    if stop is not None:
        raise stop


@contextlib.contextmanager
def _masked() -> Iterator[None]:
    """The stop signals blocked in this thread (a child started meanwhile inherits the mask:
    :func:`child_started` unblocks them)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
