"""GPU check and round cost profile: greedy equality in bfloat16, the measured round profile, the ceiling, e2e.

``make gpu-check`` (= ``mfd bench gpu-check --device cuda``) runs, on one CUDA device, five steps
in one script sized to finish within ``time_budget_s`` (8 minutes); each step prints its elapsed
time, and the result keeps them (``elapsed_s``):

1. **greedy equality.** A random target of Qwen3-8B's shape with ``check_layers`` layers
   (bfloat16, SDPA); every method of :mod:`mfd_theory.llm.decoding.generate` decodes the same prompts with
   (a) a random MFD drafter of K = ``num_modes`` (drafts mostly rejected: the bonus path) and
   (b) a *replay* drafter that drafts HF's own continuation with one corrupted position in mode 0
   (accepted paths, cache compaction). Every output must equal HF ``generate`` (greedy). A
   divergence where HF's own top-two logits are closer than ``TIE_RTOL`` is reported as a
   bfloat16 near-tie, any other divergence as a failure (exit status 1).
2. **round profile.** A Qwen3-8B-shaped stack of ``profile_layers`` layers (36 = the whole
   model) and random block drafters (K = 1 and K = ``num_modes``): the full round cost model of
   :func:`mfd_theory.llm.measure.profile.measure_round_profile` (the AR round, verify by tree size,
   drafting by K, tree build / walk / commit by method and N, the sampling draw, the context
   probe), from ``profile_prompts`` decodes of ``profile_tokens`` tokens after a
   ``profile_context``-token prompt with chain, ddtree and mfd at every ``tree_sizes`` budget.
   Written to ``results/verify_latency_<device>.json`` (the file ``--profile-path`` takes, the
   format :func:`mfd_theory.speedup.load_latency_profile` reads; read back to prove it).
3. **drafting latency vs context.** K = 1 and K = ``num_modes`` drafting rounds at
   ``draft_contexts`` on the same stack (drafter width 4096, vocabulary 151,936).
4. **ceiling.** ``mfd ceiling``'s measurement (:func:`mfd_theory.llm.measure.ceiling.prompt_ceiling`)
   on the round profile's stack at T = 1: ``ceiling_samples`` sampled paths to fit and as many to
   check, the oracle tree of ``ceiling_budget`` nodes by batched best-first search, the product
   and K = 2 trees and their exact coverage, after a ``profile_context``-token random prompt
   (``--ceiling false`` skips it). Random weights: the numbers prove the GPU path and time it,
   they say nothing about a trained target.
5. **e2e.** ``mfd e2e --preset micro --device <device>`` (``--e2e false`` skips it).

Time per step on one H100/H200-class GPU, *estimated* from the sizes (not measured here):
(1) a 4-layer model and about 30 decodes of 32 tokens, plus numba compiling the tree builders
once: under 1 minute; (2) building the 36-layer stack (16 GB of bfloat16 weights) and 2 x 18
decodes of 16 rounds, each round a forward of up to 1,025 tokens after 512: 1-2 minutes;
(3) 2 drafters x 2 contexts x ``repeats`` rounds: seconds; (4) 2 x 64 paths of 15 tokens in
batches of 64 (30 one-token forwards of the 36-layer stack), an oracle search of about 20 tree
forwards of at most a few hundred rows, two more tree forwards and two small EM fits: under a
minute; (5) the micro preset (a 2-layer target, three drafters, each a few dozen steps, then a
short evaluation): 2-3 minutes. Total about 6-7 minutes; a run that exceeds ``time_budget_s``
says so at the end.

``--small true`` runs all of it at the ``tiny`` bench shape (for ``--device cpu``: it proves the
script runs; the numbers are not a GPU profile). The config lives here (no torch import); the work
is in :mod:`mfd_theory.runs.bench.gpu_check`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mfd_theory.validation import check_device
from mfd_theory.configs.options import Checked, Command, opt, seed_opt
from mfd_theory.runs.bench.shapes import SHAPES
from mfd_theory.results import Result
from mfd_theory.report.console import gpu_check_text as report

__all__ = ["GpuCheckConfig", "SMALL", "effective", "main", "report", "run"]


@dataclass(frozen=True)
class GpuCheckConfig(Checked):
    device: str = opt("cuda", "torch device (cuda, cuda:N; cpu only to prove the script runs)")
    small: bool = opt(False, "tiny shape and short lists (a CPU run that proves the script works)")
    shape: str = opt("", "one of mfd bench decode's preset shapes ('' = qwen3-8b, or tiny with --small)")
    dtype: str = opt("bfloat16", "model dtype", choices=("bfloat16", "float16", "float32"))
    check_layers: int = opt(4, "target layers of the greedy-equality check", ge=1)
    profile_layers: int = opt(36, "target layers of the round profile", ge=1)
    draft_layers: int = opt(5, "drafter layers (a guess at DFlash's Qwen3-8B drafter)", ge=1)
    block_size: int = opt(16, "drafter block size", ge=2)
    num_modes: int = opt(4, "modes K of the MFD drafter", ge=2)
    budget: int = opt(64, "tree budget N of the greedy check", ge=1)
    prompts: int = opt(2, "prompts of the greedy check", ge=1)
    prompt_len: int = opt(32, "prompt length in tokens", ge=1)
    new_tokens: int = opt(32, "new tokens per prompt", ge=1)
    init_std: float = opt(0.02, "standard deviation of the random weights", gt=0)
    profile_context: int = opt(512, "prompt length (context) of the round profile's decodes", ge=1)
    profile_prompts: int = opt(2, "round profile: prompts each cell decodes", ge=1)
    profile_tokens: int = opt(16, "round profile: new tokens per decode", ge=2)
    tree_sizes: str = opt("1,16,32,64,128,256,512,1024", "round profile: budgets N of ddtree and mfd")
    draft_contexts: str = opt("512,4096", "contexts of the K = 1 / K = 4 drafting latency")
    repeats: int = opt(5, "timed repeats per drafting-latency point", ge=1)
    ceiling: bool = opt(True, "also measure mfd ceiling's oracle, product and K = 2 trees on the profile stack")
    ceiling_samples: int = opt(64, "ceiling: paths sampled to fit (as many again check)", ge=2)
    ceiling_budget: int = opt(64, "ceiling: the oracle tree's nodes N", ge=1)
    e2e: bool = opt(True, "also run mfd e2e --preset micro on the device")
    time_budget_s: float = opt(480.0, "seconds the whole check should take (it says so when it takes longer)",
                               gt=0)
    seed: int = seed_opt("random seed")
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        check_device("--device", self.device)
        if self.shape and self.shape not in SHAPES:
            raise ValueError(f"--shape: must be one of {sorted(SHAPES)}, got {self.shape!r}")
        _ints("--tree-sizes", self.tree_sizes)
        _ints("--draft-contexts", self.draft_contexts)

SMALL = {"check_layers": 2, "profile_layers": 4, "draft_layers": 1, "prompts": 1, "new_tokens": 12,
         "profile_context": 64, "profile_prompts": 1, "profile_tokens": 8, "tree_sizes": "1,16,64",
         "draft_contexts": "128,512", "repeats": 2, "ceiling_samples": 16, "ceiling_budget": 16}


def effective(cfg: GpuCheckConfig) -> GpuCheckConfig:
    """``--small``: the tiny shape's short lists (fields left at their defaults are replaced)."""
    if not cfg.small:
        return cfg
    defaults = GpuCheckConfig()
    return dataclasses.replace(cfg, **{k: v for k, v in SMALL.items() if getattr(cfg, k) == getattr(defaults, k)})


def _ints(name: str, text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ValueError(f"{name}: need positive integers, got {text!r}")
    return vals


def run(config: GpuCheckConfig = GpuCheckConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    """The five steps (:func:`mfd_theory.runs.bench.gpu_check.run`) on the config ``--small``
    makes of ``config``."""
    from mfd_theory.runs.bench.gpu_check import run as run_steps

    cfg = effective(config)
    return run_steps(cfg, _ints("--tree-sizes", cfg.tree_sizes), _ints("--draft-contexts", cfg.draft_contexts),
                     out_dir or cfg.out, progress)


CLI = Command("bench gpu-check", __name__, GpuCheckConfig, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: GpuCheckConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    if any(r["status"].startswith("FAIL") for r in result.data["greedy"]):
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
