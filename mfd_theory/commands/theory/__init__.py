"""The theory's sweeps on synthetic multi-future targets (numpy and numba, no torch): ``mfd
core-table``, ``chimera-bound``, ``chimera-share``, ``mixture-gain``, ``path-gain`` (and
``chimera_exact``, the exhaustive F >= 3 check behind docs/chimeras.md). Each module is one
command: its config, its run and its ``main``."""
