"""Faults (issue 15): kill -9 of the coordinator and of a worker at several points, for 1 and 2
workers, NSP and MLM-only, then --resume: always the clean run's bytes. Ctrl-C of the whole
process group at many moments: always exit 130 without a traceback, or a finished run. Runs
that have nothing usable, bad encodings and [UNK]-heavy vocabularies say so on the console."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import base_args, write_corpus, write_vocab

NON_OUTPUT = {"output_dir", "resume", "num_workers", "overwrite"}


def _cli(args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=300,
    )


def _same_output(out: Path, reference: Path) -> None:
    names = sorted(p.name for p in reference.glob("*.tfrecords"))
    assert names and sorted(p.name for p in out.glob("*.tfrecords")) == names
    for name in names:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    got, want = (json.loads((d / "data_params.json").read_text()) for d in (out, reference))
    assert {k: v for k, v in got.items() if k not in NON_OUTPUT} == {k: v for k, v in want.items() if k not in NON_OUTPUT}
    assert not (out / ".bert_data_work").exists()


OBJECTIVES = {"nsp": {}, "mlm": {"mlm_only": True, "overlap_size": 4}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, object]:
    root = tmp_path_factory.mktemp("faults")
    metadata = write_corpus(root / "corpus", n_docs=16)
    vocab = write_vocab(root / "vocab.txt")
    references = {}
    for name, extra in OBJECTIVES.items():
        references[name] = root / f"reference-{name}"
        assert _cli(base_args(metadata, vocab, references[name], split_num=3, **extra)).returncode == 0
    return {"metadata": metadata, "vocab": vocab, "references": references}


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
@pytest.mark.parametrize(
    "crash_at, workers",
    [("appended:0", 1), ("checkpointed:2", 1), ("published:0", 1),
     ("appended:1", 2), ("checkpointed:3", 2), ("published:0", 2), ("worker:0", 2), ("worker:4", 2)],
)
def test_fault_matrix_resume_gives_the_clean_bytes(corpus, tmp_path, objective, crash_at, workers) -> None:
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=3, num_workers=workers, **OBJECTIVES[objective])
    killed = _cli(args, env={"BERT_DATA_CRASH_AT": crash_at})
    if crash_at.startswith("worker:"):  # the coordinator survives a worker: one line, exit 3
        assert killed.returncode == 3, killed.stderr
        lines = [line for line in killed.stderr.splitlines() if "error:" in line]
        assert lines == [line for line in killed.stderr.splitlines() if line.startswith("create_tfrecords")]
        assert "a worker process died (killed" in killed.stderr  # by SIGKILL, when its exit code was seen in time
        assert "continue with --resume" in killed.stderr and "Traceback" not in killed.stderr
        named = re.search(r"while groups? (\d+)(?:-(\d+))? (?:was|were) being made", killed.stderr)
        assert named, killed.stderr  # the group whose worker was killed among those named in flight
        assert int(named[1]) <= int(crash_at.split(":")[1]) <= int(named[2] or named[1]), killed.stderr
    else:
        assert killed.returncode == -signal.SIGKILL
    assert not (out / "data_params.json").exists()
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    _same_output(out, corpus["references"][objective])


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8, 1.5, 2.5, 4.0])
def test_ctrl_c_of_the_process_group_at_any_moment(corpus, tmp_path, delay) -> None:
    """What a terminal's Ctrl-C does: SIGINT to every process of the group (coordinator, fork
    server, workers). Whatever the moment, the run ends with 130 and one line, or has already
    finished; either way no traceback, and --resume (or nothing) gives the clean bytes."""
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=3, num_workers=2, dupe_factor=6)
    reference = tmp_path / "reference"
    assert _cli(base_args(corpus["metadata"], corpus["vocab"], reference, split_num=3, dupe_factor=6)).returncode == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_data.tools.create", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    time.sleep(delay)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    if process.returncode == 0:  # finished before the signal
        _same_output(out, reference)
        return
    # the advice fits what the run left: --resume when it has a journal, else the same command again
    journal = (out / ".bert_data_work" / "run.json").exists() or (out / "data_params.json").exists()
    line = "create_tfrecords: interrupted; " + (
        "continue later with --resume (same flags)" if journal else "run the same command again (nothing was written yet)")
    if process.returncode == -signal.SIGINT:  # the shell's 130 too: early in start-up, silently or with the line
        assert stderr.strip() in ("", line), stderr
    else:
        assert process.returncode == 130, stderr
        assert stderr.strip().splitlines()[-1] == line
    if not journal:
        assert _cli(args).returncode == 0  # the advice: the same command again
        _same_output(out, reference)
    else:
        resumed = _cli(args + ["--resume"])
        assert resumed.returncode == 0, resumed.stderr
        _same_output(out, reference)


def _corpus_of(tmp_path: Path, texts: Dict[str, bytes]) -> Path:
    root = tmp_path / "corpus"
    root.mkdir(parents=True, exist_ok=True)
    for name, data in texts.items():
        (root / name).write_bytes(data)
    (root / "metadata.txt").write_text("\n".join(texts) + "\n")
    return root / "metadata.txt"


def test_nothing_usable_is_an_error_and_publishes_nothing(tmp_path, capsys) -> None:
    from bert_data.tools.create import main

    metadata = _corpus_of(tmp_path, {"a.txt": b"   \n", "b.txt": b"\x00\x01binary", "c.txt": b""})
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "create_tfrecords: error: no usable document: 3 documents read, all skipped (binary 1, empty 2); "
        "nothing was published"
    ]
    assert not list(out.glob("*.tfrecords")) and not (out / ".bert_data_work").exists()
    (metadata.parent / "a.txt").write_text(" ".join(["The cat sat on the mat."] * 5) + "\n\nA dog ran. " * 8)
    (metadata.parent / "c.txt").write_text("The red ship sailed. The sea was cold.\n\nBirds sang all day. " * 6)
    assert main(base_args(metadata, vocab, out)) == 0  # the corrected rerun needs no --overwrite


def test_input_files_holding_no_document_are_said_so(tmp_path, capsys) -> None:
    """An empty JSON Lines file said "0 documents read, all skipped (none)"."""
    from bert_data.tools.create import main

    metadata = _corpus_of(tmp_path, {"a.jsonl": b"", "b.jsonl": b"\n\n"})
    assert main(base_args(metadata, write_vocab(tmp_path / "vocab.txt"), tmp_path / "out", input_format="jsonl")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "create_tfrecords: error: no document was read (the input files hold none); nothing was published"]


def test_bad_encoding_warns_with_the_worst_files_and_input_encoding_fixes_it(tmp_path, caplog) -> None:
    from bert_data.tools.create import main

    text = "Caf\u00e9 cr\u00e8me and the cat sat. The dog ran to the old house.\n\n" * 20
    metadata = _corpus_of(tmp_path, {"latin.txt": text.encode("latin-1"), "plain.txt": text.encode("ascii", "ignore")})
    vocab = write_vocab(tmp_path / "vocab.txt")
    with caplog.at_level("WARNING", logger="bert_data"):
        assert main(base_args(metadata, vocab, tmp_path / "a")) == 0
    warning = [r.getMessage() for r in caplog.records if "replaced with U+FFFD" in r.getMessage()]
    assert len(warning) == 1 and "latin.txt (40)" in warning[0] and "--input_encoding" in warning[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="bert_data"):
        assert main(base_args(metadata, vocab, tmp_path / "b", input_encoding="latin-1")) == 0
    assert not [r for r in caplog.records if "U+FFFD" in r.getMessage()]
    manifest = json.loads((tmp_path / "b" / "data_params.json").read_text())
    assert manifest["replaced_bytes"] == 0 and manifest["decoded_as"] == {"latin-1": 2}


def test_unk_heavy_vocabulary_warns(tmp_path, caplog) -> None:
    from bert_data.tools.create import main

    text = ("Ζέβρα the ξυλόφωνο. " * 30 + "\n\n").encode() * 3  # Greek: [UNK]
    metadata = _corpus_of(tmp_path, {"x.txt": text, "y.txt": text.upper()})
    vocab = write_vocab(tmp_path / "vocab.txt")
    with caplog.at_level("WARNING", logger="bert_data"):
        assert main(base_args(metadata, vocab, tmp_path / "out", num_output_files=2)) == 0
    assert any("are [UNK] (more than 5%)" in r.getMessage() for r in caplog.records)


def test_metadata_from_a_pipe_is_read_once(tmp_path) -> None:
    """``--metadata_files <(grep ... list.txt)``: a pipe can be read only once; the run must see
    every document, not exit 0 with none."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=7)
    vocab = write_vocab(tmp_path / "vocab.txt")
    read_end, write_end = os.pipe()
    os.write(write_end, metadata.read_bytes())
    os.close(write_end)
    args = base_args(Path(f"/dev/fd/{read_end}"), vocab, tmp_path / "out")
    args[args.index("--input_files_prefix") + 1] = str(metadata.parent)
    done = subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                          pass_fds=(read_end,), timeout=300)
    os.close(read_end)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert manifest["documents"]["read"] == 7 and manifest["n_examples"] > 0


def test_a_device_given_as_metadata_is_one_line(tmp_path, capsys) -> None:
    from bert_data.tools.create import main

    vocab = write_vocab(tmp_path / "vocab.txt")
    assert main(base_args(Path("/dev/zero"), vocab, tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/dev/zero, line 1: longer than 65536 bytes" in err[0]


@pytest.mark.parametrize("change, message", [
    ("vocab", "--vocab_file's content changed"),
    ("metadata", "the metadata files' content changed"),
])
def test_resume_refuses_changed_inputs(tmp_path, change, message) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=9)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, split_num=3)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    if change == "vocab":
        vocab.write_text(vocab.read_text() + "zebra\n")
    else:
        metadata.write_text("\n".join(reversed(metadata.read_text().split())) + "\n")  # same files, other order
    refused = _cli(args + ["--resume"])
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume refused: {message} since the interrupted run "
        f"({out / '.bert_data_work' / 'run.json'}); restore it, or start over with --overwrite"
    ]
    assert _cli(args + ["--overwrite"]).returncode == 0  # the way out it names works


def test_missing_spacy_model_with_workers_is_one_line_before_anything(tmp_path, capsys) -> None:
    from bert_data.tools.create import main

    metadata = write_corpus(tmp_path / "corpus", n_docs=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out, spacy_model="en_core_web_nope", num_workers=2)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "create_tfrecords: error: --spacy_model en_core_web_nope is not installed; install it with "
        "`python -m spacy download en_core_web_nope` (or omit --spacy_model to use the built-in rule-based "
        "sentencizer)"
    ]
    assert not out.exists()  # checked in the parent before any output or worker


def test_unwritable_output_dir_is_one_line_before_the_scan(tmp_path, capsys) -> None:
    from bert_data.tools.create import main

    metadata = write_corpus(tmp_path / "corpus", n_docs=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(base_args(metadata, vocab, blocker / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"create_tfrecords: error: --output_dir {blocker / 'out'}: {blocker} exists and is not a directory"]


def test_disk_space_estimate_warns(tmp_path) -> None:
    from bert_data.presets import build_config
    from bert_data.runners.startup import disk_space_warning

    config = build_config({"metadata_files": ["m"], "vocab_file": "v", "output_dir": str(tmp_path / "o"), "dupe_factor": 10})
    assert disk_space_warning(config, 1000) == ""
    huge = disk_space_warning(config, 1 << 50)
    assert "the output may need about" in huge and "--dupe_factor 10" in huge and "--resume" in huge
    assert "--compression gzip" in huge


def test_disk_space_warning_of_a_small_output_on_a_small_disk_says_megabytes(tmp_path, monkeypatch) -> None:
    """A 20 MB file system and 2 MB of input said "about 0.0 GB ... only 0.0 GB are free"."""
    import os as os_module

    from bert_data.presets import build_config
    from bert_data.runners import startup

    config = build_config({"metadata_files": ["m"], "vocab_file": "v", "output_dir": str(tmp_path / "o"), "dupe_factor": 5})
    real = os_module.statvfs(tmp_path)
    monkeypatch.setattr(startup.os, "statvfs", lambda path: type(real)((4096, 4096, 5000, 3000, 3000, 100, 100, 100, 0, 255)))
    line = startup.disk_space_warning(config, 2_000_000)
    assert "need about 20 MB (2.0 MB of input x --dupe_factor 5) but only 12 MB are free under" in line, line
    assert "0.0 GB" not in line


@pytest.mark.parametrize("output_format, peak", [("parquet", 1.0), ("mds", 2.0), ("hdf5", 2.0)])
def test_disk_space_estimate_of_a_rewritten_format_counts_its_peak_and_never_advises_gzip(tmp_path, output_format, peak) -> None:
    """Parquet/MDS/HDF5 refuse --compression gzip. MDS and HDF5 hold every assembled shard and
    every file rewritten from it at the end of the publish (the assembled shards stay until the
    commit: a run killed meanwhile rewrites again), whatever the number of rewrite threads or
    processes; Parquet's partial shards become its files (a footer appended: nothing more). The
    warning says neither more nor less."""
    from bert_data.presets import build_config
    from bert_data.runners.startup import OUTPUT_PER_INPUT_BYTE, disk_space_warning

    common = {"metadata_files": ["m"], "vocab_file": "v", "output_dir": str(tmp_path / "o"), "dupe_factor": 10,
              "num_output_files": 4, "num_workers": 2}
    tfrecords = disk_space_warning(build_config(common), 1 << 50)
    packed = {"packing": True} if output_format == "hdf5" else {}  # (NVIDIA's layout is packed rows)
    rewritten = disk_space_warning(build_config({**common, "output_format": output_format, **packed}), 1 << 50)
    assert "--compression gzip" not in rewritten
    assert (f"--output_format {output_format}" in rewritten) == (output_format != "parquet")
    gigabytes = lambda line: float(line.split("need about ")[1].split(" GB")[0])  # noqa: E731
    assert gigabytes(tfrecords) == pytest.approx((1 << 50) * 10 * OUTPUT_PER_INPUT_BYTE / 1e9, rel=1e-3)
    assert gigabytes(rewritten) == pytest.approx(gigabytes(tfrecords) * peak, rel=1e-3)


@pytest.mark.parametrize("target, damage, what", [
    ("progress.json", lambda t: t[: len(t) // 2], "not valid JSON"),
    ("progress.json", lambda t: "[1, 2]", "not a JSON object"),
    ("progress.json", lambda t: t.replace('"next_group": 1', '"next_group": "one"'), "next_group is 'one'"),
    ("progress.json", lambda t: t.replace('"next_group": 1', '"next_group": 99'), "next_group is 99, but this run plans only 3 groups"),
    ("progress.json", lambda t: json.dumps(dict(json.loads(t), shard_bytes=[0])), "shard_bytes is not 3 non-negative"),
    ("run.json", lambda t: t[:10], "not valid JSON"),
])
def test_damaged_journal_is_one_line_and_overwrite_recovers(tmp_path, target, damage, what) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=9)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, split_num=3)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    journal = out / ".bert_data_work" / target
    journal.write_text(damage(journal.read_text()))
    refused = _cli(args + ["--resume"])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"create_tfrecords: error: --resume: {journal} is damaged (")
    assert what in lines[0] and lines[0].endswith("start over with --overwrite (the interrupted run cannot be continued)")
    assert _cli(args + ["--overwrite"]).returncode == 0


def test_split_job_killed_in_train_resumes_both_halves(tmp_path) -> None:
    """Killed while making train: --resume continues train and then simply makes validation."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    vocab = write_vocab(tmp_path / "vocab.txt")
    reference, out = tmp_path / "reference", tmp_path / "out"
    flags = dict(split_num=3, validation_fraction=0.3)
    assert _cli(base_args(metadata, vocab, reference, **flags)).returncode == 0
    args = base_args(metadata, vocab, out, **flags)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    assert not (out / "validation").exists()
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    for half in ("train", "validation"):
        _same_output(out / half, reference / half)


def test_a_killed_runs_plan_spool_is_removed_by_the_next_run(corpus, tmp_path):
    """SIGKILL leaves the plan's temp dir behind (nothing runs at a kill); the next run removes
    the ones whose process is gone, so killed runs do not pile up in the temp directory."""
    import tempfile

    env = {"TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=3)
    assert _cli(args, {**env, "BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    left = [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("bert_data_plan_")]
    assert len(left) == 1
    assert _cli(args + ["--resume"], env).returncode == 0
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("bert_data_plan_")]
    assert tempfile.gettempdir() != str(tmp_path / "tmp")  # (the child, not this process, used it)


def test_readers_refuse_the_shards_of_a_run_killed_while_publishing(corpus, tmp_path) -> None:
    """helper-17's case 1: a run stopped while it renamed its shards into place (the manifest is
    written last) left some of them, and inspect_tfrecords --stats said OK on them (exit 0), as
    bert_data.torch and the tf.data reader read them as the whole output. Killed after the
    last rename here (every shard in place, still no manifest): each reader refuses in one line."""
    from bert_data.errors import RecordFormatError
    from bert_data.tools import inspect as insp

    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=3)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "published:0"}).returncode == -signal.SIGKILL
    assert list(out.glob("*.tfrecords")) and not (out / "data_params.json").exists()
    line = (f"{out}: an unfinished run (its work directory .bert_data_work is there, its data_params.json not yet): "
            f"finish it with the same create_tfrecords command and --resume")
    inspected = subprocess.run([sys.executable, "-m", "bert_data.tools.inspect", str(out), "--stats"],
                               capture_output=True, text=True, timeout=300)
    assert inspected.returncode == 2 and inspected.stderr == f"inspect_tfrecords: error: {line}\n", inspected.stderr
    pytest.importorskip("torch")  # the torch reader's own extra
    from bert_data.torch import PretrainingDataset

    with pytest.raises(RecordFormatError) as caught:
        PretrainingDataset(out)
    assert str(caught.value) == line
    assert _cli(args + ["--resume"]).returncode == 0  # the advice works
    _same_output(out, corpus["references"]["nsp"])
    PretrainingDataset(out)


@pytest.mark.parametrize("soft, words", [
    (7, " (killed by SIGXCPU: its CPU-time limit (ulimit -t 7) ran out; raise it)"),
    (None, " (killed by SIGXCPU: a CPU-time limit)"),
])
def test_a_worker_stopped_by_its_cpu_limit_is_named_with_the_limit(monkeypatch, soft, words) -> None:
    """A worker at a soft CPU-time limit (``ulimit -St``) dies of SIGXCPU (the coordinator
    survives it, a worker does not): the line names the limit, as it does for SIGKILL at a hard
    one, instead of the bare signal."""
    import resource
    from types import SimpleNamespace

    from bert_data.runners import children

    limit = resource.RLIM_INFINITY if soft is None else soft
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    died = [SimpleNamespace(exitcode=0), SimpleNamespace(exitcode=-signal.SIGXCPU)]
    assert children.how_processes_died(died) == words
