"""The tf.data reader of the records ``create_tfrecords`` writes.

Importing this package does not import TensorFlow: the functions import it when called.

* :func:`pretraining_dataset`, :func:`decode_record`, :class:`ReaderOptions`
  (:mod:`bert_data.reader.dataset`);
* :class:`DynamicMaskingOptions`, :func:`make_dynamic_masker`
  (:mod:`bert_data.reader.dynamic_masking`): masks drawn in the pipeline, for unmasked records.
"""

from .dataset import ReaderOptions, decode_record, pretraining_dataset
from .dynamic_masking import DynamicMaskingOptions, make_dynamic_masker

__all__ = ["pretraining_dataset", "decode_record", "ReaderOptions", "DynamicMaskingOptions", "make_dynamic_masker"]
