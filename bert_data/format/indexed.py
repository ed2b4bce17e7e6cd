"""Megatron's indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``): what the token cache stores.

The layout is Megatron-LM's ``megatron/core/datasets/indexed_dataset.py`` (``_IndexWriter.write``
and ``_IndexReader.__init__``; megatron-core 0.16.1), so that
``megatron.core.datasets.indexed_dataset.IndexedDataset(PREFIX)`` reads a cache shard as it is:

* ``.bin``: every sequence's tokens back to back, in the index's dtype, nothing else;
* ``.idx``: the header ``b"MMIDIDX\\x00\\x00"``, version ``<Q`` 1, the dtype code ``<B`` (uint16 = 8,
  int32 = 4), the sequence count ``<Q``, the document count ``<Q`` (= documents + 1), then the
  sequence lengths (int32), the sequence pointers (int64 byte offsets into ``.bin``) and the
  document indices (int64: ``0`` and the end sequence of each document, so document ``d`` is
  sequences ``indices[d]`` to ``indices[d + 1] - 1``).

Here a sequence is a sentence and a document a document, as Megatron's own BERT preprocessing
(``tools/preprocess_data.py --split-sentences``) writes them; the bytes are those Megatron's
``IndexedDatasetBuilder.add_document`` + ``finalize`` write for the same documents
(tests/test_token_cache.py holds the two to it). This module is pure bytes: it
knows nothing of units, origins or counters (the token cache's sidecar, :mod:`bert_data.token_cache`).
"""

from __future__ import annotations

import struct
from typing import Tuple

import numpy as np

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}  # the two a vocabulary needs (Megatron's DType)
_CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
_FIXED = len(INDEX_HEADER) + 8 + 1 + 8 + 8  # header, version, dtype code, two counts: 34 bytes


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 for vocabularies under 65,536 ids (Megatron's ``DType.optimal_dtype``), else int32."""
    return np.dtype(np.uint16) if vocab_size < 65536 else np.dtype(np.int32)


def index_bytes(lengths: np.ndarray, document_indices: np.ndarray, dtype: np.dtype) -> bytes:
    """The ``.idx`` file of sentences of ``lengths`` tokens grouped by ``document_indices``."""
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    head = INDEX_HEADER + struct.pack("<Q", INDEX_VERSION) + struct.pack("<B", DTYPE_CODES[np.dtype(dtype)])
    head += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(document_indices))
    return head + lengths.tobytes() + pointers.tobytes() + np.asarray(document_indices, dtype=np.int64).tobytes()


def parse_index(data: bytes) -> Tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
    """(dtype, lengths, pointers, document indices) of an ``.idx`` file's bytes; ValueError (saying
    what is wrong) for anything that is not a complete version-1 index of uint16 or int32 tokens."""
    if len(data) < _FIXED or data[: len(INDEX_HEADER)] != INDEX_HEADER:
        raise ValueError("not a Megatron index (bad header)")
    version, code, sequences, documents = struct.unpack_from("<QBQQ", data, len(INDEX_HEADER))
    if version != INDEX_VERSION or code not in _CODE_DTYPES:
        raise ValueError(f"unsupported index (version {version}, dtype code {code})")
    expected = _FIXED + sequences * (4 + 8) + documents * 8
    if len(data) != expected:
        raise ValueError(f"{len(data)} bytes, expected {expected} (truncated or damaged)")
    lengths = np.frombuffer(data, dtype=np.int32, count=sequences, offset=_FIXED)
    pointers = np.frombuffer(data, dtype=np.int64, count=sequences, offset=_FIXED + 4 * sequences)
    indices = np.frombuffer(data, dtype=np.int64, count=documents, offset=_FIXED + 12 * sequences)
    return _CODE_DTYPES[code], lengths, pointers, indices


def check_consistent(dtype: np.dtype, lengths: np.ndarray, pointers: np.ndarray, indices: np.ndarray, bin_size: int) -> None:
    """ValueError unless the index describes a ``.bin`` of ``bin_size`` bytes exactly."""
    tokens = int(lengths.sum(dtype=np.int64)) if len(lengths) else 0
    if bin_size != tokens * dtype.itemsize:
        raise ValueError(f"{bin_size} bytes of tokens, the index says {tokens * dtype.itemsize} (truncated or damaged)")
    if len(indices) == 0 or indices[0] != 0 or indices[-1] != len(lengths) or np.any(np.diff(indices) < 0):
        raise ValueError("document indices do not cover the sentences (damaged)")
    if len(lengths) and (pointers[0] != 0 or np.any(np.diff(pointers) != lengths[:-1].astype(np.int64) * dtype.itemsize)):
        raise ValueError("sentence pointers do not follow the lengths (damaged)")
