"""The output seam: every runner and output finish through one sequence and resume through one
set of checks, so they cannot drift apart again.

* a corpus whose every document is skipped: exit 2 and nothing published, for the local runner,
  a URL output and ``--runner beam`` alike (Beam used to exit 0 and publish an empty manifest);
* ``--resume`` after the vocabulary changed: the same one line, naming the vocabulary, for a
  local and a URL (``file://``) output (the URL output used to print a settings dict);
* a container whose runs do not concatenate is refused by every assembler.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bert_data.config import Config
from bert_data.format.containers import CONTAINERS, NotConcatenableError, TFRecordContainer, is_rewriting
from bert_data.output.outputs import OUTPUTS, open_output
from bert_data.tools.create import main

from conftest import base_args, write_corpus, write_vocab

try:
    import apache_beam  # noqa: F401

    HAVE_BEAM = True
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    HAVE_BEAM = False


def _skipped_corpus(root: Path) -> Path:
    """Three documents, every one empty (counted as skipped: nothing can be made)."""
    (root / "docs").mkdir(parents=True)
    names = []
    for i in range(3):
        (root / "docs" / f"empty{i}.txt").write_text(" \n\n", encoding="utf-8")
        names.append(f"docs/empty{i}.txt")
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(names) + "\n", encoding="utf-8")
    return metadata


RUNNERS = [
    pytest.param({}, id="local"),
    pytest.param({"num_workers": 2}, id="pool"),
    pytest.param({"url": True}, id="file-url"),
    pytest.param({"runner": "beam", "num_workers": 2}, id="beam",
                 marks=pytest.mark.skipif(not HAVE_BEAM, reason="apache_beam is not installed")),
]


@pytest.mark.parametrize("extra", RUNNERS)
def test_every_document_skipped_is_exit_2_and_nothing_published(tmp_path: Path, capsys, extra) -> None:
    metadata = _skipped_corpus(tmp_path / "corpus")
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    extra = dict(extra)
    target = f"file://{out}" if extra.pop("url", False) else str(out)
    code = main(base_args(metadata, vocab, target, **extra, quiet=True))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == ("create_tfrecords: error: no usable document: 3 documents read, all skipped (empty 3); "
                       "nothing was published")
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []
    assert [p for p in left if p != ".bert_data.lock"] == []  # no shard, no manifest, no work directory
    # the corrected rerun (a document with text added) starts clean, without --overwrite
    (tmp_path / "corpus" / "docs" / "empty0.txt").write_text(
        "The first sentence is here. A second one follows it.\n\nAnother paragraph with words. And more.\n",
        encoding="utf-8",
    )
    assert main(base_args(metadata, vocab, target, **extra, quiet=True)) == 0
    assert (out / "data_params.json").is_file()


@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_resume_after_a_vocabulary_change_names_the_vocabulary(tmp_path: Path, capsys, url: bool) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    target = f"file://{out}" if url else str(out)
    env = {"BERT_DATA_CRASH_AT": "appended:1"} if not url else {"BERT_DATA_CRASH_AT": "indexed:1"}
    import subprocess
    import sys

    killed = subprocess.run([sys.executable, "-m", "bert_data.tools.create", *base_args(metadata, vocab, target)],
                            env={**os.environ, **env}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    with vocab.open("a", encoding="utf-8") as handle:
        handle.write("zzznewtoken\n")
    capsys.readouterr()
    assert main(base_args(metadata, vocab, target, resume=True)) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    run_file = f"{target}/.bert_data_work/run.json" if url else str(out / ".bert_data_work" / "run.json")
    assert line == (f"create_tfrecords: error: --resume refused: --vocab_file's content changed since the interrupted "
                    f"run ({run_file}); restore it, or start over with --overwrite")


class _FooterContainer(TFRecordContainer):
    """A container whose files have a footer (as Parquet's): runs cannot be concatenated."""

    name = "footer"
    concatenates = False


@pytest.mark.parametrize("kind", sorted(k for k in OUTPUTS if k != "named_files"))
def test_every_assembler_refuses_a_container_that_does_not_concatenate(tmp_path: Path, kind: str) -> None:
    config = Config(output_dir=str(tmp_path / "out") if kind == "local_dir" else f"file://{tmp_path}/out")
    with pytest.raises(NotConcatenableError, match="cannot be assembled by concatenating"):
        OUTPUTS[kind](config, _FooterContainer())
    assert type(open_output(config)) is OUTPUTS[kind]  # the table is what chooses
    # every shipped container concatenates, or is rewritten from its TFRecord runs at publish
    assert all(c.concatenates or is_rewriting(c) for c in map(lambda cls: cls(), CONTAINERS.values()))
