"""Cost models of tree-verified speculative decoding: what a round costs and which tree size pays.

``profile`` holds the latency profiles (JSON files, shipped assumptions), ``budget`` the predicted
speedup and the budget choices (fixed, per step, per round, Sequoia's), ``batch`` batched
decoding's round times and policy plan. The model, the file format and the design notes are in
docs/cost-model.md.
"""

from mfd_theory.speedup.batch import BATCH_POLICIES, BatchCell, BatchPlan, BatchProfile, batch_rows_profile
from mfd_theory.speedup.budget import (
    BudgetChoice,
    PerRoundBudget,
    SequoiaChoice,
    best_fixed_budget,
    cell_speedup,
    length_factor,
    path_speedup,
    per_step_budget,
    per_step_speedup,
    sequoia_choice,
    speedup,
)
from mfd_theory.speedup.profile import (
    LatencyProfile,
    OverheadTable,
    default_profile,
    default_profile_names,
    isotonic,
    load_latency_profile,
)

__all__ = [
    "BATCH_POLICIES",
    "BatchCell",
    "BatchPlan",
    "BatchProfile",
    "BudgetChoice",
    "LatencyProfile",
    "OverheadTable",
    "PerRoundBudget",
    "SequoiaChoice",
    "batch_rows_profile",
    "best_fixed_budget",
    "cell_speedup",
    "default_profile",
    "default_profile_names",
    "isotonic",
    "length_factor",
    "load_latency_profile",
    "path_speedup",
    "per_step_budget",
    "per_step_speedup",
    "sequoia_choice",
    "speedup",
]
