"""Serialize and write stage: instances -> TFRecord fragments -> published shards + manifest.

Layout of a run in ``output_dir``::

    {name}-1.tfrecords ... {name}-{num_output_files}.tfrecords   published shards
    data_params.json                                             manifest, written LAST
    .bert_data_work/                                             only while running
        fragments/g000000042.frag                                one per finished group
        {name}-{i}.tfrecords.partial                             shards being assembled

Workers never share a file: each finished group is one fragment file holding, for every
(dupe pass, shard), a run of framed (and optionally gzipped) records. The coordinating
process appends fragments to the partial shards strictly in group order, with kernel-side
copies (``os.copy_file_range``), so no record passes through Python twice and the bytes of
every shard depend only on the input, flags and seed, never on the number of workers or on
which group finished first. Shards get their final names only when every group is in, and
the manifest is written after them: a killed run never leaves files that look complete.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import OutputError, ResumeError
from .format.manifest import MANIFEST_NAME
from .format.records import frame_records, serialize_examples
from .storage import write_json_atomically

WORK_DIR_NAME = ".bert_data_work"
RUN_FILE = "run.json"  # the settings of the run in progress (checked by --resume)
PROGRESS_FILE = "progress.json"  # journal: groups merged so far, shard sizes, counters


def shard_file_names(name: str, num_output_files: int) -> List[str]:
    return [f"{name}-{i}.tfrecords" for i in range(1, num_output_files + 1)]


@dataclass
class Segment:
    """A run of records of one (dupe pass, shard) inside a fragment file."""

    shard: int
    offset: int
    length: int
    records: int


@dataclass
class FragmentWriter:
    """Writes one group's fragment file (temp name, renamed when complete)."""

    path: str
    compression: str
    segments: List[Segment] = field(default_factory=list)
    seconds: Dict[str, float] = field(default_factory=dict)  # time spent serializing / writing

    def __post_init__(self) -> None:
        self._tmp_path = self.path + ".tmp"
        self._handle = open(self._tmp_path, "wb")
        self._offset = 0

    def write_batch(
        self, features: Mapping[str, np.ndarray], order: Sequence[Tuple[str, str]], shard_of_row: np.ndarray,
        num_shards: int,
    ) -> None:
        """Serialize one batch (rows already in output order) into per-shard segments."""
        started = time.perf_counter()
        # once per batch: per-call overhead is not small. ``order`` is the features' order, or for
        # records that are not tf.train.Examples (the Model Zoo's token sequences) their encoder
        payloads = order(features) if callable(order) else serialize_examples(features, order)
        self.seconds["serialize"] = self.seconds.get("serialize", 0.0) + time.perf_counter() - started
        for shard in range(num_shards):
            rows = np.flatnonzero(shard_of_row == shard)
            if len(rows) == 0:
                continue
            started = time.perf_counter()
            data = frame_records([payloads[row] for row in rows.tolist()])
            if self.compression == "gzip":
                data = gzip.compress(data, compresslevel=6, mtime=0)
            serialized = time.perf_counter()
            self._handle.write(data)
            self.seconds["serialize"] = self.seconds.get("serialize", 0.0) + serialized - started
            self.seconds["write"] = self.seconds.get("write", 0.0) + time.perf_counter() - serialized
            self.segments.append(Segment(shard, self._offset, len(data), len(rows)))
            self._offset += len(data)

    def close(self) -> None:
        self._handle.close()
        os.replace(self._tmp_path, self.path)

    def abort(self) -> None:
        self._handle.close()
        if os.path.exists(self._tmp_path):
            os.unlink(self._tmp_path)


def _copy_range(src_fd: int, dst_fd: int, offset: int, length: int) -> None:
    """Append ``length`` bytes of src at ``offset`` to dst, in the kernel when possible."""
    copy_file_range = getattr(os, "copy_file_range", None)
    while length > 0:
        copied = 0
        if copy_file_range is not None:
            try:
                copied = copy_file_range(src_fd, dst_fd, length, offset)
            except OSError:
                copy_file_range = None
        if not copied:
            chunk = os.pread(src_fd, min(length, 1 << 24), offset)
            if not chunk:
                raise OutputError(f"fragment file ended {length} bytes early")
            os.write(dst_fd, chunk)
            copied = len(chunk)
        offset += copied
        length -= copied


class ShardAssembler:
    """Appends finished groups' fragments to the partial shards, in group order.

    After every group, :meth:`checkpoint` records the shard sizes in a journal; a resumed
    run truncates the partial shards back to those sizes, so bytes appended by a group whose
    checkpoint never happened are discarded and that group is simply made again.
    """

    def __init__(
        self, output_dir: str, work_dir: str, name: str, num_shards: int, resume_from: Optional[Mapping] = None
    ) -> None:
        self.output_dir = output_dir
        self.work_dir = work_dir
        self.final_names = shard_file_names(name, num_shards)
        self.partial_paths = [os.path.join(work_dir, n + ".partial") for n in self.final_names]
        if resume_from is None:
            self.records_per_shard = [0] * num_shards
            self.bytes_per_shard = [0] * num_shards
            self._fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in self.partial_paths]
        else:
            self.records_per_shard = list(resume_from["shard_records"])
            self.bytes_per_shard = list(resume_from["shard_bytes"])
            self._fds = []
            for path, final, size in zip(self.partial_paths, self.final_names, self.bytes_per_shard):
                published = os.path.join(output_dir, final)
                if not os.path.exists(path) and os.path.exists(published) and os.path.getsize(published) == size:
                    os.replace(published, path)  # killed between publishing shards and the manifest
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                if os.fstat(fd).st_size < size:
                    os.close(fd)
                    raise OutputError(f"cannot resume: {path} is shorter than its journal says ({size} bytes)")
                os.ftruncate(fd, size)
                os.lseek(fd, size, os.SEEK_SET)
                self._fds.append(fd)

    def checkpoint(self, next_group: int, stats: Mapping[str, int]) -> None:
        """Journal that every group before ``next_group`` is in the partial shards.

        The shards are flushed to disk first, so the journal never claims bytes that a power
        loss (not just a killed process) could take back."""
        for fd in self._fds:
            os.fsync(fd)
        write_json_atomically(
            os.path.join(self.work_dir, PROGRESS_FILE),
            {
                "next_group": next_group,
                "shard_bytes": self.bytes_per_shard,
                "shard_records": self.records_per_shard,
                "stats": dict(stats),
            },
        )

    def append(self, fragment_path: str, segments: Sequence[Segment]) -> None:
        src = os.open(fragment_path, os.O_RDONLY)
        try:
            for segment in segments:
                _copy_range(src, self._fds[segment.shard], segment.offset, segment.length)
                self.records_per_shard[segment.shard] += segment.records
                self.bytes_per_shard[segment.shard] += segment.length
        finally:
            os.close(src)
        os.unlink(fragment_path)

    def publish(self) -> Dict[str, int]:
        """fsync, close and rename every partial shard to its final name."""
        for fd in self._fds:
            os.fsync(fd)
            os.close(fd)
        self._fds = []
        for partial, final in zip(self.partial_paths, self.final_names):
            os.replace(partial, os.path.join(self.output_dir, final))
        return dict(zip(self.final_names, self.records_per_shard))

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def _clear_fragments(work_dir: str) -> None:
    """Drop every fragment of earlier attempts: groups not journaled are simply made again."""
    for name in ("fragments", "attempts"):
        path = os.path.join(work_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)


def prepare_output_dir(output_dir: str, name: str, num_shards: int, overwrite: bool) -> str:
    """Check/clear the output directory and return a fresh work directory inside it.

    A non-empty directory is an error unless ``overwrite``; then only what a run of ours
    owns is removed (the manifest first, so nothing half-deleted looks complete), never
    unrelated files.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"--output_dir {output_dir} exists and is not a directory")
    work_dir = os.path.join(output_dir, WORK_DIR_NAME)
    if os.path.isdir(output_dir) and [e for e in os.listdir(output_dir) if e != ".bert_data.lock"]:
        if not overwrite:
            if os.path.isdir(work_dir):
                raise OutputError(
                    f"--output_dir {output_dir} holds an interrupted run; pass --resume to continue it "
                    f"or --overwrite to start over"
                )
            raise OutputError(
                f"--output_dir {output_dir} is not empty; pass --overwrite to replace a previous run's output"
            )
        manifest = os.path.join(output_dir, MANIFEST_NAME)
        if os.path.exists(manifest):
            os.unlink(manifest)
        for entry in os.listdir(output_dir):
            if entry.startswith(f"{name}-") and entry.endswith(".tfrecords"):
                os.unlink(os.path.join(output_dir, entry))
    try:
        os.makedirs(output_dir, exist_ok=True)
        if os.path.exists(work_dir):
            shutil.rmtree(work_dir)
        os.makedirs(work_dir)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be written ({exc.strerror})") from None
    return work_dir


def load_resume_state(output_dir: str, run_settings: Mapping) -> Optional[Dict]:
    """The journal of an interrupted run in ``output_dir``, checked against this run's settings.

    Returns None when the output is already complete (its manifest exists, same settings).
    Raises :class:`ResumeError` when there is nothing to resume, the settings differ, or the
    journal is damaged (truncated, not JSON, fields of the wrong type or length, partial shards
    shorter than it says): one line naming the file and ``--overwrite``, never a traceback.
    """
    work_dir = os.path.join(output_dir, WORK_DIR_NAME)
    run_file = os.path.join(work_dir, RUN_FILE)
    if not os.path.lexists(run_file):
        if os.path.lexists(work_dir):  # killed between making the work directory and its run.json
            raise _damaged(run_file, "missing: the run was stopped before it started")
        manifest_path = os.path.join(output_dir, MANIFEST_NAME)
        if os.path.lexists(manifest_path):  # read like a journal: a damaged one is said as such
            manifest = _read_journal(manifest_path)
            _check_same_settings(run_settings, {k: manifest.get(k) for k in run_settings}, manifest_path)
            return None
        raise ResumeError(f"--resume: no interrupted run in {output_dir} (nothing to continue); run without --resume")
    previous = _read_journal(run_file)
    _check_run_file(previous, run_settings, run_file)
    _check_same_settings(run_settings, previous, run_file)
    progress_path = os.path.join(work_dir, PROGRESS_FILE)
    shards = run_settings.get("num_output_files")
    if os.path.lexists(progress_path):
        state = _read_journal(progress_path)
        _check_progress(state, shards, progress_path)
        _check_partial_shards(output_dir, work_dir, run_settings.get("name"), state["shard_bytes"], progress_path)
    else:
        state = {"next_group": 0, "shard_bytes": [0] * shards, "shard_records": [0] * shards, "stats": {}}
    _clear_fragments(work_dir)
    return state


def _damaged(path: str, what: str) -> ResumeError:
    return ResumeError(
        f"--resume: {path} is damaged ({what}); start over with --overwrite (the interrupted run cannot be continued)"
    )


MAX_JOURNAL_BYTES = 64 << 20  # run.json and progress.json are a few KB (~30 bytes a shard)


def _read_journal(path: str) -> Dict:
    """A journal file of the work directory, as a JSON object, or one line saying it is damaged.
    Only a regular file is opened (a FIFO put there would block the open), of a sane size."""
    import stat

    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise _damaged(path, "not a regular file")
        if info.st_size > MAX_JOURNAL_BYTES:
            raise _damaged(path, f"{info.st_size} bytes, far more than a journal holds")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with open(fd, "rb") as handle:
            raw = handle.read(MAX_JOURNAL_BYTES + 1)
    except OSError as exc:
        raise _damaged(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _damaged(path, "not valid JSON: not UTF-8 text") from None
    except ValueError as exc:
        raise _damaged(path, f"not valid JSON: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise _damaged(path, "not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise _damaged(path, "not a JSON object")
    return data


def _whole(value: object) -> bool:
    """A non-negative integer (JSON true/false are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_run_file(previous: Dict, run_settings: Mapping, path: str) -> None:
    """run.json holds every setting of a run and its input fingerprints: a missing one, or
    fingerprints that are not a mapping of text, is damage, not a changed setting."""
    missing = sorted(k for k in run_settings if k not in previous)
    if missing:
        raise _damaged(path, f"it has no {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    inputs = previous.get("inputs", {})
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise _damaged(path, "inputs is not a mapping of fingerprints")


def _check_progress(state: Dict, shards: Optional[int], path: str) -> None:
    """The progress journal's fields have the types and lengths a resume relies on."""
    if not _whole(state.get("next_group")):
        raise _damaged(path, f"next_group is {_short(state.get('next_group'))}, not a group number")
    for key in ("shard_bytes", "shard_records"):
        values = state.get(key)
        if not isinstance(values, list) or len(values) != shards or not all(_whole(v) for v in values):
            raise _damaged(path, f"{key} is not {shards} non-negative integers")
    stats = state.get("stats")
    if not isinstance(stats, dict) or not all(_whole(v) for v in stats.values()):
        raise _damaged(path, "stats is not a mapping of non-negative counters")


def _check_partial_shards(output_dir: str, work_dir: str, name: object, shard_bytes: Sequence[int], path: str) -> None:
    """Each partial shard holds at least the bytes the journal says (the resume cuts it back to
    them); a shorter one was damaged after the journal was written. (A shard already renamed
    into place by a run killed while publishing counts too: the resume takes it back.)"""
    if not isinstance(name, str):
        return  # the settings check has refused this already
    for final, size in zip(shard_file_names(name, len(shard_bytes)), shard_bytes):
        partial = os.path.join(work_dir, final + ".partial")
        published = os.path.join(output_dir, final)
        try:
            if os.path.exists(partial):
                actual = os.path.getsize(partial)
            else:
                actual = os.path.getsize(published) if os.path.exists(published) else 0
                actual = actual if actual == size else 0
        except OSError:
            actual = 0
        if actual < size:
            raise _damaged(path, f"it counts {size} bytes in {final}.partial, which holds {actual}")


def _short(value: object, most: int = 40) -> str:
    """``repr(value)`` cut to ``most`` characters (a damaged file may hold anything)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _check_same_settings(current: Mapping, previous: Mapping, where: str) -> None:
    differing = sorted(k for k in set(current) | set(previous) if current.get(k) != previous.get(k))
    if differing:
        details = ", ".join(
            f"--{k[:40]} was {_short(previous.get(k))}, now {_short(current.get(k))}" for k in differing[:4]
        )
        more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
        raise ResumeError(f"--resume: settings differ from the interrupted run ({where}): {details}{more}")


def fragment_path(work_dir: str, group_index: int) -> str:
    return os.path.join(work_dir, "fragments", f"g{group_index:09d}.frag")
