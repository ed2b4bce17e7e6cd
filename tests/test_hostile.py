"""Hostile documents are processed or counted by reason, never a crash (issue: nothing lost,
nothing silently wrong). Every run also checks read == used + skipped."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from bert_data.tools.create import main
from bert_data.format.example_wire import parse_example
from bert_data.format.tfrecord import iter_records

from conftest import base_args, sentence, write_vocab

GOOD = "\n\n".join(" ".join(sentence(p * 4 + s) for s in range(4)) for p in range(3)) + "\n"


def _run(tmp_path: Path, documents: Dict[str, bytes], capsys=None, **flags) -> Dict:
    """Write documents (name -> bytes) plus two good ones, run, return the manifest."""
    corpus = tmp_path / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    names: List[str] = []
    for name, data in {"good_a.txt": GOOD.encode(), "good_b.txt": GOOD.upper().encode(), **documents}.items():
        path = corpus / name
        if data is not None:
            path.write_bytes(data)
        names.append(name)
    metadata = corpus / "metadata.txt"
    metadata.write_text("\n".join(names) + "\n", encoding="utf-8")
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out, **flags)) == 0
    manifest = json.loads((out / "data_params.json").read_text())
    docs = manifest["documents"]
    assert docs["read"] == docs["used"] + sum(docs["skipped"].values())
    return manifest


def _records(out: Path):
    for shard in sorted(out.glob("*.tfrecords")):
        for data in iter_records(str(shard)):
            yield parse_example(data)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty"),
        (b"   \n\t\n  \r\n", "empty"),
        ("\u200b\u200c\u200d\ufeff\u2060\n\u200b".encode(), "no_usable_sentence"),
        (b"\x01\x02\x03\x07\x1b\x7f\n", "no_usable_sentence"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "binary"),
        (b"text with a NUL\x00 byte in it.", "binary"),
    ],
    ids=["empty", "whitespace", "zero-width", "control", "binary-png", "nul"],
)
def test_unusable_documents_are_counted_by_reason(tmp_path, content, reason) -> None:
    manifest = _run(tmp_path, {"bad.txt": content})
    assert manifest["documents"] == {"read": 3, "used": 2, "skipped": {reason: 1}}


def test_directory_and_fifo_listed_as_documents_are_skipped(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a_directory.txt").mkdir()
    os.mkfifo(corpus / "a_fifo.txt")  # must not block: a FIFO is never opened
    manifest = _run(tmp_path, {"a_directory.txt": None, "a_fifo.txt": None})
    assert manifest["documents"] == {"read": 4, "used": 2, "skipped": {"not_a_regular_file": 2}}


def test_invalid_utf8_is_replaced_and_counted(tmp_path) -> None:
    manifest = _run(tmp_path, {"latin1.txt": "Caf\xe9 cr\xe8me. The cat sat.".encode("latin-1")})
    assert manifest["replaced_bytes"] == 2
    assert manifest["documents"]["used"] == 3


def test_utf16_with_bom_is_detected_and_decoded(tmp_path) -> None:
    plain = _run(tmp_path / "p", {"doc.txt": GOOD.encode("utf-8")})
    utf16 = _run(tmp_path / "u", {"doc.txt": GOOD.encode("utf-16")})  # BOM + UTF-16-LE
    assert utf16["decoded_as"] == {"utf-16": 1}
    assert utf16["tokens"] == plain["tokens"] and utf16["n_examples"] == plain["n_examples"]
    assert (tmp_path / "u" / "out" / "examples-1.tfrecords").read_bytes() == (
        tmp_path / "p" / "out" / "examples-1.tfrecords"
    ).read_bytes()


def test_one_huge_line_without_punctuation_is_processed(tmp_path) -> None:
    words = ("cat sat mat dog ran " * 1_000_000).encode()  # 20 MB, one line, no punctuation
    manifest = _run(tmp_path, {"huge.txt": words}, max_seq_length=64, dupe_factor=1)
    # over --max_document_chars (1M): streamed and cut at spaces into 20 pieces of <= 1M characters,
    # each a document of its own (counted), so no worker ever holds the 20 MB line whole
    assert manifest["documents_split"] == {"documents": 1, "extra_pieces": 19}
    assert manifest["documents"] == {"read": 22, "used": 22, "skipped": {}}
    assert manifest["paragraph_chunks"] == 19  # each full piece was cut again into spaCy-sized chunks
    assert manifest["groups"] == 4 and manifest["units"] == 4  # 3 byte ranges (8M) of the file + the 2 small files
    assert manifest["tokens"] > 5_000_000
    for record in _records(tmp_path / "out"):
        assert int(record["input_mask"].sum()) <= 64


def test_document_longer_than_spacy_max_length(tmp_path) -> None:
    text = (" ".join(sentence(i) for i in range(40_000)) + "\n").encode()  # ~2.4 M chars, one paragraph
    assert len(text) > 1_000_000
    manifest = _run(tmp_path, {"long.txt": text}, dupe_factor=1, max_document_chars="4M")  # kept whole
    assert manifest["documents"]["used"] == 3 and manifest["paragraph_chunks"] == 1
    assert manifest["sentences"] > 39_000  # spaCy keeps a few "word." abbreviations whole


def test_corpus_of_exactly_one_document(tmp_path) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "only.txt").write_text(GOOD)
    (corpus / "m.txt").write_text("only.txt\n")
    vocab = write_vocab(tmp_path / "v.txt")
    assert main(base_args(corpus / "m.txt", vocab, tmp_path / "out")) == 0
    manifest = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert manifest["n_docs"] == 1 and manifest["n_examples"] > 0
    labels = [int(r["next_sentence_labels"][0]) for r in _records(tmp_path / "out")]
    assert labels and set(labels) == {0}  # no other document: never a (mislabelled) random B


def test_one_sentence_documents_and_a_sentence_longer_than_max_seq_length(tmp_path) -> None:
    long_sentence = " ".join(["river"] * 500) + "."
    docs = {f"one_{i}.txt": (sentence(i) + "\n").encode() for i in range(5)}
    docs["long.txt"] = long_sentence.encode()
    manifest = _run(tmp_path, docs, max_seq_length=32)
    assert manifest["documents"]["used"] == 8
    for record in _records(tmp_path / "out"):
        assert int(record["input_mask"].sum()) <= 32


def test_very_long_words_become_unk(tmp_path) -> None:
    manifest = _run(tmp_path, {"w.txt": ("The " + "a" * 250 + " cat sat.").encode()})
    assert manifest["unk_tokens"] == 1


def test_literal_special_token_strings_stay_text(tmp_path) -> None:
    manifest = _run(tmp_path, {"s.txt": b"[SEP] [MASK] [CLS]\n[SEP][SEP] the cat sat. [MASK] is here.\n"})
    assert manifest["documents"]["used"] == 3
    for record in _records(tmp_path / "out"):
        real = record["input_ids"][: int(record["input_mask"].sum())].copy()
        used = record["masked_lm_weights"] > 0  # a random replacement may draw any id: restore originals
        real[record["masked_lm_positions"][used]] = record["masked_lm_ids"][used]
        assert real[0] == 2 and int(np.count_nonzero(real == 3)) == 2  # [CLS]=2, [SEP]=3 in the tiny vocab
        assert int(np.count_nonzero(real == 2)) == 1


def test_paths_with_spaces_and_non_ascii_and_duplicates(tmp_path, caplog) -> None:
    manifest = _run(tmp_path, {"a file with spaces.txt": GOOD.encode(), "naïve_café_文.txt": GOOD.encode()})
    assert manifest["documents"]["used"] == 4
    metadata = tmp_path / "corpus" / "metadata.txt"
    metadata.write_text(metadata.read_text() + "good_a.txt\n", encoding="utf-8")  # a duplicate line
    vocab = tmp_path / "vocab.txt"
    assert main(base_args(metadata, vocab, tmp_path / "out2")) == 0
    manifest = json.loads((tmp_path / "out2" / "data_params.json").read_text())
    assert manifest["duplicate_metadata_entries"] == 1
    assert "1 duplicate document path in" in caplog.text


def test_missing_document_names_metadata_line(tmp_path, capsys) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text(GOOD)
    (corpus / "m.txt").write_text("# comment\na.txt\n\nmissing.txt\n")
    vocab = write_vocab(tmp_path / "v.txt")
    assert main(base_args(corpus / "m.txt", vocab, tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"create_tfrecords: error: {corpus / 'm.txt'}:4: document {corpus / 'missing.txt'} does not exist"]
    assert not (tmp_path / "out").exists()
