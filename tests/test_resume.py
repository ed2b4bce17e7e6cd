"""Crash safety: kill -9 at several points, Ctrl-C, write errors; --resume gives identical bytes."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import base_args, write_corpus, write_vocab

MANIFEST = "data_params.json"
NON_OUTPUT = {"output_dir", "resume", "num_workers", "overwrite"}


def _cli(args: List[str], env: Dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=300, **kwargs,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("resume")
    metadata = write_corpus(root / "corpus", n_docs=24)
    vocab = write_vocab(root / "vocab.txt")
    reference = root / "reference"
    args = base_args(metadata, vocab, reference, split_num=4)
    assert _cli(args).returncode == 0
    return {"metadata": metadata, "vocab": vocab, "reference": reference, "root": root}


def _assert_same_output(out: Path, reference: Path) -> None:
    shards = sorted(p.name for p in reference.glob("*.tfrecords"))
    assert sorted(p.name for p in out.glob("*.tfrecords")) == shards
    for name in shards:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    got = json.loads((out / MANIFEST).read_text())
    want = json.loads((reference / MANIFEST).read_text())
    for key in set(got) | set(want):
        if key not in NON_OUTPUT:
            assert got.get(key) == want.get(key), key
    assert not (out / ".bert_data_work").exists()


def _looks_complete(out: Path) -> bool:
    return (out / MANIFEST).exists()


@pytest.mark.parametrize(
    "crash_at, workers",
    [("appended:1", 1), ("checkpointed:0", 1), ("checkpointed:3", 2), ("appended:5", 2), ("published:0", 1)],
)
def test_kill_9_then_resume_is_byte_identical(corpus, tmp_path: Path, crash_at: str, workers: int) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4, num_workers=workers)
    killed = _cli(args, env={"BERT_DATA_CRASH_AT": crash_at})
    assert killed.returncode == -signal.SIGKILL
    assert not _looks_complete(out)
    again = _cli(args)  # neither --resume nor --overwrite: refuse, explain
    assert again.returncode == 2
    assert "interrupted run; pass --resume" in again.stderr
    resumed = _cli(args + ["--resume", "--num_workers", "2"])
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_output(out, corpus["reference"])


def test_resume_refuses_changed_settings(corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:1"}).returncode == -signal.SIGKILL
    changed = _cli(args + ["--resume", "--dupe_factor", "3"])
    assert changed.returncode == 2
    assert changed.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume: settings differ from the interrupted run "
        f"({out}/.bert_data_work/run.json): --dupe_factor was 2, now 3"
    ]


def test_resume_without_interrupted_run_is_an_error(corpus, tmp_path: Path) -> None:
    result = _cli(base_args(corpus["metadata"], corpus["vocab"], tmp_path / "none") + ["--resume"])
    assert result.returncode == 2
    assert "--resume: no interrupted run in" in result.stderr


def test_resume_of_a_complete_run_changes_nothing(corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4)
    assert _cli(args).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert _cli(args + ["--resume"]).returncode == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_resume_of_a_finished_run_missing_a_shard_says_so(corpus, tmp_path: Path) -> None:
    """helper-15's case E: a finished output whose shard was removed since was reported done
    (exit 0, 'wrote ... instances'); now one line naming the file and --overwrite, which works."""
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4)
    shutil.copytree(corpus["reference"], out)
    (out / "examples-2.tfrecords").unlink()
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 2 and resumed.stdout == ""
    assert resumed.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume: {out} holds a finished run, but {out}/examples-2.tfrecords, which its "
        f"manifest {out}/{MANIFEST} lists, is missing; make it anew with --overwrite instead of --resume"]
    again = _cli(args + ["--overwrite"])
    assert again.returncode == 0, again.stderr
    _assert_same_output(out, corpus["reference"])


@pytest.mark.parametrize("change", ["cut short", "another run's shard"])
def test_resume_of_a_finished_run_with_a_shard_changed_since_says_so(corpus, tmp_path: Path, change) -> None:
    """The manifest kept counts, not sizes: a shard cut short (a full disk while copying it back)
    or replaced by another run's file of the same name was reported done with exit 0."""
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4)
    shutil.copytree(corpus["reference"], out)
    shard = out / "examples-2.tfrecords"
    listed = json.loads((out / MANIFEST).read_text())["bytes_per_shard"]
    assert listed == {p.name: p.stat().st_size for p in out.glob("*.tfrecords")}
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2] if change == "cut short" else (out / "examples-3.tfrecords").read_bytes())
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 2 and resumed.stdout == ""
    assert resumed.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume: {out} holds a finished run, but {shard} is {shard.stat().st_size:,} bytes "
        f"where its manifest {out}/{MANIFEST} lists {len(data):,} (cut short or replaced since); make it anew with "
        f"--overwrite instead of --resume"]
    again = _cli(args + ["--overwrite"])
    assert again.returncode == 0, again.stderr
    _assert_same_output(out, corpus["reference"])


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_write_error_is_one_line_and_resumable(corpus, tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes writes fail like a full disk (EFBIG), even for root."""
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4)
    full = _cli(args, preexec_fn=_limit_file_size(6000))
    assert full.returncode == 2
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("create_tfrecords: error: writing to --output_dir")
    assert "File too large" in lines[0] and "--resume" in lines[0]
    assert not list(out.glob("*.tfrecords")) and not _looks_complete(out)
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_output(out, corpus["reference"])


def _children(pid: int) -> List[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _blocks_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
    return bool(blocked & (1 << (signal.SIGTERM - 1)))


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] in "ZX"  # a zombie counts as gone
    except OSError:
        return True


@pytest.mark.parametrize("sig, code, line", [
    (signal.SIGINT, 130, "interrupted; continue later with --resume"),
    (signal.SIGTERM, 143, "terminated (SIGTERM); continue later with --resume"),  # preemption, a scheduler's limit
])
def test_ctrl_c_or_sigterm_stops_promptly_and_resumes(tmp_path: Path, sig: int, code: int, line: str) -> None:
    """A signal to the coordinator alone stops the run with one line and its exit code, its
    workers with it, publishes nothing, and --resume completes it byte-identically."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=60)
    vocab = write_vocab(tmp_path / "vocab.txt")
    reference = tmp_path / "reference"
    slow = {"split_num": 2, "dupe_factor": 20, "num_workers": 2}
    assert _cli(base_args(metadata, vocab, reference, **slow)).returncode == 0
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, **slow)
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_data.tools.create", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    journal = out / ".bert_data_work" / "progress.json"
    deadline = time.monotonic() + 120
    while not journal.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "run finished before it could be interrupted"
    workers = _children(process.pid)
    # helper-18: the workers were spawned while the coordinator held the stop signals back and kept
    # that mask, so terminate() never reached them (5 s per worker to stop; a worker stuck at a
    # memory limit hung the run for good). Each unblocks them when it starts.
    deadline = time.monotonic() + 60
    while any(_blocks_sigterm(w) for w in workers) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_blocks_sigterm(w) for w in workers), "a worker blocks SIGTERM"
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == f"create_tfrecords: {line} (same flags)"
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 10
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and all(_gone(w) for w in workers), "worker processes outlived the coordinator"
    assert not _looks_complete(out)
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_output(out, reference)


@pytest.mark.parametrize("sig, code, words", [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")])
def test_a_stop_in_the_instant_after_the_manifest_says_the_output_is_complete(tmp_path: Path, sig, code, words) -> None:
    """Stopped with the manifest written (the commit point) but before the run returned, it said
    "continue later with --resume", which then only reported the output complete: the line says
    what is true. BERT's named files are moved after their staging manifest, so there --resume
    is still the way on (next_step(manifest_is_the_end=False))."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out, marker = tmp_path / "out", tmp_path / "paused"
    process = subprocess.Popen([sys.executable, "-m", "bert_data.tools.create", *base_args(metadata, vocab, out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "BERT_DATA_PAUSE_AT": f"{marker}:committed:0"})
    deadline = time.monotonic() + 120
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), process.communicate(timeout=60)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"create_tfrecords: {words}; the output was complete before it stopped (data_params.json is written): "
        f"nothing to continue"), stderr
    resumed = _cli(base_args(metadata, vocab, out) + ["--resume"])
    assert resumed.returncode == 0 and "complete" in resumed.stdout + resumed.stderr, resumed.stderr
    assert not (out / ".bert_data_work").exists()
