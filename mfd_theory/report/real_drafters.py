"""The report block of ``mfd real-drafters`` (``real-drafters/real_drafters.json``,
docs/real-targets.md): the recipe and its cost, each compared cell's tau and speedup per seed,
the replicated verdicts, C1 (accepted per round against the drafted trees' covered mass) with the
trees' dead share, and the out-of-sample prediction check of every seed.

:func:`real_drafters` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from mfd_theory.report._text import span
from mfd_theory.report.checks import prediction_summary
from mfd_theory.report.e2e import cell_text
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import comparison_text

__all__ = ["real_drafters", "real_recipe"]

_QUESTIONS = {"against_product": "MFD and DARTree against the product drafter's faster method",
              "scorer": "the best-mode tree against the mixture tree of the same MFD drafter"}


def _setup(d: dict, c: dict) -> list[str]:
    prov = d.get("provenance") or {}
    dist = d.get("distill") or {}
    vocab = [t["draft_vocab"] for t in d.get("trained", []) if t.get("draft_vocab")]
    vtxt = "the full vocabulary"
    if vocab:
        v = vocab[0]
        vtxt = (f"a draft vocabulary of the {v['size']:,} tokens most frequent in the answers "
                f"({v.get('distinct', '?'):,} distinct tokens there; they cover "
                f"{span([100 * x['coverage'] for x in vocab], '{:.1f}')}% of the {v.get('answer_tokens', 0):,} "
                "answer tokens)")
    secs = d.get("step_seconds") or {}
    dist_s = secs.get("distill")
    ev = [s for n, s in secs.items() if n.startswith("eval") and s is not None]
    return [
        f"Target `{d.get('target')}` (GGUF sha256 `{str(prov.get('gguf_sha256'))[:16]}`). Training data: "
        f"{dist.get('n_sequences')} answers distilled at T = {c['distill_temperature']:g} (top-p "
        f"{c['distill_top_p']:g}, top-k {c['distill_top_k']}), {dist.get('n_response_tokens') or 0:,} answer tokens"
        + (f", {dist_s / 60:.1f} min" if dist_s else "") + ". "
        f"Every drafter: block {c['block_size']}, {c['layers']} layer(s) initialised "
        f"{'from the target' if c['init_layers'] == 'target' else 'at random'}, target layers "
        f"{', '.join(map(str, c['target_layer_ids']))}, {c['steps']} steps of {c['batch_size']} sequences x "
        f"{c['blocks_per_seq']} blocks, lr {c['lr']:g}, {vtxt}. Evaluation: {c['eval_prompts']} prompts per "
        f"domain x {c['eval_tokens']} new tokens, {c['calibration_prompts']} calibration prompt(s) per domain "
        f"(never evaluated), budgets {', '.join(map(str, c['budgets']))}"
        + (f", {sum(ev) / 60:.0f} min for the {len(ev)} seeds" if ev else "") + "."]


def _training(d: dict) -> list[str]:
    trained = d.get("trained") or []
    seeds = sorted({t["seed"] for t in trained})
    lines = ["| drafter | " + " | ".join(f"seed {s}: min, loss first -> last" for s in seeds) + " |",
             "|---|" + "---|" * len(seeds)]
    for kind in dict.fromkeys(t["kind"] for t in trained):
        cells = []
        for s in seeds:
            t = next((x for x in trained if x["kind"] == kind and x["seed"] == s), None)
            cells.append("-" if t is None else f"{t['seconds'] / 60:.1f}, {t['first_loss']:.2f} -> {t['final_loss']:.2f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    total = sum(t["seconds"] for t in trained)
    lines += ["", f"Training in all: {total / 60:.0f} min for {len(trained)} drafters"
              + (f" (one shared pass over the target's features, {d['feature_seconds'] / 60:.1f} min)"
                 if d.get("feature_seconds") else "") + "."]
    return lines


def _key(r: dict) -> tuple:
    return (r["dataset"], float(r["temperature"]), r["method"], r["drafter"], int(r["budget"]), r.get("scorer"))


def _per_seed(d: dict) -> list[str]:
    cells = []
    for p in d.get("pairs") or []:
        for side in (p["b"], p["a"]):
            k = (p["dataset"], float(p["temperature"]), *side)
            if k not in cells:
                cells.append(k)
    runs = d.get("runs") or []
    by_run = [{_key(r): r for r in run["rows"]} for run in runs]
    seeds = ", ".join(str(run["seed"]) for run in runs)
    lines = [f"| data set | T | method | tau per seed ({seeds}) | speedup per seed | matches plain decoding (T = 0) |",
             "|---|---|---|---|---|---|"]
    for k in cells:
        rows = [b.get(k) for b in by_run]
        side = dict(zip(("method", "drafter", "budget", "scorer"), k[2:]))
        taus = " / ".join("-" if r is None or r.get("tau") is None else f"{r['tau']:.2f}" for r in rows)
        sps = " / ".join("-" if r is None or r.get("speedup") is None else f"{r['speedup']:.2f}x" for r in rows)
        match = "-" if k[1] != 0 else ("yes" if all(r is not None and r.get("matches_ar") for r in rows) else "**no**")
        lines.append(f"| {k[0]} | {k[1]:g} | {cell_text(side)} | {taus} | {sps} | {match} |")
    return lines


def _verdicts(d: dict) -> list[str]:
    vs = d.get("verdicts") or []
    if not vs:
        return ["One seed: no replicated verdict."]
    lines = []
    for q, title in _QUESTIONS.items():
        mine = [v for v in vs if v.get("question") == q]
        if not mine:
            continue
        lines += ["", f"**{title[0].upper() + title[1:]}**:", "",
                  "| data set | T | method | against | tau gain | speed gain |", "|---|---|---|---|---|---|"]
        for v in mine:
            lines.append(f"| {v['dataset']} | {v['temperature']:g} | {cell_text(v['a'])} | {cell_text(v['b'])} | "
                         f"{comparison_text(v.get('tau_cmp'))} | {comparison_text(v.get('speed_cmp'))} |")
    return lines


def _c1(d: dict) -> list[str]:
    """C1 on the real target: at T > 0, each tree method's mean accepted tokens per round beside
    the covered mass of the trees it drafted (the theory's acceptance of each round's tree, summed
    under the decoding rule), per seed, with the gap in standard errors; and the dead share of the
    drafted trees (nodes the target gives prefix probability <= 0.001)."""
    runs = d.get("runs") or []
    by_run = [{_key(r): r for r in run["rows"]} for run in runs]
    keys = [k for k in dict.fromkeys(k for b in by_run for k in b) if k[1] > 0 and k[2] != "ar"]
    if not keys:
        return []
    seeds = ", ".join(str(run["seed"]) for run in runs)

    def per_seed(k, field, fmt):
        vals = [b.get(k, {}).get(field) for b in by_run]
        return " / ".join("-" if v is None else fmt.format(v) for v in vals)

    lines = ["C1 on the real target (T > 0): mean accepted tokens per round, measured, against the covered mass of "
             "the trees each round drafted (in-sample: the same rounds' trees), the gap in standard errors of the "
             "theory's per-round variance, and the drafted trees' dead share (target prefix probability <= 0.001), "
             f"per seed ({seeds}):", "",
             "| data set | T | method | accepted per round | covered mass (in-sample) | gap z | dead share |",
             "|---|---|---|---|---|---|---|"]
    for k in keys:
        side = dict(zip(("method", "drafter", "budget", "scorer"), k[2:]))
        lines.append(f"| {k[0]} | {k[1]:g} | {cell_text(side)} | {per_seed(k, 'accepted_mean', '{:.2f}')} | "
                     f"{per_seed(k, 'covered_mass_insample', '{:.2f}')} | {per_seed(k, 'pred_gap_z', '{:+.1f}')} | "
                     f"{per_seed(k, 'dead_share', '{:.0%}')} |")
    return lines


def real_drafters(results: Results) -> str:
    """``mfd real-drafters`` (``real-drafters/real_drafters.json``): the recipe, the training cost per
    drafter and seed, each compared cell per seed, the verdicts and the prediction check."""
    d, c = results.main.data, results.main.config
    lines = _setup(d, c) + ["", *_training(d), "",
                            "Each compared cell per seed, at the budget seed 0's calibration chose (tau: mean accepted "
                            "tokens per round, the bonus token included; speedup over plain decoding, timed in the "
                            "same run):", "", *_per_seed(d), "",
                            f"Verdicts: {d.get('rule', '')}; margin of equivalence ±3%.", *_verdicts(d)]
    c1 = _c1(d)
    if c1:
        lines += ["", *c1]
    preds = [prediction_summary(run.get("prediction"), f"seed {run['seed']}") for run in d.get("runs") or []]
    preds = [p for p in preds if p]
    if preds:
        lines += ["", *(f"- {p}" for p in preds)]
    if d.get("wall_s_this_run") is not None:
        lines += ["", f"Wall time of the run that wrote this file: {d['wall_s_this_run'] / 60:.0f} min (steps finished "
                      "by an earlier run are reused, not counted)."]
    return "\n".join(lines)


_RECIPE_WORDS = {"tokens": "cross-entropy on the answers' tokens (the main run's recipe)",
                 "soft": "the target's own top-k distribution at each position",
                 "random-init": "draft layers initialised at random", "block16": "block 16 (15 drafted positions)"}


def _recipe_cells(m: dict, budget: str) -> dict:
    return {c["method"]: c for c in m["budgets"][budget]["cells"]}


def real_recipe(results: Results) -> str:
    """``mfd real-drafters --stages recipe`` (``real-recipe/real_recipe.json``): each recipe
    variant's training cost and held-out greedy tau per seed, and its replicated comparison with
    the token recipe."""
    d, c = results.main.data, results.main.config
    trained, measured = d.get("trained") or [], d.get("measured") or []
    seeds = sorted({t["seed"] for t in trained})
    held = d.get("heldout") or {}
    first = measured[0]["budgets"][next(iter(measured[0]["budgets"]))] if measured else {}
    secs = d.get("step_seconds") or {}
    lines = [
        f"Target `{d.get('target')}`; the main run's data (answers to {c['train_prompts']} training prompts per "
        f"domain at T = {c['distill_temperature']:g}, {secs.get('distill', 0) / 60:.1f} min to distil) and its "
        f"drafter options (block {c['block_size']}, {c['layers']} layer(s), {c['steps']} steps, lr {c['lr']:g}, "
        f"{c['draft_vocab']:,}-token draft vocabulary); one product drafter per recipe and seed ({len(seeds)} seeds). "
        f"Held out: {held.get('answers')} greedy answers of at most {c['heldout_tokens']} tokens to "
        f"{c['heldout_prompts']} prompts per domain of the calibration split (never distilled, never evaluated); "
        f"{first.get('kept_tokens', 0):,} of their {first.get('answer_tokens', 0):,} tokens are the target's greedy "
        "continuation under one full forward (the rest, after a near-tie flipped by batching, are cut). "
        "Greedy tau: mean tokens per round, bonus included, exactly as a T = 0 decode of each answer measures it.",
        ""]
    budgets = list(measured[0]["budgets"]) if measured else []
    head = ["recipe", "what it changes", "training min per seed", "loss first -> last"]
    for b in budgets:
        head += ["chain tau per seed", f"DDTree N = {b} tau per seed"] if b == budgets[0] else [f"DDTree N = {b}"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in dict.fromkeys(t["recipe"] for t in trained):
        ts = [next((t for t in trained if t["recipe"] == name and t["seed"] == s), None) for s in seeds]
        ms = [next((m for m in measured if m["recipe"] == name and m["seed"] == s), None) for s in seeds]
        row = [name, _RECIPE_WORDS.get(name, name),
               " / ".join("-" if t is None else f"{t['seconds'] / 60:.1f}" for t in ts),
               " / ".join("-" if t is None else f"{t['first_loss']:.2f} -> {t['final_loss']:.2f}" for t in ts)]
        for b in budgets:
            methods = ("chain", "ddtree") if b == budgets[0] else ("ddtree",)
            for meth in methods:
                row.append(" / ".join("-" if m is None else f"{_recipe_cells(m, b)[meth]['tau']:.2f}" for m in ms))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"Each variant against the token recipe: {d.get('rule', '')}; margin of equivalence ±3%.", "",
              "| recipe | method | N | held-out tau gain | training time against tokens |", "|---|---|---|---|---|"]
    minutes = {n: sum(t["seconds"] for t in trained if t["recipe"] == n) / 60 for n in {t["recipe"] for t in trained}}
    for cmp in d.get("comparisons") or []:
        rel = minutes.get(cmp["recipe"], 0) / minutes["tokens"] - 1 if minutes.get("tokens") else None
        lines.append(f"| {cmp['recipe']} | {cmp['method']} | {cmp['budget'] if cmp['method'] == 'ddtree' else '-'} | "
                     f"{comparison_text(cmp.get('cmp'))} | {'-' if rel is None else f'{100 * rel:+.0f}%'} |")
    if d.get("wall_s_this_run") is not None:
        lines += ["", f"Wall time of the run that wrote this file: {d['wall_s_this_run'] / 60:.0f} min (steps finished "
                      "by an earlier run are reused, not counted)."]
    return "\n".join(lines)
