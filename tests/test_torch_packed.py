"""bert_data.torch reads packed rows (``--packing``, docs/packing.md): the tensors a packed
trainer needs, exactly once per epoch over ranks x workers, shuffled and resumable, trimmed by
the collate; and a tiny BERT fed from it gives every instance the losses it gets unpacked.

The loss test is tests/test_packing.py's TensorFlow-side test, with both sides read by
bert_data.torch: the unpacked output of the same seed with the usual 2-D mask, the packed one
with :func:`bert_data.torch.packed_attention_mask`, ``position_ids`` and the NSP head applied at
every ``next_sentence_positions``. Skipped without torch (except under CI).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

from torch.utils.data import DataLoader  # noqa: E402

from conftest import base_args, write_corpus, write_vocab  # noqa: E402
from torch_records import read_rows  # noqa: E402

from bert_data.errors import RecordFormatError  # noqa: E402
from bert_data.format.example_wire import serialize_examples  # noqa: E402
from bert_data.format.schema import SCHEMAS, feature_order  # noqa: E402
from bert_data.format.tfrecord import frame_records  # noqa: E402
from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.torch import IGNORE_INDEX, PretrainingDataset, collate, packed_attention_mask  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

SEQ, PRED = 64, 10
RUNS = {
    "plain": {},
    "packed": {"packing": True},
    "mlm_packed": {"packing": True, "mlm_only": True, "overlap_size": 8},
    "deep": {"packing": True, "max_sequences_per_pack": 5},
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Tuple[Dict[str, Path], Path]:
    root = tmp_path_factory.mktemp("torch_packed")
    metadata = write_corpus(root / "corpus", n_docs=24, paragraphs=4, sentences_per_paragraph=5)
    vocab = write_vocab(root / "vocab.txt")
    made = {}
    for name, flags in RUNS.items():
        out = root / name
        args = base_args(metadata, vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=3,
                         short_seq_prob=0.3, split_num=4, quiet=True, **flags)
        assert create_tfrecords(args) == 0
        made[name] = out
    return made, vocab


def everything(directory: Path, **kwargs) -> Dict[str, torch.Tensor]:
    """Every record of ``directory`` in one untrimmed batch, in file order."""
    return next(iter(PretrainingDataset(directory, batch_size=100_000, trim=False, **kwargs)))


# ---------------------------------------------------------------------------------------------
# The tensors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["packed", "mlm_packed", "deep"])
def test_packed_tensors_are_the_rows(outputs, run: str) -> None:
    made, _ = outputs
    rows = read_rows(made[run])
    got = {name: value.numpy() for name, value in everything(made[run]).items()}
    manifest = json.loads((made[run] / "data_params.json").read_text())
    assert len(got["input_ids"]) == manifest["n_examples"] == len(rows["input_ids"])
    k = manifest["max_sequences_per_pack"]
    assert np.array_equal(got["input_ids"], rows["input_ids"])
    assert np.array_equal(got["sequence_ids"], rows["input_mask"])
    assert np.array_equal(got["attention_mask"], (rows["input_mask"] > 0).astype(np.int64))
    assert np.array_equal(got["position_ids"], rows["positions"])
    assert np.array_equal(got["token_type_ids"], rows.get("segment_ids", np.zeros_like(rows["input_ids"])))
    want = np.full(rows["input_ids"].shape, IGNORE_INDEX)
    r, c = np.nonzero(rows["masked_lm_weights"])
    want[r, rows["masked_lm_positions"][r, c]] = rows["masked_lm_ids"][r, c]
    assert np.array_equal(got["labels"], want)
    assert (got["labels"] != IGNORE_INDEX).sum() == (rows["masked_lm_weights"] > 0).sum() > 0
    if run == "mlm_packed":
        assert "next_sentence_labels" not in got and "next_sentence_positions" not in got
        return
    assert got["next_sentence_positions"].shape == (len(rows["input_ids"]), k)
    assert np.array_equal(got["next_sentence_positions"], rows["next_sentence_positions"])
    used = rows["next_sentence_weights"] > 0
    assert np.array_equal(got["next_sentence_labels"], np.where(used, rows["next_sentence_labels"], IGNORE_INDEX))
    assert (got["sequence_ids"].max(axis=1) == used.sum(axis=1)).all()
    assert (used.sum(axis=1) > 1).any()  # there are rows of several instances to test on


def test_the_4d_mask_is_block_diagonal_and_additive() -> None:
    s = torch.tensor([[1, 1, 2, 2, 2, 3, 0, 0]])
    mask = packed_attention_mask(s)
    assert mask.shape == (1, 1, 8, 8) and mask.dtype == torch.float32
    attend = mask[0, 0] == 0
    for i in range(8):
        for j in range(8):
            assert bool(attend[i, j]) == (int(s[0, i]) == int(s[0, j]) > 0)
    assert float(mask.min()) == torch.finfo(torch.float32).min
    assert packed_attention_mask(s, torch.float16).dtype == torch.float16


def test_collate_and_batches_trim_packed_rows_to_the_longest_real_row(outputs) -> None:
    made, _ = outputs
    full = everything(made["packed"])
    singles = list(PretrainingDataset(made["packed"]))
    for start in range(0, 40, 8):
        batch = collate(singles[start:start + 8])
        width = int(full["attention_mask"][start:start + 8].sum(dim=1).max())
        assert batch["input_ids"].shape[1] == batch["position_ids"].shape[1] == batch["sequence_ids"].shape[1] == width
        assert batch["next_sentence_positions"].shape[1] == 3  # per instance, not per token: never trimmed
        for name in ("input_ids", "labels", "position_ids", "sequence_ids", "token_type_ids"):
            assert torch.equal(batch[name], full[name][start:start + 8, :width]), name
        assert int(batch["next_sentence_positions"].max()) < width
    batched = next(iter(PretrainingDataset(made["packed"], batch_size=8)))
    assert batched.keys() == collate(singles[:8]).keys()
    assert all(torch.equal(batched[k], collate(singles[:8])[k]) for k in batched)


# ---------------------------------------------------------------------------------------------
# Epochs: exactly once over ranks x workers, shuffled, resumable
# ---------------------------------------------------------------------------------------------


def row_keys(batches) -> List[tuple]:
    out = []
    for batch in batches:
        for i in range(batch["input_ids"].shape[0]):
            real = int(batch["attention_mask"][i].sum())
            out.append(tuple(batch["input_ids"][i, :real].tolist()) + tuple(batch["labels"][i, :real].tolist())
                       + tuple(batch["sequence_ids"][i, :real].tolist()) + tuple(batch["next_sentence_labels"][i].tolist()))
    return out


def test_each_packed_row_once_over_two_ranks_and_two_workers_shuffled(outputs) -> None:
    made, _ = outputs
    whole = row_keys([everything(made["packed"])])
    got = []
    for rank in range(2):
        dataset = PretrainingDataset(made["packed"], batch_size=6, shuffle=True, seed=5, shuffle_buffer=20, rank=rank,
                                     world_size=2)
        dataset.set_epoch(1)
        got += row_keys(DataLoader(dataset, batch_size=None, num_workers=2))
    assert Counter(got) == Counter(whole) and got != whole


@pytest.mark.parametrize("workers", [0, 2])
def test_resuming_packed_rows_mid_epoch(outputs, workers: int) -> None:
    made, _ = outputs

    def dataset():
        return PretrainingDataset(made["packed"], batch_size=16, shuffle=True, shuffle_buffer=50, seed=2)

    first = dataset()
    first.set_epoch(1)
    whole = row_keys(DataLoader(first, batch_size=None, num_workers=workers))
    per_batch = [row_keys([b]) for b in DataLoader(first, batch_size=None, num_workers=workers)]
    assert sum(per_batch, []) == whole
    for consumed in (3, len(per_batch) - 1):
        resumed = dataset()
        resumed.load_state_dict(json.loads(json.dumps(first.state_dict(consumed, num_workers=workers))))
        resumed.set_epoch(1)
        assert row_keys(DataLoader(resumed, batch_size=None, num_workers=workers)) == sum(per_batch[consumed:], [])


# ---------------------------------------------------------------------------------------------
# What is refused
# ---------------------------------------------------------------------------------------------


def test_rows_without_a_manifest_are_described_by_their_first_record(outputs, tmp_path: Path) -> None:
    made, _ = outputs
    for run in ("deep", "mlm_packed"):
        copy = tmp_path / run
        copy.mkdir()
        for path in made[run].glob("*.tfrecords"):
            (copy / path.name).write_bytes(path.read_bytes())
        dataset = PretrainingDataset(str(copy / "*.tfrecords"))
        assert dataset.layout == ("nsp_packed" if run == "deep" else "mlm_only_packed")
        assert dataset.source.max_predictions_per_seq == PRED
        got = everything(copy)
        want = everything(made[run])
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_broken_packed_row_is_an_error_naming_it(tmp_path: Path, outputs) -> None:
    made, _ = outputs
    rows = read_rows(made["packed"])
    multi = int(np.flatnonzero(rows["input_mask"].max(axis=1) > 1)[0])
    for name, change, message in (
        ("masked_lm_weights", lambda w: _set(w, (multi, 0), 9.0), "not an instance index"),
        ("next_sentence_positions", lambda p: _set(p, (multi, 1), 0), "next_sentence_positions"),
        ("input_mask", lambda m: _swap_instances(m, multi), "input_mask"),
    ):
        broken = {key: value.copy() for key, value in rows.items()}
        broken[name] = change(broken[name])
        directory = tmp_path / name
        directory.mkdir()
        payloads = serialize_examples(broken, feature_order(SCHEMAS["nsp_packed"]))
        (directory / "examples-1.tfrecords").write_bytes(frame_records(payloads))
        manifest = json.loads((made["packed"] / "data_params.json").read_text())
        manifest["instances_per_shard"] = {"examples-1.tfrecords": len(payloads)}
        manifest["bytes_per_shard"] = {"examples-1.tfrecords": (directory / "examples-1.tfrecords").stat().st_size}
        (directory / "data_params.json").write_text(json.dumps(manifest))
        with pytest.raises(RecordFormatError, match=rf"examples-1.tfrecords: record {multi}: not a valid nsp_packed row: "
                                                    rf".*{message}"):
            list(PretrainingDataset(directory, batch_size=7))


def _set(values: np.ndarray, where, value) -> np.ndarray:
    values[where] = value
    return values


def _swap_instances(mask: np.ndarray, row: int) -> np.ndarray:
    mask[row][mask[row] == 1] = 7  # instance 7 in a row of 3 slots, out of order
    return mask


# ---------------------------------------------------------------------------------------------
# A tiny BERT: each instance's losses, packed and unpacked
# ---------------------------------------------------------------------------------------------


def _instance_key(ids, types, labels, nsp) -> bytes:
    return b"|".join(np.asarray(a, np.int64).tobytes() for a in (ids, types, labels, [nsp]))


def unpacked_losses(model, batch) -> Tuple[List[bytes], np.ndarray, np.ndarray]:
    out = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"]).last_hidden_state
    mlm = per_instance_mlm(model, out, batch["labels"], torch.arange(len(out))[:, None].expand_as(batch["labels"]),
                           len(out))
    nsp = nsp_losses(model, out[:, 0], batch["next_sentence_label"])
    keys = []
    for i in range(len(out)):
        real = int(batch["attention_mask"][i].sum())
        keys.append(_instance_key(batch["input_ids"][i, :real], batch["token_type_ids"][i, :real],
                                  batch["labels"][i, :real], int(batch["next_sentence_label"][i])))
    return keys, mlm, nsp


def packed_losses(model, batch, attn: str) -> Tuple[List[bytes], np.ndarray, np.ndarray]:
    s = batch["sequence_ids"]
    out = model.bert(input_ids=batch["input_ids"], attention_mask=packed_attention_mask(s),
                     token_type_ids=batch["token_type_ids"], position_ids=batch["position_ids"]).last_hidden_state
    depth = s.max(dim=1).values
    base = torch.cumsum(depth, 0) - depth  # the first instance number of each row
    instance = torch.where(s > 0, base[:, None] + s - 1, 0)
    n = int(depth.sum())
    mlm = per_instance_mlm(model, out, batch["labels"], instance, n)
    slot_used = batch["next_sentence_labels"] != IGNORE_INDEX
    rows, slots = torch.nonzero(slot_used, as_tuple=True)
    assert torch.equal(torch.bincount(rows, minlength=len(s)), depth)  # one NSP label per instance
    cls = out[rows, batch["next_sentence_positions"][rows, slots]]
    nsp = np.zeros(n)
    nsp[(base[rows] + slots).numpy()] = nsp_losses(model, cls, batch["next_sentence_labels"][rows, slots])
    keys = []
    for r in range(len(s)):
        for k in range(1, int(depth[r]) + 1):
            where = s[r] == k
            keys.append(_instance_key(batch["input_ids"][r][where], batch["token_type_ids"][r][where],
                                      batch["labels"][r][where], int(batch["next_sentence_labels"][r, k - 1])))
    return keys, mlm, nsp


def per_instance_mlm(model, sequence, labels, instance, n) -> np.ndarray:
    where = labels != IGNORE_INDEX
    scores = model.cls.predictions(sequence[where])
    loss = torch.nn.functional.cross_entropy(scores, labels[where], reduction="none").double()
    owner = instance[where]
    total = torch.zeros(n, dtype=torch.float64).index_add_(0, owner, loss)
    count = torch.zeros(n, dtype=torch.float64).index_add_(0, owner, torch.ones_like(loss))
    return (total / count).numpy()


def nsp_losses(model, cls_vectors, labels) -> np.ndarray:
    pooled = model.bert.pooler.activation(model.bert.pooler.dense(cls_vectors))
    scores = model.cls.seq_relationship(pooled)
    return torch.nn.functional.cross_entropy(scores, labels, reduction="none").double().numpy()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_tiny_bert_gives_each_instance_the_same_losses_packed_and_unpacked(outputs, attn: str) -> None:
    transformers = pytest.importorskip("transformers")
    made, vocab = outputs
    vocab_size = sum(1 for _ in open(vocab, encoding="utf-8"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2)
    config._attn_implementation = attn
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():
        want_keys, want_mlm, want_nsp = unpacked_losses(model, everything(made["plain"]))
        got_keys, got_mlm, got_nsp = packed_losses(model, everything(made["packed"]), attn)
    index = {key: i for i, key in enumerate(want_keys)}
    assert len(index) == len(want_keys) == len(got_keys)  # every instance once, told apart by its content
    order = np.array([index[key] for key in got_keys])
    assert sorted(order.tolist()) == list(range(len(want_keys)))
    np.testing.assert_allclose(got_mlm, want_mlm[order], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got_nsp, want_nsp[order], rtol=0, atol=1e-5)
    # the mask is what makes them equal: the 2-D padding mask alone lets a row's instances mix
    with torch.no_grad():
        batch = everything(made["packed"])
        mixed = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"], position_ids=batch["position_ids"]).last_hidden_state
        blocked = model.bert(input_ids=batch["input_ids"], attention_mask=packed_attention_mask(batch["sequence_ids"]),
                             token_type_ids=batch["token_type_ids"],
                             position_ids=batch["position_ids"]).last_hidden_state
    several = batch["sequence_ids"].max(dim=1).values > 1
    real = batch["attention_mask"][several].bool()
    assert (mixed[several][real] - blocked[several][real]).abs().max() > 1e-3
