"""Compressed inputs (.gz/.bz2/.xz, .zst when zstandard is importable) and --input_format jsonl.

Every end-to-end check compares record bytes: the same document texts must give byte-identical
shards whatever their container, and every skipped document is counted by reason.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from bert_data import compression, input_formats
from bert_data.tools.create import build_parser, config_from_args, main
from bert_data.compression import sniff_compression
from bert_data.documents import read_source
from bert_data.input_formats import parse_jsonl
from bert_data.metadata import DocumentSource
from bert_data.runners.job import run

from conftest import base_args, write_corpus, write_vocab

COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def _zstd_compress(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)


def compress(kind: str, data: bytes) -> bytes:
    return _zstd_compress(data) if kind == "zst" else COMPRESSORS[kind](data)


def shard_bytes(out: Path) -> Dict[str, bytes]:
    shards = {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}
    assert shards and any(shards.values())
    return shards


def run_collecting(args: List[str]) -> Tuple[dict, Counter]:
    """Run through pipeline.run and also return the summed per-group stats."""
    stats: Counter = Counter()
    config = config_from_args(build_parser().parse_args(args))
    manifest = run(config, on_group=lambda result: stats.update(result.stats))
    return manifest, stats


def compressed_copy(metadata: Path, root: Path, kinds: List[str], keep_extension: bool = True) -> Path:
    """A copy of a write_corpus corpus whose documents are compressed (cycling through ``kinds``)."""
    lines = []
    (root / "docs").mkdir(parents=True)
    for i, rel in enumerate(l for l in metadata.read_text().splitlines() if l):
        kind = kinds[i % len(kinds)]
        name = f"{rel}.{kind}" if keep_extension else f"{rel}.blob"
        (root / name).write_bytes(compress(kind, (metadata.parent / rel).read_bytes()))
        lines.append(name)
    out = root / "metadata.txt"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Tuple[Path, Path, Dict[str, bytes]]:
    root = tmp_path_factory.mktemp("plain")
    metadata = write_corpus(root / "corpus")
    vocab = write_vocab(root / "vocab.txt")
    assert main(base_args(metadata, vocab, root / "out")) == 0
    return metadata, vocab, shard_bytes(root / "out")


# --- compressed inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz", "zst"])
def test_compressed_corpus_gives_byte_identical_records(plain_run, tmp_path: Path, kind: str) -> None:
    metadata, vocab, plain = plain_run
    packed = compressed_copy(metadata, tmp_path / "corpus", [kind])
    manifest, stats = run_collecting(base_args(packed, vocab, tmp_path / "out"))
    assert shard_bytes(tmp_path / "out") == plain
    assert stats[f"decompressed.{kind}"] == 12
    assert manifest["documents"] == {"read": 12, "used": 12, "skipped": {}}


def test_mixed_compression_detected_by_magic_bytes_alone(plain_run, tmp_path: Path) -> None:
    metadata, vocab, plain = plain_run
    packed = compressed_copy(metadata, tmp_path / "corpus", ["gz", "bz2", "xz"], keep_extension=False)
    _, stats = run_collecting(base_args(packed, vocab, tmp_path / "out"))
    assert shard_bytes(tmp_path / "out") == plain
    assert (stats["decompressed.gz"], stats["decompressed.bz2"], stats["decompressed.xz"]) == (4, 4, 4)


def test_corrupt_compressed_documents_are_counted_not_fatal(tmp_path: Path, tiny_vocab: Path, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    docs = tmp_path / "corpus" / "docs"
    whole = gzip.compress((docs / "doc001.txt").read_bytes())
    (docs / "truncated.gz").write_bytes(whole[: len(whole) // 2])
    (docs / "not_really.xz").write_bytes(b"plain text pretending to be xz")
    with metadata.open("a") as handle:
        handle.write("docs/truncated.gz\ndocs/not_really.xz\n")
    assert main(base_args(metadata, tiny_vocab, tmp_path / "out")) == 0
    manifest = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert manifest["documents"] == {"read": 8, "used": 6, "skipped": {"corrupt_compressed": 2}}
    assert "corrupt_compressed 2" in capsys.readouterr().out


def _source(path: Path) -> DocumentSource:
    return DocumentSource(str(path), "metadata.txt", 1)


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_read_source_truncated_and_multi_member(tmp_path: Path, kind: str) -> None:
    text = "First sentence here. Second one.\n" * 200
    data = compress(kind, text.encode()) + compress(kind, "Tail.".encode())
    (tmp_path / f"ok.{kind}").write_bytes(data)
    result = read_source(_source(tmp_path / f"ok.{kind}"), None)
    assert result.documents == [text + "Tail."] and result.compression == kind
    assert result.input_bytes == len(data)
    (tmp_path / f"cut.{kind}").write_bytes(data[: len(data) // 3])
    cut = read_source(_source(tmp_path / f"cut.{kind}"), None)
    assert cut.skip_reason == "corrupt_compressed" and cut.documents == [] and cut.documents_read == 1


def test_zstd_without_the_module_is_a_counted_skip(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(compression, "_zstandard", None)
    (tmp_path / "a.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    result = read_source(_source(tmp_path / "a.zst"), None)
    assert result.skip_reason == "unsupported_compression"


def test_sniff_compression() -> None:
    assert sniff_compression(gzip.compress(b"x")[:16]) == "gz"
    assert sniff_compression(bz2.compress(b"x")[:16]) == "bz2"
    assert sniff_compression(bz2.compress(b"")[:16]) == "bz2"
    assert sniff_compression(lzma.compress(b"x")[:16]) == "xz"
    assert sniff_compression(b"\x28\xb5\x2f\xfd\x00") == "zst"
    assert sniff_compression(b"BZh9 is just text", "notes.txt") is None
    assert sniff_compression(b"plain", "doc.txt") is None
    assert sniff_compression(b"plain", "doc.GZ") == "gz"  # claims gzip: will fail as corrupt
    assert sniff_compression(b"", "empty.gz") is None  # an empty file is an empty document


# --- JSON Lines -------------------------------------------------------------------------------


def test_parse_jsonl_reasons() -> None:
    text = "\n".join(
        [
            '{"text": "One."}',
            "",
            "   ",
            "not json",
            '{"text": "cut',
            "[1, 2]",
            '{"body": "x"}',
            '{"text": 5}',
            '{"text": null}',
            '{"text": ""}',
            '{"text": "a\\ud800b"}',
            '{"text": "line\\u2028sep"}\r',
        ]
    )
    docs, skipped, replaced = parse_jsonl(text, "text")
    assert docs == ["One.", "", "a\ufffdb", "line\u2028sep"]
    assert skipped == Counter({"bad_json": 2, "missing_text_key": 4})
    assert replaced == 1


def write_jsonl_corpus(root: Path, texts: List[str], extra_lines: List[str], key: str = "text") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({key: t, "id": i}) for i, t in enumerate(texts)]
    lines[3:3] = extra_lines  # bad lines in the middle: they must not disturb the others
    (root / "part-0.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    metadata = root / "metadata.txt"
    metadata.write_text("part-0.jsonl\n")
    return metadata


BAD_LINES = ['{"text": ', "garbage", '{"title": "no text"}', '{"text": ["a"]}', '{"text": ""}', "", '{"text": "  \\n "}']


def test_jsonl_counts_bad_lines_and_matches_text_input(tmp_path: Path, tiny_vocab: Path) -> None:
    """12 documents as 12 text files or as 12 JSON lines (+ bad ones) in one file: same records."""
    metadata = write_corpus(tmp_path / "text", n_docs=12)
    texts = [(metadata.parent / rel).read_text() for rel in metadata.read_text().split()]
    assert main(base_args(metadata, tiny_vocab, tmp_path / "out_text", split_num=100)) == 0

    jsonl = write_jsonl_corpus(tmp_path / "jsonl", texts, BAD_LINES)
    args = base_args(jsonl, tiny_vocab, tmp_path / "out_jsonl", split_num=100, input_format="jsonl")
    assert main(args) == 0
    assert shard_bytes(tmp_path / "out_jsonl") == shard_bytes(tmp_path / "out_text")
    manifest = json.loads((tmp_path / "out_jsonl" / "data_params.json").read_text())
    assert manifest["input_format"] == "jsonl" and manifest["text_key"] == "text"
    assert manifest["documents"] == {
        "read": 18,
        "used": 12,
        "skipped": {"bad_json": 2, "empty": 2, "missing_text_key": 2},
    }


def test_compressed_jsonl_with_custom_key(tmp_path: Path, tiny_vocab: Path) -> None:
    texts = ["Rain fell on the old town. " * 3 + "The river ran fast.", "A bird sat on the hive. Bees made honey."] * 3
    plain = write_jsonl_corpus(tmp_path / "plain", texts, BAD_LINES, key="body")
    packed_root = tmp_path / "packed"
    packed_root.mkdir()
    (packed_root / "part-0.jsonl.gz").write_bytes(gzip.compress((plain.parent / "part-0.jsonl").read_bytes()))
    (packed_root / "metadata.txt").write_text("part-0.jsonl.gz\n")
    results = []
    for name, metadata in (("plain", plain), ("packed", packed_root / "metadata.txt")):
        args = base_args(metadata, tiny_vocab, tmp_path / f"out_{name}", input_format="jsonl", text_key="body")
        manifest, stats = run_collecting(args)
        results.append((shard_bytes(tmp_path / f"out_{name}"), manifest["documents"]))
    assert stats["decompressed.gz"] == 1
    assert results[0] == results[1]
    # with key "body", the bad '{"text": ...}' lines lack the key; the blank line is not a document
    assert results[0][1] == {"read": 12, "used": 6, "skipped": {"bad_json": 2, "missing_text_key": 4}}


def test_input_format_flags_are_validated(tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys) -> None:
    out = tmp_path / "out"
    code = main(base_args(tiny_corpus, tiny_vocab, out, input_format="jsonl", multiple_docs_in_single_file=True))
    assert code == 2 and "--multiple_docs_in_single_file does not apply" in capsys.readouterr().err
    assert main(base_args(tiny_corpus, tiny_vocab, out, text_key="")) == 2
    assert "--text_key" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(base_args(tiny_corpus, tiny_vocab, out, input_format="xml"))
    assert exc.value.code == 2


# --- WikiExtractor <doc> blocks ---------------------------------------------------------------


def wikiextractor_file(texts: List[str], titles: List[str]) -> str:
    """WikiExtractor's layout: a <doc> tag, the title repeated on the first line, a blank line, the text."""
    blocks = [f'<doc id="{i}" url="https://en.wikipedia.org/wiki?curid={i}" title="{t}">\n{t.replace("&amp;", "&")}\n\n'
              f"{text}</doc>\n" for i, (t, text) in enumerate(zip(titles, texts))]
    return "".join(blocks)


def test_wikiextractor_blocks_match_text_files(tmp_path: Path, tiny_vocab: Path) -> None:
    """12 documents as 12 text files or as <doc> blocks of two WikiExtractor files: same records;
    the repeated title line is not part of the document, text outside blocks is counted."""
    metadata = write_corpus(tmp_path / "text", n_docs=12)
    texts = [(metadata.parent / rel).read_text() for rel in metadata.read_text().split()]
    assert main(base_args(metadata, tiny_vocab, tmp_path / "out_text", split_num=100)) == 0

    wiki = tmp_path / "wiki" / "AA"
    wiki.mkdir(parents=True)
    titles = [f"Title number {i} &amp; more" for i in range(12)]
    (wiki / "wiki_00").write_text("stray header line\n" + wikiextractor_file(texts[:5], titles[:5]))
    (wiki / "wiki_01").write_text(wikiextractor_file(texts[5:], titles[5:]))
    (tmp_path / "wiki" / "metadata.txt").write_text("AA/wiki_00\nAA/wiki_01\n")
    args = base_args(tmp_path / "wiki" / "metadata.txt", tiny_vocab, tmp_path / "out_wiki", split_num=100,
                     input_format="wikiextractor")
    manifest, _ = run_collecting(args)
    assert shard_bytes(tmp_path / "out_wiki") == shard_bytes(tmp_path / "out_text")
    assert manifest["documents"] == {"read": 12, "used": 12, "skipped": {}}
    assert manifest["wikiextractor_lines_outside_doc"] == 1


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_wikiextractor_consumer_is_chunk_invariant(chunk: int) -> None:
    """Streaming in any chunk size gives the same documents: an unclosed block ends at the next
    <doc> or at the end of the file; a title line that differs from the attribute is kept; long
    documents come out in pieces of at most max_document_chars."""
    text = (
        '<doc id="1" title="A">\nA\n\nFirst doc.\n</doc>\n'
        '<doc id="2" title="B">\nNot the title.\nSecond.\n'  # never closed
        '<doc id="3" title="C">\nC\n' + "long line of words " * 200 + "\n</doc>\n"
        "trailing junk\n"
        '<doc id="4" title="D">\nD\nLast, unclosed'
    )
    stats: Counter = Counter()
    consumer = input_formats.make_consumer(
        input_formats.ReadOptions(input_format="wikiextractor", max_document_chars=1000), stats
    )
    out: List[str] = []
    for start in range(0, len(text), chunk):
        out.extend(consumer.feed(text[start:start + chunk]))
    out.extend(consumer.feed("", final=True))
    assert out[0] == "\nFirst doc.\n" and out[1] == "Not the title.\nSecond.\n"
    assert all(len(piece) <= 1000 for piece in out[2:-1]) and "".join(out[2:-1]) == "long line of words " * 200 + "\n"
    assert out[-1] == "Last, unclosed\n" and stats["wikiextractor_lines_outside_doc"] == 1
    assert stats["documents_split.documents"] == 1


def test_wikiextractor_on_plain_text_is_one_line(tmp_path: Path, tiny_corpus: Path, tiny_vocab: Path, capsys) -> None:
    """Plain text given as WikiExtractor output is not silently dropped: no block means no document,
    and the one-line error says what to pass instead; nothing is published."""
    code = main(base_args(tiny_corpus, tiny_vocab, tmp_path / "out", input_format="wikiextractor"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no <doc ...> block found" in err[0] and "--input_format text" in err[0]
    assert not list((tmp_path / "out").glob("*.tfrecords"))


# --- a separator split across two reads (helper-15's case B) -------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _documents_fed(text: str, cuts: List[int], separator: str, limit: int) -> Tuple[List[Tuple[str, bool]], Counter]:
    """The documents _TextConsumer gives for ``text`` fed in chunks cut at ``cuts``, as (text,
    is a continuation of the previous) pairs, and its counters."""
    stats: Counter = Counter()
    options = input_formats.ReadOptions(input_format="text", text_key="text", separator=separator,
                                        max_document_chars=limit, encoding="utf-8")
    consumer = input_formats._TextConsumer(options, stats)
    out, start = [], 0
    for end in sorted(set(cuts)) + [len(text)]:
        out.extend(consumer.feed(text[start:end], final=end == len(text)))
        start = end
    return [(str(d), isinstance(d, input_formats.ContinuedPiece)) for d in out], stats


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("ab -\n", max_size=30), min_size=1, max_size=6), st.sampled_from(["---", "", "\n", "==x"]),
       st.integers(4, 25), st.lists(st.integers(0, 200), max_size=6))
def test_documents_do_not_depend_on_where_the_text_was_cut_into_reads(docs, marker, limit, cuts):
    """A document's end is its separator line wherever the reads cut the text, even inside the
    separator while the unfinished document is longer than max_document_chars (the read once cut
    a piece at the separator's own newline, and the next document became its continuation)."""
    separator = "\n" + marker
    text = separator.join(docs)
    whole, whole_stats = _documents_fed(text, [], separator, limit)
    fed, fed_stats = _documents_fed(text, [c for c in cuts if c < len(text)], separator, limit)
    assert fed == whole and fed_stats == whole_stats
    assert [d for d, continued in fed if not continued] == [part[:limit] if len(part) <= limit else d
                                                            for part, (d, _) in zip(text.split(separator), [
                                                                x for x in fed if not x[1]])]
    assert len([1 for _, continued in fed if not continued]) == len(text.split(separator))


def test_a_separator_across_the_read_boundary_of_a_long_document():
    """The reviewer's case: the separator line "\n---" starts in one read and ends in the next,
    while the unfinished document is over the limit, so a piece was cut at the separator's own
    newline and the next document read as the continuation of this one."""
    text = "0123456789\n---\nnext doc"
    fed, stats = _documents_fed(text, [12], "\n---", 11)
    assert fed == [("0123456789", False), ("\nnext doc", False)]
    assert stats["documents_split.documents"] == 0
