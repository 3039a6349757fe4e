"""The report block of ``mfd real-drafters`` (``real-drafters/real_drafters.json``,
docs/real-targets.md): the recipe and its cost, each compared cell's tau and speedup per seed,
the replicated verdicts, C1 as a check of the decoder's walk (accepted per round against the
drafted trees' exact expected acceptance) with the trees' dead share and, where kept, the
drafter-side C1, and the out-of-sample prediction check of every seed.

:func:`real_drafters` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from mfd_theory.ceiling_stats import ceiling_reach
from mfd_theory.report._text import span
from mfd_theory.report.ceiling import reach_lines
from mfd_theory.report.checks import prediction_summary
from mfd_theory.report.e2e import cell_text
from mfd_theory.report.inputs import Results
from mfd_theory.formatting import comparison_text
from mfd_theory.stats import coupled_chi_square
from mfd_theory.report.intervals import floored_entries, seeds_to_decide, to_decide_note

__all__ = ["reach_rows", "real_drafters", "real_headline", "real_recipe", "verdicts_of"]

_QUESTIONS = {"against_product": "MFD and DARTree against the product drafter's faster method",
              "same_n": "each MFD tree against the product drafter's DDTree tree of the same size N",
              "scorer": "the best-mode tree against the mixture tree of the same MFD drafter"}

#: |z| beyond which a cell's walk check fails (:data:`mfd_theory.llm.measure.calibration.WALK_Z`, kept here
#: for the report floor, which imports no torch)
WALK_Z = 4.0
#: the target's ceiling (``mfd real``) the reach table compares with, the larger run first
CEILINGS = ("real-default/real.json", "real/real.json")


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


def verdicts_of(d: dict, config: dict | None) -> list[dict]:
    """The run's replicated verdicts, each tau interval floored by tau's resolution over the run's new
    tokens per prompt (:func:`mfd_theory.report.intervals.floored`)."""
    return floored_entries(d.get("verdicts"), config)


def _verdicts(d: dict, config: dict | None = None) -> list[str]:
    vs = verdicts_of(d, config)
    if not vs:
        return ["One seed: no replicated verdict."]
    lines = []
    for q, title in _QUESTIONS.items():
        mine = [v for v in vs if v.get("question") == q]
        if not mine:
            continue
        lines += ["", f"**{title[0].upper() + title[1:]}**:", "",
                  "| data set | T | method | against | tau gain | seeds to decide tau (80% power) | speed gain | "
                  "seeds to decide speed (80% power) |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in mine:
            tau, sp = v.get("tau_cmp"), v.get("speed_cmp")
            lines.append(f"| {v['dataset']} | {v['temperature']:g} | {cell_text(v['a'])} | {cell_text(v['b'])} | "
                         f"{comparison_text(tau)} | {_to_decide(tau)} | {comparison_text(sp)} | {_to_decide(sp)} |")
    lines += ["", to_decide_note()]
    return lines


def _to_decide(c: dict | None) -> str:
    """How many seeds would decide comparison ``c`` (a stored Comparison) at its own level, with
    80% power (:func:`mfd_theory.report.intervals.seeds_to_decide`)."""
    return seeds_to_decide(c)


def reach_rows(d: dict, ceiling: dict) -> list[dict]:
    """The reach table's rows (:func:`mfd_theory.ceiling_stats.ceiling_reach`): each same-N verdict
    at a temperature the ceiling measured (T > 0), its measured tau gain over the product
    drafter's DDTree tree beside the gain the target's own K-mode tree of the same scorer and N
    has over its product tree. ``ceiling``: ``mfd real``'s data; its entry for this run's target."""
    pooled = ((ceiling.get("targets") or {}).get(d.get("target")) or {}).get("ceiling") or {}
    k_of = {(r["drafter"]): r.get("K") for run in d.get("runs") or [] for r in run["rows"]}
    measured = []
    for v in d.get("verdicts") or []:
        tau = v.get("tau_cmp")
        if v.get("question") != "same_n" or float(v["temperature"]) <= 0 or not tau:
            continue
        measured.append({"dataset": v["dataset"], "temperature": float(v["temperature"]),
                         "budget": int(v["a"]["budget"]), "K": k_of.get(v["a"]["drafter"]),
                         "scorer": v["a"].get("scorer") or "mixture", "drafter": v["a"]["drafter"],
                         "runs": tau.get("n_runs", 1), "gain": tau["gain"], "lo": tau["lo"], "hi": tau["hi"]})
    return ceiling_reach(pooled, measured) if pooled and measured else []


def _reach(d: dict, results: Results) -> list[str]:
    for name in CEILINGS:
        path = results.path(name)
        if name in results.loaded or (path is not None and path.is_file()):
            rows = reach_rows(d, results[name].data)
            if rows:
                return [f"How much of the target's own ceiling the trained drafters reach (T > 0): the measured tau gain "
                        "of each MFD tree over the product drafter's DDTree tree of the same N (the same-N verdicts "
                        "above, over the seeds) beside the gain the target's K-mode tree of the same scorer has over "
                        f"the product tree of its own marginals (`mfd real`, `{name}`: "
                        f"{(results[name].config or {}).get('prompts_per_domain', '?')} evaluation prompts per domain, "
                        "no drafter; Bonferroni over the rows). Not a prediction: the ceiling's prompts are the first "
                        "of the same shuffled evaluation sets, so they include the prompts the drafters were evaluated "
                        "on; it is the room the target leaves on those prompts:", "",
                        *reach_lines(rows, f"the ceiling's tau gain ({(results[name].config or {}).get('prompts_per_domain', '?')} "
                                           "prompts per domain, the evaluated ones among them)")]
    return []


def _c1(d: dict) -> list[str]:
    """C1 on the real target, reported as what it is: at T > 0, each tree method's mean accepted
    tokens per round beside the exact expected acceptance of the trees it drafted, each under that
    round's own verify logits. That is an identity for any drafter (a random one included): it
    checks the decoder's walk, not the drafter, and a wrong walk fails it
    (:func:`mfd_theory.llm.measure.calibration.walk_check`, tests/test_calibration.py). Per seed,
    with the walk's z and the sum of the z^2 over the cells (:func:`mfd_theory.stats.coupled_chi_square`:
    the cells decode one sampled text, so no chi-square p-value); the dead share of the drafted
    trees; and, where the run kept them, the drafter-side C1 that can fail (:func:`_drafter_c1`)."""
    runs = d.get("runs") or []
    by_run = [{_key(r): r for r in run["rows"]} for run in runs]
    keys = [k for k in dict.fromkeys(k for b in by_run for k in b) if k[1] > 0 and k[2] != "ar"]
    if not keys:
        return []
    seeds = ", ".join(str(run["seed"]) for run in runs)

    def per_seed(k, field, fmt):
        vals = [b.get(k, {}).get(field) for b in by_run]
        return " / ".join("-" if v is None else fmt.format(v) for v in vals)

    lines = ["C1 as a check of the decoder's walk (T > 0): mean accepted tokens per round, measured, against the exact "
             "expected acceptance of the tree each round drafted, under that round's own verify logits (in-sample by "
             "design). This holds for any drafter, a random one included, so it tests the walk (that it accepts what "
             "the lossless walk would), not the drafter; a walk that stops a node early or draws from the wrong row "
             "fails it (tests/test_calibration.py). Walk z: the summed gap over the square root of the rounds' exact "
             "variances, standard normal for a correct walk (|z| > "
             f"{WALK_Z:g} fails). Beside it, the drafted trees' dead share (target prefix probability <= 0.001); "
             f"per seed ({seeds}):", "",
             "| data set | T | method | accepted per round | expected acceptance (walk check) | walk z | dead share |",
             "|---|---|---|---|---|---|---|"]
    for k in keys:
        side = dict(zip(("method", "drafter", "budget", "scorer"), k[2:]))
        lines.append(f"| {k[0]} | {k[1]:g} | {cell_text(side)} | {per_seed(k, 'accepted_mean', '{:.2f}')} | "
                     f"{per_seed(k, 'covered_mass_insample', '{:.2f}')} | {per_seed(k, 'pred_gap_z', '{:+.1f}')} | "
                     f"{per_seed(k, 'dead_share', '{:.0%}')} |")
    zs = [b[k]["pred_gap_z"] for b in by_run for k in keys if b.get(k, {}).get("pred_gap_z") is not None]
    if zs:
        chi = coupled_chi_square(zs)
        far = sum(abs(z) > WALK_Z for z in zs)
        lines += ["", f"Walk check: {'passes' if far == 0 else 'fails'} in {len(zs) - far} of {len(zs)} cells x seeds "
                      f"(largest |z| {max(map(abs, zs)):.1f}). Sum of z^2 over the cells: {chi['sum_z2']:.1f} with "
                      f"{chi['df']} cells, {chi['df']} expected. It is no chi-square with {chi['df']} degrees: at T > 0 "
                      "every token is drawn by inverse CDF from a uniform keyed by the sampling seed and the token's "
                      "position, and every cell and seed here decodes with sampling seed 0, so all cells of a prompt "
                      "decode the same text and share its luck. Each cell's z is standard normal (its standard error "
                      "is the rounds' exact variance, not a bound), but the cells move together, so the sum keeps its "
                      "mean and not a chi-square's spread, and a sum a third of its mean is unremarkable; no p-value "
                      "is given (tests/test_calibration.py simulates it)."]
    drafter = _drafter_c1(runs)
    if drafter:
        lines += ["", *drafter]
    return lines


def _drafter_c1(runs: list[dict]) -> list[str]:
    """The drafter-side C1, which can fail: per seed and calibration cell, the mass the drafter's own
    distribution puts on its trees against their covered mass under the target (the expected
    acceptance), as :func:`mfd_theory.llm.measure.calibration.calibration_gaps` stores it in a run's
    ``drafter_calibration``; nothing when no run kept it.

    A row that repeats an earlier row of its seed exactly is shown once: before the fix, ``mfd eval``
    decoded a calibration file shared by the data sets once per data set and kept both copies."""
    rows, repeats = [], 0
    for run in runs:
        seen = []
        for r in run.get("drafter_calibration") or []:
            if r in seen:
                repeats += 1
                continue
            seen.append(r)
            rows.append((run.get("seed"), r))
    if not rows:
        return []
    sets = any(r.get("calibration_set") for _, r in rows)
    out = ["Drafter-side C1 (can fail): on the calibration prompts, the mass each drafter's own distribution puts on "
           "the trees it drafted (its predicted acceptance) against their covered mass under the target; gap = own "
           "mass / covered mass - 1 (> 0: over-confident)"
           + (f"; {repeats} {'row' if repeats == 1 else 'rows'} that repeated another of its seed exactly (one "
              "shared calibration file decoded once per data set) shown once" if repeats else "")
           + ("; in this record the own mass is a mean over the rounds that drafted a tree and the covered mass a mean "
              "over every round (a tree-less last round counted as 0), so each own / covered ratio is too high by the "
              "factor rounds / rounds with a tree (a decode has at most one tree-less round); later runs average "
              "both over every round"
              if any("calibration_set" not in r for _, r in rows) else "") + ":", "",
           "| seed | " + ("calibration set | " if sets else "") + "drafter | method | T | N | own mass | covered mass "
           "| gap |", "|---|" + ("---|" if sets else "") + "---|---|---|---|---|---|---|"]
    for seed, r in rows:
        meth = "mfd best-mode" if r.get("method") == "mfd" and r.get("scorer") == "best_mode" else r.get("method")
        budget = f"{r.get('budget', '-')}" + (" (per round)" if r.get("per_round") else "")
        out.append(f"| {seed} | " + (f"{r.get('calibration_set') or 'shared'} | " if sets else "")
                   + f"{r.get('drafter')} | {meth} | {float(r.get('temperature') or 0):g} | "
                   f"{budget} | {r['self_mass_mean']:.2f} | {r['target_mass_mean']:.2f} | "
                   f"{100 * r['gap']:+.0f}% |")
    return out


def real_drafters(results: Results) -> str:
    """``mfd real-drafters`` (``real-drafters/real_drafters.json``): the recipe, the training cost per
    drafter and seed, each compared cell per seed, the verdicts and the prediction check."""
    d, c = results.main.data, results.main.config
    lines = _setup(d, c) + ["", *_training(d), "",
                            "Each compared cell per seed, at the budget seed 0's calibration chose (tau: mean accepted "
                            "tokens per round, the bonus token included; speedup over plain decoding, timed in the "
                            "same run):", "", *_per_seed(d), "",
                            f"Verdicts: {d.get('rule', '')}; margin of equivalence ±3%.", *_verdicts(d, c)]
    reach = _reach(d, results)
    if reach:
        lines += ["", *reach]
    c1 = _c1(d)
    if c1:
        lines += ["", *c1]
    preds = [prediction_summary(run.get("prediction"), f"seed {run['seed']}") for run in d.get("runs") or []]
    preds = [p for p in preds if p]
    if preds:
        lines += ["", *(f"- {p}" for p in preds)]
    secs = [s for s in (d.get("step_seconds") or {}).values() if s is not None]
    if secs:
        lines += ["", f"Time of the steps (distillation, training, evaluation), each measured when it ran: "
                      f"{sum(secs) / 60:.0f} min in all"
                  + (f"; the run that wrote this file took {d['wall_s_this_run'] / 60:.1f} min, reusing every step "
                     "an earlier run had finished" if d.get("wall_s_this_run") is not None else "") + "."]
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


# ----------------------------------------------------------------------------- the real target's headline
def _verdict_parts(vs: list[dict], question: str, key: str, scorer: str | None = "mixture") -> list[str]:
    out = []
    for v in vs:
        if v.get("question") != question or (scorer is not None and v["a"].get("scorer") not in (scorer, None)):
            continue
        c = v.get(key)
        if c:
            out.append(f"{v['dataset']} T = {v['temperature']:g}: {100 * c['gain']:+.0f}% "
                       f"[{100 * c['lo']:+.0f}%, {100 * c['hi']:+.0f}%] **{c['verdict']}**")
    return out


def real_headline(results: Results) -> str:
    """The real target's headline: one row per question the package asks of the real Qwen target,
    each answered by the last run's verdict and number, each naming the block that holds the full
    table. From ``mfd real-drafters`` (the main file) and, when present, ``mfd real`` (lossless
    check and ceiling)."""
    d = results.main.data
    vs = verdicts_of(d, results.main.config)
    runs = d.get("runs") or []
    link = "[`real-drafters`](#mfd-real-drafters)"
    first = next((v["tau_cmp"] for v in vs if v.get("tau_cmp")), None)
    size = (f"{first['n_runs']} seeds x {first['n_prompts']} prompts per data set" if first else "one seed")
    lines = ["| question | the last run's answer | full table |", "|---|---|---|"]
    for name in CEILINGS[::-1]:  # the reproduce run's check first when both are there
        path = results.path(name)
        if name in results.loaded or (path is not None and path.is_file()):
            from mfd_theory.report.real import headline_rows

            rows = headline_rows(results[name].data, f"[`{name.split('/')[0]}`](#mfd-real)")
            lines += [r for r in rows if d.get("target") in r]
            break
    kinds = ", ".join(dict.fromkeys(t["kind"] for t in d.get("trained") or []))
    parts = _verdict_parts(vs, "same_n", "tau_cmp")
    if parts:
        lines.append(f"| Do trained MFD drafters accept more tokens per round than the product drafter's DDTree tree "
                     f"of the same N (drafters {kinds}, trained identically; {size}; mixture tree)? | "
                     + "; ".join(parts) + f" | {link} |")
    parts = _verdict_parts(vs, "against_product", "speed_cmp")
    if parts:
        lines.append("| Do they decode faster than the product drafter's faster method (the chain or DDTree, as the "
                     "theory chose before decoding)? | " + "; ".join(parts) + f" | {link} |")
    parts = _verdict_parts(vs, "scorer", "tau_cmp", scorer=None)
    if parts:
        lines.append("| Does the best-mode tree (the released MFD checkpoints' rule) accept more than the mixture "
                     "tree of the same drafter? | " + "; ".join(parts) + f" | {link} |")
    for name in CEILINGS:
        path = results.path(name)
        if name in results.loaded or (path is not None and path.is_file()):
            rows = [r for r in reach_rows(d, results[name].data) if r.get("scorer") == "mixture"]
            if rows:
                txt = "; ".join(f"{r['dataset']} T = {r['temperature']:g}: ceiling {comparison_text(r['predicted'])}, "
                                f"measured {100 * r['gain']:+.0f}%" for r in rows)
                n = (results[name].config or {}).get("prompts_per_domain", "?")
                lines.append(f"| How much of the gain the target's own K-mode tree has (ceiling, `{name}`, on {n} "
                             f"prompts per domain that include the evaluated ones) do the drafters reach? | {txt} "
                             f"| {link} |")
            break
    cells = [r for run in runs for r in run["rows"] if r["method"] != "ar" and r.get("speedup") is not None]
    if cells:
        sp = [r["speedup"] for r in cells]
        best_tau = {}
        for r in cells:
            if float(r["temperature"]) == 0:
                best_tau.setdefault(r["dataset"], []).append(r["tau"])
        taus = "; ".join(f"{ds} {max(t):.2f}" for ds, t in best_tau.items())
        lines.append(f"| Is any speculative method faster than plain decoding on this CPU, and how many tokens per round "
                     f"do these drafters reach (EAGLE-3 on Qwen3-1.7B: 2.93 on HumanEval at T = 0)? | speedups "
                     f"{min(sp):.2f}x-{max(sp):.2f}x over {len(cells)} cells x seeds; highest tau at T = 0 (any "
                     f"method, any seed): {taus} | {link} |")
    preds = [run.get("prediction") for run in runs if run.get("prediction")]
    if preds:
        tau = [p["tau"]["median_abs_error"] for p in preds if p.get("tau")]
        spd = [p["speedup"]["median_abs_error"] for p in preds if p.get("speedup")]
        worst = max(p["tau"]["worst_abs_error"] for p in preds if p.get("tau"))
        lines.append(f"| How well are tau and speedup predicted before decoding, from calibration prompts only? | "
                     f"tau median \\|error\\| {span([100 * x for x in tau], '{:.1f}')}% per seed (worst "
                     f"{100 * worst:.1f}%), speedup {span([100 * x for x in spd], '{:.1f}')}% | {link} |")
    return "\n".join(lines)
