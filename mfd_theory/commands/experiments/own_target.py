"""Your-own-target pipeline on a small local target: distill -> train-drafter K = 1, 2 -> eval.

``mfd own-target --out DIR`` (default ``results/own_target``) runs the three commands meant for
a user's own Hugging Face target (``mfd distill``, ``mfd train-drafter``, ``mfd eval``) on a
target small enough for a CPU, through their library entry points, with the arguments a user
would type. What it writes under ``DIR``:

* ``target/``: the target of ``mfd e2e --preset micro`` (a small Qwen3ForCausalLM trained on the
  synthetic corpus; trained by the e2e code, or loaded from its cache under ``DIR/cache``), saved
  with ``save_pretrained`` together with its byte-level BPE tokenizer (no chat template, so the
  commands use the raw prompt text);
* ``prompts/train.jsonl`` and ``prompts/heldout.jsonl``: the first ``prompt_words`` words of
  ``train_prompts`` training documents and of ``heldout_prompts`` held-out documents;
* ``data/`` (``mfd distill``), ``drafter-k1/`` and ``drafter-k2/`` (``mfd train-drafter``),
  ``eval/`` (``mfd eval``: ``eval.json``, ``per_prompt.jsonl``, figures);
* ``steps.json``: per step the command line it ran, whether it finished, and its wall time.

A rerun skips every finished step (and the commands themselves resume an interrupted one); a
step whose options changed, or whose input was remade, is redone from scratch, and so is
everything after it. :func:`command_lines` gives the exact commands, which docs/own-target.md shows.

The config lives here (no torch import); the work is in :mod:`mfd_theory.runs.experiments.own_target`.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from mfd_theory.validation import check_device
from mfd_theory.configs.options import budgets_opt, Checked, Command, opt, seed_opt, numerics_opt
from mfd_theory.configs.e2e import preset_config

__all__ = ["OwnTargetConfig", "command_lines", "commands", "e2e_config", "run", "main"]


@dataclasses.dataclass(frozen=True)
class OwnTargetConfig(Checked):
    """Defaults: about 2-3 minutes on 2 CPU cores, the target's training included."""

    seed: int = seed_opt("random seed of the target, the data, training and sampling")
    device: str = opt("cpu", "torch device of every step (cpu, cuda, cuda:N)")
    threads: int = opt(2, "torch threads for training the target, distilling and training drafters", ge=1)
    numerics: str | None = numerics_opt()
    eval_threads: int = opt(1, "torch threads for mfd eval (timing)", ge=1)
    cache_dir: str = opt("", "the target's checkpoint cache ('' means <out>/cache)")
    # the target
    target_preset: str = opt("micro", "the mfd e2e preset whose target (and corpus) is used",
                             choices=("default", "micro"))
    target_steps: int = opt(0, "target training steps (0: the preset's)", ge=0)
    # prompt files
    train_prompts: int = opt(96, "training documents whose first words make prompts/train.jsonl", ge=1)
    heldout_prompts: int = opt(19, "held-out documents whose first words make prompts/heldout.jsonl (the micro "
                                   "corpus has 19 whose first 8 words open no training prompt and no other)", ge=1)
    prompt_words: int = opt(8, "leading words of a document that make its prompt", ge=1)
    # mfd distill
    distill_new_tokens: int = opt(40, "mfd distill --max-new-tokens", ge=1)
    distill_temperature: float = opt(1.0, "mfd distill --temperature", ge=0)
    # mfd train-drafter
    modes: tuple[int, ...] = opt((1, 2), "mfd train-drafter --modes: one drafter per K (1 = product)", ge=1)
    block_size: int = opt(5, "mfd train-drafter --block-size", ge=2)
    drafter_steps: int = opt(600, "mfd train-drafter --steps", ge=1)
    drafter_batch: int = opt(16, "mfd train-drafter --batch-size", ge=1)
    drafter_lr: float = opt(3e-3, "mfd train-drafter --lr", gt=0)
    ckpt_every: int = opt(100, "mfd train-drafter --ckpt-every", ge=1)
    # mfd eval
    budgets: tuple[int, ...] = budgets_opt((8, 32), "mfd eval --budgets")
    temperatures: tuple[float, ...] = opt((0.0, 1.0), "mfd eval --temperatures (0 = greedy)", ge=0)
    eval_new_tokens: int = opt(32, "mfd eval --max-new-tokens", ge=1)
    eval_prompts: int = opt(11, "mfd eval --max-prompts", ge=1)
    passes: int = opt(3, "mfd eval --passes (timing passes)", ge=1)
    calibration_prompts: int = opt(8, "mfd eval --calibration-count: the first prompts of prompts/heldout.jsonl, held "
                                      "back and never evaluated, that predict every row before the evaluation (not "
                                      "the distilled prompts of train.jsonl, which mfd eval refuses)", ge=1)

    def validate(self) -> None:
        check_device("--device", self.device)
        if len(set(self.modes)) != len(self.modes):
            raise ValueError(f"--modes: each K once, got {self.modes}")
        try:
            n_held = e2e_config(self).n_heldout
        except ValueError as exc:  # the e2e preset's file is missing or refused
            if not str(exc).startswith("--preset"):
                raise
            raise ValueError(f"--target-preset: {str(exc).partition(': ')[2]}") from None
        if self.heldout_prompts <= self.calibration_prompts:
            raise ValueError(f"--heldout-prompts: {self.heldout_prompts} held-out prompts leave none to evaluate once "
                             f"--calibration-prompts {self.calibration_prompts} are held back for calibration")
        if self.heldout_prompts > n_held:
            raise ValueError(f"--heldout-prompts: the {self.target_preset} corpus has {n_held} held-out "
                             f"documents, got {self.heldout_prompts}")


def e2e_config(config: OwnTargetConfig):
    """The ``mfd e2e`` config whose corpus and target this experiment uses."""
    extra = {"target_steps": config.target_steps} if config.target_steps else {}
    return preset_config(config.target_preset, seed=config.seed, device=config.device, threads=config.threads,
                         cache_dir=config.cache_dir, **extra)


def _num_text(v: float) -> str:
    return f"{v:g}"


def commands(config: OwnTargetConfig, root: str | Path = ".") -> list[tuple[str, str, list[str]]]:
    """``(step, command, argv)`` in order, with every path under ``root`` (the output directory)."""
    root = Path(root)
    target = str(root / "target")
    common = ["--seed", str(config.seed), "--device", config.device]
    out = [("distill", "distill",
            ["--target", target, "--prompts", str(root / "prompts" / "train.jsonl"), "--out", str(root / "data"),
             "--max-new-tokens", str(config.distill_new_tokens), "--temperature", _num_text(config.distill_temperature),
             *common])]
    for K in config.modes:
        out.append((f"drafter-k{K}", "train-drafter",
                    ["--target", target, "--data", str(root / "data"), "--out", str(root / f"drafter-k{K}"),
                     "--modes", str(K), "--block-size", str(config.block_size), "--steps", str(config.drafter_steps),
                     "--batch-size", str(config.drafter_batch), "--lr", _num_text(config.drafter_lr),
                     "--ckpt-every", str(config.ckpt_every), *common]))
    drafters = [x for K in config.modes for x in ("--drafter", str(root / f"drafter-k{K}"))]
    out.append(("eval", "eval",
                ["--target", target, *drafters, "--prompts", str(root / "prompts" / "heldout.jsonl"),
                 "--out", str(root / "eval"), "--budgets", ",".join(map(str, config.budgets)),
                 "--temperatures", ",".join(map(_num_text, config.temperatures)),
                 "--max-new-tokens", str(config.eval_new_tokens), "--max-prompts", str(config.eval_prompts),
                 "--passes", str(config.passes),
                 "--calibration-count", str(config.calibration_prompts), *common]))
    return out


def command_lines(config: OwnTargetConfig, root: str | Path = ".") -> list[str]:
    """The steps as shell command lines (what a user types; paths relative to ``root``)."""
    return [shlex.join(["mfd", cmd, *argv]) for _, cmd, argv in commands(config, root)]


def run(config: OwnTargetConfig, out_dir: str | Path = "results/own_target", progress: bool = True) -> dict:
    """Run (or resume) every step under ``out_dir``, then print the evaluation's summary; returns
    ``steps.json``'s content."""
    from mfd_theory.runs.experiments.own_target import run_own_target
    from mfd_theory.report import own_target_summary

    out = Path(out_dir)
    steps = [(name, cmd, argv, rel, line) for (name, cmd, argv), (_, _, rel), line
             in zip(commands(config, out), commands(config), command_lines(config))]
    data = run_own_target(config, e2e_config(config), out, steps, progress=progress)
    summary = own_target_summary(out / "eval" / "eval.json")
    if summary:
        print("\n" + summary)
    return data


CLI = Command("own-target", __name__, OwnTargetConfig, __doc__, out="results/own_target", models=True)


def main(argv: list[str] | None = None) -> dict:
    return CLI.main(argv, lambda config, opts: run(config, opts.out, progress=not opts.quiet))


if __name__ == "__main__":
    main()
