"""Segment stage: document text -> sentences.

Newlines are whitespace, blank lines are paragraph boundaries (always a sentence boundary),
and spaCy finds sentences inside paragraphs through batched ``nlp.pipe``. The default is a
blank English pipeline with the rule-based ``sentencizer``: nothing to download. With
``--single_sentence_per_line`` every non-empty line is a sentence and spaCy is never loaded.

The pure helpers (:func:`split_paragraphs`, :func:`chunk_text`, :func:`line_sentences`) need
no spaCy; :class:`SentenceSegmenter` is the thin wrapper that does.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from .errors import SpacyModelError

# spaCy refuses texts over nlp.max_length (1,000,000 chars) and its memory grows with the
# length of one Doc, so long paragraphs are cut at whitespace into pieces of at most this many
# characters; each cut is a sentence boundary (counted as "paragraph_chunks").
DEFAULT_CHUNK_CHARS = 100_000

_BLANK_LINE = re.compile(r"\n[ \t\f\v\r]*\n\s*")
_WHITESPACE_RUN = re.compile(r"\s+")


def split_paragraphs(text: str) -> List[str]:
    """Paragraphs of a document: blank-line separated, inner newlines joined with single spaces."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraphs = []
    for block in _BLANK_LINE.split(text):
        paragraph = " ".join(line.strip() for line in block.split("\n") if line.strip())
        if paragraph:
            paragraphs.append(paragraph)
    return paragraphs


def chunk_text(text: str, max_chars: int) -> List[str]:
    """Cut a paragraph into pieces of at most ``max_chars``, at the last whitespace when possible."""
    if len(text) <= max_chars:
        return [text]
    pieces = []
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        cut = text.rfind(" ", start + max_chars // 2, end)
        if cut <= start:
            cut = end  # no whitespace in the window: hard cut
        pieces.append(text[start:cut])
        start = cut
        while start < len(text) and text[start] == " ":
            start += 1
    if start < len(text):
        pieces.append(text[start:])
    return [p for p in (piece.strip() for piece in pieces) if p]


def line_sentences(text: str) -> List[str]:
    """``--single_sentence_per_line``: every non-empty line is one sentence."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def install_hint(model: str) -> str:
    return f"python -m spacy download {model}"


def load_spacy_pipeline(spacy_model: Optional[str]):
    """A spaCy pipeline that sets sentence boundaries, with nothing else enabled.

    ``None`` gives ``spacy.blank("en")`` + ``sentencizer``. A named (or path) pipeline is
    loaded with only what sentence boundaries need: ``senter`` if it has one, else the
    ``parser`` and what it listens to, else its ``sentencizer``; failing all, a sentencizer
    is added. A pipeline that is not installed is a :class:`SpacyModelError` naming the
    install command.
    """
    import spacy

    if not spacy_model:
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        return nlp
    try:
        nlp = spacy.load(spacy_model)
    except OSError:
        raise SpacyModelError(
            f"--spacy_model {spacy_model} is not installed; install it with `{install_hint(spacy_model)}` "
            f"(or omit --spacy_model to use the built-in rule-based sentencizer)"
        ) from None
    names = list(nlp.pipe_names) + list(getattr(nlp, "disabled", []))
    if "senter" in names:
        keep = ["senter"]
    elif "parser" in names:
        keep = [n for n in ("tok2vec", "transformer", "parser") if n in names]
    elif "sentencizer" in names:
        keep = ["sentencizer"]
    else:
        keep = []
    for name in names:
        if name in keep:
            if name in getattr(nlp, "disabled", []):
                nlp.enable_pipe(name)
        elif name in nlp.pipe_names:
            nlp.disable_pipe(name)
    if not keep:
        nlp.add_pipe("sentencizer")
    return nlp


class SentenceSegmenter:
    """Documents -> sentences, built once per worker process (spaCy is never pickled)."""

    def __init__(
        self,
        spacy_model: Optional[str] = None,
        single_sentence_per_line: bool = False,
        batch_size: int = 256,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
    ) -> None:
        self.single_sentence_per_line = single_sentence_per_line
        self.batch_size = batch_size
        self.chunk_chars = chunk_chars
        self.nlp = None if single_sentence_per_line else load_spacy_pipeline(spacy_model)
        if self.nlp is not None:
            self.nlp.max_length = max(self.nlp.max_length, chunk_chars + 1)

    def segment(self, documents: Sequence[str]) -> Tuple[List[List[str]], int]:
        """Sentences of each document, and how many paragraphs had to be cut into chunks."""
        if self.single_sentence_per_line:
            return [line_sentences(doc) for doc in documents], 0
        owners: List[int] = []
        pieces: List[str] = []
        chunked = 0
        for index, doc in enumerate(documents):
            for paragraph in split_paragraphs(doc):
                parts = chunk_text(paragraph, self.chunk_chars)
                chunked += len(parts) > 1
                pieces.extend(parts)
                owners.extend([index] * len(parts))
        sentences: List[List[str]] = [[] for _ in documents]
        for owner, parsed in zip(owners, self.nlp.pipe(pieces, batch_size=self.batch_size)):
            bucket = sentences[owner]
            for sent in parsed.sents:
                text = sent.text.strip()
                if text:
                    bucket.append(text)
        return sentences, chunked
