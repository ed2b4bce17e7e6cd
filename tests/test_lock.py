"""One run at a time per output directory (issue 15, class 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bert_data.errors import OutputError
from bert_data.output.lock import LOCK_NAME, output_lock

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


_HOLDER = """
import sys
from bert_data.output.lock import output_lock
with output_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # hold the lock until the test closes stdin or kills this process
"""


def test_a_real_holder_process_blocks_others_until_it_is_killed(tmp_path) -> None:
    """The first "run" is another process (synchronised by its "locked" line, not by sleeping);
    a second create_tfrecords is refused naming it; once it is SIGKILLed, nothing blocks."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        info = json.loads((out / LOCK_NAME).read_text())
        assert info["pid"] == holder.pid
        for extra in ([], ["--overwrite"], ["--resume"]):
            refused = _cli(base_args(metadata, vocab, out) + extra)
            assert refused.returncode == 2
            assert refused.stderr.strip().splitlines() == [
                f"create_tfrecords: error: --output_dir {out} is in use by another run (pid {holder.pid} on "
                f"{info['host']} since {info['since']}); wait for it to finish or use another --output_dir"
            ]
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # the refused runs touched nothing
    finally:
        holder.kill()
        holder.wait()
    assert holder.returncode == -signal.SIGKILL and (out / LOCK_NAME).exists()  # stale file, no lock
    done = _cli(base_args(metadata, vocab, out))  # a leftover lock file is not "not empty"
    assert done.returncode == 0, done.stderr
    assert not (out / LOCK_NAME).exists()


def test_the_lock_is_exclusive_within_one_process_too(tmp_path) -> None:
    out = tmp_path / "out"
    with output_lock(str(out)):
        with pytest.raises(OutputError, match=f"--output_dir {out} is in use by another run \\(pid {os.getpid()} on "):
            with output_lock(str(out)):
                pass
    with output_lock(str(out)):  # released: can be taken again
        pass


def test_overwrite_with_a_leftover_lock_file_replaces_the_run(tmp_path) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert _cli(base_args(metadata, vocab, out)).returncode == 0
    (out / LOCK_NAME).write_text('{"pid": 1, "host": "elsewhere", "since": "yesterday"}')  # as left by kill -9
    refused = _cli(base_args(metadata, vocab, out))
    assert refused.returncode == 2 and "is not empty; pass --overwrite" in refused.stderr
    done = _cli(base_args(metadata, vocab, out, seed=3) + ["--overwrite"])
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "data_params.json").read_text())["seed"] == 3


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_line(tmp_path, kind) -> None:
    """Never opened through a symbolic link (it would truncate the target), never blocking."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    if kind == "symlink":
        lock.symlink_to(target)
        what = "cannot open its lock file {lock} (a symbolic link or a directory); remove it (no run uses it then)"
    elif kind == "directory":
        lock.mkdir()
        what = "cannot open its lock file {lock} (a symbolic link or a directory); remove it (no run uses it then)"
    else:
        os.mkfifo(lock)
        what = "its lock file {lock} is not a regular file; remove it"
    refused = _cli(base_args(metadata, vocab, out))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --output_dir {out}: " + what.format(lock=lock)
    ]
    assert target.read_text() == "keep me"
    if kind == "directory":
        lock.rmdir()
    else:
        lock.unlink()
    assert _cli(base_args(metadata, vocab, out)).returncode == 0  # the fix the message names works
