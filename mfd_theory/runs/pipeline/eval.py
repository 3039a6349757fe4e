"""The torch half of ``mfd eval`` (:mod:`mfd_theory.commands.pipeline.eval`), in stages: load the target and
the drafters and check what they can run; predict every row from the calibration prompts and write
``predictions.json`` (or, batched, ``batch_plans.json``) before the first evaluated prompt; decode;
write the rows, the per-prompt records and the figures."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from mfd_theory.llm.models.target import load_local_target
from mfd_theory.runs.pipeline.train_drafter import distilled_prompts
from mfd_theory.formatting import method_label
from mfd_theory.llm.measure.evaluate import (
    add_speedup_predictions, best_budgets, cell_key, decode_cells, first_ids, format_gains, format_rows, make_cells,
    mfd_gains, per_prompt_records, prediction_summary, rows_from_records, speedup_check,
)
from mfd_theory.llm.measure.predict import (
    Calibration, attach_predictions, calibrate_acceptance, choose_budgets, load_predictions, predict_cells,
    prediction_check, prediction_lines, prompt_digest, write_predictions,
)
from mfd_theory.llm.measure.profile import calibration_speed_rows, measure_round_profile
from mfd_theory.llm.models.drafter import load_drafter
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.llm.training.distill import check_context
from mfd_theory.results import Result, atomic_write_text, to_jsonable
from mfd_theory.validation import make_out_dir

__all__ = ["evaluate", "write_figures"]


@dataclasses.dataclass
class _Eval:
    """One evaluation, loaded and checked: what every stage reads."""

    config: Any  # the EvalConfig
    options: dict  # the options as the result files record them
    dist: Any
    target: TargetModel
    tok: Any
    cells: list
    prompts: list
    calib_sets: dict  # {data set (None: every one): calibration prompts}
    info: dict  # {drafter label: its directory, K and block size}
    out: Path
    progress: bool

    @property
    def datasets(self) -> list:
        return list(dict.fromkeys(p.dataset for p in self.prompts))


def evaluate(config, options: dict, prompts: list, calib_sets: dict, drafter_dirs: list[Path], out_dir,
             progress: bool = True):
    """Evaluate the drafters in ``drafter_dirs`` on ``prompts`` (read and checked, calibration
    prompts held back) as ``config`` (an :class:`~mfd_theory.commands.pipeline.eval.EvalConfig`) asks;
    the Result, on the main process (None on the other torchrun ranks)."""
    dist = setup(config.device)
    try:
        ev = _load(config, options, dist, prompts, calib_sets, drafter_dirs, out_dir, progress)
        if config.batch_size > 1:
            return _evaluate_batched(ev)
        profile, pred_path = _predict(ev)
        if dist.main and progress and profile is not None:
            print(f"wrote {pred_path} (before the evaluation)")
        started = time.time()
        _, _, temps = config.plan()
        records = decode_cells(ev.target, ev.cells, prompts, temperatures=temps, max_new_tokens=config.max_new_tokens,
                               seed=config.seed, passes=config.passes, tokenizer=ev.tok,
                               enable_thinking=config.enable_thinking, dist=dist, progress=progress)
        if not dist.main:
            return None
        return _write(ev, records, profile, pred_path, started)
    finally:
        teardown(dist)


def _load(config, options, dist, prompts, calib_sets, drafter_dirs, out_dir, progress) -> _Eval:
    """The target and the drafters loaded, the cells they run checked, every prompt checked against
    the target's context; then, every check passed, the output directory made."""
    methods, budgets, _ = config.plan()
    target_hf, tok = load_local_target(config.target, dist.device, config.dtype)
    drafters, taken, info = {}, set(), {}
    for d in drafter_dirs:
        try:
            dr = load_drafter(d, target_hf).eval()
        except ValueError as exc:  # e.g. trained for another target; the library names its parameter
            raise ValueError(f"--drafter: {str(exc).split(': ', 1)[-1]}") from exc
        except (OSError, RuntimeError, KeyError, TypeError) as exc:
            raise ValueError(f"--drafter: cannot load {d}: {exc}") from exc
        label = _label(d, taken)
        drafters[label] = dr
        info[label] = {"dir": str(d), "K": int(dr.num_modes), "block_size": int(dr.block_size)}
    cells = make_cells(drafters, methods, budgets, ddtree_on_mfd=config.ddtree_on_mfd == "true",
                       scorers=config.scorers)
    _check_cells(cells, methods, drafters)
    target = TargetModel(target_hf)
    # every prompt (and its later turns, at worst) fits the target's context: checked here, not
    # half-way through the decoding
    check_context([*prompts, *(p for ps in calib_sets.values() for p in ps)], tok, config.enable_thinking,
                  config.max_new_tokens, target.max_positions)
    if config.batch_size > 1 and dist.world > 1:
        raise ValueError("--batch-size: batched evaluation runs in one process (drop torchrun)")
    _check_not_distilled(config, calib_sets, tok, info)
    out = make_out_dir(out_dir, "--out")  # every check passed: now the output directory is made
    return _Eval(config, options, dist, target, tok, cells, prompts, calib_sets, info, out, progress)


def _check_not_distilled(config, calib_sets: dict, tok, info: dict) -> None:
    """Refuse calibration prompts that a drafter's training data answered: its acceptance there is
    in-sample, and a prediction calibrated on it is biased (a drafter records them beside its
    checkpoint, :data:`~mfd_theory.runs.pipeline.train_drafter.DISTILLED_PROMPTS`)."""
    calib = [p for ps in calib_sets.values() for p in ps]
    if not calib:
        return
    digest = {prompt_digest(first_ids(p, tok, config.enable_thinking)): p for p in calib}
    flag = "--calibration-prompts" if config.calibration_prompts is not None else "--calibration-count"
    for label, i in info.items():
        seen = [digest[h] for h in distilled_prompts(Path(i["dir"])) if h in digest]
        if seen:
            raise ValueError(f"{flag}: {len(seen)} calibration prompt(s) were answered by mfd distill for the "
                             f"training data of drafter {label!r} (ids {[p.id for p in seen][:5]}); calibrate on "
                             "held-out prompts of the evaluation's distribution that no drafter was trained on")


def _predict(ev: _Eval):
    """Everything the predictions use, measured before the first evaluated prompt on calibration
    prompts only: the round cost model, then per data set the acceptance calibration, every
    cell's predicted tau and speedup and the theory's budget choice, written to
    ``predictions.json``. (profile or None, its path)."""
    cfg, pred_path = ev.config, ev.out / "predictions.json"
    if not (ev.calib_sets and any(c.method != "ar" for c in ev.cells)):
        return None, pred_path
    _, _, temps = cfg.plan()
    first = {ds: [first_ids(p, ev.tok, cfg.enable_thinking) for p in ps] for ds, ps in ev.calib_sets.items()}
    evaluated = [{"index": i, "id": p.id, "dataset": p.dataset,
                  "sha256": prompt_digest(first_ids(p, ev.tok, cfg.enable_thinking))} for i, p in enumerate(ev.prompts)]
    pooled = [ids for ids_ in first.values() for ids in ids_]
    speed: dict = {}
    hot: dict = {}  # the same, from the profile's sampled decodes at its first T > 0
    profile = measure_round_profile(ev.target, ev.cells, pooled[: cfg.profile_prompts], max(2, cfg.max_new_tokens),
                                    name="round_profile", device=str(ev.dist.device), model=Path(cfg.target).name,
                                    progress=ev.progress, speed_out=speed, temperatures=temps, sampled_speed_out=hot)
    predictions, choices, cal_prompts = [], [], []
    cals: dict = {}  # one calibration per prompt set: a shared --calibration-prompts file is decoded once
    for ds in ev.datasets:
        key = ds if ds in first else None  # a --calibration-prompts file serves every data set
        if key not in cals:
            cal = calibrate_acceptance(ev.target, ev.cells, first[key], temperatures=temps,
                                       max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, eos_token_id=None,
                                       progress=ev.progress, calibration_set=key)
            cal.prompts = [{"index": i, "id": p.id, "dataset": p.dataset, "sha256": prompt_digest(ids)}
                           for i, (p, ids) in enumerate(zip(ev.calib_sets[key], first[key]))]
            cals[key] = cal
        cal = cals[key]
        predictions += predict_cells(cal, ev.cells, temps, profile, dataset=ds,
                                     n_evaluated=sum(1 for p in ev.prompts if p.dataset == ds))
        choices += choose_budgets(cal, ev.cells, temps, profile, speed, on_grid=True, dataset=ds,
                                  calibration_speed_sampled=hot)
        cal_prompts += [c for c in cal.prompts if c not in cal_prompts]
    merged = Calibration([e for c in cals.values() for e in c.entries], cal_prompts,
                         sum(c.seconds for c in cals.values()))
    if ev.dist.main:  # every rank calibrates (they stay in step); one writes
        write_predictions(pred_path, predictions=predictions, choices=choices, cal=merged,
                          evaluation_prompts=evaluated, profile=profile, config=ev.options, seed=cfg.seed,
                          extra={"calibration_speed": calibration_speed_rows(speed, hot, temps)})
    return profile, pred_path


def _write(ev: _Eval, records, profile, pred_path: Path, started: float) -> Result:
    """The rows (with the predictions written before the evaluation), ``eval.json``,
    ``per_prompt.jsonl``, the Spec-Bench answers when asked, the printed tables and the figures."""
    cfg, out = ev.config, ev.out
    rows = rows_from_records(records, ev.cells)
    prediction = None
    if profile is not None:
        add_speedup_predictions(rows, records, profile)
        saved = load_predictions(pred_path)  # what was written before the evaluation
        attach_predictions(rows, saved)
        prediction = prediction_check(saved, rows)
    gains = mfd_gains(rows)
    best = best_budgets(rows)
    data = {"rows": rows, "mfd_gains": gains, "best_budgets": best,
            "prediction_check": prediction_summary(rows, records), "drafters": ev.info,
            "datasets": {ds: sum(p.dataset == ds for p in ev.prompts) for ds in ev.datasets},
            "n_processes": ev.dist.world,
            "round_profile": profile.to_dict() if profile is not None else None,
            "speedup_check": speedup_check(rows) if profile is not None else None,
            "prediction": prediction, "evaluation_started_unix": started}
    res = Result("eval", config={**ev.options, "world_size": ev.dist.world}, data=data, seed=cfg.seed)
    res.save(out / "eval.json")
    atomic_write_text(out / "per_prompt.jsonl", "".join(json.dumps(r) + "\n" for r in per_prompt_records(records)))
    answer_files = []
    if cfg.format == "spec-bench":
        from mfd_theory.llm.measure.spec_bench import write_answers

        answer_files = write_answers(out / "spec_bench", records, ev.tok)
    print("\n".join(format_rows(rows)))
    if best:
        print("\nbest budget per dataset, temperature, drafter and method:")
        for b in best:
            print(f"  {b['dataset']} T={b['temperature']:g} {b['drafter']} {method_label(b['method'], b.get('scorer'))}: "
                  f"N = {b['budget']} "
                  f"(tau {b['tau']:.2f}, speedup {b['speedup']:.2f})")
    gl = format_gains(gains)
    if gl:
        print("\n".join(gl))
    for line in prediction_lines(prediction):
        print(line)
    print(f"wrote {out / 'eval.json'}")
    print(f"wrote {out / 'per_prompt.jsonl'}")
    if answer_files:
        print(f"wrote {len(answer_files)} Spec-Bench answer files under {out / 'spec_bench'}/")
    for path in write_figures(res, out):
        print(f"wrote {path}")
    return res


def _evaluate_batched(ev: _Eval) -> Result:
    """``mfd eval --batch-size B``: batched rows (:mod:`mfd_theory.llm.measure.evaluate_batch`); with
    ``--budget-policy auto`` the plan of every tree cell is measured on the calibration prompts and
    written to ``batch_plans.json`` before the first evaluated prompt."""
    from mfd_theory.llm.measure.evaluate_batch import decode_batch_cells

    cfg, out, b = ev.config, ev.out, int(ev.config.batch_size)
    _, _, temps = cfg.plan()
    plans = _batch_plans(ev) if cfg.budget_policy == "auto" else {}
    started = time.time()
    rows = decode_batch_cells(ev.target, ev.cells, ev.prompts, batch_size=b, policy=cfg.budget_policy,
                              temperatures=temps, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, passes=cfg.passes,
                              tokenizer=ev.tok, enable_thinking=cfg.enable_thinking, plans=plans,
                              progress=ev.progress)
    data = {"rows": rows, "drafters": ev.info, "batch_size": b, "budget_policy": cfg.budget_policy,
            "datasets": {ds: sum(p.dataset == ds for p in ev.prompts) for ds in ev.datasets},
            "evaluation_started_unix": started}
    res = Result("eval", config=dict(ev.options), data=data, seed=cfg.seed)
    res.save(out / "eval.json")
    print(f"batch size {b}, budget policy {cfg.budget_policy} (first turns; tokens/s over all requests)")
    for r in rows:
        extra = f", speedup {r['speedup']:.2f}" if "speedup" in r else ""
        print(f"  {r['dataset']} T={r['temperature']:g} {r['drafter']} {method_label(r['method'], r.get('scorer'))} "
              f"N={r['budget']}: "
              f"tau {r['tau'] or float('nan'):.2f}, {r['tokens_per_s']:.1f} tok/s{extra}, latency {r['latency_s']:.3f} s")
    print(f"wrote {out / 'eval.json'}")
    return res


def _batch_plans(ev: _Eval) -> dict:
    """{cell_key(method, drafter, scorer=...): BatchPlan} of every tree cell, measured on the
    calibration prompts, and ``batch_plans.json`` written before the evaluation."""
    from mfd_theory.llm.measure.batch_predict import make_batch_plan, measure_batch_profile, replayed_acceptance
    from mfd_theory.stats import MARGIN

    cfg, b = ev.config, int(ev.config.batch_size)
    _, budgets, _ = cfg.plan()
    pooled = [first_ids(p, ev.tok, cfg.enable_thinking) for ps in ev.calib_sets.values() for p in ps]
    if not pooled:
        raise ValueError("--budget-policy: auto needs calibration prompts (--calibration-count or "
                         "--calibration-prompts)")
    plans, saved = {}, {}
    for c in ev.cells:
        key = cell_key(c.method, c.drafter_label, scorer=c.scorer)
        if c.method in ("ar", "chain") or key in plans:
            continue
        prof = measure_batch_profile(ev.target, c.drafter, c.method, pooled, [b], budgets, cfg.max_new_tokens,
                                     seed=cfg.seed, scorer=c.scorer)
        # each policy's acceptance over the whole decode, its own rounds' dynamics included
        acc, _, _ = replayed_acceptance(ev.target, c.drafter, c.method, pooled, [b], budgets, cfg.max_new_tokens,
                                        policies=("per_request", "global"), scorer=c.scorer)
        plans[key] = make_batch_plan(prof, acc, margin=MARGIN)
        saved["/".join(map(str, key))] = {"profile": prof.to_dict(), "plan": plans[key].table[b],
                                                  "choice": list(plans[key].choose(b))}
    atomic_write_text(ev.out / "batch_plans.json", json.dumps(to_jsonable(
        {"written_at_unix": time.time(), "batch_size": b, "plans": saved}), indent=1) + "\n")
    if ev.progress:
        print(f"wrote {ev.out / 'batch_plans.json'} (before the evaluation)")
    return plans


def _label(d: Path, taken: set) -> str:
    base = d.parent.name if d.name == "drafter" else d.name
    label, i = base, 2
    while label in taken:
        label, i = f"{base}-{i}", i + 1
    taken.add(label)
    return label


def _check_cells(cells: list, methods: list[str], drafters: dict) -> None:
    """Refuse a request that would silently decode nothing: a method no drafter can run (mfd needs
    K > 1, dartree a Domino drafter, chain/ddtree a block drafter), or a drafter none of the
    methods runs."""
    for m in methods:
        if m != "ar" and not any(c.method == m for c in cells):
            kinds = ", ".join(f"{label} (K = {d.num_modes}{', Domino' if getattr(d, 'kind', '') == 'dartree' else ''})"
                              for label, d in drafters.items())
            raise ValueError(f"--methods: no drafter can run {m!r} (drafters: {kinds}); mfd needs K > 1, "
                             "dartree a Domino drafter, chain a block drafter, ddtree a block drafter with K = 1 "
                             "(or any K with --ddtree-on-mfd true)")
    for label in drafters:
        if not any(c.drafter_label == label for c in cells):
            raise ValueError(f"--drafter: {label} runs none of --methods {','.join(methods)} "
                             "(a Domino drafter runs dartree only; a K > 1 drafter runs ddtree only with --ddtree-on-mfd true)")


def write_figures(res: Result, out: Path) -> list[Path]:
    """tau and measured speedup against the budget, one figure per data set
    (``tau_speedup_vs_budget-<data set>.png``), each naming the run it was drawn from."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    from mfd_theory.figures import save_figure
    from mfd_theory.figures.e2e import eval_figure

    rows = res.data["rows"]
    paths = []
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == ds and r["speedup"] is not None]
        if not any(r["method"] in ("ddtree", "mfd") for r in mine):
            continue
        fig = eval_figure(res, ds)
        paths.append(Path(save_figure(fig, out / f"tau_speedup_vs_budget-{ds}.png")))
        plt.close(fig)
    return paths
