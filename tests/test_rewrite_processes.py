"""Shards rewritten at publish in child processes (:mod:`bert_data.output.rewrite`): MDS's and
HDF5's writers hold the GIL, so a big publish with 3 or more workers hands each shard to a spawned
process. The files are the bytes the threads write; a process that dies is one line (exit 3) and
``--resume`` finishes; a stop ends every process and ``--resume`` finishes. The size threshold is
lowered to 0 here (the tests' corpus is small): in this process by monkeypatch, in a child
coordinator by a driver that sets it before running the tool. Skipped when streaming / h5py
are missing, except under CI.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import threading
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import base_args, published_files, python_code, write_corpus, write_vocab
from conftest import need as _need

from bert_data.config import Config
from bert_data.output import rewrite
from bert_data.tools.create import main

PACKAGE = {"mds": "streaming", "hdf5": "h5py"}
FLAGS = {"mds": {"output_format": "mds"}, "hdf5": {"output_format": "hdf5", "packing": True}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("rewrite_processes")
    return write_corpus(root / "corpus", n_docs=16), write_vocab(root / "vocab.txt")


def _args(corpus, out: Path, fmt: str, **flags) -> List[str]:
    metadata, vocab = corpus
    return base_args(metadata, vocab, out, quiet=True, num_output_files=4, **{**FLAGS[fmt], **flags})


@pytest.fixture(scope="module")
def clean(corpus, tmp_path_factory) -> Dict[str, Dict[str, bytes]]:
    """Each format's files from a one-worker run (its shards rewritten on a thread)."""
    out = {}
    for fmt, module in PACKAGE.items():
        if importlib.util.find_spec(module) is None:
            continue
        directory = tmp_path_factory.mktemp(f"clean_{fmt}")
        assert main(_args(corpus, directory, fmt)) == 0
        out[fmt] = published_files(directory)
    return out


@pytest.fixture
def processes_taken(monkeypatch) -> List[int]:
    """The threshold lowered to 0 in this process; every use of the process path is recorded."""
    monkeypatch.setattr(rewrite, "PROCESS_MIN_BYTES", 0)
    taken: List[int] = []
    real = rewrite._rewrite_in_processes

    def spy(sources, names, container, directory, spec, place, processes, bounds):
        taken.append(processes)
        return real(sources, names, container, directory, spec, place, processes, bounds)

    monkeypatch.setattr(rewrite, "_rewrite_in_processes", spy)
    return taken


@pytest.mark.parametrize("fmt", sorted(PACKAGE))
def test_shards_rewritten_in_processes_are_the_bytes_threads_write(corpus, clean, tmp_path, processes_taken, fmt,
                                                                   monkeypatch):
    _need(PACKAGE[fmt])
    from bert_data.format.containers import MDSContainer

    monkeypatch.setattr(MDSContainer, "process_min_bytes", 0)
    out = tmp_path / "out"
    assert main(_args(corpus, out, fmt, num_workers=3)) == 0
    assert processes_taken == [3]
    assert published_files(out) == clean[fmt]


def test_two_workers_or_a_small_publish_stay_on_threads(corpus, tmp_path, processes_taken, monkeypatch):
    """Two processes were measured no faster than two threads; below the size threshold a
    process's start costs more than it saves."""
    _need("h5py")
    assert main(_args(corpus, tmp_path / "two", "hdf5", num_workers=2)) == 0
    monkeypatch.setattr(rewrite, "PROCESS_MIN_BYTES", 1 << 40)
    assert main(_args(corpus, tmp_path / "small", "hdf5", num_workers=3)) == 0
    assert processes_taken == []


def test_mds_takes_a_thread_a_worker_and_processes_only_for_a_gigabyte(corpus, clean, tmp_path, processes_taken,
                                                                       monkeypatch):
    """MDS's writer releases the GIL for nearly all its work: as many threads as the run had
    workers (HDF5's, which holds it: at most REWRITE_THREADS), and processes only from its own
    process_min_bytes (1 GiB), whatever the default threshold (0 here)."""
    _need("streaming")
    from bert_data.format.containers import container_for
    from bert_data.output.rewrite import REWRITE_THREADS

    many = Config(num_workers=REWRITE_THREADS + 2)
    assert rewrite.rewrite_threads(many, container_for("mds")) == REWRITE_THREADS + 2
    assert rewrite.rewrite_threads(many, container_for("hdf5")) == REWRITE_THREADS
    assert rewrite.rewrite_threads(Config(num_workers=1), container_for("mds")) == 1
    out = tmp_path / "out"
    assert main(_args(corpus, out, "mds", num_workers=3)) == 0
    assert processes_taken == [] and published_files(out) == clean["mds"]


def test_a_rewriting_process_that_dies_is_one_line_and_resume_finishes(corpus, clean, tmp_path, processes_taken,
                                                                       monkeypatch, capsys):
    _need("h5py")
    out = tmp_path / "out"
    monkeypatch.setenv("BERT_DATA_CRASH_AT", "rewriter:1")  # (the spawned processes inherit it)
    assert main(_args(corpus, out, "hdf5", num_workers=3)) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "a process rewriting the shards at publish died (killed by SIGKILL" in err
    assert "continue with --resume (same flags) and fewer --num_workers" in err
    assert not (out / "data_params.json").exists()
    monkeypatch.delenv("BERT_DATA_CRASH_AT")
    assert main(_args(corpus, out, "hdf5", num_workers=3, resume=True)) == 0
    assert published_files(out) == clean["hdf5"]


DRIVER = ("import sys\n"
          "from bert_data.output import rewrite\n"
          "rewrite.PROCESS_MIN_BYTES = 0\n"
          "from bert_data.tools.create import entry_point\n"
          "sys.argv[0] = 'create_tfrecords'\n"
          "entry_point()\n")


def _children(pid: int) -> List[int]:
    """The live child processes of ``pid`` (Linux's /proc), multiprocessing's resource tracker left out."""
    found: List[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    def tracker(child: int) -> bool:
        try:
            return b"resource_tracker" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            return False
    return [child for child in found if not tracker(child)]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_stop_while_processes_rewrite_ends_them_and_resume_finishes(corpus, clean, tmp_path):
    _need("h5py")
    out, marker = tmp_path / "out", tmp_path / "rewriting"
    env = {**os.environ, "BERT_DATA_PAUSE_AT": f"{marker}:rewriter:0"}
    run = subprocess.Popen([sys.executable, "-c", DRIVER, *_args(corpus, out, "hdf5", num_workers=3)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), run.communicate()
    rewriters = _children(run.pid)
    assert len(rewriters) == 3, rewriters  # (the pool's workers are gone by the publish)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode not in (0, None) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--resume" in err
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in rewriters) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in rewriters if Path(f"/proc/{pid}").exists()
            and (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"))]
    assert not left, f"processes left running: {left}"
    assert main(_args(corpus, out, "hdf5", num_workers=3, resume=True)) == 0
    assert published_files(out) == clean["hdf5"]


def test_a_stop_while_a_child_starts_is_raised_once_it_has_started() -> None:
    """helper-24: a stop signal taken by another thread of the coordinator (the journal's) ran its
    handler in the main thread in the middle of starting a rewriter, whose half-read start-up then
    printed a traceback. ``stops_held`` defers the handlers themselves: the stop is raised once
    the block is done, in the main thread's handler, and never inside it."""
    import threading

    from bert_data.runners.children import stops_held

    inside_done = False
    with pytest.raises(KeyboardInterrupt):
        with stops_held():
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
            sender.start()
            sender.join()
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:  # (a handler would run here, between bytecodes, if it could)
                time.sleep(0.01)
            inside_done = True
    assert inside_done
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back


def test_how_a_child_died_is_read_once_the_other_reaper_set_it() -> None:
    """helper-24: the pool's manager thread and ours both reap a dead child; the loser of that race
    saw no exit code and named no signal. The code is waited for (at most 0.5 s in all)."""
    from bert_data.runners.children import how_processes_died

    class Reaped:  # a child whose code the other thread sets after our first looks
        def __init__(self, code: int, looks: int) -> None:
            self.code, self.looks = code, looks

        @property
        def exitcode(self):
            self.looks -= 1
            return self.code if self.looks < 0 else None

        def join(self, timeout: float) -> None:
            time.sleep(min(timeout, 0.01))

    assert how_processes_died([Reaped(0, 0), Reaped(-signal.SIGKILL, 5)]).startswith(" (killed by SIGKILL")
    started = time.monotonic()
    assert how_processes_died([Reaped(-signal.SIGKILL, 10**9)]) == " (killed, or crashed; out of memory?)"
    assert time.monotonic() - started < 2


CHILD_WORK = """
import atexit, os, threading, time
from multiprocessing import util

def work(folder, raises):
    mark = lambda name: open(os.path.join(folder, name), "w").close()
    atexit.register(mark, "atexit")  # (the interpreter's teardown: skipped by a normal end)
    util.Finalize(None, mark, args=("finalized",), exitpriority=0)  # (multiprocessing's exit: run)
    threading.Thread(target=lambda: (time.sleep(0.2), mark("thread"))).start()  # (joined before the exit)
    if raises:
        raise ValueError("the work failed")
"""


@pytest.mark.parametrize("raises", [False, True])
def test_a_spawned_child_ends_without_its_interpreters_teardown_only_when_its_work_ended(tmp_path, raises) -> None:
    """Pool workers and rewriters (children.spawn_context) leave with os._exit once their work has
    ended: multiprocessing's finalizers run (a worker's scratch directory goes) and their threads
    are joined, the interpreter's teardown (0.12-0.17 s a worker) is skipped. A child whose work
    raised exits as it always did, exit code 1 and its atexit handlers run."""
    (tmp_path / "child_work.py").write_text(CHILD_WORK)
    (tmp_path / "marks").mkdir()
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import child_work\n"
        "from bert_data.runners.children import spawn_context\n"
        "if __name__ == '__main__':\n"
        f"    child = spawn_context().Process(target=child_work.work, args=({str(tmp_path / 'marks')!r}, {raises}))\n"
        "    child.start()\n"
        "    child.join(120)\n"
        "    print(child.exitcode)\n"
    )
    assert python_code(code).split() == ["1" if raises else "0"]
    marks = sorted(path.name for path in (tmp_path / "marks").iterdir())
    assert marks == (["atexit", "finalized", "thread"] if raises else ["finalized", "thread"])


def test_on_threads_a_later_shards_error_is_the_runs_not_the_stop_it_caused(tmp_path, monkeypatch) -> None:
    """helper-25: threads give results in shard order, so an earlier shard stopped by a later one's
    error came first, and the run ended in RewriteStopped's traceback (exit 1). The error raised is
    the shard's own (one line)."""
    import threading

    from bert_data.format.containers import container_for

    stopped = threading.Event()

    def fake(source, container, directory, name, spec, stop=None, bound=None):
        if name == "a.mds":  # a long shard: still writing when the other fails
            stop.wait(10)
            stopped.set()
            raise rewrite.RewriteStopped(name)
        raise OSError(28, "No space left on device", name)

    monkeypatch.setattr(rewrite, "rewrite_shard", fake)
    monkeypatch.setattr(container_for("mds").__class__, "rewritten_size_bound", staticmethod(lambda path: 0))
    sources = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pytest.raises(OSError, match="No space left"):
        rewrite.rewrite_shards(sources, ["a.mds", "b.mds"], container_for("mds"), str(tmp_path / "out"), None,
                               lambda name: None, threads=2)
    assert stopped.is_set()


def _three_rows_run() -> bytes:
    """A partial shard's run of three NSP rows (MSL 4, 2 predictions) as MDS samples in TFRecord frames."""
    import numpy as np

    from bert_data.format.mds import frame_samples

    rows = {"input_ids": np.array([[101, 7, 102, 0]] * 3, np.int32), "input_mask": np.array([[1, 1, 1, 0]] * 3, np.int32),
            "segment_ids": np.array([[0, 0, 1, 0]] * 3, np.int32), "masked_lm_positions": np.array([[1, 0]] * 3, np.int64),
            "masked_lm_ids": np.array([[7, 0]] * 3, np.int64), "masked_lm_weights": np.array([[1, 0]] * 3, np.float32),
            "next_sentence_labels": np.array([[0]] * 3, np.int32)}
    (_, run, _), = frame_samples(rows, np.zeros(3, np.int64), "nsp")
    return run


def test_a_partial_shard_damaged_since_its_journal_says_start_over(tmp_path) -> None:
    """A frame of a journaled partial shard damaged before the publish (a disk, a hand) cannot be
    mended by --resume: the line says --overwrite (helper-25), not 'once that is fixed, continue'."""
    _need("streaming")
    from bert_data.errors import OutputError
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    run = _three_rows_run()
    data = bytearray(bytes(run))
    data[len(data) // 2] ^= 0xFF  # inside the second sample: its CRC no longer holds
    source = tmp_path / "shard.partial"
    source.write_bytes(bytes(data))
    (tmp_path / "w").mkdir()
    with pytest.raises(OutputError, match=r"the partial shard is damaged; start over with --overwrite$"):
        rewrite.rewrite_shard(str(source), container_for("mds"), str(tmp_path / "w"), "x.mds", layout_spec("nsp", 4, 2))
    assert not list((tmp_path / "w").iterdir())


def test_a_partial_shard_that_cannot_be_read_is_an_io_error_not_damage(tmp_path, monkeypatch) -> None:
    """helper-31: an I/O error opening a partial shard at publish said "the partial shard is
    damaged; start over with --overwrite", though --resume mends it: it is the OSError it was
    (the tools' line: fix it and continue with --resume)."""
    _need("streaming")
    import errno

    from bert_data.format import batch_decode
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    source = tmp_path / "shard.partial"
    source.write_bytes(b"")

    def fails(name):
        raise OSError(errno.EIO, os.strerror(errno.EIO), name)

    monkeypatch.setattr(batch_decode, "open_regular", fails)
    (tmp_path / "w").mkdir()
    with pytest.raises(OSError) as raised:
        rewrite.rewrite_shard(str(source), container_for("mds"), str(tmp_path / "w"), "x.mds", layout_spec("nsp", 4, 2))
    assert raised.value.errno == errno.EIO and raised.value.filename == str(source)
    assert not list((tmp_path / "w").iterdir())


def test_rewrite_threads_that_cannot_start_are_out_of_memory(tmp_path, monkeypatch) -> None:
    """helper-25: under ulimit -v the publish's threads could not start, and the run ended in
    RuntimeError's traceback; it is out of memory (the tools' one line, exit 3)."""
    from bert_data.format.containers import container_for

    class NoThreads:
        def __init__(self, max_workers: int, **names) -> None:
            pass

        def map(self, function, items):
            raise RuntimeError("can't start new thread")

        def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
            pass

    monkeypatch.setattr(rewrite, "ThreadPoolExecutor", NoThreads)
    monkeypatch.setattr(container_for("mds").__class__, "rewritten_size_bound", staticmethod(lambda path: 0))
    with pytest.raises(MemoryError, match="no memory for the threads that rewrite the shards"):
        rewrite.rewrite_shards([str(tmp_path / "a")], ["a.mds"], container_for("mds"), str(tmp_path / "out"), None,
                               lambda name: None, threads=2)


@pytest.mark.parametrize("failing", ["the first placing thread", "every placing thread"])
def test_shards_are_placed_once_by_the_rewriting_thread_when_a_placing_thread_cannot_start(tmp_path, monkeypatch,
                                                                                          failing) -> None:
    """Each shard's files are placed (fsync, rename) on a thread of their own while the next shard
    is rewritten; where that thread cannot start, the shard's own thread places them. submit()
    queues the work before it starts the thread (helper-31): a thread started later found it
    queued and placed the files again (ENOENT, the run failed, --resume failed alike). The same
    files, in the same places, each placed once."""
    _need("streaming")
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    run = _three_rows_run()
    sources = []
    for shard in range(3):
        sources.append(str(tmp_path / f"{shard}.partial"))
        (tmp_path / f"{shard}.partial").write_bytes(bytes(run))
    real_start, refused = threading.Thread.start, []

    def start(thread) -> None:  # (as under a thread limit: the pool's Thread.start raises, its work stays queued)
        if thread.name.startswith("bert_data-place") and (failing == "every placing thread" or not refused):
            refused.append(thread.name)
            raise RuntimeError("can't start new thread")
        real_start(thread)

    results = {}
    for case in ("threads", failing):
        if case != "threads":
            monkeypatch.setattr(threading.Thread, "start", start)
        placed, out = [], tmp_path / case
        final = tmp_path / f"{case} placed"
        final.mkdir()

        def place(name: str) -> None:
            placed.append((threading.current_thread().name.rsplit("_", 1)[0], name))
            os.replace(out / name, final / name)

        per_file, _ = rewrite.rewrite_shards(sources, [f"s-{i}.mds" for i in range(3)], container_for("mds"), str(out),
                                             layout_spec("nsp", 4, 2), place, threads=1)
        results[case] = (per_file, {p.name: p.read_bytes() for p in final.iterdir()}, placed)
    assert results["threads"][:2] == results[failing][:2] and len(results["threads"][1]) == 3
    assert sorted(name for _, name in results[failing][2]) == sorted(results["threads"][1])  # each placed once
    assert {thread for thread, _ in results["threads"][2]} == {"bert_data-place"}
    assert refused and results[failing][2][0][0] != "bert_data-place"  # the first shard: by its own thread


@pytest.mark.parametrize("damage", ["crc", "cut short", "frame cut short"])
def test_a_damaged_partial_shard_says_what_the_record_reader_says(tmp_path, damage) -> None:
    """MDS reads a partial shard a window at a time (bert_data.format.framed), not with iter_record_batches;
    a damaged one is still that reader's exact error (what and where), then the publish's fix."""
    _need("streaming")
    from bert_data.errors import OutputError, RecordFormatError
    from bert_data.format.batch_decode import iter_record_batches
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    data = bytearray(bytes(_three_rows_run()) * 3)
    if damage == "crc":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 2 if damage == "cut short" else 7]
    source = tmp_path / "shard.partial"
    source.write_bytes(bytes(data))
    with pytest.raises(RecordFormatError) as read:
        list(iter_record_batches(str(source)))
    (tmp_path / "w").mkdir()
    with pytest.raises(OutputError) as raised:
        rewrite.rewrite_shard(str(source), container_for("mds"), str(tmp_path / "w"), "x.mds", layout_spec("nsp", 4, 2))
    assert str(raised.value) == f"{read.value}: the partial shard is damaged; start over with --overwrite"
    assert not list((tmp_path / "w").iterdir())


def test_mds_frames_written_to_after_they_were_read_are_refused(tmp_path) -> None:
    """A piece reads its frames again when it is written (framed.FramedFile.gather); a partial shard
    whose frames moved since the first read (written to meanwhile) is an error, never other bytes."""
    from bert_data.errors import RecordFormatError
    from bert_data.format.framed import FramedFile

    run = bytes(_three_rows_run())
    source = tmp_path / "shard.partial"
    source.write_bytes(run * 2)
    framed = FramedFile(str(source))
    frames, = list(framed.frames())
    starts, lengths = frames.starts, frames.lengths
    payloads = b"".join((run * 2)[a:a + n] for a, n in zip(starts.tolist(), lengths.tolist()))
    assert len(starts) == 6 and b"".join(bytes(chunk) for chunk in framed.gather(starts, lengths)) == payloads
    moved, flipped = run[:20] + run, bytearray(run * 2)
    flipped[int(starts[4]) + 3] ^= 1  # (helper-33: one byte of a sample changed in place, every length kept)
    for other in (moved, bytes(flipped)):  # (another writer: frames moved, or a sample's byte changed)
        with open(source, "r+b") as handle:
            handle.write(other)
        with pytest.raises(RecordFormatError, match=r"shard.partial: the frames at byte 0 changed after they were read"):
            list(framed.gather(starts, lengths))
    framed.close()


def test_an_mds_shard_given_up_after_some_pieces_logs_no_traceback(tmp_path, monkeypatch, caplog) -> None:
    """Pieces written before a damaged frame have their (local, no-op) uploads queued on the
    writer's executor; cancelling them on the way out ran their done-callbacks with a
    CancelledError, logged as a traceback ("exception calling callback"). They are let end."""
    _need("streaming")
    import logging
    import time as clock

    from bert_data.errors import OutputError
    from bert_data.format import framed, mds
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    monkeypatch.setattr(framed, "WINDOW", 300)  # (windows of a few frames: pieces are written before the damage is read)
    data = bytearray(bytes(_three_rows_run()) * 40)
    data[-10] ^= 0xFF  # (the last sample's CRC no longer holds: many pieces are written before it)
    source = tmp_path / "shard.partial"
    source.write_bytes(bytes(data))
    monkeypatch.setattr(mds, "SIZE_LIMIT", 1500)
    real = mds.piece_writer

    def slow_uploads(*args, **kwargs):  # (each queued upload waits: the next ones stay queued)
        writer = real(*args, **kwargs)
        upload = writer.cloud_writer.upload_file
        writer.cloud_writer.upload_file = lambda *names: (clock.sleep(0.05), upload(*names))[1]
        return writer

    monkeypatch.setattr(mds, "piece_writer", slow_uploads)
    (tmp_path / "w").mkdir()
    with caplog.at_level(logging.DEBUG, logger="concurrent.futures"):
        with pytest.raises(OutputError, match=r"the partial shard is damaged; start over with --overwrite$"):
            rewrite.rewrite_shard(str(source), container_for("mds"), str(tmp_path / "w"), "x.mds", layout_spec("nsp", 4, 2))
    assert not [record for record in caplog.records if "callback" in record.getMessage()]
    assert not list((tmp_path / "w").iterdir())


def test_a_partial_shard_changed_before_its_last_piece_is_damage_like_any_other(tmp_path, monkeypatch) -> None:
    """helper-34: a shard's last piece is written at its writer's close(), which reads its frames
    again; a change found there is the same line as one found before (the partial shard is
    damaged; start over with --overwrite), not a bare record error."""
    _need("streaming")
    from bert_data.errors import OutputError
    from bert_data.format import framed
    from bert_data.format.columns import layout_spec
    from bert_data.format.containers import container_for

    run = bytes(_three_rows_run())
    source = tmp_path / "shard.partial"
    source.write_bytes(run)
    real = framed.FramedFile.frames

    def then_changed(self, stopped=lambda: False):  # (another writer, after the lengths were read)
        yield from real(self, stopped)
        flipped = bytearray(run)
        flipped[len(run) // 2] ^= 1
        source.write_bytes(bytes(flipped))

    monkeypatch.setattr(framed.FramedFile, "frames", then_changed)
    (tmp_path / "w").mkdir()
    with pytest.raises(OutputError, match=r"shard.partial: the frames at byte 0 changed after they were read \(the file "
                                          r"was written to meanwhile\): the partial shard is damaged; start over"):
        rewrite.rewrite_shard(str(source), container_for("mds"), str(tmp_path / "w"), "x.mds", layout_spec("nsp", 4, 2))
    assert not list((tmp_path / "w").iterdir())
