"""The torch half of ``mfd e2e``: cached training stages, predictions, then the evaluation.

Stages 1-5 (corpus, target, plain draft LM, self-distillation data, drafters) are cached under the
cache directory, each named by a hash of everything upstream; stage 6 writes ``predictions.json``
from held-out prompts that are never evaluated before stage 7 decodes the evaluated held-out prompts
into ``end_to_end.json``, and stage 8 decodes the replicated comparisons with the other drafter sets.
Design and measured quantities: docs/results.md ("End to end on one machine", "Predicting before decoding").
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.formatting import method_label
from mfd_theory.results import Result, atomic_write_bytes
from mfd_theory.stats import compare
from mfd_theory.validation import make_out_dir

# Everything imported up front (not inside the functions): a long run must not pick up a module
# that was edited while it was training.
from mfd_theory.llm.measure.assisted import hf_assisted_baseline
from mfd_theory.runs.experiments.e2e_ceiling import cached_ceiling, reach_rows
from mfd_theory.llm.training.corpus import Corpus, CorpusConfig, build_corpus
from mfd_theory.llm.models.drafter import build_drafter, load_drafter
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.llm.measure.evaluate import (
    Cell, add_speedup_predictions, decode_cells, format_gains, make_cells, mfd_gains, per_prompt_records,
    prediction_summary, rows_from_records, scorer_of, speedup_check,
)
from mfd_theory.llm.measure.predict import (
    attach_predictions, calibrate_acceptance, choose_budgets, load_predictions, per_round_rules, predict_cells,
    prediction_check, prompt_digest, uncalibrated, write_predictions,
)
from mfd_theory.llm.measure.profile import calibration_speed_rows, measure_round_profile
from mfd_theory.llm.models.fingerprint import FINGERPRINT_VERSION, target_fingerprint
from mfd_theory.llm.training.train import (
    DrafterTrainConfig, LMConfig, LMTrainConfig, config_hash, make_distill_data, mode_diagnostics,
    train_drafter, train_lm,
)

__all__ = ["run_e2e", "evaluate", "mfd_gains", "format_table", "load_trained_drafter",
           "cached_corpus", "cached_target", "cached_distill_data", "cached_drafter", "target_run_name"]


def load_trained_drafter(directory: str | Path, target):
    """Load a drafter saved by :func:`~mfd_theory.llm.training.train.train_drafter`, refusing one trained
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
                        intermediate_size=cfg.target_intermediate, arch=cfg.target_arch)
        steps = cfg.target_steps
    train = LMTrainConfig(seq_len=cfg.seq_len, batch_size=cfg.target_batch, steps=steps,
                          lr=cfg.target_lr, warmup=max(1, steps // 20), ckpt_every=cfg.ckpt_every,
                          seed=cfg.seed)
    return arch, train


def _corpus_config(cfg) -> CorpusConfig:
    return CorpusConfig(n_train=cfg.n_train, n_heldout=cfg.n_heldout, vocab_size=cfg.vocab_size, seed=cfg.seed)


def target_run_name(cfg) -> str:
    """The cache directory name of ``cfg``'s target: a hash of its architecture, training and corpus."""
    arch, train = _lm_configs(cfg, draft=False)
    return f"target-{config_hash(arch, train, _corpus_config(cfg))}"


def cached_corpus(cfg, cache: Path) -> Corpus:
    """The corpus and tokenizer of ``cfg``, built once and then loaded from ``cache``."""
    ccfg = _corpus_config(cfg)
    d = cache / f"corpus-{config_hash(ccfg)}"
    if (d / "corpus.json").is_file():
        return Corpus.load(d)
    corpus = build_corpus(ccfg)
    corpus.save(d)
    return corpus


def cached_target(cfg, corpus: Corpus, cache: Path, progress: bool = True):
    """(frozen target, its run directory, loss curve): ``cfg``'s target Qwen3ForCausalLM, trained
    on ``corpus`` once and then loaded from ``cache`` (``target-<hash>/model``)."""
    if corpus.config != _corpus_config(cfg):
        raise ValueError(f"corpus: built with {corpus.config}, but the config asks for {_corpus_config(cfg)}")
    arch, train = _lm_configs(cfg, draft=False)
    tdir = cache / target_run_name(cfg)
    target_hf, curve = train_lm(corpus, tdir, arch, train, progress=progress, desc="target", device=cfg.device)
    for p in target_hf.parameters():
        p.requires_grad_(False)
    return target_hf, tdir, curve


def cached_distill_data(cfg, corpus, target_hf, tdir: Path, cache: Path, progress: bool) -> tuple[np.ndarray, Path]:
    """(the target's own continuations of training-split prompts, their file): made once, then read
    from ``cache`` (``distill-<hash>.npy``, keyed by the target and the distillation options)."""
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


def cached_drafter(cfg, K: int, target_hf, corpus, data, dpath: Path, cache: Path, progress: bool,
                   kind: str = "dflash", seed: int | None = None, objective: str = "mixture"):
    """A trained drafter (cached): K modes, or with ``kind="dartree"`` the Domino drafter (one
    mode, the correction head of rank ``cfg.dartree_rank``), trained on the same data and steps.
    ``seed`` (default ``cfg.seed``) seeds its initialisation and batches: a replicate.
    ``objective`` "wta": the winner-take-all objective (K > 1; share ``cfg.wta_eps`` to the losers)."""
    seed = cfg.seed if seed is None else int(seed)
    dcfg = DrafterTrainConfig(
        block_size=cfg.block_size, num_layers=cfg.drafter_layers, num_modes=K,
        batch_size=cfg.drafter_batch, blocks_per_seq=cfg.blocks_per_seq, steps=cfg.drafter_steps,
        lr=cfg.drafter_lr, warmup=max(1, cfg.drafter_steps // 20), balance=cfg.balance,
        ckpt_every=cfg.ckpt_every, seed=seed,
        **({"objective": "wta", "wta_eps": cfg.wta_eps} if objective == "wta" else {}),
    )
    # The fingerprint version is part of the key: a drafter cached under an older fingerprint
    # (which this target's no longer matches) is retrained rather than refused.
    # So is the feature cache's cap, which decides whether the target's features are made once per
    # run or once per step (the two agree only up to the forward's last bits).
    fpv = f"fingerprint-v{FINGERPRINT_VERSION}-features-cap{dcfg.feature_cache_mb}"
    if kind == "dartree":
        run_dir = cache / f"drafter-dartree-{config_hash(dcfg, dpath.name, kind, cfg.dartree_rank, fpv)}"
    else:
        run_dir = cache / f"drafter-k{K}-{config_hash(dcfg, dpath.name, fpv)}"
    if (run_dir / "drafter" / "config.json").is_file() and (run_dir / "loss_curve.json").is_file():
        return (load_trained_drafter(run_dir / "drafter", target_hf),
                json.loads((run_dir / "loss_curve.json").read_text()))
    drafter = build_drafter(target_hf, cfg.block_size, cfg.drafter_layers, num_modes=K, seed=seed,
                            mask_token_id=corpus.mask_id, kind=kind,
                            rank=cfg.dartree_rank if kind == "dartree" else None)
    curve = train_drafter(target_hf, drafter, data, cfg.prompt_len, run_dir, dcfg, progress=progress,
                          desc=("drafter dartree" if kind == "dartree" else f"drafter K={K}")
                          + (" wta" if objective == "wta" else "") + (f" (seed {seed})" if seed != cfg.seed else ""))
    return drafter.eval(), curve


# --------------------------------------------------------------------------------------- evaluation


def eval_prompts(cfg, corpus) -> np.ndarray:
    """The evaluated prompts: ``cfg.eval_prompts`` of the held-out split."""
    return corpus.prompts(cfg.eval_prompts, cfg.prompt_len, "heldout", seed=cfg.seed + 2)


def calibration_prompts(corpus, cfg, exclude: set[str]) -> np.ndarray:
    """``cfg.calibration_prompts`` prompts (at least ``cfg.profile_prompts``) from the held-out split,
    the evaluation's own distribution, none of whose token hashes is in ``exclude`` (the evaluated
    prompts) and no two alike: calibration and evaluation are disjoint samples of one distribution."""
    n = max(cfg.calibration_prompts, cfg.profile_prompts)
    pool = corpus.prompts(8 * n, cfg.prompt_len, "heldout", seed=cfg.seed + 5)
    keep, seen = [], set(exclude)
    for p in pool:
        if prompt_digest(p) not in seen:
            seen.add(prompt_digest(p))
            keep.append(p)
    if len(keep) < n:
        raise ValueError(f"calibration_prompts: only {len(keep)} held-out prompts differ from the evaluated ones "
                         f"and from each other (asked for {n})")
    return np.stack(keep[:n])


def e2e_cells(cfg, drafters: dict[str, Any]) -> list:
    """The cells ``mfd e2e`` decodes, from ``drafters`` {label: drafter} (:func:`drafter_labels`):
    ar, chain (product drafter), ddtree and mfd (each of ``cfg.scorers``) at every budget, and on
    the Domino drafter method "dartree" at every budget."""
    cells = make_cells(drafters, ("ar", "chain", "ddtree", "mfd", "dartree"), cfg.budgets,
                       ddtree_on_mfd=cfg.ddtree_on_mfd, scorers=cfg.scorers)
    # e2e's single-mode drafter is not run as chain-of-MFD: chain only for the product drafter; the
    # ddtree ablation only on the mixture objective's drafters (a winner-take-all one is there for its modes)
    return [c for c in cells if not (c.method == "chain" and c.K > 1)
            and not (c.method == "ddtree" and c.drafter_label.endswith("-wta"))]


def _same_cell(c, method: str, label: str, scorer) -> bool:
    return c.method == method and c.drafter_label == label and c.scorer == scorer


def all_cells(cfg, drafters: dict[str, Any], extra_budgets: dict | None = None,
              per_round: dict | None = None) -> list:
    """The grid (:func:`e2e_cells`) plus the theory's choices: ``extra_budgets`` {(method, drafter
    label, scorer): [N, ...] or {N: temperatures}} adds cells off the budget grid (with
    temperatures: decoded only at the temperatures whose choice they are); ``per_round`` {(method,
    drafter label[, scorer]): {temperature: rule}} adds a cell per entry whose tree size each round's
    rule picks (drafter label ``<label>/per-round``, built at the rules' cap and cut)."""
    cells = e2e_cells(cfg, drafters)
    for key, rules in (per_round or {}).items():
        method, label = key[0], key[1]
        scorer = key[2] if len(key) > 2 else scorer_of({"method": method})  # cell_key: mixture keys are short
        like = next(c for c in cells if _same_cell(c, method, label, scorer))
        cap = max(r.max_budget for r in rules.values())
        cells.append(Cell(method, f"{label}/per-round", cap, like.drafter, budget_rule=rules, scorer=like.scorer))
    for (method, label, scorer), budgets in (extra_budgets or {}).items():
        like = next(c for c in cells if _same_cell(c, method, label, scorer))
        temps = budgets if isinstance(budgets, dict) else dict.fromkeys(budgets)
        cells += [Cell(method, label, int(n), like.drafter, scorer=scorer,
                       temperatures=None if temps[n] is None else tuple(sorted(float(t) for t in temps[n])))
                  for n in sorted(temps)
                  if not any(_same_cell(c, method, label, scorer) and c.budget == n for c in cells)]
    return cells


def evaluate(cfg, target, cells: list, prompts: np.ndarray, progress: bool = True,
             with_records: bool = False, profile=None):
    """All rows: for each temperature, ar and every cell of ``cells``, through the shared evaluator (:mod:`mfd_theory.llm.measure.evaluate`: methods
    interleaved per prompt, warm-up, decode-only timing over ``cfg.timing_passes`` passes). At
    T = 0 each row also records whether its outputs equal ar's (``matches_ar``: lossless; None on
    sampled rows, see :func:`~mfd_theory.llm.measure.evaluate.rows_from_records`).
    ``with_records`` also returns the per-prompt records. With a round ``profile`` (measured
    before), every row gets the in-sample speedups of :func:`~mfd_theory.llm.measure.evaluate.add_speedup_predictions`."""
    records = decode_cells(target, cells, list(prompts), temperatures=cfg.temperatures,
                           max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, passes=cfg.timing_passes,
                           eos_token_id=[], progress=progress, dataset_name="heldout")
    rows = rows_from_records(records, cells)
    if profile is not None:
        add_speedup_predictions(rows, records, profile)
    return (rows, records) if with_records else rows


def format_table(data: dict) -> str:
    """A markdown table of the rows (what the README reports)."""
    lines = ["| T | method | drafter | N | tau | accepted (mean ± std) | predicted | covered@T1 | "
             "z | speedup | dead share |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    def f(v, p=2):
        # Missing values (null) print as "-".
        if not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:.{p}f}"

    for r in data["rows"]:
        lines.append(
            f"| {r['temperature']:g} | {method_label(r['method'], r.get('scorer'))} | {r['drafter']} | {r['budget']} | "
            f"{f(r['tau'])} | "
            f"{f(r['accepted_mean'])} ± {f(r['accepted_std'])} | {f(r['covered_mass_insample'])} | "
            f"{f(r['covered_mass_mean'])} | {f(r['pred_gap_z'], 1)} | {f(r['speedup'])}"
            f"{'' if r.get('speedup_std') is None else ' ± ' + f(r['speedup_std'])} | "
            f"{f(r['dead_share'])} |")
    lines += format_gains(data.get("mfd_gains", []))
    pc = data.get("prediction_check") or {}
    if pc.get("n_rows"):
        lines += ["", f"T > 0, measured vs predicted acceptance over {pc['n_rows']} rows: mean z "
                  f"{pc['mean_z']:+.2f}, max |z| {pc['max_abs_z']:.2f}, {100 * pc['share_abs_z_below_2']:.0f}% "
                  f"within ±2, sum z^2 = {pc['sum_z2']:.1f}"]
    hf = data.get("hf_assisted") or []
    if hf:
        lines += ["", "| T | HF method | tokens/s | speedup vs HF AR |", "|---|---|---|---|"]
        for r in hf:
            lines.append(f"| {r['temperature']:g} | {r['method']} | {f(r['tokens_per_s'], 1)} | {f(r['speedup'])} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- driver


@contextlib.contextmanager
def _timed(times: dict[str, float], key: str):
    """Record the wall time of the ``with`` body as ``times[key]`` (in seconds)."""
    t = time.perf_counter()
    yield
    times[key] = time.perf_counter() - t


@dataclasses.dataclass
class _Trained:
    """Every checkpoint of the run (stages 1-5), trained or loaded from the cache."""

    corpus: Corpus
    target_hf: Any
    tdir: Path                      # the target's cache directory (its name keys the stages after it)
    target_curve: list
    draft_lm: Any                   # None: no HF assisted baseline
    draft_curve: list
    drafters: dict[int, Any]        # K -> block drafter (K = 1: the product drafter)
    curves: dict[int, list]
    dartree: Any                    # None: no Domino drafter
    dartree_curve: list
    wta: dict[int, Any] = dataclasses.field(default_factory=dict)  # K -> winner-take-all MFD drafter
    wta_curves: dict[int, list] = dataclasses.field(default_factory=dict)
    # runs 1..R-1 of the replicated comparisons: {label: drafter} each (as :attr:`labelled`), the same
    # training as run 0's but drafter seed cfg.seed + r
    replicas: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    ceiling: dict | None = None     # the target-only ceiling on calibration prompts (e2e_ceiling)

    @property
    def labelled(self) -> dict[str, Any]:
        """Run 0's drafters by label (:func:`drafter_labels`)."""
        return drafter_labels(self.drafters, self.dartree, self.wta)


def drafter_labels(drafters: dict[int, Any], dartree=None, wta: dict[int, Any] | None = None) -> dict[str, Any]:
    """{label: drafter} as the rows name them: "product" (K = 1), "mfd-k<K>", "mfd-k<K>-wta" (the
    winner-take-all objective), "dartree" last (the product drafter stays the first single-mode one)."""
    out = {("product" if K == 1 else f"mfd-k{K}"): d for K, d in sorted(drafters.items())}
    out.update({f"mfd-k{K}-wta": d for K, d in sorted((wta or {}).items())})
    if dartree is not None:
        out["dartree"] = dartree
    return out


@dataclasses.dataclass
class _Plan:
    """What is fixed before the first evaluated prompt is decoded (stage 6)."""

    cells: list
    eval_digests: list[dict]
    pred_path: Path
    profile: Any = None             # the round cost model; None with --profile-prompts 0
    cal: Any = None                 # the acceptance calibration; None without a profile
    choices: list = dataclasses.field(default_factory=list)
    predictions: list = dataclasses.field(default_factory=list)  # every cell's, as written to predictions.json


@dataclasses.dataclass
class _Measured:
    """The evaluation (stage 7): grid rows and their records, the chosen budgets' rows apart."""

    rows: list[dict]
    records: list[dict]
    chosen_rows: list[dict]
    prediction: dict | None
    started_unix: float


def _open_run(cfg, out_dir) -> tuple[Path, Path]:
    """The output and cache directories (made), torch's training threads set, and the refusal of
    a CUDA device this machine lacks: the one check that the config (checked when it was made)
    cannot do."""
    out_dir = make_out_dir(Path(out_dir), "out_dir")
    cache = make_out_dir(Path(cfg.cache_dir) if cfg.cache_dir else out_dir / "cache", "cache_dir")
    torch.set_num_threads(cfg.threads)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {cfg.device!r} requested but CUDA is not available")
    return out_dir, cache


def _train_stages(cfg, cache: Path, progress: bool, times: dict[str, float]) -> _Trained:
    """Stages 1-5 (corpus, target, draft LM, distillation data, drafters), each timed into ``times``."""
    with _timed(times, "corpus"):
        corpus = cached_corpus(cfg, cache)
    with _timed(times, "target"):
        target_hf, tdir, target_curve = cached_target(cfg, corpus, cache, progress)
    draft_lm, draft_curve = None, []
    # HF's assisted generation cannot roll a recurrent (GDN) state back: no baseline on hybrids
    if cfg.hf_assisted and cfg.target_arch == "qwen3":
        darch, dtrain = _lm_configs(cfg, draft=True)
        with _timed(times, "draft_lm"):
            draft_lm, draft_curve = train_lm(corpus, cache / f"draftlm-{config_hash(darch, dtrain, corpus.config)}",
                                             darch, dtrain, progress=progress, desc="draft LM", device=cfg.device)
    with _timed(times, "distill"):
        data, dpath = cached_distill_data(cfg, corpus, target_hf, tdir, cache, progress)
    ceiling = None
    if cfg.ceiling_prompts > 0:
        with _timed(times, "ceiling"):
            cal = calibration_prompts(corpus, dataclasses.replace(
                cfg, calibration_prompts=max(cfg.calibration_prompts, cfg.ceiling_prompts)),
                {prompt_digest(p) for p in eval_prompts(cfg, corpus)})
            ceiling = cached_ceiling(cfg, target_hf, tdir, cal[: cfg.ceiling_prompts], cache, progress)
    drafters, curves = {}, {}
    for K in (1, *cfg.modes):
        with _timed(times, f"drafter_k{K}"):
            drafters[K], curves[K] = cached_drafter(cfg, K, target_hf, corpus, data, dpath, cache, progress)
    wta, wta_curves = {}, {}
    for K in cfg.wta_modes:
        with _timed(times, f"drafter_k{K}_wta"):
            wta[K], wta_curves[K] = cached_drafter(cfg, K, target_hf, corpus, data, dpath, cache, progress,
                                                   objective="wta")
    dartree, dartree_curve = None, []
    if cfg.dartree:
        with _timed(times, "drafter_dartree"):
            dartree, dartree_curve = cached_drafter(cfg, 1, target_hf, corpus, data, dpath, cache, progress,
                                                    kind="dartree")
    replicas = []
    for r in range(1, cfg.replicates):
        seed, made, made_wta = cfg.seed + r, {}, {}
        for K in (1, *cfg.modes):
            with _timed(times, f"drafter_k{K}_seed{seed}"):
                made[K] = cached_drafter(cfg, K, target_hf, corpus, data, dpath, cache, progress, seed=seed)[0]
        for K in cfg.wta_modes:
            with _timed(times, f"drafter_k{K}_wta_seed{seed}"):
                made_wta[K] = cached_drafter(cfg, K, target_hf, corpus, data, dpath, cache, progress, seed=seed,
                                             objective="wta")[0]
        dt = None
        if cfg.dartree:
            with _timed(times, f"drafter_dartree_seed{seed}"):
                dt = cached_drafter(cfg, 1, target_hf, corpus, data, dpath, cache, progress, kind="dartree",
                                    seed=seed)[0]
        replicas.append(drafter_labels(made, dt, made_wta))
    return _Trained(corpus, target_hf, tdir, target_curve, draft_lm, draft_curve, drafters, curves, dartree,
                    dartree_curve, wta, wta_curves, replicas, ceiling)


def _mode_diagnostics(cfg, trained: _Trained) -> dict:
    """Each MFD drafter's use of its modes, on held-out self-distillation blocks (other prompts,
    other seed than the training data)."""
    held = make_distill_data(trained.target_hf,
                             trained.corpus.prompts(32, cfg.prompt_len, "heldout", seed=cfg.seed + 3),
                             cfg.distill_gen_len, cfg.distill_temperature, seed=cfg.seed + 3, progress=False)
    return {label: mode_diagnostics(trained.target_hf, d, held, cfg.prompt_len, seed=cfg.seed)
            for label, d in trained.labelled.items() if label.startswith("mfd-")}


def _budget_choice(cfg, cal, grid: list, profile, speed: dict, hot: dict | None = None) -> tuple[list, dict, dict]:
    """(choices, per-round rules, chosen budgets off the grid): the theory's budget per tree method
    and temperature, picked from the calibration before decoding."""
    # the methods one would deploy; the ablation (ddtree on a K > 1 drafter's marginals) is a
    # diagnostic, measured on the grid only
    deployable = [c for c in grid if not (c.method == "ddtree" and c.K > 1)]
    choices = choose_budgets(cal, deployable, cfg.temperatures, profile, speed, dataset="heldout",
                             calibration_speed_sampled=hot)
    per_round = per_round_rules(choices, profile, grid)
    # the chosen budgets off the grid are decoded too, each at the temperature(s) it was chosen for
    extra: dict = {}
    for ch in choices:
        if ch["budget"] not in cfg.budgets:
            extra.setdefault((ch["method"], ch["drafter"], ch.get("scorer")), {}).setdefault(
                ch["budget"], set()).add(ch["temperature"])
    return choices, per_round, extra


def _predict_before_decoding(cfg, trained: _Trained, target, prompts: np.ndarray, pred_path: Path, progress: bool,
                             times: dict[str, float]) -> _Plan:
    """Stage 6: the round cost model and the acceptance calibration, measured on held-out prompts
    that are never evaluated, the theory's budget choices, and ``predictions.json`` written, all
    before the first evaluated prompt is decoded. Returns the cells to decode."""
    plan = _Plan(cells=[], pred_path=pred_path,
                 eval_digests=[{"index": i, "id": str(i), "sha256": prompt_digest(p), "dataset": "heldout"}
                               for i, p in enumerate(prompts)])
    grid = e2e_cells(cfg, trained.labelled)
    extra, per_round, speed, hot, calib = {}, {}, {}, {}, None
    if cfg.profile_prompts > 0:
        with _timed(times, "round_profile"):
            calib = calibration_prompts(trained.corpus, cfg, {d["sha256"] for d in plan.eval_digests})
            plan.profile = measure_round_profile(
                target, grid, list(calib[: cfg.profile_prompts]), cfg.max_new_tokens, repeats=cfg.profile_repeats,
                name="round_profile", device=str(target.device), model=f"e2e target {trained.tdir.name}",
                progress=progress, speed_out=speed, temperatures=cfg.temperatures, sampled_speed_out=hot)
        plan.cal = calibrate_acceptance(target, grid, list(calib), temperatures=cfg.temperatures,
                                        max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, progress=progress)
        plan.cal.prompts = [{"index": i, "id": f"calibration-{i}", "sha256": prompt_digest(p), "dataset": "heldout"}
                            for i, p in enumerate(calib)]
        if cfg.budget_choice:
            plan.choices, per_round, extra = _budget_choice(cfg, plan.cal, grid, plan.profile, speed, hot)
    plan.cells = all_cells(cfg, trained.labelled, extra, per_round)
    if plan.cal is None:
        return plan
    todo = uncalibrated(plan.cal, plan.cells, cfg.temperatures)  # the chosen and per-round cells
    if todo:
        more = calibrate_acceptance(target, todo, list(calib), temperatures=cfg.temperatures,
                                    max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, progress=progress)
        plan.cal.entries += more.entries
        plan.cal.seconds += more.seconds
    times["calibration"] = plan.cal.seconds
    plan.predictions = predict_cells(plan.cal, plan.cells, cfg.temperatures, plan.profile, "heldout",
                                     n_evaluated=len(prompts))
    write_predictions(pred_path, predictions=plan.predictions,
                      choices=plan.choices, cal=plan.cal, evaluation_prompts=plan.eval_digests, profile=plan.profile,
                      config=dataclasses.asdict(cfg), seed=cfg.seed,
                      extra={"calibration_speed": calibration_speed_rows(
                          speed, hot, cfg.temperatures, lambda method: scorer_of({"method": method}))})
    return plan


def _off_grid(cfg, row: dict) -> bool:
    """A row of the theory's chosen budgets: kept apart, so the grid's tables stay as they were."""
    return row["method"] not in ("ar", "chain") and (row["budget"] not in cfg.budgets
                                                      or "/per-round" in row["drafter"])


def _evaluate_and_check(cfg, trained: _Trained, target, prompts: np.ndarray, plan: _Plan, progress: bool,
                        times: dict[str, float]) -> _Measured:
    """Stage 7: decode every cell on the evaluated prompts, then read ``predictions.json`` back
    (written before) and compare it with the measurement."""
    started = time.time()
    with _timed(times, "evaluate"):
        rows, records = evaluate(cfg, target, plan.cells, prompts, progress=progress, with_records=True,
                                 profile=plan.profile)
    chosen_rows = [r for r in rows if _off_grid(cfg, r)]
    rows = [r for r in rows if not _off_grid(cfg, r)]
    records = [r for r in records if not _off_grid(cfg, r)]
    prediction = None
    if plan.cal is not None:
        predictions = load_predictions(plan.pred_path)
        attach_predictions(rows, predictions)
        attach_predictions(chosen_rows, predictions)
        prediction = prediction_check(predictions, rows, chosen_rows)
    return _Measured(rows, records, chosen_rows, prediction, started)


def _hf_assisted_rows(cfg, trained: _Trained, prompts: np.ndarray, times: dict[str, float]) -> list[dict]:
    """Hugging Face's assisted generation with the plain draft LM (none without one)."""
    if trained.draft_lm is None:
        return []
    with _timed(times, "hf_assisted"):
        return hf_assisted_baseline(trained.target_hf, trained.draft_lm, prompts, cfg.max_new_tokens,
                                    cfg.temperatures, seed=cfg.seed)


# --------------------------------------------------------------------------------------- replicates
#: the questions the replicated comparisons answer, each its own table (and multiplicity family per T)
QUESTIONS = {
    "against_product": "MFD and DARTree against the product drafter",
    "scorer": "the best-mode tree against the mixture tree, on the same MFD drafter",
    "objective": "the winner-take-all objective against the mixture objective, same K and scorer",
}


def _key(method: str, drafter: str, budget: int, scorer) -> tuple:
    """A cell as the replicated comparisons name it: (method, drafter label, N, scorer or None)."""
    return (method, drafter, int(budget), scorer_of({"method": method, "scorer": scorer}))


def replicated_pairs(cfg, choices: list[dict], predictions: list[dict]) -> list[dict]:
    """The comparisons stated as findings, per temperature, every method at the budget the theory
    chose before decoding (no budget is picked on evaluated timings): each MFD drafter (each
    scorer) and the Domino drafter against the product drafter (chain or ddtree, whichever the
    theory predicted faster); the best-mode tree against the mixture tree on each MFD drafter; and
    each winner-take-all drafter against the mixture objective's of the same K, per scorer. Each
    entry: ``{"question", "temperature", "a": (method, drafter, N, scorer), "b": ...}``."""
    out = []
    L = cfg.block_size - 1
    for temp in cfg.temperatures:
        chosen = {(c["method"], c["drafter"], scorer_of(c)): int(c["budget"]) for c in choices
                  if c["temperature"] == float(temp)}
        speed = {_key(p["method"], p["drafter"], p["budget"], p.get("scorer")): p.get("predicted_speedup")
                 for p in predictions if p["temperature"] == float(temp) and not p.get("per_round_budget")}

        def cell(method, drafter, scorer=None):
            n = chosen.get((method, drafter, scorer_of({"method": method, "scorer": scorer})))
            return None if n is None else _key(method, drafter, n, scorer)

        product = [c for c in (_key("chain", "product", L, None), cell("ddtree", "product")) if c is not None]
        base = max(product, key=lambda c: speed.get(c) if speed.get(c) is not None else -math.inf)

        def add(question, a, b):
            if a is not None and b is not None:
                out.append({"question": question, "temperature": float(temp), "a": a, "b": b})

        for K in cfg.modes:
            for sc in cfg.scorers:
                add("against_product", cell("mfd", f"mfd-k{K}", sc), base)
        if cfg.dartree:
            add("against_product", cell("dartree", "dartree"), base)
        if "best_mode" in cfg.scorers and "mixture" in cfg.scorers:
            for K in cfg.modes:
                add("scorer", cell("mfd", f"mfd-k{K}", "best_mode"), cell("mfd", f"mfd-k{K}", "mixture"))
        for K in cfg.wta_modes:
            for sc in cfg.scorers:
                add("objective", cell("mfd", f"mfd-k{K}-wta", sc), cell("mfd", f"mfd-k{K}", sc))
    return out


_RUN_KEEP = ("method", "scorer", "drafter", "K", "budget", "temperature", "tau", "speedup", "speedup_std",
             "tokens_per_s", "matches_ar", "prompt_ids", "prompt_tau", "prompt_tokens_per_s")


def _by_cell(rows: list[dict]) -> dict[tuple, dict]:
    """{(temperature, method, drafter, N, scorer): row} of one run's fixed-budget rows."""
    return {(float(r["temperature"]), *_key(r["method"], r["drafter"], r["budget"], r.get("scorer"))): r
            for r in rows if "/per-round" not in r["drafter"]}


def _run_matrix(runs: list[dict], cell: tuple, temp: float, key: str, ids: list[str]) -> np.ndarray:
    """[runs, prompts]: each run's per-prompt ``key`` of ``cell`` at ``temp``, in ``ids``' order."""
    out = []
    for rows in runs:
        row = rows[(temp, *cell)]
        vals = dict(zip(row["prompt_ids"], row[key]))
        out.append([vals.get(i) for i in ids])
    return np.array(out, dtype=object)


def replicated_comparisons(pairs: list[dict], runs: list[dict]) -> list[dict]:
    """Each pair over the runs (:func:`mfd_theory.stats.compare`, runs model), Bonferroni over the
    pairs of one question at one temperature (its table's family); ``runs``: per run,
    {(temperature, method, drafter, N, scorer): row} (:func:`_by_cell`)."""
    family: dict[tuple, int] = {}
    for p in pairs:
        family[(p.get("question"), p["temperature"])] = family.get((p.get("question"), p["temperature"]), 0) + 1
    out = []
    names = ("method", "drafter", "budget", "scorer")
    for p in pairs:
        temp, a, b = p["temperature"], tuple(p["a"]), tuple(p["b"])
        m = family[(p.get("question"), temp)]
        entry = {"question": p.get("question"), "temperature": temp, "a": dict(zip(names, a)),
                 "b": dict(zip(names, b)), "family": m,
                 "tau_runs": [[rows[(temp, *a)]["tau"], rows[(temp, *b)]["tau"]] for rows in runs],
                 "speedup_runs": [[rows[(temp, *a)]["speedup"], rows[(temp, *b)]["speedup"]] for rows in runs]}
        ids = runs[0][(temp, *a)]["prompt_ids"]
        for name, key in (("tau_cmp", "prompt_tau"), ("speed_cmp", "prompt_tokens_per_s")):
            x, y = _run_matrix(runs, a, temp, key, ids), _run_matrix(runs, b, temp, key, ids)
            ok = [j for j in range(len(ids)) if all(v is not None for v in (*x[:, j], *y[:, j]))]
            entry[name] = (compare(x[:, ok].astype(float), y[:, ok].astype(float), family=m).to_dict()
                           if len(ok) >= 2 else None)
        out.append(entry)
    return out


def _replicate(cfg, trained: _Trained, target, prompts: np.ndarray, plan: _Plan, measured: _Measured, progress: bool,
               times: dict[str, float]) -> dict | None:
    """Runs 1..R-1: the comparison cells decoded (timed, the same harness) with each run's drafters,
    then every pair compared over the R runs; run 0 is the main evaluation's rows."""
    if cfg.replicates < 2 or not plan.choices:
        return None
    pairs = replicated_pairs(cfg, plan.choices, plan.predictions)
    needed: dict[tuple, set] = {}
    for p in pairs:
        for cell in (p["a"], p["b"]):
            needed.setdefault(tuple(cell), set()).add(p["temperature"])
    runs = [_by_cell(measured.rows + measured.chosen_rows)]
    with _timed(times, "replicates"):
        for labelled in trained.replicas:
            cells = [Cell("ar", "none", 0)] + [
                Cell(m, d, n, labelled[d], temperatures=tuple(sorted(temps)), scorer=sc)
                for (m, d, n, sc), temps in needed.items()]
            runs.append(_by_cell(evaluate(cfg, target, cells, prompts, progress=progress)))
    families = {f"{q}, T = {t:g}": sum(1 for p in pairs if p["question"] == q and p["temperature"] == t)
                for q, t in dict.fromkeys((p["question"], p["temperature"]) for p in pairs)}
    return {"runs": cfg.replicates, "drafter_seeds": [cfg.seed + r for r in range(cfg.replicates)],
            "held_fixed": "the target, its training and the distilled data (seed %d); the evaluated prompts" % cfg.seed,
            "questions": QUESTIONS, "pairs": pairs, "comparisons": replicated_comparisons(pairs, runs),
            "run_rows": [[{**{k: r.get(k) for k in _RUN_KEEP}, "run": i} for r in rows.values()]
                         for i, rows in enumerate(runs)],
            "rule": "paired over the evaluated prompts; each run's mean log ratio is one observation, Student t over "
                    f"the {cfg.replicates} runs; intervals Bonferroni-adjusted over the comparisons of one question "
                    "at one temperature (" + ", ".join(f"{k}: {v}" for k, v in families.items())
                    + "; docs/statistics.md)"}


def _thin(curve: list[dict], keys=("step", "loss", "nll", "acc1")) -> list[dict]:
    """A loss curve with the columns worth saving (the mode usages included)."""
    return [{k: c[k] for k in c if k in keys or k.startswith("usage")} for c in curve]


def _payload(cfg, cache: Path, trained: _Trained, plan: _Plan, measured: _Measured, modes_diag: dict,
             hf_rows: list[dict], prompts: np.ndarray, times: dict[str, float], replicated: dict | None) -> dict:
    """The data of ``end_to_end.json``."""
    corpus, profile, cal = trained.corpus, plan.profile, plan.cal
    rows, records = measured.rows, measured.records
    return {
        "rows": rows,
        "mfd_gains": mfd_gains(rows),
        "replicated": replicated,
        "ceiling": trained.ceiling,
        "ceiling_reach": reach_rows(trained.ceiling, rows, replicated),
        "prediction_check": prediction_summary(rows, records),
        "round_profile": profile.to_dict() if profile is not None else None,
        "speedup_check": speedup_check(rows) if profile is not None else None,
        "budget_choice": plan.choices,
        "chosen_budget_rows": measured.chosen_rows,
        "prediction": measured.prediction,
        "evaluation_started_unix": measured.started_unix,
        "calibration_prompts": cal.prompts if cal is not None else [],
        "evaluation_prompts": plan.eval_digests,
        "per_prompt": per_prompt_records(records),
        "mode_diagnostics": modes_diag,
        "hf_assisted": hf_rows,
        "loss_curves": {"target": _thin(trained.target_curve), "draft_lm": _thin(trained.draft_curve),
                        **{("product" if K == 1 else f"mfd-k{K}"): _thin(c) for K, c in trained.curves.items()},
                        **{f"mfd-k{K}-wta": _thin(c) for K, c in trained.wta_curves.items()},
                        **({"dartree": _thin(trained.dartree_curve)} if trained.dartree is not None else {})},
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


@keeps_torch_threads
def run_e2e(cfg, out_dir: str | Path, progress: bool = True, prepare_only: bool = False) -> Result | None:
    """Train (cached) and evaluate per ``cfg`` (an :class:`~mfd_theory.commands.experiments.e2e.E2EConfig`, whose
    values were checked when it was made); writes ``out_dir/predictions.json`` and
    ``out_dir/end_to_end.json``.

    ``prepare_only``: train (or find in the cache) every checkpoint the evaluation needs, then stop
    and return None; a later run with the same config only evaluates."""
    out_dir, cache = _open_run(cfg, out_dir)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    trained = _train_stages(cfg, cache, progress, times)
    if prepare_only:
        return None
    modes_diag = _mode_diagnostics(cfg, trained)
    target = TargetModel(trained.target_hf)
    prompts = eval_prompts(cfg, trained.corpus)
    # Decoding a small model is a chain of tiny kernels: one thread avoids OpenMP barriers, which
    # stall badly when the machine's cores are shared.
    torch.set_num_threads(cfg.eval_threads)
    plan = _predict_before_decoding(cfg, trained, target, prompts, out_dir / "predictions.json", progress, times)
    measured = _evaluate_and_check(cfg, trained, target, prompts, plan, progress, times)
    replicated = _replicate(cfg, trained, target, prompts, plan, measured, progress, times)
    hf_rows = _hf_assisted_rows(cfg, trained, prompts, times)
    times["total"] = time.perf_counter() - t0
    payload = _payload(cfg, cache, trained, plan, measured, modes_diag, hf_rows, prompts, times, replicated)
    result = Result("end_to_end", config=dataclasses.asdict(cfg), data=payload, seed=cfg.seed)
    result.save(out_dir / "end_to_end.json")
    return result
