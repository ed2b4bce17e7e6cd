"""Only the optional C accelerators live here; every other setting is in pyproject.toml.

``bert_data.format._wire`` makes reading TFRecords (``inspect_tfrecords --stats``) about 2.3×
faster than the numpy code it stands in for, and serializing and framing the records a run writes
about 3× faster. ``bert_data._wordpiece`` tokenizes ASCII text (BERT's basic tokenizer and
WordPiece) in one pass, in place of ``bytes`` operations and the ``tokenizers`` library. Both are
optional: without a C compiler the build skips them with a warning and the package uses its numpy
and Python implementations of the same functions (``bert_data.format.batch_decode``,
``example_wire``, ``tfrecord``; ``bert_data.tokenization``), which give the same answers and bytes
(the tests check both).
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bert_data.format._wire",
            ["bert_data/format/_wire.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-std=c99"],
        ),
        Extension(
            "bert_data._wordpiece",
            ["bert_data/_wordpiece.c"],
            optional=True,
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-std=c99"],
        ),
    ]
)
