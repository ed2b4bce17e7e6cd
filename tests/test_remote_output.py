"""Documents and output behind URLs (fsspec, through bert_data.storage), for the local and Dask
runners: ``file://`` (a real multi-process shared file system, through the URL code path: the
object-store layout of bert_data.output.object_store) and ``memory://`` (an object store without
directories, in one process). The shards must be byte-identical to a local run's; a killed
coordinator resumes from the group index; a missing package or an unknown scheme is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict

import fsspec
import pytest

from bert_data import storage
from bert_data.tools.create import main

from conftest import base_args, write_corpus, write_vocab

IGNORED = {"output_dir", "num_workers", "runner", "input_files_prefix", "metadata_files"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    metadata = write_corpus(root / "corpus", n_docs=24)
    vocab = write_vocab(root / "vocab.txt")
    local = root / "local"
    assert main(_args(metadata, vocab, local)) == 0
    return {"metadata": metadata, "vocab": vocab, "local": local}


def _args(metadata: Path, vocab: Path, out, **extra):
    return base_args(metadata, vocab, out, split_num=4, num_output_files=5, **extra)


def _shards(directory: Path) -> Dict[str, bytes]:
    found = {p.name: p.read_bytes() for p in sorted(directory.glob("*.tfrecords"))}
    assert len(found) == 5 and any(found.values())
    return found


def _manifest(directory: Path) -> dict:
    data = json.loads((directory / "data_params.json").read_text())
    return {k: v for k, v in data.items() if k not in IGNORED}


@pytest.mark.parametrize("workers", [1, 2])
def test_file_url_output_is_byte_identical(corpus, tmp_path, workers):
    out = tmp_path / "out"
    assert main(_args(corpus["metadata"], corpus["vocab"], f"file://{out}", num_workers=workers)) == 0
    assert _shards(out) == _shards(corpus["local"])
    assert _manifest(out) == _manifest(corpus["local"])
    assert sorted(p.name for p in out.iterdir()) == sorted([*_shards(out), "data_params.json"])  # no work dir left


def test_documents_and_metadata_behind_urls(corpus, tmp_path):
    metadata = f"file://{corpus['metadata']}"
    args = _args(corpus["metadata"], corpus["vocab"], tmp_path / "out", num_workers=2)
    args[args.index("--metadata_files") + 1] = metadata
    args[args.index("--input_files_prefix") + 1] = f"file://{corpus['metadata'].parent}"
    assert main(args) == 0
    assert _shards(tmp_path / "out") == _shards(corpus["local"])


def test_memory_object_store_in_one_process(corpus, tmp_path):
    """memory:// has no directories and nothing survives outside this process: the whole
    object-store path (probe, fragments, index, shards, manifest last) in-process."""
    url = f"memory://bert-data-test-{os.getpid()}/out"
    try:
        assert main(_args(corpus["metadata"], corpus["vocab"], url, num_workers=1)) == 0
        fs = fsspec.filesystem("memory")
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.find(url))
        assert names == sorted([*_shards(corpus["local"]), "data_params.json"])
        for name, data in _shards(corpus["local"]).items():
            assert storage.read_bytes(f"{url}/{name}") == data
    finally:
        fsspec.filesystem("memory").rm(url, recursive=True)


def test_dask_runner_writes_to_a_url(corpus, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    assert main(_args(corpus["metadata"], corpus["vocab"], f"file://{out}", num_workers=2, runner="dask")) == 0
    assert _shards(out) == _shards(corpus["local"])


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_killed_coordinator_resumes_from_the_index(corpus, tmp_path, runner):
    if runner == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "out"
    args = [sys.executable, "-m", "bert_data.tools.create",
            *_args(corpus["metadata"], corpus["vocab"], f"file://{out}", num_workers=2, runner=runner)]
    killed = subprocess.run(args, env={**os.environ, "BERT_DATA_CRASH_AT": "indexed:2"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (out / "data_params.json").exists() and not list(out.glob("*.tfrecords"))
    done = sorted(p.name for p in (out / ".bert_data_work" / "index").iterdir())
    assert done[:3] == ["g000000000.json", "g000000001.json", "g000000002.json"]
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--overwrite" in again.stderr and again.stderr.count("\n") == 1
    resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert _shards(out) == _shards(corpus["local"])
    assert not (out / ".bert_data_work").exists()


def test_resume_refuses_changed_settings(corpus, tmp_path):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "bert_data.tools.create",
            *_args(corpus["metadata"], corpus["vocab"], f"file://{out}", num_workers=1)]
    killed = subprocess.run(args, env={**os.environ, "BERT_DATA_CRASH_AT": "indexed:1"}, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    changed = subprocess.run(args + ["--resume", "--dupe_factor", "3"], capture_output=True, text=True, timeout=300)
    assert changed.returncode == 2 and "dupe_factor" in changed.stderr and changed.stderr.count("\n") == 1


@pytest.mark.parametrize("url, says", [
    ("s3://bucket/out", "pip install s3fs"),
    ("nosuchscheme://bucket/out", "check the URL's scheme"),
])
def test_a_url_that_cannot_be_used_is_one_line(corpus, tmp_path, capsys, url, says, monkeypatch):
    if url.startswith("s3://"):
        try:
            import s3fs  # noqa: F401
            pytest.skip("s3fs is installed here")
        except ImportError:
            pass
    assert main(_args(corpus["metadata"], corpus["vocab"], url)) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_memory_with_worker_processes_is_refused(corpus, capsys):
    assert main(_args(corpus["metadata"], corpus["vocab"], "memory://b/out", num_workers=2)) == 2
    assert "--num_workers 1" in capsys.readouterr().err


def test_a_url_vocabulary_outside_beam_is_one_line(corpus, tmp_path, capsys):
    args = _args(corpus["metadata"], corpus["vocab"], tmp_path / "out")
    args[args.index("--vocab_file") + 1] = f"file://{corpus['vocab']}"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--runner beam only" in err and err.count("\n") == 1


def test_staging_keeps_documents_with_one_base_name_apart(tmp_path):
    """Two remote documents named alike (a/x.txt, b/x.txt) are staged to distinct local copies
    (the copies are made by parallel threads)."""
    from bert_data.metadata import DocumentSource, WorkItem
    from bert_data.runners.worker import stage_sources

    items = []
    for n, sub in enumerate("abcdefgh"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "x.txt").write_text(f"document {sub}\n")
        items.append(WorkItem(DocumentSource(f"file://{tmp_path}/{sub}/x.txt", "m.txt", n + 1, f"{sub}/x.txt")))
    stage = tmp_path / "stage"
    stage.mkdir()
    staged, renames = stage_sources(items, str(stage))
    texts = [Path(item.source.path).read_text() for item in staged]
    assert texts == [f"document {sub}\n" for sub in "abcdefgh"]
    assert sorted(renames.values()) == sorted(item.source.path for item in items)
