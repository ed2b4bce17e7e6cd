#!/usr/bin/env python3
"""Benchmark bert_data.torch against the ``tfrecord`` PyPI package on the same shards.

    python scripts/benchmark_torch_reader.py                       # make the shards, 3 runs of each reader
    python scripts/benchmark_torch_reader.py --work /tmp/bench --runs 5 --json torch_reader.json

The shards: ``create_tfrecords`` on ``../shared/corpus`` (or ``$BERT_DATA_SHARED/corpus``) with
the uncased BERT vocabulary, ``--config bert_base_msl128 --dupe_factor 2`` (made once into
``--work``, reused after). The ``tfrecord`` package is not a dependency of bert_data: install it
into the environment to measure it (``pip install tfrecord``); without it only bert_data.torch is
measured.

Every measured run is a fresh child process pinned to one core (``sched_setaffinity``,
``torch.set_num_threads(1)``) that reads every record once through a
``torch.utils.data.DataLoader`` with ``num_workers=0``, no shuffling, batches of ``--batch``
records, ``--passes`` times, and prints its records/s (over the iteration only: imports and opening
excluded) and
its peak RSS (``ru_maxrss``). Readers:

* ``bert_data.torch (batches)``: ``PretrainingDataset(out, batch_size=B)``,
  ``DataLoader(batch_size=None)``: the Hugging Face tensors, dense labels, trimmed batches;
* ``bert_data.torch (records)``: ``PretrainingDataset(out)``, ``DataLoader(batch_size=B,
  collate_fn=bert_data.torch.collate)``: one dict of tensors per record, collated;
* ``tfrecord``: ``tfrecord.torch.TFRecordDataset`` per shard (chained) with the seven features'
  description, the DataLoader's default collate: the raw features as tensors (no labels made,
  no CRC checked), i.e. less work than bert_data.torch does;
* ``baseline (imports only)``: torch, the tfrecord package (when installed) and bert_data.torch
  imported, nothing read: the RSS the readers add to.

Reported: the median of ``--runs`` runs (min..max) of records/s and peak RSS, and the ratio of
each bert_data.torch mode to ``tfrecord``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERT_DATA_SHARED", REPO.parent / "shared"))
BASELINE = "baseline (imports only)"
READERS = ("bert_data.torch (batches)", "bert_data.torch (records)", "tfrecord", BASELINE)

CHILD = r"""
import json, os, resource, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import torch
torch.set_num_threads(1)
from torch.utils.data import DataLoader
reader, out, batch, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
files = sorted(json.load(open(os.path.join(out, "data_params.json")))["instances_per_shard"])
if reader.startswith("baseline"):  # what importing torch and the readers costs: RSS without reading
    import bert_data.torch
    try:
        import tfrecord.torch.dataset
    except ImportError:
        pass
    loader = []
elif reader == "tfrecord":
    from tfrecord.torch.dataset import TFRecordDataset
    description = {"input_ids": "int", "input_mask": "int", "segment_ids": "int", "masked_lm_positions": "int",
                   "masked_lm_ids": "int", "masked_lm_weights": "float", "next_sentence_labels": "int"}
    dataset = torch.utils.data.ChainDataset([TFRecordDataset(os.path.join(out, f), None, description) for f in files])
    loader = DataLoader(dataset, batch_size=batch, num_workers=0)
else:
    from bert_data.torch import PretrainingDataset, collate
    if reader.endswith("(batches)"):
        loader = DataLoader(PretrainingDataset(out, batch_size=batch), batch_size=None, num_workers=0)
    else:
        loader = DataLoader(PretrainingDataset(out), batch_size=batch, num_workers=0, collate_fn=collate)
start = time.perf_counter()
records = sum(int(b["input_ids"].shape[0]) for _ in range(passes) for b in loader)
seconds = time.perf_counter() - start
print(json.dumps({"records": records, "seconds": seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_shards(work: Path, dupe_factor: int) -> Path:
    """``create_tfrecords`` on the shared corpus into ``work/out`` (kept for the next runs)."""
    out = work / f"msl128_dupe{dupe_factor}"
    if (out / "data_params.json").is_file():
        return out
    corpus = SHARED / "corpus"
    vocab = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
    if not corpus.is_dir() or not vocab.is_file():
        sys.exit(f"benchmark_torch_reader: {corpus} and {vocab} are needed (set BERT_DATA_SHARED)")
    work.mkdir(parents=True, exist_ok=True)
    metadata = work / "metadata.txt"
    metadata.write_text("".join(f"{p.relative_to(corpus)}\n" for p in sorted(corpus.rglob("*.txt"))), encoding="utf-8")
    command = [sys.executable, "-m", "bert_data.tools.main", "create", "--metadata_files", str(metadata),
               "--input_files_prefix", str(corpus), "--vocab_file", str(vocab), "--do_lower_case",
               "--config", "bert_base_msl128", "--dupe_factor", str(dupe_factor), "--num_output_files", "8",
               "--output_dir", str(out), "--overwrite", "--quiet"]
    subprocess.run(command, check=True)
    return out


def has_tfrecord() -> bool:
    done = subprocess.run([sys.executable, "-c", "import tfrecord.torch.dataset"], capture_output=True)
    return done.returncode == 0


def measure(reader: str, out: Path, batch: int, passes: int) -> Dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, reader, str(out), str(batch), str(passes)], capture_output=True,
                          text=True,
                          cwd=REPO)
    if done.returncode != 0:
        sys.exit(f"benchmark_torch_reader: {reader} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["records_per_s"] = result["records"] / result["seconds"] if result["records"] else 0.0
    return result


def summary(runs: List[Dict[str, float]]) -> Dict[str, float]:
    rates = [r["records_per_s"] for r in runs]
    rss = [r["peak_rss_mb"] for r in runs]
    return {"records": runs[0]["records"], "records_per_s": statistics.median(rates), "min": min(rates),
            "max": max(rates), "peak_rss_mb": statistics.median(rss)}


def report(results: Dict[str, Dict[str, float]], out: Path, passes: int) -> None:
    records = results[READERS[0]]["records"] // passes
    size = sum(p.stat().st_size for p in out.glob("*.tfrecords")) / 1e6
    print(f"{records:,} records ({size:.0f} MB of shards in {out}) read {passes} times by each reader; one core, "
          "DataLoader(num_workers=0), no shuffle")
    print(f"{'reader':28} {'records/s':>12} {'(min..max)':>22} {'peak RSS':>10}")
    for name, r in results.items():
        if name == BASELINE:
            print(f"{name:28} {'-':>12} {'':>22} {r['peak_rss_mb']:8.0f} MB")
            continue
        spread = f"{r['min']:,.0f}..{r['max']:,.0f}"
        print(f"{name:28} {r['records_per_s']:12,.0f} {spread:>22} {r['peak_rss_mb']:8.0f} MB")
    base: Optional[Dict[str, float]] = results.get("tfrecord")
    if base:
        for name, r in results.items():
            if name not in ("tfrecord", BASELINE):
                print(f"{name}: {r['records_per_s'] / base['records_per_s']:.1f}x the tfrecord package")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bert_data_torch_bench"), help="where the shards go")
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3, help="passes over the shards per run (longer: steadier)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    out = make_shards(args.work, args.dupe_factor)
    readers = [r for r in READERS if r != "tfrecord" or has_tfrecord()]
    if "tfrecord" not in readers:
        print("the tfrecord package is not installed (pip install tfrecord): measuring bert_data.torch only")
    results = {}
    for reader in readers:
        results[reader] = summary([measure(reader, out, args.batch, args.passes) for _ in range(args.runs)])
    report(results, out, args.passes)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
