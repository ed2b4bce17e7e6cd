"""When the environment runs out, and when the advice given must work (issue 26, classes 6-8).

Each case ends in one line and a documented exit code, never a traceback or a hang, and the
corrected rerun the line advises succeeds:

* a full temporary directory or output file system (``ulimit -f``: the same OSError path as a
  full disk, without needing one), memory running out, a standard output that is gone, closed
  or full, SIGHUP and SIGXCPU;
* advice: a run that could not write its journal leaves nothing that blocks the rerun; a Dask
  cluster that cannot be reached is one line before the output is touched; a dangling symbolic
  link as ``--output_dir``; a scheduler file that is missing or not one.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import base_args, write_corpus, write_vocab

PROG = "create_tfrecords"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("environment")
    metadata = write_corpus(root / "corpus", n_docs=12)
    vocab = write_vocab(root / "vocab.txt")
    reference = root / "reference"
    assert _cli(base_args(metadata, vocab, reference)).returncode == 0
    return {"metadata": metadata, "vocab": vocab, "reference": reference}


def _started(args: List[str], out: Path, paused: Optional[Path] = None, **popen) -> subprocess.Popen:
    """create_tfrecords started in the background, once its journal exists (or it ended); with
    ``paused``, once it waits after its first group (``BERT_DATA_PAUSE_AT``: surely in flight,
    whatever its speed), which creates that marker."""
    if paused is not None:
        popen["env"] = {**os.environ, "BERT_DATA_PAUSE_AT": f"{paused}:appended:0"}
    process = subprocess.Popen([sys.executable, "-m", "bert_data.tools.create", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, **popen)
    waited = paused if paused is not None else out / ".bert_data_work" / "progress.json"
    deadline = time.monotonic() + 120
    while not waited.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process


def _cli(args: List[str], file_size: Optional[int] = None, **popen) -> subprocess.CompletedProcess:
    def limit() -> None:
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output="stdout" not in popen,
                          text=True, preexec_fn=limit, timeout=300, **popen)


def _shards(out: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}


def _last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def test_no_room_for_the_plan_in_tmpdir_is_one_line_and_the_rerun_works(corpus, tmp_path) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out)
    # (the plan spool is the first file the run writes: a limit below its size is a full $TMPDIR)
    failed = _cli(args, file_size=64, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert failed.returncode == 2
    assert _last_line(failed.stderr) == (
        f"{PROG}: error: cannot write the run's temporary files (its plan, under {tmp_path}; a shared-memory counter) "
        f"(File too large); free space there, or point TMPDIR at a directory with room, and run the same command again"
    )
    assert not out.exists() or not any(p.name != ".bert_data.lock" for p in out.iterdir())
    assert _cli(args).returncode == 0  # following the advice: the same command, with room
    assert _shards(out) == _shards(corpus["reference"])


def test_no_room_for_the_journal_at_start_leaves_nothing_that_blocks_the_rerun(corpus, tmp_path, monkeypatch,
                                                                                 capsys) -> None:
    import errno

    from bert_data.output import local_dir
    from bert_data.tools.create import main

    real = local_dir.write_json_atomically

    def full(path, payload):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(local_dir, "write_json_atomically", full)  # run.json is the first file of the output
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out)
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{PROG}: error: --output_dir {out} cannot be written (No space left on device); nothing was written: free "
        f"space and run the same command again"
    )
    assert [p.name for p in out.iterdir() if p.name != ".bert_data.lock"] == []  # no work directory left
    monkeypatch.setattr(local_dir, "write_json_atomically", real)
    assert main(args) == 0  # following the advice: the same command, with room
    assert _shards(out) == _shards(corpus["reference"])


def test_no_room_mid_run_says_resume_and_resume_gives_the_clean_bytes(corpus, tmp_path) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out)
    failed = _cli(args, file_size=6000)  # the journal is written; a shard outgrows the limit
    assert failed.returncode == 2, failed.stderr
    line = _last_line(failed.stderr)
    assert line.startswith(f"{PROG}: error: writing to --output_dir {out} failed: File too large")
    assert line.endswith("raise the file-size limit (ulimit -f) and continue with --resume")  # (it said "free space")
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _shards(out) == _shards(corpus["reference"])


def test_memory_running_out_is_one_line_exit_3_then_resume(corpus, tmp_path, monkeypatch, capsys) -> None:
    from bert_data.runners import worker
    from bert_data.tools.create import main

    real = worker.write_group

    def starved(group_index, *args, **kwargs):
        if group_index == 1:
            raise MemoryError()
        return real(group_index, *args, **kwargs)

    monkeypatch.setattr(worker, "write_group", starved)
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out)
    assert main(args) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{PROG}: error: out of memory (MemoryError: a memory limit such as ulimit -v, or the machine's); lower "
        f"--num_workers or --group_bytes, then continue later with --resume (same flags)"
    )
    monkeypatch.setattr(worker, "write_group", real)
    assert main(args + ["--resume"]) == 0
    assert _shards(out) == _shards(corpus["reference"])


def test_memory_running_out_before_anything_was_written_says_run_again(corpus, tmp_path, monkeypatch, capsys) -> None:
    from bert_data.runners import job
    from bert_data.tools.create import main

    def starved(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(job, "startup_checks", starved)
    assert main(base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out")) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "then run the same command again (nothing was written yet)")


@pytest.mark.parametrize("where", ["dev-full", "closed-pipe", "closed-fd"])
def test_a_standard_output_that_is_gone_is_not_a_traceback(corpus, tmp_path, where) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out)
    command = [sys.executable, "-m", "bert_data.tools.create", *args]
    if where == "dev-full":
        with open("/dev/full", "w") as full:
            process = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert _last_line(process.stderr) == (
            f"{PROG}: could not write to standard output (No space left on device); the run itself is complete")
    elif where == "closed-pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the summary is written
        try:
            process = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(write_end)
        assert "Traceback" not in process.stderr and "Error" not in process.stderr, process.stderr
    else:  # started with descriptor 1 closed (`>&-`): no file the run opens may become its stdout
        process = subprocess.run(command, stderr=subprocess.PIPE, text=True, timeout=300,
                                 preexec_fn=lambda: os.close(1))
        assert "Traceback" not in process.stderr, process.stderr
    assert process.returncode == 0
    assert _shards(out) == _shards(corpus["reference"])


@pytest.mark.parametrize("sig, code, words", [
    (signal.SIGHUP, 129, "hung up (SIGHUP: the terminal or session closed)"),
    (signal.SIGXCPU, 152, "stopped at the CPU time limit (SIGXCPU: ulimit -t)"),
])
def test_sighup_and_sigxcpu_stop_in_one_line_and_resume(corpus, tmp_path, sig, code, words) -> None:
    out = tmp_path / "out"
    slow = {"split_num": 2, "dupe_factor": 20, "num_workers": 2}
    reference = tmp_path / "reference"
    args = base_args(corpus["metadata"], corpus["vocab"], out, **slow)
    assert _cli(base_args(corpus["metadata"], corpus["vocab"], reference, **slow)).returncode == 0
    marker = tmp_path / "paused"
    process = _started(args, out, paused=marker, start_new_session=True)
    assert marker.exists(), process.communicate(timeout=60)
    if sig == signal.SIGHUP:  # a closed terminal hangs up its whole process group: workers, resource tracker
        os.killpg(process.pid, sig)
    else:  # the CPU limit stops the process that reached it
        process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert stderr.strip() == f"{PROG}: {words}; continue later with --resume (same flags)", stderr  # that line alone
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _shards(out) == _shards(reference)


def test_a_dangling_symlink_output_dir_names_the_link_and_the_fix_works(corpus, tmp_path) -> None:
    target = tmp_path / "elsewhere" / "out"
    link = tmp_path / "out"
    link.symlink_to(target)
    args = base_args(corpus["metadata"], corpus["vocab"], link)
    failed = _cli(args)
    assert failed.returncode == 2
    assert _last_line(failed.stderr) == (
        f"{PROG}: error: --output_dir {link}: {link} is a symbolic link to {target}, which does not exist; create "
        f"that directory, or remove the link"
    )
    target.mkdir(parents=True)  # the advice
    assert _cli(args).returncode == 0
    assert _shards(target) == _shards(corpus["reference"])


@pytest.fixture
def dask_installed() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        if os.environ.get("CI"):
            raise
        pytest.skip("dask.distributed is not installed")


@pytest.mark.parametrize("content, problem", [
    (None, "does not exist; start the scheduler first (dask scheduler --scheduler-file {path}), or give "
           "--scheduler_address"),
    ("{not json", "is not a scheduler file (not JSON); point it at the file the scheduler wrote"),
    ('{"id": 1}', 'is not a scheduler file (no scheduler "address" in it); point it at the file the scheduler wrote'),
])
def test_a_scheduler_file_that_is_not_one_is_one_line_at_once(corpus, tmp_path, dask_installed, content, problem):
    path = tmp_path / "scheduler.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out"
    failed = _cli(base_args(corpus["metadata"], corpus["vocab"], out, runner="dask", scheduler_file=path))
    assert failed.returncode == 2
    assert _last_line(failed.stderr) == f"{PROG}: error: --scheduler_file {path} {problem.format(path=path)}"
    assert not out.exists()


def test_an_unreachable_scheduler_touches_no_output_so_the_corrected_rerun_works(corpus, tmp_path, dask_installed):
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text(json.dumps({"address": "tcp://127.0.0.1:1"}))  # nothing listens there
    out = tmp_path / "out"
    failed = _cli(base_args(corpus["metadata"], corpus["vocab"], out, runner="dask", scheduler_file=scheduler_file))
    assert failed.returncode == 3
    assert _last_line(failed.stderr).startswith(
        f"{PROG}: error: --runner dask: cannot reach the scheduler of {scheduler_file} (")
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == [".bert_data.lock"]
    fixed = _cli(base_args(corpus["metadata"], corpus["vocab"], out, runner="dask", num_workers=1))
    assert fixed.returncode == 0, fixed.stderr
    assert _shards(out) == _shards(corpus["reference"])


def _tool_commands(corpus, tmp_path: Path) -> Dict[str, List[str]]:
    """Every other tool, on the module corpus and the reference run."""
    return {
        "split_metadata": ["-m", "bert_data.tools.split", "--metadata_files", str(corpus["metadata"]),
                           "--validation_fraction", "0.3", "--output_dir", str(tmp_path / "splits")],
        "build_vocab": ["-m", "bert_data.tools.vocab", "--metadata_files", str(corpus["metadata"]),
                        "--input_files_prefix", str(corpus["metadata"].parent), "--vocab_size", "200",
                        "--output", str(tmp_path / "vocab.txt"), "--quiet"],
        "inspect_tfrecords": ["-m", "bert_data.tools.inspect", str(corpus["reference"]), "--stats",
                              "--vocab_file", str(corpus["vocab"]), "--quiet"],
    }


@pytest.mark.parametrize("tool", ["split_metadata", "build_vocab", "inspect_tfrecords"])
def test_every_tool_says_one_line_when_stdout_is_full(corpus, tmp_path, tool) -> None:
    command = [sys.executable, *_tool_commands(corpus, tmp_path)[tool]]
    with open("/dev/full", "w") as full:
        process = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    if tool == "inspect_tfrecords":  # (its report is its output: not delivered, not exit 0; helper-29)
        assert process.returncode == 3, process.stderr
        assert _last_line(process.stderr) == (f"{tool}: could not write to standard output (No space left on device); "
                                               f"the report was not written: free the device or write it elsewhere")
        return
    assert process.returncode == 0, process.stderr
    assert _last_line(process.stderr) == (
        f"{tool}: could not write to standard output (No space left on device); the run itself is complete")


@pytest.mark.parametrize("module, prog", [
    ("bert_data.tools.create", "create_tfrecords"),
    ("bert_data.tools.google_bert", "create_pretraining_data"),
    ("bert_data.tools.tokenize", "bert-data tokenize"),
])
def test_a_writing_tool_stopped_before_its_handlers_says_nothing_was_written(module, prog) -> None:
    """A stop between the tool arming its signals and its own handlers (CI saw Ctrl-C land there)
    says the same line as a stop after them with nothing written: one state, one line."""
    command = [sys.executable, "-c", (
        "import os, signal, sys\n"
        "import bert_data.errors as errors\n"
        "real = errors.raise_on_sigterm\n"
        "def armed():\n"
        "    real()\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "errors.raise_on_sigterm = armed\n"
        "import importlib\n"
        f"sys.exit(importlib.import_module({module!r}).main(['--help']))\n"
    )]
    process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert process.returncode == 129, process.stderr
    assert _last_line(process.stderr) == (
        f"{prog}: hung up (SIGHUP: the terminal or session closed); run the same command again (nothing was written yet)")


@pytest.mark.parametrize("tool", ["split_metadata", "build_vocab", "inspect_tfrecords"])
def test_every_tool_stops_in_one_line_on_sighup(corpus, tmp_path, tool) -> None:
    """SIGHUP (a closed terminal) as the tool starts its work: one line and 129, never a silent death."""
    command = [sys.executable, "-c", (
        "import os, signal, sys, runpy\n"
        "import bert_data.errors as errors\n"
        "real = errors.raise_on_sigterm\n"
        "def armed():\n"
        "    real()\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"  # as soon as the tool handles signals: the worst moment for it
        "errors.raise_on_sigterm = armed\n"
        f"sys.argv = [{tool!r}] + sys.argv[2:]\n"
        f"runpy.run_module(sys.argv.pop(0) if False else {_tool_commands(corpus, tmp_path)[tool][1]!r}, run_name='__main__')\n"
    ), *_tool_commands(corpus, tmp_path)[tool][2:]]
    process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert process.returncode == 129, process.stderr
    assert _last_line(process.stderr) == (
        f"{tool}: hung up (SIGHUP: the terminal or session closed); run the same command again")


def test_a_removed_working_directory_is_said_as_such(corpus, tmp_path) -> None:
    """helper-18's case 5: spaCy's import asks for the working directory; removed from under the
    shell, the run said "writing to --output_dir ... failed: No such file or directory; free space
    and continue with --resume", and --resume failed the same way."""
    from conftest import REPO

    gone = tmp_path / "gone"
    gone.mkdir()
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out")
    script = f"cd {gone} && rmdir {gone} && exec {sys.executable} -m bert_data.tools.create \"$@\""
    done = subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"{PROG}: error: the working directory was removed (a shell still in it?): cd to a directory "
                           f"that exists and run the same command again (nothing was written yet)\n")
    assert not (tmp_path / "out").exists()


def test_a_stop_while_a_tool_imports_is_one_line_not_a_traceback(tmp_path) -> None:
    """helper-18's case 6: Ctrl-C in a tool's first ~0.3 s (its imports, before main() guards
    the run) printed a KeyboardInterrupt traceback. The signal is sent here from inside the import
    of the tool's module (a sitecustomize's import hook), after bert_data.tools itself is in."""
    from conftest import REPO

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'bert_data.tools.create':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bert_data.tools.create", "--help"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{REPO}"})
    assert done.returncode == 130 and done.stdout == "", done.stderr
    assert done.stderr == ("bert_data.tools.create: stopped while starting; run the same command again (nothing was "
                           "written yet)\n")
    # a library import takes no signal handler (nor does a worker process, started with -c)
    probe = "import signal, bert_data.tools; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)}).stdout == "True\n"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_the_run_was_started_ignoring_stays_ignored(tmp_path, sig) -> None:
    """helper-19: `nohup create_tfrecords ... &` (SIGHUP ignored) and a script's background job
    (SIGINT ignored) were stopped by the very signal they were started immune to: the tools
    installed their own handlers over the inherited SIG_IGN."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=60)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, split_num=2, dupe_factor=20, num_workers=2)

    def immune() -> None:
        signal.signal(sig, signal.SIG_IGN)

    process = _started(args, out, preexec_fn=immune)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert (out / "data_params.json").exists()


_STOP_AFTER_THE_WORK = r"""
import os, signal, sys, time
import bert_data.tools as tools
tools._PROGRAM = "create_tfrecords"  # as when started as a program (a console script, python -m)
from bert_data.tools.endings import guarded, work_is_done

def body():
    if sys.argv[1] == "done":
        work_is_done()  # the output is complete: what create_tfrecords says once run_job has returned
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    time.sleep(0.5)  # (the signal is handled here, at the latest)
    print("summary")
    return 0

sys.exit(guarded("create_tfrecords", body, then="run the same command again", writes_output=True))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_after_the_output_is_complete_changes_nothing(tmp_path, sig) -> None:
    """helper-23: a stop that came as a finished run printed its summary or shut down gave exit 143
    with no line (the interpreter's shutdown had put the default action back), a traceback from
    threading's shutdown with exit 0, or 'interrupted; run the same command again (nothing was
    written yet)' beside a complete output. Once the work is done a stop is ignored: the summary,
    exit 0, nothing on stderr. Before that, a stop is still one line with the signal's exit code."""
    done = subprocess.run([sys.executable, "-c", _STOP_AFTER_THE_WORK, "done", sig], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "summary\n", "")
    working = subprocess.run([sys.executable, "-c", _STOP_AFTER_THE_WORK, "working", sig], capture_output=True, text=True,
                             timeout=60)
    code = {"SIGTERM": 143, "SIGINT": 130, "SIGHUP": 129}[sig]
    assert working.returncode == code and working.stdout == "" and len(working.stderr.splitlines()) == 1, working.stderr


def test_a_tool_called_in_process_keeps_its_callers_signal_handlers() -> None:
    """work_is_done ignores stops only in a tool started as a program: a test or a library that
    calls a tool's main() keeps Ctrl-C (and a test runner its own SIGTERM handling)."""
    from bert_data.tools.endings import work_is_done

    before = {name: signal.getsignal(getattr(signal, name)) for name in ("SIGINT", "SIGTERM", "SIGHUP")}
    work_is_done()
    assert {name: signal.getsignal(getattr(signal, name)) for name in before} == before
