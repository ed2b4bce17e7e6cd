"""The Apache Beam runner: same shards, byte for byte, and the same counts as the local runner.

Skipped when ``apache_beam`` is not importable, except under CI (``CI`` set), where it fails:
CI installs the ``beam`` extra.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

import pytest

from bert_data.tools.create import main

from conftest import base_args, write_corpus, write_vocab

try:
    import apache_beam  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("apache_beam is not installed (pip install 'bert_data[beam]')", allow_module_level=True)

from apache_beam.io.filesystem import FileMetadata  # noqa: E402
from apache_beam.io.localfilesystem import LocalFileSystem  # noqa: E402

# Settings that say how/where a run happened, not what it produced.
RUN_ONLY = {"output_dir", "overwrite", "runner", "num_workers"}
RUN_ONLY |= {"vocab_path", "vocab_file", "metadata_files", "input_files_prefix"}  # named differently remotely
RUN_ONLY |= {"inputs"}  # fingerprints: a URL document is not stat'ed (docs/reliability.md), a local one is


def shard_bytes(out: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}


def manifest(out: Path) -> Dict:
    return json.loads((out / "data_params.json").read_text(encoding="utf-8"))


def assert_same_output(local: Path, beam: Path) -> None:
    expected, got = shard_bytes(local), shard_bytes(beam)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], f"{name} differs ({len(got[name])} vs {len(expected[name])} bytes)"
    a, b = manifest(local), manifest(beam)
    assert {k: v for k, v in a.items() if k not in RUN_ONLY} == {k: v for k, v in b.items() if k not in RUN_ONLY}
    files = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())  # noqa: E731
    assert files(beam) == files(local)  # no work files or temp files left behind


def make_corpus(root: Path) -> Path:
    """23 documents (5 groups of 5 with --split_num 5, the last short) plus an empty one."""
    metadata = write_corpus(root, n_docs=23)
    (root / "docs" / "empty.txt").write_text("  \n", encoding="utf-8")
    with metadata.open("a", encoding="utf-8") as handle:
        handle.write("# a comment\n\ndocs/empty.txt\n")
    return metadata


def test_beam_multiprocess_matches_local(tmp_path: Path) -> None:
    metadata = make_corpus(tmp_path / "corpus")
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert main(base_args(metadata, vocab, tmp_path / "local")) == 0
    args = base_args(metadata, vocab, tmp_path / "beam", runner="beam", num_workers=2)
    assert main(args + ["--", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
    assert_same_output(tmp_path / "local", tmp_path / "beam")
    assert manifest(tmp_path / "beam")["documents"]["skipped"] == {"empty": 1}


def test_a_document_edited_while_the_pipeline_runs_is_one_line_and_leaves_no_shard(tmp_path: Path, monkeypatch, capsys) -> None:
    """As with the local runner: a document edited while the pipeline read the corpus makes records
    of neither version. The last step stats the local documents again before the commit: the
    shards the pipeline published are removed, one line names the document, exit 2."""
    from bert_data.runners import beam as beam_runner

    metadata = make_corpus(tmp_path / "corpus")
    vocab = write_vocab(tmp_path / "vocab.txt")
    edited = tmp_path / "corpus" / "docs" / "doc007.txt"
    process = beam_runner.ProcessGroupFn.process

    def process_then_edit(self, line):
        yield from process(self, line)
        with open(edited, "a", encoding="utf-8") as handle:  # (each group's turn: at least once, after its read)
            handle.write("An edit made while the run read the corpus.\n")

    monkeypatch.setattr(beam_runner.ProcessGroupFn, "process", process_then_edit)
    out = tmp_path / "beam"
    assert main(base_args(metadata, vocab, out, runner="beam") + ["--", "--direct_running_mode=in_memory"]) == 2  # (in this process: the patch holds)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{edited} changed (" in err[0] and "while the run read it; nothing was published" in err[0]
    assert sorted(p.name for p in out.iterdir()) == [], "no shard, manifest or work files left"
    monkeypatch.undo()
    assert main(base_args(metadata, vocab, out, runner="beam", overwrite=True)) == 0  # the corrected rerun


# --- remote paths: a test file system with a scheme, backed by a local directory ---------------


class _SchemeFileSystem(LocalFileSystem):
    """``bdtest://key`` is ``ROOT/key``: an object store (no directories) for the test, so the
    runner's remote code paths (metadata, documents, vocab, shards, manifest through Beam's
    FileSystems) run without a cloud. In-process only: use the in_memory DirectRunner."""

    ROOT = ""
    PREFIX = "bdtest://"

    @classmethod
    def scheme(cls):
        return "bdtest"

    @property
    def _disk(self) -> LocalFileSystem:
        return LocalFileSystem(None)  # the real thing, on translated paths (never our overrides)

    def _local(self, path: str) -> str:
        assert path.startswith(self.PREFIX), path
        return os.path.join(self.ROOT, path[len(self.PREFIX):])

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/")] + [p.strip("/") for p in paths])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path):
        os.makedirs(self._local(path), exist_ok=True)

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        for dirpath, _, files in os.walk(self.ROOT):
            for filename in files:
                local = os.path.join(dirpath, filename)
                remote = self.PREFIX + os.path.relpath(local, self.ROOT)
                if remote.startswith(dir_or_prefix):
                    yield FileMetadata(remote, os.path.getsize(local), os.path.getmtime(local))

    def create(self, path, *args, **kwargs):
        os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
        return self._disk.create(self._local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return self._disk.open(self._local(path), *args, **kwargs)

    def copy(self, sources, destinations):
        return self._disk.copy([self._local(p) for p in sources], [self._local(p) for p in destinations])

    def rename(self, sources, destinations):
        for path in destinations:
            os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
        return self._disk.rename([self._local(p) for p in sources], [self._local(p) for p in destinations])

    def exists(self, path):
        return os.path.isfile(self._local(path))  # objects only: a "directory" does not exist

    def size(self, path):
        return self._disk.size(self._local(path))

    def last_updated(self, path):
        return self._disk.last_updated(self._local(path))

    def checksum(self, path):
        return self._disk.checksum(self._local(path))

    def metadata(self, path):
        local = self._local(path)
        return FileMetadata(path, os.path.getsize(local), os.path.getmtime(local))

    def delete(self, paths):
        return self._disk.delete([self._local(p) for p in paths])


@pytest.fixture
def bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "bucket"
    root.mkdir()
    monkeypatch.setattr(_SchemeFileSystem, "ROOT", str(root))
    return root


IN_PROCESS = ["--", "--direct_running_mode=in_memory"]


def test_beam_remote_paths_match_local(tmp_path: Path, bucket: Path) -> None:
    """Metadata, prefix, documents, vocabulary and output all behind a scheme; gzip shards;
    more shards than some groups have instances (empty shard runs, maybe empty shards)."""
    metadata = make_corpus(bucket / "corpus")
    vocab = write_vocab(bucket / "vocab.txt")
    extra = {"compression": "gzip", "num_output_files": 7}
    assert main(base_args(metadata, vocab, tmp_path / "local", **extra)) == 0
    args = base_args(metadata, vocab, tmp_path / "unused", runner="beam", **extra)
    remote = {
        "--metadata_files": "bdtest://corpus/metadata.txt",
        "--input_files_prefix": "bdtest://corpus",
        "--vocab_file": "bdtest://vocab.txt",
        "--output_dir": "bdtest://out",
    }
    args = [remote.get(prev, a) for prev, a in zip([""] + args, args)]
    assert main(args + IN_PROCESS) == 0
    assert_same_output(tmp_path / "local", bucket / "out")
    got = manifest(bucket / "out")
    assert got["vocab_file"] == "bdtest://vocab.txt" and got["output_dir"] == "bdtest://out"
    assert got.get("vocab_path", "bdtest://vocab.txt") == "bdtest://vocab.txt"

    # A second run into the same output needs --overwrite; with it, the same bytes again.
    assert main(args + IN_PROCESS) == 2
    assert main(args + ["--overwrite"] + IN_PROCESS) == 0
    assert_same_output(tmp_path / "local", bucket / "out")


def test_beam_missing_remote_document_names_the_line(tmp_path: Path, bucket: Path, capsys) -> None:
    metadata = make_corpus(bucket / "corpus")
    vocab = write_vocab(bucket / "vocab.txt")
    with metadata.open("a", encoding="utf-8") as handle:
        handle.write("docs/missing.txt\n")
    lines = metadata.read_text(encoding="utf-8").splitlines()
    args = base_args(metadata, vocab, tmp_path / "unused", runner="beam")
    args[args.index("--metadata_files") + 1] = "bdtest://corpus/metadata.txt"
    args[args.index("--input_files_prefix") + 1] = "bdtest://corpus"
    args[args.index("--output_dir") + 1] = "bdtest://out"
    assert main(args + IN_PROCESS) == 2
    err = capsys.readouterr().err
    assert f"bdtest://corpus/metadata.txt:{len(lines)}" in err and "docs/missing.txt" in err
    assert not (bucket / "out" / "data_params.json").exists()


def test_pipeline_options_need_beam_runner(tmp_path: Path, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert main(base_args(metadata, vocab, tmp_path / "out") + ["--", "--runner=DataflowRunner"]) == 2
    assert "--runner beam" in capsys.readouterr().err


def test_group_encoding_round_trips() -> None:
    from bert_data.metadata import DocumentSource, WorkItem, decode_group, encode_group
    from bert_data.storage import is_remote

    items: List[WorkItem] = [
        WorkItem(DocumentSource("gs://b/a b\n\u00e9.txt", "m1", 3, "a b\n\u00e9.txt")),
        WorkItem(DocumentSource("/x/y.txt", "m2", 9, "/x/y.txt"), 1 << 23, 1 << 24),  # a byte range
    ]
    line = encode_group(4, items, {"m1": 0, "m2": 1})
    assert "\n" not in line
    assert decode_group(line, ["m1", "m2"]) == (4, items)
    assert is_remote("gs://b/x") and is_remote("hdfs://nn/x") and not is_remote("/a/gs://b") and not is_remote("a.txt")


def test_unknown_beam_runner_is_one_line_and_touches_nothing(tmp_path, capsys) -> None:
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=3), write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out, runner="beam") + ["--", "--runner=Nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("create_tfrecords: error: Beam option --runner Nope: Unexpected")
    assert not out.exists()


@pytest.mark.parametrize("extra, expected", [
    (["--direct_num_worker", "2"], "unknown Beam pipeline option --direct_num_worker (after --); did you mean --direct_num_workers?"),
    (["--no_such_option=1"], "unknown Beam pipeline option --no_such_option (after --)"),
])
def test_unknown_beam_pipeline_option_is_one_line_and_touches_nothing(tmp_path, capsys, extra, expected) -> None:
    """Beam itself drops an option it does not know and runs on: a typo would silently run with
    the default. Here it is one line, before anything is written."""
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=3), write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out, runner="beam") + ["--", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"create_tfrecords: error: {expected}")
    assert not out.exists()
