"""``inspect_tfrecords``: look inside BERT pretraining TFRecords, without TensorFlow.

Two modes:

* default: print the first ``-n`` instances decoded back to WordPiece text, segment A and B on
  separate lines. Every masked-LM prediction position is written ``token{original}``: so
  ``[MASK]{cat}`` was masked, ``dog{cat}`` was replaced by a random token and ``cat{cat}`` was
  kept unchanged (but is still predicted).
* ``--stats`` (implied by ``--json`` and ``--plot``): stream every record once and report the
  instance count, histograms of real lengths and of predictions per instance, the NSP balance,
  the mask composition, the ``[UNK]`` rate, and a check of every record against the schema
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

from .errors import BertDataError, RecordFormatError
from .records import iter_records, masked_crc32c, parse_example
from .schema import FEATURE_NAMES, NSP_FEATURES, feature_length

PROG = "inspect_tfrecords"
MANIFEST_NAME = "data_params.json"  # same name as bert_data.writer.MANIFEST_NAME (not imported: keep startup light)
BATCH_SIZE = 1024
MAX_REASONS = 10

__all__ = ["main", "entry_point", "inspect_stats", "resolve_inputs", "decode_instance", "check_records"]


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
    from .tokenization import load_vocab  # raises VocabError (exit 2) for unusable files

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


def structure_problem(example: Dict[str, Any], seq: int, pred: int) -> Optional[str]:
    """First problem with the feature names, dtypes and lengths of one decoded record, or None."""
    missing = [name for name in FEATURE_NAMES if name not in example]
    if missing:
        return "missing feature(s) " + ", ".join(missing)
    extra = sorted(set(example) - set(FEATURE_NAMES))
    if extra:
        return "unexpected feature(s) " + ", ".join(repr(e) for e in extra)
    for spec in NSP_FEATURES:
        value = example[spec.name]
        kind, want = _kind(value), _WANT_KIND[spec.dtype]
        if kind != want:
            return f"{spec.name} is a {kind}, expected a {want} ({spec.dtype})"
        length = feature_length(spec, seq, pred)
        if len(value) != length:
            return f"{spec.name} has {len(value)} values, expected {length}"
    return None


def check_records(batch: Dict[str, np.ndarray], vocab: Optional[VocabInfo]) -> List[Tuple[np.ndarray, str]]:
    """Vectorised content checks of structurally valid records stacked as ``(n, k)`` arrays.

    Returns ``(bad_rows_bool, message)`` pairs, one per check. A prediction slot is a slot
    whose position is non-zero (position 0 is always ``[CLS]``, which is never masked).
    """
    ids = batch["input_ids"]
    mask = batch["input_mask"]
    seg = batch["segment_ids"]
    pos = batch["masked_lm_positions"]
    mids = batch["masked_lm_ids"]
    weights = batch["masked_lm_weights"]
    labels = batch["next_sentence_labels"][:, 0]
    n, seq = ids.shape
    npred = pos.shape[1]
    real = (mask == 1).sum(axis=1)
    run = np.arange(seq)[None, :] < real[:, None]
    len_a = ((seg == 0) & run).sum(axis=1)
    pred = pos != 0
    k = pred.sum(axis=1)
    prefix = np.arange(npred)[None, :] < k[:, None]
    safe_pos = np.clip(pos, 0, seq - 1)

    def any_row(bad: np.ndarray) -> np.ndarray:
        return bad.any(axis=1)

    checks: List[Tuple[np.ndarray, str]] = [
        (any_row(~np.isin(mask, (0, 1))), "input_mask has values other than 0 and 1"),
        (any_row((mask == 1) != run), "input_mask is not a run of 1s followed by 0s"),
        (real == 0, "input_mask is all 0s (no real tokens)"),
        (any_row(~np.isin(seg, (0, 1))), "segment_ids has values other than 0 and 1"),
        (any_row((seg != 0) & ~run), "segment_ids is not 0 on padding"),
        (any_row(np.diff(np.where(run, seg, 1), axis=1) < 0), "segment_ids is not 0s then 1s within input_mask"),
        ((real > 0) & (len_a == 0), "segment A is empty (segment_ids starts with 1)"),
        ((real > 0) & (len_a == real), "segment B is empty (no segment_ids 1 within input_mask)"),
        (any_row((ids != 0) & ~run), "input_ids is not 0 on padding"),
        (~np.isin(labels, (0, 1)), "next_sentence_labels is not 0 or 1"),
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
        checks.append((any_row(ids < 0) | any_row((mids < 0) & prefix), "negative token id"))
        return checks
    size = vocab.size
    last = np.clip(real - 1, 0, seq - 1)
    end_a = np.clip(len_a - 1, 0, seq - 1)
    r1 = np.arange(n)
    checks += [
        (any_row((ids < 0) | (ids >= size)), f"input_ids outside the vocabulary (0..{size - 1})"),
        (any_row(((mids < 0) | (mids >= size)) & prefix), f"masked_lm_ids outside the vocabulary (0..{size - 1})"),
        ((real > 0) & (ids[:, 0] != vocab.cls), "input_ids does not start with [CLS]"),
        ((real > 0) & (ids[r1, last] != vocab.sep), "the last real token is not [SEP]"),
        ((len_a > 0) & (ids[r1, end_a] != vocab.sep), "segment A does not end with [SEP]"),
        (
            any_row(((safe_pos == end_a[:, None]) | (safe_pos == last[:, None])) & prefix),
            "a masked position is a [SEP]",
        ),
    ]
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
    """Files of one directory: the manifest there, if any, and the expected lengths."""

    directory: str
    manifest: Optional[Manifest]
    seq: Optional[int] = None
    pred: Optional[int] = None
    lengths_from: str = ""
    observed: Optional[Tuple[int, int]] = None  # input_ids / masked_lm_positions lengths of the first record
    counts: Dict[str, int] = field(default_factory=dict)  # file basename -> records
    compressions: Dict[str, str] = field(default_factory=dict)
    dir_given: bool = False


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
        self.nsp = np.zeros(2, np.int64)
        self.composition = np.zeros(3, np.int64)  # [MASK], kept, random
        self.real_tokens = 0
        self.unk_tokens = 0
        self.lengths_seen: Counter = Counter()

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
            ids, positions = example.get("input_ids"), example.get("masked_lm_positions")
            if isinstance(ids, np.ndarray) and isinstance(positions, np.ndarray):
                if group.seq is None:
                    group.seq, group.pred = len(ids), len(positions)
                    group.lengths_from = f"first record of {where.rsplit(' record ', 1)[0]}"
                if group.observed is None:
                    group.observed = (len(ids), len(positions))
            if group.seq is None:
                problem: Optional[str] = structure_problem(example, 0, 0) or "missing feature(s)"
            else:
                problem = structure_problem(example, group.seq, group.pred)
            if problem:
                bad.append((index, where, [problem]))
            else:
                good.append((index, where, example))
        ok = np.zeros(0, bool)
        if good:
            batch = {name: np.stack([ex[name] for _, _, ex in good]) for name in FEATURE_NAMES}
            checks = check_records(batch, self.vocab)
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
        self._accumulate({name: a[ok] for name, a in batch.items()})

    def _accumulate(self, b: Dict[str, np.ndarray]) -> None:
        ids, mask, pos, mids = b["input_ids"], b["input_mask"], b["masked_lm_positions"], b["masked_lm_ids"]
        n, seq = ids.shape
        self.valid += n
        self.lengths_seen[(seq, pos.shape[1])] += n
        real = mask.sum(axis=1)
        prefix = pos != 0
        k = prefix.sum(axis=1)
        self.len_hist = _grow_add(self.len_hist, np.bincount(real, minlength=seq + 1))
        self.pred_hist = _grow_add(self.pred_hist, np.bincount(k, minlength=pos.shape[1] + 1))
        self.nsp += np.bincount(b["next_sentence_labels"][:, 0], minlength=2)[:2]
        if self.vocab is None:
            return
        v = self.vocab
        rows = np.broadcast_to(np.arange(n)[:, None], pos.shape)
        current = ids[rows[prefix], pos[prefix]]
        original = mids[prefix]
        is_mask = current == v.mask
        kept = ~is_mask & (current == original)
        self.composition += [int(is_mask.sum()), int(kept.sum()), int((~is_mask & ~kept).sum())]
        orig_ids = ids.copy()
        orig_ids[rows[prefix], pos[prefix]] = original
        run = mask == 1
        special = np.isin(orig_ids, (v.pad, v.cls, v.sep, v.mask))
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

    seq, pred = m.int_field("max_seq_length"), m.int_field("max_predictions_per_seq")
    for key, value in (("max_seq_length", seq), ("max_predictions_per_seq", pred)):
        if value is None or value < 1:
            bad(f"{key} is missing or not a positive integer ({d.get(key)!r})")
    if group.observed is not None and seq and pred:
        if group.observed[0] != seq:
            bad(f"max_seq_length is {seq} but the records' input_ids have {group.observed[0]} values")
        if group.observed[1] != pred:
            bad(
                f"max_predictions_per_seq is {pred} but the records' masked_lm_positions have "
                f"{group.observed[1]} values"
            )
    schema = d.get("schema")
    if isinstance(schema, dict) and seq and pred:
        if sorted(schema) != sorted(FEATURE_NAMES):
            bad(f"schema lists features {sorted(schema)}, expected {sorted(FEATURE_NAMES)}")
        else:
            for spec in NSP_FEATURES:
                entry = schema[spec.name] if isinstance(schema[spec.name], dict) else {}
                want = feature_length(spec, seq, pred)
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
            group = Group(directory, load_manifest(directory), dir_given=directory in dirs_given)
            if group.manifest is not None:
                seq = group.manifest.int_field("max_seq_length")
                pred = group.manifest.int_field("max_predictions_per_seq")
                if seq and pred and seq > 0 and pred > 0:
                    group.seq, group.pred = seq, pred
                    group.lengths_from = group.manifest.path
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
        {"directory": g.directory, "max_seq_length": g.seq, "max_predictions_per_seq": g.pred, "from": g.lengths_from}
        for g in groups.values()
    ]
    masked = int(acc.composition.sum())
    report: Dict[str, Any] = {
        "files": file_reports,
        "instances": acc.records,
        "valid_instances": acc.valid,
        "bad_records": acc.bad,
        "bad_reasons": acc.reasons,
        "bad_reason_counts": dict(acc.reason_counts.most_common()),
        "lengths": lengths,
        "real_length": _hist_summary(acc.len_hist),
        "masked_per_instance": _hist_summary(acc.pred_hist),
        "nsp": {
            "is_next": int(acc.nsp[0]),
            "random_next": int(acc.nsp[1]),
            "random_fraction": _frac(int(acc.nsp[1]), int(acc.nsp.sum())),
        },
        "mask_composition": None,
        "unk": None,
        "vocab_file": vocab.path if vocab else None,
        "manifests": manifests,
        "manifest_problems": problems,
        "warnings": warnings,
    }
    if vocab is not None:
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
        out.append(
            f"max_seq_length {entry['max_seq_length']}, max_predictions_per_seq {entry['max_predictions_per_seq']}"
            f" (from {entry['from'] or 'nowhere: no record readable'})"
        )
    rl = report["real_length"]
    out.append(f"real length (tokens incl. [CLS]/[SEP]): min {rl['min']}, mean {rl['mean']}, max {rl['max']}")
    out += _text_histogram(np.asarray(rl["histogram"]))
    mp = report["masked_per_instance"]
    out.append(f"masked positions per instance: min {mp['min']}, mean {mp['mean']}, max {mp['max']}")
    out += _text_histogram(np.asarray(mp["histogram"]))
    nsp = report["nsp"]
    out.append(
        f"next sentence labels: {nsp['is_next']} is-next (0), {nsp['random_next']} random (1); "
        f"random fraction {_pct(nsp['random_fraction'])}"
    )
    mc = report["mask_composition"]
    if mc is None:
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


def decode_instance(example: Dict[str, Any], vocab: VocabInfo) -> Tuple[str, str]:
    """Segments A and B of one record as WordPiece text, predictions written ``token{original}``.

    Tokens are those inside ``input_mask``; ``[CLS]`` and the ``[SEP]``s are shown as stored.
    A slot with a non-zero weight is a prediction.
    """
    ids = np.asarray(example["input_ids"])
    mask = np.asarray(example["input_mask"])
    seg = np.asarray(example["segment_ids"])
    original = {
        int(p): int(m)
        for p, m, w in zip(example["masked_lm_positions"], example["masked_lm_ids"], example["masked_lm_weights"])
        if w != 0
    }
    a: List[str] = []
    b: List[str] = []
    for i in range(len(ids)):
        if mask[i] != 1:
            continue
        token = vocab.token(int(ids[i]))
        if i in original:
            token += "{" + vocab.token(original[i]) + "}"
        (b if seg[i] == 1 else a).append(token)
    return " ".join(a), " ".join(b)


def _nsp_text(label: Any) -> str:
    return {
        0: "0 = B is the true next segment",
        1: "1 = B is a random segment",
    }.get(label, f"{label} (invalid: must be 0 or 1)")


def _print_one(
    where: str, example: Dict[str, Any], seq: Optional[int], pred: Optional[int], vocab: VocabInfo, out
) -> int:
    """Print one decoded record (and what is wrong with it); returns 1 if it is bad, else 0."""
    arrays = {k: v for k, v in example.items() if isinstance(v, np.ndarray)}
    ids = arrays.get("input_ids")
    positions = arrays.get("masked_lm_positions")
    s = seq or (len(ids) if ids is not None else 0)
    p = pred or (len(positions) if positions is not None else 0)
    problem = structure_problem(example, s, p)
    if problem:
        messages = [problem]
    else:
        batch = {k: example[k][None, :] for k in FEATURE_NAMES}
        messages = [msg for rows, msg in check_records(batch, vocab) if rows[0]]
    core = ("input_ids", "input_mask", "segment_ids")
    decodable = all(k in arrays for k in core) and len({len(arrays[k]) for k in core}) == 1
    header = where
    if decodable:
        real = int((arrays["input_mask"] == 1).sum())
        weights = arrays.get("masked_lm_weights", np.zeros(0))
        labels = arrays.get("next_sentence_labels")
        label = int(labels[0]) if labels is not None and len(labels) == 1 else None
        header += (
            f": {real}/{len(arrays['input_ids'])} tokens, {int((weights != 0).sum())} predictions, "
            f"NSP label {_nsp_text(label)}"
        )
    print("\n" + header, file=out)
    if decodable:
        for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
            arrays.setdefault(k, np.zeros(0))
        a_text, b_text = decode_instance(arrays, vocab)
        print(f"  A: {a_text}", file=out)
        print(f"  B: {b_text}", file=out)
    if messages:
        print(f"  BAD: {'; '.join(messages)}", file=out)
        return 1
    return 0


def print_instances(files: Sequence[InputFile], vocab: VocabInfo, n: int, out=None) -> int:
    """Print the first ``n`` records; returns the number of bad records met."""
    out = out if out is not None else sys.stdout
    print("# token{original} marks a prediction: [MASK]{x} masked, y{x} replaced at random, x{x} kept", file=out)
    shown = bad = 0
    for f in files:
        if shown >= n:
            break
        try:
            handle = open(f.path, "rb")
        except OSError as exc:
            raise InspectError(f"{f.path}: cannot be read ({exc.strerror or exc})") from None
        group = load_manifest(os.path.dirname(os.path.abspath(f.path)))
        seq = group.int_field("max_seq_length") if group else None
        pred = group.int_field("max_predictions_per_seq") if group else None
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
                    bad += _print_one(where, example, seq, pred, vocab, out)
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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title, xlabel in (
        (axes[0], "real_length", "real length per instance", "tokens incl. [CLS]/[SEP]"),
        (axes[1], "masked_per_instance", "masked positions per instance", "predictions"),
    ):
        hist = np.asarray(report[key]["histogram"])
        ax.bar(np.arange(len(hist)), hist, width=1.0, color="#4c72b0")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("instances")
    nsp = report["nsp"]
    caption = f"{report['instances']} instances; NSP random {_pct(nsp['random_fraction'])}"
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
            "Print BERT pretraining TFRecords decoded to WordPiece text, or (--stats) check every record "
            "against the schema and data_params.json and report length/masking/NSP statistics. "
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


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


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
        return _fail(str(exc), exc.exit_code)
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
