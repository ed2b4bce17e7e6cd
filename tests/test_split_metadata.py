"""split_metadata: hash-based train/validation split of metadata files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List, Tuple

import pytest

from bert_data.errors import ConfigError
from bert_data.metadata import assign_split, split_hash
from bert_data.tools.split import main


def doc_paths(n: int, start: int = 0) -> List[str]:
    return [f"docs/doc{i:05d}.txt" for i in range(start, start + n)]


def write_metadata(path: Path, entries: List[str], header: bool = True) -> Path:
    lines = (["# a comment", ""] if header else []) + entries
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_lines(path: Path) -> List[str]:
    return path.read_text(encoding="utf-8").splitlines()


def run_split(tmp_path: Path, capsys, *args: str) -> Tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- the pure function ---------------------------------------------------------------------


def test_assign_split_is_deterministic_and_partitions():
    paths = doc_paths(500)
    train, validation = assign_split(paths, fraction=0.2, seed=3)
    assert (train, validation) == assign_split(list(paths), fraction=0.2, seed=3)
    assert not set(train) & set(validation)
    assert sorted(train + validation) == sorted(paths)
    assert 0.12 < len(validation) / len(paths) < 0.28
    # input order is kept on both sides
    assert train == [p for p in paths if p in set(train)]
    assert validation == [p for p in paths if p in set(validation)]
    # the rule itself: validation iff hash < fraction
    assert all(split_hash(p, 3) < 0.2 for p in validation)
    assert all(split_hash(p, 3) >= 0.2 for p in train)
    # another seed gives another split
    assert assign_split(paths, fraction=0.2, seed=4)[1] != validation


def test_assign_split_independent_of_input_order():
    paths = doc_paths(300)
    shuffled = paths[:]
    random.Random(7).shuffle(shuffled)
    for kwargs in ({"fraction": 0.3}, {"count": 40}):
        train_a, val_a = assign_split(paths, **kwargs)
        train_b, val_b = assign_split(shuffled, **kwargs)
        assert set(train_a) == set(train_b) and set(val_a) == set(val_b)
        assert train_b == [p for p in shuffled if p in set(train_b)]


def test_assign_split_stable_under_additions_with_fraction():
    old = doc_paths(400)
    new = old[:200] + doc_paths(300, start=1000) + old[200:]
    train_old, val_old = assign_split(old, fraction=0.25, seed=11)
    train_new, val_new = assign_split(new, fraction=0.25, seed=11)
    assert set(val_old) <= set(val_new)
    assert set(train_old) <= set(train_new)


def test_assign_split_count_picks_smallest_hashes():
    paths = doc_paths(200)
    train, validation = assign_split(paths, count=17, seed=5)
    assert len(validation) == 17 and len(train) == 183
    cutoff = max(split_hash(p, 5) for p in validation)
    assert all(split_hash(p, 5) > cutoff for p in train)
    # approximately stable: adding documents only moves validation documents to train
    more = paths + doc_paths(50, start=5000)
    _, validation_more = assign_split(more, count=17, seed=5)
    assert len(validation_more) == 17
    assert set(validation_more) - set(validation) <= set(doc_paths(50, start=5000))


def test_assign_split_duplicates_once_and_normalised():
    paths = ["a.txt", "b.txt", "./a.txt", "c.txt", "b.txt"] + doc_paths(20)
    train, validation = assign_split(paths, count=5)
    both = train + validation
    assert len(both) == 23
    assert "./a.txt" not in both and both.count("b.txt") == 1


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({}, "--validation_fraction"),
        ({"fraction": 0.5, "count": 3}, "only one"),
        ({"fraction": 0.0}, "between 0 and 1"),
        ({"fraction": 1.0}, "between 0 and 1"),
        ({"fraction": -0.1}, "between 0 and 1"),
        ({"count": 0}, "at least 1"),
        ({"count": 10}, "no training documents"),
        ({"fraction": 1e-9}, "none of the 10"),
        ({"fraction": 1 - 1e-12}, "all 10"),
    ],
)
def test_assign_split_bad_sizes(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        assign_split(doc_paths(10), **kwargs)


# --- the command ---------------------------------------------------------------------------


def test_cli_split_writes_disjoint_covering_files(tmp_path, capsys):
    entries = doc_paths(120)
    first = write_metadata(tmp_path / "m1.txt", entries[:70])
    second = write_metadata(tmp_path / "m2.txt", ["  " + e + "  \r" for e in entries[70:]], header=False)
    out = tmp_path / "out"
    code, stdout, stderr = run_split(
        tmp_path, capsys, "--metadata_files", str(first), str(second), "--validation_fraction", "0.25",
        "--output_dir", str(out), "--input_files_prefix", "/data/corpus",
    )
    assert code == 0, stderr
    assert stderr == ""
    train = read_lines(out / "train_metadata.txt")
    validation = read_lines(out / "validation_metadata.txt")
    assert not set(train) & set(validation)
    assert sorted(train + validation) == sorted(entries)  # entries as written, stripped
    assert train == [e for e in entries if e in set(train)]
    assert (train, validation) == assign_split(entries, fraction=0.25)
    assert len(stdout.strip().splitlines()) == 1
    assert f"{len(train)} train" in stdout and f"{len(validation)} validation" in stdout
    assert "/data/corpus" in stdout


def test_cli_deterministic_and_order_independent(tmp_path, capsys):
    entries = doc_paths(80)
    shuffled = entries[:]
    random.Random(1).shuffle(shuffled)
    results = []
    for name, listing in (("a", entries), ("b", entries), ("c", shuffled)):
        meta = write_metadata(tmp_path / f"{name}.txt", listing)
        out = tmp_path / f"out_{name}"
        code, _, err = run_split(
            tmp_path, capsys, "--metadata_files", str(meta), "--validation_count", "9", "--seed", "42",
            "--output_dir", str(out), "--train_name", "tr.txt", "--validation_name", "va.txt",
        )
        assert code == 0, err
        results.append((read_lines(out / "tr.txt"), read_lines(out / "va.txt")))
    assert results[0] == results[1]
    assert len(results[0][1]) == 9
    assert set(results[0][0]) == set(results[2][0]) and set(results[0][1]) == set(results[2][1])


def test_cli_stable_under_additions(tmp_path, capsys):
    old = doc_paths(150)
    meta_old = write_metadata(tmp_path / "old.txt", old)
    meta_new = write_metadata(tmp_path / "new.txt", doc_paths(60, start=900) + old)
    sides = []
    for meta, out in ((meta_old, tmp_path / "o1"), (meta_new, tmp_path / "o2")):
        code, _, err = run_split(
            tmp_path, capsys, "--metadata_files", str(meta), "--validation_fraction", "0.1", "--output_dir", str(out)
        )
        assert code == 0, err
        sides.append((set(read_lines(out / "train_metadata.txt")), set(read_lines(out / "validation_metadata.txt"))))
    (train_old, val_old), (train_new, val_new) = sides
    assert train_old <= train_new and val_old <= val_new


def test_cli_duplicates_reported_and_written_once(tmp_path, capsys):
    entries = doc_paths(30)
    meta = write_metadata(tmp_path / "m.txt", entries + [entries[3], entries[3], entries[7]])
    out = tmp_path / "out"
    code, stdout, stderr = run_split(
        tmp_path, capsys, "--metadata_files", str(meta), "--validation_fraction", "0.3", "--output_dir", str(out)
    )
    assert code == 0
    assert "3 duplicate entries" in stderr and f"{entries[3]} (x3)" in stderr and f"{entries[7]} (x2)" in stderr
    assert "30 documents" in stdout and "33 entries" in stdout
    written = read_lines(out / "train_metadata.txt") + read_lines(out / "validation_metadata.txt")
    assert sorted(written) == sorted(entries)


@pytest.mark.parametrize(
    "size_args, fragment",
    [
        ([], "--validation_fraction"),
        (["--validation_fraction", "0.2", "--validation_count", "2"], "only one"),
        (["--validation_fraction", "0"], "between 0 and 1"),
        (["--validation_fraction", "1"], "between 0 and 1"),
        (["--validation_fraction", "1.5"], "between 0 and 1"),
        (["--validation_count", "0"], "at least 1"),
        (["--validation_count", "8"], "no training documents"),
        (["--validation_count", "20"], "no training documents"),
        (["--validation_fraction", "0.000000001"], "none of the 8"),
        (["--validation_count", "two"], "invalid int"),
    ],
)
def test_cli_bad_sizes_exit_2(tmp_path, capsys, size_args, fragment):
    meta = write_metadata(tmp_path / "m.txt", doc_paths(8))
    out = tmp_path / "out"
    try:
        code = main(["--metadata_files", str(meta), "--output_dir", str(out), *size_args])
    except SystemExit as exc:  # argparse type errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("split_metadata: error: ")
    assert fragment in lines[0]
    assert captured.out == ""
    assert not out.exists()  # nothing written on an error


def test_cli_missing_metadata_and_empty_metadata(tmp_path, capsys):
    code, _, err = run_split(
        tmp_path, capsys, "--metadata_files", str(tmp_path / "nope.txt"), "--validation_fraction", "0.5"
    )
    assert code == 2 and err.startswith("split_metadata: error: ") and "nope.txt" in err
    empty = write_metadata(tmp_path / "empty.txt", [])
    code, _, err = run_split(tmp_path, capsys, "--metadata_files", str(empty), "--validation_fraction", "0.5")
    assert code == 2 and "no documents" in err


def test_cli_refuses_to_overwrite_its_input(tmp_path, capsys):
    meta = write_metadata(tmp_path / "train_metadata.txt", doc_paths(10))
    before = meta.read_text()
    code, _, err = run_split(
        tmp_path, capsys, "--metadata_files", str(meta), "--validation_count", "2", "--output_dir", str(tmp_path)
    )
    assert code == 2 and "refusing to overwrite" in err
    assert meta.read_text() == before


def test_sample_corpus_split(tmp_path, capsys):
    sample = Path(__file__).resolve().parents[1] / "bert_data" / "sample_data" / "metadata.txt"
    if not sample.exists():
        pytest.skip("sample corpus missing")
    code, stdout, err = run_split(
        tmp_path, capsys, "--metadata_files", str(sample), "--validation_count", "4", "--output_dir", str(tmp_path)
    )
    assert code == 0, err
    assert len(read_lines(tmp_path / "validation_metadata.txt")) == 4
    for line in read_lines(tmp_path / "train_metadata.txt"):
        assert (sample.parent / line).is_file()


def test_cli_refuses_to_overwrite_earlier_outputs(tmp_path, capsys):
    meta = write_metadata(tmp_path / "m.txt", doc_paths(20))
    out = tmp_path / "out"
    args = ["--metadata_files", str(meta), "--validation_count", "3", "--output_dir", str(out)]
    assert run_split(tmp_path, capsys, *args)[0] == 0
    (out / "train_metadata.txt").write_text("mine\n", encoding="utf-8")
    code, stdout, stderr = run_split(tmp_path, capsys, *args)
    assert code == 2 and stdout == ""
    assert stderr == f"split_metadata: error: {out / 'train_metadata.txt'} exists; pass --overwrite to replace it\n"
    assert (out / "train_metadata.txt").read_text(encoding="utf-8") == "mine\n"  # untouched
    # only the validation file left over: refused too, naming it
    (out / "train_metadata.txt").unlink()
    code, _, stderr = run_split(tmp_path, capsys, *args)
    assert code == 2 and f"{out / 'validation_metadata.txt'} exists" in stderr and stderr.count("\n") == 1
    code, stdout, stderr = run_split(tmp_path, capsys, *args, "--overwrite")
    assert code == 0 and stderr == ""
    assert len(read_lines(out / "train_metadata.txt")) == 17
    # --overwrite never lets an output replace an input
    code, _, stderr = run_split(
        tmp_path, capsys, "--metadata_files", str(out / "train_metadata.txt"), "--validation_count", "2",
        "--output_dir", str(out), "--overwrite",
    )
    assert code == 2 and "refusing to overwrite" in stderr


def test_cli_messages_count_in_the_singular(tmp_path, capsys):
    meta = write_metadata(tmp_path / "m.txt", ["a.txt", "b.txt", "a.txt"])
    code, stdout, stderr = run_split(
        tmp_path, capsys, "--metadata_files", str(meta), "--validation_count", "1", "--output_dir", str(tmp_path / "o")
    )
    assert code == 0
    assert "warning: 1 duplicate entry of 1 document written once: a.txt (x2)" in stderr
    assert stdout.startswith("split 2 documents from 3 entries: 1 train -> ")
    meta = write_metadata(tmp_path / "one.txt", ["a.txt", "b.txt"])
    code, stdout, _ = run_split(
        tmp_path, capsys, "--metadata_files", str(meta), "--validation_count", "1", "--output_dir", str(tmp_path / "p")
    )
    assert code == 0 and "from 2 entries: 1 train" in stdout


def test_help_says_how_big_a_validation_set(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "a few thousand documents" in text and "--validation_count" in text and "--overwrite" in text


def test_no_progress_output_off_a_terminal(tmp_path, capsys):
    meta = write_metadata(tmp_path / "m.txt", doc_paths(50))
    code, stdout, stderr = run_split(tmp_path, capsys, "--metadata_files", str(meta), "--validation_count", "5",
                                     "--output_dir", str(tmp_path / "o"))
    assert code == 0 and stderr == "" and len(stdout.splitlines()) == 1


def test_progress_bar_follows_metadata_bytes_on_a_terminal(tmp_path: Path, capsys, monkeypatch) -> None:
    """Over millions of entries the split shows a bar of metadata bytes read (stderr, terminal only)."""
    import io
    import sys

    class FakeTTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    metadata = tmp_path / "all.txt"
    metadata.write_text("".join(f"doc{i}.txt\n" for i in range(5000)))
    import bert_data.tools.split as split_tool

    bars = []

    def recording_bar(*args, **kwargs):
        bars.append(split_tool.terminal_bar.__wrapped__(*args, **kwargs))
        return bars[-1]

    recording_bar.__wrapped__ = split_tool.terminal_bar
    monkeypatch.setattr(split_tool, "terminal_bar", recording_bar)
    fake = FakeTTY()
    monkeypatch.setattr(sys, "stderr", fake)
    code = main(["--metadata_files", str(metadata), "--validation_count", "5", "--output_dir", str(tmp_path / "s")])
    assert code == 0 and "5 validation" in capsys.readouterr().out
    assert "reading metadata" in fake.getvalue()
    assert bars[0].total == bars[0].n == metadata.stat().st_size  # every byte of the metadata counted
    quiet = FakeTTY()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert main(["--metadata_files", str(metadata), "--validation_count", "5", "--output_dir", str(tmp_path / "q"),
                 "--quiet"]) == 0
    assert quiet.getvalue() == ""
