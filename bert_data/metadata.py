"""Metadata stage: metadata files -> a stream of document sources -> groups of ``split_num``;
and the train/validation split of metadata entries (a seeded hash of each entry).

A metadata file lists one document path per line, relative to ``--input_files_prefix``
(absolute paths are kept). Blank lines and ``#`` comments are ignored, lines may end in LF, CRLF
or a lone CR, and several metadata files are read one after the other. Everything here streams:
no list of every path in the corpus is ever built. Which file an entry names, however spelled,
and what ``--resume`` re-checks of it is :mod:`bert_data.identity`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import time
from collections import Counter, deque
from dataclasses import dataclass
from itertools import islice
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .errors import ConfigError, MetadataError, OutputError, plural
from .identity import DocumentsDigest, entry_key, file_identity, refuse_writing_over_inputs, shown, unusable_path
from .storage import is_remote

log = logging.getLogger("bert_data")


def _open_local(path: str) -> BinaryIO:
    """A metadata file; a FIFO (a named pipe, or ``<(command)``) is opened without waiting for a
    writer, so a named pipe nobody writes to reads as empty instead of hanging the run."""
    if _is_fifo(path):
        import fcntl

        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # then read blocking
        return os.fdopen(fd, "rb")
    return open(path, "rb")



def no_documents_listed(metadata_files: Sequence[str]) -> str:
    """The line for metadata that lists nothing (a named pipe is read without waiting: _open_local)."""
    pipes = [m for m in metadata_files if not is_remote(m) and _is_fifo(m)]
    why = (f"{', '.join(pipes)} {'is a named pipe' if len(pipes) == 1 else 'are named pipes'} that gave no line: "
           f"start its writer first, or pass a file") if pipes else "only blank or comment lines"
    return f"no documents listed in {', '.join(metadata_files)} ({why})"


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):  # (opening it says what is wrong)
        return False


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
    entry = line.strip()
    if not entry or entry[0] == "#":
        return None
    return _joined(entry, prefix, is_remote(prefix))


def _joined(entry: str, prefix: str, prefix_remote: bool) -> str:
    if not prefix or entry[0] == "/" or ("://" in entry and is_remote(entry)):
        return entry
    if prefix_remote:
        return prefix.rstrip("/") + "/" + entry
    return os.path.join(prefix, entry)


MAX_METADATA_LINE = 1 << 16  # a path per line: a longer line means this is not a metadata file
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _metadata_lines(handle: BinaryIO, metadata_file: str, on_piece: Callable[[bytes], None]) -> Iterator[Tuple[int, bytes]]:
    """``(line number, line without its end)`` of a metadata file, lines split by universal
    newlines (``\\n``, ``\\r\\n`` or a lone ``\\r``, as Python's text mode and the Model Zoo read
    them), read a bounded piece at a time; ``on_piece`` sees every byte read, in order."""
    number, carry = 0, b""
    while True:
        piece = handle.readline(MAX_METADATA_LINE + 1)
        if piece:
            on_piece(piece)
            if not carry and piece.endswith(b"\n") and b"\r" not in piece:  # the usual LF line
                number += 1
                yield number, _bounded(piece[:-1], metadata_file, number)
                continue
        data, start = carry + piece, 0
        for match in _LINE_END.finditer(data):
            if piece and match.end() == len(data) and data.endswith(b"\r"):
                break  # a "\r" at the end may be half of a "\r\n": wait for the next piece
            number += 1
            yield number, _bounded(data[start : match.start()], metadata_file, number)
            start = match.end()
        carry = data[start:]
        if not piece:
            if carry:
                yield number + 1, carry
            return
        _bounded(carry.rstrip(b"\r"), metadata_file, number + 1)  # (a "\r" waiting for its "\n" is no text)


def _bounded(line: bytes, metadata_file: str, number: int) -> bytes:
    if len(line) > MAX_METADATA_LINE:
        raise MetadataError(
            f"metadata file {metadata_file}, line {number}: longer than {MAX_METADATA_LINE} bytes "
            "(a metadata file lists one document path per line; is this a document?)"
        )
    return line


def iter_metadata(
    metadata_files: Sequence[str], prefix: str, opener: Callable[[str], BinaryIO] = _open_local, digest=None,
    on_bytes: Optional[Callable[[int], None]] = None,
) -> Iterator[DocumentSource]:
    """Stream the entries of every metadata file, in order.

    Lines are decoded one by one (a UTF-8 BOM on the first is dropped), so an undecodable
    line is reported with its own number; lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``. An
    entry that cannot be a file name (a NUL byte, ...) is one line naming the file and line.
    ``opener`` lets the Beam runner read remote metadata files
    (:func:`bert_data.storage.open_metadata`); ``digest`` (a hashlib object) is fed every byte
    read, so a run can fingerprint exactly the metadata it used.
    """
    prefix_remote = is_remote(prefix)
    problem = unusable_path(prefix) if prefix else ""
    if problem:
        raise ConfigError(f"--input_files_prefix {shown(prefix)} {problem}; fix it")

    def on_piece(piece: bytes) -> None:
        if digest is not None:
            digest.update(piece)
        if on_bytes is not None:
            on_bytes(len(piece))

    for metadata_file in metadata_files:
        handle = _open_metadata(metadata_file, opener)
        with handle:
            if digest is not None:
                digest.update(b"\0next metadata file\0")  # content only: the names are in the settings
            for line_number, raw in _metadata_lines(handle, metadata_file, on_piece):
                if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise MetadataError(
                        f"metadata file {metadata_file} is not UTF-8 text at line {line_number}; save it as UTF-8 "
                        "(a document whose file name is not UTF-8 must be renamed)"
                    ) from None
                entry = line.strip()
                if entry and entry[0] != "#":
                    path = _joined(entry, prefix, prefix_remote)
                    problem = unusable_path(path)
                    if problem:
                        raise MetadataError(
                            f"{metadata_file}:{line_number}: the document path {shown(entry)} {problem}; "
                            "fix or remove that line"
                        )
                    yield DocumentSource(path, metadata_file, line_number, entry)


def _open_metadata(metadata_file: str, opener: Callable[[str], BinaryIO]) -> BinaryIO:
    problem = unusable_path(metadata_file)
    if problem:
        raise MetadataError(f"metadata file {shown(metadata_file)} {problem}; give its real name")
    try:
        return opener(metadata_file)
    except FileNotFoundError:
        raise MetadataError(f"metadata file {metadata_file} does not exist") from None
    except IsADirectoryError:
        raise MetadataError(f"metadata file {metadata_file} is a directory, not a file") from None
    except OSError as exc:
        raise MetadataError(f"metadata file {metadata_file} cannot be read ({exc.strerror or exc})") from None


def check_source(source: DocumentSource) -> os.stat_result:
    """Fail fast, naming the metadata file and line, for an entry that cannot exist as input;
    returns its ``os.stat`` (one stat per entry).

    Directories and FIFOs are *not* errors here: they are counted as skipped documents later.
    """
    try:
        info = os.stat(source.path)
    except FileNotFoundError:
        raise MetadataError(f"{source.where()}: document {shown(source.path)} does not exist") from None
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {shown(source.path)} cannot be accessed ({exc.strerror})") from None
    except ValueError as exc:  # a path the OS cannot take (iter_metadata refuses these first)
        raise MetadataError(f"{source.where()}: document path {shown(source.path)} is not usable ({exc})") from None
    if stat.S_ISREG(info.st_mode) and not os.access(source.path, os.R_OK):
        raise MetadataError(f"{source.where()}: document {shown(source.path)} is not readable (permission denied)")
    return info


def _checked(source: DocumentSource) -> Optional[os.stat_result]:
    """Check one entry (:func:`check_source`) and return its stat, or None for a URL (those are
    never split and are checked by the worker that reads them)."""
    if is_remote(source.path):
        return None
    return check_source(source)


def _checked_chunk(chunk: List[DocumentSource]) -> List[Optional[os.stat_result]]:
    return [_checked(source) for source in chunk]


@dataclass(frozen=True)
class WorkItem:
    """One metadata entry to read, whole (``end`` None) or the lines starting in ``[start, end)``
    of a large plain file (a byte range; ranges of one file are read by different workers)."""

    source: DocumentSource
    start: int = 0
    end: Optional[int] = None

    @property
    def first(self) -> bool:
        """The item that counts the per-file facts (skips, encoding, compression) of its file."""
        return self.start == 0


@dataclass(frozen=True)
class GroupPlan:
    """How entries become groups (the unit of work, memory and NSP negatives): at most
    ``split_num`` entries and ``group_bytes`` bytes of files each. A file larger than
    ``group_bytes`` is a group of its own, or, when ``can_range(source)`` says its lines can be
    read from any offset (a plain, line-oriented file), one group per ``group_bytes`` range.
    Groups depend on the entries, their sizes and these settings only, never on the workers."""

    split_num: int
    group_bytes: int
    can_range: Callable[[DocumentSource], bool] = lambda source: False


def plan_groups(sized: Iterable[Tuple[DocumentSource, int]], plan: GroupPlan) -> Iterator[Tuple[int, List[WorkItem]]]:
    """Consecutive groups of ``(source, size)`` entries, numbered from 0 (see :class:`GroupPlan`)."""
    index = 0
    pack: List[WorkItem] = []
    pack_bytes = 0
    for source, size in sized:
        if pack and (len(pack) >= plan.split_num or (size <= plan.group_bytes and pack_bytes + size > plan.group_bytes)
                     or size > plan.group_bytes):
            yield index, pack
            index, pack, pack_bytes = index + 1, [], 0
        if size <= plan.group_bytes:
            pack.append(WorkItem(source))
            pack_bytes += size
        elif plan.can_range(source):
            for start in range(0, size, plan.group_bytes):
                yield index, [WorkItem(source, start, min(size, start + plan.group_bytes))]
                index += 1
        else:
            yield index, [WorkItem(source)]  # streamed whole: its documents are cut into units as they come
            index += 1
    if pack:
        yield index, pack


def encode_group(group_index: int, items: Sequence[WorkItem], metadata_index: Dict[str, int]) -> str:
    """One line of a group spool (the plan, written once, read by the run or by Beam workers)."""
    return json.dumps(
        {"g": group_index, "s": [
            [i.source.path, metadata_index[i.source.metadata_file], i.source.line_number, i.source.entry, i.start, i.end]
            for i in items
        ]},
        ensure_ascii=True, separators=(",", ":"),
    )


def decode_group(line: str, metadata_files: Sequence[str]) -> Tuple[int, List[WorkItem]]:
    data = json.loads(line)
    return data["g"], [
        WorkItem(DocumentSource(path, metadata_files[m], n, entry), start, end) for path, m, n, entry, start, end in data["s"]
    ]


@dataclass(frozen=True)
class MetadataSummary:
    entries: int
    duplicate_entries: int
    total_bytes: int
    groups: int = 0
    metadata_sha256: str = ""  # of every metadata line read, in order: what --resume checks
    documents_sha256: str = ""  # of every entry's size and mtime, in order (identity.DocumentsDigest)
    newest_document: str = ""  # "MTIME_NS PATH (METADATA:LINE)": names a document edited since


_STAT_CHUNK = 512  # entries checked at once by the scan's thread pool (stat releases the GIL)


def scan_metadata(
    metadata_files: Sequence[str],
    prefix: str,
    select: Optional[Callable[[DocumentSource], bool]] = None,
    empty_hint: str = "",
    opener: Callable[[str], BinaryIO] = _open_local,
    plan: Optional[GroupPlan] = None,
    on_group: Optional[Callable[[int, List[WorkItem]], None]] = None,
    on_entry: Callable[[DocumentSource, int], None] = lambda source, size: None,  # every entry, its size (the NSP pool)
) -> MetadataSummary:
    """The one pass over the metadata before any work starts: every entry is checked (in
    parallel: stat is I/O bound, and slow on network file systems), duplicates are counted, and
    with a ``plan`` the groups are planned and handed to ``on_group`` in order (the runner spools
    them: the metadata is read exactly once, so a pipe works and an edit during the run cannot
    make the scan and the run disagree).

    Raises :class:`MetadataError` for a missing/unreadable document or when no metadata file
    lists any document. Remote entries (URLs) are not checked one by one: a round trip per
    document would dominate at cluster scale; a missing one fails its group instead. Duplicates
    are entries naming the same file however spelled (:func:`bert_data.identity.file_identity`),
    counted with a bounded-memory fingerprint set (8 bytes per entry). Each entry's size and
    modification time go into ``documents_sha256``, which ``--resume`` compares.
    """
    from concurrent.futures import ThreadPoolExecutor

    counts = Counter()
    seen: set = set()
    digest = hashlib.sha256()
    documents = DocumentsDigest()
    started = last_log = time.monotonic()

    def selected() -> Iterator[DocumentSource]:
        for source in iter_metadata(metadata_files, prefix, opener, digest):
            if select is None or select(source):
                yield source

    def chunks(pool) -> Iterator[Tuple[List[DocumentSource], List[Optional[os.stat_result]]]]:
        """Chunks of entries with their stats, in order; a few chunks stat'ed ahead in parallel."""
        sources = selected()
        ahead: deque = deque()
        while True:
            chunk = list(islice(sources, _STAT_CHUNK))
            if chunk:
                ahead.append((chunk, pool.submit(_checked_chunk, chunk)))
            if not ahead:
                return
            if chunk and len(ahead) < 2 * _SCAN_THREADS:
                continue
            done, future = ahead.popleft()
            yield done, future.result()

    def sized_entries(pool) -> Iterator[Tuple[DocumentSource, int]]:
        nonlocal last_log
        for chunk, infos in chunks(pool):
            for source, info in zip(chunk, infos):
                size = info.st_size if info is not None and stat.S_ISREG(info.st_mode) else 0
                counts["entries"] += 1
                counts["bytes"] += size
                key = hash(file_identity(info, source.path))
                counts["duplicates"] += key in seen
                seen.add(key)
                documents.add(info, source.path, source.where)
                on_entry(source, size)
                yield source, size
            if time.monotonic() - last_log > 5:
                last_log = time.monotonic()
                log.info("scanned %d metadata entries (%.0f/s)", counts["entries"], counts["entries"] / (last_log - started))

    with ThreadPoolExecutor(max_workers=_SCAN_THREADS) as pool:
        if plan is None:
            for _ in sized_entries(pool):
                pass
        else:
            for group_index, items in plan_groups(sized_entries(pool), plan):
                counts["groups"] += 1
                if on_group is not None:
                    on_group(group_index, items)
    if counts["duplicates"]:
        log.warning("%s in the metadata; each is processed again", plural(counts["duplicates"], "duplicate document path"))
    if counts["entries"] == 0:
        raise MetadataError(empty_hint or no_documents_listed(metadata_files))
    return MetadataSummary(
        entries=counts["entries"], duplicate_entries=counts["duplicates"], total_bytes=counts["bytes"],
        groups=counts["groups"], metadata_sha256=digest.hexdigest(), documents_sha256=documents.sha256,
        newest_document=documents.newest_document,
    )


_SCAN_THREADS = 8


def iter_groups(sources: Iterable[DocumentSource], split_num: int) -> Iterator[Tuple[int, List[DocumentSource]]]:
    """Consecutive groups of ``split_num`` entries, numbered from 0 (tools that need no byte budget)."""
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
# the entry's canonical spelling (:func:`bert_data.identity.entry_key`): its normalized path
# relative to ``--input_files_prefix`` (an absolute entry under the prefix is made relative to
# it), else its normalized absolute path. A relative entry is its own key whatever the prefix:
# moving the corpus to another directory does not change the split, and ``docs/a.txt`` and
# ``/corpus/docs/a.txt`` (prefix ``/corpus``) are one document on one side. With ``--validation_fraction F`` a document is in validation when its hash is below
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
    """The text that is hashed for ``path`` (an :func:`~bert_data.identity.entry_key`):
    ``./a//b.txt`` and ``a/b.txt`` are the same document."""
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
                f"--validation_count {count} leaves no training documents: there are only {plural(n_docs, 'document')}; "
                f"use at most {n_docs - 1}"
            )


def _unique(paths: Sequence[str], prefix: str = "") -> Tuple[List[str], List[str], Counter]:
    """(first occurrences in order, their keys, key -> number of occurrences)."""
    seen: Counter = Counter()
    unique: List[str] = []
    keys: List[str] = []
    for path in paths:
        key = entry_key(path, prefix)
        seen[key] += 1
        if seen[key] == 1:
            unique.append(path)
            keys.append(key)
    return unique, keys, seen


def assign_split(
    paths: Sequence[str], fraction: Optional[float] = None, count: Optional[int] = None, seed: int = 0,
    prefix: str = "",
) -> Tuple[List[str], List[str]]:
    """Split ``paths`` into ``(train, validation)`` by a seeded hash of each path.

    Exactly one of ``fraction`` (``0 < fraction < 1``: validation when the hash is below it)
    and ``count`` (``1 <= count < number of documents``: the ``count`` smallest hashes) must
    be given. Both lists keep the input order; duplicates (same
    :func:`~bert_data.identity.entry_key` under ``prefix``) appear once. Raises
    :class:`~bert_data.errors.ConfigError` for a bad size, including a fraction that leaves one
    side empty.

    Library callers must pass the entries as written in the metadata (not joined with the
    input prefix) and the ``--input_files_prefix`` to get the split of the ``split_metadata``
    tool and of ``create_tfrecords --validation_fraction``.
    """
    unique, keys, _ = _unique(paths, prefix)
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
            f"--validation_fraction {fraction} puts none of the {plural(len(unique), 'document')} in validation; "
            "use a larger fraction or --validation_count"
        )
    if not train:
        raise ConfigError(
            f"--validation_fraction {fraction} puts all {plural(len(unique), 'document')} in validation; "
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
    on_bytes: Optional[Callable[[int], None]] = None,
    prefix: str = "",
) -> SplitResult:
    """Read the metadata files, split, write both outputs; nothing is written on an error.
    ``on_bytes`` follows the reading (see :func:`iter_metadata`); ``prefix`` is the
    ``--input_files_prefix`` the entries are relative to (an absolute entry under it is hashed
    as its path relative to it, as ``create_tfrecords`` does)."""
    if not metadata_files:
        raise ConfigError("--metadata_files is required: give one or more metadata files listing the documents")
    for flag, name in (("--train_name", train_name), ("--validation_name", validation_name)):
        if not name or any(c in name for c in "/\\\0") or name in (".", ".."):
            raise ConfigError(f"{flag} {name!r} must be a plain file name (no slashes)")
    train_path = os.path.join(output_dir, train_name)
    validation_path = os.path.join(output_dir, validation_name)
    if os.path.realpath(train_path) == os.path.realpath(validation_path):
        raise ConfigError(f"--train_name and --validation_name both write {train_path}: give different names")
    inputs = [("one of the input metadata files", m) for m in metadata_files]
    for flag, path in (("--train_name", train_path), ("--validation_name", validation_path)):
        refuse_writing_over_inputs(flag, [path], inputs, f"pass another --output_dir or {flag}")  # hard links too

    entries = [source.path for source in iter_metadata(metadata_files, "", on_bytes=on_bytes)]
    if not entries:
        raise MetadataError(no_documents_listed(metadata_files))
    unique, keys, occurrences = _unique(entries, prefix)
    duplicates = {path: occurrences[key] for path, key in zip(unique, keys) if occurrences[key] > 1}
    train, validation = assign_split(unique, fraction=fraction, count=count, seed=seed, prefix=prefix)

    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"--output_dir {output_dir} exists and is not a directory")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be created ({exc.strerror})") from None
    _write_lines(train_path, train)
    _write_lines(validation_path, validation)
    return SplitResult(train, validation, len(entries), duplicates, train_path, validation_path)
