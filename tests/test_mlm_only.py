"""create_tfrecords --mlm_only: windows over the token stream, separators, overlap, schema,
masking, determinism and flag validation."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from conftest import base_args, write_corpus, write_vocab  # noqa: E402
from objective_corpus import CLS, SEP, UNUSED0, original_ids, read_examples, write_unique_corpus  # noqa: E402

from bert_data.tools import create as cli  # noqa: E402

SEQ, PRED = 32, 5
MLM_KEYS = {"input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions", "masked_lm_weights"}
SENTENCES = [3, 1, 5, 2, 4, 6, 1, 3, 2, 4]
WORDS = [7, 12, 3, 9, 15, 5]
SPLIT = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_unique_corpus(tmp_path_factory.mktemp("mlm_unique"), SENTENCES, WORDS)


def run(corpus, out: Path, **extra) -> Dict:
    flags = dict(
        mlm_only=True, single_sentence_per_line=True, split_num=SPLIT, dupe_factor=1, short_seq_prob=0,
        max_seq_length=SEQ, max_predictions_per_seq=PRED, overlap_size=0,
    )
    flags.update(extra)
    cross = flags.pop("allow_cross_document_examples", True)  # (base_args drops False values)
    flags["allow_cross_document_examples" if cross else "no-allow_cross_document_examples"] = True
    assert cli.main(base_args(corpus.metadata, corpus.vocab, out, **flags)) == 0
    return json.loads((out / "data_params.json").read_text())


def group_streams(corpus, separator: int, cross: bool) -> List[List[int]]:
    """Expected streams: per group (cross-document) or per document."""
    streams = []
    for g in range(0, len(corpus.docs), SPLIT):
        docs = [corpus.doc_ids(d) for d in range(g, min(g + SPLIT, len(corpus.docs)))]
        if cross:
            stream: List[int] = []
            for i, ids in enumerate(docs):
                stream += ([separator] if i else []) + ids
            streams.append(stream)
        else:
            streams.extend(docs)
    return streams


def locate_windows(examples, streams, separator) -> Dict[int, List[Tuple[int, int]]]:
    """stream index -> sorted (start, length) of every window, checking each window's content
    is exactly that slice of that stream."""
    where = {t: (s, i) for s, stream in enumerate(streams) for i, t in enumerate(stream) if t != separator}
    found: Dict[int, List[Tuple[int, int]]] = {}
    for ex in examples:
        ids = original_ids(ex)
        n = int(ex["input_mask"].sum())
        assert ex["input_mask"][:n].all() and not ex["input_mask"][n:].any()
        assert ids[0] == CLS and ids[n - 1] == SEP and not ids[n:].any()
        content = ids[1 : n - 1].tolist()
        offset = next(i for i, t in enumerate(content) if t != separator)
        s, pos = where[content[offset]]
        start = pos - offset
        assert streams[s][start : start + len(content)] == content
        found.setdefault(s, []).append((start, len(content)))
    return {s: sorted(v) for s, v in found.items()}


@pytest.mark.parametrize("overlap, cross", [(0, True), (5, True), (3, False)])
def test_windows_cover_each_stream_in_order_with_overlap(corpus, tmp_path, overlap, cross):
    manifest = run(corpus, tmp_path / "out", overlap_size=overlap, allow_cross_document_examples=cross, disable_masking=True, unmasked_format="ids")
    examples = read_examples(tmp_path / "out")
    assert {frozenset(ex) for ex in examples} == {frozenset({"input_ids", "input_mask"})}
    streams = group_streams(corpus, SEP, cross)
    windows = locate_windows(examples, streams, SEP)
    assert sorted(windows) == list(range(len(streams)))  # every stream, none crossing a group
    for s, spans in windows.items():
        assert spans[0][0] == 0
        assert spans[-1][0] + spans[-1][1] == len(streams[s])  # the end is covered
        for (a, la), (b, lb) in zip(spans, spans[1:]):
            assert la == SEQ - 2  # all but the last window are full
            assert b == a + la - overlap  # exactly `overlap` tokens shared
        assert spans[-1][1] > (overlap if len(spans) > 1 else 0)  # the last window adds new tokens
    assert manifest["n_examples"] == len(examples) == sum(len(v) for v in windows.values())
    assert manifest["objective"] == "mlm_only" and manifest["record_schema"] == "unmasked"
    assert set(manifest["schema"]) == {"input_ids", "input_mask"}


def test_separator_only_between_documents_and_never_masked(corpus, tmp_path):
    manifest = run(corpus, tmp_path / "out", document_separator_token="[unused0]", dupe_factor=2)
    examples = read_examples(tmp_path / "out")
    assert {frozenset(ex) for ex in examples} == {frozenset(MLM_KEYS)}  # no segment_ids / next_sentence_labels
    assert set(manifest["schema"]) == MLM_KEYS and manifest["record_schema"] == "mlm_only"
    streams = group_streams(corpus, UNUSED0, True)
    windows = locate_windows(examples, streams, UNUSED0)
    assert all(len(v) % 2 == 0 for v in windows.values())  # two passes, the same windows (no short windows)
    spanning = 0
    for ex in examples:
        ids = original_ids(ex)
        n = int(ex["input_mask"].sum())
        used = ex["masked_lm_weights"] > 0
        positions = ex["masked_lm_positions"][used]
        assert 1 <= used.sum() <= PRED and (np.diff(positions) > 0).all()
        assert positions.min() >= 1 and positions.max() <= n - 2  # never [CLS] or the final [SEP]
        assert not np.isin(ids[positions], [UNUSED0, CLS, SEP]).any()
        assert (ex["masked_lm_positions"][~used] == 0).all() and (ex["masked_lm_ids"][~used] == 0).all()
        # a separator sits between the last token of one document and the first of the next
        for i in np.flatnonzero(ids[:n] == UNUSED0):
            spanning += 1
            if 1 < i < n - 2:
                assert ids[i + 1] == ids[i - 1] + 1  # unique ids run on across documents
        assert ex["input_ids"][0] == CLS and ex["input_ids"][n - 1] == SEP
    assert manifest["windows_spanning_documents"] > 0
    assert spanning >= manifest["windows_spanning_documents"]


def test_masking_statistics_and_whole_words(tmp_path):
    """Static MLM-only masking: ~15% of tokens, 80/10/10, whole words kept together."""
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=12), write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, mlm_only=True, mask_whole_word=True, max_seq_length=64,
                     max_predictions_per_seq=20, dupe_factor=4)
    assert cli.main(args) == 0
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    mask_id = tokens.index("[MASK]")
    continuation = np.asarray([t.startswith("##") for t in tokens])
    kinds = Counter()
    for ex in read_examples(out):
        assert set(ex) == MLM_KEYS
        used = ex["masked_lm_weights"] > 0
        positions = ex["masked_lm_positions"][used]
        orig = original_ids(ex)
        n = int(ex["input_mask"].sum())
        assert used.sum() <= min(20, max(1, round(n * 0.15)))
        chosen = set(positions.tolist())
        for p in positions.tolist():  # whole words: the next piece, if a ## continuation, is chosen too
            if p + 1 < n - 1 and continuation[orig[p + 1]] and orig[p + 1] != 0:
                assert p + 1 in chosen
        new = ex["input_ids"][positions]
        kinds["mask"] += int((new == mask_id).sum())
        kinds["keep"] += int((new == orig[positions]).sum())
        kinds["total"] += len(positions)
    assert kinds["total"] > 500
    assert abs(kinds["mask"] / kinds["total"] - 0.8) < 0.06


def test_byte_identical_reruns_any_worker_count_and_buffer(corpus, tmp_path):
    extra = dict(overlap_size=4, short_seq_prob=0.3, min_short_seq_length=3, dupe_factor=2, num_output_files=2)
    run(corpus, tmp_path / "a", **extra)
    run(corpus, tmp_path / "b", **extra)
    run(corpus, tmp_path / "c", num_workers=2, **extra)
    for name in ("examples-1.tfrecords", "examples-2.tfrecords"):
        first = (tmp_path / "a" / name).read_bytes()
        assert first == (tmp_path / "b" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    # --buffer_size only batches the work: the unmasked windows are the same multiset
    small = run(corpus, tmp_path / "small", disable_masking=True, unmasked_format="ids", buffer_size=SEQ * 2, **extra)
    large = run(corpus, tmp_path / "large", disable_masking=True, unmasked_format="ids", **extra)
    rows = lambda out: sorted(tuple(ex["input_ids"].tolist()) for ex in read_examples(out))  # noqa: E731
    assert rows(tmp_path / "small") == rows(tmp_path / "large")
    assert small["n_examples"] == large["n_examples"]


def test_short_windows_and_overlap_respected(corpus, tmp_path):
    run(corpus, tmp_path / "out", overlap_size=4, short_seq_prob=0.5, min_short_seq_length=2, disable_masking=True, unmasked_format="ids")
    streams = group_streams(corpus, SEP, True)
    windows = locate_windows(read_examples(tmp_path / "out"), streams, SEP)
    lengths = []
    for s, spans in windows.items():
        for (a, la), (b, lb) in zip(spans, spans[1:]):
            assert b == a + la - 4 and 5 <= la <= SEQ - 2  # short windows still advance: > overlap
            lengths.append(la)
    assert min(lengths) < SEQ - 2  # some windows were short


@pytest.mark.parametrize(
    "extra, message",
    [
        (dict(mlm_only=True, sentence_order_prediction=True), ["--sentence_order_prediction", "--mlm_only"]),
        (dict(disable_masking=True), ["--disable_masking", "--mlm_only"]),
        (dict(mlm_only=True, disable_masking=True, mask_whole_word=True), ["--mask_whole_word", "--disable_masking"]),
        (dict(mlm_only=True, overlap_size=30), ["--overlap_size 30", "--max_seq_length - 2"]),
        (dict(overlap_size=3), ["--overlap_size", "--mlm_only"]),
        (dict(mlm_only=True, buffer_size=10), ["--buffer_size 10"]),
        (dict(mlm_only=True, allow_cross_document_examples=True, document_separator_token="[nope]"),
         ["--document_separator_token", "not in --vocab_file"]),
        (dict(mlm_only=True, allow_cross_document_examples=True, document_separator_token="[MASK]"),
         ["--document_separator_token [MASK]"]),
    ],
)
def test_contradictory_flags_are_one_line_errors(tmp_path, capsys, extra, message):
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=2), write_vocab(tmp_path / "vocab.txt")
    assert cli.main(base_args(metadata, vocab, tmp_path / "out", **extra)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("create_tfrecords: error:") and len(err.splitlines()) == 1
    for part in message:
        assert part in err
    assert not (tmp_path / "out").exists()


def test_mlm_only_entry_point_prepends_the_flag(tmp_path, monkeypatch):
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=3), write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["create_tfrecords_mlm_only", *base_args(metadata, vocab, out, buffer_size="1e4")])
    with pytest.raises(SystemExit) as exit_info:
        cli.mlm_only_entry_point()
    assert exit_info.value.code == 0
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["mlm_only"] is True and manifest["buffer_size"] == 10000 and manifest["objective"] == "mlm_only"


def test_model_zoo_mlm_only_defaults(tmp_path, capsys, caplog):
    """create_tfrecords_mlm_only's defaults are the Model Zoo's: windows within one document,
    overlap max_seq_length / 4, short windows of at least 2 + overlap; resolved up front, so the
    manifest and --print_config show the numbers; a separator token that cannot apply says so."""
    from bert_data.presets import build_config

    config = build_config({"metadata_files": ["m"], "vocab_file": "v", "mlm_only": True, "max_seq_length": 128})
    assert (config.allow_cross_document_examples, config.overlap_size, config.min_short_seq_length) == (False, 32, 34)
    nsp = build_config({"metadata_files": ["m"], "vocab_file": "v", "max_seq_length": 128})
    assert (nsp.overlap_size, nsp.min_short_seq_length) == (0, 2)
    assert build_config({"metadata_files": ["m"], "vocab_file": "v", "mlm_only": True, "overlap_size": 5}).min_short_seq_length == 7
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=4), write_vocab(tmp_path / "vocab.txt")
    assert cli.main(base_args(metadata, vocab, tmp_path / "out", mlm_only=True, document_separator_token="[unused0]")) == 0
    manifest = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert (manifest["overlap_size"], manifest["min_short_seq_length"], manifest["allow_cross_document_examples"]) == (8, 10, False)
    assert "--document_separator_token [unused0] has no effect" in caplog.text


def test_model_zoo_spellings_and_names(tmp_path, capsys, caplog):
    """Values the Model Zoo accepts work with its meaning (--split_num 0: no limit on files per
    group, --num_output_files 0: one file); create_tfrecords_mlm_only --help and errors carry its
    own name; our sentencizer default is said once, with how to match the Model Zoo's."""
    import logging

    metadata, vocab = write_corpus(tmp_path / "c", n_docs=4), write_vocab(tmp_path / "vocab.txt")
    caplog.set_level(logging.INFO, logger="bert_data")
    code = cli.main(base_args(metadata, vocab, tmp_path / "out", split_num=0, num_output_files=0), prog=cli.MLM_ONLY_PROG)
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert manifest["objective"] == "mlm_only" and manifest["num_output_files"] == 1
    assert manifest["split_num"] == 1 << 20 and manifest["groups"] == 1
    assert "pass --spacy_model en_core_web_sm to segment as it does" in capsys.readouterr().out  # the summary says it
    with pytest.raises(SystemExit):
        cli.main(["--help"], prog=cli.MLM_ONLY_PROG)
    shown = capsys.readouterr().out
    assert shown.startswith("usage: create_tfrecords_mlm_only") and "masked-LM-only" in shown
    assert "next sentence prediction" not in shown.split("options:")[0]
    assert cli.main(base_args(metadata, vocab, tmp_path / "bad", overlap_size=-1), prog=cli.MLM_ONLY_PROG) == 2
    assert capsys.readouterr().err.startswith("create_tfrecords_mlm_only: error: --overlap_size -1")
