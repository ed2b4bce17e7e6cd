"""The local runner: the per-group function on this machine, in-process or on a pool of worker
processes, with crash-safe assembly and ``--resume``.

Groups are submitted in order with at most ``2 * num_workers`` in flight (memory and metadata
read-ahead stay bounded); results come back in group order and their fragments are appended to
the partial shards by :class:`~bert_data.writer.ShardAssembler`, journaled after each group.
Shards get their final names only when every group is in, and ``data_params.json`` is written
last (the commit point). A killed run is continued with ``--resume`` to byte-identical output.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter, deque
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..config import Config, output_settings
from ..errors import BertDataError, OutputError, ResumeError, plural
from ..format.manifest import MANIFEST_NAME, VocabIdentity, build_manifest, load_manifest
from ..group import GroupResult, Resources, build_resources, group_plan
from ..metadata import (
    MetadataSummary,
    WorkItem,
    decode_group,
    encode_group,
    iter_metadata,
    scan_metadata,
    split_hash,
)
from ..storage import exists as storage_exists, is_remote, join as storage_join, open_metadata, write_json_atomically
from .remote import make_group, run_to_url
from ..writer import RUN_FILE, WORK_DIR_NAME, ShardAssembler, load_resume_state, prepare_output_dir
from .lock import output_lock
from .startup import StartupInfo, disk_space_warning, ensure_open_files, input_fingerprints, startup_checks

log = logging.getLogger("bert_data")


class WorkerDiedError(BertDataError):
    """A worker process died mid-run; the journal is intact and ``--resume`` continues."""

    exit_code = 3

_WORKER_RESOURCES: Optional[Resources] = None


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


def _init_worker(config: Config, parent_pid: int, bytes_read=None) -> None:
    global _WORKER_RESOURCES
    import signal

    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    _WORKER_RESOURCES = build_resources(config)
    _WORKER_RESOURCES.bytes_read = bytes_read


def _process_in_worker(group_index: int, items: Sequence[WorkItem], work_dir: str) -> GroupResult:
    if _WORKER_RESOURCES is None:
        raise RuntimeError("worker initializer did not run")
    _crash_point("worker", group_index)  # test hook: this worker is killed (as by the OOM killer)
    return make_group(group_index, items, _WORKER_RESOURCES, work_dir)


def _group_runner(config: Config):
    """Who makes the groups: this machine's process pool, or a Dask cluster (everything else of a
    run, plan, journal, assembly and manifest, is the same)."""
    if config.runner == "dask":
        from .dask import run_groups_dask

        return run_groups_dask
    return run_groups


def run_groups(
    config: Config, groups: Iterable[Tuple[int, List[WorkItem]]], work_dir: str, bytes_read=None
) -> Iterator[GroupResult]:
    """Results in group order. At most ``2 * num_workers`` groups are in flight, so memory
    (and the plan read ahead) stays bounded whatever the corpus size. ``bytes_read`` (a shared
    ``multiprocessing.Value``) is advanced by the workers as they read, for the progress bar."""
    if config.num_workers == 1:
        resources = build_resources(config)
        resources.bytes_read = bytes_read
        for group_index, items in groups:
            yield make_group(group_index, items, resources, work_dir)
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = worker_context()
    with ProcessPoolExecutor(
        max_workers=config.num_workers, mp_context=context, initializer=_init_worker,
        initargs=(config, os.getpid(), bytes_read),
    ) as pool:
        pending: deque = deque()  # (group index, future), in group order
        workers: Dict[int, object] = {}  # every worker process started, kept to tell how one died
        try:
            for group_index, items in groups:
                pending.append((group_index, _submit(pool, group_index, items, work_dir)))
                workers.update(getattr(pool, "_processes", None) or {})
                if len(pending) >= 2 * config.num_workers:
                    yield pending.popleft()[1].result()
            while pending:
                yield pending.popleft()[1].result()
        except BrokenProcessPool:
            error = _worker_died(list(workers.values()), pending)
            _stop_pool(pool, pending)
            raise error from None
        except BaseException:
            _stop_pool(pool, pending)
            raise


def _submit(pool, group_index: int, items, work_dir: str):
    """``pool.submit`` with Ctrl-C (and SIGTERM) held back: the first submits start worker processes, and a
    start cut short leaves a half-started worker that prints a traceback on its way out."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        return pool.submit(_process_in_worker, group_index, items, work_dir)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        return pool.submit(_process_in_worker, group_index, items, work_dir)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_died(processes: List, pending: deque) -> "WorkerDiedError":
    """A worker that died (OOM killer, kill -9, a crash in a native library) becomes one line
    naming the groups in flight and how to continue."""
    in_flight = [g for g, _ in pending]
    how = _how_workers_died(processes)
    if not in_flight:
        groups = "the run"
    elif len(in_flight) == 1:
        groups = f"group {in_flight[0]} was being made"
    else:
        groups = f"groups {in_flight[0]}-{in_flight[-1]} were being made"
    hint = " and fewer --num_workers or a smaller --group_bytes" if "SIGKILL" in how or "memory" in how else ""
    return WorkerDiedError(
        f"a worker process died{how} while {groups}; nothing was published: continue with --resume (same flags){hint}"
    )


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
        return f" (killed by {name}{': out of memory?' if name == 'SIGKILL' else ''})"
    failed = [c for c in codes if c is not None and c > 0]
    return f" (exit code {failed[0]})" if failed else " (killed, or crashed; out of memory?)"


def _stop_pool(pool, pending: deque) -> None:
    """Stop promptly (Ctrl-C, a failed group): cancel queued groups and end the workers; their
    fragments are discarded and remade by --resume. The executor's manager thread may still be
    handing back results of futures just cancelled: its errors then (InvalidStateError and
    friends) are noise of the shutdown, not failures, and must not print a traceback."""
    import threading

    previous = threading.excepthook

    def quiet(args) -> None:
        if args.thread is not None and "ExecutorManagerThread" in type(args.thread).__name__:
            return
        previous(args)

    threading.excepthook = quiet
    for _, future in pending:
        future.cancel()
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    for process in processes:  # gone before the coordinator's semaphores are (no worker traceback)
        process.join(timeout=5)
    pool.shutdown(wait=False, cancel_futures=True)


def worker_context():
    """Workers are spawned: a fresh interpreter each, nothing inherited but what is pickled.
    (A fork server that preloads spaCy once was measured: no gain in wall time on 2 cores, and a
    Ctrl-C while it forks could leave a half-started worker printing a traceback.)"""
    import multiprocessing

    return multiprocessing.get_context("spawn")


ProgressCallback = Callable[[GroupResult], None]


def _crash_point(stage: str, group_index: int) -> None:
    """Test hook: ``BERT_DATA_CRASH_AT=stage:group`` kills this process with SIGKILL right there,
    so tests can check that every kill point leaves a resumable, never complete-looking, state.
    Stages: ``appended``, ``checkpointed``, ``published`` (the coordinator), ``worker`` (the
    worker process about to make that group), ``moved`` (output file N renamed into place by
    :mod:`bert_data.runners.output_files`), ``indexed`` (a URL output's group index written:
    :mod:`bert_data.runners.remote`)."""
    target = os.environ.get("BERT_DATA_CRASH_AT")
    if target and target == f"{stage}:{group_index}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


INPUT_CHANGES = {
    "metadata_sha256": "the metadata files' content changed",
    "vocab_sha256": "--vocab_file's content changed",
    "segmenter": "the sentence segmenter (spaCy or its model) changed",
    "tokenizers": "the tokenizers library changed",
    "bert_data_version": "bert_data's version changed",
}


def _check_same_inputs(config: Config, inputs: Dict[str, str]) -> None:
    """--resume refuses, naming what changed, when the inputs differ from the interrupted run's."""

    for where in (os.path.join(config.output_dir, WORK_DIR_NAME, RUN_FILE), os.path.join(config.output_dir, MANIFEST_NAME)):
        try:
            if not os.path.isfile(where) or os.path.getsize(where) > 64 << 20:
                continue  # absent, or not a regular file: the journal check says what is wrong
            with open(where, encoding="utf-8") as handle:
                previous = json.load(handle).get("inputs")
        except (OSError, ValueError, AttributeError):
            continue  # missing or damaged: the journal check says what is wrong with it
        if not isinstance(previous, dict):
            continue
        changed = [INPUT_CHANGES.get(k, k) for k in sorted(set(inputs) | set(previous)) if inputs.get(k) != previous.get(k)]
        if changed:
            raise ResumeError(
                f"--resume refused: {'; '.join(changed)} since the interrupted run ({where}); restore it, or start "
                f"over with --overwrite"
            )
        return


def _prepare(config: Config, inputs: Dict[str, str]):
    """Work dir, assembler, first group to make and counters so far (fresh run or --resume)."""
    settings = dict(output_settings(config), inputs=inputs)
    if config.resume:
        _check_same_inputs(config, inputs)
        state = load_resume_state(config.output_dir, settings)
        if state is None:
            return None
        work_dir = os.path.join(config.output_dir, WORK_DIR_NAME)
        assembler = ShardAssembler(
            config.output_dir, work_dir, config.name, config.num_output_files, resume_from=state
        )
        return work_dir, assembler, state["next_group"], Counter(state["stats"])
    work_dir = prepare_output_dir(config.output_dir, config.name, config.num_output_files, config.overwrite)
    write_json_atomically(os.path.join(work_dir, RUN_FILE), settings)
    assembler = ShardAssembler(config.output_dir, work_dir, config.name, config.num_output_files)
    return work_dir, assembler, 0, Counter()


def split_configs(config: Config) -> Dict[str, Config]:
    """One config per output: the run itself, or its train and validation halves.

    With ``--validation_fraction F`` a document goes to validation when the seeded hash of its
    metadata entry (as written, the same hash ``split_metadata --seed`` uses) is below F, so the
    split is decided before any instance exists: no NSP negative or duplicate crosses it, and a
    document keeps its side when others are added. With ``--validation_metadata_files`` those
    documents are the validation set and are excluded from train.
    """
    if not (config.validation_fraction or config.validation_metadata_files) or config.split_role:
        return {"": config}
    train = config.replace(output_dir=storage_join(config.output_dir, "train"), split_role="train")
    validation = config.replace(output_dir=storage_join(config.output_dir, "validation"), split_role="validation")
    if config.validation_metadata_files:
        validation = validation.replace(metadata_files=config.validation_metadata_files)
    return {"train": train, "validation": validation}


def _split_selector(config: Config):
    """(predicate choosing this half's documents, message when none is chosen), or (None, "")."""
    if not config.split_role:
        return None, ""
    role = config.split_role
    if config.validation_fraction:
        fraction, seed = config.validation_fraction, config.seed
        want_validation = role == "validation"
        hint = (
            f"--validation_fraction {fraction} leaves no document on the {role} side; "
            f"{'raise' if want_validation else 'lower'} it"
        )
        return (lambda source: (split_hash(source.entry, seed) < fraction) == want_validation), hint
    if role == "train":
        # The validation list is usually small: hold its paths to keep them out of train.
        held_out = {
            os.path.normpath(s.path) for s in iter_metadata(config.validation_metadata_files, config.input_files_prefix)
        }
        hint = "every document listed in --metadata_files is also in --validation_metadata_files: train is empty"
        return (lambda source: os.path.normpath(source.path) not in held_out), hint
    return None, ""


def run_job(
    config: Config, on_group: Optional[ProgressCallback] = None, on_start: Optional[Callable[..., None]] = None
) -> Dict[str, Dict]:
    """Run every output of the job (one, or train + validation); manifests by split name. The
    start-up checks run once, before either half is touched."""
    startup = startup_checks(config)
    parts = split_configs(config)
    lock = output_lock(config.output_dir) if len(parts) > 1 and not is_remote(config.output_dir) else contextlib.nullcontext()
    with lock, _cluster_session(config):
        return {
            name: run(_resumable(part, len(parts)), on_group=on_group, on_start=on_start, startup=startup)
            for name, part in parts.items()
        }


def _resumable(part: Config, parts: int) -> Config:
    """``--resume`` of a train/validation job killed before its second half began: that half
    has nothing to resume yet, so it simply starts (the pair is always complete or resumable)."""
    if parts > 1 and part.resume:
        started = storage_exists(storage_join(part.output_dir, WORK_DIR_NAME)) or storage_exists(
            storage_join(part.output_dir, MANIFEST_NAME)
        )
        if not started:
            return part.replace(resume=False)
    return part


def run(
    config: Config,
    on_group: Optional[ProgressCallback] = None,
    on_start: Optional[Callable[..., None]] = None,
    startup: Optional[StartupInfo] = None,
) -> Dict:
    """Run the whole job locally; returns the manifest that was written.

    The metadata is read once: the scan checks every entry and plans the groups into a spool
    file, which the run then reads. ``on_start`` gets the :class:`MetadataSummary` and a live
    count of input bytes read (``.value``), ``on_group`` every :class:`GroupResult` in order.

    Crash safety: groups are merged into partial shards in order and journaled after each
    one; shards get their final names only at the end and ``data_params.json`` is written
    last. A killed run is continued with ``--resume`` to byte-identical output.
    """
    vocab = (startup or startup_checks(config)).vocab
    ensure_open_files(config)  # every partial shard is an open file of the coordinator
    with _cluster_session(config):
        return _run(config, vocab, on_group, on_start)


def _cluster_session(config: Config):
    """A Dask run connects to its cluster while the metadata is scanned (:func:`dask_session`)."""
    if config.runner != "dask":
        return contextlib.nullcontext()
    from .dask import dask_session

    return dask_session(config)


def _run(config: Config, vocab: Dict[str, int], on_group: Optional[ProgressCallback], on_start) -> Dict:
    _remove_stale_plans()
    with tempfile.TemporaryDirectory(prefix=f"{_PLAN_PREFIX}{os.getpid()}_") as plan_dir:
        spool_path = os.path.join(plan_dir, "groups.jsonl")
        summary = _plan(config, spool_path)
        space = disk_space_warning(config, summary.total_bytes)
        if space:
            log.warning(space)
        import multiprocessing

        bytes_read = multiprocessing.get_context("spawn").RawValue("q", 0)
        if on_start is not None:  # the MetadataSummary (entries, total_bytes, groups) before any group runs
            on_start(summary, bytes_read)
        if is_remote(config.output_dir):  # object-store layout; no lock (docs/cluster.md)
            return _run_to_url(config, spool_path, summary, len(vocab), on_group, bytes_read)
        try:
            with output_lock(config.output_dir):  # before --overwrite removes anything
                return _run_planned(config, spool_path, summary, len(vocab), on_group, bytes_read)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            work_dir = os.path.join(config.output_dir, WORK_DIR_NAME)
            if not os.path.isdir(work_dir):
                raise OutputError(
                    f"the work directory {work_dir} was removed while the run was writing ({exc.strerror or exc}); "
                    f"nothing was published: start over without --resume"
                ) from None
            raise OutputError(
                f"writing to --output_dir {config.output_dir} failed: {exc.strerror or exc}{where}; "
                f"free space and continue with --resume"
            ) from None


def _run_to_url(config: Config, spool_path: str, summary: MetadataSummary, vocab_size: int, on_group, bytes_read) -> Dict:
    """:func:`bert_data.runners.remote.run_to_url` with this runner's plan and group runner."""

    def planned(done: set) -> Iterator[Tuple[int, List[WorkItem]]]:
        return (group for group in _planned_groups(config, spool_path, 0) if group[0] not in done)

    manifest, stats = run_to_url(config, planned, summary, vocab_size, _group_runner(config), on_group, bytes_read)
    for warning in quality_warnings(stats, manifest) if stats else ():
        log.warning(warning)
    return manifest


_PLAN_PREFIX = "bert_data_plan_"


def _remove_stale_plans() -> None:
    """The plan spools (temp dirs named with their run's pid) of runs killed with SIGKILL, which
    could not clean up: removed when that process is gone, so they do not pile up in /tmp."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(_PLAN_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(_PLAN_PREFIX):].split("_", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or reused by another process: left alone)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:
            continue  # another user's process: not ours to judge


def _plan(config: Config, spool_path: str) -> MetadataSummary:
    """Scan the metadata once, writing the planned groups to ``spool_path``."""
    select, empty_hint = _split_selector(config)
    metadata_index = {path: i for i, path in enumerate(config.metadata_files)}
    with open(spool_path, "w", encoding="ascii") as spool:
        return scan_metadata(
            config.metadata_files, config.input_files_prefix, select, empty_hint, plan=group_plan(config),
            on_group=lambda g, items: spool.write(encode_group(g, items, metadata_index) + "\n"), opener=open_metadata,
        )


def _planned_groups(config: Config, spool_path: str, first_group: int) -> Iterator[Tuple[int, List[WorkItem]]]:
    with open(spool_path, encoding="ascii") as spool:
        for line in spool:
            group_index, items = decode_group(line, config.metadata_files)
            if group_index >= first_group:
                yield group_index, items


def _run_planned(
    config: Config, spool_path: str, summary: MetadataSummary, vocab_size: int,
    on_group: Optional[ProgressCallback], bytes_read,
) -> Dict:
    inputs = input_fingerprints(config, summary, config.vocab_file)
    prepared = _prepare(config, inputs)
    if prepared is None:
        log.info("%s is already complete: nothing to resume", config.output_dir)
        return load_manifest(config.output_dir).data
    work_dir, assembler, first_group, stats = prepared
    if first_group > summary.groups:  # same inputs and settings plan the same groups: the journal is damaged
        assembler.close()
        raise ResumeError(
            f"--resume: {os.path.join(work_dir, 'progress.json')} is damaged (next_group is {first_group}, but this run "
            f"plans only {plural(summary.groups, 'group')}); start over with --overwrite (the interrupted run cannot be "
            f"continued)"
        )
    if config.resume:
        log.info("resuming %s at group %d", config.output_dir, first_group)
    bytes_read.value = stats["input_bytes"]  # what the groups journaled before a resume had read
    try:
        # Each attempt writes fragments into a directory of its own: anything an earlier,
        # killed attempt left behind (or a worker of it still writing) is never read.
        attempt_dir = os.path.join(work_dir, "attempts", f"{os.getpid()}-{time.time_ns()}")
        os.makedirs(os.path.join(attempt_dir, "fragments"))
        todo = _planned_groups(config, spool_path, first_group)
        # closing(): on any exception here (Ctrl-C while appending, say) the pool is stopped now,
        # not whenever the generator happens to be collected (at exit, after the semaphores)
        with contextlib.closing(_group_runner(config)(config, todo, attempt_dir, bytes_read)) as results:
            for result in results:
                assembler.append(result.fragment_path, result.segments)
                _crash_point("appended", result.group_index)
                stats.update(result.stats)
                _keep_worst(stats, "replaced_in.", 10)
                assembler.checkpoint(result.group_index + 1, stats)
                _crash_point("checkpointed", result.group_index)
                if on_group is not None:
                    on_group(result)
        if not stats["instances"]:
            raise NothingUsableError(_nothing_usable(stats))
        per_shard = assembler.publish()
    except NothingUsableError:
        assembler.close()
        shutil.rmtree(work_dir, ignore_errors=True)  # nothing to resume: the corrected rerun starts clean
        raise
    finally:
        assembler.close()
    _crash_point("published", 0)
    vocab = VocabIdentity(os.path.abspath(config.vocab_file), inputs["vocab_sha256"], vocab_size)  # hashed once
    manifest = build_manifest(config.to_json(), stats, per_shard, summary, vocab)
    manifest["inputs"] = inputs  # what --resume of a finished run checks
    shutil.rmtree(work_dir, ignore_errors=True)
    write_json_atomically(os.path.join(config.output_dir, MANIFEST_NAME), manifest)  # the commit point
    for warning in quality_warnings(stats, manifest):
        log.warning(warning)
    return manifest


class NothingUsableError(BertDataError):
    """Every document was skipped, or none made an instance: nothing is published (exit 2)."""


def _nothing_usable(stats: Counter) -> str:
    skipped = {k.split(".", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("skipped.") and v}
    reasons = ", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"
    read, used = stats["documents.read"], stats["documents.used"]
    if not read and stats["wikiextractor_lines_outside_doc"]:
        return (f"no <doc ...> block found: {plural(stats['wikiextractor_lines_outside_doc'], 'non-blank line')} outside any "
                f"(--input_format wikiextractor reads WikiExtractor's output); for plain text pass --input_format text; "
                f"nothing was published")
    if not used:
        return f"no usable document: {plural(read, 'document')} read, all skipped ({reasons}); nothing was published"
    unpaired = stats["nsp_negatives_unavailable"] + stats["sop_single_segment_chunks"]
    return (
        f"no instance could be made from the {plural(used, 'usable document')} ({plural(unpaired, 'one-sentence chunk')} had no "
        f"partner; skipped: {reasons}); give more or longer documents per group (--split_num); nothing was published"
    )


def _keep_worst(stats: Counter, prefix: str, keep: int) -> None:
    """Only the ``keep`` largest ``prefix*`` counters stay (the journal stays small)."""
    keys = sorted((k for k in stats if k.startswith(prefix)), key=lambda k: -stats[k])
    for key in keys[keep:]:
        del stats[key]


UNK_WARNING_RATE = 0.05  # above this share of [UNK] tokens the run warns: probably the wrong vocabulary


def quality_warnings(stats: Counter, manifest: Dict) -> List[str]:
    """What a finished run must say on the console, not only in the manifest."""
    out = []
    replaced = manifest.get("replaced_bytes", 0)
    if replaced:
        worst = sorted(((k.split(".", 1)[1], v) for k, v in stats.items() if k.startswith("replaced_in.")),
                       key=lambda kv: -kv[1])[:3]
        files = ", ".join(f"{path} ({n})" for path, n in worst)
        out.append(
            f"{plural(replaced, 'byte')} that are not valid {manifest.get('input_encoding', 'utf-8')} were replaced with U+FFFD "
            f"(worst: {files}); if the corpus is in another encoding pass --input_encoding (e.g. latin-1, cp1252)"
        )
    if manifest.get("unk_rate", 0.0) > UNK_WARNING_RATE:
        out.append(
            f"{manifest['unk_rate']:.1%} of all tokens are [UNK] (more than {UNK_WARNING_RATE:.0%}): check that "
            f"--vocab_file fits the corpus and that --do_lower_case matches it (uncased vocabularies need it)"
        )
    outside = manifest.get("wikiextractor_lines_outside_doc", 0)
    if outside:
        out.append(
            f"{plural(outside, 'non-blank line')} outside <doc ...> ... </doc> blocks were not read (counted as "
            f"wikiextractor_lines_outside_doc): are all listed files WikiExtractor output? Plain text needs --input_format text"
        )
    empty = [name for name, count in manifest.get("instances_per_shard", {}).items() if count == 0]
    if empty:
        out.append(
            f"{len(empty)} of {len(manifest['instances_per_shard'])} shards are empty (only {manifest['n_examples']} "
            f"instances): lower --num_output_files"
        )
    return out
