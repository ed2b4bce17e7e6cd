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
from typing import List, Optional, Sequence, Tuple

from .errors import SpacyModelError
from .identity import package_version

# spaCy refuses texts over nlp.max_length (1,000,000 chars) and its memory grows with the
# length of one Doc, so long paragraphs are cut at whitespace into pieces of at most this many
# characters; each cut is a sentence boundary (counted as "paragraph_chunks").
DEFAULT_CHUNK_CHARS = 100_000

_BLANK_LINE = re.compile(r"\n[^\S\n]*\n\s*")
_UP_TO_LAST_WHITESPACE = re.compile(r".*\s", re.DOTALL)
_WHITESPACE_RUN = re.compile(r"\s+")


def segmenter_identity(config) -> str:
    """Which sentence segmenter (and version) a run uses (``config``: a Config): recorded, and
    compared by --resume, --from_tokens and a token cache's kept NSP pools."""
    version = package_version
    # "lines/2": lines end at \n, \r\n and \r only (version 1 also cut at U+2028, U+0085, ...)
    return "lines/2" if config.lines_are_sentences else (
        f"{config.spacy_model or 'blank en + sentencizer'} (spacy {version('spacy')}"
        + (f", {config.spacy_model} {version(config.spacy_model)})" if config.spacy_model else ")")
    )


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
        last = _UP_TO_LAST_WHITESPACE.match(text, start + max(1, max_chars // 2), end)
        cut = last.end() - 1 if last else end  # no whitespace in the window: hard cut
        pieces.append(text[start:cut])
        start = cut
        while start < len(text) and text[start].isspace():
            start += 1
    if start < len(text):
        pieces.append(text[start:])
    return [p for p in (piece.strip() for piece in pieces) if p]


def line_sentences(text: str) -> List[str]:
    """``--single_sentence_per_line`` (and ``--input_format bert``): every non-empty line is one
    sentence. Lines end at ``\n``, ``\r\n`` and ``\r`` (a file's reader has made them ``\n``
    already; a JSON string's ``"text"`` may hold any), as the Model Zoo's universal-newline
    ``open()`` splits them: ``str.splitlines`` would also cut a line at U+2028, U+2029, U+0085,
    form feeds and the like, one sentence into two."""
    return [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line.strip()]


def install_hint(model: str) -> str:
    return f"python -m spacy download {model}"


def _sentence_components(names: List[str]) -> List[str]:
    """The components that set sentence boundaries: ``senter``, else the ``parser`` and what it
    listens to, else a ``sentencizer``; empty when there is none."""
    if "senter" in names:
        return ["senter"]
    if "parser" in names:
        return [n for n in ("tok2vec", "transformer", "parser") if n in names]
    return ["sentencizer"] if "sentencizer" in names else []


def _unneeded_components(spacy_model: str) -> List[str]:
    """Components of a pipeline that sentence boundaries do not need, read from its meta.json
    (a saved directory, or an installed package), so that ``spacy.load(..., exclude=...)`` never
    loads them (a tagger's or NER's weights cost memory in every worker). Empty when the meta
    cannot be read: the pipeline is then loaded whole and trimmed after."""
    import json
    import os

    try:
        if os.path.isdir(spacy_model):
            root = spacy_model
        else:
            import importlib.util

            spec = importlib.util.find_spec(spacy_model) if spacy_model.isidentifier() else None
            root = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
        with open(os.path.join(root, "meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
        names = list(meta.get("components") or meta.get("pipeline") or [])
    except (OSError, ValueError, ImportError, AttributeError, TypeError):
        return []
    keep = _sentence_components(names)
    return [name for name in names if name not in keep] if keep else []


# What thinc (spaCy's ML layer) imports at its own import when installed, and a rule-based
# sentencizer never uses: PyTorch (+175 MB, ~1 s) and CuPy, whose import initialises CUDA on a GPU
# machine (measured on a 16-core GPU host: 5-7 CPU-s and +200 MB in every worker).
_UNUSED_BY_THE_SENTENCIZER = ("torch", "cupy", "cupyx")


def import_spacy(without_torch: bool):
    """spaCy, imported without PyTorch and CuPy when the pipeline cannot need them: unless one is
    already loaded (a trainer's process), importing it is made to fail while spaCy loads, and
    thinc runs without it in this process (a named pipeline, which may need them, imports spaCy
    normally). Nor its command line: ``spacy/__init__`` imports ``spacy.cli.info``, which loads
    every CLI command (typer, weasel, requests, jinja2: ~360 modules, 0.2-0.3 s of every process
    that segments, each worker included); a stand-in takes its place while spaCy loads, and
    ``spacy.info`` imports the real one when called."""
    import sys

    if not without_torch or "torch" in sys.modules:
        import spacy

        return spacy
    blocked = [name for name in _UNUSED_BY_THE_SENTENCIZER if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # import NAME -> ImportError
    cli_stand_in = "spacy" not in sys.modules and "spacy.cli.info" not in sys.modules
    if cli_stand_in:
        sys.modules["spacy.cli.info"] = _spacy_info_stand_in()
    try:
        import spacy
    finally:
        for name in blocked:
            del sys.modules[name]  # the process may still import them itself later
        if cli_stand_in and getattr(sys.modules.get("spacy.cli.info"), "__stand_in__", False):
            del sys.modules["spacy.cli.info"]  # `import spacy.cli` later loads the real commands
    return spacy


def _spacy_info_stand_in():
    """A module in place of ``spacy.cli.info`` whose ``info`` loads the real one at its first call."""
    import types

    module = types.ModuleType("spacy.cli.info", "bert_data's stand-in while spaCy loads (see import_spacy)")
    module.__stand_in__ = True  # type: ignore[attr-defined]

    def info(*args, **kwargs):
        from spacy.cli.info import info as real_info

        return real_info(*args, **kwargs)

    module.info = info  # type: ignore[attr-defined]
    return module


def load_spacy_pipeline(spacy_model: Optional[str]):
    """A spaCy pipeline that sets sentence boundaries, with nothing else enabled.

    ``None`` gives ``spacy.blank("en")`` + ``sentencizer``. A named (or path) pipeline is
    loaded with only what sentence boundaries need: ``senter`` if it has one, else the
    ``parser`` and what it listens to, else its ``sentencizer``; failing all, a sentencizer
    is added. A pipeline that is not installed is a :class:`SpacyModelError` naming the
    install command.
    """
    spacy = import_spacy(without_torch=not spacy_model)

    if not spacy_model:
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        return nlp
    try:
        nlp = spacy.load(spacy_model, exclude=_unneeded_components(spacy_model))
    except OSError:
        raise SpacyModelError(
            f"--spacy_model {spacy_model} is not installed; install it with `{install_hint(spacy_model)}` "
            f"(or omit --spacy_model to use the built-in rule-based sentencizer)"
        ) from None
    except (ImportError, AttributeError, TypeError, ValueError, KeyError) as exc:  # not a pipeline, or a broken one
        raise SpacyModelError(
            f"--spacy_model {spacy_model} could not be loaded as a spaCy pipeline ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no message'}); give an installed pipeline's name or a saved "
            f"pipeline's directory"
        ) from None
    names = list(nlp.pipe_names) + list(getattr(nlp, "disabled", []))
    keep = _sentence_components(names)
    for name in names:
        if name in keep:
            if name in getattr(nlp, "disabled", []):
                nlp.enable_pipe(name)
        elif name in nlp.pipe_names:
            nlp.disable_pipe(name)
    if not keep:
        nlp.add_pipe("sentencizer")
    return nlp


def _lean(tokenizer):
    """``tokenizer`` whose vocabulary computes, for each new word, only what the sentencizer reads
    (``is_punct``; the text is the word itself). spaCy computes about 20 attributes per new word
    (shape, norm, like_num, ...), most of the cost of tokenizing a span it has not seen; where the
    words split and ``is_punct`` do not depend on the others (tests: the same sentences as
    ``nlp.pipe`` on the shared corpus and fuzzed text)."""
    from spacy.attrs import IS_PUNCT

    getters = tokenizer.vocab.lex_attr_getters
    if IS_PUNCT in getters:
        tokenizer.vocab.lex_attr_getters = {IS_PUNCT: getters[IS_PUNCT]}
    return tokenizer


class FastRuleSentencizer:
    """spaCy's rule-based ``sentencizer`` on a blank pipeline, replayed without building Docs.

    spaCy's tokenizer handles every whitespace-delimited span on its own, and the sentencizer
    only changes state at tokens that are in ``punct_chars`` or are punctuation (``is_punct``):
    a sentence starts at the first token after a ``punct_chars`` token that is neither. So only
    a few spans can matter: those containing a ``punct_chars`` character, those starting with a
    punctuation character, and whitespace runs other than one space (spaCy makes those tokens).
    This class asks spaCy's own tokenizer about those spans only (cached per distinct span) and
    skips every plain word. The sentences are identical to ``nlp.pipe`` with the sentencizer
    (tests compare them on the whole shared corpus and on fuzzed text); it is several times faster.
    """

    _CACHE_LIMIT = 200_000

    def __init__(self, nlp, fresh_tokenizer=None) -> None:
        import unicodedata

        self._tokenizer = _lean(nlp.tokenizer)
        # spaCy's StringStore keeps every string its tokenizer has seen; on a web-scale corpus
        # that grows without end, so the tokenizer is rebuilt whenever the span cache is cleared.
        self._fresh_tokenizer = fresh_tokenizer or (lambda: _lean(load_spacy_pipeline(None).tokenizer))
        self._punct_chars = frozenset(nlp.get_pipe("sentencizer").punct_chars)
        self._category = unicodedata.category
        punct_class = "".join(re.escape(c) for c in sorted(self._punct_chars))
        self._punct_re = re.compile(f"[{punct_class}]")
        # re is ~10x slower on a class with non-ASCII members: use the ASCII subset unless the
        # text holds one of the non-ASCII sentence-final characters.
        self._ascii_punct_re = re.compile("[" + "".join(re.escape(c) for c in sorted(self._punct_chars) if c.isascii()) + "]")
        self._non_ascii_punct = frozenset(c for c in self._punct_chars if not c.isascii())
        self._non_ascii_re = re.compile(r"[^\x00-\x7f]")
        self._space_re = re.compile(r"\s")
        self._nonspace_re = re.compile(r"\S")
        self._cache: dict = {}

    def _span_tokens(self, span: str):
        """(offset in span, in punct_chars, is_punct) of each token spaCy makes of ``span``."""
        tokens = self._cache.get(span)
        if tokens is None:
            doc = self._tokenizer(span)
            tokens = tuple((t.idx, t.text in self._punct_chars, t.is_punct) for t in doc)
            if len(self._cache) >= self._CACHE_LIMIT:
                self._cache.clear()
                self._tokenizer = self._fresh_tokenizer()
            self._cache[span] = tokens
        return tokens

    def _feed(self, span: str, base: int, seen_period: bool, starts: List[int]) -> bool:
        """Run the sentencizer's state machine over one span's tokens."""
        for offset, in_punct_chars, is_punct in self._span_tokens(span):
            if seen_period and not is_punct and not in_punct_chars:
                starts.append(base + offset)
                seen_period = False
            elif in_punct_chars:
                seen_period = True
        return seen_period

    def sentence_starts(self, text: str) -> List[int]:
        """Character offsets where sentences start (the first is always 0)."""
        starts = [0]
        n = len(text)
        done = 0  # text[:done] is processed
        finder = self._ascii_punct_re
        if not text.isascii() and not self._non_ascii_punct.isdisjoint(self._non_ascii_re.findall(text)):
            finder = self._punct_re
        for match in finder.finditer(text):
            i = match.start()
            if i < done:
                continue
            begin = i  # only a span holding a punct_chars character can set seen_period
            while begin > 0 and not text[begin - 1].isspace():
                begin -= 1
            found = self._space_re.search(text, i)
            end = found.start() if found else n
            seen_period = self._feed(text[begin:end], begin, False, starts)
            done = end
            while seen_period and done < n:  # resolve: the next non-punctuation token starts a sentence
                found = self._nonspace_re.search(text, done)
                nxt = found.start() if found else n
                if nxt - done > 1 or text[done] != " ":
                    # spaCy absorbs one space after a token; any other whitespace is a token
                    if nxt < n:
                        starts.append(nxt)
                    seen_period = False
                    done = nxt
                    break
                if nxt >= n:
                    break
                found = self._space_re.search(text, nxt)
                end = found.start() if found else n
                span = text[nxt:end]
                if self._category(span[0])[0] != "P" and not self._punct_re.search(span):
                    starts.append(nxt)  # its first token is neither punctuation nor sentence-final
                    seen_period = False
                else:
                    seen_period = self._feed(span, nxt, True, starts)
                done = end
        return starts

    def sentences(self, text: str) -> List[str]:
        starts = self.sentence_starts(text)
        ends = starts[1:] + [len(text)]
        return [piece for piece in (text[a:b].strip() for a, b in zip(starts, ends)) if piece]


class SentenceSegmenter:
    """Documents -> sentences, built once per worker process (spaCy is never pickled)."""

    def __init__(
        self,
        spacy_model: Optional[str] = None,
        single_sentence_per_line: bool = False,
        batch_size: int = 256,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        use_fast: bool = True,
    ) -> None:
        self.single_sentence_per_line = single_sentence_per_line
        self.batch_size = batch_size
        self.chunk_chars = chunk_chars
        self.nlp = None if single_sentence_per_line else load_spacy_pipeline(spacy_model)
        if self.nlp is not None:
            self.nlp.max_length = max(self.nlp.max_length, chunk_chars + 1)
        # The default blank pipeline + sentencizer is replayed exactly, without building Docs.
        self.fast = FastRuleSentencizer(self.nlp) if self.nlp is not None and not spacy_model and use_fast else None

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
        if self.fast is not None:
            for owner, piece in zip(owners, pieces):
                sentences[owner].extend(self.fast.sentences(piece))
            return sentences, chunked
        for owner, parsed in zip(owners, self.nlp.pipe(pieces, batch_size=self.batch_size)):
            bucket = sentences[owner]
            for sent in parsed.sents:
                text = sent.text.strip()
                if text:
                    bucket.append(text)
        return sentences, chunked
