#!/usr/bin/env python3
"""Thin wrapper: ``python scripts/inspect_tfrecords.py --help`` is the same as ``inspect_tfrecords --help``."""

import sys

from bert_data.tools.inspect import main

if __name__ == "__main__":
    sys.exit(main())
