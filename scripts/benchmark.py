#!/usr/bin/env python3
"""Benchmark the real pipeline: throughput, peak RSS of the process tree, time per stage.

    python scripts/benchmark.py                                  # ../shared/corpus, 1 worker, 3 runs
    python scripts/benchmark.py --workers 1 2 --dupe_factor 1 --json bench.json
    python scripts/benchmark.py --replicate 4 --dupe_factor 1    # corpus 4x larger, distinct documents
    python scripts/benchmark.py --shape jsonl --replicate 5 --workers 1 2   # one ~50 MB JSON Lines file

Every measured run is a fresh child process (``--child``) that builds a ``Config`` with
``build_config`` and calls ``bert_data.runners.job.run(config, on_group=...)``; it sums
``GroupResult.seconds`` over the groups (wall time per stage, summed over workers) and
prints one JSON line on stdout. The parent samples ``VmRSS`` of the child and all its
descendants (the worker pool) every ``--sample_ms`` and keeps the maximum of the *sum*.

Reported per worker count, as the median of ``--runs`` runs (spread = min..max):
raw-text MB/s (1 MB = 10^6 bytes of input files), documents/s (documents read), instances/s,
peak RSS of the process tree, the share of each stage in the summed stage time, and for
N >= 2 workers the parallel efficiency (MB/s at N) / (N x MB/s at 1).
Throughput is measured over ``run()`` only (worker start-up and spaCy load included,
interpreter start-up and imports not). Because other processes may share the machine, each
run also reports its CPU seconds (the child and its reaped workers, over ``run()``; MB per
CPU-second hardly depends on other load) and ``other_cores``: how many cores other processes
kept busy meanwhile (from /proc/stat), i.e. how noisy the wall-clock figures are.
``publish_wall_s`` is the tail from the last group's result to the manifest (Parquet's footers,
MDS's and HDF5's files made from the assembled shards): the part a format adds after the groups,
steadier than the whole run on a shared machine.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERT_DATA_SHARED", REPO.parent / "shared"))
STAGES = ("read", "pool", "segment", "tokenize", "instances", "serialize", "write")  # pool: the NSP negative pool, once per worker
_BOMS = (  # longest first: UTF-32-LE's BOM starts with UTF-16-LE's
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


# --- corpus ---------------------------------------------------------------------------------


def list_documents(corpus: Path) -> List[str]:
    """Every *.txt under ``corpus``, as sorted relative paths."""
    return sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*.txt") if p.is_file())


def _distinct_copy(data: bytes, header: str) -> bytes:
    """``data`` with ``header`` as its first paragraph, after a BOM and in the BOM's encoding."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return bom + (header + "\n\n").encode(encoding) + data[len(bom) :]
    return (header + "\n\n").encode("utf-8") + data


SHAPES = ("files", "jsonl", "jsonl_gz", "books")


def _texts(corpus: Path, docs: List[str], replicate: int):
    """Every document of every copy, as text (copies made distinct by a first paragraph)."""
    for k in range(1, replicate + 1):
        for rel in docs:
            data = (corpus / rel).read_bytes()
            if replicate > 1:
                data = _distinct_copy(data, f"Copy {k} of {Path(rel).name}.")
            for bom, encoding in _BOMS:
                if data.startswith(bom):
                    yield data[len(bom):].decode(encoding, "replace")
                    break
            else:
                yield data.decode("utf-8", "replace")


def prepare_shape(corpus: Path, replicate: int, work_dir: Path, shape: str) -> Dict[str, object]:
    """The corpus in another input shape: one big JSON Lines file (``jsonl``), the same gzipped
    (``jsonl_gz``, read streaming as one group), or 4 book-sized documents per copy (``books``:
    one document per file, each the concatenation of a quarter of the corpus)."""
    docs = list_documents(corpus)
    prefix = work_dir / "shaped"
    prefix.mkdir(parents=True, exist_ok=True)
    metadata = work_dir / "metadata.txt"
    if shape in ("jsonl", "jsonl_gz"):
        name = "corpus.jsonl" + (".gz" if shape == "jsonl_gz" else "")
        import gzip

        opener = gzip.open if shape == "jsonl_gz" else open
        with opener(prefix / name, "wt", encoding="utf-8") as handle:
            for text in _texts(corpus, docs, replicate):
                handle.write(json.dumps({"text": text}) + "\n")
        entries = [name]
        n_docs = len(docs) * replicate
    else:  # books
        entries = []
        texts = list(_texts(corpus, docs, replicate))
        quarter = max(1, len(texts) // (4 * replicate))
        for b in range(0, len(texts), quarter):
            name = f"book{b // quarter:03d}.txt"
            (prefix / name).write_text("\n\n".join(texts[b : b + quarter]) + "\n", encoding="utf-8")
            entries.append(name)
        n_docs = len(entries)
    metadata.write_text("\n".join(entries) + "\n", encoding="utf-8")
    total = sum((prefix / e).stat().st_size for e in entries)
    return {"metadata": str(metadata), "prefix": str(prefix), "documents": n_docs, "bytes": total,
            "input_format": "jsonl" if shape.startswith("jsonl") else "text"}


def prepare_corpus(corpus: Path, replicate: int, work_dir: Path, shape: str = "files") -> Dict[str, object]:
    """Write the metadata file (and, for ``replicate`` > 1, K distinct copies of every document)."""
    docs = list_documents(corpus)
    if not docs:
        raise SystemExit(f"benchmark: no *.txt files under {corpus}")
    if shape != "files":
        return prepare_shape(corpus, replicate, work_dir, shape)
    metadata = work_dir / "metadata.txt"
    if replicate <= 1:
        prefix = corpus
        entries = docs
    else:
        prefix = work_dir / "corpus"
        entries = []
        for k in range(1, replicate + 1):
            for rel in docs:
                data = (corpus / rel).read_bytes()
                name = f"copy{k:03d}/{rel}"
                target = prefix / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(_distinct_copy(data, f"Copy {k} of {Path(rel).name}."))
                entries.append(name)
    metadata.write_text("\n".join(entries) + "\n", encoding="utf-8")
    total = sum((prefix / e).stat().st_size for e in entries)
    return {"metadata": str(metadata), "prefix": str(prefix), "documents": len(entries), "bytes": total,
            "input_format": "text"}


# --- RSS of a process tree ------------------------------------------------------------------


def _children(pid: int) -> List[int]:
    out: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                out.extend(int(x) for x in handle.read().split())
        except OSError:
            pass
    return out


def _children_by_scan() -> Dict[int, List[int]]:
    tree: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def process_tree(root: int) -> List[int]:
    tree = None if HAVE_CHILDREN_FILE else _children_by_scan()
    pids, stack = [], [root]
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack.extend(_children(pid) if tree is None else tree.get(pid, []))
    return pids


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ticks(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (own, not reaped children's)


class TreeRssSampler(threading.Thread):
    """Max over time of the summed VmRSS of ``pid`` and all its descendants."""

    def __init__(self, pid: int, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kb = 0
        self.max_processes = 0
        self.samples = 0
        self.cpu_ticks: Dict[int, int] = {}  # pid -> utime + stime at its last sample
        self._halt = threading.Event()

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every process ever seen in the tree (workers forked by a fork server are
        not reaped by the coordinator, so rusage cannot see them; sampling can)."""
        return sum(self.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        while not self._halt.is_set():
            pids = process_tree(self.pid)
            for p in pids:
                ticks = cpu_ticks(p)
                if ticks is not None:
                    self.cpu_ticks[p] = ticks
            total = sum(rss_kb(p) for p in pids)
            self.peak_kb = max(self.peak_kb, total)
            self.max_processes = max(self.max_processes, len(pids))
            self.samples += 1
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join()


# --- one measured run (child side) ----------------------------------------------------------


def child_main(spec_json: str) -> int:
    import logging
    from collections import Counter

    import bert_data.tools  # noqa: F401  (first: a tool's process settings, its thread caps, as the CLI has them)
    from bert_data.presets import build_config
    from bert_data.runners.job import run

    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(spec_json)
    config = build_config(spec)
    seconds: Counter = Counter()
    groups = [0]
    last_group = [0.0, 0.0]  # when the last group's result came in: wall, the coordinator's CPU

    def on_group(result) -> None:
        seconds.update(result.seconds)
        groups[0] += 1
        last_group[:] = [time.perf_counter(), own_cpu()]

    def own_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def cpu() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own_cpu() + children.ru_utime + children.ru_stime

    cpu_before, own_before = cpu(), own_cpu()
    started = time.perf_counter()
    last_group[:] = [started, own_before]
    manifest = run(config, on_group=on_group)  # a process pool is joined (its CPU counted) before run returns
    ended = time.perf_counter()
    wall = ended - started
    cpu_run = cpu() - cpu_before
    output_bytes = sum(
        os.path.getsize(os.path.join(config.output_dir, name))
        for name in os.listdir(config.output_dir)
        if name != "data_params.json" and os.path.isfile(os.path.join(config.output_dir, name))
    )  # the shards of any --output_format (and MDS's index.json)
    out = {
        "wall_s": wall,
        "cpu_s": cpu_run,
        "coordinator_cpu_s": own_cpu() - own_before,  # the coordinator alone (its threads included): where a pool's overhead lands
        "publish_wall_s": ended - last_group[0],  # after the last group: the publish (a rewriting format: its files), the manifest
        "publish_coordinator_cpu_s": own_cpu() - last_group[1],  # (its threads; not the processes that rewrite a big publish)
        "stage_seconds": {s: seconds.get(s, 0.0) for s in STAGES},
        "groups": groups[0],
        "input_bytes": manifest["input_bytes"],
        "output_bytes": output_bytes,
        "documents_read": manifest["documents"]["read"],
        "documents_used": manifest["n_docs"],
        "instances": manifest["n_examples"],
        "tokens": manifest["tokens"],
        "packing_summary": manifest.get("packing_summary"),  # --packing: padding before/after, depth, bound
        "peak_rss_coordinator_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_largest_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }
    print("BENCH_RESULT " + json.dumps(out), flush=True)
    return 0


# --- parent side ----------------------------------------------------------------------------


def busy_cpu_s() -> float:
    """CPU seconds all processes on the machine have used (from /proc/stat), for the noise figure."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure_once(spec: Dict[str, object], interval_s: float) -> Dict[str, object]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    load_before = os.getloadavg()[0]
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before = busy_cpu_s()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = TreeRssSampler(proc.pid, interval_s)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.stop()
    process_wall = time.perf_counter() - started
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_after = busy_cpu_s()
    if proc.returncode != 0:
        raise SystemExit(f"benchmark: child failed (exit {proc.returncode}):\n{stderr[-4000:]}")
    line = [x for x in stdout.splitlines() if x.startswith("BENCH_RESULT ")][-1]
    result = json.loads(line[len("BENCH_RESULT ") :])
    result["process_wall_s"] = process_wall
    tree_cpu = (usage_after.ru_utime - usage_before.ru_utime) + (usage_after.ru_stime - usage_before.ru_stime)
    # rusage misses workers of a fork server (never reaped by the coordinator): take the larger
    tree_cpu = max(tree_cpu, sampler.cpu_s)
    result["process_cpu_s"] = tree_cpu  # whole child process incl. interpreter start-up and imports
    # CPU over run() only: the child's own figure misses fork-server workers; add what it missed
    result["cpu_s"] = max(result["cpu_s"], tree_cpu - (result["process_wall_s"] - result["wall_s"]))
    # The noise figure: cores that *other* processes kept busy while this run was going.
    result["other_cores"] = max(0.0, (busy_after - busy_before - tree_cpu) / process_wall)
    result["loadavg_1min_before"] = load_before
    result["peak_rss_tree_mb"] = sampler.peak_kb / 1024
    result["max_processes"] = sampler.max_processes
    result["rss_samples"] = sampler.samples
    wall = result["wall_s"]
    result["mb_per_s"] = result["input_bytes"] / 1e6 / wall
    result["docs_per_s"] = result["documents_read"] / wall
    result["instances_per_s"] = result["instances"] / wall
    result["mb_per_cpu_s"] = result["input_bytes"] / 1e6 / result["cpu_s"]
    result["cores_busy"] = result["cpu_s"] / wall  # CPU seconds / wall seconds over the whole process tree
    total = sum(result["stage_seconds"].values()) or 1.0
    result["stage_share"] = {s: result["stage_seconds"][s] / total for s in STAGES}
    return result


def reader_implementation() -> str:
    """Which TFRecord reading loops ``inspect_tfrecords`` uses here: the compiled accelerator or
    the numpy fallback (a machine that had no C compiler at install time)."""
    from bert_data.format import batch_decode

    if batch_decode._wire is None:
        return "the numpy reader (bert_data.format._wire is not built: no C compiler at install time)"
    return f"the compiled reader (bert_data.format._wire, CRC32C {batch_decode._wire.CRC32C})"


def time_inspect(out_dir: Path, workers: int) -> float:
    """Wall seconds of ``inspect_tfrecords OUT --stats`` as a user runs it (a whole process);
    exits the benchmark if it does not pass."""
    cmd = [sys.executable, "-m", "bert_data.tools.inspect", str(out_dir), "--stats", "--quiet", "--num_workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"benchmark: inspect_tfrecords failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds


def _summary(values: Sequence[float]) -> Dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: List[Dict[str, object]]) -> Dict[str, object]:
    keys = ("mb_per_s", "cores_busy", "docs_per_s", "instances_per_s", "peak_rss_tree_mb", "wall_s", "process_wall_s",
            "cpu_s", "coordinator_cpu_s", "mb_per_cpu_s", "other_cores", "loadavg_1min_before", "peak_rss_coordinator_mb",
            "peak_rss_largest_worker_mb", "publish_wall_s", "publish_coordinator_cpu_s")
    out: Dict[str, object] = {k: _summary([r[k] for r in runs]) for k in keys}
    out["stage_share"] = {s: statistics.median(r["stage_share"][s] for r in runs) for s in STAGES}
    out["stage_seconds"] = {s: statistics.median(r["stage_seconds"][s] for r in runs) for s in STAGES}
    for k in ("input_bytes", "output_bytes", "documents_read", "instances", "groups", "max_processes"):
        out[k] = runs[0][k] if k != "max_processes" else max(r[k] for r in runs)
    if "inspect_wall_s" in runs[0]:
        out["inspect_wall_s"] = {w: _summary([r["inspect_wall_s"][w] for r in runs]) for w in runs[0]["inspect_wall_s"]}
        out["inspect_speedup"] = {
            w: _summary([r["process_wall_s"] / r["inspect_wall_s"][w] for r in runs]) for w in runs[0]["inspect_wall_s"]
        }
    out["runs"] = runs
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", default=str(SHARED / "corpus"), help="directory of *.txt documents (default ../shared/corpus)")
    parser.add_argument("--vocab_file", default=str(SHARED / "vocab" / "bert-base-uncased-vocab.txt"))
    parser.add_argument("--do_lower_case", default=True, action=argparse.BooleanOptionalAction)
    parser.add_argument("--replicate", type=int, default=1, help="K distinct copies of every document (default 1)")
    parser.add_argument("--shape", choices=SHAPES, default="files",
                        help="input shape: one document per file (default), one big JSON Lines file, the same "
                             "gzipped, or 4 book-sized documents per copy")
    parser.add_argument("--group_bytes", default=None, help="--group_bytes for the runs (default: the tool's)")
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--split_num", type=int, default=1000)
    parser.add_argument("--num_output_files", type=int, default=10)
    parser.add_argument("--compression", choices=("none", "gzip"), default="none")
    parser.add_argument("--packing", action="store_true", help="--packing (docs/packing.md)")
    parser.add_argument("--output_format", default="tfrecord", help="--output_format (tfrecord, parquet, mds, hdf5)")
    parser.add_argument("--max_sequences_per_pack", type=int, default=None, help="with --packing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="worker counts, one result each")
    parser.add_argument("--runner", choices=("local", "dask"), default="local",
                        help="local: the process pool; dask: a LocalCluster of that many workers (its processes count)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per worker count (median reported)")
    parser.add_argument("--inspect", type=int, nargs="*", metavar="WORKERS", default=None,
                        help="after each run, time `inspect_tfrecords OUT --stats` on its output with each of these "
                             "--num_workers (default: 1 and every core) and report it against the run's wall time")
    parser.add_argument("--sample_ms", type=float, default=50.0, help="RSS sampling interval")
    parser.add_argument("--work_dir", default=None, help="where the replicated corpus and outputs go (default: a tmp dir)")
    parser.add_argument("--json", dest="json_out", help="write every run and the summary to this JSON file")
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)

    corpus = Path(args.corpus)
    if not corpus.is_dir():
        parser.error(f"--corpus {corpus} is not a directory")
    if args.work_dir:
        try:
            os.makedirs(args.work_dir, exist_ok=True)
        except OSError as exc:
            parser.error(f"--work_dir {args.work_dir}: {exc.strerror or exc}")
    work_dir = Path(tempfile.mkdtemp(prefix="bert_data_bench_", dir=args.work_dir))
    try:
        info = prepare_corpus(corpus, args.replicate, work_dir, args.shape)
        print(
            f"corpus {corpus} x{args.replicate} as {args.shape}: {info['documents']} documents, "
            f"{info['bytes'] / 1e6:.2f} MB; "
            f"dupe_factor {args.dupe_factor}, max_seq_length {args.max_seq_length}, split_num {args.split_num}, "
            f"compression {args.compression}; {args.runs} runs per worker count",
            flush=True,
        )
        if args.inspect is not None:
            print(f"inspect reads with {reader_implementation()}", flush=True)
        results: Dict[int, Dict[str, object]] = {}
        for workers in args.workers:
            runs = []
            for i in range(args.runs):
                out_dir = work_dir / f"out_w{workers}_r{i}"
                spec = {
                    "metadata_files": [info["metadata"]],
                    "input_files_prefix": info["prefix"],
                    "vocab_file": args.vocab_file,
                    "do_lower_case": args.do_lower_case,
                    "dupe_factor": args.dupe_factor,
                    "max_seq_length": args.max_seq_length,
                    "max_predictions_per_seq": args.max_predictions_per_seq,
                    "split_num": args.split_num,
                    "num_output_files": args.num_output_files,
                    "compression": args.compression,
                    "seed": args.seed,
                    "num_workers": workers,
                    "output_dir": str(out_dir),
                    "input_format": info["input_format"],
                    "runner": args.runner,
                }
                if args.group_bytes:
                    spec["group_bytes"] = _size(args.group_bytes)
                if args.output_format != "tfrecord":
                    spec["output_format"] = args.output_format
                if args.packing:
                    spec["packing"] = True
                    if args.max_sequences_per_pack:
                        spec["max_sequences_per_pack"] = args.max_sequences_per_pack
                result = measure_once(spec, args.sample_ms / 1000.0)
                if args.inspect is not None:
                    result["inspect_wall_s"] = {
                        str(w): time_inspect(out_dir, w) for w in (args.inspect or [1, os.cpu_count() or 1])
                    }
                shutil.rmtree(out_dir, ignore_errors=True)
                runs.append(result)
                print(
                    f"  workers {workers} run {i + 1}: {result['mb_per_s']:.3f} MB/s, {result['wall_s']:.1f} s, "
                    f"peak RSS {result['peak_rss_tree_mb']:.0f} MB, CPU {result['cpu_s']:.1f} s "
                    f"({result['cores_busy']:.2f} cores busy), "
                    f"others used {result['other_cores']:.1f} cores",
                    flush=True,
                )
                for w, seconds in result.get("inspect_wall_s", {}).items():
                    print(
                        f"    inspect --stats, {w} worker(s): {seconds:.2f} s, "
                        f"{result['process_wall_s'] / seconds:.1f}x faster than the run wrote it "
                        f"({result['process_wall_s']:.2f} s, both whole processes)",
                        flush=True,
                    )
            results[workers] = summarize(runs)
        base = results.get(1)
        for workers, summary in results.items():
            if workers >= 2 and base is not None:
                summary["parallel_efficiency"] = summary["mb_per_s"]["median"] / (workers * base["mb_per_s"]["median"])
                summary["cpu_ratio_vs_1"] = summary["cpu_s"]["median"] / base["cpu_s"]["median"]
        report(results)
        if args.json_out:
            payload = {"args": {k: v for k, v in vars(args).items() if k != "child"}, "corpus": info,
                       "results": {str(k): v for k, v in results.items()}}
            Path(args.json_out).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1:].upper() in units else int(text)


def report(results: Dict[int, Dict[str, object]]) -> None:
    def fmt(s: Dict[str, float], digits: int) -> str:
        return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}..{s['max']:.{digits}f}]"

    print("\nmedian [min..max] per worker count")
    for workers, s in results.items():
        print(
            f"workers {workers}: {s['input_bytes'] / 1e6:.2f} MB in, {s['output_bytes'] / 1e6:.1f} MB out, "
            f"{s['documents_read']} docs, {s['instances']} instances, {s['groups']} groups"
        )
        print(f"  raw text MB/s  {fmt(s['mb_per_s'], 3)}")
        print(f"  documents/s    {fmt(s['docs_per_s'], 1)}")
        print(f"  instances/s    {fmt(s['instances_per_s'], 0)}")
        print(f"  wall s (run)   {fmt(s['wall_s'], 2)}  (process {fmt(s['process_wall_s'], 2)})")
        print(f"  CPU s (run)    {fmt(s['cpu_s'], 2)}  -> {fmt(s['mb_per_cpu_s'], 3)} MB per CPU-s (all processes of the run)")
        print(f"  cores busy     {fmt(s['cores_busy'], 2)}  (CPU s / wall s, whole process tree)")
        print(f"  coordinator    {fmt(s['coordinator_cpu_s'], 2)} CPU s of those (its threads included)")
        print(f"  publish        {fmt(s['publish_wall_s'], 2)} wall s after the last group, "
              f"{fmt(s['publish_coordinator_cpu_s'], 2)} CPU s of the coordinator")
        print(f"  other load     {fmt(s['other_cores'], 2)} cores busy with other processes during the runs")
        detail = f"process tree, {s['max_processes']} processes"
        if workers == 1:
            detail += f"; exact high-water mark {fmt(s['peak_rss_coordinator_mb'], 0)}"
        else:
            detail += (
                f"; coordinator {s['peak_rss_coordinator_mb']['median']:.0f}, "
                f"largest worker {s['peak_rss_largest_worker_mb']['median']:.0f}"
            )
        print(f"  peak RSS MB    {fmt(s['peak_rss_tree_mb'], 0)}  ({detail})")
        if "parallel_efficiency" in s:
            print(
                f"  efficiency     {s['parallel_efficiency']:.2f}  (MB/s at N / (N x MB/s at 1); "
                f"CPU used is {s['cpu_ratio_vs_1']:.2f}x that of 1 worker)"
            )
        for w, seconds in s.get("inspect_wall_s", {}).items():
            print(
                f"  inspect --stats {fmt(seconds, 2)} s with {w} worker(s): "
                f"{fmt(s['inspect_speedup'][w], 1)}x faster than this run wrote the records"
            )
        shares = ", ".join(f"{k} {v * 100:.1f}%" for k, v in s["stage_share"].items())
        print(f"  stage shares   {shares}")


if __name__ == "__main__":
    sys.exit(main())
