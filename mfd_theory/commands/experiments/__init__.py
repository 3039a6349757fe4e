"""The end-to-end experiments on models trained here: ``mfd e2e`` (a small Qwen3 or hybrid
target and its drafters), ``mfd own-target`` (the pipeline commands on a small local target) and
``mfd natural`` (Python's standard library as text). ``X.py`` is the torch-free command,
``X_run.py`` its torch half. Results and design: docs/results.md."""
