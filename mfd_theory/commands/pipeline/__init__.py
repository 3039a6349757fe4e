"""A user's own target, from prompts to speedup: ``mfd distill`` (the target's answers),
``mfd train-drafter`` and ``mfd eval``. ``X.py`` is the torch-free command, ``X_run.py`` its torch
half; ``_target.py`` the target options the three share. Usage: docs/own-target.md."""
