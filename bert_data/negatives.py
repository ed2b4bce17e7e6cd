"""NSP negatives: the corpus-wide pool every random-next segment B is drawn from.

Why: BERT's ``create_pretraining_data.py`` draws a random B from any other document of the whole
corpus (the Model Zoo from the files of a ``--split_num`` batch). Drawing it from the other
documents of the same unit (at most ``--group_bytes`` characters) made the data depend on how
the work was cut: a unit of one document, or of one piece of a long document, had no negative,
so its pairs became "is next" and its one-sentence chunks were dropped, and the random-next
fraction and the instance count moved with ``--group_bytes``. Here the negatives come from one
pool per run that depends only on the input, the settings that read it and ``--seed``:

* **Chosen at plan time** (:class:`PoolSelector`, fed every planned metadata entry and its size
  by :func:`bert_data.runners.plan.plan_run`). A *candidate* is a small file, or one ``WINDOW``
  (64 KiB) of a larger one: a byte range of a file that can be read in ranges, else a window of
  the text read from its start (compressed files: their first ``STREAM_WINDOWS`` windows). So a
  book offers a place every 64 KiB, and a big JSON Lines file many, wherever its bytes are. No
  file is opened for this (:func:`may_range` judges by the format and the name; a worker checks).
  Candidates are ranked by a seeded hash of their identity (the entry's canonical spelling and
  the window); the lowest ranks are kept, about ``RESERVE`` x ``pool_cap(input bytes)``
  characters of them (at most ``ENTRY_CHARS`` each) and at most ``MAX_ENTRIES``: a uniform
  sample of the corpus, held in bounded memory while the metadata streams past. Nothing of it
  depends on groups, units or workers.
* **Sent to the workers** as the Config's internal ``negative_pool`` text (:func:`encode_pool`):
  derived from the metadata, the file sizes and the seed, so it is neither recorded in the
  manifest nor compared by ``--resume`` (the inputs it comes from are), and every runner's
  workers (pool processes, Dask workers, Beam DoFns) already receive the Config.
* **Built once per worker** (:func:`build_pool`, by :func:`bert_data.group.ensure_pool`): the
  candidates are read in rank order, as the run reads documents, each for its first
  ``ENTRY_CHARS`` (32 KiB) characters of documents, until ``pool_cap`` characters (512 KiB to
  4 MiB: 1/256 of the input) are in; they are segmented and tokenized once and kept as one flat
  token array for every group the worker makes. Memory: about 1.5 bytes per pool character
  (int32 ids and sentence offsets), plus a copy of its ids beside each unit's
  (:meth:`bert_data.instances.Negatives.tokens`), at most ~10 MB per worker besides its unit.
* **One document is one document**: a random B never comes from A's *original* document
  (:class:`DocumentOrigins`): with one document per file (``--input_format text`` without
  ``--multiple_docs_in_single_file``) a document is its file, however many pieces
  ``--max_document_chars`` or byte ranges cut it into; in the other formats it is identified by
  a hash of its text, and the pieces after its first (:class:`~bert_data.input_formats.ContinuedPiece`)
  are the same document. Two identical documents are one document too.

The draws themselves are the instance stage's (:class:`bert_data.instances.Negatives`): uniform
over the pool's documents other than A's, a random sentence start, sentences until B's target
length, as BERT does.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import storage
from .compression import COMPRESSION_EXTENSIONS
from .documents import ReadOptions, can_range, iter_documents
from .errors import BertDataError, MetadataError
from .identity import entry_key
from .input_formats import ContinuedPiece, cut_point
from .instances import Negatives
from .metadata import DocumentSource, WorkItem, decode_group, encode_group
from .tokenization import TokenizedGroup, tokenize_group
from .output.scratch import scratch_dir

POOL_SHARE = 256  # the pool holds about 1/256 of the input's characters ...
POOL_MIN_CHARS = 512 << 10  # ... but at least this many (all of a smaller corpus) ...
POOL_MAX_CHARS = 4 << 20  # ... and at most this many: a fixed bound on every worker's memory and start-up
WINDOW = 64 << 10  # a file larger than this offers one candidate per window of this many bytes (characters) ...
ENTRY_CHARS = 32 << 10  # ... of which a candidate takes at most this many characters of documents
STREAM_WINDOWS = 256  # a file read from its start (compressed, ...) offers its first 256 windows (16 MiB) only
RESERVE = 2  # candidates for RESERVE x the cap are sent: a worker takes them in rank order until the cap is read
MAX_ENTRIES = 4096  # candidates at most (bounds the plan's heap and the Config's size)
REMOTE_PREFIX_BYTES = 8 * ENTRY_CHARS  # bytes of a URL candidate copied to read its first ENTRY_CHARS


def pool_cap(total_bytes: int) -> int:
    """The pool's characters at most for an input of ``total_bytes``: 1/256 of it, at least
    512 KiB and at most 4 MiB. Every worker builds the pool (~0.2 s per MiB), so the share is
    small: with W workers the pool costs W/256 of the tokenizing work below the cap, and the cap
    bounds each worker's cost and memory above it (docs/performance.md)."""
    return min(POOL_MAX_CHARS, max(POOL_MIN_CHARS, total_bytes // POOL_SHARE))


def _rank(seed: int, key: str, window: int) -> int:
    text = f"{seed}\0negatives\0{key}\0{window}".encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def one_document_per_file(options: ReadOptions) -> bool:
    """Whether a listed file is one document (plain text without a document separator)."""
    return options.input_format == "text" and options.separator is None


def may_range(source: DocumentSource, options: ReadOptions) -> bool:
    """At plan time, without opening the file: whether a large file can likely be read in byte
    ranges (its format reads lines, it is local and not named as compressed). The worker checks
    the file itself (:func:`bert_data.documents.can_range`) before reading a range candidate; one
    that cannot be ranged after all is read as a stream window. No file is opened while the
    metadata is scanned: on a network file system that would cost a round trip per file."""
    if not (options.line_oriented or options.input_format == "bert") or storage.is_remote(source.path):
        return False
    return os.path.splitext(source.path)[1].lower() not in COMPRESSION_EXTENSIONS


# --------------------------------------------------------------------------------------------
# Plan time: which candidates
# --------------------------------------------------------------------------------------------
#
# A candidate is a WorkItem: a whole small file (or a URL: its first characters); a byte range
# ``[start, end)`` of a large file that can be read in ranges (the documents whose first line
# starts in it, as a group's range is read); or, in a large file that can only be read from its
# start (compressed, WikiExtractor, ...), ``end`` None and ``start`` the character offset of a
# window of its documents' text (a "stream window", read by :func:`_stream_windows`).


class PoolSelector:
    """The candidates with the lowest seeded ranks, kept while the metadata streams past
    (:meth:`add` per entry and size), then cut to the run's cap (:meth:`items`).

    Memory is bounded: at most ``MAX_ENTRIES`` candidates, or as many as reach ``RESERVE`` x
    ``POOL_MAX_CHARS``, are held at any time. Duplicate entries (the same canonical spelling)
    are one candidate. ``can_range(source)`` says whether a large file may be read in ranges."""

    def __init__(self, seed: int, prefix: str, can_range: Callable[[DocumentSource], bool]) -> None:
        self.seed = seed
        self.prefix = prefix
        self.can_range = can_range
        self._heap: List[Tuple[int, str, int, int, WorkItem]] = []  # (-rank, key, window, chars, item): max-heap
        self._members: set = set()
        self._chars = 0

    def add(self, source: DocumentSource, size: int) -> None:
        remote = storage.is_remote(source.path)
        if size <= 0 and not remote:
            return  # empty, a directory or a FIFO: nothing to read
        key = entry_key(source.entry or source.path, self.prefix)
        if remote or size <= WINDOW:
            self._offer(_rank(self.seed, key, 0), key, 0, ENTRY_CHARS if remote else min(size, ENTRY_CHARS), WorkItem(source))
        elif self.can_range(source):
            for window in range(-(-size // WINDOW)):
                start = window * WINDOW
                self._offer(_rank(self.seed, key, window), key, window, min(size - start, ENTRY_CHARS),
                            WorkItem(source, start, min(size, start + WINDOW)))
        else:
            for window in range(min(-(-size // WINDOW), STREAM_WINDOWS)):
                self._offer(_rank(self.seed, key, window), key, window, ENTRY_CHARS, WorkItem(source, window * WINDOW))

    def _full(self) -> bool:
        return len(self._heap) >= MAX_ENTRIES or self._chars >= RESERVE * POOL_MAX_CHARS

    def _offer(self, rank: int, key: str, window: int, chars: int, item: WorkItem) -> None:
        if (key, window) in self._members or (self._full() and rank >= -self._heap[0][0]):
            return
        heapq.heappush(self._heap, (-rank, key, window, chars, item))
        self._members.add((key, window))
        self._chars += chars
        while len(self._heap) > MAX_ENTRIES or self._chars - self._heap[0][3] >= RESERVE * POOL_MAX_CHARS:
            _, old_key, old_window, old_chars, _ = heapq.heappop(self._heap)
            self._members.discard((old_key, old_window))
            self._chars -= old_chars

    def items(self, total_bytes: int) -> Tuple[int, List[WorkItem]]:
        """``(cap, the candidates in rank order)`` for an input of ``total_bytes``: the lowest
        ranks until their estimated characters reach ``RESERVE`` x the cap (a candidate may turn
        out empty: a window inside one long JSON line, say; workers stop at the cap)."""
        cap = pool_cap(total_bytes)
        chosen: List[WorkItem] = []
        chars = 0
        for _, _, _, item_chars, item in sorted(self._heap, key=lambda entry: -entry[0]):
            if chars >= RESERVE * cap:
                break
            chosen.append(item)
            chars += item_chars
        return cap, chosen


def encode_pool(cap: int, items: Sequence[WorkItem], metadata_index: Dict[str, int]) -> str:
    """The pool as one line of text (the Config's ``negative_pool``): its cap, then its
    candidates as a spool line (:func:`bert_data.metadata.encode_group`)."""
    return f"{cap} {encode_group(0, items, metadata_index)}"


def decode_pool(spec: str, metadata_files: Sequence[str]) -> Tuple[int, List[WorkItem]]:
    cap, line = spec.split(" ", 1)
    return int(cap), decode_group(line, metadata_files)[1]


# --------------------------------------------------------------------------------------------
# Which original document a document (or a piece of one) is
# --------------------------------------------------------------------------------------------


def _origin(kind: str, text: str) -> int:
    digest = hashlib.blake2b(f"{kind}\0{text}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class DocumentOrigins:
    """The original document of each document read (see the module docstring): one id per
    file with one document per file, else a hash of the document's text, its later pieces
    (:class:`~bert_data.input_formats.ContinuedPiece`) keeping the id of its first."""

    one_per_file: bool
    prefix: str = ""

    def tag(self, item: WorkItem, documents: Iterable[str]) -> Iterator[Tuple[str, int]]:
        """``(document, origin)`` for the documents of one work item, in order."""
        if self.one_per_file:
            origin = _origin("file", entry_key(item.source.entry or item.source.path, self.prefix))
            for document in documents:
                yield document, origin
            return
        current: Optional[int] = None
        for document in documents:
            if current is None or not isinstance(document, ContinuedPiece):
                current = _origin("text", document)
            yield document, current


# --------------------------------------------------------------------------------------------
# Worker side: the pool, read, segmented and tokenized once
# --------------------------------------------------------------------------------------------


@dataclass
class NegativePool:
    """The pool's documents, tokenized: ``ids[offsets[s]:offsets[s + 1]]`` is sentence ``s``,
    document ``r`` owns sentences ``doc_starts[r]`` to ``doc_starts[r + 1] - 1``; ``by_origin``
    lists the documents of each original document (the ones a B must not come from)."""

    ids: np.ndarray
    offsets: List[int]
    doc_starts: List[int]
    origins: List[int]
    facts: Dict[str, int] = field(default_factory=dict)  # what the manifest records (negative_pool.*)
    by_origin: Dict[int, List[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for index, origin in enumerate(self.origins):
            self.by_origin.setdefault(origin, []).append(index)

    @property
    def n_docs(self) -> int:
        return len(self.doc_starts) - 1

    def available(self, origin: int) -> int:
        """How many pool documents a document of ``origin`` may take its B from."""
        return self.n_docs - len(self.by_origin.get(origin, ()))

    def negatives(self, unit: TokenizedGroup, origins: Sequence[int]) -> Negatives:
        """The negatives of one unit: this pool, its tokens placed after the unit's, each unit
        document barred from the pool documents of its own origin."""
        by_origin = self.by_origin

        def excluded(d: int) -> Sequence[int]:
            return by_origin.get(origins[d], ())

        return Negatives(self.offsets, self.doc_starts, len(unit.ids), self.ids, excluded)


def count_unit_negatives(pool: Optional[NegativePool], unit: TokenizedGroup, origins: Optional[Sequence[int]],
                         stats: Counter) -> None:
    """Count the unit's documents that have no negative at all (and the unit, if any has):
    without a pool, the unit's other documents are the negatives."""
    if pool is not None and origins is not None:
        missing = sum(1 for origin in origins if pool.available(origin) < 1)
    else:
        missing = unit.n_docs if unit.n_docs < 2 else 0
    stats["nsp_documents_without_negatives"] += missing
    stats["nsp_units_without_negatives"] += missing > 0


def _take(pairs: Iterable[Tuple[str, int]], budget: int) -> List[Tuple[str, int]]:
    """``(text, origin)`` of documents until ``budget`` characters, the last cut at a line (else a
    space) to fit; consecutive pieces of one original document joined into one."""
    out: List[Tuple[List[str], int]] = []
    for text, origin in pairs:
        cut = len(text) > budget
        if cut:  # the rest of this document (and of the candidate) is left unread
            text = text[: cut_point(text, budget)]
        if out and out[-1][1] == origin:
            out[-1][0].append(text)
        else:
            out.append(([text], origin))
        budget -= len(text)
        if cut or budget <= 0:
            break
    return [("".join(parts), origin) for parts, origin in out if any(parts)]


def _read_range(item: WorkItem, options: ReadOptions, origins: DocumentOrigins) -> List[Tuple[str, int]]:
    """A byte-range candidate: the first ``ENTRY_CHARS`` characters of its documents."""
    documents = iter_documents([item], options, Counter())  # the pool's reading is not the run's: not counted
    try:
        return _take(origins.tag(item, documents), ENTRY_CHARS)
    finally:
        documents.close()


def _stream_windows(source: DocumentSource, starts: Sequence[int], options: ReadOptions,
                    origins: DocumentOrigins) -> Dict[int, List[Tuple[str, int]]]:
    """Stream candidates of one file, read once from its start: for each window start ``s`` (a
    character offset in the file's documents, one after the other), the documents that begin in
    ``[s, s + WINDOW)``, or with one document per file its text from the first line start at or
    after ``s``; at most ``ENTRY_CHARS`` each. Reading stops after the last window."""
    item = WorkItem(source)
    wanted = {s: [] for s in starts}  # type: Dict[int, List[Tuple[str, int]]]
    last = max(starts)
    position = 0
    documents = iter_documents([item], options, Counter())
    try:
        for text, origin in origins.tag(item, documents):
            begin, position = position, position + len(text)
            if begin >= last + WINDOW:
                break
            if origins.one_per_file:
                for s in wanted:
                    if begin < s + ENTRY_CHARS and s < position:
                        lo = max(s - begin, 0)
                        if s > begin:  # from the first line start at or after s
                            newline = text.find("\n", lo - 1)
                            lo = len(text) if newline < 0 else newline + 1
                        wanted[s].append((text[lo:], origin))  # cut to ENTRY_CHARS at a line by _take
            else:
                s = begin - begin % WINDOW
                if s in wanted:
                    wanted[s].append((text, origin))
    finally:
        documents.close()
    return {s: _take(pairs, ENTRY_CHARS) for s, pairs in wanted.items()}


def _staged(item: WorkItem, scratch: str, number: int) -> WorkItem:
    """A URL candidate: its first ``REMOTE_PREFIX_BYTES`` copied to ``scratch`` (enough for
    ``ENTRY_CHARS`` characters; a compressed file's cut tail is read as damage and ignored)."""
    source = item.source
    local = os.path.join(scratch, f"{number:05d}-{source.path.rstrip('/').rsplit('/', 1)[-1] or 'document'}")
    try:
        with storage.open_read(source.path) as src, open(local, "wb") as dst:
            dst.write(src.read(REMOTE_PREFIX_BYTES))
    except BertDataError:
        raise
    except Exception as exc:  # BeamIOError, botocore errors, OSError, ...
        raise MetadataError(f"{source.where()}: document {source.path} cannot be read ({exc})") from None
    return WorkItem(DocumentSource(local, source.metadata_file, source.line_number, source.entry))


def _pool_texts(cap: int, items: List[WorkItem], options: ReadOptions, origins: DocumentOrigins,
                scratch: Optional[str]) -> Tuple[List[str], List[int]]:
    """The candidates' documents in rank order until ``cap`` characters: ``(texts, origins)``.
    A file's stream windows are read together, when the first of them is reached."""
    rangeable: Dict[str, bool] = {}
    for index, item in enumerate(items):  # a range of a file that cannot be ranged after all: a stream window
        if item.end is not None:
            if item.source.path not in rangeable:
                rangeable[item.source.path] = can_range(item.source, options)
            if not rangeable[item.source.path]:
                items[index] = WorkItem(item.source, item.start)
    items = [i for i in items if i.end is not None or i.start < STREAM_WINDOWS * WINDOW]
    streams: Dict[str, List[int]] = {}
    for item in items:
        if item.end is None:
            streams.setdefault(item.source.path, []).append(item.start)
    read: Dict[Tuple[str, int], List[Tuple[str, int]]] = {}
    texts: List[str] = []
    kept: List[int] = []
    chars = 0
    for number, item in enumerate(items):
        if chars >= cap:
            break
        path = item.source.path
        if item.end is not None:
            documents = _read_range(item, options, origins)
        else:
            if (path, item.start) not in read:
                source = _staged(item, scratch, number).source if storage.is_remote(path) else item.source
                windows = _stream_windows(source, streams[path], options, origins)
                read.update({(path, s): pairs for s, pairs in windows.items()})
            documents = read.pop((path, item.start))
        for text, origin in documents:
            texts.append(text)
            kept.append(origin)
            chars += len(text)
    return texts, kept


def _in_content_order(group: TokenizedGroup, origins: List[int]) -> Tuple[TokenizedGroup, List[int]]:
    """The pool's documents in the order of a hash of their tokens and sentences, not of the
    files they were read from: the same documents in other files (gzip, JSON Lines, WikiExtractor
    blocks, other names) make the same pool, and so the same records."""
    off, starts = group.sent_offsets, group.doc_starts
    keys = []
    for d in range(group.n_docs):
        first, last = starts[d], starts[d + 1]
        sentences = (off[first:last + 1] - off[first]).astype(np.int64).tobytes()
        keys.append(hashlib.blake2b(group.ids[off[first]:off[last]].tobytes() + sentences, digest_size=16).digest())
    order = sorted(range(group.n_docs), key=keys.__getitem__)
    if order == list(range(group.n_docs)):
        return group, origins
    ids = np.concatenate([group.ids[off[starts[d]]:off[starts[d + 1]]] for d in order])
    lengths = np.concatenate([np.diff(off[starts[d]:starts[d + 1] + 1]) for d in order])
    sent_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    doc_starts = [0] + np.cumsum([starts[d + 1] - starts[d] for d in order]).tolist()
    return TokenizedGroup(ids=ids, sent_offsets=sent_offsets, doc_starts=doc_starts), [origins[d] for d in order]


def build_pool(spec: str, options: ReadOptions, prefix: str, metadata_files: Sequence[str], segmenter, tokenizer) -> NegativePool:
    """Read, segment and tokenize the pool of ``spec`` (:func:`encode_pool`) as the run reads
    its documents (``options``): the same in every worker, since it depends on nothing else."""
    cap, items = decode_pool(spec, metadata_files)
    origins_of = DocumentOrigins(one_document_per_file(options), prefix)
    scratch = scratch_dir("pool") if any(storage.is_remote(i.source.path) for i in items) else None
    try:
        texts, origins = _pool_texts(cap, items, options, origins_of, scratch)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    per_doc_sentences, _ = segmenter.segment(texts)
    tokenized = tokenize_group(per_doc_sentences, tokenizer)
    left_out = set(tokenized.left_out)
    kept = [origin for index, origin in enumerate(origins) if index not in left_out]
    group, kept = _in_content_order(tokenized.group, kept)
    facts = {
        "negative_pool.candidates": len(items),
        "negative_pool.documents": group.n_docs,
        "negative_pool.characters": sum(len(t) for i, t in enumerate(texts) if i not in left_out),
        "negative_pool.tokens": int(len(group.ids)),
        "negative_pool.cap_characters": cap,
    }
    return NegativePool(group.ids, group.sent_offsets.tolist(), list(group.doc_starts), kept, facts)


def pool_manifest_fields(stats: Counter) -> Dict[str, object]:
    """The manifest's account of the negatives (NSP runs): the pool and what it could not give."""
    pool = {key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith("negative_pool.")}
    return {
        "nsp_negative_pool": pool,
        "nsp_units_without_negatives": stats["nsp_units_without_negatives"],
        "nsp_documents_without_negatives": stats["nsp_documents_without_negatives"],
    }
