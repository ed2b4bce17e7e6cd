"""The collator of ``--output_format parquet`` and ``mds`` rows for Hugging Face's ``BertForPreTraining``.

A Parquet or MDS row is unpadded (:mod:`bert_data.format.columns`): ``input_ids``,
``token_type_ids``, ``masked_lm_positions``, ``masked_lm_ids``, ``next_sentence_label``. Whatever
reads them (``datasets.load_dataset("parquet", ...)``, ``streaming.StreamingDataset``, pyarrow)
hands a ``torch.utils.data.DataLoader`` rows as dicts of lists or arrays; :class:`PretrainingCollator`
turns a list of them into the batch ``BertForPreTraining`` takes::

    input_ids, attention_mask, token_type_ids   [batch, longest row]  int64 (0-padded)
    labels                                      [batch, longest row]  -100 except at masked positions
    next_sentence_label                         [batch]               NSP/SOP rows only

The rows are padded back into the TFRecord feature arrays (:func:`~bert_data.format.columns.from_columns`,
only as wide as the batch's longest row) and made into tensors by the same code as the TFRecord
reader's (:func:`bert_data.torch.tensors.hf_arrays`), so a batch from Parquet or MDS is the batch
``bert_data.torch.PretrainingDataset`` makes of the same records, trimmed the same way.
Unmasked rows (``--disable_masking --unmasked_format ids``: ``input_ids`` only) are masked by
``transformers.DataCollatorForLanguageModeling`` instead.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

import numpy as np

from ..errors import RecordFormatError
from ..format.columns import PRED_KIND, SEQ_KIND, from_columns, layout_of_columns, rows_to_batch


class PretrainingCollator:
    """``collate_fn`` of a DataLoader over Parquet / MDS rows (see the module docstring).
    ``pad_to_multiple_of`` rounds the batch's width up (tensor cores like multiples of 8)."""

    def __init__(self, pad_to_multiple_of: int = 1) -> None:
        self.pad_to_multiple_of = max(1, int(pad_to_multiple_of))

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        from ..torch.tensors import hf_arrays, to_tensors

        if not rows:
            raise RecordFormatError("PretrainingCollator: an empty batch")
        layout = layout_of_columns([k for k in rows[0] if not k.startswith("__")])
        if layout == "unmasked":
            raise RecordFormatError(
                "these rows are unmasked (--disable_masking): collate them with "
                "transformers.DataCollatorForLanguageModeling, which masks them"
            )
        batch = rows_to_batch(rows, layout)
        step = self.pad_to_multiple_of
        width = -(-max(int(batch.lengths[SEQ_KIND].max(initial=1)), 1) // step) * step
        predictions = max(int(batch.lengths[PRED_KIND].max(initial=1)), 1)
        arrays = from_columns(batch, layout, width, predictions)
        arrays["file"] = np.zeros(batch.rows, np.int64)  # (named in hf_arrays' errors)
        arrays["record"] = np.arange(batch.rows)
        return to_tensors(hf_arrays(arrays, ["this batch"], layout))
