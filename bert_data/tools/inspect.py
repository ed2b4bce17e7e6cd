"""``inspect_tfrecords``: look inside BERT pretraining TFRecords, without TensorFlow.

Four record layouts (:data:`bert_data.schema.SCHEMAS`) are understood: ``nsp`` and ``sop``
(``[CLS] A [SEP] B [SEP]`` with ``segment_ids`` and ``next_sentence_labels``; for SOP label 1
means A and B were swapped), ``mlm_only`` (``[CLS] window [SEP]`` with the masked-LM features
only; the window may hold document separators) and ``unmasked`` (``input_ids`` and
``input_mask`` only, masked in the reader). The layout of a directory's files is the one named
by ``record_schema`` (or the features listed under ``schema``) in its ``data_params.json``,
else the one whose feature names are exactly those of the first record (``nsp`` and ``sop``
share names: without a manifest such records are reported as ``nsp``). Only the checks and
statistics that apply to the layout are made.

Two modes:

* default: print the first ``-n`` instances decoded back to WordPiece text, segment A and B on
  separate lines (one token line for MLM-only and unmasked records). Every masked-LM
  prediction position is written ``token{original}``: so ``[MASK]{cat}`` was masked,
  ``dog{cat}`` was replaced by a random token and ``cat{cat}`` was kept unchanged (but is
  still predicted).
* ``--stats`` (implied by ``--json`` and ``--plot``): stream every record once and report the
  instance count, histograms of real lengths and (masked layouts) of predictions per
  instance, the NSP or SOP label balance (paired layouts), the mask composition (masked
  layouts), the ``[UNK]`` rate, and a check of every record against its schema
  (:mod:`bert_data.schema`) and of the files against ``data_params.json`` when there is one.

Records are read with :func:`bert_data.records.iter_records` (plain or GZIP, CRC-checked) and
decoded with :func:`bert_data.records.parse_example` in batches, so memory stays bounded
whatever the size of the data: only histograms are accumulated.

Exit status: 0 when everything checked is fine, 1 when a record is bad (schema violation,
malformed Example, corrupt frame) or the files disagree with ``data_params.json``, 2 for usage
and I/O errors (one line on stderr).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import struct
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import BertDataError, RecordFormatError, print_error
from ..format.records import iter_records, masked_crc32c, parse_example
from ..format.schema import SCHEMAS, FeatureSpec, feature_length, objective_schema, schema_from_names

PROG = "inspect_tfrecords"
MANIFEST_NAME = "data_params.json"  # same name as bert_data.writer.MANIFEST_NAME (not imported: keep startup light)
BATCH_SIZE = 1024
MAX_REASONS = 10

__all__ = [
    "main",
    "entry_point",
    "inspect_stats",
    "resolve_inputs",
    "decode_instance",
    "decode_sequence",
    "check_records",
    "layout_from_names",
    "manifest_layout",
]


class InspectError(BertDataError):
    """Bad flags, missing inputs or unreadable files (exit 2)."""


# --------------------------------------------------------------------------------------------
# Inputs and manifests
# --------------------------------------------------------------------------------------------


def _natural_key(path: str) -> List[Any]:
    """``examples-2`` sorts before ``examples-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


@dataclass
class InputFile:
    path: str
    dir_given: bool  # found by listing a directory PATH


def resolve_inputs(paths: Sequence[str]) -> Tuple[List[InputFile], List[str]]:
    """Files to read (in order, without duplicates) and the directories given as PATH."""
    files: List[InputFile] = []
    dirs: List[str] = []
    seen = set()
    for p in paths:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(glob.escape(p), "*.tfrecords")), key=_natural_key)
            found = [f for f in found if os.path.isfile(f)]
            if not found:
                raise InspectError(f"{p}: directory holds no *.tfrecords files")
            dirs.append(os.path.realpath(p))
            from_dir = True
        elif os.path.exists(p):
            found, from_dir = [p], False
        elif glob.has_magic(p):
            found = sorted((f for f in glob.glob(p) if os.path.isfile(f)), key=_natural_key)
            if not found:
                raise InspectError(f"{p}: no file matches")
            from_dir = False
        else:
            raise InspectError(f"{p}: no such file or directory")
        for f in found:
            real = os.path.realpath(f)
            if real in seen:
                continue
            seen.add(real)
            files.append(InputFile(f, from_dir))
    return files, dirs


@dataclass
class Manifest:
    path: str
    data: Dict[str, Any]

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    def int_field(self, key: str) -> Optional[int]:
        value = self.data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_manifest(directory: str) -> Optional[Manifest]:
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InspectError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InspectError(f"{path}: not a JSON object")
    return Manifest(path, data)


def _manifest_vocab_path(manifest: Manifest) -> Optional[str]:
    """The manifest's vocab_file, as given if it exists, else relative to the manifest's directory."""
    value = manifest.data.get("vocab_file")
    if not isinstance(value, str) or not value:
        return None
    if os.path.isfile(value) or os.path.isabs(value):
        return value
    beside = os.path.join(manifest.directory, value)
    return beside if os.path.isfile(beside) else value


def detect_compression(path: str) -> str:
    """``"gzip"`` or ``"none"``, with the same rule as :func:`bert_data.records.iter_records`."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if head[:2] != b"\x1f\x8b":
        return "none"
    if len(head) == 12 and masked_crc32c(head[:8]) == struct.unpack_from("<I", head, 8)[0]:
        return "none"  # a plain file whose first length happens to start with 1f 8b
    return "gzip"


# --------------------------------------------------------------------------------------------
# Record layouts
# --------------------------------------------------------------------------------------------

PAIRED_LAYOUTS = ("nsp", "sop")  # [CLS] A [SEP] B [SEP], segment_ids and next_sentence_labels
OBJECTIVE_OF_LAYOUT = {"nsp": "mlm+nsp", "sop": "mlm+sop", "mlm_only": "mlm_only", "unmasked": "mlm_only"}


def layout_specs(layout: str) -> Tuple[FeatureSpec, ...]:
    return SCHEMAS[layout]


def layout_names(layout: str) -> Tuple[str, ...]:
    return tuple(f.name for f in SCHEMAS[layout])


def is_paired(layout: Optional[str]) -> bool:
    return layout in PAIRED_LAYOUTS


def is_masked(layout: Optional[str]) -> bool:
    return layout is not None and "masked_lm_positions" in layout_names(layout)


def layout_from_names(names) -> str:
    """The layout whose feature names are exactly ``names`` (``nsp`` for the NSP/SOP names);
    when none matches, the closest one (fewest missing plus unexpected features), so that a
    bad first record still gets the most useful complaints."""
    names = set(names)
    try:
        return schema_from_names(names)
    except ValueError:
        pass
    return min(("nsp", "mlm_only", "unmasked"), key=lambda key: len(names ^ set(layout_names(key))))


def _flag_layout(data: Dict[str, Any]) -> Optional[str]:
    """The layout the run settings recorded in a manifest write, when all three are there."""
    flags = [data.get(k) for k in ("mlm_only", "sentence_order_prediction", "disable_masking")]
    if not all(isinstance(v, bool) for v in flags):
        return None
    return objective_schema(*flags)


def manifest_layout(manifest: "Manifest") -> Tuple[Optional[str], str, Optional[str]]:
    """``(layout, where it came from, problem)`` from a ``data_params.json``: its
    ``record_schema``, else the feature names listed under ``schema``, else the run settings
    (``mlm_only``, ``sentence_order_prediction``, ``disable_masking``). ``layout`` is None when
    the manifest says nothing usable (then the records decide); ``problem`` is set when
    ``record_schema`` is there but is not a known layout."""
    d = manifest.data
    problem = None
    named = d.get("record_schema")
    if named is not None:
        if isinstance(named, str) and named in SCHEMAS:
            return named, f"record_schema in {manifest.path}", None
        problem = f"record_schema is {named!r}, not one of {sorted(SCHEMAS)}"
    schema = d.get("schema")
    if isinstance(schema, dict):
        try:
            layout = schema_from_names(schema)
        except ValueError:
            layout = None
        if layout is not None:
            if layout == "nsp" and (d.get("sentence_order_prediction") is True or d.get("objective") == "mlm+sop"):
                layout = "sop"
            return layout, f"schema in {manifest.path}", problem
    layout = _flag_layout(d)
    if layout is not None:
        return layout, f"run settings in {manifest.path}", problem
    return None, "", problem


def _names_source(layout: str, where: str) -> str:
    text = f"feature names of the first record of {where}"
    if layout == "nsp":
        text += " (sop records have the same features: without data_params.json they are reported as nsp)"
    return text


@dataclass
class Separator:
    """What may sit between documents inside MLM-only windows (from ``data_params.json``)."""

    token: Optional[str] = "[SEP]"  # --document_separator_token; None: windows never span documents

    def id(self, vocab: Optional["VocabInfo"]) -> Optional[int]:
        if vocab is None or self.token is None:
            return None
        try:
            return vocab.tokens.index(self.token)
        except ValueError:
            return None


def manifest_separator(manifest: Optional["Manifest"]) -> Separator:
    if manifest is None:
        return Separator()
    if manifest.data.get("allow_cross_document_examples") is False:
        return Separator(None)
    token = manifest.data.get("document_separator_token")
    return Separator(token if isinstance(token, str) and token else "[SEP]")


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


@dataclass
class VocabInfo:
    path: str
    tokens: List[str]
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @property
    def size(self) -> int:
        return len(self.tokens)

    def token(self, i: int) -> str:
        return self.tokens[i] if 0 <= i < len(self.tokens) else f"<id {i}>"


def load_vocab_info(path: str) -> VocabInfo:
    from ..tokenization import load_vocab  # raises VocabError (exit 2) for unusable files

    vocab = load_vocab(path)
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    return VocabInfo(path, tokens, vocab["[PAD]"], vocab["[UNK]"], vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"])


def _sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Record checks
# --------------------------------------------------------------------------------------------

_WANT_KIND = {"int64": "int64_list", "float32": "float_list"}


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "bytes_list" if value else "feature without a value list"
    if value.dtype == np.float32:
        return "float_list"
    return "int64_list"


def structure_problem(example: Dict[str, Any], seq: int, pred: int, layout: str = "nsp") -> Optional[str]:
    """First problem with the feature names, dtypes and lengths of one decoded record of the
    given layout, or None."""
    specs = layout_specs(layout)
    names = [f.name for f in specs]
    missing = [name for name in names if name not in example]
    if missing:
        return "missing feature(s) " + ", ".join(missing)
    extra = sorted(set(example) - set(names))
    if extra:
        return "unexpected feature(s) " + ", ".join(repr(e) for e in extra)
    for spec in specs:
        value = example[spec.name]
        kind, want = _kind(value), _WANT_KIND[spec.dtype]
        if kind != want:
            return f"{spec.name} is a {kind}, expected a {want} ({spec.dtype})"
        length = feature_length(spec, seq, pred)
        if len(value) != length:
            return f"{spec.name} has {len(value)} values, expected {length}"
    return None


def check_records(
    batch: Dict[str, np.ndarray],
    vocab: Optional[VocabInfo],
    layout: str = "nsp",
    separator_id: Optional[int] = None,
) -> List[Tuple[np.ndarray, str]]:
    """Vectorised content checks of structurally valid records of one layout stacked as
    ``(n, k)`` arrays.

    Returns ``(bad_rows_bool, message)`` pairs, one per check. A prediction slot is a slot
    whose position is non-zero (position 0 is always ``[CLS]``, which is never masked).
    ``separator_id`` is the MLM-only document separator (``None``: windows never span
    documents); it is ignored for the paired (NSP/SOP) layouts. ``vocab.sep`` as separator
    allows ``[SEP]`` inside MLM-only windows.
    """
    paired, masked = is_paired(layout), is_masked(layout)
    ids = batch["input_ids"]
    mask = batch["input_mask"]
    n, seq = ids.shape
    real = (mask == 1).sum(axis=1)
    run = np.arange(seq)[None, :] < real[:, None]
    column = np.broadcast_to(np.arange(seq)[None, :], ids.shape)
    r1 = np.arange(n)

    def any_row(bad: np.ndarray) -> np.ndarray:
        return bad.any(axis=1)

    checks: List[Tuple[np.ndarray, str]] = [
        (any_row(~np.isin(mask, (0, 1))), "input_mask has values other than 0 and 1"),
        (any_row((mask == 1) != run), "input_mask is not a run of 1s followed by 0s"),
        (real == 0, "input_mask is all 0s (no real tokens)"),
    ]
    len_a = np.zeros(n, np.int64)
    if paired:
        seg = batch["segment_ids"]
        labels = batch["next_sentence_labels"][:, 0]
        len_a = ((seg == 0) & run).sum(axis=1)
        checks += [
            (any_row(~np.isin(seg, (0, 1))), "segment_ids has values other than 0 and 1"),
            (any_row((seg != 0) & ~run), "segment_ids is not 0 on padding"),
            (any_row(np.diff(np.where(run, seg, 1), axis=1) < 0), "segment_ids is not 0s then 1s within input_mask"),
            ((real > 0) & (len_a == 0), "segment A is empty (segment_ids starts with 1)"),
            ((real > 0) & (len_a == real), "segment B is empty (no segment_ids 1 within input_mask)"),
        ]
    else:
        checks.append(((real > 0) & (real < 3), "the window holds no token between [CLS] and [SEP]"))
    checks.append((any_row((ids != 0) & ~run), "input_ids is not 0 on padding"))
    if paired:
        checks.append((~np.isin(labels, (0, 1)), "next_sentence_labels is not 0 or 1"))
    prefix = np.zeros((n, 0), bool)
    if masked:
        pos = batch["masked_lm_positions"]
        mids = batch["masked_lm_ids"]
        weights = batch["masked_lm_weights"]
        npred = pos.shape[1]
        pred = pos != 0
        k = pred.sum(axis=1)
        prefix = np.arange(npred)[None, :] < k[:, None]
        safe_pos = np.clip(pos, 0, seq - 1)
        checks += [
            (any_row(pred != prefix), "masked_lm_positions has a padding 0 before a real prediction"),
            (any_row(pos < 0), "masked_lm_positions has negative values"),
            (any_row((np.diff(pos, axis=1) <= 0) & prefix[:, 1:]), "masked_lm_positions is not strictly ascending"),
            (any_row((pos >= real[:, None]) & prefix), "masked_lm_positions points past the real length"),
            (
                any_row(((weights != 1.0) & prefix) | ((weights != 0.0) & ~prefix)),
                "masked_lm_weights is not 1.0 exactly on the predictions and 0.0 elsewhere",
            ),
            (any_row((mids != 0) & ~prefix), "masked_lm_ids is not 0 on padding slots"),
        ]
    if vocab is None:
        negative = any_row(ids < 0)
        if masked:
            negative |= any_row((mids < 0) & prefix)
        checks.append((negative, "negative token id"))
        return checks
    size = vocab.size
    last = np.clip(real - 1, 0, seq - 1)
    rows = np.broadcast_to(r1[:, None], prefix.shape)
    original = ids.copy()
    is_pred = np.zeros(ids.shape, bool)
    if masked:
        original[rows[prefix], safe_pos[prefix]] = mids[prefix]
        is_pred[rows[prefix], safe_pos[prefix]] = True
    checks += [(any_row((ids < 0) | (ids >= size)), f"input_ids outside the vocabulary (0..{size - 1})")]
    if masked:
        checks.append(
            (any_row(((mids < 0) | (mids >= size)) & prefix), f"masked_lm_ids outside the vocabulary (0..{size - 1})")
        )
    checks += [
        ((real > 0) & (ids[:, 0] != vocab.cls), "input_ids does not start with [CLS]"),
        ((real > 0) & (ids[r1, last] != vocab.sep), "the last real token is not [SEP]"),
        (any_row((original == vocab.cls) & run & (column > 0)), "[CLS] after position 0"),
    ]
    sep_in_run = (original == vocab.sep) & run
    if paired:
        end_a = np.clip(len_a - 1, 0, seq - 1)
        checks += [
            ((len_a > 0) & (ids[r1, end_a] != vocab.sep), "segment A does not end with [SEP]"),
            (sep_in_run.sum(axis=1) != 2, "does not hold exactly 2 [SEP] (after A and after B)"),
            (
                any_row(((safe_pos == end_a[:, None]) | (safe_pos == last[:, None])) & prefix),
                "a masked position is a [SEP]",
            ),
        ]
    else:
        if separator_id != vocab.sep:
            what = (
                "windows never span documents" if separator_id is None else f"the document separator is id {separator_id}"
            )
            checks.append(
                (any_row(sep_in_run & (column < last[:, None])), f"[SEP] before the last real token ({what})")
            )
        if masked:
            checks.append(
                (
                    any_row(((safe_pos == last[:, None]) | (mids == vocab.sep)) & prefix),
                    "a masked position is a [SEP]",
                )
            )
            if separator_id is not None and separator_id != vocab.sep:
                checks.append((any_row((mids == separator_id) & prefix), "a masked position is the document separator"))
    if masked:
        checks.append((any_row((ids == vocab.mask) & run & ~is_pred), "[MASK] at a position that is not a prediction"))
    else:
        checks.append((any_row((ids == vocab.mask) & run), "input_ids holds [MASK] (unmasked records store no masks)"))
    return checks


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def _grow_add(hist: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if len(counts) > len(hist):
        hist = np.concatenate([hist, np.zeros(len(counts) - len(hist), np.int64)])
    hist[: len(counts)] += counts
    return hist


@dataclass
class Group:
    """Files of one directory: the manifest there, if any, the layout and the expected lengths."""

    directory: str
    manifest: Optional[Manifest]
    seq: Optional[int] = None
    pred: Optional[int] = None
    lengths_from: str = ""
    layout: Optional[str] = None  # a key of SCHEMAS; None until known
    layout_from: str = ""
    layout_problem: Optional[str] = None  # an unusable record_schema in the manifest
    separator: Separator = field(default_factory=Separator)
    observed_seq: Optional[int] = None  # input_ids length of the first record that has one
    observed_pred: Optional[int] = None  # masked_lm_positions length of the first record that has one
    counts: Dict[str, int] = field(default_factory=dict)  # file basename -> records
    compressions: Dict[str, str] = field(default_factory=dict)
    dir_given: bool = False

    @classmethod
    def for_directory(cls, directory: str, dir_given: bool = False) -> "Group":
        group = cls(directory, load_manifest(directory), dir_given=dir_given)
        m = group.manifest
        if m is not None:
            group.layout, group.layout_from, group.layout_problem = manifest_layout(m)
            group.separator = manifest_separator(m)
            seq, pred = m.int_field("max_seq_length"), m.int_field("max_predictions_per_seq")
            if seq and seq > 0:
                group.seq, group.lengths_from = seq, m.path
            if pred and pred > 0:
                group.pred = pred
        return group

    def learn(self, where: str, example: Dict[str, Any]) -> None:
        """Layout and lengths from a decoded record, for whatever the manifest left open."""
        source = where.rsplit(" record ", 1)[0]
        if self.layout is None:
            self.layout = layout_from_names(example)
            self.layout_from = _names_source(self.layout, source)
        ids, positions = example.get("input_ids"), example.get("masked_lm_positions")
        if isinstance(ids, np.ndarray):
            if self.observed_seq is None:
                self.observed_seq = len(ids)
            if self.seq is None:
                self.seq = len(ids)
                self.lengths_from = f"first record of {source}"
        if isinstance(positions, np.ndarray):
            if self.observed_pred is None:
                self.observed_pred = len(positions)
            if self.pred is None:
                self.pred = len(positions)


class Accumulator:
    def __init__(self, vocab: Optional[VocabInfo]) -> None:
        self.vocab = vocab
        self.records = 0
        self.valid = 0
        self.bad = 0
        self.reasons: List[str] = []
        self.reason_counts: Counter = Counter()
        self.len_hist = np.zeros(1, np.int64)
        self.pred_hist = np.zeros(1, np.int64)
        self.labels = {"nsp": np.zeros(2, np.int64), "sop": np.zeros(2, np.int64)}
        self.composition = np.zeros(3, np.int64)  # [MASK], kept, random
        self.real_tokens = 0
        self.unk_tokens = 0
        self.lengths_seen: Counter = Counter()
        self.layouts: Counter = Counter()  # layout -> valid records

    def add_bad(self, where: str, messages: List[str]) -> None:
        self.bad += 1
        for m in messages:
            self.reason_counts[m] += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{where}: {'; '.join(messages)}")

    def add_batch(self, examples: List[Tuple[str, Any]], group: Group) -> None:
        """Check and accumulate one batch of decoded records: ``(where, example)`` pairs, where
        ``example`` is a decoded dict or the message of a malformed ``tf.train.Example``."""
        good: List[Tuple[int, str, Dict[str, Any]]] = []
        bad: List[Tuple[int, str, List[str]]] = []
        for index, (where, example) in enumerate(examples):
            if isinstance(example, str):  # a malformed tf.train.Example
                bad.append((index, where, [example]))
                continue
            group.learn(where, example)
            layout = group.layout
            assert layout is not None
            if group.seq is None:
                problem: Optional[str] = structure_problem(example, 0, 0, layout) or "missing feature(s)"
            else:
                problem = structure_problem(example, group.seq, group.pred or 0, layout)
            if problem:
                bad.append((index, where, [problem]))
            else:
                good.append((index, where, example))
        ok = np.zeros(0, bool)
        if good:
            layout = group.layout
            assert layout is not None
            batch = {name: np.stack([ex[name] for _, _, ex in good]) for name in layout_names(layout)}
            separator_id = group.separator.id(self.vocab)
            checks = check_records(batch, self.vocab, layout, separator_id)
            bad_any = np.zeros(len(good), bool)
            for bad_rows, _ in checks:
                bad_any |= bad_rows
            for i in np.flatnonzero(bad_any):
                bad.append((good[i][0], good[i][1], [msg for bad_rows, msg in checks if bad_rows[i]]))
            ok = ~bad_any
        for _, where, messages in sorted(bad, key=lambda b: b[0]):
            self.add_bad(where, messages)
        if not ok.any():
            return
        self._accumulate({name: a[ok] for name, a in batch.items()}, layout, separator_id)

    def _accumulate(self, b: Dict[str, np.ndarray], layout: str, separator_id: Optional[int] = None) -> None:
        ids, mask = b["input_ids"], b["input_mask"]
        n, seq = ids.shape
        self.valid += n
        self.layouts[layout] += n
        real = mask.sum(axis=1)
        self.len_hist = _grow_add(self.len_hist, np.bincount(real, minlength=seq + 1))
        masked = is_masked(layout)
        if masked:
            pos, mids = b["masked_lm_positions"], b["masked_lm_ids"]
            prefix = pos != 0
            self.lengths_seen[(seq, pos.shape[1])] += n
            self.pred_hist = _grow_add(self.pred_hist, np.bincount(prefix.sum(axis=1), minlength=pos.shape[1] + 1))
        else:
            self.lengths_seen[(seq, None)] += n
        if is_paired(layout):
            self.labels[layout] += np.bincount(b["next_sentence_labels"][:, 0], minlength=2)[:2]
        if self.vocab is None:
            return
        v = self.vocab
        orig_ids = ids
        if masked:
            rows = np.broadcast_to(np.arange(n)[:, None], pos.shape)
            current = ids[rows[prefix], pos[prefix]]
            original = mids[prefix]
            is_mask = current == v.mask
            kept = ~is_mask & (current == original)
            self.composition += [int(is_mask.sum()), int(kept.sum()), int((~is_mask & ~kept).sum())]
            orig_ids = ids.copy()
            orig_ids[rows[prefix], pos[prefix]] = original
        run = mask == 1
        specials = [v.pad, v.cls, v.sep, v.mask]
        if not is_paired(layout) and separator_id is not None and separator_id != v.unk:
            specials.append(separator_id)
        special = np.isin(orig_ids, specials)
        self.real_tokens += int((run & ~special).sum())
        self.unk_tokens += int((run & (orig_ids == v.unk)).sum())


def _hist_summary(hist: np.ndarray) -> Dict[str, Any]:
    total = int(hist.sum())
    values = np.flatnonzero(hist)
    if total == 0:
        return {"histogram": hist.tolist(), "count": 0, "min": None, "max": None, "mean": None}
    mean = float((np.arange(len(hist)) * hist).sum() / total)
    return {
        "histogram": hist.tolist(),
        "count": total,
        "min": int(values[0]),
        "max": int(values[-1]),
        "mean": round(mean, 4),
    }


def _frac(a: int, b: int) -> Optional[float]:
    return round(a / b, 6) if b else None


def _stream_file(path: str, acc: Accumulator, group: Group) -> Tuple[int, Optional[str]]:
    """Read every record of ``path`` into ``acc``; returns (records, corrupt-frame message or None)."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    count = 0
    pending: List[Tuple[str, Any]] = []
    corrupt = None
    with handle:
        try:
            for data in iter_records(handle):
                where = f"{path} record {count}"
                count += 1
                acc.records += 1
                try:
                    pending.append((where, parse_example(data)))
                except RecordFormatError as exc:
                    pending.append((where, str(exc)))  # reported in order with the batch
                if len(pending) >= BATCH_SIZE:
                    acc.add_batch(pending, group)
                    pending = []
        except RecordFormatError as exc:
            corrupt = str(exc)
        except OSError as exc:
            raise InspectError(f"{path}: read error ({exc.strerror or exc})") from None
    if pending:
        acc.add_batch(pending, group)
    if corrupt:
        acc.add_bad(f"{path} after record {count - 1}" if count else path, [f"unreadable: {corrupt}"])
    return count, corrupt


def _check_manifest(group: Group, problems: List[str], warnings: List[str]) -> Dict[str, Any]:
    m = group.manifest
    assert m is not None
    d = m.data
    report: Dict[str, Any] = {"path": m.path, "files_checked": sorted(group.counts, key=_natural_key)}
    name = m.path

    def bad(msg: str) -> None:
        problems.append(f"{name}: {msg}")

    layout = group.layout
    if group.layout_problem:
        bad(group.layout_problem)
    seq, pred = m.int_field("max_seq_length"), m.int_field("max_predictions_per_seq")
    needs_pred = layout is None or is_masked(layout)
    for key, value in (("max_seq_length", seq), ("max_predictions_per_seq", pred)):
        if (value is None or value < 1) and (key == "max_seq_length" or needs_pred):
            bad(f"{key} is missing or not a positive integer ({d.get(key)!r})")
    if seq and group.observed_seq is not None and group.observed_seq != seq:
        bad(f"max_seq_length is {seq} but the records' input_ids have {group.observed_seq} values")
    if pred and is_masked(layout) and group.observed_pred is not None and group.observed_pred != pred:
        bad(
            f"max_predictions_per_seq is {pred} but the records' masked_lm_positions have "
            f"{group.observed_pred} values"
        )
    if layout is not None:
        objective = d.get("objective")
        if isinstance(objective, str) and objective != OBJECTIVE_OF_LAYOUT[layout]:
            bad(f"objective is {objective!r} but the records are {layout} records ({OBJECTIVE_OF_LAYOUT[layout]!r})")
        by_flags = _flag_layout(d)
        if by_flags is not None and by_flags != layout:
            bad(
                f"the run settings (mlm_only={d.get('mlm_only')}, sentence_order_prediction="
                f"{d.get('sentence_order_prediction')}, disable_masking={d.get('disable_masking')}) write "
                f"{by_flags} records, but the records are {layout} records ({group.layout_from})"
            )
    schema = d.get("schema")
    if isinstance(schema, dict) and seq and (pred or not needs_pred):
        if layout is None:
            try:
                schema_from_names(schema)
            except ValueError as exc:
                bad(f"schema: {exc}")
        elif sorted(schema) != sorted(layout_names(layout)):
            want_names = sorted(layout_names(layout))
            bad(f"schema lists features {sorted(schema)}, expected the {layout} features {want_names}")
        else:
            for spec in layout_specs(layout):
                entry = schema[spec.name] if isinstance(schema[spec.name], dict) else {}
                want = feature_length(spec, seq, pred or 0)
                if entry.get("dtype") != spec.dtype or entry.get("length") != want:
                    bad(
                        f"schema entry {spec.name} is {entry.get('dtype')}[{entry.get('length')}], "
                        f"expected {spec.dtype}[{want}]"
                    )

    per_shard = d.get("instances_per_shard")
    n_examples = m.int_field("n_examples")
    if not isinstance(per_shard, dict):
        bad("instances_per_shard is missing")
        per_shard = {}
    for base, count in sorted(group.counts.items(), key=lambda kv: _natural_key(kv[0])):
        if base not in per_shard:
            warnings.append(f"{os.path.join(group.directory, base)} is not listed in {name}")
        elif per_shard[base] != count:
            bad(f"instances_per_shard says {base} holds {per_shard[base]} records, it holds {count}")
    listed = set(per_shard)
    inspected = listed & set(group.counts)
    if n_examples is None:
        bad(f"n_examples is missing or not an integer ({d.get('n_examples')!r})")
    elif per_shard and all(isinstance(v, int) for v in per_shard.values()) and sum(per_shard.values()) != n_examples:
        bad(f"n_examples is {n_examples} but instances_per_shard sums to {sum(per_shard.values())}")
    missing = sorted(listed - inspected, key=_natural_key)
    if not missing and n_examples is not None:
        total = sum(group.counts[b] for b in inspected)
        if total != n_examples:
            bad(f"n_examples is {n_examples}, the {len(inspected)} shard(s) hold {total} records")
        report["n_examples_checked"] = True
    else:
        report["n_examples_checked"] = False
        if group.dir_given:
            for base in missing:
                bad(f"lists {base}, which is missing from {group.directory}")
        elif missing:
            warnings.append(
                f"{name}: n_examples not checked ({len(inspected)} of {len(listed)} listed shards inspected)"
            )
    compression = d.get("compression")
    if compression in ("none", "gzip"):
        for base, found in sorted(group.compressions.items()):
            if found != compression:
                bad(f"compression is {compression!r} but {base} is {found!r}")
    return report


def inspect_stats(
    files: Sequence[InputFile], vocab: Optional[VocabInfo], dirs_given: Sequence[str] = ()
) -> Dict[str, Any]:
    """Stream every file once; return the JSON-able report (``ok`` False when anything is bad)."""
    acc = Accumulator(vocab)
    groups: Dict[str, Group] = {}
    file_reports = []
    problems: List[str] = []
    warnings: List[str] = []
    for f in files:
        directory = os.path.realpath(os.path.dirname(os.path.abspath(f.path)))
        group = groups.get(directory)
        if group is None:
            group = Group.for_directory(directory, dir_given=directory in dirs_given)
            groups[directory] = group
        compression = detect_compression(f.path)
        before = acc.bad
        count, corrupt = _stream_file(f.path, acc, group)
        base = os.path.basename(f.path)
        group.counts[base] = count
        group.compressions[base] = compression
        file_reports.append(
            {"path": f.path, "records": count, "bad_records": acc.bad - before, "compression": compression,
             "corrupt": corrupt}
        )

    manifests = [_check_manifest(g, problems, warnings) for g in groups.values() if g.manifest is not None]
    if vocab is not None:
        for g in groups.values():
            want = g.manifest.data.get("vocab_sha256") if g.manifest else None
            if isinstance(want, str) and want != _sha256(vocab.path):
                warnings.append(
                    f"{vocab.path} is not the vocabulary recorded in {g.manifest.path} (sha256 differs): "
                    "decoded tokens and [UNK]/[MASK] statistics may be wrong"
                )

    lengths = [
        {
            "directory": g.directory,
            "record_schema": g.layout,
            "record_schema_from": g.layout_from,
            "max_seq_length": g.seq,
            "max_predictions_per_seq": g.pred if g.layout is None or is_masked(g.layout) else None,
            "from": g.lengths_from,
        }
        for g in groups.values()
    ]
    layouts = {g.layout for g in groups.values() if g.layout is not None}
    any_masked = any(is_masked(x) for x in layouts)
    masked = int(acc.composition.sum())
    report: Dict[str, Any] = {
        "files": file_reports,
        "record_schema": (next(iter(layouts)) if len(layouts) == 1 else "mixed") if layouts else None,
        "instances": acc.records,
        "valid_instances": acc.valid,
        "bad_records": acc.bad,
        "bad_reasons": acc.reasons,
        "bad_reason_counts": dict(acc.reason_counts.most_common()),
        "lengths": lengths,
        "real_length": _hist_summary(acc.len_hist),
        "masked_per_instance": _hist_summary(acc.pred_hist) if any_masked else None,
        "nsp": None,
        "sop": None,
        "mask_composition": None,
        "unk": None,
        "vocab_file": vocab.path if vocab else None,
        "manifests": manifests,
        "manifest_problems": problems,
        "warnings": warnings,
    }
    if "nsp" in layouts:
        nsp = acc.labels["nsp"]
        report["nsp"] = {
            "is_next": int(nsp[0]),
            "random_next": int(nsp[1]),
            "random_fraction": _frac(int(nsp[1]), int(nsp.sum())),
        }
    if "sop" in layouts:
        sop = acc.labels["sop"]
        report["sop"] = {
            "in_order": int(sop[0]),
            "swapped": int(sop[1]),
            "swapped_fraction": _frac(int(sop[1]), int(sop.sum())),
        }
    if vocab is not None:
        if any_masked:
            report["mask_composition"] = {
                "predictions": masked,
                "mask": int(acc.composition[0]),
                "kept": int(acc.composition[1]),
                "random": int(acc.composition[2]),
                "mask_fraction": _frac(int(acc.composition[0]), masked),
                "kept_fraction": _frac(int(acc.composition[1]), masked),
                "random_fraction": _frac(int(acc.composition[2]), masked),
            }
        report["unk"] = {
            "tokens": acc.real_tokens,
            "unk": acc.unk_tokens,
            "rate": _frac(acc.unk_tokens, acc.real_tokens),
        }
    report["ok"] = acc.bad == 0 and not problems
    return report


# --------------------------------------------------------------------------------------------
# Text output
# --------------------------------------------------------------------------------------------


def _text_histogram(hist: np.ndarray, max_rows: int = 16, width: int = 40) -> List[str]:
    values = np.flatnonzero(hist)
    if len(values) == 0:
        return ["  (no data)"]
    lo, hi = int(values[0]), int(values[-1])
    step = max(1, math.ceil((hi - lo + 1) / max_rows))
    rows = []
    for start in range(lo, hi + 1, step):
        stop = min(start + step - 1, hi)
        rows.append((f"{start}" if start == stop else f"{start}-{stop}", int(hist[start : stop + 1].sum())))
    top = max(c for _, c in rows)
    label_w = max(len(label) for label, _ in rows)
    return [f"  {label:>{label_w}} | {'#' * max(1 if c else 0, round(width * c / top)):<{width}} {c}" for label, c in rows]


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def format_stats(report: Dict[str, Any]) -> str:
    out: List[str] = []
    files = report["files"]
    comp = Counter(f["compression"] for f in files)
    out.append(
        f"files: {len(files)} ({', '.join(f'{v} {k}' for k, v in sorted(comp.items()))})"
    )
    out.append(
        f"instances: {report['instances']} ({report['valid_instances']} valid, {report['bad_records']} bad)"
    )
    for entry in report["lengths"]:
        layout = entry.get("record_schema")
        if layout is not None:
            out.append(f"record schema: {layout} (from {entry.get('record_schema_from') or 'nowhere'})")
        lengths = f"max_seq_length {entry['max_seq_length']}"
        if layout is None or is_masked(layout):
            lengths += f", max_predictions_per_seq {entry['max_predictions_per_seq']}"
        out.append(f"{lengths} (from {entry['from'] or 'nowhere: no record readable'})")
    rl = report["real_length"]
    out.append(f"real length (tokens incl. [CLS]/[SEP]): min {rl['min']}, mean {rl['mean']}, max {rl['max']}")
    out += _text_histogram(np.asarray(rl["histogram"]))
    mp = report["masked_per_instance"]
    if mp is not None:
        out.append(f"masked positions per instance: min {mp['min']}, mean {mp['mean']}, max {mp['max']}")
        out += _text_histogram(np.asarray(mp["histogram"]))
    nsp = report.get("nsp")
    if nsp is not None:
        out.append(
            f"next sentence labels: {nsp['is_next']} is-next (0), {nsp['random_next']} random (1); "
            f"random fraction {_pct(nsp['random_fraction'])}"
        )
    sop = report.get("sop")
    if sop is not None:
        out.append(
            f"sentence order labels: {sop['in_order']} in order (0), {sop['swapped']} swapped (1); "
            f"swapped fraction {_pct(sop['swapped_fraction'])}"
        )
    mc = report["mask_composition"]
    if mp is None:
        if report.get("record_schema") is not None:
            out.append("mask composition: n/a (unmasked records: masks are drawn in the reader)")
    elif mc is None:
        out.append("mask composition: n/a (no vocabulary; pass --vocab_file)")
    else:
        out.append(
            f"mask composition over {mc['predictions']} predictions: [MASK] {_pct(mc['mask_fraction'])}, "
            f"kept {_pct(mc['kept_fraction'])}, random {_pct(mc['random_fraction'])}"
        )
    unk = report["unk"]
    if unk is None:
        out.append("[UNK] rate: n/a (no vocabulary; pass --vocab_file)")
    else:
        out.append(f"[UNK] rate: {_pct(unk['rate'])} ({unk['unk']} of {unk['tokens']} real non-special tokens)")
    for m in report["manifests"]:
        out.append(f"checked against {m['path']}" + ("" if m["n_examples_checked"] else " (n_examples not checked)"))
    for w in report["warnings"]:
        out.append(f"warning: {w}")
    for p in report["manifest_problems"]:
        out.append(f"MISMATCH: {p}")
    if report["bad_records"]:
        out.append(f"BAD RECORDS: {report['bad_records']}")
        for reason, count in report["bad_reason_counts"].items():
            out.append(f"  {count} x {reason}")
        out.append("  first ones:")
        out += [f"    {r}" for r in report["bad_reasons"]]
    out.append("OK" if report["ok"] else "FAILED")
    return "\n".join(out)


def _predicted_originals(example: Dict[str, Any]) -> Dict[int, int]:
    if "masked_lm_positions" not in example:
        return {}
    return {
        int(p): int(m)
        for p, m, w in zip(example["masked_lm_positions"], example["masked_lm_ids"], example["masked_lm_weights"])
        if w != 0
    }


def _real_tokens(example: Dict[str, Any], vocab: VocabInfo) -> List[Tuple[int, str]]:
    """``(position, text)`` of every token inside ``input_mask``, predictions as ``token{original}``."""
    ids = np.asarray(example["input_ids"])
    mask = np.asarray(example["input_mask"])
    original = _predicted_originals(example)
    out = []
    for i in range(len(ids)):
        if mask[i] != 1:
            continue
        token = vocab.token(int(ids[i]))
        if i in original:
            token += "{" + vocab.token(original[i]) + "}"
        out.append((i, token))
    return out


def decode_instance(example: Dict[str, Any], vocab: VocabInfo) -> Tuple[str, str]:
    """Segments A and B of one NSP/SOP record as WordPiece text, predictions written ``token{original}``.

    Tokens are those inside ``input_mask``; ``[CLS]`` and the ``[SEP]``s are shown as stored.
    A slot with a non-zero weight is a prediction.
    """
    seg = np.asarray(example["segment_ids"])
    a: List[str] = []
    b: List[str] = []
    for i, token in _real_tokens(example, vocab):
        (b if seg[i] == 1 else a).append(token)
    return " ".join(a), " ".join(b)


def decode_sequence(example: Dict[str, Any], vocab: VocabInfo) -> str:
    """The one token sequence of an MLM-only or unmasked record (``[CLS] window [SEP]``, any
    document separators as stored), predictions written ``token{original}``."""
    return " ".join(token for _, token in _real_tokens(example, vocab))


def _label_text(label: Any, layout: str = "nsp") -> str:
    if layout == "sop":
        texts = {
            0: "0 = A and B in document order",
            1: "1 = A and B swapped (B precedes A in the document)",
        }
    else:
        texts = {
            0: "0 = B is the true next segment",
            1: "1 = B is a random segment",
        }
    return texts.get(label, f"{label} (invalid: must be 0 or 1)")


def _print_one(
    where: str,
    example: Dict[str, Any],
    seq: Optional[int],
    pred: Optional[int],
    vocab: VocabInfo,
    out,
    layout: str = "nsp",
    separator: Optional[Separator] = None,
) -> int:
    """Print one decoded record (and what is wrong with it); returns 1 if it is bad, else 0."""
    arrays = {k: v for k, v in example.items() if isinstance(v, np.ndarray)}
    ids = arrays.get("input_ids")
    positions = arrays.get("masked_lm_positions")
    s = seq or (len(ids) if ids is not None else 0)
    p = pred or (len(positions) if positions is not None else 0)
    problem = structure_problem(example, s, p, layout)
    if problem:
        messages = [problem]
    else:
        batch = {k: example[k][None, :] for k in layout_names(layout)}
        separator_id = (separator or Separator()).id(vocab)
        messages = [msg for rows, msg in check_records(batch, vocab, layout, separator_id) if rows[0]]
    core = ("input_ids", "input_mask")
    decodable = all(k in arrays for k in core) and len({len(arrays[k]) for k in core}) == 1
    split = (
        decodable
        and is_paired(layout)
        and "segment_ids" in arrays
        and len(arrays["segment_ids"]) == len(arrays["input_ids"])
    )
    predictions = decodable and all(
        k in arrays and len(arrays[k]) == len(arrays["masked_lm_positions"])
        for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
    )
    header = where
    if decodable:
        real = int((arrays["input_mask"] == 1).sum())
        header += f": {real}/{len(arrays['input_ids'])} tokens"
        if is_masked(layout):
            weights = arrays.get("masked_lm_weights", np.zeros(0))
            header += f", {int((weights != 0).sum())} predictions"
        else:
            header += ", unmasked"
        if is_paired(layout):
            labels = arrays.get("next_sentence_labels")
            label = int(labels[0]) if labels is not None and len(labels) == 1 else None
            header += f", {'SOP' if layout == 'sop' else 'NSP'} label {_label_text(label, layout)}"
    print("\n" + header, file=out)
    if decodable:
        shown = {k: arrays[k] for k in core}
        if predictions:
            shown.update({k: arrays[k] for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")})
        if split:
            shown["segment_ids"] = arrays["segment_ids"]
            a_text, b_text = decode_instance(shown, vocab)
            print(f"  A: {a_text}", file=out)
            print(f"  B: {b_text}", file=out)
        else:
            print(f"  tokens: {decode_sequence(shown, vocab)}", file=out)
    if messages:
        print(f"  BAD: {'; '.join(messages)}", file=out)
        return 1
    return 0


PREDICTION_LEGEND = "# token{original} marks a prediction: [MASK]{x} masked, y{x} replaced at random, x{x} kept"


def print_instances(files: Sequence[InputFile], vocab: VocabInfo, n: int, out=None) -> int:
    """Print the first ``n`` records; returns the number of bad records met."""
    out = out if out is not None else sys.stdout
    shown = bad = 0
    legend = False
    groups: Dict[str, Group] = {}
    for f in files:
        if shown >= n:
            break
        try:
            handle = open(f.path, "rb")
        except OSError as exc:
            raise InspectError(f"{f.path}: cannot be read ({exc.strerror or exc})") from None
        directory = os.path.realpath(os.path.dirname(os.path.abspath(f.path)))
        group = groups.get(directory)
        if group is None:
            group = groups[directory] = Group.for_directory(directory)
        seq = group.manifest.int_field("max_seq_length") if group.manifest else None
        pred = group.manifest.int_field("max_predictions_per_seq") if group.manifest else None
        with handle:
            index = 0
            try:
                for data in iter_records(handle):
                    if shown >= n:
                        break
                    where = f"{f.path} record {index}"
                    index += 1
                    shown += 1
                    try:
                        example = parse_example(data)
                    except RecordFormatError as exc:
                        print(f"\n{where}: BAD: {exc}", file=out)
                        bad += 1
                        continue
                    if group.layout is None:
                        group.layout = layout_from_names(example)
                        group.layout_from = _names_source(group.layout, f.path)
                    if not legend and is_masked(group.layout):
                        print(PREDICTION_LEGEND, file=out)
                        legend = True
                    bad += _print_one(where, example, seq, pred, vocab, out, group.layout, group.separator)
            except RecordFormatError as exc:
                print(f"\n{f.path}: BAD: {exc}", file=out)
                bad += 1
    if shown == 0 and n > 0:
        print("(no records)", file=out)
    return bad


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------


def _import_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InspectError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None
    return plt


def write_plot(report: Dict[str, Any], path: str, plt) -> None:
    panels = [("real_length", "real length per instance", "tokens incl. [CLS]/[SEP]")]
    if report.get("masked_per_instance") is not None:
        panels.append(("masked_per_instance", "masked positions per instance", "predictions"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (key, title, xlabel) in zip(axes[0], panels):
        hist = np.asarray(report[key]["histogram"])
        ax.bar(np.arange(len(hist)), hist, width=1.0, color="#4c72b0")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("instances")
    caption = f"{report['instances']} instances"
    if report.get("record_schema"):
        caption += f" ({report['record_schema']})"
    if report.get("nsp"):
        caption += f"; NSP random {_pct(report['nsp']['random_fraction'])}"
    if report.get("sop"):
        caption += f"; SOP swapped {_pct(report['sop']['swapped_fraction'])}"
    mc = report["mask_composition"]
    if mc:
        caption += (
            f"; [MASK] {_pct(mc['mask_fraction'])} kept {_pct(mc['kept_fraction'])} "
            f"random {_pct(mc['random_fraction'])}"
        )
    if report["unk"]:
        caption += f"; [UNK] {_pct(report['unk']['rate'])}"
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise InspectError(f"--plot {path}: cannot be written ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Print BERT pretraining TFRecords (NSP, SOP, MLM-only or unmasked layout) decoded to WordPiece "
            "text, or (--stats) check every record against its schema and data_params.json and report "
            "length/masking/label statistics. "
            "Exit status: 0 ok, 1 bad records or manifest mismatch, 2 usage or I/O error."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a .tfrecords file, a glob, or an output directory")
    parser.add_argument(
        "--vocab_file", help="vocab.txt to decode ids with (default: vocab_file in data_params.json beside the files)"
    )
    parser.add_argument("-n", type=int, default=3, help="instances to print without --stats (default 3)")
    parser.add_argument("--stats", action="store_true", help="read every record: statistics and schema checks")
    parser.add_argument("--json", metavar="OUT", help="write the --stats report as JSON to OUT ('-' for stdout); implies --stats")
    parser.add_argument("--plot", metavar="OUT.png", help="length and masking histograms as a PNG (needs matplotlib); implies --stats")
    return parser


def _choose_vocab(args: argparse.Namespace, files: Sequence[InputFile], required: bool) -> Optional[VocabInfo]:
    if args.vocab_file:
        return load_vocab_info(args.vocab_file)
    manifest = load_manifest(os.path.dirname(os.path.abspath(files[0].path)))
    path = _manifest_vocab_path(manifest) if manifest else None
    if path is None:
        if required:
            raise InspectError(f"no vocabulary: pass --vocab_file (no {MANIFEST_NAME} naming one beside {files[0].path})")
        return None
    if not os.path.isfile(path):
        message = f"vocab_file {path} named in {manifest.path} does not exist; pass --vocab_file"
        if required:
            raise InspectError(message)
        print(f"{PROG}: warning: {message}", file=sys.stderr)
        return None
    return load_vocab_info(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stats = bool(args.stats or args.json or args.plot)
    try:
        if args.n < 0:
            raise InspectError(f"-n must be >= 0, got {args.n}")
        plt = _import_pyplot() if args.plot else None
        files, dirs = resolve_inputs(args.paths)
        vocab = _choose_vocab(args, files, required=not stats)
        if not stats:
            assert vocab is not None
            manifest = load_manifest(os.path.dirname(os.path.abspath(files[0].path)))
            want = manifest.data.get("vocab_sha256") if manifest else None
            if isinstance(want, str) and want != _sha256(vocab.path):
                print(
                    f"{PROG}: warning: {vocab.path} is not the vocabulary recorded in {manifest.path} "
                    "(sha256 differs): the decoded text may be wrong",
                    file=sys.stderr,
                )
            bad = print_instances(files, vocab, args.n)
            return 1 if bad else 0
        report = inspect_stats(files, vocab, dirs)
        if args.json != "-":
            print(format_stats(report))
        if args.json:
            text = json.dumps(report, indent=1) + "\n"
            if args.json == "-":
                sys.stdout.write(text)
            else:
                try:
                    with open(args.json, "w", encoding="utf-8") as handle:
                        handle.write(text)
                except OSError as exc:
                    raise InspectError(f"--json {args.json}: cannot be written ({exc.strerror or exc})") from None
        if plt is not None:
            write_plot(report, args.plot, plt)
        return 0 if report["ok"] else 1
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
