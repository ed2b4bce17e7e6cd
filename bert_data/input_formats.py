"""Input formats: decoded text in, documents out, streamed (``--input_format``).

A consumer per format (:func:`make_consumer`) is fed a file's decoded text in chunks
(``feed(text, final)``) and returns the documents completed so far: a file's text (or the pieces
between ``--multiple_docs_separator``), JSON Lines lines, WikiExtractor ``<doc>`` blocks, or
google-research/bert's blank-line separated documents. A document longer than
``max_document_chars`` is emitted in pieces cut at line breaks, so it is never held whole. The
text comes with universal newlines (the reader made every ``\\r\\n`` and lone ``\\r`` a ``\\n``), so
line ends never change what a document is. No I/O and no decoding here: files, byte ranges, compression and encodings are the reader's
(:mod:`bert_data.documents`, which is also where other modules import :class:`ReadOptions` and
:data:`INPUT_FORMATS` from).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional, Tuple

INPUT_FORMATS = ("text", "jsonl", "wikiextractor", "bert")

# Skip reasons of single documents within a file (keys of data_params.json "documents.skipped";
# the reasons that skip a whole file are bert_data.documents').
SKIP_BAD_JSON = "bad_json"  # a JSON Lines line that is not valid JSON
SKIP_MISSING_TEXT_KEY = "missing_text_key"  # valid JSON, but no string under --text_key
SKIP_LINE_TOO_LONG = "line_too_long"

DEFAULT_MAX_DOCUMENT_CHARS = 1 << 20  # --max_document_chars: longer documents are cut into pieces
MAX_JSON_LINE_CHARS = 64 << 20  # a JSON Lines line longer than this is skipped as line_too_long


@dataclass(frozen=True)
class ReadOptions:
    """How listed files become documents (from the config: ``--input_format``, ``--text_key``,
    ``--multiple_docs_in_single_file`` + ``--multiple_docs_separator``, ``--max_document_chars``)."""

    input_format: str = "text"
    text_key: str = "text"
    separator: Optional[str] = None  # split a file into documents on this, or None: one document per file
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    encoding: str = "utf-8"  # --input_encoding: files without a UTF-16/32 byte-order mark are in this

    def __post_init__(self) -> None:
        # The reader hands the consumers text with universal newlines (\r\n and \r are \n), so a
        # separator is read the same way: "\r\n" in --multiple_docs_separator means a line break.
        if self.separator is not None and "\r" in self.separator:
            object.__setattr__(self, "separator", self.separator.replace("\r\n", "\n").replace("\r", "\n"))

    @property
    def line_oriented(self) -> bool:
        """Documents never span a newline (or, one document per file: may be cut at newlines), so
        a large plain file can be read in byte ranges snapped to line starts. (WikiExtractor's
        ``<doc>`` blocks span lines: its files, ~1 MB each, are streamed whole.)"""
        return self.input_format == "jsonl" or (self.input_format == "text" and self.separator in (None, "\n"))


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


class ContinuedPiece(str):
    """A piece of a document after its first (the document was longer than ``max_document_chars``):
    plain text, marked so that the NSP negatives (:mod:`bert_data.negatives`) know it belongs to
    the document before it and never draw a "random" B from that same document."""

    __slots__ = ()


class _Pieces:
    """Emits a document in pieces of at most ``limit`` characters as its text streams in, and
    counts the cuts (``documents_split.*``): a document longer than the limit is never held whole.
    Every piece after a document's first is a :class:`ContinuedPiece`."""

    def __init__(self, limit: int, stats: Counter) -> None:
        self.limit = limit
        self.stats = stats
        self.cut = False

    def take(self, buffer: str, final: bool) -> Tuple[List[str], str]:
        pieces: List[str] = []
        while len(buffer) > self.limit:
            at = cut_point(buffer, self.limit)
            pieces.append(ContinuedPiece(buffer[:at]) if self.cut else buffer[:at])
            buffer = buffer[at:]
            if not self.cut:
                self.cut = True
                self.stats["documents_split.documents"] += 1
            self.stats["documents_split.extra_pieces"] += 1
        if final:
            pieces.append(ContinuedPiece(buffer) if self.cut else buffer)
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
        held = ""
        if self.separator is not None:
            parts = self.buffer.split(self.separator)
            self.buffer = parts.pop()
            for part in parts:
                out.extend(self.pieces.take(part, True)[0])
            if not final and len(self.separator) > 1:
                # The unfinished document's last characters may be the start of a separator that the
                # next text completes: never cut a piece there (a document's next one would be read
                # as its continuation). Only where a cut is made waits: it is the same cut.
                keep = len(self.separator) - 1
                self.buffer, held = self.buffer[:-keep], self.buffer[-keep:]
        pieces, self.buffer = self.pieces.take(self.buffer, final)
        self.buffer += held
        return out + pieces


class _JsonlConsumer:
    """One document per JSON Lines line (see :func:`parse_jsonl`), streamed: lines are split on
    ``\\n`` only (the reader already made ``\\r\\n`` and ``\\r`` line ends ``\\n``; U+2028 is
    not one); a line over ``MAX_JSON_LINE_CHARS`` is skipped (``line_too_long``) without being held."""

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
# (control characters): removed inside a line of the "bert" format, so that a line stays one
# sentence with the same tokens (U+2028/U+2029 are kept: BERT keeps them). "\r" never gets here:
# the reader turns "\r\n" and a lone "\r" into "\n" (universal newlines), as the Model Zoo's
# open() does; BERT's tf.gfile readline drops every "\r" (the same for CRLF files).
_IN_LINE_BREAKS = {ord("\r"): " ", **{c: None for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85)}}


class BertConsumer:
    """google-research/bert's corpus layout (``--input_format bert``): one sentence per line,
    documents separated by blank lines, a line being blank when ``line.strip()`` is empty (so
    whitespace-only and CRLF blank lines separate documents, as in BERT; lines end at ``\\n``,
    ``\\r\\n`` or a lone ``\\r``: see :data:`_IN_LINE_BREAKS`). Runs of blank lines make no
    empty documents. A document ends at the end of its file (BERT lets it run on into
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


def make_consumer(options: ReadOptions, stats: Counter):
    """The consumer of ``options.input_format``, counting into ``stats``."""
    if options.input_format == "jsonl":
        return _JsonlConsumer(options, stats)
    if options.input_format == "wikiextractor":
        return _WikiExtractorConsumer(options, stats)
    if options.input_format == "bert":
        return BertConsumer(options, stats)
    return _TextConsumer(options, stats)
