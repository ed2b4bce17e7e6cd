"""The one coordinator: plan a job, run its groups, hand the results to its output, finish.

Every runner and every output goes through this module:

* WHO makes the groups is a row of :data:`GROUP_RUNNERS` (``local``: this machine, in-process or
  a process pool; ``dask``: a dask.distributed cluster), each with the same contract: the
  planned groups in, their :class:`~bert_data.runners.worker.GroupResult` out, in group order.
  ``--runner beam`` is its own driver (:mod:`bert_data.runners.beam`: Beam schedules the groups
  and writes the shards) but finishes through :func:`finish` like the others;
* WHERE the bytes go is an :class:`~bert_data.output.Output` (a local directory, a URL, BERT's
  named files), opened once from the settings;
* :func:`finish` is the one finish/commit sequence: nothing usable -> exit 2 with nothing
  published; shards published; manifest built from the counters and written (the commit point), then the work
  directory removed; quality warnings on the console.

The metadata is read once: the scan checks every entry and plans the groups into a spool file,
which the run then reads. With ``--validation_fraction`` or ``--validation_metadata_files`` a job
is two runs (train, validation) of one plan each.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from typing import Callable, Dict, Mapping, Optional, Sequence

from ..config import Config, output_settings
from ..errors import NOTHING_WRITTEN, BertDataError, NothingUsableError, OutputError, ResumeError, start_resource_tracker
from ..format.containers import container_of
from ..format.manifest import MANIFEST_NAME, VocabIdentity
from ..metadata import MetadataSummary
from ..output.local_dir import clear_unsplit_run, refuse_directories_in_the_way, run_inputs
from ..output.outputs import Output, open_output
from ..output.lock import output_lock
from ..output.named_files import NamedFiles, already_published
from ..output.scratch import remove_stale_scratch, scratch_context
from ..output.naming import RUN_FILE, WORK_DIR_NAME
from ..storage import exists as storage_exists, is_remote, join as storage_join
from ..token_cache import check_cache_inputs
from .dask import dask_ready, dask_session, run_groups_dask
from .finish import finish, keep_worst, quality_warnings
from .plan import (
    input_stamps, listed_documents, plan_run, planned_groups, require_both_halves, require_unchanged_inputs, split_configs,
)
from .pool import run_groups
from .startup import StartupInfo, disk_space_warning, ensure_open_files, input_fingerprints, startup_checks
from .worker import GroupResult

log = logging.getLogger("bert_data")

ProgressCallback = Callable[[GroupResult], None]

# WHO makes the groups: runner name -> (groups -> results in group order, the session it needs
# around the job, a wait until that session can take groups: its failure is one line before
# anything is written). Each runner has run_groups' signature: (config, groups, work_dir, bytes_read, shard_files=).
GROUP_RUNNERS = {
    "local": (run_groups, lambda config: contextlib.nullcontext(), lambda: None),
    "dask": (run_groups_dask, dask_session, dask_ready),
}


def run_job(
    config: Config,
    on_group: Optional[ProgressCallback] = None,
    on_start: Optional[Callable[..., None]] = None,
    *,
    named: Optional[NamedFiles] = None,
    pipeline_args: Sequence[str] = (),
) -> Dict[str, Dict]:
    """Run every output of the job (one, or train + validation); manifests by split name. The
    start-up checks run once, before either half is touched. ``named``: write BERT's named output
    files (``config.output_dir`` is then their staging directory). ``--runner beam`` runs the
    whole job as a Beam pipeline with ``pipeline_args``."""
    if config.runner == "beam":
        from .beam import run_beam  # Beam's driver; imported only when asked for (a heavy, optional extra)

        return {"": run_beam(config, pipeline_args)}
    if named is not None:
        published = already_published(config, named)
        if published is not None:
            return {"": published}
    startup = startup_checks(config)
    start_resource_tracker()  # here, in the main thread: before a Dask cluster's thread could start one
    parts = split_configs(config)
    if len(parts) > 1:
        require_both_halves(parts)
        for part in parts.values():  # (validation's found after train is made would cost the whole train run)
            refuse_directories_in_the_way(part, container_of(part))
    lock = output_lock(config.output_dir) if len(parts) > 1 and not is_remote(config.output_dir) else contextlib.nullcontext()
    with lock, _cluster_session(config):
        if len(parts) > 1 and not config.resume:  # a plain run's output there, never a listed document
            inputs = run_inputs(config) + [("the listed document", path) for path in listed_documents(config)]
            if is_remote(config.output_dir):
                from ..output.object_store import clear_unsplit_remote as clear  # (a URL store's modules: lazily)
            else:
                clear = clear_unsplit_run
            clear(config.output_dir, config.name, config.overwrite, container_of(config).suffix, inputs)
        done: Dict[str, Dict] = {}
        for name, part in parts.items():
            try:
                done[name] = run(_resumable(part, len(parts)), on_group=on_group, on_start=on_start, startup=startup,
                                 named=named)
            except NothingUsableError as exc:
                if done:  # the first half was published: "nothing was published" would be wrong advice
                    raise NothingUsableError(_second_half_made_nothing(str(exc), part, parts)) from None
                raise
        return done


def _second_half_made_nothing(reason: str, part: Config, parts: Mapping[str, Config]) -> str:
    """A split job's validation half made nothing after train was published (its documents are
    read only when it runs): what, where, that train is kept, and the way on."""
    first = next(iter(parts.values()))
    reason = reason.replace("; nothing was published", "")
    return (f"{part.output_dir}: {reason}; the {part.split_role} half published nothing, the {first.split_role} half "
            f"is published in {first.output_dir} and kept: once the {part.split_role} documents are usable, continue "
            f"with --resume (same flags), or start over with --overwrite")


def next_step(config: Optional[Config], manifest_is_the_end: bool = True) -> str:
    """What works after the run of ``config`` stopped now (Ctrl-C, a signal, memory): ``--resume``
    when one of its outputs has a journal to continue, ``--overwrite`` for a Beam run that left
    its work (Beam runs are redone), nothing when every output is committed, else the same
    command again (nothing was written). ``manifest_is_the_end``: False for BERT's named files,
    moved into place after their staging run's manifest (--resume finishes that)."""
    if config is None:
        return NOTHING_WRITTEN
    resume = "continue later with --resume (same flags)" if config.runner != "beam" else (
        "run it again with --overwrite (a Beam run is redone, not resumed)")
    started, complete = False, []
    for part in split_configs(config).values():
        try:
            complete.append(storage_exists(storage_join(part.output_dir, MANIFEST_NAME)))  # (the commit point)
            work = storage_join(part.output_dir, WORK_DIR_NAME)
            if not complete[-1] and storage_exists(storage_join(work, RUN_FILE)):
                return resume
            started = started or storage_exists(work)
        except Exception:  # a store that cannot be reached now: the journal may be there
            return "continue later with --resume (same flags)"
    if all(complete) and manifest_is_the_end:  # stopped in the instant after the manifest: --resume would only say so
        return "the output was complete before it stopped (data_params.json is written): nothing to continue"
    if any(complete):  # a train/validation job with one half published: --resume makes the other
        return resume
    if started:  # a work directory without its run.json: the run stopped while it began
        return "run it again with --overwrite"
    return NOTHING_WRITTEN


def error_line(exc: BertDataError) -> str:
    """A run's error line (a damaged token cache, an unreadable document, ...), with the way on
    when the run stopped after preparing its journal (``exc.journal_kept``, set by the run): what
    was made is kept, and the same command alone would be refused ("holds an interrupted run"),
    so the line says --resume (a line about the journal or the output names its own way on)."""
    message = str(exc)
    if getattr(exc, "journal_kept", False) and "--resume" not in message:
        return f"{message}; what was made so far is kept: once that is fixed, continue with --resume (same flags)"
    return message


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
    *,
    named: Optional[NamedFiles] = None,
) -> Dict:
    """Run one output's job; returns the manifest that was written.

    ``on_start`` gets the :class:`MetadataSummary` and a live count of input bytes read
    (``.value``), ``on_group`` every :class:`GroupResult` in order. Crash safety is the output's
    (journal after each group, shards renamed at the end, manifest last): a killed run is
    continued with ``--resume`` to byte-identical output.
    """
    vocab = (startup or startup_checks(config)).vocab
    if not is_remote(config.output_dir):
        ensure_open_files(config)  # every partial shard is an open file of the coordinator
    with _cluster_session(config):
        return _run(config, vocab, on_group, on_start, named)


def _cluster_session(config: Config):
    """A Dask run connects to its cluster while the metadata is scanned (:func:`dask_session`)."""
    return GROUP_RUNNERS[config.runner][1](config)


def _run(config: Config, vocab: Dict[str, int], on_group: Optional[ProgressCallback], on_start, named) -> Dict:
    remove_stale_scratch()
    with _plan_dir() as plan_dir:
        spool_path = os.path.join(plan_dir, "groups.jsonl")
        try:
            config, summary = plan_run(config, spool_path)  # with the NSP negative pool the workers build
            import multiprocessing

            start_resource_tracker()  # (before the first shared resource: one that outlives a hang-up)
            bytes_read = multiprocessing.get_context("spawn").RawValue("q", 0)  # (a shared-memory file)
        except OSError as exc:
            if exc.errno not in _NO_ROOM and not str(exc.filename or "").startswith(plan_dir):
                raise
            raise _temporary_space_error(exc) from None
        space = disk_space_warning(config, summary.total_bytes)
        if space:
            log.warning(space)
        if on_start is not None:  # the MetadataSummary (entries, total_bytes, groups) before any group runs
            on_start(summary, bytes_read)
        GROUP_RUNNERS[config.runner][2]()  # the cluster is reached before the output is touched
        output = open_output(config, named=named)
        with output.lock():
            return _run_planned(config, output, spool_path, summary, len(vocab), on_group, bytes_read)


_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # a write that found no room (a full $TMPDIR, a quota, ulimit -f)


@contextlib.contextmanager
def _plan_dir():
    """The run's temporary directory for its plan spool (under ``$TMPDIR``); no usable one is
    one line naming where and the fix."""
    try:
        context = scratch_context("plan")
    except OSError as exc:
        raise _temporary_space_error(exc) from None
    with context as plan_dir:
        yield plan_dir


def _temporary_space_error(exc: OSError) -> OutputError:
    where = tempfile.gettempdir()
    return OutputError(
        f"cannot write the run's temporary files (its plan, under {where}; a shared-memory counter) "
        f"({exc.strerror or exc}); free space there, or point TMPDIR at a directory with room, and run the same "
        f"command again"
    )


def _run_planned(
    config: Config, output: Output, spool_path: str, summary: MetadataSummary, vocab_size: int,
    on_group: Optional[ProgressCallback], bytes_read,
) -> Dict:
    inputs = input_fingerprints(config, summary, config.vocab_file)
    if config.from_tokens:  # the cache was made from these metadata and documents, in as many groups
        check_cache_inputs(config, inputs, summary.groups)
    journal = False  # whether this run's journal exists (prepared or continued by it): an error after says --resume
    try:
        stats = output.prepare(dict(output_settings(config), inputs=inputs), summary.groups)
        if stats is None:
            log.info("%s is already complete: nothing to resume", config.output_dir)
            return output.finished_manifest()
        journal = True
        stamps = input_stamps(config, spool_path)  # the files the groups read, as they are now
        bytes_read.value = stats["input_bytes"]  # what the groups journaled before a resume had read
        runner = GROUP_RUNNERS[config.runner][0]
        todo = output.todo(planned_groups(config, spool_path))
        # closing(): on any exception here (Ctrl-C while appending, say) the workers are stopped
        # now, not whenever the generator happens to be collected (at exit, after the semaphores)
        with contextlib.closing(runner(config, todo, output.fragment_dir, bytes_read,
                                       shard_files=output.shard_files())) as results:
            for result in results:
                stats.update(result.stats)
                keep_worst(stats, "replaced_in.", 10)
                output.accept(result, stats)
                if on_group is not None:
                    on_group(result)
        require_unchanged_inputs(config, spool_path, stamps, inputs["vocab_sha256"])  # (an edit: records of neither version)
        vocab = VocabIdentity(os.path.abspath(config.vocab_file), inputs["vocab_sha256"], vocab_size)  # hashed once
        manifest = finish(output, config=config, stats=stats, summary=summary, vocab=vocab, inputs=inputs)
    except BertDataError as exc:
        # (for error_line; nothing usable discards the journal; a journal's or output's own error names its way on)
        exc.journal_kept = journal and not isinstance(exc, (ResumeError, OutputError, NothingUsableError))
        raise
    except (KeyboardInterrupt, MemoryError):
        raise
    except output.catches as exc:
        raise output.failure(exc) from None
    finally:
        output.close()
    for warning in quality_warnings(stats, manifest):
        log.warning(warning)
    return manifest
