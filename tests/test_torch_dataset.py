"""bert_data.torch.PretrainingDataset: one pass per epoch over any number of files, ranks and
DataLoader workers, seeded shuffling per epoch, resuming mid-epoch, the tensors it yields, and a
clear error for every mismatch.

Records are written by the tests (``torch_records``: every record carries its number) or by
``create_tfrecords``. Skipped when torch is not installed, except under CI.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

from torch.utils.data import DataLoader  # noqa: E402

from conftest import base_args, write_corpus, write_vocab  # noqa: E402
from torch_records import (  # noqa: E402
    PRED, SEQ, TAG, numbers_of, read_as, write_tagged, write_tagged_dir,
)

from bert_data.errors import ConfigError, RecordFormatError  # noqa: E402
from bert_data.format.example_wire import parse_example  # noqa: E402
from bert_data.format.tfrecord import iter_records  # noqa: E402
from bert_data.storage import StorageError  # noqa: E402
from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.torch import IGNORE_INDEX, PretrainingDataset, collate  # noqa: E402
from bert_data.torch.shuffle import ShuffleBuffer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def every_reader(make, monkeypatch, world: int, workers: int) -> List[int]:
    """The record numbers every (rank, worker) reads, each reader's in its order."""
    numbers: List[int] = []
    for rank in range(world):
        dataset = make(rank, world)
        for worker in range(workers):
            for item in read_as(dataset, monkeypatch, worker, workers):
                numbers += numbers_of(item)
    return numbers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(0, 30), min_size=1, max_size=6), world=st.integers(1, 4), workers=st.integers(1, 3),
       shuffle=st.booleans(), buffer=st.integers(1, 40), batch=st.sampled_from([None, 1, 4, 7]),
       manifest=st.booleans(), gz=st.lists(st.booleans(), min_size=6, max_size=6), epoch=st.integers(0, 3))
def test_each_record_once_per_epoch_for_any_files_ranks_and_workers(
        monkeypatch, counts, world, workers, shuffle, buffer, batch, manifest, gz, epoch) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if sum(counts) == 0:
            counts = counts + [1]
        root = write_tagged_dir(Path(tmp) / "out", counts, manifest=manifest, gzipped=gz)

        def make(rank, world_size):
            dataset = PretrainingDataset(root, batch_size=batch, shuffle=shuffle, shuffle_buffer=buffer, seed=3,
                                         rank=rank, world_size=world_size)
            dataset.set_epoch(epoch)
            return dataset

        numbers = every_reader(make, monkeypatch, world, workers)
    assert Counter(numbers) == Counter(range(sum(counts)))  # every record, none twice


@pytest.fixture(scope="module")
def nsp_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nsp")
    metadata = write_corpus(root / "corpus", n_docs=16)
    vocab = write_vocab(root / "vocab.txt")
    assert create_tfrecords(base_args(metadata, vocab, root / "out", num_output_files=3, quiet=True)) == 0
    return root / "out"


def rows(batches) -> List[tuple]:
    """Each record of ``batches`` as a hashable tuple of its (untrimmed-length-independent) content."""
    out = []
    for batch in batches:
        width = batch["input_ids"].shape[1]
        for i in range(batch["input_ids"].shape[0]):
            real = int(batch["attention_mask"][i].sum())
            assert real <= width
            out.append(tuple(batch["input_ids"][i, :real].tolist()) + tuple(batch["labels"][i, :real].tolist())
                       + (int(batch["next_sentence_label"][i]),))
    return out


@pytest.mark.parametrize("batched", [True, False])
def test_dataloader_with_two_workers_and_two_ranks_reads_each_record_once(nsp_dir: Path, batched: bool) -> None:
    everything = rows(PretrainingDataset(nsp_dir, batch_size=5))
    assert len(everything) == json.loads((nsp_dir / "data_params.json").read_text())["n_examples"]
    got = []
    for rank in range(2):
        dataset = PretrainingDataset(nsp_dir, batch_size=5 if batched else None, shuffle=True, seed=1,
                                     shuffle_buffer=16,
                                     rank=rank, world_size=2)
        dataset.set_epoch(2)
        loader = DataLoader(dataset, batch_size=None, num_workers=2) if batched else \
            DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=collate)
        got += rows(loader)
    assert Counter(got) == Counter(everything)
    assert got != everything  # shuffled


def test_shuffling_is_seeded_and_changes_every_epoch() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_tagged_dir(Path(tmp), [40, 25, 33, 2])
        dataset = PretrainingDataset(root, batch_size=8, shuffle=True, shuffle_buffer=20, seed=5)

        def epoch(n, d=dataset):
            d.set_epoch(n)
            return [x for batch in d for x in numbers_of(batch)]

        first, second, first_again = epoch(0), epoch(1), epoch(0)
        other_seed = PretrainingDataset(root, batch_size=8, shuffle=True, shuffle_buffer=20, seed=6)
        assert sorted(first) == sorted(second) == list(range(100))
        assert first == first_again and first != second and epoch(0, other_seed) != first
        assert [x for b in PretrainingDataset(root, batch_size=8) for x in numbers_of(b)] == list(range(100))


def test_a_new_epoch_reaches_persistent_workers() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_tagged_dir(Path(tmp), [30, 30])
        dataset = PretrainingDataset(root, batch_size=6, shuffle=True, shuffle_buffer=8)
        loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
        orders = []
        for epoch in range(2):
            dataset.set_epoch(epoch)
            orders.append([x for batch in loader for x in numbers_of(batch)])
        dataset.set_epoch(0)
        again = [x for batch in loader for x in numbers_of(batch)]
    assert orders[0] != orders[1] and again == orders[0]


def naive_shuffle(chunks: List[np.ndarray], capacity: int, seed: int) -> List[int]:
    """tf.data's shuffle, one record at a time, with the draws ShuffleBuffer makes."""
    rng = np.random.default_rng(seed)
    buffer: List[int] = []
    out: List[int] = []
    for chunk in chunks:
        values = chunk.tolist()
        fill = min(capacity - len(buffer), len(values))
        buffer += values[:fill]
        rest = values[fill:]
        if rest:
            for slot, value in zip(rng.integers(0, capacity, len(rest)).tolist(), rest):
                out.append(buffer[slot])
                buffer[slot] = value
    return out + [buffer[i] for i in rng.permutation(len(buffer))]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), max_size=8), capacity=st.integers(1, 25), seed=st.integers(0, 1000))
def test_the_shuffle_buffer_is_tf_datas_algorithm(sizes: List[int], capacity: int, seed: int) -> None:
    numbers = np.arange(sum(sizes))
    chunks = np.split(numbers, np.cumsum(sizes)[:-1]) if sizes else []
    buffer = ShuffleBuffer(capacity, np.random.default_rng(seed))
    out: List[int] = []
    for chunk in chunks:
        left = buffer.push({"record": chunk, "x": chunk[:, None] * 2})
        if left is not None:
            assert (left["x"][:, 0] == left["record"] * 2).all()  # rows stay whole
            out += left["record"].tolist()
    rest = buffer.finish()
    out += rest["record"].tolist() if rest is not None else []
    assert out == naive_shuffle(chunks, capacity, seed)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batched", [True, False])
def test_resuming_mid_epoch_yields_the_rest_of_the_epoch(workers: int, batched: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_tagged_dir(Path(tmp), [23, 0, 17, 9])

        def loader(dataset):
            if batched:
                return DataLoader(dataset, batch_size=None, num_workers=workers)
            return DataLoader(dataset, batch_size=4, num_workers=workers, collate_fn=collate)

        def dataset():
            return PretrainingDataset(root, batch_size=4 if batched else None, shuffle=True, shuffle_buffer=7, seed=9)

        first = dataset()
        first.set_epoch(3)
        whole = [numbers_of(b) for b in loader(first)]
        for consumed in (0, 1, 5, len(whole) - 1, len(whole)):
            state = json.loads(json.dumps(first.state_dict(consumed, num_workers=workers,
                                                           batch_size=None if batched else 4)))
            resumed = dataset()
            resumed.load_state_dict(state)
            resumed.set_epoch(3)  # the loop sets the epoch it resumes in: the resume point stays
            assert [numbers_of(b) for b in loader(resumed)] == whole[consumed:], consumed
            resumed.set_epoch(4)  # the next epoch is whole again
            assert sum(len(numbers_of(b)) for b in loader(resumed)) == 49


def test_a_resume_state_must_fit_the_dataset_and_the_loader(monkeypatch) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_tagged_dir(Path(tmp), [10, 10])
        dataset = PretrainingDataset(root, batch_size=3, shuffle=True)
        state = dataset.state_dict(2, num_workers=2)
        with pytest.raises(ConfigError, match="seed=0"):
            PretrainingDataset(root, batch_size=3, shuffle=True, seed=1).load_state_dict(state)
        with pytest.raises(ConfigError, match="batches consumed"):
            dataset.load_state_dict(dict(state, batches=99))
        with pytest.raises(ConfigError, match="99 batches consumed, but this rank's epoch has 8 batches"):
            dataset.state_dict(99, num_workers=2)  # refused where it is made (it was only where loaded)
        dataset.load_state_dict(state)
        with pytest.raises(ConfigError, match="same num_workers"):
            list(dataset)  # read with 1 worker, saved with 2
        with pytest.raises(ConfigError, match="batch_size"):
            PretrainingDataset(root).state_dict(2)


def raw_records(directory: Path) -> List[dict]:
    """Every record of an output directory in file order, parsed record by record."""
    names = json.loads((directory / "data_params.json").read_text())["instances_per_shard"]
    return [parse_example(p) for name in sorted(names) for p in iter_records(directory / name)]


def test_tensors_are_the_records_with_dense_labels(nsp_dir: Path, impl: str) -> None:
    """With the compiled decoder and with its numpy stand-in (``impl``)."""
    records = raw_records(nsp_dir)
    got = list(PretrainingDataset(nsp_dir))
    assert len(got) == len(records)
    for record, item in zip(records, got):
        assert item["input_ids"].dtype == torch.int64 and item["labels"].dtype == torch.int64
        assert item["input_ids"].tolist() == record["input_ids"].tolist()
        assert item["attention_mask"].tolist() == record["input_mask"].tolist()
        assert item["token_type_ids"].tolist() == record["segment_ids"].tolist()
        assert int(item["next_sentence_label"]) == int(record["next_sentence_labels"][0])
        labels = np.full(len(record["input_ids"]), IGNORE_INDEX)
        used = record["masked_lm_weights"] > 0
        labels[record["masked_lm_positions"][used]] = record["masked_lm_ids"][used]
        assert item["labels"].tolist() == labels.tolist()
        assert int(item["labels"][0]) == IGNORE_INDEX  # padding slots point at [CLS] with weight 0: no label there


def test_collate_and_batches_trim_to_the_longest_real_row(nsp_dir: Path) -> None:
    batched = list(PretrainingDataset(nsp_dir, batch_size=6))
    collated = list(DataLoader(PretrainingDataset(nsp_dir), batch_size=6, collate_fn=collate))
    untrimmed = list(PretrainingDataset(nsp_dir, batch_size=6, trim=False))
    assert len(batched) == len(collated) == len(untrimmed)
    for a, b, full in zip(batched, collated, untrimmed):
        width = int(full["attention_mask"].sum(dim=1).max())
        assert a["input_ids"].shape[1] == width < full["input_ids"].shape[1] or width == full["input_ids"].shape[1]
        for name in a:
            assert torch.equal(a[name], b[name])
            if a[name].dim() == 2:
                assert torch.equal(a[name], full[name][:, :width])
                assert not full[name][:, width:].any() or name == "labels"
        assert (full["labels"][:, width:] == IGNORE_INDEX).all()  # nothing labelled is cut off


@pytest.mark.parametrize("layout", ["mlm_only", "sop"])
def test_other_layouts(tmp_path: Path, layout: str) -> None:
    root = write_tagged_dir(tmp_path / "out", [6, 4], layout=layout)
    batch = next(iter(PretrainingDataset(root, batch_size=10)))
    assert numbers_of(batch) == list(range(10))
    assert ("next_sentence_label" in batch) == (layout == "sop")
    if layout == "mlm_only":
        assert not batch["token_type_ids"].any()
    assert batch["labels"][:, 1].tolist() == [TAG + i for i in range(10)]


def test_sizes_and_layout_must_match_the_manifest(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [5, 5])
    with pytest.raises(RecordFormatError, match="max_seq_length=8"):
        PretrainingDataset(root, max_seq_length=128)
    with pytest.raises(RecordFormatError, match="max_predictions_per_seq=2"):
        PretrainingDataset(root, max_predictions_per_seq=20)
    with pytest.raises(RecordFormatError, match="'nsp' layout"):
        PretrainingDataset(root, layout="mlm_only")
    with pytest.raises(ConfigError, match="layout must be one of"):
        PretrainingDataset(root, layout="bert")
    assert PretrainingDataset(root, layout="sop", max_seq_length=SEQ, max_predictions_per_seq=PRED).num_records == 10


def test_records_that_are_not_the_layout_are_an_error_naming_them(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [5, 5])
    write_tagged(root / "examples-2.tfrecords", range(5), layout="mlm_only")  # the manifest says nsp
    with pytest.raises(RecordFormatError, match=r"examples-2.tfrecords: record 0 is not a nsp record.*missing"):
        list(PretrainingDataset(root))
    loose = write_tagged(tmp_path / "loose.tfrecords", range(3), layout="mlm_only")
    assert PretrainingDataset(str(loose)).layout == "mlm_only"  # no manifest: the first record says
    with pytest.raises(RecordFormatError, match="max_seq_length 16"):
        list(PretrainingDataset(str(loose), max_seq_length=16))


def test_damaged_and_cut_files_are_errors(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [6, 6])
    shard = root / "examples-2.tfrecords"
    data = shard.read_bytes()
    frame = len(data) // 6
    shard.write_bytes(data[: 5 * frame])  # cut at a record boundary: no CRC error to see
    with pytest.raises(RecordFormatError, match=r"examples-2.tfrecords holds 5 records, but .*params.json lists 6"):
        list(PretrainingDataset(root, batch_size=4))
    shard.write_bytes(data + data[:frame])  # one record more than listed
    with pytest.raises(RecordFormatError, match="holds 7 records"):
        list(PretrainingDataset(root, batch_size=4))
    shard.write_bytes(data[:-3])  # cut inside a record
    with pytest.raises(RecordFormatError, match="examples-2.tfrecords: truncated"):
        list(PretrainingDataset(root, batch_size=4))
    (root / "examples-1.tfrecords").unlink()
    with pytest.raises(RecordFormatError, match="lists examples-1.tfrecords, which is missing"):
        PretrainingDataset(root)


def test_only_the_files_the_manifest_lists_are_read(tmp_path: Path, caplog) -> None:
    root = write_tagged_dir(tmp_path / "out", [4, 4])
    write_tagged(root / "old-1.tfrecords", range(100, 103))
    assert PretrainingDataset(root).num_records == 8
    assert "old-1.tfrecords" in caplog.text and "not read" in caplog.text
    both = PretrainingDataset([str(root / "examples-*.tfrecords"), str(root / "old-1.tfrecords")], batch_size=20)
    assert sorted(numbers_of(next(iter(both)))) == list(range(8)) + [100, 101, 102]


def test_bad_arguments_are_config_errors(tmp_path: Path, monkeypatch) -> None:
    root = write_tagged_dir(tmp_path / "out", [4])
    for kwargs, message in (({"batch_size": 0}, "batch_size"), ({"shuffle": "yes"}, "shuffle"),
                            ({"rank": 1}, "together"), ({"rank": 2, "world_size": 2}, "below world_size"),
                            ({"shuffle_buffer": 0}, "shuffle_buffer")):
        with pytest.raises(ConfigError, match=message):
            PretrainingDataset(root, **kwargs)
    with pytest.raises(StorageError, match="nosuchfs"):  # URLs are read through bert_data.storage
        PretrainingDataset("nosuchfs://bucket/out")
    with pytest.raises(RecordFormatError, match="no TFRecord files match"):
        PretrainingDataset(str(tmp_path / "nothing-*.tfrecords"))
    with pytest.raises(ConfigError, match="masked when written"):
        from bert_data.torch import DynamicMaskingOptions

        PretrainingDataset(root, masking=DynamicMaskingOptions(vocab_size=100, mask_id=4, special_ids=[0]))


def test_a_process_group_of_several_needs_rank_and_world_size(tmp_path: Path, monkeypatch) -> None:
    root = write_tagged_dir(tmp_path / "out", [4])
    alone = PretrainingDataset(root)  # made before the process group: found out when it is used
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    with pytest.raises(ConfigError, match="world_size=torch.distributed.get_world_size"):
        PretrainingDataset(root)
    with pytest.raises(ConfigError, match="rank=0, world_size=1"):
        alone.set_epoch(1)
    assert len(PretrainingDataset(root, rank=1, world_size=2)) == 2


def test_memory_is_bounded_by_the_buffer_not_the_file(tmp_path: Path) -> None:
    """tracemalloc's peak (numpy and bytes allocations) reading a file 8x larger is no higher."""
    import tracemalloc

    def peak(count: int) -> int:
        path = write_tagged(tmp_path / f"big-{count}.tfrecords", range(count))
        dataset = PretrainingDataset(str(path), batch_size=64, shuffle=True, shuffle_buffer=500)
        tracemalloc.start()
        seen = sum(len(numbers_of(batch)) for batch in dataset)
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert seen == count
        return top

    small, big = peak(40_000), peak(320_000)  # ~2.6 MB and ~21 MB of records
    assert big <= 1.2 * small + (1 << 20)


def test_reading_never_imports_tensorflow(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = write_tagged_dir(tmp_path / "out", [3, 3], gzipped=[True, False])
    code = (
        "import sys\n"
        "from bert_data.torch import PretrainingDataset, collate\n"
        f"items = list(PretrainingDataset({str(root)!r}, shuffle=True))\n"
        "assert len(items) == 6 and collate(items)['input_ids'].shape[0] == 6\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_collate_of_records_from_several_chunks_in_any_order(tmp_path: Path) -> None:
    root = write_tagged_dir(tmp_path / "out", [7, 9])
    records = list(PretrainingDataset(root))  # two files: two chunks
    plain = [dict(r) for r in records]
    for order in (list(range(16)), [3, 4, 5, 9, 10, 0], [15, 1, 8, 2]):
        got = collate([records[i] for i in order])
        want = collate([plain[i] for i in order])
        assert numbers_of(got) == order
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    default = torch.utils.data.default_collate(records[:4])  # torch's own collate takes them too
    assert numbers_of(default) == [0, 1, 2, 3] and default["input_ids"].shape == (4, SEQ)


def test_records_that_are_not_the_manifests_layout_are_an_error(tmp_path: Path) -> None:
    """Unpacked records under a manifest that says packed rows (and back) are an error naming the
    record and the layout, never read as something else."""
    root = write_tagged_dir(tmp_path / "out", [4])
    manifest = json.loads((root / "data_params.json").read_text())
    (root / "data_params.json").write_text(json.dumps(dict(manifest, record_schema="nsp_packed")))
    with pytest.raises(RecordFormatError, match=r"record 0 is not a nsp_packed record .*max_sequences_per_pack 3"):
        list(PretrainingDataset(root))
    with pytest.raises(ConfigError, match="layout must be one of"):
        PretrainingDataset(root, layout="nsp_packd")
