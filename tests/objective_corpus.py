"""Helpers for the MLM-only / SOP / dynamic-masking tests: a corpus in which every token is
unique, so a token id says exactly where in which document it came from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"]
PAD, UNK, CLS, SEP, MASK, UNUSED0 = range(6)


@dataclass
class UniqueCorpus:
    metadata: Path
    vocab: Path
    docs: List[List[List[int]]]  # per document, per sentence (line), token ids

    def doc_ids(self, d: int) -> List[int]:
        return [t for sentence in self.docs[d] for t in sentence]

    def doc_of(self) -> Dict[int, int]:
        """token id -> document index."""
        return {t: d for d in range(len(self.docs)) for t in self.doc_ids(d)}


def write_unique_corpus(root: Path, sentences_per_doc: Sequence[int], words_per_sentence: Sequence[int]) -> UniqueCorpus:
    """One document per entry of ``sentences_per_doc``; sentence ``j`` of the whole corpus has
    ``words_per_sentence[j % len]`` words. Each line is a sentence (use --single_sentence_per_line);
    word ``w{i:05d}`` has id ``len(SPECIALS) + i``, increasing through the corpus."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "docs").mkdir(exist_ok=True)
    next_word = 0
    sentence_index = 0
    docs: List[List[List[int]]] = []
    lines_meta = []
    for d, n_sentences in enumerate(sentences_per_doc):
        doc: List[List[int]] = []
        lines = []
        for _ in range(n_sentences):
            n_words = words_per_sentence[sentence_index % len(words_per_sentence)]
            sentence_index += 1
            ids = list(range(next_word, next_word + n_words))
            next_word += n_words
            lines.append(" ".join(f"w{i:05d}" for i in ids))
            doc.append([len(SPECIALS) + i for i in ids])
        (root / "docs" / f"d{d:04d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        lines_meta.append(f"docs/d{d:04d}.txt")
        docs.append(doc)
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(lines_meta) + "\n", encoding="utf-8")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + [f"w{i:05d}" for i in range(next_word)]) + "\n", encoding="utf-8")
    return UniqueCorpus(metadata, vocab, docs)


def read_examples(out: Path) -> List[Dict[str, np.ndarray]]:
    """Every record of every shard (shard order, then file order), via tf.train.Example."""
    import tensorflow as tf

    examples = []
    for path in sorted(out.glob("*.tfrecords")):
        for raw in tf.data.TFRecordDataset(str(path)):
            example = tf.train.Example.FromString(raw.numpy())
            row = {}
            for key, feature in example.features.feature.items():
                kind = feature.WhichOneof("kind")
                row[key] = np.asarray(getattr(feature, kind).value)
            examples.append(row)
    return examples


def original_ids(example: Dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with the masked positions restored from masked_lm_ids."""
    ids = example["input_ids"].astype(np.int64).copy()
    if "masked_lm_positions" in example:
        used = example["masked_lm_weights"] > 0
        ids[example["masked_lm_positions"][used]] = example["masked_lm_ids"][used]
    return ids
