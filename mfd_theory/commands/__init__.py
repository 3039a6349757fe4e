"""Every ``mfd`` command, one module each, named after the command.

``X.py`` is the command itself: its frozen config (the options, their checks and defaults), and
``main(argv)``, which parses and checks everything before any work and never imports torch at
the top, so ``--help`` is fast and a bad option costs nothing. Where a command drives models,
its work lies in the library floor ``mfd_theory.runs`` (``mfd_theory.runs.A.X`` for
``commands/A/X.py``), imported only once the checks have passed.
``_cli.py`` is the one framework that turns a config into a command line; the presets it reads
are the files of the repository's ``experiments/`` folder (experiments/README.md).
"""
