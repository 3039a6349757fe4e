"""The work behind the commands: experiment drivers, their caches and stages, and the torch half of
each command (``mfd_theory.commands.A.X``'s work is ``mfd_theory.runs.A.X``). A floor above
``mfd_theory.report`` and below ``mfd_theory.commands``: nothing here imports a command; a
driver that runs other commands gets their entry points from the command that calls it.
"""
