"""The one frozen configuration object.

Built from (lowest to highest precedence) the dataclass defaults, a YAML preset given with
``--config`` and explicit command-line flags. Cross-field rules are checked once, up front,
by :func:`validate`, whose messages name the flag and the fix. Library code receives a
:class:`Config` explicitly and never reads argparse state.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import ConfigError

COMPRESSIONS = ("none", "gzip")


@dataclass(frozen=True)
class Config:
    # --- inputs -------------------------------------------------------------------------
    metadata_files: Tuple[str, ...] = ()
    input_files_prefix: str = ""
    multiple_docs_in_single_file: bool = False
    multiple_docs_separator: str = "\n"
    single_sentence_per_line: bool = False
    spacy_model: Optional[str] = None
    # --- tokenization -------------------------------------------------------------------
    vocab_file: Optional[str] = None
    do_lower_case: bool = False
    # --- instances ----------------------------------------------------------------------
    max_seq_length: int = 128
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    min_short_seq_length: int = 2
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_whole_word: bool = False
    seed: int = 0
    split_num: int = 1000
    # --- output -------------------------------------------------------------------------
    output_dir: str = "./tfrecords/"
    num_output_files: int = 10
    name: str = "examples"
    compression: str = "none"
    overwrite: bool = False
    # --- execution ----------------------------------------------------------------------
    num_workers: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))

    def to_json(self) -> Dict[str, Any]:
        """Every setting, JSON-able (tuples become lists)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)


FIELD_NAMES = tuple(f.name for f in fields(Config))


def _coerce(name: str, value: Any) -> Any:
    """Normalise a value from YAML or flags to the dataclass field's type."""
    if name == "metadata_files":
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"--metadata_files must be a path or a list of paths, got {value!r}")
        return tuple(str(v) for v in value)
    if name == "multiple_docs_separator" and isinstance(value, str):
        # Shell users write '\n' literally; honour the usual escapes.
        return value.encode("utf-8").decode("unicode_escape") if "\\" in value else value
    return value


def load_yaml_config(path: str) -> Dict[str, Any]:
    """Read a YAML preset; unknown keys are an error naming the key (catches typos early)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    unknown = sorted(set(data) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"--config {path}: unknown setting(s) {', '.join(unknown)}")
    return data


def build_config(
    overrides: Mapping[str, Any], config_file: Optional[str] = None, base: Optional[Config] = None
) -> Config:
    """defaults < YAML preset < explicit overrides (entries whose value is None are ignored)."""
    values: Dict[str, Any] = {}
    if config_file:
        values.update(load_yaml_config(config_file))
    values.update({k: v for k, v in overrides.items() if v is not None})
    values = {k: _coerce(k, v) for k, v in values.items()}
    config = (base or Config()).replace(**values)
    validate(config)
    return config


def _check_type(config: Config) -> None:
    for f in fields(Config):
        value = getattr(config, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"--{f.name} must be true or false, got {value!r}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"--{f.name} must be an integer, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"--{f.name} must be a number, got {value!r}")


def validate(config: Config) -> None:
    """Reject impossible or contradictory settings before any work starts."""
    _check_type(config)
    if not config.metadata_files:
        raise ConfigError("--metadata_files is required: give one or more metadata files listing the documents")
    if not config.vocab_file:
        raise ConfigError("--vocab_file is required: the WordPiece vocab.txt the model will use")
    if config.max_seq_length < 5:
        raise ConfigError(
            f"--max_seq_length {config.max_seq_length} is too small: it must hold [CLS] A [SEP] B [SEP] (at least 5)"
        )
    if not 1 <= config.max_predictions_per_seq < config.max_seq_length:
        raise ConfigError(
            f"--max_predictions_per_seq {config.max_predictions_per_seq} must be at least 1 and smaller than "
            f"--max_seq_length {config.max_seq_length}"
        )
    for name in ("short_seq_prob", "masked_lm_prob"):
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"--{name} {value} is outside [0, 1]")
    max_num_tokens = config.max_seq_length - 3
    if not 1 <= config.min_short_seq_length <= max_num_tokens:
        raise ConfigError(
            f"--min_short_seq_length {config.min_short_seq_length} must be between 1 and --max_seq_length - 3 "
            f"({max_num_tokens})"
        )
    for name in ("dupe_factor", "num_output_files", "split_num", "num_workers"):
        if getattr(config, name) < 1:
            raise ConfigError(f"--{name} must be at least 1, got {getattr(config, name)}")
    if config.compression not in COMPRESSIONS:
        raise ConfigError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got {config.compression!r}")
    if not config.name or any(c in config.name for c in "/\\\0") or config.name in (".", ".."):
        raise ConfigError(f"--name {config.name!r} must be a plain file-name prefix (no slashes)")
    if config.multiple_docs_in_single_file and config.multiple_docs_separator == "":
        raise ConfigError("--multiple_docs_separator must not be empty with --multiple_docs_in_single_file")
    if config.single_sentence_per_line and config.spacy_model:
        raise ConfigError(
            "--single_sentence_per_line and --spacy_model contradict each other: lines are sentences, so no "
            "spaCy model is used; drop one of them"
        )
