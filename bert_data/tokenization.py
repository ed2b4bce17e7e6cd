"""BERT WordPiece tokenization on HF ``tokenizers``, token-for-token identical to
google-research/bert's reference ``tokenization.FullTokenizer``; the one vocabulary loader;
and the stage's output, :class:`TokenizedGroup`. (Over 600 lines on purpose: the exact port of
the reference and the fast routes that must agree with it read best side by side.)

The HF pipeline is configured to reproduce the reference where HF's defaults differ:

* no special/added tokens are registered, so literal ``[CLS]``/``[SEP]``/... in raw text are
  tokenized as ordinary text (``[``, ``cl``, ``##s``, ``]``), as the reference does;
* ``max_input_chars_per_word=200`` (the reference value; HF's default is 100).

Each text takes the cheapest route that is exact for it:

1. ASCII texts (:meth:`FullTokenizer.encode_ids`): the optional C accelerator
   ``bert_data._wordpiece`` (built by ``setup.py`` from ``_wordpiece.c``) does the whole
   reference tokenizer (cleaning, lowercasing, whitespace and punctuation splitting, WordPiece)
   in one pass over the batch. Without it (``_wordpiece`` None here, the tests' switch too),
   cleaning, lowercasing and punctuation splitting are done on the whole batch with C-level
   ``bytes`` operations, and Rust splits on whitespace and runs WordPiece, once for the batch.
2. Other texts: HF ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``.
3. Texts holding a character on which (2) and the reference disagree: the basic tokenization
   runs in an exact Python port of the reference ``BasicTokenizer``, WordPiece in Rust.  Those
   characters are:

   * Greek capital sigma ``Σ`` (lowercasing only): Python's ``str.lower()`` maps a word-final
     ``Σ`` to ``ς``; HF lowercases char by char (always ``σ``);
   * private-use characters (category ``Co``): the reference drops only ``Cc``/``Cf`` characters
     and keeps these (the word becomes ``[UNK]``); HF drops them;
   * U+2B820..U+2B91F: in the reference's CJK ranges, not in HF's (which starts at U+2B920);
   * a few hundred characters whose Unicode properties differ between Python's ``unicodedata``
     and the (older or newer) tables compiled into ``tokenizers``;
   * lone surrogates, which cannot be passed to Rust at all.

   The per-version characters are precomputed for the Python-Unicode / ``tokenizers`` versions
   named in ``_PRECOMPUTED_KEY``; under other versions they are found by probing every code
   point through both implementations (2.5-4 CPU-s), once per machine and casing: the result is
   kept in ``divergent-*.txt`` under ``$BERT_DATA_CACHE_DIR`` (default
   ``$XDG_CACHE_HOME/bert_data``, else ``~/.cache/bert_data``; an empty or relative value keeps
   nothing) and read back by every later process, each worker of a run included. A file that
   does not check (versions, casing, a digest of this module's source, checksum, owner) is probed
   again; a cache that cannot be written costs only time.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from bert_data.errors import VocabError
from bert_data.format.native import bind_optional

WORDPIECE_API = 1  # the interface of bert_data/_wordpiece.c this module expects (its API constant)

_wordpiece = bind_optional("bert_data._wordpiece", WORDPIECE_API, "tokenizing ASCII text without it")  # see setup.py

__all__ = [
    "SPECIAL_TOKENS",
    "NEVER_MASKED_TOKENS",
    "FullTokenizer",
    "TokenizedGroup",
    "case_mismatch_warning",
    "continuation_table",
    "load_vocab",
    "tokenize_group",
    "vocab_tokens",
]

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
#: The tokens every vocabulary must hold (a vocabulary without one is refused).
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, CLS, SEP, MASK)
#: The tokens that are never chosen for a masked-LM prediction ([UNK] may be).
NEVER_MASKED_TOKENS: tuple[str, ...] = (PAD, CLS, SEP, MASK)

MAX_VOCAB_BYTES = 64 << 20  # the largest vocabularies are a few MB

#: Reference ``WordpieceTokenizer.max_input_chars_per_word``.
MAX_INPUT_CHARS_PER_WORD = 200
ENCODE_CHUNK_TEXTS = 4096  # texts per HF call in encode_ids ...
ENCODE_CHUNK_CHARS = 1_000_000  # ... and characters (a chunk holds at least one text)


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


def load_vocab(vocab_file: str) -> dict[str, int]:
    """Read a ``vocab.txt`` (one token per line, id = 0-based line index, UTF-8).

    Like the reference, each line has its surrounding whitespace stripped (for a valid vocabulary
    this only removes the ``\\n`` / ``\\r\\n`` line ending). A ``\\r`` elsewhere (a CR-only file,
    or a stray one) is refused: BERT's ``tf.gfile`` reader drops it, Python's text mode (Hugging
    Face's ``BertTokenizer``) starts a new line (a new id) there and the ``tokenizers`` library
    keeps it in the token, so no reading of such a file agrees with every model that uses it. Unlike the
    reference, which silently accepts them, blank lines, duplicate tokens, an empty file and
    missing special tokens are rejected with a :class:`~bert_data.errors.VocabError` naming the
    file and 1-based line.
    """
    path = os.fspath(vocab_file)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise VocabError(f"vocab file {path!r} does not exist") from None
    except OSError as e:
        raise VocabError(f"vocab file {path!r} cannot be read: {e.strerror or e}") from None
    except ValueError as e:  # a NUL byte, or characters the file system encoding cannot write
        raise VocabError(f"vocab file {path!r} is not a usable file name ({e}); give the path of vocab.txt") from None
    if stat.S_ISDIR(info.st_mode):
        raise VocabError(f"vocab file {path!r} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block, a device never end
        raise VocabError(f"vocab file {path!r} is not a regular file (a FIFO or device); give vocab.txt")
    if info.st_size > MAX_VOCAB_BYTES:
        raise VocabError(f"vocab file {path!r} is {info.st_size} bytes: not a vocab.txt (at most {MAX_VOCAB_BYTES})")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise VocabError(f"vocab file {path!r} does not exist") from None
    except IsADirectoryError:
        raise VocabError(f"vocab file {path!r} is a directory, not a file") from None
    except OSError as e:
        raise VocabError(f"vocab file {path!r} cannot be read: {e.strerror or e}") from None

    if not data.strip():
        raise VocabError(f"vocab file {path!r} is empty")

    last = _last_vocab
    if last is not None and last[0] == data:  # these very bytes were read (a run reads its vocabulary twice)
        return dict(last[1])
    vocab = _parse_vocab_fast(data)
    if vocab is None:  # something to refuse (or a CRLF file): the line by line reading names the line
        vocab = _parse_vocab_lines(path, data)

    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise VocabError(
            f"vocab file {path!r} ({len(vocab)} lines) lacks the special token(s) "
            + ", ".join(missing)
        )
    _remember_vocab(data, vocab)
    return vocab


_last_vocab: tuple[bytes, dict[str, int]] | None = None  # the last vocabulary load_vocab accepted, and its bytes


def _remember_vocab(data: bytes, vocab: dict[str, int]) -> None:
    global _last_vocab
    _last_vocab = (data, dict(vocab))  # (a copy: the caller may change its own)


def _parse_vocab_fast(data: bytes) -> dict[str, int] | None:
    """The vocabulary of a file :func:`_parse_vocab_lines` would accept without a word, read in
    a few bulk operations (11 ms for BERT's 30,522 lines, where the loop takes 26 ms: every run
    reads the vocabulary twice); None when the loop must look (a decoding error, a carriage
    return, a BOM, a blank or duplicate line), so every message still comes from one place."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text or text.startswith("\ufeff"):
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    tokens = [line.strip() for line in lines]
    vocab = dict(zip(tokens, range(len(tokens))))
    return vocab if len(vocab) == len(tokens) and "" not in vocab else None


def _parse_vocab_lines(path: str, data: bytes) -> dict[str, int]:
    """:func:`load_vocab`'s reading line by line: the first line it refuses is named."""
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":  # the final newline ends the last line, it does not start one
        raw_lines.pop()

    vocab: dict[str, int] = {}
    for index, raw in enumerate(raw_lines):
        lineno = index + 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VocabError(
                f"vocab file {path!r}, line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start})"
            ) from None
        if "\r" in (line[:-1] if line.endswith("\r") else line):
            raise VocabError(
                f"vocab file {path!r}, line {lineno}: a carriage return (\\r) inside the line; vocabulary readers "
                "disagree on it (BERT's drops it, Python's text mode starts a new token there, so ids would "
                "differ): save the file with LF line ends, one token per line"
            )
        if index == 0 and line.startswith("\ufeff"):
            raise VocabError(
                f"vocab file {path!r}, line 1: starts with a UTF-8 byte-order mark; "
                "save the file as UTF-8 without BOM"
            )
        token = line.strip()
        if not token:
            raise VocabError(
                f"vocab file {path!r}, line {lineno}: blank line (every line must hold one token)"
            )
        first = vocab.get(token)
        if first is not None:
            raise VocabError(
                f"vocab file {path!r}, line {lineno}: duplicate token {token!r} "
                f"(first on line {first + 1})"
            )
        vocab[token] = index
    return vocab


def vocab_tokens(vocab: dict[str, int]) -> list[str]:
    """The tokens of a vocabulary from :func:`load_vocab`, indexed by id."""
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    return tokens


def continuation_table(vocab: dict[str, int]) -> np.ndarray:
    """``table[id]`` is True when token ``id`` is a ``##`` WordPiece continuation (whole-word masking)."""
    table = np.zeros(len(vocab), dtype=bool)
    for token, index in vocab.items():
        table[index] = token.startswith("##")
    return table


def _looks_cased(vocab: dict[str, int]) -> bool:
    alpha = upper = 0
    for token in vocab:
        if token.startswith("[") and token.endswith("]"):
            continue
        body = token[2:] if token.startswith("##") else token
        if body.isascii() and body.isalpha():
            alpha += 1
            if not body.islower():
                upper += 1
    return upper > 0.01 * alpha


def case_mismatch_warning(vocab: dict[str, int], do_lower_case: bool) -> str | None:
    """A human-readable warning when ``do_lower_case`` looks wrong for ``vocab``, else ``None``.

    A vocabulary is considered cased when more than 1% of its ASCII-alphabetic tokens (``##``
    prefix stripped, ``[...]`` specials ignored) contain an uppercase letter.
    """
    cased = _looks_cased(vocab)
    if cased and do_lower_case:
        return (
            "the vocabulary looks cased (many tokens contain uppercase letters) but "
            "--do_lower_case is set: all text will be lowercased and the cased tokens never used; "
            "pass --no-do_lower_case for a cased vocabulary"
        )
    if not cased and not do_lower_case:
        return (
            "the vocabulary looks uncased (next to no tokens with uppercase letters) but --do_lower_case "
            "is off: words with uppercase letters will be split badly or become [UNK]; "
            "pass --do_lower_case for an uncased vocabulary"
        )
    return None


# --------------------------------------------------------------------------------------------
# Exact port of the reference BasicTokenizer (google-research/bert tokenization.py, Apache-2.0)
# --------------------------------------------------------------------------------------------


def _is_whitespace(char: str) -> bool:
    if char == " " or char == "\t" or char == "\n" or char == "\r":
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char == "\t" or char == "\n" or char == "\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp: int) -> bool:
    return (
        (0x4E00 <= cp <= 0x9FFF)
        or (0x3400 <= cp <= 0x4DBF)
        or (0x20000 <= cp <= 0x2A6DF)
        or (0x2A700 <= cp <= 0x2B73F)
        or (0x2B740 <= cp <= 0x2B81F)
        or (0x2B820 <= cp <= 0x2CEAF)
        or (0xF900 <= cp <= 0xFAFF)
        or (0x2F800 <= cp <= 0x2FA1F)
    )


def _whitespace_tokenize(text: str) -> list[str]:
    return text.split()  # == reference: strip(), then split() (empty -> [])


# Per-character memos of the reference predicates (same results, less Python work per char).
_MEMO_LIMIT = 1 << 16
_CLEAN_MEMO: dict[str, str] = {}
_PUNCT_MEMO: dict[str, bool] = {}


def _clean_char(char: str) -> str:
    """What the reference's ``_clean_text`` + ``_tokenize_chinese_chars`` make of ``char``."""
    cp = ord(char)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
        out = ""
    elif _is_whitespace(char):
        out = " "
    elif _is_chinese_char(cp):
        out = f" {char} "
    else:
        out = char
    if len(_CLEAN_MEMO) < _MEMO_LIMIT:
        _CLEAN_MEMO[char] = out
    return out


def _is_punctuation_memo(char: str) -> bool:
    punct = _PUNCT_MEMO.get(char)
    if punct is None:
        punct = _is_punctuation(char)
        if len(_PUNCT_MEMO) < _MEMO_LIMIT:
            _PUNCT_MEMO[char] = punct
    return punct


def _split_on_punc(text: str) -> list[str]:
    output: list[str] = []
    current: list[str] = []
    for char in text:
        if _is_punctuation_memo(char):
            if current:
                output.append("".join(current))
                current = []
            output.append(char)
        else:
            current.append(char)
    if current:
        output.append("".join(current))
    return output


def _reference_basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    """The reference ``BasicTokenizer(do_lower_case).tokenize(text)``."""
    memo = _CLEAN_MEMO
    cleaned = "".join(
        [out if (out := memo.get(char)) is not None else _clean_char(char) for char in text]
    )
    split_tokens: list[str] = []
    for token in _whitespace_tokenize(cleaned):
        if do_lower_case:
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(c for c in token if unicodedata.category(c) != "Mn")
        split_tokens.extend(_split_on_punc(token))
    return _whitespace_tokenize(" ".join(split_tokens))


# --------------------------------------------------------------------------------------------
# Characters on which HF's BertNormalizer/BertPreTokenizer and the reference disagree
# --------------------------------------------------------------------------------------------

_SIGMA = 0x03A3
_SURROGATES = "\ud800-\udfff"
_SURROGATE_RE = re.compile(f"[{_SURROGATES}]")
# Private use (category Co) in every Unicode version.
_PRIVATE_USE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
# Code points outside these ranges are unassigned in every Unicode version up to 16.0 (planes
# 4-13) or private use (planes 15-16): the probe only needs to look at these.
_PROBE_RANGES = ((0x80, 0x3FFFF), (0xE0000, 0xEFFFF))
_PROBE_SEP = "|"

# Output of _probe_divergent() for the versions named in the key: "start[-end]" in hex.
_PRECOMPUTED_KEY = ("14.0.0", "0.23.3")
_PRECOMPUTED: dict[bool, str] = {
    True: (
        "61d 7fd 890-891 898-89f 8ca-8e2 9fd-9fe a76 afa-aff b55 c04 c3c c77 c84 d00 d3b-d3c d81 "
        "eba 166d 1734 180f 1885-1886 1abf-1ace 1b7d-1b7e 1c89 1df6-1dfb 2e43-2e4f 2e52-2e5d "
        "a7cb-a7cc a7ce a7d2 a7d4 a7da a7dc a82c a8c5 a8ff a9bd 10d24-10d27 10d50-10d65 "
        "10eab-10ead 10f46-10f50 10f55-10f59 10f82-10f89 11070 11073-11074 110c2 110cd 111c9 "
        "111cf 1123e 1133b 11438-1143f 11442-11444 11446 1144b-1144f 1145a-1145b 1145d-1145e "
        "11660-1166c 116b9 1182f-11837 11839-1183b 11938 1193b-1193c 1193e 11943-11946 "
        "119d4-119d7 119da-119db 119e0 119e2 11a01-11a0a 11a33-11a38 11a3b-11a47 11a51-11a56 "
        "11a59-11a5b 11a8a-11a96 11a98-11a9c 11a9e-11aa2 11c30-11c36 11c38-11c3d 11c3f "
        "11c41-11c45 11c70-11c71 11c92-11ca7 11caa-11cb0 11cb2-11cb3 11cb5-11cb6 11d31-11d36 "
        "11d3a 11d3c-11d3d 11d3f-11d45 11d47 11d90-11d91 11d95 11d97 11ef3-11ef4 11ef7-11ef8 "
        "11fff 12ff1-12ff2 13430-13438 16e97-16e9a 16ea0-16eb8 16f4f 16fe2 16fe4 1cf00-1cf2d "
        "1cf30-1cf46 1e000-1e006 1e008-1e018 1e01b-1e021 1e023-1e024 1e026-1e02a 1e130-1e136 "
        "1e2ae 1e2ec-1e2ef 1e944-1e94a 1e95e-1e95f 2b820-2b91f "
    ),
    False: (
        "61d 890-891 8e2 9fd a76 c77 c84 166d 1b7d-1b7e 2e43-2e4f 2e52-2e5d 10ead 10f55-10f59 "
        "10f86-10f89 110cd 111c9 1144b-1144f 1145a-1145b 1145d 11660-1166c 116b9 1183b "
        "11944-11946 119e2 11a3f-11a46 11a9a-11a9c 11a9e-11aa2 11c41-11c45 11c70-11c71 "
        "11ef7-11ef8 11fff 12ff1-12ff2 13430-13438 16e97-16e9a 16fe2 1e95e-1e95f 2b820-2b91f "
    ),
}


def _probe_divergent(do_lower_case: bool) -> list[int]:
    """Code points (outside private use and Σ) that HF and the reference treat differently.

    Each candidate ``c`` is probed as the word ``a{c}b``, in chunks joined by ``|`` (ASCII
    punctuation on both sides, so every probe comes back as its own run of words).
    """
    hf = _build_hf_tokenizer({UNK: 0}, do_lower_case)
    normalize, pre_tokenize = hf.normalizer.normalize_str, hf.pre_tokenizer.pre_tokenize_str
    candidates = [
        cp
        for lo, hi in _PROBE_RANGES
        for cp in range(lo, hi + 1)
        if not (0xD800 <= cp <= 0xDFFF) and unicodedata.category(chr(cp)) != "Co"
    ]
    divergent: list[int] = []

    def split_runs(words: list[str]) -> list[list[str]]:
        runs: list[list[str]] = [[]]
        for w in words:
            if w == _PROBE_SEP:
                runs.append([])
            else:
                runs[-1].append(w)
        return runs

    chunk = 4096
    for start in range(0, len(candidates), chunk):
        cps = candidates[start : start + chunk]
        text = _PROBE_SEP.join(f"a{chr(cp)}b" for cp in cps)
        ref_runs = split_runs(_reference_basic_tokenize(text, do_lower_case))
        hf_runs = split_runs([w for w, _ in pre_tokenize(normalize(text))])
        if len(ref_runs) == len(cps) and len(hf_runs) == len(cps):
            divergent.extend(cp for cp, r, h in zip(cps, ref_runs, hf_runs) if r != h)
        else:  # a candidate produced the separator: probe this chunk one by one
            for cp in cps:
                probe = f"a{chr(cp)}b"
                ref = _reference_basic_tokenize(probe, do_lower_case)
                if ref != [w for w, _ in pre_tokenize(normalize(probe))]:
                    divergent.append(cp)
    return divergent


def _ranges(cps: Iterable[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for cp in sorted(set(cps)):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [(lo, hi) for lo, hi in out]


def _format_ranges(ranges: Iterable[tuple[int, int]]) -> str:
    return " ".join(f"{lo:x}" if lo == hi else f"{lo:x}-{hi:x}" for lo, hi in ranges)


def _parse_ranges(spec: str) -> list[tuple[int, int]]:
    out = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


_PROBE_CACHE_FORMAT = "bert_data divergent 1"  # the first line of a kept probe


@functools.lru_cache(maxsize=None)
def _probe_code_digest() -> str | None:
    """A digest of this module's source, part of a kept probe's name and header: the probe and the
    reference port it runs live here, so a kept table is never read by other code than made it
    (an upgrade, another checkout sharing ~/.cache). None (keep nothing) where the source cannot
    be read."""
    import hashlib

    try:
        with open(__file__, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()[:16]
    except (OSError, NameError):
        return None


def _probe_cache_path(do_lower_case: bool, key: tuple[str, str]) -> str | None:
    """Where the probe for ``key`` is kept between processes, or None: ``BERT_DATA_CACHE_DIR``
    empty or relative (never a directory relative to whatever the working directory is), no home
    to put ``~/.cache`` in, or no source to digest."""
    root = os.environ.get("BERT_DATA_CACHE_DIR")
    if root is None:
        home = os.path.expanduser("~")
        base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if home not in ("", "/") else "")
        root = os.path.join(base, "bert_data") if base else ""
    root = os.path.expanduser(root)
    digest = _probe_code_digest()
    if not os.path.isabs(root) or digest is None:
        return None
    casing = "uncased" if do_lower_case else "cased"
    safe = "-".join(re.sub(r"[^0-9A-Za-z.+]", "_", part) for part in (*key, digest))
    return os.path.join(root, f"divergent-{casing}-{safe}.txt")


def _probe_cache_text(do_lower_case: bool, key: tuple[str, str], spec: str) -> str:
    import hashlib

    header = (f"{_PROBE_CACHE_FORMAT} unicode={key[0]} tokenizers={key[1]} code={_probe_code_digest()} "
              f"lower={int(do_lower_case)}")
    return f"{header}\n{spec}\n{hashlib.sha256((header + spec).encode()).hexdigest()}\n"


def _kept_probe(do_lower_case: bool, key: tuple[str, str]) -> list[tuple[int, int]] | None:
    """The kept probe for ``key``, or None when there is none or it does not check: another
    version's, casing's, code's or format's file, a torn or edited one (the checksum), unparsable
    ranges, not a regular file, or another user's (a shared directory: not trusted)."""
    path = _probe_cache_path(do_lower_case, key)
    if path is None:
        return None
    most = 1 << 20
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO put there must not block
        with open(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > most:  # a directory, a device, ...: not ours
                return None
            if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
                return None
            lines = handle.read(most + 1).decode("ascii").split("\n")
        if len(lines) != 4 or lines[3] or _probe_cache_text(do_lower_case, key, lines[1]) != "\n".join(lines):
            return None
        ranges = _parse_ranges(lines[1])
    except (OSError, ValueError):  # (UnicodeDecodeError is a ValueError)
        return None
    if any(not 0 <= lo <= hi <= 0x10FFFF for lo, hi in ranges):
        return None
    return ranges


def _keep_probe(do_lower_case: bool, key: tuple[str, str], ranges: list[tuple[int, int]]) -> None:
    """Best effort, published atomically (:func:`bert_data.storage.write_bytes`: a reader sees all
    or nothing); a cache that cannot be written (read-only home, full disk) only means the next
    process probes."""
    path = _probe_cache_path(do_lower_case, key)
    if path is None:
        return
    from bert_data import storage

    try:
        storage.write_bytes(path, _probe_cache_text(do_lower_case, key, _format_ranges(ranges)).encode("ascii"))
    except OSError:
        pass


@functools.lru_cache(maxsize=None)
def _divergent_ranges(do_lower_case: bool) -> tuple[tuple[int, int], ...]:
    key = (unicodedata.unidata_version, tokenizers.__version__)
    if key == _PRECOMPUTED_KEY:
        probed = _parse_ranges(_PRECOMPUTED[do_lower_case])
    else:
        probed = _kept_probe(do_lower_case, key)
        if probed is None:
            probed = _ranges(_probe_divergent(do_lower_case))
            _keep_probe(do_lower_case, key, probed)
    extra = [(_SIGMA, _SIGMA)] if do_lower_case else []
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted([*probed, *_PRIVATE_USE, *extra]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


@functools.lru_cache(maxsize=None)
def _divergent_re(do_lower_case: bool) -> re.Pattern[str]:
    parts = []
    for lo, hi in _divergent_ranges(do_lower_case):
        parts.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    # Lone surrogates cannot be passed to Rust at all; the reference keeps them (category Cs).
    parts.append(_SURROGATES)
    return re.compile("[" + "".join(parts) + "]")


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------


# ASCII control characters the reference drops (all of Cc but \t \n \r; NUL separates texts).
_ASCII_CONTROLS = bytes([*range(0x01, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
# The reference's ASCII punctuation, each with the spaced-out replacement that splits on it.
_ASCII_PUNCT_SPACED = tuple(
    (bytes([c]), b" " + bytes([c]) + b" ")
    for c in (*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127))
)


def _wordpiece_model(vocab: dict[str, int]) -> models.WordPiece:
    return models.WordPiece(
        vocab,
        unk_token=UNK,
        continuing_subword_prefix="##",
        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
    )


def _build_hf_tokenizer(vocab: dict[str, int], do_lower_case: bool) -> Tokenizer:
    tok = Tokenizer(_wordpiece_model(vocab))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=do_lower_case,
        lowercase=do_lower_case,
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # Deliberately no add_special_tokens(): a literal "[CLS]" in text must stay ordinary text.
    return tok


class FullTokenizer:
    """Drop-in equivalent of the reference ``tokenization.FullTokenizer``."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True) -> None:
        self.vocab: dict[str, int] = load_vocab(vocab_file)
        self.do_lower_case: bool = bool(do_lower_case)
        self._native = None  # the C vocabulary (_native_vocab), made on first use

    @functools.cached_property
    def _divergent(self) -> re.Pattern[str]:
        """Made at the first non-ASCII text: a run from the token cache tokenizes none, and under
        versions the table was not precomputed for, the first making probes (see the docstring)."""
        return _divergent_re(self.do_lower_case)

    # The ``tokenizers`` objects and the inverse vocabulary are made at their first use (each
    # WordPiece model copies the vocabulary: ~10 ms a model): a run from the token cache uses
    # none of them, and with the C accelerator a run from text rarely the ASCII one.
    @functools.cached_property
    def inv_vocab(self) -> dict[int, str]:
        return {v: k for k, v in self.vocab.items()}

    @functools.cached_property
    def _tok(self) -> Tokenizer:
        return _build_hf_tokenizer(self.vocab, self.do_lower_case)

    @functools.cached_property
    def _wp(self) -> Tokenizer:
        """WordPiece only, fed with words from the Python reference basic tokenizer."""
        return Tokenizer(_wordpiece_model(self.vocab))

    @functools.cached_property
    def _ascii_tok(self) -> Tokenizer:
        """Whitespace split + WordPiece, fed with ASCII text already cleaned, lowercased and
        spaced around punctuation (see _ascii_batch_ids)."""
        tok = Tokenizer(_wordpiece_model(self.vocab))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return tok

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_native"] = None  # a C object: made again by the copy when it is used
        return state

    def _native_vocab(self) -> Any:
        """The C accelerator's ``_wordpiece.Vocab`` of this vocabulary (made once), or None when the
        accelerator is not built or is switched off (``_wordpiece`` None: the Python route)."""
        if _wordpiece is None:
            return None
        if self._native is None:
            tokens = [token.encode("utf-8") for token in vocab_tokens(self.vocab)]
            self._native = _wordpiece.Vocab(tokens, self.unk_id, MAX_INPUT_CHARS_PER_WORD)
        return self._native

    # -- special ids ---------------------------------------------------------------------------
    @property
    def unk_id(self) -> int:
        return self.vocab[UNK]

    @property
    def cls_id(self) -> int:
        return self.vocab[CLS]

    @property
    def sep_id(self) -> int:
        return self.vocab[SEP]

    @property
    def mask_id(self) -> int:
        return self.vocab[MASK]

    @property
    def pad_id(self) -> int:
        return self.vocab[PAD]

    # -- core ----------------------------------------------------------------------------------
    def _needs_reference(self, text: str) -> bool:
        return not text.isascii() and self._divergent.search(text) is not None

    def _reference_words(self, text: str) -> list[str]:
        words = _reference_basic_tokenize(text, self.do_lower_case)
        if _SURROGATE_RE.search(text):
            # A lone surrogate cannot reach Rust; no vocab token holds one, so the reference
            # WordPiece turns any word containing one into [UNK] (and so does the word "[UNK]").
            words = [UNK if _SURROGATE_RE.search(w) else w for w in words]
        return words

    def tokenize(self, text: str) -> list[str]:
        if self._needs_reference(text):
            words = self._reference_words(text)
            enc = self._wp.encode(words, is_pretokenized=True, add_special_tokens=False)
        else:
            enc = self._tok.encode(text, add_special_tokens=False)
        return enc.tokens

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        vocab = self.vocab
        return [vocab[t] for t in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        inv = self.inv_vocab
        return [inv[int(i)] for i in ids]

    def encode_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize many texts at once (the pipeline's hot path).

        Returns ``(ids, offsets)``: ``ids`` is one flat ``int32`` array holding every text's ids
        back to back; ``offsets`` (``int64``, length ``len(texts) + 1``) delimits them, so text
        ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.  Same ids as :meth:`tokenize` followed by
        :meth:`convert_tokens_to_ids`, text by text.
        """
        if not isinstance(texts, list):
            texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64)
        # Chunks of at most ENCODE_CHUNK_TEXTS texts / ENCODE_CHUNK_CHARS characters bound the
        # transient memory of one HF call (~100x its text) and keep one non-ASCII text from
        # sending a whole group down the slower path.
        bounds = [0]
        chars = 0
        for index, text in enumerate(texts):
            if index > bounds[-1] and (index - bounds[-1] >= ENCODE_CHUNK_TEXTS or chars + len(text) > ENCODE_CHUNK_CHARS):
                bounds.append(index)
                chars = 0
            chars += len(text)
        bounds.append(len(texts))
        if len(bounds) == 2:
            return self._encode_chunk(texts)
        all_ids, all_offsets, base = [], [np.zeros(1, dtype=np.int64)], 0
        for start, stop in zip(bounds, bounds[1:]):
            ids, offsets = self._encode_chunk(texts[start:stop])
            all_ids.append(ids)
            all_offsets.append(offsets[1:] + base)
            base += len(ids)
        return np.concatenate(all_ids), np.concatenate(all_offsets)

    def _encode_chunk(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        fast = self._ascii_batch_ids(texts)
        if fast is not None:
            return fast
        return self._mixed_batch_ids(texts)

    def _ascii_batch_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """``encode_ids`` for a batch of ASCII texts; ``None`` if a text is not ASCII or holds NUL.

        On ASCII the reference basic tokenizer is: drop control characters, lowercase, split on
        whitespace and around ASCII punctuation.  With the C accelerator, that and WordPiece are
        one pass of ``_wordpiece.Vocab.encode``.  Without it, the basic tokenizer is done here on
        the whole batch at once with C-level ``bytes`` operations, leaving only whitespace
        splitting and WordPiece to Rust (HF's Unicode normalizer is skipped).  The texts are
        joined into one string separated by the word ``[SEP]``, which cannot otherwise occur since
        every ``[`` has been spaced out, so Rust returns one id list and the separators' positions
        give the offsets.
        """
        native = self._native_vocab()
        if native is not None:
            encoded = native.encode(texts, self.do_lower_case)
            if encoded is None:
                return None
            return np.frombuffer(encoded[0], dtype=np.int32), np.frombuffer(encoded[1], dtype=np.int64)
        joined = "\x00".join(texts)
        if not joined.isascii():
            return None
        data = joined.encode("ascii")
        n = len(texts)
        if data.count(b"\x00") != n - 1:
            return None
        data = data.translate(None, _ASCII_CONTROLS)
        if self.do_lower_case:
            data = data.lower()
        for punct, spaced in _ASCII_PUNCT_SPACED:
            data = data.replace(punct, spaced)
        data = data.replace(b"\x00", b" " + SEP.encode("ascii") + b" ")
        (enc,) = self._ascii_tok.encode_batch_fast([data.decode("ascii")], add_special_tokens=False)
        ids = np.array(enc.ids, dtype=np.int32)
        offsets = np.empty(n + 1, dtype=np.int64)
        offsets[0] = 0
        if n == 1:
            offsets[1] = len(ids)
            return ids, offsets
        is_sep = ids == self.sep_id
        seps = np.flatnonzero(is_sep)
        assert len(seps) == n - 1, "text separator count mismatch"
        offsets[1:n] = seps - np.arange(n - 1)  # ids before separator k, minus k separators
        ids = ids[~is_sep]
        offsets[n] = len(ids)
        return ids, offsets

    def _mixed_batch_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``encode_ids`` for a batch with non-ASCII texts: each text takes the cheapest exact route."""
        ascii_idx: list[int] = []
        full_idx: list[int] = []
        ref_idx: list[int] = []
        divergent = self._divergent.search
        for i, t in enumerate(texts):
            if t.isascii():
                (ascii_idx if "\x00" not in t else full_idx).append(i)
            elif divergent(t) is None:
                full_idx.append(i)
            else:
                ref_idx.append(i)

        parts: list[tuple[list[int], np.ndarray, np.ndarray]] = []  # (text indices, ids, offsets)
        if ascii_idx:
            fast = self._ascii_batch_ids([texts[i] for i in ascii_idx])
            assert fast is not None
            parts.append((ascii_idx, *fast))
        if full_idx:
            encs = self._tok.encode_batch_fast([texts[i] for i in full_idx], add_special_tokens=False)
            parts.append((full_idx, *_flatten([e.ids for e in encs])))
        if ref_idx:
            words = [self._reference_words(texts[i]) for i in ref_idx]
            encs = self._wp.encode_batch_fast(words, is_pretokenized=True, add_special_tokens=False)
            parts.append((ref_idx, *_flatten([e.ids for e in encs])))

        n = len(texts)
        lengths = np.zeros(n, dtype=np.int64)
        for idx, _, sub_offsets in parts:
            lengths[idx] = np.diff(sub_offsets)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.empty(int(offsets[-1]), dtype=np.int32)
        for idx, sub_ids, sub_offsets in parts:
            # Move each text's run of ids from its place in sub_ids to its place in ids.
            shift = offsets[idx] - sub_offsets[:-1]
            ids[np.arange(len(sub_ids)) + np.repeat(shift, np.diff(sub_offsets))] = sub_ids
        return ids, offsets


def _flatten(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    n = len(id_lists)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, id_lists), dtype=np.int64, count=n), out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


# --------------------------------------------------------------------------------------------
# A group of documents, tokenized: the tokenization stage's output
# --------------------------------------------------------------------------------------------


@dataclass
class TokenizedGroup:
    """All documents of one group, flattened: the only per-group token storage.

    ``ids[sent_offsets[s]:sent_offsets[s+1]]`` are sentence ``s``; document ``d`` owns
    sentences ``doc_starts[d]`` to ``doc_starts[d+1] - 1``. Every sentence and document is
    non-empty.
    """

    ids: np.ndarray  # int32, all tokens
    sent_offsets: np.ndarray  # int64, len = n_sentences + 1
    doc_starts: list[int]  # len = n_docs + 1

    @property
    def n_docs(self) -> int:
        return len(self.doc_starts) - 1

    @classmethod
    def from_sentences(
        cls, ids: np.ndarray, sentence_lengths: np.ndarray, sentence_doc: np.ndarray, n_docs: int
    ) -> tuple["TokenizedGroup", list[int]]:
        """The group of the non-empty sentences and documents, and the documents left out.

        ``ids`` are every sentence's tokens back to back, ``sentence_lengths`` their counts and
        ``sentence_doc`` the document (0 .. n_docs - 1, non-decreasing) of each sentence.
        Sentences without tokens are dropped; documents left without a sentence are returned
        (their indices), so the caller can count why they were skipped."""
        keep = sentence_lengths > 0
        owner = np.asarray(sentence_doc, dtype=np.int64)
        per_doc = np.bincount(owner[keep], minlength=n_docs) if len(owner) else np.zeros(n_docs, dtype=np.int64)
        doc_starts = [0]
        left_out: list[int] = []
        for index, count in enumerate(per_doc.tolist()):
            if count == 0:
                left_out.append(index)
                continue
            doc_starts.append(doc_starts[-1] + count)
        sent_offsets = np.concatenate([[0], np.cumsum(sentence_lengths[keep])]).astype(np.int64)
        return cls(ids=ids, sent_offsets=sent_offsets, doc_starts=doc_starts), left_out


@dataclass
class TokenizedDocuments:
    """:func:`tokenize_group`'s result: the group, the documents it left out and the counts."""

    group: TokenizedGroup
    left_out: list[int]  # indices of documents without a single token
    sentences: int  # sentences with at least one token
    sentences_without_tokens: int
    tokens: int
    unk_tokens: int


def tokenize_group(per_doc_sentences: Sequence[Sequence[str]], tokenizer: "FullTokenizer") -> TokenizedDocuments:
    """Every sentence of every document to WordPiece ids at once (one batched call)."""
    texts: list[str] = []
    owner: list[int] = []
    for index, sentences in enumerate(per_doc_sentences):
        texts.extend(sentences)
        owner.extend([index] * len(sentences))
    ids, offsets = tokenizer.encode_ids(texts)
    lengths = np.diff(offsets)
    group, left_out = TokenizedGroup.from_sentences(ids, lengths, np.asarray(owner, dtype=np.int64), len(per_doc_sentences))
    kept = int(np.count_nonzero(lengths > 0))
    return TokenizedDocuments(
        group=group,
        left_out=left_out,
        sentences=kept,
        sentences_without_tokens=len(lengths) - kept,
        tokens=int(len(ids)),
        unk_tokens=int(np.count_nonzero(ids == tokenizer.unk_id)),
    )
