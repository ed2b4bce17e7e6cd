"""The console and inspect tell the truth about the data (issue 25): a run whose data is not
what its settings make expected (NSP balance, instances, negatives, cut documents) says so, with
a number and a likely cause, at the end of create_tfrecords and create_pretraining_data and in
inspect_tfrecords --stats / --plot, which then never says OK; following the advice gives data
without a warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from bert_data.expectations import data_warnings, nsp_expected
from bert_data.tools.create import main as create
from bert_data.tools.google_bert import main as google
from bert_data.tools.inspect import main as inspect
from conftest import TINY_WORDS, base_args, sentence, write_corpus, write_vocab

HEALTHY = {
    "record_schema": "nsp", "n_examples": 10_000, "dupe_factor": 2, "max_seq_length": 128, "tokens": 600_000,
    "sentences": 30_000, "nsp_random_next": 5_400, "nsp_single_sentence_chunks": 700, "nsp_negatives_unavailable": 0,
    "nsp_continuations_kept": 0, "nsp_units_without_negatives": 0, "nsp_documents_without_negatives": 0,
    "documents_split": {}, "max_document_chars": 1 << 20, "group_bytes": 8 << 20,
    "nsp_negative_pool": {"documents": 300},
}


# --- the checks, on manifests -----------------------------------------------------------------


def test_healthy_data_has_no_warning() -> None:
    assert data_warnings(HEALTHY) == []
    assert data_warnings(dict(HEALTHY, record_schema="mlm_only")) == []


def test_each_warning_has_its_number_and_cause() -> None:
    [balance] = data_warnings(dict(HEALTHY, nsp_random_next=2_300))
    assert balance.startswith("random-next fraction 23.0% (2,300 of 10,000 pairs) is outside the 48%-67% BERT's recipe")
    assert "no other document was there" in balance
    [high] = data_warnings(dict(HEALTHY, nsp_random_next=9_000, nsp_single_sentence_chunks=8_000))
    assert "90.0%" in high and "80% of the pairs are one-sentence chunks" in high and "--single_sentence_per_line" in high
    units, low = data_warnings(dict(HEALTHY, nsp_random_next=300, nsp_units_without_negatives=3,
                                    nsp_documents_without_negatives=3, nsp_negatives_unavailable=40,
                                    nsp_continuations_kept=4_500, nsp_negative_pool={"documents": 1}))
    assert units == (
        "no negative for a random B in 3 units (3 documents): 40 one-sentence chunks dropped "
        "(nsp_negatives_unavailable) and 4500 pairs kept as is-next where a random B was due (nsp_continuations_kept); "
        "likely cause: the corpus (or this split) has only one document, the negative pool holds 1 document "
        "(nsp_negative_pool); give more documents")
    assert "(4500 pairs, nsp_continuations_kept)" in low
    [few] = data_warnings(dict(HEALTHY, n_examples=1_000, nsp_random_next=540, sentences=1_000))
    assert few == ("500 instances per pass is 10% of the ~4,800 the corpus's 600,000 tokens make expected (one per "
                   "125 tokens); likely cause: sentences average 600 tokens, so most of each is cut away to fit "
                   "--max_seq_length 128 (check the sentence splitting)")
    [cut] = data_warnings(dict(HEALTHY, documents_split={"documents": 2, "extra_pieces": 5}))
    assert cut.startswith("2 documents of more than 1,048,576 characters (--max_document_chars, at most --group_bytes) "
                          "were cut into 7 pieces")


def test_the_balance_allows_for_chance_on_few_pairs() -> None:
    assert nsp_expected(10_000) == pytest.approx((0.48, 0.67))
    low, high = nsp_expected(16)
    assert low == 0.0 and high == 1.0  # 16 coins say nothing
    assert data_warnings({"record_schema": "nsp"}, random_next=16, instances=16) == []
    assert len(data_warnings({"record_schema": "nsp"}, random_next=400, instances=400)) == 1


# --- end to end: create, inspect, the corrected rerun -------------------------------------------


def _inspect(capsys, out: Path, *extra: object) -> List[str]:
    capsys.readouterr()
    code = inspect([str(out), "--stats", "--num_workers", "1", *map(str, extra)])
    assert code == 0  # every record is valid: warnings about the data are not a failure
    return capsys.readouterr().out.rstrip().splitlines()


def _warnings(lines: List[str]) -> List[str]:
    return [line[len("warning: "):] for line in lines if line.startswith("warning: ")]


def _one_long_document(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True)
    paragraphs = [" ".join(sentence(p * 7 + s, 6 + s % 5) for s in range(5)) for p in range(60)]
    (docs / "book.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    (root / "metadata.txt").write_text("docs/book.txt\n", encoding="utf-8")
    return root / "metadata.txt"


def test_a_corpus_of_one_document_is_flagged_by_create_and_inspect(tmp_path: Path, capsys) -> None:
    vocab = write_vocab(tmp_path / "vocab.txt")
    metadata = _one_long_document(tmp_path / "one")
    out = tmp_path / "out"
    assert create(base_args(metadata, vocab, out, quiet=True)) == 0
    summary = capsys.readouterr().out.splitlines()
    manifest = json.loads((out / "data_params.json").read_text())
    kept, dropped = manifest["nsp_continuations_kept"], manifest["nsp_negatives_unavailable"]
    assert kept > 0 and manifest["nsp_random_next"] == 0 and manifest["nsp_units_without_negatives"] == 1
    assert dropped == 0  # every chunk of this book has two sentences or more
    no_negatives = (
        f"no negative for a random B in 1 unit (1 document): {kept} pairs kept as is-next where a random B was due "
        f"(nsp_continuations_kept); likely cause: the corpus (or this split) has only one document, the negative pool "
        f"holds 1 document (nsp_negative_pool); give more documents")
    n = manifest["n_examples"]
    balance = (f"random-next fraction 0.0% (0 of {n} pairs) is outside the {nsp_expected(n)[0]:.0%}-"
               f"{nsp_expected(n)[1]:.0%} BERT's recipe gives; likely cause: pairs due a random B kept their true "
               f"continuation because no other document was there ({kept} pairs, nsp_continuations_kept)")
    assert _warnings(summary) == [no_negatives, balance]
    assert "0.0% random next, negatives from a pool of 1 document" in summary[1]
    report = _inspect(capsys, out)
    assert _warnings(report) == [no_negatives, balance]
    assert report[-1].startswith("WARNINGS: 2 warnings about the data above") and "OK" not in report[-1]
    # the advice: give more documents
    more = write_corpus(tmp_path / "more", n_docs=12)
    (more.parent / "docs" / "book.txt").write_text((tmp_path / "one" / "docs" / "book.txt").read_text())
    more.write_text(more.read_text() + "docs/book.txt\n")
    fixed = tmp_path / "fixed"
    assert create(base_args(more, vocab, fixed, quiet=True)) == 0
    assert _warnings(capsys.readouterr().out.splitlines()) == []
    assert _inspect(capsys, fixed)[-1] == "OK"


def _one_sentence_documents(root: Path, n_docs: int = 40) -> Path:
    """Documents of 20 lines of 12 words without a full stop: the sentencizer sees one sentence
    of 240 words in each."""
    docs = root / "docs"
    docs.mkdir(parents=True)
    names = []
    for d in range(n_docs):
        lines = [" ".join(TINY_WORDS[(d * 13 + i * 7 + j) % len(TINY_WORDS)] for j in range(12)) for i in range(20)]
        (docs / f"d{d:02d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        names.append(f"docs/d{d:02d}.txt")
    (root / "metadata.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    return root / "metadata.txt"


def test_documents_of_one_sentence_are_flagged_and_lines_as_sentences_fix_them(tmp_path: Path, capsys) -> None:
    vocab = write_vocab(tmp_path / "vocab.txt")
    metadata = _one_sentence_documents(tmp_path / "c")
    out = tmp_path / "out"
    assert create(base_args(metadata, vocab, out, quiet=True, dupe_factor=1)) == 0
    warnings = _warnings(capsys.readouterr().out.splitlines())
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["n_examples"] == manifest["nsp_random_next"] == manifest["nsp_single_sentence_chunks"] == 40
    assert warnings[0].startswith("random-next fraction 100.0% (40 of 40 pairs) is outside the ")
    assert "100% of the pairs are one-sentence chunks" in warnings[0]
    assert warnings[1].startswith("40 instances per pass is ") and "sentences average 240 tokens" in warnings[1]
    assert len(warnings) == 2
    report = _inspect(capsys, out)
    assert _warnings(report) == warnings and report[-1].startswith("WARNINGS: 2 warnings")
    fixed = tmp_path / "fixed"
    assert create(base_args(metadata, vocab, fixed, quiet=True, dupe_factor=1, single_sentence_per_line=True)) == 0
    assert _warnings(capsys.readouterr().out.splitlines()) == []
    assert _inspect(capsys, fixed)[-1] == "OK"


def test_documents_cut_into_pieces_are_flagged(tmp_path: Path, capsys) -> None:
    vocab = write_vocab(tmp_path / "vocab.txt")
    metadata = write_corpus(tmp_path / "c", n_docs=6, paragraphs=8)
    out = tmp_path / "out"
    assert create(base_args(metadata, vocab, out, quiet=True, max_document_chars=1000)) == 0
    warnings = _warnings(capsys.readouterr().out.splitlines())
    split = json.loads((out / "data_params.json").read_text())["documents_split"]
    assert warnings == [
        f"6 documents of more than 1,000 characters (--max_document_chars, at most --group_bytes) were cut into "
        f"{6 + split['extra_pieces']} pieces: no instance spans a cut and each piece draws its own target length (NSP "
        f"negatives still never come from the same document); raise --max_document_chars and --group_bytes to keep "
        f"them whole"]
    assert _warnings(_inspect(capsys, out)) == warnings
    fixed = tmp_path / "fixed"
    assert create(base_args(metadata, vocab, fixed, quiet=True, max_document_chars=100_000)) == 0
    assert _warnings(capsys.readouterr().out.splitlines()) == []


def test_the_plot_title_never_says_ok_over_a_warning(tmp_path: Path, capsys) -> None:
    from test_inspect import _matplotlib

    matplotlib = _matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bert_data.inspection import report as report_module
    from bert_data.inspection.inputs import resolve_inputs
    from bert_data.inspection.stats import inspect_files

    vocab = write_vocab(tmp_path / "vocab.txt")
    titles = {}
    for name, metadata in (("one", _one_long_document(tmp_path / "one")), ("many", write_corpus(tmp_path / "many"))):
        out = tmp_path / f"out-{name}"
        assert create(base_args(metadata, vocab, out, quiet=True)) == 0
        found = inspect_files(resolve_inputs([str(out)])[0], None, [str(out)])
        captured = {}
        real_close = plt.close
        plt.close = lambda fig: captured.setdefault("fig", fig)
        try:
            report_module.write_plot(found.report, str(tmp_path / f"{name}.png"), plt, [])
        finally:
            plt.close = real_close
        titles[name] = captured["fig"]._suptitle.get_text()
        plt.close(captured["fig"])
    assert titles["one"].endswith(": WARNINGS (2), see the text report")
    assert titles["many"].endswith(": OK")


def test_create_pretraining_data_ends_with_the_same_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    """BERT's command line ends as create_tfrecords does: what was written where, the data's
    facts and warnings, and what to run next (here with the named output files)."""
    vocab = write_vocab(tmp_path / "vocab.txt")
    corpus = tmp_path / "bert.txt"
    corpus.write_text("\n\n".join("\n".join(sentence(d * 9 + s) for s in range(8)) for d in range(10)) + "\n")
    output = tmp_path / "out" / "examples.tfrecord"
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert google([f"--input_file={corpus}", f"--output_file={output}", f"--vocab_file={vocab}", "--dupe_factor=2",
                   "--num_workers=1", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    manifest = json.loads((output.parent / ".examples.tfrecord.data_params.json").read_text())
    assert lines[0].startswith(f"wrote {manifest['n_examples']} instances from 10 documents (10 read, 0 skipped) into "
                               f"{output} (manifest {output.parent / '.examples.tfrecord.data_params.json'}) in ")
    assert " tokens (" in lines[1] and " on disk, " in lines[1] and "% random next" in lines[1]
    assert lines[-1].startswith(f"next: check with `inspect_tfrecords {output} --stats`; train with "
                                f"`run_pretraining.py --input_file='{output}' --max_seq_length=128")
    assert not any(line.startswith("warning: ") for line in lines)


def test_nothing_usable_says_to_give_more_documents_and_that_works(tmp_path: Path, capsys) -> None:
    """One one-sentence document: no B from another document, no instance: one line, exit 2,
    nothing published; the advice (more documents) makes a run that succeeds without a warning."""
    vocab = write_vocab(tmp_path / "vocab.txt")
    root = tmp_path / "c"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "only.txt").write_text("The cat sat on the mat.\n", encoding="utf-8")
    metadata = root / "metadata.txt"
    metadata.write_text("docs/only.txt\n", encoding="utf-8")
    out = tmp_path / "out"
    assert create(base_args(metadata, vocab, out, quiet=True)) == 2
    assert capsys.readouterr().err == (
        "create_tfrecords: error: no instance could be made from the 1 usable document (2 one-sentence chunks had no "
        "partner; skipped: none); give more documents (a random B comes from another one), or documents of more than "
        "one sentence; nothing was published\n")
    assert not list(out.glob("*.tfrecords"))
    more = write_corpus(root, n_docs=12)
    more.write_text(more.read_text() + "docs/only.txt\n")
    assert create(base_args(more, vocab, out, quiet=True)) == 0
    assert _warnings(capsys.readouterr().out.splitlines()) == []
