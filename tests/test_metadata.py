"""Metadata stage: parsing metadata files, validating entries, duplicates, grouping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bert_data.errors import MetadataError
from bert_data.metadata import (
    DocumentSource,
    check_source,
    iter_groups,
    iter_metadata,
    parse_metadata_line,
    scan_metadata,
)


def touch(path: Path, text: str = "hello world.\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_parse_metadata_line():
    assert parse_metadata_line("docs/a.txt\n", "/data") == os.path.join("/data", "docs/a.txt")
    assert parse_metadata_line("docs/a.txt\r\n", "/data") == os.path.join("/data", "docs/a.txt")
    assert parse_metadata_line("  docs/a.txt  \n", "") == "docs/a.txt"
    assert parse_metadata_line("\n", "/data") is None
    assert parse_metadata_line("   \t \r\n", "/data") is None
    assert parse_metadata_line("# a comment\n", "/data") is None
    assert parse_metadata_line("   # indented comment\n", "/data") is None
    assert parse_metadata_line("/abs/doc.txt\n", "/data") == "/abs/doc.txt"


def test_iter_metadata_blank_comments_crlf_prefix_absolute(tmp_path):
    absolute = touch(tmp_path / "elsewhere" / "abs.txt")
    meta = tmp_path / "meta.txt"
    meta.write_bytes(
        b"# header comment\r\n"
        b"\r\n"
        b"docs/a.txt\r\n"
        b"   \r\n"
        b"docs/b.txt\n"
        + str(absolute).encode() + b"\r\n"
        b"# trailing comment"
    )
    sources = list(iter_metadata([str(meta)], "/prefix"))
    assert [s.path for s in sources] == [
        os.path.join("/prefix", "docs/a.txt"),
        os.path.join("/prefix", "docs/b.txt"),
        str(absolute),
    ]
    assert [s.line_number for s in sources] == [3, 5, 6]
    assert all(s.metadata_file == str(meta) for s in sources)
    assert sources[0].where() == f"{meta}:3"
    assert not any("\r" in s.path for s in sources)


def test_iter_metadata_without_prefix_keeps_relative(tmp_path):
    meta = tmp_path / "meta.txt"
    meta.write_text("a.txt\nsub/b.txt", encoding="utf-8")  # no final newline
    assert [s.path for s in iter_metadata([str(meta)], "")] == ["a.txt", "sub/b.txt"]


def test_several_metadata_files_concatenated_in_order(tmp_path):
    m1 = tmp_path / "m1.txt"
    m2 = tmp_path / "m2.txt"
    m3 = tmp_path / "m3.txt"
    m1.write_text("x1\nx2\n", encoding="utf-8")
    m2.write_text("# nothing here\n", encoding="utf-8")
    m3.write_text("y1\n\ny2\n", encoding="utf-8")
    sources = list(iter_metadata([str(m3), str(m2), str(m1)], "p"))
    assert [(Path(s.metadata_file).name, s.path, s.line_number) for s in sources] == [
        ("m3.txt", os.path.join("p", "y1"), 1),
        ("m3.txt", os.path.join("p", "y2"), 3),
        ("m1.txt", os.path.join("p", "x1"), 1),
        ("m1.txt", os.path.join("p", "x2"), 2),
    ]


def test_missing_metadata_file(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(MetadataError, match="does not exist") as info:
        list(iter_metadata([str(missing)], ""))
    assert str(missing) in str(info.value)
    with pytest.raises(MetadataError, match="is a directory"):
        list(iter_metadata([str(tmp_path)], ""))


def test_missing_document_names_metadata_file_and_line(tmp_path):
    touch(tmp_path / "docs" / "a.txt")
    touch(tmp_path / "docs" / "b.txt")
    meta = tmp_path / "meta.txt"
    meta.write_text("docs/a.txt\n# comment\ndocs/missing.txt\ndocs/b.txt\n", encoding="utf-8")
    with pytest.raises(MetadataError) as info:
        scan_metadata([str(meta)], str(tmp_path))
    message = str(info.value)
    assert f"{meta}:3" in message
    assert "missing.txt" in message
    assert "does not exist" in message


def test_check_source_accepts_directories_and_regular_files(tmp_path):
    doc = touch(tmp_path / "a.txt")
    check_source(DocumentSource(str(doc), "m.txt", 1))
    check_source(DocumentSource(str(tmp_path), "m.txt", 2))  # counted as skipped later, not an error
    with pytest.raises(MetadataError, match="m.txt:7"):
        check_source(DocumentSource(str(tmp_path / "absent"), "m.txt", 7))


def test_empty_metadata_is_an_error(tmp_path):
    meta = tmp_path / "meta.txt"
    meta.write_text("# only a comment\n\n   \n", encoding="utf-8")
    with pytest.raises(MetadataError, match="no documents listed") as info:
        scan_metadata([str(meta)], str(tmp_path))
    assert str(meta) in str(info.value)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(MetadataError, match="no documents listed"):
        scan_metadata([str(empty), str(meta)], str(tmp_path))


def test_scan_counts_entries_duplicates_and_bytes(tmp_path):
    a = touch(tmp_path / "docs" / "a.txt", "aaaa")
    touch(tmp_path / "docs" / "b.txt", "bb")
    (tmp_path / "docs" / "sub").mkdir()
    m1 = tmp_path / "m1.txt"
    m2 = tmp_path / "m2.txt"
    m1.write_text("docs/a.txt\ndocs/b.txt\ndocs/./a.txt\n", encoding="utf-8")
    m2.write_text(f"{a}\ndocs/sub\ndocs/b.txt\n", encoding="utf-8")
    summary = scan_metadata([str(m1), str(m2)], str(tmp_path))
    assert summary.entries == 6
    # docs/./a.txt, the absolute a.txt and the second docs/b.txt repeat earlier entries
    assert summary.duplicate_entries == 3
    assert summary.total_bytes == 4 + 2 + 4 + 4 + 2  # the directory adds nothing


def test_scan_without_duplicates(tmp_path):
    meta = tmp_path / "m.txt"
    lines = []
    for i in range(5):
        touch(tmp_path / f"d{i}.txt")
        lines.append(f"d{i}.txt")
    meta.write_text("\n".join(lines), encoding="utf-8")
    summary = scan_metadata([str(meta)], str(tmp_path))
    assert (summary.entries, summary.duplicate_entries) == (5, 0)


@pytest.mark.parametrize("n, split, sizes", [(10, 3, [3, 3, 3, 1]), (6, 3, [3, 3]), (1, 1000, [1]), (0, 4, []),
                                             (5, 1, [1, 1, 1, 1, 1])])
def test_iter_groups_chunking(n, split, sizes):
    sources = [DocumentSource(f"d{i}", "m", i + 1) for i in range(n)]
    groups = list(iter_groups(iter(sources), split))
    assert [index for index, _ in groups] == list(range(len(sizes)))
    assert [len(group) for _, group in groups] == sizes
    assert [s for _, group in groups for s in group] == sources  # order kept, nothing lost


def test_iter_groups_is_lazy():
    consumed = []

    def sources():
        for i in range(100):
            consumed.append(i)
            yield DocumentSource(f"d{i}", "m", i + 1)

    groups = iter_groups(sources(), 10)
    index, first = next(groups)
    assert index == 0 and len(first) == 10
    assert len(consumed) <= 11


@pytest.mark.parametrize("n_lines, bad_line", [(3, 2), (3000, 1500)])
def test_invalid_utf8_metadata_is_a_metadata_error_naming_the_line(tmp_path, n_lines, bad_line):
    lines = [b"docs/file%05d.txt\n" % i for i in range(n_lines)]
    lines[bad_line - 1] = b"docs/\xff\xfe.txt\n"
    meta = tmp_path / "meta.txt"
    meta.write_bytes(b"".join(lines))
    with pytest.raises(MetadataError, match=rf"line {bad_line}\b"):
        list(iter_metadata([str(meta)], ""))


def test_metadata_with_utf8_bom(tmp_path):
    touch(tmp_path / "docs" / "a.txt")
    meta = tmp_path / "meta.txt"
    meta.write_bytes(b"\xef\xbb\xbfdocs/a.txt\r\n")
    sources = list(iter_metadata([str(meta)], str(tmp_path)))
    assert [s.path for s in sources] == [os.path.join(str(tmp_path), "docs/a.txt")]
    assert scan_metadata([str(meta)], str(tmp_path)).entries == 1
