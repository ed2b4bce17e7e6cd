"""Configuration: precedence (defaults < YAML < flags), escapes, presets and every validate() rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from bert_data.tools.create import build_parser, config_from_args
from bert_data.config import PACKING_SETTINGS, Config, most_workers, validate
from bert_data.presets import PRESETS_DIR, build_config, effective_yaml, load_yaml_config, preset_names
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
    ("- a\n- b\n", "expected a mapping of flag names to values, got list"),
    # hostile YAML: one line each, naming the file
    ("dupe_factor: 2\nseed: 1\ndupe_factor: 3\n",
     "not valid YAML (dupe_factor is given twice (lines 1 and 3); keep one)"),
    ("dupe_factor: 2\n<<: {seed: 3}\n", "not valid YAML (merge keys (<<) are not allowed, line 2)"),
    ("a: &x [1]\nb: *x\n", "not valid YAML (anchors and aliases (& and *) are not allowed, line 1)"),
    ("seed: " + "9" * 5000 + "\n",
     "not valid YAML (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits)"),
    ("seed: " + "[" * 50_000 + "\n", "not valid YAML (nested too deeply)"),
    ("seed: [1, 2\n", "not valid YAML (expected ',' or ']', but got '<stream end>', line 2)"),
    ("? [a, b]\n: 1\n", "not valid YAML (found unhashable key, line 1)"),
    ("seed: !!python/object:os.system x\n",
     "not valid YAML (could not determine a constructor for the tag 'tag:yaml.org,2002:python/object:os.system', line 1)"),
    ("name: a\n---\nname: b\n",
     "not valid YAML (expected a single document in the stream but found another document, line 2)"),
    ("max_seq_lenght: 3\n", "unknown setting 'max_seq_lenght' (did you mean max_seq_length?)"),
    ("colour: blue\n", "unknown setting 'colour' (the keys are the flag names, without --)"),
    ("1: 2\n", "unknown setting 1 (the keys are the flag names, without --)"),
    ("split_role: train\n", "split_role is set by create_tfrecords itself, not by a preset; drop it"),
    ("log_level: DEBUG\n", "log_level is a command-line flag only, not a setting; give --log_level instead"),
    ("config: other.yaml\n", "config is a command-line flag only, not a setting; give --config instead"),
    ("output_dir: 2024-01-01\n", "output_dir: must be text, got datetime.date(2024, 1, 1)"),
    ("input_files_prefix: null\n", "input_files_prefix: must be text, got None"),
    ("name: [" + ", ".join(["aaaa"] * 100) + "]\n",
     "name: must be text, got ['aaaa', 'aaaa', 'aaaa', 'aaaa', 'aaaa', 'aaaa', 'aaaa', ..."),
    ("seed: 1.5\n", "seed: must be an integer, got 1.5"),
    ("max_seq_length: 1e3\n", "max_seq_length: must be an integer, got '1e3'"),
    ("mlm_only: yes please\n", "mlm_only: must be true or false, got 'yes please'"),
    ("7\n", "expected a mapping of flag names to values, got int"),
    ("just text\n", "expected a mapping of flag names to values, got str"),
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


@pytest.mark.parametrize("preset, msl, mp", [("bert_base_msl128", 128, 20), ("bert_base_msl512", 512, 80)])
def test_presets_load_by_name_and_by_path(preset, msl, mp):
    for given in (preset, f"{preset}.yaml", str(REPO / "bert_data" / "configs" / f"{preset}.yaml")):
        config = build_config(REQUIRED, config_file=given)
        assert (config.max_seq_length, config.max_predictions_per_seq) == (msl, mp)
        assert config.do_lower_case is True
        assert config.masked_lm_prob == 0.15


def test_presets_are_package_data():
    assert preset_names() == ("bert_base_msl128", "bert_base_msl512")
    assert Path(PRESETS_DIR) == REPO / "bert_data" / "configs"
    package_data = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"configs/*.yaml"' in package_data


def test_every_bundled_preset_loads():
    presets = sorted((REPO / "bert_data" / "configs").glob("*.yaml")) + [REPO / "configs" / "sample.yaml"]
    for preset in presets:
        config = build_config(REQUIRED, config_file=str(preset))
        validate(config)


def test_an_existing_path_wins_over_a_preset_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bert_base_msl128").write_text("max_seq_length: 64\nmax_predictions_per_seq: 9\n", encoding="utf-8")
    assert build_config(REQUIRED, config_file="bert_base_msl128").max_seq_length == 64
    assert build_config(REQUIRED, config_file="bert_base_msl128.yaml").max_seq_length == 128


@pytest.mark.parametrize("given, line", [
    ("configs/bert_base_msl128.yaml", "--config 'configs/bert_base_msl128.yaml': no such file, and no preset of that "
     "name; did you mean the preset bert_base_msl128 (--config bert_base_msl128)?"),
    ("bert_large", "--config 'bert_large': no such file, and no preset of that name; give a YAML file or a preset: "
     "bert_base_msl128, bert_base_msl512"),
    ("", "--config '': no such file, and no preset of that name; give a YAML file or a preset: bert_base_msl128, "
     "bert_base_msl512"),
])
def test_an_unknown_config_names_the_presets(tmp_path, monkeypatch, given, line):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        build_config(REQUIRED, config_file=given)
    assert str(error.value) == line


# --- separator escapes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [("\\n", "\n"), ("\\n\\n", "\n\n"), ("\\t", "\t"), ("\\r\\n", "\r\n"), ("===", "==="), ("\n", "\n")],
)
def test_multiple_docs_separator_escapes(given, expected):
    config = from_flags("--metadata_files", "m", "--vocab_file", "v", "--multiple_docs_in_single_file",
                        "--multiple_docs_separator", given)
    assert config.multiple_docs_separator == expected


@pytest.mark.parametrize("given, expected", [("\\n§\\n", "\n§\n"), ("\\n—DOC—\\n", "\n—DOC—\n")])
def test_multiple_docs_separator_escapes_keep_non_ascii(given, expected):
    config = from_flags("--metadata_files", "m", "--vocab_file", "v", "--multiple_docs_in_single_file",
                        "--multiple_docs_separator", given)
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
    # negative_pool and listed_outputs are derived by the plan; the packing settings are recorded only
    # with --packing, output_format only when it is not tfrecord, from_tokens only when given
    assert set(data) == ({f for f in Config.__dataclass_fields__} - {"negative_pool", "listed_outputs", "output_format", "from_tokens"}
                         - PACKING_SETTINGS)
    assert Config(output_format="parquet").to_json()["output_format"] == "parquet"
    assert Config(from_tokens="tokens/").to_json()["from_tokens"] == "tokens/"


MLM = {"mlm_only": True}


@pytest.mark.parametrize("flag, most, extra, why", [
    ("max_seq_length", 8192, {}, "the longest BERT-family context; each batch of 4,096 rows holds L ids per feature"),
    ("max_predictions_per_seq", 8192, {"max_seq_length": 8192}, "at most --max_seq_length anyway"),
    ("dupe_factor", 1000, {}, "each pass writes the whole corpus again; BERT uses 10"),
    ("num_output_files", 100_000, {}, "the coordinator keeps one open file per shard"),
    ("split_num", 1 << 20, {}, "a group's list of files is held by one worker"),
    ("buffer_size", 100_000_000, MLM, "~40 bytes of memory per token in each worker"),
    ("overlap_size", 8192, MLM, "at most --max_seq_length anyway"),
])
def test_absurd_sizes_are_refused_up_front(flag, most, extra, why):
    """The largest documented value passes the bound; one more, or an absurd one, is refused,
    naming the flag, the bound and why."""
    for value in (most + 1, 10**12, 10**400):
        with pytest.raises(ConfigError) as error:
            build_config(dict(REQUIRED, **extra, **{flag: value}))
        shown = str(value) if value < 10**20 else repr(value)[:27] + "..."
        assert str(error.value) == f"--{flag} {shown} is more than {most:,} ({why})"
    try:
        build_config(dict(REQUIRED, **extra, **{flag: most}))
    except ConfigError as error:  # a cross-field rule may still apply at the bound, never the bound itself
        assert "is more than" not in str(error)


def test_num_workers_at_most_four_per_core(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert most_workers()[0] == 8
    assert build_config(dict(REQUIRED, num_workers=8)).num_workers == 8
    with pytest.raises(ConfigError) as error:
        build_config(dict(REQUIRED, num_workers=9))
    assert str(error.value) == (
        "--num_workers 9 is more than 8 (4 per usable core, 2 here; each worker is a process of ~250 MB)"
    )
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(512)), raising=False)
    assert most_workers() == (1024, "each worker is a process of ~250 MB")


@pytest.mark.parametrize("changes, line", [
    ({"group_bytes": (1 << 30) + 1}, "--group_bytes 1073741825 must be between 64K and 1G (default 8M): a worker "
     "holds ~10 times it"),
    ({"group_bytes": 1000}, "--group_bytes 1000 must be between 64K and 1G (default 8M): a worker holds ~10 times it"),
    ({"seed": 1 << 64}, "--seed 18446744073709551616 is not a 64-bit integer (between -2^63 and 2^64 - 1)"),
    ({"seed": -(1 << 63) - 1}, "--seed -9223372036854775809 is not a 64-bit integer (between -2^63 and 2^64 - 1)"),
    ({"name": "x" * 201}, "--name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... is longer than 200 "
     "bytes: a shard's file name (NAME-N.tfrecords.partial) must fit in 255"),
    ({"dupe_factor": -(10**400)}, "--dupe_factor must be at least 1, got -1" + "0" * 25 + "..."),
])
def test_other_bounds(changes, line):
    with pytest.raises(ConfigError) as error:
        build_config(dict(REQUIRED, **changes))
    assert str(error.value) == line


@pytest.mark.parametrize("changes", [
    {"group_bytes": 1 << 30}, {"group_bytes": 1 << 16}, {"seed": (1 << 64) - 1}, {"seed": -(1 << 63)},
    {"name": "x" * 200}, {"dupe_factor": 1000}, {"num_output_files": 100_000},
])
def test_bounds_are_inclusive(changes):
    build_config(dict(REQUIRED, **changes))


# --- YAML hostile inputs: one line each, naming the file (more in the list above) ------------------


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "~\n"])
def test_an_empty_yaml_sets_nothing(tmp_path, text):
    preset = tmp_path / "p.yaml"
    preset.write_text(text, encoding="utf-8")
    assert build_config(REQUIRED, config_file=str(preset)) == build_config(REQUIRED)


def test_special_files_as_config_are_refused_without_opening_them(tmp_path):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it for reading would block forever: it must never be opened
    for path in (fifo, tmp_path, "/dev/zero"):
        with pytest.raises(ConfigError) as error:
            build_config(REQUIRED, config_file=str(path))
        assert str(error.value) == (
            f"--config {path}: not a regular file (a directory, FIFO or device); give a YAML file"
        )


def test_an_unreadable_config_is_one_line(tmp_path):
    import os

    preset = tmp_path / "p.yaml"
    preset.write_text("seed: 1\n", encoding="utf-8")
    preset.chmod(0)
    if os.access(preset, os.R_OK):
        pytest.skip("running as a user who can read anything")
    with pytest.raises(ConfigError) as error:
        build_config(REQUIRED, config_file=str(preset))
    assert str(error.value) == f"--config {preset}: cannot read it (Permission denied)"


def test_bad_separator_escape_is_one_line():
    with pytest.raises(ConfigError) as error:
        from_flags("--metadata_files", "m", "--vocab_file", "v", "--multiple_docs_separator", "ab\\x")
    assert str(error.value) == (
        "--multiple_docs_separator 'ab\\\\x' has a bad escape (truncated \\xXX escape); write \\n, \\t, "
        "\\\\ (a backslash) or \\uXXXX"
    )


def test_unknown_override_keys_are_a_config_error():
    with pytest.raises(ConfigError, match="unknown setting colour"):
        build_config(dict(REQUIRED, colour="blue"))


@pytest.mark.parametrize("flags, words", [
    (("--text_key", "body"), "--text_key only applies with --input_format jsonl"),
    (("--text_key", "body", "--input_format", "bert"), "--text_key only applies with --input_format jsonl"),
    (("--multiple_docs_separator", "@@@"), "--multiple_docs_separator only applies with --multiple_docs_in_single_file"),
])
def test_a_flag_that_would_do_nothing_is_refused(flags, words):
    """helper-15's case K: a JSON Lines dump with --text_key but without --input_format jsonl was
    read as plain text (the raw JSON tokenized), exit 0, nothing said."""
    with pytest.raises(ConfigError) as error:
        validate(from_flags("--metadata_files", "m", "--vocab_file", "v", *flags))
    assert str(error.value).startswith(words)
    validate(from_flags("--metadata_files", "m", "--vocab_file", "v", "--text_key", "text"))  # the default: no effect, no error
    validate(from_flags("--metadata_files", "m", "--vocab_file", "v", "--text_key", "body", "--input_format", "jsonl"))


# --- --print_config ------------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\n", "\n\n", "\t==\t", "\n§\n", "\n—DOC—\n", "a\\b", "\\n", "\x00|\x7f"])
def test_printed_config_reads_back_as_the_same_config(tmp_path, separator):
    import yaml

    config = config_with(
        metadata_files=("a.txt", "b c.txt"), multiple_docs_in_single_file=True, multiple_docs_separator=separator,
        name="x: y", seed=-3,
        spacy_model="en_core_web_sm", masked_lm_prob=0.2, input_files_prefix="",
    )
    text = effective_yaml(config, "--config p.yaml")
    assert text.startswith("# create_tfrecords effective settings: defaults < --config p.yaml < flags\n")
    data = yaml.safe_load(text)
    assert "split_role" not in data and set(data) == (
        set(Config.__dataclass_fields__) - {"split_role", "negative_pool", "listed_outputs", "output_format", "from_tokens"}
        - PACKING_SETTINGS)  # (only with --packing; output_format only when not tfrecord; from_tokens only when given)
    preset = tmp_path / "printed.yaml"
    preset.write_text(text, encoding="utf-8")
    assert build_config({}, config_file=str(preset)) == config


def test_print_config_needs_no_inputs_but_checks_everything_else():
    assert build_config({}, config_file="bert_base_msl512", require_inputs=False).max_seq_length == 512
    with pytest.raises(ConfigError, match="--metadata_files is required"):
        build_config({}, config_file="bert_base_msl512")
    with pytest.raises(ConfigError, match="--config bert_base_msl512: max_predictions_per_seq: 80 must be at least 1 "
                                          "and smaller than --max_seq_length 64$"):
        build_config({"max_seq_length": 64}, config_file="bert_base_msl512", require_inputs=False)


HINT = "(e.g. utf-8, latin-1, cp1252)"


@pytest.mark.parametrize("encoding, line", [
    ("klingon", f"--input_encoding 'klingon' is not a text encoding Python knows {HINT}"),
    ("base64", "--input_encoding 'base64' is not a text encoding (it turns bytes into bytes, or text into text); "
     f"give the documents' character encoding {HINT}"),
    ("zlib", "--input_encoding 'zlib' is not a text encoding (it turns bytes into bytes, or text into text); "
     f"give the documents' character encoding {HINT}"),
    ("rot13", "--input_encoding 'rot13' is not a text encoding (it turns bytes into bytes, or text into text); "
     f"give the documents' character encoding {HINT}"),
    ("idna", "--input_encoding 'idna' cannot decode documents (it refuses bytes it does not expect instead of "
     f"replacing them); give the documents' character encoding {HINT}"),
    ("punycode", "--input_encoding 'punycode' cannot decode documents (it refuses bytes it does not expect instead "
     f"of replacing them); give the documents' character encoding {HINT}"),
])
def test_input_encodings_that_cannot_decode_documents_are_refused(encoding, line):
    """Python knows codecs that are not character encodings: each was a traceback in every worker."""
    with pytest.raises(ConfigError) as error:
        build_config(dict(REQUIRED, input_encoding=encoding))
    assert str(error.value) == line


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "cp1252", "utf-16", "utf-32", "shift_jis", "utf-8-sig"])
def test_character_encodings_are_accepted(encoding):
    assert build_config(dict(REQUIRED, input_encoding=encoding)).input_encoding == encoding


@pytest.mark.parametrize("flag, extra", [("from_tokens", []), ("scheduler_address", ["--runner", "dask"]),
                                         ("scheduler_file", ["--runner", "dask"])])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_flag_whose_default_is_none_is_refused_not_taken_as_unset(tmp_path, flag, extra, value) -> None:
    """`--from_tokens=$CACHE` with the variable unset read the text instead; an empty
    --scheduler_address started a LocalCluster here instead of reaching the cluster."""
    args = build_parser().parse_args(["--metadata_files", "m.txt", "--vocab_file", "v.txt", "--output_dir",
                                      str(tmp_path / "o"), f"--{flag}={value}", *extra])
    with pytest.raises(ConfigError, match=f"--{flag} is empty \\(an unset shell variable\\?\\)"):
        config_from_args(args, require_inputs=False)
