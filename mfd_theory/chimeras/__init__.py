"""Chimeras in product-ranked draft trees: the 2^(m-1) - 1 bound and beyond.

``two_futures`` holds the bound's objects (splices, the smallest product tree holding the
futures, chimera counts, tight and worst instances), ``verify`` the random-instance check of the
bound, ``multi`` the F >= 3 analysis (patterns, hitting-set lower bound, drafter search). The
theorem, its proof and what is only observed: docs/chimeras.md.
"""

from mfd_theory.chimeras.multi import (
    MultiFutureMinimum,
    all_patterns,
    canonical_pattern,
    column_pattern,
    column_types,
    conjectured_min_all_distinct,
    futures_from_pattern,
    min_chimeras_multi,
    pairwise_bound,
)
from mfd_theory.chimeras.two_futures import (
    TIE_TOL,
    TIGHT_M_MAX,
    ChimeraCount,
    chimera_lower_bound,
    count_chimeras,
    min_product_tree_containing,
    on_sequence_paths,
    splice_chimeras_from_scores,
    splices,
    tight_instance,
    worst_instance,
)
from mfd_theory.chimeras.verify import BoundCheck, verify_bound

__all__ = [
    "BoundCheck",
    "ChimeraCount",
    "MultiFutureMinimum",
    "TIE_TOL",
    "TIGHT_M_MAX",
    "all_patterns",
    "canonical_pattern",
    "chimera_lower_bound",
    "column_pattern",
    "column_types",
    "conjectured_min_all_distinct",
    "count_chimeras",
    "futures_from_pattern",
    "min_chimeras_multi",
    "min_product_tree_containing",
    "on_sequence_paths",
    "pairwise_bound",
    "splice_chimeras_from_scores",
    "splices",
    "tight_instance",
    "verify_bound",
    "worst_instance",
]
