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
    assert format_postfix(10, 10, 1234, 5_000_000, 2.0) == "instances=1,234, 2.5 MB/s"
    assert format_postfix(40, 10, 7, 0, 0.0) == "docs read=40, instances=7, 0.000 MB/s"
    assert format_postfix(3, 3, 7, 12_345, 1.0) == "instances=7, 0.012 MB/s"


def test_progress_enabled_only_on_a_terminal() -> None:
    assert progress_enabled(FakeTTY())
    assert not progress_enabled(FakeTTY(), quiet=True)
    assert not progress_enabled(io.StringIO())
    assert not progress_enabled(None)


def test_bar_counts_documents_instances_and_rate() -> None:
    now = [0.0]
    stream = FakeTTY()
    with RunProgress(split_num=5, stream=stream, clock=lambda: now[0]) as progress:
        progress.start(SimpleNamespace(entries=12, total_bytes=3_000_000))
        now[0] = 1.0
        progress.update(group(0, 5, 100, 1_000_000))
        now[0] = 2.0
        progress.update(group(1, 5, 120, 1_000_000))
        assert progress.entries_done == 10 and progress.instances == 220
        progress.update(group(2, 2, 30, 1_000_000))
        assert progress.entries_done == 12  # the last group is short
    text = stream.getvalue()
    assert "documents" in text and "12/12" in text
    assert "instances=250" in text and "1.5 MB/s" in text


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    with RunProgress(split_num=5, stream=stream) as progress:
        progress.start(SimpleNamespace(entries=3, total_bytes=0))
        progress.update(group(0, 3, 10, 100))
    assert stream.getvalue() == "" and progress.instances == 10


def test_cli_draws_the_bar_on_a_terminal_stderr_only(
    tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys, monkeypatch
) -> None:
    fake = FakeTTY()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "out")) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote ") and out.count("\n") == 1  # stdout: the summary line only
    assert "12/12" in fake.getvalue() and "instances=" in fake.getvalue() and "MB/s" in fake.getvalue()
    assert logging.getLogger("bert_data").level == logging.INFO


def test_quiet_and_non_terminal_runs_draw_no_bar(
    tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys, monkeypatch
) -> None:
    assert main(base_args(tiny_corpus, tiny_vocab, tmp_path / "a")) == 0  # capsys: not a terminal
    captured = capsys.readouterr()
    assert "12/12" not in captured.err and "MB/s" not in captured.err
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
