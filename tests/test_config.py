"""Configuration: precedence (defaults < YAML < flags), escapes, presets and every validate() rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from bert_data.tools.create import build_parser, config_from_args
from bert_data.config import Config, build_config, load_yaml_config, validate
from bert_data.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
REQUIRED = {"metadata_files": ["meta.txt"], "vocab_file": "vocab.txt"}


def from_flags(*argv: str) -> Config:
    return config_from_args(build_parser().parse_args(list(argv)))


def config_with(**changes) -> Config:
    return Config(metadata_files=("meta.txt",), vocab_file="vocab.txt", num_workers=1).replace(**changes)


# --- precedence ------------------------------------------------------------------------------


def test_defaults_when_nothing_given():
    config = from_flags("--metadata_files", "m.txt", "--vocab_file", "v.txt")
    assert config.max_seq_length == 128
    assert config.max_predictions_per_seq == 20
    assert config.dupe_factor == 10
    assert config.short_seq_prob == 0.1
    assert config.masked_lm_prob == 0.15
    assert config.do_lower_case is False
    assert config.compression == "none"
    assert config.metadata_files == ("m.txt",)
    assert config.multiple_docs_separator == "\n"


def test_yaml_overrides_defaults_and_flags_override_yaml(tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text(
        "max_seq_length: 256\nmax_predictions_per_seq: 40\ndupe_factor: 3\ndo_lower_case: true\n"
        "metadata_files: [a.txt, b.txt]\nvocab_file: yaml_vocab.txt\nname: fromyaml\n",
        encoding="utf-8",
    )
    config = from_flags(
        "--config", str(preset), "--max_seq_length", "64", "--max_predictions_per_seq", "10",
        "--no-do_lower_case", "--vocab_file", "flag_vocab.txt",
    )
    # flags win over YAML
    assert config.max_seq_length == 64
    assert config.max_predictions_per_seq == 10
    assert config.do_lower_case is False
    assert config.vocab_file == "flag_vocab.txt"
    # YAML wins over defaults
    assert config.dupe_factor == 3
    assert config.metadata_files == ("a.txt", "b.txt")
    assert config.name == "fromyaml"
    # untouched: defaults
    assert config.short_seq_prob == 0.1
    assert config.seed == 0


def test_flag_metadata_files_replace_yaml_list(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("metadata_files: [a.txt, b.txt]\nvocab_file: v.txt\n", encoding="utf-8")
    config = from_flags("--config", str(preset), "--metadata_files", "c.txt", "d.txt")
    assert config.metadata_files == ("c.txt", "d.txt")


def test_yaml_single_metadata_path_becomes_tuple(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("metadata_files: only.txt\nvocab_file: v.txt\n", encoding="utf-8")
    assert build_config({}, config_file=str(preset)).metadata_files == ("only.txt",)


def test_unknown_yaml_key_is_named(tmp_path):
    preset = tmp_path / "typo.yaml"
    preset.write_text("max_seq_lenght: 128\ndupe_factor: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="max_seq_lenght"):
        load_yaml_config(str(preset))
    with pytest.raises(ConfigError, match="max_seq_lenght"):
        build_config(REQUIRED, config_file=str(preset))


def test_yaml_missing_not_mapping_and_invalid(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_yaml_config(str(tmp_path / "absent.yaml"))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml_config(str(listing))
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml_config(str(broken))


@pytest.mark.parametrize("text, message", [
    ("max_seq_length: lots\n", "max_seq_length: must be an integer, got 'lots'"),
    ("do_lower_case: maybe\n", "do_lower_case: must be true or false, got 'maybe'"),
    ("dupe_factor: [1, 2]\n", "dupe_factor: must be an integer, got [1, 2]"),
    ("name: 5\n", "name: must be text, got 5"),
    ("spacy_model: 5\n", "spacy_model: must be text, got 5"),
    ("metadata_files: [a.txt, 3]\n", "metadata_files: must be a path or a list of paths, got ['a.txt', 3]"),
    ("masked_lm_prob: true\n", "masked_lm_prob: must be a number, got True"),
    ("name: &x examples\nseed: 1\n", "not valid YAML (anchors and aliases (& and *) are not allowed, line 1)"),
    ("- a\n- b\n", "expected a mapping of flag names to values"),
])
def test_yaml_values_are_checked_against_the_config_types(tmp_path, text, message):
    preset = tmp_path / "p.yaml"
    preset.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        build_config(REQUIRED, config_file=str(preset))
    assert str(error.value) == f"--config {preset}: {message}"


def test_yaml_that_is_not_a_small_utf8_file_is_one_line(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8 text \\(line 1\\); save it as UTF-8"):
        build_config(REQUIRED, config_file=str(preset))
    preset.write_bytes(b"#" * (2 << 20))
    with pytest.raises(ConfigError, match="more than a preset can be"):
        build_config(REQUIRED, config_file=str(preset))
    with pytest.raises(ConfigError, match="not a regular file"):
        build_config(REQUIRED, config_file="/dev/zero")


def test_flag_values_are_type_checked_too():
    with pytest.raises(ConfigError, match="--name must be text, got 5"):
        build_config(dict(REQUIRED, name=5))


@pytest.mark.parametrize(
    "preset, msl, mp",
    [("bert_base_msl128.yaml", 128, 20), ("bert_base_msl512.yaml", 512, 80)],
)
def test_presets_load(preset, msl, mp):
    config = build_config(REQUIRED, config_file=str(REPO / "configs" / preset))
    assert (config.max_seq_length, config.max_predictions_per_seq) == (msl, mp)
    assert config.do_lower_case is True
    assert config.masked_lm_prob == 0.15


def test_every_bundled_preset_loads():
    presets = sorted((REPO / "configs").glob("*.yaml"))
    assert presets
    for preset in presets:
        config = build_config(REQUIRED, config_file=str(preset))
        validate(config)


# --- separator escapes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [("\\n", "\n"), ("\\n\\n", "\n\n"), ("\\t", "\t"), ("\\r\\n", "\r\n"), ("===", "==="), ("\n", "\n")],
)
def test_multiple_docs_separator_escapes(given, expected):
    config = from_flags("--metadata_files", "m", "--vocab_file", "v", "--multiple_docs_separator", given)
    assert config.multiple_docs_separator == expected


@pytest.mark.parametrize("given, expected", [("\\n§\\n", "\n§\n"), ("\\n—DOC—\\n", "\n—DOC—\n")])
def test_multiple_docs_separator_escapes_keep_non_ascii(given, expected):
    config = from_flags("--metadata_files", "m", "--vocab_file", "v", "--multiple_docs_separator", given)
    assert config.multiple_docs_separator == expected


# --- validate(): every cross-field rule --------------------------------------------------------


def test_valid_config_passes():
    validate(config_with())


@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"metadata_files": ()}, "--metadata_files"),
        ({"vocab_file": None}, "--vocab_file"),
        ({"vocab_file": ""}, "--vocab_file"),
        ({"max_seq_length": 4, "max_predictions_per_seq": 1, "min_short_seq_length": 1}, "--max_seq_length"),
        ({"max_seq_length": 0, "max_predictions_per_seq": 1}, "--max_seq_length"),
        ({"max_predictions_per_seq": 128}, "--max_predictions_per_seq"),
        ({"max_predictions_per_seq": 129}, "--max_predictions_per_seq"),
        ({"max_predictions_per_seq": 0}, "--max_predictions_per_seq"),
        ({"masked_lm_prob": 1.5}, "--masked_lm_prob"),
        ({"masked_lm_prob": -0.1}, "--masked_lm_prob"),
        ({"short_seq_prob": 1.01}, "--short_seq_prob"),
        ({"short_seq_prob": -1.0}, "--short_seq_prob"),
        ({"min_short_seq_length": 0}, "--min_short_seq_length"),
        ({"min_short_seq_length": 126}, "--min_short_seq_length"),
        ({"dupe_factor": 0}, "--dupe_factor"),
        ({"num_output_files": 0}, "--num_output_files"),
        ({"split_num": 0}, "--split_num"),
        ({"num_workers": 0}, "--num_workers"),
        ({"num_workers": -2}, "--num_workers"),
        ({"compression": "bz2"}, "--compression"),
        ({"name": ""}, "--name"),
        ({"name": "a/b"}, "--name"),
        ({"name": "a\\b"}, "--name"),
        ({"name": ".."}, "--name"),
        ({"name": "."}, "--name"),
        ({"single_sentence_per_line": True, "spacy_model": "en_core_web_sm"}, "--single_sentence_per_line"),
        ({"multiple_docs_in_single_file": True, "multiple_docs_separator": ""}, "--multiple_docs_separator"),
        ({"max_seq_length": "128"}, "--max_seq_length"),
        ({"masked_lm_prob": True}, "--masked_lm_prob"),
        ({"overwrite": 1}, "--overwrite"),
    ],
)
def test_validate_rejects(changes, flag):
    with pytest.raises(ConfigError) as info:
        validate(config_with(**changes))
    assert flag in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"max_seq_length": 5, "max_predictions_per_seq": 4, "min_short_seq_length": 2},  # smallest legal
        {"max_predictions_per_seq": 127},
        {"masked_lm_prob": 0.0},
        {"masked_lm_prob": 1.0},
        {"short_seq_prob": 0.0},
        {"short_seq_prob": 1},  # an int is a number
        {"min_short_seq_length": 1},
        {"min_short_seq_length": 125},
        {"compression": "gzip"},
        {"name": "my.shards_v2"},
        {"single_sentence_per_line": True},
        {"spacy_model": "en_core_web_sm"},
    ],
)
def test_validate_accepts_boundaries(changes):
    validate(config_with(**changes))


def test_build_config_validates_and_ignores_none():
    config = build_config({**REQUIRED, "max_seq_length": None, "seed": 7})
    assert config.max_seq_length == 128 and config.seed == 7
    with pytest.raises(ConfigError, match="--max_predictions_per_seq"):
        build_config({**REQUIRED, "max_seq_length": 64, "max_predictions_per_seq": 64})


def test_config_is_frozen_and_json_able():
    config = config_with()
    with pytest.raises(Exception):
        config.max_seq_length = 3  # type: ignore[misc]
    data = config.to_json()
    assert data["metadata_files"] == ["meta.txt"]
    assert set(data) == {f for f in Config.__dataclass_fields__}


@pytest.mark.parametrize("flag, value", [
    ("max_seq_length", 10**9), ("dupe_factor", 10**7), ("num_output_files", 10**9), ("split_num", 10**9),
    ("num_workers", 10**6), ("buffer_size", 10**12),
])
def test_absurd_sizes_are_refused_up_front(flag, value):
    with pytest.raises(ConfigError, match=f"--{flag} {value} is more than"):
        build_config(dict(REQUIRED, **{flag: value}))
