"""Tests of the umbrella command ``bert-data`` (bert_data.tools.main)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import bert_data
from bert_data.tools import main as umbrella
from bert_data.tools.main import COMMANDS, main

from conftest import base_args

REPO = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    assert run(capsys, "--version") == (0, f"bert_data {bert_data.__version__}\n", "")


def test_help_lists_every_command_on_one_line(capsys):
    code, out, err = run(capsys, "--help")
    assert code == 0 and err == ""
    lines = out.splitlines()
    for name, (_, tool, _) in COMMANDS.items():
        mine = [line for line in lines if line.startswith(f"  {name} ")]
        assert len(mine) == 1 and tool in mine[0]
    assert set(COMMANDS) == {"create", "google", "inspect", "split", "vocab", "tokenize"}
    assert run(capsys, "-h")[1] == out


def test_no_command_is_a_usage_error(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out == "" and "usage: bert-data COMMAND" in err


@pytest.mark.parametrize(
    "typed, suggestion",
    [("inspekt", "did you mean 'inspect'?"), ("splitt", "did you mean 'split'?"), ("build_vocabs", "did you mean 'vocab'?"),
     ("frobnicate", "commands: create, google, inspect, split, vocab, tokenize")],
)
def test_unknown_command_is_one_line(capsys, typed, suggestion):
    code, out, err = run(capsys, typed, "--stats")
    assert code == 2 and out == ""
    assert err == f"bert-data: error: unknown command '{typed}'; {suggestion}\n"


def test_dispatch_and_exit_codes_pass_through(tmp_path, tiny_corpus, tiny_vocab, capsys):
    out = tmp_path / "tf"
    code, stdout, _ = run(capsys, "create", *base_args(tiny_corpus, tiny_vocab, out), "--quiet")
    assert code == 0 and "wrote" in stdout and (out / "data_params.json").exists()
    code, stdout, _ = run(capsys, "inspect", out, "--stats", "--num_workers", "1")
    assert code == 0 and stdout.rstrip().endswith("OK")
    # the long names work too, as aliases
    assert run(capsys, "inspect_tfrecords", out, "-n", "1")[0] == 0
    # 1: a bad record
    shard = sorted(out.glob("*.tfrecords"))[0]
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, stdout, _ = run(capsys, "inspect", out, "--stats")
    assert code == 1 and stdout.rstrip().endswith("FAILED")
    # 2: errors, whether the tool returns them or argparse exits with them
    code, _, err = run(capsys, "inspect", tmp_path / "nope")
    assert code == 2 and err.startswith("inspect_tfrecords: error: ")
    code, _, err = run(capsys, "create", "--max_seq_length", "many")
    assert code == 2 and "invalid int value" in err
    assert run(capsys, "split", "--metadata_files", tiny_corpus)[0] == 2
    assert run(capsys, "vocab", "--help")[0] == 0
    code, stdout, _ = run(capsys, "split", "--metadata_files", tiny_corpus, "--validation_count", "2",
                          "--output_dir", tmp_path / "splits")
    assert code == 0 and "2 validation" in stdout


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "google"])  # google: absl's flags, tested there
def test_a_misspelled_flag_is_named_first_in_one_line_by_every_tool(capsys, command):
    # argparse said "the following arguments are required: --metadata_files" for --metadata_file,
    # and build_vocab's parser printed its usage block and took abbreviations
    code, out, err = run(capsys, command, "--metadata_file", "m.txt", "--output_dir", "out")
    tool = COMMANDS[command][1]
    assert code == 2 and out == ""
    assert err.endswith(": error: unknown flag --metadata_file; did you mean --metadata_files?\n") or (
        command == "inspect" and err.endswith("error: unknown flag --metadata_file; see --help\n")), err
    assert err.count("\n") == 1 and tool in err.splitlines()[0]


def test_a_value_that_starts_with_dashes_and_holds_a_space_is_still_a_value():
    from bert_data.tools.create import build_parser

    args = build_parser().parse_args(["--multiple_docs_in_single_file", "--multiple_docs_separator", "-- next --",
                                      "--name", "--x y"])
    assert (args.multiple_docs_separator, args.name) == ("-- next --", "--x y")


def test_every_command_module_has_main():
    for module, _, _ in COMMANDS.values():
        tool = __import__(f"bert_data.tools.{module}", fromlist=["main"])
        assert callable(tool.main)
        # python -m bert_data.tools.MODULE runs it (tokenize's did nothing, exit 0: helper-18)
        source = Path(tool.__file__).read_text(encoding="utf-8")
        assert 'if __name__ == "__main__":\n    entry_point()' in source, module


def test_console_script_is_declared():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'bert-data = "bert_data.tools.main:entry_point"' in pyproject
    assert umbrella.entry_point


def test_real_process(tmp_path, tiny_corpus, tiny_vocab):
    """``python -m bert_data.tools.main`` in a process of its own: version, a tool run with its
    workers, an exit status of 2 and one line on stderr."""
    def bert_data_cmd(*argv: object) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "bert_data.tools.main", *map(str, argv)], capture_output=True, text=True,
            cwd=tmp_path, timeout=300,
        )

    done = bert_data_cmd("--version")
    assert done.returncode == 0 and done.stdout == f"bert_data {bert_data.__version__}\n"
    out = tmp_path / "tf"
    done = bert_data_cmd("create", *base_args(tiny_corpus, tiny_vocab, out))
    assert done.returncode == 0, done.stderr
    done = bert_data_cmd("inspect", out, "--stats", "--num_workers", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("OK") and done.stderr == ""
    done = bert_data_cmd("inspct", out)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "bert-data: error: unknown command 'inspct'; did you mean 'inspect'?\n"


THREAD_CAPS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_tools_process_runs_numpy_on_one_thread_unless_told_otherwise():
    """A tool's processes never call BLAS, and OpenBLAS starts (and spins) a thread per core at
    numpy's import: importing bert_data.tools caps it first, and a user's own setting is kept."""
    probe = ("import bert_data.tools, numpy, os; "
             "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_CAPS}
    capped = subprocess.run([sys.executable, "-c", probe], env=clean, capture_output=True, text=True, check=True)
    assert capped.stdout.split() == ["1", "1"]
    told = subprocess.run([sys.executable, "-c", probe], env={**clean, "OPENBLAS_NUM_THREADS": "2"},
                          capture_output=True, text=True, check=True)
    assert told.stdout.split()[0] == "2"
