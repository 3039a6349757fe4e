"""Every ``mfd`` command, one module each, named after the command.

``X.py`` is the command itself: its ``main(argv)``, which parses and checks everything before any
work and never imports torch at the top, so ``--help`` is fast and a bad option costs nothing, and
its frozen config (the options, their checks and defaults) unless another command's driver builds
that config too: those live on the floor below, ``mfd_theory.configs`` (the e2e config, and the
options of distill, train-drafter and eval with their entry points in
``mfd_theory.runs.pipeline.entry``). No command imports another. Where a command drives models, its
work lies in the library floor ``mfd_theory.runs`` (``mfd_theory.runs.A.X`` for
``commands/A/X.py``), imported only once the checks have passed. :mod:`mfd_theory.configs.options`
is the one framework that turns a config into a command line; the presets it reads are the files of
the repository's ``experiments/`` folder (experiments/README.md). ``mfd reproduce``, which runs a
list of commands, sits above them beside the ``mfd`` entry point (:mod:`mfd_theory.reproduce`).
"""
