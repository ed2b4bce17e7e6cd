"""Fingerprints of every output kind, to prove a refactoring changed no byte.

Runs ``create_tfrecords`` (and ``create_pretraining_data``) in a scratch directory for each case
of the architecture issue's acceptance list (local 1 and 3 workers, a ``file://`` output,
``--resume`` after a kill at each crash point, BERT-named ``--output_file`` lists, MLM-only
unmasked, ``--runner dask``, ``--runner beam``, gzip, the validation split) and prints, per case,
the sha256 of every output file and of the manifest without the fields that name the run's
paths or version. Run it on two commits and diff the outputs::

    python scripts/output_fingerprints.py --python .venv/bin/python > after.json

A case that needs an extra that is not installed (dask, beam) is reported as skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.environ.get("BERT_DATA_SHARED", os.path.join(os.path.dirname(REPO), "shared"))

# Fields of a manifest that name where or by which version a run was made, not what it wrote.
VOLATILE = {"bert_data_version", "output_dir", "metadata_files", "input_files_prefix", "vocab_path", "num_workers",
            "runner", "resume", "overwrite", "output_files", "instances_per_output_file", "inputs", "create_pretraining_data",
            "validation_metadata_files", "split_role", "scheduler_address", "scheduler_file", "dask_dashboard"}


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_digest(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    kept = {k: v for k, v in data.items() if k not in VOLATILE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def fingerprint(directory: str) -> Dict[str, str]:
    out = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".bert_data")]
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, directory)
            if name.endswith("data_params.json"):
                out[rel] = manifest_digest(path)
            elif not name.startswith(".") and name not in ("metadata.txt",):
                out[rel] = sha256(path)
    return dict(sorted(out.items()))


def write_corpus(root: str, documents: int) -> str:
    """A metadata file over the first documents of the shared corpus (both halves)."""
    corpus = os.path.join(SHARED, "corpus")
    paths: List[str] = []
    for sub in ("state_union", "movie_reviews/pos", "movie_reviews/neg"):
        folder = os.path.join(corpus, sub)
        paths += [os.path.join(sub, n) for n in sorted(os.listdir(folder)) if n.endswith(".txt")][: documents // 3]
    metadata = os.path.join(root, "metadata.txt")
    with open(metadata, "w", encoding="utf-8") as handle:
        handle.writelines(p + "\n" for p in paths)
    return metadata


def run(python: str, args: List[str], env: Optional[Dict[str, str]] = None, check: bool = True) -> int:
    proc = subprocess.run([python, "-m", "bert_data.tools.main", *args], env={**os.environ, **(env or {})},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return proc.returncode


def cases(metadata: str, vocab: str) -> Dict[str, List[str]]:
    base = ["create", "--metadata_files", metadata, "--input_files_prefix", os.path.join(SHARED, "corpus"),
            "--vocab_file", vocab, "--do_lower_case", "--split_num", "20", "--dupe_factor", "2",
            "--num_output_files", "3", "--quiet", "--seed", "7"]
    return {
        "local-1": base + ["--num_workers", "1"],
        "local-3": base + ["--num_workers", "3"],
        "gzip": base + ["--num_workers", "2", "--compression", "gzip"],
        "sop-wwm": base + ["--num_workers", "2", "--sentence_order_prediction", "--mask_whole_word"],
        "mlm-only": base + ["--num_workers", "2", "--mlm_only"],
        "unmasked-tokens": base + ["--num_workers", "2", "--mlm_only", "--disable_masking"],
        "unmasked-ids": base + ["--num_workers", "2", "--mlm_only", "--disable_masking", "--unmasked_format", "ids"],
        "validation": base + ["--num_workers", "2", "--validation_fraction", "0.2"],
        "url": base + ["--num_workers", "2"],
        "dask": base + ["--num_workers", "2", "--runner", "dask"],
        "beam": base + ["--num_workers", "2", "--runner", "beam"],
    }


CRASH_POINTS = ["appended:3", "checkpointed:3", "published:0", "worker:2"]
URL_CRASH_POINTS = ["indexed:3", "published:0"]
NAMED_CRASH_POINTS = ["moved:1", "appended:0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--documents", type=int, default=150)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    vocab = os.path.join(SHARED, "vocab", "bert-base-uncased-vocab.txt")
    results: Dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bert_data_fingerprints_") as root:
        metadata = write_corpus(root, args.documents)
        for name, argv in cases(metadata, vocab).items():
            if args.only and name not in args.only:
                continue
            out = os.path.join(root, name)
            target = "file://" + out if name == "url" else out
            try:
                run(args.python, argv + ["--output_dir", target])
                results[name] = fingerprint(out)
            except RuntimeError as exc:
                results[name] = f"failed: {exc}"
            if name in ("local-1", "url"):
                points = CRASH_POINTS if name == "local-1" else URL_CRASH_POINTS
                for point in points:
                    killed = os.path.join(root, f"{name}-killed-{point.replace(':', '-')}")
                    killed_target = "file://" + killed if name == "url" else killed
                    code = run(args.python, argv[:-2] + ["--num_workers", "2", "--output_dir", killed_target],
                               env={"BERT_DATA_CRASH_AT": point}, check=False)
                    run(args.python, argv[:-2] + ["--num_workers", "2", "--output_dir", killed_target, "--resume"])
                    results[f"{name}-resume-{point}"] = {"killed_exit": code, **fingerprint(killed)}
        results["bert-named"] = named(args.python, root, metadata, vocab)
    json.dump(results, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


def named(python: str, root: str, metadata: str, vocab: str) -> Dict[str, object]:
    """create_pretraining_data with an --output_file list, plain and resumed after kills."""
    corpus = os.path.join(SHARED, "corpus")
    with open(metadata, encoding="utf-8") as handle:
        inputs = ",".join(os.path.join(corpus, line.strip()) for line in handle if line.strip())
    out: Dict[str, object] = {}
    for point in [""] + NAMED_CRASH_POINTS:
        folder = os.path.join(root, "named-" + (point.replace(":", "-") or "clean"))
        os.makedirs(folder)
        files = ",".join(os.path.join(folder, f"part-{i}.tfrecord") for i in range(3))
        argv = ["google", f"--input_file={inputs}", f"--output_file={files}", f"--vocab_file={vocab}",
                "--do_lower_case=true", "--dupe_factor=2", "--random_seed=3", "--num_workers=2", "--quiet"]
        code = run(python, argv, env={"BERT_DATA_CRASH_AT": point} if point else None, check=not point)
        if point:
            run(python, argv + ["--resume"])
        out[point or "clean"] = {"killed_exit": code, **fingerprint(folder)}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
