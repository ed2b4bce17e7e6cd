"""Read stage: a document source -> decoded document texts, with every oddity counted.

Pure core (:func:`decode_document_bytes`, :func:`split_documents`, :func:`parse_jsonl`) plus
a thin file reader. Compressed files (gzip, bzip2, xz; zstd when the ``zstandard`` module is
importable) are recognised by their magic bytes (or a compression extension) and decompressed
as a stream before decoding. Nothing here raises for bad *content*: undecodable bytes are
replaced and counted; binary files, corrupt compressed files, directories, FIFOs and unusable
JSON lines are skipped with a reason. Only I/O failures raise.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import json
import lzma
import os
import re
import stat
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

from .errors import MetadataError
from .metadata import DocumentSource

# Skip reasons for whole documents (keys of data_params.json "documents.skipped").
SKIP_NOT_REGULAR = "not_a_regular_file"
SKIP_BINARY = "binary"
SKIP_EMPTY = "empty"
SKIP_NO_SENTENCE = "no_usable_sentence"
SKIP_CORRUPT_COMPRESSED = "corrupt_compressed"  # truncated or damaged gzip/bzip2/xz/zstd data
SKIP_UNSUPPORTED_COMPRESSION = "unsupported_compression"  # zstd without the zstandard module
SKIP_BAD_JSON = "bad_json"  # a JSON Lines line that is not valid JSON
SKIP_MISSING_TEXT_KEY = "missing_text_key"  # valid JSON, but no string under --text_key

INPUT_FORMATS = ("text", "jsonl")

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


# --- compressed inputs ---------------------------------------------------------------------

try:  # optional: zstd input is read only when the zstandard module happens to be installed
    import zstandard as _zstandard
except ImportError:  # pragma: no cover - depends on the environment
    _zstandard = None

COMPRESSION_EXTENSIONS = {".gz": "gz", ".bz2": "bz2", ".xz": "xz", ".zst": "zst"}
_MAGIC_BYTES = 16
_BZ2_BLOCK_MAGICS = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")  # first block / empty stream
_DECOMPRESS_CHUNK = 1 << 20


def sniff_compression(head: bytes, path: str = "") -> Optional[str]:
    """``"gz"``, ``"bz2"``, ``"xz"``, ``"zst"`` or None (plain) for a file starting with ``head``.

    Magic bytes decide; a non-empty file whose name ends in a compression extension but whose
    bytes carry no known magic is reported by its extension (and then fails as corrupt).
    """
    if head.startswith(b"\x1f\x8b"):
        return "gz"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zst"
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and len(head) >= 10 and head[4:10] in _BZ2_BLOCK_MAGICS:
        return "bz2"
    if head:
        return COMPRESSION_EXTENSIONS.get(os.path.splitext(path)[1].lower())
    return None


class _SourceReadError(Exception):
    """An OSError of the underlying file (I/O: fatal), kept apart from bad compressed data (content: counted)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _GuardedFile:
    """The raw file handed to a decompressor: counts bytes read and tags I/O errors as such."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._handle.read(size)
        except OSError as exc:
            raise _SourceReadError(exc) from exc
        self.bytes_read += len(data)
        return data


_DECOMPRESSION_ERRORS: Tuple[type, ...] = (EOFError, OSError, ValueError, zlib.error, lzma.LZMAError)
if _zstandard is not None:  # pragma: no cover - depends on the environment
    _DECOMPRESSION_ERRORS += (_zstandard.ZstdError,)


def _open_decompressor(raw: _GuardedFile, compression: str):
    if compression == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[arg-type]
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[arg-type]
    return lzma.LZMAFile(raw, mode="rb")  # type: ignore[arg-type]


def _zstd_chunks(raw) -> Iterator[bytes]:  # pragma: no cover - depends on the environment
    """zstd frames one after another; a frame cut short is an error (zstandard's stream reader
    would silently return what it had)."""
    dctx = _zstandard.ZstdDecompressor()
    obj = dctx.decompressobj()
    in_frame = False
    while True:
        data = raw.read(_DECOMPRESS_CHUNK)
        if not data:
            break
        while data:
            in_frame = True
            yield obj.decompress(data)
            if obj.eof:
                data, obj, in_frame = obj.unused_data, dctx.decompressobj(), False
            else:
                data = b""
    if in_frame:
        raise EOFError("zstd data ended inside a frame")


def decompress_stream(raw, compression: str) -> bytes:
    """All decompressed bytes of ``raw`` (a binary file), read chunk by chunk; multi-member /
    multi-frame streams are read to the end. Raises one of the decompression errors on bad data."""
    if compression == "zst":
        return b"".join(_zstd_chunks(raw))
    chunks: List[bytes] = []
    with _open_decompressor(raw, compression) as stream:
        while True:
            chunk = stream.read(_DECOMPRESS_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


# --- JSON Lines -----------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_jsonl(text: str, text_key: str) -> Tuple[List[str], Counter, int]:
    """One document per JSON Lines line: ``(documents, skipped by reason, replaced surrogates)``.

    Blank lines are ignored (not documents). A line that is not JSON is ``bad_json``; valid JSON
    without a string under ``text_key`` (not an object, key absent, null, number, ...) is
    ``missing_text_key``. Lone surrogates from ``\\ud800``-style escapes become U+FFFD (counted).
    Lines are split on ``\\n`` only: JSON strings may hold a raw U+2028.
    """
    documents: List[str] = []
    skipped: Counter = Counter()
    replaced = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            skipped[SKIP_BAD_JSON] += 1
            continue
        value = obj.get(text_key) if isinstance(obj, dict) else None
        if not isinstance(value, str):
            skipped[SKIP_MISSING_TEXT_KEY] += 1
            continue
        value, n = _LONE_SURROGATE.subn("\ufffd", value)
        replaced += n
        documents.append(value)
    return documents, skipped, replaced


# --- reading one metadata entry -------------------------------------------------------------


@dataclass
class ReadResult:
    """What one metadata entry yielded: documents (maybe several) or a skip reason.

    ``skip_reason`` skips the whole entry (one document read and skipped); ``skipped`` counts
    documents of the entry skipped one by one (JSON Lines lines), each a document read.
    """

    documents: List[str] = field(default_factory=list)
    skip_reason: Optional[str] = None
    replaced_bytes: int = 0
    encoding: str = "utf-8"
    input_bytes: int = 0
    skipped: Counter = field(default_factory=Counter)
    compression: Optional[str] = None  # "gz", "bz2", "xz", "zst" when decompressed, else None

    @property
    def documents_read(self) -> int:
        return 1 if self.skip_reason else len(self.documents) + sum(self.skipped.values())


def read_source(
    source: DocumentSource, separator: Optional[str], input_format: str = "text", text_key: str = "text"
) -> ReadResult:
    """Read one metadata entry (``input_format`` ``"text"`` or ``"jsonl"``), decompressing it if needed.

    Directories, FIFOs, binary files and corrupt compressed files are skipped, not fatal.
    """
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    try:
        info = os.stat(source.path)
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be accessed ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        return ReadResult(skip_reason=SKIP_NOT_REGULAR)
    compression = None
    try:
        with open(source.path, "rb") as handle:
            head = handle.read(_MAGIC_BYTES)
            compression = sniff_compression(head, source.path)
            if compression is None:
                data = head + handle.read()
                input_bytes = len(data)
            elif compression == "zst" and _zstandard is None:
                return ReadResult(skip_reason=SKIP_UNSUPPORTED_COMPRESSION, input_bytes=info.st_size)
            else:
                handle.seek(0)
                raw = _GuardedFile(handle)
                try:
                    data = decompress_stream(raw, compression)
                except _DECOMPRESSION_ERRORS:
                    return ReadResult(skip_reason=SKIP_CORRUPT_COMPRESSED, input_bytes=raw.bytes_read)
                input_bytes = raw.bytes_read
    except _SourceReadError as exc:
        raise MetadataError(
            f"{source.where()}: document {source.path} cannot be read ({exc.error.strerror or exc.error})"
        ) from None
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be read ({exc.strerror})") from None
    decoded = decode_document_bytes(data)
    if decoded is None:
        return ReadResult(skip_reason=SKIP_BINARY, input_bytes=input_bytes, compression=compression)
    if input_format == "jsonl":
        documents, skipped, replaced = parse_jsonl(decoded.text, text_key)
        return ReadResult(
            documents=documents,
            replaced_bytes=decoded.replaced_bytes + replaced,
            encoding=decoded.encoding,
            input_bytes=input_bytes,
            skipped=skipped,
            compression=compression,
        )
    return ReadResult(
        documents=split_documents(decoded.text, separator),
        replaced_bytes=decoded.replaced_bytes,
        encoding=decoded.encoding,
        input_bytes=input_bytes,
        compression=compression,
    )


# --- a group's documents --------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """How listed files become documents (from the config: ``--input_format``, ``--text_key``,
    ``--multiple_docs_in_single_file`` + ``--multiple_docs_separator``)."""

    input_format: str = "text"
    text_key: str = "text"
    separator: Optional[str] = None  # split a file into documents on this, or None: one document per file


def read_documents(sources: Sequence[DocumentSource], options: ReadOptions, stats: Counter) -> List[str]:
    """The documents of a group, in metadata order; every file and skip is counted in ``stats``."""
    documents: List[str] = []
    for source in sources:
        result = read_source(source, options.separator, options.input_format, options.text_key)
        stats["input_bytes"] += result.input_bytes
        stats["replaced_bytes"] += result.replaced_bytes
        if result.encoding != "utf-8":
            stats[f"decoded_as.{result.encoding}"] += 1
        if result.compression:
            stats[f"decompressed.{result.compression}"] += 1  # files decompressed, by format
        if result.skip_reason:
            stats["documents.read"] += 1
            stats[f"skipped.{result.skip_reason}"] += 1
            continue
        for reason, count in result.skipped.items():  # JSON Lines lines skipped one by one
            stats["documents.read"] += count
            stats[f"skipped.{reason}"] += count
        stats["documents.read"] += len(result.documents)
        documents.extend(result.documents)
    return documents


def untokenized_reason(text: str) -> str:
    """Why a document that yielded no token is skipped: nothing but whitespace, or text whose
    every character was cleaned away (control, zero-width, ...)."""
    return SKIP_EMPTY if not text.strip() else SKIP_NO_SENTENCE
