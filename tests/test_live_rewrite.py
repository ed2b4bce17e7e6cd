"""Parquet shards rewritten while the run still makes groups
(:class:`bert_data.output.rewrite.LiveRewriter`): the same bytes as rewriting them all at publish,
for any worker count, after a failed live step, a stop and a kill -9 with ``--resume``; and the
bounded reading of a partial shard's run (:func:`bert_data.format.batch_decode.iter_record_run`).

Real runs hold ~4,000 rows a shard before a live step (a Parquet row group); the tests make the
row groups 8 rows, in this process or in the child they start, so that every small run here takes
many live steps. HDF5 and MDS have no live steps (``live_rows`` None): tested to be rewritten at
publish only. Skipped when pyarrow / h5py are missing, except under CI.
"""

from __future__ import annotations

import errno
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import base_args, published_files, write_corpus, write_vocab

from bert_data.errors import RecordFormatError
from bert_data.format.batch_decode import iter_record_run
from bert_data.format.tfrecord import frame_records
from bert_data.output import rewrite
from bert_data.tools.create import main

SMALL = 8  # rows per Parquet row group in these tests
FLAGS = {
    "parquet": {"output_format": "parquet"},
    "hdf5": {"output_format": "hdf5", "packing": True, "max_sequences_per_pack": 3},
}


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None and not os.environ.get("CI"):
        pytest.skip(f"needs {module}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("live")
    return {"metadata": write_corpus(root / "corpus", n_docs=24), "vocab": write_vocab(root / "vocab.txt")}


@pytest.fixture
def small_rows(monkeypatch) -> None:
    """Row groups (and HDF5 chunks) of SMALL rows, in this process (the rewrite runs in the coordinator)."""
    import bert_data.format.nvidia_hdf5 as hdf5
    import bert_data.format.parquet as parquet

    for module, name in ((parquet, "ROW_GROUP_ROWS"), (parquet, "LIVE_ROWS"), (hdf5, "CHUNK_ROWS")):
        monkeypatch.setattr(module, name, SMALL)


class Spy:
    """Counts the live steps taken and the shards a live writer finished."""

    def __init__(self, monkeypatch) -> None:
        self.steps: List[int] = []
        self.finished: List[str] = []
        step, finish = rewrite.LiveRewriter._step, rewrite.LiveShard.finish

        def spied_step(live, index, rows, end):
            step(live, index, rows, end)
            self.steps.append(rows)

        def spied_finish(shard, *args):
            done = finish(shard, *args)
            if done is not None:
                self.finished.append(shard.name)
            return done

        monkeypatch.setattr(rewrite.LiveRewriter, "_step", spied_step)
        monkeypatch.setattr(rewrite.LiveShard, "finish", spied_finish)


def _args(corpus, out: Path, fmt: str, **extra) -> List[str]:
    return base_args(corpus["metadata"], corpus["vocab"], out, split_num=2, dupe_factor=3, **{**FLAGS[fmt], **extra})


_files = published_files


def _at_publish_only(corpus, out: Path, fmt: str, monkeypatch) -> Dict[str, bytes]:
    """The run's files with no live rewriting: every shard rewritten at publish (as before it)."""
    with monkeypatch.context() as patch:
        patch.setattr("bert_data.output.local_dir.live_rewriter", lambda *args: None)
        assert main(_args(corpus, out, fmt)) == 0
    return _files(out)


@pytest.mark.parametrize("workers", [1, 2])
def test_live_rewriting_writes_the_bytes_of_rewriting_at_publish(corpus, tmp_path, monkeypatch, small_rows, workers) -> None:
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    spy = Spy(monkeypatch)
    assert main(_args(corpus, tmp_path / "live", "parquet", num_workers=workers)) == 0
    assert spy.steps and set(spy.steps) <= {SMALL * k for k in range(1, rewrite.LIVE_ROWS_PER_READ + 1)}
    assert len(spy.finished) == 3  # every shard went live and its writer finished it
    assert _files(tmp_path / "live") == want


def test_hdf5_is_rewritten_at_publish_only(corpus, tmp_path, monkeypatch, small_rows) -> None:
    _need("h5py")
    from bert_data.format.containers import container_for

    assert container_for("hdf5").live_rows is None and container_for("mds").live_rows is None
    assert container_for("parquet").live_rows == SMALL
    spy = Spy(monkeypatch)
    assert main(_args(corpus, tmp_path / "hdf5", "hdf5")) == 0
    assert spy.steps == [] and spy.finished == []


def test_only_the_shards_memory_allows_go_live(corpus, tmp_path, monkeypatch, small_rows) -> None:
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    from bert_data.format.containers import RewritingContainer

    monkeypatch.setattr(RewritingContainer, "live_writer_bytes", lambda self, spec: 100)
    monkeypatch.setattr(rewrite, "LIVE_MEMORY", 250)  # two open writers' worth
    spy = Spy(monkeypatch)
    assert main(_args(corpus, tmp_path / "live", "parquet")) == 0
    assert sorted(spy.finished) == ["examples-1.parquet", "examples-2.parquet"]
    assert _files(tmp_path / "live") == want


@pytest.mark.parametrize("where", ["step", "finish"])
def test_a_failed_live_writer_leaves_its_shard_to_the_publish(corpus, tmp_path, monkeypatch, small_rows, where) -> None:
    """A full disk (or anything) in a live step or in a live shard's last part: that shard is
    rewritten from its first record at publish; the run's files are the same."""
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    calls = {"n": 0}
    if where == "step":
        step = rewrite.LiveRewriter._step

        def failing(live, index, rows, end):
            calls["n"] += 1
            if index == 1 and calls["n"] > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            step(live, index, rows, end)

        monkeypatch.setattr(rewrite.LiveRewriter, "_step", failing)
    else:
        run = rewrite.iter_record_run

        def failing_run(handle, length, records, *args):
            if not threading.current_thread().name.startswith("bert_data-rewrite"):  # the publish's part
                calls["n"] += 1
                if calls["n"] == 1:
                    raise OSError(errno.EIO, "Input/output error")
            return run(handle, length, records, *args)

        monkeypatch.setattr(rewrite, "iter_record_run", failing_run)
    assert main(_args(corpus, tmp_path / "live", "parquet")) == 0
    assert calls["n"] > 0
    assert _files(tmp_path / "live") == want


def test_a_run_that_stops_removes_its_live_files_and_resumes_to_the_same_bytes(corpus, tmp_path, monkeypatch, small_rows) -> None:
    """A write error after some groups (one line, exit 2): the live writers' files are gone with
    the run's stop, the journal stays, and ``--resume`` gives the bytes of a clean run."""
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    out = tmp_path / "live"
    spy = Spy(monkeypatch)
    import bert_data.output.local_dir as local_dir

    crash = local_dir.crash_point

    def failing(stage, group):
        if stage == "appended" and group == 6:
            raise OSError(errno.EIO, "Input/output error", str(out / "x"))
        crash(stage, group)

    monkeypatch.setattr(local_dir, "crash_point", failing)
    assert main(_args(corpus, out, "parquet")) == 2
    assert spy.steps  # live writers were open when the run stopped
    work = out / ".bert_data_work"
    assert (work / "progress.json").exists()
    assert (work / "rewritten").is_dir()  # made by the first live step
    assert [p for p in (work / "rewritten").rglob("*") if p.is_file()] == []
    monkeypatch.setattr(local_dir, "crash_point", crash)
    assert main(_args(corpus, out, "parquet") + ["--resume"]) == 0
    assert _files(out) == want


CHILD = (
    "import sys, bert_data.format.parquet as p; p.ROW_GROUP_ROWS = p.LIVE_ROWS = %d; "
    "from bert_data.tools.create import main; sys.exit(main(sys.argv[1:]))" % SMALL
)


def _child(args: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """create_tfrecords ``args`` in a child process whose row groups are SMALL rows (live steps)."""
    return subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.mark.parametrize("crash_at", ["checkpointed:3", "appended:7"])
def test_killed_while_rewriting_live_then_resumed_gives_the_clean_bytes(corpus, tmp_path, monkeypatch, small_rows, crash_at) -> None:
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    out = tmp_path / "out"
    args = _args(corpus, out, "parquet")
    killed = _child(args, {"BERT_DATA_CRASH_AT": crash_at})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _child(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _files(out) == want
    assert not (out / ".bert_data_work").exists()


@pytest.mark.parametrize("obstacle", ["fifo", "directory", "read-only file", "fifo as the directory"])
def test_what_an_interrupted_run_left_being_rewritten_never_blocks_the_resume(corpus, tmp_path, monkeypatch, small_rows, obstacle) -> None:
    """Whatever is at the paths an earlier attempt was rewriting (a FIFO, which an open would wait
    on for ever; a directory; a file that cannot be written) is removed by ``--resume``, not opened."""
    _need("pyarrow")
    want = _at_publish_only(corpus, tmp_path / "publish", "parquet", monkeypatch)
    out = tmp_path / "out"
    args = _args(corpus, out, "parquet")
    assert _child(args, {"BERT_DATA_CRASH_AT": "checkpointed:5"}).returncode == -signal.SIGKILL
    rewritten = out / ".bert_data_work" / "rewritten"
    if obstacle == "fifo as the directory":
        shutil.rmtree(rewritten, ignore_errors=True)
        os.mkfifo(rewritten)
    else:
        rewritten.mkdir(exist_ok=True)
        target = rewritten / "examples-1.parquet"
        target.unlink(missing_ok=True)
        if obstacle == "fifo":
            os.mkfifo(target)
        elif obstacle == "directory":
            (target / "inside").mkdir(parents=True)
        else:
            target.write_bytes(b"x")
            target.chmod(0o444)
    resumed = _child(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _files(out) == want


# --- iter_record_run: the bounded reading of a run of a partial shard ---------------------------------


def _frames(n: int) -> bytes:
    return frame_records([bytes([i % 251]) * (1 + (i * 7) % 40) for i in range(n)])


@pytest.mark.parametrize("chunk", [16, 64, 1 << 20])
@pytest.mark.parametrize("records", [0, 1, 5, 17, 40])
def test_iter_record_run_reads_exactly_the_records_asked_for(chunk, records) -> None:
    data = _frames(40) + b"\x00" * 9  # bytes past the run (the next group's, half written) are never read
    handle = io.BytesIO(data)
    handle.seek(0)
    got, position = [], 0
    for batch in iter_record_run(handle, len(data) - 9, records, chunk):
        got += [bytes(batch.data[s:s + n]) for s, n in zip(batch.starts.tolist(), batch.lengths.tolist())]
        position = batch.position
    assert got == [bytes([i % 251]) * (1 + (i * 7) % 40) for i in range(records)]
    assert position == len(_frames(records))


def test_iter_record_run_refuses_a_damaged_or_short_run() -> None:
    data = bytearray(_frames(10))
    with pytest.raises(RecordFormatError):
        list(iter_record_run(io.BytesIO(bytes(data)), len(data), 11))
    data[40] ^= 0xFF  # a payload byte of an early record: its CRC no longer matches
    with pytest.raises(RecordFormatError):
        list(iter_record_run(io.BytesIO(bytes(data)), len(data), 10))


def test_close_awaits_a_running_step_before_removing_its_files(corpus, tmp_path) -> None:
    """A stop (a signal in the publish's wait for the steps, or any error) while a step is writing:
    the step gives up at its next batch, and only then is its writer aborted (never under it)."""
    from types import SimpleNamespace

    from bert_data.config import Config

    out = tmp_path / "tfrecord"
    assert main(base_args(corpus["metadata"], corpus["vocab"], out, split_num=2, num_output_files=1)) == 0
    partial = out / "examples-1.tfrecords"
    records = json.loads((out / "data_params.json").read_text())["instances_per_shard"]["examples-1.tfrecords"]
    writing, release, events = threading.Event(), threading.Event(), []

    class Writer:
        def write(self, arrays) -> None:
            writing.set()
            release.wait(60)
            events.append("write")

        def abort(self) -> None:
            events.append("abort")

    container = SimpleNamespace(live_rows=2, open_shard=lambda *args: Writer())
    live = rewrite.LiveRewriter(container, str(tmp_path / "rewritten"), ["x"], [str(partial)],
                                rewrite.shard_spec(Config(max_seq_length=32, max_predictions_per_seq=5)), threads=1)
    live.advance(SimpleNamespace(bytes_per_shard=[partial.stat().st_size], records_per_shard=[records]))
    assert writing.wait(60)
    handover = threading.Thread(target=live.handover, daemon=True)  # the publish's wait, which a signal cuts short
    handover.start()
    handover.join(0.2)
    assert handover.is_alive()
    closer = threading.Thread(target=live.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive() and events == []  # close() is waiting for the step, the writer untouched
    release.set()
    closer.join(60)
    assert not closer.is_alive() and events == ["write", "abort"]
