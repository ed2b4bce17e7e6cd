"""One run at a time per output directory (issue 15, class 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from bert_data.runners.lock import LOCK_NAME, output_lock

from conftest import base_args, write_corpus, write_vocab


def _cli(args, env=None):
    return subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_a_second_run_on_a_locked_directory_is_refused_naming_the_holder(tmp_path) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    with output_lock(str(out)):  # this test process is "the first run"
        for extra in ([], ["--overwrite"], ["--resume"]):
            refused = _cli(base_args(metadata, vocab, out) + extra)
            assert refused.returncode == 2, refused.stderr
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1 and f"--output_dir {out} is in use by another run (pid {os.getpid()} on " in lines[0]
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (out / LOCK_NAME).exists()
    done = _cli(base_args(metadata, vocab, out))  # released: the directory is usable again
    assert done.returncode == 0, done.stderr
    assert not (out / LOCK_NAME).exists() and (out / "data_params.json").exists()


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=9)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, split_num=3)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    assert (out / LOCK_NAME).exists()  # the file stays; the kernel released its lock
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert not (out / LOCK_NAME).exists()


def test_validation_split_locks_the_parent_directory(tmp_path) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    with output_lock(str(out)):
        refused = _cli(base_args(metadata, vocab, out, validation_fraction=0.3))
        assert refused.returncode == 2 and "is in use by another run" in refused.stderr
    assert _cli(base_args(metadata, vocab, out, validation_fraction=0.3)).returncode == 0
    assert sorted(p.name for p in Path(out).iterdir()) == ["train", "validation"]
