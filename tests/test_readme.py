"""The README stays true: every flag is documented, and CI runs the README's test command."""

from __future__ import annotations

import re

from bert_data.tools.create import build_parser

from conftest import REPO


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_every_create_tfrecords_flag_is_in_the_readme() -> None:
    readme = _readme()
    flags = {opt for action in build_parser()._actions for opt in action.option_strings if opt.startswith("--")}
    flags -= {"--help"}
    missing = sorted(f for f in flags if not f.startswith("--no-") and f"`{f}" not in readme)
    assert not missing, f"flags missing from README.md: {missing}"


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```bash\n(python3 -m venv[^\n]*)\n```", _readme())
    assert len(commands) == 2, commands  # exactly two set-up commands: run the sample, run the tests
    run_sample, run_tests = commands
    assert "create_tfrecords" in run_sample and "pytest" in run_tests
    assert run_tests in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_quick_start_config_points_at_shipped_files() -> None:
    import yaml

    config = yaml.safe_load((REPO / "configs" / "sample.yaml").read_text())
    assert (REPO / config["vocab_file"]).is_file()
    for metadata in config["metadata_files"]:
        assert (REPO / metadata).is_file()


def test_every_config_the_readme_names_resolves(monkeypatch) -> None:
    """A preset named in the README (`--config NAME`, or a path from the repository root) loads."""
    import os

    from bert_data.presets import build_config, resolve_config

    named = set(re.findall(r"--config ([\w./-]+)", _readme())) - {"Y"}  # Y: the flag table's placeholder
    assert {"configs/sample.yaml", "bert_base_msl128", "bert_base_msl512"} <= named
    monkeypatch.chdir(REPO)
    for given in sorted(named):
        assert os.path.isfile(resolve_config(given)), given
        build_config({"metadata_files": ["m"], "vocab_file": "v"}, config_file=given)
