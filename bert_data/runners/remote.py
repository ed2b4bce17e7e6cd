"""URLs: documents read from, and output written to, ``s3://``, ``gs://``, ``file://``, ... (fsspec,
through :mod:`bert_data.storage`), for every runner.

A local ``--output_dir`` is assembled as it always was (partial shards appended in group order,
a journal after each group: :mod:`bert_data.runners.local`). Object stores cannot append or
rename, so a URL ``--output_dir`` gets the layout the Beam runner has always used, here shared
by the local, Dask and Beam runners::

    {output_dir}/.bert_data_work/run.json                 the run's settings and input fingerprints
    {output_dir}/.bert_data_work/fragments/gNNNNNNNNN.frag a group's records, shard-major
    {output_dir}/.bert_data_work/index/gNNNNNNNNN.json     the group is done: its byte range per
                                                           shard and its counters (the journal)
    {output_dir}/{name}-{i}.tfrecords                      shard i: its groups' ranges in group order
    {output_dir}/data_params.json                          last: the commit point

A worker makes a group into a worker-local fragment (:func:`make_group`), exactly as for a local
output, then publishes it shard-major in one upload; the coordinator writes the group's index
object when the result comes back. So a killed run (coordinator, client or scheduler) leaves
only whole fragments and index objects, and ``--resume`` makes just the groups without an index
object, from any machine. At the end each shard is the concatenation of its groups' ranges in
group order: byte for byte what the local assembler appends (``tests/test_remote_output.py``).
Only index entries are held in memory, never records.

Documents behind a URL are copied to a worker-local directory first (:func:`stage_sources`), so
the unchanged readers see a local file with the same base name (compression is recognised by
extension too); messages name the URL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .. import storage
from ..config import Config, output_settings
from ..errors import BertDataError, MetadataError, OutputError, ResumeError
from ..format.manifest import MANIFEST_NAME, VocabIdentity, build_manifest
from ..group import GroupResult, Resources, process_group
from ..metadata import DocumentSource, MetadataSummary, WorkItem
from ..writer import RUN_FILE, WORK_DIR_NAME, Segment, shard_file_names

log = logging.getLogger("bert_data")

_COPY_CHUNK = 8 << 20
_FETCH_THREADS = 8
_STAGE_THREADS = 16
_SHARD_THREADS = 4  # shards assembled at once by the coordinator (each reads ahead _FETCH_THREADS chunks)
_INDEX_THREADS = 16


# --- documents ------------------------------------------------------------------------------


def stage_sources(sources: Sequence[WorkItem], stage_dir: str) -> Tuple[List[WorkItem], Dict[str, str]]:
    """Copy the remote documents of a group to ``stage_dir`` (in parallel); local ones are kept.

    The staged copy keeps the base name (compression is recognised by extension, too) and the
    metadata file and line, so ``read_source`` treats it exactly like the local runner would.
    Returns the sources to read and {local path: remote path} for error messages.
    """
    remote = [(i, item) for i, item in enumerate(sources) if storage.is_remote(item.source.path)]
    if not remote:
        return list(sources), {}
    staged = list(sources)
    renames: Dict[str, str] = {}
    wanted: Dict[str, str] = {}  # remote path -> where it is listed (byte ranges of one file share a copy)
    for _, item in remote:
        wanted.setdefault(item.source.path, item.source.where())
    copies = {  # named before any thread starts: numbered, so equal base names never collide
        path: os.path.join(stage_dir, f"{n:07d}-{path.rstrip('/').rsplit('/', 1)[-1] or 'document'}")
        for n, path in enumerate(wanted)
    }

    def fetch(path: str) -> None:
        try:
            with storage.open_read(path) as src, open(copies[path], "wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_CHUNK)
        except BertDataError:
            raise
        except Exception as exc:  # BeamIOError, botocore errors, OSError, ...
            raise MetadataError(f"{wanted[path]}: document {path} cannot be read ({exc})") from None

    with ThreadPoolExecutor(max_workers=min(_STAGE_THREADS, len(wanted))) as pool:
        list(pool.map(fetch, wanted))
    for i, item in remote:
        source = item.source
        local = copies[source.path]
        staged[i] = WorkItem(DocumentSource(local, source.metadata_file, source.line_number, source.entry), item.start, item.end)
        renames[local] = source.path
    return staged, renames


def _named_as_given(exc: BertDataError, renames: Dict[str, str]) -> BertDataError:
    message = str(exc)
    for local, remote in renames.items():
        message = message.replace(local, remote)
    return type(exc)(message)


# --- workers ------------------------------------------------------------------------------------


def fragment_name(work_dir: str, group_index: int) -> str:
    return storage.join(work_dir, "fragments", f"g{group_index:09d}.frag")


def index_name(work_dir: str, group_index: int) -> str:
    return storage.join(work_dir, "index", f"g{group_index:09d}.json")


def make_group(group_index: int, items: Sequence[WorkItem], resources: Resources, work_dir: str) -> GroupResult:
    """:func:`bert_data.group.process_group` wherever its documents and work directory are: remote
    documents are staged first; with a URL ``work_dir`` the fragment is made locally and published
    shard-major to ``work_dir/fragments/`` (the result's segments then point into that copy).
    Every runner's workers call this."""
    remote_docs = any(storage.is_remote(item.source.path) for item in items)
    if not remote_docs and not storage.is_remote(work_dir):
        return process_group(group_index, items, resources, work_dir)
    scratch = tempfile.mkdtemp(prefix=f"bert_data_g{group_index:09d}_")
    try:
        local_items, renames = stage_sources(items, scratch) if remote_docs else (list(items), {})
        local_work = work_dir
        if storage.is_remote(work_dir):
            local_work = os.path.join(scratch, "work")
            os.makedirs(os.path.join(local_work, "fragments"))
        try:
            result = process_group(group_index, local_items, resources, local_work)
        except BertDataError as exc:
            raise _named_as_given(exc, renames) from None
        if not storage.is_remote(work_dir):
            return result
        shared = fragment_name(work_dir, group_index)
        entries = publish_fragment(result.fragment_path, result.segments, shared) if result.segments else []
        segments = [Segment(shard, offset, length, records) for shard, offset, length, records in entries]
        return GroupResult(group_index, shared, segments, result.stats, result.seconds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def publish_fragment(local_path: str, segments, shared_path: str) -> List[Tuple[int, int, int, int]]:
    """Copy a group's fragment to the shared work dir re-ordered *shard-major*; returns
    (shard, offset, length, records) per shard present. Each shard's runs (every dupe pass, in
    fragment order, as the local assembler appends them) become one contiguous byte range."""
    by_shard: Dict[int, list] = {}
    for segment in segments:
        by_shard.setdefault(segment.shard, []).append(segment)
    out, commit = storage.atomic_create(shared_path)
    entries = []
    offset = 0
    try:
        with open(local_path, "rb") as src:
            for shard in sorted(by_shard):
                start = offset
                for segment in by_shard[shard]:
                    src.seek(segment.offset)
                    left = segment.length
                    while left > 0:
                        data = src.read(min(left, _COPY_CHUNK))
                        if not data:
                            raise RuntimeError(f"fragment {local_path} ended early")
                        out.write(data)
                        left -= len(data)
                    offset += segment.length
                entries.append((shard, start, offset - start, sum(s.records for s in by_shard[shard])))
    finally:
        out.close()
    commit()
    return entries


def copy_runs(runs: Sequence[Tuple[str, int, int]], out, threads: int = _FETCH_THREADS) -> int:
    """Append the byte ranges (path, offset, length) to ``out`` in order, reading ahead in
    parallel (object stores are latency bound). Ranges are cut into pieces of at most
    ``_COPY_CHUNK`` bytes and at most ``threads`` pieces are held: memory <= threads * chunk."""
    pieces = []
    for path, offset, length in runs:
        for start in range(offset, offset + length, _COPY_CHUNK):
            pieces.append((path, start, min(_COPY_CHUNK, offset + length - start)))
    written = 0
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        pending: deque = deque()
        for piece in pieces:
            pending.append(pool.submit(storage.read_range, *piece))
            if len(pending) >= threads:
                data = pending.popleft().result()
                out.write(data)
                written += len(data)
        while pending:
            data = pending.popleft().result()
            out.write(data)
            written += len(data)
    return written


# --- the output directory -----------------------------------------------------------------------


def prepare_remote_output_dir(output_dir: str, name: str, overwrite: bool) -> str:
    """:func:`bert_data.writer.prepare_output_dir` for a URL ``output_dir``: only files a run of
    ours owns are removed (the manifest first), and only with ``overwrite``."""
    work_dir = storage.join(output_dir, WORK_DIR_NAME)
    top = storage.listing(storage.join(output_dir, "*"))
    work = _work_files(work_dir)
    if (top or work) and not overwrite:
        raise OutputError(
            f"--output_dir {output_dir} is not empty; pass --overwrite to replace a previous run's output"
        )
    if overwrite:
        storage.delete([storage.join(output_dir, MANIFEST_NAME)])
        ours = re.compile(re.escape(name) + r"-.*\.tfrecords$")
        storage.delete([p for p in top if ours.match(p.rstrip("/").rsplit("/", 1)[-1])])
        if work:
            storage.delete(work, only_existing=False)
    return work_dir


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


# --- the coordinator ------------------------------------------------------------------------------


GroupRunner = Callable[[Config, Iterable[Tuple[int, List[WorkItem]]], str, object], Iterator[GroupResult]]


def run_to_url(
    config: Config,
    planned: Callable[[set], Iterable[Tuple[int, List[WorkItem]]]],
    summary: MetadataSummary,
    vocab_size: int,
    group_runner: GroupRunner,
    on_group,
    bytes_read,
) -> Tuple[Dict, Counter]:
    """Run a job whose ``--output_dir`` is a URL (see the module docstring); returns the
    manifest written and the summed counters. ``planned(done)`` gives the planned groups whose
    index is not in ``done``; ``group_runner`` makes them (a process pool or a Dask cluster)."""
    from .local import NothingUsableError, _crash_point, _keep_worst, _nothing_usable
    from .startup import input_fingerprints

    inputs = input_fingerprints(config, summary, config.vocab_file)
    settings = dict(output_settings(config), inputs=inputs)
    prepared = _prepare(config, settings)
    if prepared is None:
        log.info("%s is already complete: nothing to resume", config.output_dir)
        return json.loads(storage.read_bytes(storage.join(config.output_dir, MANIFEST_NAME))), Counter()
    work_dir, index = prepared
    stats: Counter = Counter()
    for entry in index.values():
        stats.update(entry["stats"])
    if index:
        log.info("resuming %s: %d of %d groups are done", config.output_dir, len(index), summary.groups)
    bytes_read.value = stats["input_bytes"]
    with _storage_failures(config.output_dir):
        with contextlib.closing(group_runner(config, planned(set(index)), work_dir, bytes_read)) as results:
            for result in results:
                entry = {"segments": [[s.shard, s.offset, s.length, s.records] for s in result.segments],
                         "stats": dict(result.stats)}
                storage.write_bytes(index_name(work_dir, result.group_index), json.dumps(entry).encode("utf-8"))
                _crash_point("indexed", result.group_index)
                index[result.group_index] = entry
                stats.update(result.stats)
                _keep_worst(stats, "replaced_in.", 10)
                if on_group is not None:
                    on_group(result)
        if not stats["instances"]:
            remove_remote_work_dir(work_dir)  # nothing to resume: the corrected rerun starts clean
            raise NothingUsableError(_nothing_usable(stats))
        per_shard = _assemble_shards(config, work_dir, index)
        _crash_point("published", 0)
        vocab = VocabIdentity(os.path.abspath(config.vocab_file), inputs["vocab_sha256"], vocab_size)
        manifest = build_manifest(config.to_json(), stats, per_shard, summary, vocab)
        manifest["inputs"] = inputs
        remove_remote_work_dir(work_dir)
        storage.write_json_atomically(storage.join(config.output_dir, MANIFEST_NAME), manifest)  # the commit point
    return manifest, stats


@contextlib.contextmanager
def _storage_failures(output_dir: str) -> Iterator[None]:
    """A failure of the store (network, credentials, quota, a fragment missing because a worker
    wrote to another file system) is one line; what is done stays, for ``--resume``."""
    try:
        yield
    except (BertDataError, KeyboardInterrupt):
        raise
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise OutputError(
            f"reading or writing --output_dir {output_dir} failed ({type(exc).__name__}: {detail}); every worker "
            f"must reach that URL; nothing was published: continue with --resume (same flags)"
        ) from None


def _prepare(config: Config, settings: Dict) -> Optional[Tuple[str, Dict[int, Dict]]]:
    """(work dir, index of the groups already done) of a fresh run or of ``--resume``; None when
    the output is already complete with these settings."""
    from ..writer import _check_run_file, _check_same_settings

    work_dir = storage.join(config.output_dir, WORK_DIR_NAME)
    run_file = storage.join(work_dir, RUN_FILE)
    if not config.resume:
        work_dir = prepare_remote_output_dir(config.output_dir, config.name, config.overwrite)
        storage.write_json_atomically(run_file, settings)
        return work_dir, {}
    if not storage.exists(run_file):
        manifest_path = storage.join(config.output_dir, MANIFEST_NAME)
        if storage.exists(manifest_path):
            manifest = _read_json(manifest_path)
            _check_same_settings(settings, {k: manifest.get(k) for k in settings}, manifest_path)
            return None
        raise ResumeError(f"--resume: no interrupted run in {config.output_dir} (nothing to continue); run without --resume")
    previous = _read_json(run_file)
    _check_run_file(previous, settings, run_file)
    _check_same_settings(settings, previous, run_file)
    return work_dir, _load_index(work_dir)


def _read_json(path: str) -> Dict:
    try:
        data = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResumeError(f"--resume: {path} is damaged (not valid JSON: {exc}); start over with --overwrite") from None
    if not isinstance(data, dict):
        raise ResumeError(f"--resume: {path} is damaged (not a JSON object); start over with --overwrite")
    return data


def _load_index(work_dir: str) -> Dict[int, Dict]:
    """The index objects of the groups a killed run finished (read in parallel)."""
    paths = storage.listing(storage.join(work_dir, "index", "g*.json"))
    named = re.compile(r"g(\d{9})\.json$")

    def load(path: str) -> Tuple[int, Dict]:
        match = named.search(path)
        entry = _read_json(path)
        if match is None or not isinstance(entry.get("segments"), list) or not isinstance(entry.get("stats"), dict):
            raise ResumeError(f"--resume: {path} is damaged (not a group index); start over with --overwrite")
        return int(match.group(1)), entry

    with ThreadPoolExecutor(max_workers=_INDEX_THREADS) as pool:
        return dict(pool.map(load, paths))


def _assemble_shards(config: Config, work_dir: str, index: Dict[int, Dict]) -> Dict[str, int]:
    """Every shard from its groups' byte ranges in group order, each published atomically;
    records per shard name."""
    names = shard_file_names(config.name, config.num_output_files)
    runs: Dict[int, List[Tuple[str, int, int]]] = {shard: [] for shard in range(config.num_output_files)}
    records = Counter()
    for group_index in sorted(index):
        for shard, offset, length, count in index[group_index]["segments"]:
            runs[shard].append((fragment_name(work_dir, group_index), offset, length))
            records[shard] += count

    def write(shard: int) -> None:
        out, commit = storage.atomic_create(storage.join(config.output_dir, names[shard]))
        try:
            copy_runs(runs[shard], out)
        finally:
            out.close()
        commit()

    with ThreadPoolExecutor(max_workers=_SHARD_THREADS) as pool:
        list(pool.map(write, range(config.num_output_files)))
    return {names[shard]: records[shard] for shard in range(config.num_output_files)}
