"""The ASCII route's C accelerator (``bert_data._wordpiece``, issue 29) against the Python and
``tokenizers`` code it stands in for: the same ids and offsets for every batch of texts (random
ASCII that stresses every character class, words at the length limit, vocabulary words and
non-words), on the shared uncased and cased vocabularies and on small ones written here; the
golden files of google-research/bert through ``encode_ids`` with the accelerator and without; bad
arguments refused with an exception, never a crash.

``tokenization._wordpiece`` None is how the tokenizer tells that there is no accelerator; the tests
of the C side skip where it was not built, and fail under CI (``require_wordpiece``).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data import tokenization as tk
from bert_data.tokenization import FullTokenizer, load_vocab, vocab_tokens
from conftest import require_built, shared_file

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def require_wordpiece() -> None:
    """Skip a test of the C side where it was not built; fail instead when CI is set."""
    require_built(tk._wordpiece, "bert_data._wordpiece")


@pytest.fixture(params=["c", "python"])
def route(request, monkeypatch):
    """Run a test with the accelerator and with the Python/``tokenizers`` route."""
    if request.param == "c":
        require_wordpiece()
    else:
        monkeypatch.setattr(tk, "_wordpiece", None)
    return request.param


def both(tokenizer: FullTokenizer, texts: list[str]) -> tuple[tuple[list, list], tuple[list, list]]:
    """``encode_ids(texts)`` with the accelerator, then without: (ids, offsets) as lists, twice."""
    require_wordpiece()
    ids, offsets = tokenizer.encode_ids(texts)
    assert ids.dtype == np.int32 and offsets.dtype == np.int64
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tk, "_wordpiece", None)
        ref_ids, ref_offsets = tokenizer.encode_ids(texts)
    return (ids.tolist(), offsets.tolist()), (ref_ids.tolist(), ref_offsets.tolist())


# --------------------------------------------------------------------------------------
# Vocabularies
# --------------------------------------------------------------------------------------

# Pieces of every length up to 6, some continuations missing (so some words have no full
# segmentation), uppercase tokens (for the cased runs), some punctuation missing (-> [UNK]),
# tokens that no ASCII word can be ("##", "###a", "café") and one longer than any word here.
HERMETIC = SPECIALS + [
    ".", ",", "!", "'", "[", "]", "#", "(", ")", "-", "~", "\\", "`",
    *string.ascii_lowercase, *"ABCXYZ", *"0123",
    *("##" + c for c in "abcdefghijklmnoprsu0"), "##X", "##Ab",
    "un", "##aff", "##able", "the", "The", "cat", "Cat", "cats", "##cat", "##ca", "##t",
    "hello", "##hello", "sep", "cls", "mask", "unk", "pad", "abcdef", "##bcdef", "##abcdef",
    "##", "###a", "café", "x" * 40, "##" + "y" * 12, "nOt", "##NOT",
]


@pytest.fixture(scope="module")
def hermetic_vocab(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("\n".join(HERMETIC) + "\n", encoding="utf-8")
    return path


_TOKENIZERS: dict = {}


def tokenizer_for(path: Path, lower: bool, max_chars: int = tk.MAX_INPUT_CHARS_PER_WORD) -> FullTokenizer:
    """One tokenizer per (vocabulary, casing, word limit), made with that limit on both routes."""
    key = (str(path), lower, max_chars)
    if key not in _TOKENIZERS:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tk, "MAX_INPUT_CHARS_PER_WORD", max_chars)
            tokenizer = FullTokenizer(str(path), do_lower_case=lower)
            tokenizer._native_vocab()  # made under the same limit as the tokenizers models
            tokenizer._tok, tokenizer._wp, tokenizer._ascii_tok  # (made at their first use)
        _TOKENIZERS[key] = tokenizer
    return _TOKENIZERS[key]


# --------------------------------------------------------------------------------------
# Random texts
# --------------------------------------------------------------------------------------

CONTROLS = [chr(c) for c in [*range(0x01, 0x20), 0x7F]]  # \t \n \r \x0b \x0c among them
PUNCT = [chr(c) for c in (*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127))]
CHARS = list(string.ascii_letters + string.digits + " ") + CONTROLS + PUNCT


def _word_strategy(words: list[str], limit: int) -> st.SearchStrategy[str]:
    """A vocabulary word (any case), a word glued from pieces, or a word around the length limit."""
    body = [w[2:] if w.startswith("##") else w for w in words if w.isascii() and w.strip("#")]
    piece = st.sampled_from(body)
    cased = st.tuples(piece, st.sampled_from([str, str.upper, str.title, str.swapcase])).map(lambda t: t[1](t[0]))
    glued = st.lists(cased, min_size=1, max_size=5).map("".join)
    near_limit = st.builds(
        _near_limit, st.integers(limit - 1, limit + 1), st.sampled_from(["a", "b", "x", "abc", "Ab"]),
        st.sampled_from(CONTROLS + [""]),
    )
    return st.one_of(cased, glued, near_limit)


def _near_limit(length: int, pattern: str, control: str) -> str:
    """A word of `length` characters, with a control character (dropped: not counted) mid-way."""
    word = (pattern * length)[:length]
    return word[: length // 2] + control + word[length // 2 :]


def _texts_strategy(words: list[str], limit: int) -> st.SearchStrategy[list[str]]:
    part = st.one_of(
        _word_strategy(words, limit),
        st.sampled_from(CHARS),
        st.text(alphabet=st.sampled_from(CHARS), max_size=12),
        st.sampled_from(["[SEP]", "[UNK]", "##a", "a##", "\x00", "é", "ΟΔΟΣ"]),  # NUL and non-ASCII: other routes
    )
    text = st.lists(part, max_size=14).map("".join)
    return st.lists(text, max_size=40)


def _check(tokenizer: FullTokenizer, texts: list[str]) -> None:
    (ids, offsets), (ref_ids, ref_offsets) = both(tokenizer, texts)
    assert offsets == ref_offsets, texts
    assert ids == ref_ids, texts


HYPOTHESIS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(max_examples=200, **HYPOTHESIS)
@given(data=st.data(), lower=st.booleans())
def test_hermetic_vocab_matches_python_route(hermetic_vocab, data, lower):
    texts = data.draw(_texts_strategy(HERMETIC, tk.MAX_INPUT_CHARS_PER_WORD))
    _check(tokenizer_for(hermetic_vocab, lower), texts)


@settings(max_examples=150, **HYPOTHESIS)
@given(data=st.data(), lower=st.booleans(), limit=st.sampled_from([5, 6, 7]))
def test_small_word_limit_matches_python_route(hermetic_vocab, data, lower, limit):
    """A word limit (max_input_chars_per_word) around the hermetic tokens' lengths (the Python
    route needs 5: its text separator is the word [SEP])."""
    texts = data.draw(_texts_strategy(HERMETIC, limit))
    _check(tokenizer_for(hermetic_vocab, lower, limit), texts)


@pytest.fixture(
    scope="module", params=[("bert-base-uncased-vocab.txt", True), ("bert-base-cased-vocab.txt", False)],
    ids=["uncased", "cased"],
)
def shared_vocab(request) -> tuple[Path, bool, list[str]]:
    name, lower = request.param
    path = shared_file("vocab", name)
    return path, lower, vocab_tokens(load_vocab(str(path)))


@settings(max_examples=100, **HYPOTHESIS)
@given(data=st.data())
def test_shared_vocab_matches_python_route(shared_vocab, data):
    path, lower, tokens = shared_vocab
    texts = data.draw(_texts_strategy(tokens, tk.MAX_INPUT_CHARS_PER_WORD))
    _check(tokenizer_for(path, lower), texts)


def test_edges_match_python_route(hermetic_vocab):
    limit = tk.MAX_INPUT_CHARS_PER_WORD
    texts = [
        "", " ", "\t\n\r", "\x01\x7f", "".join(CONTROLS), "".join(PUNCT), "".join(CHARS), string.printable,
        "a" * (limit - 1), "a" * limit, "a" * (limit + 1), "a" * limit + "\x01", "a\x0bb" * (limit // 2),
        "a" * (limit + 1) + "!cat", "The CAT sat.", "unaffable", "UNAFFABLE", "abcdefg", "zzz", "x" * 40, "x" * 41,
        "y" * 12 + "y" * 12, "a" + "y" * 12, "cat##cat", "[SEP] [UNK] [CLS]", "nOtNOT", "nOtnot",
    ]
    for lower in (True, False):
        tokenizer = tokenizer_for(hermetic_vocab, lower)
        _check(tokenizer, texts)
        for text in texts:
            _check(tokenizer, [text])
        _check(tokenizer, texts * 160)  # two chunks of ENCODE_CHUNK_TEXTS


def test_many_texts_and_one_long_text(shared_vocab):
    """A whole corpus file as one text and as its lines; lines with a non-ASCII text among them."""
    path, lower, _ = shared_vocab
    tokenizer = tokenizer_for(path, lower)
    corpus = sorted(shared_file("corpus").rglob("*.txt"))[:5]
    text = "\n".join(p.read_text(encoding="utf-8") for p in corpus)
    lines = [line for line in text.splitlines() if line.isascii()]
    _check(tokenizer, [text.encode("ascii", "replace").decode("ascii")])
    _check(tokenizer, lines)
    _check(tokenizer, lines[:50] + ["café"] + lines[50:100])


# --------------------------------------------------------------------------------------
# The golden files, through the public encode_ids, with the accelerator and without
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("golden_name, vocab_name, lower", [
    ("golden_uncased.jsonl", "bert-base-uncased-vocab.txt", True),
    ("golden_cased.jsonl", "bert-base-cased-vocab.txt", False),
], ids=["uncased", "cased"])
def test_golden_encode_ids(route, golden_name, vocab_name, lower):
    with open(shared_file("reference", golden_name), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    tokenizer = FullTokenizer(str(shared_file("vocab", vocab_name)), do_lower_case=lower)
    texts = [rec["text"] for rec in records]
    ids, offsets = tokenizer.encode_ids(texts)
    assert (tokenizer._native is not None) == (route == "c")
    bad = [i for i, rec in enumerate(records) if ids[offsets[i] : offsets[i + 1]].tolist() != rec["ids"]]
    assert not bad, f"{len(bad)} of {len(records)} golden lines differ, first {texts[bad[0]][:200]!r}"
    assert sum(t.isascii() and "\x00" not in t for t in texts) > 10_000  # the C route was exercised


# --------------------------------------------------------------------------------------
# The module itself
# --------------------------------------------------------------------------------------


@pytest.fixture
def wordpiece():
    require_wordpiece()
    return tk._wordpiece


def test_encode_gives_arrays_and_none_for_other_routes(wordpiece):
    vocab = wordpiece.Vocab([b"[UNK]", b"a", b"##b", b"!"], 0, 5)
    ids, offsets = vocab.encode(["ab!", "", "c Ab", "abbbbb"], True)
    assert np.frombuffer(ids, dtype=np.int32).tolist() == [1, 2, 3, 0, 1, 2, 0]
    assert np.frombuffer(offsets, dtype=np.int64).tolist() == [0, 3, 3, 6, 7]
    assert np.frombuffer(vocab.encode(["Ab"], False)[0], dtype=np.int32).tolist() == [0]
    assert vocab.encode(["ab", "é"], True) is None
    assert vocab.encode(["ab", "a\x00b"], True) is None
    ids, offsets = vocab.encode((), True)
    assert len(ids) == 0 and np.frombuffer(offsets, dtype=np.int64).tolist() == [0]
    for limit, want in [(0, [0, 0, 0, 0]), (1, [0, 3, 1, 0]), (2, [1, 2, 3, 1, 0])]:
        ids, _ = wordpiece.Vocab([b"[UNK]", b"a", b"##b", b"!"], 0, limit).encode(["ab!a\x7f", "abb"], True)
        assert np.frombuffer(ids, dtype=np.int32).tolist() == want, limit


def test_bad_arguments_are_refused(wordpiece):
    with pytest.raises(ValueError, match="duplicate"):
        wordpiece.Vocab([b"[UNK]", b"a", b"a"], 0, 5)
    with pytest.raises(TypeError, match="not bytes"):
        wordpiece.Vocab([b"[UNK]", "a"], 0, 5)
    with pytest.raises(ValueError, match="unk_id"):
        wordpiece.Vocab([b"[UNK]"], 1, 5)
    with pytest.raises(ValueError, match="max_chars"):
        wordpiece.Vocab([b"[UNK]"], 0, -1)
    with pytest.raises(TypeError):
        wordpiece.Vocab(5, 0, 5)
    vocab = wordpiece.Vocab([b"[UNK]"], 0, 5)
    with pytest.raises(TypeError, match="not str"):
        vocab.encode(["a", b"b"], True)
    with pytest.raises(TypeError):
        vocab.encode(5, True)


def test_tokenizer_pickles_without_its_c_vocabulary(hermetic_vocab):
    import pickle

    require_wordpiece()
    tokenizer = FullTokenizer(str(hermetic_vocab), do_lower_case=True)
    before = tokenizer.encode_ids(["The cat, unaffable!"])
    assert tokenizer._native is not None
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone._native is None
    after = clone.encode_ids(["The cat, unaffable!"])
    assert before[0].tolist() == after[0].tolist() and before[1].tolist() == after[1].tolist()
