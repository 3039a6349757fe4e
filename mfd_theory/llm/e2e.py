"""End-to-end orchestration: cached training stages, then decoding every method on held-out prompts.

Stages (each cached under ``cache_dir`` in a directory named by a hash of everything upstream, so
a rerun skips what is done and a changed option retrains only what depends on it):

1. corpus + BPE tokenizer                  ``corpus-<h>/``
2. target Qwen3ForCausalLM                 ``target-<h>/model`` (save_pretrained) + loss curve
3. plain draft LM (HF assisted baseline)   ``draftlm-<h>/model``
4. self-distillation data                  ``distill-<h>.npy`` (the target's T=1 continuations)
5. drafters K = 1 and K in ``modes``       ``drafter-k<K>-<h>/drafter`` (DFlash format) + curve
6. evaluation -> ``end_to_end.json`` (never cached: it is the measurement)

Measured quantities per (method, drafter, budget, temperature), pooled over prompts and rounds:
tau (tokens per target call, bonus included), accepted length mean/std, predicted acceptance (the
tree's covered mass under the decoding rule's conditionals, computed from the verify forward: at
T = 1 it is E[accepted] exactly, so measured and predicted must agree within the standard error
that the trees' exact acceptance variances give, ``coverage.variance_from_prefix_probs``; greedy
conditionals are one-hot, so there it equals the accepted length by construction and
``covered_mass_mean`` gives the soft T = 1 mass instead), the dead-node share (nodes whose
target prefix probability is below ``decode.DEAD_EPS``) and speedup (AR time per token
over the method's, same harness, same temperature).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mfd_theory.results import Result, atomic_write_bytes

# Everything imported up front (not inside the functions): a long run must not pick up a module
# that was edited while it was training.
from .assisted import hf_assisted_baseline
from .data import Corpus, CorpusConfig, build_corpus
from .decode import speculative_generate
from .drafter import build_drafter, load_drafter
from .target import TargetModel
from .train import (
    DrafterTrainConfig, LMConfig, LMTrainConfig, config_hash, make_distill_data,
    mode_diagnostics, target_fingerprint, train_drafter, train_lm,
)

__all__ = ["run_e2e", "evaluate", "mfd_gains", "format_table", "load_trained_drafter", "check_writable"]


def check_writable(out_dir: Path) -> Path:
    """Create ``out_dir`` and prove it is writable, or raise ValueError naming it."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"out_dir: cannot write to {out_dir}: {exc}") from exc
    return out_dir


def load_trained_drafter(directory: str | Path, target):
    """Load a drafter saved by :func:`~mfd_theory.llm.train.train_drafter`, refusing one trained
    for another target (``target_fingerprint.json`` beside the checkpoint must match)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"directory: drafter checkpoint {directory} does not exist")
    fp_path = directory / "target_fingerprint.json"
    try:
        saved = json.loads(fp_path.read_text())["target"]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise ValueError(f"directory: {directory} has no readable target_fingerprint.json: {exc}") from exc
    if saved != target_fingerprint(target):
        raise ValueError(f"directory: drafter in {directory} was trained for another target "
                         f"(fingerprint {saved}, this target {target_fingerprint(target)})")
    try:
        drafter = load_drafter(directory, target)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"directory: corrupt drafter checkpoint in {directory}: {exc}") from exc
    return drafter.eval()


# --------------------------------------------------------------------------------------- stages


def _lm_configs(cfg, draft: bool):
    if draft:
        arch = LMConfig(hidden_size=cfg.draft_lm_hidden, num_layers=cfg.draft_lm_layers,
                        num_heads=max(1, cfg.draft_lm_hidden // 32), num_kv_heads=1, head_dim=32,
                        intermediate_size=2 * cfg.draft_lm_hidden)
        # Trained like the block drafters: the same number of steps.
        steps = cfg.drafter_steps
    else:
        arch = LMConfig(hidden_size=cfg.target_hidden, num_layers=cfg.target_layers,
                        num_heads=cfg.target_heads, num_kv_heads=cfg.target_kv_heads,
                        head_dim=cfg.target_hidden // cfg.target_heads,
                        intermediate_size=cfg.target_intermediate)
        steps = cfg.target_steps
    train = LMTrainConfig(seq_len=cfg.seq_len, batch_size=cfg.target_batch, steps=steps,
                          lr=cfg.target_lr, warmup=max(1, steps // 20), ckpt_every=cfg.ckpt_every,
                          seed=cfg.seed)
    return arch, train


def _corpus(cfg, cache: Path) -> Corpus:
    ccfg = CorpusConfig(n_train=cfg.n_train, n_heldout=cfg.n_heldout, vocab_size=cfg.vocab_size,
                        seed=cfg.seed)
    d = cache / f"corpus-{config_hash(ccfg)}"
    if (d / "corpus.json").is_file():
        return Corpus.load(d)
    corpus = build_corpus(ccfg)
    corpus.save(d)
    return corpus


def _distill(cfg, corpus, target_hf, tdir: Path, cache: Path, progress: bool) -> tuple[np.ndarray, Path]:
    h = config_hash(tdir.name, cfg.distill_prompts, cfg.prompt_len, cfg.distill_gen_len,
                    cfg.distill_temperature, cfg.seed)
    path = cache / f"distill-{h}.npy"
    if path.is_file():
        try:
            return np.load(path), path
        except (OSError, ValueError):
            path.unlink()  # a damaged cache file is rebuilt
    prompts = corpus.prompts(cfg.distill_prompts, cfg.prompt_len, "train", seed=cfg.seed + 1)
    data = make_distill_data(target_hf, prompts, cfg.distill_gen_len, cfg.distill_temperature,
                             seed=cfg.seed, progress=progress)
    buf = io.BytesIO()
    np.save(buf, data)
    atomic_write_bytes(path, buf.getvalue())
    return data, path


def _drafter(cfg, K: int, target_hf, corpus, data, dpath: Path, cache: Path, progress: bool):
    dcfg = DrafterTrainConfig(
        block_size=cfg.block_size, num_layers=cfg.drafter_layers, num_modes=K,
        batch_size=cfg.drafter_batch, blocks_per_seq=cfg.blocks_per_seq, steps=cfg.drafter_steps,
        lr=cfg.drafter_lr, warmup=max(1, cfg.drafter_steps // 20), balance=cfg.balance,
        ckpt_every=cfg.ckpt_every, seed=cfg.seed,
    )
    run_dir = cache / f"drafter-k{K}-{config_hash(dcfg, dpath.name)}"
    if (run_dir / "drafter" / "config.json").is_file() and (run_dir / "loss_curve.json").is_file():
        return (load_trained_drafter(run_dir / "drafter", target_hf),
                json.loads((run_dir / "loss_curve.json").read_text()))
    drafter = build_drafter(target_hf, cfg.block_size, cfg.drafter_layers, num_modes=K, seed=cfg.seed,
                            mask_token_id=corpus.mask_id)
    curve = train_drafter(target_hf, drafter, data, cfg.prompt_len, run_dir, dcfg, progress=progress,
                          desc=f"drafter K={K}")
    return drafter.eval(), curve


# --------------------------------------------------------------------------------------- evaluation


def _cells(cfg, drafters: dict[int, Any]) -> list[tuple[str, str, int, Any]]:
    """(method, drafter label, budget, drafter) in evaluation order."""
    L = cfg.block_size - 1
    cells = [("chain", "product", L, drafters[1])]
    cells += [("ddtree", "product", b, drafters[1]) for b in cfg.budgets]
    for K in cfg.modes:
        cells += [("mfd", f"mfd-k{K}", b, drafters[K]) for b in cfg.budgets]
        if cfg.ddtree_on_mfd:
            cells += [("ddtree", f"mfd-k{K}", b, drafters[K]) for b in cfg.budgets]
    return cells


class _Acc:
    """Per-cell accumulator over prompts: rounds' records, tokens, time and the outputs."""

    def __init__(self):
        self.acc, self.pred, self.cov, self.dead, self.dead_spl, self.sizes = [], [], [], [], [], []
        self.pvar = []
        self.tokens, self.secs, self.split, self.outputs = 0, 0.0, {}, []

    def add(self, res) -> None:
        self.tokens += len(res.tokens)
        # Decoding time = prefill + the rounds' draft/tree/verify/walk/commit; the coverage
        # bookkeeping for the metrics (between walk and commit) is measurement, not decoding.
        self.secs += res.t_prefill + sum(s.t_step for s in res.steps)
        self.outputs.append(list(res.tokens))
        for k, v in res.time_split().items():
            self.split[k] = self.split.get(k, 0.0) + v
        for s in res.steps:
            self.acc.append(s.accepted)
            self.pred.append(s.predicted)
            self.pvar.append(s.predicted_var)
            self.cov.append(s.covered_mass)
            self.sizes.append(s.tree_size)
            if s.tree_size:
                self.dead.append(s.dead_share)
                self.dead_spl.append(s.dead_splices / s.tree_size)

    def arrays(self) -> dict:
        a = lambda x: np.asarray(x, dtype=float)  # noqa: E731
        return dict(acc=a(self.acc), pred=a(self.pred), pvar=a(self.pvar), cov=a(self.cov),
                    dead=a(self.dead), dead_spl=a(self.dead_spl), sizes=a(self.sizes), tokens=self.tokens, secs=self.secs,
                    split=self.split)


def _row(method, label, K, budget, temperature, m, ar_tpt) -> dict:
    n = len(m["acc"])
    diff = m["acc"] - m["pred"]
    # s.e. of the mean gap from the trees' exact variances: given the history, round t's
    # accepted - predicted has mean 0 and variance predicted_var_t, so the sum of the gaps has
    # variance sum_t predicted_var_t (a martingale). The empirical std of the gaps would
    # collapse on rare events (0 accepted in every round gives std 0 and a huge |z|).
    se = float(math.sqrt(m["pvar"].sum()) / n) if n else float("nan")
    tpt = m["secs"] / max(1, m["tokens"])
    mean = lambda a: float(a.mean()) if len(a) else float("nan")  # noqa: E731
    return {
        "method": method, "drafter": label, "K": K, "budget": int(budget), "temperature": float(temperature),
        "tau": float(m["acc"].mean() + 1) if n else float("nan"),
        "accepted_mean": mean(m["acc"]),
        "accepted_std": float(m["acc"].std(ddof=1)) if n > 1 else float("nan"),
        "predicted_accepted_mean": mean(m["pred"]),
        "covered_mass_mean": mean(m["cov"]),
        "pred_gap_se": se,
        "pred_gap_z": float(diff.mean() / se) if n and se > 0 else float("nan"),
        "n_steps": n, "n_tokens": int(m["tokens"]), "seconds": float(m["secs"]),
        "tokens_per_s": m["tokens"] / m["secs"] if m["secs"] > 0 else float("nan"),
        "speedup": ar_tpt / tpt if tpt > 0 else float("nan"),
        "dead_share": mean(m["dead"]), "dead_splice_share": mean(m["dead_spl"]),
        "mean_tree_size": mean(m["sizes"]),
        "time_split": {k: float(v) for k, v in m["split"].items()},
    }


def evaluate(cfg, target, drafters: dict[int, Any], prompts: np.ndarray, progress: bool = True) -> list[dict]:
    """All rows: for each temperature, ar and every cell.

    Prompts are the outer loop and cells the inner one, so every method (and ar) is timed
    interleaved with the others: slow drift of a shared machine hits all of them alike.
    At T = 0 each row also records whether its outputs equal ar's (``matches_ar``: lossless).
    """
    from tqdm.auto import tqdm

    cells = [("ar", "none", 1, None)] + _cells(cfg, drafters)
    # Warm-up: numba compiles the tree builders and torch picks its kernels before any timing.
    for temp in cfg.temperatures:
        for method, _, budget, drafter in cells:
            speculative_generate(target, drafter, torch.from_numpy(prompts[0]), 4, method, budget=budget,
                                 temperature=temp, seed=0, eos_token_id=[])
    rows = []
    bar = tqdm(total=len(cfg.temperatures) * len(prompts) * len(cells), desc="evaluate",
               disable=not progress, leave=False)
    for temp in cfg.temperatures:
        accs = [_Acc() for _ in cells]
        for i, p in enumerate(prompts):
            for (method, label, budget, drafter), acc in zip(cells, accs):
                acc.add(speculative_generate(target, drafter, torch.from_numpy(p), cfg.max_new_tokens,
                                             method, budget=budget, temperature=temp,
                                             seed=cfg.seed + 1000 * i, eos_token_id=[]))
                bar.update(1)
        ar = accs[0]
        ar_tpt = ar.secs / max(1, ar.tokens)
        for (method, label, budget, drafter), acc in zip(cells, accs):
            K = 0 if drafter is None else int(drafter.num_modes)
            row = _row(method, label, K, 0 if method == "ar" else budget, temp, acc.arrays(), ar_tpt)
            if temp == 0:
                row["matches_ar"] = acc.outputs == ar.outputs
            rows.append(row)
    bar.close()
    return rows


def _diff_z(a: dict, b: dict) -> float:
    """(tau_a - tau_b) over the standard error of the difference of two independent round means."""
    try:
        var = a["accepted_std"] ** 2 / a["n_steps"] + b["accepted_std"] ** 2 / b["n_steps"]
        return float((a["tau"] - b["tau"]) / math.sqrt(var)) if var > 0 else float("nan")
    except (KeyError, TypeError, ZeroDivisionError):
        return float("nan")


def mfd_gains(rows: list[dict]) -> list[dict]:
    """MFD (and ddtree over an MFD drafter's marginals) against the single-mode product drafter.

    Per budget: against the product drafter's ddtree at the same budget. ``budget == "best"``
    rows: each method at its best budget against the best single-mode tree (chain or ddtree at
    any budget), separately for tau and for speedup. Gains are ratios minus one.
    """
    out = []
    for temp in sorted({r["temperature"] for r in rows}):
        at = [r for r in rows if r["temperature"] == temp]
        single = [r for r in at if r["drafter"] == "product"]
        if not single:
            continue
        same = {r["budget"]: r for r in single if r["method"] == "ddtree"}
        for r in at:
            if r["drafter"] in ("product", "none") or r["budget"] not in same:
                continue
            base = same[r["budget"]]
            out.append({"temperature": temp, "method": r["method"], "drafter": r["drafter"],
                        "budget": r["budget"], "tau": r["tau"], "speedup": r["speedup"],
                        "single_tau": base["tau"], "single_speedup": base["speedup"],
                        "tau_gain": r["tau"] / base["tau"] - 1,
                        "tau_diff_z": _diff_z(r, base),
                        "speedup_gain": r["speedup"] / base["speedup"] - 1})
        for label in sorted({r["drafter"] for r in at if r["drafter"] not in ("product", "none")}):
            for method in ("mfd", "ddtree"):
                mine = [r for r in at if r["drafter"] == label and r["method"] == method]
                if not mine:
                    continue
                bm = max(mine, key=lambda r: r["speedup"])
                bs = max(single, key=lambda r: r["speedup"])
                bt, bst = max(mine, key=lambda r: r["tau"]), max(single, key=lambda r: r["tau"])
                out.append({"temperature": temp, "method": method, "drafter": label, "budget": "best",
                            "tau": bt["tau"], "speedup": bm["speedup"], "best_budget": bm["budget"],
                            "single_tau": bst["tau"], "single_speedup": bs["speedup"],
                            "single_best_budget": bs["budget"],
                            "tau_gain": bt["tau"] / bst["tau"] - 1,
                            "speedup_gain": bm["speedup"] / bs["speedup"] - 1})
    return out


def prediction_summary(rows: list[dict]) -> dict:
    """How well measured acceptance matches the trees' predicted (covered) mass at T > 0.

    Each row's z is sum_t (accepted_t - predicted_t) / sqrt(sum_t predicted_var_t), the
    variances exact from each round's tree; if the theory holds they are roughly standard
    normal: about 95% within +-2, sum of z^2 near the row count.
    """
    zs = [r["pred_gap_z"] for r in rows if r["temperature"] > 0 and r["method"] != "ar"
          and isinstance(r.get("pred_gap_z"), float) and not math.isnan(r["pred_gap_z"])]
    if not zs:
        return {"n_rows": 0}
    z = np.asarray(zs)
    return {"n_rows": len(zs), "mean_z": float(z.mean()), "max_abs_z": float(np.abs(z).max()),
            "share_abs_z_below_2": float((np.abs(z) < 2).mean()), "sum_z2": float((z ** 2).sum())}


def format_table(data: dict) -> str:
    """A markdown table of the rows (what the README reports)."""
    lines = ["| T | method | drafter | N | tau | accepted (mean +- std) | predicted | covered@T1 | "
             "z | speedup | dead share |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    def f(v, p=2):
        # Saved results hold NaN as the string "nan"; missing values print as "-".
        if not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:.{p}f}"

    for r in data["rows"]:
        lines.append(
            f"| {r['temperature']:g} | {r['method']} | {r['drafter']} | {r['budget']} | {f(r['tau'])} | "
            f"{f(r['accepted_mean'])} +- {f(r['accepted_std'])} | {f(r['predicted_accepted_mean'])} | "
            f"{f(r['covered_mass_mean'])} | {f(r['pred_gap_z'], 1)} | {f(r['speedup'])} | "
            f"{f(r['dead_share'])} |")
    gains = [g for g in data.get("mfd_gains", []) if g["budget"] == "best"]
    if gains:
        lines += ["", "| T | method | drafter | best tau | single tau | tau gain | best speedup | "
                  "single speedup | speedup gain |", "|---|---|---|---|---|---|---|---|---|"]
        for g in gains:
            lines.append(f"| {g['temperature']:g} | {g['method']} | {g['drafter']} | {f(g['tau'])} | "
                         f"{f(g['single_tau'])} | {100 * g['tau_gain']:+.1f}% | {f(g['speedup'])} | "
                         f"{f(g['single_speedup'])} | {100 * g['speedup_gain']:+.1f}% |")
    per = [g for g in data.get("mfd_gains", []) if g["budget"] != "best"]
    if per:
        lines += ["", "| T | method | drafter | N | tau | product ddtree tau | tau gain | z | speedup gain |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for g in per:
            lines.append(f"| {g['temperature']:g} | {g['method']} | {g['drafter']} | {g['budget']} | "
                         f"{f(g['tau'])} | {f(g['single_tau'])} | {100 * g['tau_gain']:+.1f}% | "
                         f"{f(g.get('tau_diff_z'), 1)} | {100 * g['speedup_gain']:+.1f}% |")
    pc = data.get("prediction_check") or {}
    if pc.get("n_rows"):
        lines += ["", f"T > 0, measured vs predicted acceptance over {pc['n_rows']} rows: mean z "
                  f"{pc['mean_z']:+.2f}, max |z| {pc['max_abs_z']:.2f}, {100 * pc['share_abs_z_below_2']:.0f}% "
                  f"within +-2, sum z^2 = {pc['sum_z2']:.1f}"]
    hf = data.get("hf_assisted") or []
    if hf:
        lines += ["", "| T | HF method | tokens/s | speedup vs HF AR |", "|---|---|---|---|"]
        for r in hf:
            lines.append(f"| {r['temperature']:g} | {r['method']} | {f(r['tokens_per_s'], 1)} | {f(r['speedup'])} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- driver


def run_e2e(cfg, out_dir: str | Path, progress: bool = True) -> Result:
    """Train (cached) and evaluate per ``cfg`` (an :class:`~mfd_theory.experiments.e2e.E2EConfig`)."""
    out_dir = check_writable(Path(out_dir))
    cache = check_writable(Path(cfg.cache_dir) if cfg.cache_dir else out_dir / "cache")
    if cfg.block_size < 2:
        raise ValueError(f"block_size: must be >= 2, got {cfg.block_size}")
    if not cfg.budgets or min(cfg.budgets) < 1:
        raise ValueError(f"budgets: need positive budgets, got {cfg.budgets}")
    if any(k < 2 for k in cfg.modes):
        raise ValueError(f"modes: MFD drafters need K >= 2, got {cfg.modes}")
    torch.set_num_threads(cfg.threads)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {cfg.device!r} requested but CUDA is not available")
    if cfg.eval_threads < 1 or cfg.threads < 1:
        raise ValueError(f"threads/eval_threads: must be >= 1, got {cfg.threads}/{cfg.eval_threads}")
    times: dict[str, float] = {}
    t0 = time.perf_counter()

    corpus = _corpus(cfg, cache)
    times["corpus"] = time.perf_counter() - t0
    arch, train = _lm_configs(cfg, draft=False)
    tdir = cache / f"target-{config_hash(arch, train, corpus.config)}"
    t = time.perf_counter()
    target_hf, target_curve = train_lm(corpus, tdir, arch, train, progress=progress, desc="target",
                                       device=cfg.device)
    times["target"] = time.perf_counter() - t
    for p in target_hf.parameters():
        p.requires_grad_(False)

    draft_lm, draft_curve = None, []
    if cfg.hf_assisted:
        darch, dtrain = _lm_configs(cfg, draft=True)
        t = time.perf_counter()
        draft_lm, draft_curve = train_lm(corpus, cache / f"draftlm-{config_hash(darch, dtrain, corpus.config)}",
                                         darch, dtrain, progress=progress, desc="draft LM",
                                         device=cfg.device)
        times["draft_lm"] = time.perf_counter() - t

    t = time.perf_counter()
    data, dpath = _distill(cfg, corpus, target_hf, tdir, cache, progress)
    times["distill"] = time.perf_counter() - t
    drafters, curves = {}, {}
    for K in (1, *cfg.modes):
        t = time.perf_counter()
        drafters[K], curves[K] = _drafter(cfg, K, target_hf, corpus, data, dpath, cache, progress)
        times[f"drafter_k{K}"] = time.perf_counter() - t

    # Held-out self-distillation blocks (other prompts, other seed) for the mode diagnostics.
    held = make_distill_data(target_hf, corpus.prompts(32, cfg.prompt_len, "heldout", seed=cfg.seed + 3),
                             cfg.distill_gen_len, cfg.distill_temperature, seed=cfg.seed + 3,
                             progress=False)
    modes_diag = {f"mfd-k{K}": mode_diagnostics(target_hf, drafters[K], held, cfg.prompt_len, seed=cfg.seed)
                  for K in cfg.modes}
    target = TargetModel(target_hf)
    prompts = corpus.prompts(cfg.eval_prompts, cfg.prompt_len, "heldout", seed=cfg.seed + 2)
    # Decoding a small model is a chain of tiny kernels: one thread avoids OpenMP barriers, which
    # stall badly when the machine's cores are shared.
    torch.set_num_threads(cfg.eval_threads)
    t = time.perf_counter()
    rows = evaluate(cfg, target, drafters, prompts, progress=progress)
    times["evaluate"] = time.perf_counter() - t
    hf_rows = []
    if draft_lm is not None:
        t = time.perf_counter()
        hf_rows = hf_assisted_baseline(target_hf, draft_lm, prompts, cfg.max_new_tokens,
                                       cfg.temperatures, seed=cfg.seed)
        times["hf_assisted"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0

    def thin(curve, keys=("step", "loss", "nll", "acc1")):
        return [{k: c[k] for k in c if k in keys or k.startswith("usage")} for c in curve]

    payload = {
        "rows": rows,
        "mfd_gains": mfd_gains(rows),
        "prediction_check": prediction_summary(rows),
        "mode_diagnostics": modes_diag,
        "hf_assisted": hf_rows,
        "loss_curves": {"target": thin(target_curve), "draft_lm": thin(draft_curve),
                        **{("product" if K == 1 else f"mfd-k{K}"): thin(c) for K, c in curves.items()}},
        "corpus": {"vocab_size": corpus.vocab_size, "train_docs": len(corpus.train_docs),
                   "heldout_docs": len(corpus.heldout_docs), "train_tokens": int(len(corpus.stream())),
                   "tokenizer": "byte-level BPE (tokenizers), trained on the train split",
                   "example": corpus.train_docs[0]},
        "prompts": prompts,
        "eval_texts": [corpus.tokenizer.decode(p.tolist()) for p in prompts[:3]],
        "cache_dir": str(cache),
        "timings_s": times,
        "host_threads": torch.get_num_threads(),
    }
    result = Result("end_to_end", config=dataclasses.asdict(cfg), data=payload, seed=cfg.seed)
    result.save(out_dir / "end_to_end.json")
    return result
