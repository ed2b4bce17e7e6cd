"""``--runner dask`` on a real multi-process ``LocalCluster`` (loopback): the shards and manifests
are byte-identical to the local runner's (NSP, MLM-only, a validation split), a worker killed
with SIGKILL mid-group costs a retry and nothing else, a killed coordinator resumes from the
journal, an existing cluster is used by address, and an unreachable scheduler is one line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from bert_data.tools.create import main

from conftest import base_args, write_corpus, write_vocab

distributed = pytest.importorskip("distributed")

IGNORED = {"num_workers", "runner", "output_dir", "scheduler_address", "scheduler_file", "dask_dashboard"}


def outputs(out: Path) -> Dict[str, bytes]:
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.tfrecords"))}
    assert files and any(files.values())
    return files


def manifests(out: Path) -> Dict[str, dict]:
    found = {}
    for path in sorted(out.rglob("data_params.json")):
        data = json.loads(path.read_text())
        found[str(path.relative_to(out))] = {k: v for k, v in data.items() if k not in IGNORED}
    return found


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    return {"metadata": write_corpus(root / "corpus", n_docs=24), "vocab": write_vocab(root / "vocab.txt")}


def _args(corpus, out: Path, **extra):
    return base_args(corpus["metadata"], corpus["vocab"], out, split_num=4, **extra)


@pytest.mark.parametrize("objective", [
    {},
    {"mlm_only": True, "allow_cross_document_examples": True},
    {"validation_fraction": 0.25},
])
def test_same_bytes_as_the_local_runner(corpus, tmp_path, objective):
    assert main(_args(corpus, tmp_path / "local", num_workers=2, **objective)) == 0
    assert main(_args(corpus, tmp_path / "dask", num_workers=2, runner="dask", **objective)) == 0
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")
    assert manifests(tmp_path / "dask") == manifests(tmp_path / "local")


def test_a_worker_killed_mid_group_is_retried_to_the_same_bytes(corpus, tmp_path, monkeypatch):
    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    marker = tmp_path / "killed-once"
    monkeypatch.setenv("BERT_DATA_DASK_KILL_ONCE", f"{marker}:2")  # the LocalCluster's workers inherit it
    assert main(_args(corpus, tmp_path / "dask", num_workers=2, runner="dask")) == 0
    assert marker.exists()  # a worker really was killed making group 2
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")


def test_killed_coordinator_resumes_from_the_journal(corpus, tmp_path):
    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    args = [sys.executable, "-m", "bert_data.tools.create", *_args(corpus, tmp_path / "dask", num_workers=2, runner="dask")]
    killed = subprocess.run(args, env={**__import__("os").environ, "BERT_DATA_CRASH_AT": "checkpointed:2"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "dask" / "data_params.json").exists()
    resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")


def test_an_existing_cluster_by_address_and_an_unreachable_one(corpus, tmp_path, capsys):
    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert main(_args(corpus, tmp_path / "dask", runner="dask", scheduler_address=address)) == 0
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")
    capsys.readouterr()
    code = main(_args(corpus, tmp_path / "gone", runner="dask", scheduler_address=address))  # closed now
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and err[0].startswith("create_tfrecords: error: --runner dask: cannot reach")
    assert not list((tmp_path / "gone").glob("*.tfrecords"))


@pytest.mark.parametrize("extra, words", [
    ({"scheduler_address": "tcp://127.0.0.1:1"}, "are for --runner dask"),
    ({"runner": "dask", "scheduler_address": "127.0.0.1:8786"}, "needs a scheme"),
])
def test_dask_flags_are_checked_up_front(corpus, tmp_path, capsys, extra, words):
    assert main(_args(corpus, tmp_path / "out", **extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_progress_follows_the_bytes_the_workers_read(corpus, tmp_path, monkeypatch):
    """The workers' reads reach the coordinator's byte counter as events, as they happen (not
    only when a group's result comes back), and add up to the input exactly once."""
    from bert_data.presets import build_config
    from bert_data.runners import dask as dask_runner
    from bert_data.runners.job import run

    events = []
    follow = dask_runner._ProgressFollower.on_event
    monkeypatch.setattr(dask_runner._ProgressFollower, "on_event", lambda self, e: (events.append(e), follow(self, e)))
    counter = {}
    config = build_config({
        "metadata_files": [str(corpus["metadata"])], "input_files_prefix": str(corpus["metadata"].parent),
        "vocab_file": str(corpus["vocab"]), "do_lower_case": True, "max_seq_length": 32,
        "max_predictions_per_seq": 5, "output_dir": str(tmp_path / "out"), "split_num": 4,
        "num_workers": 2, "runner": "dask",
    })
    starts = []
    manifest = run(config, on_start=lambda summary, live: (starts.append(summary), counter.setdefault("live", live)))
    groups = starts[0].groups
    assert groups >= 3 and len({event[1][0] for event in events}) == groups  # every group reported while running
    assert counter["live"].value == manifest["input_bytes"] > 0


def test_quiet_console_and_loopback_only(corpus, tmp_path):
    """A LocalCluster run prints only our lines (no Dask INFO chatter), and every socket the
    cluster listens on is on loopback (Dask serves its HTTP routes on :8787 of every interface
    unless told otherwise, dashboard or not)."""
    import psutil

    from bert_data.presets import build_config
    from bert_data.runners.dask import dask_client

    done = subprocess.run([sys.executable, "-m", "bert_data.tools.create",
                           *_args(corpus, tmp_path / "out", num_workers=2, runner="dask"), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "INFO" not in done.stderr and "distributed" not in done.stderr
    config = build_config({"metadata_files": [str(corpus["metadata"])], "vocab_file": str(corpus["vocab"]),
                           "output_dir": str(tmp_path / "x"), "num_workers": 2, "runner": "dask"})
    with dask_client(config):
        me = psutil.Process()
        listening = [c.laddr for p in [me, *me.children(recursive=True)]
                     for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(address.ip == "127.0.0.1" for address in listening), listening


def test_the_fork_server_loads_spacy_as_the_run_needs_it(corpus, tmp_path):
    """The LocalCluster's fork server imports spaCy once for every worker: as the rule-based
    sentencizer loads it (no PyTorch, CuPy or spaCy's command line, which a plain ``spacy`` would
    bring into the fork server and every worker), as a named pipeline needs it, or not at all when
    lines are the sentences. Fake PyTorch and CuPy packages leave a mark if imported."""
    import os

    from bert_data.presets import build_config
    from bert_data.runners.dask import fork_server_preload

    config = build_config({"metadata_files": [str(corpus["metadata"])], "vocab_file": str(corpus["vocab"]),
                           "output_dir": str(tmp_path / "x"), "num_workers": 2, "runner": "dask"})
    lean = fork_server_preload(config)
    assert lean == ["distributed", "numpy", "bert_data.runners.preload", "bert_data.group"]
    assert fork_server_preload(config.replace(spacy_model="en_core_web_sm"))[2] == "spacy"
    assert "spacy" not in " ".join(fork_server_preload(config.replace(single_sentence_per_line=True)))
    fakes = tmp_path / "fakes"
    for name in ("torch", "cupy", "cupyx"):
        (fakes / name).mkdir(parents=True)
        (fakes / name / "__init__.py").write_text(f"open({str(fakes / name)!r} + '.imported', 'w').close()\n")
    code = "import sys\n" + "".join(f"import {module}\n" for module in lean) + (
        "print(sorted(m for m in ('spacy', 'spacy.cli', 'typer') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(fakes)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['spacy']"] and not list(fakes.glob("*.imported"))


def _start_cluster(tmp_path: Path, name: str, env: Dict[str, str]):
    """A scheduler and two single-threaded workers as processes of their own (as on a real
    cluster: the run only has the scheduler file)."""
    import os
    import time

    scheduler_file = tmp_path / f"{name}.json"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not scheduler_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    workers = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(scheduler_file),
         "--nthreads", "1", "--nworkers", "2", "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **{k: v.format(scheduler=scheduler.pid) for k, v in env.items()}})
    with distributed.Client(scheduler_file=str(scheduler_file), timeout="60s") as client:
        client.wait_for_workers(2, timeout=60)
    return scheduler, workers, scheduler_file


def _stop(*processes) -> None:
    """SIGTERM first: a `dask worker` closes its nannies and their workers (SIGKILL would orphan them)."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_lost_scheduler_is_one_line_and_resumes(corpus, tmp_path):
    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    scheduler, workers, scheduler_file = _start_cluster(tmp_path, "first", {"BERT_DATA_DASK_KILL_PID": "{scheduler}:3"})
    args = [sys.executable, "-m", "bert_data.tools.create",
            *_args(corpus, tmp_path / "dask", runner="dask", scheduler_file=scheduler_file)]
    try:
        lost = subprocess.run(args, capture_output=True, text=True, timeout=300)
    finally:
        _stop(workers, scheduler)
    assert lost.returncode == 3, lost.stderr
    assert lost.stderr.count("\n") == 1 and "lost the Dask scheduler" in lost.stderr and "--resume" in lost.stderr
    assert not (tmp_path / "dask" / "data_params.json").exists()
    scheduler, workers, scheduler_file = _start_cluster(tmp_path, "second", {})
    args[args.index("--scheduler_file") + 1] = str(scheduler_file)
    try:
        resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=300)
    finally:
        _stop(workers, scheduler)
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_the_process_group_is_one_line_then_resumable(corpus, tmp_path, stop):
    """A terminal's Ctrl-C (and Slurm's SIGTERM) reaches every process of the foreground group:
    the coordinator, the fork server and every Dask worker. Only the coordinator may answer it,
    in one line (the workers used to print a KeyboardInterrupt traceback each), and no process
    of the run may outlive it; --resume then gives the local runner's bytes."""
    import os
    import time

    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    marker = tmp_path / "paused"
    args = [sys.executable, "-m", "bert_data.tools.create", *_args(corpus, tmp_path / "dask", num_workers=2, runner="dask")]
    env = {**os.environ, "BERT_DATA_DASK_PAUSE": f"{marker}:3"}
    run = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "group 3 never started"
        os.killpg(run.pid, stop)  # the whole group, as a terminal or a batch system does
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 128 + stop, err
    assert err.strip().splitlines() == [err.strip()] and "--resume" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 20
    while (left := _alive_in_group(run.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"processes of the stopped run still alive: {left}"
    resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")


def _alive_in_group(pgid: int) -> list:
    """Processes of process group ``pgid`` that are not zombies (a dead process whose parent
    has not reaped it yet is not running anything)."""
    alive = []
    for pid in subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split():
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_a_local_cluster_left_without_workers_fails_the_run_instead_of_waiting_for_ever(corpus, tmp_path, monkeypatch,
                                                                                         capsys):
    """Workers that cannot start again leave a LocalCluster that never fails a task: the run
    waited for ever (seen once, when a file of the package broke under a suite run). Here the
    cluster loses every worker while group 2 is in flight (scaled to none: nothing restarts them);
    the run ends in one line, exit 3, and --resume finishes it with the clean bytes."""
    import threading
    import time

    from bert_data.runners import dask as dask_runner

    assert main(_args(corpus, tmp_path / "local", num_workers=1)) == 0
    marker = tmp_path / "group-2-started"
    monkeypatch.setenv("BERT_DATA_DASK_PAUSE", f"{marker}:2")  # the worker making group 2 waits there
    monkeypatch.setattr(dask_runner, "LOCAL_WORKERLESS_SECONDS", 3.0)
    clusters = []
    real_local_cluster = dask_runner._local_cluster

    def local_cluster(config, distributed_module):
        clusters.append(real_local_cluster(config, distributed_module))
        return clusters[-1]

    monkeypatch.setattr(dask_runner, "_local_cluster", local_cluster)

    def lose_every_worker():
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        clusters[0].scale(0)

    thief = threading.Thread(target=lose_every_worker, daemon=True)
    thief.start()
    capsys.readouterr()
    started = time.monotonic()
    args = _args(corpus, tmp_path / "dask", num_workers=2, runner="dask")
    assert main(args) == 3
    thief.join(timeout=60)
    assert time.monotonic() - started < 100  # not the paused worker's 120 s: the watch ended it
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every worker of the Dask LocalCluster died" in err[0] and "--resume" in err[0], err
    monkeypatch.delenv("BERT_DATA_DASK_PAUSE")
    monkeypatch.setattr(dask_runner, "_local_cluster", real_local_cluster)
    assert main(args + ["--resume"]) == 0
    assert outputs(tmp_path / "dask") == outputs(tmp_path / "local")
