"""The tf.data reader of the records ``create_tfrecords`` writes.

Importing this package does not import TensorFlow: the functions import it when called.

* :func:`pretraining_dataset`, :func:`decode_record`, :class:`ReaderOptions`
  (:mod:`bert_data.reader.dataset`);
* which files it reads and the per-file record count checked as each ends
  (:mod:`bert_data.reader.files`: a directory is exactly the files its manifest lists);
* :class:`DynamicMaskingOptions`, :func:`make_dynamic_masker`
  (:mod:`bert_data.reader.dynamic_masking`): masks drawn in the pipeline, for unmasked records;
* :func:`packed_attention_mask` (:mod:`bert_data.reader.packed`): the block-diagonal attention
  mask of packed rows (``--packing``).
"""

from .dataset import ReaderOptions, decode_record, pretraining_dataset
from .dynamic_masking import DynamicMaskingOptions, make_dynamic_masker
from .packed import packed_attention_mask, packed_attention_mask_numpy

__all__ = ["pretraining_dataset", "decode_record", "ReaderOptions", "DynamicMaskingOptions", "make_dynamic_masker",
           "packed_attention_mask", "packed_attention_mask_numpy"]
