"""bert_data: streaming, parallel, deterministic BERT pretraining-data preparation.

The names users import are available here and resolved lazily, so ``import bert_data`` stays
light (no TensorFlow, spaCy or tokenizers until a name that needs one is used)::

    from bert_data import pretraining_dataset, FullTokenizer, build_config, run

Layout (see ``docs/architecture.md``): WHAT is computed is the pipeline's stages, modules of this
package in the order data flows (``metadata``, ``documents``, ``sentences``, ``tokenization``,
``instances``, ``windows``, ``masking``), ``group`` and ``objectives``; what bytes mean is in
``format/``, WHERE they go in ``output/``, WHO runs groups in ``runners/``; the tf.data reader is
in ``reader/``, ``inspect_tfrecords`` in ``inspection/`` and console scripts in ``tools/``.
"""

from typing import Any

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "pretraining_dataset": "bert_data.reader.dataset",
    "decode_record": "bert_data.reader.dataset",
    "ReaderOptions": "bert_data.reader.dataset",
    "DynamicMaskingOptions": "bert_data.reader.dynamic_masking",
    "make_dynamic_masker": "bert_data.reader.dynamic_masking",
    "FullTokenizer": "bert_data.tokenization",
    "load_vocab": "bert_data.tokenization",
    "Config": "bert_data.config",
    "build_config": "bert_data.presets",
    "run": "bert_data.runners.job",
    "run_job": "bert_data.runners.job",
    "iter_records": "bert_data.format.tfrecord",
    "parse_example": "bert_data.format.example_wire",
    "serialize_examples": "bert_data.format.example_wire",
    "BertDataError": "bert_data.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bert_data' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
