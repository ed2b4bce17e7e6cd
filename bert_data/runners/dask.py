"""``--runner dask``: the local runner's groups, journal and shard assembly, with the groups made
on a ``dask.distributed`` cluster instead of a process pool.

Everything that decides the bytes is shared with the local runner (:mod:`bert_data.runners.job`): the plan, the
per-group function :func:`bert_data.runners.worker.make_group`, the in-order assembly with its journal
(so ``--resume`` works unchanged), the manifest. Only who runs a group differs, so the shards are
byte-identical to the local runner's for any number of Dask workers.

* ``--scheduler_address tcp://HOST:PORT`` (or ``--scheduler_file F``, as dask-jobqueue and
  ``dask scheduler --scheduler-file`` write it) runs on an existing cluster; without either, a
  ``LocalCluster`` of ``--num_workers`` single-threaded worker processes on loopback, with no
  dashboard unless ``--dask_dashboard``.
* Workers write each group's fragment into the run's work directory and the coordinator appends
  it, so every worker must see ``--output_dir`` at the same path (a shared file system on a real
  cluster), as well as the documents and the vocabulary (docs/cluster.md).
* A worker killed mid-group (kill -9, the OOM killer, a preempted node) loses only that task: the
  scheduler runs it again elsewhere and, groups being deterministic, the bytes are the same. A
  group that kills every worker it is given (``distributed.scheduler.allowed-failures`` times),
  or a lost scheduler, ends the run with one line (exit 3); ``--resume`` continues from the journal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from concurrent.futures import CancelledError
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..config import Config
from ..errors import BertDataError, ConfigError
from ..faults import dask_worker_faults
from ..group import Resources, build_resources
from ..metadata import WorkItem
from .startup import scheduler_address_in
from .worker import GroupResult, make_group

log = logging.getLogger("bert_data")

_RESOURCES: Dict[Config, Resources] = {}  # per worker process: built by the first group of a run


class DaskRunnerError(BertDataError):
    """The cluster failed the run (a lost scheduler, a group that kills every worker): resumable."""

    exit_code = 3


def _process_on_worker(
    config: Config, group_index: int, items: List[WorkItem], work_dir: str, topic: str = ""
) -> GroupResult:
    """One group on a Dask worker; the tokenizer and segmenter are built once per worker and run.
    With a ``topic``, the input bytes read are sent to the client as they are read (progress)."""
    resources = _RESOURCES.get(config)
    if resources is None:
        _RESOURCES.clear()  # a worker serves one run at a time: do not keep an earlier run's
        resources = _RESOURCES[config] = build_resources(config)
    resources.bytes_read = _BytesEvents(topic, group_index) if topic else None
    dask_worker_faults(group_index)  # test hooks (bert_data.faults)
    return make_group(group_index, items, resources, work_dir)


class _BytesEvents:
    """The worker side of the progress: :func:`bert_data.group._reporting_bytes` advances
    ``value`` (about every MiB read), and each advance goes to the scheduler as an event of
    ``topic`` carrying (group, bytes of the group read so far), which the client follows
    (:class:`_ProgressFollower`). Cumulative per group, so a group retried after a worker died
    is not counted twice."""

    def __init__(self, topic: str, group_index: int) -> None:
        self.topic = topic
        self.group_index = group_index
        self._value = 0

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        self._value = new
        with contextlib.suppress(Exception):  # progress must never fail a group
            from distributed import get_worker

            get_worker().log_event(self.topic, [self.group_index, new])


class _ProgressFollower:
    """The client side: advances the run's shared ``bytes_read`` counter (what the local
    runner's workers advance) by what the workers report, at most each group's input bytes."""

    def __init__(self, bytes_read) -> None:
        self.bytes_read = bytes_read
        self.per_group: Dict[int, int] = {}

    def on_event(self, event) -> None:
        _, (group_index, seen) = event
        self.advance(int(group_index), int(seen))

    def advance(self, group_index: int, seen: int) -> None:
        before = self.per_group.get(group_index, 0)
        if seen > before and self.bytes_read is not None:
            self.per_group[group_index] = seen
            self.bytes_read.value += seen - before


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ConfigError(
            "--runner dask needs dask.distributed: pip install 'bert_data[dask]'"
        ) from None
    return distributed


@contextlib.contextmanager
def dask_client(config: Config) -> Iterator[object]:
    """A client of the cluster the flags name, or of a LocalCluster started (and stopped) here.
    Dask's INFO lines (every worker and connection started and closed) stay off the console."""
    distributed = _import_distributed()
    with _quiet_dask_logs():
        with _client(config, distributed) as client:
            yield client


@contextlib.contextmanager
def _quiet_dask_logs() -> Iterator[None]:
    """This process's Dask logs off the console: what goes wrong reaches the user as our one
    line (a lost scheduler is otherwise a page of reconnection tracebacks first)."""
    names = ["distributed"] + [n for n in list(logging.root.manager.loggerDict) if n.startswith("distributed.")]
    loggers = [logging.getLogger(name) for name in names]  # Dask's config sets some children's levels
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def _client(config: Config, distributed) -> Iterator[object]:
    cluster = None
    try:
        if config.scheduler_address:
            client = distributed.Client(config.scheduler_address, timeout="30s", set_as_default=False)
        elif config.scheduler_file:  # its address, read (and checked at start-up) by startup.scheduler_address_in
            client = distributed.Client(scheduler_address_in(config.scheduler_file), timeout="30s", set_as_default=False)
        else:
            _local_worker_environment(config)
            try:
                with _interrupts_blocked():
                    cluster = _local_cluster(config, distributed)
                client = distributed.Client(cluster, set_as_default=False)
            except BaseException:  # (a Ctrl-C held back while it started arrives here): no orphans
                if cluster is not None:
                    with contextlib.suppress(Exception):
                        cluster.close(timeout=10)
                raise
    except (OSError, TimeoutError) as exc:
        where = config.scheduler_address or (
            f"the scheduler of {config.scheduler_file}" if config.scheduler_file else "a LocalCluster")
        raise DaskRunnerError(f"--runner dask: cannot reach {where} ({exc}); check that the scheduler runs") from None
    except Exception as exc:  # "Nanny failed to start", a bad scheduler file, ...
        detail = str(exc).splitlines()[0] if str(exc) else ""
        if not (config.scheduler_address or config.scheduler_file):
            what = "could not start a LocalCluster"
        else:
            what = f"could not connect to {config.scheduler_address or config.scheduler_file}"
        raise DaskRunnerError(f"--runner dask: {what} ({type(exc).__name__}: {detail})") from None
    try:
        if config.dask_dashboard and getattr(client, "dashboard_link", None):
            log.warning("Dask dashboard: %s", client.dashboard_link)
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=10)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=10)


@contextlib.contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while the LocalCluster starts. A blocked signal mask is
    inherited by the threads this thread starts (the cluster's event loop) and by every process
    they start, across fork and exec: the fork server, the workers, a worker restarted after a
    crash. So a terminal's Ctrl-C, which goes to the whole foreground process group, reaches only
    the coordinator, which stops the run in one line and shuts the cluster down; without this
    every worker printed its own KeyboardInterrupt traceback. (SIGTERM is not blocked: the
    nannies stop their workers with it.) A Ctrl-C while the cluster starts is delivered when
    this block ends."""
    block = getattr(signal, "pthread_sigmask", None)
    if block is None:  # pragma: no cover - Windows
        yield
        return
    # multiprocessing's resource tracker, when it is first started, blocks SIGINT around its own
    # start and then *unblocks* it in the thread that started it (the cluster's event loop, just
    # before the fork server is started from there): start it now, so that it is already running
    from ..errors import start_resource_tracker

    start_resource_tracker()  # (immune to a hang-up too; run_job has usually started it already)
    previous = block(signal.SIG_BLOCK, {signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])})
    try:
        yield
    finally:
        block(signal.SIG_SETMASK, previous)


def _local_cluster(config: Config, distributed):
    """``--num_workers`` single-threaded worker processes, everything on loopback: with
    dashboard_address=None the scheduler still serves its HTTP routes on :8787 of every
    interface, so it gets a loopback port (a dashboard too)."""
    return distributed.LocalCluster(
        n_workers=config.num_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address="127.0.0.1:0" if config.dask_dashboard else None, silence_logs=logging.ERROR,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        # the run's environment, set in each worker as it starts: a worker forked from a fork
        # server that an earlier run of this process started would otherwise have that run's
        env=dict(os.environ),
    )


class _Session:
    """The run's cluster connection, made in a thread from the moment the job starts: starting a
    LocalCluster (~0.5 s of processes starting) or reaching a scheduler then overlaps the metadata
    scan instead of following it, and one cluster serves both halves of a train/validation job."""

    def __init__(self, config: Config) -> None:
        self._context = dask_client(config)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bert_data-dask-connect")
        self._client = self._pool.submit(self._context.__enter__)

    def client(self):
        return self._client.result()  # the connection's DaskRunnerError, if it failed

    def close(self) -> None:
        try:
            self._client.result()
        except BaseException:
            return  # nothing was opened
        finally:
            self._pool.shutdown()
        self._context.__exit__(None, None, None)


_SESSION: Optional[_Session] = None


@contextlib.contextmanager
def dask_session(config: Config) -> Iterator[None]:
    """Connect to the cluster in the background for the length of the block (a no-op for other
    runners, or inside an active session); :func:`run_groups_dask` uses that connection."""
    global _SESSION
    if config.runner != "dask" or _SESSION is not None:
        yield
        return
    _import_distributed()  # a missing extra is one line now, not in the thread
    session = _SESSION = _Session(config)
    try:
        yield
    finally:
        _SESSION = None
        session.close()


def dask_ready() -> None:
    """Wait for the job's cluster connection (:func:`dask_session`): a cluster that cannot be
    reached is one line now, before the output directory is touched, so the corrected rerun is
    not blocked by a work directory of a run that never ran a group."""
    if _SESSION is not None:
        _SESSION.client()


@contextlib.contextmanager
def _connection(config: Config) -> Iterator[object]:
    if _SESSION is not None:
        yield _SESSION.client()
    else:
        with dask_client(config) as client:
            yield client


def _local_worker_environment(config: Config) -> None:
    """Dask starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc gives memory back to the
    kernel after every large free and takes it again on the next batch: measured here, that costs
    a group ~25% more CPU (page faults) than the local runner's workers. Our workers' memory is
    bounded by a group, not by what they keep, so the LocalCluster's workers get glibc's default,
    and Dask's statistical profiler is off."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    dask.config.set({
        "distributed.nanny.pre-spawn-environ": environ,
        # the statistical profiler walks every worker thread's Python stack every 10 ms: a group is
        # deep pure-Python work, so that sampling is a cost proportional to the run (docs/cluster.md)
        "distributed.worker.profile.enabled": False,
        # periodic callbacks of the worker's event loop thread each take the GIL from the thread
        # running the group: the loop-blocked check every 20 ms, memory every 100 ms, psutil
        # every 500 ms by default; a group runs for seconds, so coarser costs nothing
        "distributed.admin.tick.interval": "500ms",
        "distributed.worker.memory.monitor-interval": "500ms",
        "distributed.admin.system-monitor.interval": "2s",
    })
    _preloading_fork_server(config)


def fork_server_preload(config: Config) -> list:
    """What a worker process needs before its first group, imported once in the fork server:
    spaCy as the rule-based sentencizer loads it (:mod:`bert_data.runners.preload`), or as a
    named pipeline does (which may need PyTorch)."""
    if config.lines_are_sentences:  # (sentences are lines: spaCy is never loaded)
        return ["distributed", "numpy", "bert_data.group"]
    return ["distributed", "numpy", "spacy" if config.spacy_model else "bert_data.runners.preload", "bert_data.group"]


def _preloading_fork_server(config: Config) -> None:
    """Start the LocalCluster's workers from a fork server that has imported Dask, spaCy and our
    per-group code once (multiprocessing's ``forkserver`` with a preload list). A spawned worker
    imports them itself: ~1.8 s of CPU per worker (spaCy 0.95, distributed 0.6, ours 0.2) taken
    from the cores the groups need, again for every worker restarted after a crash. Where there
    is no fork server (Windows), workers are spawned as before."""
    import dask
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    from distributed.utils import get_mp_context

    context = get_mp_context()  # Dask sets its own preload list on its first call, and never again
    context.set_forkserver_preload(fork_server_preload(config))  # type: ignore[attr-defined]


def run_groups_dask(
    config: Config, groups: Iterable[Tuple[int, List[WorkItem]]], work_dir: str, bytes_read=None,
    shard_files: Sequence[int] = (),  # (run_groups' signature: groups are made elsewhere, into fragments)
) -> Iterator[GroupResult]:
    """Results in group order, as :func:`bert_data.runners.pool.run_groups` gives them; at most
    two groups per Dask worker thread are in flight, so the plan is read ahead boundedly.
    ``bytes_read`` is advanced as the workers read, wherever they run: they send events to the
    scheduler (``Worker.log_event``) that this client follows (``Client.subscribe_topic``)."""
    distributed = _import_distributed()
    with _connection(config) as client:
        if not (config.scheduler_address or config.scheduler_file):  # our LocalCluster: see _Watch
            watch = _Watch(client, LOCAL_WORKERLESS_SECONDS, distributed)
        else:
            watch = None  # another cluster may scale up from none: its scheduler decides
        threads = sum(client.nthreads().values()) or config.num_workers
        pending: deque = deque()
        run_key = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        topic = f"bert_data-progress-{run_key}" if bytes_read is not None else ""
        follower = _ProgressFollower(bytes_read)
        if topic:
            client.subscribe_topic(topic, follower.on_event)
        try:
            for group_index, items in groups:
                future = client.submit(
                    _process_on_worker, config, group_index, list(items), work_dir, topic,
                    key=f"bert_data-group-{group_index}-{run_key}", pure=False,
                )
                pending.append((group_index, future))
                if len(pending) >= 2 * threads:
                    yield _finished(pending.popleft(), distributed, follower, watch)
            while pending:
                yield _finished(pending.popleft(), distributed, follower, watch)
        finally:
            for _, future in pending:
                with contextlib.suppress(Exception):
                    future.cancel()
            if topic:
                with contextlib.suppress(Exception):
                    client.unsubscribe_topic(topic)


LOCAL_WORKERLESS_SECONDS = 60.0  # a LocalCluster without a worker this long has lost them for good


class _Watch:
    """Waits for a group of our own LocalCluster, failing the run when the cluster has had no
    worker for ``seconds``: a nanny restarts a dead worker within seconds, and a group that kills
    every worker it is given ends in KilledWorker, but workers that cannot start again (their
    environment broken under them: a file of the installed package changed, a full disk) leave a
    cluster that never fails a task, and the run would wait for ever."""

    def __init__(self, client, seconds: float, distributed) -> None:
        self.client, self.seconds, self.distributed = client, seconds, distributed

    def wait(self, group_index: int, future) -> None:
        """Returns once the group's future is done (its result or error is then at hand), or
        when the scheduler cannot be asked (the future will say so)."""
        workerless_since: Optional[float] = None
        while not future.done():
            asked = time.monotonic()
            try:
                self.distributed.wait([future], timeout=1.0)  # returns as soon as the group is done
            except Exception:  # (TimeoutError; asyncio's before Python 3.11) or what the future will say
                pass
            if future.done():
                return
            time.sleep(max(0.0, 0.5 - (time.monotonic() - asked)))  # never a busy loop
            try:
                workers = self.client.nthreads()
            except Exception:  # the scheduler is gone: the future says so (future.result below)
                return
            if workers:
                workerless_since = None
            elif workerless_since is None:
                workerless_since = time.monotonic()
            elif time.monotonic() - workerless_since > self.seconds:
                raise DaskRunnerError(
                    f"every worker of the Dask LocalCluster died and none started again for {self.seconds:.0f} s "
                    f"while group {group_index} was being made (a broken installation or environment?); nothing was "
                    f"published: continue with --resume (same flags) once a plain run of the same command works"
                )


def _finished(entry: Tuple[int, object], distributed, follower: _ProgressFollower,
              watch: Optional[_Watch] = None) -> GroupResult:
    """The group's result; the progress is brought up to its whole input (an event may still be
    on its way, or the group may have read less than a MiB)."""
    if watch is not None:
        watch.wait(*entry)
    result = _result(entry, distributed)
    follower.advance(result.group_index, result.stats.get("input_bytes", 0))
    return result


def _result(entry: Tuple[int, object], distributed) -> GroupResult:
    group_index, future = entry
    try:
        return future.result()
    except distributed.KilledWorker:
        raise DaskRunnerError(
            f"group {group_index} killed every Dask worker it was given (out of memory?); nothing was published: "
            f"continue with --resume (same flags) after giving workers more memory or a smaller --group_bytes"
        ) from None
    except (OSError, TimeoutError, distributed.comm.CommClosedError, CancelledError) as exc:
        # (a lost scheduler cancels every future: FutureCancelledError, "scheduler-connection-lost")
        raise DaskRunnerError(
            f"lost the Dask scheduler while group {group_index} was being made ({type(exc).__name__}); nothing was "
            f"published: continue with --resume (same flags)"
        ) from None
    except BertDataError:
        raise  # the group's own error (a document that cannot be read, ...), raised on the worker
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise DaskRunnerError(
            f"the Dask cluster failed group {group_index} ({type(exc).__name__}: {detail}); nothing was published: "
            f"continue with --resume (same flags)"
        ) from None
