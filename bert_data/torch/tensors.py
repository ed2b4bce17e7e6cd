"""Decoded rows -> the tensors Hugging Face BERT models take, and the collate function.

* ``input_ids``: the record's ids (with its masks applied), int64;
* ``attention_mask``: ``input_mask`` (1 on real tokens), int64;
* ``token_type_ids``: ``segment_ids``; zeros for MLM-only and unmasked records, int64;
* ``labels``: dense, -100 everywhere except the masked positions, which hold the original ids
  (``masked_lm_ids``). Only slots with ``masked_lm_weights`` > 0 make a label: the padding slots
  of ``masked_lm_positions`` point at position 0 (``[CLS]``) with weight 0 and must not label it;
* ``next_sentence_label``: ``next_sentence_labels[0]`` (NSP: 1 = B is random; SOP: 1 = swapped),
  NSP/SOP records only.

Packed rows (``--packing``, docs/packing.md: up to K instances a row) give, per row:

* ``input_ids``, ``token_type_ids`` (zeros for MLM-only rows) and ``labels`` as above, the labels
  of every instance of the row in the one dense row (each at its token);
* ``position_ids``: the ``positions`` feature (0 at each instance's ``[CLS]``): pass it to the model;
* ``sequence_ids``: each token's instance in the row, 1..k, 0 on padding (the ``input_mask`` on
  disk); what keeps the instances apart: :func:`packed_attention_mask` builds the block-diagonal
  4-D mask from it;
* ``attention_mask``: the 2-D 0/1 padding mask (``sequence_ids > 0``), the mask to trim by; a
  model fed only this mask lets the instances of a row attend to each other;
* ``next_sentence_positions`` (NSP/SOP rows, K slots): where each instance's ``[CLS]`` is, for
  the pooler and the NSP/SOP head (0 on empty slots); ``next_sentence_labels``: each
  instance's label, -100 on empty slots (``next_sentence_weights`` 0 on disk), so that
  ``cross_entropy(..., ignore_index=-100)`` over the K slots counts the instances only.

Every packed row is checked with the row invariants of :func:`bert_data.format.packed.row_checks`
(instances contiguous and in order, positions restarting at each ``[CLS]``, each prediction a
token of the instance its weight names, ...): a row that breaks one is an error naming it.

:func:`hf_arrays` checks what a dense label needs and the writer guarantees: weights are 0 or 1
(Hugging Face's loss has no per-position weight) and a weighted position lies inside the real
tokens. A record that breaks either is an error naming it, not a quietly different loss.

:class:`RecordView` is a single record as the dataset yields it (a mapping of name -> tensor);
:func:`collate` stacks records and trims every sequence feature of the batch to its
longest real row (``attention_mask`` sum): padding past that carries no label and no attention,
so the model computes less and sees the same thing.
"""

from __future__ import annotations

import collections.abc
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import RecordFormatError
from ..format.packed import is_packed, row_checks

__all__ = ["SEQUENCE_KEYS", "IGNORE_INDEX", "RecordView", "hf_arrays", "to_tensors", "trim", "collate",
           "packed_attention_mask"]

IGNORE_INDEX = -100  # what torch.nn.CrossEntropyLoss (and Hugging Face) leave out of the loss
SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels", "position_ids", "sequence_ids")


def _where(chunk: Mapping[str, np.ndarray], files: Sequence[str], row: int) -> str:
    return f"{files[int(chunk['file'][row])]}: record {int(chunk['record'][row])}"


def hf_arrays(chunk: Mapping[str, np.ndarray], files: Sequence[str], layout: str = "") -> Dict[str, np.ndarray]:
    """The Hugging Face features of a chunk of decoded (and, for unmasked records, masked) rows
    of ``layout`` (packed rows: :func:`packed_arrays`)."""
    if is_packed(layout):
        return packed_arrays(chunk, files, layout)
    input_mask = chunk["input_mask"]
    out = _common(chunk)
    out["attention_mask"] = input_mask.astype(np.int64)
    weights = chunk["masked_lm_weights"]
    used = weights != 0
    if not ((weights == 0) | (weights == 1)).all():
        row = int(np.flatnonzero(~((weights == 0) | (weights == 1)).all(axis=1))[0])
        raise RecordFormatError(f"{_where(chunk, files, row)}: masked_lm_weights other than 0 and 1 "
                                "(Hugging Face labels have no per-position weight)")
    rows, slots = np.nonzero(used)
    positions = chunk["masked_lm_positions"][rows, slots].astype(np.int64)
    real = input_mask.sum(axis=1)
    bad = (positions < 0) | (positions >= real[rows])
    if bad.any():
        row = int(rows[np.flatnonzero(bad)[0]])
        raise RecordFormatError(f"{_where(chunk, files, row)}: a masked_lm_position outside the real tokens "
                                f"(position {int(positions[np.flatnonzero(bad)[0]])}, {int(real[row])} real tokens)")
    out["labels"] = _dense_labels(chunk, rows, slots, positions)
    if "next_sentence_labels" in chunk:
        out["next_sentence_label"] = chunk["next_sentence_labels"][:, 0].astype(np.int64)
    return out


def _common(chunk: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``input_ids`` and ``token_type_ids`` (zeros without ``segment_ids``), int64."""
    input_ids = chunk["input_ids"]
    segments = chunk["segment_ids"].astype(np.int64) if "segment_ids" in chunk else np.zeros(input_ids.shape, np.int64)
    return {"input_ids": input_ids.astype(np.int64), "token_type_ids": segments}


def _dense_labels(chunk: Mapping[str, np.ndarray], rows: np.ndarray, slots: np.ndarray,
                  positions: np.ndarray) -> np.ndarray:
    """-100 everywhere but at ``(rows, positions)``, which get ``masked_lm_ids[rows, slots]``."""
    labels = np.full(chunk["input_ids"].shape, IGNORE_INDEX, np.int64)
    labels[rows, positions] = chunk["masked_lm_ids"][rows, slots]
    return labels


def packed_arrays(chunk: Mapping[str, np.ndarray], files: Sequence[str], layout: str) -> Dict[str, np.ndarray]:
    """The features of packed rows (the module docstring), every row checked first."""
    for bad, message in row_checks(chunk, layout):
        if bad.any():
            raise RecordFormatError(f"{_where(chunk, files, int(np.flatnonzero(bad)[0]))}: not a valid {layout} row: "
                                    f"{message} (a damaged record, or not a row bert_data wrote)")
    sequence_ids = chunk["input_mask"].astype(np.int64)
    out = _common(chunk)
    out.update(attention_mask=(sequence_ids > 0).astype(np.int64), sequence_ids=sequence_ids,
               position_ids=chunk["positions"].astype(np.int64))
    rows, slots = np.nonzero(chunk["masked_lm_weights"])
    out["labels"] = _dense_labels(chunk, rows, slots, chunk["masked_lm_positions"][rows, slots].astype(np.int64))
    if "next_sentence_labels" in chunk:
        used = chunk["next_sentence_weights"] > 0
        out["next_sentence_positions"] = chunk["next_sentence_positions"].astype(np.int64)
        out["next_sentence_labels"] = np.where(used, chunk["next_sentence_labels"], IGNORE_INDEX).astype(np.int64)
    return out


def packed_attention_mask(sequence_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[batch, L]`` ``sequence_ids`` of packed rows -> the ``[batch, 1, L, L]`` block-diagonal
    *additive* attention mask Hugging Face's ``BertModel`` takes as is: 0.0 where query and key
    tokens belong to the same instance, the most negative ``dtype`` value elsewhere and on
    padding (the rule of :func:`bert_data.reader.packed.packed_attention_mask_numpy`, on the
    tensor's device). With it, ``position_ids`` and the ``[CLS]`` of each instance at
    ``next_sentence_positions``, each instance of a row gets the outputs it would get alone
    (``tests/test_torch_packed.py`` checks the losses to 1e-5). Use the model's eager attention
    (``attn_implementation="eager"`` or ``"sdpa"``); kernels that take only a 2-D mask
    (flash attention) need ``cu_seqlens`` instead."""
    s = sequence_ids
    same = (s[:, :, None] == s[:, None, :]) & (s[:, :, None] > 0)
    blocked = torch.zeros(same.shape, dtype=dtype, device=s.device).masked_fill_(~same, torch.finfo(dtype).min)
    return blocked[:, None]


def trim(arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Every sequence feature cut to the batch's longest real row (copies: contiguous tensors)."""
    width = max(int(arrays["attention_mask"].sum(axis=1).max(initial=1)), 1)
    return {name: np.ascontiguousarray(values[:, :width]) if name in SEQUENCE_KEYS else values
            for name, values in arrays.items()}


def to_tensors(arrays: Mapping[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    return {name: torch.from_numpy(values) for name, values in arrays.items()}


class RecordView(collections.abc.Mapping):
    """One record of a decoded chunk, as a read-only mapping of feature name -> tensor (a view
    of the chunk's row, made when it is looked up: no tensor per record and feature is made
    unless asked for). What :class:`~bert_data.torch.PretrainingDataset` yields without a
    ``batch_size``; ``dict(record)`` is a plain dict of tensors. :func:`collate` batches
    consecutive records of a chunk by slicing the chunk, which is what makes single records
    nearly as fast to read as batches."""

    __slots__ = ("columns", "row")

    def __init__(self, columns: Mapping[str, torch.Tensor], row: int) -> None:
        self.columns = columns
        self.row = row

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.columns[name][self.row]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def __repr__(self) -> str:
        return f"RecordView({dict(self)!r})"


def _runs(records: Sequence[Any]) -> Optional[List[Tuple[Mapping[str, torch.Tensor], int, int]]]:
    """``(columns, first row, stop)`` of each run of consecutive rows of one chunk, or None when
    a record is not a :class:`RecordView`."""
    runs: List[Tuple[Mapping[str, torch.Tensor], int, int]] = []
    for record in records:
        if type(record) is not RecordView:
            return None
        if runs and runs[-1][0] is record.columns and runs[-1][2] == record.row:
            runs[-1] = (record.columns, runs[-1][1], record.row + 1)
        else:
            runs.append((record.columns, record.row, record.row + 1))
    return runs


def _stack(records: Sequence[Mapping[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    runs = _runs(records)
    if runs is None:
        return {name: torch.stack([record[name] for record in records]) for name in records[0]}
    names = list(runs[0][0])
    if len(runs) == 1:
        columns, start, stop = runs[0]
        return {name: columns[name][start:stop] for name in names}
    return {name: torch.cat([columns[name][start:stop] for columns, start, stop in runs]) for name in names}


def collate(records: Sequence[Mapping[str, torch.Tensor]], trim_padding: bool = True) -> Dict[str, torch.Tensor]:
    """Stack single records (what :class:`~bert_data.torch.PretrainingDataset` yields without a
    ``batch_size``, or any mappings of name -> tensor) into one batch, trimmed to its longest
    real row unless ``trim_padding`` is False. Labels are trimmed with the ids: every label lies
    inside a real row, which is checked (a label past the cut would be an error, never dropped)."""
    if not records:
        raise ValueError("collate() got an empty list of records")
    batch = _stack(records)
    if not trim_padding:
        return {name: value.contiguous() for name, value in batch.items()}
    width = max(int(batch["attention_mask"].sum(dim=1).max()), 1)
    if "labels" in batch and bool((batch["labels"][:, width:] != IGNORE_INDEX).any()):
        raise ValueError("a label lies in the padding of its record: the records are not what bert_data.torch yields")
    return {name: value[:, :width].contiguous() if name in SEQUENCE_KEYS else value.contiguous()
            for name, value in batch.items()}
