"""Tools at the edges helper-29 found (each a traceback, a crash, or exit 0 with less than asked):
a stdout that cannot encode the summary, build_vocab's sizes, ``--output_dir memory://`` and URLs
naming nothing, ``inspect_tfrecords --plot`` names and a report that stdout cannot take."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import base_args, write_corpus, write_vocab


def _cli(module: str, args: List[str], env: Dict[str, str] = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("tool_edges")
    return {"metadata": write_corpus(root / "corpus", n_docs=8), "vocab": write_vocab(root / "vocab.txt"), "root": root}


def test_a_summary_stdout_cannot_encode_is_escaped_not_a_traceback_after_the_run(corpus, tmp_path) -> None:
    out = tmp_path / "o_é"
    done = _cli("bert_data.tools.create", base_args(corpus["metadata"], corpus["vocab"], out),
                env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "o_\\xe9" in done.stdout and (out / "data_params.json").exists()


@pytest.mark.parametrize("flag, value, line", [
    ("--vocab_size", "1000000000", "--vocab_size must be at most 4,194,304 (BERT's are ~30,000), got 1000000000"),
    ("--vocab_size", str(2**64), f"--vocab_size must be at most 4,194,304 (BERT's are ~30,000), got {2**64}"),
    ("--min_frequency", "99999999999999999999", "--min_frequency must be between 1 and 2,147,483,647, got 99999999999999999999"),
])
def test_build_vocab_refuses_sizes_its_trainer_cannot_take(corpus, tmp_path, flag, value, line) -> None:
    """10^9 tokens aborted the process in the trainer (a 70 GB allocation, exit 134); past 2^64
    it raised OverflowError (a traceback, exit 1)."""
    flags = {"--metadata_files": corpus["metadata"], "--input_files_prefix": corpus["metadata"].parent,
             "--output": tmp_path / "v.txt", "--vocab_size": "2000", flag: value}
    done = _cli("bert_data.tools.vocab", [item for pair in flags.items() for item in pair] + ["--quiet"])
    assert done.returncode == 2 and done.stderr.strip() == f"build_vocab: error: {line}", done.stderr


def test_a_memory_url_output_from_a_program_is_refused(corpus) -> None:
    """It said "wrote 60 instances ... into memory://x/y", exit 0: gone when the process ended."""
    done = _cli("bert_data.tools.create", base_args(corpus["metadata"], corpus["vocab"], "memory://x/y"))
    assert done.returncode == 2 and done.stderr.strip() == (
        "create_tfrecords: error: --output_dir memory://x/y: memory:// lives in this process and is gone when it exits; "
        "write to a path or a shared URL (memory:// is for a library caller of run_job)"), done.stderr


@pytest.mark.parametrize("url, example", [("s3://", "s3://BUCKET/DIR"), ("gs:///", "gs://BUCKET/DIR"),
                                          ("file://", "file:///PATH/TO/DIR")])
def test_a_url_that_names_no_bucket_is_refused_and_creates_nothing(corpus, tmp_path, url, example) -> None:
    """s3:// made a local directory 's3:' in the working directory, then failed there."""
    done = _cli("bert_data.tools.create", base_args(corpus["metadata"], corpus["vocab"], url), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"create_tfrecords: error: --output_dir {url} names no bucket or directory: give one ({example})"), done.stderr
    assert os.listdir(tmp_path) == []


def test_inspects_report_that_stdout_cannot_take_is_not_exit_0(corpus, tmp_path) -> None:
    out = tmp_path / "out"
    assert _cli("bert_data.tools.create", base_args(corpus["metadata"], corpus["vocab"], out)).returncode == 0
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "bert_data.tools.inspect", str(out), "--stats"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 3 and done.stderr.strip() == (
        "inspect_tfrecords: could not write to standard output (No space left on device); the report was not "
        "written: free the device or write it elsewhere"), done.stderr


@pytest.mark.parametrize("name", ["a\nb", ".bert_data_work", ".hidden", "tab\there"])
def test_a_name_that_hides_its_shards_or_breaks_the_printed_glob_is_refused(corpus, tmp_path, name) -> None:
    """--name 'a\\nb' made files named across two lines and printed a broken --input_file glob;
    --name .bert_data_work made hidden shards a DIR/* glob misses (helper-29)."""
    from bert_data.tools.create import main

    code = main(base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", name=name))
    assert code == 2 and not (tmp_path / "out").exists()
