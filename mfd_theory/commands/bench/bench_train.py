"""One drafter training step with a copy of the context per block against one context pass per
sequence (issue 54's "context K/V once per sequence"), side by side in one run.

"per_block" is how the trainer ran before: each block gets its own left-aligned copy of the context
rows before its start, and the draft layers make keys/values of that copy
(:meth:`~mfd_theory.llm.models.drafter.BlockDrafter.train_forward`). "shared"
(``mfd train-drafter --context shared``) makes each sequence's context keys/values once and runs
all its blocks' queries through one attention call under a block-sparse mask
(:meth:`~mfd_theory.llm.models.drafter.BlockDrafter.train_forward_shared`). Both compute the same
loss (printed: its largest difference). For each ``--blocks-per-seq`` the two steps (forward, loss,
backward on random sequences of ``--seq-len`` tokens, the target's hidden states computed once) run
``repeats`` times interleaved and the fastest of each is compared. By default the shipped Qwen2.5-
Coder-0.5B in float32 with the recipe of ``results/r54`` (block 16, one layer, 5 target layers, a
draft vocabulary of 8,192); ``--target tiny`` (``--preset tiny``) runs a random tiny Qwen3 in
seconds. Writes ``<out>/bench_train.json`` (``bench_train_tiny.json`` for the tiny target). Never a
timed test.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, save_result, seed_opt
from mfd_theory.results import Result

__all__ = ["BenchTrainConfig", "main", "report", "run"]


@dataclass(frozen=True)
class BenchTrainConfig(Checked):
    preset: str = opt("default", "the preset file (experiments/bench_train/NAME.toml) these values started from, "
                      "set by --preset NAME")
    target: str = opt("qwen2.5-coder-0.5b-instruct", "a shipped target's name, a local HF model directory, or tiny "
                      "(a random tiny Qwen3)")
    block_size: int = opt(16, "block size", ge=2)
    layers: int = opt(1, "draft layers", ge=1)
    modes: int = opt(1, "K: mixture modes (1: the product drafter)", ge=1)
    target_layers: tuple[int, ...] = opt((1, 6, 11, 16, 21), "the target layers the drafter reads (empty: DFlash's "
                                         "default)", empty=True, ge=0)
    draft_vocab: int = opt(8192, "draft vocabulary size (0: the whole vocabulary)", ge=0)
    batch: int = opt(8, "sequences per step", ge=1)
    seq_len: int = opt(512, "tokens per sequence", ge=18)
    blocks_per_seq: tuple[int, ...] = opt((4, 16, 64), "blocks per sequence, one row each", ge=1)
    repeats: int = opt(3, "steps of each path per row, interleaved; the fastest of each is compared", ge=1)
    threads: int = opt(2, "torch CPU threads (0: leave torch's default)", ge=0)
    seed: int = seed_opt("seed of the sequences, block starts and drafter weights")
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        if self.seq_len < self.block_size + 2:
            raise ValueError(f"--seq-len: must be at least block size + 2 = {self.block_size + 2}, got {self.seq_len}")


def results_name(target: str) -> str:
    return "bench_train_tiny.json" if target == "tiny" else "bench_train.json"


def run(cfg: BenchTrainConfig, progress: bool = True) -> Result:
    from mfd_theory.runs.bench.bench_train import measure

    data = measure(cfg, progress)
    result = Result("bench_train", dataclasses.asdict(cfg), data, seed=cfg.seed)
    save_result(result, Path(cfg.out) / results_name(cfg.target))
    return result


def report(result: Result) -> str:
    d, c = result.data, result.config
    host = d.get("host") or {}
    lines = [f"target: {d['target']}, block {c['block_size']}, {c['layers']} draft layer(s), K = {c['modes']}, "
             f"target layers {d['target_layer_ids']}, draft vocabulary {c['draft_vocab'] or 'all'}, "
             f"{c['batch']} sequences of {c['seq_len']} tokens a step"]
    for r in d["rows"]:
        lines.append(f"  {r['blocks_per_seq']:4d} blocks a sequence ({r['block_rows']:6d} block rows, context up to "
                     f"{r['context_width']}): per_block {r['best_s']['per_block']:7.3f} s, shared "
                     f"{r['best_s']['shared']:7.3f} s a step = {r['ratio']:.2f}x; losses differ by "
                     f"{r['loss_difference']:.1e}")
    flags = " ".join(host.get("cpu_flags") or []) or "unknown"
    lines.append(f"host: {host.get('cpu') or 'unknown CPU'}, {host.get('cores')} cores; ISA flags: {flags}; numerics "
                 f"{host.get('mode')}, torch kernels {host.get('torch_cpu_capability')}, {host.get('torch_threads')} "
                 f"threads; load average after {d.get('load_after')}")
    return "\n".join(lines)


CLI = Command("bench train", __name__, BenchTrainConfig, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchTrainConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
