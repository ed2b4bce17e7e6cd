"""Line ends never change what a document is (issue 26, class 1).

Every reading path reads ``\\r\\n`` and a lone ``\\r`` as Python's universal newlines do (the
Model Zoo's ``open()``): the same corpus with LF, CRLF or CR-only line ends gives the same
documents and byte-identical shards, through every input format, separator, compression, byte
range and the metadata files; ``build_vocab`` learns the same vocabulary. A vocabulary with a
``\\r`` inside a line is refused (readers disagree on its ids), with the fix that works.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.documents import ReadOptions, iter_documents
from bert_data.metadata import DocumentSource, WorkItem, iter_metadata
from bert_data.tools.create import main as create
from bert_data.tools.vocab import main as build_vocab

from conftest import base_args, sentence, write_vocab

ENDS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def _docs(n: int = 8) -> List[List[str]]:
    """``n`` documents of three sentences (one a line)."""
    return [[sentence(d * 11 + s * 3, 7 + (d + s) % 5) for s in range(3)] for d in range(n)]


def _shards(out: Path) -> Dict[str, bytes]:
    shards = {p.name: p.read_bytes() for p in sorted(out.rglob("*.tfrecords"))}
    assert shards and any(shards.values())
    return shards


def _layout(kind: str, docs: List[List[str]]) -> Dict[str, str]:
    """File name -> text (LF) of a corpus of ``docs`` in one input layout."""
    if kind == "one_per_file":
        return {f"d{i}.txt": "\n".join(doc) + "\n" for i, doc in enumerate(docs)}
    if kind in ("blank_line", "bert", "single_sentence"):
        return {"all.txt": "\n\n".join("\n".join(doc) for doc in docs) + "\n"}
    if kind == "dashes":
        return {"all.txt": "\n-----\n".join("\n".join(doc) for doc in docs) + "\n"}
    if kind == "every_line":
        return {"all.txt": "\n".join(" ".join(doc) for doc in docs) + "\n"}
    if kind == "jsonl":
        return {"all.jsonl": "".join(json.dumps({"text": " ".join(doc)}) + "\n" for doc in docs)}
    if kind == "wikiextractor":
        return {"wiki_00": "".join(f'<doc id="{i}" url="u" title="T{i}">\nT{i}\n\n' + "\n".join(doc) + "\n</doc>\n"
                                   for i, doc in enumerate(docs))}
    raise ValueError(kind)


FLAGS = {
    "one_per_file": {},
    "blank_line": {"multiple_docs_in_single_file": True},
    "dashes": {"multiple_docs_in_single_file": True, "multiple_docs_separator": "-----"},
    "every_line": {"multiple_docs_in_single_file": True, "multiple_docs_separator": ""},
    "bert": {"input_format": "bert"},
    "single_sentence": {"multiple_docs_in_single_file": True, "single_sentence_per_line": True},
    "jsonl": {"input_format": "jsonl"},
    "wikiextractor": {"input_format": "wikiextractor"},
}


def _write(root: Path, files: Dict[str, str], end: str, gz: bool = False) -> Path:
    root.mkdir(parents=True)
    names = []
    for name, text in files.items():
        data = text.replace("\n", end).encode("utf-8")
        if gz:
            name, data = name + ".gz", gzip.compress(data, mtime=0)
        (root / name).write_bytes(data)
        names.append(name)
    metadata = root / "metadata.txt"
    metadata.write_bytes(end.join(names).encode("utf-8") + end.encode())  # the metadata with the same line ends
    return metadata


def _run(tmp_path: Path, name: str, files: Dict[str, str], end: str, flags: Dict, gz: bool = False) -> dict:
    metadata = _write(tmp_path / name, files, end, gz)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / f"out_{name}"
    flags = dict(flags)
    separator = flags.pop("multiple_docs_separator", None)
    args = base_args(metadata, vocab, out, dupe_factor=1, **flags)
    assert create(args + ([f"--multiple_docs_separator={separator}"] if separator is not None else [])) == 0
    return json.loads((out / "data_params.json").read_text())


@pytest.mark.parametrize("kind", sorted(FLAGS))
def test_every_format_reads_crlf_and_cr_as_lf(tmp_path, kind) -> None:
    """The issue's case and its class: 8 documents are 8 documents whatever the line ends, and
    the shards are the LF corpus's bytes, through every input format and separator."""
    files = _layout(kind, _docs(8))
    manifests = {end: _run(tmp_path, end, files, ENDS[end], FLAGS[kind]) for end in ENDS}
    assert {end: m["documents"]["used"] for end, m in manifests.items()} == {end: 8 for end in ENDS}
    lf = _shards(tmp_path / "out_lf")
    for end in ("crlf", "cr"):
        assert _shards(tmp_path / f"out_{end}") == lf, end


@pytest.mark.parametrize("kind", ["blank_line", "bert"])
def test_compressed_crlf_and_cr_read_as_lf(tmp_path, kind) -> None:
    files = _layout(kind, _docs(8))
    for end in ENDS:
        assert _run(tmp_path, end, files, ENDS[end], FLAGS[kind], gz=True)["documents"]["used"] == 8
    lf = _shards(tmp_path / "out_lf")
    assert _shards(tmp_path / "out_crlf") == lf and _shards(tmp_path / "out_cr") == lf


def test_utf16_crlf_reads_as_lf(tmp_path) -> None:
    """A UTF-16 file from Windows (BOM, CRLF) splits into the same documents."""
    files = _layout("blank_line", _docs(8))
    _run(tmp_path, "lf", files, "\n", FLAGS["blank_line"])
    root = tmp_path / "utf16"
    root.mkdir()
    (root / "all.txt").write_bytes(files["all.txt"].replace("\n", "\r\n").encode("utf-16"))
    (root / "metadata.txt").write_text("all.txt\r\n")
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert create(base_args(root / "metadata.txt", vocab, tmp_path / "out_utf16", dupe_factor=1, **FLAGS["blank_line"])) == 0
    assert _shards(tmp_path / "out_utf16") == _shards(tmp_path / "out_lf")


# --- the reader, byte ranges included ----------------------------------------------------------

line_text = st.text(alphabet=st.sampled_from(list("ab c\t") + ["\u3000", "\u00e9"]), max_size=12)


def _read(path: Path, options: ReadOptions, ranges) -> (List[str], Counter):
    stats: Counter = Counter()
    items = [WorkItem(DocumentSource(str(path), "m.txt", 1, path.name), start, end) for start, end in ranges]
    return list(iter_documents(items, options, stats)), stats


OPTIONS = {
    "bert": ReadOptions(input_format="bert"),
    "lines": ReadOptions(separator="\n"),
    "jsonl": ReadOptions(input_format="jsonl"),
    "one_per_file": ReadOptions(),
    "blank_line": ReadOptions(separator="\n\n"),
    "wikiextractor": ReadOptions(input_format="wikiextractor"),
}
RANGED = {"bert", "lines", "jsonl", "one_per_file"}  # the formats a large file is read in byte ranges for


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line_text, max_size=25), ends=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=25, max_size=25),
       fmt=st.sampled_from(sorted(OPTIONS)), step=st.integers(1, 40), back_chunk=st.sampled_from([4, 4096]))
def test_any_mix_of_line_ends_reads_as_lf_in_any_byte_ranges(tmp_path, monkeypatch, lines, ends, fmt, step, back_chunk) -> None:
    """Mixed LF/CRLF/CR line ends, read whole or in byte ranges of any size (a range boundary
    between a ``\\r`` and its ``\\n`` included), give the documents of the LF file read whole."""
    import bert_data.documents as documents

    monkeypatch.setattr(documents, "_BACK_CHUNK", back_chunk)  # the bert reader's look-back, chunked small too
    if fmt == "jsonl":
        lines = [json.dumps({"text": line}) if i % 4 else "" for i, line in enumerate(lines)]
    elif fmt == "wikiextractor":
        lines = [f'<doc id="{i}" title="t">' if i % 5 == 0 else ("</doc>" if i % 5 == 4 else line) for i, line in enumerate(lines)]
    options = OPTIONS[fmt]
    lf, mixed = tmp_path / f"lf-{fmt}.txt", tmp_path / f"mixed-{fmt}.txt"
    lf.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    ends = [("\r\n" if end == "\n" and not line and i and ends[i - 1] == "\r" else end)  # "\r" then "\n" is one end
            for i, (line, end) in enumerate(zip(lines, ends))]
    data = "".join(line + end for line, end in zip(lines, ends)).encode("utf-8")
    mixed.write_bytes(data)
    expected, expected_stats = _read(lf, options, [(0, None)])
    whole, whole_stats = _read(mixed, options, [(0, None)])
    assert whole == expected
    if fmt not in RANGED:
        return
    ranged, ranged_stats = _read(mixed, options, [(s, min(len(data), s + step)) for s in range(0, len(data), step)] or [(0, 0)])
    if fmt == "one_per_file":  # cut at range boundaries: the pieces make the same text
        assert "".join(ranged) == "".join(expected)
        return
    assert ranged == expected
    for key in ("documents.read", "skipped.bad_json", "skipped.missing_text_key"):
        assert ranged_stats[key] == expected_stats[key], key
    assert ranged_stats["input_bytes"] == whole_stats["input_bytes"] == len(data)


def test_a_range_boundary_between_cr_and_lf(tmp_path) -> None:
    """A file in BERT's layout whose range boundary falls right after a ``\\r`` (before its
    ``\\n``), and a CR-only file, read in ranges: each document once, whole."""
    for end in ("\r\n", "\r"):
        text = end.join(["first line", "second line", "", "next doc", "", "", "last doc"]) + end
        path = tmp_path / ("crlf.txt" if end == "\r\n" else "cr.txt")
        path.write_bytes(text.encode())
        expected = ["first line\nsecond line\n", "next doc\n", "last doc\n"]
        for cut in range(1, len(text)):
            got, _ = _read(path, ReadOptions(input_format="bert"), [(0, cut), (cut, len(text))])
            assert got == expected, (end, cut)


def test_separator_with_crlf_means_a_line_break() -> None:
    """``--multiple_docs_separator`` holding ``\\r\\n`` or ``\\r`` is read as the text is: a
    line break (it would otherwise never match the reader's text)."""
    assert ReadOptions(separator="\n\r\n-----").separator == "\n\n-----"
    assert ReadOptions(separator="\n\r").separator == "\n\n"


# --- metadata files ---------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_metadata_lines_end_in_crlf_or_cr_with_their_own_numbers(tmp_path, end) -> None:
    meta = tmp_path / "m.txt"
    meta.write_bytes(end.join(["a.txt", "# comment", "", "sub/b.txt", "c.txt"]).encode())
    sources = list(iter_metadata([str(meta)], ""))
    assert [(s.path, s.line_number) for s in sources] == [("a.txt", 1), ("sub/b.txt", 4), ("c.txt", 5)]


def test_metadata_crlf_split_across_reads_is_one_line_end(tmp_path, monkeypatch) -> None:
    """A ``\\r\\n`` whose two bytes come in two reads is one line end, not a blank line between."""
    import bert_data.metadata as metadata

    monkeypatch.setattr(metadata, "MAX_METADATA_LINE", 3)  # reads of 4 bytes: "abc\r" then "\n..."
    meta = tmp_path / "m.txt"
    meta.write_bytes(b"abc\r\nde\r\rf")
    assert [(s.path, s.line_number) for s in iter_metadata([str(meta)], "")] == [("abc", 1), ("de", 2), ("f", 4)]


def test_a_long_cr_only_metadata_file_is_many_lines(tmp_path) -> None:
    """A CR-only metadata file of 20,000 entries (far past one 64 KiB read) is 20,000 lines."""
    meta = tmp_path / "m.txt"
    meta.write_bytes("\r".join(f"docs/file{i:06d}.txt" for i in range(20000)).encode())
    sources = list(iter_metadata([str(meta)], ""))
    assert len(sources) == 20000 and sources[-1].line_number == 20000 and sources[-1].path == "docs/file019999.txt"


def test_metadata_digest_is_unchanged_for_lf_files(tmp_path) -> None:
    """--resume of runs made before: an LF metadata file digests as it always did (its bytes)."""
    import hashlib

    meta = tmp_path / "m.txt"
    meta.write_bytes(b"a.txt\nb.txt\n")
    digest = hashlib.sha256()
    list(iter_metadata([str(meta)], "", digest=digest))
    assert digest.hexdigest() == hashlib.sha256(b"\0next metadata file\0a.txt\nb.txt\n").hexdigest()


# --- the vocabulary -----------------------------------------------------------------------------


def test_crlf_vocabulary_is_the_lf_one(tmp_path) -> None:
    from bert_data.tokenization import load_vocab

    lf = write_vocab(tmp_path / "vocab.txt")
    crlf = tmp_path / "vocab_crlf.txt"
    crlf.write_bytes(lf.read_bytes().replace(b"\n", b"\r\n"))
    assert load_vocab(str(crlf)) == load_vocab(str(lf))


@pytest.mark.parametrize("damage, line", [(lambda b: b.replace(b"\n", b"\r"), 1), (lambda b: b.replace(b"\nthe\n", b"\nthe\rcat\n"), 0)],
                         ids=["cr-only", "stray-cr"])
def test_a_vocabulary_with_a_cr_inside_a_line_is_refused_and_the_fix_works(tmp_path, capsys, damage, line) -> None:
    """Readers disagree on a ``\\r`` inside a vocabulary line (BERT drops it, Python's text mode
    starts a token there): one line naming the file and line, exit 2; the LF file it asks for runs."""
    corpus = _write(tmp_path / "corpus", _layout("one_per_file", _docs(4)), "\n")
    good = write_vocab(tmp_path / "vocab.txt")
    bad = tmp_path / "bad_vocab.txt"
    bad.write_bytes(damage(good.read_bytes()))
    number = line or bad.read_bytes().split(b"\n").index(b"the\rcat") + 1
    assert create(base_args(corpus, bad, tmp_path / "out")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"create_tfrecords: error: vocab file {str(bad)!r}, line {number}: a carriage return (\\r) inside the line; "
        "vocabulary readers disagree on it (BERT's drops it, Python's text mode starts a new token there, so ids "
        "would differ): save the file with LF line ends, one token per line"
    ]
    fixed = bad.read_bytes().replace(b"\r", b"\n") if line else bad.read_bytes().replace(b"the\rcat", b"the")
    bad.write_bytes(fixed)  # the advice: LF line ends, one token per line
    assert create(base_args(corpus, bad, tmp_path / "out")) == 0


# --- build_vocab ---------------------------------------------------------------------------------


def test_build_vocab_learns_the_same_vocabulary_from_crlf_and_cr(tmp_path, capsys) -> None:
    files = _layout("blank_line", _docs(12))
    vocabularies = {}
    for name, end in ENDS.items():
        metadata = _write(tmp_path / name, files, end)
        out = tmp_path / f"vocab_{name}.txt"
        assert build_vocab(["--metadata_files", str(metadata), "--input_files_prefix", str(metadata.parent),
                            "--vocab_size", "120", "--output", str(out), "--quiet", "--do_lower_case"]) == 0
        vocabularies[name] = out.read_bytes()
    assert vocabularies["crlf"] == vocabularies["lf"] and vocabularies["cr"] == vocabularies["lf"]
