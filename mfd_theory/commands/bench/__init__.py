"""The benchmarks behind ``mfd bench``: tree builders (``bench_trees``), EM (``bench_fit``), a
decoding round (``bench_decode``), drafting (``bench_draft``), batches (``bench_batch``) and the
CUDA checks (``gpu_check``). ``X.py`` is the torch-free command, ``X_run.py`` its torch half;
``_shapes.py`` the model shapes they share. Measured numbers: docs/benchmarks.md."""
