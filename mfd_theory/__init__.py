"""mfd_theory: theory and simulation of tree-verified speculative decoding.

The core (distributions, trees, coverage, chimeras, fit, speedup) needs numpy, scipy and numba
only; ``mfd_theory.llm`` (torch + transformers) plugs real drafters and targets into the same
metrics.

The core's main names are importable from the package itself, ``from mfd_theory import
product_tree, coverage, MixtureOfProducts``. They load on first use, so ``import mfd_theory``
stays quick and imports neither numba nor torch.
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

# public name -> the submodule that defines it
_EXPORTS = {
    "MixtureOfProducts": "distributions",
    "DraftTree": "trees",
    "best_mode_tree": "trees",
    "candidate_trees": "trees",
    "chain_tree": "trees",
    "mixture_tree": "trees",
    "oracle_tree": "trees",
    "product_tree": "trees",
    "path_tree": "trees",
    "MemoryDrafter": "path_trees",
    "acceptance_variance": "coverage",
    "chimera_mask": "coverage",
    "coverage": "coverage",
    "depth_profile": "coverage",
    "node_log_probs": "coverage",
    "simulate_acceptance": "coverage",
    "splice_mask": "coverage",
    "ChimeraCount": "chimeras",
    "chimera_lower_bound": "chimeras",
    "count_chimeras": "chimeras",
    "min_product_tree_containing": "chimeras",
    "tight_instance": "chimeras",
    "verify_bound": "chimeras",
    "worst_instance": "chimeras",
    "FitInfo": "fit",
    "fit_mixture": "fit",
    "fit_mixture_exact": "fit",
    "log_likelihood": "fit",
    "sequoia_tree": "sequoia",
    "LatencyProfile": "speedup",
    "default_profile": "speedup",
    "make_target": "synthetic",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mod = _import_module(f"{__name__}.{module}")
    if name == module:
        # ``coverage`` names both a submodule and its main function; the package attribute must
        # be the submodule (the import system sets it so whenever the submodule loads), and
        # that module is callable as the function, so both readings work in any import order
        return mod
    value = getattr(mod, "make" if name == "make_target" else name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    # the public names, loaded or not, the submodules loaded so far and the dunders; not the
    # helpers this file uses (names with one leading underscore)
    return sorted({n for n in globals() if not n.startswith("_") or n.startswith("__")} | set(_EXPORTS))
