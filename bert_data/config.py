"""The one frozen configuration object.

Built from (lowest to highest precedence) the dataclass defaults, a YAML preset given with
``--config`` and explicit command-line flags, by :func:`bert_data.presets.build_config` (the
YAML side lives there; this module does not import it). Cross-field rules are checked once, up
front, by :func:`validate`, whose messages name the flag and the fix. Library code receives a
:class:`Config` explicitly and never reads argparse state.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Tuple

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
    min_short_seq_length: Optional[int] = None  # None: 2, or with --mlm_only 2 + overlap_size (the Model Zoo's)
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
    output_format: str = "tfrecord"  # "parquet" / "mds": unpadded rows for PyTorch (format.containers, docs/recipes.md)
    overwrite: bool = False
    resume: bool = False
    # --- train/validation split (documents are split before any instance is made) -----------
    validation_fraction: float = 0.0
    validation_metadata_files: Tuple[str, ...] = ()
    split_role: str = ""  # set internally: "train" or "validation" for each half of a split run
    # set internally by the plan (runners.plan.plan_run): the NSP negative pool, bert_data.negatives.encode_pool
    negative_pool: str = field(default="", repr=False)
    # set internally by the plan: listed documents that are files of --output_dir (never removed by --overwrite)
    listed_outputs: Tuple[str, ...] = field(default=(), repr=False)
    # --- execution ----------------------------------------------------------------------
    num_workers: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    # --- input formats ---
    input_format: str = "text"  # "text": a file is a document; "jsonl": one JSON object per line is one
    text_key: str = "text"  # jsonl: the key holding a document's text
    input_encoding: str = "utf-8"  # documents' encoding when not UTF-8 (UTF-16/32 with a BOM are detected anyway)
    # --- training objective (MLM-only / SOP) ---
    mlm_only: bool = False  # windows of [CLS] ... [SEP], masked-LM features only (no segment_ids / NSP label)
    sentence_order_prediction: bool = False  # ALBERT SOP: next_sentence_labels 1 = A and B swapped
    disable_masking: bool = False  # --mlm_only: store unmasked windows; mask in the reader
    unmasked_format: str = "tokens"  # --disable_masking: "tokens" (the Model Zoo's SequenceExample of WordPieces) or "ids"
    allow_cross_document_examples: bool = False  # --mlm_only: windows may span documents (never groups); Model Zoo default
    document_separator_token: str = "[SEP]"  # --mlm_only: vocabulary token put between documents
    overlap_size: Optional[int] = None  # --mlm_only: tokens shared by consecutive windows; None: max_seq_length / 4
    buffer_size: int = 1_000_000  # --mlm_only: tokens of windows assembled and masked at once (memory bound)
    # --- packing (docs/packing.md) ---
    packing: bool = False  # several instances per row (Habana's MLPerf packed layout), padding-free
    max_sequences_per_pack: int = 3  # --packing: instances per row at most (3 in every MLPerf layout)
    # --- runner ---
    runner: str = "local"  # "local": process pool on this machine; "beam": an Apache Beam pipeline (docs/beam.md); "dask"
    scheduler_address: str = ""  # --runner dask: tcp://HOST:PORT of a running scheduler ("" and no file: a LocalCluster)
    scheduler_file: str = ""  # --runner dask: a scheduler file (dask-jobqueue, `dask scheduler --scheduler-file`)
    dask_dashboard: bool = False  # --runner dask: serve the LocalCluster's dashboard (its link is logged)
    # --- token cache (bert_data.token_cache) ---
    from_tokens: str = ""  # a `bert-data tokenize` directory: units read from it, not read/segmented/tokenized

    def __post_init__(self) -> None:
        """Defaults that depend on other settings, as the Model Zoo resolves them: with --mlm_only,
        ``overlap_size`` is max_seq_length / 4 and ``min_short_seq_length`` 2 + overlap_size;
        otherwise 0 and 2. Resolved when the Config is made, so --print_config and the manifest
        show the numbers used."""
        if self.overlap_size is None:
            overlap = int(self.max_seq_length / 4) if self.mlm_only and isinstance(self.max_seq_length, int) else 0
            object.__setattr__(self, "overlap_size", overlap)
        if self.min_short_seq_length is None:
            shortest = 2
            if self.mlm_only and isinstance(self.overlap_size, int) and isinstance(self.max_seq_length, int):
                shortest = max(2, min(2 + self.overlap_size, self.max_seq_length - 3))  # (a bad overlap is named later)
            object.__setattr__(self, "min_short_seq_length", shortest)

    def to_json(self) -> Dict[str, Any]:
        """Every setting, JSON-able (tuples become lists); not what the plan derives
        (:data:`DERIVED_SETTINGS`)."""
        out = {}
        for f in fields(self):
            if f.name in DERIVED_SETTINGS or (f.name in PACKING_SETTINGS and not self.packing):
                continue
            if f.name == "output_format" and self.output_format == LEFT_OUT_AT_DEFAULT["output_format"]:
                continue  # as for packing: TFRecord runs' settings and manifests stay what they were
            if f.name == "from_tokens" and not self.from_tokens:
                continue  # so do the settings and manifests of runs from the text
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    @property
    def lines_are_sentences(self) -> bool:
        """Every non-empty line is one sentence (spaCy is not used): ``--single_sentence_per_line``,
        or ``--input_format bert``, whose layout is one sentence per line by definition."""
        return self.single_sentence_per_line or self.input_format == "bert"


FIELD_NAMES = tuple(f.name for f in fields(Config))

# Recorded (manifest, --resume, --print_config) only with --packing, so that the settings and
# manifests of unpacked runs stay exactly what they were before packing existed.
PACKING_SETTINGS = frozenset({"packing", "max_sequences_per_pack"})
# Settings a run's settings (and its manifest) leave out at their defaults, so runs that predate
# them keep their bytes. A resume compares them as these defaults where one side lacks them (a
# finished packed or Parquet run is not "continued" by an unpacked TFRecord command).
LEFT_OUT_AT_DEFAULT = {"packing": False, "output_format": "tfrecord"}
MOST_SEQUENCES_PER_PACK = 64

# Fields the plan derives from the inputs, the sizes and the seed, never set by a user: not in
# to_json (so neither in the manifest, nor compared by --resume: what they derive from is), not in
# --print_config, refused in a --config preset (presets.INTERNAL_SETTINGS).
DERIVED_SETTINGS = frozenset({"negative_pool", "listed_outputs"})

# Settings that do not change a single output byte: a resumed run may differ in these.
NON_OUTPUT_SETTINGS = frozenset({"num_workers", "overwrite", "resume", "output_dir", "runner", "beam_options",
                                 "scheduler_address", "scheduler_file", "dask_dashboard",
                                 "from_tokens"})  # a run from the token cache writes the bytes of the run from the text


def output_settings(config: "Config") -> Dict[str, Any]:
    """The settings that determine the output bytes (recorded for --resume checks)."""
    return {k: v for k, v in config.to_json().items() if k not in NON_OUTPUT_SETTINGS}


def short_repr(value: Any, most: int = 60) -> str:
    """``repr(value)`` cut to ``most`` characters: an error line stays one short line."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


_OPTIONAL_TEXT = frozenset({"spacy_model", "vocab_file"})  # None or text
_OPTIONAL_INTS = frozenset({"min_short_seq_length", "overlap_size"})  # None (derived from other settings) or an integer
_PATH_LISTS = frozenset({"metadata_files", "validation_metadata_files"})
# Settings that name files or directories, resolved against the working directory (a --config
# file's too: presets.FileSettings says so when one of its paths is not found)
PATH_SETTINGS = ("metadata_files", "validation_metadata_files", "input_files_prefix", "vocab_file", "output_dir",
                 "from_tokens", "scheduler_file")


def value_problem(name: str, value: Any) -> str:
    """What is wrong with ``value`` for setting ``name`` (its dataclass field's type), or ""."""
    f = Config.__dataclass_fields__[name]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    if name in _PATH_LISTS:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v for v in items):
            return f"must be a path or a list of paths, got {short_repr(value)}"
    elif name in _OPTIONAL_TEXT:
        if value is not None and not isinstance(value, str):
            return f"must be text, got {short_repr(value)}"
    elif name in _OPTIONAL_INTS:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"must be an integer, got {short_repr(value)}"
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            return f"must be true or false, got {short_repr(value)}"
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {short_repr(value)}"
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {short_repr(value)}"
    elif isinstance(default, str) and not isinstance(value, str):
        return f"must be text, got {short_repr(value)}"
    return ""


def _check_type(config: Config) -> None:
    for f in fields(Config):
        problem = value_problem(f.name, getattr(config, f.name))
        if problem:
            raise ConfigError(f"--{f.name} {problem}")


# Absurd sizes are refused up front, not run until memory, disk or open files run out:
# (flag, most, why). Documented in the README's flag table; tests/test_config.py checks each.
MAX_SEQ_LENGTH = 8192  # the longest context of BERT-family encoders in use; a batch is 4,096 x L ids
UPPER_BOUNDS = (
    ("max_seq_length", MAX_SEQ_LENGTH, "the longest BERT-family context; each batch of 4,096 rows holds L ids per feature"),
    ("max_predictions_per_seq", MAX_SEQ_LENGTH, "at most --max_seq_length anyway"),
    ("dupe_factor", 1000, "each pass writes the whole corpus again; BERT uses 10"),
    ("num_output_files", 100_000, "the coordinator keeps one open file per shard"),
    ("split_num", 1 << 20, "a group's list of files is held by one worker"),
    ("buffer_size", 100_000_000, "~40 bytes of memory per token in each worker"),
    ("overlap_size", MAX_SEQ_LENGTH, "at most --max_seq_length anyway"),
)
# Values the Model Zoo accepts and what they mean there: --split_num <= 0 puts every file in one
# group (here: no limit on entries; --group_bytes still bounds a group), --num_output_files <= 0
# writes one file (it takes max(n, 1)).
ZERO_MEANS = {"split_num": 1 << 20, "num_output_files": 1}
MAX_NAME_BYTES = 200  # NAME-100000.tfrecords.partial within a file system's 255-byte names
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)  # a 64-bit integer, signed or not
MOST_WORKERS = 1024  # and at most 4 per usable core


def most_workers() -> Tuple[int, str]:
    """(--num_workers at most, why): 4 per usable core (more only thrash, each worker a process of
    ~250 MB), and never more than ``MOST_WORKERS``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if 4 * cores < MOST_WORKERS:
        return 4 * cores, f"4 per usable core, {cores} here; each worker is a process of ~250 MB"
    return MOST_WORKERS, "each worker is a process of ~250 MB"


def _check_sizes(config: Config) -> None:
    """Every size within its documented bounds (lower bounds of the plain counts, then upper)."""
    for name in ("dupe_factor", "num_output_files", "split_num", "num_workers"):
        if getattr(config, name) < 1:
            raise ConfigError(f"--{name} must be at least 1, got {short_repr(getattr(config, name), 30)}")
    for name, most, why in UPPER_BOUNDS + (("num_workers", *most_workers()),):
        if getattr(config, name) > most:
            raise ConfigError(f"--{name} {short_repr(getattr(config, name), 30)} is more than {most:,} ({why})")
    if not SEED_RANGE[0] <= config.seed <= SEED_RANGE[1]:
        raise ConfigError(f"--seed {short_repr(config.seed, 30)} is not a 64-bit integer (between -2^63 and 2^64 - 1)")
    if not 1 << 16 <= config.group_bytes <= 1 << 30:
        raise ConfigError(
            f"--group_bytes {config.group_bytes} must be between 64K and 1G (default 8M): a worker holds ~10 times it"
        )
    if not 1000 <= config.max_document_chars <= 1 << 34:
        raise ConfigError(
            f"--max_document_chars {config.max_document_chars} must be between 1000 and 16G (default 1M)"
        )


def validate(config: Config, require_inputs: bool = True) -> None:
    """Reject impossible or contradictory settings before any work starts (``require_inputs=False``:
    --metadata_files and --vocab_file may be missing, for --print_config)."""
    _check_type(config)
    if require_inputs and not config.metadata_files:
        raise ConfigError("--metadata_files is required: give one or more metadata files listing the documents")
    if require_inputs and not config.vocab_file:
        raise ConfigError("--vocab_file is required: the WordPiece vocab.txt the model will use")
    _check_sizes(config)
    if not config.output_dir:
        raise ConfigError("--output_dir must not be empty: give a directory (default ./tfrecords/)")
    scheme, sep, rest = config.output_dir.partition("://")
    if sep and not rest.strip("/") and scheme.replace("+", "").replace(".", "").replace("-", "").isalnum():
        example = "file:///PATH/TO/DIR" if scheme == "file" else f"{scheme}://BUCKET/DIR"  # (s3:// made a local
        raise ConfigError(f"--output_dir {config.output_dir} names no bucket or directory: give one ({example})")  # 's3:')
    if config.spacy_model == "":
        raise ConfigError("--spacy_model must not be empty: leave it out for the rule-based sentencizer")
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
    if config.compression not in COMPRESSIONS:
        raise ConfigError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got {short_repr(config.compression)}")
    if not config.name or any(c in config.name for c in "/\\\0") or config.name in (".", ".."):
        raise ConfigError(f"--name {short_repr(config.name)} must be a plain file-name prefix (no slashes)")
    if config.name.startswith(".") or any(ord(c) < 32 or ord(c) == 127 for c in config.name):
        raise ConfigError(f"--name {short_repr(config.name)} must be a plain file-name prefix: not hidden (a leading "
                          f"'.', which globs such as DIR/* miss) and without control characters (a newline breaks the "
                          f"--input_file glob the run prints)")
    if len(config.name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise ConfigError(
            f"--name {short_repr(config.name)} is longer than {MAX_NAME_BYTES} bytes: a shard's file name "
            f"(NAME-N.tfrecords.partial) must fit in 255"
        )
    if not 0.0 <= config.validation_fraction < 1.0:
        raise ConfigError(f"--validation_fraction {config.validation_fraction} must be in (0, 1) (0 = no split)")
    if config.validation_fraction and config.validation_metadata_files:
        raise ConfigError(
            "--validation_fraction and --validation_metadata_files contradict each other: split the given "
            "documents by fraction, or name the validation documents, not both"
        )
    if config.split_role not in ("", "train", "validation"):
        raise ConfigError(f"split_role must be train or validation, got {short_repr(config.split_role)}")
    if config.resume and config.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other: continue the interrupted run or start over")
    if config.single_sentence_per_line and config.spacy_model:
        raise ConfigError(
            "--single_sentence_per_line and --spacy_model contradict each other: lines are sentences, so no "
            "spaCy model is used; drop one of them"
        )
    _validate_inputs(config)
    _validate_objective(config)
    _validate_packing(config)
    _validate_runner(config)
    _validate_from_tokens(config)
    _validate_output_format(config)


def _validate_inputs(config: Config) -> None:
    """--input_format / --text_key rules."""
    from .documents import INPUT_FORMATS  # the input stage owns its formats (lazy: config stays a leaf)

    if config.input_format not in INPUT_FORMATS:
        raise ConfigError(f"--input_format must be one of {', '.join(INPUT_FORMATS)}, got {short_repr(config.input_format)}")
    _check_encoding(config.input_encoding)
    if not isinstance(config.text_key, str) or not config.text_key:
        raise ConfigError(f"--text_key must be a non-empty JSON key, got {short_repr(config.text_key)}")
    if config.text_key != "text" and config.input_format != "jsonl":  # (else silently read as plain text)
        raise ConfigError(f"--text_key only applies with --input_format jsonl (this run reads --input_format "
                          f"{config.input_format}); add --input_format jsonl or drop --text_key")
    if config.multiple_docs_separator != "\n" and not config.multiple_docs_in_single_file:
        raise ConfigError("--multiple_docs_separator only applies with --multiple_docs_in_single_file (each file is one "
                          "document without it); add --multiple_docs_in_single_file or drop --multiple_docs_separator")
    if config.input_format == "bert" and (config.multiple_docs_in_single_file or config.spacy_model):
        flag = "--multiple_docs_in_single_file" if config.multiple_docs_in_single_file else "--spacy_model"
        raise ConfigError(
            f"{flag} does not apply to --input_format bert: its documents are separated by blank lines and its "
            f"lines are the sentences; drop {flag}"
        )
    if config.input_format != "text" and config.multiple_docs_in_single_file:
        unit = "JSON line" if config.input_format == "jsonl" else "<doc> block"
        raise ConfigError(
            f"--multiple_docs_in_single_file does not apply to --input_format {config.input_format}: every {unit} is "
            "already one document; drop --multiple_docs_in_single_file"
        )


def _check_encoding(name: str) -> None:
    """--input_encoding: a text encoding that can decode any bytes with replacement characters
    (the documents are decoded so). Python also knows bytes-to-bytes codecs (base64, zlib, ...),
    text-to-text ones (rot13) and some that cannot replace (idna, punycode): refused here, not
    a traceback in every worker."""
    import codecs

    hint = "e.g. utf-8, latin-1, cp1252"
    try:
        info = codecs.lookup(name)
    except (LookupError, TypeError, ValueError):
        raise ConfigError(f"--input_encoding {short_repr(name)} is not a text encoding Python knows ({hint})") from None
    if not getattr(info, "_is_text_encoding", True):
        raise ConfigError(
            f"--input_encoding {short_repr(name)} is not a text encoding (it turns bytes into bytes, or text into text); "
            f"give the documents' character encoding ({hint})"
        )
    if info.name in ("utf-16", "utf-32"):
        return  # they need a byte-order mark, and files that have one are recognised anyway
    try:
        codecs.getincrementaldecoder(name)(errors="replace").decode(b"Text 123\n\xff\xfe\x00", final=True)
    except Exception:  # noqa: BLE001 - any failure here would be every worker's
        raise ConfigError(
            f"--input_encoding {short_repr(name)} cannot decode documents (it refuses bytes it does not expect instead of "
            f"replacing them); give the documents' character encoding ({hint})"
        ) from None


# MLM-only settings and their values in a run without --mlm_only (anything else there is a mistake).
_MLM_ONLY_SETTINGS = {"allow_cross_document_examples": False, "document_separator_token": "[SEP]", "overlap_size": 0,
                      "buffer_size": 1_000_000}


def _validate_packing(config: Config) -> None:
    """--packing / --max_sequences_per_pack."""
    k = config.max_sequences_per_pack
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MOST_SEQUENCES_PER_PACK:
        raise ConfigError(
            f"--max_sequences_per_pack must be an integer from 1 to {MOST_SEQUENCES_PER_PACK} (default 3, as in every "
            f"MLPerf packed layout), got {short_repr(k)}"
        )
    if not config.packing:
        if k != 3:
            raise ConfigError("--max_sequences_per_pack only applies with --packing; add --packing or drop it")
        return
    if config.disable_masking:
        raise ConfigError(
            "--packing needs masked records: --disable_masking stores windows for the reader to mask, and packed rows "
            "carry each instance's predictions; drop one of them"
        )


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
    if config.unmasked_format not in UNMASKED_FORMATS:
        raise ConfigError(f"--unmasked_format must be one of {', '.join(UNMASKED_FORMATS)}, got {short_repr(config.unmasked_format)}")
    if config.unmasked_format != "tokens" and not config.disable_masking:
        raise ConfigError("--unmasked_format only applies with --disable_masking; drop it")
    if config.disable_masking and config.mask_whole_word:
        raise ConfigError(
            "--mask_whole_word has no effect with --disable_masking (nothing is masked when writing): drop it and "
            "pass mask_whole_word=True to bert_data.pretraining_dataset(..., dynamic_masking=True) instead"
        )
    if not config.mlm_only:
        for name, unset in _MLM_ONLY_SETTINGS.items():
            if getattr(config, name) != unset:
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
        raise ConfigError(f"--document_separator_token must be one vocabulary token without spaces, got {short_repr(token)}")
    if config.allow_cross_document_examples:
        if token in ("[MASK]", "[PAD]", "[CLS]"):
            raise ConfigError(
                f"--document_separator_token {token} would be confused with the model's own {token}; use [SEP] or "
                "an unused vocabulary token such as [unused0]"
            )
        # that the token is in the vocabulary is a start-up check (bert_data.runners.startup)
    if not config.allow_cross_document_examples and config.document_separator_token != "[SEP]":
        import logging

        logging.getLogger("bert_data").warning(
            "--document_separator_token %s has no effect: windows never span documents without "
            "--allow_cross_document_examples", config.document_separator_token,
        )
    if config.disable_masking and config.dupe_factor > 1 and config.short_seq_prob == 0:
        import logging

        logging.getLogger("bert_data").warning(
            "--disable_masking with --dupe_factor %d writes the same unmasked windows %d times (masks are drawn "
            "in the reader); --dupe_factor 1 is usually what you want",
            config.dupe_factor,
            config.dupe_factor,
        )


def _validate_output_format(config: Config) -> None:
    """--output_format: a known container, whose records this run's layout can be, with its package."""
    import importlib.util

    from .format.containers import CONTAINERS, container_of, is_rewriting  # lazy: config stays a leaf
    from .objectives import layout_of

    name = config.output_format
    if name not in CONTAINERS:
        raise ConfigError(f"--output_format must be one of {', '.join(CONTAINERS)}, got {short_repr(name)}")
    container = container_of(config)
    if not is_rewriting(container):
        return
    flag = f"--output_format {name}"
    if config.compression != "none":
        raise ConfigError(f"--compression {config.compression} is for TFRecords; {flag} compresses its own way: drop --compression")
    if config.packing and not container.packed_rows:
        raise ConfigError(
            f"--packing writes padded TFRecord rows; {flag} stores every row unpadded already (pad per batch in the "
            f"collator): drop --packing, or write --output_format tfrecord"
        )
    if config.runner == "beam":
        raise ConfigError(f"{flag} is written by --runner local or dask; --runner beam writes TFRecords only")
    layout = layout_of(config.mlm_only, config.sentence_order_prediction, config.disable_masking, config.unmasked_format,
                       packing=config.packing)
    problem = container.supports(layout) or container.settings_problem(config)
    if problem:
        fix = "; pass --unmasked_format ids" if config.disable_masking and config.unmasked_format != "ids" else ""
        raise ConfigError(f"{flag}: {problem}{fix}")
    module = {"pyarrow": "pyarrow", "mosaicml-streaming": "streaming"}.get(container.package, container.package)
    if importlib.util.find_spec(module) is None:
        extra = "torch" if name in ("parquet", "hdf5") else name
        raise ConfigError(f"{flag} needs the package {container.package}: pip install 'bert_data[{extra}]'")


RUNNERS = ("local", "beam", "dask")
UNMASKED_FORMATS = ("tokens", "ids")  # --disable_masking: the Model Zoo's token strings, or our int64 ids


def _validate_from_tokens(config: Config) -> None:
    """--from_tokens: a local directory, groups planned as the cache's (so not per split half)."""
    if not config.from_tokens:
        return
    if "://" in config.from_tokens:
        raise ConfigError(f"--from_tokens {config.from_tokens}: a token cache is read from a local (or mounted) path")
    if config.runner == "beam":
        raise ConfigError("--from_tokens is read by --runner local and dask; drop it for --runner beam")
    if config.validation_fraction or config.validation_metadata_files:
        raise ConfigError(
            "--from_tokens plans the groups the cache was made with, and a train/validation split plans others: "
            "split the metadata first (split_metadata) and tokenize each half, or drop --from_tokens"
        )


def _validate_runner(config: Config) -> None:
    """--runner rules (the runners live in bert_data.runners)."""
    if config.runner not in RUNNERS:
        raise ConfigError(f"--runner must be one of {', '.join(RUNNERS)}, got {short_repr(config.runner)}")
    if config.runner == "beam" and config.resume:
        raise ConfigError(
            "--resume is for the local runner; with --runner beam re-run the job (its output is deterministic)"
        )
    if config.runner != "dask" and (config.scheduler_address or config.scheduler_file or config.dask_dashboard):
        raise ConfigError("--scheduler_address/--scheduler_file/--dask_dashboard are for --runner dask; add it or drop them")
    if config.scheduler_address and config.scheduler_file:
        raise ConfigError("--scheduler_address and --scheduler_file name the same thing: give one")
    if config.scheduler_address and "://" not in config.scheduler_address:
        raise ConfigError(f"--scheduler_address {short_repr(config.scheduler_address)} needs a scheme: tcp://HOST:PORT")
    if config.runner == "beam" and (config.validation_fraction or config.validation_metadata_files):
        raise ConfigError(
            "--validation_fraction/--validation_metadata_files are for the local runner; with --runner beam, "
            "split first with split_metadata and run once per metadata file"
        )
