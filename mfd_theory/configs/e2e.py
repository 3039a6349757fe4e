"""The ``mfd e2e`` config (:class:`E2EConfig`) and its presets (:func:`preset_config`, the files of
``experiments/e2e/``). It lives on this floor, below the commands, because other runs start from an
e2e preset's target and corpus: ``mfd own-target``, ``mfd bench batch`` and ``mfd bench gpu-check``.
The command is :mod:`mfd_theory.commands.experiments.e2e`; the work :mod:`mfd_theory.runs.experiments.e2e`.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.validation import check_device
from mfd_theory.configs.options import budgets_opt, Checked, load_preset, opt, seed_opt, numerics_opt

__all__ = ["E2EConfig", "preset_config"]


@dataclasses.dataclass(frozen=True)
class E2EConfig(Checked):
    """Defaults = the ``default`` preset (<= 15 minutes on 2 CPU cores, training included)."""

    preset: str = opt("default", "the preset file (experiments/e2e/NAME.toml) these values started from, set by "
                      "--preset NAME: default (the run in docs/results.md), micro (a small smoke run), ...")
    seed: int = seed_opt("random seed of data, training and sampling")
    threads: int = opt(2, "torch threads for training", ge=1)
    numerics: str | None = numerics_opt()
    eval_threads: int = opt(1, "torch threads for decoding (timing)", ge=1)
    device: str = opt("cpu", "torch device (cpu, cuda, cuda:N)")
    cache_dir: str = opt("", "checkpoint cache ('' means <out>/cache)")
    # corpus
    n_train: int = opt(6000, "training documents of the corpus", ge=1)
    n_heldout: int = opt(200, "held-out documents", ge=1)
    vocab_size: int = opt(512, "BPE vocabulary size", ge=64)
    # target (Qwen3ForCausalLM; target_arch "qwen3_5": the Qwen3.5 hybrid, 3 of 4 layers Gated DeltaNet)
    target_arch: str = opt("qwen3", "target architecture: qwen3 (attention) or qwen3_5 (Gated DeltaNet hybrid)",
                           choices=("qwen3", "qwen3_5"))
    target_hidden: int = opt(128, "target hidden size", ge=1)
    target_layers: int = opt(4, "target decoder layers", ge=1)
    target_heads: int = opt(4, "target attention heads", ge=1)
    target_kv_heads: int = opt(2, "target key/value heads", ge=1)
    target_intermediate: int = opt(384, "target MLP size", ge=1)
    target_steps: int = opt(600, "target training steps", ge=1)
    target_batch: int = opt(16, "target batch size", ge=1)
    seq_len: int = opt(128, "training sequence length", ge=2)
    target_lr: float = opt(3e-3, "target learning rate", gt=0)
    # plain draft LM for HF assisted generation (same corpus, same steps as the block drafters)
    draft_lm_hidden: int = opt(64, "HF assisted generation: draft LM hidden size", ge=1)
    draft_lm_layers: int = opt(1, "HF assisted generation: draft LM layers", ge=1)
    # self-distillation data (the target's own T=1 continuations of training prompts)
    distill_prompts: int = opt(768, "training prompts the target continues for the drafters' data", ge=1)
    prompt_len: int = opt(24, "prompt length in tokens", ge=1)
    distill_gen_len: int = opt(64, "tokens the target generates per distillation prompt", ge=1)
    distill_temperature: float = opt(1.0, "sampling temperature of the distillation data", gt=0)
    # block drafters: identical data, steps and sizes for every K
    block_size: int = opt(8, "drafter block size (L = block size - 1 drafted positions)", ge=2)
    drafter_layers: int = opt(1, "drafter decoder layers", ge=1)
    drafter_steps: int = opt(400, "drafter training steps", ge=1)
    drafter_batch: int = opt(16, "drafter batch size", ge=1)
    blocks_per_seq: int = opt(4, "training blocks drawn per sequence", ge=1)
    drafter_lr: float = opt(3e-3, "drafter learning rate", gt=0)
    modes: tuple[int, ...] = opt((2, 4), "MFD drafter modes K (each >= 2)", ge=2)
    scorers: tuple[str, ...] = opt(("mixture", "best_mode"), "how mfd ranks a tree's prefixes, each a cell of its "
                                   "own: mixture (sum_k pi_k Q_k) and / or best_mode (max_k Q_k, the released MFD "
                                   "drafters' rule)", choices=("mixture", "best_mode"))
    wta_modes: tuple[int, ...] = opt((2,), "K of MFD drafters also trained with the winner-take-all objective (each "
                                     "block trains its best mode; label mfd-k<K>-wta), decoded with every scorer and "
                                     "compared with the mixture objective's drafter of the same K", ge=2, empty=True)
    wta_eps: float = opt(0.05, "winner-take-all objective: share of every block spread over the modes that lost it",
                         ge=0, lt=1)
    dartree: bool = opt(True, "also train a DARTree (Domino) drafter the same way and decode it with method dartree")
    dartree_rank: int = opt(32, "width (rank) of the Domino drafter's GRU path correction", ge=1)
    balance: float = opt(0.1, "load-balancing penalty of the MFD drafters", ge=0)
    # evaluation on held-out prompts
    eval_prompts: int = opt(24, "held-out prompts decoded per cell", ge=1)
    max_new_tokens: int = opt(64, "new tokens per prompt", ge=1)
    # N = 256 was dropped from the default grid after a run in which every method decoded slower
    # than AR there (0.67x-0.82x, run of 2026-11-30) while it took 30% of the decode time.
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64), "tree budgets N")
    temperatures: tuple[float, ...] = opt((0.0, 1.0), "sampling temperatures (0 = greedy)", ge=0)
    ddtree_on_mfd: bool = opt(True, "ablation: product tree over the MFD drafter's marginals")
    hf_assisted: bool = opt(True, "also time Hugging Face assisted generation with a draft LM")
    timing_passes: int = opt(2, "timing passes per cell (speedups carry their pass-to-pass spread)", ge=1)
    calibration_prompts: int = opt(8, "held-out prompts, never evaluated, decoded before the evaluation to predict "
                                      "every cell's acceptance (the round profile uses the first --profile-prompts of "
                                      "them)", ge=1)
    profile_prompts: int = opt(2, "calibration prompts of the round cost model measured before decoding "
                                  "(0: no profile, no predicted speedups)", ge=0)
    profile_repeats: int = opt(1, "decodes of each calibration prompt per cell for the round profile", ge=1)
    budget_choice: bool = opt(True, "also decode each tree method at the budget the theory picks before decoding "
                                    "(fixed, and per round), from the round profile (needs --profile-prompts > 0); "
                                    "not for the ddtree-on-MFD ablation, which stays on the grid")
    ckpt_every: int = opt(100, "checkpoint every this many training steps", ge=1)
    replicates: int = opt(3, "independently trained drafter sets (drafter seeds seed, seed + 1, ...; the target and "
                             "its data held fixed): the headline comparisons are decoded on every one, each method at "
                             "the budget the theory chose before decoding, and stated over the runs", ge=1)
    ceiling_prompts: int = opt(8, "calibration prompts (held out, never evaluated) on which the target-only ceiling "
                                  "(mfd ceiling's measurement) runs at T = 1, for the table of how much of it the "
                                  "trained drafters reach (0: no ceiling)", ge=0)
    ceiling_samples: int = opt(256, "target paths sampled per ceiling prompt to fit the K-mode mixtures on (as many "
                                    "again check the coverages)", ge=8)

    def validate(self) -> None:
        if self.target_heads % self.target_kv_heads:
            raise ValueError(f"--target-kv-heads: must divide --target-heads ({self.target_heads}), "
                             f"got {self.target_kv_heads}")
        check_device("--device", self.device)
        stray = sorted(set(self.wta_modes) - set(self.modes))
        if stray:
            raise ValueError(f"--wta-modes: {stray} not among --modes {list(self.modes)} (each winner-take-all "
                             "drafter is compared with the mixture objective's drafter of the same K)")
        if self.replicates > 1 and not self.budget_choice:
            raise ValueError("--replicates: the replicated comparisons decode each method at the budget the theory "
                             "chooses before decoding; pass --budget-choice true or --replicates 1")
        if self.budget_choice and self.profile_prompts == 0:
            raise ValueError("--budget-choice: the theory's budget choice needs the round profile, which "
                             "--profile-prompts 0 turns off; pass --profile-prompts >= 1 or --budget-choice false")


def preset_config(name: str, **overrides) -> E2EConfig:
    """The config of preset ``name`` (the file ``experiments/e2e/<name>.toml``) with ``overrides``
    applied."""
    return load_preset(E2EConfig, "e2e", name, **overrides)
