"""The create_tfrecords progress bar (stderr, terminals only) and --quiet / --log_level."""

from __future__ import annotations

import io
import logging
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from bert_data.tools.create import main
from bert_data.progress import RunProgress, format_postfix, progress_enabled

from conftest import base_args


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_log_level():
    logger = logging.getLogger("bert_data")
    level = logger.level
    yield
    logger.setLevel(level)


def group(index: int, read: int, instances: int, input_bytes: int) -> SimpleNamespace:
    stats = Counter({"documents.read": read, "instances": instances, "input_bytes": input_bytes})
    return SimpleNamespace(group_index=index, stats=stats)


def test_format_postfix() -> None:
    assert format_postfix(10, 2, 1234) == "docs=10, instances=1,234, groups=2"


def test_progress_enabled_only_on_a_terminal() -> None:
    assert progress_enabled(FakeTTY())
    assert not progress_enabled(FakeTTY(), quiet=True)
    assert not progress_enabled(io.StringIO())
    assert not progress_enabled(None)


def test_bar_counts_input_bytes_documents_and_instances() -> None:
    stream = FakeTTY()
    with RunProgress(stream=stream) as progress:
        progress.start(SimpleNamespace(entries=12, total_bytes=3_000_000, groups=3))
        progress.update(group(0, 5, 100, 1_000_000))
        progress.update(group(1, 5, 120, 1_000_000))
        assert progress.bytes_done == 2_000_000 and progress.instances == 220
        progress.update(group(2, 2, 30, 1_000_000))
        assert progress.publishing
        before = stream.getvalue()
        progress._advance()  # the refresh thread, while the shards are published: the line is drawn again
        assert len(stream.getvalue()) > len(before)
    text = stream.getvalue()
    assert "input" in text and "2.86M/2.86M" in text  # 3,000,000 bytes in binary units
    assert "docs=12, instances=250, groups=3/3, publishing the shards" in text
    assert "publishing" not in text.split("groups=3/3")[0]  # (not before the last group is in)
    assert text.rstrip().endswith("docs=12, instances=250, groups=3/3]")  # the finished line: no "publishing"


def test_a_resumed_run_says_publishing_once_its_last_group_is_in() -> None:
    """A resumed run makes only the groups after its journal's: its last planned group's result
    tells that every group is in."""
    stream = FakeTTY()
    with RunProgress(stream=stream) as progress:
        progress.start(SimpleNamespace(entries=12, total_bytes=3_000_000, groups=3))
        progress.update(group(1, 5, 120, 1_000_000))
        assert not progress.publishing
        progress.update(group(2, 2, 30, 1_000_000))
        assert progress.publishing
    assert "groups=2/3, publishing the shards" in stream.getvalue()


def test_bar_follows_the_live_counter_inside_a_group() -> None:
    """Workers advance a shared counter as they read: the bar moves before any group finishes."""
    stream = FakeTTY()
    live = SimpleNamespace(value=0)
    with RunProgress(stream=stream) as progress:
        progress.start(SimpleNamespace(entries=1, total_bytes=4 << 20, groups=1), live)
        live.value = 3 << 20
        progress._advance()  # what the refresh thread does every REFRESH_SECONDS
        assert progress._bar.n == 3 << 20 and progress.groups_done == 0
    assert "3.00M/4.00M" in stream.getvalue()


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    with RunProgress(stream=stream) as progress:
        progress.start(SimpleNamespace(entries=3, total_bytes=0), SimpleNamespace(value=5))
        progress.update(group(0, 3, 10, 100))
    assert stream.getvalue() == "" and progress.instances == 10


def test_cli_draws_the_bar_on_a_terminal_stderr_only(
    tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys, monkeypatch
) -> None:
    fake = FakeTTY()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "out")) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote ") and out.count("\n") == 4  # stdout: the summary only
    assert "tokens" in out and "on disk" in out and str(tmp_path / "out" / "data_params.json") in out
    assert out.splitlines()[-1].startswith("next: check with `inspect_tfrecords ")
    bar = fake.getvalue()
    assert "input" in bar and "instances=" in bar and "B/s" in bar and "groups=3/3" in bar
    assert logging.getLogger("bert_data").level == logging.INFO


def test_quiet_and_non_terminal_runs_draw_no_bar(
    tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys, monkeypatch
) -> None:
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "a")) == 0  # capsys: not a terminal
    captured = capsys.readouterr()
    assert "groups=" not in captured.err and "B/s" not in captured.err
    fake = FakeTTY()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "b", quiet=True)) == 0
    assert fake.getvalue() == ""
    assert capsys.readouterr().out.startswith("wrote ")
    assert logging.getLogger("bert_data").level == logging.WARNING


def test_log_level_flag(tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys) -> None:
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "a", log_level="debug", quiet=True)) == 0
    assert logging.getLogger("bert_data").level == logging.DEBUG  # an explicit level beats --quiet
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "b", log_level="loud")) == 2
    assert "--log_level 'loud' is not a logging level" in capsys.readouterr().err


def test_run_summary_counts_from_the_manifest(tmp_path: Path) -> None:
    """The end-of-run summary says what data_params.json records: instances, documents, skips,
    shards, tokens, disk, where the manifest is and what to run next, in correct plurals."""
    from bert_data.progress import run_summary

    (tmp_path / "examples-1.tfrecords").write_bytes(b"x" * 2048)
    manifest = {
        "n_examples": 1, "n_docs": 1, "documents": {"read": 2, "used": 1, "skipped": {"empty": 1}},
        "instances_per_shard": {"examples-1.tfrecords": 1}, "output_dir": str(tmp_path), "tokens": 12345,
        "unk_rate": 0.5, "input_bytes": 4096, "record_schema": "mlm_only", "name": "examples",
        "max_seq_length": 128, "max_predictions_per_seq": 20,
    }
    text = run_summary({"": manifest}, elapsed=2.0)
    first, facts, notice, following = text.splitlines()
    assert notice.startswith("sentences: spaCy's rule-based sentencizer")
    assert first == f"wrote 1 instance from 1 document (2 read, 1 skipped: empty 1) into 1 shard in {tmp_path} in 2.0s"
    assert "12,345 tokens (50.00% [UNK])" in facts and "2.0 KiB on disk" in facts
    assert "4.0 KiB of input read at 0.00 MB/s" in facts and f"{tmp_path}/data_params.json" in facts
    assert following.startswith(f"next: check with `inspect_tfrecords {tmp_path} --stats`")
    assert "pretraining_dataset" in following  # MLM-only records: not run_pretraining.py
    nsp = dict(manifest, record_schema="nsp")
    assert f"--input_file='{tmp_path}/examples-*.tfrecords'" in run_summary({"": nsp}, 1.0)
