"""`bert-data tokenize`: the corpus read, segmented and tokenized once, into a token cache.

The run plans its groups exactly as ``create_tfrecords`` does (:func:`bert_data.runners.plan.plan`:
the same metadata scan, ``--split_num``, ``--group_bytes`` and input flags), has the local pool
(:func:`bert_data.runners.pool.run_groups`, so ``--num_workers`` processes) make each group's
units with the stages a create run uses (:func:`bert_data.group.tokenized_units`) and writes them
with :func:`bert_data.token_cache.write_group_cache`. Crash safety: each group's files are
renamed into place, its sidecar last; the cache's manifest (``tokens.json``) is written after
every group, so a cache without one is unfinished, and the same command again completes it
(groups already written for the same plan are kept). ``--overwrite`` starts afresh.

It also keeps NSP's negative pool for ``--seed`` (:func:`bert_data.token_cache.cached_pool`: the
pool a create run with that seed plans, :func:`bert_data.runners.plan.plan_run`), made by the
pool of workers as one more task, first: an NSP run from the cache with that seed then reads its
pool instead of loading spaCy to segment it (a run with another seed makes its own on first use,
as before). The pool is ~1/256 of the corpus (at most 4 MiB of text): a few % of tokenize's work.
"""

from __future__ import annotations

import glob
import itertools
import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..config import Config
from ..errors import BertDataError, plural
from ..format.indexed import token_dtype
from ..group import Resources, StageClock, tokenized_units
from ..metadata import MetadataSummary, WorkItem
from ..output.journal import read_json_object
from ..output.lock import output_lock
from ..output.naming import LOCK_NAME
from ..output.scratch import remove_stale_scratch, scratch_context, scratch_dir
from ..negatives import build_pool
from ..token_cache import (
    CACHE_FORMAT, CACHE_INPUTS, CACHE_MANIFEST, CACHE_RUN_FILE, CACHE_VERSION, TokenCacheError, cache_settings, cached_pool,
    MANIFEST_COUNTS, group_done, group_file, manifest_fault, plan_digest, pool_identity, pool_is_kept, read_sidecar,
    stats_delta, write_group_cache,
)
from ..storage import write_json_atomically
from .plan import plan_run, planned_groups
from .pool import run_groups
from .startup import input_fingerprints, startup_checks
from .worker import named_as_given, stage_sources

log = logging.getLogger("bert_data")

POOL_TASK = -1  # the "group index" of the task that keeps the NSP pool (before group 0: results come in task order)


@dataclass
class TokenizedGroupFiles:
    """A group written to the cache: its file sizes and the counters of making it."""

    group_index: int
    sizes: Dict[str, int]
    stats: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)


def tokenize_group_files(group_index: int, items: Sequence[WorkItem], resources: Resources, directory: str) -> TokenizedGroupFiles:
    """One group's units into ``directory`` (run by a pool worker, as :func:`make_group` is); or,
    for :data:`POOL_TASK`, NSP's negative pool of the run's ``--seed``, kept there."""
    if group_index == POOL_TASK:
        return _keep_pool(resources, directory)
    stats: Counter = Counter()
    seconds: Counter = Counter()
    clock = StageClock(seconds)
    scratch = scratch_dir(f"t{group_index:09d}")
    try:
        local_items, renames = stage_sources(items, scratch)
        units: List[Tuple[Any, Dict[str, int]]] = []
        before: Dict[str, int] = {}
        try:
            for unit in tokenized_units(local_items, resources, stats, clock, with_origins=True):
                units.append((unit, stats_delta(before, stats)))
                before = dict(stats)
        except BertDataError as exc:
            raise named_as_given(exc, renames) from None
        tail = stats_delta(before, stats)
        stats["units"] = len(units)  # (the cache's own count: not in the sidecar, which a create run adds to its own)
        with clock("write"):
            dtype = token_dtype(len(resources.tokenizer.vocab))
            sizes = write_group_cache(directory, group_index, plan_digest(items), units, tail, dtype)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TokenizedGroupFiles(group_index, sizes, stats, seconds)


def _keep_pool(resources: Resources, directory: str) -> TokenizedGroupFiles:
    """NSP's negative pool of ``resources.config.negative_pool``, built as a create run's workers
    build it and kept in the cache under the name a run from the cache looks for."""
    config = resources.config
    seconds: Counter = Counter()
    vocab = resources.tokenizer.vocab
    with StageClock(seconds)("pool"):
        cached_pool(directory, config.negative_pool, pool_identity(config, vocab), len(vocab), lambda: build_pool(
            config.negative_pool, resources.read_options, config.input_files_prefix, config.metadata_files,
            resources.segmenter, resources.tokenizer))
    return TokenizedGroupFiles(POOL_TASK, {}, Counter(), seconds)


def run_tokenize(config: Config) -> Tuple[Dict[str, Any], Optional[bool]]:
    """Tokenize the corpus of ``config`` into ``config.output_dir`` (and keep NSP's negative pool
    of ``config.seed``); returns the cache's manifest, and whether the pool is kept (None: the
    Config's objective draws no negatives, so it has none)."""
    startup = startup_checks(config)
    remove_stale_scratch()
    directory = config.output_dir
    with output_lock(directory), scratch_context("plan") as plan_dir:
        spool = os.path.join(plan_dir, "groups.jsonl")
        config, summary = plan_run(config, spool)  # (tokenize's Config is an NSP one: the pool of --seed is planned)
        inputs = input_fingerprints(config, summary, config.vocab_file)
        identity = {"settings": cache_settings(config), "inputs": {k: inputs[k] for k in CACHE_INPUTS}}
        finished = _prepare(config, identity)
        damaged = None if finished is None else _damaged_groups(directory, finished, planned_groups(config, spool))
        if damaged is not None:  # (the manifest is written anew: after remaking these groups, if any)
            if damaged:
                log.warning("%s: %s of the token cache damaged or missing: made again", directory, plural(len(damaged), "group"))
            write_json_atomically(os.path.join(directory, CACHE_RUN_FILE), identity)  # (unfinished again: manifest last)
            _remove(os.path.join(directory, CACHE_MANIFEST))
            for group_index in damaged:  # (a group without its sidecar is made again)
                _remove(group_file(directory, group_index, ".json"))
            finished = None
        pool_task = [] if _pool_kept(config, directory, startup.vocab) else [(POOL_TASK, [])]
        if finished is not None:
            for _ in run_groups(config.replace(num_workers=1), iter(pool_task), directory, make=tokenize_group_files):
                pass  # (a finished cache asked for another --seed: only its pool is made, by one worker)
            log.info("%s already holds this token cache: nothing to do%s", directory,
                     " but keep the negative pool of this --seed" if pool_task else "")
            return finished, _pool_status(config, directory, startup.vocab)
        sizes: List[Dict[str, int]] = []
        stats: Counter = Counter()
        groups = itertools.chain(pool_task, planned_groups(config, spool))
        for result in _tokenize_groups(config, groups, directory):
            sizes.append(result.sizes)
            stats.update(result.stats)
        manifest = _manifest(config, identity, inputs, summary, sizes, stats, len(startup.vocab))
        write_json_atomically(os.path.join(directory, CACHE_MANIFEST), manifest)  # the commit point
        _remove(os.path.join(directory, CACHE_RUN_FILE))
    return manifest, _pool_status(config, directory, startup.vocab)


def _pool_status(config: Config, directory: str, vocab: Dict[str, int]) -> Optional[bool]:
    """Whether the pool of --seed is kept (None: no NSP pool for this Config); a pool that could
    not be written (a full disk, a read-only directory) is said on the console."""
    if not config.negative_pool:
        return None
    kept = _pool_kept(config, directory, vocab)
    if not kept:
        log.warning("NSP's negative pool for --seed %s could not be kept in %s: NSP runs from the cache with that seed "
                    "will make it (loading spaCy)", config.seed, directory)
    return kept


def _tokenize_groups(config: Config, groups: Iterator[Tuple[int, List[WorkItem]]], directory: str) -> Iterator[TokenizedGroupFiles]:
    """Every group's result in order: a group already in the cache for this plan is kept (counted
    from its sidecar), the others are made by the pool."""
    done: Dict[int, TokenizedGroupFiles] = {}

    def todo() -> Iterator[Tuple[int, List[WorkItem]]]:
        for group_index, items in groups:
            if group_index == POOL_TASK:
                yield group_index, items
                continue
            sizes = group_done(directory, group_index, plan_digest(items))
            if sizes is None:
                yield group_index, items
            else:
                done[group_index] = TokenizedGroupFiles(group_index, sizes, _sidecar_stats(directory, group_index))

    made = run_groups(config, todo(), directory, make=tokenize_group_files)
    expected = 0
    for result in made:
        if result.group_index == POOL_TASK:
            continue
        while expected in done:
            yield done.pop(expected)
            expected += 1
        yield result
        expected = result.group_index + 1
    while expected in done:
        yield done.pop(expected)
        expected += 1


def _damaged_groups(directory: str, manifest: Dict[str, Any], groups: Iterator[Tuple[int, List[WorkItem]]]
                    ) -> Optional[List[int]]:
    """None when a finished cache's every group is there as its manifest records it (sidecar
    digest and fields, file sizes: the tokens are not re-read); else the groups to make again
    (what "the same command completes it" promises after a damaged file), and the manifest is
    written anew. A manifest that cannot be trusted (damaged, of another version) has every
    intact group kept and recorded again."""
    planned = list(groups)
    trusted = not manifest_fault(manifest) and manifest.get("version") == CACHE_VERSION and len(manifest["groups"]) == len(planned)
    found = [(g, group_done(directory, g, plan_digest(items))) for g, items in planned]
    if not trusted:
        return [g for g, done in found if done is None]
    damaged = [g for g, done in found if done != manifest["groups"][g]]
    return damaged or None


def _pool_kept(config: Config, directory: str, vocab: Dict[str, int]) -> bool:
    """Whether ``directory`` already holds a whole negative pool of this run's ``--seed`` (or the
    Config needs none): a damaged one is made again."""
    return not config.negative_pool or pool_is_kept(directory, config.negative_pool, pool_identity(config, vocab), len(vocab))


def _sidecar_stats(directory: str, group_index: int) -> Counter:
    sidecar = read_sidecar(directory, group_index, None)
    stats: Counter = Counter()
    for unit in sidecar["units"]:
        stats.update(unit["stats"])
    stats.update(sidecar["tail"])
    stats["units"] = len(sidecar["units"])
    return stats


def _prepare(config: Config, identity: Dict[str, Any]):
    """The finished manifest when the directory already holds this very cache; else the directory
    made ready (emptied of an old cache with --overwrite) with this run's identity recorded."""
    directory = config.output_dir
    manifest_path, run_path = os.path.join(directory, CACHE_MANIFEST), os.path.join(directory, CACHE_RUN_FILE)
    # A new cache is not mixed into a directory of other files (checked before --overwrite removes
    # anything); a file put beside an existing cache is left alone, --overwrite or not.
    foreign = sorted(set(os.listdir(directory)) - {os.path.basename(p) for p in _cache_files(directory)} - {LOCK_NAME})
    if foreign and not (os.path.lexists(manifest_path) or os.path.lexists(run_path)):
        raise TokenCacheError(
            f"--output_dir {directory} holds files that are not a token cache's ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); pass an empty or new directory")
    for path in _cache_files(directory) if config.overwrite else glob.glob(os.path.join(directory, "g[0-9]*.tmp")):
        _remove(path)  # (temporary files of a killed run: this run holds the lock)
    for path, what in ((manifest_path, "a token cache"), (run_path, "an unfinished tokenize")):
        recorded = _read_json(path)
        if recorded is None:
            continue
        inputs = recorded.get("inputs") if isinstance(recorded.get("inputs"), dict) else {}
        if {"settings": recorded.get("settings"), "inputs": {k: inputs.get(k) for k in identity["inputs"]}} == identity:
            if path == manifest_path:
                return recorded
            return None  # the same run again: its finished groups are kept
        raise TokenCacheError(
            f"--output_dir {directory} holds {what} of other settings or inputs ({path}); pass --overwrite to "
            f"replace it, or use another --output_dir"
        )
    write_json_atomically(run_path, identity)
    return None


def _cache_files(directory: str) -> List[str]:
    names = [CACHE_MANIFEST, CACHE_RUN_FILE, CACHE_MANIFEST + ".tmp", CACHE_RUN_FILE + ".tmp"]  # (.tmp: write_json_atomically's)
    patterns = ("g[0-9]*.bin", "g[0-9]*.idx", "g[0-9]*.json", "g[0-9]*.tmp", "pool-*.npz", "pool-*.tmp")  # pool: token_cache.cached_pool
    return [os.path.join(directory, n) for n in names] + [p for pattern in patterns for p in glob.glob(os.path.join(directory, pattern))]


def _manifest(config: Config, identity: Dict[str, Any], inputs: Dict[str, str], summary: MetadataSummary,
              sizes: List[Dict[str, int]], stats: Counter, vocab_size: int) -> Dict[str, Any]:
    return {
        "format": CACHE_FORMAT, "version": CACHE_VERSION, **identity,
        "inputs": {**identity["inputs"], "newest_document": inputs["newest_document"], "tokenizers": inputs["tokenizers"],
                   "bert_data_version": inputs["bert_data_version"]},
        "metadata_files": list(config.metadata_files), "input_files_prefix": config.input_files_prefix,
        "vocab_file": os.path.abspath(config.vocab_file), "vocab_size": vocab_size,
        "dtype": str(token_dtype(vocab_size)), "entries": summary.entries, "input_bytes_planned": summary.total_bytes,
        "counts": {name: int(stats.get(name, 0)) for name in MANIFEST_COUNTS},
        "bytes": sum(s["bin_bytes"] + s["idx_bytes"] for s in sizes),
        "groups": sizes,
    }


class _Unreadable(Exception):
    pass


def _read_json(path: str):
    """The JSON object at ``path``; None when there is none; {} when it cannot be used (not this
    cache: refused by the caller unless --overwrite), a FIFO or device included, never waited on."""
    if not os.path.lexists(path):
        return None
    try:
        return read_json_object(path, lambda p, what: _Unreadable(what), follow_links=True)
    except _Unreadable:
        return {}


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
