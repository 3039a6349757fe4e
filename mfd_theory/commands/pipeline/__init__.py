"""A user's own target, from prompts to speedup: ``mfd distill`` (the target's answers),
``mfd train-drafter`` and ``mfd eval`` (and ``mfd ceiling``, ``mfd check-modes``, ``mfd target``).
``X.py`` is the command; its config is in ``mfd_theory.configs.pipeline`` where a driver runs it as
a step (distill, train-drafter, eval: their entry points are :mod:`mfd_theory.runs.pipeline.entry`),
else in ``X.py`` itself; its torch half is ``mfd_theory.runs.pipeline.X``. Usage: docs/own-target.md."""
