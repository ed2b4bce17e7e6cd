"""Only the optional C accelerator lives here; every other setting is in pyproject.toml.

``bert_data.format._wire`` makes reading TFRecords (``inspect_tfrecords --stats``) about 2.3×
faster than the numpy code it stands in for, and serializing and framing the records a run writes
about 3× faster. It is optional: without a C compiler the build skips it with a warning and the package
uses its numpy implementation of the same functions (``bert_data.format.batch_decode``,
``example_wire``, ``tfrecord``), which gives the same answers and bytes (the tests check both).
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
        )
    ]
)
