"""Vocabulary builder (the ``build_vocab`` tool): train a BERT-style WordPiece ``vocab.txt`` from the documents of metadata files.

Uses HF ``tokenizers`` (``WordPieceTrainer``) with the same normalizer and pre-tokenizer that
:mod:`bert_data.tokenization` uses to apply a vocabulary (``BertNormalizer`` with
lowercasing/accent stripping following ``--do_lower_case``, ``BertPreTokenizer``), so the words
the trainer sees are the words ``create_tfrecords`` will cut. Documents are streamed
(:func:`~bert_data.metadata.iter_metadata` + :func:`~bert_data.documents.read_source`), one
paragraph at a time, twice:

1. count the normalized characters, to fix the alphabet (``--limit_alphabet`` most frequent
   characters, ties broken by code point) and the characters that occur inside a word (those
   get a ``##`` continuation form);
2. train.

Determinism: HF's trainer numbers the ``##x`` continuation forms in hash-map order, which
differs from process to process and decides how ties between equally frequent merges are
broken. Registering the alphabet (``initial_alphabet``) and the sorted ``##x`` forms up front
(as trainer special tokens, right after ``[PAD] [UNK] [CLS] [SEP] [MASK]``) fixes every id
before training, so the same input and flags give a byte-identical ``vocab.txt``.

Output layout: ``[PAD] [UNK] [CLS] [SEP] [MASK]`` at ids 0-4, then the alphabet (by code
point), the ``##`` forms of the alphabet, then the learned pieces in the order they were learned.

Case: ``do_lower_case`` defaults to False (a cased vocabulary), as ``create_tfrecords``'
``--do_lower_case`` does: a vocabulary must be applied with the setting it was built with, so
the two defaults agree.

Progress: both passes report the input bytes of each document read to an optional
:class:`VocabProgress` (the ``build_vocab`` tool draws it as a bar on a terminal).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from .errors import ConfigError, OutputError, VocabError, plural
from .tokenization import SPECIAL_TOKENS

if TYPE_CHECKING:  # the reader is imported when a corpus is read (keeps this module light)
    from .documents import ReadOptions

PREFIX = "##"
_BATCH_CHARS = 1 << 20

log = logging.getLogger(__name__)

__all__ = ["build_vocab", "VocabProgress", "VocabResult", "write_vocab"]


class VocabProgress(Protocol):
    """Where :func:`build_vocab` reports how far it is (all methods are called in order)."""

    def start(self, description: str, total_bytes: int) -> None:
        """A pass over the corpus begins (``total_bytes``: the listed files' size)."""

    def advance(self, nbytes: int) -> None:
        """One more document read, ``nbytes`` of input."""

    def finish(self) -> None:
        """The pass is over."""


@dataclass
class VocabResult:
    tokens: List[str]  # id = index
    documents: int  # documents read
    skipped: int  # metadata entries skipped (binary, not a regular file)
    paragraphs: int
    characters: int  # non-whitespace characters after normalization
    alphabet: int
    continuation: int  # '##' forms of the alphabet


def _components(do_lower_case: bool):
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    return normalizer, pre_tokenizers.BertPreTokenizer()


class _Corpus:
    """Re-iterable stream of the paragraphs of every document listed in the metadata files, read
    as ``create_tfrecords`` reads them (``options``: the input format, its text key and the
    encoding), streamed: a JSON Lines dump is its documents' text, never its JSON syntax."""

    def __init__(self, metadata_files: Sequence[str], prefix: str, progress: Optional[VocabProgress] = None,
                 options: Optional["ReadOptions"] = None) -> None:
        from .documents import ReadOptions

        self.metadata_files = list(metadata_files)
        self.prefix = prefix
        self.progress = progress
        self.options = options or ReadOptions()
        self.documents = 0
        self.skipped = 0
        self.paragraphs = 0

    def __iter__(self) -> Iterator[str]:
        from collections import Counter

        from .documents import iter_documents
        from .metadata import WorkItem, iter_metadata
        from .sentences import split_paragraphs

        self.documents = self.skipped = self.paragraphs = 0
        for source in iter_metadata(self.metadata_files, self.prefix):
            stats: Counter = Counter()
            for document in iter_documents([WorkItem(source)], self.options, stats):
                if not document.strip():
                    stats["skipped.empty"] += 1  # as create_tfrecords counts it
                    continue
                for paragraph in split_paragraphs(document):
                    self.paragraphs += 1
                    yield paragraph
            if self.progress is not None:
                self.progress.advance(stats["input_bytes"])
            skipped = sum(v for k, v in stats.items() if k.startswith("skipped."))
            self.skipped += skipped
            self.documents += stats["documents.read"] - skipped


class _CharClasses:
    """Whitespace / punctuation classes of characters, decided by the pre-tokenizer itself."""

    def __init__(self, pre_tokenizer) -> None:
        self._pre = pre_tokenizer
        self._cache: dict = {}

    def classify(self, cp: int) -> Tuple[bool, bool]:
        """(is whitespace, is a word on its own: whitespace or punctuation)."""
        got = self._cache.get(cp)
        if got is None:
            c = chr(cp)
            space = not self._pre.pre_tokenize_str(c)
            alone = space or len(self._pre.pre_tokenize_str("a" + c + "a")) != 1
            got = self._cache[cp] = (space, alone)
        return got


def count_characters(corpus, normalizer, pre_tokenizer) -> Tuple[dict, dict, int]:
    """Normalized character counts over the corpus: (all occurrences, occurrences inside a word, total chars).

    Whitespace is left out. "Inside a word" = preceded by a character of the same pre-token,
    i.e. both are neither whitespace nor punctuation (punctuation and CJK characters are always
    words of their own, so they never need a ``##`` form).
    """
    classes = _CharClasses(pre_tokenizer)
    counts: dict = {}
    inside: dict = {}
    total = 0
    pending: List[str] = []
    size = 0

    def flush() -> None:
        nonlocal total
        text = " ".join(pending)
        pending.clear()
        cps = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        if cps.size == 0:
            return
        uniq, inverse = np.unique(cps, return_inverse=True)
        flags = np.array([classes.classify(int(c)) for c in uniq], dtype=bool).reshape(-1, 2)
        space, alone = flags[:, 0], flags[:, 1]
        per_char = np.bincount(inverse, minlength=len(uniq))
        joined = ~alone[inverse]
        cont = np.zeros(len(inverse), bool)
        cont[1:] = joined[1:] & joined[:-1]
        per_char_inside = np.bincount(inverse[cont], minlength=len(uniq))
        for i in np.flatnonzero(~space):
            c = int(uniq[i])
            counts[c] = counts.get(c, 0) + int(per_char[i])
            total += int(per_char[i])
            if per_char_inside[i]:
                inside[c] = inside.get(c, 0) + int(per_char_inside[i])

    for paragraph in corpus:
        text = normalizer.normalize_str(paragraph)
        pending.append(text)
        size += len(text)
        if size >= _BATCH_CHARS:
            flush()
            size = 0
    if pending:
        flush()
    return counts, inside, total


MAX_VOCAB_SIZE = 1 << 22  # tokens a vocabulary may ask for (4,194,304: BERT's are ~30,000, multilingual ones ~250,000)
MAX_COUNT = (1 << 31) - 1  # --min_frequency and --limit_alphabet at most (no corpus count is larger)


def build_vocab(
    metadata_files: Sequence[str],
    input_files_prefix: str,
    vocab_size: int,
    do_lower_case: bool = False,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    progress: Optional[VocabProgress] = None,
    options: Optional["ReadOptions"] = None,
) -> VocabResult:
    # Eight parameters: the command's flags, one each, plus where progress goes and how files are read.
    """Train a WordPiece vocabulary; returns its tokens (id = index) and corpus counts.

    ``do_lower_case`` must be what ``create_tfrecords`` will be given with this vocabulary, and
    ``options`` (input format, text key, encoding) how it will read the documents."""
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ConfigError(f"--vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if vocab_size > MAX_VOCAB_SIZE:  # (the trainer allocates for the size asked: 10^9 aborted the process, 70 GB)
        raise ConfigError(f"--vocab_size must be at most {MAX_VOCAB_SIZE:,} (BERT's are ~30,000), got {vocab_size}")
    for flag, value in (("--min_frequency", min_frequency), ("--limit_alphabet", limit_alphabet)):
        if not 1 <= value <= MAX_COUNT:  # (past 2^64 the trainer raised OverflowError)
            raise ConfigError(f"{flag} must be between 1 and {MAX_COUNT:,}, got {value}")
    from .metadata import scan_metadata

    summary = scan_metadata(metadata_files, input_files_prefix)  # fail fast on missing documents
    normalizer, pre_tokenizer = _components(do_lower_case)
    corpus = _Corpus(metadata_files, input_files_prefix, progress, options)

    _start(progress, "pass 1/2: characters", summary.total_bytes)
    counts, inside, total = count_characters(corpus, normalizer, pre_tokenizer)
    _finish(progress)
    if not counts:
        raise ConfigError(
            f"the documents listed in {', '.join(metadata_files)} hold no text "
            f"({corpus.documents} read, {corpus.skipped} skipped)"
        )
    chars, hashes = _alphabet(counts, inside, limit_alphabet, vocab_size)
    _start(progress, "pass 2/2: training", summary.total_bytes)
    tokens = _train(corpus, normalizer, pre_tokenizer, vocab_size, min_frequency, chars, hashes)
    _finish(progress)
    return VocabResult(tokens, corpus.documents, corpus.skipped, corpus.paragraphs, total, len(chars), len(hashes))


def _start(progress: Optional[VocabProgress], description: str, total_bytes: int) -> None:
    if progress is not None:
        progress.start(description, total_bytes)


def _finish(progress: Optional[VocabProgress]) -> None:
    if progress is not None:
        progress.finish()


def _alphabet(counts: dict, inside: dict, limit_alphabet: int, vocab_size: int) -> Tuple[List[str], List[str]]:
    """The alphabet (the ``limit_alphabet`` most frequent characters, by code point) and the
    ``##`` forms of those that occur inside words; ConfigError when they leave no room."""
    ranked = sorted(counts, key=lambda c: (-counts[c], c))
    alphabet = sorted(ranked[:limit_alphabet])
    continuation = [c for c in alphabet if inside.get(c)]
    floor = len(SPECIAL_TOKENS) + len(alphabet) + len(continuation)
    if vocab_size < floor:
        raise ConfigError(
            f"--vocab_size {vocab_size} is smaller than the {len(SPECIAL_TOKENS)} special tokens + "
            f"{len(alphabet)} alphabet characters + {len(continuation)} '##' continuation forms = {floor}; "
            f"raise --vocab_size or lower --limit_alphabet (the corpus has {len(counts)} distinct characters)"
        )
    return [chr(c) for c in alphabet], [PREFIX + chr(c) for c in continuation]


def _train(
    corpus: _Corpus, normalizer, pre_tokenizer, vocab_size: int, min_frequency: int, chars: List[str], hashes: List[str]
) -> List[str]:
    # Seven parameters: the trainer's inputs, named rather than bundled for one private call.
    """Train on ``corpus`` with every id fixed up front (see the module docstring); the tokens
    in output order."""
    from tokenizers import Tokenizer, models, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix=PREFIX))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=len(chars),
        initial_alphabet=chars,
        special_tokens=list(SPECIAL_TOKENS) + hashes,
        continuing_subword_prefix=PREFIX,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise RuntimeError("tokenizers returned non-contiguous ids")  # pragma: no cover
    trained = [t for t, _ in by_id]
    n_fixed = len(SPECIAL_TOKENS) + len(hashes)
    if trained[:n_fixed] != list(SPECIAL_TOKENS) + hashes:
        raise RuntimeError("tokenizers did not put the special tokens first")  # pragma: no cover
    rest = trained[n_fixed:]
    tokens = list(SPECIAL_TOKENS)
    if sorted(rest[: len(chars)]) == chars:
        tokens += rest[: len(chars)] + hashes + rest[len(chars):]
    else:  # pragma: no cover - a tokenizers version that orders its alphabet differently
        tokens += hashes + rest
    # vocab.txt has one token per line and readers strip each line: no token may hold whitespace.
    bad = [t for t in tokens if t != t.strip() or not t or any(ch.isspace() for ch in t)]
    if bad:
        log.warning("dropping %s that contain whitespace: %r", plural(len(bad), "token"), bad[:5])
        tokens = [t for t in tokens if t not in set(bad)]
    return tokens


def write_vocab(tokens: Sequence[str], path: str) -> None:
    """Write atomically, then check the file with :func:`bert_data.tokenization.load_vocab`."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"--output {path}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise OutputError(f"--output {path} is a directory")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write("\n".join(tokens) + "\n")
        from .tokenization import load_vocab

        vocab = load_vocab(tmp)
        if len(vocab) != len(tokens):  # pragma: no cover - guarded by the whitespace filter
            raise VocabError(f"{path}: {len(tokens)} tokens written, {len(vocab)} read back")
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"--output {path} cannot be written ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
