"""The token cache: `bert-data tokenize` once, `create_tfrecords --from_tokens DIR` for any run.

A run from the cache must write the bytes and counts of the run from the text (NSP, SOP,
MLM-only, --packing, 1 and 2 workers, --resume after kill -9); the cache's shards must be what
Megatron's own ``IndexedDataset`` reads; a cache of other settings, or an incomplete or damaged
one, is one line and exit 2; tokenize is atomic and completes when run again after a kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import base_args, make_group, write_corpus, write_vocab
from bert_data.format.indexed import check_consistent, index_bytes, parse_index, token_dtype
from bert_data.token_cache import (
    TokenizedUnit, check_group_files, group_file, read_group_cache, read_sidecar, write_group_cache,
)
from bert_data.tools.main import main as bert_data_main

MANIFEST = "data_params.json"
# What a run from the cache records besides the run from the text: where it ran, from what
BOOKKEEPING = {"output_dir", "from_tokens", "num_workers", "resume", "overwrite"}


def _cli(tool: str, args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_data.tools.main", tool, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def _tokenize_args(corpus: Dict[str, Path], out: Path, **extra: object) -> List[str]:
    """tokenize's flags: base_args' input, vocabulary and plan flags."""
    args = base_args(corpus["metadata"], corpus["vocab"], out, **extra)
    keep, skip = [], {"--max_seq_length", "--max_predictions_per_seq", "--dupe_factor", "--num_output_files"}
    i = 0
    while i < len(args):
        if args[i] in skip:
            i += 2
            continue
        keep.append(args[i])
        i += 1
    return keep


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("token_cache")
    metadata = write_corpus(root / "corpus", n_docs=24)
    vocab = write_vocab(root / "vocab.txt")
    cache = root / "cache"
    corpus = {"metadata": metadata, "vocab": vocab, "cache": cache, "root": root}
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4), "--quiet"]) == 0
    return corpus


def _same_output(out: Path, reference: Path) -> None:
    names = sorted(p.name for p in reference.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))
    assert names and sorted(p.name for p in out.iterdir() if p.is_file() and p.name != MANIFEST
                            and not p.name.startswith(".")) == names
    for name in names:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    got, want = (json.loads((d / MANIFEST).read_text()) for d in (out, reference))
    assert {k: v for k, v in got.items() if k not in BOOKKEEPING} == {k: v for k, v in want.items() if k not in BOOKKEEPING}
    assert got["from_tokens"] == str(_cache_of(out)) and "from_tokens" not in want


def _cache_of(out: Path) -> str:
    return json.loads((out / MANIFEST).read_text())["from_tokens"]


@pytest.mark.parametrize("extra", [
    {},  # NSP
    {"sentence_order_prediction": True, "mask_whole_word": True},
    {"mlm_only": True, "max_seq_length": 48},
    {"mlm_only": True, "allow_cross_document_examples": True, "disable_masking": True},
    {"packing": True, "max_seq_length": 64},
    {"num_workers": 2, "max_seq_length": 40},
    {"output_format": "parquet"},
], ids=["nsp", "sop-wwm", "mlm-only", "mlm-cross-unmasked", "packing", "2-workers", "parquet"])
def test_from_tokens_writes_the_bytes_of_the_run_from_text(corpus, tmp_path: Path, extra: Dict[str, object]) -> None:
    if extra.get("output_format") == "parquet":
        pytest.importorskip("pyarrow")
    raw, cached = tmp_path / "raw", tmp_path / "cached"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4, **extra), "--quiet"]) == 0
    args = base_args(corpus["metadata"], corpus["vocab"], cached, split_num=4, from_tokens=corpus["cache"], **extra)
    assert bert_data_main(["create", *args, "--quiet"]) == 0
    _same_output(cached, raw)


def test_the_nsp_pool_is_kept_in_the_cache_and_read_back(corpus, tmp_path: Path) -> None:
    """The first NSP run from a cache keeps its negative pool there (pool-*.npz); the next run with
    that seed reads it and writes the same bytes; a damaged pool file is built anew."""
    cache = _copy_cache(corpus, tmp_path)
    for pool in cache.glob("pool-*"):
        pool.unlink()
    raw = tmp_path / "raw"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4, seed=7), "--quiet"]) == 0
    for attempt in range(3):
        out = tmp_path / f"cached{attempt}"
        args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4, seed=7, from_tokens=cache)
        assert bert_data_main(["create", *args, "--quiet"]) == 0
        pools = list(cache.glob("pool-*"))
        assert len(pools) == 1 and pools[0].suffix == ".npz" and pools[0].stat().st_size > 100
        _same_output(out, raw)
        if attempt == 0:
            written = pools[0].stat().st_ino
        if attempt == 1:
            assert pools[0].stat().st_ino == written  # read back, not made again
            pools[0].write_bytes(pools[0].read_bytes()[:100])


_SPACY_PROBE = ("import sys; from bert_data.tools.main import main; code = main(sys.argv[1:]); "
                "print('spacy' in sys.modules); sys.exit(code)")


def test_tokenize_keeps_the_pool_of_its_seed_so_nsp_runs_never_load_spacy(corpus, tmp_path: Path) -> None:
    """`tokenize --seed S` keeps the NSP pool of S (made by its workers, beside the groups): an NSP
    run from the cache with that seed reads it (the same file, not made again), never imports spaCy,
    and writes the bytes of the run from the text; tokenize again with another seed on the finished
    cache adds only that seed's pool."""
    cache = tmp_path / "cache"
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4, num_workers=2, seed=11), "--quiet"]) == 0
    (pool,) = cache.glob("pool-*.npz")
    kept = pool.stat().st_ino
    raw, cached = tmp_path / "raw", tmp_path / "cached"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4, seed=11), "--quiet"]) == 0
    args = base_args(corpus["metadata"], corpus["vocab"], cached, split_num=4, seed=11, from_tokens=cache)
    done = subprocess.run([sys.executable, "-c", _SPACY_PROBE, "create", *args, "--quiet"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "False", (done.stdout, done.stderr)
    _same_output(cached, raw)
    assert [p.stat().st_ino for p in cache.glob("pool-*.npz")] == [kept]
    groups = {p.name: p.stat().st_ino for p in cache.glob("g*")}
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4, seed=12), "--quiet"]) == 0
    assert len(list(cache.glob("pool-*.npz"))) == 2 and {p.name: p.stat().st_ino for p in cache.glob("g*")} == groups
    other = tmp_path / "other"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], other, split_num=4, seed=12,
                                                from_tokens=cache), "--quiet"]) == 0
    assert len(list(cache.glob("pool-*.npz"))) == 2  # (seed 12's pool was read, not made again)


def _edit_pool(pool: Path, **arrays) -> None:
    import numpy as np

    with np.load(pool) as data:
        kept = {k: data[k] for k in data.files}
    kept.update(arrays)
    with open(pool, "wb") as handle:
        np.savez(handle, **kept)


@pytest.mark.parametrize("damage", ["empty", "ids_outside_vocab", "short_offsets", "two_d_ids", "no_facts", "other_cache"])
def test_a_kept_pool_that_is_damaged_or_of_another_cache_is_made_again(corpus, tmp_path: Path, damage: str) -> None:
    """A kept pool is read only when it is this cache's and whole: one of another cache (other
    casing: same documents, other ids) is never taken, and an empty, edited or reshaped file is
    made again; the run writes the bytes of the run from the text, without a traceback."""
    import numpy as np

    cache = tmp_path / "cache"
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4, seed=5), "--quiet"]) == 0
    (pool,) = cache.glob("pool-*.npz")
    if damage == "other_cache":
        other = tmp_path / "other"
        args = [a for a in _tokenize_args(corpus, other, split_num=4, seed=5) if a != "--do_lower_case"]
        assert bert_data_main(["tokenize", *args, "--no-do_lower_case", "--quiet"]) == 0
        (foreign,) = other.glob("pool-*.npz")
        assert foreign.name != pool.name  # its name says whose it is: copied in (the same seed and
        pool.unlink()  # documents), it is not this cache's pool, which is made again
        foreign.rename(cache / foreign.name)
    elif damage == "empty":
        pool.write_bytes(b"")
    else:
        with np.load(pool) as data:
            ids, offsets = data["ids"], data["offsets"]
        _edit_pool(pool, **{"ids_outside_vocab": {"ids": ids + 40000}, "short_offsets": {"offsets": offsets[:-3]},
                            "two_d_ids": {"ids": ids.reshape(1, -1)}, "no_facts": {"facts": np.asarray("{}")}}[damage])
    raw, cached = tmp_path / "raw", tmp_path / "cached"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4, seed=5), "--quiet"]) == 0
    args = base_args(corpus["metadata"], corpus["vocab"], cached, split_num=4, seed=5, from_tokens=cache)
    done = _cli("create", args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    _same_output(cached, raw)
    with np.load(pool) as data:  # made again in place
        assert data["ids"].ndim == 1 and int(data["ids"].max()) < 40000


def test_resume_after_kill_9_from_tokens_is_byte_identical(corpus, tmp_path: Path) -> None:
    raw, cached = tmp_path / "raw", tmp_path / "cached"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4), "--quiet"]) == 0
    args = base_args(corpus["metadata"], corpus["vocab"], cached, split_num=4, from_tokens=corpus["cache"])
    killed = _cli("create", args, env={"BERT_DATA_CRASH_AT": "appended:2"})
    assert killed.returncode == -signal.SIGKILL
    assert not (cached / MANIFEST).exists()
    resumed = _cli("create", args + ["--resume", "--num_workers", "2"])
    assert resumed.returncode == 0, resumed.stderr
    _same_output(cached, raw)


def test_a_raw_run_resumes_from_tokens(corpus, tmp_path: Path) -> None:
    """--from_tokens changes no byte, so it is not an output setting: a run killed while reading the
    text can be finished from the cache."""
    raw, mixed = tmp_path / "raw", tmp_path / "mixed"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4), "--quiet"]) == 0
    args = base_args(corpus["metadata"], corpus["vocab"], mixed, split_num=4)
    assert _cli("create", args, env={"BERT_DATA_CRASH_AT": "checkpointed:1"}).returncode == -signal.SIGKILL
    resumed = _cli("create", args + ["--resume", "--from_tokens", str(corpus["cache"])])
    assert resumed.returncode == 0, resumed.stderr
    _same_output(mixed, raw)


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and " WARNING " not in line]  # (warnings: logged)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("change, named", [
    ({"do_lower_case": False}, "--do_lower_case"),
    ({"single_sentence_per_line": True}, "--single_sentence_per_line"),
    ({"split_num": 5}, "--split_num"),
    ({"group_bytes": "1M"}, "--group_bytes"),
    ({"other_vocab": True}, "another vocabulary"),
])
def test_a_cache_of_other_settings_is_refused_in_one_line(corpus, tmp_path: Path, change, named: str) -> None:
    change = dict(change)
    vocab = corpus["vocab"]
    if change.pop("other_vocab", False):
        vocab = write_vocab(tmp_path / "vocab.txt", extra=["zebra"])
    flags = {"split_num": 4, "from_tokens": corpus["cache"], **change}
    args = base_args(corpus["metadata"], vocab, tmp_path / "out", **flags)
    if change.get("do_lower_case") is False:
        args.remove("--do_lower_case")
    done = _cli("create", args)
    _one_line_error(done, named, str(corpus["cache"]))
    assert not (tmp_path / "out" / MANIFEST).exists()


def _copy_cache(corpus, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(corpus["cache"], copy)
    return copy


@pytest.mark.parametrize("damage", ["missing_bin", "truncated_bin", "missing_sidecar", "no_manifest", "bad_idx", "flipped_bin"])
def test_a_damaged_or_partial_cache_is_one_line_naming_the_file(corpus, tmp_path: Path, damage: str) -> None:
    cache = _copy_cache(corpus, tmp_path)
    target = {
        "missing_bin": group_file(str(cache), 1, ".bin"), "truncated_bin": group_file(str(cache), 2, ".bin"),
        "missing_sidecar": group_file(str(cache), 3, ".json"), "no_manifest": str(cache / "tokens.json"),
        "bad_idx": group_file(str(cache), 0, ".idx"), "flipped_bin": group_file(str(cache), 4, ".bin"),
    }[damage]
    if damage == "truncated_bin":
        data = Path(target).read_bytes()
        Path(target).write_bytes(data[: len(data) // 2])
    elif damage == "flipped_bin":  # same size, one token changed
        data = bytearray(Path(target).read_bytes())
        data[10] ^= 1
        Path(target).write_bytes(bytes(data))
    elif damage == "bad_idx":  # same size, a lie inside: the document indices
        data = bytearray(Path(target).read_bytes())
        data[-8:] = (10**9).to_bytes(8, "little")
        Path(target).write_bytes(bytes(data))
    else:
        os.remove(target)
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=cache)
    done = _cli("create", args)
    _one_line_error(done, os.path.basename(target), "bert-data tokenize again")
    # ... and what the line says works: the same tokenize command remakes what is damaged or missing
    # (a group whose checksum is wrong once its sidecar, which the line names, is removed: tokenize
    # does not re-read every token of a finished cache)
    if damage in ("flipped_bin", "bad_idx"):
        sidecar = Path(str(target)[: -len(".bin")] + ".json" if str(target).endswith(".bin") else str(target)[: -len(".idx")] + ".json")
        assert f"remove {sidecar}" in done.stderr
        sidecar.unlink()
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4), "--quiet"]) == 0
    raw = tmp_path / "raw"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4), "--quiet"]) == 0
    assert _cli("create", args + ["--overwrite"]).returncode == 0
    _same_output(tmp_path / "out", raw)


def test_a_cache_fault_found_mid_run_says_how_to_continue_and_resume_gives_the_bytes(corpus, tmp_path: Path) -> None:
    """A group found damaged after others were journaled: the line says to fix the cache and
    continue with --resume (the same command alone is refused then); doing so gives the bytes of
    the run from the text."""
    cache = _copy_cache(corpus, tmp_path)
    target = Path(group_file(str(cache), 3, ".bin"))
    data = bytearray(target.read_bytes())
    data[10] ^= 1
    target.write_bytes(bytes(data))
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=4, from_tokens=cache)
    done = _cli("create", args)
    _one_line_error(done, target.name, "bert-data tokenize again", "continue with --resume (same flags)")
    assert (out / ".bert_data_work" / "run.json").exists()
    Path(group_file(str(cache), 3, ".json")).unlink()  # (what the line says)
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache, split_num=4), "--quiet"]) == 0
    assert _cli("create", args + ["--resume"]).returncode == 0
    raw = tmp_path / "raw"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4), "--quiet"]) == 0
    _same_output(out, raw)


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


SIDECAR_EDITS = {  # what a hand (or a bug) may do to a group's sidecar: refused, never read as other instances
    "unit": lambda d: d["units"][0].update(unit=5), "documents": lambda d: d["units"][0].update(documents=7),
    "origins_null": lambda d: d["units"][0].update(origins=None), "counter": lambda d: d["units"][0]["stats"].update(tokens=99),
    "origins_short": lambda d: d["units"][0].update(origins="AAAA"), "no_units": lambda d: d.pop("units"),
    "units_text": lambda d: d.update(units="x"), "no_tail": lambda d: d.pop("tail"),
    "tail_text": lambda d: d.update(tail={"tokens": "x"}),
}
MANIFEST_EDITS = {
    "no_settings": lambda d: d.pop("settings"), "no_inputs": lambda d: d.pop("inputs"),
    "no_vocab_sha": lambda d: d["inputs"].pop("vocab_sha256"), "groups_null": lambda d: d.update(groups=None),
    "groups_numbers": lambda d: d.update(groups=[1, 2, 3, 4]), "settings_list": lambda d: d.update(settings=[]),
    "counts_short": lambda d: d["counts"].pop("tokens"),
}


@pytest.mark.parametrize("edit", sorted(SIDECAR_EDITS) + sorted(MANIFEST_EDITS))
def test_an_edited_sidecar_or_manifest_is_one_line_never_other_instances(corpus, tmp_path: Path, edit: str) -> None:
    cache = _copy_cache(corpus, tmp_path)
    if edit in SIDECAR_EDITS:
        target = Path(group_file(str(cache), 1, ".json"))
        _edit_json(target, SIDECAR_EDITS[edit])
    else:
        target = cache / "tokens.json"
        _edit_json(target, MANIFEST_EDITS[edit])
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=cache)
    _one_line_error(_cli("create", args), target.name)
    if edit in SIDECAR_EDITS or edit == "counts_short":  # the same tokenize command remakes the group, or
        done = _cli("tokenize", _tokenize_args(corpus, cache, split_num=4))  # writes the manifest anew
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert _cli("create", args + ["--overwrite"]).returncode == 0


@pytest.mark.parametrize("edit", ["no_units", "units_text", "no_tail", "tail_text", "origins_null", "origins_short"])
def test_a_sidecar_is_checked_field_by_field_where_no_digest_vouches_for_it(corpus, tmp_path: Path, edit: str) -> None:
    """Reading a group (what tokenize does to keep it, and a cache of the previous version, whose
    manifest records no sidecar digest, relies on): a sidecar whose fields are not of the types a
    run relies on is refused in one line, never a traceback nor instances from other origins."""
    from bert_data.token_cache import TokenCacheError, read_group_cache

    cache = _copy_cache(corpus, tmp_path)
    target = Path(group_file(str(cache), 1, ".json"))
    _edit_json(target, SIDECAR_EDITS[edit])
    with pytest.raises(TokenCacheError, match=f"{target.name} is damaged"):
        read_group_cache(str(cache), 1, None)


def test_a_group_copied_in_from_another_cache_is_refused(corpus, tmp_path: Path) -> None:
    """The same plan (same file names, sizes and flags) over other text: its group's files are a
    consistent set (sidecar, checksum), but not the ones this cache's manifest recorded."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(corpus["metadata"].parent, other)
    document = other / "docs" / "doc005.txt"
    text = document.read_text()
    document.write_text(text.replace(" the ", " and ", 1) if " the " in text else text.upper())
    metadata = other / corpus["metadata"].name
    other_cache = tmp_path / "other-cache"
    other_corpus = dict(corpus, metadata=metadata)
    assert bert_data_main(["tokenize", *_tokenize_args(other_corpus, other_cache, split_num=4), "--quiet"]) == 0
    cache = _copy_cache(corpus, tmp_path)
    differing = [g for g in range(4) if Path(group_file(str(cache), g, ".bin")).read_bytes()
                 != Path(group_file(str(other_cache), g, ".bin")).read_bytes()]
    assert differing
    for suffix in (".bin", ".idx", ".json"):
        shutil.copy(group_file(str(other_cache), differing[0], suffix), group_file(str(cache), differing[0], suffix))
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=cache)
    _one_line_error(_cli("create", args), "not the sidecar the cache recorded")


def test_a_pool_that_cannot_be_kept_is_a_warning_and_not_called_kept(corpus, tmp_path: Path) -> None:
    """A pool file tokenize cannot write (here a directory stands where it goes: as a full disk
    or a read-only directory would) is said on the console; the summary does not claim it."""
    cache = tmp_path / "cache"
    args = _tokenize_args(corpus, cache, split_num=4, seed=9)
    first = _cli("tokenize", args)
    assert first.returncode == 0 and "negative pool for --seed 9 kept" in first.stdout
    (pool,) = cache.glob("pool-*.npz")
    pool.unlink()
    pool.mkdir()
    (pool / "x").write_text("")  # (not empty: os.replace cannot put the pool in its place)
    again = _cli("tokenize", args)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "kept" not in again.stdout
    assert "NSP's negative pool for --seed 9 could not be kept in" in again.stderr


def test_from_tokens_naming_a_file_says_it_is_not_a_directory(corpus, tmp_path: Path) -> None:
    target = tmp_path / "tokens.json"
    target.write_text("{}")
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=target)
    _one_line_error(_cli("create", args), "not a directory")


def test_tokenize_into_a_directory_of_other_files_is_one_line(corpus, tmp_path: Path) -> None:
    directory = tmp_path / "notes"
    directory.mkdir()
    (directory / "notes.txt").write_text("mine\n")
    for extra in ([], ["--overwrite"]):
        _one_line_error(_cli("tokenize", _tokenize_args(corpus, directory, split_num=4) + extra), "notes.txt", "empty or new")
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == ["notes.txt"]
    # a file put beside a finished cache is left alone, and so is the cache: --overwrite remakes it in place
    cache = _copy_cache(corpus, tmp_path)
    (cache / "README.txt").write_text("made for phase 1 and 2\n")
    for extra in ([], ["--overwrite"]):
        assert _cli("tokenize", _tokenize_args(corpus, cache, split_num=4) + extra).returncode == 0
        assert (cache / "README.txt").exists() and (cache / "tokens.json").exists()


@pytest.mark.parametrize("target, kind", [
    ("tokens.json", "fifo"), ("g000000001.json", "fifo"), ("g000000002.bin", "fifo"), ("g000000000.idx", "fifo"),
    ("tokens.json", "directory"), ("g000000003.json", "directory"), ("tokens.json", "not_an_object"),
    ("g000000001.json", "not_utf8"),
])
def test_a_cache_file_that_is_no_regular_file_is_refused_never_waited_on(corpus, tmp_path: Path, target, kind) -> None:
    """A FIFO (or a directory, or bytes that are no JSON object) where a cache file belongs: one
    line naming it, at once; opening a FIFO to read it would wait for a writer for ever."""
    cache = _copy_cache(corpus, tmp_path)
    path = cache / target
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"[1, 2]" if kind == "not_an_object" else b'{"a": "\xff\xfe"}')
    args = base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=cache)
    _one_line_error(_cli("create", args), target)


def test_a_fifo_in_place_of_the_kept_pool_is_replaced_by_the_pool(corpus, tmp_path: Path) -> None:
    cache = _copy_cache(corpus, tmp_path)
    raw = tmp_path / "raw"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], raw, split_num=4, seed=3), "--quiet"]) == 0
    before = set(cache.glob("pool-*.npz"))  # (the module's cache may hold pools of other seeds)
    first = tmp_path / "first"
    assert bert_data_main(["create", *base_args(corpus["metadata"], corpus["vocab"], first, split_num=4, seed=3,
                                                from_tokens=cache), "--quiet"]) == 0
    (pool,) = set(cache.glob("pool-*.npz")) - before
    pool.unlink()
    os.mkfifo(pool)
    done = _cli("create", base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, seed=3,
                                    from_tokens=cache))
    assert done.returncode == 0, done.stderr
    _same_output(tmp_path / "out", raw)
    assert pool.is_file()


def test_tokenize_into_a_directory_holding_a_fifo_manifest_is_one_line(corpus, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / "tokens.json")
    done = _cli("tokenize", _tokenize_args(corpus, cache, split_num=4))
    _one_line_error(done, "tokens.json", "--overwrite")


def test_a_changed_document_is_refused(tmp_path: Path) -> None:
    corpus = {"metadata": write_corpus(tmp_path / "corpus", n_docs=6), "vocab": write_vocab(tmp_path / "vocab.txt")}
    cache = tmp_path / "cache"
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache), "--quiet"]) == 0
    document = corpus["metadata"].parent / "docs" / "doc002.txt"
    document.write_text(document.read_text() + "One more sentence.\n")
    done = _cli("create", base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", from_tokens=cache))
    _one_line_error(done, "changed since the cache was made")


def test_tokenize_killed_then_run_again_completes_the_same_cache(corpus, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = _tokenize_args(corpus, cache, split_num=4)
    killed = _cli("tokenize", args, env={"BERT_DATA_CRASH_AT": "tokenized:2"})
    assert killed.returncode == -signal.SIGKILL
    assert not (cache / "tokens.json").exists() and (cache / "g000000001.json").exists()
    assert not (cache / "g000000002.json").exists()
    done = _cli("create", base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", split_num=4, from_tokens=cache))
    _one_line_error(done, "tokens.json", "tokenize again")
    first = (cache / "g000000000.bin").stat().st_ino
    again = _cli("tokenize", args + ["--num_workers", "2"])
    assert again.returncode == 0, again.stderr
    assert (cache / "g000000000.bin").stat().st_ino == first  # a finished group is kept, not remade
    for path in sorted(corpus["cache"].iterdir()):
        if path.name.startswith("g"):
            assert (cache / path.name).read_bytes() == path.read_bytes(), path.name
    got, want = (json.loads((d / "tokens.json").read_text()) for d in (cache, corpus["cache"]))
    assert got["groups"] == want["groups"] and got["counts"] == want["counts"] and got["inputs"] == want["inputs"]
    assert not list(cache.glob("*.tmp")) and not (cache / "tokenize_run.json").exists()


def test_tokenize_takes_no_instance_flag_and_refuses_another_cache(corpus, tmp_path: Path) -> None:
    _one_line_error(_cli("tokenize", _tokenize_args(corpus, tmp_path / "c") + ["--max_seq_length", "512"]),
                    "--max_seq_length", "create_tfrecords --from_tokens")
    other = _cli("tokenize", _tokenize_args(corpus, corpus["cache"], split_num=3))
    _one_line_error(other, "--overwrite")
    same = _cli("tokenize", _tokenize_args(corpus, corpus["cache"], split_num=4))
    assert same.returncode == 0, same.stderr


def test_the_cache_is_megatrons_indexed_dataset(corpus, tmp_path: Path) -> None:
    """Read by Megatron's own class (megatron-core, the torch extra): every sentence of every group
    is the sentence we read back, documents where the sidecar's units put them; and Megatron's own
    builder, given those documents, writes the very bytes of our .bin and .idx."""
    try:
        with warnings.catch_warnings():  # (its import warns that NVIDIA's Transformer Engine is absent: not needed here)
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("megatron-core is not installed (pip install 'bert_data[torch]')")
    manifest = json.loads((corpus["cache"] / "tokens.json").read_text())
    assert manifest["dtype"] == "uint16" and len(manifest["groups"]) == 6
    for group_index in range(len(manifest["groups"])):
        dataset = IndexedDataset(group_file(str(corpus["cache"]), group_index, ""))
        units, _ = read_group_cache(str(corpus["cache"]), group_index, None)
        sentences = [g.ids[g.sent_offsets[s]:g.sent_offsets[s + 1]] for g in (u.group for u, _ in units)
                     for s in range(len(g.sent_offsets) - 1)]
        assert len(dataset) == len(sentences) and dataset.index.dtype == np.uint16
        for s, sentence in enumerate(sentences):
            assert np.array_equal(dataset[s].astype(np.int32), sentence)
        starts = [0]
        for unit, _ in units:
            starts += [starts[-1] + d - unit.group.doc_starts[0] for d in unit.group.doc_starts[1:]]
        assert dataset.document_indices.tolist() == starts
        prefix = str(tmp_path / f"megatron{group_index}")
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
        for first, last in zip(starts[:-1], starts[1:]):
            builder.add_document(np.concatenate(sentences[first:last]),  # (numpy.array(...) of it: as of a tensor)
                                 [len(sentence) for sentence in sentences[first:last]])
        builder.finalize(prefix + ".idx")
        for suffix in (".bin", ".idx"):
            mine = Path(group_file(str(corpus["cache"]), group_index, suffix)).read_bytes()
            assert Path(prefix + suffix).read_bytes() == mine, suffix


# --- the format itself: round trips of the pure writer and reader --------------------------------

units_strategy = st.lists(  # units: each a list of documents, each a list of sentence lengths (0: dropped)
    st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=4), min_size=0, max_size=4), min_size=0, max_size=4)


@settings(max_examples=40, deadline=None)
@given(units_strategy, st.booleans(), st.integers(0, 2**64 - 1))
def test_group_cache_round_trip(tmp_path_factory, layout, wide: bool, origin_seed: int) -> None:
    directory = str(tmp_path_factory.mktemp("round_trip"))
    rng = np.random.default_rng(origin_seed % 2**32)
    vocab_size = 70000 if wide else 30522
    written = []
    for index, documents in enumerate(layout):
        per_doc = [[rng.integers(0, vocab_size, n).astype(np.int32) for n in doc] for doc in documents]
        group = make_group(per_doc)
        origins = [int(x) for x in rng.integers(0, 2**64 - 1, group.n_docs, dtype=np.uint64, endpoint=True)]  # 64-bit hashes
        written.append((TokenizedUnit(index, group, origins), {"tokens": int(len(group.ids)), f"u{index}": 0}))
    sizes = write_group_cache(directory, 7, "digest", written, {"tail": 1}, token_dtype(vocab_size))
    check_group_files(directory, 7, sizes)
    units, tail = read_group_cache(directory, 7, "digest")
    assert tail == {"tail": 1} and len(units) == len(written)
    for (got, got_stats), (want, want_stats) in zip(units, written):
        assert got.index == want.index and got_stats == want_stats and got.origins == want.origins
        assert got.group.ids.dtype == np.int32 and np.array_equal(got.group.ids, want.group.ids)
        assert np.array_equal(got.group.sent_offsets, want.group.sent_offsets)
        assert got.group.doc_starts == list(want.group.doc_starts)
    with pytest.raises(Exception, match="other documents"):
        read_sidecar(directory, 7, "another plan")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), max_size=20), st.sampled_from([np.uint16, np.int32]), st.data())
def test_index_bytes_parse_back(lengths, dtype, data) -> None:
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(lengths)), max_size=5))) | {0, len(lengths)})
    index = index_bytes(np.asarray(lengths, dtype=np.int32), np.asarray(cuts), np.dtype(dtype))
    got_dtype, got_lengths, pointers, indices = parse_index(index)
    assert got_dtype == np.dtype(dtype) and got_lengths.tolist() == lengths and indices.tolist() == cuts
    check_consistent(got_dtype, got_lengths, pointers, indices, sum(lengths) * np.dtype(dtype).itemsize)
    with pytest.raises(ValueError):
        parse_index(index[:-1])
    with pytest.raises(ValueError):
        check_consistent(got_dtype, got_lengths, pointers, indices, sum(lengths) * np.dtype(dtype).itemsize + 2)


def test_a_worker_killed_while_making_the_pool_is_named_and_the_same_command_completes(corpus, tmp_path: Path) -> None:
    """The pool task is not a group: a worker killed while making it says so (it said 'group -1'),
    and the same command then makes the whole cache, pool kept."""
    cache = tmp_path / "cache"
    args = _tokenize_args(corpus, cache, split_num=4, num_workers=2)
    killed = _cli("tokenize", args, env={"BERT_DATA_CRASH_AT": "worker:-1"})
    assert killed.returncode == 3, killed.stderr
    assert "a worker process died" in killed.stderr and "NSP's negative pool" in killed.stderr
    assert "group -1" not in killed.stderr and "Traceback" not in killed.stderr
    again = _cli("tokenize", args)
    assert again.returncode == 0, again.stderr
    assert "pool for --seed 0 kept" in again.stdout and list(cache.glob("pool-*.npz"))


def test_what_was_being_made_is_named_in_words() -> None:
    from bert_data.runners.pool import _in_flight_words

    assert _in_flight_words([]) == "the run"
    assert _in_flight_words([3]) == "group 3 was being made"
    assert _in_flight_words([2, 3, 4]) == "groups 2-4 were being made"
    assert _in_flight_words([-1]) == "NSP's negative pool was being made"
    assert _in_flight_words([-1, 0]) == "NSP's negative pool and group 0 were being made"


@pytest.mark.parametrize("flags", [["--validation_fraction", "0.3"], ["--validation_metadata_files", "v.txt"]])
def test_tokenize_and_create_give_the_same_way_for_a_split(corpus, tmp_path: Path, flags, capsys) -> None:
    """helper-15's case J: tokenize said 'give --validation_fraction to create_tfrecords
    --from_tokens', which refuses it; both now say: split the metadata, a cache per half."""
    cache = tmp_path / "cache"
    assert bert_data_main(["tokenize", *_tokenize_args(corpus, cache), *flags]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "split the metadata first (split_metadata)" in said and "give it to" not in said
    done = _cli("create", base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", from_tokens=corpus["cache"])
                + flags)
    assert done.returncode == 2 and "split the metadata first (split_metadata)" in done.stderr


@pytest.mark.parametrize("spelling", ["UTF-8", "utf8", "U8"])
def test_an_encoding_spelled_otherwise_is_the_cache_encoding(corpus, tmp_path: Path, spelling) -> None:
    """helper-15: --input_encoding UTF-8 against a cache made with utf-8 was refused as another
    encoding; the codec is compared, and the run gives the cache's bytes."""
    out = tmp_path / "out"
    done = _cli("create", base_args(corpus["metadata"], corpus["vocab"], out, split_num=4, from_tokens=corpus["cache"])
                + ["--input_encoding", spelling])
    assert done.returncode == 0, done.stderr
    other = _cli("create", base_args(corpus["metadata"], corpus["vocab"], tmp_path / "o2", split_num=4,
                                     from_tokens=corpus["cache"]) + ["--input_encoding", "latin-1"])
    assert other.returncode == 2 and "--input_encoding 'utf-8'" in other.stderr
