"""Unmasked records (``--mlm_only --disable_masking --unmasked_format ids``) masked by
bert_data.torch: the writer's rules (80/10/10, never a special token or padding, the writer's
count, whole words), keyed by (seed, epoch, record) so that a record gets the same masks in
any batch, worker, rank or shuffled order, and new masks every epoch.

Skipped when torch is not installed, except under CI.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

from conftest import TINY_WORDS, base_args, write_corpus  # noqa: E402
from torch_records import TAG, read_as, write_tagged_dir  # noqa: E402

from bert_data.errors import ConfigError  # noqa: E402
from bert_data.format.example_wire import parse_example  # noqa: E402
from bert_data.format.tfrecord import iter_records  # noqa: E402
from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.torch import IGNORE_INDEX, DynamicMaskingOptions, PretrainingDataset  # noqa: E402
from bert_data.torch.dynamic import RecordRandom  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
OPTIONS = DynamicMaskingOptions(vocab_size=5000, mask_id=4, special_ids=[0, 2, 3, 4])


def write_split_vocab(path: Path) -> Path:
    """Specials, letters, ## letters and every other tiny word: the rest become ## pieces."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = SPECIALS + list(".,;:!?'\"()-") + letters + ["##" + c for c in letters] + TINY_WORDS[::2]
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
    root = tmp_path_factory.mktemp("unmasked")
    metadata = write_corpus(root / "corpus", n_docs=24)
    vocab = write_split_vocab(root / "vocab.txt")
    out = root / "out"
    args = base_args(metadata, vocab, out, mlm_only=True, disable_masking=True, unmasked_format="ids",
                     max_seq_length=48, max_predictions_per_seq=8, dupe_factor=1, quiet=True)
    assert create_tfrecords(args) == 0
    return out, vocab


def raw(out: Path) -> List[Dict[str, np.ndarray]]:
    names = sorted(p.name for p in out.glob("examples-*.tfrecords"))
    return [parse_example(p) for name in names for p in iter_records(out / name)]


def vocab_ids(vocab: Path) -> Dict[str, int]:
    return {t: i for i, t in enumerate(vocab.read_text(encoding="utf-8").splitlines())}


@pytest.mark.parametrize("whole_word", [False, True])
def test_masks_follow_the_writers_rules(unmasked, whole_word: bool) -> None:
    out, vocab = unmasked
    ids = vocab_ids(vocab)
    special = [ids[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")]
    continuation = np.array([t.startswith("##") for t in ids], bool)
    options = DynamicMaskingOptions(vocab_file=str(vocab), masked_lm_prob=0.15, mask_whole_word=whole_word)
    dataset = PretrainingDataset(out, masking=options)
    records = raw(out)
    got = list(dataset)
    assert len(got) == len(records) > 100
    continued = 0
    for record, item in zip(records, got):
        original, real = record["input_ids"], int(record["input_mask"].sum())
        labels = item["labels"].numpy()
        positions = np.flatnonzero(labels != IGNORE_INDEX)
        candidates = np.flatnonzero((record["input_mask"] == 1) & ~np.isin(original, special))
        assert set(positions) <= set(candidates)  # never [CLS]/[SEP]/padding
        assert (labels[positions] == original[positions]).all()
        changed = np.flatnonzero(item["input_ids"].numpy() != original)
        assert set(changed) <= set(positions)
        want = min(8, max(1, round(real * 0.15)), len(candidates))
        if whole_word:
            assert len(positions) <= want
            chosen = set(positions.tolist())
            for p in positions.tolist():  # a word is masked whole: its ## pieces with it, and its head
                if continuation[original[p]] and p - 1 in candidates:
                    assert p - 1 in chosen
                    continued += 1
                if p + 1 < len(original) and p + 1 in candidates and continuation[original[p + 1]]:
                    assert p + 1 in chosen
        else:
            assert len(positions) == want
        assert item["attention_mask"].tolist() == record["input_mask"].tolist()
        assert not item["token_type_ids"].any()
    assert continued > 0 or not whole_word  # the corpus has words of several pieces


def tagged_masks(dataset) -> Dict[int, tuple]:
    """Record number -> (masked ids, labels) of every record a dataset (or list of items) yields."""
    found = {}
    for batch in dataset:
        ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
        if ids.dim() == 1:
            ids, labels, mask = ids[None], labels[None], mask[None]
        for row in range(len(ids)):
            number = int(labels[row, 1] if labels[row, 1] != IGNORE_INDEX else ids[row, 1]) - TAG
            width = int(mask[row].sum())
            found[number] = (tuple(ids[row, :width].tolist()), tuple(labels[row, :width].tolist()))
    return found


def test_a_records_masks_depend_on_seed_epoch_and_record_only(tmp_path: Path, monkeypatch) -> None:
    root = write_tagged_dir(tmp_path / "out", [40, 0, 25, 31], layout="unmasked")

    def make(**kwargs):
        dataset = PretrainingDataset(root, masking=OPTIONS, **kwargs)
        dataset.set_epoch(1)
        return dataset

    reference = tagged_masks(make(batch_size=None))
    assert sorted(reference) == list(range(96))
    assert tagged_masks(make(batch_size=7)) == reference
    assert tagged_masks(make(batch_size=5, shuffle=True, shuffle_buffer=9, seed=0)) == reference
    split = {}
    for rank in range(2):
        dataset = PretrainingDataset(root, masking=OPTIONS, batch_size=3, rank=rank, world_size=2)
        dataset.set_epoch(1)
        for worker in range(3):
            split.update(tagged_masks(read_as(dataset, monkeypatch, worker, 3)))
    assert split == reference
    other_epoch = PretrainingDataset(root, masking=OPTIONS)
    other_epoch.set_epoch(2)
    other_seed = PretrainingDataset(root, masking=OPTIONS, seed=1)
    other_seed.set_epoch(1)
    for other in (tagged_masks(other_epoch), tagged_masks(other_seed)):
        differ = sum(other[n] != reference[n] for n in reference)
        assert differ > 40  # new masks (a record has few candidates: some repeat by chance)


def test_80_10_10(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [20_000], layout="unmasked")
    counts: Counter = Counter()
    for batch in PretrainingDataset(root, masking=OPTIONS, batch_size=1000):
        used = batch["labels"] != IGNORE_INDEX
        new, old = batch["input_ids"][used], batch["labels"][used]
        counts["mask"] += int((new == 4).sum())
        counts["keep"] += int((new == old).sum())
        counts["random"] += int(((new != 4) & (new != old)).sum())
        assert ((batch["labels"] == IGNORE_INDEX) | used).all()
        assert (used.sum(dim=1) == 1).all()  # real length 3..7 at 0.15: one prediction each
    total = sum(counts.values())
    assert total == 20_000
    assert abs(counts["mask"] / total - 0.8) < 0.015
    assert abs(counts["keep"] / total - 0.1) < 0.01 and abs(counts["random"] / total - 0.1) < 0.01


def test_unmasked_records_need_masking_options(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [5], layout="unmasked")
    with pytest.raises(ConfigError, match="masking=DynamicMaskingOptions"):
        PretrainingDataset(root)
    with pytest.raises(ConfigError, match="vocab_file"):
        PretrainingDataset(root, masking=DynamicMaskingOptions(vocab_size=100))
    with pytest.raises(ConfigError, match="mask_whole_word needs the vocabulary"):
        PretrainingDataset(root, masking=DynamicMaskingOptions(vocab_size=5000, mask_id=4, special_ids=[0],
                                                                mask_whole_word=True))
    assert len(PretrainingDataset(root, masking=OPTIONS, max_predictions_per_seq=3)) == 5  # any number of slots


def test_record_random_keeps_rows_apart() -> None:
    keys = np.array([5, 6, 7], np.uint64)
    together = RecordRandom(keys).random((3, 4))
    alone = RecordRandom(keys[1:2]).random((1, 4))
    assert np.array_equal(together[1], alone[0])
    assert ((together >= 0) & (together < 1)).all() and len(np.unique(together)) == 12
    with pytest.raises(ValueError, match="rows must come first"):
        RecordRandom(keys).random(12)
    assert sorted(RecordRandom(keys[:1]).permutation(9).tolist()) == list(range(9))
    assert torch is not None
