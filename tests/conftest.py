"""Shared fixtures: tiny hermetic corpora and vocabularies written by the tests themselves,
and access to ``../shared`` (skipped when absent, but a failure when ``CI`` is set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERT_DATA_SHARED", REPO.parent / "shared"))


def _children_start_with_default_stop_signals() -> None:
    """The tools leave a stop signal they were started ignoring ignored (nohup's SIGHUP, a script's
    background SIGINT). A test session started so (``nohup .ci/run``) would pass that on to every
    tool it starts and the signal tests would test nohup: here the session takes those signals
    with a handler that does nothing (as immune as it was started), and exec gives each child
    the default, as a terminal's would have."""
    import signal

    for name in ("SIGHUP", "SIGINT"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is signal.SIG_IGN:
            signal.signal(getattr(signal, name), lambda signum, frame: None)


_children_start_with_default_stop_signals()


def _keep_probes_in_the_session() -> None:
    """Under versions without a precomputed table, tokenizers keep the probed one in
    ``$BERT_DATA_CACHE_DIR`` (see :mod:`bert_data.tokenization`): the tests, and the tools they
    start, share one directory of the session's instead of writing to the user's ~/.cache."""
    import atexit
    import shutil
    import tempfile

    if "BERT_DATA_CACHE_DIR" not in os.environ:
        path = tempfile.mkdtemp(prefix="bert_data_tests_cache_")
        os.environ["BERT_DATA_CACHE_DIR"] = path
        atexit.register(shutil.rmtree, path, True)


_keep_probes_in_the_session()


def shared_file(*parts: str) -> Path:
    """Path of a file under ../shared; skip the test if missing, fail instead when CI is set."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"shared material missing: {path}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: shared/ must be present)")
        pytest.skip(message)
    return path


def need(*modules: str) -> None:
    """Skip a test whose optional packages (``streaming``, ``h5py``, ``pyarrow``, ...) are not
    installed; a failure instead when ``CI`` is set (CI installs every extra)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[test,torch,mds]')")


def require_built(module, name: str) -> None:
    """Skip a test of a compiled accelerator (``module`` None: it was not built, no C compiler at
    install time); fail instead when CI is set: CI must test it."""
    if module is None:
        message = f"{name} is not built (no C compiler at install time)"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: the C accelerator must be built and tested)")
        pytest.skip(message)


def require_wire() -> None:
    """:func:`require_built` for ``bert_data.format._wire``."""
    from bert_data.format import batch_decode

    require_built(batch_decode._wire, "bert_data.format._wire")


def python_code(code: str, *args: str, timeout: float = 300, env=None) -> str:
    """``code`` run by a fresh interpreter (``python -c``, ``args`` its argv): for what only a new
    process shows (which modules an import loads, an import's stand-ins). Must exit 0; its stdout."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def both_paths(call):
    """``call()`` with the C accelerator (``bert_data.format._wire``), then with the writers' numpy
    paths (``native._wire`` None): the two results, for a test to hold equal."""
    from bert_data.format import native

    require_wire()
    with_c = call()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_wire", None)
        return with_c, call()


def same_arrays(left, right):
    """Two dicts of arrays (a C path's and numpy's) hold the same names, dtypes, shapes and values."""
    import numpy as np

    assert list(left) == list(right)
    for name in left:
        assert left[name].dtype == right[name].dtype, name
        assert left[name].shape == right[name].shape, name
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


@pytest.fixture(params=["c", "numpy"])
def impl(request, monkeypatch):
    """Run a test with the compiled accelerator (``bert_data.format._wire``) and with the numpy
    implementations it stands in for (``batch_decode._wire`` None is how every caller tells)."""
    from bert_data.format import batch_decode

    if request.param == "c":
        require_wire()
    else:
        monkeypatch.setattr(batch_decode, "_wire", None)
    return request.param


TINY_WORDS = (
    "the a of and to in is was it that he she they we you this on for with as at by from his her "
    "cat dog sat mat ran fast slow big small red blue green house tree river lamp light sea ship "
    "day night sun moon star rain snow wind cold warm old new good bad one two three four five "
    "bread bake oven salt water fish bird song keep open close door book page word line read "
    "write paper pen ink map road town city hill field farm horse cow bee hive honey"
).split()


def write_vocab(path: Path, extra: Optional[List[str]] = None) -> Path:
    """A small uncased WordPiece vocab: specials, punctuation, letters, ## letters, words."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += list(".,;:!?'\"()-[]/")
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [str(d) for d in range(10)]
    tokens += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    for word in TINY_WORDS + (extra or []):
        if word not in tokens:
            tokens.append(word)
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def sentence(i: int, n_words: int = 12) -> str:
    words = [TINY_WORDS[(i * 7 + j * 3) % len(TINY_WORDS)] for j in range(n_words)]
    return " ".join(words).capitalize() + "."


def write_corpus(root: Path, n_docs: int = 12, paragraphs: int = 3, sentences_per_paragraph: int = 4) -> Path:
    """``n_docs`` documents of blank-line separated paragraphs + ``metadata.txt`` listing them."""
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    lines = []
    for d in range(n_docs):
        paras = []
        for p in range(paragraphs):
            paras.append(" ".join(sentence(d * 31 + p * 5 + s, 8 + (d + s) % 9) for s in range(sentences_per_paragraph)))
        (docs / f"doc{d:03d}.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
        lines.append(f"docs/doc{d:03d}.txt")
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return metadata


@pytest.fixture
def tiny_vocab(tmp_path: Path) -> Path:
    return write_vocab(tmp_path / "vocab.txt")


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    """Returns the metadata file; documents live beside it (use its parent as the prefix)."""
    return write_corpus(tmp_path / "corpus")


def base_args(metadata: Path, vocab: Path, out: Path, **extra: object) -> List[str]:
    """create_tfrecords arguments for a small fast run; ``extra`` flags override."""
    flags: Dict[str, object] = {
        "metadata_files": str(metadata),
        "input_files_prefix": str(metadata.parent),
        "vocab_file": str(vocab),
        "output_dir": str(out),
        "max_seq_length": 32,
        "max_predictions_per_seq": 5,
        "dupe_factor": 2,
        "num_output_files": 3,
        "num_workers": 1,
        "split_num": 5,
    }
    flags.update(extra)
    args: List[str] = ["--do_lower_case"]
    for key, value in flags.items():
        if value is True:
            args.append(f"--{key}")
        elif value is False or value is None:
            continue
        else:
            args += [f"--{key}", str(value)]
    return args


RUN_FIELDS = ("output_dir", "num_workers", "resume", "overwrite", "inputs", "bert_data_version", "runner")


def published_files(out: Path) -> Dict[str, bytes]:
    """Every file a run published, by name; the manifest without the fields that name the run's
    own paths, worker count, flags or version (:data:`RUN_FIELDS`): what two runs that must write
    the same bytes are compared on."""
    import json

    got = {}
    for path in sorted(out.iterdir()):
        if path.name.startswith("."):
            continue
        if path.name == "data_params.json":
            data = json.loads(path.read_text())
            for key in RUN_FIELDS:
                data.pop(key, None)
            got[path.name] = json.dumps(data, sort_keys=True).encode()
        else:
            got[path.name] = path.read_bytes()
    return got


def make_group(per_document_sentence_ids):
    """A TokenizedGroup of documents given as lists of token-id arrays, through the production
    constructor (``TokenizedGroup.from_sentences``, what the tokenization stage calls)."""
    import numpy as np

    from bert_data.tokenization import TokenizedGroup

    lengths, owner, chunks = [], [], []
    for d, sentences in enumerate(per_document_sentence_ids):
        for s in sentences:
            lengths.append(len(s))
            owner.append(d)
            chunks.append(np.asarray(s, dtype=np.int32))
    ids = np.concatenate(chunks).astype(np.int32) if chunks else np.zeros(0, dtype=np.int32)
    group, left_out = TokenizedGroup.from_sentences(
        ids, np.asarray(lengths, dtype=np.int64), np.asarray(owner, dtype=np.int64), len(per_document_sentence_ids)
    )
    assert not left_out, "test documents must hold tokens"
    return group


def collect_pass(instance_pass):
    """Every batch of a production InstancePass, concatenated: (features, shard of each row)."""
    import numpy as np

    batches = list(instance_pass.batches)
    if not batches:
        return {}, np.zeros(0, dtype=np.int64)
    names = batches[0][0].keys()
    features = {name: np.concatenate([b[0][name] for b in batches]) for name in names}
    return features, np.concatenate([b[1] for b in batches])
