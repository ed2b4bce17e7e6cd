"""NSP negatives from the run's corpus-wide pool (bert_data.negatives, issue 25).

* the pool is chosen at plan time by a seeded rank of each candidate, in bounded memory, the same
  whatever the order of the entries, the groups, units or workers;
* a random B never comes from A's original document: pieces of a document cut at
  ``--max_document_chars`` (one document per file, and JSON Lines, identified by its text) are
  one document;
* units of one document (small ``--group_bytes``) still get negatives;
* the output stays byte-identical for 1, 2 and 3 workers and after kill -9 + ``--resume``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.documents import ReadOptions
from bert_data.input_formats import ContinuedPiece
from bert_data.instances import InstanceParams, Negatives, plan_pairs
from bert_data.metadata import DocumentSource, WorkItem
from bert_data.negatives import (
    ENTRY_CHARS, MAX_ENTRIES, POOL_MAX_CHARS, POOL_MIN_CHARS, STREAM_WINDOWS, WINDOW, DocumentOrigins,
    NegativePool, PoolSelector, build_pool, decode_pool, encode_pool, pool_cap,
)
from conftest import make_group
from objective_corpus import original_ids, write_unique_corpus
from record_stats import nsp_columns

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def source(entry: str) -> DocumentSource:
    return DocumentSource(f"/corpus/{entry}", "meta.txt", 1, entry)


# --- plan time: which candidates --------------------------------------------------------------


def test_pool_cap_is_a_share_of_the_input_between_a_floor_and_a_ceiling() -> None:
    assert pool_cap(0) == pool_cap(100 << 20) == POOL_MIN_CHARS == 512 << 10
    assert pool_cap(512 << 20) == 2 << 20  # 1/256
    assert pool_cap(10 << 30) == POOL_MAX_CHARS == 4 << 20


@SETTINGS
@given(sizes=st.lists(st.integers(0, 3 * WINDOW), min_size=1, max_size=80), seed=st.integers(0, 2**32),
       order=st.randoms(use_true_random=False))
def test_the_pool_is_a_seeded_sample_whatever_the_order_of_the_entries(sizes, seed, order) -> None:
    """The same candidates for any order of the entries (a rank, not a position), duplicates
    once, empty files never; the lowest ranks first."""
    entries = [(source(f"d{i}.txt"), size) for i, size in enumerate(sizes)]

    def chosen(listing) -> List[tuple]:
        selector = PoolSelector(seed, "/corpus", lambda s: True)
        for src, size in listing:
            selector.add(src, size)
        return [(i.source.entry, i.start, i.end) for i in selector.items(sum(sizes))[1]]

    first = chosen(entries)
    shuffled = list(entries) + entries[:3]  # duplicates too
    order.shuffle(shuffled)
    assert chosen(shuffled) == first
    assert len(set(first)) == len(first)
    assert all(sizes[int(entry[1:-4])] > 0 for entry, _, _ in first)
    estimated = sum(min(end - start, ENTRY_CHARS) if end else min(sizes[int(e[1:-4])], ENTRY_CHARS) for e, start, end in first)
    candidates = sum(-(-s // WINDOW) for s in sizes if s > 0)
    if len(first) < candidates:
        assert estimated >= 2 * pool_cap(sum(sizes))  # it stopped because it had enough (RESERVE x the cap)


def test_large_files_offer_windows_ranges_or_stream_windows() -> None:
    selector = PoolSelector(7, "/corpus", lambda s: s.entry.endswith(".txt"))
    selector.add(source("book.txt"), 5 * WINDOW + 10)  # rangeable: byte ranges
    selector.add(source("big.jsonl.gz"), 40 * WINDOW)  # read from its start: stream windows
    selector.add(source("small.txt"), 100)
    _, items = selector.items(1 << 40)  # a cap that takes every candidate
    assert len(items) == 6 + 40 + 1
    by_entry: Dict[str, List[WorkItem]] = {}
    for item in items:
        by_entry.setdefault(item.source.entry, []).append(item)
    assert sorted((i.start, i.end) for i in by_entry["book.txt"]) == [
        (w * WINDOW, min(w * WINDOW + WINDOW, 5 * WINDOW + 10)) for w in range(6)]
    assert sorted((i.start, i.end) for i in by_entry["big.jsonl.gz"]) == [(w * WINDOW, None) for w in range(40)]
    assert [(i.start, i.end) for i in by_entry["small.txt"]] == [(0, None)]
    huge = PoolSelector(7, "/corpus", lambda s: False)
    huge.add(source("huge.jsonl.gz"), 100 * STREAM_WINDOWS * WINDOW)
    assert all(i.start < STREAM_WINDOWS * WINDOW for i in huge.items(1 << 40)[1])  # its first 16 MiB only


def test_the_selection_is_bounded_while_the_metadata_streams() -> None:
    selector = PoolSelector(0, "", lambda s: False)
    for i in range(3 * MAX_ENTRIES):
        selector.add(source(f"d{i}.txt"), 100)
    assert len(selector._heap) == MAX_ENTRIES
    selector = PoolSelector(0, "", lambda s: False)
    for i in range(2000):
        selector.add(source(f"d{i}.txt"), 10 * WINDOW)  # stream windows of ENTRY_CHARS each
    assert selector._chars < 2 * POOL_MAX_CHARS + ENTRY_CHARS


def test_the_pool_travels_as_one_line() -> None:
    items = [WorkItem(source("a.txt")), WorkItem(source("b.txt"), WINDOW, 2 * WINDOW), WorkItem(source("c.gz"), WINDOW)]
    spec = encode_pool(1234, items, {"meta.txt": 0})
    assert "\n" not in spec
    assert decode_pool(spec, ["meta.txt"]) == (1234, items)


# --- which original document ------------------------------------------------------------------


def test_pieces_of_a_document_are_one_original_document() -> None:
    item = WorkItem(source("f.jsonl"))
    tagged = list(DocumentOrigins(False).tag(item, ["one", ContinuedPiece("one, continued"), "two", "one"]))
    origins = [origin for _, origin in tagged]
    assert origins[0] == origins[1] == origins[3] != origins[2]  # pieces, and an identical document, are one
    per_file = DocumentOrigins(True, "/corpus")
    a = [o for _, o in per_file.tag(WorkItem(source("./docs//a.txt")), ["x", "y"])]
    b = [o for _, o in per_file.tag(WorkItem(source("docs/a.txt"), 5, 9), ["z"])]
    c = [o for _, o in per_file.tag(WorkItem(source("docs/b.txt")), ["x"])]
    assert a[0] == a[1] == b[0] != c[0]


# --- the draws --------------------------------------------------------------------------------


@SETTINGS
@given(unit_docs=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=6), min_size=1, max_size=4),
       pool_docs=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=6), min_size=0, max_size=6),
       origins=st.data(), seed=st.integers(0, 2**32))
def test_a_random_b_never_comes_from_a_document_of_its_own_origin(unit_docs, pool_docs, origins, seed) -> None:
    """Drawn from the pool's tokens (placed after the unit's), never from a pool document of A's
    origin; with no other origin, the pair stays is-next (or the one-sentence chunk is dropped),
    each counted."""
    unit = make_group([[np.full(n, 10 + d, dtype=np.int32) for n in doc] for d, doc in enumerate(unit_docs)])
    pool_group = make_group([[np.full(n, 100 + r, dtype=np.int32) for n in doc] for r, doc in enumerate(pool_docs)])
    pool_origins = [origins.draw(st.integers(0, 3)) for _ in pool_docs]
    unit_origins = [origins.draw(st.integers(0, 3)) for _ in unit_docs]
    pool = NegativePool(pool_group.ids, pool_group.sent_offsets.tolist(), list(pool_group.doc_starts), pool_origins)
    negatives = pool.negatives(unit, unit_origins)
    params = InstanceParams(max_seq_length=24, short_seq_prob=0.2, min_short_seq_length=2, cls_id=2, sep_id=3)
    plan = plan_pairs(unit, params, random.Random(seed), negatives=negatives)
    tokens = np.concatenate([unit.ids, pool_group.ids])
    doc_of_a = np.repeat(np.arange(unit.n_docs), np.diff(unit.sent_offsets[unit.doc_starts]))
    for r in range(len(plan)):
        a_doc = int(doc_of_a[plan.a_lo[r]])
        b = tokens[plan.b_lo[r]:plan.b_hi[r]]
        if plan.is_random_next[r]:
            assert plan.b_lo[r] >= len(unit.ids) and len(b)
            assert pool_origins[int(b[0]) - 100] != unit_origins[a_doc]
        else:
            assert plan.b_hi[r] <= len(unit.ids)
    assert plan.random_next == sum(plan.is_random_next)
    if all(pool.available(o) for o in unit_origins):
        assert plan.negatives_unavailable == plan.continuations_kept == 0


def test_the_unit_as_its_own_negatives_draws_as_before() -> None:
    """Without a pool (a library caller), the unit's other documents: the draws of the earlier
    releases exactly (what tests/test_instances.py holds to BERT's chunking)."""
    unit = make_group([[np.full(4, 10 + d, dtype=np.int32)] * 5 for d in range(5)])
    params = InstanceParams(max_seq_length=16, short_seq_prob=0.1, min_short_seq_length=2, cls_id=2, sep_id=3)
    default = plan_pairs(unit, params, random.Random(3))
    explicit = plan_pairs(unit, params, random.Random(3), negatives=Negatives(
        unit.sent_offsets.tolist(), unit.doc_starts, 0, None, lambda d: (d,)))
    assert [list(v) for v in (default.a_lo, default.b_lo, default.b_hi, default.is_random_next)] == [
        list(v) for v in (explicit.a_lo, explicit.b_lo, explicit.b_hi, explicit.is_random_next)]


# --- end to end -------------------------------------------------------------------------------


class _Segmenter:
    def segment(self, documents):
        return [[line for line in d.split("\n") if line.strip()] for d in documents], 0


def _cli(args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_data.tools.create", *map(str, args)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)


@pytest.fixture(scope="module")
def long_documents(tmp_path_factory):
    """3 documents of ~70K characters (cut into pieces at --max_document_chars 16000) and 30
    short ones, every token unique; also as one JSON Lines file."""
    root = tmp_path_factory.mktemp("negatives")
    corpus = write_unique_corpus(root / "text", [1100, 1100, 1100] + [20] * 30, [6, 9, 12])
    lines = []
    for d in range(len(corpus.docs)):
        text = (root / "text" / "docs" / f"d{d:04d}.txt").read_text(encoding="utf-8")
        lines.append(json.dumps({"text": text}))
    (root / "jsonl").mkdir()
    (root / "jsonl" / "all.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "jsonl" / "metadata.txt").write_text("all.jsonl\n", encoding="utf-8")
    return {"corpus": corpus, "root": root}


def _args(metadata: Path, vocab: Path, out: Path, *extra: object) -> List[object]:
    return ["--metadata_files", metadata, "--input_files_prefix", metadata.parent, "--vocab_file", vocab,
            "--output_dir", out, "--max_seq_length", 64, "--max_predictions_per_seq", 8, "--dupe_factor", 2,
            "--num_output_files", 3, "--single_sentence_per_line", "--max_document_chars", 16000,
            "--group_bytes", "64K", "--quiet", *extra]


@pytest.mark.parametrize("layout", ["text", "jsonl"])
def test_b_never_comes_from_a_piece_of_its_own_document(long_documents, tmp_path: Path, layout: str) -> None:
    corpus = long_documents["corpus"]
    metadata = corpus.metadata if layout == "text" else long_documents["root"] / "jsonl" / "metadata.txt"
    extra = ["--input_format", "jsonl"] if layout == "jsonl" else []
    out = tmp_path / "out"
    done = _cli(_args(metadata, corpus.vocab, out, "--num_workers", 1, *extra))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["documents_split"]["documents"] == 3  # the long documents were cut into pieces
    assert manifest["units"] > 3 and manifest["nsp_units_without_negatives"] == 0
    assert manifest["nsp_negatives_unavailable"] == manifest["nsp_continuations_kept"] == 0
    doc_of = corpus.doc_of()
    columns = nsp_columns(sorted(out.glob("*.tfrecords")), 64, 8)
    randoms = 0
    for row in range(len(columns["input_ids"])):
        example = {name: values[row] for name, values in columns.items()}
        ids = original_ids(example)
        real = example["input_mask"].astype(bool)
        segment = example["segment_ids"]
        body = real & (ids != 2) & (ids != 3)  # not [CLS] / [SEP]
        a_docs = {doc_of[int(t)] for t in ids[body & (segment == 0)]}
        b_docs = {doc_of[int(t)] for t in ids[body & (segment == 1)]}
        assert len(a_docs) == 1 and len(b_docs) == 1
        if example["next_sentence_labels"][0]:
            randoms += 1
            assert a_docs != b_docs, "a random B from A's own document (a piece of it)"
        else:
            assert a_docs == b_docs
    assert randoms == manifest["nsp_random_next"] and 0.4 < randoms / len(columns["input_ids"]) < 0.7


def test_every_worker_count_and_resume_give_the_same_bytes(long_documents, tmp_path: Path) -> None:
    corpus = long_documents["corpus"]
    outputs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}"
        done = _cli(_args(corpus.metadata, corpus.vocab, out, "--num_workers", workers))
        assert done.returncode == 0, done.stderr
        outputs[workers] = {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}
    assert outputs[1] == outputs[2] == outputs[3]
    manifest = json.loads((tmp_path / "w1" / "data_params.json").read_text())
    assert manifest["groups"] >= 4 and manifest["nsp_negative_pool"]["documents"] >= 3
    out = tmp_path / "resumed"
    args = _args(corpus.metadata, corpus.vocab, out, "--num_workers", 2)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "appended:2"}).returncode == -signal.SIGKILL
    done = _cli(args + ["--resume", "--num_workers", 3])
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))} == outputs[1]
    resumed = json.loads((out / "data_params.json").read_text())
    assert resumed["nsp_negative_pool"] == manifest["nsp_negative_pool"]
    assert "negative_pool" not in resumed  # derived by the plan: neither recorded nor compared


def test_the_pool_is_read_as_the_run_reads(long_documents) -> None:
    """build_pool reads its candidates' documents with the run's options: the pieces of one
    document are one pool document and nothing past each candidate's budget is read."""
    corpus = long_documents["corpus"]
    prefix = str(corpus.metadata.parent)
    selector = PoolSelector(0, prefix, lambda s: True)
    sources = [DocumentSource(str(corpus.metadata.parent / f"docs/d{d:04d}.txt"), str(corpus.metadata), d + 1,
                              f"docs/d{d:04d}.txt") for d in range(len(corpus.docs))]
    for src in sources:
        selector.add(src, os.path.getsize(src.path))
    cap, items = selector.items(sum(os.path.getsize(s.path) for s in sources))
    spec = encode_pool(cap, items, {str(corpus.metadata): 0})
    from bert_data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(corpus.vocab), do_lower_case=True)
    pool = build_pool(spec, ReadOptions(max_document_chars=16000), prefix, [str(corpus.metadata)], _Segmenter(), tokenizer)
    assert pool.facts["negative_pool.characters"] <= cap + ENTRY_CHARS
    assert pool.n_docs == len(pool.origins) and pool.n_docs >= 30
    doc_of = corpus.doc_of()
    for r in range(pool.n_docs):  # each pool document is text of one corpus document
        tokens = pool.ids[pool.offsets[pool.doc_starts[r]]:pool.offsets[pool.doc_starts[r + 1]]]
        assert len({doc_of[int(t)] for t in tokens}) == 1
    assert Counter(len(v) for v in pool.by_origin.values())[1] >= 30


def test_a_compressed_book_offers_windows_of_its_text(long_documents, tmp_path: Path) -> None:
    """A file read from its start (gzip) offers one candidate per 64 KiB window of its text: each
    is the text from the first line start in its window, one original document (the file)."""
    import gzip

    corpus = long_documents["corpus"]
    text = (corpus.metadata.parent / "docs" / "d0000.txt").read_text(encoding="utf-8")
    assert WINDOW < len(text) < WINDOW + ENTRY_CHARS
    (tmp_path / "book.txt.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    src = DocumentSource(str(tmp_path / "book.txt.gz"), "meta.txt", 1, "book.txt.gz")
    selector = PoolSelector(0, str(tmp_path), lambda s: False)
    selector.add(src, len(text))  # (the compressed size would do too: windows of its first 16 MiB)
    cap, items = selector.items(len(text))
    assert sorted((i.start, i.end) for i in items) == [(0, None), (WINDOW, None)]
    from bert_data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(corpus.vocab), do_lower_case=True)
    pool = build_pool(encode_pool(cap, items, {"meta.txt": 0}), ReadOptions(max_document_chars=16000), str(tmp_path),
                      ["meta.txt"], _Segmenter(), tokenizer)
    assert pool.n_docs == 2 and len(set(pool.origins)) == 1  # two places in one book: one document
    book = corpus.doc_ids(0)
    starts = sorted(int(pool.ids[pool.offsets[pool.doc_starts[r]]]) for r in range(2))
    first_line_after = text.find("\n", WINDOW - 1) + 1  # the first line start at or after the window
    words_before = len(text[:first_line_after].split())
    assert starts == [book[0], book[words_before]]
    for r in range(2):
        tokens = pool.ids[pool.offsets[pool.doc_starts[r]]:pool.offsets[pool.doc_starts[r + 1]]].tolist()
        at = book.index(tokens[0])
        assert tokens == book[at:at + len(tokens)]  # contiguous text of the book


def test_a_file_that_cannot_be_ranged_after_all_is_read_from_its_start(long_documents, tmp_path: Path) -> None:
    """The plan opens no file: a large file whose name does not say it is compressed is offered
    as byte ranges; the worker finds it cannot be ranged (UTF-16 here) and reads those windows from
    its start instead: the same text, one original document."""
    from bert_data.negatives import may_range
    from bert_data.tokenization import FullTokenizer

    corpus = long_documents["corpus"]
    text = (corpus.metadata.parent / "docs" / "d0000.txt").read_text(encoding="utf-8")
    path = tmp_path / "book.txt"
    path.write_text(text, encoding="utf-16")  # with a byte-order mark: 2 bytes a character
    src = DocumentSource(str(path), "meta.txt", 1, "book.txt")
    options = ReadOptions(max_document_chars=16000)
    assert may_range(src, options) and not may_range(DocumentSource("/c/b.txt.gz", "m", 1, "b.txt.gz"), options)
    selector = PoolSelector(0, str(tmp_path), lambda s: may_range(s, options))
    selector.add(src, path.stat().st_size)
    cap, items = selector.items(len(text))
    assert [(i.start, i.end is not None) for i in sorted(items, key=lambda i: i.start)] == [
        (0, True), (WINDOW, True), (2 * WINDOW, True)]
    tokenizer = FullTokenizer(str(corpus.vocab), do_lower_case=True)
    pool = build_pool(encode_pool(cap, items, {"meta.txt": 0}), options, str(tmp_path), ["meta.txt"], _Segmenter(),
                      tokenizer)
    book = corpus.doc_ids(0)
    assert pool.n_docs == 2 and len(set(pool.origins)) == 1  # windows at characters 0 and 64K; 128K is past the end
    assert sorted(int(pool.ids[pool.offsets[pool.doc_starts[r]]]) for r in range(2)) == [
        book[0], book[len(text[:text.find("\n", WINDOW - 1) + 1].split())]]
