#!/usr/bin/env python3
"""Thin wrapper: ``python scripts/create_tfrecords.py --help`` is the same as ``create_tfrecords --help``."""

import sys

from bert_data.tools.create import main

if __name__ == "__main__":
    sys.exit(main())
