"""bert_data.torch reads URLs (``file://``, ``memory://``: fsspec through bert_data.storage) as it
reads local paths: the same records in the same order, and the same manifest checks (a directory
is the files its data_params.json lists; a listed file missing, or cut, is an error naming it).
Skipped without torch (except under CI) or fsspec."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Dict

import pytest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

fsspec = pytest.importorskip("fsspec")

from torch.utils.data import DataLoader  # noqa: E402

from torch_records import numbers_of, write_tagged_dir  # noqa: E402

from bert_data.errors import RecordFormatError  # noqa: E402
from bert_data.torch import PretrainingDataset, collate  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def to_memory(directory: Path) -> str:
    """A copy of ``directory``'s files under a fresh ``memory://`` directory."""
    fs = fsspec.filesystem("memory")
    url = f"memory://bert-data-{uuid.uuid4().hex}"
    for path in sorted(directory.iterdir()):
        with fs.open(f"{url}/{path.name}", "wb") as handle:
            handle.write(path.read_bytes())
    return url


def all_tensors(dataset) -> Dict[str, torch.Tensor]:
    return collate(list(dataset), trim_padding=False)


@pytest.fixture()
def local(tmp_path: Path) -> Path:
    return write_tagged_dir(tmp_path / "out", [7, 0, 5, 9], gzipped=[False, False, True, False])


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_a_url_directory_reads_as_its_local_copy(local: Path, scheme: str) -> None:
    url = f"file://{local}" if scheme == "file" else to_memory(local)
    want = all_tensors(PretrainingDataset(local))
    dataset = PretrainingDataset(url)
    assert dataset.num_records == 21 and all(f.startswith(f"{scheme}://") for f in dataset.source.files)
    assert dataset.source.listed_in[0].startswith(f"{scheme}://")  # the counts are the manifest's
    got = all_tensors(dataset)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert numbers_of(got) == list(range(21))
    # globs, shuffling and ranks work the same
    glob_read = PretrainingDataset(f"{url}/examples-*.tfrecords", shuffle=True, seed=4, rank=1, world_size=2)
    local_read = PretrainingDataset(str(local / "examples-*.tfrecords"), shuffle=True, seed=4, rank=1, world_size=2)
    assert numbers_of(all_tensors(glob_read)) == numbers_of(all_tensors(local_read))


def test_file_urls_read_in_dataloader_workers(local: Path) -> None:
    dataset = PretrainingDataset(f"file://{local}/", batch_size=4)
    got = sorted(n for batch in DataLoader(dataset, batch_size=None, num_workers=2) for n in numbers_of(batch))
    assert got == list(range(21))


def test_a_url_directory_gets_the_manifest_checks(local: Path, caplog) -> None:
    fs = fsspec.filesystem("memory")
    url = to_memory(local)
    with fs.open(f"{url}/examples-9.tfrecords", "wb") as handle:  # named like a shard, not listed
        handle.write((local / "examples-1.tfrecords").read_bytes())
    with caplog.at_level("WARNING", logger="bert_data"):
        assert PretrainingDataset(url).num_records == 21  # not read
    assert "examples-9.tfrecords" in caplog.text and "not listed" in caplog.text

    cut = to_memory(local)
    with fs.open(f"{cut}/examples-4.tfrecords", "wb") as handle:  # valid records, 5 where 9 are listed
        handle.write((local / "examples-3.tfrecords").read_bytes())
    with pytest.raises(RecordFormatError, match=rf"{cut}/examples-4.tfrecords holds 5 records, but "
                                                rf"{cut}/data_params.json lists 9"):
        list(PretrainingDataset(cut))
    with fs.open(f"{cut}/examples-4.tfrecords", "wb") as handle:  # damaged: a CRC error names the URL
        handle.write(b"\x00" * 40)
    with pytest.raises(RecordFormatError, match=rf"{cut}/examples-4.tfrecords"):
        list(PretrainingDataset(cut))

    missing = to_memory(local)
    fs.rm(f"{missing}/examples-3.tfrecords")
    with pytest.raises(RecordFormatError, match=r"lists examples-3.tfrecords, which is missing"):
        PretrainingDataset(missing)

    broken = to_memory(local)
    with fs.open(f"{broken}/data_params.json", "wb") as handle:
        handle.write(b"{not json")
    with pytest.raises(RecordFormatError, match=rf"{broken}/data_params.json: not valid JSON"):
        PretrainingDataset(broken)

    with pytest.raises(RecordFormatError, match="no TFRecord files match"):
        PretrainingDataset(f"{url}/nothing-*.tfrecords")


def test_a_url_without_a_manifest_is_counted_and_described_by_its_records(tmp_path: Path) -> None:
    local = write_tagged_dir(tmp_path / "bare", [3, 4], manifest=False)
    url = to_memory(local)
    dataset = PretrainingDataset(url)
    assert dataset.num_records == 7 and dataset.source.listed_in == ("", "")
    assert dataset.layout == "nsp" and dataset.source.max_seq_length == 8
    assert numbers_of(all_tensors(dataset)) == list(range(7))
    assert json.loads(json.dumps(dataset.state_dict(0, batch_size=2)))["num_records"] == 7


def test_shards_of_another_output_format_are_an_error_naming_it(local: Path) -> None:
    """A directory, or a glob of its files, of another --output_format is refused, never read as TFRecords."""
    manifest = json.loads((local / "data_params.json").read_text())
    (local / "data_params.json").write_text(json.dumps(dict(manifest, output_format="hdf5")))
    url = to_memory(local)
    for where in (url, f"{url}/examples-*.tfrecords", str(local / "examples-1.tfrecords")):
        with pytest.raises(RecordFormatError, match=r"holds hdf5 files \(--output_format hdf5\), not TFRecords"):
            PretrainingDataset(where)
