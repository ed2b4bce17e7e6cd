"""One file, one document, however its path is spelled (issue 26, class 2), and metadata entries
the operating system cannot take as a path (class 8: a NUL byte, ...).

Identity is the file (device and inode) for "is this the same document?" (duplicates, a
``--validation_metadata_files`` document kept out of train), and the entry's canonical spelling
(:func:`bert_data.identity.entry_key`) for the train/validation hash, which ``split_metadata``
and ``create_tfrecords --validation_fraction`` share."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_data.identity import entry_key, unusable_path
from bert_data.metadata import assign_split, iter_metadata, scan_metadata, split_hash
from bert_data.tools import split as split_metadata
from bert_data.tools.create import main as create
from bert_data.tools.vocab import main as build_vocab

from conftest import base_args, write_corpus, write_vocab

HELD_OUT = ("docs/doc003.txt", "docs/doc007.txt", "docs/doc010.txt")


def _spell(kind: str, root: Path, entry: str) -> str:
    """``entry`` (relative to the corpus ``root``) as another spelling of the same file."""
    if kind == "absolute":
        return str(root / entry)
    if kind == "dotted":
        return "./" + entry.replace("/", "//")
    if kind == "climbing":
        return f"docs/../{entry}"
    if kind == "symlinked_dir":
        return entry.replace("docs/", "docs_link/")
    if kind == "symlinked_file":
        link = root / "links" / Path(entry).name
        link.parent.mkdir(exist_ok=True)
        if not link.exists():
            link.symlink_to(root / entry)
        return str(link)
    raise ValueError(kind)


SPELLINGS = ["absolute", "dotted", "climbing", "symlinked_dir", "symlinked_file"]


@pytest.mark.parametrize("kind", SPELLINGS)
def test_validation_documents_stay_out_of_train_however_spelled(tmp_path, monkeypatch, tiny_vocab, kind) -> None:
    """The issue's case (metadata relative to a relative --input_files_prefix, validation listed
    by absolute path) and the other spellings of one file: train reads only the others."""
    monkeypatch.chdir(tmp_path)
    metadata = write_corpus(tmp_path / "corpus", n_docs=14)
    root = metadata.parent
    (root / "docs_link").symlink_to(root / "docs")
    held_out = root / "validation.txt"
    held_out.write_text("".join(_spell(kind, root, entry) + "\n" for entry in HELD_OUT))
    args = base_args(metadata, tiny_vocab, tmp_path / "out", validation_metadata_files=str(held_out))
    args[args.index("--input_files_prefix") + 1] = "corpus"  # relative to the working directory
    assert create(args) == 0
    train = json.loads((tmp_path / "out" / "train" / "data_params.json").read_text())
    validation = json.loads((tmp_path / "out" / "validation" / "data_params.json").read_text())
    assert (train["documents"]["read"], validation["documents"]["read"]) == (11, 3)


@pytest.mark.parametrize("kind", SPELLINGS + ["hard_link"])
def test_duplicates_are_the_same_file_however_spelled(tmp_path, monkeypatch, kind) -> None:
    monkeypatch.chdir(tmp_path)
    metadata = write_corpus(tmp_path / "corpus", n_docs=4)
    root = metadata.parent
    (root / "docs_link").symlink_to(root / "docs")
    if kind == "hard_link":
        os.link(root / "docs" / "doc001.txt", root / "hard.txt")
        other = "hard.txt"
    else:
        other = _spell(kind, root, "docs/doc001.txt")
    metadata.write_text(metadata.read_text() + other + "\n")
    summary = scan_metadata([str(metadata)], "corpus")
    assert (summary.entries, summary.duplicate_entries) == (5, 1)


# --- the split hash -------------------------------------------------------------------------------


def test_the_canonical_spelling() -> None:
    assert entry_key("docs/a.txt", "/corpus") == "docs/a.txt"
    for spelling in ("./docs//a.txt", "/corpus/docs/a.txt", "/corpus/./docs/a.txt", "//corpus/docs/a.txt",
                     "docs/x/../a.txt", " docs/a.txt "):
        assert entry_key(spelling, "/corpus") == "docs/a.txt", spelling
    assert entry_key("/elsewhere/a.txt", "/corpus") == "/elsewhere/a.txt"
    assert entry_key("../elsewhere/a.txt", "/corpus") == "/elsewhere/a.txt"  # out of the prefix: absolute
    assert entry_key("/corpus/docs/a.txt") == "/corpus/docs/a.txt"  # no prefix: as written, normalized
    assert entry_key("gs://b/corpus/docs/a.txt", "gs://b/corpus/") == "docs/a.txt"
    assert entry_key("docs/a.txt", "gs://b/corpus") == "docs/a.txt"


def test_entries_already_canonical_keep_their_hash() -> None:
    """Existing splits do not move: a relative entry hashes as it always did, whatever the prefix."""
    for entry in ("docs/a.txt", "a.txt", "deep/er/b.txt.gz"):
        for prefix in ("", "/corpus", "relative/corpus", "gs://bucket/corpus"):
            assert split_hash(entry_key(entry, prefix), 7) == split_hash(entry, 7)


segment = st.text(alphabet=st.sampled_from(list("abc_-.é")), min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(segment, min_size=1, max_size=4), prefix=st.sampled_from(["/corpus", "/corpus/", "rel/corpus", "."]),
       seed=st.integers(0, 5))
def test_every_spelling_of_one_file_hashes_alike(parts, prefix, seed) -> None:
    entry = "/".join(parts)
    absolute = os.path.join(os.path.abspath(prefix), entry)
    spellings = [entry, "./" + entry, entry.replace("/", "//"), absolute, f"{parts[0]}/../{entry}"]
    keys = {entry_key(s, prefix) for s in spellings}
    assert keys == {os.path.normpath(entry)}
    assert len({split_hash(k, seed) for k in keys}) == 1


def test_assign_split_writes_a_file_spelled_twice_once(tmp_path) -> None:
    paths = [f"docs/d{i}.txt" for i in range(20)] + ["/corpus/docs/d3.txt", "./docs/d5.txt"]
    train, validation = assign_split(paths, count=5, prefix="/corpus")
    assert len(train) + len(validation) == 20 and "/corpus/docs/d3.txt" not in train + validation


def test_split_metadata_and_the_one_shot_split_agree_on_absolute_entries(tmp_path, tiny_vocab, capsys) -> None:
    """A metadata file mixing relative and absolute entries: ``split_metadata`` given the same
    --input_files_prefix makes the lists whose two runs are byte-identical to the one-shot split."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=30)
    root = metadata.parent
    lines = metadata.read_text().split()
    metadata.write_text("".join((str(root / line) if i % 3 == 0 else line) + "\n" for i, line in enumerate(lines)))
    out = tmp_path / "out"
    assert create(base_args(metadata, tiny_vocab, out, validation_fraction=0.3, seed=7)) == 0
    lists = tmp_path / "lists"
    assert split_metadata.main(["--metadata_files", str(metadata), "--validation_fraction", "0.3", "--seed", "7",
                                "--input_files_prefix", str(root), "--output_dir", str(lists)]) == 0
    for side in ("train", "validation"):
        separate = tmp_path / f"separate_{side}"
        args = base_args(lists / f"{side}_metadata.txt", tiny_vocab, separate, seed=7)
        args[args.index("--input_files_prefix") + 1] = str(root)
        assert create(args) == 0
        assert {p.name: p.read_bytes() for p in separate.glob("*.tfrecords")} == {
            p.name: p.read_bytes() for p in (out / side).glob("*.tfrecords")
        }, side


def test_a_file_listed_twice_in_a_one_shot_split_stays_on_one_side(tmp_path, monkeypatch) -> None:
    """The same document listed relative and absolute can never be on both sides."""
    from bert_data.config import Config
    from bert_data.runners.plan import split_configs, split_selector

    monkeypatch.chdir(tmp_path)
    metadata = write_corpus(tmp_path / "corpus", n_docs=40)
    lines = metadata.read_text().split()
    metadata.write_text("\n".join(lines + [str(metadata.parent / line) for line in lines]) + "\n")
    config = Config(metadata_files=(str(metadata),), input_files_prefix="corpus", validation_fraction=0.4, seed=1,
                    output_dir=str(tmp_path / "out"))
    sides = {}
    for role, half in split_configs(config).items():
        select, _ = split_selector(half)
        for source in iter_metadata([str(metadata)], "corpus"):
            if select(source):
                sides.setdefault(os.path.realpath(source.path), set()).add(role)
    assert len(sides) == 40 and all(len(roles) == 1 for roles in sides.values())
    assert {role for roles in sides.values() for role in roles} == {"train", "validation"}


# --- entries the OS cannot take as a path ---------------------------------------------------------


def test_what_no_path_can_be() -> None:
    assert unusable_path("a\0b") == "holds a NUL byte, which no file name can"
    assert "file system encoding" in unusable_path("a\ud800b")  # a lone surrogate (from a YAML escape)
    assert unusable_path("docs/a.txt") == unusable_path("gs://b/a") == ""


BAD_PATHS = {
    "nul": (b"docs/doc\x00004.txt", "{metadata}:5: the document path 'docs/doc\\x00004.txt' holds a NUL byte, which no "
            "file name can; fix or remove that line"),
    "not_utf8": (b"docs/doc\xe9004.txt", "metadata file {metadata} is not UTF-8 text at line 5; save it as UTF-8 (a "
                 "document whose file name is not UTF-8 must be renamed)"),
}


@pytest.mark.parametrize("bad", sorted(BAD_PATHS))
@pytest.mark.parametrize("tool", ["create_tfrecords", "split_metadata", "build_vocab"])
def test_a_metadata_path_no_file_can_have_is_one_line_and_the_fix_works(tmp_path, capsys, tool, bad) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    good = metadata.read_bytes()
    metadata.write_bytes(good.replace(b"docs/doc004.txt", BAD_PATHS[bad][0]))
    vocab = write_vocab(tmp_path / "vocab.txt")
    runs = {
        "create_tfrecords": lambda: create(base_args(metadata, vocab, tmp_path / "out")),
        "split_metadata": lambda: split_metadata.main(["--metadata_files", str(metadata), "--validation_count", "2",
                                                       "--output_dir", str(tmp_path / "lists"), "--overwrite"]),
        "build_vocab": lambda: build_vocab(["--metadata_files", str(metadata), "--input_files_prefix", str(metadata.parent),
                                            "--vocab_size", "100", "--output", str(tmp_path / "v.txt"), "--quiet"]),
    }
    assert runs[tool]() == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"{tool}: error: " + BAD_PATHS[bad][1].format(metadata=metadata)]
    assert not (tmp_path / "out").exists() and not (tmp_path / "lists").exists() and not (tmp_path / "v.txt").exists()
    metadata.write_bytes(good)  # fixed: the rerun succeeds
    assert runs[tool]() == 0


def test_an_over_long_name_is_one_line_naming_the_line(tmp_path, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=3)
    metadata.write_text(metadata.read_text() + "docs/" + "x" * 300 + ".txt\n")
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert create(base_args(metadata, vocab, tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"create_tfrecords: error: {metadata}:4: document ")
    assert err[0].endswith("... cannot be accessed (File name too long)") and len(err[0]) < 400


@pytest.mark.parametrize("key, value, message", [
    ("metadata_files", '["a\\0b"]', "metadata file 'a\\x00b' holds a NUL byte, which no file name can; give its real name"),
    ("input_files_prefix", '"p\\0"',
     "--config {preset}: input_files_prefix: 'p\\x00' holds a NUL byte, which no file name can; fix it"),
    ("vocab_file", '"v\\0"', "vocab file 'v\\x00' is not a usable file name (embedded null byte); give the path of vocab.txt"),
])
def test_nul_bytes_in_paths_from_a_preset_are_one_line(tmp_path, capsys, key, value, message) -> None:
    """A YAML preset can carry what a command line cannot: a NUL byte in any of the input paths."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=3)
    vocab = write_vocab(tmp_path / "vocab.txt")
    given = {"metadata_files": json.dumps([str(metadata)]), "vocab_file": json.dumps(str(vocab)), key: value}
    preset = tmp_path / "preset.yaml"
    preset.write_text("".join(f"{k}: {v}\n" for k, v in given.items()))
    assert create(["--config", str(preset), "--output_dir", str(tmp_path / "out"), "--do_lower_case"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"create_tfrecords: error: {message.format(preset=preset)}"]


# --- package versions: what a run records of its segmenter and tokenizers ---------------------


def test_every_installed_package_has_importlib_metadatas_version() -> None:
    """The dist-info read (no importlib.metadata import) gives importlib.metadata's answer for
    every installed distribution, or steps aside (None) for it to answer."""
    from importlib import metadata

    from bert_data.identity import _dist_info_version, package_version

    names = sorted({dist.metadata["Name"] for dist in metadata.distributions()})
    assert len(names) > 20
    for name in names + ["nonexistent-package-xyz"]:
        try:
            expected = metadata.version(name)
        except metadata.PackageNotFoundError:
            expected = "not installed"
        assert _dist_info_version(name) in (None, expected), name
        assert package_version(name) == expected, name


@pytest.mark.parametrize("layout, expected", [
    ({"Foo_Bar-1.2.dist-info/METADATA": "Metadata-Version: 2.1\nName: foo-bar\nVersion: 1.2\n\nbody"}, "1.2"),
    ({"foo_bar.egg-info/PKG-INFO": "Version: 9\n", "z/foo_bar-1.2.dist-info/METADATA": "Version: 1.2\n"}, None),
    ({"foo_bar-1.2.dist-info/METADATA": "Version: 1.2\n", "foo_bar-1.3.dist-info/METADATA": "Version: 1.3\n"}, None),
    ({"foo_bar-1.2.dist-info/METADATA": "Name: foo-bar\n\nVersion: 1.2\n"}, None),  # not among the headers
    ({"foo_bar-1.2.dist-info/RECORD": ""}, None),
    ({}, None),
])
def test_a_dist_info_that_is_not_plainly_the_one_is_left_to_importlib(tmp_path, monkeypatch, layout, expected) -> None:
    from bert_data.identity import _dist_info_version

    for path, text in layout.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.setattr("sys.path", [str(tmp_path / "missing"), str(tmp_path), str(tmp_path / "z")])
    assert _dist_info_version("foo-bar") == expected
