"""The plan of a run: its metadata scanned once into a spool of groups, and a job's halves.

The scan (:func:`bert_data.metadata.scan_metadata`) checks every listed document and plans the
groups (:func:`bert_data.group.group_plan`) into a spool file, one line per group, which the
run then reads (:func:`planned_groups`): the plan is never held in memory. A job with
``--validation_fraction`` or ``--validation_metadata_files`` is two runs
(:func:`split_configs`), each planning only its half's documents (:func:`split_selector`).
Every runner, Beam's driver included, plans this way.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Tuple

import numpy as np

from ..config import Config
from ..errors import ConfigError
from ..group import group_plan, read_options
from ..negatives import PoolSelector, encode_pool, may_range
from ..objectives import objective_of
from ..identity import entry_key, stat_identity
from ..metadata import MetadataSummary, WorkItem, decode_group, encode_group, iter_metadata, scan_metadata, split_hash
from ..storage import is_remote, join as storage_join, local_path_of, open_metadata


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


def split_selector(config: Config):
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
        prefix = config.input_files_prefix  # the hash is of the entry's canonical spelling (identity.entry_key)
        return (lambda source: (split_hash(entry_key(source.entry, prefix), seed) < fraction) == want_validation), hint
    if role == "train":
        return _held_out_selector(config), (
            "every document listed in --metadata_files is also in --validation_metadata_files: train is empty"
        )
    return None, ""


def require_both_halves(parts: Dict[str, Config]) -> None:
    """A train/validation job whose split leaves one half without a document is refused before
    either half runs (the first entry that lands on each side is enough), not after train is
    published, when the corrected command would find train's output in its way; so is a
    ``--validation_metadata_files`` list that lists nothing or a document that is not there
    (its entries are checked as a run's scan checks them: the list is small)."""
    for part in parts.values():
        select, hint = split_selector(part)
        if select is None:
            if part.split_role == "validation" and part.validation_metadata_files:  # the held-out list itself:
                scan_metadata(part.metadata_files, part.input_files_prefix)  # none listed, or one missing: one line now
            continue
        if not any(select(source) for source in iter_metadata(part.metadata_files, part.input_files_prefix)):
            raise ConfigError(hint)


def _held_out_selector(config: Config):
    """Train's predicate with ``--validation_metadata_files``: a document listed there is kept
    out of train however either list spells its path (relative to the prefix, absolute, ``./``,
    a symlink): by its canonical spelling, else by the file it names (device and inode: one stat
    per train entry, only when there is a validation list). The list is small: it is held."""
    prefix = config.input_files_prefix
    keys, files = set(), set()
    for source in iter_metadata(config.validation_metadata_files, prefix):
        keys.add(entry_key(source.entry, prefix))
        files.add(stat_identity(source.path))
    files.discard(None)

    def select(source) -> bool:
        if entry_key(source.entry, prefix) in keys:
            return False
        return not files or stat_identity(source.path) not in files

    return select


def plan(config: Config, spool_path: str, on_entry=lambda source, size: None) -> Tuple[MetadataSummary, Tuple[str, ...]]:
    """Scan the metadata once, writing the planned groups to ``spool_path`` (``on_entry(source,
    size)`` sees every entry of this half). Also returns the entries that are files preparing the
    output would remove (:func:`protected_files`), which it then refuses to remove."""
    select, empty_hint = split_selector(config)
    metadata_index = {path: i for i, path in enumerate(config.metadata_files)}
    protected, listed = protected_files(config), {}

    def entry(source, size: int) -> None:
        on_entry(source, size)
        if _is_protected(source.path, protected):
            listed.setdefault(source.path, None)

    with open(spool_path, "w", encoding="ascii") as spool:
        summary = scan_metadata(
            config.metadata_files, config.input_files_prefix, select, empty_hint, plan=group_plan(config),
            on_group=lambda g, items: spool.write(encode_group(g, items, metadata_index) + "\n"), opener=open_metadata,
            on_entry=entry,
        )
    return summary, tuple(listed)


def protected_files(config: Config, split: bool = False) -> Dict[str, set]:
    """The files a fresh run of ``config`` would remove from its local (or ``file://``) output
    directory (:func:`bert_data.output.local_dir.replaced_paths`: the manifest and shards of the
    previous run there, and of a split job's halves), by name: their identities. A listed entry of
    that name and identity is a document the run reads (compared by name first: no stat per
    entry; a link to one under another name is not seen). Empty for other URLs."""
    from ..format.containers import container_of
    from ..output.local_dir import replaced_paths

    directory = local_path_of(config.output_dir)
    if not directory or is_remote(directory) or not os.path.isdir(directory):
        return {}
    found: Dict[str, set] = {}
    for path in replaced_paths(directory, config.name, container_of(config).suffix, split):
        identity = stat_identity(path)
        if identity is not None:
            found.setdefault(os.path.basename(path), set()).add(identity)
    return found


def _is_protected(path: str, protected: Dict[str, set]) -> bool:
    identities = protected.get(os.path.basename(path))
    return bool(identities) and stat_identity(path) in identities


def listed_documents(config: Config) -> List[str]:
    """The entries of a train/validation job's metadata (both lists) that are files of a plain
    run's output in its ``--output_dir``, which clearing that output would remove (one pass over
    the metadata lines, a stat only for an entry named like one of those files)."""
    protected = protected_files(config, split=True)
    if not protected:
        return []
    listed: Dict[str, None] = {}
    for files in (config.metadata_files, config.validation_metadata_files):
        for source in iter_metadata(files, config.input_files_prefix) if files else ():
            if _is_protected(source.path, protected):
                listed.setdefault(source.path, None)
    return list(listed)


def plan_run(config: Config, spool_path: str) -> Tuple[Config, MetadataSummary]:
    """:func:`plan`, and the run's Config with what the plan derives: for NSP, the negative pool
    (:mod:`bert_data.negatives`), chosen in the same scan from this half's entries, their sizes
    and ``--seed`` only, so it is the same for any worker count, runner or ``--resume``, and a
    validation half's negatives never come from train (nor the reverse); the listed documents that
    are files of the output directory (``listed_outputs``)."""
    if not objective_of(config).negatives:
        summary, listed = plan(config, spool_path)
        return config.replace(listed_outputs=listed), summary
    options = read_options(config)
    selector = PoolSelector(config.seed, config.input_files_prefix, lambda source: may_range(source, options))
    summary, listed = plan(config, spool_path, on_entry=selector.add)
    cap, items = selector.items(summary.total_bytes)
    metadata_index = {path: i for i, path in enumerate(config.metadata_files)}
    return config.replace(negative_pool=encode_pool(cap, items, metadata_index), listed_outputs=listed), summary


def planned_groups(config: Config, spool_path: str) -> Iterator[Tuple[int, List[WorkItem]]]:
    """The groups of the spool (a path, or a URL: the Beam runner's copy in the work directory)."""
    from .. import storage

    with storage.open_read(spool_path) as spool:
        for line in spool:
            yield decode_group(line.decode("ascii"), config.metadata_files)


# --- what the run reads stays what it planned ------------------------------------------------------


def _read_files(config: Config, spool_path: str) -> Iterator[Tuple[str, str]]:
    """``(path, where)`` of every local file the run's groups read: the planned documents (a ranged
    file once), or with ``--from_tokens`` the cache's manifest and group files. (The vocabulary is
    compared by its content: :func:`require_unchanged_inputs`.)"""
    if config.from_tokens:
        from ..token_cache import CACHE_MANIFEST

        names = sorted(n for n in os.listdir(config.from_tokens) if n == CACHE_MANIFEST or n.startswith("g"))
        yield from ((os.path.join(config.from_tokens, n), f"the token cache {config.from_tokens}") for n in names)
    else:
        for _, items in planned_groups(config, spool_path):
            yield from ((i.source.path, i.source.where()) for i in items if i.first and not is_remote(i.source.path))


def _stamp(path: str) -> Tuple[int, int]:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return -1, -1
    return info.st_size, info.st_mtime_ns


def input_stamps(config: Config, spool_path: str) -> np.ndarray:
    """Size and modification time of every file :func:`_read_files` names, taken when the run
    starts (16 bytes a file). Workers read them over the whole run, the NSP pool from some when
    each starts: an edit in between makes records of neither version."""
    flat = np.fromiter((value for path, _ in _read_files(config, spool_path) for value in _stamp(path)), dtype=np.int64)
    return flat.reshape(-1, 2)


def require_unchanged_inputs(config: Config, spool_path: str, before: np.ndarray, vocab_sha256: str) -> None:
    """Before anything is published: every file is as :func:`input_stamps` found it, and the
    vocabulary's content the one hashed at the start (each worker loads it when it starts), else
    one line naming the first that changed (nothing published; --resume would refuse the changed
    inputs, so the advice is a fresh run). A document's size and time, as ``--resume`` checks
    them: a ``touch`` counts as a change."""
    from ..errors import MetadataError
    from ..format.manifest import file_sha256

    try:
        same = file_sha256(config.vocab_file) == vocab_sha256
    except OSError:  # removed since
        same = False
    if not same:
        raise MetadataError(
            f"--vocab_file {config.vocab_file} changed while the run read it; nothing was published: run again with "
            f"--overwrite once it no longer changes (--resume cannot continue a run whose inputs changed)"
        )
    require_unchanged_documents(config, spool_path, before)


def require_unchanged_documents(config: Config, spool_path: str, before: np.ndarray) -> None:
    """The documents' (or token cache's) part of :func:`require_unchanged_inputs`, which the Beam
    runner calls on its own (its workers get the vocabulary's bytes from the driver, once)."""
    from ..errors import MetadataError

    if not len(before):  # (nothing local was read: URL documents are not stat'ed)
        return
    for index, (path, where) in enumerate(_read_files(config, spool_path)):
        size, _ = now = _stamp(path)
        if index >= len(before) or tuple(before[index]) == now:
            continue
        was = int(before[index][0])
        what = "was removed" if size < 0 else f"changed ({was} -> {size} bytes)" if size != was else "was modified"
        raise MetadataError(
            f"{where}: {path} {what} while the run read it; nothing was published: run again with --overwrite once "
            f"it no longer changes (--resume cannot continue a run whose inputs changed)"
        )
