"""The work of ``mfd mixture-gain`` (its config and command: :mod:`mfd_theory.commands.theory.mixture_gain`, whose
page says what it computes): the cells, their store and the summaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time
from typing import Any

import numpy as np

from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.fit import fit_mixture, fit_mixture_exact, log_likelihood
from mfd_theory.layouts import long_cell, widen_cell, curve_grid, headline_k
from mfd_theory.results import wrote, Result, ResultStore
from mfd_theory.speedup import (
    best_fixed_budget,
    default_profile,
    load_latency_profile,
    per_step_budget,
    sequoia_choice,
    speedup,
)
from mfd_theory.synthetic import make
from mfd_theory.runs.theory import cell_config, cell_key
from mfd_theory.trees import mixture_tree, oracle_tree, product_tree


NAME = "mixture_gain"


# fields that only choose which cells run; a stored cell stays valid when they change
_SWEEP_FIELDS = ("families", "Fs", "two_futures_ms", "seeds", "confidences", "confidence_Fs")


def _single_future(t):
    """The family's first future alone (F = 1): a product target with one mode."""
    target = MixtureOfProducts(np.zeros(1), t.target.log_q[:1])
    return target, t.futures[:1]


def make_target(family: str, F: int, m: int | None, seed: int, L: int, confidence: float | None = None):
    """(target MixtureOfProducts, futures [F, L], params) for one cell."""
    if confidence is not None:
        t = make("zipf_futures", seed=seed, L=L, F=max(F, 2), accuracies=np.full(L, confidence))
    elif family == "two_futures":
        t = make(family, seed=seed, L=L, m=m if m is not None else 4)
    else:
        t = make(family, seed=seed, L=L, F=max(F, 2))
    if F == 1:
        target, futures = _single_future(t)
    else:
        target, futures = t.target, t.futures
    return target, futures, dict(t.params)


def _chimera_share(tree, futures: np.ndarray) -> np.ndarray:
    """float [N]: share of the first N nodes that splice the futures but follow none of them."""
    from mfd_theory.coverage import spliced_chimera_mask

    return np.cumsum(spliced_chimera_mask(tree, futures)) / np.arange(1, len(tree) + 1)


def _curve(tree, target: MixtureOfProducts) -> np.ndarray:
    """[N + 1]: C(T_n) for n = 0..N, the first n nodes of a best-first tree being T_n."""
    p = np.exp(target.node_log_probs(tree))  # [N]
    return np.concatenate([[0.0], np.cumsum(p)])


def _acceptance_vector(product: MixtureOfProducts, target: MixtureOfProducts, ranks: int) -> np.ndarray:
    """Chance that the r-th ranked token of the product drafter's marginal is the target's token,
    averaged over positions (Sequoia's positional model, which ignores where the walk stands)."""
    tm = np.exp(target.marginals().log_q[0])  # [L, V]
    order = np.argsort(-product.log_q[0], axis=1, kind="stable")[:, :ranks]  # [L, r]
    acc = np.take_along_axis(tm, order, axis=1).mean(axis=0)  # [r]
    return np.minimum(acc, 1.0) / max(1.0, acc.sum())


def _profiles(config):
    profs = [default_profile(name) for name in config.profiles]
    if config.profile_path:
        profs.append(load_latency_profile(config.profile_path, make_monotone=True))  # timing noise
    return profs


def run_cell(config, family: str, F: int, m: int | None, seed: int,
             confidence: float | None = None) -> dict[str, Any]:
    target, futures, params = make_target(family, F, m, seed, config.L, confidence)
    V = target.V
    max_n = max(config.budgets)
    bidx = np.asarray(config.budgets)
    grid = curve_grid(max_n)
    profiles = _profiles(config)
    x = target.sample(config.n_samples, seed=10_000 + seed)  # [n, L]

    oracle = oracle_tree(target, max_n)
    oc = _curve(oracle, target)  # [n + 1]
    oc = np.concatenate([oc, np.full(max_n + 1 - oc.shape[0], oc[-1])])  # the support ran out
    out: dict[str, Any] = dict(
        family=family, F=F, m=m, seed=seed, L=config.L, V=V, params=params, confidence=confidence,
        exact=bool(np.all(np.isneginf(target.log_q) | (target.log_q == 0.0))),
        oracle=dict(coverage=oc[bidx].tolist(), curve=oc[grid].tolist(),
                    n_nodes=len(oracle)),
        curve_n=grid.tolist(),
        drafters=[],
    )
    fixed = {p.name: best_fixed_budget(oc, p) for p in profiles}
    out["oracle"]["best"] = {k: dict(budget=v.budget, speedup=v.speedup) for k, v in fixed.items()}

    fits = []
    hk = headline_k(config.Ks)
    for K in config.Ks if confidence is None else (1, hk):
        fits.append((K, "soft", "samples"))
        if K > 1 and config.hard and confidence is None:
            fits.append((K, "hard", "samples"))
        if K > 1 and config.exact_fit and confidence is None:
            fits.append((K, "soft", "exact"))
    product_model = None
    for K, assignment, source in fits:
        t0 = time.perf_counter()
        kw = dict(smoothing=config.smoothing, n_restarts=config.n_restarts,
                  max_iter=config.max_iter, tol=config.tol, assignment=assignment)
        if source == "samples":
            model = fit_mixture(x, K, V, seed=seed, **kw)
        else:
            model = fit_mixture_exact(target, K, seed=seed, **{**kw, "tol": 1e-9})
        fit_s = time.perf_counter() - t0
        if K == 1:
            tree = product_tree(model.log_q[0], max_n)
            product_model = model
        else:
            tree = mixture_tree(model.log_pi, model.log_q, max_n)
        cov = _curve(tree, target)  # [n + 1], n = len(tree) <= max_n
        cov = np.concatenate([cov, np.full(max_n + 1 - cov.shape[0], cov[-1])])  # no node to add
        q_gain = np.exp(model.node_log_probs(tree))  # [n]: the drafter's own predicted gains
        chim = _chimera_share(tree, futures)
        chim = np.concatenate([chim, np.full(max_n - chim.shape[0], chim[-1])])
        row = dict(
            K=K, assignment=assignment, source=source, fit_seconds=fit_s,
            log_lik=log_likelihood(model, x),
            coverage=cov[bidx].tolist(),
            curve=cov[grid].tolist(),
            frac_oracle=(cov[bidx] / oc[bidx]).tolist(),
            chimera_share=chim[bidx - 1].tolist(),
            best={}, per_step={}, speedup_at={},
        )
        for p in profiles:
            b = best_fixed_budget(cov, p)
            row["best"][p.name] = dict(budget=b.budget, speedup=b.speedup, coverage=float(cov[b.budget]))
            n_step = per_step_budget(q_gain, p, max_budget=max_n)
            row["per_step"][p.name] = dict(budget=n_step, coverage=float(cov[n_step]),
                                           step_ms=float(p.step_ms(n_step)))
            row["speedup_at"][p.name] = speedup(cov[bidx], bidx, p).tolist()
        out["drafters"].append(row)

    if F == 1 and config.noise_repeats > 0 and confidence is None:
        reps: dict[str, list] = {"product": [], "mixture": []}
        for r in range(config.noise_repeats):
            xr = target.sample(config.n_samples, seed=20_000 + 100 * seed + r)
            for name, K in (("product", 1), ("mixture", hk)):
                mr = fit_mixture(xr, K, V, seed=r, smoothing=config.smoothing, n_restarts=config.n_restarts,
                                 max_iter=config.max_iter, tol=config.tol)
                tr = product_tree(mr.log_q[0], max_n) if K == 1 else mixture_tree(mr.log_pi, mr.log_q, max_n)
                c = _curve(tr, target)
                c = np.concatenate([c, np.full(max_n + 1 - c.shape[0], c[-1])])
                reps[name].append((c[bidx] / oc[bidx]).tolist())
        out["sampling_repeats"] = reps  # [repeats, budgets] fractions of the oracle

    acc = _acceptance_vector(product_model, target, config.sequoia_ranks)
    out["sequoia"] = dict(acceptance=acc.tolist(), choice={})
    for p in profiles:
        ch = sequoia_choice(acc, p, min(max_n, 256), config.sequoia_depth)
        out["sequoia"]["choice"][p.name] = dict(
            budget=ch.budget, max_depth=ch.max_depth, predicted_accepted=ch.expected_accepted,
            predicted_speedup=ch.speedup)
    return long_cell(out, config.budgets)


def budget_rows(result) -> list[dict]:
    """Every cell's ``by_budget`` rows with the cell's keys (family, F, m, seed, confidence): one
    flat table, ``pandas.DataFrame(budget_rows(result))``."""
    data = result.data if hasattr(result, "data") else result["data"]
    return [dict(family=c["family"], F=c["F"], m=c["m"], seed=c["seed"], confidence=c.get("confidence"), **r)
            for c in [*data["cells"], *data.get("confidence_cells", [])] for r in c["by_budget"]]


def cells(config):
    """(family, F, m, seed, confidence) of every cell; confidence is set for the confidence sweep."""
    for family in config.families:
        for seed in config.seeds:
            if family == "two_futures":
                if 1 in config.Fs:
                    yield family, 1, None, seed, None
                if 2 in config.Fs or any(F > 2 for F in config.Fs):
                    for m in config.two_futures_ms:
                        yield family, 2, m, seed, None
            else:
                for F in config.Fs:
                    yield family, F, None, seed, None
    for c in config.confidences:
        for seed in config.seeds:
            for F in config.confidence_Fs:
                yield f"zipf_conf={c:g}", F, None, seed, float(c)


#: the cells' layout; a cell stored in another (older) layout is recomputed
CELL_FORMAT = 2


def summarize_confidence(cell_rows: list[dict], config) -> list[dict[str, Any]]:
    """Per confidence: mean oracle coverage, fractions of the oracle and predicted gain (K = 4 vs
    K = 1, both fitted to samples), over the sweep's F and seeds."""
    out = []
    profiles = [p.name for p in _profiles(config)]
    budgets = list(config.budgets)
    for c in config.confidences:
        sel = [r for r in cell_rows if r.get("confidence") == float(c)]
        if not sel:
            continue
        prod = [_pick(r, 1) for r in sel]
        mix = [_pick(r, headline_k(config.Ks)) for r in sel]
        out.append(dict(
            confidence=float(c), n_cells=len(sel), budgets=budgets,
            oracle_coverage=np.mean([r["oracle"]["coverage"] for r in sel], axis=0).tolist(),
            product_frac=np.mean([p["frac_oracle"] for p in prod], axis=0).tolist(),
            mixture_frac=np.mean([m["frac_oracle"] for m in mix], axis=0).tolist(),
            product_chimera_share=np.mean([p["chimera_share"] for p in prod], axis=0).tolist(),
            product_best={pn: dict(
                speedup=float(np.mean([p["best"][pn]["speedup"] for p in prod])),
                tau=float(np.mean([1 + p["best"][pn]["coverage"] for p in prod])),
            ) for pn in profiles},
            predicted_gain={pn: float(np.mean([m["best"][pn]["speedup"] / p["best"][pn]["speedup"] - 1
                                               for m, p in zip(mix, prod)])) for pn in profiles},
        ))
    return out


def _pick(cell, K, assignment="soft", source="samples"):
    for d in cell["drafters"]:
        if d["K"] == K and d["assignment"] == assignment and d["source"] == source:
            return d
    return None


def summarize(cell_rows: list[dict], config) -> dict[str, Any]:
    """Per family: mean fraction of the oracle (product vs mixture, multi-future and F = 1 cells),
    predicted gain of the best-budget mixture tree over the best-budget product tree, the
    per-step vs fixed budget comparison, and the F = 1 sampling-noise check."""
    summary: dict[str, Any] = {}
    budgets = list(config.budgets)
    profiles = [p.name for p in _profiles(config)]
    hk = headline_k(config.Ks)
    for family in config.families:
        rows = [c for c in cell_rows if c["family"] == family]
        fam: dict[str, Any] = {}
        for label, sel in (("multi", [c for c in rows if c["F"] >= 2]), ("single", [c for c in rows if c["F"] == 1])):
            if not sel:
                continue
            entry: dict[str, Any] = dict(n_cells=len(sel), budgets=budgets, K=hk)
            for name, K, assignment, source in (
                ("product", 1, "soft", "samples"), ("mixture", hk, "soft", "samples"),
                ("mixture_hard", hk, "hard", "samples"), ("mixture_exact", hk, "soft", "exact"),
                ("mixture_K=F", None, "soft", "samples"),
            ):
                picked = [_pick(c, K if K is not None else max(c["F"], 1), assignment, source) for c in sel]
                if any(p is None for p in picked):
                    continue
                frac = np.array([p["frac_oracle"] for p in picked])  # [cells, budgets]
                chim = np.array([p["chimera_share"] for p in picked])
                entry[name] = dict(
                    frac_oracle_mean=frac.mean(axis=0).tolist(),
                    frac_oracle_std=frac.std(axis=0).tolist(),
                    chimera_share_mean=chim.mean(axis=0).tolist(),
                    best_speedup={pn: float(np.mean([p["best"][pn]["speedup"] for p in picked])) for pn in profiles},
                )
            prod = [_pick(c, 1) for c in sel]
            for name in ("mixture", "mixture_hard", "mixture_exact", "mixture_K=F"):
                if name not in entry:
                    continue
                K = hk if name != "mixture_K=F" else None
                assignment = "hard" if name == "mixture_hard" else "soft"
                source = "exact" if name == "mixture_exact" else "samples"
                mix = [_pick(c, K if K is not None else max(c["F"], 1), assignment, source) for c in sel]
                entry[name]["predicted_gain"] = {
                    pn: float(np.mean([mm["best"][pn]["speedup"] / pp["best"][pn]["speedup"] - 1
                                       for mm, pp in zip(mix, prod)]))
                    for pn in profiles
                }
                diff = np.array([mm["frac_oracle"] for mm in mix]) - np.array([pp["frac_oracle"] for pp in prod])
                entry[name]["frac_gap_vs_product_mean"] = diff.mean(axis=0).tolist()
                entry[name]["frac_gap_vs_product_min"] = diff.min(axis=0).tolist()
            # budget choice: one fixed budget for all the family's cells vs each cell's own
            entry["budget_choice"] = {}
            for pn in profiles:
                prof = next(p for p in _profiles(config) if p.name == pn)
                choice = {}
                for name, K in (("product", 1), ("mixture", hk)):
                    picked = [_pick(c, K) for c in sel]
                    if any(p is None for p in picked):
                        continue
                    steps = [p["per_step"][pn] for p in picked]
                    per_step = prof.t_target_ms * sum(1 + s["coverage"] for s in steps) / sum(s["step_ms"] for s in steps)
                    cov = np.array([p["curve"] for p in picked])  # [cells, grid]
                    grid = np.asarray(sel[0]["curve_n"])
                    s_fixed = speedup(cov.mean(axis=0), grid, prof)  # [grid]
                    i = int(np.argmax(s_fixed))
                    choice[name] = dict(per_step_speedup=float(per_step),
                                        per_step_budgets=[s["budget"] for s in steps],
                                        fixed_budget=int(grid[i]), fixed_speedup=float(s_fixed[i]))
                entry["budget_choice"][pn] = choice
            entry["sequoia"] = {
                pn: float(np.mean([c["sequoia"]["choice"][pn]["predicted_speedup"] for c in sel])) for pn in profiles
            }
            reps = [c["sampling_repeats"] for c in sel if "sampling_repeats" in c]
            if reps:
                prod_r = np.array([r["product"] for r in reps])  # [cells, repeats, budgets]
                gap_r = np.array([r["mixture"] for r in reps]) - prod_r
                entry["sampling_noise"] = dict(
                    product_frac_std=prod_r.std(axis=1).mean(axis=0).tolist(),  # per target, then mean
                    mixture_minus_product_mean=gap_r.mean(axis=(0, 1)).tolist(),
                    mixture_minus_product_worst=gap_r.min(axis=(0, 1)).tolist(),
                )
            fam[label] = entry
        summary[family] = fam
    return summary


def run(config, out_dir: str | Path = "results", progress: bool = True) -> Result:
    from tqdm import tqdm  # text bars: tqdm.auto wants ipywidgets in a notebook and warns without it

    store = ResultStore(Path(out_dir) / NAME)
    todo = list(cells(config))
    cfg_dict = dataclasses.asdict(config)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    cell_cfg = cell_config(config, _SWEEP_FIELDS, CELL_FORMAT)
    n_new = 0
    for family, F, m, seed, conf in tqdm(todo, desc=NAME, disable=not progress):
        key = cell_key(family, F, m, seed)
        n_new += not store.has(key)

        def compute():
            return Result(f"{NAME}/{key}", cell_cfg, run_cell(config, family, F, m, seed, conf), seed=seed)

        res = store.get_or_compute(key, compute)
        if res.config != cell_cfg:  # a cell stored under different settings is recomputed
            res = compute()
            store.save(key, res)
            n_new += 1
        rows.append(res.data)
    main_rows = [r for r in rows if r.get("confidence") is None]
    conf_rows = [r for r in rows if r.get("confidence") is not None]
    budgets = list(config.budgets)
    summary = long_summary(summarize([widen_cell(r) for r in main_rows], config), budgets)
    conf_summary = long_confidence_summary(summarize_confidence([widen_cell(r) for r in conf_rows], config), budgets)
    data = dict(cells=main_rows, summary=summary, confidence_cells=conf_rows, confidence_summary=conf_summary,
                seconds=time.perf_counter() - t0,
                profiles={p.name: p.to_dict() for p in _profiles(config)})
    result = Result(NAME, cfg_dict, data, seed=sorted({seed for _, _, _, seed, _ in todo}))
    print(f"wrote {n_new} cell files under {store.directory}/ ({len(todo) - n_new} reused)")
    path = Path(out_dir) / f"{NAME}.json"
    existed = path.exists()
    wrote(result.save(path), existed)
    return result


_SUMMARY_LISTS = ("frac_oracle_mean", "frac_oracle_std", "chimera_share_mean", "frac_gap_vs_product_mean",
                  "frac_gap_vs_product_min")


def long_summary(summary: dict, budgets: list[int]) -> dict:
    """:func:`summarize`'s per-budget lists as rows: each entry's ``by_budget`` holds one row per
    (drafter, budget) (``drafter``, ``budget``, ``frac_oracle_mean``, ``frac_oracle_std``,
    ``chimera_share_mean``, and for a mixture ``frac_gap_vs_product_mean`` / ``_min``), and its
    ``sampling_noise`` one row per budget."""
    out: dict[str, Any] = {}
    for family, fam in summary.items():
        out[family] = {}
        for label, entry in fam.items():
            e = {k: v for k, v in entry.items() if k != "budgets"}
            rows = []
            for name, d in entry.items():
                if isinstance(d, dict) and "frac_oracle_mean" in d:
                    e[name] = {k: v for k, v in d.items() if k not in _SUMMARY_LISTS}
                    rows += [dict(drafter=name, budget=int(b), **{k: d[k][i] for k in _SUMMARY_LISTS if k in d})
                             for i, b in enumerate(budgets)]
            e["by_budget"] = rows
            if "sampling_noise" in entry:
                noise = entry["sampling_noise"]
                e["sampling_noise"] = [dict(budget=int(b), **{k: v[i] for k, v in noise.items()})
                                       for i, b in enumerate(budgets)]
            out[family][label] = e
    return out


def long_confidence_summary(rows: list[dict], budgets: list[int]) -> list[dict]:
    """:func:`summarize_confidence`'s per-budget lists as one row per budget (``by_budget``)."""
    lists = ("oracle_coverage", "product_frac", "mixture_frac", "product_chimera_share")
    return [{**{k: v for k, v in e.items() if k not in (*lists, "budgets")},
             "by_budget": [dict(budget=int(b), **{k: e[k][i] for k in lists}) for i, b in enumerate(budgets)]}
            for e in rows]
