"""The work behind ``mfd natural`` (config and command lines: :mod:`mfd_theory.commands.experiments.natural`).

Steps, kept in ``OUT/steps.json`` by :class:`~mfd_theory.runs.steps.Steps`: ``corpus``
(the standard library, BPE, prompt files), ``target`` (trained, with its held-out perplexity),
``ceiling`` (the target-only ceiling per held-out prompt and temperature, what ``mfd ceiling`` measures),
then the pipeline commands; every step's
output is pooled into ``OUT/natural.json``. Design: docs/results.md ("Real text: the standard library").
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from mfd_theory.results import Result, atomic_write_text, wrote
from mfd_theory.validation import make_out_dir

from mfd_theory.runs.steps import Steps, run_command_steps
from mfd_theory.llm.measure.perplexity import perplexity
from mfd_theory.llm.training.bpe import train_bpe
from mfd_theory.llm.training.train import LMConfig, LMTrainConfig, config_hash, lm_run_config, train_lm

__all__ = ["NaturalCorpusConfig", "build_corpus_dir", "ceiling_options", "load_corpus_dir",
           "run_ceiling", "run_natural", "natural_summary"]

DOMAINS = ("code", "prose")


@dataclasses.dataclass(frozen=True)
class NaturalCorpusConfig:
    """What the corpus (and so the target's cache key) depends on."""

    heldout_fraction: float
    max_units: int
    vocab_size: int
    tokenizer_chars: int
    prose_weight: int
    python: str
    stdlib: str


def _corpus_config(config) -> NaturalCorpusConfig:
    from mfd_theory.llm.training.natural_corpus import stdlib_root
    import platform

    return NaturalCorpusConfig(config.heldout_fraction, config.max_units, config.vocab_size, config.tokenizer_chars,
                               config.prose_weight, platform.python_version(), str(stdlib_root()))


def _subset(units, max_units: int):
    """``max_units`` code units and a quarter as many (at least 12) documentation topics, by hash."""
    from mfd_theory.llm.training.natural_corpus import unit_hash

    if not max_units:
        return units
    order = sorted(units, key=lambda u: (unit_hash(u.name, "subset"), u.name))
    code = [u for u in order if u.kind == "code"][:max_units]
    prose = [u for u in order if u.kind == "prose"][: max(12, max_units // 4)]
    return sorted(code + prose, key=lambda u: u.name)


def unseen_prompts(prompts: list[dict], seen: set[str], n: int) -> list[dict]:
    """The first ``n`` of ``prompts`` whose text is not in ``seen`` (and not an earlier one's);
    ``seen`` gains the texts taken."""
    out = []
    for p in prompts:
        if len(out) == n:
            break
        if p["prompt"] not in seen:
            seen.add(p["prompt"])
            out.append(p)
    return out


def build_corpus_dir(config, out: Path, progress: bool = True) -> dict:
    """The ``corpus`` step: ``out/corpus/`` and ``out/prompts/``; returns the provenance."""
    import mfd_theory.llm.training.natural_corpus as nc

    cdir, pdir = out / "corpus", out / "prompts"
    t0 = time.perf_counter()
    units = _subset(nc.list_units(), config.max_units)
    train, held = nc.split_units(units, config.heldout_fraction)
    if progress:
        print(f"corpus: {len(units)} units ({len(train)} train, {len(held)} held out) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    ordered = sorted(train, key=lambda u: (nc.unit_hash(u.name, "order"), u.name))
    # the tokenizer: every training topic, then code, until tokenizer_chars
    tok_texts, n = [], 0
    for u in [u for u in ordered if u.kind == "prose"] + [u for u in ordered if u.kind == "code"]:
        if n >= config.tokenizer_chars:
            break
        tok_texts.append(u.text[: config.tokenizer_chars - n])
        n += len(tok_texts[-1])
    tok = train_bpe(tok_texts, config.vocab_size)
    eos = int(tok.eos_token_id)

    def ids(texts):
        return [np.asarray(x + [eos], dtype=np.int32) for x in tok(texts, add_special_tokens=False)["input_ids"]]

    docs = [u.text for u in ordered for _ in range(config.prose_weight if u.kind == "prose" else 1)]
    nc.check_no_leak([u.text for u in ordered], held)
    stream = np.concatenate(ids(docs))
    heldout = {d: np.concatenate(ids([u.text for u in held if u.kind == d])) for d in DOMAINS}
    tmp = out / "corpus.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tok.save_pretrained(str(tmp / "tokenizer"))
    np.save(tmp / "stream.npy", stream)
    np.savez(tmp / "heldout.npz", **heldout)
    prov = nc.provenance(units, train, held)
    prov.update(tokens={"train_stream": int(stream.size), **{f"heldout_{d}": int(v.size) for d, v in heldout.items()}},
                vocab_size=len(tok), subset=bool(config.max_units))
    atomic_write_text(tmp / "provenance.json", json.dumps(prov, indent=1))
    # prompts: training units for distill (both domains, interleaved), held-out units for eval
    tc = nc.code_prompts(train, config.train_prompts, max_chars=config.code_chars)
    tp = nc.prose_prompts(train, config.train_prompts, max_chars=config.prose_chars)
    mixed = [p for pair in zip(tc, tp) for p in pair] + tc[len(tp):] + tp[len(tc):]
    pdir.mkdir(parents=True, exist_ok=True)
    nc.write_prompts(pdir / "train.jsonl", mixed, "train")
    # a held-out prompt whose text a training prompt also has (the standard library repeats some
    # paragraphs across modules) is in-sample for the drafters, and mfd eval refuses to calibrate
    # on one: such prompts are skipped, the next ones taken
    seen = {p["prompt"] for p in mixed}
    n, want = 2 * config.heldout_prompts, config.heldout_prompts
    nc.write_prompts(pdir / "code.jsonl", unseen_prompts(nc.code_prompts(held, n, max_chars=config.code_chars),
                                                         seen, want), "code")
    nc.write_prompts(pdir / "prose.jsonl", unseen_prompts(nc.prose_prompts(held, n, max_chars=config.prose_chars),
                                                          seen, want), "prose")
    if cdir.exists():
        shutil.rmtree(cdir)
    os.replace(tmp, cdir)
    return prov


def load_corpus_dir(cdir: Path, ccfg: NaturalCorpusConfig):
    """The corpus step's output as a :class:`~mfd_theory.llm.training.corpus.Corpus` (the training stream as
    its one training document) plus the held-out streams per domain."""
    from mfd_theory.llm.training.corpus import Corpus, load_tokenizer

    tok = load_tokenizer(cdir / "tokenizer")
    stream = np.load(cdir / "stream.npy").astype(np.int64)
    held = dict(np.load(cdir / "heldout.npz"))
    return Corpus(ccfg, tok, [], [], [stream], []), {d: held[d].astype(np.int64) for d in DOMAINS}


def ceiling_options(config):
    """The per-prompt options of the ceiling stage (:class:`~mfd_theory.llm.measure.ceiling.CeilingOptions`)."""
    from mfd_theory.llm.measure.ceiling import CeilingOptions

    # sized for a 1.8 M-parameter target on one CPU thread: big sampling batches (its cache is
    # small), 128 tokens of each 4096-token row for the fit, 40 EM iterations
    return CeilingOptions(L=config.block_size - 1, budgets=tuple(config.ceiling_budgets),
                          modes=tuple(config.ceiling_modes), samples=config.ceiling_samples, eps=config.dead_eps,
                          dead_at=config.dead_at, batch=256, top_k=128, fit_iters=40).check()


def run_ceiling(config, out: Path, progress: bool = True) -> None:
    """The ``ceiling`` step: :func:`~mfd_theory.llm.measure.ceiling.measure_ceiling` on the first
    ``ceiling_prompts`` held-out prompts of each domain at every ceiling temperature, one file per
    prompt and temperature under ``OUT/ceiling/prompts/``, pooled into ``OUT/ceiling/ceiling.json``."""
    from mfd_theory.ceiling_stats import pool_ceiling
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.measure.ceiling import measure_ceiling

    model, tok = load_local_target(str(out / "target"), config.device, "auto")
    contexts = []
    for dom in DOMAINS:
        lines = (out / "prompts" / f"{dom}.jsonl").read_text().splitlines()
        for p in [json.loads(x) for x in lines if x.strip()][: config.ceiling_prompts]:
            contexts.append((dom, p["id"], tok(p["prompt"], add_special_tokens=False)["input_ids"]))
    cdir = out / "ceiling"
    opts = ceiling_options(config)
    key = config_hash(opts, list(config.ceiling_temperatures), config.seed)
    t0 = time.perf_counter()
    records = measure_ceiling(model, contexts, config.ceiling_temperatures, opts, seed=config.seed,
                              out_dir=cdir / "prompts", key=key, progress=progress)
    res = Result("ceiling", config=dataclasses.asdict(config), data={
        "records": records, "pooled": pool_ceiling(records), "wall_s": round(time.perf_counter() - t0, 2)},
        seed=config.seed)
    res.save(cdir / "ceiling.json")


def _e2e(eval_path: Path, ceiling: dict) -> dict:
    """The eval's rows, the best-budget comparisons (MFD and DARTree against DDTree on the K = 1
    drafter, with eval's significance rules), the round cost, and the ceiling share reached."""
    from mfd_theory.llm.measure.evaluate import gain_entry

    if not eval_path.is_file():
        return {}
    ev = Result.load(eval_path).data
    rows = ev["rows"]
    keep = ("dataset", "temperature", "method", "scorer", "drafter", "K", "budget", "tau", "accepted_mean", "speedup",
            "speedup_std", "speedup_passes", "dead_share", "covered_mass_mean", "matches_ar", "n_prompts",
            "accepted_std", "n_steps", "prompt_ids", "prompt_tau", "prompt_tokens_per_s")
    # matches_ar: bool on greedy rows, null on sampled ones (not checked); lossless_checked says which
    out_rows = [{**{k: r.get(k) for k in keep}, "lossless_checked": r.get("matches_ar") is not None} for r in rows]
    comps, pairs = [], []
    for ds, temp in sorted({(r.get("dataset"), r["temperature"]) for r in rows}, key=lambda k: (str(k[0]), k[1])):
        at = [r for r in rows if r.get("dataset") == ds and r["temperature"] == temp and r["speedup"] is not None]
        base = [r for r in at if r["method"] == "ddtree" and r["K"] == 1 and "dartree" not in r["drafter"]]
        if not base:
            continue
        bs = max(base, key=lambda r: r["speedup"])
        for method in ("mfd", "ddtree", "dartree"):
            for label, scorer in dict.fromkeys((r["drafter"], r.get("scorer")) for r in at if r["method"] == method):
                mine = [r for r in at if r["method"] == method and r["drafter"] == label and r.get("scorer") == scorer]
                if method == "ddtree" and mine[0]["K"] == 1:
                    continue
                bm = max(mine, key=lambda r: r["speedup"])
                comps.append({"dataset": ds, "temperature": temp, "method": method, "scorer": scorer,
                              "drafter": label, "K": bm["K"], "budget": bm["budget"], "single_budget": bs["budget"]})
                pairs.append((bm, bs))
    for c, (bm, bs) in zip(comps, pairs):  # one table: Bonferroni over its entries
        c.update(gain_entry(bm, bs, family=len(comps)))
    prof = ev.get("round_profile") or {}
    cost = {}
    if prof.get("t_target_ms") and prof.get("t_draft_ms"):
        cost = {"t_target_ms": prof["t_target_ms"], "t_draft_ms": prof["t_draft_ms"],
                "target_over_draft": prof["t_target_ms"] / prof["t_draft_ms"],
                "verify_ms": dict(zip(map(str, prof.get("tree_sizes", [])), prof.get("verify_ms", []))),
                "verify_over_draft": {str(n): v / prof["t_draft_ms"]
                                      for n, v in zip(prof.get("tree_sizes", []), prof.get("verify_ms", []))}}
    reach = []
    for r in rows:
        if r["method"] in ("ar", "chain") or r["temperature"] != 1 or r.get("accepted_mean") is None:
            continue
        c = ((ceiling.get(r.get("dataset")) or {}).get("1") or {}).get("by_budget", {}).get(str(r["budget"]))
        cov = (c or {}).get("coverage", {})
        if cov.get("oracle", [None])[0]:
            reach.append({"dataset": r.get("dataset"), "method": r["method"], "scorer": r.get("scorer"),
                          "drafter": r["drafter"], "K": r["K"],
                          "budget": r["budget"], "accepted_mean": r["accepted_mean"],
                          "of_oracle": r["accepted_mean"] / cov["oracle"][0],
                          "of_product": r["accepted_mean"] / cov["product"][0] if cov["product"][0] else None})
    pred = ev.get("prediction") or {}
    prediction = {k: v for k, v in pred.items() if k != "cells"} if pred.get("n_cells") else None
    from mfd_theory.runs.experiments.e2e_ceiling import reach_rows

    gain_reach = reach_rows({"pooled": ceiling}, rows, None) if ceiling else []
    return {"rows": out_rows, "best_budget": comps, "cost": cost, "ceiling_reach": reach, "gain_reach": gain_reach,
            "prediction": prediction,
            "config": {k: v for k, v in Result.load(eval_path).config.items()
                       if k in ("budgets", "temperatures", "max_new_tokens", "max_prompts", "passes", "methods",
                                "calibration_count")}}


def natural_summary(config, out: Path) -> Result:
    """Pool every step's output into one Result (``OUT/natural.json``)."""
    steps = (json.loads((out / "steps.json").read_text()) if (out / "steps.json").is_file() else {}).get("steps", {})
    seconds = {k: v.get("seconds") for k, v in steps.items()}
    prov = json.loads((out / "corpus" / "provenance.json").read_text())
    target = json.loads((out / "target_eval.json").read_text()) if (out / "target_eval.json").is_file() else {}
    cfile = out / "ceiling" / "ceiling.json"
    ceiling = Result.load(cfile).data["pooled"] if cfile.is_file() else {}
    data = {"provenance": prov, "target": target, "ceiling": ceiling,
            "e2e": _e2e(out / "eval" / "eval.json", ceiling), "seconds": seconds,
            "total_seconds": round(sum(v for v in seconds.values() if v), 1)}
    curves = {}
    for name in [p.name for p in sorted(out.glob("drafter-*"))]:
        p = out / name / "loss_curve.json"
        if p.is_file():
            c = json.loads(p.read_text())
            curves[name] = {"first": c[0]["loss"], "last": c[-1]["loss"], "steps": len(c)}
    data["drafters"] = curves
    man = out / "data" / "manifest.json"
    if man.is_file():
        m = json.loads(man.read_text())
        data["distill"] = {"n_sequences": m.get("n_sequences"), "n_response_tokens": m.get("n_response_tokens")}
    return Result("natural", config=dataclasses.asdict(config), data=data, seed=config.seed)


def _target_configs(config) -> tuple[LMConfig, LMTrainConfig]:
    """The target's architecture and training run (what its step's key hashes)."""
    arch = LMConfig(hidden_size=config.hidden, num_layers=config.layers, num_heads=config.heads,
                    num_kv_heads=config.kv_heads, head_dim=config.hidden // config.heads,
                    intermediate_size=config.intermediate, max_position_embeddings=1024)
    tcfg = LMTrainConfig(seq_len=config.seq_len, batch_size=config.target_batch, steps=config.target_steps,
                         lr=config.target_lr, warmup=max(1, config.target_steps // 20),
                         ckpt_every=max(1, min(100, config.target_steps // 4)), seed=config.seed)
    return arch, tcfg


def _make_target(config, out: Path, ccfg: NaturalCorpusConfig, arch: LMConfig, tcfg: LMTrainConfig,
                 progress: bool) -> None:
    """The ``target`` step's work: train (resuming ``OUT/target_run``), save with the tokenizer into
    ``OUT/target``, and write its held-out perplexity per domain to ``OUT/target_eval.json``."""
    tdir = out / "target"
    corpus, held = load_corpus_dir(out / "corpus", ccfg)
    saved = out / "target_run" / "train_config.json"
    want = json.loads(json.dumps(lm_run_config(corpus, arch, tcfg), default=str))
    if saved.is_file() and json.loads(saved.read_text()) != want:
        shutil.rmtree(out / "target_run")  # a run of other options: start over
    state = out / "target_run" / "train_state" / "state.json"
    resumed = json.loads(state.read_text())["step"] if state.is_file() else 0
    t0 = time.perf_counter()
    model, curve = train_lm(corpus, out / "target_run", arch, tcfg, progress=progress, device=config.device)
    seconds = time.perf_counter() - t0
    tmp = out / "target.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp))
    corpus.tokenizer.save_pretrained(str(tmp))
    ppl = {d: perplexity(model, held[d], config.seq_len, config.ppl_windows, seed=config.seed) for d in DOMAINS}
    if tdir.exists():
        shutil.rmtree(tdir)
    os.replace(tmp, tdir)
    atomic_write_text(out / "target_eval.json", json.dumps({
        "perplexity": ppl, "train_seconds": round(seconds, 1), "resumed_from_step": resumed,
        "threads": config.threads,
        "params": int(sum(p.numel() for p in model.parameters())),
        "arch": dataclasses.asdict(arch), "train": dataclasses.asdict(tcfg),
        "loss_first": curve[0]["loss"], "loss_last": curve[-1]["loss"]}, indent=1))
    wrote(tdir)


def _run_steps(config, out: Path, steps: Steps, commands: list[tuple], progress: bool,
               prepare_only: bool) -> None:
    """corpus, target and ceiling, then the pipeline's commands (all but eval with ``prepare_only``),
    each keyed by its options and the keys of the steps it reads."""
    ccfg = _corpus_config(config)
    arch, tcfg = _target_configs(config)
    cdir, pdir = out / "corpus", out / "prompts"
    key_corpus = config_hash(ccfg, config.train_prompts, config.heldout_prompts, config.code_chars,
                             config.prose_chars, "heldout-prompts-unlike-training")
    steps.run("corpus", key_corpus, "the standard library, split by module; BPE; prompts", cdir,
              lambda: (cdir / "provenance.json").is_file() and (pdir / "prose.jsonl").is_file(),
              lambda: build_corpus_dir(config, out, progress))

    tdir = out / "target"
    key_target = config_hash(key_corpus, arch, tcfg, config.ppl_windows)
    steps.run("target", key_target, f"Qwen3 target {config.layers}x{config.hidden}, {config.target_steps} steps",
              tdir, lambda: (tdir / "config.json").is_file() and (out / "target_eval.json").is_file(),
              lambda: _make_target(config, out, ccfg, arch, tcfg, progress))

    # the ceiling needs the target alone; it runs before the pipeline
    ceil_dir = out / "ceiling"
    key_ceiling = config_hash(key_target, config.ceiling_prompts, ceiling_options(config),
                              config.ceiling_temperatures, config.seed)
    steps.run("ceiling", key_ceiling, "the target-only ceiling (mfd ceiling's measurement) on held-out prompts",
              ceil_dir, lambda: (ceil_dir / "ceiling.json").is_file(), lambda: run_ceiling(config, out, progress))

    keys = {"target": key_target, "corpus": key_corpus}
    quiet = [] if progress else ["--quiet"]
    run_command_steps(steps, [c for c in commands if not (prepare_only and c[1] == "eval")], keys,
                      ["target", "corpus"], config, quiet)


def run_natural(config, out_dir, commands: list[tuple], progress: bool = True,
                prepare_only: bool = False) -> Result | None:
    """Run or resume every step under ``out_dir``; returns the ``natural.json`` result.
    ``prepare_only``: every step before ``mfd eval`` (corpus, target, ceiling, distill, drafters),
    then stop and return None, writing no ``natural.json``.

    ``commands`` are the pipeline steps, each ``(name, command, argv, argv relative to the output
    directory, command line)``; they come from :mod:`mfd_theory.commands.experiments.natural`, which owns
    the config (this module stays below it)."""
    out = make_out_dir(Path(out_dir), "out_dir")
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {config.device!r} requested but CUDA is not available")
    steps = Steps(out / "steps.json")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(config.threads)
        _run_steps(config, out, steps, commands, progress, prepare_only)
    finally:
        torch.set_num_threads(threads)
    if prepare_only:
        return None
    res = natural_summary(config, out)
    existed = (out / "natural.json").exists()
    res.save(out / "natural.json")
    wrote(out / "natural.json", existed)
    return res

