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
from .metadata import DocumentSource, WorkItem

# Skip reasons for whole documents (keys of data_params.json "documents.skipped").
SKIP_NOT_REGULAR = "not_a_regular_file"
SKIP_BINARY = "binary"
SKIP_EMPTY = "empty"
SKIP_NO_SENTENCE = "no_usable_sentence"
SKIP_CORRUPT_COMPRESSED = "corrupt_compressed"  # truncated or damaged gzip/bzip2/xz/zstd data
SKIP_UNSUPPORTED_COMPRESSION = "unsupported_compression"  # zstd without the zstandard module
SKIP_BAD_JSON = "bad_json"  # a JSON Lines line that is not valid JSON
SKIP_MISSING_TEXT_KEY = "missing_text_key"  # valid JSON, but no string under --text_key

INPUT_FORMATS = ("text", "jsonl", "wikiextractor", "bert")

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


# --- a group's documents --------------------------------------------------------------------


DEFAULT_MAX_DOCUMENT_CHARS = 1 << 20  # --max_document_chars: longer documents are cut into pieces
MAX_JSON_LINE_CHARS = 64 << 20  # a JSON Lines line longer than this is skipped as line_too_long
SKIP_LINE_TOO_LONG = "line_too_long"
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadOptions:
    """How listed files become documents (from the config: ``--input_format``, ``--text_key``,
    ``--multiple_docs_in_single_file`` + ``--multiple_docs_separator``, ``--max_document_chars``)."""

    input_format: str = "text"
    text_key: str = "text"
    separator: Optional[str] = None  # split a file into documents on this, or None: one document per file
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    encoding: str = "utf-8"  # --input_encoding: files without a UTF-16/32 byte-order mark are in this

    @property
    def line_oriented(self) -> bool:
        """Documents never span a newline (or, one document per file: may be cut at newlines), so
        a large plain file can be read in byte ranges snapped to line starts. (WikiExtractor's
        ``<doc>`` blocks span lines: its files, ~1 MB each, are streamed whole.)"""
        return self.input_format == "jsonl" or (self.input_format == "text" and self.separator in (None, "\n"))


# --- cutting long documents ------------------------------------------------------------------

_LAST_WHITESPACE = re.compile(r"\s(?=\S*\Z)")


def cut_point(text: str, limit: int) -> int:
    """Where to cut ``text`` (longer than ``limit``) so the first piece is at most ``limit``
    characters: after the last newline in its second half, else after the last whitespace there,
    else at ``limit`` exactly (a run of ``limit`` characters without a space)."""
    window = text[:limit]
    newline = window.rfind("\n", limit // 2)
    if newline >= 0:
        return newline + 1
    match = _LAST_WHITESPACE.search(window, limit // 2)
    return match.end() if match else limit


class _Pieces:
    """Emits a document in pieces of at most ``limit`` characters as its text streams in, and
    counts the cuts (``documents_split.*``): a document longer than the limit is never held whole."""

    def __init__(self, limit: int, stats: Counter) -> None:
        self.limit = limit
        self.stats = stats
        self.cut = False

    def take(self, buffer: str, final: bool) -> Tuple[List[str], str]:
        pieces: List[str] = []
        while len(buffer) > self.limit:
            at = cut_point(buffer, self.limit)
            pieces.append(buffer[:at])
            buffer = buffer[at:]
            if not self.cut:
                self.cut = True
                self.stats["documents_split.documents"] += 1
            self.stats["documents_split.extra_pieces"] += 1
        if final:
            pieces.append(buffer)
            buffer = ""
            self.cut = False
        return pieces, buffer


# --- consumers: decoded text in, documents out -----------------------------------------------


class _TextConsumer:
    """One document per file (``separator`` None) or the pieces between separators; the
    streaming equivalent of ``text.split(separator)`` (a carry holds the unfinished document)."""

    def __init__(self, options: ReadOptions, stats: Counter) -> None:
        self.separator = options.separator
        self.pieces = _Pieces(options.max_document_chars, stats)
        self.buffer = ""

    def feed(self, text: str, final: bool = False) -> List[str]:
        self.buffer += text
        out: List[str] = []
        if self.separator is not None:
            parts = self.buffer.split(self.separator)
            self.buffer = parts.pop()
            for part in parts:
                out.extend(self.pieces.take(part, True)[0])
        pieces, self.buffer = self.pieces.take(self.buffer, final)
        return out + pieces


class _JsonlConsumer:
    """One document per JSON Lines line (see :func:`parse_jsonl`), streamed: lines are split on
    ``\n`` only; a line over ``MAX_JSON_LINE_CHARS`` is skipped (``line_too_long``) without being held."""

    def __init__(self, options: ReadOptions, stats: Counter) -> None:
        self.text_key = options.text_key
        self.stats = stats
        self.pieces = _Pieces(options.max_document_chars, stats)
        self.buffer = ""
        self.dropping = False  # inside a line that is too long: skip to its end

    def feed(self, text: str, final: bool = False) -> List[str]:
        if self.dropping:  # the rest of a line already skipped as too long
            newline = text.find("\n")
            if newline < 0:
                self.dropping = not final
                return []
            text, self.dropping = text[newline + 1 :], False
        lines = (self.buffer + text).split("\n")
        self.buffer = "" if final else lines.pop()
        out: List[str] = []
        for line in lines:
            if len(line) > MAX_JSON_LINE_CHARS:
                self._skip(SKIP_LINE_TOO_LONG)
                continue
            out.extend(self._parse(line))
        if len(self.buffer) > MAX_JSON_LINE_CHARS:
            self._skip(SKIP_LINE_TOO_LONG)
            self.buffer, self.dropping = "", not final
        return out

    def _skip(self, reason: str) -> None:
        self.stats["documents.read"] += 1
        self.stats[f"skipped.{reason}"] += 1

    def _parse(self, line: str) -> List[str]:
        if not line.strip():
            return []
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            self._skip(SKIP_BAD_JSON)
            return []
        value = obj.get(self.text_key) if isinstance(obj, dict) else None
        if not isinstance(value, str):
            self._skip(SKIP_MISSING_TEXT_KEY)
            return []
        value, n = _LONE_SURROGATE.subn("\ufffd", value)
        self.stats["replaced_bytes"] += n
        return self.pieces.take(value, True)[0]


_DOC_OPEN = re.compile(r'<doc\b[^>]*>\s*$')
_DOC_TITLE = re.compile(r'\btitle="([^"]*)"')


class _WikiExtractorConsumer:
    """WikiExtractor's output (``<doc id=".." url=".." title="..">`` ... ``</doc>``, the first step
    of most BERT Wikipedia recipes): one document per block. WikiExtractor repeats the title as the
    block's first line; that line is dropped when it equals the ``title`` attribute (as NVIDIA's
    BERT recipe drops it), so a title is not a sentence of its own. Text outside any block is not a
    document: its non-blank lines are counted (``wikiextractor_lines_outside_doc``); a block left
    open at the end of a file is a document still."""

    def __init__(self, options: ReadOptions, stats: Counter) -> None:
        self.stats = stats
        self.pieces = _Pieces(options.max_document_chars, stats)
        self.buffer = ""  # an unfinished line
        self.parts: List[str] = []  # the open block's lines so far (bounded: emitted in pieces)
        self.length = 0
        self.limit = options.max_document_chars
        self.title: Optional[str] = None
        self.open = False
        self.first_line = False

    def feed(self, text: str, final: bool = False) -> List[str]:
        lines = (self.buffer + text).split("\n")
        self.buffer = "" if final else lines.pop()
        out: List[str] = []
        for line in lines:
            self._line(line, out)
        if len(self.buffer) > self.limit:  # a line longer than a piece: never held whole
            if self.open:
                self.first_line = False
                self._append(self.buffer, out)
            else:
                self.stats["wikiextractor_lines_outside_doc"] += 1
            self.buffer = ""
        if final and self.open:
            self._close(out)
        return out

    def _close(self, out: List[str]) -> None:
        out.extend(self.pieces.take("".join(self.parts), True)[0])
        self.parts, self.length, self.open = [], 0, False

    def _append(self, line: str, out: List[str]) -> None:
        self.parts.append(line)
        self.length += len(line)
        if self.length > self.limit:  # emit the full pieces, keep the rest (joined once per piece, not per line)
            pieces, rest = self.pieces.take("".join(self.parts), False)
            out.extend(pieces)
            self.parts, self.length = [rest], len(rest)

    def _line(self, line: str, out: List[str]) -> None:
        bare = line.strip()
        if _DOC_OPEN.match(bare):
            if self.open:  # a block never closed: it ends where the next begins
                self._close(out)
            title = _DOC_TITLE.search(bare)
            self.title = title.group(1).strip() if title else None
            self.open, self.first_line = True, True
        elif bare == "</doc>" and self.open:
            self._close(out)
        elif self.open:
            if self.first_line and bare:
                self.first_line = False
                if self.title is not None and bare == _unescape(self.title):
                    return
            self._append(line + "\n", out)
        elif bare:
            self.stats["wikiextractor_lines_outside_doc"] += 1


def _unescape(title: str) -> str:
    """The title attribute as text (WikiExtractor escapes &, <, > and quotes in it)."""
    import html

    return html.unescape(title)


# Characters that str.splitlines() breaks a line at, besides "\n", that BERT's tokenizer drops
# (control characters) or reads as a space ("\r"): removed inside a line of the "bert" format, so
# that a line stays one sentence with the same tokens (U+2028/U+2029 are kept: BERT keeps them).
_IN_LINE_BREAKS = {ord("\r"): " ", **{c: None for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85)}}


class _BertConsumer:
    """google-research/bert's corpus layout (``--input_format bert``): one sentence per line,
    documents separated by blank lines, a line being blank when ``line.strip()`` is empty (so
    whitespace-only and CRLF blank lines separate documents, as in BERT). Runs of blank lines
    make no empty documents. A document ends at the end of its file (BERT lets it run on into
    the next file). Streamed: only the current line and document are held, and a document longer
    than ``max_document_chars`` is emitted in pieces cut at line ends.

    Each document is its stripped lines joined by ``\n``, so that the sentence stage (which
    takes every line as a sentence in this format) sees BERT's sentences."""

    def __init__(self, options: ReadOptions, stats: Counter) -> None:
        self.pieces = _Pieces(options.max_document_chars, stats)
        self.limit = options.max_document_chars
        self.line = ""  # the unfinished last line
        self.parts: List[str] = []  # the lines of the current document so far (joined once per piece:
        self.length = 0  # a book-length document is not copied once per line)
        self.continuing = False  # the start of the unfinished line was already taken (a very long line)

    @property
    def open(self) -> bool:
        """Inside a document (its last complete line was not blank)."""
        return bool(self.parts) or self.pieces.cut

    def feed(self, text: str, final: bool = False) -> List[str]:
        lines = (self.line + text).split("\n")
        self.line = "" if final else lines.pop()
        out: List[str] = []
        for line in lines:
            if self.continuing:  # the end of a line whose start was already taken: never a blank line
                self.continuing = False
                self._add(line.rstrip().translate(_IN_LINE_BREAKS) + "\n", out)
                continue
            line = line.strip()
            if line:
                self._add(line.translate(_IN_LINE_BREAKS) + "\n", out)
            elif self.parts or self.pieces.cut:
                out.extend(self._end_document())
        if len(self.line) > self.limit:  # a line longer than a piece (no newline for megabytes): never held whole
            start = self.line if self.continuing else self.line.lstrip()
            self.line, self.continuing = "", True
            self._add(start.translate(_IN_LINE_BREAKS), out)
        if final and (self.parts or self.pieces.cut):
            out.extend(self._end_document())
        return out

    def _add(self, text: str, out: List[str]) -> None:
        self.parts.append(text)
        self.length += len(text)
        if self.length > self.limit:
            pieces, rest = self.pieces.take("".join(self.parts), False)
            out.extend(pieces)
            self.parts, self.length = ([rest], len(rest)) if rest else ([], 0)

    def _end_document(self) -> List[str]:
        pieces = [piece for piece in self.pieces.take("".join(self.parts), True)[0] if piece]
        self.parts, self.length, self.continuing = [], 0, False
        return pieces


def _consumer(options: ReadOptions, stats: Counter):
    if options.input_format == "jsonl":
        return _JsonlConsumer(options, stats)
    if options.input_format == "wikiextractor":
        return _WikiExtractorConsumer(options, stats)
    if options.input_format == "bert":
        return _BertConsumer(options, stats)
    return _TextConsumer(options, stats)


# --- the streaming reader --------------------------------------------------------------------


def _encoding_of(head: bytes, input_format: str, declared: str = "utf-8") -> Optional[str]:
    """The decoder for a stream starting with ``head``, or None when it looks binary: UTF-32 or
    UTF-16 by BOM, else the declared encoding (UTF-8: a BOM dropped) unless a NUL byte is in the
    first 8 KiB (for JSON Lines: in the first line only, so one bad line is skipped alone)."""
    if head.startswith(codecs.BOM_UTF32_LE) or head.startswith(codecs.BOM_UTF32_BE):
        return "utf-32"
    if head.startswith(codecs.BOM_UTF16_LE) or head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16"
    sniff = head[:_BINARY_SNIFF_BYTES]
    wide = _wide_encoding(declared, sniff)
    if wide is not None:  # --input_encoding utf-16/utf-32 without a BOM: NUL bytes are text there
        return wide
    if input_format == "jsonl":
        newline = sniff.find(b"\n")
        sniff = sniff if newline < 0 else sniff[:newline]
    if b"\x00" in sniff:
        return None
    return "utf-8-sig" if codecs.lookup(declared).name == "utf-8" else declared


def _wide_encoding(declared: str, sniff: bytes) -> Optional[str]:
    """For a declared UTF-16/UTF-32 file without a byte-order mark, the codec with its byte
    order: the declared one when it names it (``utf-16-le``), else guessed from where the NUL
    bytes of ASCII-range characters fall (Python's own guess would be this machine's order,
    and the file's order does not depend on the machine that reads it). None for other encodings."""
    name = codecs.lookup(declared).name
    if not name.startswith(("utf-16", "utf-32")):
        return None
    if name.endswith(("-le", "-be")):
        return name
    unit = 2 if name.startswith("utf-16") else 4
    usable = len(sniff) - len(sniff) % unit
    nul_first = sum(1 for i in range(0, usable, unit) if sniff[i] == 0)  # big-endian ASCII: 00 41
    nul_last = sum(1 for i in range(unit - 1, usable, unit) if sniff[i] == 0)  # little-endian: 41 00
    return f"{name}-be" if nul_first > nul_last else f"{name}-le"


class _Decoder:
    """Incremental decoding with U+FFFD replacement; replaced bytes are counted in ``stats``."""

    def __init__(self, encoding: str, stats: Counter) -> None:
        self.decoder = codecs.getincrementaldecoder(encoding)(errors="bert_data_count_replace")
        self.stats = stats

    def __call__(self, data: bytes, final: bool = False) -> str:
        _replaced_in_last_decode[0] = 0
        text = self.decoder.decode(data, final)
        self.stats["replaced_bytes"] += _replaced_in_last_decode[0]
        return text


def _read_error(source: DocumentSource, exc: OSError) -> MetadataError:
    return MetadataError(f"{source.where()}: document {source.path} cannot be read ({exc.strerror or exc})")


def _skip_file(stats: Counter, reason: str) -> None:
    stats["documents.read"] += 1
    stats[f"skipped.{reason}"] += 1


def iter_documents(items: Sequence[WorkItem], options: ReadOptions, stats: Counter) -> Iterator[str]:
    """The documents of a run of work items, in order, streamed: a file is never read whole and
    a document longer than ``max_document_chars`` is emitted in pieces. Every document and skip
    is counted in ``stats`` (``documents.read``, ``skipped.<reason>``, ``input_bytes``, ...)."""
    for item in items:
        replaced = stats["replaced_bytes"]
        for document in _iter_item(item, options, stats):
            stats["documents.read"] += 1
            yield document
        if stats["replaced_bytes"] > replaced:  # which files were not clean text (the run warns with the worst)
            stats[f"replaced_in.{item.source.path}"] += stats["replaced_bytes"] - replaced


def _iter_item(item: WorkItem, options: ReadOptions, stats: Counter) -> Iterator[str]:
    source = item.source
    try:
        info = os.stat(source.path)
    except OSError as exc:
        raise MetadataError(f"{source.where()}: document {source.path} cannot be accessed ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        if item.first:
            _skip_file(stats, SKIP_NOT_REGULAR)
        return
    try:
        with open(source.path, "rb") as handle:
            if item.end is not None and options.input_format == "bert":
                yield from _iter_bert_range(handle, item, options, stats)
            elif item.end is not None:
                yield from _iter_range(handle, item, options, stats)
            else:
                yield from _iter_whole(handle, source, options, stats)
    except _SourceReadError as exc:
        raise _read_error(source, exc.error) from None
    except OSError as exc:
        raise _read_error(source, exc) from None


def _iter_whole(handle, source: DocumentSource, options: ReadOptions, stats: Counter) -> Iterator[str]:
    """A whole file, decompressed on the fly when its magic bytes say so."""
    head = handle.read(_MAGIC_BYTES)
    compression = sniff_compression(head, source.path)
    handle.seek(0)
    raw = _GuardedFile(handle)
    if compression == "zst" and _zstandard is None:
        stats["input_bytes"] += os.fstat(handle.fileno()).st_size
        _skip_file(stats, SKIP_UNSUPPORTED_COMPRESSION)
        return
    chunks = _raw_chunks(raw) if compression is None else _decompressed_chunks(raw, compression)
    consumer = _consumer(options, stats)
    size = os.fstat(handle.fileno()).st_size
    try:
        first = _first_bytes(chunks)
        encoding = _encoding_of(first, options.input_format, options.encoding)
        if encoding is None:  # binary: decided from the first 8 KiB, the rest is never read
            stats["input_bytes"] += size - raw.bytes_read  # (the finally adds what was read)
            if compression:
                stats[f"decompressed.{compression}"] += 1
            _skip_file(stats, SKIP_BINARY)
            return
        if encoding != "utf-8-sig":
            stats[f"decoded_as.{encoding}"] += 1
        decode = _Decoder(encoding, stats)
        yield from consumer.feed(decode(first))
        for chunk in chunks:
            yield from consumer.feed(decode(chunk))
        yield from consumer.feed(decode(b"", final=True), final=True)
        if compression:
            stats[f"decompressed.{compression}"] += 1  # files decompressed, by format
    except _DECOMPRESSION_ERRORS:
        _skip_file(stats, SKIP_CORRUPT_COMPRESSED)  # documents before the damage were kept and counted
    finally:
        stats["input_bytes"] += raw.bytes_read


def _raw_chunks(raw) -> Iterator[bytes]:
    while True:
        chunk = raw.read(_READ_CHUNK)
        if not chunk:
            return
        yield chunk


def _decompressed_chunks(raw, compression: str) -> Iterator[bytes]:
    if compression == "zst":
        yield from _zstd_chunks(raw)
        return
    with _open_decompressor(raw, compression) as stream:
        while True:
            chunk = stream.read(_READ_CHUNK)
            if not chunk:
                return
            yield chunk


def _first_bytes(chunks: Iterator[bytes]) -> bytes:
    """At least the first 8 KiB of the stream (or all of a shorter one): BOM and binary sniffing."""
    first = b""
    for chunk in chunks:
        first += chunk
        if len(first) >= _BINARY_SNIFF_BYTES:
            break
    return first


def _iter_range(handle, item: WorkItem, options: ReadOptions, stats: Counter) -> Iterator[str]:
    """The lines that start in ``[item.start, item.end)`` of a plain UTF-8 file (Hadoop's rule:
    a range skips the partial line it starts in, and reads past its end to finish its last
    line), as the documents they hold. Only the first range of a file counts per-file facts."""
    head = os.pread(handle.fileno(), _BINARY_SNIFF_BYTES, 0)
    encoding = _encoding_of(head, options.input_format, options.encoding)
    if encoding is None or encoding.startswith(("utf-16", "utf-32")):
        if item.first:  # planning never ranges compressed or UTF-16/32 files; binary ones are skipped whole
            stats["input_bytes"] += os.fstat(handle.fileno()).st_size
            _skip_file(stats, SKIP_BINARY)
        return
    position = item.start
    handle.seek(position)
    if position > 0 and os.pread(handle.fileno(), 1, position - 1) != b"\n":
        position += _skip_line(handle)
    if item.first and encoding != "utf-8-sig":
        stats[f"decoded_as.{encoding}"] += 1
    decode = _Decoder(encoding if item.first or encoding != "utf-8-sig" else "utf-8", stats)
    consumer = _consumer(options, stats)
    if options.input_format == "text" and options.separator is None:  # one document per file, cut by ranges
        consumer.pieces.cut = True  # counted here, once per file, not again by the piece cutter
        stats["documents_split.documents" if item.first else "documents_split.extra_pieces"] += 1
    owned = False
    while position < item.end:
        line = handle.readline(_READ_CHUNK)
        if not line:
            break
        owned = True
        position += len(line)
        stats["input_bytes"] += len(line)
        yield from consumer.feed(decode(line))
        while not line.endswith(b"\n"):  # a line longer than a chunk: stream the rest of it
            line = handle.readline(_READ_CHUNK)
            if not line:
                break
            position += len(line)
            stats["input_bytes"] += len(line)
            yield from consumer.feed(decode(line))
    at_end = position >= os.fstat(handle.fileno()).st_size
    if options.separator is not None and not at_end:
        decode(b"", final=True)  # the last owned line ended at a separator: what follows is the next range's
    elif owned or item.first:
        yield from consumer.feed(decode(b"", final=True), final=True)
    elif options.input_format == "text" and options.separator is None:
        stats["documents_split.extra_pieces"] -= 1  # this range starts inside a line that runs past its end


def _iter_bert_range(handle, item: WorkItem, options: ReadOptions, stats: Counter) -> Iterator[str]:
    """The documents of ``--input_format bert`` whose first line starts in ``[item.start, item.end)``
    of a plain file. A range snaps to its first line start (Hadoop's rule); when the line before
    it is not blank, a document begun in an earlier range is still running: its lines are skipped
    up to the next blank line (that range reads them, on past its end, to finish the document).
    Each line's bytes count in ``input_bytes`` of the range it starts in."""
    fd = handle.fileno()
    encoding = _encoding_of(os.pread(fd, _BINARY_SNIFF_BYTES, 0), "text", options.encoding)
    size = os.fstat(fd).st_size
    if encoding is None or encoding.startswith(("utf-16", "utf-32")):
        if item.first:  # planning never ranges UTF-16/32 files; binary ones are skipped whole
            stats["input_bytes"] += size
            _skip_file(stats, SKIP_BINARY)
        return
    if item.first and encoding != "utf-8-sig":
        stats[f"decoded_as.{encoding}"] += 1
    plain = "utf-8" if encoding == "utf-8-sig" else encoding
    position = item.start
    handle.seek(position)
    if position > 0 and os.pread(fd, 1, position - 1) != b"\n":
        position += _skip_line(handle)  # the line started in an earlier range
    if 0 < position < item.end and not _previous_line_blank(fd, position, plain):
        position = _skip_document_rest(handle, position, item.end, plain, stats)
    decode = _Decoder(encoding if item.first else plain, stats)
    consumer = _BertConsumer(options, stats)
    while position < size and (position < item.end or consumer.open):
        owned = position < item.end
        while True:  # one line, in chunks when it is long
            chunk = handle.readline(_READ_CHUNK)
            if not chunk:
                break
            position += len(chunk)
            stats["input_bytes"] += len(chunk) if owned else 0
            yield from consumer.feed(decode(chunk))
            if chunk.endswith(b"\n"):
                break
    yield from consumer.feed(decode(b"", final=True), final=True)


def _skip_document_rest(handle, position: int, end: int, encoding: str, stats: Counter) -> int:
    """Skip the lines of a document begun before ``position`` through the next blank line (or
    until a line starts at ``end``: then the range owns nothing); returns the new position."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")  # its replacements are counted where read
    while position < end:
        blank = True
        while True:
            chunk = handle.readline(_READ_CHUNK)
            if not chunk:
                return position
            position += len(chunk)
            stats["input_bytes"] += len(chunk)
            blank = blank and not decoder.decode(chunk).strip()
            if chunk.endswith(b"\n"):
                break
        if blank:
            break
    return position


_BACK_CHUNK = 4096  # bytes read at a time when looking at the line before a range's start
_UTF8_CONTINUATION = range(0x80, 0xC0)


def _previous_line_blank(fd: int, position: int, encoding: str) -> bool:
    """Whether the line that ends just before ``position`` (a line start) is blank by
    ``line.strip()``: read backwards a chunk at a time, stopping at the first character that is
    not whitespace (almost always in the first chunk) or at the line's start. A UTF-8 character
    cut by a chunk's start is left whole to the next (earlier) chunk."""
    end = position - 1  # the "\n" ending that line
    utf8 = codecs.lookup(encoding).name == "utf-8"
    while end > 0:
        start = max(0, end - max(_BACK_CHUNK, 4))  # more than a cut character's 3 bytes: progress
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        piece = chunk[newline + 1 :]
        if newline < 0 and start > 0 and utf8:
            cut = 0
            while cut < min(3, len(piece)) and piece[cut] in _UTF8_CONTINUATION:
                cut += 1
            piece, start = piece[cut:], start + cut
        if start == 0 and newline < 0 and utf8 and piece.startswith(codecs.BOM_UTF8):
            piece = piece[len(codecs.BOM_UTF8) :]  # the reader drops a UTF-8 BOM
        if piece.decode(encoding, "replace").strip():
            return False
        if newline >= 0:
            return True
        end = start
    return True


def _skip_line(handle) -> int:
    """Read past the end of the current line; returns the bytes skipped."""
    skipped = 0
    while True:
        line = handle.readline(_READ_CHUNK)
        skipped += len(line)
        if not line or line.endswith(b"\n"):
            return skipped


def can_range(source: DocumentSource, options: ReadOptions) -> bool:
    """True when a large file may be read in byte ranges by several workers: a local, plain
    (uncompressed), UTF-8 file whose documents are lines or may be cut at lines, or are blank-line
    separated (``bert``: :func:`_iter_bert_range`)."""
    if not (options.line_oriented or options.input_format == "bert") or "://" in source.path:
        return False
    try:
        with open(source.path, "rb") as handle:
            head = handle.read(_MAGIC_BYTES)
    except OSError:
        return False  # the reader reports it
    if sniff_compression(head, source.path) is not None:
        return False
    encoding = _encoding_of(head, "text", options.encoding)
    return encoding is not None and _ascii_compatible(encoding)


def _ascii_compatible(encoding: str) -> bool:
    """ASCII bytes mean ASCII characters (so a newline is the byte 0x0a and never half of another
    character, and a range snapped to a line start decodes correctly): UTF-8, Latin-1, cp1252, ..."""
    if encoding == "utf-8-sig":
        return True
    try:
        return "".join(map(chr, range(128))).encode(encoding) == bytes(range(128))
    except (UnicodeError, LookupError):
        return False


def read_source(
    source: DocumentSource, separator: Optional[str], input_format: str = "text", text_key: str = "text"
) -> ReadResult:
    """Every document of one metadata entry at once (tools that want a file's documents as a
    list). A damaged compressed file yields no document at all here (the streaming reader keeps
    what came before the damage)."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    stats: Counter = Counter()
    options = ReadOptions(input_format=input_format, text_key=text_key, separator=separator)
    documents = list(iter_documents([WorkItem(source)], options, stats))
    skipped = Counter({k.split(".", 1)[1]: v for k, v in stats.items() if k.startswith("skipped.") and v})
    encoding = next((k.split(".", 1)[1] for k, v in stats.items() if k.startswith("decoded_as.") and v), "utf-8")
    compression = next((k.split(".", 1)[1] for k, v in stats.items() if k.startswith("decompressed.") and v), None)
    result = ReadResult(
        documents=documents, replaced_bytes=stats["replaced_bytes"], encoding=encoding,
        input_bytes=stats["input_bytes"], compression=compression,
    )
    whole_file = [r for r in (SKIP_NOT_REGULAR, SKIP_BINARY, SKIP_CORRUPT_COMPRESSED, SKIP_UNSUPPORTED_COMPRESSION) if skipped.get(r)]
    if whole_file:
        return ReadResult(skip_reason=whole_file[0], input_bytes=stats["input_bytes"], compression=compression)
    result.skipped = skipped
    return result


def read_documents(sources: Sequence[DocumentSource], options: ReadOptions, stats: Counter) -> List[str]:
    """The documents of whole metadata entries, as a list (small inputs and tests)."""
    return list(iter_documents([WorkItem(s) for s in sources], options, stats))


def untokenized_reason(text: str) -> str:
    """Why a document that yielded no token is skipped: nothing but whitespace, or text whose
    every character was cleaned away (control, zero-width, ...)."""
    return SKIP_EMPTY if not text.strip() else SKIP_NO_SENTENCE
