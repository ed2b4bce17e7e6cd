"""``inspect_tfrecords`` without ``--stats``: the first records decoded back to WordPiece text.

Segments A and B are printed on separate lines (one token line for MLM-only and unmasked
records). Every masked-LM prediction position is written ``token{original}``: so
``[MASK]{cat}`` was masked, ``dog{cat}`` was replaced by a random token and ``cat{cat}`` was
kept unchanged (but is still predicted). Each record printed is checked as ``--stats`` checks
it (:mod:`bert_data.format.checks`) and what is wrong with it is printed below it.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from ..errors import RecordFormatError
from ..format.checks import check_records, is_masked, is_packed_layout, is_paired, layout_names, structure_problem
from ..format.columns import layout_spec
from ..format.containers import container_for, rewritten_format_of
from ..format.example_wire import parse_example
from ..format.tfrecord import iter_records
from . import InspectError
from .inputs import Group, Groups, InputFile, VocabInfo, group_pack
from .report import plural

__all__ = ["PREDICTION_LEGEND", "decode_instance", "decode_sequence", "print_instances"]


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
    packed = "positions" in example  # packed rows (--packing): input_mask is the instance, 1..k
    out = []
    for i in range(len(ids)):
        if mask[i] != 1 and not (packed and mask[i] > 1):
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


def _problems(example: Dict[str, Any], group: Group, vocab: VocabInfo) -> List[str]:
    """What is wrong with one decoded record, as ``--stats`` would report it. The lengths are
    the manifest's, else the record's own (printing a record needs no agreement between files)."""
    layout = group.layout or "nsp"
    manifest = group.manifest
    seq = manifest.int_field("max_seq_length") if manifest else None
    pred = manifest.int_field("max_predictions_per_seq") if manifest else None
    ids, positions = example.get("input_ids"), example.get("masked_lm_positions")
    s = seq or (len(ids) if isinstance(ids, np.ndarray) else 0)
    p = pred or (len(positions) if isinstance(positions, np.ndarray) else 0)
    problem = structure_problem(example, s, p, layout)
    if problem:
        return [problem]
    batch = {k: example[k][None, :] for k in layout_names(layout)}
    separator_id = group.separator.id(vocab.tokens)
    return [msg for rows, msg in check_records(batch, vocab, layout, separator_id) if rows[0]]


def _header(where: str, arrays: Dict[str, np.ndarray], layout: str) -> str:
    """``PATH record I: real/length tokens, predictions, label``."""
    if is_packed_layout(layout):
        mask = np.asarray(arrays["input_mask"])
        header = where + f": {int((mask != 0).sum())}/{len(arrays['input_ids'])} tokens in {int(mask.max())} instances"
        labels = arrays.get("next_sentence_labels")
        if labels is not None:
            header += f", labels {[int(x) for x in np.asarray(labels)[: int(mask.max())]]}"
        weights = arrays.get("masked_lm_weights", np.zeros(0))
        return header + ", " + plural(int((weights != 0).sum()), "prediction")
    header = where + f": {int((arrays['input_mask'] == 1).sum())}/{len(arrays['input_ids'])} tokens"
    if is_masked(layout):
        weights = arrays.get("masked_lm_weights", np.zeros(0))
        header += ", " + plural(int((weights != 0).sum()), "prediction")
    else:
        header += ", unmasked"
    if is_paired(layout):
        labels = arrays.get("next_sentence_labels")
        label = int(labels[0]) if labels is not None and len(labels) == 1 else None
        header += f", {'SOP' if layout == 'sop' else 'NSP'} label {_label_text(label, layout)}"
    return header


def _print_one(where: str, example: Dict[str, Any], group: Group, vocab: VocabInfo, out: TextIO) -> int:
    """Print one decoded record (and what is wrong with it); returns 1 if it is bad, else 0.

    Prints what it can of a bad record too (that is when seeing it helps most): the header and
    the tokens whenever ``input_ids`` and ``input_mask`` are there and agree in length."""
    layout = group.layout or "nsp"
    messages = _problems(example, group, vocab)
    arrays = {k: v for k, v in example.items() if isinstance(v, np.ndarray)}
    core = ("input_ids", "input_mask")
    decodable = all(k in arrays for k in core) and len({len(arrays[k]) for k in core}) == 1
    print("\n" + (_header(where, arrays, layout) if decodable else where), file=out)
    if decodable:
        shown = {k: arrays[k] for k in core}
        prediction_keys = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
        if all(k in arrays and len(arrays[k]) == len(arrays["masked_lm_positions"]) for k in prediction_keys):
            shown.update({k: arrays[k] for k in prediction_keys})
        if is_paired(layout) and "segment_ids" in arrays and len(arrays["segment_ids"]) == len(arrays["input_ids"]):
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


def _examples(path: str, group: Group) -> Iterator[Tuple[str, Any]]:
    """``(where, record)`` of a file in order: a record is its decoded features, or the
    :class:`RecordFormatError` that decoding it raised. A Parquet / MDS file (``--output_format``)
    is read through its format's reader into the TFRecord decoding's arrays (its directory's
    manifest gives the layout and lengths)."""
    output_format = rewritten_format_of(path)
    if output_format is not None:
        if group.layout is None or group.seq is None:
            raise RecordFormatError(f"a {output_format} file is read with its directory's data_params.json (layout, lengths)")
        spec = layout_spec(group.layout, group.seq, group.pred or 0, group_pack(group))
        index = 0
        try:
            for arrays in container_for(output_format).read_feature_batches(path, spec):
                for i in range(len(arrays["input_ids"])):
                    yield f"{path} record {index}", {name: a[i] for name, a in arrays.items()}
                    index += 1
        except (OSError, ValueError, KeyError, IndexError, RuntimeError) as exc:
            raise RecordFormatError(f"not a readable {output_format} file ({type(exc).__name__}: {exc})") from None
        return
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with handle:
        for index, data in enumerate(iter_records(handle)):
            try:
                yield f"{path} record {index}", parse_example(data)
            except RecordFormatError as exc:
                yield f"{path} record {index}", exc


def print_instances(files: Sequence[InputFile], vocab: VocabInfo, n: int, out: Optional[TextIO] = None) -> int:
    """Print the first ``n`` records (to ``out``, default stdout), each checked as ``--stats``
    checks it; returns the number of bad records met."""
    out = out if out is not None else sys.stdout
    shown = bad = 0
    legend = False
    groups = Groups()
    for f in files:
        if shown >= n:
            break
        group = groups.of(f.path)
        try:
            for where, example in _examples(f.path, group):
                if shown >= n:
                    break
                shown += 1
                if isinstance(example, RecordFormatError):
                    print(f"\n{where}: BAD: {example}", file=out)
                    bad += 1
                    continue
                if not legend and is_masked(group.learn_layout(example, f.path)):
                    print(PREDICTION_LEGEND, file=out)
                    legend = True
                bad += _print_one(where, example, group, vocab, out)
        except RecordFormatError as exc:
            print(f"\n{f.path}: BAD: {exc}", file=out)
            bad += 1
    if shown == 0 and n > 0:
        print("(no records)", file=out)
    return bad
