"""Read stage: decoding, skip reasons (binary, directory, FIFO) and multi-document files."""

from __future__ import annotations

import codecs
import os
import signal

import pytest

from bert_data.documents import (
    SKIP_BINARY,
    SKIP_NOT_REGULAR,
    decode_document_bytes,
    looks_binary,
    read_source,
    split_documents,
)
from bert_data.errors import MetadataError
from bert_data.metadata import DocumentSource, scan_metadata


def source(path) -> DocumentSource:
    return DocumentSource(str(path), "meta.txt", 1)


def read_bytes_doc(tmp_path, data: bytes, separator=None):
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    return read_source(source(path), separator)


def test_plain_utf8():
    text = "Héllo wörld — 你好. Ελληνικά.\n"
    decoded = decode_document_bytes(text.encode("utf-8"))
    assert decoded.text == text
    assert decoded.replaced_bytes == 0
    assert decoded.encoding == "utf-8"


def test_utf8_bom_is_stripped(tmp_path):
    result = read_bytes_doc(tmp_path, codecs.BOM_UTF8 + "Hello there.\n".encode("utf-8"))
    assert result.documents == ["Hello there.\n"]
    assert result.encoding == "utf-8"
    assert result.replaced_bytes == 0
    assert result.input_bytes == 3 + len("Hello there.\n")


def test_existing_replacement_character_is_not_counted():
    decoded = decode_document_bytes("a \ufffd b".encode("utf-8"))
    assert decoded.text == "a \ufffd b"
    assert decoded.replaced_bytes == 0


@pytest.mark.parametrize(
    "data, replaced",
    [
        (b"ok \xff then", 1),
        (b"ok \xff\xfe then", 2),
        (b"bad \xc3( lead byte", 1),  # the '(' survives
        (b"truncated at end \xe2\x82", 2),  # one incomplete 3-byte sequence: 2 bytes
        (b"ok \xff\xfe then \xc3( end \xe2\x82", 5),
        (b"\xed\xa0\x80 surrogate", 3),  # UTF-8 encoded surrogate: 3 invalid bytes
        (b"\xc0\xaf overlong", 2),
    ],
)
def test_invalid_utf8_replaced_and_counted_exactly(tmp_path, data, replaced):
    decoded = decode_document_bytes(data)
    assert decoded.replaced_bytes == replaced
    assert decoded.text == data.decode("utf-8", errors="replace")
    assert decoded.encoding == "utf-8"
    result = read_bytes_doc(tmp_path, data)
    assert result.replaced_bytes == replaced
    assert result.skip_reason is None


def test_replacement_counter_resets_between_documents():
    assert decode_document_bytes(b"\xff\xff\xff").replaced_bytes == 3
    assert decode_document_bytes(b"\xff").replaced_bytes == 1
    assert decode_document_bytes(b"clean").replaced_bytes == 0


@pytest.mark.parametrize("codec, encoding", [("utf-16-le", "utf-16"), ("utf-16-be", "utf-16")])
def test_utf16_with_bom_is_decoded(tmp_path, codec, encoding):
    text = "Hello there. Ünïcödé 你好.\n\nSecond paragraph.\n"
    bom = codecs.BOM_UTF16_LE if codec.endswith("le") else codecs.BOM_UTF16_BE
    data = bom + text.encode(codec)
    assert b"\x00" in data  # would look binary without BOM detection
    decoded = decode_document_bytes(data)
    assert decoded.text == text
    assert decoded.encoding == encoding
    assert decoded.replaced_bytes == 0
    result = read_bytes_doc(tmp_path, data)
    assert result.documents == [text]
    assert result.encoding == encoding
    assert result.skip_reason is None


def test_utf32_with_bom_is_decoded():
    text = "Hello there.\n"
    decoded = decode_document_bytes(codecs.BOM_UTF32_LE + text.encode("utf-32-le"))
    assert decoded.text == text and decoded.encoding == "utf-32"


def test_binary_is_skipped(tmp_path):
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    assert looks_binary(data)
    assert decode_document_bytes(data) is None
    result = read_bytes_doc(tmp_path, data)
    assert result.skip_reason == SKIP_BINARY
    assert result.documents == []
    assert result.input_bytes == len(data)


def test_nul_after_sniff_window_is_not_binary():
    data = b"a" * 9000 + b"\x00"
    assert not looks_binary(data)
    assert decode_document_bytes(data) is not None
    assert looks_binary(b"text\x00more")


def test_directory_is_skipped_not_a_regular_file(tmp_path):
    directory = tmp_path / "adir"
    directory.mkdir()
    result = read_source(source(directory), None)
    assert result.skip_reason == SKIP_NOT_REGULAR
    assert result.documents == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_is_skipped_without_hanging(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def on_alarm(signum, frame):
        raise TimeoutError("reading a FIFO blocked")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    try:
        result = read_source(source(fifo), None)
        meta = tmp_path / "meta.txt"
        meta.write_text("pipe\n", encoding="utf-8")
        summary = scan_metadata([str(meta)], str(tmp_path))  # validation pass must not open it either
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert result.skip_reason == SKIP_NOT_REGULAR
    assert result.documents == []
    assert summary.entries == 1 and summary.total_bytes == 0


def test_missing_document_raises_metadata_error_with_location(tmp_path):
    with pytest.raises(MetadataError, match="meta.txt:1"):
        read_source(source(tmp_path / "gone.txt"), None)


def test_multi_document_split(tmp_path):
    data = "doc one line.\n@@\ndoc two.\nstill two.\n@@\n\n@@\ndoc four.".encode("utf-8")
    result = read_bytes_doc(tmp_path, data, separator="\n@@\n")
    assert result.documents == ["doc one line.", "doc two.\nstill two.", "", "doc four."]
    single = read_bytes_doc(tmp_path, data, separator=None)
    assert single.documents == [data.decode("utf-8")]


def test_split_documents():
    assert split_documents("a\nb\nc", "\n") == ["a", "b", "c"]
    assert split_documents("a\n\nb", "\n\n") == ["a", "b"]
    assert split_documents("abc", None) == ["abc"]
    assert split_documents("", "\n") == [""]


def test_multi_document_utf16_split(tmp_path):
    text = "first doc\nsecond doc\nthird doc"
    result = read_bytes_doc(tmp_path, codecs.BOM_UTF16_LE + text.encode("utf-16-le"), separator="\n")
    assert result.documents == ["first doc", "second doc", "third doc"]
    assert result.encoding == "utf-16"


def test_unreadable_document_raises_metadata_error(tmp_path, monkeypatch):
    import bert_data.documents as documents

    path = tmp_path / "secret.txt"
    path.write_text("x", encoding="utf-8")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(documents, "open", denied, raising=False)
    with pytest.raises(MetadataError, match="meta.txt:1") as info:
        read_source(source(path), None)
    assert "Permission denied" in str(info.value)


@pytest.mark.parametrize("declared, order", [
    ("utf-16", "le"), ("utf-16", "be"), ("utf-32", "le"), ("utf-32", "be"), ("utf_16", "be"),
    ("utf-16-le", "le"), ("utf-16-be", "be"),
])
def test_declared_utf16_32_without_bom_is_text_in_its_own_byte_order(tmp_path, declared, order):
    """--input_encoding utf-16/utf-32 on files without a BOM: NUL bytes are text there, not
    binary, and the byte order is the file's (a name with -le/-be is obeyed as given)."""
    from collections import Counter

    from bert_data.documents import ReadOptions, iter_documents
    from bert_data.metadata import WorkItem

    family = "utf-32" if declared.startswith("utf-32") else "utf-16"
    text = "Hello there. Ünïcödé 你好.\n\nSecond paragraph.\n"
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode(f"{family}-{order}"))
    stats: Counter = Counter()
    documents = list(iter_documents([WorkItem(source(path))], ReadOptions(encoding=declared), stats))
    assert documents == [text] and stats["replaced_bytes"] == 0
    assert stats[f"decoded_as.{family}-{order}"] == 1 and not stats["skipped.binary"]


@pytest.mark.parametrize("chunk", [7, 300, 1 << 20])
def test_bert_layout_long_lines_and_documents_come_out_in_bounded_pieces(chunk):
    """--input_format bert: a book-length document or a line of megabytes without a newline is
    emitted in pieces of at most max_document_chars, whatever the read chunk size, and the
    blank line still ends the document."""
    from collections import Counter

    from bert_data import input_formats

    stats: Counter = Counter()
    consumer = input_formats.make_consumer(input_formats.ReadOptions(input_format="bert", max_document_chars=1000), stats)
    text = "short line\n" + "word " * 5000 + "\n" + "a line.\n" * 400 + " \t\r\nnext doc\n"
    out = []
    for start in range(0, len(text), chunk):
        out.extend(consumer.feed(text[start:start + chunk]))
    out.extend(consumer.feed("", final=True))
    assert out[-1] == "next doc\n" and max(len(piece) for piece in out) <= 1000
    assert "".join(out[:-1]).split() == ("short line " + "word " * 5000 + "a line. " * 400).split()
    assert stats["documents_split.documents"] == 1
