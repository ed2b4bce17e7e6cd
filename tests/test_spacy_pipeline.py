"""A named spaCy pipeline, end to end: built here (a blank English pipeline with a sentencizer and
a component sentence boundaries do not need), saved to a directory and installed as a package
under a name, then given to ``--spacy_model`` by path and by name, in worker processes too.

It segments exactly as the built-in default (spaCy's rule-based sentencizer), so the shards must
be byte-identical to a run without ``--spacy_model``; the unneeded component is never loaded."""

from __future__ import annotations

import json
import sys

import pytest

from bert_data.sentences import load_spacy_pipeline
from bert_data.tools.create import main

from conftest import base_args, write_corpus, write_vocab

spacy = pytest.importorskip("spacy")

PACKAGE = "en_tiny_sents"  # lang "en" + name "tiny_sents": spaCy's package naming


def _pipeline():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    ruler = nlp.add_pipe("entity_ruler")  # not needed for sentences: must be excluded when loading
    ruler.add_patterns([{"label": "ORG", "pattern": "bees"}])
    nlp.meta["name"], nlp.meta["version"] = "tiny_sents", "0.0.1"
    return nlp


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The pipeline saved to a directory, and installed as package ``en_tiny_sents`` (importable,
    with a dist-info, as ``pip install`` of a ``spacy package`` build leaves it)."""
    root = tmp_path_factory.mktemp("spacy")
    nlp = _pipeline()
    saved = root / "saved_pipeline"
    nlp.to_disk(saved)
    site = root / "site"
    package = site / PACKAGE
    package.mkdir(parents=True)
    nlp.to_disk(package / f"{PACKAGE}-0.0.1")
    (package / "meta.json").write_text(json.dumps(nlp.meta))
    (package / "__init__.py").write_text(
        "from spacy.util import load_model_from_init_py\n\n\n"
        "def load(**overrides):\n    return load_model_from_init_py(__file__, **overrides)\n"
    )
    info = site / f"{PACKAGE}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.0.1\n")
    (info / "top_level.txt").write_text(PACKAGE + "\n")
    return {"path": saved, "site": site}


@pytest.fixture
def on_path(installed, monkeypatch):
    """The package importable here and in spawned workers (they inherit PYTHONPATH)."""
    import importlib

    monkeypatch.syspath_prepend(str(installed["site"]))
    monkeypatch.setenv("PYTHONPATH", f"{installed['site']}:{':'.join(p for p in sys.path if p)}")
    importlib.invalidate_caches()
    return installed


def test_load_by_path_and_by_name_excludes_what_sentences_do_not_need(on_path) -> None:
    for given in (str(on_path["path"]), PACKAGE):
        nlp = load_spacy_pipeline(given)
        assert nlp.pipe_names == ["sentencizer"], given
        assert "entity_ruler" not in nlp.component_names, given  # excluded, not merely disabled
        assert [s.text for s in nlp("One bee. Two bees! Three?").sents] == ["One bee.", "Two bees!", "Three?"]


@pytest.mark.parametrize("workers", [1, 2])
def test_named_pipeline_end_to_end_matches_the_builtin_sentencizer(on_path, tmp_path, workers) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=8)
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert main(base_args(metadata, vocab, tmp_path / "default", num_workers=workers)) == 0
    reference = {p.name: p.read_bytes() for p in (tmp_path / "default").glob("*.tfrecords")}
    for label, given in (("path", str(on_path["path"])), ("name", PACKAGE)):
        out = tmp_path / label
        assert main(base_args(metadata, vocab, out, num_workers=workers, spacy_model=given)) == 0
        assert {p.name: p.read_bytes() for p in out.glob("*.tfrecords")} == reference, label
        assert json.loads((out / "data_params.json").read_text())["spacy_model"] == given


def test_a_missing_name_is_one_line_with_the_install_command(tmp_path, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    assert main(base_args(metadata, vocab, tmp_path / "out", spacy_model="en_not_installed_xyz")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "python -m spacy download en_not_installed_xyz" in err[0]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.tfrecords"))


@pytest.mark.parametrize("name", ["spacy", "json", "numpy"])
def test_an_installed_package_that_is_no_pipeline_is_one_line_before_the_output_is_touched(tmp_path, capsys, name):
    """helper-15's case I: `--spacy_model spacy` (an installed package, not a pipeline) passed the
    start-up check, then spacy.load gave a 65-line traceback and left a work directory that made
    the corrected command refuse; `json` said 'not installed ... continue with --resume'."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    assert main(base_args(metadata, vocab, out, spacy_model=name)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--spacy_model {name} is an installed Python package but not a spaCy pipeline" in err[0]
    assert "--resume" not in err[0] and not (out / ".bert_data_work").exists()
    assert main(base_args(metadata, vocab, out)) == 0  # the corrected command


def test_a_pipeline_that_fails_to_load_is_one_line(monkeypatch) -> None:
    """Whatever a broken pipeline raises while spaCy loads it is one line naming it."""
    import spacy

    from bert_data.errors import SpacyModelError
    from bert_data.sentences import load_spacy_pipeline

    def broken(*args, **kwargs):
        raise TypeError("load() missing 1 required positional argument: 'name'\nmore")

    monkeypatch.setattr(spacy, "load", broken)
    with pytest.raises(SpacyModelError, match=r"^--spacy_model x_pipeline could not be loaded as a spaCy pipeline "
                                              r"\(TypeError: load\(\) missing 1 required positional argument: 'name'\)"):
        load_spacy_pipeline("x_pipeline")
