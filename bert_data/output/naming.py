"""Every file name a run writes or looks for, from one set of templates.

Readers (inspect, the tf.data reader, the end-of-run summary) and writers (the three output
kinds, ``--overwrite``) all take names from here, so a change of template is one edit::

    {output_dir}/{name}-{i}{suffix}                   shard i (1-based); suffix .tfrecords or .parquet
    {output_dir}/{name}-{i}.{j:05d}.mds               piece j of shard i (--output_format mds)
    {output_dir}/index.json                           MDS's index of those pieces (--output_format mds)
    {output_dir}/data_params.json                     the manifest, written last
    {output_dir}/.bert_data_work/run.json             settings + input fingerprints of the run in progress
    {output_dir}/.bert_data_work/progress.json        the local journal: groups appended, shard sizes
    {output_dir}/.bert_data_work/{shard}.partial      a shard being assembled (local output)
    {output_dir}/.bert_data_work/fragments/gNNNNNNNNN.frag   one finished group's records
    {output_dir}/.bert_data_work/index/gNNNNNNNNN.json       a URL output's journal entry for a group
    DIR/.{NAME}.bert_data/                            staging directory of BERT-named --output_file NAME,...
    DIR/.{NAME}.data_params.json                      the manifest of BERT-named output files

This module imports nothing of the package: every other module may use it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, List, Optional

TFRECORD_SUFFIX = ".tfrecords"
PARQUET_SUFFIX = ".parquet"  # --output_format parquet: {name}-{i}.parquet
MDS_SUFFIX = ".mds"  # --output_format mds: {name}-{i}.{j:05d}.mds, the MDS files of shard i
HDF5_SUFFIX = ".hdf5"  # --output_format hdf5: {name}-{i}.hdf5 (NVIDIA's trainer reads names containing "part_")
MDS_INDEX_NAME = "index.json"  # --output_format mds: MosaicML streaming's index of every MDS file
MANIFEST_NAME = "data_params.json"
WORK_DIR_NAME = ".bert_data_work"
RUN_FILE = "run.json"  # the settings of the run in progress (checked by --resume)
PROGRESS_FILE = "progress.json"  # journal: groups merged so far, shard sizes, counters
REWRITTEN_DIR = "rewritten"  # in the work directory: a rewriting container's files before they are placed
PARTIAL_SUFFIX = ".partial"
NAMED_MANIFEST_SUFFIX = ".data_params.json"
STAGING_SUFFIX = ".bert_data"
LOCK_NAME = ".bert_data.lock"

Join = Callable[..., str]


def shard_file_names(name: str, num_output_files: int, suffix: str = TFRECORD_SUFFIX) -> List[str]:
    """``name-1.tfrecords`` ... ``name-N.tfrecords``: the shards of a run, in shard order."""
    return [f"{name}-{i}{suffix}" for i in range(1, num_output_files + 1)]


def shard_glob(name: str = "*", suffix: str = TFRECORD_SUFFIX) -> str:
    """A glob matching the shards of a run named ``name`` (every run's with the default)."""
    return f"{name}-*{suffix}" if name != "*" else f"*{suffix}"


def is_shard_of(file_name: str, name: str, suffix: str = TFRECORD_SUFFIX) -> bool:
    """Whether ``file_name`` (a base name) is a shard a run named ``name`` may have written
    (what ``--overwrite`` removes: never a file of another name)."""
    return re.fullmatch(re.escape(name) + r"-.*" + re.escape(suffix), file_name) is not None


def natural_key(path: str) -> List[Any]:
    """Sort key of shard file names: ``examples-2`` before ``examples-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def work_dir(output_dir: str, join: Join = os.path.join) -> str:
    return join(output_dir, WORK_DIR_NAME)


def fragment_name(work: str, group_index: int, join: Join = os.path.join) -> str:
    """A group's fragment in a work directory (``join``: :func:`bert_data.storage.join` for URLs)."""
    return join(work, "fragments", f"g{group_index:09d}.frag")


def index_name(work: str, group_index: int, join: Join = os.path.join) -> str:
    """A URL output's journal entry of a group."""
    return join(work, "index", f"g{group_index:09d}.json")


INDEX_PATTERN = re.compile(r"g(\d{9})\.json$")


def index_group(path: str) -> Optional[int]:
    """The group of an index entry's path, or None when the name is not one of ours."""
    match = INDEX_PATTERN.search(path)
    return int(match.group(1)) if match else None


def named_outputs_manifest_path(first_output: str) -> str:
    """``DIR/.NAME.data_params.json``: the manifest of output files named one by one (google-research/
    bert's ``--output_file a,b,c``, written by ``create_pretraining_data``), beside the first of
    them and hidden, so that ``run_pretraining.py --input_file=DIR/NAME*`` never matches it."""
    head, name = os.path.split(os.path.abspath(first_output))
    return os.path.join(head, f".{name}{NAMED_MANIFEST_SUFFIX}")


def staging_dir(first_output: str) -> str:
    """``DIR/.NAME.bert_data``: where a run for BERT-named output files is made."""
    head, name = os.path.split(os.path.abspath(first_output))
    return os.path.join(head, f".{name}{STAGING_SUFFIX}")
