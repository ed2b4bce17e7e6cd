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
    group_bytes: int = 8 << 20  # a group's text at most (bytes of its files; larger files span several groups)
    max_document_chars: int = 1 << 20  # longer documents are cut into consecutive pieces at line breaks
    # --- output -------------------------------------------------------------------------
    output_dir: str = "./tfrecords/"
    num_output_files: int = 10
    name: str = "examples"
    compression: str = "none"
    overwrite: bool = False
    resume: bool = False
    # --- train/validation split (documents are split before any instance is made) -----------
    validation_fraction: float = 0.0
    validation_metadata_files: Tuple[str, ...] = ()
    split_role: str = ""  # set internally: "train" or "validation" for each half of a split run
    # --- execution ----------------------------------------------------------------------
    num_workers: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    # --- input formats ---
    input_format: str = "text"  # "text": a file is a document; "jsonl": one JSON object per line is one
    text_key: str = "text"  # jsonl: the key holding a document's text
    input_encoding: str = "utf-8"  # documents' encoding when not UTF-8 (UTF-16/32 with a BOM are detected anyway)
    # --- training objective (MLM-only / SOP) ---
    mlm_only: bool = False  # windows of [CLS] ... [SEP], masked-LM features only (no segment_ids / NSP label)
    sentence_order_prediction: bool = False  # ALBERT SOP: next_sentence_labels 1 = A and B swapped
    disable_masking: bool = False  # --mlm_only: store unmasked ids (input_ids, input_mask); mask in the reader
    allow_cross_document_examples: bool = True  # --mlm_only: windows may span documents (never groups)
    document_separator_token: str = "[SEP]"  # --mlm_only: vocabulary token put between documents
    overlap_size: int = 0  # --mlm_only: tokens shared by consecutive windows
    buffer_size: int = 1_000_000  # --mlm_only: tokens of windows assembled and masked at once (memory bound)
    # --- runner ---
    runner: str = "local"  # "local": process pool on this machine; "beam": an Apache Beam pipeline (docs/beam.md)

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

# Settings that do not change a single output byte: a resumed run may differ in these.
NON_OUTPUT_SETTINGS = frozenset({"num_workers", "overwrite", "resume", "output_dir", "runner", "beam_options"})


def output_settings(config: "Config") -> Dict[str, Any]:
    """The settings that determine the output bytes (recorded for --resume checks)."""
    return {k: v for k, v in config.to_json().items() if k not in NON_OUTPUT_SETTINGS}


def _coerce(name: str, value: Any) -> Any:
    """Normalise a value from YAML or flags to the dataclass field's type."""
    if name in ("metadata_files", "validation_metadata_files"):
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"--{name} must be a path or a list of paths, got {value!r}")
        return tuple(value)
    if name == "multiple_docs_separator" and isinstance(value, str):
        # Shell users write '\n' literally; honour the usual escapes.
        return value.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in value else value
    return value


MAX_CONFIG_BYTES = 1 << 20  # a preset is a few lines; a larger file is not one


def _read_config_text(path: str) -> str:
    """The preset's text: a regular file (never a FIFO or device: they could block or never end)
    of at most ``MAX_CONFIG_BYTES``, in UTF-8."""
    import stat as stat_module

    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    if not stat_module.S_ISREG(info.st_mode):
        raise ConfigError(f"--config {path}: not a regular file (a directory, FIFO or device); give a YAML file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config {path}: {info.st_size} bytes, more than a preset can be ({MAX_CONFIG_BYTES})")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"--config {path}: not UTF-8 text (line {line}); save it as UTF-8") from None


def _no_alias_loader():
    """yaml.SafeLoader refusing anchors and aliases: a preset never needs them, and they make
    a few bytes expand to gigabytes (the billion laughs)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # type: ignore[override]
            if self.check_event(yaml.AliasEvent) or getattr(self.peek_event(), "anchor", None):
                raise yaml.YAMLError(f"anchors and aliases (& and *) are not allowed, line {self.peek_event().start_mark.line + 1}")
            return super().compose_node(parent, index)

    return Loader


def load_yaml_config(path: str) -> Dict[str, Any]:
    """Read a YAML preset; unknown keys and values of the wrong type are errors naming the key
    and the file (catches typos early)."""
    import yaml

    text = _read_config_text(path)
    try:
        data = yaml.load(text, Loader=_no_alias_loader()) or {}  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    unknown = sorted(str(k) for k in set(data) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"--config {path}: unknown setting(s) {', '.join(unknown)}")
    for key, value in data.items():
        problem = value_problem(key, value)
        if problem:
            raise ConfigError(f"--config {path}: {key}: {problem}")
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


_OPTIONAL_TEXT = frozenset({"spacy_model", "vocab_file"})  # None or text
_PATH_LISTS = frozenset({"metadata_files", "validation_metadata_files"})


def value_problem(name: str, value: Any) -> str:
    """What is wrong with ``value`` for setting ``name`` (its dataclass field's type), or ""."""
    f = Config.__dataclass_fields__[name]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    if name in _PATH_LISTS:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v for v in items):
            return f"must be a path or a list of paths, got {value!r}"
    elif name in _OPTIONAL_TEXT:
        if value is not None and not isinstance(value, str):
            return f"must be text, got {value!r}"
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            return f"must be true or false, got {value!r}"
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
    elif isinstance(default, str) and not isinstance(value, str):
        return f"must be text, got {value!r}"
    return ""


def _check_type(config: Config) -> None:
    for f in fields(Config):
        problem = value_problem(f.name, getattr(config, f.name))
        if problem:
            raise ConfigError(f"--{f.name} {problem}")


# Absurd sizes are refused up front, not run until memory or disk runs out: (flag, most, why).
UPPER_BOUNDS = (
    ("max_seq_length", 1 << 16, "each instance is this many ids, times 4 bytes, per feature"),
    ("max_predictions_per_seq", 1 << 16, "every instance stores this many positions"),
    ("dupe_factor", 10_000, "each pass writes the whole corpus again"),
    ("num_output_files", 1 << 20, "one open file per shard"),
    ("split_num", 1 << 24, "a group is held in one worker's memory"),
    ("num_workers", 4096, "one process each, ~250 MB of memory each"),
    ("buffer_size", 1 << 31, "window tokens held in memory at once"),
    ("overlap_size", 1 << 16, "at most --max_seq_length anyway"),
)


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
    if not 1 << 16 <= config.group_bytes <= 1 << 34:
        raise ConfigError(f"--group_bytes {config.group_bytes} must be between 64K and 16G (default 8M)")
    if not 1000 <= config.max_document_chars <= 1 << 34:
        raise ConfigError(
            f"--max_document_chars {config.max_document_chars} must be between 1000 and 16G (default 1M)"
        )
    for name in ("dupe_factor", "num_output_files", "split_num", "num_workers"):
        if getattr(config, name) < 1:
            raise ConfigError(f"--{name} must be at least 1, got {getattr(config, name)}")
    for name, most, why in UPPER_BOUNDS:
        if getattr(config, name) > most:
            raise ConfigError(f"--{name} {getattr(config, name)} is more than {most:,} ({why})")
    if config.compression not in COMPRESSIONS:
        raise ConfigError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got {config.compression!r}")
    if not config.name or any(c in config.name for c in "/\\\0") or config.name in (".", ".."):
        raise ConfigError(f"--name {config.name!r} must be a plain file-name prefix (no slashes)")
    if config.multiple_docs_in_single_file and config.multiple_docs_separator == "":
        raise ConfigError("--multiple_docs_separator must not be empty with --multiple_docs_in_single_file")
    if not 0.0 <= config.validation_fraction < 1.0:
        raise ConfigError(f"--validation_fraction {config.validation_fraction} must be in (0, 1) (0 = no split)")
    if config.validation_fraction and config.validation_metadata_files:
        raise ConfigError(
            "--validation_fraction and --validation_metadata_files contradict each other: split the given "
            "documents by fraction, or name the validation documents, not both"
        )
    if config.split_role not in ("", "train", "validation"):
        raise ConfigError(f"split_role must be train or validation, got {config.split_role!r}")
    if config.resume and config.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other: continue the interrupted run or start over")
    if config.single_sentence_per_line and config.spacy_model:
        raise ConfigError(
            "--single_sentence_per_line and --spacy_model contradict each other: lines are sentences, so no "
            "spaCy model is used; drop one of them"
        )
    _validate_inputs(config)
    _validate_objective(config)
    _validate_runner(config)


def _validate_inputs(config: Config) -> None:
    """--input_format / --text_key rules."""
    from .documents import INPUT_FORMATS  # the input stage owns its formats (lazy: config stays a leaf)

    if config.input_format not in INPUT_FORMATS:
        raise ConfigError(f"--input_format must be one of {', '.join(INPUT_FORMATS)}, got {config.input_format!r}")
    import codecs

    try:
        codecs.lookup(config.input_encoding)
    except (LookupError, TypeError):
        raise ConfigError(
            f"--input_encoding {config.input_encoding!r} is not a text encoding Python knows (e.g. utf-8, latin-1, cp1252)"
        ) from None
    if not isinstance(config.text_key, str) or not config.text_key:
        raise ConfigError(f"--text_key must be a non-empty JSON key, got {config.text_key!r}")
    if config.input_format == "jsonl" and config.multiple_docs_in_single_file:
        raise ConfigError(
            "--multiple_docs_in_single_file does not apply to --input_format jsonl: every JSON line is already "
            "one document; drop --multiple_docs_in_single_file"
        )


_MLM_ONLY_SETTINGS = ("allow_cross_document_examples", "document_separator_token", "overlap_size", "buffer_size")


def _validate_objective(config: Config) -> None:
    """--mlm_only / --sentence_order_prediction / --disable_masking and the MLM-only window flags."""
    if config.mlm_only and config.sentence_order_prediction:
        raise ConfigError(
            "--sentence_order_prediction and --mlm_only contradict each other: MLM-only records have no sentence "
            "pair to order; drop one of them"
        )
    if config.disable_masking and not config.mlm_only:
        raise ConfigError(
            "--disable_masking needs --mlm_only: only MLM-only records can be stored unmasked (mask them in the "
            "reader with bert_data.pretraining_dataset(..., dynamic_masking=True))"
        )
    if config.disable_masking and config.mask_whole_word:
        raise ConfigError(
            "--mask_whole_word has no effect with --disable_masking (nothing is masked when writing): drop it and "
            "pass mask_whole_word=True to bert_data.pretraining_dataset(..., dynamic_masking=True) instead"
        )
    defaults = Config.__dataclass_fields__
    if not config.mlm_only:
        for name in _MLM_ONLY_SETTINGS:
            if getattr(config, name) != defaults[name].default:
                raise ConfigError(f"--{name} only applies with --mlm_only (create_tfrecords_mlm_only); drop it")
        return
    if not 0 <= config.overlap_size < config.max_seq_length - 2:
        raise ConfigError(
            f"--overlap_size {config.overlap_size} must be at least 0 and smaller than --max_seq_length - 2 "
            f"({config.max_seq_length - 2}), the tokens a window holds"
        )
    if config.buffer_size < config.max_seq_length:
        raise ConfigError(
            f"--buffer_size {config.buffer_size} must be at least --max_seq_length {config.max_seq_length}: it is "
            "the number of window tokens assembled and masked at once"
        )
    token = config.document_separator_token
    if not isinstance(token, str) or not token or token != token.strip() or any(c.isspace() for c in token):
        raise ConfigError(f"--document_separator_token must be one vocabulary token without spaces, got {token!r}")
    if config.allow_cross_document_examples:
        if token in ("[MASK]", "[PAD]", "[CLS]"):
            raise ConfigError(
                f"--document_separator_token {token} would be confused with the model's own {token}; use [SEP] or "
                "an unused vocabulary token such as [unused0]"
            )
        # that the token is in the vocabulary is a start-up check (bert_data.runners.startup)
    if config.disable_masking and config.dupe_factor > 1 and config.short_seq_prob == 0:
        import logging

        logging.getLogger("bert_data").warning(
            "--disable_masking with --dupe_factor %d writes the same unmasked windows %d times (masks are drawn "
            "in the reader); --dupe_factor 1 is usually what you want",
            config.dupe_factor,
            config.dupe_factor,
        )


RUNNERS = ("local", "beam")


def _validate_runner(config: Config) -> None:
    """--runner rules (the runners live in bert_data.runners)."""
    if config.runner not in RUNNERS:
        raise ConfigError(f"--runner must be one of {', '.join(RUNNERS)}, got {config.runner!r}")
    if config.runner == "beam" and config.resume:
        raise ConfigError(
            "--resume is for the local runner; with --runner beam re-run the job (its output is deterministic)"
        )
    if config.runner == "beam" and (config.validation_fraction or config.validation_metadata_files):
        raise ConfigError(
            "--validation_fraction/--validation_metadata_files are for the local runner; with --runner beam, "
            "split first with split_metadata and run once per metadata file"
        )
