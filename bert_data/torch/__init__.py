"""Train in PyTorch on the records bert_data writes: ``pip install 'bert_data[torch]'``.

* :class:`PretrainingDataset` (:mod:`bert_data.torch.dataset`): an output directory (or files,
  globs) as a ``torch.utils.data.IterableDataset`` of Hugging Face BERT inputs (``input_ids``,
  ``attention_mask``, ``token_type_ids``, ``labels``, ``next_sentence_label``), for every layout
  bert_data writes (NSP, SOP, MLM-only, and unmasked records masked here by the writer's rules);
  one pass per epoch over any number of DataLoader workers and distributed ranks, seeded
  shuffling per epoch, resumable mid-epoch;
* :func:`collate` (:mod:`bert_data.torch.tensors`): stacks single records into a batch trimmed to
  its longest real row;
* :class:`DynamicMaskingOptions`: the masking settings, shared with the tf.data reader;
* packed rows (``--packing``) give ``position_ids``, ``sequence_ids`` (each token's instance) and
  per-instance ``next_sentence_positions``/``next_sentence_labels`` besides;
  :func:`packed_attention_mask` turns ``sequence_ids`` into the block-diagonal 4-D mask
  (``docs/packing.md``, "PyTorch").

Records are read by bert_data's own TFRecord decoder (:mod:`bert_data.format.batch_decode`):
TensorFlow is never imported. Recipes (Hugging Face Trainer, a plain loop, DDP, resuming):
``docs/recipes.md``, "Train in PyTorch".
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "bert_data.torch needs PyTorch: pip install 'bert_data[torch]' (or install torch yourself)"
    ) from exc

from ..reader.dynamic_masking import DynamicMaskingOptions
from .dataset import PretrainingDataset
from .tensors import IGNORE_INDEX, collate, packed_attention_mask

__all__ = ["PretrainingDataset", "collate", "DynamicMaskingOptions", "IGNORE_INDEX", "packed_attention_mask"]
