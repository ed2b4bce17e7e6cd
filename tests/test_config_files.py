"""A --config file as a user meets it: its numbers are read as their flags read them (one parser
each), and YAML 1.1's other spellings are refused."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from bert_data.config import FIELD_NAMES
from bert_data.errors import ConfigError
from bert_data.presets import build_config, text_parser
from bert_data.tools.create import build_parser, config_from_args, main
from conftest import base_args

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
