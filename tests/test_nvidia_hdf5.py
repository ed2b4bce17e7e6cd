"""NVIDIA's MLPerf packed HDF5 layout (bert_data/format/nvidia_hdf5.py): packed rows -> HDF5 ->
NVIDIA's reading -> exactly the instances :func:`bert_data.format.packed.unpack_rows` finds in
the rows.

NVIDIA's reading is reimplemented here from mlcommons/training_results_v3.1,
``NVIDIA/benchmarks/bert/implementations/pytorch/run_pretraining.py``, class
``pretraining_dataset`` (lines 164-239) with ``packed_samples=True``: ``__init__`` reads the seven
datasets whole (lines 177-179); ``__getitem__`` pads ``input_ids`` and ``segment_ids`` to
``max_seq_length`` with ``input_mask`` 1 on the sample's tokens (lines 206-208, 220-223),
scatters ``masked_lm_ids`` at ``masked_lm_positions`` into a dense ``masked_lm_labels`` of zeros
(lines 224-225; its loss ignores label 0, modeling.py ``CrossEntropyLoss(ignore_index=0)``), and
pads ``next_sentence_labels`` and ``packed_input_len`` to 3 slots (lines 209-210, 233-235). The
instances are where its model finds them: ``packed_input_len`` tokens after each other. The
datasets and dtypes are those ``input_preprocessing/packed_data/create_packed_trainset.py``
creates (lines 59-65: vlen int16 / int8, no compression).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, Iterator, List

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

h5py = pytest.importorskip("h5py")

from conftest import base_args, write_corpus, write_vocab  # noqa: E402
from torch_records import read_rows  # noqa: E402

from bert_data.errors import BertDataError  # noqa: E402
from bert_data.format.nvidia_hdf5 import (  # noqa: E402
    NVIDIA_DATASETS, NvidiaLayoutError, concat_samples, nvidia_hdf5_bytes, nvidia_samples, write_nvidia_hdf5,
)
from bert_data.format.packed import row_checks, unpack_rows  # noqa: E402
from bert_data.tools.create import main as create_tfrecords  # noqa: E402

SEQ, PRED = 64, 10
KEYS = ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "packed_input_len",
        "packed_masked_lm_len", "next_sentence_labels"]  # run_pretraining.py lines 177-178, in its order


def nvidiaread_rows(path: str, max_seq_length: int) -> Iterator[Dict[str, np.ndarray]]:
    """run_pretraining.py's ``pretraining_dataset(path, _, max_seq_length, packed_samples=True)``,
    sample by sample (see the module docstring for the lines)."""
    with h5py.File(path, "r") as f:
        inputs = [np.asarray(f[key][:]) for key in KEYS]
    for index in range(len(inputs[0])):
        input_ids = np.zeros(max_seq_length, np.int64)
        input_mask = np.zeros(max_seq_length, np.int64)
        segment_ids = np.zeros(max_seq_length, np.int64)
        next_sentence_labels = np.zeros(3, np.int64)
        packed_input_len = np.zeros(3, np.int64)
        ids, segments, positions, mlm_ids, lens, _, labels = [values[index].astype(np.int64) for values in inputs]
        n = ids.shape[-1]
        input_ids[:n] = ids
        input_mask[:n] = 1
        segment_ids[:n] = segments
        masked_lm_labels = np.zeros(input_ids.shape, np.int64)
        masked_lm_labels[positions] = mlm_ids
        next_sentence_labels[:lens.shape[-1]] = labels
        packed_input_len[:lens.shape[-1]] = lens
        yield {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
               "masked_lm_labels": masked_lm_labels, "next_sentence_labels": next_sentence_labels,
               "packed_input_len": packed_input_len}


def nvidia_instances(path: str, max_seq_length: int) -> List[tuple]:
    """Each instance NVIDIA's reader gives, in order: its tokens, segment ids, (position, id) of
    each prediction (offsets in the instance) and its NSP label."""
    out = []
    for sample in nvidiaread_rows(path, max_seq_length):
        assert sample["input_mask"].sum() == sample["packed_input_len"].sum()
        offset = 0
        for slot, n in enumerate(sample["packed_input_len"].tolist()):
            if n == 0:
                assert sample["next_sentence_labels"][slot:].sum() == 0 and sample["packed_input_len"][slot:].sum() == 0
                break
            span = slice(offset, offset + n)
            labels = sample["masked_lm_labels"][span]
            predicted = np.flatnonzero(labels)
            out.append((tuple(sample["input_ids"][span]), tuple(sample["segment_ids"][span]), tuple(predicted),
                        tuple(labels[predicted]), int(sample["next_sentence_labels"][slot])))
            offset += n
        assert not sample["masked_lm_labels"][offset:].any()
    return out


def unpacked_instances(rows: Dict[str, np.ndarray], max_seq_length: int, max_predictions: int) -> List[tuple]:
    """The same description of the instances :func:`unpack_rows` finds in ``rows``."""
    inst = unpack_rows(rows, max_seq_length, max_predictions, True)
    out = []
    for i in range(len(inst["input_ids"])):
        n = int(inst["input_mask"][i].sum())
        used = inst["masked_lm_weights"][i] > 0
        out.append((tuple(inst["input_ids"][i, :n]), tuple(inst["segment_ids"][i, :n]),
                    tuple(inst["masked_lm_positions"][i][used]), tuple(inst["masked_lm_ids"][i][used]),
                    int(inst["next_sentence_labels"][i, 0])))
    return out


def packed_rows(seed: int, n: int, depth: int) -> Dict[str, np.ndarray]:
    """``n`` random valid packed NSP rows of up to ``depth`` instances (docs/packing.md's layout):
    each instance [CLS] ... of 2..L/depth tokens, up to PRED predictions after its [CLS] (P + K a row)."""
    rng = np.random.default_rng(seed)
    rows = {name: np.zeros((n, SEQ), np.int64) for name in ("input_ids", "input_mask", "segment_ids", "positions")}
    for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        rows[name] = np.zeros((n, PRED + depth), np.float32 if name == "masked_lm_weights" else np.int64)
    for name in ("next_sentence_positions", "next_sentence_labels", "next_sentence_weights"):
        rows[name] = np.zeros((n, depth), np.float32 if name == "next_sentence_weights" else np.int64)
    for r in range(n):
        offset = slot = 0
        for s in range(1, int(rng.integers(1, depth + 1)) + 1):
            length = int(rng.integers(2, SEQ // depth + 1))
            span = slice(offset, offset + length)
            rows["input_ids"][r, span] = rng.integers(5, 30000, length)
            rows["input_ids"][r, offset] = 2
            rows["input_mask"][r, span] = s
            rows["positions"][r, span] = np.arange(length)
            rows["segment_ids"][r, span] = np.arange(length) >= int(rng.integers(1, length + 1))
            most = min(PRED, length - 1, PRED + depth - slot)  # the row's budget is P + K
            picked = np.sort(rng.choice(np.arange(1, length), int(rng.integers(0, most + 1)), replace=False))
            where = slice(slot, slot + len(picked))
            rows["masked_lm_positions"][r, where] = offset + picked
            rows["masked_lm_ids"][r, where] = rng.integers(1, 30000, len(picked))
            rows["masked_lm_weights"][r, where] = s
            rows["next_sentence_positions"][r, s - 1] = offset
            rows["next_sentence_labels"][r, s - 1] = rng.integers(0, 2)
            rows["next_sentence_weights"][r, s - 1] = 1.0
            offset, slot = offset + length, slot + len(picked)
    assert [m for bad, m in row_checks(rows, "nsp_packed") if bad.any()] == []  # the generator makes valid rows
    return rows


# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), depth=st.integers(1, 3), batches=st.integers(1, 3))
def test_rows_to_hdf5_to_nvidias_reader_give_the_instances_of_unpack_rows(tmp_path_factory, seed, n, depth,
                                                                            batches) -> None:
    rows = packed_rows(seed, n, depth)
    cuts = np.linspace(0, len(rows["input_ids"]), batches + 1).astype(int)
    parts = [nvidia_samples({k: v[a:b] for k, v in rows.items()}) for a, b in zip(cuts[:-1], cuts[1:])]
    path = str(tmp_path_factory.mktemp("nv") / "part_00000")
    write_nvidia_hdf5(path, concat_samples(parts))
    assert nvidia_instances(path, SEQ) == unpacked_instances(rows, SEQ, PRED)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("nvidia")
    metadata = write_corpus(root / "corpus", n_docs=24, paragraphs=4, sentences_per_paragraph=5)
    vocab = write_vocab(root / "vocab.txt")
    made = {}
    for name, flags in {"nsp": {}, "sop": {"sentence_order_prediction": True},
                        "mlm": {"mlm_only": True}}.items():
        out = root / name
        assert create_tfrecords(base_args(metadata, vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED,
                                          dupe_factor=3, short_seq_prob=0.3, split_num=4, packing=True, quiet=True,
                                          **flags)) == 0
        made[name] = out
    return made


@pytest.mark.parametrize("run", ["nsp", "sop"])
def test_a_runs_packed_rows_read_by_nvidias_reader_are_its_instances(outputs, tmp_path: Path, run: str) -> None:
    rows = read_rows(outputs[run])
    path = str(tmp_path / "part_00000")
    write_nvidia_hdf5(path, nvidia_samples(rows))
    got = nvidia_instances(path, SEQ)
    assert got == unpacked_instances(rows, SEQ, PRED)
    assert len(got) > len(rows["input_ids"])  # rows of several instances were tested
    with h5py.File(path, "r") as f:  # create_packed_trainset.py's datasets (lines 59-65), nothing else
        assert sorted(f) == sorted(NVIDIA_DATASETS)
        for name, dtype in NVIDIA_DATASETS.items():
            assert f[name].shape == (len(rows["input_ids"]),) and f[name].compression is None
            assert h5py.check_vlen_dtype(f[name].dtype) == np.dtype(dtype), name


def test_the_same_samples_give_the_same_bytes(outputs) -> None:
    samples = nvidia_samples(read_rows(outputs["nsp"]))
    first = nvidia_hdf5_bytes(samples)
    time.sleep(1.1)  # HDF5 object timestamps have one-second resolution: none may be written
    assert nvidia_hdf5_bytes(samples) == first
    other = dict(samples, next_sentence_labels=samples["next_sentence_labels"][::-1])
    assert nvidia_hdf5_bytes(other) != first
    assert h5py.File(__import__("io").BytesIO(first), "r")["input_ids"].shape == (len(samples["input_ids"]),)


def test_what_the_layout_cannot_hold_is_an_error(outputs) -> None:
    rows = packed_rows(1, 40, 5)
    assert int(rows["input_mask"].max()) > 3
    with pytest.raises(NvidiaLayoutError, match="--max_sequences_per_pack 3"):
        nvidia_samples(rows)
    with pytest.raises(NvidiaLayoutError, match="drop --mlm_only"):
        nvidia_samples(read_rows(outputs["mlm"]))
    good = read_rows(outputs["nsp"])
    big = {k: v.copy() for k, v in good.items()}
    big["input_ids"][0, 1] = 40000
    with pytest.raises(NvidiaLayoutError, match="at most 32768 entries"):
        nvidia_samples(big)
    below = {k: v.copy() for k, v in good.items()}
    below["input_ids"][0, 1] = -40000  # (int16 would store 25536: it would not read back)
    with pytest.raises(NvidiaLayoutError, match=r"^token id -40000 does not fit NVIDIA's int16 input_ids \(not a row "
                                                r"bert_data wrote\)$"):
        nvidia_samples(below)
    zero = {k: v.copy() for k, v in good.items()}
    zero["masked_lm_ids"][0, 0] = 0
    with pytest.raises(NvidiaLayoutError, match="ignore_index=0"):
        nvidia_samples(zero)
    broken = {k: v.copy() for k, v in good.items()}
    broken["positions"][0, 1] = 7
    with pytest.raises(NvidiaLayoutError, match="packed row 0: positions do not restart"):
        nvidia_samples(broken)
    assert issubclass(NvidiaLayoutError, BertDataError)  # one line and exit 2 from the tools


def _spec():
    from bert_data.format.columns import ShardSpec
    from bert_data.format.schema import SCHEMAS, feature_length

    return ShardSpec("nsp_packed", tuple((f.name, f.dtype, feature_length(f, SEQ, PRED, 3))
                                         for f in SCHEMAS["nsp_packed"]), SEQ, PRED)


def expected_lengths(rows: Dict[str, np.ndarray], taken: np.ndarray) -> List[int]:
    """The tokens of each row taken (its ``input_mask``'s non-zero slots)."""
    return np.count_nonzero(rows["input_mask"][taken], axis=1).tolist()


def _assembled(container, rows: Dict[str, np.ndarray], cuts: List[int], path: Path) -> Path:
    """A partial shard as a run assembles it: the runs the workers encode (the container's
    ``frame_runs``) of the batches ``rows[cuts[i]:cuts[i + 1]]``, one after the other."""
    with open(path, "wb") as out:
        for a, b in zip(cuts[:-1], cuts[1:]):
            batch = {name: values[a:b] for name, values in rows.items()}
            for shard, run, records in container.frame_runs(None, batch, np.zeros(b - a, np.int64)):
                assert (shard, records) == (0, b - a)
                out.write(bytes(run))
    return path


def test_the_workers_runs_hold_each_shards_samples(tmp_path: Path) -> None:
    """``encode_runs``: a batch's rows of each shard, checked and cut into NVIDIA's samples in the
    workers, read back by ``decode_run`` exactly; bytes that are not a run are one line at publish."""
    import bert_data.format.nvidia_hdf5 as module
    from bert_data.errors import OutputError
    from bert_data.format.batch_decode import iter_records
    from bert_data.format.tfrecord import frame_records

    rows = packed_rows(11, 30, 3)
    shard_of_row = np.array([2, 0, 2, 2, 1, 0, 2, 1, 1, 2, 0, 0, 2, 1, 0] * 2)
    runs = module.encode_runs(rows, shard_of_row)
    assert [(shard, records) for shard, _, records in runs] == [(0, 10), (1, 8), (2, 12)]
    for shard, run, _ in runs:
        path = tmp_path / f"run{shard}"
        path.write_bytes(bytes(run))
        (payload,) = list(iter_records(str(path)))
        taken = np.flatnonzero(shard_of_row == shard)
        expected = module.nvidia_samples({name: values[taken] for name, values in rows.items()})
        got = module.decode_run(payload)
        for name, dtype in module.NVIDIA_DATASETS.items():
            values, lengths = got[name]
            assert values.dtype == np.dtype(dtype) and values.flags.aligned
            assert [list(v) for v in np.split(values, np.cumsum(lengths)[:-1])] == [list(v) for v in expected[name]]
    payload = bytes(runs[0][1])[12:-4]  # (a TFRecord frame: 12 bytes of length and CRC, the payload, a CRC)
    assert module.decode_run(payload)["input_ids"][1].tolist() == expected_lengths(rows, shard_of_row == 0)
    for damaged in (payload[:-1], payload + b"x", b"NVH5" + np.array([5], "<u8").tobytes(), b"PAR1" + bytes(8)):
        with pytest.raises(ValueError):
            module.decode_run(damaged)
    partial = tmp_path / "damaged.partial"
    partial.write_bytes(bytes(runs[0][1]) + frame_records([b"PAR1 not a run"]))
    writer = module.ShardFileWriter(str(tmp_path), "x.hdf5", _spec())
    with pytest.raises(OutputError, match=r"damaged.partial: record 1: not a run of NVIDIA samples; x.hdf5 was not "
                                          r"written \(a bug"):
        writer.write_partial(str(partial))
    writer.abort()
    assert not (tmp_path / "x.hdf5").exists()


@pytest.mark.parametrize("rows", [1, 100, 1025, 3000])
def test_the_room_asked_for_an_hdf5_file_is_at_least_its_size(tmp_path: Path, rows: int) -> None:
    """The room checked before a shard is written (``file_size_bound``) holds the file h5py makes,
    small or large; a damaged frame header stops the count (the writer then says it is damaged)."""
    import bert_data.format.nvidia_hdf5 as module
    from bert_data.format.containers import CONTAINERS

    container = CONTAINERS["hdf5"]()
    packed = packed_rows(rows, rows, 3)
    partial = _assembled(container, packed, list(range(0, rows, 450)) + [rows], tmp_path / "shard.partial")
    writer = container.open_shard(str(tmp_path), "x.hdf5", _spec())
    writer.write_partial(str(partial))
    writer.close()
    bound = container.rewritten_size_bound(str(partial))
    size = (tmp_path / "x.hdf5").stat().st_size
    assert size <= bound < 3 * size
    for at in (3, 23):  # the first frame's length (its CRC no longer holds); its run's count (not its bytes')
        data = bytearray(partial.read_bytes())
        data[at] ^= 0x40
        damaged = tmp_path / f"damaged{at}.partial"
        damaged.write_bytes(bytes(data))
        assert container.rewritten_size_bound(str(damaged)) == len(data) + module.FILE_OVERHEAD_BOUND


def test_hdf5_out_of_memory_is_said_as_memory() -> None:
    """helper-25: under ulimit -v HDF5's "memory allocation failed" became "Input/output error";
    it is a MemoryError (the run's one line, exit 3), and an error without an errno keeps HDF5's words."""
    from bert_data.format.nvidia_hdf5 import _as_os_errors

    with pytest.raises(MemoryError):
        with _as_os_errors("/out/x.hdf5"):
            raise RuntimeError("Can't synchronously write data (memory allocation failed for chunk)")
    with pytest.raises(OSError, match=r"HDF5: Can't open object \(component not found\)"):
        with _as_os_errors("/out/x.hdf5"):
            raise RuntimeError("Can't open object\n(component not found)")


def test_shards_are_written_a_chunk_at_a_time_the_same_bytes_for_any_batches(tmp_path: Path, monkeypatch) -> None:
    """The container's shard writer (``--output_format hdf5``): fixed chunks of samples whatever
    the batches it is given, so the same rows give the same bytes; read back, the rows are
    exactly the padded rows written (the layout is lossless for them)."""
    import bert_data.format.nvidia_hdf5 as module
    from bert_data.format.columns import ShardSpec
    from bert_data.format.containers import CONTAINERS

    monkeypatch.setattr(module, "CHUNK_ROWS", 7)
    rows = packed_rows(5, 40, 3)
    spec = _spec()
    container = CONTAINERS["hdf5"]()
    assert container.supports("nsp_packed") == container.supports("sop_packed") == ""
    assert "add --packing" in container.supports("nsp") and "--mlm_only" in container.supports("mlm_only_packed")
    written = {}
    for cuts in ([0, 40], [0, 1, 8, 9, 30, 40], list(range(41))):
        directory = tmp_path / f"cut{len(cuts)}"
        directory.mkdir()
        partial = _assembled(container, rows, cuts, directory / "shard.partial")
        writer = container.open_shard(str(directory), "part_-1.hdf5", spec)
        writer.write_partial(str(partial))
        assert writer.close() == [("part_-1.hdf5", 40)]
        written[len(cuts)] = (directory / "part_-1.hdf5").read_bytes()
    assert len(set(written.values())) == 1
    samples = module.nvidia_samples(rows)  # the same bytes as the samples written whole, by h5py's own writes
    assert written[2] == module.nvidia_hdf5_bytes(samples)
    path = str(tmp_path / "cut2" / "part_-1.hdf5")
    assert h5py.File(path, "r")["input_ids"].chunks == (7,)
    assert nvidia_instances(path, SEQ) == unpacked_instances(rows, SEQ, PRED)
    back = list(module.read_feature_batches(path, spec))
    assert [len(b["input_ids"]) for b in back] == [7] * 5 + [5]
    for name, values in rows.items():
        assert np.array_equal(np.concatenate([b[name] for b in back]), values), name
    aborted = container.open_shard(str(tmp_path), "part_-2.hdf5", spec)
    aborted.write_partial(str(tmp_path / "cut2" / "shard.partial"))
    aborted.abort()
    assert not (tmp_path / "part_-2.hdf5").exists()
    with pytest.raises(NvidiaLayoutError, match="drop --mlm_only"):
        container.open_shard(str(tmp_path), "x.hdf5", ShardSpec("mlm_only_packed", (), SEQ, PRED))


def test_create_tfrecords_writes_nvidias_layout(outputs, tmp_path: Path, capsys) -> None:
    """``create_tfrecords --packing --output_format hdf5``: one HDF5 file per shard holding
    exactly the rows of the TFRecord shard of the same seed (whatever the number of workers),
    listed in the manifest; the settings the layout cannot hold are refused up front."""
    import json

    from bert_data.format.columns import ShardSpec
    from bert_data.format.nvidia_hdf5 import read_feature_batches
    from bert_data.format.schema import SCHEMAS, feature_length

    root = outputs["nsp"].parent
    metadata, vocab = root / "corpus" / "metadata.txt", root / "vocab.txt"

    def run(out: Path, **flags) -> int:
        return create_tfrecords(base_args(metadata, vocab, out, **{"max_seq_length": SEQ, "max_predictions_per_seq": PRED,
                                                                   "dupe_factor": 3, "short_seq_prob": 0.3, "split_num": 4,
                                                                   "quiet": True, **flags}))

    assert run(tmp_path / "h5", packing=True, output_format="hdf5", num_workers=2) == 0
    manifest = json.loads((tmp_path / "h5" / "data_params.json").read_text())
    tfrecords = json.loads((outputs["nsp"] / "data_params.json").read_text())["instances_per_shard"]
    assert manifest["instances_per_shard"] == {name.replace(".tfrecords", ".hdf5"): n for name, n in tfrecords.items()}
    spec = ShardSpec("nsp_packed", tuple((f.name, f.dtype, feature_length(f, SEQ, PRED, 3))
                                         for f in SCHEMAS["nsp_packed"]), SEQ, PRED)
    for name in tfrecords:
        want = read_rows(outputs["nsp"], name)
        path = str(tmp_path / "h5" / name.replace(".tfrecords", ".hdf5"))
        assert nvidia_instances(path, SEQ) == unpacked_instances(want, SEQ, PRED)
        got = list(read_feature_batches(path, spec))
        for feature, values in want.items():
            assert np.array_equal(np.concatenate([b[feature] for b in got]), values), feature
    # inspect checks the HDF5 shards as it checks the TFRecords: the same report, the same verdict
    from bert_data.tools import inspect as inspect_tool

    capsys.readouterr()
    reports = {}
    for kind, directory in (("hdf5", tmp_path / "h5"), ("tfrecord", outputs["nsp"])):
        assert inspect_tool.main([str(directory), "--stats"]) == 0, kind
        reports[kind] = capsys.readouterr().out.replace(str(directory), "DIR")
    assert reports["hdf5"] == reports["tfrecord"] and reports["hdf5"].rstrip().endswith("OK")
    for flags, message in (({}, "add --packing"), ({"packing": True, "mlm_only": True}, "drop --mlm_only"),
                           ({"packing": True, "max_sequences_per_pack": 4}, "--max_sequences_per_pack 3 or fewer")):
        assert run(tmp_path / "refused", output_format="hdf5", **flags) == 2
        err = capsys.readouterr().err
        assert message in err and "--output_format hdf5" in err and "Traceback" not in err


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 3), feature=st.sampled_from(sorted(
    ["input_ids", "input_mask", "segment_ids", "positions", "masked_lm_positions", "masked_lm_ids",
     "masked_lm_weights", "next_sentence_positions", "next_sentence_labels", "next_sentence_weights"])),
    value=st.sampled_from([0, 1, 2, 3, 4, 5, 7, -1, 0.5, 40000]), where=st.integers(0, 10**6))
def test_a_row_is_written_only_when_it_reads_back_exactly(seed, depth, feature, value, where) -> None:
    """Any one value of valid packed rows changed: the rows are refused (one line), or NVIDIA's
    samples of them read back to exactly those rows (nothing is ever written differently)."""
    from bert_data.format.nvidia_hdf5 import rows_of_samples

    rows = packed_rows(seed, 6, depth)
    target = rows[feature]
    target.flat[where % target.size] = value
    try:
        samples = nvidia_samples(rows)
    except NvidiaLayoutError as e:
        assert "\n" not in str(e)
        return
    back = rows_of_samples(samples, SEQ, PRED + depth, depth)
    assert sorted(back) == sorted(rows)
    assert all(np.array_equal(back[name], rows[name]) for name in rows)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 3), feature=st.sampled_from(sorted(
    ["input_ids", "input_mask", "segment_ids", "positions", "masked_lm_positions", "masked_lm_ids",
     "masked_lm_weights", "next_sentence_positions", "next_sentence_labels", "next_sentence_weights"])),
    value=st.sampled_from([0, 1, 2, 3, 4, 7, -1, 0.5, float("nan"), 32767, 32768, -32768, -32769, 40000, -40000]),
    where=st.integers(0, 10**6), changed=st.booleans(), narrow=st.booleans(), wide_weights=st.booleans(),
    extra_slots=st.integers(0, 2), shards=st.integers(1, 4))
def test_the_c_accelerator_makes_the_runs_numpy_makes(seed, depth, feature, value, where, changed, narrow,
                                                      wide_weights, extra_slots, shards) -> None:
    """``encode_runs`` by the C accelerator (``_wire.nvidia_run``) and by numpy, for valid packed
    rows and rows with one value changed, int64 or int32 features, float32 or float64 weights,
    more NSP slots than instances, over several shards: the same frames, or C declines and numpy
    refuses the rows (it says why, in one line); and the runs read back as exactly those rows."""
    import bert_data.format.nvidia_hdf5 as module
    from bert_data.format import native
    from bert_data.format.columns import rows_by_shard

    if native.wire() is None:
        if os.environ.get("CI"):
            pytest.fail("CI builds the C accelerator")
        pytest.skip("the C accelerator is not built")
    rows = packed_rows(seed, 7, depth)
    for name in ("next_sentence_positions", "next_sentence_labels", "next_sentence_weights"):
        rows[name] = np.pad(rows[name], ((0, 0), (0, extra_slots)))
    if changed:
        target = rows[feature]
        if np.isnan(value) and target.dtype.kind != "f":
            value = 5
        target.flat[where % target.size] = value
    if narrow:
        rows = {name: values.astype(np.int32) if values.dtype == np.int64 else values for name, values in rows.items()}
    if wide_weights:
        rows = {name: values.astype(np.float64) if values.dtype == np.float32 else values for name, values in rows.items()}
    shard_of_row = np.random.default_rng(seed).integers(0, shards, 7)
    native_runs = module._native_runs(native.wire(), rows, rows_by_shard(shard_of_row))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_wire", None)
        try:
            expected = module.encode_runs(rows, shard_of_row)
        except NvidiaLayoutError as exc:
            assert native_runs is None and "\n" not in str(exc)
            return
    assert native_runs is not None, "C declined rows numpy writes"
    assert [(shard, bytes(run), records) for shard, run, records in native_runs] == \
        [(shard, bytes(run), records) for shard, run, records in expected]
    for shard, run, _ in native_runs:  # what is written reads back as the rows given
        flat = module.decode_run(bytes(run)[12:-4])
        samples = {name: module._objects(flat[name]) for name in module.NVIDIA_DATASETS}
        back = module.rows_of_samples(samples, SEQ, PRED + depth, depth + extra_slots)
        taken = shard_of_row == shard
        assert all(np.array_equal(back[name], rows[name][taken]) for name in rows), shard


def _h5py_object_writes(samples, chunk: int) -> bytes:
    """The file of ``samples`` as h5py writes object arrays of them (the writer before it handed
    HDF5 its own variable-length records): the same datasets, chunks and writes."""
    import io

    buffer = io.BytesIO()
    with h5py.File(buffer, "w", libver="earliest", track_order=False) as f:
        datasets = {name: f.create_dataset(name, (0,), maxshape=(None,), chunks=(chunk,),
                                           dtype=h5py.vlen_dtype(np.dtype(dtype)), track_times=False)
                    for name, dtype in NVIDIA_DATASETS.items()}
        n = len(samples["input_ids"])
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            for name, data in datasets.items():
                values = np.empty(stop - start, dtype=data.dtype)
                values[...] = samples[name][start:stop]
                data.resize((stop,))
                data.write_direct(values, dest_sel=np.s_[start:stop])
    return buffer.getvalue()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), chunk=st.integers(1, 9), empty=st.integers(0, 3))
def test_the_writers_bytes_are_h5pys_own_for_the_same_samples(seed, n, chunk, empty) -> None:
    """NvidiaHDF5Writer writes HDF5's variable-length records itself (no object arrays): the file
    must be byte for byte the one h5py writes from object arrays, over several chunks and with
    empty samples."""
    import bert_data.format.nvidia_hdf5 as module

    samples = nvidia_samples(packed_rows(seed, n, 3))
    for r in range(min(empty, n)):  # empty predictions: an empty vlen sample
        for name in ("masked_lm_positions", "masked_lm_ids"):
            samples[name][r] = np.zeros(0, NVIDIA_DATASETS[name])
    saved, module.CHUNK_ROWS = module.CHUNK_ROWS, chunk
    try:
        written = nvidia_hdf5_bytes(samples)
    finally:
        module.CHUNK_ROWS = saved
    assert written == _h5py_object_writes(samples, chunk)


@pytest.mark.parametrize("raised", [
    OSError(28, "Unable to synchronously close file (file write failed: time = Fri Nov 27 17:55:21 2026\n, filename = "
                "'x.hdf5', file descriptor = 5, errno = 28, error message = 'No space left on device')"),
    RuntimeError("Can't write data (file write failed: time = Fri Nov 27 17:55:21 2026\n, errno = 28, ...)"),
    RuntimeError("something else went wrong"),
])
def test_hdf5s_write_failures_are_one_line_naming_the_file(raised) -> None:
    """helper-24: a disk filling up while h5py wrote gave HDF5's whole error record, a ctime() with
    its newline inside, as the run's message (two lines). It is the OSError it is, naming the file."""
    from bert_data.format.nvidia_hdf5 import _as_os_errors

    with pytest.raises(OSError) as caught:
        with _as_os_errors("/out/examples-1.hdf5"):
            raise raised
    number = 28 if "errno = 28" in str(raised) else 5  # (EIO when HDF5 says no errno)
    assert (caught.value.errno, caught.value.filename) == (number, "/out/examples-1.hdf5")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("disk", ["room", "no fallocate", "full"])
def test_an_hdf5_files_room_is_taken_before_it_is_written(tmp_path: Path, monkeypatch, disk: str) -> None:
    """helper-31: a disk filled by another process while h5py wrote vlen records crashed the run
    (SIGSEGV in H5Dwrite) after its room had been checked. The file's bound is now reserved
    (posix_fallocate) before a byte is written and cut back to HDF5's end at close: the same
    bytes; no room is an OSError before writing, the file removed; a file system without
    fallocate writes as before."""
    import errno

    from bert_data.format.containers import CONTAINERS
    from bert_data.output import rewrite

    container, rows = CONTAINERS["hdf5"](), packed_rows(7, 30, 3)
    partial = _assembled(container, rows, [0, 11, 30], tmp_path / "shard.partial")
    bound = container.rewritten_size_bound(str(partial))
    real, reserved = os.posix_fallocate, []

    def fallocate(fd: int, offset: int, size: int) -> None:
        reserved.append(size)
        if disk == "full":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if disk == "no fallocate":
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        real(fd, offset, size)
        assert os.fstat(fd).st_size == size  # (the room is the file's until close)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    (tmp_path / "out").mkdir()
    if disk == "full":
        with pytest.raises(OSError) as raised:
            rewrite.rewrite_shard(str(partial), container, str(tmp_path / "out"), "x.hdf5", _spec())
        assert raised.value.errno == errno.ENOSPC and not list((tmp_path / "out").iterdir())
        return
    files, _ = rewrite.rewrite_shard(str(partial), container, str(tmp_path / "out"), "x.hdf5", _spec())
    assert files == [("x.hdf5", 30)] and reserved == [bound] and bound > os.path.getsize(tmp_path / "out" / "x.hdf5")
    assert (tmp_path / "out" / "x.hdf5").read_bytes() == nvidia_hdf5_bytes(nvidia_samples(rows))
