"""Read stage: a document source -> decoded document texts, with every oddity counted.

The file side of reading: a listed file is opened (whole, or a byte range of a large one snapped
to line starts), its encoding recognised and its bytes decoded with replacements counted and
universal newlines (``\\r\\n`` and a lone ``\\r`` are ``\\n``: :class:`Newlines`), and the text
handed to its input format's consumer (:mod:`bert_data.input_formats`: decoded text in,
documents out). Compressed files (gzip, bzip2, xz; zstd when the ``zstandard`` module is
importable) are recognised and decompressed as a stream by :mod:`bert_data.compression`. Other
modules import the read stage's names from here (:func:`iter_documents`, :func:`can_range`,
:func:`read_source`, :func:`untokenized_reason`, :class:`ReadOptions`, :data:`INPUT_FORMATS`).
Nothing here raises for bad *content*: undecodable bytes are replaced and counted; binary files,
corrupt compressed files, directories, FIFOs and unusable JSON lines are skipped with a reason.
Only I/O failures raise.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

from .compression import (
    DECOMPRESSION_ERRORS, MAGIC_BYTES, open_decompressor, sniff_compression, zstd_available, zstd_chunks,
)
from .errors import MetadataError
from .input_formats import INPUT_FORMATS, BertConsumer, ReadOptions, make_consumer
from .metadata import DocumentSource, WorkItem

# Skip reasons for whole documents (keys of data_params.json "documents.skipped"; those of single
# documents within a file are bert_data.input_formats').
SKIP_NOT_REGULAR = "not_a_regular_file"
SKIP_BINARY = "binary"
SKIP_EMPTY = "empty"
SKIP_NO_SENTENCE = "no_usable_sentence"
SKIP_CORRUPT_COMPRESSED = "corrupt_compressed"  # truncated or damaged gzip/bzip2/xz/zstd data
SKIP_UNSUPPORTED_COMPRESSION = "unsupported_compression"  # zstd without the zstandard module

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


# --- the raw file ---------------------------------------------------------------------------

_READ_CHUNK = 1 << 20  # bytes read from a file at a time


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


class Newlines:
    """Python's universal newlines on a stream of text: ``\\r\\n`` and a lone ``\\r`` become
    ``\\n``. A ``\\r`` that ends a chunk waits for the next one (it may be half of a ``\\r\\n``).

    Why: the line ends of a corpus must not change what a document is. The Model Zoo reads its
    inputs with ``open()`` in text mode, which does exactly this; BERT's ``tf.gfile`` readline
    drops every ``\\r`` (CRLF then reads as LF; an old Mac file's lone ``\\r`` would glue words
    together, which no one wants). Text without ``\\r`` passes through unchanged."""

    def __init__(self) -> None:
        self.pending_cr = False

    def __call__(self, text: str, final: bool = False) -> str:
        if self.pending_cr:
            text, self.pending_cr = "\r" + text, False
        if "\r" not in text:
            return text
        if not final and text.endswith("\r"):
            text, self.pending_cr = text[:-1], True
        return text.replace("\r\n", "\n").replace("\r", "\n")


class _Decoder:
    """Incremental decoding with U+FFFD replacement (replaced bytes are counted in ``stats``)
    and universal newlines (:class:`Newlines`): every reading path decodes through here."""

    def __init__(self, encoding: str, stats: Counter) -> None:
        self.decoder = codecs.getincrementaldecoder(encoding)(errors="bert_data_count_replace")
        self.stats = stats
        self.newlines = Newlines()

    def __call__(self, data: bytes, final: bool = False) -> str:
        _replaced_in_last_decode[0] = 0
        text = self.decoder.decode(data, final)
        self.stats["replaced_bytes"] += _replaced_in_last_decode[0]
        return self.newlines(text, final)


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
            if item.end is not None:
                _require_planned_size(handle, item)
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


def _require_planned_size(handle, item: WorkItem) -> None:
    """A file read in byte ranges was planned at its size then: one cut short since (its ranges
    past the new end would read nothing, the rest the new text) is an error, never a run of
    neither version (the last range ends at the planned size, so some range of the file sees it)."""
    size = os.fstat(handle.fileno()).st_size
    if size < item.end:
        raise MetadataError(
            f"{item.source.where()}: document {item.source.path} changed while the run read it (it is {size} bytes now; "
            f"the plan read it in ranges up to byte {item.end}); run again with --overwrite once it no longer changes "
            f"(--resume cannot continue a run whose documents changed)"
        )


def _iter_whole(handle, source: DocumentSource, options: ReadOptions, stats: Counter) -> Iterator[str]:
    """A whole file, decompressed on the fly when its magic bytes say so."""
    head = handle.read(MAGIC_BYTES)
    compression = sniff_compression(head, source.path)
    handle.seek(0)
    raw = _GuardedFile(handle)
    if compression == "zst" and not zstd_available():
        stats["input_bytes"] += os.fstat(handle.fileno()).st_size
        _skip_file(stats, SKIP_UNSUPPORTED_COMPRESSION)
        return
    chunks = _raw_chunks(raw) if compression is None else _decompressed_chunks(raw, compression)
    consumer = make_consumer(options, stats)
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
    except DECOMPRESSION_ERRORS:
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
        yield from zstd_chunks(raw)
        return
    with open_decompressor(raw, compression) as stream:
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
    consumer = make_consumer(options, stats)
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
    consumer = BertConsumer(options, stats)
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
    until a line starts at ``end``: then the range owns nothing); returns the new position.
    Lines are read to their ``\\n`` (the unit ranges agree on); the document ends where such a
    line's last line by universal newlines is blank (``x\\r\\r\\n`` ends one: its ``\\r`` lines are
    ``x`` and a blank one)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")  # its replacements are counted where read
    newlines = Newlines()
    while position < end:
        line_blank = True  # the universal line being read is blank so far
        last_blank = True  # the last universal line completed in this "\n" line
        while True:
            chunk = handle.readline(_READ_CHUNK)
            if not chunk:
                return position
            position += len(chunk)
            stats["input_bytes"] += len(chunk)
            *complete, rest = newlines(decoder.decode(chunk), final=False).split("\n")
            for part in complete:
                last_blank, line_blank = line_blank and not part.strip(), True
            line_blank = line_blank and not rest.strip()
            if chunk.endswith(b"\n"):
                break
        if last_blank:
            break
    return position


_BACK_CHUNK = 4096  # bytes read at a time when looking at the line before a range's start
_UTF8_CONTINUATION = range(0x80, 0xC0)


def _previous_line_blank(fd: int, position: int, encoding: str) -> bool:
    """Whether the line that ends just before ``position`` (a line start, after a ``\\n``) is
    blank by ``line.strip()``, lines being split by universal newlines (so the line is what
    follows the last ``\\r`` or ``\\n`` before its end, a ``\\r\\n`` being one end): read backwards
    a chunk at a time, stopping at the first character that is not whitespace (almost always in
    the first chunk) or at the line's start. A UTF-8 character cut by a chunk's start is left
    whole to the next (earlier) chunk."""
    end = position - 1  # the "\n" ending that line
    if end > 0 and os.pread(fd, 1, end - 1) == b"\r":
        end -= 1  # a "\r\n": the line ends at its "\r"
    utf8 = codecs.lookup(encoding).name == "utf-8"
    while end > 0:
        start = max(0, end - max(_BACK_CHUNK, 4))  # more than a cut character's 3 bytes: progress
        chunk = os.pread(fd, end - start, start)
        newline = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
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
            head = handle.read(MAGIC_BYTES)
    except OSError:
        return False  # the reader reports it
    if sniff_compression(head, source.path) is not None:
        return False
    encoding = _encoding_of(head, "text", options.encoding)
    return encoding is not None and _ascii_compatible(encoding)


def _ascii_compatible(encoding: str) -> bool:
    """ASCII bytes mean ASCII characters (so a newline is the byte 0x0a and never half of another
    character, and a range snapped to a line start decodes correctly): UTF-8, Latin-1, cp1252, ...
    Not the stateful ISO-2022 family, whose escape sequences (ASCII bytes) shift every byte after
    them into another character set: a range after the file's first escape decodes as other text."""
    if encoding == "utf-8-sig":
        return True
    try:
        if codecs.lookup(encoding).name.startswith("iso2022"):
            return False
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
