"""docs/recipes.md stays true: every ``bash`` and ``python`` block in it runs, in order, on small
copies of the shared corpus laid out as each recipe expects (a folder of .txt files, a JSON Lines
dump, WikiExtractor output), with the installed console scripts, and produces what it says.
The blocks of "Train in PyTorch" need the ``torch`` extra: without it (and without ``CI``) they
are not run and the test ends as skipped, after checking everything else."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from conftest import REPO, shared_file

RECIPES = REPO / "docs" / "recipes.md"
N_DOCUMENTS = 40


def blocks() -> List[Tuple[str, str]]:
    """The (language, code) of every fenced bash/python block, in order."""
    return re.findall(r"```(bash|python)\n(.*?)```", RECIPES.read_text(encoding="utf-8"), flags=re.S)


def _documents() -> List[str]:
    corpus = shared_file("corpus")
    paths = sorted(p for p in corpus.rglob("*.txt"))[:N_DOCUMENTS]
    return [p.read_text(encoding="utf-8") for p in paths]


def _lay_out_inputs(root: Path) -> dict:
    """The three input shapes of the recipes, built from the same documents."""
    texts = _documents()
    corpus = root / "corpus"
    corpus.mkdir()
    for i, text in enumerate(texts):
        (corpus / f"doc{i:03d}.txt").write_text(text, encoding="utf-8")
    dump = root / "dump"
    dump.mkdir()
    half = len(texts) // 2
    (dump / "part-0.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:half]))
    (dump / "part-1.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts[half:]).encode()))
    wiki = root / "wiki" / "AA"
    wiki.mkdir(parents=True)
    for n, part in enumerate((texts[:half], texts[half:])):
        (wiki / f"wiki_{n:02d}").write_text("".join(
            f'<doc id="{n}{i}" url="https://en.wikipedia.org/wiki?curid={n}{i}" title="Article {n}{i}">\n'
            f"Article {n}{i}\n\n{t}\n</doc>\n" for i, t in enumerate(part)), encoding="utf-8")
    return {"CORPUS": str(corpus), "DUMP": str(dump), "WIKI": str(root / "wiki"),
            "VOCAB": str(shared_file("vocab", "bert-base-uncased-vocab.txt"))}


def test_recipes_have_blocks_of_every_kind() -> None:
    kinds = [kind for kind, _ in blocks()]
    assert kinds.count("bash") >= 7 and kinds.count("python") >= 2


def needs_torch(code: str) -> bool:
    """A block of the "Train in PyTorch" recipe: it needs the ``torch`` extra (torch, transformers)."""
    return "bert_data.torch" in code or "--output_format" in code or "PretrainingCollator" in code


def torch_installed() -> bool:
    """Whether the ``torch`` extra is installed; under CI it must be (the blocks then run)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        return False
    return True


def test_every_recipe_command_runs(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    env = dict(os.environ, **_lay_out_inputs(tmp_path))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the installed console scripts
    work = tmp_path / "work"
    work.mkdir()
    outputs = []
    with_torch = torch_installed()
    not_run = 0
    for number, (kind, code) in enumerate(blocks(), start=1):
        if needs_torch(code) and not with_torch:
            not_run += 1
            continue
        command = ["bash", "-euo", "pipefail", "-c", code] if kind == "bash" else [sys.executable, "-c", code]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"block {number} ({kind}) failed:\n{code}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    for directory in ("msl128/train", "msl128/validation", "msl512/train", "oneshot/train", "oneshot/validation",
                      "dump", "wiki"):
        manifest = json.loads((work / "out" / directory / "data_params.json").read_text())
        assert manifest["n_examples"] > 0, directory
    documents = {name: json.loads((work / "out" / name / "data_params.json").read_text())["documents"]
                 for name in ("dump", "wiki")}
    assert documents["dump"]["read"] == documents["wiki"]["read"] == N_DOCUMENTS  # one document each, every shape
    assert json.loads((work / "out" / "wiki" / "data_params.json").read_text())["wikiextractor_lines_outside_doc"] == 0
    msl512 = json.loads((work / "out" / "msl512" / "train" / "data_params.json").read_text())
    assert (msl512["max_seq_length"], msl512["max_predictions_per_seq"]) == (512, 80)
    split = [json.loads((work / "out" / "msl128" / side / "data_params.json").read_text())["documents"]["read"]
             for side in ("train", "validation")]
    assert sum(split) == N_DOCUMENTS and all(split)
    parsed = re.search(r"(\d+) records parsed from (\d+) shards", "".join(outputs))
    train = json.loads((work / "out" / "msl128" / "train" / "data_params.json").read_text())
    assert parsed and (int(parsed.group(1)), int(parsed.group(2))) == (train["n_examples"], 8)
    assert "OK" in "".join(outputs) and "'input_ids': (8, 128)" in "".join(outputs)
    if not_run:
        pytest.skip(f"every other block ran; the {not_run} blocks of 'Train in PyTorch' need pip install "
                    "'bert_data[torch]'")
    _check_pytorch_outputs("".join(outputs))


def _check_pytorch_outputs(text: str) -> None:
    """What the "Train in PyTorch" blocks print: the Trainer's steps, a resumed epoch that reads
    only the batches after the checkpoint, then a whole one, and DDP ranks of equal size."""
    assert re.search(r"Trainer: 4 steps, loss \d", text), text
    resumed = re.search(r"epoch 0: (\d+) of (\d+) batches\nepoch 1: (\d+) of (\d+) batches", text)
    assert resumed, text
    left, per_epoch, whole, again = map(int, resumed.groups())
    assert left == per_epoch - 3 and whole == per_epoch == again
    ranks = re.findall(r"rank (\d) of 2: (\d+) records, (\d+) batches an epoch", text)
    assert sorted(rank for rank, _, _ in ranks) == ["0", "1"]
    assert len({(records, batches) for _, records, batches in ranks}) == 1  # drop_last: the same on every rank
    for fmt in ("parquet", "mds"):  # the Parquet and MosaicML recipes: rows read, three steps trained
        assert re.search(fmt + r": [1-9]\d* rows, batch \(16, \d+\), loss \d", text), text
