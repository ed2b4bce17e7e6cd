"""A URL ``--output_dir`` (``s3://``, ``gs://``, ``file://``, ... through :mod:`bert_data.storage`).

Object stores cannot append or rename, so a URL output has its own layout (names:
:mod:`bert_data.output.naming`), the same for the local, Dask and Beam runners::

    {output_dir}/.bert_data_work/run.json                  the run's settings and input fingerprints
    {output_dir}/.bert_data_work/fragments/gNNNNNNNNN.frag  a group's records, shard-major
    {output_dir}/.bert_data_work/index/gNNNNNNNNN.json      the group is done: its byte range per
                                                            shard and its counters (the journal)
    {output_dir}/{name}-{i}.tfrecords                       shard i: its groups' ranges in group order
    {output_dir}/data_params.json                           last: the commit point

A worker makes a group into a worker-local fragment and publishes it shard-major in one upload
(:func:`bert_data.output.fragment.publish_fragment`); the coordinator writes the group's index
object when the result comes back (:meth:`ObjectStoreOutput.accept`). So a killed run leaves only
whole fragments and index objects, and ``--resume`` makes just the groups without an index
object, from any machine. At the end each shard is the concatenation of its groups' ranges in
group order: byte for byte what the local assembler appends. Only index entries are held in
memory, never records.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from .. import storage
from ..errors import BertDataError, OutputError
from ..faults import crash_point
from ..format.containers import is_rewriting, require_concatenation
from .fragment import COPY_CHUNK, copy_runs
from .journal import load_index, require_listed_files, resume_point
from .local_dir import SPLIT_HALVES, interrupted_run, refuse_replacing_inputs, replaced_files, run_inputs
from .rewrite import rewrite_processes, rewrite_shards, rewrite_threads, shard_spec
from .naming import MANIFEST_NAME, RUN_FILE, WORK_DIR_NAME, fragment_name, index_name, shard_file_names
from .scratch import scratch_dir

log = logging.getLogger("bert_data")

SHARD_THREADS = 4  # shards assembled at once by the coordinator (each reads ahead FETCH_THREADS chunks)


def prepare_remote_output_dir(
    output_dir: str, name: str, overwrite: bool, suffix: str, inputs: Sequence[Tuple[str, str]] = ()
) -> str:
    """:func:`bert_data.output.local_dir.prepare_output_dir` for a URL ``output_dir``: only files
    a run of ours owns are removed (the manifest first; then
    :func:`~bert_data.output.local_dir.replaced_files`: this run's name pattern and every shard
    the previous manifest lists), only with ``overwrite``, and never one of ``inputs``."""
    work_dir = storage.join(output_dir, WORK_DIR_NAME)
    top = storage.listing(storage.join(output_dir, "*"))
    doomed, work = _remote_run_files(output_dir, name, suffix)
    halves = {} if not top else {h: _remote_run_files(storage.join(output_dir, h), name, suffix) for h in SPLIT_HALVES}
    halves = {h: files for h, files in halves.items() if files[0] or files[1]}  # a split job's output there too
    refuse_replacing_inputs(output_dir, doomed + work, work_dir, inputs)
    for half, (files, half_work) in halves.items():
        refuse_replacing_inputs(output_dir, files + half_work, storage.join(output_dir, half, WORK_DIR_NAME), inputs)
    if (top or work) and not overwrite:
        raise OutputError(
            f"--output_dir {output_dir} is not empty; pass --overwrite to replace a previous run's output"
        )
    if overwrite:
        for directory, (files, files_work) in [(output_dir, (doomed, work))] + [
                (storage.join(output_dir, h), f) for h, f in halves.items()]:
            _delete_run_files(directory, files, files_work)
    return work_dir


def _remote_run_files(directory: str, name: str, suffix: str, skip: Sequence[str] = ()) -> Tuple[List[str], List[str]]:
    """The URLs in ``directory`` a fresh run named ``name`` there replaces (its manifest, the
    files named like its shards, those a previous manifest or an interrupted run names), and its
    work directory's files (:func:`bert_data.output.local_dir.run_files` for a URL)."""
    work_dir = storage.join(directory, WORK_DIR_NAME)
    by_name = {p.rstrip("/").rsplit("/", 1)[-1]: p for p in storage.listing(storage.join(directory, "*"))}
    by_name = {k: v for k, v in by_name.items() if k not in skip}
    work = _work_files(work_dir)
    doomed = replaced_files(by_name, name, suffix, _previous_manifest(directory) if MANIFEST_NAME in by_name else None,
                            interrupted_run(work_dir) if work else None)
    return [by_name[e] for e in doomed], work


def _delete_run_files(directory: str, files: Sequence[str], work: Sequence[str]) -> None:
    storage.delete([storage.join(directory, MANIFEST_NAME)])  # first: nothing half-removed looks finished
    storage.delete([f for f in files if not f.endswith("/" + MANIFEST_NAME)])
    if work:
        storage.delete(list(work), only_existing=False)


def clear_unsplit_remote(output_dir: str, name: str, overwrite: bool, suffix: str,
                         inputs: Sequence[Tuple[str, str]]) -> None:
    """:func:`bert_data.output.local_dir.clear_unsplit_run` for a URL ``output_dir``."""
    doomed, work = _remote_run_files(output_dir, name, suffix, SPLIT_HALVES)
    if not doomed and not work:
        return
    refuse_replacing_inputs(output_dir, doomed + work, storage.join(output_dir, WORK_DIR_NAME), inputs)
    if not overwrite:
        raise OutputError(
            f"--output_dir {output_dir} holds a run's output (beside where the train/validation halves go); pass "
            f"--overwrite to replace it, or choose another --output_dir"
        )
    _delete_run_files(output_dir, doomed, work)


def _previous_manifest(output_dir: str) -> Optional[Mapping]:
    """The JSON object of the manifest a previous run left in ``output_dir``, or None when it
    cannot be read as one (then only this run's name pattern is known to be ours)."""
    try:
        data = json.loads(storage.read_bytes(storage.join(output_dir, MANIFEST_NAME)))
    except Exception:  # noqa: BLE001 - any store error or bad JSON: nothing listed
        return None
    return data if isinstance(data, dict) else None


def _work_files(work_dir: str) -> List[str]:
    return [p for sub in ("*", "fragments/*", "index/*") for p in storage.listing(storage.join(work_dir, sub))]


def remove_remote_work_dir(work_dir: str) -> None:
    """Everything a run put under a remote work dir (object stores have no directories)."""
    try:
        listed = _work_files(work_dir)
        if listed:
            storage.delete(listed, only_existing=False)
        storage.delete_tree(work_dir)
    except Exception as exc:  # leftovers cost storage, not correctness: the next run overwrites them
        log.warning("could not remove %s (%s); delete it by hand", work_dir, exc)


def check_remote_writable(output_dir: str) -> None:
    """A probe object written and deleted under ``output_dir``: a missing package, bad
    credentials or a read-only bucket are one line before any work, not after the last group."""
    probe = storage.join(output_dir, f".bert_data_probe-{uuid.uuid4().hex}")
    try:
        storage.write_bytes(probe, b"")
        storage.delete([probe], only_existing=False)
    except BertDataError:
        raise
    except Exception as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be written ({type(exc).__name__}: {exc})") from None


def shard_runs(work_dir: str, shards: int, index: Mapping[int, Mapping]
               ) -> Tuple[Dict[int, List[Tuple[str, int, int]]], Counter]:
    """Each shard's byte ranges ``(fragment, offset, length)`` in group order, and its records."""
    runs: Dict[int, List[Tuple[str, int, int]]] = {shard: [] for shard in range(shards)}
    records: Counter = Counter()
    for group_index in sorted(index):
        for shard, offset, length, count in index[group_index]["segments"]:
            runs[shard].append((fragment_name(work_dir, group_index, storage.join), offset, length))
            records[shard] += count
    return runs, records


def assemble_shards(output_dir: str, work_dir: str, names: List[str], index: Mapping[int, Mapping]) -> Dict[str, int]:
    """Every shard from its groups' byte ranges in group order, each published atomically;
    records per shard name."""
    runs, records = shard_runs(work_dir, len(names), index)

    def write(shard: int) -> None:
        out, commit = storage.atomic_create(storage.join(output_dir, names[shard]))
        try:
            copy_runs(runs[shard], out)
        finally:
            out.close()
        commit()

    with ThreadPoolExecutor(max_workers=SHARD_THREADS) as pool:
        list(pool.map(write, range(len(names))))
    return {names[shard]: records[shard] for shard in range(len(names))}


def rewrite_remote_shards(output_dir: str, work_dir: str, names: List[str], index: Mapping[int, Mapping],
                          container, spec, threads: int = 1, processes: int = 1) -> Dict[str, int]:
    """A rewriting container's shards (:mod:`bert_data.output.rewrite`): each shard's ranges are
    copied, in group order, into a local TFRecord file, rewritten locally, and every file
    written is uploaded (atomically) as soon as its shard is done; the sidecar last. Local disk
    holds the TFRecord shards and their rewritten files at once."""
    runs, _ = shard_runs(work_dir, len(names), index)
    try:
        scratch = scratch_dir("rewrite")
    except OSError as exc:
        raise _no_room_in_tmpdir(exc, output_dir) from None
    try:
        sources = [os.path.join(scratch, f"shard-{shard}.tfrecords") for shard in range(len(names))]
        for shard, source in enumerate(sources):
            with open(source, "wb") as out:
                copy_runs(runs[shard], out)
        rewritten = os.path.join(scratch, "rewritten")

        def place(name: str) -> None:
            target = storage.join(output_dir, name)
            try:
                out, commit = storage.atomic_create(target)
                try:
                    with open(os.path.join(rewritten, name), "rb") as src:
                        shutil.copyfileobj(src, out, COPY_CHUNK)
                finally:
                    out.close()
                commit()
            except OSError as exc:  # the URL's own failure: named as its, not the scratch's
                exc.filename = exc.filename or target
                raise
            os.unlink(os.path.join(rewritten, name))

        per_file, sidecar = rewrite_shards(sources, names, container, rewritten, spec, place, threads, processes,
                                           files_stay=False)  # (each is uploaded and removed when done)
        if sidecar is not None:
            storage.write_bytes(storage.join(output_dir, container.sidecar), sidecar)
        return per_file
    except OSError as exc:
        if exc.errno in _NO_ROOM and str(exc.filename or scratch).startswith(scratch):
            raise _no_room_in_tmpdir(exc, output_dir) from None
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _no_room_in_tmpdir(exc: OSError, output_dir: str) -> OutputError:
    """A URL run's shards are rewritten through local copies in $TMPDIR: no room there is said as
    such (the URL is not to blame), with the fix."""
    return OutputError(
        f"no room in the temporary directory {tempfile.gettempdir()} for the local copies of {output_dir}'s shards "
        f"while rewriting them ({exc.strerror or exc}); free space there, or point TMPDIR at a directory with room, "
        f"then continue with --resume (same flags)"
    )


class ObjectStoreOutput:
    """The :class:`~bert_data.output.Output` of a URL (see the module docstring)."""

    catches = (Exception,)  # what failure() turns into one line

    def __init__(self, config, container) -> None:
        require_concatenation(container)
        self.config = config
        self.container = container
        self.output_dir = config.output_dir
        self.work_dir = storage.join(config.output_dir, WORK_DIR_NAME)
        self.fragment_dir = self.work_dir  # workers publish their fragments there, shard-major
        self.index: Dict[int, Dict] = {}

    @property
    def shard_names(self) -> List[str]:
        return shard_file_names(self.config.name, self.config.num_output_files, self.container.suffix)

    def lock(self):
        import contextlib

        return contextlib.nullcontext()  # no lock on a URL (docs/cluster.md)

    def prepare(self, settings: Mapping, planned_groups: int) -> Optional[Counter]:
        config = self.config
        if not config.resume:
            prepare_remote_output_dir(
                self.output_dir, config.name, config.overwrite, self.container.suffix, run_inputs(config)
            )
            storage.write_json_atomically(storage.join(self.work_dir, RUN_FILE), dict(settings))
            return Counter()
        if resume_point(self.output_dir, self.work_dir, settings) is None:
            require_listed_files(self.output_dir)
            if _work_files(self.work_dir):  # left by a kill during the commit
                remove_remote_work_dir(self.work_dir)
            return None
        self.index = load_index(self.work_dir)
        stats: Counter = Counter()
        for entry in self.index.values():
            stats.update(entry["stats"])
        if self.index:
            log.info("resuming %s: %d of %d groups are done", self.output_dir, len(self.index), planned_groups)
        return stats

    def todo(self, planned: Iterable[Tuple[int, list]]) -> Iterator[Tuple[int, list]]:
        done = set(self.index)
        return (group for group in planned if group[0] not in done)

    def shard_files(self) -> Sequence[int]:
        """No partial shard to write onto: every group is a fragment in the shared work directory."""
        return ()

    def accept(self, result, stats: Counter) -> None:
        """The group's index object: its byte range per shard and its own counters."""
        entry = {"segments": [[s.shard, s.offset, s.length, s.records] for s in result.segments],
                 "stats": dict(result.stats)}
        storage.write_bytes(index_name(self.work_dir, result.group_index, storage.join), json.dumps(entry).encode("utf-8"))
        crash_point("indexed", result.group_index)
        self.index[result.group_index] = entry

    def publish(self) -> Dict[str, int]:
        if is_rewriting(self.container):
            return rewrite_remote_shards(self.output_dir, self.work_dir, self.shard_names, self.index, self.container,
                                         shard_spec(self.config), rewrite_threads(self.config, self.container),
                                         rewrite_processes(self.config))
        return assemble_shards(self.output_dir, self.work_dir, self.shard_names, self.index)

    def commit(self, manifest: Mapping) -> Dict:
        """The manifest (the commit point), then the work directory's objects are deleted: a kill
        between leaves a finished output, tidied by ``--resume``."""
        storage.write_json_atomically(storage.join(self.output_dir, MANIFEST_NAME), manifest)
        crash_point("committed", 0)
        remove_remote_work_dir(self.work_dir)
        return dict(manifest)

    def discard(self) -> None:
        remove_remote_work_dir(self.work_dir)  # nothing to resume: the corrected rerun starts clean

    def close(self) -> None:
        pass

    def finished_manifest(self) -> Dict:
        return json.loads(storage.read_bytes(storage.join(self.output_dir, MANIFEST_NAME)))

    def failure(self, exc: Exception) -> OutputError:
        """A failure of the store (network, credentials, quota, a fragment missing because a
        worker wrote to another file system) as one line; what is done stays, for ``--resume``."""
        detail = str(exc).splitlines()[0] if str(exc) else ""
        return OutputError(
            f"reading or writing --output_dir {self.output_dir} failed ({type(exc).__name__}: {detail}); every worker "
            f"must reach that URL; nothing was published: continue with --resume (same flags)"
        )
