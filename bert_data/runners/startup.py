"""Start-up checks: everything that can be known to fail is checked once, in the parent process,
before any output is touched or any worker starts. Every runner calls :func:`startup_checks`.

What is checked here (each failure is one line naming the flag and the fix):

* the vocabulary: readable, well formed, the five special tokens present (one loader, one rule:
  :func:`bert_data.tokenization.load_vocab`, the same the workers, the reader and inspect use);
  a vocabulary that looks cased with ``--do_lower_case`` (or the reverse) is a warning;
* the MLM-only document separator: a token of that vocabulary
  (:func:`bert_data.group.document_separator_id`, which the workers call too);
* ``--spacy_model``: installed (a package or a pipeline directory), found without loading spaCy
  (a worker would otherwise die with it N times);
* ``--output_dir``: writable (the nearest existing directory on its path accepts a file; a URL
  accepts a probe object, so a missing fsspec package or credentials fail before any work).

After the metadata scan, :func:`disk_space_warning` compares the free space there with an
estimate of the output (a warning: it is an estimate).

The metadata scan (every listed document exists and is readable) is the runner's next step.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Dict

from ..config import Config
from ..errors import ConfigError
from ..format.containers import container_for
from ..group import document_separator_id
from ..token_cache import check_cache
from ..output.object_store import check_remote_writable
from ..identity import package_version
from ..sentences import segmenter_identity

log = logging.getLogger("bert_data")


@dataclass(frozen=True)
class StartupInfo:
    """What the checks learned that the run needs again: the vocabulary, loaded once."""

    vocab: Dict[str, int]


def startup_checks(config: Config, local_vocab_file: str = "") -> StartupInfo:
    """Run every start-up check; ``local_vocab_file`` is a local copy when ``--vocab_file`` is a URL."""
    from ..tokenization import case_mismatch_warning, load_vocab

    if "://" in config.vocab_file and not local_vocab_file:
        raise ConfigError(
            f"--vocab_file {config.vocab_file}: a URL vocabulary is read by --runner beam only; copy it to a local "
            f"path (every Dask worker reads it at that path)"
        )
    vocab = load_vocab(local_vocab_file or config.vocab_file)
    warning = case_mismatch_warning(vocab, config.do_lower_case)
    if warning:
        log.warning(warning)
    if config.mlm_only and config.allow_cross_document_examples:
        document_separator_id(config, vocab)
    problem = container_for(config.output_format).vocabulary_problem(vocab) if config.output_format != "tfrecord" else ""
    if problem:  # known now, not only when the shards are rewritten at the end of the run
        raise ConfigError(f"--output_format {config.output_format}: {problem}")
    if config.spacy_model and not config.lines_are_sentences:
        check_spacy_model(config.spacy_model)
    if config.runner == "dask" and config.scheduler_file:
        scheduler_address_in(config.scheduler_file)
    if config.from_tokens:  # the cache's vocabulary, casing, segmenter, plan flags and files (one line each)
        from ..format.manifest import file_sha256

        check_cache(config, file_sha256(config.vocab_file), segmenter_identity(config))
    if "://" not in config.output_dir:
        check_writable(config.output_dir)
    else:
        if config.output_dir.startswith("memory://") and (config.num_workers > 1 or config.runner != "local"):
            raise ConfigError(
                f"--output_dir {config.output_dir}: memory:// lives in one process, and the workers are other "
                f"processes; pass --num_workers 1 (local runner), or write to a shared URL or path"
            )
        check_remote_writable(config.output_dir)
    return StartupInfo(vocab=vocab)


def check_spacy_model(name: str) -> None:
    """A pipeline directory (with its config.cfg) or an installed package of that name."""
    import importlib.util

    from ..errors import SpacyModelError
    from ..sentences import install_hint

    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.cfg")):
            raise SpacyModelError(f"--spacy_model {name} is a directory without config.cfg: not a saved spaCy pipeline")
        return
    found = None
    if name.isidentifier():
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
    if found is None:
        raise SpacyModelError(
            f"--spacy_model {name} is not installed; install it with `{install_hint(name)}` "
            f"(or omit --spacy_model to use the built-in rule-based sentencizer)"
        )
    if not _is_pipeline_package(found):  # (an installed package of another kind: `spacy`, `json`, ...)
        raise SpacyModelError(
            f"--spacy_model {name} is an installed Python package but not a spaCy pipeline (no meta.json or "
            f"config.cfg in it); give a pipeline's name (e.g. en_core_web_sm) or a saved pipeline's directory"
        )


def _is_pipeline_package(spec) -> bool:
    """An installed spaCy pipeline package: a package whose directory holds its meta.json, or its
    data directory's config.cfg one level down (``en_core_web_sm/en_core_web_sm-3.8.0/``)."""
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        if os.path.isfile(os.path.join(root, "meta.json")):
            return True
        try:
            subdirs = [e.path for e in os.scandir(root) if e.is_dir()]
        except OSError:
            continue
        if any(os.path.isfile(os.path.join(d, "config.cfg")) for d in subdirs):
            return True
    return False


MAX_SCHEDULER_FILE_BYTES = 1 << 20  # Dask writes a few hundred bytes


def scheduler_address_in(path: str) -> str:
    """The scheduler's address in a Dask scheduler file (``dask scheduler --scheduler-file``,
    dask-jobqueue): a readable regular file holding a JSON object with an ``address``. Anything
    else is one line now (Dask itself would wait for the file, or fail in its own thread)."""
    import json
    import stat

    flag = f"--scheduler_file {path}"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{flag} does not exist; start the scheduler first (dask scheduler --scheduler-file "
                          f"{path}), or give --scheduler_address") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{flag} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCHEDULER_FILE_BYTES:
        raise ConfigError(f"{flag} is not a scheduler file (not a regular file of a few hundred bytes)")
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{flag} cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ConfigError(f"{flag} is not a scheduler file (not JSON); point it at the file the scheduler "
                          f"wrote") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise ConfigError(f"{flag} is not a scheduler file (no scheduler \"address\" in it); point it at the file "
                          f"the scheduler wrote")
    return address


def check_writable(output_dir: str) -> None:
    """The nearest existing directory on ``output_dir``'s path accepts a new file."""
    from ..errors import OutputError

    probe = os.path.abspath(output_dir)
    while not os.path.exists(probe):
        if os.path.islink(probe):  # a link to nothing: making the directory would say "File exists"
            raise OutputError(
                f"--output_dir {output_dir}: {probe} is a symbolic link to {os.readlink(probe)}, which does not exist; "
                f"create that directory, or remove the link"
            )
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.exists(probe) and not os.path.isdir(probe):
        raise OutputError(f"--output_dir {output_dir}: {probe} exists and is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be written ({probe}: {exc.strerror or exc})") from None


# Output bytes per input byte and dupe pass, measured on ../shared/corpus at MSL 128 (199 MB of
# records from 9.9 MB of text at dupe 10); gzip shards are about 0.3 of that.
OUTPUT_PER_INPUT_BYTE = 2.0


def disk_space_warning(config: Config, input_bytes: int) -> str:
    """A warning when the estimated output (and its fragments, written once more on the way)
    may not fit in the free space of ``--output_dir``'s file system, else "". A format that is
    rewritten from assembled shards at publish (MDS, HDF5: :mod:`bert_data.output.rewrite`) holds
    every assembled shard and every file rewritten from it at its peak, the end of the publish (the
    assembled shards stay until the commit, so that a run killed meanwhile rewrites again);
    Parquet's are finished in place. gzip is advised only where the format takes it."""
    if "://" in config.output_dir or not input_bytes:
        return ""
    probe = os.path.abspath(config.output_dir)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        stats = os.statvfs(probe)
    except OSError:
        return ""
    free = stats.f_bavail * stats.f_frsize
    ratio = OUTPUT_PER_INPUT_BYTE * (0.3 if config.compression == "gzip" else 1.0)
    estimate = int(input_bytes * config.dupe_factor * ratio)
    from ..format.containers import container_of

    other_format = config.output_format != "tfrecord"  # (no gzip for them)
    rewritten = other_format and not hasattr(container_of(config), "finish_in_place")  # (Parquet: no copy)
    if rewritten:  # (the assembled shards and their files, each counted at the TFRecords' size: MDS's are about
        estimate *= 2  # that, HDF5's runs about half of it and its files at most ~1.5x its runs)
    if estimate <= free:
        return ""
    advice = "free space or choose another --output_dir" if other_format else "free space, or use --compression gzip"
    peak = f", --output_format {config.output_format} rewriting its assembled shards at the end" if rewritten else ""
    return (
        f"the output may need about {_amount(estimate)} ({_amount(input_bytes)} of input x "
        f"--dupe_factor {config.dupe_factor}{peak}) but only {_amount(free)} are free under {probe}; {advice} "
        f"(if it runs out, free space and continue with --resume)"
    )


def _amount(count: int) -> str:
    """Bytes as a disk figure, in decimal units as ``df -H`` gives them: '1.3 GB', '37 MB',
    '0.4 MB' (a small output on a small disk said "about 0.0 GB ... but only 0.0 GB are free")."""
    if count >= 1e9:
        return f"{count / 1e9:.1f} GB"
    return f"{count / 1e6:.0f} MB" if count >= 1e7 else f"{count / 1e6:.1f} MB"


def input_fingerprints(config: Config, summary, vocab_path: str) -> Dict[str, str]:
    """Everything besides the settings that determines the output bytes: a resumed run must see
    the same, or it would mix two corpora (or two vocabularies) in one output."""
    from .. import __version__
    from ..format.manifest import file_sha256

    version = package_version
    segmenter = segmenter_identity(config)
    return {
        "metadata_sha256": summary.metadata_sha256,
        # every listed document's size and modification time (identity.DocumentsDigest), and the
        # newest of them: an edit between a kill and --resume is refused, naming the document
        "documents_sha256": summary.documents_sha256,
        "newest_document": summary.newest_document,
        "vocab_sha256": file_sha256(vocab_path),
        "segmenter": segmenter,
        "tokenizers": version("tokenizers"),
        "bert_data_version": __version__,
        **runs_encoding(config),
    }


def runs_encoding(config: Config) -> Dict[str, str]:
    """What the runs of a rewriting format's partial shards hold (``container.runs_encoding``),
    as a fingerprint: a run interrupted by a bert_data whose workers encoded them otherwise (MDS
    and HDF5 wrote ``tf.train.Example`` records until 2026-11-27) is refused by --resume, never
    published as samples. TFRecord shards hold records (no key: older journals stay resumable)."""
    from ..format.containers import container_of

    encoding = container_of(config).runs_encoding
    return {"runs_encoding": encoding} if encoding else {}


# File descriptors the coordinator needs besides one per shard: per worker (pipes) and a margin.
FDS_PER_WORKER, FDS_MARGIN = 4, 64


def ensure_open_files(config: Config) -> None:
    """The local runner keeps every partial shard open: make sure it may open that many files,
    raising the soft limit (up to the hard one) when needed, instead of failing mid-run."""
    import resource

    need = config.num_output_files + FDS_PER_WORKER * config.num_workers + FDS_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < need:
        raise ConfigError(
            f"--num_output_files {config.num_output_files} needs about {need} open files, but this process may "
            f"open only {target} (ulimit -n, hard limit {hard}); raise the limit (ulimit -n {need}) or write fewer shards"
        )
