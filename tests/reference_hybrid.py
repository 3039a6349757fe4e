"""Slow, obviously correct twin of the tree form of the gated delta rule (mfd_theory.llm.models.hybrid).

Every row walks its own root path one token at a time with Hugging Face's one-token function
(``torch_recurrent_gated_delta_rule`` of the Qwen3.5 model file), starting from the committed state.
"""

from __future__ import annotations

import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule


def tree_gated_delta_rule_ref(q, k, v, g, beta, state0, parent_row):
    """q, k [n, Hk, Dk] (normalised), v [n, Hv, Dv], g, beta [n, Hv], state0 [Hv, Dk, Dv],
    parent_row [n] (-1: starts from state0). Returns (out [n, Hv, Dv], states [n, Hv, Dk, Dv])."""
    n = v.shape[0]
    out, states = [], []
    for i in range(n):
        path = [i]
        while int(parent_row[path[-1]]) >= 0:
            path.append(int(parent_row[path[-1]]))
        path = path[::-1]
        state = state0[None].float()
        for j in path:  # one token at a time, batch 1
            o, state = torch_recurrent_gated_delta_rule(
                q[j][None, None], k[j][None, None], v[j][None, None], g=g[j][None, None], beta=beta[j][None, None],
                initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=False)
        out.append(o[0, 0].float())
        states.append(state[0])
    return torch.stack(out), torch.stack(states)
