"""The work of ``mfd best-mode`` (its config and command: :mod:`mfd_theory.commands.theory.best_mode`, whose
page says what it computes): the cells, their store and the summaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time
from typing import Any

import numpy as np

from mfd_theory.coverage import spliced_chimera_mask
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.fit import fit_mixture_exact
from mfd_theory.results import wrote, Result, ResultStore
from mfd_theory.synthetic import make
from mfd_theory.runs.theory import cell_config
from mfd_theory.trees import enumerated_best_mode, best_mode_tree, mixture_tree, oracle_tree, product_tree


NAME = "best_mode"


TREES = ("product", "mixture", "best_mode")


KINDS = ("ties", "continuous", "zeros", "candidates")


#: relative slack of the theorem checks: coverages are sums of up to 256 exp(log-prob) terms
THEOREM_TOL = 1e-9


# fields that only choose which cells run; a stored cell stays valid when they change
_SWEEP_FIELDS = ("families", "two_futures_ms", "Fs", "seeds", "n_instances", "max_K", "max_L", "max_V",
                 "max_budget", "seed")


def _weights(rng, shape, kind: str) -> np.ndarray:
    """Positive-row-sum weights: small integers (ties, zeros) or continuous (optionally zeroed)."""
    if kind in ("ties", "candidates"):
        w = rng.integers(0, 4, size=shape).astype(np.float64)
    else:
        w = rng.uniform(0.05, 1.0, size=shape)
        if kind == "zeros":
            w[rng.random(shape) < 0.3] = 0.0
    rows = w.reshape(-1, shape[-1])
    rows[rows.sum(axis=1) == 0, 0] = 1.0
    w = rows.reshape(shape)
    with np.errstate(divide="ignore"):
        return np.log(w / w.sum(axis=-1, keepdims=True))


def random_instance(rng, config, kind: str):
    """(log_q [K, L, V] with -inf off the lists, present [K, L, V], budget, candidates or None);
    candidates are (values [K, L, k], token_ids [K, L, k]) in a random order per row."""
    K = int(rng.integers(1, config.max_K + 1))
    L = int(rng.integers(1, config.max_L + 1))
    V = int(rng.integers(1, config.max_V + 1))
    N = int(rng.integers(1, config.max_budget + 1))
    if kind != "candidates":
        return _weights(rng, (K, L, V), kind), None, N, None
    k = int(rng.integers(1, V + 1))
    ids = np.stack([np.stack([rng.permutation(V)[:k] for _ in range(L)]) for _ in range(K)])  # [K, L, k]
    vals = _weights(rng, (K, L, k), kind)  # [K, L, k]
    log_q = np.full((K, L, V), -np.inf)
    present = np.zeros((K, L, V), dtype=bool)
    np.put_along_axis(log_q, ids, vals, axis=2)
    np.put_along_axis(present, ids, True, axis=2)
    return log_q, present, N, (vals, ids)


def check_instances(config, progress: bool = False) -> dict[str, Any]:
    """The enumeration check (part 1 of the module doc): counts per kind of instance."""
    rng = np.random.default_rng(config.seed)
    t0 = time.perf_counter()
    by_kind = {k: dict(instances=0, mismatches=0, with_ties=0) for k in KINDS}
    first = None
    it = range(config.n_instances)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="best-mode vs enumeration", leave=False)
    for i in it:
        kind = KINDS[i % len(KINDS)]
        log_q, present, N, cand = random_instance(rng, config, kind)
        tree = best_mode_tree(log_q, N) if cand is None else best_mode_tree(cand[0], N, token_ids=cand[1])
        want, want_s = enumerated_best_mode(log_q, N, present)
        got = tree.paths()
        row = by_kind[kind]
        row["instances"] += 1
        finite = want_s[np.isfinite(want_s)]
        row["with_ties"] += int(np.unique(want_s).size < want_s.size or np.unique(finite).size < finite.size)
        same = got == want and np.array_equal(tree.log_score, want_s)
        if not same:
            row["mismatches"] += 1
            if first is None:
                first = dict(index=i, kind=kind, budget=N, shape=list(log_q.shape), got=got, want=want)
    return dict(instances=sum(r["instances"] for r in by_kind.values()),
                mismatches=sum(r["mismatches"] for r in by_kind.values()),
                with_ties=sum(r["with_ties"] for r in by_kind.values()),
                by_kind=by_kind, first_mismatch=first, seconds=time.perf_counter() - t0)


def settings(config) -> list[tuple[str, dict[str, Any]]]:
    """(family, keyword arguments of :func:`mfd_theory.synthetic.make`) of every setting."""
    L, V, b = config.L, config.V, config.branch_at
    out: list[tuple[str, dict[str, Any]]] = []
    for family in config.families:
        if family == "two_futures":
            out += [(family, dict(m=m)) for m in config.two_futures_ms if m <= L]
        elif family == "branching":
            out += [(family, dict(F=F, branch_at=b)) for F in config.Fs]
        elif family == "shifted":
            out += [(family, dict(F=F, shift_at=b)) for F in config.Fs if F <= 4]
        elif family == "noisy_futures":
            out += [(family, dict(F=F, temperature=config.temperature)) for F in config.Fs]
        else:
            out += [(family, dict(F=F, branch_at=b, accuracies=config.zipf_profile, V=2 * V)) for F in config.Fs]
    return [(f, {"L": L, "V": V, **kw}) for f, kw in out]


def _tree_rows(tree, target: MixtureOfProducts, drafter: MixtureOfProducts, futures, budgets) -> list[dict]:
    """Per budget N (the tree's first N nodes): target coverage, chimera share, drafter coverage."""
    p = np.exp(target.node_log_probs(tree))  # [N]
    q = np.exp(drafter.node_log_probs(tree))  # [N]
    live = np.isfinite(tree.log_score)
    chim = spliced_chimera_mask(tree, futures) & live
    out = []
    for N in budgets:
        n_live = int(live[:N].sum())
        out.append(dict(coverage=float(p[:N].sum()), q_coverage=float(q[:N].sum()), nodes=n_live,
                        chimera_share=float(chim[:N].sum() / n_live) if n_live else 0.0))
    return out


def run_cell(config, family: str, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
    st = make(family, seed=seed, **kwargs)
    target, futures = st.target, st.futures
    n_max, budgets = max(config.budgets), list(config.budgets)
    oracle = _tree_rows(oracle_tree(target, n_max), target, target, futures, budgets)
    product = product_tree(target.marginals(), n_max)
    drafters = [("own", target)]
    drafters += [(f"fit K={K}", fit_mixture_exact(target, K, seed=seed)) for K in config.Ks]
    rows = []
    for name, drafter in drafters:
        trees = dict(product=product, mixture=mixture_tree(drafter, n_max), best_mode=best_mode_tree(drafter, n_max))
        per = {t: _tree_rows(tr, target, drafter, futures, budgets) for t, tr in trees.items()}
        paths = {t: trees[t].paths() for t in ("mixture", "best_mode")}
        for i, N in enumerate(budgets):
            row = dict(drafter=name, K=drafter.K, pi_min=float(np.exp(drafter.log_pi.min())), budget=int(N),
                       oracle=oracle[i]["coverage"],
                       sets_differ=set(paths["mixture"][:N]) != set(paths["best_mode"][:N]))
            for t in TREES:
                row.update({f"{k}_{t}": v for k, v in per[t][i].items()})
            rows.append(row)
    return dict(family=family, kwargs=kwargs, seed=seed, F=st.F, rows=rows)


def _setting_label(family: str, kwargs: dict[str, Any]) -> str:
    return f"m={kwargs['m']}" if family == "two_futures" else f"F={kwargs['F']}"


def summarize(cells: list[dict], config) -> tuple[list[dict], dict[str, Any]]:
    """(table, theorems): per family, drafter and budget the means over the family's cells and
    the best-mode vs mixture counts; the theorem checks over every row."""
    table = []
    for family in config.families:
        sel = [r for c in cells if c["family"] == family for r in c["rows"]]
        for name in dict.fromkeys(r["drafter"] for r in sel):
            for N in config.budgets:
                rs = [r for r in sel if r["drafter"] == name and r["budget"] == N]
                diff = np.array([r["coverage_best_mode"] - r["coverage_mixture"] for r in rs])
                tol = THEOREM_TOL * np.array([max(1.0, r["coverage_mixture"]) for r in rs])
                entry = dict(family=family, drafter=name, budget=int(N), cells=len(rs),
                             oracle=float(np.mean([r["oracle"] for r in rs])),
                             best_mode_more=int((diff > tol).sum()), best_mode_less=int((diff < -tol).sum()),
                             sets_differ=int(sum(r["sets_differ"] for r in rs)))
                for t in TREES:
                    entry[f"coverage_{t}"] = float(np.mean([r[f"coverage_{t}"] for r in rs]))
                    entry[f"chimera_share_{t}"] = float(np.mean([r[f"chimera_share_{t}"] for r in rs]))
                table.append(entry)
    rows = [r for c in cells for r in c["rows"]]
    ratios = [(r["q_coverage_best_mode"] / r["q_coverage_mixture"], r) for r in rows if r["q_coverage_mixture"] > 0]
    worst = min(ratios, key=lambda x: x[0]) if ratios else None
    theorems = dict(
        rows=len(rows),
        mixture_optimal_violations=sum(r["q_coverage_best_mode"] > r["q_coverage_mixture"] * (1 + THEOREM_TOL)
                                       for r in rows),
        lower_bound_violations=sum(r["q_coverage_best_mode"] < r["pi_min"] * r["q_coverage_mixture"] * (1 - THEOREM_TOL)
                                   for r in rows),
        min_q_ratio=float(worst[0]) if worst else None,  # the smallest C_Q(best-mode) / C_Q(mixture)
        min_q_ratio_pi_min=worst[1]["pi_min"] if worst else None,  # the bound at that row
    )
    return table, theorems


def run(config, out_dir: str | Path = "results", progress: bool = True) -> Result:
    from tqdm import tqdm

    t0 = time.perf_counter()
    store = ResultStore(Path(out_dir) / NAME)
    cell_cfg = cell_config(config, _SWEEP_FIELDS)
    n_new = 0
    check_key = (f"check,n={config.n_instances},K={config.max_K},L={config.max_L},V={config.max_V},"
                 f"N={config.max_budget},seed={config.seed}")
    n_new += not store.has(check_key)
    check = store.get_or_compute(check_key, lambda: Result(f"{NAME}/check", dataclasses.asdict(config),
                                                           check_instances(config, progress), seed=config.seed)).data
    todo = [(f, kw, s) for f, kw in settings(config) for s in config.seeds]
    cells = []
    for family, kwargs, seed in tqdm(todo, desc=NAME, disable=not progress, leave=False):
        key = family + "," + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + f",seed={seed}"

        def compute():
            return Result(f"{NAME}/{key}", cell_cfg, run_cell(config, family, kwargs, seed), seed=seed)

        n_new += not store.has(key)
        res = store.get_or_compute(key, compute)
        if res.config != cell_cfg:  # stored under other settings: recomputed
            res = compute()
            store.save(key, res)
        cells.append(res.data)
    table, theorems = summarize(cells, config)
    rows = [dict(family=c["family"], setting=_setting_label(c["family"], c["kwargs"]), seed=c["seed"], **r)
            for c in cells for r in c["rows"]]
    data = dict(check=check, rows=rows, table=table, theorems=theorems, seconds=time.perf_counter() - t0)
    result = Result(NAME, dataclasses.asdict(config), data, seed=sorted({config.seed, *config.seeds}))
    print(f"best-mode tree vs enumeration: {check['mismatches']} mismatches in {check['instances']:,} instances "
          f"({check['with_ties']:,} with tied scores)")
    print(f"mixture tree optimal for the drafter's own mixture: {theorems['mixture_optimal_violations']} "
          f"violations; best-mode >= pi_min of it: {theorems['lower_bound_violations']} violations "
          f"({theorems['rows']} rows)")
    print(f"wrote {n_new} cell files under {store.directory}/ ({len(todo) + 1 - n_new} reused)")
    path = Path(out_dir) / f"{NAME}.json"
    existed = path.exists()
    wrote(result.save(path), existed)
    return result
