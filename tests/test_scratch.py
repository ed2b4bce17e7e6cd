"""A run's scratch directories in $TMPDIR (bert_data.output.scratch): those of killed runs are
removed by the next run, and a full $TMPDIR while a URL run rewrites its shards is named as such."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import base_args, write_corpus, write_vocab

from bert_data.output import object_store, scratch
from bert_data.tools.create import main


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_scratch_of_gone_processes_is_removed_and_no_other(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, alive = _dead_pid(), os.getppid()
    names = {
        f"bert_data_rewrite_{dead}_x1": False, f"bert_data_g000000003_{dead}_x2": False, f"bert_data_plan_{dead}_x3": False,
        f"bert_data_rewrite_{alive}_y": True, f"bert_data_pool_{os.getpid()}_z": True,  # a live process, this one
        "bert_data_rewrite_": True, "bert_data_notes": True, f"other_{dead}_x": True,  # not scratch of ours
    }
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_bytes(b"x")
    scratch.remove_stale_scratch()
    assert {name: (tmp_path / name).exists() for name in names} == names


def test_every_scratch_directory_is_named_for_removal(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = scratch.scratch_dir("g000000012")
    assert os.path.basename(made).startswith(f"bert_data_g000000012_{os.getpid()}_")
    with scratch.scratch_context("plan") as plan:
        assert scratch._NAME.match(os.path.basename(plan))


def test_a_live_process_in_another_pid_namespace_keeps_its_scratch(tmp_path, monkeypatch) -> None:
    """Containers sharing a /tmp number their processes apart: a pid dead here may be a live run
    there. Its directories carry its lock file's token, and stay while the lock is held,
    whatever the pid; once it is free (the process ended) they go, and the lock file with them."""
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _dead_pid()  # the other namespace's pid: no such process here
    lock = tmp_path / f"bert_data_live_{dead}_L0123456789ab"
    held = os.open(lock, os.O_CREAT | os.O_WRONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    theirs = tmp_path / f"bert_data_g000000001_{dead}_L0123456789ab_q1w2"
    orphan = tmp_path / f"bert_data_plan_{dead}_Lba9876543210_q1w2"  # its lock file already reaped
    for directory in (theirs, orphan):
        directory.mkdir()
        (directory / "file").write_bytes(b"x")
    scratch.remove_stale_scratch()
    assert theirs.exists() and lock.exists() and not orphan.exists()
    os.close(held)  # the other run ends (the kernel releases a killed process's lock the same way)
    scratch.remove_stale_scratch()
    assert not theirs.exists() and not lock.exists()


def test_the_scratch_of_a_killed_run_goes_and_a_running_ones_stays(tmp_path, monkeypatch) -> None:
    """Real processes: one makes a scratch directory and waits; while it runs its directory
    stays (its lock is held), after kill -9 the next clean-up removes it and its lock file."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]; from bert_data.output import scratch; "
            "print(scratch.scratch_dir('g000000002'), flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        made = Path(child.stdout.readline().strip())
        assert made.is_dir() and scratch._NAME.match(made.name).group(2)  # named with its token
        mine = Path(scratch.scratch_dir("plan"))
        scratch.remove_stale_scratch()
        assert made.is_dir() and mine.is_dir()
    finally:
        child.kill()
        child.wait()
    scratch.remove_stale_scratch()
    assert not made.exists() and mine.is_dir()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("bert_data_live_")] == [
        f"bert_data_live_{os.getpid()}_L{scratch._NAME.match(mine.name).group(2)}"]  # only this process's lock file


def test_a_process_that_ends_normally_leaves_no_lock_file(tmp_path) -> None:
    code = ("import sys, tempfile, shutil; tempfile.tempdir = sys.argv[1]; from bert_data.output import scratch; "
            "shutil.rmtree(scratch.scratch_dir('plan'))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("scratch")
    return {"metadata": write_corpus(root / "corpus", n_docs=8), "vocab": write_vocab(root / "vocab.txt")}


def _files(directory: Path):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and p.name != "data_params.json"}


def test_a_full_tmpdir_while_a_url_run_rewrites_is_named_and_resumable(corpus, tmp_path, monkeypatch, capsys) -> None:
    """The local copies of a URL run's shards go to $TMPDIR: no room there is one line naming
    TMPDIR (not the URL), and --resume finishes the run with the clean run's bytes."""
    pytest.importorskip("pyarrow")
    reference = tmp_path / "reference"
    assert main(base_args(corpus["metadata"], corpus["vocab"], reference, output_format="parquet")) == 0
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], f"file://{out}", output_format="parquet")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(object_store, "copy_runs", full)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no room in the temporary directory" in err[0] and "TMPDIR" in err[0], err
    assert "--resume" in err[0]
    monkeypatch.undo()
    assert main(args + ["--resume"]) == 0
    assert _files(out) == _files(reference)


def test_a_full_url_while_a_url_run_rewrites_is_the_urls(corpus, tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "out"
    real = object_store.storage.atomic_create

    def full(path, *a, **k):
        if path.endswith(".parquet"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, *a, **k)

    monkeypatch.setattr(object_store.storage, "atomic_create", full)
    capsys.readouterr()
    assert main(base_args(corpus["metadata"], corpus["vocab"], f"file://{out}", output_format="parquet")) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TMPDIR" not in err[0] and f"file://{out}" in err[0], err
