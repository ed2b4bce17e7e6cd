"""The library behind ``inspect_tfrecords`` (the thin CLI is :mod:`bert_data.tools.inspect`).

Looks inside BERT pretraining TFRecords without TensorFlow: records are read in batches with
:func:`bert_data.format.batch_decode.iter_record_batches` (plain or GZIP, CRC-checked) and decoded
with :func:`bert_data.format.batch_decode.decode_examples` (whole-batch numpy; any record it cannot
vouch for goes through :func:`bert_data.format.example_wire.parse_example`), so memory stays bounded
whatever the size of the data (only histograms are accumulated). What a valid record is, is not
defined here but in :mod:`bert_data.format.checks`; what ``data_params.json`` must agree with,
in :func:`bert_data.format.manifest.verify_manifest`.

Modules, one concern each:

* :mod:`.inputs`: what is inspected: the files a PATH names, the directory (manifest, record
  layout, lengths) each file lies in, and the vocabulary to decode ids with;
* :mod:`.file_stats`: one file of ``--stats``: read every record, check it, accumulate the
  statistics;
* :mod:`.stats`: ``--stats``: every file (here or through :mod:`.parallel`), merged into the
  JSON-able report;
* :mod:`.parallel`: the files of ``--stats`` read by several processes, merged in file order
  (the report does not depend on the number);
* :mod:`.report`: that report as text, and as a plot (and :func:`.report.plural`, for every
  tool's messages);
* :mod:`.printer`: the default mode: the first records decoded back to WordPiece text.
"""

from ..errors import BertDataError


class InspectError(BertDataError):
    """Bad flags, missing inputs or unreadable files (exit 2)."""
