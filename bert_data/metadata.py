"""Metadata stage: metadata files -> a stream of document sources -> groups of ``split_num``.

A metadata file lists one document path per line, relative to ``--input_files_prefix``
(absolute paths are kept). Blank lines and ``#`` comments are ignored, CRLF is tolerated and
several metadata files are read one after the other. Everything here streams: no list of
every path in the corpus is ever built.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from itertools import islice
from typing import BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from .errors import MetadataError


def _open_binary(path: str) -> BinaryIO:
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


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path: str) -> bool:
    """True for paths with a scheme (gs://, s3://, hdfs://, ...): only the Beam runner reads those."""
    return bool(_SCHEME.match(path))


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
    metadata_files: Sequence[str], prefix: str, opener: Callable[[str], BinaryIO] = _open_binary
) -> Iterator[DocumentSource]:
    """Stream the entries of every metadata file, in order.

    Lines are decoded one by one (a UTF-8 BOM on the first is dropped), so an undecodable
    line is reported with its own number. ``opener`` lets the Beam runner read remote files.
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
    opener: Callable[[str], BinaryIO] = _open_binary,
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
