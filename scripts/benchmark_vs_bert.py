#!/usr/bin/env python3
"""Ours against google-research/bert's ``create_pretraining_data.py``, both in one run, one core.

    python scripts/benchmark_vs_bert.py --bert_dir PATH/TO/google-research/bert --corpus DIR --runs 3

BERT's script is not part of this repository: ``--bert_dir`` is a checkout of
google-research/bert (its ``create_pretraining_data.py`` and ``tokenization.py``). It is a
TensorFlow 1 program; it runs here unchanged under ``tensorflow.compat.v1`` (the module is put in
``sys.modules["tensorflow"]`` before the script is run, nothing else is changed).

Each round runs, alternating, BERT's script on the corpus in its layout (one sentence per line,
blank lines between documents: the sentences of our default segmenter, written once before
the rounds, so BERT's time excludes sentence splitting while ours includes it) and our pipeline
with one worker on the raw text (``scripts/benchmark.py``'s measured child: reading, splitting,
tokenizing, instances, masking, writing), the same MSL, predictions, dupe factor and vocabulary.
Reported: MB of raw text per second of whole-process wall time and per CPU-second for each, and
the ratio ours / BERT's per round with its median and min..max. Both are whole processes
(interpreter start-up and imports included). Peak RSS of each process tree as well.
"""

from __future__ import annotations

import argparse
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
from benchmark import SHARED, TreeRssSampler, measure_once, prepare_corpus  # noqa: E402  (the sibling script)

# Runs BERT's script with TensorFlow 1's API: tf.compat.v1 stands in for the `tensorflow` module.
_SHIM = (
    "import os, runpy, sys\n"
    "import tensorflow.compat.v1 as tf\n"
    "sys.modules['tensorflow'] = tf\n"
    "script = sys.argv[1]\n"
    "sys.path.insert(0, os.path.dirname(script))\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def write_bert_layout(info: Dict[str, object], target: Path) -> int:
    """The corpus in BERT's layout, split into sentences by our default segmenter (untimed)."""
    from bert_data.sentences import SentenceSegmenter

    segmenter = SentenceSegmenter()
    prefix = Path(str(info["prefix"]))
    entries = [line for line in Path(str(info["metadata"])).read_text(encoding="utf-8").splitlines() if line]
    documents = [(prefix / entry).read_text(encoding="utf-8", errors="replace") for entry in entries]
    sentences, _ = segmenter.segment(documents)
    with open(target, "w", encoding="utf-8") as handle:
        for doc in sentences:
            if doc:
                handle.write("\n".join(" ".join(s.split()) for s in doc) + "\n\n")
    return sum(len(doc) for doc in sentences)


def run_bert(bert_dir: Path, layout: Path, vocab: str, out: Path, args: argparse.Namespace) -> Dict[str, float]:
    """BERT's script as a whole process: wall, CPU, peak RSS of its tree."""
    cmd = [sys.executable, "-c", _SHIM, str(bert_dir / "create_pretraining_data.py"), f"--input_file={layout}",
           f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case=True",
           f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={args.max_predictions_per_seq}",
           "--masked_lm_prob=0.15", "--random_seed=12345", f"--dupe_factor={args.dupe_factor}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sampler = TreeRssSampler(proc.pid, 0.2)
    sampler.start()
    _, stderr = proc.communicate()
    sampler.stop()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"BERT's script failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out.unlink(missing_ok=True)
    return {"process_wall_s": wall, "process_cpu_s": cpu, "peak_rss_tree_mb": sampler.peak_kb / 1024}


def spread(values: Sequence[float]) -> Dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bert_dir", required=True, help="a checkout of google-research/bert")
    parser.add_argument("--corpus", default=str(SHARED / "corpus"), help="directory of *.txt documents, one per file")
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "bert-base-uncased-vocab.txt"))
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    bert_dir = Path(args.bert_dir)
    if not (bert_dir / "create_pretraining_data.py").is_file():
        parser.error(f"--bert_dir {bert_dir}: no create_pretraining_data.py there")
    work = Path(tempfile.mkdtemp(prefix="bert_data_vs_bert_"))
    # The package's modules compiled once, as `pip install` does: with PYTHONDONTWRITEBYTECODE set
    # (some sandboxes set it) an editable install would otherwise recompile them in every run.
    import compileall

    import bert_data

    compileall.compile_dir(os.path.dirname(bert_data.__file__), quiet=1)
    try:
        info = prepare_corpus(Path(args.corpus), 1, work)
        layout = work / "bert_layout.txt"
        sentences = write_bert_layout(info, layout)
        mb = int(info["bytes"]) / 1e6
        print(f"corpus {args.corpus}: {info['documents']} documents, {mb:.2f} MB of text, {sentences} sentences; "
              f"dupe {args.dupe_factor}, MSL {args.max_seq_length}, {args.runs} rounds", flush=True)
        rows: Dict[str, List[Dict[str, float]]] = {"bert": [], "ours": []}
        for round_ in range(args.runs):
            rows["bert"].append(run_bert(bert_dir, layout, args.vocab_file, work / "bert.tfrecord", args))
            spec = {"metadata_files": [info["metadata"]], "input_files_prefix": info["prefix"],
                    "vocab_file": args.vocab_file, "do_lower_case": True, "dupe_factor": args.dupe_factor,
                    "max_seq_length": args.max_seq_length, "max_predictions_per_seq": args.max_predictions_per_seq,
                    "num_output_files": 10, "num_workers": 1, "output_dir": str(work / "ours"),
                    "input_format": info["input_format"], "seed": 12345}
            rows["ours"].append(measure_once(spec, 0.05))
            shutil.rmtree(work / "ours", ignore_errors=True)
            b, o = rows["bert"][-1], rows["ours"][-1]
            print(f"  round {round_ + 1}: BERT {b['process_wall_s']:.1f} s wall / {b['process_cpu_s']:.1f} CPU-s, ours "
                  f"{o['process_wall_s']:.1f} s / {o['process_cpu_s']:.1f} CPU-s: "
                  f"{b['process_wall_s'] / o['process_wall_s']:.1f}x wall, {b['process_cpu_s'] / o['process_cpu_s']:.1f}x CPU",
                  flush=True)
        summary = {
            name: {"mb_per_s": spread([mb / r["process_wall_s"] for r in runs]),
                   "mb_per_cpu_s": spread([mb / r["process_cpu_s"] for r in runs]),
                   "peak_rss_tree_mb": spread([r["peak_rss_tree_mb"] for r in runs])}
            for name, runs in rows.items()
        }
        summary["ratio_wall"] = spread([b["process_wall_s"] / o["process_wall_s"] for b, o in zip(rows["bert"], rows["ours"])])
        summary["ratio_cpu"] = spread([b["process_cpu_s"] / o["process_cpu_s"] for b, o in zip(rows["bert"], rows["ours"])])
        fmt = lambda s, d: f"{s['median']:.{d}f} [{s['min']:.{d}f}..{s['max']:.{d}f}]"  # noqa: E731
        for name in ("bert", "ours"):
            s = summary[name]
            print(f"{name}: {fmt(s['mb_per_s'], 3)} MB/s, {fmt(s['mb_per_cpu_s'], 3)} MB per CPU-s, "
                  f"peak RSS {fmt(s['peak_rss_tree_mb'], 0)} MB")
        print(f"ours / BERT's: {fmt(summary['ratio_wall'], 1)}x (wall), {fmt(summary['ratio_cpu'], 1)}x (CPU)")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
