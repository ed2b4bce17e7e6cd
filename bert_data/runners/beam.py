"""The Apache Beam runner: the same per-group function, scheduled by Beam on a cluster.

``create_tfrecords --runner beam [flags] -- [Beam pipeline options]``. See ``docs/beam.md``.

Shape of the pipeline (the driver is the process that runs ``create_tfrecords``)::

    driver:  start-up checks (runners.startup: vocabulary, separator), metadata scan (local
             documents checked), preflight build_resources (spaCy, tokenizer)
             ─► {work}/groups.jsonl: one line per group = group index + its sources
    Beam:    ReadFromText(groups.jsonl) ─► Reshuffle
             ─► ProcessGroup: setup() builds the resources once per DoFn instance (spaCy and the
                tokenizer are never pickled); process() stages remote documents locally, runs
                runners.worker.write_group unchanged into a worker-local fragment, publishes it
                shard-major to {work}/fragments/g….frag and emits (shard, (group, offset, length,
                records)) per shard plus the group's counters
             ─► GroupByKey(shard) (+ a marker per shard, so empty shards are written too)
             ─► WriteShard: sort the entries by group, copy the byte ranges in that order through
                bert_data.storage into {work}/{name}-{i}.tfrecords.partial, rename to {name}-{i}.tfrecords
             ─► Finalize: summed counters + records per shard ─► runners.finish.finish, the finish
                sequence of every runner: no instance ─► nothing published (WriteShard writes no
                shard then), exit 2; else manifest ─► work dir removed ─► data_params.json, last

Each shard is the concatenation, in group order, of the group's runs for that shard (dupe
passes in fragment order), which is exactly what the local ShardAssembler appends: the shards
are byte-identical to a local run's for the same input, flags and seed (``tests/test_beam.py``
checks it). Only index entries go through the shuffle, never records.

Paths with a scheme (``gs://``, ``s3://``, ``hdfs://``, ...) are read and written through
:mod:`bert_data.storage` (Beam's ``FileSystems`` underneath): metadata files, documents (staged to a worker-local
temp dir, then read by the unchanged ``read_source``), the vocabulary (shipped to the workers
inside the DoFn), shards and the manifest. Plain paths use the local file system, which must
then be shared by every worker (the DirectRunner, or an NFS mount).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import tempfile
from collections import Counter
from typing import Dict, Sequence, Tuple

from .. import storage
from ..config import Config
from ..errors import BertDataError, ConfigError, MetadataError, NothingUsableError, OutputError
from ..format.containers import container_of, require_concatenation, require_tfrecord_shards
from ..format.manifest import MANIFEST_NAME, VocabIdentity
from ..group import build_resources
from ..metadata import decode_group
from ..output.outputs import Output, open_output
from ..output.fragment import copy_runs, publish_fragment
from ..output.local_dir import prepare_output_dir, run_inputs
from ..output.naming import PARTIAL_SUFFIX, WORK_DIR_NAME, fragment_name, shard_file_names
from ..output.object_store import prepare_remote_output_dir
from ..storage import is_remote, join as _join
from .finish import finish, quality_warnings
from .plan import input_stamps, plan_run, require_unchanged_documents
from .startup import input_fingerprints, startup_checks
from .worker import named_as_given, stage_sources, write_group
from ..output.scratch import scratch_dir

log = logging.getLogger("bert_data")

BEAM_REQUIREMENT = "apache-beam>=2.50"
GROUPS_FILE = "groups.jsonl"
_COPY_CHUNK = 8 << 20


class BeamPipelineError(BertDataError):
    """The Beam pipeline failed (the runner's own logs say where and why)."""

    exit_code = 1


def _require_beam():
    try:
        import apache_beam
    except ImportError:
        raise ConfigError(
            f"--runner beam needs Apache Beam: pip install 'bert_data[beam]' (or '{BEAM_REQUIREMENT}')"
        ) from None
    return apache_beam


# --- metadata (driver) ---------------------------------------------------------------------


_root = logging.getLogger()
_root_level = _root.level
_root.setLevel(logging.ERROR)  # Beam's import warns about optional GCP clients (apitools, bigquery) we never use
try:  # DoFns are module-level (pickled by reference); the module still imports without Beam
    import apache_beam as beam
    from apache_beam.metrics import Metrics
except ImportError:  # pragma: no cover - exercised only where Beam is not installed
    beam = None
finally:
    _root.setLevel(_root_level)

if beam is not None:

    class ProcessGroupFn(beam.DoFn):
        """One group: ``runners.worker.write_group`` unchanged into a worker-local fragment, then
        published shard-major to ``{work}/fragments/``; emits (shard, index entry) per shard
        and the group's counters. Re-running a group rewrites the same bytes (retries are safe)."""

        STATS = "stats"

        def __init__(self, config: Config, vocab_bytes: bytes, metadata_files: Sequence[str], work_dir: str) -> None:
            self._config = config
            self._vocab_bytes = vocab_bytes
            self._metadata_files = list(metadata_files)
            self._shared_work_dir = work_dir
            self._groups = Metrics.counter("bert_data", "groups")
            self._instances = Metrics.counter("bert_data", "instances")
            self._documents = Metrics.counter("bert_data", "documents_read")

        def setup(self) -> None:
            self._tmp = scratch_dir("beam")
            atexit.register(shutil.rmtree, self._tmp, True)  # teardown() is best effort in Beam
            vocab_path = os.path.join(self._tmp, "vocab.txt")
            with open(vocab_path, "wb") as handle:
                handle.write(self._vocab_bytes)
            self._work_dir = os.path.join(self._tmp, "work")
            os.makedirs(os.path.join(self._work_dir, "fragments"))
            self._resources = build_resources(self._config.replace(vocab_file=vocab_path))

        def process(self, line: str):
            group_index, sources = decode_group(line, self._metadata_files)
            stage_dir = tempfile.mkdtemp(prefix=f"g{group_index:09d}-", dir=self._tmp)
            try:
                local_sources, renames = stage_sources(sources, stage_dir)
                try:
                    result = write_group(group_index, local_sources, self._resources, self._work_dir)
                except BertDataError as exc:
                    raise named_as_given(exc, renames) from None
            finally:
                shutil.rmtree(stage_dir, ignore_errors=True)
            try:
                entries = []
                if result.segments:
                    shared = fragment_name(self._shared_work_dir, group_index, _join)
                    entries = publish_fragment(result.fragment_path, result.segments, shared)
            finally:
                os.unlink(result.fragment_path)
            for shard, offset, length, records in entries:
                yield shard, (group_index, offset, length, records)
            self._groups.inc()
            self._instances.inc(int(result.stats.get("instances", 0)))
            self._documents.inc(int(result.stats.get("documents.read", 0)))
            yield beam.pvalue.TaggedOutput(self.STATS, dict(result.stats))

        def teardown(self) -> None:
            shutil.rmtree(getattr(self, "_tmp", ""), ignore_errors=True)

    class WriteShardFn(beam.DoFn):
        """One shard: sort its index entries (group, offset, length, records) by group, copy
        the byte ranges from the groups' fragments in that order into
        ``{work}/{name}-{i}.tfrecords.partial``, rename it to ``{output_dir}/{name}-{i}.tfrecords``.
        Only index entries go through the shuffle (tens of bytes per group and shard); memory is
        those entries plus 8 chunks of 8 MiB of read-ahead (:func:`~bert_data.output.fragment.copy_runs`).
        A run that made no instance writes no shard: :func:`finalize` then publishes nothing."""

        def __init__(self, output_dir: str, work_dir: str, names: Sequence[str]) -> None:
            self._output_dir = output_dir
            self._work_dir = work_dir
            self._names = list(names)

        def process(self, element, stats):
            shard, entries = element
            if not stats.get("instances"):
                yield shard, 0, 0
                return
            index = sorted(entry for entry in entries if entry is not None)  # None: every shard's marker
            groups = [entry[0] for entry in index]
            if len(set(groups)) != len(groups):
                raise RuntimeError(f"shard {shard}: a group arrived twice")
            runs = [(fragment_name(self._work_dir, g, _join), offset, length) for g, offset, length, _ in index]
            final = _join(self._output_dir, self._names[shard])
            partial = _join(self._work_dir, self._names[shard] + PARTIAL_SUFFIX)
            out = storage.create(partial)
            try:
                written = copy_runs(runs, out)
                if not is_remote(partial) and hasattr(out, "fileno"):
                    out.flush()
                    os.fsync(out.fileno())
            finally:
                out.close()
            storage.rename(partial, final)
            yield shard, sum(entry[3] for entry in index), written


def _sum_stats(values) -> Dict[str, int]:
    total: Counter = Counter()
    for value in values:
        total.update(value)
    return dict(total)


class PublishedShards:
    """Beam's view of the run's output for :func:`bert_data.runners.finish.finish`: the shards were
    published by the WriteShard step (in parallel, one per shard); the rest (discard, commit) is
    the output's own."""

    def __init__(self, output: Output, per_shard: Dict[str, int]) -> None:
        self.output = output
        self.per_shard = per_shard

    def publish(self) -> Dict[str, int]:
        return self.per_shard

    def commit(self, manifest: Dict) -> Dict:
        return self.output.commit(manifest)

    def discard(self) -> None:
        """Nothing of the run stays: the shards the WriteShard step published (none when nothing
        usable was made) and the work directory."""
        storage.delete([_join(self.output.output_dir, name) for name in self.per_shard])
        self.output.discard()


def finalize(shard_counts, stats, config: Config, driver: Dict) -> None:
    """Last step, inside the pipeline (so a job whose driver went away still completes): the
    run's one finish sequence (:func:`bert_data.runners.finish.finish`) over the shards the
    pipeline wrote: a local document changed since the run began -> the shards discarded, one
    line, exit 2 (records of neither version); nothing usable -> nothing published, exit 2; else
    the manifest from the summed counters, ``data_params.json`` written (the commit point), then
    the work dir removed. ``driver``: what :func:`run_beam` knew (see :func:`build_pipeline`)."""
    names = shard_file_names(config.name, config.num_output_files, container_of(config).suffix)
    records = {shard: count for shard, count, _bytes in shard_counts}
    if sorted(records) != list(range(config.num_output_files)):
        raise RuntimeError(f"the pipeline wrote shards {sorted(records)}, expected all {config.num_output_files}")
    per_shard = {names[i]: records[i] for i in range(config.num_output_files)}
    output = PublishedShards(open_output(config), per_shard)
    try:
        require_unchanged_documents(config, driver["spool"], driver["stamps"])
    except MetadataError:
        output.discard()  # (the WriteShard step published the shards: none may stay as if it were data)
        raise
    finish(output, config=config, stats=Counter(stats), summary=driver["summary"], vocab=driver["vocab"],
           inputs=driver["inputs"])


# --- driver ----------------------------------------------------------------------------------


def pipeline_options(config: Config, pipeline_args: Sequence[str]):
    """Beam options from the arguments after ``--``. Without ``--runner`` they default to the
    DirectRunner in multi-processing mode with ``--num_workers`` processes."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, WorkerOptions

    _check_known_options(pipeline_args)
    options = PipelineOptions(list(pipeline_args))
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = "DirectRunner"
    _check_runner(standard.runner)
    if is_direct(options):
        direct = options.view_as(DirectOptions)
        if not any(a.startswith("--direct_running_mode") for a in pipeline_args):
            direct.direct_running_mode = "multi_processing"
        if not any(a.startswith("--direct_num_workers") for a in pipeline_args):
            direct.direct_num_workers = config.num_workers
        if log.getEffectiveLevel() >= logging.INFO:  # the local workers' INFO chatter, unless asked for
            logging.getLogger("apache_beam").setLevel(logging.WARNING)
            if not any(a.startswith("--default_sdk_harness_log_level") for a in pipeline_args):
                options.view_as(WorkerOptions).default_sdk_harness_log_level = "WARNING"
    return options


def _check_known_options(pipeline_args: Sequence[str]) -> None:
    """A pipeline option no Beam options class defines is one line (Beam itself drops it with a
    log warning and runs on: ``--num_worker 64`` would silently run with the default)."""
    import difflib

    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # the options Beam knows, as PipelineOptions.get_all_options builds them
    _, unknown = parser.parse_known_args(list(pipeline_args))
    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
    if flags:
        known = [o for action in parser._actions for o in action.option_strings]
        close = difflib.get_close_matches(flags[0], known, n=1, cutoff=0.7)
        hint = f"; did you mean {close[0]}?" if close else "; see the Beam runner's pipeline options (docs/beam.md)"
        raise ConfigError(f"unknown Beam pipeline option {flags[0]} (after --){hint}")
    if unknown:
        raise ConfigError(f"unexpected Beam pipeline argument {unknown[0]!r} (after --): options are --name=value")


def _check_runner(name: str) -> None:
    """An unknown Beam runner is one line, before the output directory is touched."""
    from apache_beam.runners.runner import create_runner

    try:
        create_runner(name)
    except (ValueError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"Beam option --runner {name}: {first}") from None


def _error_from_runner(exc: Exception) -> BertDataError:
    """A worker's BertDataError comes back from most runners as text inside the runner's own
    exception: raise it again as itself (same one-line message, same exit code)."""
    from .. import errors

    text = str(exc)
    found = None
    for match in re.finditer(r"(?:bert_data\.errors\.)?\b([A-Z]\w*Error): ([^\n]+)", text):
        cls = getattr(errors, match.group(1), None)
        if isinstance(cls, type) and issubclass(cls, BertDataError):
            found = cls(re.sub(r"\s*\[while running '[^']*'\]$", "", match.group(2)).strip())
    if found is not None:
        return found
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return BeamPipelineError(f"the Beam pipeline failed: {lines[-1] if lines else type(exc).__name__}")


def is_direct(options) -> bool:
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    return runner in ("DirectRunner", "direct", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def build_pipeline(pipeline, config: Config, vocab_bytes: bytes, groups_path: str, work_dir: str, driver: Dict):
    """``driver``: the driver's part of the manifest (the metadata summary, the vocabulary's
    identity, the inputs' fingerprints) and the local documents' stamps taken as the run began
    (with the spool that lists them: the work directory's copy, which every worker reaches) for
    :func:`finalize`."""
    import apache_beam as beam

    n = config.num_output_files
    names = shard_file_names(config.name, n, container_of(config).suffix)
    processed = (
        pipeline
        | "ReadGroups" >> beam.io.ReadFromText(groups_path)
        | "Spread" >> beam.Reshuffle()
        | "ProcessGroup"
        >> beam.ParDo(ProcessGroupFn(config, vocab_bytes, config.metadata_files, work_dir)).with_outputs(
            ProcessGroupFn.STATS, main="chunks"
        )
    )
    stats = processed[ProcessGroupFn.STATS] | "SumStats" >> beam.CombineGlobally(_sum_stats)
    markers = pipeline | "EveryShard" >> beam.Create([(shard, None) for shard in range(n)])
    written = (
        (processed.chunks, markers)
        | "Merge" >> beam.Flatten()
        | "ByShard" >> beam.GroupByKey()
        | "WriteShard" >> beam.ParDo(WriteShardFn(config.output_dir, work_dir, names), beam.pvalue.AsSingleton(stats))
    )
    (
        written
        | "ShardCounts" >> beam.combiners.ToList()
        | "Finalize"
        >> beam.Map(finalize, beam.pvalue.AsSingleton(stats), config, driver)
    )


def run_beam(config: Config, pipeline_args: Sequence[str] = ()) -> Dict:
    """Run the whole job as a Beam pipeline; returns the manifest that was written."""
    beam = _require_beam()
    if getattr(config, "resume", False):
        raise ConfigError("--resume is for the local runner; re-run a Beam job instead (its output is deterministic)")
    require_concatenation(container_of(config))  # WriteShard concatenates group runs
    require_tfrecord_shards(container_of(config), "--runner beam")  # and publishes them as they are
    scratch = scratch_dir("driver")
    try:
        vocab_bytes, local_vocab = _fetch_vocab(config.vocab_file, scratch)
        vocab = startup_checks(config, local_vocab).vocab
        spool_path = os.path.join(scratch, GROUPS_FILE)
        config, summary = plan_run(config, spool_path)  # the metadata is read once, here (and the NSP pool chosen)
        options = pipeline_options(config, pipeline_args)  # fail on bad options before touching the output
        # Preflight: the resources every worker will build (tokenizer, spaCy pipeline) build here,
        # so a missing spaCy model or a bad setting fails now, not after a cluster has started.
        build_resources(config.replace(vocab_file=local_vocab))
        work_dir = _prepare_output(config)
        groups_path = _join(work_dir, GROUPS_FILE)
        _copy_file(spool_path, groups_path)
        log.info(
            "beam: %d groups of up to %d entries and %d bytes, %d shards", summary.groups, config.split_num,
            config.group_bytes, config.num_output_files,
        )
        pipeline = beam.Pipeline(options=options)
        # The vocabulary as the user named it (a URL stays a URL), hashed from the bytes shipped to workers.
        identity = VocabIdentity.of(config.vocab_file, vocab_bytes, len(vocab))
        inputs = input_fingerprints(config, summary, local_vocab)
        # The local documents' size and time now (URL ones are not stat'ed), checked again before
        # the commit: a document edited while the pipeline read it makes records of neither version.
        stamps = input_stamps(config, spool_path)
        build_pipeline(pipeline, config, vocab_bytes, groups_path, work_dir,
                       {"summary": summary, "vocab": identity, "inputs": inputs, "stamps": stamps, "spool": groups_path})
        try:
            _run_pipeline(pipeline, options)
        except NothingUsableError:
            open_output(config).discard()  # nothing to redo from: the corrected rerun starts clean
            raise
        manifest = json.loads(storage.read_bytes(_join(config.output_dir, MANIFEST_NAME)))
        for warning in quality_warnings(Counter(), manifest):
            log.warning(warning)
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _fetch_vocab(vocab_file: str, scratch: str) -> Tuple[bytes, str]:
    """The vocabulary's bytes (shipped to every worker) and a local path to it."""
    try:
        vocab_bytes = storage.read_bytes(vocab_file)
    except Exception as exc:
        raise ConfigError(f"--vocab_file {vocab_file} cannot be read ({exc})") from None
    if not is_remote(vocab_file):
        return vocab_bytes, vocab_file
    local_vocab = os.path.join(scratch, "vocab.txt")
    with open(local_vocab, "wb") as handle:
        handle.write(vocab_bytes)
    return vocab_bytes, local_vocab


def _prepare_output(config: Config) -> str:
    """The work directory of a fresh run (a Beam run is never resumed: it is redone)."""
    if is_remote(config.output_dir):
        return prepare_remote_output_dir(
            config.output_dir, config.name, config.overwrite, container_of(config).suffix, run_inputs(config)
        )
    if (os.path.isdir(os.path.join(config.output_dir, WORK_DIR_NAME)) and not config.overwrite
            and not os.path.exists(os.path.join(config.output_dir, MANIFEST_NAME))):  # (with it: finished, commit cut short)
        raise OutputError(
            f"--output_dir {config.output_dir} holds an unfinished run; pass --overwrite to start over "
            f"(a Beam run is redone from scratch: its output is deterministic)"
        )
    return prepare_output_dir(config.output_dir, config.name, config.overwrite, container_of(config).suffix, run_inputs(config))


def _copy_file(local_path: str, destination: str) -> None:
    with open(local_path, "rb") as src, storage.create(destination) as dst:
        shutil.copyfileobj(src, dst, _COPY_CHUNK)


def _run_pipeline(pipeline, options) -> None:
    # The DirectRunner echoes its local workers' warnings (already on stderr) once more.
    echo = logging.getLogger("apache_beam.runners.portability.local_job_service")
    echo_level = echo.level
    if is_direct(options) and log.getEffectiveLevel() >= logging.INFO:
        echo.setLevel(logging.ERROR)
    try:
        result = pipeline.run()
        state = result.wait_until_finish()
    except (KeyboardInterrupt, BertDataError):
        raise
    except Exception as exc:
        raise _error_from_runner(exc) from exc
    finally:
        echo.setLevel(echo_level)
    if state is not None and str(state).split(".")[-1] not in ("DONE",):
        raise BeamPipelineError(f"the Beam pipeline ended in state {state}")
