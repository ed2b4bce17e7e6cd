"""Read stage: a document source -> decoded document texts, with every oddity counted.

Pure core (:func:`decode_document_bytes`, :func:`split_documents`) plus a thin file reader.
Nothing here raises for bad *content*: undecodable bytes are replaced and counted, binary
files, directories and FIFOs are skipped with a reason. Only I/O failures raise.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from .errors import MetadataError
from .metadata import DocumentSource

# Skip reasons for whole documents (keys of data_params.json "documents.skipped").
SKIP_NOT_REGULAR = "not_a_regular_file"
SKIP_BINARY = "binary"
SKIP_EMPTY = "empty"
SKIP_NO_SENTENCE = "no_usable_sentence"

_BINARY_SNIFF_BYTES = 8192


@dataclass
class DecodedText:
    text: str
    replaced_bytes: int = 0  # undecodable bytes replaced with U+FFFD
    encoding: str = "utf-8"


_replaced_in_last_decode = [0]


def _counting_replace(err: UnicodeDecodeError):
    _replaced_in_last_decode[0] += err.end - err.start
    return ("\ufffd", err.end)


codecs.register_error("bert_data_count_replace", _counting_replace)


def _count_replacements(data: bytes, encoding: str) -> Tuple[str, int]:
    """Decode with U+FFFD replacement, counting replaced bytes (not pre-existing U+FFFD)."""
    _replaced_in_last_decode[0] = 0
    text = data.decode(encoding, errors="bert_data_count_replace")
    return text, _replaced_in_last_decode[0]


def looks_binary(data: bytes) -> bool:
    """Heuristic used by `file`/git: NUL bytes in the first 8 KiB of a non-UTF-16 file."""
    return b"\x00" in data[:_BINARY_SNIFF_BYTES]


def decode_document_bytes(data: bytes) -> Optional[DecodedText]:
    """Decode raw bytes of a document; None when the bytes look binary.

    UTF-8 (with or without BOM) is the contract; UTF-16 and UTF-32 with a BOM are detected and
    decoded (reported as such in the manifest). Invalid UTF-8 is replaced and counted.
    """
    if data.startswith(codecs.BOM_UTF32_LE) or data.startswith(codecs.BOM_UTF32_BE):
        text, bad = _count_replacements(data, "utf-32")
        return DecodedText(text, bad, "utf-32")
    if data.startswith(codecs.BOM_UTF16_LE) or data.startswith(codecs.BOM_UTF16_BE):
        text, bad = _count_replacements(data, "utf-16")
        return DecodedText(text, bad, "utf-16")
    if looks_binary(data):
        return None
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return DecodedText(data.decode("utf-8"))
    except UnicodeDecodeError:
        text, bad = _count_replacements(data, "utf-8")
        return DecodedText(text, bad)


def split_documents(text: str, separator: Optional[str]) -> List[str]:
    """One document, or the pieces between separators (empty pieces are kept: they are counted)."""
    if separator is None:
        return [text]
    return text.split(separator)


@dataclass
class ReadResult:
    """What one metadata entry yielded: documents (maybe several) or a skip reason."""

    documents: List[str] = field(default_factory=list)
    skip_reason: Optional[str] = None
    replaced_bytes: int = 0
    encoding: str = "utf-8"
    input_bytes: int = 0


def read_source(source: DocumentSource, separator: Optional[str]) -> ReadResult:
    """Read one metadata entry. Directories, FIFOs and binary files are skipped, not fatal."""
    try:
        info = os.stat(source.path)
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be accessed ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        return ReadResult(skip_reason=SKIP_NOT_REGULAR)
    try:
        with open(source.path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be read ({exc.strerror})") from None
    decoded = decode_document_bytes(data)
    if decoded is None:
        return ReadResult(skip_reason=SKIP_BINARY, input_bytes=len(data))
    return ReadResult(
        documents=split_documents(decoded.text, separator),
        replaced_bytes=decoded.replaced_bytes,
        encoding=decoded.encoding,
        input_bytes=len(data),
    )
