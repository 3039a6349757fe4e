"""mfd_theory: theory and simulation of tree-verified speculative decoding.

The core (distributions, trees, coverage, chimeras, fit, speedup) needs numpy, scipy and numba
only; ``mfd_theory.llm`` (torch + transformers) plugs real drafters and targets into the same
metrics.
"""

__version__ = "0.1.0"
