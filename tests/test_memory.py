"""Memory is bounded by the group, not the corpus.

The pipeline runs (``--num_workers 1``, ``--dupe_factor 1``) in a fresh subprocess on a
generated corpus of ~40 MB of text in 3,200 distinct documents (64 groups of 50), and on its
first eighth (8 groups). The child reports its own peak RSS (``ru_maxrss``, the kernel's
high-water mark, so no sampling can miss a peak). Streaming means the big corpus peaks no
higher than the small one, up to allocator noise (glibc keeps some freed heap resident, and
how much depends on allocation history: identical runs differ by up to ~20 MB here, and by
~70 MB with groups of 100 documents, because each group's tokenization has a large transient):

    peak(big) <= 1.15 * peak(small) + 50 MB

Holding the corpus would break this: its documents, sentences and token ids alone are
~150 MB here. This is a memory test, not a wall-clock test; it takes ~15-30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import sentence, write_vocab

N_DOCS = 3200
DOC_BYTES = 12_500  # ~40 MB of text in all
SPLIT_NUM = 50  # ~0.63 MB of text per group: 64 groups in all
SMALL_FRACTION = 8  # the baseline corpus: the first eighth (8 groups)
RATIO, MARGIN_MB = 1.15, 50

CHILD = r"""
import json, logging, resource, sys
from bert_data.presets import build_config
from bert_data.runners.job import run
logging.basicConfig(level=logging.WARNING)
groups = []
manifest = run(build_config(json.loads(sys.argv[1])), on_group=lambda r: groups.append(r.group_index))
print(json.dumps({
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "groups": len(groups),
    "documents": manifest["documents"]["read"],
    "input_bytes": manifest["input_bytes"],
    "instances": manifest["n_examples"],
}))
"""


def write_big_corpus(root: Path, n_docs: int, doc_bytes: int) -> Path:
    """``n_docs`` distinct documents of ~``doc_bytes`` (paragraphs of 6 sentences) + metadata."""
    pool = [sentence(i, 6 + i % 13) for i in range(4999)]
    docs = root / "docs"
    docs.mkdir(parents=True)
    names = []
    for d in range(n_docs):
        paragraphs, paragraph, size, j = [], [], 0, 0
        while size < doc_bytes:
            text = pool[(d * 7919 + j * 31) % len(pool)]
            paragraph.append(text)
            size += len(text) + 1
            j += 1
            if len(paragraph) == 6:
                paragraphs.append(" ".join(paragraph))
                paragraph = []
        if paragraph:
            paragraphs.append(" ".join(paragraph))
        (docs / f"d{d:05d}.txt").write_text(f"Document {d}.\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
        names.append(f"docs/d{d:05d}.txt")
    (root / "metadata.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    (root / "metadata_small.txt").write_text("\n".join(names[: n_docs // SMALL_FRACTION]) + "\n", encoding="utf-8")
    return root


def peak_rss(root: Path, metadata: str, vocab: Path, out: Path) -> dict:
    spec = {
        "metadata_files": [str(root / metadata)],
        "input_files_prefix": str(root),
        "vocab_file": str(vocab),
        "do_lower_case": True,
        "max_seq_length": 128,
        "max_predictions_per_seq": 10,
        "dupe_factor": 1,
        "split_num": SPLIT_NUM,
        "num_output_files": 4,
        "num_workers": 1,
        "output_dir": str(out),
    }
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_peak_rss_is_bounded_by_the_group_not_the_corpus(tmp_path: Path):
    root = write_big_corpus(tmp_path / "corpus", N_DOCS, DOC_BYTES)
    vocab = write_vocab(tmp_path / "vocab.txt")
    small = peak_rss(root, "metadata_small.txt", vocab, tmp_path / "out_small")
    big = peak_rss(root, "metadata.txt", vocab, tmp_path / "out_big")

    assert small["documents"] == N_DOCS // SMALL_FRACTION and small["groups"] == N_DOCS // SMALL_FRACTION // SPLIT_NUM
    assert big["documents"] == N_DOCS and big["groups"] == N_DOCS // SPLIT_NUM
    assert big["input_bytes"] >= 39_000_000 and big["instances"] > 0
    bound = RATIO * small["peak_rss_mb"] + MARGIN_MB
    assert big["peak_rss_mb"] <= bound, (
        f"peak RSS {big['peak_rss_mb']:.0f} MB on {big['input_bytes'] / 1e6:.0f} MB of text exceeds "
        f"{RATIO} x {small['peak_rss_mb']:.0f} MB (peak on the first 1/{SMALL_FRACTION}) + {MARGIN_MB} MB "
        f"= {bound:.0f} MB: memory grows with the corpus"
    )
