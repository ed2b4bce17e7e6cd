"""The worker side that every runner calls: one group, from its work items to a fragment file.

:func:`make_group` is what a pool process, a Dask worker, a Beam DoFn or the coordinator itself
(``--num_workers 1``) runs for a group (Beam's DoFn calls its parts, :func:`stage_sources` and
:func:`write_group`, and publishes the fragment itself). It takes the group's batches from
:func:`bert_data.group.group_batches` (WHAT), encodes and frames them into the group's fragment
(:class:`bert_data.output.fragment.FragmentWriter`: the run's encoder and container), and
returns a :class:`GroupResult` that the coordinator hands to the run's output (WHERE).

Documents behind a URL are copied to a worker-local directory first (:func:`stage_sources`), so
the unchanged readers see a local file with the same base name (compression is recognised by
extension too); messages name the URL. With a URL work directory the fragment is made locally
and published shard-major to the shared work directory in one upload.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from .. import storage
from ..errors import BertDataError, MetadataError
from ..format.containers import container_of
from ..group import Resources, StageClock, group_batches
from ..memory import keep_freed_memory
from ..metadata import DocumentSource, WorkItem
from ..output.fragment import COPY_CHUNK, FragmentWriter, InPlaceWriter, Segment, publish_fragment
from ..output.naming import fragment_name
from ..output.scratch import scratch_dir

STAGE_THREADS = 16


@dataclass
class GroupResult:
    """A finished group: its fragment, the byte runs in it, its counters and stage times."""

    group_index: int
    fragment_path: str
    segments: List[Segment]
    stats: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)  # wall time per stage (benchmarks only)


def write_group(group_index: int, items: Sequence[WorkItem], resources: Resources, work_dir: str,
                shard_files: Sequence[int] = ()) -> GroupResult:
    """The group's batches into ``work_dir/fragments/gNNNNNNNNN.frag`` (a local directory), or,
    given the output's partial shards (``shard_files``: a group the coordinator makes itself, in
    group order), straight onto their ends (:class:`InPlaceWriter`; the result's path is empty)."""
    config = resources.config
    keep_freed_memory()  # a batch's arrays are reused, not page-faulted in again (bert_data.memory)
    stats: Counter = Counter()
    seconds: Counter = Counter()
    clock = StageClock(seconds)
    common = dict(encoder=resources.encoder, container=container_of(config), num_shards=config.num_output_files,
                  seconds=seconds)
    if shard_files:
        writer: FragmentWriter = InPlaceWriter(shard_fds=shard_files, **common)
    else:
        writer = FragmentWriter(path=fragment_name(work_dir, group_index), **common)
    try:
        for features, shard_of_row in group_batches(group_index, items, resources, stats, clock):
            writer.write_batch(features, shard_of_row)
        with clock("write"):
            writer.close()
    except BaseException:
        writer.abort()
        raise
    return GroupResult(group_index, writer.path, writer.segments, stats, seconds)


def make_group(group_index: int, items: Sequence[WorkItem], resources: Resources, work_dir: str,
               shard_files: Sequence[int] = ()) -> GroupResult:
    """:func:`write_group` wherever its documents and work directory are: remote documents are
    staged first; with a URL ``work_dir`` the fragment is made locally and published shard-major
    to ``work_dir/fragments/`` (the result's segments then point into that copy). ``shard_files``:
    see :func:`write_group` (a local output's, so never with a URL ``work_dir``)."""
    remote_docs = any(storage.is_remote(item.source.path) for item in items)
    if shard_files and storage.is_remote(work_dir):
        raise ValueError("make_group: shard files are a local output's; its work directory is not a URL")
    if not remote_docs and not storage.is_remote(work_dir):
        return write_group(group_index, items, resources, work_dir, shard_files)
    scratch = scratch_dir(f"g{group_index:09d}")
    try:
        local_items, renames = stage_sources(items, scratch) if remote_docs else (list(items), {})
        local_work = work_dir
        if storage.is_remote(work_dir):
            local_work = os.path.join(scratch, "work")
            os.makedirs(os.path.join(local_work, "fragments"))
        try:
            result = write_group(group_index, local_items, resources, local_work, shard_files)
        except BertDataError as exc:
            raise named_as_given(exc, renames) from None
        if not storage.is_remote(work_dir):
            return result
        shared = fragment_name(work_dir, group_index, storage.join)
        entries = publish_fragment(result.fragment_path, result.segments, shared) if result.segments else []
        segments = [Segment(shard, offset, length, records) for shard, offset, length, records in entries]
        return GroupResult(group_index, shared, segments, result.stats, result.seconds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
                shutil.copyfileobj(src, dst, COPY_CHUNK)
        except BertDataError:
            raise
        except Exception as exc:  # BeamIOError, botocore errors, OSError, ...
            raise MetadataError(f"{wanted[path]}: document {path} cannot be read ({exc})") from None

    with ThreadPoolExecutor(max_workers=min(STAGE_THREADS, len(wanted))) as pool:
        list(pool.map(fetch, wanted))
    for i, item in remote:
        source = item.source
        local = copies[source.path]
        staged[i] = WorkItem(DocumentSource(local, source.metadata_file, source.line_number, source.entry), item.start, item.end)
        renames[local] = source.path
    return staged, renames


def named_as_given(exc: BertDataError, renames: Dict[str, str]) -> BertDataError:
    """The same error with every staged local path replaced by the URL the user gave."""
    message = str(exc)
    for local, remote in renames.items():
        message = message.replace(local, remote)
    return type(exc)(message)
