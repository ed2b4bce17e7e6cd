"""A local ``--output_dir``: partial shards appended in group order, journaled after each group.

Layout while running (names: :mod:`bert_data.output.naming`)::

    .bert_data_work/run.json                          the run's settings and input fingerprints
    .bert_data_work/progress.json                     journal: groups appended, shard sizes, counters
    .bert_data_work/{name}-{i}.tfrecords.partial      shards being assembled
    .bert_data_work/attempts/PID-NS/fragments/        this attempt's group fragments
    .bert_data_work/rewritten/                        Parquet, HDF5, MDS files being written

The coordinator appends each finished group's fragment to the partial shards strictly in group
order with kernel-side copies (``os.copy_file_range``), so no record passes through Python twice
and a shard's bytes depend only on the input, flags and seed; a group it makes itself
(``--num_workers 1``) writes the same runs onto the partial shards directly
(:class:`~bert_data.output.fragment.InPlaceWriter`, :meth:`LocalDirOutput.shard_files`). After
each group the shards are fsynced and the journal written, on a thread of the assembler's while
the next group is made (the wait for the disk is off the run's path; journals still land in group
order, each after the bytes it claims); a resumed run truncates the partial shards back to the
journal, so a group appended but not journaled is simply made again. Shards are renamed into
place only when every group is in (:meth:`LocalDirOutput.publish`), the manifest last
(:meth:`LocalDirOutput.commit`). The shards of a container that cannot be concatenated are made
from the partial shards at publish (:mod:`bert_data.output.rewrite`).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import BertDataError, OutputError, ResumeError, plural
from ..faults import crash_point
from ..format.containers import CONTAINERS, is_rewriting, require_concatenation
from ..format.manifest import ManifestError, listed_shard_names, load_manifest
from ..identity import written_over_input
from ..storage import is_remote, join as join_path, local_path_of, write_bytes, write_json_atomically
from .fragment import IN_PLACE, Segment, copy_range
from .journal import (
    check_partial_shards, check_progress, read_journal, read_json_object, require_listed_files, resume_point,
    tail_checksum,
)
from .lock import output_lock
from .rewrite import rewrite_processes, rewrite_shards, rewrite_threads, shard_spec
from .naming import (
    LOCK_NAME, MANIFEST_NAME, PARTIAL_SUFFIX, PROGRESS_FILE, REWRITTEN_DIR, RUN_FILE, WORK_DIR_NAME, is_shard_of, shard_file_names,
)

log = logging.getLogger("bert_data")


class ShardAssembler:
    """Appends finished groups' fragments to the partial shards, in group order.

    After every group, :meth:`checkpoint` records the shard sizes in a journal; a resumed
    run truncates the partial shards back to those sizes, so bytes appended by a group whose
    checkpoint never happened are discarded and that group is simply made again.
    """

    def __init__(
        self, output_dir: str, work_dir: str, final_names: Sequence[str], resume_from: Optional[Mapping] = None,
        body_size: Callable[[str], int] = os.path.getsize,
    ) -> None:
        self.output_dir = output_dir
        self.work_dir = work_dir
        self.final_names = list(final_names)
        self.partial_paths = [os.path.join(work_dir, n + PARTIAL_SUFFIX) for n in self.final_names]
        self._syncer: Optional[ThreadPoolExecutor] = None  # checkpoint()'s thread, made at its first use
        self._pending: Optional[Future] = None  # the checkpoint it is making durable
        if resume_from is None:
            self.records_per_shard = [0] * len(self.final_names)
            self.bytes_per_shard = [0] * len(self.final_names)
            self._fds = [os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) for p in self.partial_paths]
        else:
            self.records_per_shard = list(resume_from["shard_records"])
            self.bytes_per_shard = list(resume_from["shard_bytes"])
            self._fds = []
            for path, final, size in zip(self.partial_paths, self.final_names, self.bytes_per_shard):
                published = os.path.join(output_dir, final)
                if not os.path.exists(path) and os.path.exists(published) and body_size(published) == size:
                    os.replace(published, path)  # killed between publishing shards and the manifest (cut back below)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # (read too: the journal's tail checksums)
                if os.fstat(fd).st_size < size:
                    os.close(fd)
                    raise OutputError(f"cannot resume: {path} is shorter than its journal says ({size} bytes)")
                os.ftruncate(fd, size)
                os.lseek(fd, size, os.SEEK_SET)
                self._fds.append(fd)

    def checkpoint(self, next_group: int, stats: Mapping[str, int]) -> None:
        """Journal that every group before ``next_group`` is in the partial shards.

        The shards are flushed to disk first, so the journal never claims bytes that a power
        loss (not just a killed process) could take back. Both happen on the assembler's thread
        while the caller goes on to the next group (the shards' sizes and the counters are
        taken now): the previous checkpoint is awaited first, so journals are written in order,
        one at a time, and a failed flush or write is raised here, or by :meth:`finish_partials`."""
        self.wait()
        journal = {
            "next_group": next_group,
            "shard_bytes": list(self.bytes_per_shard),
            "shard_records": list(self.records_per_shard),
            "stats": dict(stats),
        }
        try:
            if self._syncer is None:
                self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bert_data-journal")
            self._pending = self._syncer.submit(self._make_durable, list(self._fds), journal)
        except RuntimeError:  # no thread to be had (ulimit -u, a memory limit): made durable here and now
            self._make_durable(list(self._fds), journal)

    @property
    def shard_fds(self) -> List[int]:
        """The partial shards' open files, in shard order."""
        return self._fds

    def _make_durable(self, fds: Sequence[int], journal: Dict) -> None:
        for fd in fds:
            os.fsync(fd)  # (appends of later groups may go on meanwhile: the journal claims none of them)
        journal["shard_tails"] = [tail_checksum(functools.partial(os.pread, fd), size)
                                  for fd, size in zip(fds, journal["shard_bytes"])]
        write_json_atomically(os.path.join(self.work_dir, PROGRESS_FILE), journal)
        crash_point("checkpointed", journal["next_group"] - 1)  # test hook: killed with this journal written

    def wait(self) -> None:
        """Until the last :meth:`checkpoint` is on disk; its error, if it failed, is raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def append(self, fragment_path: str, segments: Sequence[Segment]) -> None:
        """A group's runs appended to the partial shards (and counted); runs an
        :class:`~bert_data.output.fragment.InPlaceWriter` wrote there already are counted only."""
        if not fragment_path:
            for segment in segments:
                if segment.offset != IN_PLACE:
                    raise ValueError("ShardAssembler.append: a segment without a fragment must be in place")
                self.records_per_shard[segment.shard] += segment.records
                self.bytes_per_shard[segment.shard] += segment.length
            return
        src = os.open(fragment_path, os.O_RDONLY)
        try:
            for segment in segments:
                copy_range(src, self._fds[segment.shard], segment.offset, segment.length)
                self.records_per_shard[segment.shard] += segment.records
                self.bytes_per_shard[segment.shard] += segment.length
        finally:
            os.close(src)
        os.unlink(fragment_path)

    def finish_partials(self) -> List[str]:
        """fsync and close every partial shard; their paths, in shard order."""
        self.wait()
        for fd in self._fds:
            os.fsync(fd)
            os.close(fd)
        self._fds = []
        return list(self.partial_paths)

    def publish(self) -> Dict[str, int]:
        """fsync, close and rename every partial shard to its final name."""
        self.finish_partials()
        for partial, final in zip(self.partial_paths, self.final_names):
            os.replace(partial, os.path.join(self.output_dir, final))
        return dict(zip(self.final_names, self.records_per_shard))

    def close(self) -> None:
        """The files closed, once a checkpoint still on its way is done with them (a run that
        stops for another reason: that reason is what is said, not the checkpoint's error)."""
        try:
            self.wait()
        except Exception:
            pass
        finally:
            try:
                if self._syncer is not None:
                    self._syncer.shutdown(wait=True)
                    self._syncer = None
            finally:  # (a second Ctrl-C in the wait above: the files are closed all the same)
                for fd in self._fds:
                    os.close(fd)
                self._fds = []


def run_inputs(config) -> List[Tuple[str, str]]:
    """``(flag, path)`` of the files a run names as its inputs (metadata files, the vocabulary, the
    listed documents that are files of the output directory: the plan's ``listed_outputs``): what
    preparing its output must never remove or replace."""
    named = [("--metadata_files", path) for path in config.metadata_files]
    named += [("--validation_metadata_files", path) for path in getattr(config, "validation_metadata_files", ())]
    if config.vocab_file:
        named.append(("--vocab_file", config.vocab_file))
    named += [("the listed document", path) for path in getattr(config, "listed_outputs", ())]
    return named


def replaced_files(entries: Iterable[str], name: str, suffix: str, previous: Optional[Mapping],
                   interrupted: Optional[Mapping] = None) -> List[str]:
    """The entries of an output directory a fresh run removes (with ``--overwrite``) or replaces:
    the manifest, the files named like this run's shards (and its format's sidecar file), the shards the previous run's
    manifest (``previous``, its JSON object) lists, whatever their ``--name``, so that no reader
    finds them beside the new run's (:func:`~bert_data.format.manifest.listed_shard_names`), and
    the files named like the shards of an interrupted run (``interrupted``: its ``run.json``
    settings), whatever its ``--name`` and ``--output_format`` (it may have published some)."""
    listed = set(listed_shard_names(previous, suffix)) if previous is not None else set()
    if previous is not None:  # a previous run of another --output_format: its files and sidecar
        earlier = CONTAINERS.get(str(previous.get("output_format", "tfrecord")))
        if earlier is not None and earlier.suffix != suffix:
            listed.update(listed_shard_names(previous, earlier.suffix))
        if earlier is not None and getattr(earlier, "sidecar", None):
            listed.add(earlier.sidecar)
    patterns = [(name, suffix)]
    if interrupted is not None:
        container = CONTAINERS.get(str(interrupted.get("output_format", "tfrecord")))
        if container is not None and isinstance(interrupted.get("name"), str):
            patterns.append((interrupted["name"], container.suffix))
            if getattr(container, "sidecar", None):
                listed.add(container.sidecar)
    current = next((c for c in CONTAINERS.values() if c.suffix == suffix), None)  # this run's format
    if getattr(current, "sidecar", None):  # the file beside the shards it writes (MDS's index.json)
        listed.add(current.sidecar)
    return [e for e in entries if e == MANIFEST_NAME or e in listed or any(is_shard_of(e, n, x) for n, x in patterns)]


def interrupted_run(work_dir: str) -> Optional[Mapping]:
    """The settings (``run.json``) of the interrupted run in ``work_dir``, or None (none there, or
    unreadable: then its files are not known, only this run's name pattern)."""
    try:
        return read_json_object(join_path(work_dir, RUN_FILE))
    except (BertDataError, OSError):
        return None


def refuse_replacing_inputs(
    output_dir: str, targets: Sequence[str], work_dir: str, inputs: Sequence[Tuple[str, str]]
) -> None:
    """An input (``(flag, path)``) that preparing ``output_dir`` would remove or replace (one of
    ``targets``: a metadata file named like a shard, say, or anything inside ``work_dir``) is
    one line, before anything is touched: for a local directory and a URL alike."""
    found = written_over_input(targets, inputs)
    if found is None:
        remote = is_remote(work_dir)
        work = work_dir.rstrip("/") + "/" if remote else os.path.realpath(work_dir) + os.sep
        found = next(
            ((work_dir, flag, path) for flag, path in inputs
             if (path if remote else os.path.realpath(path)).startswith(work)),
            None,
        )
    if found is not None:
        target, flag, path = found
        same = target == work_dir or os.path.abspath(local_path_of(path)) == os.path.abspath(local_path_of(target))
        what = "" if same else f" (the same file as {target})"
        where = f"inside {work_dir}, " if target == work_dir else ""
        raise OutputError(
            f"{flag} {path}{what} is {where}a file that a run in --output_dir {output_dir} replaces or removes "
            f"(the manifest, files named like shards, the work directory); move it out of {output_dir} and run again"
        )


def prepare_output_dir(
    output_dir: str, name: str, overwrite: bool, suffix: str, inputs: Sequence[Tuple[str, str]] = ()
) -> str:
    """Check/clear the output directory and return a fresh work directory inside it.

    A non-empty directory is an error unless ``overwrite``; then only what a run of ours
    owns is removed (the manifest first, so nothing half-deleted looks complete; then
    :func:`replaced_files`: this run's name pattern and every shard the previous manifest
    lists), never unrelated files, and never one of the run's ``inputs`` (``(flag, path)``:
    :func:`run_inputs`), which is refused instead.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"--output_dir {output_dir} exists and is not a directory")
    work_dir = os.path.join(output_dir, WORK_DIR_NAME)
    entries = [e for e in os.listdir(output_dir) if e != LOCK_NAME] if os.path.isdir(output_dir) else []
    if entries:
        doomed = run_files(output_dir, name, suffix)
        refuse_replacing_inputs(output_dir, [os.path.join(output_dir, e) for e in doomed], work_dir, inputs)
        if not overwrite:
            if os.path.isdir(work_dir) and MANIFEST_NAME not in entries:  # (with a manifest: finished, its commit cut short)
                raise OutputError(
                    f"--output_dir {output_dir} holds an interrupted run; pass --resume to continue it "
                    f"or --overwrite to start over"
                )
            raise OutputError(
                f"--output_dir {output_dir} is not empty; pass --overwrite to replace a previous run's output"
            )
        halves = {half: run_files(half, name, suffix) for half in split_halves(output_dir)}  # replaced too
        for half, files in halves.items():  # (an input among them is refused, as one inside the work directory)
            refuse_replacing_inputs(output_dir, [os.path.join(half, e) for e in files], os.path.join(half, WORK_DIR_NAME),
                                    inputs)
        _remove_run_files(output_dir, doomed)
        for half, files in halves.items():  # a split job's output there: its run's files, never the user's others
            with output_lock(half):  # (a run writing that half now: one line, nothing removed there)
                _remove_run_files(half, files)
                shutil.rmtree(os.path.join(half, WORK_DIR_NAME), ignore_errors=True)
    try:
        os.makedirs(output_dir, exist_ok=True)
        if os.path.exists(work_dir):
            shutil.rmtree(work_dir)
        os.makedirs(work_dir)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be written ({exc.strerror})") from None
    return work_dir


SPLIT_HALVES = ("train", "validation")  # a train/validation job's outputs in its --output_dir (runners.plan.split_configs)


def split_halves(output_dir: str) -> List[str]:
    """The halves of a train/validation job in ``output_dir``: its ``train``/``validation``
    directories holding a run of ours (a manifest or a work directory), whose run a plain run
    there with ``--overwrite`` replaces (else a reader of either would find the old split beside it)."""
    found = []
    for half in SPLIT_HALVES:
        path = os.path.join(output_dir, half)
        if os.path.isdir(path) and not os.path.islink(path) and (
                os.path.lexists(os.path.join(path, MANIFEST_NAME)) or os.path.isdir(os.path.join(path, WORK_DIR_NAME))):
            found.append(path)
    return found


def run_files(directory: str, name: str, suffix: str, skip: Sequence[str] = ()) -> List[str]:
    """The file names in ``directory`` that a fresh run named ``name`` (``suffix``) there replaces
    (:func:`replaced_files`: its manifest, files named like its shards, those the previous manifest
    or an interrupted run names), ``skip`` left out."""
    if not os.path.isdir(directory):
        return []
    entries = [e for e in os.listdir(directory) if e != LOCK_NAME and e not in skip]
    work_dir = os.path.join(directory, WORK_DIR_NAME)
    try:
        previous = load_manifest(directory) if MANIFEST_NAME in entries else None
    except ManifestError:
        previous = None  # unreadable: only this run's name pattern is known to be ours
    return replaced_files(entries, name, suffix, previous.data if previous is not None else None,
                          interrupted_run(work_dir) if os.path.isdir(work_dir) else None)


def replaced_paths(output_dir: str, name: str, suffix: str, split: bool = False) -> List[str]:
    """Every file a fresh run (``split``: a train/validation job, whose halves prepare their own
    directories) would remove from ``output_dir`` and the split halves in it: what the plan
    protects from being one of the run's listed documents."""
    if split:
        return [os.path.join(output_dir, e) for e in run_files(output_dir, name, suffix, SPLIT_HALVES)]
    paths = [os.path.join(output_dir, e) for e in run_files(output_dir, name, suffix)]
    for half in split_halves(output_dir):
        paths += [os.path.join(half, e) for e in run_files(half, name, suffix)]
    return paths


# What to do about a failed write, by its errno: "free space" only where space ran out.
_WAY_ON = {
    errno.ENOSPC: "free space", errno.EDQUOT: "free space (a quota)", errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EISDIR: "remove or rename what is in the way", errno.ENOTDIR: "remove or rename what is in the way",
    errno.ENOTEMPTY: "remove or rename what is in the way", errno.EEXIST: "remove or rename what is in the way",
    errno.EACCES: "make it writable", errno.EPERM: "make it writable", errno.EROFS: "make it writable",
}


def way_on(exc: OSError) -> str:
    """How to continue after ``exc`` stopped a run with its journal kept."""
    return f"{_WAY_ON.get(exc.errno, 'fix it')} and continue with --resume"


def refuse_directories_in_the_way(config, container) -> None:
    """A directory where the run of ``config`` publishes one of its files (a shard, an MDS piece
    of one, the format's sidecar, the manifest) would make it fail at publish, after all its work:
    one line before anything is done (``--overwrite`` removes files, never directories)."""
    directory = local_path_of(config.output_dir)
    if is_remote(directory) or not os.path.isdir(directory):
        return
    mine = set(shard_file_names(config.name, config.num_output_files, container.suffix))
    published = {MANIFEST_NAME, getattr(container, "sidecar", None)}
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if (entry in published or container.shard_of(entry) in mine) and os.path.isdir(path) and not os.path.islink(path):
            raise OutputError(f"{path} is a directory where the run writes a file of its output; remove or rename it, "
                              f"then run again")


def _remove_run_files(directory: str, names: Sequence[str]) -> None:
    for entry in sorted(names, key=lambda e: e != MANIFEST_NAME):  # the manifest first: nothing half-removed looks finished
        path = os.path.join(directory, entry)
        if os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)


def clear_unsplit_run(output_dir: str, name: str, overwrite: bool, suffix: str, inputs: Sequence[Tuple[str, str]]) -> None:
    """Before a train/validation job writes ``output_dir/train`` and ``/validation``: a plain run's
    output in ``output_dir`` itself (its manifest, shards, work directory) would stay beside them,
    read as this job's data by whoever reads the directory. Refused without ``--overwrite``, removed
    with it (what :func:`prepare_output_dir` removes; other files are left alone). ``inputs``
    include the listed documents among those files (:func:`bert_data.runners.plan.listed_documents`)."""
    doomed = run_files(output_dir, name, suffix, SPLIT_HALVES)
    work_dir = os.path.join(output_dir, WORK_DIR_NAME)
    if not doomed and not os.path.isdir(work_dir):
        return
    refuse_replacing_inputs(output_dir, [os.path.join(output_dir, e) for e in doomed], work_dir, inputs)
    if not overwrite:
        raise OutputError(
            f"--output_dir {output_dir} holds a run's output ({MANIFEST_NAME if MANIFEST_NAME in doomed else 'shards'} "
            f"beside where the train/validation halves go); pass --overwrite to replace it, or choose another --output_dir"
        )
    _remove_run_files(output_dir, doomed)
    shutil.rmtree(work_dir, ignore_errors=True)


def clear_fragments(work_dir: str) -> None:
    """Drop earlier attempts' fragments (unjournaled groups are made again) and files being rewritten
    (rewritten again from the partials), whatever they are: a FIFO is removed, never opened."""
    for path in (os.path.join(work_dir, name) for name in ("fragments", "attempts", REWRITTEN_DIR)):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)


def load_resume_state(output_dir: str, settings: Mapping, container) -> Optional[Dict]:
    """The journal of an interrupted run in ``output_dir``, checked against this run's settings,
    and its partial shards by ``container`` (their suffix, their records' checksums). None when
    the output is already complete (its manifest exists, same settings). Raises
    :class:`ResumeError` when there is nothing to resume, the settings or inputs differ, or the
    journal or a partial shard is damaged (truncated, not JSON, fields of the wrong type or
    length, shards shorter than it says, records whose checksums fail): one line naming the file
    and ``--overwrite``, never a traceback."""
    work_dir = os.path.join(output_dir, WORK_DIR_NAME)
    if resume_point(output_dir, work_dir, settings, started=lambda: os.path.lexists(work_dir)) is None:
        return None
    progress_path = os.path.join(work_dir, PROGRESS_FILE)
    shards = settings.get("num_output_files")
    if os.path.lexists(progress_path):
        state = read_journal(progress_path)
        check_progress(state, shards, progress_path)
        check_partial_shards(output_dir, work_dir, settings.get("name"), state["shard_bytes"], progress_path,
                             container.suffix, state.get("shard_tails") or None, container.published_body_size,
                             container.check_assembled)
    else:
        state = {"next_group": 0, "shard_bytes": [0] * shards, "shard_records": [0] * shards, "stats": {}}
    clear_fragments(work_dir)
    return state


class LocalDirOutput:
    """The :class:`~bert_data.output.Output` of a local directory (see the module docstring)."""

    catches = (OSError,)  # what failure() turns into one line
    publishes_in_place = True  # its shards stay where the manifest lists them (not BERT's named files)

    def __init__(self, config, container) -> None:
        require_concatenation(container)  # (a rewriting container's runs are TFRecord frames: they do)
        self.config = config
        self.container = container
        self.output_dir = config.output_dir
        self.work_dir = os.path.join(config.output_dir, WORK_DIR_NAME)
        self.fragment_dir = ""
        self.next_group = 0
        self._assembler: Optional[ShardAssembler] = None

    @property
    def shard_names(self) -> List[str]:
        return shard_file_names(self.config.name, self.config.num_output_files, self.container.suffix)

    def lock(self):
        return output_lock(self.output_dir)  # before --overwrite removes anything

    def prepare(self, settings: Mapping, planned_groups: int) -> Optional[Counter]:
        """A fresh work directory (or the interrupted run's, checked); the counters so far, or
        None when the output is already complete with these settings."""
        config = self.config
        if config.resume:
            state = load_resume_state(self.output_dir, settings, self.container)
            if state is None:  # complete: a work directory a kill during the commit left behind goes now
                if self.publishes_in_place:
                    require_listed_files(self.output_dir)
                shutil.rmtree(self.work_dir, ignore_errors=True)
                return None
            refuse_directories_in_the_way(config, self.container)
            self._assembler = ShardAssembler(self.output_dir, self.work_dir, self.shard_names, resume_from=state,
                                             body_size=self.container.published_body_size)
            self.next_group = state["next_group"]
            if self.next_group > planned_groups:  # same inputs and settings plan the same groups: damaged
                self._assembler.close()
                raise ResumeError(
                    f"--resume: {os.path.join(self.work_dir, PROGRESS_FILE)} is damaged (next_group is "
                    f"{self.next_group}, but this run plans only {plural(planned_groups, 'group')}); start over with "
                    f"--overwrite (the interrupted run cannot be continued)"
                )
            log.info("resuming %s at group %d", self.output_dir, self.next_group)
            stats = Counter(state["stats"])
        else:
            refuse_directories_in_the_way(config, self.container)
            prepare_output_dir(self.output_dir, config.name, config.overwrite, self.container.suffix, run_inputs(config))
            try:
                write_json_atomically(os.path.join(self.work_dir, RUN_FILE), dict(settings))
                self._assembler = ShardAssembler(self.output_dir, self.work_dir, self.shard_names)
            except KeyboardInterrupt:  # (Ctrl-C, a stop signal) before the journal: as if never begun
                self.discard()
                raise
            except OSError as exc:  # (a full disk, a quota): nothing is done, so nothing may block the rerun
                self.discard()
                raise OutputError(
                    f"--output_dir {self.output_dir} cannot be written ({exc.strerror or exc}); nothing was written: "
                    f"free space and run the same command again"
                ) from None
            stats = Counter()
        # Each attempt writes fragments into a directory of its own: anything an earlier, killed
        # attempt left behind (or a worker of it still writing) is never read.
        self.fragment_dir = os.path.join(self.work_dir, "attempts", f"{os.getpid()}-{time.time_ns()}")
        os.makedirs(os.path.join(self.fragment_dir, "fragments"))
        return stats

    def todo(self, planned: Iterable[Tuple[int, list]]) -> Iterator[Tuple[int, list]]:
        return (group for group in planned if group[0] >= self.next_group)

    def shard_files(self) -> Sequence[int]:
        """The partial shards' open files, in shard order, for groups made in this process in
        group order (:class:`~bert_data.output.fragment.InPlaceWriter`); valid until
        :meth:`publish` or :meth:`close`."""
        return tuple(self._assembler.shard_fds) if self._assembler is not None else ()

    def accept(self, result, stats: Counter) -> None:
        """Append a finished group (results come in group order) and journal it with the counters."""
        self._assembler.append(result.fragment_path, result.segments)
        crash_point("appended", result.group_index)
        self._assembler.checkpoint(result.group_index + 1, stats)  # (its crash point fires once the journal is written)

    def publish(self) -> Dict[str, int]:
        try:
            if is_rewriting(self.container):
                return self._publish_rewritten()
            return self._assembler.publish()
        finally:
            self.close()

    def _publish_rewritten(self) -> Dict[str, int]:
        """Every partial shard made into the container's file(s) (:mod:`bert_data.output.rewrite`),
        each renamed into place when whole, the sidecar last; the partial shards stay until the
        commit, so a run killed here is resumed by rewriting again. Parquet's are finished in place
        and renamed as TFRecord shards are (a resumed run takes them back: ShardAssembler)."""
        sources = self._assembler.finish_partials()
        if hasattr(self.container, "finish_in_place"):  # (Parquet: a footer makes each partial shard its file)
            spec = shard_spec(self.config)
            with ThreadPoolExecutor(max_workers=rewrite_threads(self.config, self.container)) as pool:
                list(pool.map(lambda path: self.container.finish_in_place(path, spec), sources))
            return self._assembler.publish()
        rewritten = os.path.join(self.work_dir, REWRITTEN_DIR)

        def place(name: str) -> None:  # on disk before its name is (as the TFRecord shards are)
            fd = os.open(os.path.join(rewritten, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(os.path.join(rewritten, name), os.path.join(self.output_dir, name))

        per_file, sidecar = rewrite_shards(sources, self.shard_names, self.container, rewritten,
                                           shard_spec(self.config), place, rewrite_threads(self.config, self.container),
                                           rewrite_processes(self.config))
        if sidecar is not None:
            write_bytes(os.path.join(self.output_dir, self.container.sidecar), sidecar, sync=True)  # (before the manifest)
        return per_file

    def commit(self, manifest: Mapping) -> Dict:
        """The manifest is written (the commit point), then the work directory goes. In that order:
        a kill while the work directory is being removed (a non-atomic rmtree) leaves a finished
        output, which ``--resume`` recognises by its manifest and tidies, never a half journal."""
        write_json_atomically(os.path.join(self.output_dir, MANIFEST_NAME), manifest)
        crash_point("committed", 0)  # test hook: killed (or paused) with the manifest written, the work directory not yet removed
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return dict(manifest)

    def discard(self) -> None:
        """Nothing to publish or resume: the corrected rerun starts clean."""
        self.close()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def close(self) -> None:
        if self._assembler is not None:
            self._assembler.close()

    def finished_manifest(self) -> Dict:
        return load_manifest(self.output_dir).data

    def failure(self, exc: OSError) -> OutputError:
        """An OSError while writing, as one line that says how to continue."""
        target = exc.filename2 or exc.filename  # a rename into place: the destination is what is in the way
        where = f" ({target})" if target else ""
        if not os.path.isdir(self.work_dir):
            return OutputError(
                f"the work directory {self.work_dir} was removed while the run was writing ({exc.strerror or exc}); "
                f"nothing was published: start over without --resume"
            )
        return OutputError(
            f"writing to --output_dir {self.output_dir} failed: {exc.strerror or exc}{where}; {way_on(exc)}"
        )
