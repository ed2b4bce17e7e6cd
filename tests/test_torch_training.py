"""End to end in PyTorch: create_tfrecords -> bert_data.torch -> a tiny Hugging Face
``BertForPreTraining`` (masked LM + NSP) trains on CPU and its loss goes down.

The model sees exactly what the dataset yields (``input_ids``, ``attention_mask``,
``token_type_ids``, ``labels``, ``next_sentence_label``), so the loss can only fall this way when
ids, labels and masks are aligned. Also the unmasked layout through dynamic masking, with the
MLM-only model. Skipped when torch or transformers is not installed, except under CI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

try:
    import torch
    import transformers
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch/transformers are not installed (pip install 'bert_data[torch]')", allow_module_level=True)

from torch.utils.data import DataLoader  # noqa: E402

from conftest import base_args, write_corpus, write_vocab  # noqa: E402

from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.torch import DynamicMaskingOptions, PretrainingDataset  # noqa: E402

SEQ, PRED = 48, 7
STEPS = 60


def tiny_config(vocab: Path) -> "transformers.BertConfig":
    size = len(vocab.read_text(encoding="utf-8").splitlines())
    return transformers.BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2)


def train(model: torch.nn.Module, loader: DataLoader, dataset: PretrainingDataset) -> List[float]:
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    losses: List[float] = []
    epoch = 0
    while len(losses) < STEPS:
        dataset.set_epoch(epoch)
        for batch in loader:
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == STEPS:
                break
        epoch += 1
    return losses


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    return write_corpus(root / "corpus", n_docs=40), write_vocab(root / "vocab.txt"), root


def test_bert_for_pretraining_learns_from_nsp_records(corpus) -> None:
    metadata, vocab, root = corpus
    out = root / "nsp"
    assert create_tfrecords(base_args(metadata, vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED,
                                      quiet=True)) == 0
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(tiny_config(vocab))
    dataset = PretrainingDataset(out, batch_size=16, shuffle=True, shuffle_buffer=256)
    losses = train(model, DataLoader(dataset, batch_size=None), dataset)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.4, losses  # from chance (ln of the vocabulary) towards the corpus's word statistics


def test_a_masked_lm_learns_from_dynamically_masked_records(corpus) -> None:
    metadata, vocab, root = corpus
    out = root / "unmasked"
    assert create_tfrecords(base_args(metadata, vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED,
                                      mlm_only=True, disable_masking=True, unmasked_format="ids", quiet=True)) == 0
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(tiny_config(vocab))
    dataset = PretrainingDataset(out, shuffle=True, masking=DynamicMaskingOptions(vocab_file=str(vocab)))
    from bert_data.torch import collate

    losses = train(model, DataLoader(dataset, batch_size=16, collate_fn=collate), dataset)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.4, losses  # from chance (ln of the vocabulary) towards the corpus's word statistics
