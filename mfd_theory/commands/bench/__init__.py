"""The benchmarks behind ``mfd bench``: tree builders (``bench_trees``), EM (``bench_fit``), a
decoding round (``bench_decode``), drafting (``bench_draft``), batches (``bench_batch``) and the
CUDA checks (``gpu_check``). ``X.py`` is the torch-free command, ``mfd_theory.runs.bench.X`` its
torch half, ``mfd_theory.runs.bench.shapes`` the model shapes they share. Measured numbers: docs/benchmarks.md."""
