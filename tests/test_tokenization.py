"""Tests for bert_data.tokenization: golden parity with google-research/bert's FullTokenizer
(on ../shared) plus small hermetic tests on tiny vocabularies written here."""

from __future__ import annotations

import json
import os
import pickle
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tokenizers

from bert_data import tokenization as tk
from bert_data.errors import VocabError
from conftest import shared_file
from bert_data.tokenization import FullTokenizer, case_mismatch_warning, load_vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ------------------------------------------------------------------------------------------------
# Golden parity
# ------------------------------------------------------------------------------------------------

GOLDEN = [
    ("golden_uncased.jsonl", "bert-base-uncased-vocab.txt", True),
    ("golden_cased.jsonl", "bert-base-cased-vocab.txt", False),
]


def _diff_report(kind: str, mismatches: list, total: int) -> str:
    lines = [f"{len(mismatches)} of {total} lines differ ({kind}); first few:"]
    for lineno, text, got, want in mismatches[:5]:
        first = next((k for k, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        lines.append(
            f"  line {lineno}: text={text[:120]!r}\n"
            f"    first difference at position {first}: got {got[first:first + 8]} want {want[first:first + 8]}\n"
            f"    got  ({len(got)}): {got[:30]}\n    want ({len(want)}): {want[:30]}"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module", params=GOLDEN, ids=["uncased", "cased"])
def golden(request):
    golden_name, vocab_name, do_lower_case = request.param
    records = []
    with open(shared_file("reference", golden_name), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            records.append((lineno, json.loads(line)))
    tokenizer = FullTokenizer(str(shared_file("vocab", vocab_name)), do_lower_case=do_lower_case)
    return tokenizer, records


def test_golden_tokenize(golden):
    tokenizer, records = golden
    bad_tokens, bad_ids = [], []
    for lineno, rec in records:
        tokens = tokenizer.tokenize(rec["text"])
        if tokens != rec["tokens"]:
            bad_tokens.append((lineno, rec["text"], tokens, rec["tokens"]))
        ids = tokenizer.convert_tokens_to_ids(rec["tokens"])
        if ids != rec["ids"]:
            bad_ids.append((lineno, rec["text"], ids, rec["ids"]))
    assert not bad_tokens, _diff_report("tokenize", bad_tokens, len(records))
    assert not bad_ids, _diff_report("convert_tokens_to_ids", bad_ids, len(records))
    assert len(records) > 20_000


@pytest.mark.parametrize("batch_size", [None, 97])
def test_golden_encode_ids(golden, batch_size):
    tokenizer, records = golden
    texts = [rec["text"] for _, rec in records]
    size = batch_size or len(texts)
    bad = []
    for start in range(0, len(texts), size):
        ids, offsets = tokenizer.encode_ids(texts[start : start + size])
        assert ids.dtype == np.int32 and offsets.dtype == np.int64
        assert len(offsets) == len(texts[start : start + size]) + 1
        for k, (lineno, rec) in enumerate(records[start : start + size]):
            got = ids[offsets[k] : offsets[k + 1]].tolist()
            if got != rec["ids"]:
                bad.append((lineno, rec["text"], got, rec["ids"]))
    assert not bad, _diff_report(f"encode_ids, batch size {size}", bad, len(records))


def test_golden_vocab_case_warnings():
    uncased = load_vocab(str(shared_file("vocab", "bert-base-uncased-vocab.txt")))
    cased = load_vocab(str(shared_file("vocab", "bert-base-cased-vocab.txt")))
    assert len(uncased) == 30522 and len(cased) == 28996
    assert case_mismatch_warning(uncased, True) is None
    assert case_mismatch_warning(cased, False) is None
    assert "--do_lower_case" in case_mismatch_warning(uncased, False)
    assert "--do_lower_case" in case_mismatch_warning(cased, True)


# ------------------------------------------------------------------------------------------------
# Hermetic tests on a tiny vocabulary
# ------------------------------------------------------------------------------------------------

TINY = SPECIALS + [
    "[", "]", ".", ",", "'", "#", "!",
    "a", "##a", "b", "##b", "cl", "##s", "sep", "mask", "un", "pad", "##k", "##un", "##c",
    "un", "##aff", "##able", "the", "cat", "hello", "cafe", "中",
    "ο", "##δ", "##ο", "##ς", "##σ", "σ", "ς", "Ο", "##Δ", "##Ο", "##Σ",
    "The", "Cat",
]


def _write(path: Path, lines, ending: str = "\n", final: bool = True) -> Path:
    text = ending.join(lines) + (ending if final else "")
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.fixture
def tiny_vocab_file(tmp_path):
    seen, tokens = set(), []
    for t in TINY:
        if t not in seen:
            seen.add(t)
            tokens.append(t)
    return _write(tmp_path / "tiny_vocab.txt", tokens)


@pytest.fixture
def tiny(tiny_vocab_file):
    return FullTokenizer(str(tiny_vocab_file), do_lower_case=True)


@pytest.fixture
def tiny_cased(tiny_vocab_file):
    return FullTokenizer(str(tiny_vocab_file), do_lower_case=False)


def _encode_one(tok: FullTokenizer, text: str) -> list[int]:
    ids, offsets = tok.encode_ids([text])
    return ids[offsets[0] : offsets[1]].tolist()


def _check_consistent(tok: FullTokenizer, texts: list[str]) -> None:
    """encode_ids on the batch == tokenize + convert_tokens_to_ids text by text."""
    ids, offsets = tok.encode_ids(texts)
    assert len(offsets) == len(texts) + 1 and offsets[0] == 0 and offsets[-1] == len(ids)
    for i, text in enumerate(texts):
        want = tok.convert_tokens_to_ids(tok.tokenize(text))
        assert ids[offsets[i] : offsets[i + 1]].tolist() == want, repr(text)


def test_interface(tiny):
    assert tiny.do_lower_case is True
    assert [tiny.pad_id, tiny.unk_id, tiny.cls_id, tiny.sep_id, tiny.mask_id] == [0, 1, 2, 3, 4]
    assert tiny.inv_vocab[tiny.vocab["cat"]] == "cat"
    ids = tiny.convert_tokens_to_ids(["un", "##aff", "##able"])
    assert tiny.convert_ids_to_tokens(ids) == ["un", "##aff", "##able"]
    assert tiny.convert_ids_to_tokens(np.array(ids, dtype=np.int32)) == ["un", "##aff", "##able"]
    assert tiny.tokenize("Unaffable!") == ["un", "##aff", "##able", "!"]


@pytest.mark.parametrize("text", ["[CLS] the [SEP]", "[cls]the[sep]", "[UNK] [PAD] [MASK]"])
def test_special_strings_stay_text(tiny, text):
    tokens = tiny.tokenize(text)
    assert "[CLS]" not in tokens and "[SEP]" not in tokens and "[PAD]" not in tokens
    assert "[MASK]" not in tokens
    assert tokens[0] == "["
    _check_consistent(tiny, [text])


def test_special_strings_exact_tokens(tiny, tiny_cased):
    assert tiny.tokenize("[CLS] the [SEP]") == ["[", "cl", "##s", "]", "the", "[", "sep", "]"]
    # [UNK] as text: "unk" -> un ##k, never the special id by lookup of the literal string.
    assert tiny.tokenize("[UNK]") == ["[", "un", "##k", "]"]
    # Cased: "CLS" is not in the vocab at all -> one [UNK] for that word, brackets survive.
    assert tiny_cased.tokenize("[CLS]") == ["[", "[UNK]", "]"]
    assert _encode_one(tiny, "[SEP]") == tiny.convert_tokens_to_ids(["[", "sep", "]"])


def test_long_words(tiny):
    for n in (1, 99, 100, 101, 150, 199, 200):
        assert tiny.tokenize("a" * n) == ["a"] + ["##a"] * (n - 1), n
    for n in (201, 250, 1000):
        assert tiny.tokenize("a" * n) == ["[UNK]"], n
    texts = ["b " + "a" * 200 + " b", "b " + "a" * 201 + " b", "A" * 150 + "."]
    assert tiny.tokenize(texts[1]) == ["b", "[UNK]", "b"]
    _check_consistent(tiny, texts)


def test_final_sigma(tiny, tiny_cased):
    # Python's str.lower(): word-final capital sigma -> final sigma; elsewhere -> sigma.
    assert tiny.tokenize("ΟΔΟΣ") == ["ο", "##δ", "##ο", "##ς"]
    assert tiny.tokenize("ΟΔΟΣ.") == ["ο", "##δ", "##ο", "##ς", "."]
    assert tiny.tokenize("ΟΔΟΣΟ") == ["ο", "##δ", "##ο", "##σ", "##ο"]
    assert tiny.tokenize("Σ") == ["σ"]  # no preceding cased letter: not final
    # A dropped control character does not end the word, as in the reference.
    assert tiny.tokenize("ΟΣ\x00Ο") == ["ο", "##σ", "##ο"]
    assert tiny.tokenize("the ΟΔΟΣ cat") == ["the", "ο", "##δ", "##ο", "##ς", "cat"]
    assert tiny_cased.tokenize("ΟΔΟΣ") == ["Ο", "##Δ", "##Ο", "##Σ"]
    _check_consistent(tiny, ["ΟΔΟΣ", "the cat", "ΟΔΟΣΟ Σ", "", "ΟΣ\x00Ο"])
    _check_consistent(tiny_cased, ["ΟΔΟΣ", "the cat"])


def test_private_use_and_surrogates_are_unk(tiny):
    # The reference drops only Cc/Cf characters: private use (Co) stays and makes the word [UNK].
    assert tiny.tokenize("the \ue000 cat") == ["the", "[UNK]", "cat"]
    assert tiny.tokenize("the\U000f0000") == ["[UNK]"]
    assert tiny.tokenize("a \ud800 b") == ["a", "[UNK]", "b"]
    _check_consistent(tiny, ["the \ue000 cat", "a \ud800b", "the cat"])


def test_unicode_cleanup(tiny):
    assert tiny.tokenize("Café\u200b  Cat\t\n\r\x00\x07\ufffd") == ["cafe", "cat"]
    assert tiny.tokenize("the中cat") == ["the", "中", "cat"]
    assert tiny.tokenize("the\u2028cat\u3000a") == ["the", "cat", "a"]
    assert tiny.tokenize("the\x0bcat") == ["[UNK]"]  # \x0b is dropped (Cc), joining the words


def test_encode_ids_empty(tiny):
    ids, offsets = tiny.encode_ids([])
    assert ids.dtype == np.int32 and ids.shape == (0,)
    assert offsets.dtype == np.int64 and offsets.tolist() == [0]

    ids, offsets = tiny.encode_ids(["", "the cat", "", "  \t ", "", "\x00"])
    assert offsets.tolist() == [0, 0, 2, 2, 2, 2, 2]
    assert ids.tolist() == tiny.convert_tokens_to_ids(["the", "cat"])

    ids, offsets = tiny.encode_ids([""])
    assert ids.shape == (0,) and offsets.tolist() == [0, 0]

    # Any iterable of str works.
    ids, offsets = tiny.encode_ids(t for t in ("the", "cat"))
    assert offsets.tolist() == [0, 1, 2]


def test_encode_ids_mixed_batches(tiny, tiny_cased):
    texts = [
        "The cat.", "", "Café ΟΔΟΣ", "the\x00cat", "[SEP] \ue000", "a\x07b", "中 the",
        "'#!", "\ud800", "ΟΣ ΟΣ", "x" * 300, "Unaffable, the cat!",
    ]
    for tok in (tiny, tiny_cased):
        _check_consistent(tok, texts)
        _check_consistent(tok, [t for t in texts if t.isascii()])
        for text in texts:
            _check_consistent(tok, [text])


def test_pickle_roundtrip(tiny):
    clone = pickle.loads(pickle.dumps(tiny))
    texts = ["The cat [SEP]", "ΟΔΟΣ"]
    assert clone.tokenize(texts[0]) == tiny.tokenize(texts[0])
    a, b = clone.encode_ids(texts), tiny.encode_ids(texts)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


# -- property test: every route agrees with the Python port of the reference ----------------------

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None


def _python_wordpiece(vocab: dict[str, int], word: str) -> list[str]:
    if len(word) > tk.MAX_INPUT_CHARS_PER_WORD:
        return ["[UNK]"]
    out, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return ["[UNK]"]
        out.append(piece)
        start = end
    return out


def _python_reference(tok: FullTokenizer, text: str) -> list[str]:
    words = tk._reference_basic_tokenize(text, tok.do_lower_case)
    return [p for w in words for p in _python_wordpiece(tok.vocab, w)]


if given is not None:
    _ALPHABET = st.sampled_from(
        list("abcABC .,'[]#!\t\n\x00\x07\x0b\x7fΣσςΟΔΆ\u0301\u200b\u2028\u3000中\ue000\ufffdİß")
        + ["[CLS]", "[SEP]", "the", "The", "cat", "unaffable", "\u061d", "\U0002b820", "a" * 199]
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.lists(_ALPHABET, max_size=12).map("".join), max_size=6), st.booleans())
    def test_matches_python_reference(tiny_vocab_file, texts, do_lower_case):
        tok = _tokenizer_cache(str(tiny_vocab_file), do_lower_case)
        ids, offsets = tok.encode_ids(texts)
        for i, text in enumerate(texts):
            want = _python_reference(tok, text)
            assert tok.tokenize(text) == want, repr(text)
            assert ids[offsets[i] : offsets[i + 1]].tolist() == tok.convert_tokens_to_ids(want)


_TOKENIZERS: dict = {}


def _tokenizer_cache(path: str, do_lower_case: bool) -> FullTokenizer:
    key = (Path(path).read_bytes(), do_lower_case)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = FullTokenizer(path, do_lower_case)
    return _TOKENIZERS[key]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_divergent_table_matches_probe(do_lower_case):
    """The precomputed table of characters HF and the reference disagree on is still right.

    Probes every code point through both implementations (a few CPU-seconds), so it runs in CI
    or when BERT_DATA_SLOW_TESTS is set.
    """
    if not (os.environ.get("CI") or os.environ.get("BERT_DATA_SLOW_TESTS")):
        pytest.skip("slow: set BERT_DATA_SLOW_TESTS=1 (always runs when CI is set)")
    key = (unicodedata.unidata_version, tokenizers.__version__)
    if key != tk._PRECOMPUTED_KEY:
        pytest.skip(f"table is for {tk._PRECOMPUTED_KEY}, running {key}: probed at run time instead")
    probed = tk._format_ranges(tk._ranges(tk._probe_divergent(do_lower_case)))
    assert probed == tk._PRECOMPUTED[do_lower_case].strip()


# -- the probe, kept between processes (versions the table was not precomputed for) ---------------


@pytest.fixture
def other_versions(monkeypatch, tmp_path):
    """Versions the table was not precomputed for, a cache directory of the test's own, and a probe
    that answers the precomputed table (so the test stays fast) and counts its calls."""
    monkeypatch.setattr(tk, "_PRECOMPUTED_KEY", ("0.0.0", "0.0.0"))
    monkeypatch.setenv("BERT_DATA_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[bool] = []

    def probe(do_lower_case: bool) -> list[int]:
        calls.append(do_lower_case)
        return [cp for lo, hi in tk._parse_ranges(tk._PRECOMPUTED[do_lower_case]) for cp in range(lo, hi + 1)]

    monkeypatch.setattr(tk, "_probe_divergent", probe)
    tk._divergent_ranges.cache_clear()
    tk._divergent_re.cache_clear()
    yield calls, tmp_path / "cache"
    tk._divergent_ranges.cache_clear()
    tk._divergent_re.cache_clear()


def _fresh_process_ranges(do_lower_case: bool) -> tuple:
    """``_divergent_ranges`` as a new process finds it (the in-process cache cleared)."""
    tk._divergent_ranges.cache_clear()
    return tk._divergent_ranges(do_lower_case)


def test_probe_is_kept_for_the_next_process(other_versions):
    calls, cache = other_versions
    first = _fresh_process_ranges(True)
    assert calls == [True] and len(list(cache.glob("divergent-uncased-*.txt"))) == 1
    assert _fresh_process_ranges(True) == first and calls == [True]  # read back, not probed
    cased = _fresh_process_ranges(False)  # the other casing has its own file
    assert calls == [True, False] and len(list(cache.glob("divergent-*.txt"))) == 2
    assert _fresh_process_ranges(False) == cased and calls == [True, False]
    assert not list(cache.glob("*.tmp"))  # no temporary file left behind


def test_tokenizing_from_a_kept_probe_is_exact(other_versions, tiny_vocab_file):
    calls, _ = other_versions
    texts = ["Café ΟΔΟΣ", "the \ue000 cat", "a \ud800 b", "中 the", "ΟΣ ΟΣ", "x\u0378y", "the cat"]
    probed = FullTokenizer(str(tiny_vocab_file))
    want = [probed.tokenize(t) for t in texts]
    tk._divergent_re.cache_clear()
    tk._divergent_ranges.cache_clear()
    kept = FullTokenizer(str(tiny_vocab_file))
    assert [kept.tokenize(t) for t in texts] == want and calls == [True]
    _check_consistent(kept, texts)


@pytest.mark.parametrize(
    "damage",
    ["torn", "edited range", "other versions", "other casing", "not ascii", "empty", "range beyond unicode"],
)
def test_a_kept_probe_that_does_not_check_is_probed_again(other_versions, damage):
    calls, cache = other_versions
    want = _fresh_process_ranges(True)
    (path,) = cache.glob("divergent-uncased-*.txt")
    text = path.read_text(encoding="ascii")
    header, spec, digest, _ = text.split("\n")
    damaged = {
        "torn": text[: len(text) // 2],
        "edited range": text.replace(spec.split()[0], "61e", 1),
        "other versions": text.replace(f"tokenizers={tokenizers.__version__} ", "tokenizers=9.9.9 "),
        "other casing": text.replace("lower=1", "lower=0"),
        "not ascii": text.replace("divergent", "divergënt"),
        "empty": "",
        "range beyond unicode": tk._probe_cache_text(True, (unicodedata.unidata_version, tokenizers.__version__), "110000"),
    }[damage]
    assert damaged != text
    path.write_bytes(damaged.encode("utf-8"))
    assert _fresh_process_ranges(True) == want and calls == [True, True]  # probed again...
    assert path.read_text(encoding="ascii") == text  # ...and kept again, whole


@pytest.mark.parametrize("thing", ["directory", "fifo", "symlink to a device"])
def test_something_else_at_the_kept_probes_path_is_probed_around(other_versions, thing):
    """Not a regular file where the kept probe goes: never read (a FIFO would block the read); the
    process probes and keeps its table in its place (a rename replaces a FIFO or a link itself,
    never what the link points to), or, where a directory is in the way, every process probes."""
    calls, cache = other_versions
    want = _fresh_process_ranges(True)
    (path,) = cache.glob("divergent-uncased-*.txt")
    kept = path.read_bytes()
    path.unlink()
    {"directory": path.mkdir, "fifo": lambda: os.mkfifo(path), "symlink to a device": lambda: path.symlink_to("/dev/zero")}[thing]()
    assert _fresh_process_ranges(True) == want and _fresh_process_ranges(True) == want
    if thing == "directory":
        assert calls == [True, True, True] and path.is_dir()
    else:
        assert calls == [True, True] and not path.is_symlink() and path.read_bytes() == kept
    assert not list(cache.glob("*.tmp"))


def test_a_cache_that_cannot_be_written_costs_only_time(other_versions, monkeypatch, tmp_path):
    calls, _ = other_versions
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("BERT_DATA_CACHE_DIR", str(blocker / "cache"))
    want = _fresh_process_ranges(True)
    assert _fresh_process_ranges(True) == want and calls == [True, True]
    monkeypatch.setenv("BERT_DATA_CACHE_DIR", "")  # empty: keep nothing
    assert tk._probe_cache_path(True, ("1", "2")) is None
    assert _fresh_process_ranges(True) == want and calls == [True, True, True]


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    key, code = ("15.0.0", "0.22.1"), tk._probe_code_digest()
    assert code and len(code) == 16
    monkeypatch.delenv("BERT_DATA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tk._probe_cache_path(False, key) == str(tmp_path / "xdg" / "bert_data" / f"divergent-cased-15.0.0-0.22.1-{code}.txt")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tk._probe_cache_path(True, ("15.0.0", "0.22.1/../x")) == str(
        tmp_path / "home" / ".cache" / "bert_data" / f"divergent-uncased-15.0.0-0.22.1_.._x-{code}.txt")
    monkeypatch.setenv("BERT_DATA_CACHE_DIR", "~/mine")
    assert tk._probe_cache_path(True, key) == str(tmp_path / "home" / "mine" / f"divergent-uncased-15.0.0-0.22.1-{code}.txt")
    # Nothing is kept rather than a directory made relative to whatever the working directory is:
    # a relative BERT_DATA_CACHE_DIR or XDG_CACHE_HOME, no home to expand (HOME unset and no
    # password entry, or HOME empty: "/"), an empty BERT_DATA_CACHE_DIR (asked for).
    for value in ("cache", "./cache", ""):
        monkeypatch.setenv("BERT_DATA_CACHE_DIR", value)
        assert tk._probe_cache_path(True, key) is None, value
    monkeypatch.delenv("BERT_DATA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert tk._probe_cache_path(True, key) is None
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")
    assert tk._probe_cache_path(True, key) is None
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)
    assert tk._probe_cache_path(True, key) is None


def test_a_table_kept_by_other_code_is_not_read(other_versions, monkeypatch):
    """The kept table is named and stamped with a digest of the module that probes: an upgrade,
    or another checkout sharing the directory, probes for itself instead of trusting a table its
    own code did not make."""
    calls, cache = other_versions
    want = _fresh_process_ranges(True)
    (path,) = cache.glob("divergent-uncased-*.txt")
    assert f"code={tk._probe_code_digest()} " in path.read_text()
    tk._probe_code_digest.cache_clear()
    monkeypatch.setattr(tk, "__file__", str(cache / "other_tokenization.py"))
    (cache / "other_tokenization.py").write_text("# another version of the module\n")
    try:
        assert _fresh_process_ranges(True) == want and calls == [True, True]
        assert len(list(cache.glob("divergent-uncased-*.txt"))) == 2
        (cache / "other_tokenization.py").unlink()  # no source to digest: nothing kept, nothing read
        tk._probe_code_digest.cache_clear()
        assert tk._probe_cache_path(True, ("1", "2")) is None
        assert _fresh_process_ranges(True) == want and calls == [True, True, True]
    finally:
        tk._probe_code_digest.cache_clear()


def test_a_table_kept_by_another_user_is_not_read(other_versions, monkeypatch):
    """A shared cache directory: a file owned by another user is not trusted; the process probes."""
    calls, cache = other_versions
    want = _fresh_process_ranges(True)
    (path,) = cache.glob("divergent-uncased-*.txt")
    assert _fresh_process_ranges(True) == want and calls == [True]  # its own file: read
    monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 1)  # as another user sees it
    assert _fresh_process_ranges(True) == want and calls == [True, True]


def test_a_tokenizer_finds_the_divergent_characters_at_its_first_non_ascii_text(tiny_vocab_file, monkeypatch):
    """A run from the token cache tokenizes nothing: making its tokenizer must not probe."""
    tok = FullTokenizer(str(tiny_vocab_file))
    assert "_divergent" not in vars(tok)
    tok.encode_ids(["the cat", "Unaffable!"])
    assert "_divergent" not in vars(tok)
    assert tok.tokenize("Café") == ["cafe"] and "_divergent" in vars(tok)
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.tokenize("ΟΔΟΣ") == tok.tokenize("ΟΔΟΣ")


# ------------------------------------------------------------------------------------------------
# load_vocab
# ------------------------------------------------------------------------------------------------


def test_load_vocab_ok(tmp_path):
    path = _write(tmp_path / "v.txt", SPECIALS + ["the", "##s"], ending="\r\n", final=False)
    assert load_vocab(str(path)) == {t: i for i, t in enumerate(SPECIALS + ["the", "##s"])}
    assert load_vocab(path) == load_vocab(str(path))  # os.PathLike accepted too


def test_load_vocab_blank_line(tmp_path):
    path = _write(tmp_path / "blank.txt", SPECIALS[:2] + [""] + SPECIALS[2:])
    with pytest.raises(VocabError) as e:
        load_vocab(str(path))
    assert "blank.txt" in str(e.value) and "line 3" in str(e.value)


def test_load_vocab_whitespace_only_line(tmp_path):
    path = _write(tmp_path / "ws.txt", SPECIALS + ["the", "  \t"])
    with pytest.raises(VocabError, match="line 7"):
        load_vocab(str(path))


def test_load_vocab_duplicate(tmp_path):
    path = _write(tmp_path / "dup.txt", SPECIALS + ["the", "[UNK]"])
    with pytest.raises(VocabError) as e:
        load_vocab(str(path))
    msg = str(e.value)
    assert "dup.txt" in msg and "line 7" in msg and "line 2" in msg and "[UNK]" in msg


@pytest.mark.parametrize("missing", SPECIALS)
def test_load_vocab_missing_special(tmp_path, missing):
    path = _write(tmp_path / "nospecial.txt", [t for t in SPECIALS if t != missing] + ["the"])
    with pytest.raises(VocabError) as e:
        load_vocab(str(path))
    msg = str(e.value)
    assert "nospecial.txt" in msg and missing in msg
    assert all(t not in msg for t in SPECIALS if t != missing)


def test_load_vocab_missing_file(tmp_path):
    with pytest.raises(VocabError, match="nope.txt"):
        load_vocab(str(tmp_path / "nope.txt"))
    with pytest.raises(VocabError, match="directory"):
        load_vocab(str(tmp_path))


def test_load_vocab_empty_and_bad_encoding(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(VocabError, match="empty.txt.*empty"):
        load_vocab(str(empty))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("\n".join(SPECIALS).encode() + b"\ncaf\xe9\n")
    with pytest.raises(VocabError, match="line 6"):
        load_vocab(str(bad))
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + "\n".join(SPECIALS).encode() + b"\n")
    with pytest.raises(VocabError, match="byte-order mark"):
        load_vocab(str(bom))


if given is not None:

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(["the", "##s", "caf\u00e9", " x ", "", "\r", "a\rb", "\ufeff", "\x1c", "the",
                                     "\u2028", "[UNK]"]), max_size=12), st.booleans(), st.binary(max_size=3))
    def test_load_vocab_fast_reading_is_the_line_reading(lines, final_newline, junk):
        """The bulk reading returns the line-by-line reading's vocabulary, or defers to it
        (None) for anything that reading refuses or must look at: one source of every message."""
        data = "\n".join(lines).encode() + (b"\n" if final_newline else b"") + junk
        fast = tk._parse_vocab_fast(data)
        try:
            slow = tk._parse_vocab_lines("v.txt", data)
        except VocabError:
            assert fast is None
            return
        assert fast is None or list(fast.items()) == list(slow.items())
        if b"\r" not in data and not data.startswith(b"\xef\xbb\xbf"):
            assert fast is not None  # the fast reading takes every plain file the loop accepts


def test_full_tokenizer_raises_vocab_error(tmp_path):
    with pytest.raises(VocabError):
        FullTokenizer(str(tmp_path / "missing.txt"))


# ------------------------------------------------------------------------------------------------
# case_mismatch_warning
# ------------------------------------------------------------------------------------------------


def _vocab(tokens):
    return {t: i for i, t in enumerate(SPECIALS + [f"[unused{k}]" for k in range(50)] + tokens)}


def test_case_mismatch_warning():
    words = [f"w{c}{d}" for c in "abcdefghij" for d in "klmnopqrst"]  # 100 alphabetic-ish words
    words = ["".join(ch for ch in w if ch.isalpha()) for w in words]
    uncased = _vocab(words + ["##" + w for w in words] + ["123", "é"])
    cased = _vocab(words + ["The", "Cat", "##Dog"])  # 3 of 103 alphabetic tokens: ~3% > 1%

    assert case_mismatch_warning(uncased, True) is None
    assert case_mismatch_warning(cased, False) is None

    warn = case_mismatch_warning(uncased, False)
    assert warn and "--do_lower_case" in warn and "uncased" in warn
    warn = case_mismatch_warning(cased, True)
    assert warn and "--do_lower_case" in warn and "cased" in warn

    # Exactly at 1%: still uncased; specials like [UNK]/[unused0] never count.
    one_percent = _vocab(words[:99] + ["Abc"])
    assert case_mismatch_warning(one_percent, True) is None
    assert case_mismatch_warning(_vocab([]), True) is None


def test_encode_ids_in_chunks_equals_one_call(tmp_path, monkeypatch):
    """Chunking bounds memory; ids and offsets must not change (a non-ASCII text mid-way too)."""
    import bert_data.tokenization as tokenization

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + ["the", "cat", "sat", "caf", "##e", "!", "a", "##b"]) + "\n")
    tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
    texts = [["The cat sat!", "", "café", "ab ab", "zzz"][i % 5] for i in range(23)]
    whole_ids, whole_offsets = tokenizer.encode_ids(texts)
    monkeypatch.setattr(tokenization, "ENCODE_CHUNK_TEXTS", 4)
    ids, offsets = tokenizer.encode_ids(texts)
    assert ids.tolist() == whole_ids.tolist() and offsets.tolist() == whole_offsets.tolist()
    monkeypatch.setattr(tokenization, "ENCODE_CHUNK_CHARS", 10)  # by characters too
    ids, offsets = tokenizer.encode_ids(texts)
    assert ids.tolist() == whole_ids.tolist() and offsets.tolist() == whole_offsets.tolist()
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == [
        tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts
    ]


def test_a_vocabulary_read_again_is_the_same_and_a_fresh_dict(tmp_path):
    """load_vocab keeps the last vocabulary it accepted with its bytes (a run reads its vocabulary
    twice): the same bytes give an equal, separate dict; other bytes at the same path are read."""
    from bert_data.tokenization import load_vocab

    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    first = load_vocab(str(path))
    first["changed-by-the-caller"] = 99
    again = load_vocab(str(path))
    assert again == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5} and again is not first
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nworld\n")
    assert "world" in load_vocab(str(path)) and "hello" not in load_vocab(str(path))
