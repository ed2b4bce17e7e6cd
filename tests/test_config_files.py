"""A --config file as a user meets it: its numbers are read as their flags read them (one parser
each), YAML 1.1's other spellings are refused, and an error about a value the file set names the
file and the key (and, for a path not found, where relative paths resolve), never a flag the
user did not type."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from bert_data.config import FIELD_NAMES
from bert_data.errors import ConfigError
from bert_data.presets import build_config, text_parser
from bert_data.tools.create import build_parser, config_from_args, main
from conftest import base_args, write_corpus, write_vocab

REQUIRED = {"metadata_files": ["meta.txt"], "vocab_file": "vocab.txt"}


def preset_of(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def from_file(preset: Path, **flags):
    return build_config(dict(REQUIRED, **flags), config_file=str(preset))


def refusal(preset: Path, **flags) -> str:
    with pytest.raises(ConfigError) as error:
        from_file(preset, **flags)
    return str(error.value)


def error_lines(capsys, args: List[str], tool=main) -> List[str]:
    """A tool's stderr lines for a run that must stop with a user error (exit 2, no traceback)."""
    assert tool(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if " WARNING " not in line]


# --- one parser for a flag's text and a file's --------------------------------------------------


def test_every_numeric_flag_reads_text_with_the_settings_parser():
    """The flags' ``type=`` is the function a --config file's text is read with (not a copy)."""
    typed = {a.dest: a.type for a in build_parser()._actions if a.type is not None and a.dest in FIELD_NAMES}
    assert typed == {name: text_parser(name) for name in FIELD_NAMES if text_parser(name) is not None}


@pytest.mark.parametrize("key, text, extra", [
    ("group_bytes", "8M", ()),
    ("group_bytes", "512k", ()),
    ("group_bytes", "1_048_576", ()),
    ("max_document_chars", "2M", ()),
    ("max_document_chars", "1.5K", ()),
    ("buffer_size", "1e6", ("mlm_only",)),
    ("buffer_size", "1.0e+6", ("mlm_only",)),
    ("short_seq_prob", "1e-1", ()),
    ("short_seq_prob", "0", ()),
    ("masked_lm_prob", ".2", ()),
    ("seed", "12_8", ()),
    ("seed", "'42'", ()),
    ("seed", "-7", ()),
    ("min_short_seq_length", "4", ()),
])
def test_a_file_takes_what_the_flag_takes_and_reads_it_the_same(tmp_path, key, text, extra):
    preset = preset_of(tmp_path, f"{key}: {text}\n" + "".join(f"{name}: true\n" for name in extra))
    flags = ["--metadata_files", "meta.txt", "--vocab_file", "vocab.txt", f"--{key}", text.strip("'")]
    flags += [f"--{name}" for name in extra]
    by_flag = config_from_args(build_parser().parse_args(flags))
    by_file = from_file(preset)
    assert getattr(by_file, key) == getattr(by_flag, key)
    assert type(getattr(by_file, key)) is type(getattr(by_flag, key))
    assert by_file == by_flag


@pytest.mark.parametrize("text, message", [
    ("seed: 0x10\n", "seed: 0x10 is YAML 1.1's spelling of 16, which --seed does not take; write 16 (--seed takes "
                     "a decimal integer)"),
    ("seed: 0b101\n", "seed: 0b101 is YAML 1.1's spelling of 5, which --seed does not take; write 5 (--seed takes a "
                      "decimal integer)"),
    ("seed: 1:30\n", "seed: 1:30 is YAML 1.1's spelling of 90, which --seed does not take; write 90 (--seed takes a "
                     "decimal integer)"),
    ("seed: 017\n", "seed: YAML 1.1 reads 017 as 15 but --seed as 17; write the number you mean (--seed takes a "
                    "decimal integer)"),
    ("seed: 0o17\n", "seed: must be an integer, got '0o17'"),
    ("dupe_factor: 0x3\n", "dupe_factor: 0x3 is YAML 1.1's spelling of 3, which --dupe_factor does not take; write 3 "
                           "(--dupe_factor takes a decimal integer)"),
    ("group_bytes: 0x10000\n", "group_bytes: 0x10000 is YAML 1.1's spelling of 65536, which --group_bytes does not "
                               "take; write 65536 (--group_bytes takes an integer, or with K, M or G: 8M)"),
    ("group_bytes: 8X\n", "group_bytes: invalid size: '8X' (an integer, or with K, M or G: 8M)"),
    ("max_document_chars: 1.5\n", "max_document_chars: must be an integer, got 1.5"),
    ("max_document_chars: '1.5'\n", "max_document_chars: invalid size: '1.5'"),
    ("short_seq_prob: 0:30.5\n", "short_seq_prob: 0:30.5 is YAML 1.1's spelling of 30.5, which --short_seq_prob does "
                                 "not take; write 30.5 (--short_seq_prob takes a decimal number such as 0.1 or 1e-3)"),
    ("seed: 1.5\n", "seed: must be an integer, got 1.5"),
    ("min_short_seq_length: abc\n", "min_short_seq_length: must be an integer, got 'abc'"),
    ("min_short_seq_length: true\n", "min_short_seq_length: must be an integer, got True"),
    ("overlap_size: 1.5\nmlm_only: true\n", "overlap_size: must be an integer, got 1.5"),
    # helper-32: an explicit tag read the same spellings in any style, past the check
    ("seed: !!int '017'\n", "seed: YAML 1.1 reads 017 as 15 but --seed as 17; write the number you mean (--seed takes "
                            "a decimal integer)"),
    ('seed: !!int "0x10"\n', "seed: 0x10 is YAML 1.1's spelling of 16, which --seed does not take; write 16 (--seed "
                             "takes a decimal integer)"),
    ("seed: !!int |\n  017\n", "seed: YAML 1.1 reads 017 as 15 but --seed as 17; write the number you mean (--seed "
                               "takes a decimal integer)"),
    ("from_tokens: '  '\n", "from_tokens is blank: give the token cache's directory (bert-data tokenize --output_dir "
                            "DIR), or leave it out"),
])
def test_yaml_spellings_the_flag_does_not_read_so_are_refused(tmp_path, text, message):
    preset = preset_of(tmp_path, text)
    assert refusal(preset) == f"--config {preset}: {message}"


def test_optional_integers_given_by_a_caller_are_checked_too():
    """(they were a TypeError traceback in validate)"""
    for name in ("min_short_seq_length", "overlap_size"):
        with pytest.raises(ConfigError) as error:
            build_config(dict(REQUIRED, mlm_only=True, **{name: "abc"}))
        assert str(error.value) == f"--{name} must be an integer, got 'abc'"


def test_a_hexadecimal_seed_in_a_file_stops_the_cli_in_one_line(tmp_path, capsys, tiny_corpus, tiny_vocab):
    preset = preset_of(tmp_path, "seed: 0x10\n")
    lines = error_lines(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out", config=str(preset)))
    assert lines == [f"create_tfrecords: error: --config {preset}: seed: 0x10 is YAML 1.1's spelling of 16, which "
                     f"--seed does not take; write 16 (--seed takes a decimal integer)"]
    assert not (tmp_path / "out").exists()


# --- an error about the file's value names the file --------------------------------------------


@pytest.mark.parametrize("text, flags, message", [
    ("dupe_factor: 0\n", {}, "--config {p}: dupe_factor: must be at least 1, got 0"),
    ("group_bytes: 1K\n", {}, "--config {p}: group_bytes: 1024 must be between 64K and 1G (default 8M): a worker holds "
                             "~10 times it"),
    ("short_seq_prob: 2.5\n", {}, "--config {p}: short_seq_prob: 2.5 is outside [0, 1]"),
    ("compression: zip\n", {}, "--config {p}: compression: must be one of none, gzip, got 'zip'"),
    ("text_key: body\n", {}, "--config {p}: text_key: only applies with --input_format jsonl (this run reads "
                             "--input_format text); add --input_format jsonl or drop text_key (in the file)"),
    ("max_seq_length: 20\n", {"max_predictions_per_seq": 30},
     "--max_predictions_per_seq 30 must be at least 1 and smaller than --max_seq_length 20; max_seq_length is set in "
     "--config {p}"),
    ("resume: true\noverwrite: true\n", {}, "--resume and --overwrite contradict each other: continue the interrupted "
                                           "run or start over; resume and overwrite are set in --config {p}"),
    ("resume: true\n", {"overwrite": True}, "--resume and --overwrite contradict each other: continue the interrupted "
                                            "run or start over; resume is set in --config {p}"),
    ("scheduler_file: s.json\n", {}, "--scheduler_address/--scheduler_file/--dask_dashboard are for --runner dask; add "
                                     "it or drop them; scheduler_file is set in --config {p}"),
    ("multiple_docs_in_single_file: true\nmultiple_docs_separator: '\\x'\n", {},
     "--config {p}: multiple_docs_separator: '\\\\x' has a bad escape (truncated \\xXX escape); write \\n, \\t, \\\\ (a "
     "backslash) or \\uXXXX"),
])
def test_a_bad_value_from_the_file_names_the_file_and_the_key(tmp_path, text, flags, message):
    preset = preset_of(tmp_path, text)
    assert refusal(preset, **flags) == message.format(p=preset)


def test_the_same_value_as_a_flag_keeps_the_flags_wording(tmp_path):
    with pytest.raises(ConfigError) as error:
        build_config(dict(REQUIRED, max_seq_length=-5))
    assert str(error.value) == "--max_seq_length -5 is too small: it must hold [CLS] A [SEP] B [SEP] (at least 5)"
    preset = preset_of(tmp_path, "max_seq_length: 64\n")
    assert refusal(preset, max_seq_length=-5) == str(error.value)  # the flag overrides the file: the flag is named
    assert from_file(preset_of(tmp_path, "max_seq_length: -5\n", "b.yaml"), max_seq_length=64).max_seq_length == 64


def test_the_cli_names_the_file_for_its_bad_value(tmp_path, capsys, tiny_corpus, tiny_vocab):
    preset = preset_of(tmp_path, "max_seq_length: -5\n")
    args = base_args(tiny_corpus, tiny_vocab, tmp_path / "out", max_seq_length=None, config=str(preset))
    assert error_lines(capsys, args) == [
        f"create_tfrecords: error: --config {preset}: max_seq_length: -5 is too small: it must hold [CLS] A [SEP] B "
        f"[SEP] (at least 5)"]
    assert error_lines(capsys, args + ["--max_seq_length", "-5"]) == [
        "create_tfrecords: error: --max_seq_length -5 is too small: it must hold [CLS] A [SEP] B [SEP] (at least 5)"]


def test_a_run_error_about_the_files_output_dir_names_the_file(tmp_path, capsys, tiny_corpus, tiny_vocab):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    preset = preset_of(tmp_path, f"output_dir: {out}\n")
    args = base_args(tiny_corpus, tiny_vocab, out, config=str(preset), output_dir=None)
    lines = error_lines(capsys, args)
    assert len(lines) == 1 and lines[0].startswith(f"create_tfrecords: error: --config {preset}: output_dir: {out} ")
    assert error_lines(capsys, args + ["--output_dir", str(out)])[0].startswith(f"create_tfrecords: error: --output_dir {out} ")


# --- a path of the file's that is not found --------------------------------------------------


@pytest.fixture
def elsewhere(tmp_path, monkeypatch, tiny_corpus, tiny_vocab):
    """A run in tmp_path/work, with the corpus, the vocabulary and the file in tmp_path/conf: the
    file's relative paths are right from its own directory, and wrong from the working one."""
    conf = tmp_path / "conf"
    conf.mkdir()
    write_corpus(conf / "corpus", n_docs=3)
    write_vocab(conf / "vocab.txt")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return conf, work


def run_from(conf: Path, text: str, *flags: str) -> List[str]:
    preset = conf / "run.yaml"
    good = {"metadata_files": str(conf / "corpus" / "metadata.txt"), "input_files_prefix": str(conf / "corpus"),
            "vocab_file": str(conf / "vocab.txt"), "output_dir": "out", "num_workers": "1", "max_seq_length": "32",
            "max_predictions_per_seq": "5"}
    given = dict(line.split(": ", 1) for line in text.splitlines())
    preset.write_text("".join(f"{k}: {v}\n" for k, v in {**good, **given}.items()), encoding="utf-8")
    return ["--config", str(preset), "--do_lower_case", "--quiet", *flags]


@pytest.mark.parametrize("text, line", [
    ("metadata_files: corpus/metadata.txt", "metadata file corpus/metadata.txt does not exist; metadata_files is set in "
                                            "--config {p}, whose relative paths resolve against the working directory "
                                            "({cwd}), not the file's directory"),
    ("vocab_file: vocab.txt", "vocab file 'vocab.txt' does not exist; vocab_file is set in --config {p}, whose "
                              "relative paths resolve against the working directory ({cwd}), not the file's directory"),
    ("input_files_prefix: corpus", "{conf}/corpus/metadata.txt:1: document corpus/docs/doc000.txt does not exist; "
                                   "input_files_prefix is set in --config {p}, whose relative paths resolve against the "
                                   "working directory ({cwd}), not the file's directory"),
    ("validation_metadata_files: [corpus/metadata.txt]",
     "metadata file corpus/metadata.txt does not exist; validation_metadata_files is set in --config {p}, whose relative "
     "paths resolve against the working directory ({cwd}), not the file's directory"),
    ("from_tokens: tokens", "--config {p}: from_tokens: tokens: no such directory; make it with bert-data tokenize "
                            "--output_dir tokens; relative paths in --config {p} resolve against the working directory "
                            "({cwd}), not the file's directory"),
    ("vocab_file: {conf}/none.txt", "vocab file '{conf}/none.txt' does not exist; vocab_file is set in --config {p}"),
])
def test_a_path_of_the_file_not_found_says_where_relative_paths_resolve(elsewhere, capsys, text, line):
    conf, work = elsewhere
    args = run_from(conf, text.format(conf=conf))
    expected = line.format(p=conf / "run.yaml", cwd=work, conf=conf)
    assert error_lines(capsys, args) == [f"create_tfrecords: error: {expected}"]
    assert not (work / "out").exists()


def test_a_path_given_as_a_flag_keeps_its_line(elsewhere, capsys):
    conf, _ = elsewhere
    args = run_from(conf, "", "--metadata_files", "corpus/metadata.txt")
    assert error_lines(capsys, args) == ["create_tfrecords: error: metadata file corpus/metadata.txt does not exist"]


def test_tokenize_says_where_the_files_paths_resolve(elsewhere, capsys):
    from bert_data.tools.tokenize import main as tokenize

    conf, work = elsewhere
    preset = conf / "tok.yaml"
    preset.write_text("metadata_files: corpus/metadata.txt\nvocab_file: vocab.txt\n", encoding="utf-8")
    lines = error_lines(capsys, ["--config", str(preset), "--output_dir", "tokens", "--quiet"], tool=tokenize)
    assert lines == [f"bert-data tokenize: error: vocab file 'vocab.txt' does not exist; vocab_file is set in --config "
                     f"{preset}, whose relative paths resolve against the working directory ({work}), not the file's "
                     f"directory"]
    assert os.listdir(work) == []


def test_the_file_is_blamed_only_for_what_it_set_and_the_message_names(tmp_path, capsys, monkeypatch):
    """helper-32: a file's output_dir named like a word of the message ("exist") was blamed for a
    vocabulary given as a flag; a '--seed' inside a value made "seed is set in --config"; the fix
    of a file's key said "drop --KEY", a flag the user never typed."""
    (tmp_path / "meta.txt").write_text("a.txt\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    preset_of(tmp_path, "output_dir: exist\n", "out.yaml")
    preset_of(tmp_path, "seed: 5\n", "seed.yaml")
    preset_of(tmp_path, "text_key: body\n", "key.yaml")
    assert error_lines(capsys, ["--config", "out.yaml", "--metadata_files", "meta.txt", "--vocab_file", "/nope/v.txt"]) == [
        "create_tfrecords: error: vocab file '/nope/v.txt' does not exist"]
    assert error_lines(capsys, ["--config", "seed.yaml", "--metadata_files", "meta.txt", "--vocab_file", "/nope/v.txt",
                                "--name", "a--seed/b", "--print_config"]) == [
        "create_tfrecords: error: --name 'a--seed/b' must be a plain file-name prefix (no slashes)"]
    assert error_lines(capsys, ["--config", "key.yaml", "--metadata_files", "meta.txt", "--vocab_file", "/nope/v.txt",
                                "--print_config"])[0].endswith("add --input_format jsonl or drop text_key (in the file)")


def test_tokenize_takes_its_output_dir_from_the_file(tmp_path, capsys, monkeypatch):
    """helper-32: tokenize said "--output_dir is required" when the --config file set it (it
    checked the flags alone); it is required from one or the other, and never a URL."""
    from bert_data.tools.tokenize import main as tokenize

    metadata = write_corpus(tmp_path / "corpus", n_docs=4)
    vocab = write_vocab(tmp_path / "vocab.txt")
    monkeypatch.chdir(tmp_path)
    common = ["--metadata_files", str(metadata), "--input_files_prefix", str(metadata.parent), "--vocab_file", str(vocab),
              "--quiet"]
    preset_of(tmp_path, f"output_dir: {tmp_path / 'cache'}\n", "tok.yaml")
    preset_of(tmp_path, "output_dir: s3://bucket/cache\n", "url.yaml")
    assert tokenize(["--config", "tok.yaml", *common]) == 0 and (tmp_path / "cache").is_dir()
    capsys.readouterr()
    assert error_lines(capsys, common, tool=tokenize) == [
        "bert-data tokenize: error: --output_dir is required: the local (or mounted) directory the token cache goes to"]
    assert error_lines(capsys, ["--config", "url.yaml", *common], tool=tokenize) == [
        "bert-data tokenize: error: --config url.yaml: output_dir: s3://bucket/cache: a token cache goes to a local (or "
        "mounted) directory, not a URL"]
