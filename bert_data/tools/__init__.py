"""The console tools (``bert-data``, ``create_tfrecords``, ...): thin wrappers over the library.

Importing this package (which every tool's module does, before numpy) caps the thread pools of
numerical libraries at one thread unless the user set them: a tool's processes (the coordinator
and every worker, which inherit the environment) run one core each and never call BLAS, yet
OpenBLAS starts a thread per core at numpy's import and spins them (measured: ~0.17 CPU-s of a
2-core machine's 1.9 CPU-s cached MSL-512 run; 2.4 CPU-s per worker on a 16-core one).
The caps hold for the whole process that imports this package (a tool's, or a test session's);
a library caller of ``bert_data.run`` that never imports it keeps its own settings. A
``--spacy_model`` pipeline's small matrices run on one thread too, as each worker is one core."""

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
