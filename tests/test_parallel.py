"""Parallel workers change nothing: shards, records and data_params.json are byte-identical
for ``--num_workers`` 1, 2 and 3, and across reruns (plain and gzip output).

Each run writes into the *same* ``--output_dir`` path (moved aside afterwards), so a setting
that merely names the run's directory cannot differ between runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict

import pytest
from conftest import base_args, write_corpus, write_vocab

from bert_data.tools.create import main as create_tfrecords
from bert_data.format.example_wire import parse_example
from bert_data.format.tfrecord import iter_records

N_DOCS = 30
SPLIT_NUM = 4  # 8 groups: more groups than workers, so groups finish out of order
NUM_SHARDS = 3
WORKER_COUNTS = (1, 2, 3)
EXECUTION_ONLY_KEYS = ("num_workers",)  # settings that describe how a run ran, not what it wrote


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("parallel")
    metadata = write_corpus(root / "corpus", n_docs=N_DOCS, paragraphs=3, sentences_per_paragraph=4)
    vocab = write_vocab(root / "vocab.txt")
    return root, metadata, vocab


def _run(root: Path, metadata: Path, vocab: Path, label: str, **flags: object) -> Path:
    """Run into root/out, then move it to root/<label>; returns the moved directory."""
    out = root / "out"
    if out.exists():
        shutil.rmtree(out)
    args = base_args(metadata, vocab, out, split_num=SPLIT_NUM, num_output_files=NUM_SHARDS, dupe_factor=3, **flags)
    assert create_tfrecords(args) == 0
    target = root / label
    if target.exists():
        shutil.rmtree(target)
    out.rename(target)
    return target


def _files(directory: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module", params=["none", "gzip"])
def outputs(request, corpus):
    root, metadata, vocab = corpus
    compression = request.param
    runs = {
        workers: _run(root, metadata, vocab, f"{compression}_w{workers}", num_workers=workers, compression=compression)
        for workers in WORKER_COUNTS
    }
    rerun = _run(root, metadata, vocab, f"{compression}_w2_again", num_workers=2, compression=compression)
    return compression, runs, rerun


def test_the_corpus_makes_several_groups_and_nonempty_shards(outputs):
    compression, runs, _ = outputs
    manifest = json.loads((runs[1] / "data_params.json").read_text())
    assert manifest["documents"]["read"] == N_DOCS
    assert -(-N_DOCS // SPLIT_NUM) >= 3 * max(WORKER_COUNTS) - 1  # far more groups than workers
    assert manifest["compression"] == compression
    per_shard = manifest["instances_per_shard"]
    assert len(per_shard) == NUM_SHARDS and all(n > 0 for n in per_shard.values())
    assert sum(per_shard.values()) == manifest["n_examples"] > 0


@pytest.mark.parametrize("workers", WORKER_COUNTS[1:])
def test_every_shard_is_byte_identical_across_worker_counts(outputs, workers):
    _, runs, _ = outputs
    one, many = _files(runs[1]), _files(runs[workers])
    assert sorted(one) == sorted(many)
    shards = [name for name in one if name.endswith(".tfrecords")]
    assert len(shards) == NUM_SHARDS
    for name in shards:
        assert one[name] == many[name], f"{name} differs between 1 and {workers} workers"


@pytest.mark.parametrize("workers", WORKER_COUNTS[1:])
def test_records_are_identical_across_worker_counts(outputs, workers):
    """The decoded records too (and in order): guards against a reader-visible difference."""
    _, runs, _ = outputs
    for shard in sorted(runs[1].glob("*.tfrecords")):
        a = [parse_example(r) for r in iter_records(str(shard))]
        b = [parse_example(r) for r in iter_records(str(runs[workers] / shard.name))]
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert x.keys() == y.keys()
            for key in x:
                assert list(x[key]) == list(y[key]), f"{shard.name}: feature {key} differs"


def test_rerun_is_byte_identical(outputs):
    _, runs, rerun = outputs
    assert _files(runs[2]) == _files(rerun)


def test_data_params_identical_except_execution_settings(outputs):
    _, runs, _ = outputs
    base = json.loads((runs[1] / "data_params.json").read_text())
    for workers in WORKER_COUNTS[1:]:
        other = json.loads((runs[workers] / "data_params.json").read_text())
        differing = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k))
        assert set(differing) <= set(EXECUTION_ONLY_KEYS), f"data_params.json keys differ: {differing}"


def test_shards_are_compressed_as_asked(outputs):
    compression, runs, _ = outputs
    import gzip

    for shard in runs[1].glob("*.tfrecords"):
        data = shard.read_bytes()
        assert (data[:2] == b"\x1f\x8b") == (compression == "gzip")
        if compression == "gzip":
            assert len(gzip.decompress(data)) > len(data)
