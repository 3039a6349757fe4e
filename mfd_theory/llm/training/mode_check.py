"""Was a K-mode checkpoint read as it was trained? :func:`check_modes` drafts, at every position of
the target's greedy answers to a few prompts, each mode's greedy chain and (given) the DFlash
drafter it was initialised from, and compares their accepted lengths: if the mode embeddings
entered the drafter wrongly, the modes would draft worse than that drafter, or all alike.
The assumptions it checks: docs/own-target.md ("MFD checkpoints as released").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from mfd_theory.llm.models.fingerprint import hf_model as _hf_model
from mfd_theory.validation import check_int, check_real

__all__ = ["IDENTICAL", "MIN_REFERENCE", "ModeCheck", "check_modes", "chain_accepts"]

#: the modes count as identical when their chains coincide at this share of block starts or more
IDENTICAL = 0.99
#: below this mean accepted length the reference drafts too little for "worse than it" to mean anything
MIN_REFERENCE = 0.05


@dataclasses.dataclass(frozen=True)
class ModeCheck:
    """What :func:`check_modes` measured. Accepted lengths are per block start (the draft tokens a
    chain round starting there accepts at T = 0, bonus token excluded), averaged over starts."""

    num_modes: int
    n_prompts: int
    n_starts: int                       # block starts scored (every position with a whole block after it)
    mode_accepted: list[float]          # [K] each mode's own greedy chain
    any_mode_accepted: float            # the best of the K chains at each start
    mode_wins: list[float]              # [K] share of starts where mode k's chain accepts most (ties shared)
    identical_share: float | None       # mean over mode pairs of the share of starts with the same chain (K > 1)
    reference_accepted: float | None    # the DFlash initialisation's chain; None without one
    tolerance: float
    holds: bool | None                  # None: inconclusive
    verdict: str

    @property
    def mean_mode_accepted(self) -> float:
        return sum(self.mode_accepted) / len(self.mode_accepted)

    def report(self) -> str:
        """The numbers and the verdict as a few lines of text."""
        lines = [f"{self.num_modes} modes, {self.n_prompts} prompts, {self.n_starts} block starts "
                 "(mean accepted draft tokens of a greedy chain per start, T = 0):"]
        if self.reference_accepted is not None:
            lines.append(f"  DFlash initialisation: {self.reference_accepted:.3f}")
        lines.append("  each mode:             " + " ".join(f"{a:.3f}" for a in self.mode_accepted)
                     + f"  (mean {self.mean_mode_accepted:.3f})")
        lines.append(f"  best mode per start:   {self.any_mode_accepted:.3f}")
        lines.append("  share of starts won:   " + " ".join(f"{w:.2f}" for w in self.mode_wins))
        if self.identical_share is not None:
            lines.append(f"  same chain, mean over mode pairs: {self.identical_share:.3f}")
        lines.append(("holds: " if self.holds else "fails: " if self.holds is False else "inconclusive: ")
                     + self.verdict)
        return "\n".join(lines)


def chain_accepts(chains: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Accepted length of each chain: its leading tokens equal to ``labels``. chains [K, L], labels [L] -> [K]."""
    hit = (chains == labels[None]).long()  # [K, L]
    return hit.cumprod(dim=1).sum(dim=1)  # [K]


@torch.no_grad()
def _chains(drafter, feats: torch.Tensor, seq: list[int], starts: range) -> torch.Tensor:
    """Each mode's greedy chain at every start, drafted round by round through the drafter's own
    context cache as decoding drafts them: [n_starts, K, L]."""
    drafter.reset()
    out, fed = [], 0
    for t in starts:
        _, log_q = drafter.draft_modes(feats[:, fed:t], int(seq[t]))  # [K, L, V]
        fed = t
        out.append(log_q.argmax(-1))  # [K, L]
    drafter.reset()
    return torch.stack(out)


@torch.no_grad()
def check_modes(target: Any, drafter, prompts: list[list[int]], reference=None, *, new_tokens: int = 64,
                tolerance: float = 0.25, progress: bool = False) -> ModeCheck:
    """Score ``drafter``'s K modes, one greedy chain each, on the target's greedy answers.

    ``prompts``: token id lists; each is answered greedily by the target (``new_tokens`` at most,
    HF ``generate``), and at every answer position t with a whole block after it, the drafter
    drafts from the target's hidden states of positions < t and root token x_t. ``reference``: the
    DFlash drafter the checkpoint was initialised from (one mode), scored the same way.

    The verdict fails when the modes draft the same chain at (almost) every start (share >=
    ``IDENTICAL``: the mode embeddings change nothing) or when the modes' mean accepted length is
    under ``(1 - tolerance)`` times the reference's (each mode is the reference's backbone
    fine-tuned with its embedding at the input: read right, each drafts about as well as the
    reference; read wrong, the backbone sees inputs it was never trained on). It holds when
    neither happens and the reference drafts enough to compare with; otherwise it is inconclusive.
    """
    new_tokens = check_int("new_tokens", new_tokens, 1)
    tolerance = check_real("tolerance", tolerance, 0, 1)
    if not prompts:
        raise ValueError("prompts: need at least one prompt")
    if reference is not None and reference.num_modes != 1:
        raise ValueError(f"reference: must be a one-mode (DFlash) drafter, has {reference.num_modes} modes")
    hf = _hf_model(target)
    dev = next(hf.parameters()).device
    L, K = drafter.block_size - 1, drafter.num_modes
    if reference is not None and reference.block_size != drafter.block_size:
        raise ValueError(f"reference: block size {reference.block_size} differs from the drafter's {drafter.block_size}")
    acc, ref_acc, same = [], [], []
    from tqdm.auto import tqdm

    for prompt in tqdm(prompts, desc="prompts", disable=not progress, leave=False):
        ids = torch.tensor([list(prompt)], device=dev)
        pad = hf.generation_config.pad_token_id
        seq = hf.generate(ids, max_new_tokens=new_tokens, do_sample=False,
                          pad_token_id=pad if pad is not None else 0)[0].tolist()
        starts = range(len(prompt), len(seq) - L)
        if not len(starts):
            continue
        hs = hf(input_ids=torch.tensor([seq], device=dev), output_hidden_states=True,
                logits_to_keep=1).hidden_states  # the head's rows are not read
        labels = torch.tensor(seq, device=dev)
        chains = _chains(drafter, drafter.fuse_hidden(hs), seq, starts)  # [n, K, L]
        acc += [chain_accepts(c, labels[t + 1:t + 1 + L]) for c, t in zip(chains, starts)]
        if K > 1:
            pairs = [(a, b) for a in range(K) for b in range(a + 1, K)]
            same += [float(torch.stack([(c[a] == c[b]).all() for a, b in pairs]).float().mean()) for c in chains]
        if reference is not None:
            rc = _chains(reference, reference.fuse_hidden(hs), seq, starts)  # [n, 1, L]
            ref_acc += [int(chain_accepts(c, labels[t + 1:t + 1 + L])[0]) for c, t in zip(rc, starts)]
    if not acc:
        raise ValueError(f"prompts: no answer is longer than one block ({L} tokens after its first); "
                         "raise new_tokens")
    a = torch.stack(acc).double()  # [n_starts, K]
    tied = (a == a.max(dim=1, keepdim=True).values).double()  # [n_starts, K]: the modes that accept most
    wins = (tied / tied.sum(dim=1, keepdim=True)).mean(0)  # a tie shares the start
    identical = sum(same) / len(same) if K > 1 else None
    ref = sum(ref_acc) / len(ref_acc) if reference is not None else None
    holds, verdict = _verdict(a.mean(0).tolist(), identical, ref, K, tolerance)
    return ModeCheck(num_modes=K, n_prompts=len(prompts), n_starts=len(a), mode_accepted=a.mean(0).tolist(),
                     any_mode_accepted=float(a.max(dim=1).values.mean()), mode_wins=wins.tolist(),
                     identical_share=identical, reference_accepted=ref, tolerance=tolerance, holds=holds,
                     verdict=verdict)


def _verdict(mode_acc: list[float], identical: float, ref: float | None, K: int, tol: float):
    problems = []
    mean = sum(mode_acc) / len(mode_acc)
    if K > 1 and identical >= IDENTICAL:
        problems.append(f"the {K} modes draft the same chain at {identical:.1%} of the starts: the mode "
                        "embeddings change nothing, so they do not enter the drafter as assumed (or the "
                        "modes collapsed in training)")
    if ref is not None and ref >= MIN_REFERENCE and mean < (1 - tol) * ref:
        problems.append(f"the modes accept {mean:.3f} tokens on average, under {1 - tol:.2f} x the "
                        f"{ref:.3f} of the DFlash drafter they were trained from: the mode embeddings do not "
                        "enter the drafter as it was trained")
    if problems:
        return False, "; ".join(problems)
    if ref is None:
        return None, "no DFlash initialisation to compare with: only 'the modes differ' was checked"
    if ref < MIN_REFERENCE:
        return None, (f"the DFlash initialisation accepts {ref:.3f} tokens per start, too few to compare "
                      "with: use prompts of the kind it was trained on")
    return True, (f"the modes accept {mean:.3f} tokens on average against the DFlash initialisation's "
                  f"{ref:.3f}" + (", and they draft different chains" if K > 1 else ""))
