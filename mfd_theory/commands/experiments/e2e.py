"""End to end on one machine: corpus -> small Qwen3 target -> product and MFD drafters -> decoding.

``mfd e2e --preset {micro,default} --out DIR`` trains (or loads from the cache) a byte-level-BPE
multi-future corpus, a small Qwen3ForCausalLM target, a plain draft LM for Hugging Face's assisted
generation, and block drafters with K = 1 (product, DFlash loss) and K in ``modes`` (MFD, mixture
likelihood) and a Domino drafter (DFlash backbone plus a GRU path correction, for DARTree's
path-dependent trees) on the target's own generations; then decodes held-out prompts with ar,
chain, ddtree, mfd and dartree at every budget and temperature and writes ``DIR/end_to_end.json``: one row per
(method, drafter, budget, temperature) with tau, accepted mean/std, predicted acceptance, speedup
vs ar and the dead-node share, plus the loss curves, the MFD gain table and the HF baseline.

The config is :mod:`mfd_theory.configs.e2e` (no torch import); the work is in
:mod:`mfd_theory.runs.experiments.e2e`.
Every field can be overridden on the command line (``--target-steps 800``); ``--preset`` picks the
starting values, a file of ``experiments/e2e/``. Bigger runs (a GPU, larger targets) are options
alone (``--device cuda``).
"""

from __future__ import annotations

from pathlib import Path

from mfd_theory.results import Result
from mfd_theory.configs.e2e import E2EConfig, preset_config
from mfd_theory.configs.options import Command, switch, wrote

__all__ = ["E2EConfig", "preset_config", "run", "main"]


def run(config: E2EConfig, out_dir: str | Path, progress: bool = True, prepare_only: bool = False) -> Result | None:
    """Train (or load from the cache) and evaluate; writes ``out_dir/end_to_end.json``.
    ``prepare_only``: train every checkpoint into the cache and stop (returns None)."""
    from mfd_theory.runs.experiments.e2e import run_e2e

    return run_e2e(config, out_dir, progress=progress, prepare_only=prepare_only)


CLI = Command("e2e", __name__, E2EConfig, __doc__, models=True, extras=(switch(
    "prepare_only", "train (or find in the cache) every checkpoint, then stop before the evaluation; a later "
                    "run with the same options only evaluates"),))


def main(argv: list[str] | None = None) -> Result | None:
    return CLI.main(argv, _run)


def _run(config: E2EConfig, opts) -> Result | None:
    out = Path(opts.out) / "end_to_end.json"
    existed = out.exists()
    result = run(config, opts.out, progress=not opts.quiet, prepare_only=opts.prepare_only)
    cache = config.cache_dir or Path(opts.out) / "cache"
    if result is None:
        print(f"prepared: checkpoints cached under {cache}/ (nothing evaluated)")
        return None
    from mfd_theory.runs.experiments.e2e import format_table

    print(format_table(result.data))
    print(f"checkpoints cached under {cache}/")
    wrote(out, existed)
    return result
