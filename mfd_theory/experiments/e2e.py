"""End to end on one machine: corpus -> small Qwen3 target -> product and MFD drafters -> decoding.

``mfd e2e --preset {micro,default} --out DIR`` trains (or loads from the cache) a byte-level-BPE
multi-future corpus, a small Qwen3ForCausalLM target, a plain draft LM for Hugging Face's assisted
generation, and block drafters with K = 1 (product, DFlash loss) and K in ``modes`` (MFD, mixture
likelihood) on the target's own generations; then decodes held-out prompts with ar, chain,
ddtree and mfd at every budget and temperature and writes ``DIR/end_to_end.json``: one row per
(method, drafter, budget, temperature) with tau, accepted mean/std, predicted acceptance, speedup
vs ar and the dead-node share, plus the loss curves, the MFD gain table and the HF baseline.

The config lives here (no torch import); the work is in :mod:`mfd_theory.llm.e2e`.
Every field can be overridden on the command line (``--target-steps 800``); ``--preset`` picks the
starting values. Bigger runs (a GPU, larger targets) are options alone (``--device cuda``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ..results import Result
from ._config import add_dataclass_args, config_from_args

__all__ = ["E2EConfig", "PRESETS", "preset_config", "run", "main"]


@dataclasses.dataclass(frozen=True)
class E2EConfig:
    """Defaults = the ``default`` preset (<= 15 minutes on 2 CPU cores, training included)."""

    preset: str = "default"
    seed: int = 0
    threads: int = 2                    # torch threads for training
    eval_threads: int = 1               # torch threads for decoding (timing)
    device: str = "cpu"
    cache_dir: str = ""                 # "" -> <out>/cache
    # corpus
    n_train: int = 6000
    n_heldout: int = 200
    vocab_size: int = 512
    # target (Qwen3ForCausalLM; target_arch "qwen3_5": the Qwen3.5 hybrid, 3 of 4 layers Gated DeltaNet)
    target_arch: str = "qwen3"
    target_hidden: int = 128
    target_layers: int = 4
    target_heads: int = 4
    target_kv_heads: int = 2
    target_intermediate: int = 384
    target_steps: int = 600
    target_batch: int = 16
    seq_len: int = 128
    target_lr: float = 3e-3
    # plain draft LM for HF assisted generation (same corpus, same steps as the block drafters)
    draft_lm_hidden: int = 64
    draft_lm_layers: int = 1
    # self-distillation data (the target's own T=1 continuations of training prompts)
    distill_prompts: int = 768
    prompt_len: int = 24
    distill_gen_len: int = 64
    distill_temperature: float = 1.0
    # block drafters: identical data, steps and sizes for every K
    block_size: int = 8
    drafter_layers: int = 1
    drafter_steps: int = 400
    drafter_batch: int = 16
    blocks_per_seq: int = 4
    drafter_lr: float = 3e-3
    modes: tuple[int, ...] = (2, 4)
    balance: float = 0.1
    # evaluation on held-out prompts
    eval_prompts: int = 24
    max_new_tokens: int = 64
    budgets: tuple[int, ...] = (16, 32, 64, 128, 256)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    ddtree_on_mfd: bool = True          # ablation: product tree over the MFD drafter's marginals
    hf_assisted: bool = True
    ckpt_every: int = 100


PRESETS: dict[str, dict] = {
    "default": {},
    # Tiny everything: the whole pipeline, training included, in well under 2 minutes on 2 cores.
    "micro": dict(
        preset="micro", n_train=600, n_heldout=20, vocab_size=256,
        target_hidden=64, target_layers=2, target_heads=2, target_kv_heads=1, target_intermediate=128,
        target_steps=60, target_batch=8, seq_len=64,
        draft_lm_hidden=32, distill_prompts=48, prompt_len=12, distill_gen_len=24,
        block_size=5, drafter_steps=30, drafter_batch=8, blocks_per_seq=2, modes=(2,),
        eval_prompts=2, max_new_tokens=20, budgets=(8, 32), temperatures=(0.0, 1.0),
        ckpt_every=20,
    ),
}


def preset_config(name: str, **overrides) -> E2EConfig:
    """The named preset's config with ``overrides`` applied."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    values = {**PRESETS[name], "preset": name, **overrides}
    return E2EConfig(**values)


def run(config: E2EConfig, out_dir: str | Path, progress: bool = True) -> Result:
    """Train (or load from the cache) and evaluate; writes ``out_dir/end_to_end.json``."""
    from ..llm.e2e import run_e2e

    return run_e2e(config, out_dir, progress=progress)


def main(argv: list[str] | None = None) -> Result:
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default="default")
    known, _ = pre.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="mfd e2e", description=__doc__.splitlines()[0])
    add_dataclass_args(parser, E2EConfig)
    # --preset is re-added with choices so a preset that does not exist is a clear usage error.
    for action in parser._actions:
        if action.dest == "preset":
            action.choices = sorted(PRESETS)
        if action.dest == "target_arch":
            action.choices = ["qwen3", "qwen3_5"]
    parser.add_argument("--out", default="results", help="output directory (default: results)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    if known.preset in PRESETS:
        parser.set_defaults(**preset_config(known.preset).__dict__)
    args = parser.parse_args(argv)
    config = config_from_args(E2EConfig, args)
    result = run(config, args.out, progress=not args.quiet)
    from ..llm.e2e import format_table

    print(format_table(result.data))
    return result
