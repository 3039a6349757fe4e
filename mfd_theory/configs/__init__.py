"""The option framework of every ``mfd`` command (:mod:`~mfd_theory.configs.options`: a frozen config
dataclass, its flags, presets and checks) and the configs that more than one command builds: the
``mfd e2e`` config, whose preset target the bench and own-target runs start from
(:mod:`~mfd_theory.configs.e2e`), and the options of ``mfd distill``, ``train-drafter`` and ``eval``,
which the drivers of ``mfd own-target``, ``mfd natural`` and ``mfd real-drafters`` run as steps
(:mod:`~mfd_theory.configs.pipeline`). A floor above ``mfd_theory.report`` and below
``mfd_theory.runs``: torch-free, it imports the core only, so a driver in ``runs`` builds another
command's config without importing that command.
"""
