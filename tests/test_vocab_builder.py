"""Tests of ``build_vocab`` (bert_data.vocab_builder)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bert_data.tools import vocab as vocab_builder
from bert_data.tools.create import main as create_main
from bert_data.tools.inspect import main as inspect_main
from bert_data.tokenization import FullTokenizer, case_mismatch_warning, load_vocab

from conftest import base_args

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "bert_data" / "sample_data"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build(capsys, metadata: Path, output: Path, *extra: str, size: int = 300) -> tuple:
    code = vocab_builder.main(
        ["--metadata_files", str(metadata), "--input_files_prefix", str(metadata.parent), "--output", str(output),
         "--vocab_size", str(size), *extra]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_layout_and_load_vocab(tmp_path, tiny_corpus, capsys):
    out = tmp_path / "vocab.txt"
    code, stdout, err = build(capsys, tiny_corpus, out)
    assert code == 0, err
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # newline-terminated
    tokens = lines[:-1]
    assert tokens[:5] == SPECIALS
    assert len(tokens) == len(set(tokens)) and all(t and t == t.strip() for t in tokens)
    assert 5 < len(tokens) <= 300
    vocab = load_vocab(str(out))
    assert [vocab[t] for t in SPECIALS] == [0, 1, 2, 3, 4]
    # alphabet right after the specials, then its ## forms; cased by default, as create_tfrecords
    assert "a" in vocab and "##a" in vocab and vocab["a"] < vocab["##a"]
    assert any(c.isupper() for t in tokens[5:] for c in t)
    assert case_mismatch_warning(vocab, False) is None
    assert f"wrote {out}: {len(tokens)} tokens" in stdout
    assert stdout.rstrip().endswith("--no-do_lower_case")  # the create_tfrecords flag that goes with it


def test_deterministic_across_runs_and_processes(tmp_path, tiny_corpus, capsys):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    assert build(capsys, tiny_corpus, a, size=250)[0] == 0
    assert build(capsys, tiny_corpus, b, size=250)[0] == 0
    env = dict(os.environ, PYTHONHASHSEED="12345", RAYON_NUM_THREADS="1")
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_vocab.py"), "--metadata_files", str(tiny_corpus),
         "--input_files_prefix", str(tiny_corpus.parent), "--output", str(c), "--vocab_size", "250"],
        check=True, env=env, capture_output=True,
    )
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()


def test_sample_vocab_is_reproducible(tmp_path, capsys):
    """vocab/sample_vocab_uncased.txt is exactly what the command in vocab/README.md makes."""
    shipped = REPO / "vocab" / "sample_vocab_uncased.txt"
    out = tmp_path / "sample.txt"
    code = vocab_builder.main(
        ["--metadata_files", str(SAMPLE / "metadata.txt"), "--input_files_prefix", str(SAMPLE),
         "--output", str(out), "--vocab_size", "2000", "--do_lower_case"]
    )
    assert code == 0, capsys.readouterr().err
    assert out.read_bytes() == shipped.read_bytes()
    assert len(load_vocab(str(shipped))) == 2000
    assert "sample_vocab_uncased.txt" in (REPO / "vocab" / "README.md").read_text(encoding="utf-8")


def test_built_vocab_drives_create_tfrecords(tmp_path, tiny_corpus, capsys):
    vocab = tmp_path / "vocab.txt"
    code, stdout, _ = build(capsys, tiny_corpus, vocab, "--do_lower_case")  # base_args passes --do_lower_case
    assert code == 0 and stdout.rstrip().endswith("--do_lower_case")
    tok = FullTokenizer(str(vocab), do_lower_case=True)
    assert "[UNK]" not in tok.tokenize("The cat sat on the mat.")
    out = tmp_path / "tf"
    assert create_main(base_args(tiny_corpus, vocab, out)) == 0
    capsys.readouterr()
    assert inspect_main([str(out), "--stats"]) == 0
    assert "[UNK] rate: 0.00%" in capsys.readouterr().out


def test_cased_vocab(tmp_path, tiny_corpus, capsys):
    out = tmp_path / "cased.txt"
    code, stdout, _ = build(capsys, tiny_corpus, out, "--no-do_lower_case")
    assert code == 0
    default = tmp_path / "default.txt"
    assert build(capsys, tiny_corpus, default)[0] == 0
    assert default.read_bytes() == out.read_bytes()  # cased is the default, as in create_tfrecords
    vocab = load_vocab(str(out))
    assert any(t[:1].isupper() for t in vocab if not t.startswith("["))
    assert case_mismatch_warning(vocab, False) is None
    assert "--no-do_lower_case" in stdout


def test_limit_alphabet(tmp_path, tiny_corpus, capsys):
    out = tmp_path / "v.txt"
    assert build(capsys, tiny_corpus, out, "--limit_alphabet", "10")[0] == 0
    tokens = out.read_text(encoding="utf-8").split()
    singles = [t for t in tokens[5:] if len(t) == 1]
    assert len(singles) == 10
    allowed = set(singles)
    for t in tokens[5:]:
        assert set(t.removeprefix("##")) <= allowed, t


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab_size", "5"], "--vocab_size must be larger than the 5 special tokens"),
        (["--vocab_size", "20"], "is smaller than the 5 special tokens + "),
        (["--min_frequency", "0"], "--min_frequency must be between 1 and 2,147,483,647, got 0"),
        (["--limit_alphabet", "0"], "--limit_alphabet must be between 1 and 2,147,483,647, got 0"),
    ],
)
def test_bad_flags_exit_2(tmp_path, tiny_corpus, capsys, extra, message):
    out = tmp_path / "v.txt"
    code = vocab_builder.main(
        ["--metadata_files", str(tiny_corpus), "--input_files_prefix", str(tiny_corpus.parent),
         "--output", str(out), "--vocab_size", "300", *extra]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("build_vocab: error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_io_errors_exit_2(tmp_path, tiny_corpus, capsys):
    code, _, err = build(capsys, tmp_path / "missing.txt", tmp_path / "v.txt")
    assert code == 2 and "does not exist" in err
    code, _, err = build(capsys, tiny_corpus, tmp_path / "no" / "dir" / "v.txt")
    assert code == 2 and "directory does not exist" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("\n \n", encoding="utf-8")
    (empty / "metadata.txt").write_text("blank.txt\n", encoding="utf-8")
    code, _, err = build(capsys, empty / "metadata.txt", tmp_path / "v.txt")
    assert code == 2 and "hold no text" in err
    with pytest.raises(SystemExit) as exc:
        vocab_builder.main(["--metadata_files", str(tiny_corpus)])  # --output/--vocab_size missing
    assert exc.value.code == 2


def test_case_defaults_agree_with_create_tfrecords(capsys):
    from bert_data.config import Config
    from bert_data.vocab_builder import build_vocab

    assert vocab_builder.build_parser().parse_args(["--metadata_files", "m", "--output", "o", "--vocab_size", "9"]).do_lower_case is False
    assert Config().do_lower_case is False
    assert build_vocab.__defaults__[0] is False  # do_lower_case of the library function
    with pytest.raises(SystemExit):
        vocab_builder.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "vocabulary and create_tfrecords must use the same --do_lower_case" in text
    assert "30,522" in text and "--vocab_size" in text  # what size to choose


def test_messages_count_in_the_singular(tmp_path, capsys):
    docs = tmp_path / "one"
    docs.mkdir()
    (docs / "doc.txt").write_text("The cat sat on the mat. The dog ran far away.\n", encoding="utf-8")
    (docs / "metadata.txt").write_text("doc.txt\n", encoding="utf-8")
    code, stdout, _ = build(capsys, docs / "metadata.txt", tmp_path / "v.txt", size=60)
    assert code == 0
    assert "from 1 document (0 skipped), 1 paragraph," in stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(tmp_path, tiny_corpus, capsys, monkeypatch):
    code, _, err = build(capsys, tiny_corpus, tmp_path / "a.txt")
    assert code == 0 and err == ""  # not a terminal: nothing
    for quiet, expect_bar in ((False, True), (True, False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        extra = ["--quiet"] if quiet else []
        assert vocab_builder.main(
            ["--metadata_files", str(tiny_corpus), "--input_files_prefix", str(tiny_corpus.parent),
             "--output", str(tmp_path / "b.txt"), "--vocab_size", "300", *extra]
        ) == 0
        shown = terminal.getvalue()
        assert ("pass 1/2: characters" in shown and "pass 2/2: training" in shown) == expect_bar
        if not expect_bar:
            assert shown == ""
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()


def test_jsonl_and_wikiextractor_corpora_give_the_vocab_of_their_text(tmp_path, tiny_corpus, capsys):
    """A JSON Lines dump (or WikiExtractor output) is read as create_tfrecords reads it: the vocab
    is the one of the documents' text, byte for byte, never of the JSON syntax around it."""
    import json

    texts = [(tiny_corpus.parent / rel).read_text() for rel in tiny_corpus.read_text().split()]
    code, _, err = build(capsys, tiny_corpus, tmp_path / "from_text.txt")
    assert code == 0, err
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "part.jsonl").write_text("".join(json.dumps({"body": t, "url": "http://x"}) + "\n" for t in texts))
    (dump / "metadata.txt").write_text("part.jsonl\n")
    code, out, err = build(capsys, dump / "metadata.txt", tmp_path / "from_jsonl.txt", "--input_format", "jsonl",
                           "--text_key", "body")
    assert code == 0, err
    assert (tmp_path / "from_jsonl.txt").read_bytes() == (tmp_path / "from_text.txt").read_bytes()
    assert f"from {len(texts)} documents (0 skipped)" in out
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    (wiki / "wiki_00").write_text("".join(f'<doc id="{i}" title="T{i}">\nT{i}\n{t}</doc>\n' for i, t in enumerate(texts)))
    (wiki / "metadata.txt").write_text("wiki_00\n")
    code, _, err = build(capsys, wiki / "metadata.txt", tmp_path / "from_wiki.txt", "--input_format", "wikiextractor")
    assert code == 0, err
    assert (tmp_path / "from_wiki.txt").read_bytes() == (tmp_path / "from_text.txt").read_bytes()
    code, _, err = build(capsys, dump / "metadata.txt", tmp_path / "bad.txt", "--input_format", "jsonl", "--text_key", "")
    assert code == 2 and err.strip().splitlines() == [err.strip()] and "--text_key" in err
