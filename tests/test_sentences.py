"""Segment stage: paragraphs, chunking of long paragraphs, spaCy-backed sentence splitting."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import python_code

from bert_data.errors import SpacyModelError
from bert_data.sentences import SentenceSegmenter, chunk_text, line_sentences, split_paragraphs


@pytest.fixture(scope="module")
def segmenter():
    return SentenceSegmenter()


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- split_paragraphs ------------------------------------------------------------------------


def test_split_paragraphs_blank_lines_and_inner_newlines():
    text = "First line\nstill first.\n\nSecond   para.\n\n\n\nThird\n"
    assert split_paragraphs(text) == ["First line still first.", "Second   para.", "Third"]


def test_split_paragraphs_whitespace_only_lines_are_blank():
    assert split_paragraphs("one\n   \ntwo\n\t\t\nthree\n \t \f \nfour") == ["one", "two", "three", "four"]


def test_split_paragraphs_crlf_and_cr():
    assert split_paragraphs("a b\r\nc\r\n\r\nd\r\n  \r\ne") == ["a b c", "d", "e"]
    assert split_paragraphs("a\rb\r\rc") == ["a b", "c"]


def test_split_paragraphs_strips_and_drops_empty():
    assert split_paragraphs("") == []
    assert split_paragraphs("\n\n  \n\t\n") == []
    assert split_paragraphs("   leading and trailing   \n") == ["leading and trailing"]
    assert split_paragraphs("  indented\n    continuation  ") == ["indented continuation"]


@pytest.mark.parametrize("blank", ["\u00a0", "\u3000", " \u2003 "])
def test_split_paragraphs_unicode_whitespace_line_is_blank(blank):
    assert split_paragraphs(f"one two\n{blank}\nthree four") == ["one two", "three four"]


# --- chunk_text ------------------------------------------------------------------------------


def test_chunk_text_short_text_untouched():
    assert chunk_text("short text", 100) == ["short text"]
    assert chunk_text("x" * 10, 10) == ["x" * 10]


def test_chunk_text_cuts_at_whitespace():
    words = [f"w{i:03d}" for i in range(200)]  # 4-char words
    text = " ".join(words)
    pieces = chunk_text(text, 50)
    assert len(pieces) > 1
    assert all(len(p) <= 50 for p in pieces)
    for piece in pieces:
        assert piece == piece.strip()
        assert all(re.fullmatch(r"w\d{3}", w) for w in piece.split(" ")), "no word is cut"
    assert " ".join(pieces).split(" ") == words


def test_chunk_text_hard_cut_without_whitespace():
    text = "abcdefghij" * 25  # 250 chars, no whitespace
    pieces = chunk_text(text, 60)
    assert all(len(p) <= 60 for p in pieces)
    assert [len(p) for p in pieces] == [60, 60, 60, 60, 10]
    assert "".join(pieces) == text


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab xyz.\t    ")), min_size=0, max_size=400),
    max_chars=st.integers(1, 80),
)
def test_chunk_text_respects_limit_and_loses_only_whitespace(text, max_chars):
    pieces = chunk_text(text, max_chars)
    if len(text) > max_chars:
        assert all(len(p) <= max_chars for p in pieces)
        assert all(p and p == p.strip() for p in pieces)
    assert squash("".join(pieces)) == squash(text)


def test_chunk_text_cuts_at_tab_whitespace():
    assert chunk_text("aaaa\tbbbb", 6) == ["aaaa", "bbbb"]


def test_line_sentences():
    assert line_sentences("one.\n\n  two two \r\nthree\n") == ["one.", "two two", "three"]


@pytest.mark.parametrize("inside", ["\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1c", "\x1d", "\x1e"])
def test_a_line_is_one_sentence_whatever_unicode_calls_a_line_break_inside_it(inside):
    """helper-15's case H: str.splitlines cut a line at these, one sentence into two (BERT's
    readline and the Model Zoo's file iteration end lines at \n only)."""
    assert line_sentences(f"a b{inside}c d\nnext line\n") == [f"a b{inside}c d", "next line"]


def test_a_carriage_return_in_a_json_text_still_ends_a_line():
    """A JSON string's text never went through the file reader's universal newlines: "\r" and
    "\r\n" in it end lines too (helper-16: splitting at "\n" alone wrote 400 instances for 1,072)."""
    assert line_sentences("one\rtwo\r\nthree\n\rfour") == ["one", "two", "three", "four"]


# --- SentenceSegmenter -----------------------------------------------------------------------


def test_default_segmenter_splits_sentences(segmenter):
    sentences, chunked = segmenter.segment(["Hello there. How are you?"])
    assert sentences == [["Hello there.", "How are you?"]]
    assert chunked == 0


def test_paragraph_boundary_is_sentence_boundary(segmenter):
    docs = ["no punctuation here\n\nnor here at all\n\n\nlast one", "Inner newline\njoined. Next one"]
    sentences, _ = segmenter.segment(docs)
    assert sentences[0] == ["no punctuation here", "nor here at all", "last one"]
    assert sentences[1] == ["Inner newline joined.", "Next one"]


def test_segment_keeps_document_alignment_with_empty_documents(segmenter):
    sentences, _ = segmenter.segment(["", "Alpha beta. Gamma delta.", "   \n\n  ", "Epsilon zeta."])
    assert sentences == [[], ["Alpha beta.", "Gamma delta."], [], ["Epsilon zeta."]]


def test_single_sentence_per_line_never_loads_spacy(monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy", None)  # any `import spacy` now fails
    seg = SentenceSegmenter(single_sentence_per_line=True)
    assert seg.nlp is None
    sentences, chunked = seg.segment(["First line. Has two sentences.\n\nSecond\n  \nthird  \n", ""])
    assert sentences == [["First line. Has two sentences.", "Second", "third"], []]
    assert chunked == 0


def test_long_paragraph_is_chunked_and_processed():
    seg = SentenceSegmenter(chunk_chars=50)
    paragraph = " ".join(f"Word{i} goes here and there." for i in range(20))  # ~570 chars, one paragraph
    sentences, chunked = seg.segment([paragraph, "Short one."])
    assert chunked == 1
    assert sentences[1] == ["Short one."]
    assert all(len(s) <= 50 for s in sentences[0])
    assert squash("".join(sentences[0])) == squash(paragraph)


def test_unknown_spacy_model_names_install_command():
    name = "xx_no_such_pipeline_bert_data_test"
    with pytest.raises(SpacyModelError) as info:
        SentenceSegmenter(spacy_model=name)
    assert f"python -m spacy download {name}" in str(info.value)


def test_spacy_pipeline_from_disk(tmp_path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    path = tmp_path / "my_pipeline"
    nlp.to_disk(path)
    seg = SentenceSegmenter(spacy_model=str(path))
    assert "sentencizer" in seg.nlp.pipe_names
    sentences, _ = seg.segment(["It works. Does it really? Yes!\n\nNew paragraph"])
    assert sentences == [["It works.", "Does it really?", "Yes!", "New paragraph"]]


def test_spacy_pipeline_without_sentence_component_gets_sentencizer(tmp_path):
    import spacy

    path = tmp_path / "bare"
    spacy.blank("en").to_disk(path)
    seg = SentenceSegmenter(spacy_model=str(path))
    assert "sentencizer" in seg.nlp.pipe_names
    sentences, _ = seg.segment(["One. Two."])
    assert sentences == [["One.", "Two."]]


# --- the fast replay of the default sentencizer equals spaCy's own pipeline ---------------------

_PARITY_ALPHABET = (
    list("abcXY ") * 3
    + list(".!?;:,\"')(]-\t…。！？")
    + ["  ", "\u00a0", "\u3000", "\u200b", "e.g.", "Mr.", "U.S.", "...", "?!", ".\"", " (", "1.5", "'s", "n't",
       "http://x.y/z.", ":)", "\u2028", "\u0964", "«", "»", "\u201c", "\u201d", "\n", "\n\n"]
)


@pytest.fixture(scope="module")
def spacy_segmenter():
    seg = SentenceSegmenter(use_fast=False)
    assert seg.fast is None
    return seg


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PARITY_ALPHABET), min_size=1, max_size=40))
def test_fast_sentencizer_matches_spacy_pipe(segmenter, spacy_segmenter, pieces):
    assert segmenter.fast is not None  # the default path is the fast replay
    text = "".join(pieces)
    assert segmenter.segment([text]) == spacy_segmenter.segment([text])


def test_fast_sentencizer_matches_spacy_pipe_on_prose(segmenter, spacy_segmenter):
    docs = [
        'He said "Stop." Then he left!  Really?? Yes... (Maybe.) The U.S. is big. e.g. this one.',
        "Numbers 1.5 and 2. Next line\nwith\ttabs.\n\nNew para without stop\n\n\u201cQuoted.\u201d Done",
        "日本語の文。二つ目の文！三つ目？ Mixed text. End",
        "Stop.\t(Aside) more. Hi.  (two spaces) x. End.\u00a0)x. Tab.\t\tnext. Q?\u3000\u201cA\u201d b.",
    ]
    assert segmenter.segment(docs) == spacy_segmenter.segment(docs)


def test_fast_sentencizer_matches_spacy_pipe_seeded_fuzz(segmenter, spacy_segmenter):
    """A fixed-seed sweep over short texts (denser than hypothesis in punctuation-after-space cases)."""
    import random

    rng = random.Random(20240601)
    texts = ["".join(rng.choice(_PARITY_ALPHABET) for _ in range(rng.randint(1, 25))) for _ in range(1500)]
    fast = segmenter.segment(texts)
    slow = spacy_segmenter.segment(texts)
    mismatches = [(t, a, b) for t, a, b in zip(texts, fast[0], slow[0]) if a != b]
    assert fast == slow, mismatches[:5]


def test_fast_sentencizer_rebuilds_spacy_tokenizer_when_its_cache_is_cleared(monkeypatch):
    """spaCy's StringStore grows with every new span; the replay starts a fresh tokenizer
    each time it clears its cache, without changing a single sentence."""
    from bert_data.sentences import FastRuleSentencizer, SentenceSegmenter

    text = " ".join(f"Item {i}. Mr. Smith said no{i}! Really?" for i in range(200))
    expected, _ = SentenceSegmenter(use_fast=False).segment([text])
    monkeypatch.setattr(FastRuleSentencizer, "_CACHE_LIMIT", 16)
    segmenter = SentenceSegmenter()
    first_tokenizer = segmenter.fast._tokenizer
    got, _ = segmenter.segment([text])
    assert got == expected
    assert segmenter.fast._tokenizer is not first_tokenizer
    assert len(segmenter.fast._cache) <= 16


def test_the_rule_based_sentencizer_loads_without_torch_or_cupy(tmp_path):
    """thinc imports PyTorch and CuPy whenever they are installed (CuPy initialises CUDA on a GPU
    host: seconds and ~200 MB per worker); the rule-based sentencizer never uses them, so they are
    not imported. Fake packages that leave a mark when imported stand in for them here."""
    import os

    for name in ("torch", "cupy", "cupyx"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"open({str(tmp_path / (name + '.imported'))!r}, 'w').close()\\nraise ImportError('fake {name}')\\n")
    code = ("from bert_data.sentences import load_spacy_pipeline; "
            "nlp = load_spacy_pipeline(None); "
            "print([s.text for s in nlp('One sentence here. And a second one.').sents])")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # before site-packages: the fakes shadow what is installed
    assert "And a second one." in python_code(code, timeout=120, env=env)
    assert sorted(p.name for p in tmp_path.glob("*.imported")) == []


def test_the_rule_based_sentencizer_loads_without_spacys_command_line():
    """``spacy/__init__`` imports ``spacy.cli.info`` and with it every CLI command (~360 modules);
    the sentencizer loads without them, and ``spacy.info`` and ``import spacy.cli`` still work."""
    code = (
        "import sys\n"
        "from bert_data.sentences import load_spacy_pipeline\n"
        "nlp = load_spacy_pipeline(None)\n"
        "print([s.text for s in nlp('One sentence here. And a second one.').sents])\n"
        "print(sorted(m for m in ('spacy.cli', 'spacy.cli.info', 'typer', 'weasel') if m in sys.modules))\n"
        "import spacy\n"
        "print(sorted(spacy.info(markdown=False, silent=True))[:2])\n"
        "import spacy.cli\n"
        "print(spacy.cli.info is sys.modules['spacy.cli.info'].info, callable(spacy.cli.download))\n"
    )
    assert python_code(code, timeout=120).splitlines() == [
        "['One sentence here.', 'And a second one.']", "[]", "['location', 'pipelines']", "True True"]
