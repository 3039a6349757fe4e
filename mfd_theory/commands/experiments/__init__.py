"""The end-to-end experiments on models trained here: ``mfd e2e`` (a small Qwen3 or hybrid
target and its drafters), ``mfd own-target`` (the pipeline commands on a small local target) and
``mfd natural`` (Python's standard library as text), and the real targets' ``mfd real`` and
``mfd real-drafters``. ``X.py`` is the torch-free command, ``mfd_theory.runs.experiments.X`` its
work. Results and design: docs/results.md and docs/real-targets.md."""
