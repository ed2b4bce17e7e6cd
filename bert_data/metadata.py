"""Metadata stage: metadata files -> a stream of document sources -> groups of ``split_num``;
and the train/validation split of metadata entries (a seeded hash of each entry).

A metadata file lists one document path per line, relative to ``--input_files_prefix``
(absolute paths are kept). Blank lines and ``#`` comments are ignored, CRLF is tolerated and
several metadata files are read one after the other. Everything here streams: no list of
every path in the corpus is ever built.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections import Counter
from dataclasses import dataclass
from itertools import islice
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .errors import ConfigError, MetadataError, OutputError
from .storage import is_remote

log = logging.getLogger("bert_data")


def _open_local(path: str) -> BinaryIO:
    return open(path, "rb")



@dataclass(frozen=True)
class DocumentSource:
    """One metadata entry: the file to read and where it was listed (for error messages)."""

    path: str
    metadata_file: str
    line_number: int
    entry: str = ""  # the path as written in the metadata file (what train/validation splits hash)

    def where(self) -> str:
        return f"{self.metadata_file}:{self.line_number}"


def parse_metadata_line(line: str, prefix: str) -> Optional[str]:
    """The document path on one metadata line, or None for blank and comment lines.

    Absolute paths and URLs are kept; other entries are joined to ``prefix`` (a directory or URL).
    """
    entry = line.rstrip("\r\n").strip()
    if not entry or entry.startswith("#"):
        return None
    if os.path.isabs(entry) or is_remote(entry) or not prefix:
        return entry
    if is_remote(prefix):
        return prefix.rstrip("/") + "/" + entry
    return os.path.join(prefix, entry)


def iter_metadata(
    metadata_files: Sequence[str], prefix: str, opener: Callable[[str], BinaryIO] = _open_local
) -> Iterator[DocumentSource]:
    """Stream the entries of every metadata file, in order.

    Lines are decoded one by one (a UTF-8 BOM on the first is dropped), so an undecodable
    line is reported with its own number. ``opener`` lets the Beam runner read remote metadata files (:func:`bert_data.storage.open_metadata`).
    """
    for metadata_file in metadata_files:
        try:
            handle = opener(metadata_file)
        except FileNotFoundError:
            raise MetadataError(f"metadata file {metadata_file} does not exist") from None
        except IsADirectoryError:
            raise MetadataError(f"metadata file {metadata_file} is a directory, not a file") from None
        except OSError as exc:
            raise MetadataError(f"metadata file {metadata_file} cannot be read ({exc.strerror})") from None
        with handle:
            for line_number, raw in enumerate(handle, start=1):
                if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise MetadataError(f"metadata file {metadata_file} is not UTF-8 text at line {line_number}") from None
                path = parse_metadata_line(line, prefix)
                if path is not None:
                    yield DocumentSource(path, metadata_file, line_number, parse_metadata_line(line, ""))


def check_source(source: DocumentSource) -> None:
    """Fail fast, naming the metadata file and line, for an entry that cannot exist as input.

    Directories and FIFOs are *not* errors here: they are counted as skipped documents later.
    """
    try:
        info = os.stat(source.path)
    except FileNotFoundError:
        raise MetadataError(f"{source.where()}: document {source.path} does not exist") from None
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be accessed ({exc.strerror})") from None
    if stat.S_ISREG(info.st_mode) and not os.access(source.path, os.R_OK):
        raise MetadataError(f"{source.where()}: document {source.path} is not readable (permission denied)")


@dataclass(frozen=True)
class MetadataSummary:
    entries: int
    duplicate_entries: int
    total_bytes: int


def scan_metadata(
    metadata_files: Sequence[str],
    prefix: str,
    select: Optional[Callable[[DocumentSource], bool]] = None,
    empty_hint: str = "",
    opener: Callable[[str], BinaryIO] = _open_local,
) -> MetadataSummary:
    """One validating pass over every entry before any work starts.

    Raises :class:`MetadataError` for a missing/unreadable document or when no metadata file
    lists any document. Remote entries (URLs) are not checked one by one: a round trip per
    document would dominate at cluster scale; a missing one fails its group instead. Duplicates are counted with a bounded-memory fingerprint set
    (8 bytes per entry), so the scan stays cheap on millions of documents.
    """
    entries = 0
    duplicates = 0
    total_bytes = 0
    seen = set()
    for source in iter_metadata(metadata_files, prefix, opener):
        if select is not None and not select(source):
            continue
        entries += 1
        remote = is_remote(source.path)
        fingerprint = hash(source.path if remote else os.path.normpath(source.path))
        if fingerprint in seen:
            duplicates += 1
        else:
            seen.add(fingerprint)
        if remote:
            continue
        check_source(source)
        try:
            info = os.stat(source.path)
            if stat.S_ISREG(info.st_mode):
                total_bytes += info.st_size
        except OSError:
            pass
    if duplicates:
        log.warning("%d duplicate document path(s) in the metadata; each is processed again", duplicates)
    if entries == 0:
        raise MetadataError(
            empty_hint or f"no documents listed in {', '.join(metadata_files)} (only blank or comment lines)"
        )
    return MetadataSummary(entries=entries, duplicate_entries=duplicates, total_bytes=total_bytes)


def iter_groups(sources: Iterable[DocumentSource], split_num: int) -> Iterator[Tuple[int, List[DocumentSource]]]:
    """Consecutive groups of ``split_num`` entries, numbered from 0: the unit of work."""
    iterator = iter(sources)
    group_index = 0
    while True:
        group = list(islice(iterator, split_num))
        if not group:
            return
        yield group_index, group
        group_index += 1


# --- train/validation split of metadata entries ---------------------------------------------
#
# Every document goes to one side according to a *seeded hash of its path*, never according to
# its position, so the split is
#
# * deterministic (same entries, same seed -> same files),
# * independent of the order of the input entries and of how they are spread over metadata files,
# * stable under additions with ``--validation_fraction``: a document keeps its side when other
#   documents are added or removed, so a validation set never leaks into a later training set.
#
# The hash is ``blake2b(f"{seed}:{key}")`` read as a number uniform in ``[0, 1)``, where ``key`` is
# the entry *as written in the metadata file* (normalised with ``os.path.normpath``), not joined
# with ``--input_files_prefix``: moving the corpus to another directory does not change the
# split. With ``--validation_fraction F`` a document is in validation when its hash is below
# ``F`` (so the validation size is about ``F`` times the number of documents, not exactly).
# With ``--validation_count N`` the validation side holds exactly the ``N`` documents with the
# smallest hashes (ties broken by the key). That is deterministic too, but stability under
# additions is only approximate: a new document whose hash is small enough takes the place of
# the old validation document with the largest hash, which moves to train.
#
# The outputs list the input entries as written (stripped of surrounding blanks; comments and
# blank lines dropped), in input order; a duplicated entry is written once (first occurrence)
# and reported on stderr.


def split_key(path: str) -> str:
    """The text that is hashed for ``path``: ``./a//b.txt`` and ``a/b.txt`` are the same document."""
    return os.path.normpath(path.strip())


def split_hash(path: str, seed: int = 0) -> float:
    """A number uniform in ``[0, 1)`` that depends only on ``(seed, path)``."""
    digest = hashlib.blake2b(f"{seed}:{split_key(path)}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _check_sizes(n_docs: int, fraction: Optional[float], count: Optional[int]) -> None:
    if fraction is None and count is None:
        raise ConfigError("give the validation size with --validation_fraction F (0 < F < 1) or --validation_count N")
    if fraction is not None and count is not None:
        raise ConfigError("--validation_fraction and --validation_count contradict each other: give only one")
    if n_docs == 0:
        raise ConfigError("no documents to split")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
            raise ConfigError(f"--validation_fraction {fraction!r} must be strictly between 0 and 1")
    else:
        if isinstance(count, bool) or not isinstance(count, int):
            raise ConfigError(f"--validation_count must be an integer, got {count!r}")
        if count < 1:
            raise ConfigError(f"--validation_count {count} leaves the validation set empty: it must be at least 1")
        if count >= n_docs:
            raise ConfigError(
                f"--validation_count {count} leaves no training documents: there are only {n_docs} document(s); "
                f"use at most {n_docs - 1}"
            )


def _unique(paths: Sequence[str]) -> Tuple[List[str], List[str], Counter]:
    """(first occurrences in order, their keys, key -> number of occurrences)."""
    seen: Counter = Counter()
    unique: List[str] = []
    keys: List[str] = []
    for path in paths:
        key = split_key(path)
        seen[key] += 1
        if seen[key] == 1:
            unique.append(path)
            keys.append(key)
    return unique, keys, seen


def assign_split(
    paths: Sequence[str], fraction: Optional[float] = None, count: Optional[int] = None, seed: int = 0
) -> Tuple[List[str], List[str]]:
    """Split ``paths`` into ``(train, validation)`` by a seeded hash of each path.

    Exactly one of ``fraction`` (``0 < fraction < 1``: validation when the hash is below it)
    and ``count`` (``1 <= count < number of documents``: the ``count`` smallest hashes) must
    be given. Both lists keep the input order; duplicates (same :func:`split_key`) appear once.
    Raises :class:`~bert_data.errors.ConfigError` for a bad size, including a fraction that
    leaves one side empty.

    Library callers must pass the entries as written in the metadata (not joined with the
    input prefix) to get the same split as the ``split_metadata`` tool.
    """
    unique, keys, _ = _unique(paths)
    _check_sizes(len(unique), fraction, count)
    hashes = [split_hash(key, seed) for key in keys]
    if fraction is not None:
        in_validation = [h < fraction for h in hashes]
    else:
        order = sorted(range(len(unique)), key=lambda i: (hashes[i], keys[i]))
        chosen = set(order[:count])
        in_validation = [i in chosen for i in range(len(unique))]
    train = [p for p, v in zip(unique, in_validation) if not v]
    validation = [p for p, v in zip(unique, in_validation) if v]
    if not validation:
        raise ConfigError(
            f"--validation_fraction {fraction} puts none of the {len(unique)} document(s) in validation; "
            "use a larger fraction or --validation_count"
        )
    if not train:
        raise ConfigError(
            f"--validation_fraction {fraction} puts all {len(unique)} document(s) in validation; "
            "use a smaller fraction or --validation_count"
        )
    return train, validation


@dataclass
class SplitResult:
    train: List[str]
    validation: List[str]
    entries: int
    duplicates: Dict[str, int]  # entry as first written -> number of occurrences (> 1)
    train_path: str
    validation_path: str


def _write_lines(path: str, lines: Sequence[str]) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"cannot write {path} ({exc.strerror})") from None


def split_metadata_files(
    metadata_files: Sequence[str],
    output_dir: str = ".",
    train_name: str = "train_metadata.txt",
    validation_name: str = "validation_metadata.txt",
    fraction: Optional[float] = None,
    count: Optional[int] = None,
    seed: int = 0,
) -> SplitResult:
    """Read the metadata files, split, write both outputs; nothing is written on an error."""
    if not metadata_files:
        raise ConfigError("--metadata_files is required: give one or more metadata files listing the documents")
    for flag, name in (("--train_name", train_name), ("--validation_name", validation_name)):
        if not name or any(c in name for c in "/\\\0") or name in (".", ".."):
            raise ConfigError(f"{flag} {name!r} must be a plain file name (no slashes)")
    train_path = os.path.join(output_dir, train_name)
    validation_path = os.path.join(output_dir, validation_name)
    if os.path.realpath(train_path) == os.path.realpath(validation_path):
        raise ConfigError(f"--train_name and --validation_name both write {train_path}: give different names")
    inputs = {os.path.realpath(m) for m in metadata_files}
    for flag, path in (("--train_name", train_path), ("--validation_name", validation_path)):
        if os.path.realpath(path) in inputs:
            raise ConfigError(f"{flag}: {path} is one of the input metadata files; refusing to overwrite it")

    entries = [source.path for source in iter_metadata(metadata_files, "")]
    if not entries:
        raise MetadataError(f"no documents listed in {', '.join(metadata_files)} (only blank or comment lines)")
    unique, keys, occurrences = _unique(entries)
    duplicates = {path: occurrences[key] for path, key in zip(unique, keys) if occurrences[key] > 1}
    train, validation = assign_split(unique, fraction=fraction, count=count, seed=seed)

    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"--output_dir {output_dir} exists and is not a directory")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be created ({exc.strerror})") from None
    _write_lines(train_path, train)
    _write_lines(validation_path, validation)
    return SplitResult(train, validation, len(entries), duplicates, train_path, validation_path)
