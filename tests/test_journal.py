"""Damaged state (issue class 11): a damaged journal of an interrupted run (``run.json``,
``progress.json`` in ``OUTPUT_DIR/.bert_data_work/``), or partial shards that disagree with it,
is one line naming the file and ``--overwrite`` (exit 2), never a traceback; the damage is left
in place, and ``--overwrite`` then makes exactly the output of a clean run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from bert_data.tools.create import main

from conftest import base_args, need, write_corpus, write_vocab

WORK = ".bert_data_work"
FIX = "; start over with --overwrite (the interrupted run cannot be continued)"


def _cli(args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Path]:
    """A clean reference run and a run SIGKILLed after journaling group 1 (of 4), made once."""
    root = tmp_path_factory.mktemp("journal")
    metadata = write_corpus(root / "corpus", n_docs=12)
    vocab = write_vocab(root / "vocab.txt")
    reference, interrupted = root / "reference", root / "interrupted"
    assert _cli(base_args(metadata, vocab, reference, split_num=3)).returncode == 0
    killed = _cli(base_args(metadata, vocab, interrupted, split_num=3), env={"BERT_DATA_CRASH_AT": "checkpointed:1"})
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((interrupted / WORK / "progress.json").read_text())["next_group"] == 2
    return {"metadata": metadata, "vocab": vocab, "reference": reference, "interrupted": interrupted}


@pytest.fixture
def out(runs, tmp_path) -> Path:
    """A fresh copy of the interrupted run (the work directory does not depend on where it is)."""
    copy = tmp_path / "out"
    shutil.copytree(runs["interrupted"], copy, symlinks=True)
    return copy


def _args(runs, out: Path, *extra: str) -> List[str]:
    return base_args(runs["metadata"], runs["vocab"], out, split_num=3) + list(extra)


def _refused(capsys, runs, out: Path) -> str:
    code = main(_args(runs, out, "--resume"))
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _same_as_reference(out: Path, reference: Path) -> None:
    shards = sorted(p.name for p in reference.glob("*.tfrecords"))
    assert sorted(p.name for p in out.glob("*.tfrecords")) == shards
    for name in shards:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    got, want = (json.loads((d / "data_params.json").read_text()) for d in (out, reference))
    assert got["n_examples"] == want["n_examples"] and got["instances_per_shard"] == want["instances_per_shard"]
    assert not (out / WORK).exists()


def _overwrite_recovers(capsys, runs, out: Path) -> None:
    assert main(_args(runs, out, "--overwrite")) == 0, capsys.readouterr().err
    capsys.readouterr()
    _same_as_reference(out, runs["reference"])


def test_an_undamaged_copy_resumes_to_the_clean_output(capsys, runs, out) -> None:
    """The control: the fixture's interrupted run is resumable, so a refusal below is the damage's."""
    assert main(_args(runs, out, "--resume")) == 0, capsys.readouterr().err
    capsys.readouterr()
    _same_as_reference(out, runs["reference"])


def _json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return str(exc).splitlines()[0]
    raise AssertionError("valid JSON")


def _invalid(damaged: str) -> str:
    """What the refusal says about a journal cut short: the JSON parser's own words."""
    return f"not valid JSON: {_json_error(damaged)}"


def _edit(**changes) -> Callable[[str], str]:
    def edit(text: str) -> str:
        data = json.loads(text)
        for key, value in changes.items():
            if value is KeyError:
                del data[key]
            else:
                data[key] = value(data[key]) if callable(value) else value
        return json.dumps(data)

    return edit


PROGRESS_DAMAGE = [
    ("empty", lambda t: "", _invalid),
    ("one byte", lambda t: t[:1], _invalid),
    ("half", lambda t: t[: len(t) // 2], _invalid),
    ("closing brace lost", lambda t: t.rstrip()[:-1], _invalid),
    ("a list", lambda t: "[1, 2]", lambda t: "not a JSON object"),
    ("nested", lambda t: "[" * 100_000, lambda t: "not valid JSON: nested too deeply"),
    ("next_group text", _edit(next_group="one"), lambda t: "next_group is 'one', not a group number"),
    ("next_group negative", _edit(next_group=-1), lambda t: "next_group is -1, not a group number"),
    ("next_group float", _edit(next_group=1.5), lambda t: "next_group is 1.5, not a group number"),
    ("next_group bool", _edit(next_group=True), lambda t: "next_group is True, not a group number"),
    ("next_group missing", _edit(next_group=KeyError), lambda t: "next_group is None, not a group number"),
    ("shard_bytes short", _edit(shard_bytes=lambda v: v[:1]), lambda t: "shard_bytes is not 3 non-negative integers"),
    ("shard_bytes long", _edit(shard_bytes=lambda v: v + [0]), lambda t: "shard_bytes is not 3 non-negative integers"),
    ("shard_bytes negative", _edit(shard_bytes=lambda v: [-5] + v[1:]),
     lambda t: "shard_bytes is not 3 non-negative integers"),
    ("shard_bytes text", _edit(shard_bytes=lambda v: [str(b) for b in v]),
     lambda t: "shard_bytes is not 3 non-negative integers"),
    ("shard_bytes a number", _edit(shard_bytes=7), lambda t: "shard_bytes is not 3 non-negative integers"),
    ("shard_records missing", _edit(shard_records=KeyError), lambda t: "shard_records is not 3 non-negative integers"),
    ("shard_records null", _edit(shard_records=lambda v: [None] * 3),
     lambda t: "shard_records is not 3 non-negative integers"),
    ("stats a list", _edit(stats=[]), lambda t: "stats is not a mapping of non-negative counters"),
    ("stats negative", _edit(stats=lambda s: dict(s, tokens=-1)),
     lambda t: "stats is not a mapping of non-negative counters"),
    ("stats float", _edit(stats=lambda s: dict(s, input_bytes=1.5)),
     lambda t: "stats is not a mapping of non-negative counters"),
    ("shard_tails short", _edit(shard_tails=lambda v: v[:2]), lambda t: "shard_tails is not 3 non-negative integers"),
    ("shard_tails text", _edit(shard_tails="abc"), lambda t: "shard_tails is not 3 non-negative integers"),
]


RUN_DAMAGE = [
    ("truncated", lambda t: t[:10], _invalid),
    ("empty", lambda t: "", _invalid),
    ("a list", lambda t: "[]", lambda t: "not a JSON object"),
    ("a setting missing", _edit(dupe_factor=KeyError), lambda t: "it has no dupe_factor"),
    ("many missing", _edit(dupe_factor=KeyError, seed=KeyError, name=KeyError, mlm_only=KeyError),
     lambda t: "it has no dupe_factor, mlm_only, name ..."),
    ("fingerprints missing", _edit(inputs=KeyError), lambda t: "it has no inputs"),
    ("fingerprints a list", _edit(inputs=[1]), lambda t: "inputs is not a mapping of fingerprints"),
    ("fingerprints text", _edit(inputs="abc"), lambda t: "inputs is not a mapping of fingerprints"),
]


DAMAGE = [("progress.json", *case) for case in PROGRESS_DAMAGE] + [("run.json", *case) for case in RUN_DAMAGE]


@pytest.mark.parametrize("name, damage, what", [(n, d, w) for n, _, d, w in DAMAGE],
                         ids=[f"{n}: {i}" for n, i, _, _ in DAMAGE])
def test_damaged_journal(capsys, runs, out, name, damage, what) -> None:
    journal = out / WORK / name
    text = damage(journal.read_text(encoding="utf-8"))
    journal.write_text(text, encoding="utf-8")
    line = _refused(capsys, runs, out)
    assert line == f"create_tfrecords: error: --resume: {journal} is damaged ({what(text)}){FIX}"
    assert journal.read_text(encoding="utf-8") == text  # the evidence is left as it was
    _overwrite_recovers(capsys, runs, out)


def test_a_changed_fingerprint_in_run_json_is_a_changed_input(capsys, runs, out) -> None:
    journal = out / WORK / "run.json"
    journal.write_text(_edit(inputs=lambda i: dict(i, vocab_sha256=5))(journal.read_text(encoding="utf-8")))
    assert _refused(capsys, runs, out) == (
        f"create_tfrecords: error: --resume refused: --vocab_file's content changed since the interrupted run "
        f"({journal}); restore it, or start over with --overwrite"
    )
    _overwrite_recovers(capsys, runs, out)


def test_a_wrongly_typed_setting_in_run_json_is_a_changed_setting(capsys, runs, out) -> None:
    journal = out / WORK / "run.json"
    journal.write_text(_edit(dupe_factor="two")(journal.read_text(encoding="utf-8")), encoding="utf-8")
    line = _refused(capsys, runs, out)
    assert line == (
        f"create_tfrecords: error: --resume: settings differ from the interrupted run ({journal}): "
        f"--dupe_factor was 'two', now 2"
    )
    _overwrite_recovers(capsys, runs, out)


def test_not_utf8_and_huge_journals(capsys, runs, out) -> None:
    journal = out / WORK / "progress.json"
    journal.write_bytes(b'{"next_group": \xff}')
    assert _refused(capsys, runs, out) == (
        f"create_tfrecords: error: --resume: {journal} is damaged (not valid JSON: not UTF-8 text){FIX}"
    )
    with open(journal, "wb") as handle:  # sparse: no disk is used
        handle.truncate(65 << 20)
    assert _refused(capsys, runs, out) == (
        f"create_tfrecords: error: --resume: {journal} is damaged ({65 << 20} bytes, far more than a journal "
        f"holds){FIX}"
    )
    _overwrite_recovers(capsys, runs, out)


@pytest.mark.parametrize("name", ["progress.json", "run.json"])
@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_a_journal_that_is_not_a_regular_file(capsys, runs, out, name, kind) -> None:
    """Never opened when it is not a regular file: a FIFO would block the open forever."""
    journal = out / WORK / name
    saved = journal.read_bytes()
    journal.unlink()
    if kind == "directory":
        journal.mkdir()
    elif kind == "symlink":
        (out / "elsewhere.json").write_bytes(saved)
        journal.symlink_to(out / "elsewhere.json")
    else:
        os.mkfifo(journal)
    assert _refused(capsys, runs, out) == (
        f"create_tfrecords: error: --resume: {journal} is damaged (not a regular file){FIX}"
    )
    _overwrite_recovers(capsys, runs, out)


def _partial(out: Path, shard: int) -> Path:
    return out / WORK / f"examples-{shard}.tfrecords.partial"


@pytest.mark.parametrize("how", ["truncated", "emptied", "removed", "journal claims more"])
def test_partial_shards_shorter_than_the_journal_says(capsys, runs, out, how) -> None:
    journal = out / WORK / "progress.json"
    claimed = json.loads(journal.read_text())["shard_bytes"]
    partial = _partial(out, 2)
    if how == "truncated":
        os.truncate(partial, claimed[1] - 7)
    elif how == "emptied":
        os.truncate(partial, 0)
    elif how == "removed":
        partial.unlink()
    else:
        journal.write_text(_edit(shard_bytes=lambda v: [v[0], v[1] + 1000, v[2]])(journal.read_text()))
        claimed = json.loads(journal.read_text())["shard_bytes"]
    holds = partial.stat().st_size if partial.exists() else 0
    # (a shard may hold a later group's bytes past the journal, made while the journal was written:
    # a count raised within them is seen by the journal's checksum of the counted end, not by size)
    found = f"which holds {holds}" if holds < claimed[1] else MOVED
    assert _refused(capsys, runs, out) == _count_damaged(journal, claimed[1], found)
    _overwrite_recovers(capsys, runs, out)


MOVED = "whose last bytes up to there are not the ones it wrote down"


def _count_damaged(journal: Path, count: int, found: str) -> str:
    """The line of a journal whose count for the second shard the shard does not bear out."""
    return (f"create_tfrecords: error: --resume: {journal} is damaged (it counts {count} bytes in "
            f"examples-2.tfrecords.partial, {found}){FIX}")


@pytest.mark.parametrize("how", ["count raised", "count lowered", "bytes changed"])
def test_a_counted_end_that_moved_is_damage_even_in_a_longer_shard(capsys, runs, out, how) -> None:
    """The journal's checksum of each shard's last counted bytes: a count raised or lowered
    within a shard that holds more (a later group's bytes, made while the journal was written),
    or bytes changed below the count, is refused; bytes past it are not (the next test)."""
    journal = out / WORK / "progress.json"
    partial = _partial(out, 2)
    with open(partial, "ab") as handle:
        handle.write(os.urandom(5000))  # as a group made but not journaled leaves them
    delta = {"count raised": 1000, "count lowered": -1000, "bytes changed": 0}[how]
    if delta:
        journal.write_text(_edit(shard_bytes=lambda v: [v[0], v[1] + delta, v[2]])(journal.read_text()))
    else:
        claimed = json.loads(journal.read_text())["shard_bytes"][1]
        with open(partial, "r+b") as handle:
            handle.seek(claimed - 10)
            byte = handle.read(1)
            handle.seek(claimed - 10)
            handle.write(bytes([byte[0] ^ 1]))
    claimed = json.loads(journal.read_text())["shard_bytes"]
    assert _refused(capsys, runs, out) == _count_damaged(journal, claimed[1], MOVED)
    _overwrite_recovers(capsys, runs, out)


def test_a_journal_of_an_older_version_without_checksums_resumes(capsys, runs, out) -> None:
    journal = out / WORK / "progress.json"
    state = json.loads(journal.read_text())
    assert len(state.pop("shard_tails")) == 3
    journal.write_text(json.dumps(state))
    assert main(_args(runs, out, "--resume")) == 0, capsys.readouterr().err
    capsys.readouterr()
    _same_as_reference(out, runs["reference"])


def test_longer_partial_shards_are_cut_back_and_resume_exactly(capsys, runs, out) -> None:
    """Bytes appended after the last journal entry (a group whose checkpoint never happened) are
    not damage: the resume cuts them off and makes that group again."""
    with open(_partial(out, 1), "ab") as handle:
        handle.write(b"\0" * 4096)
    assert main(_args(runs, out, "--resume")) == 0, capsys.readouterr().err
    capsys.readouterr()
    _same_as_reference(out, runs["reference"])


def test_a_work_directory_without_run_json(capsys, runs, out) -> None:
    """Killed between making the work directory and writing run.json: --resume must not answer
    "no interrupted run" while a plain rerun answers "pass --resume" (a loop): it says --overwrite."""
    journal = out / WORK / "run.json"
    journal.unlink()
    assert _refused(capsys, runs, out) == (
        f"create_tfrecords: error: --resume: {journal} is damaged (missing: the run was stopped before it "
        f"started){FIX}"
    )
    code = main(_args(runs, out))
    assert code == 2 and "holds an interrupted run; pass --resume to continue it or --overwrite" in capsys.readouterr().err
    _overwrite_recovers(capsys, runs, out)


def test_a_damaged_manifest_of_a_complete_run(capsys, runs, tmp_path) -> None:
    done = tmp_path / "done"
    shutil.copytree(runs["reference"], done)
    manifest = done / "data_params.json"
    text = manifest.read_text()[:-20]
    manifest.write_text(text)
    assert _refused(capsys, runs, done) == (
        f"create_tfrecords: error: --resume: {manifest} is damaged (not valid JSON: {_json_error(text)}){FIX}"
    )
    _overwrite_recovers(capsys, runs, done)


def test_without_a_thread_for_the_journal_the_checkpoints_are_made_in_line(capsys, runs, tmp_path, monkeypatch) -> None:
    """The journal is written on a thread of its own; where none can be started (``ulimit -u``,
    a memory limit: RuntimeError) each checkpoint is made in line, and the run is the same."""
    from bert_data.output import local_dir

    class NoThreads:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def submit(self, *args, **kwargs):
            raise RuntimeError("can't start new thread")

        def shutdown(self, wait: bool = True) -> None:
            pass

    monkeypatch.setattr(local_dir, "ThreadPoolExecutor", NoThreads)
    out = tmp_path / "out"
    assert main(_args(runs, out)) == 0, capsys.readouterr().err
    capsys.readouterr()
    _same_as_reference(out, runs["reference"])


FORMATS = {  # --output_format (and its flags) -> the packages it needs
    "tfrecord": ((), ()),
    "tfrecord gzip": (("--compression", "gzip"), ()),
    "mds": (("--output_format", "mds"), ("streaming",)),
    "hdf5": (("--output_format", "hdf5", "--packing"), ("h5py",)),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_byte_changed_anywhere_in_what_a_resume_keeps_is_refused(capsys, tmp_path, fmt) -> None:
    """The journal's checksum covers each partial shard's last 4 KB; a byte changed before them
    (a disk's or a person's doing, after the run stopped) was published as it was, exit 0, and
    found only by a trainer reading it. A resume now reads every record it keeps, by their own
    CRCs (TFRecord frames, GZIP members, MDS's and HDF5's runs): one line, exit 2, and
    ``--overwrite`` makes the output of a clean run."""
    flags, packages = FORMATS[fmt]
    need(*packages)
    metadata = write_corpus(tmp_path / "corpus", n_docs=200)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out, reference = tmp_path / "out", tmp_path / "reference"
    args = base_args(metadata, vocab, out, split_num=4, max_seq_length=128, max_predictions_per_seq=20) + list(flags)
    killed = _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:30"})  # (of 50 groups)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = out / WORK / "progress.json"
    counted = json.loads(journal.read_text())["shard_bytes"]
    shard = max(range(len(counted)), key=counted.__getitem__)
    assert counted[shard] > 3 * 4096, counted  # (the change lands below the tail the journal checksums)
    partial = next(p for p in (out / WORK).glob(f"*-{shard + 1}.*.partial"))
    with open(partial, "r+b") as handle:
        handle.seek(counted[shard] // 3)
        byte = handle.read(1)
        handle.seek(counted[shard] // 3)
        handle.write(bytes([byte[0] ^ 0x10]))
    code = main(args + ["--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"create_tfrecords: error: --resume: the records this run wrote to {partial} before it "
                          f"stopped are damaged (") and err.strip().endswith(FIX), err
    assert main(args + ["--overwrite"]) == 0
    assert main(base_args(metadata, vocab, reference, split_num=4, max_seq_length=128, max_predictions_per_seq=20)
                + list(flags)) == 0
    capsys.readouterr()
    names = sorted(p.name for p in reference.iterdir() if p.name != "data_params.json")
    assert sorted(p.name for p in out.iterdir() if p.name != "data_params.json") == names
    assert all((out / n).read_bytes() == (reference / n).read_bytes() for n in names)


def test_a_fifo_for_a_partial_shard_the_journal_counts_empty_is_refused_not_waited_on(capsys, runs, out) -> None:
    """A partial shard replaced by a FIFO (or a symlink to one) where the journal counts 0 bytes
    hung --resume for ever (the tail checksum's open blocked on it; helper-27): one line now."""
    journal = out / WORK / "progress.json"
    journal.write_text(_edit(shard_bytes=lambda v: [v[0], v[1], 0], shard_tails=lambda v: [v[0], v[1], 0])(journal.read_text()))
    partial = _partial(out, 3)
    partial.unlink()
    os.mkfifo(partial)
    assert _refused(capsys, runs, out) == (f"create_tfrecords: error: --resume: {journal} is damaged "
                                           f"({partial.name} is not a regular file){FIX}")
    _overwrite_recovers(capsys, runs, out)
