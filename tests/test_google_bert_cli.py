"""``create_pretraining_data``: google-research/bert's command line, its corpus layout and its
output contract (issue 16), including the exact command of BERT's README."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from bert_data.format.tfrecord import iter_records
from bert_data.tools.google_bert import main, parse_flags, usage

from conftest import REPO, sentence, shared_file, write_vocab
from test_parity import column_stats

PROG = "create_pretraining_data"


def manifest_of(output: Path) -> Dict:
    return json.loads((output.parent / f".{output.name}.data_params.json").read_text(encoding="utf-8"))


def records(path: Path) -> List[bytes]:
    return list(iter_records(str(path)))


def run(capsys, *args) -> tuple:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *args) -> str:
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith(f"{PROG}: error: "), err
    return err


# --- BERT's README command ---------------------------------------------------------------

# name_to_features of google-research/bert run_pretraining.py input_fn_builder, written out here
# on purpose (the reference reader's map, not ours).
def run_pretraining_features(max_seq_length: int, max_predictions_per_seq: int):
    import tensorflow as tf

    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def reference_stats(documents: List[List[List[str]]], msl: int, max_pred: int, prob: float, short: float,
                    dupe: int, seed: int) -> Dict[str, float]:
    """The figures of google-research/bert's create_training_instances on tokenized documents
    (its document loop, random-next choice, truncation and number of predictions, replayed)."""
    rng = random.Random(seed)
    documents = [d for d in documents if d]
    rng.shuffle(documents)
    lengths, masked, random_next = [], [], []
    max_num_tokens = msl - 3
    for _ in range(dupe):
        for index, document in enumerate(documents):
            target = rng.randint(2, max_num_tokens) if rng.random() < short else max_num_tokens
            chunk, length, i = [], 0, 0
            while i < len(document):
                chunk.append(document[i])
                length += len(document[i])
                if i == len(document) - 1 or length >= target:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    len_a = sum(len(s) for s in chunk[:a_end])
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random = True
                        for _ in range(10):
                            other = rng.randint(0, len(documents) - 1)
                            if other != index:
                                break
                        len_b, start = 0, rng.randint(0, len(documents[other]) - 1)
                        for sentence_tokens in documents[other][start:]:
                            len_b += len(sentence_tokens)
                            if len_b >= target - len_a:
                                break
                        i -= len(chunk) - a_end
                    else:
                        is_random, len_b = False, sum(len(s) for s in chunk[a_end:])
                    real = min(len_a + len_b, max_num_tokens) + 3
                    lengths.append(real)
                    masked.append(min(max_pred, max(1, int(round(real * prob)))))
                    random_next.append(is_random)
                    chunk, length = [], 0
                i += 1
    return {
        "instances_per_document_per_dupe": len(lengths) / len(documents) / dupe,
        "mean_real_len": float(np.mean(lengths)),
        "frac_full_len": float(np.mean(np.array(lengths) == msl)),
        "mean_masked": float(np.mean(masked)),
        "nsp_random_frac": float(np.mean(random_next)),
    }


def parsed_stats(files: List[Path], msl: int, max_pred: int, mask_id: int) -> Dict[str, float]:
    """Every record parsed one by one with run_pretraining.py's feature map."""
    import tensorflow as tf

    spec = run_pretraining_features(msl, max_pred)
    rows = {name: [] for name in spec}
    for path in files:
        for payload in records(path):
            example = tf.io.parse_single_example(payload, spec)
            for name in spec:
                rows[name].append(example[name].numpy())
    return column_stats({name: np.stack(values) for name, values in rows.items()}, msl, mask_id)


def test_bert_readme_command_runs_unchanged(tmp_path, capsys, monkeypatch):
    vocab = shared_file("vocab", "bert-base-uncased-vocab.txt")
    reviews = sorted(shared_file("corpus", "movie_reviews", "pos").glob("*.txt"))[:200]
    texts = [p.read_text(encoding="utf-8").strip("\n") for p in reviews]
    (tmp_path / "sample_text.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "tmp"
    out_dir.mkdir()
    # BERT's README, with our paths:
    command = (
        f"--input_file=./sample_text.txt --output_file={out_dir}/tf_examples.tfrecord --vocab_file={vocab} "
        "--do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 "
        "--random_seed=12345 --dupe_factor=5"
    ).split()
    code, out, err = run(capsys, *command, "--quiet")
    assert code == 0, err
    output = out_dir / "tf_examples.tfrecord"
    manifest = manifest_of(output)
    assert manifest["n_docs"] == len(texts) == 200  # one document per blank-line separated block
    assert manifest["documents"]["read"] == 200 and manifest["output_files"] == [str(output)]
    assert sorted(os.listdir(out_dir)) == [".tf_examples.tfrecord.data_params.json", "tf_examples.tfrecord"]

    from bert_data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(vocab), do_lower_case=True)
    documents = [[t for t in (tokenizer.tokenize(line) for line in text.split("\n")) if t] for text in texts]
    # averaged over seeds: with 200 documents one seed's figures spread by ~0.03 (frac_full_len)
    runs = [reference_stats(documents, 128, 20, 0.15, 0.1, 5, seed) for seed in (1, 2, 3, 12345)]
    expected = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
    got = parsed_stats([output], 128, 20, tokenizer.vocab["[MASK]"])
    assert got["instances"] == manifest["n_examples"]
    assert got["instances"] / 200 / 5 == pytest.approx(expected["instances_per_document_per_dupe"], rel=0.05)
    assert got["mean_real_len"] == pytest.approx(expected["mean_real_len"], rel=0.02)
    assert got["mean_masked"] == pytest.approx(expected["mean_masked"], rel=0.02)
    assert got["frac_full_len"] == pytest.approx(expected["frac_full_len"], abs=0.04)
    assert got["nsp_random_frac"] == pytest.approx(expected["nsp_random_frac"], abs=0.03)
    assert got["mask_frac_MASK"] == pytest.approx(0.8, abs=0.02)
    assert got["mask_frac_kept"] == pytest.approx(0.1, abs=0.02)
    assert got["mask_frac_random"] == pytest.approx(0.1, abs=0.02)


# --- absl syntax -------------------------------------------------------------------------


def test_defaults_are_berts():
    values = parse_flags(["--input_file=a", "--output_file=b", "--vocab_file=v"])
    assert values["do_lower_case"] is True and values["do_whole_word_mask"] is False
    assert (values["max_seq_length"], values["max_predictions_per_seq"], values["random_seed"]) == (128, 20, 12345)
    assert (values["dupe_factor"], values["masked_lm_prob"], values["short_seq_prob"]) == (10, 0.15, 0.1)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--nodo_lower_case"], False),
        (["--do_lower_case"], True),
        (["--do_lower_case", "True"], True),
        (["--do_lower_case=false"], False),
        (["--do_lower_case=0"], False),
        (["--do_lower_case=True"], True),
        (["--nodo_lower_case", "--do_lower_case"], True),  # the last one wins
        (["-nodo_lower_case"], False),  # absl takes a single dash too
    ],
)
def test_boolean_spellings(args, expected):
    assert parse_flags(args)["do_lower_case"] is expected


def test_value_spellings():
    values = parse_flags(["--max_seq_length", "64", "-dupe_factor=3", "--random_seed=0x10", "--masked_lm_prob", "0.2",
                          "--do_whole_word_mask", "--input_file=a,b*"])
    assert (values["max_seq_length"], values["dupe_factor"], values["random_seed"]) == (64, 3, 16)
    assert values["masked_lm_prob"] == 0.2 and values["do_whole_word_mask"] is True and values["input_file"] == "a,b*"


def test_flagfile_nested_with_comments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inner.flags").write_text("--dupe_factor=7\n--nodo_lower_case\n", encoding="utf-8")
    (tmp_path / "outer.flags").write_text(
        "# BERT flags\n\n// also a comment\n--max_seq_length=256\n--flagfile=inner.flags\n  --random_seed=1  \n",
        encoding="utf-8",
    )
    values = parse_flags(["--dupe_factor=2", "--flagfile=outer.flags", "--random_seed=5"])
    assert values["max_seq_length"] == 256 and values["do_lower_case"] is False
    assert values["dupe_factor"] == 7  # the flagfile comes after --dupe_factor=2
    assert values["random_seed"] == 5  # and before --random_seed=5
    assert parse_flags(["--flagfile", "inner.flags"])["dupe_factor"] == 7
    # a list flag of a flag file overridden on the command line: absl's idiom, the last wins
    (tmp_path / "files.flags").write_text("--input_file=a.txt\n", encoding="utf-8")
    assert parse_flags(["--flagfile=files.flags", "--input_file=b.txt"])["input_file"] == "b.txt"


def test_help_lists_berts_flags_with_their_help(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and out.strip() == usage().strip()
    for text in ("--input_file: Input raw text file (or comma-separated list of files).",
                 "--[no]do_lower_case: Whether to lower case the input text.", "(default: '12345')",
                 "--[no]do_whole_word_mask", "--num_workers", "--[no]resume", "--flagfile"):
        assert text in out


@pytest.mark.parametrize(
    "args, words",
    [
        (["--input=x"], "unknown flag --input; did you mean --input_file?"),  # never a prefix match
        (["--do_lower_case", "False"], "--do_lower_case=false or --nodo_lower_case"),
        (["--do_lower_case=maybe"], "a boolean is true/false"),
        (["--nodo_lower_case=true"], "takes no value"),
        (["--max_seq_length=12x"], "--max_seq_length='12x' is not an integer"),
        (["--masked_lm_prob", "--dupe_factor=2"], "--masked_lm_prob needs a value"),
        (["--dupe_factor"], "--dupe_factor needs a value"),
        (["stray"], "unexpected argument 'stray'"),
        (["--flagfile=missing.flags"], "--flagfile missing.flags cannot be read"),
        (["--flagfile=."], "--flagfile . is not a regular file"),
        (["--output_file=o", "--vocab_file=v"], "--input_file is required"),
        (["--input_file=a", "--input_file", "b"], "--input_file is given 2 times, and absl (so BERT) would read only "
                                                  "the last; give every file in one comma-separated --input_file=A,B"),
        (["--output_file=a", "-output_file=b"], "--output_file is given 2 times"),
    ],
)
def test_usage_errors_are_one_line(capsys, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    assert words in one_line_error(capsys, *args)


def test_absl_logging_flags_are_accepted():
    values = parse_flags(["--logtostderr", "--alsologtostderr=false", "--dupe_factor=1"])
    assert values["dupe_factor"] == 1 and values["logtostderr"] is True


def test_bert_layout_refuses_what_does_not_apply():
    from bert_data.presets import build_config
    from bert_data.errors import ConfigError

    base = {"metadata_files": ["m"], "vocab_file": "v", "input_format": "bert"}
    assert build_config(base).lines_are_sentences
    for extra, flag in (({"spacy_model": "en_core_web_sm"}, "--spacy_model"),
                        ({"multiple_docs_in_single_file": True}, "--multiple_docs_in_single_file")):
        with pytest.raises(ConfigError, match=f"{flag} does not apply to --input_format bert"):
            build_config({**base, **extra})


def test_flagfile_loop_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.flags").write_text("--flagfile=b.flags\n", encoding="utf-8")
    (tmp_path / "b.flags").write_text("--flagfile=a.flags\n", encoding="utf-8")
    assert "includes itself" in one_line_error(capsys, "--flagfile=a.flags")


# --- BERT's corpus layout ----------------------------------------------------------------


def bert_file(path: Path, n_docs: int, start: int = 0, blank: str = "\n", newline: str = "\n") -> int:
    """``n_docs`` documents of 6-9 sentences, one per line, ``blank`` between documents."""
    docs = []
    for d in range(start, start + n_docs):
        docs.append(newline.join(sentence(d * 13 + s, 9 + s % 5) for s in range(6 + d % 4)) + newline)
    path.write_text(blank.join(docs), encoding="utf-8", newline="")
    return n_docs


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Dict[str, Path]:
    """Three files in BERT's layout: plain, CRLF with CRLF blank lines, whitespace-only blank lines
    (with runs of several); 8 + 6 + 5 documents."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    bert_file(corpus / "a.txt", 8)
    bert_file(corpus / "b-1.txt", 6, 100, blank="\r\n", newline="\r\n")
    bert_file(corpus / "b-2.txt", 5, 200, blank=" \t \n\n\u3000\n")
    return {"corpus": corpus, "vocab": write_vocab(tmp_path / "vocab.txt"), "out": tmp_path / "out"}


def test_documents_are_blank_line_separated_across_comma_globs(capsys, layout):
    output = layout["out"] / "examples.tfrecord"
    code, _, err = run(capsys, "--input_file=corpus/a.txt,corpus/b-*.txt", f"--output_file={output}",
                       f"--vocab_file={layout['vocab']}", "--dupe_factor=2", "--num_workers=1", "--quiet")
    assert code == 0, err
    manifest = manifest_of(output)
    assert manifest["documents"]["read"] == manifest["n_docs"] == 8 + 6 + 5
    assert manifest["input_format"] == "bert" and manifest["seed"] == 12345 and manifest["do_lower_case"] is True
    inputs = manifest["create_pretraining_data"]["input_files"]
    assert [Path(p).name for p in inputs] == ["a.txt", "b-1.txt", "b-2.txt"]  # in order given, matches sorted
    assert len(records(output)) == manifest["n_examples"] > 0


def test_output_files_round_robin_same_instances(capsys, layout):
    common = ["--input_file=corpus/*.txt", f"--vocab_file={layout['vocab']}", "--dupe_factor=3", "--quiet"]
    single = layout["out"] / "one" / "all.tfrecord"  # missing parent directories are created
    assert run(capsys, *common, f"--output_file={single}", "--num_workers=1")[0] == 0
    names = [layout["out"] / "many" / f"part-{i}" for i in range(3)]
    code, _, err = run(capsys, *common, "--output_file=" + ",".join(map(str, names)), "--num_workers=2")
    assert code == 0, err
    counts = [len(records(p)) for p in names]
    assert sum(counts) == len(records(single)) and max(counts) - min(counts) <= 3  # dealt round-robin per pass
    assert sorted(r for p in names for r in records(p)) == sorted(records(single))
    manifest = manifest_of(names[0])
    assert manifest["instances_per_output_file"] == {str(p): c for p, c in zip(names, counts)}
    assert not (layout["out"] / "many" / ".part-0.bert_data").exists()  # the staging directory is gone


def test_rerun_overwrites_only_the_named_files(capsys, layout):
    output = layout["out"] / "x.tfrecord"
    other = layout["out"] / "keep.me"
    args = ["--input_file=corpus/a.txt", f"--output_file={output}", f"--vocab_file={layout['vocab']}", "--quiet"]
    assert run(capsys, *args)[0] == 0
    other.write_text("mine")
    first = output.read_bytes()
    assert run(capsys, *args, "--random_seed=7")[0] == 0
    assert output.read_bytes() != first and manifest_of(output)["seed"] == 7 and other.read_text() == "mine"


def test_a_run_replacing_another_runs_file_takes_it_off_that_runs_manifest(capsys, layout):
    """Run 1 wrote a,b; run 2 wrote b,c. Run 1's hidden manifest still listed b with run 1's
    count: inspect of the directory said "MISMATCH ... lists b, which is missing", and readers
    of run 1's files took run 2's b for run 1's. Run 1's manifest now lists a only (its count,
    n_examples of a, b named as replaced); a run replacing all of a manifest's files removes it."""
    from bert_data.tools import inspect as insp

    out = layout["out"]
    common = [f"--vocab_file={layout['vocab']}", "--quiet", "--num_workers=1"]
    assert run(capsys, "--input_file=corpus/a.txt", f"--output_file={out / 'a'},{out / 'b'}", *common)[0] == 0
    first = manifest_of(out / "a")
    assert run(capsys, "--input_file=corpus/b-*.txt", f"--output_file={out / 'b'},{out / 'c'}", *common)[0] == 0
    amended = manifest_of(out / "a")
    assert amended["output_files"] == [str(out / "a")] and amended["output_files_replaced_later"] == [str(out / "b")]
    assert amended["instances_per_output_file"] == {str(out / "a"): len(records(out / "a"))} == {
        str(out / "a"): first["instances_per_output_file"][str(out / "a")]}
    assert amended["n_examples"] == len(records(out / "a")) and "nsp_random_next" not in amended
    assert manifest_of(out / "b")["output_files"] == [str(out / "b"), str(out / "c")]
    capsys.readouterr()
    assert insp.main([str(out), "--stats", "--quiet"]) == 0, capsys.readouterr()
    assert run(capsys, "--input_file=corpus/a.txt", f"--output_file={out / 'a'}", *common)[0] == 0
    assert run(capsys, "--input_file=corpus/a.txt", f"--output_file={out / 'b'},{out / 'c'}", *common)[0] == 0
    assert sorted(p.name for p in out.glob(".*.data_params.json")) == [".a.data_params.json", ".b.data_params.json"]
    assert run(capsys, "--input_file=corpus/a.txt", f"--output_file={out / 'c'},{out / 'b'}", *common)[0] == 0
    assert sorted(p.name for p in out.glob(".*.data_params.json")) == [".a.data_params.json", ".c.data_params.json"]


@pytest.mark.parametrize(
    "output, words",
    [
        ("{out}", "is a directory"),
        ("{out}/a,{out}/b,{out}/a", "is given twice"),
        ("{out}/a,", "has an empty entry"),
        ("corpus/a.txt", "is an input file; refusing to overwrite it"),
        ("vocab.txt", "is --vocab_file"),
        ("corpus/a.txt/x", "is a file, not a directory"),
    ],
)
def test_bad_output_files_are_one_line(capsys, layout, output, words):
    layout["out"].mkdir()
    output = output.format(out=layout["out"])
    err = one_line_error(capsys, "--input_file=corpus/*.txt", f"--output_file={output}", f"--vocab_file={layout['vocab']}")
    assert words in err


def test_bad_inputs_are_one_line(capsys, layout):
    vocab = f"--vocab_file={layout['vocab']}"
    assert "corpus/none*.txt matches no file" in one_line_error(
        capsys, "--input_file=corpus/a.txt,corpus/none*.txt", "--output_file=o", vocab)
    assert "missing.txt does not exist" in one_line_error(capsys, "--input_file=missing.txt", "--output_file=o", vocab)
    assert "--random_seed" in one_line_error(capsys, "--input_file=corpus/a.txt", "--output_file=o", vocab,
                                             "--random_seed=99999999999999999999999")
    assert "--max_predictions_per_seq" in one_line_error(
        capsys, "--input_file=corpus/a.txt", "--output_file=o", vocab, "--max_predictions_per_seq=200")


# --- resume ------------------------------------------------------------------------------


def _cli(args: List[str], cwd: Path, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "bert_data.tools.google_bert", *args], capture_output=True,
                          text=True, env=environment, timeout=300, cwd=cwd)


@pytest.mark.parametrize("crash_at", ["checkpointed:0", "published:0", "moved:0"])
def test_resume_after_a_kill_gives_the_same_files(tmp_path, layout, crash_at):
    common = ["--input_file=corpus/*.txt", f"--vocab_file={layout['vocab']}", "--dupe_factor=2", "--quiet"]
    reference = [tmp_path / "ref" / "r-0", tmp_path / "ref" / "r-1"]
    outputs = [tmp_path / "run" / "r-0", tmp_path / "run" / "r-1"]
    assert _cli([*common, "--output_file=" + ",".join(map(str, reference))], tmp_path).returncode == 0
    args = [*common, "--output_file=" + ",".join(map(str, outputs)), "--num_workers=1"]
    killed = _cli(args, tmp_path, env={"BERT_DATA_CRASH_AT": crash_at})
    assert killed.returncode == -signal.SIGKILL
    assert [p.exists() for p in outputs] == [crash_at == "moved:0", False]  # nothing, or the first file only
    assert not (tmp_path / "run" / ".r-0.data_params.json").exists()  # the manifest comes last
    resumed = _cli([*args, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [p.read_bytes() for p in outputs] == [p.read_bytes() for p in reference]
    again = _cli([*args, "--resume"], tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("already complete")
    staging = tmp_path / "run" / ".r-0.bert_data"  # as a kill while the publish removed it leaves it: no run in it
    staging.mkdir(exist_ok=True)
    (staging / "input_files.txt").write_text("")
    tidied = _cli([*args, "--resume"], tmp_path)
    assert tidied.returncode == 0 and tidied.stdout.startswith("already complete") and not staging.exists()
    changed = _cli([*args, "--resume", "--random_seed=3"], tmp_path)
    assert changed.returncode == 2 and "other settings (seed)" in changed.stderr


def test_resume_refuses_when_the_globs_match_other_files(tmp_path, layout):
    args = ["--input_file=corpus/*.txt", f"--vocab_file={layout['vocab']}", f"--output_file={tmp_path}/o/x",
            "--num_workers=1", "--quiet"]
    assert _cli(args, tmp_path, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    bert_file(layout["corpus"] / "c.txt", 3, 300)
    refused = _cli([*args, "--resume"], tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--input_file matches other files" in refused.stderr and "a rerun without --resume" in refused.stderr
    assert "--overwrite" not in refused.stderr


def test_resume_without_a_run_is_one_line(capsys, layout):
    err = one_line_error(capsys, "--input_file=corpus/a.txt", f"--output_file={layout['out']}/z",
                         f"--vocab_file={layout['vocab']}", "--resume")
    assert "nothing to continue" in err


# --- the same layout from create_tfrecords -----------------------------------------------


def test_create_tfrecords_reads_the_bert_layout(tmp_path, capsys, layout):
    from bert_data.tools.create import main as create

    metadata = tmp_path / "metadata.txt"
    metadata.write_text("corpus/a.txt\ncorpus/b-1.txt\ncorpus/b-2.txt\n", encoding="utf-8")
    code = create(["--metadata_files", str(metadata), "--input_files_prefix", str(tmp_path), "--vocab_file",
                   str(layout["vocab"]), "--input_format", "bert", "--output_dir", str(tmp_path / "ct"),
                   "--num_workers", "1", "--quiet", "--dupe_factor", "1"])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "ct" / "data_params.json").read_text(encoding="utf-8"))
    assert manifest["n_docs"] == 19 and manifest["documents"]["read"] == 19


def test_every_flag_is_in_the_migration_guide():
    from bert_data.tools.google_bert import FLAGS

    guide = (REPO / "docs" / "migrating.md").read_text(encoding="utf-8")
    assert [name for name in FLAGS if f"`--{name}`" not in guide] == []
    assert "## From google-research/bert `create_pretraining_data.py`" in guide
    assert "## From the Cerebras Model Zoo" in guide


def test_byte_ranges_read_the_same_documents(tmp_path, monkeypatch):
    """A file in BERT's layout read in byte ranges of any size gives the documents of the whole
    file, in order, each once; every byte, document and replaced byte is counted once. Blank lines
    of every kind, CRLF, a BOM, CJK and multi-byte whitespace at range and chunk edges, undecodable
    bytes and documents cut into pieces are all in the draws."""
    from collections import Counter

    import bert_data.documents as documents
    from bert_data.metadata import DocumentSource, WorkItem

    def read(path, options, ranges):
        stats = Counter()
        items = [WorkItem(DocumentSource(str(path), "m", 1), start, end) for start, end in ranges]
        return list(documents.iter_documents(items, options, stats)), stats

    rng = random.Random(16)
    lines = ["", " ", "\t\r", "\u3000", "hello world", "caf\u00e9 na\u00efve", "\u4e2d\u6587", "x" * 30, "a\u3000b"]
    path = tmp_path / "bert.txt"
    for _ in range(25):
        text = "".join(rng.choice(lines) + rng.choice(["\n", "\r\n"]) for _ in range(rng.randint(0, 30)))
        raw = (b"\xef\xbb\xbf" if rng.random() < 0.2 else b"") + (text + rng.choice(lines)).encode("utf-8")
        raw += b"bad \xff\xfe\n" if rng.random() < 0.3 else b""
        path.write_bytes(raw)
        options = documents.ReadOptions(input_format="bert", max_document_chars=rng.choice([15, 1 << 20]))
        expected, whole = read(path, options, [(0, None)])
        for back_chunk in (4, 5):
            monkeypatch.setattr(documents, "_BACK_CHUNK", back_chunk)
            for step in range(1, 20):
                got, stats = read(path, options, [(s, min(len(raw), s + step)) for s in range(0, len(raw), step)])
                assert got == expected, (raw, step)
                assert stats == whole, (raw, step)


def test_large_bert_file_is_ranged_and_worker_count_free(tmp_path, capsys):
    from bert_data.tools.create import main as create

    vocab = write_vocab(tmp_path / "vocab.txt")
    n_docs = bert_file(tmp_path / "big.txt", 1500, blank="\n \n")  # ~260 KB: 4+ ranges of 64K
    assert (tmp_path / "big.txt").stat().st_size > 3 * 65536
    (tmp_path / "metadata.txt").write_text("big.txt\n", encoding="utf-8")
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        code = create(["--metadata_files", str(tmp_path / "metadata.txt"), "--input_files_prefix", str(tmp_path),
                       "--vocab_file", str(vocab), "--input_format", "bert", "--group_bytes", "64K", "--dupe_factor",
                       "1", "--output_dir", str(out), "--num_workers", workers, "--quiet", "--num_output_files", "2"])
        assert code == 0, capsys.readouterr().err
        manifest = json.loads((out / "data_params.json").read_text(encoding="utf-8"))
        assert manifest["n_docs"] == manifest["documents"]["read"] == n_docs
        assert manifest["input_bytes"] == (tmp_path / "big.txt").stat().st_size and manifest["groups"] >= 4
        outputs.append([(out / f"examples-{i}.tfrecords").read_bytes() for i in (1, 2)])
    assert outputs[0] == outputs[1]


def test_inspect_finds_the_hidden_manifest_of_named_output_files(capsys, layout):
    """``inspect_tfrecords`` on BERT-named output files reads the manifest create_pretraining_data
    hid beside them (.NAME.data_params.json): the vocabulary it names, each file's record count and
    the lengths are checked, as for a directory's data_params.json."""
    from bert_data.tools import inspect as insp

    common = ["--input_file=corpus/*.txt", f"--vocab_file={layout['vocab']}", "--dupe_factor=2", "--quiet"]
    names = [layout["out"] / "many" / f"part-{i}" for i in range(3)]
    assert run(capsys, *common, "--output_file=" + ",".join(map(str, names)))[0] == 0
    report_path = layout["out"] / "stats.json"
    for files in (names, names[1:]):  # the first file (whose name the manifest bears), or only others
        code = insp.main([*map(str, files), "--stats", "--quiet", "--json", str(report_path)])
        out, err = capsys.readouterr()
        report = json.loads(report_path.read_text())
        assert code == 0, (out, err)
        assert [m["path"] for m in report["manifests"]] == [str(names[0].parent / ".part-0.data_params.json")]
        assert report["manifests"][0]["n_examples_checked"] is (files == names)
        assert report["unk"]["rate"] is not None  # the vocabulary came from the manifest
    assert insp.main([str(names[1]), "-n", "1"]) == 0  # printing needs a vocabulary: found there too
    assert "[CLS]" in capsys.readouterr().out
    manifest_file = names[0].parent / ".part-0.data_params.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["instances_per_output_file"][str(names[2])] += 1  # a count that is not the file's
    manifest_file.write_text(json.dumps(manifest))
    assert insp.main([*map(str, names), "--stats", "--quiet", "--json", str(report_path)]) == 1
    problems = json.loads(report_path.read_text())["manifest_problems"]
    assert any("part-2" in p and "holds" in p for p in problems), problems


@pytest.mark.parametrize("content, why", [("{not json", "cannot be read as JSON"), ("[1, 2]", "not a JSON object")])
def test_inspect_refuses_a_damaged_hidden_manifest_in_one_line(capsys, layout, content, why):
    """The manifest named after the file inspected is damaged: one line naming it, exit 2 (not
    a silent read as if there were no manifest)."""
    from bert_data.tools import inspect as insp

    output = layout["out"] / "x.tfrecord"
    assert run(capsys, "--input_file=corpus/a.txt", f"--output_file={output}", f"--vocab_file={layout['vocab']}", "--quiet")[0] == 0
    hidden = output.parent / ".x.tfrecord.data_params.json"
    hidden.write_text(content)
    for argv in ([str(output), "--stats", "--quiet"], [str(output), "-n", "1", "--vocab_file", str(layout["vocab"])]):
        assert insp.main(argv) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"inspect_tfrecords: error: {hidden}: {why}") and err.count("\n") == 1, err


def test_from_tokens_writes_the_files_of_the_run_from_text(capsys, layout):
    """`bert-data tokenize --input_file=GLOBS` (create_pretraining_data's inputs) once, then
    create_pretraining_data --from_tokens: the same bytes as from the text; a cache of other
    inputs, or of another casing, is refused in one line in BERT's terms."""
    from bert_data.tools.tokenize import main as tokenize

    cache = layout["out"] / "cache"
    assert tokenize(["--input_file=corpus/a.txt,corpus/b-*.txt", "--vocab_file", str(layout["vocab"]),
                     "--do_lower_case", "--output_dir", str(cache), "--num_workers", "1", "--quiet"]) == 0
    common = ["--input_file=corpus/a.txt,corpus/b-*.txt", f"--vocab_file={layout['vocab']}", "--dupe_factor=3",
              "--num_workers=2", "--quiet"]
    text, cached = layout["out"] / "text.tfrecord", layout["out"] / "cached.tfrecord"
    assert run(capsys, *common, f"--output_file={text}")[0] == 0
    (pool,) = cache.glob("pool-*.npz")  # tokenize kept the NSP pool of BERT's default --random_seed ...
    kept = pool.stat().st_ino
    code, _, err = run(capsys, *common, f"--output_file={cached}", f"--from_tokens={cache}")
    assert code == 0, err
    assert cached.read_bytes() == text.read_bytes() and len(records(cached)) > 0
    assert [p.stat().st_ino for p in cache.glob("pool-*.npz")] == [kept]  # ... and the run read that one
    assert manifest_of(cached)["n_examples"] == manifest_of(text)["n_examples"]
    err = one_line_error(capsys, "--input_file=corpus/a.txt", f"--vocab_file={layout['vocab']}",
                         f"--output_file={cached}", f"--from_tokens={cache}", "--quiet")
    assert err.endswith(f"--from_tokens {cache}: --input_file matches other files than the cache was made from; "
                        "tokenize again\n"), err  # (it said "the metadata files' contents", a nanosecond time, a spool)
    err = one_line_error(capsys, *common, "--nodo_lower_case", f"--output_file={cached}", f"--from_tokens={cache}")
    assert "pass the same --do_lower_case" in err
    other = layout["out"] / "cache-split"  # a flag create_pretraining_data has no way to pass
    assert tokenize(["--input_file=corpus/a.txt,corpus/b-*.txt", "--vocab_file", str(layout["vocab"]),
                     "--do_lower_case", "--output_dir", str(other), "--split_num", "1", "--quiet"]) == 0
    capsys.readouterr()
    err = one_line_error(capsys, *common, f"--output_file={cached}", f"--from_tokens={other}")
    assert err.endswith("create_pretraining_data runs with the default --split_num (it has no such flag): tokenize "
                        "again without --split_num\n"), err


def test_tokenize_input_file_is_one_way_of_naming_inputs(capsys, layout):
    from bert_data.tools.tokenize import main as tokenize

    base = ["--vocab_file", str(layout["vocab"]), "--output_dir", str(layout["out"] / "c"), "--quiet"]
    assert tokenize(["--input_file=corpus/a.txt", "--metadata_files", "m.txt", *base]) == 2
    assert tokenize(["--input_file=corpus/a.txt", "--input_format", "text", *base]) == 2
    assert tokenize(["--input_file=corpus/none-*.txt", *base]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("bert-data tokenize: error: ") for line in err), err
    assert "give one of them" in err[0] and "--input_format text" in err[1] and "matches no file" in err[2]


def test_the_token_caches_advice_keeps_tokenizes_own_flags(capsys, layout):
    """The advice of a token cache error is a `bert-data tokenize` command: its --output_dir and
    --overwrite are tokenize's, not translated into BERT's terms as the rest of the line is."""
    missing = layout["out"] / "no-cache"
    err = one_line_error(capsys, "--input_file=corpus/a.txt", f"--vocab_file={layout['vocab']}",
                         f"--output_file={layout['out'] / 'x.tfrecord'}", f"--from_tokens={missing}", "--quiet")
    assert f"make it with bert-data tokenize --output_dir {missing}" in err and "work directory" not in err
