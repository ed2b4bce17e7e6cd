#!/usr/bin/env python3
"""Benchmark the token cache (issue 29): both phases from one tokenization vs two raw-text runs.

    python scripts/benchmark_token_cache.py                 # ../shared/corpus, 1 worker, 3 rounds
    python scripts/benchmark_token_cache.py --runs 5 --workers 2 --json cache.json

Each round runs, alternating so that the machine's other load hits every kind alike: phase 1 from
the text (MSL 128, 20 predictions), phase 2 from the text (MSL 512, 80: ``bert_base_msl512``),
``bert-data tokenize``, phase 1 from the cache, phase 2 from the cache (all dupe 10, NSP, seed 0).
Create runs are measured by ``scripts/benchmark.py``'s own child (``measure_once``: wall and CPU
over ``run()``, whole-process wall and CPU, stage times); tokenize as a whole process (wall and
CPU of the process tree). Every from-cache output is compared byte for byte with the raw one.
Every run imports a copy of ``bert_data`` taken when the benchmark starts. Reported: medians of the rounds, the phase-2 speed-up (raw / from cache, over whole processes
and over ``run()``), and (tokenize + both phases from the cache) / (both phases from the text).
"""

from __future__ import annotations

import argparse
import compileall
import filecmp
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import SHARED, STAGES, measure_once, prepare_corpus  # noqa: E402  (the sibling script)

PHASES = {"phase1": {"max_seq_length": 128, "max_predictions_per_seq": 20},
          "phase2": {"max_seq_length": 512, "max_predictions_per_seq": 80}}


def tokenize_once(info: Dict[str, object], vocab: str, cache: Path, workers: int) -> Dict[str, float]:
    """`bert-data tokenize` as a whole process: wall, CPU (process tree), cache bytes."""
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [sys.executable, "-m", "bert_data.tools.main", "tokenize", "--metadata_files", str(info["metadata"]),
           "--input_files_prefix", str(info["prefix"]), "--vocab_file", vocab, "--do_lower_case",
           "--input_format", str(info["input_format"]), "--output_dir", str(cache), "--num_workers", str(workers), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"tokenize failed:\n{done.stderr[-4000:]}")
    manifest = json.loads((cache / "tokens.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"process_wall_s": wall, "process_cpu_s": cpu, "cache_bytes": manifest["bytes"],
            "input_bytes": manifest["counts"]["input_bytes"]}


def create_once(info, vocab: str, out: Path, phase: str, workers: int, cache: Optional[Path]) -> Dict[str, object]:
    spec = {"metadata_files": [info["metadata"]], "input_files_prefix": info["prefix"], "vocab_file": vocab,
            "do_lower_case": True, "dupe_factor": 10, "num_output_files": 10, "num_workers": workers,
            "output_dir": str(out), "input_format": info["input_format"], "seed": 0, **PHASES[phase]}
    if cache is not None:
        spec["from_tokens"] = str(cache)
    return measure_once(spec, 0.05)


def identical(a: Path, b: Path) -> bool:
    names = sorted(n for n in os.listdir(a) if n.endswith(".tfrecords"))
    return names == sorted(n for n in os.listdir(b) if n.endswith(".tfrecords")) and all(
        filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def freeze_sources(work: Path) -> None:
    """Every run imports a copy of the package taken now: a tree edited while the benchmark runs
    (by other work on a shared machine) must not make two runs of one round differ."""
    source = Path(__file__).resolve().parents[1] / "bert_data"
    shutil.copytree(source, work / "src" / "bert_data", ignore=shutil.ignore_patterns("__pycache__"))
    # Compiled once, as an installed package is: with PYTHONDONTWRITEBYTECODE set, every run would
    # otherwise compile the whole package again (~0.1-0.3 CPU-s a run, paid by both sides).
    compileall.compile_dir(str(work / "src" / "bert_data"), quiet=1)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(work / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(SHARED / "corpus"))
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "bert-base-uncased-vocab.txt"))
    parser.add_argument("--replicate", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="rounds (each: every kind once, alternating)")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bert_data_bench_cache_"))
    freeze_sources(work)
    rows: Dict[str, List[Dict[str, object]]] = {k: [] for k in ("raw_phase1", "raw_phase2", "tokenize", "cached_phase1", "cached_phase2")}
    try:
        info = prepare_corpus(Path(args.corpus), args.replicate, work)
        print(f"corpus {args.corpus} x{args.replicate}: {info['documents']} documents, {info['bytes'] / 1e6:.2f} MB; "
              f"{args.workers} worker(s), {args.runs} rounds", flush=True)
        cache = work / "cache"
        for round_ in range(args.runs):
            for phase in PHASES:
                rows[f"raw_{phase}"].append(create_once(info, args.vocab_file, work / f"raw_{phase}", phase, args.workers, None))
            rows["tokenize"].append(tokenize_once(info, args.vocab_file, cache, args.workers))
            for phase in PHASES:
                out = work / f"cached_{phase}"
                rows[f"cached_{phase}"].append(create_once(info, args.vocab_file, out, phase, args.workers, cache))
                if not identical(out, work / f"raw_{phase}"):
                    raise SystemExit(f"{phase}: the output from the cache differs from the output from the text")
                shutil.rmtree(out)
                shutil.rmtree(work / f"raw_{phase}")
            line = ", ".join(f"{k} {v[-1]['process_wall_s']:.1f}s" for k, v in rows.items())
            print(f"  round {round_ + 1}: {line} (outputs identical)", flush=True)
        summary = summarize(rows)
        report(summary)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def summarize(rows: Dict[str, List[Dict[str, object]]]) -> Dict[str, object]:
    out: Dict[str, object] = {}
    for kind, runs in rows.items():
        entry = {key: median([r[key] for r in runs]) for key in ("process_wall_s", "process_cpu_s")}
        if kind != "tokenize":
            entry.update({key: median([r[key] for r in runs]) for key in ("wall_s", "cpu_s", "other_cores")})
            totals = [sum(r["stage_seconds"].values()) or 1.0 for r in runs]
            entry["stage_share"] = {s: median([r["stage_seconds"][s] / t for r, t in zip(runs, totals)]) for s in STAGES}
        else:
            entry["cache_over_text"] = runs[0]["cache_bytes"] / runs[0]["input_bytes"]
        out[kind] = entry
    raw = out["raw_phase1"]["process_wall_s"] + out["raw_phase2"]["process_wall_s"]
    cached = out["tokenize"]["process_wall_s"] + out["cached_phase1"]["process_wall_s"] + out["cached_phase2"]["process_wall_s"]
    raw_cpu = out["raw_phase1"]["process_cpu_s"] + out["raw_phase2"]["process_cpu_s"]
    cached_cpu = out["tokenize"]["process_cpu_s"] + out["cached_phase1"]["process_cpu_s"] + out["cached_phase2"]["process_cpu_s"]
    out["phase2_speedup_process"] = out["raw_phase2"]["process_wall_s"] / out["cached_phase2"]["process_wall_s"]
    out["phase2_speedup_run"] = out["raw_phase2"]["wall_s"] / out["cached_phase2"]["wall_s"]
    out["both_phases_ratio_wall"] = cached / raw
    out["both_phases_ratio_cpu"] = cached_cpu / raw_cpu
    return out


def report(summary: Dict[str, object]) -> None:
    print("\nmedians:")
    for kind in ("raw_phase1", "raw_phase2", "tokenize", "cached_phase1", "cached_phase2"):
        s = summary[kind]
        line = f"  {kind:14} process {s['process_wall_s']:.2f} s wall, {s['process_cpu_s']:.2f} CPU-s"
        if "wall_s" in s:
            shares = ", ".join(f"{k} {v:.0%}" for k, v in s["stage_share"].items() if v >= 0.005)
            line += f"; run() {s['wall_s']:.2f} s, {s['cpu_s']:.2f} CPU-s; others {s['other_cores']:.2f} cores; {shares}"
        else:
            line += f"; cache {s['cache_over_text']:.2f}x the text"
        print(line)
    print(f"phase 2 from the cache: {summary['phase2_speedup_process']:.2f}x faster (whole process), "
          f"{summary['phase2_speedup_run']:.2f}x (run())")
    print(f"tokenize + both phases from the cache / both phases from the text: {summary['both_phases_ratio_wall']:.2f} "
          f"(wall), {summary['both_phases_ratio_cpu']:.2f} (CPU)")


if __name__ == "__main__":
    sys.exit(main())
