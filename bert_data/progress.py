"""Progress of a ``create_tfrecords`` run: a tqdm bar on stderr, fed by :func:`bert_data.runners.job.run`.

``run(config, on_start=progress.start, on_group=progress.update)``: ``start`` receives the
:class:`~bert_data.metadata.MetadataSummary` (its ``total_bytes``, the input files' size, is the
bar's total) and a live counter of input bytes whose work is done, that the workers advance as
each dupe pass of a unit is written (:class:`bert_data.group.WorkDone`: a ``1/dupe_factor``
share of the unit's bytes a pass, so the bar moves inside a long group too and reaches 100% when
the instances are written, not when the input has been read); ``update`` gets each finished
:class:`~bert_data.runners.worker.GroupResult` in group order (documents, instances). The bar shows input
bytes done of total with rate and ETA, plus documents read and instances written. It is drawn
only on a terminal and never on stdout (the final summary line owns stdout); otherwise every
method is a no-op, so callers never need to check.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, List, Mapping, Optional, TextIO

from .output.naming import PARQUET_SUFFIX, shard_glob

__all__ = ["RunProgress", "format_postfix", "progress_enabled", "run_summary"]

REFRESH_SECONDS = 0.5  # how often the bar follows the live byte counter


def progress_enabled(stream: Optional[TextIO], quiet: bool = False) -> bool:
    """A bar only for a terminal, and never with ``--quiet``."""
    if quiet or stream is None:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def format_postfix(documents_read: int, groups_done: int, instances: int) -> str:
    """The text after the bar: ``docs=1,234, instances=5,230, groups=3/10``."""
    return f"docs={documents_read:,}, instances={instances:,}, groups={groups_done:,}"


class RunProgress:
    """Input bytes whose instances are written / total (rate, ETA), documents, instances; silent
    unless ``enabled``."""

    def __init__(
        self,
        stream: Optional[TextIO] = None,
        quiet: bool = False,
        enabled: Optional[bool] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = progress_enabled(self.stream, quiet) if enabled is None else enabled
        self.clock = clock
        self.total = 0
        self.groups = 0
        self.groups_done = 0
        self.documents_read = 0
        self.instances = 0
        self.bytes_done = 0  # input bytes of finished groups
        self.last_group = -1  # the highest group index a result came for
        self._live: Any = None
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, summary: Any, live: Any = None) -> None:
        """A new bar (a train/validation job starts one per half)."""
        self.close()
        self._stop.clear()
        self.groups_done = self.documents_read = self.instances = self.bytes_done = 0
        self.last_group = -1
        self.total = int(summary.total_bytes)
        self.groups = int(getattr(summary, "groups", 0))
        self._live = live
        if not self.enabled:
            return
        from tqdm import tqdm

        self._bar = tqdm(
            total=self.total or None, desc="input", unit="B", unit_scale=True, unit_divisor=1024,
            file=self.stream, dynamic_ncols=True, mininterval=REFRESH_SECONDS, smoothing=0.1, leave=True,
        )
        self._bar.set_postfix_str(self.postfix(), refresh=False)
        if live is not None:
            self._thread = threading.Thread(target=self._follow, name="bert_data-progress", daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self._advance()

    def _advance(self) -> None:
        bar = self._bar
        if bar is None:
            return
        position = max(self.bytes_done, int(self._live.value) if self._live is not None else 0)
        if self.total:
            position = min(position, self.total)
        if position > bar.n:
            bar.update(position - bar.n)
        elif self.publishing:
            bar.refresh()  # (the clock keeps moving while the shards are published: no frozen line)

    @property
    def publishing(self) -> bool:
        """Every group is in: the run is publishing its shards (renames; for Parquet, MDS and HDF5
        the rewrite of every shard, which can take minutes on a large run). Results come in
        group order, so the last planned group's result says so, also when a resumed run made
        only the groups after its journal's."""
        return bool(self.groups) and self.last_group >= self.groups - 1

    def update(self, result: Any) -> None:
        stats = result.stats
        self.documents_read += int(stats.get("documents.read", 0))
        self.instances += int(stats.get("instances", 0))
        self.bytes_done += int(stats.get("input_bytes", 0))
        self.groups_done += 1
        self.last_group = max(self.last_group, int(getattr(result, "group_index", -1)))
        if self._bar is None:
            return
        self._bar.set_postfix_str(self.postfix(), refresh=False)
        self._advance()

    def _counts(self) -> str:
        text = format_postfix(self.documents_read, self.groups_done, self.instances)
        return f"{text}/{self.groups:,}" if self.groups else text

    def postfix(self) -> str:
        return self._counts() + (", publishing the shards" if self.publishing else "")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            self._advance()
            self._bar.set_postfix_str(self._counts(), refresh=False)  # (the finished line: no "publishing")
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "RunProgress":
        """While the bar is shown, log records go through ``tqdm.write`` so they do not tear it."""
        self._redirect = None
        if self.enabled:
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if getattr(self, "_redirect", None) is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None


def _human_bytes(count: float) -> str:
    """1,536 -> '1.5 KiB': the unit a person reads a disk figure in."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover - the loop returns


def _disk_bytes(directory: str, names: Any) -> Optional[int]:
    """Bytes of the published shards, or None where they cannot be stat'ed (a URL)."""
    import os

    if "://" in directory:
        return None
    try:
        return sum(os.path.getsize(os.path.join(directory, name)) for name in names)
    except OSError:
        return None


def run_summary(manifests: Mapping[str, Any], elapsed: float) -> str:
    """What a finished run tells its user on stdout, built from the manifests alone (so it says
    exactly what ``data_params.json`` records): per output (``""``, or ``train``/``validation``)
    instances, documents, skips, shards (or BERT's named output files), where and how long, then
    tokens, disk, the NSP balance and the manifest's path, then a ``warning:`` line for each way
    the data is not what the settings make expected (:func:`bert_data.expectations.data_warnings`:
    the balance, too few instances, no negatives, cut documents); last, the commands to check the
    records and to train on them. ``create_tfrecords`` and ``create_pretraining_data`` both end so."""
    lines: List[str] = []
    for split, manifest in manifests.items():
        lines.extend(_output_summary(manifest, elapsed, split))
    first = next(iter(manifests.values()), None)
    if first is not None:
        if _default_sentencizer(first):
            lines.append(SENTENCIZER_NOTICE)
        lines.append(_next_steps(manifests.get("train", first)))
    return "\n".join(lines)


# The one place our default differs from the Model Zoo's without a flag saying so: said after every such run.
SENTENCIZER_NOTICE = (
    "sentences: spaCy's rule-based sentencizer (nothing to download); the Model Zoo's default is the "
    "en_core_web_sm pipeline: pass --spacy_model en_core_web_sm to segment as it does"
)


def _default_sentencizer(manifest: Any) -> bool:
    return (not manifest.get("spacy_model") and not manifest.get("single_sentence_per_line")
            and manifest.get("input_format", "text") != "bert")


def _output_summary(manifest: Any, elapsed: float, split: str) -> List[str]:
    from .errors import plural
    from .expectations import data_warnings, nsp_fact

    documents = manifest["documents"]
    skipped = documents["skipped"]
    shards = manifest.get("instances_per_shard", {})
    directory = str(manifest["output_dir"])
    named = manifest.get("output_files")  # BERT's --output_file list (create_pretraining_data)
    where = (f"{', '.join(named)} (manifest {manifest.get('manifest_path') or _named_manifest(named[0])})" if named
             else f"{plural(len(shards), 'shard')} in {directory}")
    head = (
        ("already complete: " if manifest.get("already_complete") else "")
        + (f"{split}: " if split else "")
        + f"wrote {plural(manifest['n_examples'], 'packed row' if 'packing_summary' in manifest else 'instance')} from {plural(manifest['n_docs'], 'document')} "
        f"({documents['read']} read, {sum(skipped.values())} skipped"
        + (f": {', '.join(f'{k} {v}' for k, v in skipped.items())}" if skipped else "")
        + f") into {where} in {elapsed:.1f}s"
    )
    facts = [f"{manifest.get('tokens', 0):,} tokens ({manifest.get('unk_rate', 0.0):.2%} [UNK])"]
    disk = _named_disk_bytes(named) if named else _disk_bytes(directory, shards)
    if disk is not None:
        facts.append(f"{_human_bytes(disk)} on disk")
    input_bytes = manifest.get("input_bytes", 0)
    rate = f" at {input_bytes / elapsed / 1e6:.2f} MB/s" if elapsed > 0 and not split else ""  # a split run times both
    facts.append(f"{_human_bytes(input_bytes)} of input read{rate}")
    nsp = nsp_fact(manifest)
    if nsp:
        facts.append(nsp)
    counts = "" if named else f"; settings and counts in {_join(directory, 'data_params.json')}"
    lines = [head, "  " + ", ".join(facts) + counts]
    packing = manifest.get("packing_summary")
    if isinstance(packing, dict):  # --packing: n_examples counts rows
        lines.append(
            f"  packed: {packing['instances']:,} instances in {packing['rows']:,} rows, "
            f"{packing['average_sequences_per_row']:.4f} per row (bound {packing['speedup_bound']:.4f} = 1 / mean fill); "
            f"padding {packing['padding_before']:.2%} -> {packing['padding_after']:.2%}; divide the batch size (or "
            f"steps) by {packing['average_sequences_per_row']:.3f} to see as many instances per step (docs/packing.md)"
        )
    return lines + [f"warning: {warning}" for warning in data_warnings(manifest)]


def _named_manifest(output_file: str) -> str:
    from .output.naming import named_outputs_manifest_path

    return named_outputs_manifest_path(output_file)


def _named_disk_bytes(paths: Any) -> Optional[int]:
    import os

    try:
        return sum(os.path.getsize(path) for path in paths)
    except OSError:
        return None


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def _next_steps(manifest: Any) -> str:
    """The next commands: check the records, then feed them to training."""
    directory = str(manifest["output_dir"])
    pattern = _join(directory, shard_glob(str(manifest.get("name", "examples"))))
    check = f"`inspect_tfrecords {directory} --stats`"
    named = manifest.get("output_files")
    if named:  # BERT's named output files: run_pretraining.py takes them comma-separated
        pattern = ",".join(named)
        check = f"`inspect_tfrecords {' '.join(named)} --stats`"
    if "://" in directory:  # inspect reads local paths
        check = "`inspect_tfrecords DIR --stats` on a local copy DIR of data_params.json and some or all shards"
    if manifest.get("record_schema") == "unmasked_tokens":
        return (f"next: train with the Model Zoo's BertMlmOnlyTfRecordsDynamicMaskProcessor (data_dir: {directory}); "
                f"these token-string records are not read by inspect_tfrecords or bert_data's reader")
    output_format = manifest.get("output_format", "tfrecord")
    if output_format == "hdf5":  # NVIDIA's MLPerf packed samples: NVIDIA's own trainer reads them
        return (f"next: check with {check}; train with NVIDIA's MLPerf BERT run_pretraining.py (--input_dir {directory} "
                f"--packed_samples; it reads the files whose names contain 'part_': --name part_) (docs/packing.md)")
    if output_format != "tfrecord":  # Parquet / MDS: their own readers (docs/recipes.md, "Train in PyTorch")
        shards = _join(directory, shard_glob(str(manifest.get("name", "examples")), PARQUET_SUFFIX))
        reader = {"parquet": f"datasets.load_dataset('parquet', data_files='{shards}')",
                  "mds": f"streaming.StreamingDataset(local='{directory}')"}.get(output_format, output_format)
        return (f"next: check with {check}; train with `{reader}` and "
                f"`collate_fn=bert_data.reader.collate.PretrainingCollator()` (docs/recipes.md)")
    if str(manifest.get("record_schema", "")).endswith("_packed"):
        k = manifest.get("max_sequences_per_pack", 3)
        train = (f"bert_data.pretraining_dataset('{directory}', ...) with bert_data.reader.packed_attention_mask, or "
                 f"Habana's MLPerf run_pretraining.py --enable_packed_data_mode (max_sequences_per_pack {k}; Habana's "
                 f"model assumes 3)")
    elif manifest.get("record_schema", "nsp") in ("nsp", "sop"):
        train = (f"run_pretraining.py --input_file='{pattern}' --max_seq_length={manifest['max_seq_length']} "
                 f"--max_predictions_per_seq={manifest['max_predictions_per_seq']}")
    else:
        train = f"bert_data.pretraining_dataset('{directory}', ...) or the Model Zoo's MLM-only BERT input"
    return f"next: check with {check}; train with `{train}`"
