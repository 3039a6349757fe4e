"""The entry points of ``mfd distill``, ``mfd train-drafter``, ``mfd eval`` and ``mfd corpus``: each
reads and checks its inputs (prompt files, distilled data, source directories, the target directory)
before a model is loaded, then hands the work to its torch half
(:mod:`~mfd_theory.runs.pipeline.distill`, :mod:`~mfd_theory.runs.pipeline.train_drafter`,
:mod:`~mfd_theory.runs.pipeline.eval`, :mod:`~mfd_theory.runs.pipeline.corpus`), imported only
then. No torch import here: the commands (``mfd_theory.commands.pipeline.X``) are these
functions, and the drivers that run the three as steps (``mfd own-target``, ``mfd natural``,
``mfd real-drafters``) take them from :func:`mains`, so no command imports another.
"""

from __future__ import annotations

import json
from pathlib import Path

from mfd_theory.configs.pipeline.corpus import CLI as CORPUS, CorpusConfig
from mfd_theory.configs.pipeline.distill import CLI as DISTILL, DistillConfig
from mfd_theory.configs.pipeline.eval import CLI as EVAL, EvalConfig, calibration_sets, stored_options
from mfd_theory.configs.pipeline.local_target import check_target_dir, checkpoint_dir
from mfd_theory.configs.pipeline.tau import CLI as TAU, TauConfig
from mfd_theory.configs.pipeline.train_drafter import CLI as TRAIN_DRAFTER, TrainDrafterConfig

__all__ = ["corpus_main", "distill_main", "eval_main", "mains", "tau_main", "train_drafter_main"]


def distill_main(argv: list[str] | None = None) -> dict:
    """``mfd distill``; returns the manifest."""
    return DISTILL.main(argv, _distill)


def train_drafter_main(argv: list[str] | None = None) -> list[dict]:
    """``mfd train-drafter``; returns the loss curve."""
    return TRAIN_DRAFTER.main(argv, _train_drafter)


def eval_main(argv: list[str] | None = None):
    """``mfd eval``; returns the Result (None on the other torchrun ranks)."""
    return EVAL.main(argv, _eval)


def corpus_main(argv: list[str] | None = None) -> dict:
    """``mfd corpus``; returns the manifest (with this rank's timing)."""
    return CORPUS.main(argv, _corpus)


def tau_main(argv: list[str] | None = None):
    """``mfd tau``; returns the Result."""
    return TAU.main(argv, _tau)


def mains() -> dict:
    """The entry points (``main(argv)``) of distill, train-drafter and eval by command name: what a
    driver that runs them as steps uses."""
    return {"distill": distill_main, "train-drafter": train_drafter_main, "eval": eval_main}


def _distill(config: DistillConfig, opts) -> dict:
    from mfd_theory.llm.training.prompts import read_prompt_files

    prompts = read_prompt_files(config.prompts)  # every input read before a model is loaded
    check_target_dir(config.target)
    from mfd_theory.runs.pipeline.distill import distill

    return distill(config, prompts, opts.out, progress=not opts.quiet)


def _corpus(config: CorpusConfig, opts) -> dict:
    from mfd_theory.llm.training.code_corpus import source_roots

    source_roots(config.sources)  # every source directory checked before a model is loaded
    check_target_dir(config.target)
    from mfd_theory.runs.pipeline.corpus import corpus

    return corpus(config, opts.out, progress=not opts.quiet)


def _train_drafter(config: TrainDrafterConfig, opts) -> list[dict]:
    if config.init_from is not None and not (Path(config.init_from) / "config.json").is_file():
        raise ValueError(f"--init-from: no DFlash checkpoint (config.json) in {config.init_from}")
    from mfd_theory.llm.training.code_corpus import FORMAT as CORPUS_FORMAT, corpus_sequences
    from mfd_theory.llm.training.distill import load_distill_data

    # (sequences, prompt lengths, manifest), read before a model
    if _manifest_format(Path(config.data)) == CORPUS_FORMAT:
        data = corpus_sequences(config.data, config.corpus_part, "train", config.max_tokens)
    else:
        if config.max_tokens is not None:
            raise ValueError(f"--max-tokens: only with a corpus as --data ({config.data} is an mfd distill data set)")
        data = load_distill_data(config.data)
    check_target_dir(config.target)
    from mfd_theory.runs.pipeline.train_drafter import train

    return train(config, data, opts.out, progress=not opts.quiet)


def _manifest_format(directory: Path) -> str | None:
    """The ``format`` of ``directory/manifest.json`` (None when there is none or it is unreadable)."""
    try:
        return json.loads((directory / "manifest.json").read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def _eval(config: EvalConfig, opts):
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    prompts = read_prompt_files(config.prompts)
    prompts = shuffle_take(prompts, max(sum(p.dataset == q.dataset for q in prompts) for p in prompts))
    calib_sets = calibration_sets(prompts, config)  # {data set: calibration prompts}
    held = ({(p.dataset, p.id) for ps in calib_sets.values() for p in ps}
            if config.calibration_prompts is None else set())
    prompts = shuffle_take([p for p in prompts if (p.dataset, p.id) not in held], config.max_prompts)
    check_target_dir(config.target)
    drafters = [checkpoint_dir(p, "--drafter") for p in config.drafter]
    from mfd_theory.runs.pipeline.eval import evaluate

    return evaluate(config, stored_options(config, opts), prompts, calib_sets, drafters, opts.out,
                    progress=not opts.quiet)


def _tau(config: TauConfig, opts):
    from mfd_theory.llm.training.prompts import read_prompt_files

    if config.prompts:
        read_prompt_files(config.prompts)  # every input read before a model is loaded
    check_target_dir(config.target)
    drafters = [checkpoint_dir(p, "--drafter") for p in config.drafter]
    from mfd_theory.runs.pipeline.tau import tau

    return tau(config, opts.out, drafters, progress=not opts.quiet)
