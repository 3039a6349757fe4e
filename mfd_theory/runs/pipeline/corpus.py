"""The torch half of ``mfd corpus`` (:mod:`mfd_theory.commands.pipeline.corpus`): load the target,
build the corpus (:func:`mfd_theory.llm.training.code_corpus.build_corpus`), say what it holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from mfd_theory.llm.models.target import load_local_target
from mfd_theory.llm.training.code_corpus import build_corpus
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.numerics import current_numerics, numerics_provenance
from mfd_theory.runs.pipeline import say
from mfd_theory.validation import make_out_dir

__all__ = ["corpus"]

#: the config fields build_corpus takes by name (the rest name the target and the run)
_BUILD = ("min_bytes", "max_bytes", "max_line_chars", "span", "calib_fraction", "eval_fraction", "max_files",
          "shard_mib", "window", "top_k", "label_tokens", "heldout_label_tokens", "chunk_windows", "batch",
          "instructions", "max_answer_tokens")


def corpus(config, out_dir, progress: bool = True) -> dict:
    """Build (or resume) the corpus of ``config`` (a
    :class:`~mfd_theory.configs.pipeline.corpus.CorpusConfig`) in ``out_dir``; returns the manifest."""
    dist = setup(config.device)
    try:
        target, tok = load_local_target(config.target, dist.device, config.dtype)
        dtype = str(next(target.parameters()).dtype).replace("torch.", "")
        # what shapes the labels (hashed into the corpus); batch only up to round-off, so it is not here
        options = {"target": Path(str(config.target)).name, "dtype": dtype, "threads": torch.get_num_threads(),
                   "numerics": current_numerics(), "device_type": dist.device.split(":")[0]}
        out = make_out_dir(out_dir, "--out")
        kw = {k: getattr(config, k) for k in _BUILD}
        manifest = build_corpus(target, tok, out, options=options, sources=config.sources,
                                provenance={"numerics": numerics_provenance(), "torch": torch.__version__,
                                            "config": dataclasses.asdict(config)},
                                dist=dist, progress=progress, **kw)
        c, src, t = manifest["counts"], manifest["sources"], manifest["timing"]
        say(dist, f"{src['kept']} files kept of {src['listed']} listed (dropped: "
                  + ", ".join(f"{k} {v}" for k, v in src["dropped"].items()) + ")")
        say(dist, "tokens: " + ", ".join(f"{s} {c[s]['tokens']:,} ({c[s]['files']} files, "
                                         f"{c[s]['instructions']} instructions)" for s in c))
        rate = t.get("label_tokens_per_s")
        say(dist, f"labelled {manifest['n_labelled_tokens']:,} tokens (top-{config.top_k}, {dtype})"
                  + (f"; this run {rate:.0f} tokens/s on rank 0" if rate else ""))
        say(dist, f"corpus sha256 {manifest['corpus_sha256'][:16]}; wrote {Path(out) / 'manifest.json'}")
        return manifest
    finally:
        teardown(dist)
