"""Drafting-round cost against context length and mode count, the shared-context drafter beside
its first version, and whether the target's verify path copies its cache every round.

Side by side in one run (never a timed test), on a random target of a ``mfd bench decode`` preset
shape and a random drafter sized to it, CPU threads fixed (1 by default):

1. **drafting.** For K in ``modes`` and each context T in ``contexts``: the drafter is fed T rows
   of context features, then ``rounds`` rounds each append ``new_rows`` rows and draft a block;
   the fastest round is kept (on a shared machine preemption only ever adds time) for the drafter ("after": modes share the context keys/values, the
   cache grows in place; on CPU the modes attend one SDPA call each over the shared cache), for
   the same drafter with its K modes folded into one masked SDPA call ("folded", K > 1 only: the
   single read of the context that a memory-bound device wants) and for the slow twin in
   ``tests/reference_drafter.py`` ("before": the cache concatenated whole every round, the context
   copied into every mode's keys and repeated per query head). Printed: the targets' ratios, K = 1
   at the longest over the shortest context (target <= 3) and K = max over K = 1 at the longest
   context (target <= 2.5), before and after (and folded).
2. **verify.** The target at the same contexts: one verify forward of an N-node product tree plus
   commit, with ``TargetModel``'s in-place cache ("after") and with HF's ``DynamicCache`` as it is
   ("before": ``DynamicCache.update`` concatenates every layer's keys and values with the new rows,
   the cache copied whole per round), and, apart, that ``torch.cat`` and the key/value head repeat
   HF's attention does for a GQA target given a mask.

The whole measurement is repeated ``repeats`` times (interleaved, so drift in machine load hits
both paths alike) and the spread of every ratio is printed. Needs a source checkout (the "before"
path is the test suite's slow twin). Writes ``<out>/bench_draft_<preset>.json`` (one file per shape;
``mfd report`` turns each into a block of docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.results import Result

from mfd_theory.commands._cli import Checked, add_common, add_dataclass_args, finish, make_parser, opt
from mfd_theory.commands.bench_decode import PRESETS, BenchDecodeConfig, build_target


@dataclass(frozen=True)
class BenchDraftConfig(Checked):
    preset: str = opt("micro", "random target (and drafter) shape, one of mfd bench decode's presets",
                      choices=tuple(PRESETS))
    block_size: int = opt(16, "drafter block size", ge=2)
    draft_layers: int = opt(1, "drafter layers", ge=1)
    modes: str = opt("1,4", "modes K to time; the ratio target compares the largest with 1")
    contexts: str = opt("128,4096", "context rows T; the ratio target compares the longest with the shortest")
    new_rows: int = opt(4, "context rows appended per round (about tau)", ge=1)
    rounds: int = opt(15, "timed rounds per (K, T); the fastest is kept", ge=1)
    verify_nodes: int = opt(64, "tree size N of the timed verify forwards", ge=1)
    repeats: int = opt(3, "repeats of the whole measurement in one run", ge=1)
    threads: int = opt(1, "torch CPU threads", ge=1)
    seed: int = opt(0, "random seed", ge=0)
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        for flag, text in (("--modes", self.modes), ("--contexts", self.contexts)):
            try:
                vals = [int(x) for x in text.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
            if not vals or min(vals) < 1:
                raise ValueError(f"{flag}: need positive integers, got {text!r}")


def _ints(name: str, text: str, low: int) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < low:
        raise ValueError(f"{name}: expected integers >= {low}, got {text!r}")
    return vals


def _check(cfg: BenchDraftConfig) -> tuple[list[int], list[int]]:
    if cfg.preset not in PRESETS:
        raise ValueError(f"preset: must be one of {sorted(PRESETS)}, got {cfg.preset!r}")
    modes, contexts = _ints("modes", cfg.modes, 1), _ints("contexts", cfg.contexts, 1)
    if 1 not in modes:
        raise ValueError(f"modes: must include 1 (the baseline of the ratio), got {cfg.modes!r}")
    for name in ("block_size", "draft_layers", "new_rows", "rounds", "verify_nodes", "repeats", "threads"):
        low = 2 if name == "block_size" else 1
        if getattr(cfg, name) < low:
            raise ValueError(f"{name}: must be >= {low}, got {getattr(cfg, name)}")
    return sorted(set(modes)), sorted(set(contexts))


def slow_twin_module():
    """tests/reference_drafter.py of this checkout (the "before" path)."""
    path = Path(__file__).resolve().parents[2] / "tests" / "reference_drafter.py"
    if not path.is_file():
        raise ValueError(f"bench draft: needs a source checkout (no {path}) for the slow twin")
    spec = importlib.util.spec_from_file_location("_mfd_reference_drafter", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def round_ms(obj, feats, context: int, rounds: int, new_rows: int, torch) -> float:
    """Feed ``context`` rows of ``feats`` [1, T, H], then time ``rounds`` rounds of (append
    ``new_rows`` rows, draft a block); the fastest round in ms (CUDA work synchronised)."""
    cuda = feats.device.type == "cuda"
    times = []
    with torch.no_grad():
        obj.reset()
        obj.draft_modes(feats[:, :context], 1)
        for r in range(rounds):
            a = context + r * new_rows
            if cuda:
                torch.cuda.synchronize(feats.device)
            t0 = time.perf_counter()
            obj.draft_modes(feats[:, a:a + new_rows], 1 + r)
            if cuda:
                torch.cuda.synchronize(feats.device)
            times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def _attention_ms(drafter, context: int, cfg: BenchDraftConfig, torch, folded: bool) -> float:
    """The arithmetic floor: the draft layers' SDPA calls alone (random values, the drafter's
    shapes), fastest of ``rounds``. ``folded``: one masked call over the K modes' folded queries;
    otherwise one unmasked call per mode over [context ; its block]."""
    import torch.nn.functional as F

    from mfd_theory.llm.models.drafter import block_mode_mask

    attn = drafter.layers[0].self_attn
    k, s, d = drafter.num_modes, drafter.block_size, attn.head_dim
    calls, per_call, blocks = (1, k, k) if folded else (k, 1, 1)
    q = torch.randn(1, attn.num_kv_heads, attn.rep * per_call * s, d)  # [1, kvh, rep*K*S | rep*S, d]
    keys, values = torch.randn(2, 1, attn.num_kv_heads, context + blocks * s, d)
    mask = None
    if folded and k > 1:
        mask = torch.zeros(attn.rep * k * s, context + k * s)
        mask[:, context:] = block_mode_mask(k, s, attn.rep, torch.float32, "cpu")
    times = []
    for _ in range(cfg.rounds):
        t0 = time.perf_counter()
        for _layer in drafter.layers:
            for _call in range(calls):
                F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=d ** -0.5)
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def _verify_ms(target, prompt, tree, cfg: BenchDraftConfig, torch, copies: bool = False):
    """Fastest ms of verify + commit; with ``copies`` also the fastest ms of the cache
    concatenation ``DynamicCache.update`` does per forward, and of the key/value head repeat HF's
    SDPA and eager paths do per forward for a GQA target given a mask (``repeat_kv``: every cached
    row copied once per query head; 0 without GQA), both on this target's cache."""
    target.prefill(prompt, hidden=False)
    cfg_t = target.config
    groups = cfg_t.num_attention_heads // cfg_t.num_key_value_heads
    ver, cat, rep = [], [], []
    for _ in range(cfg.rounds):
        t0 = time.perf_counter()
        target.verify(1, tree, hidden=True)
        target.commit([])  # keep the root row: the context grows by one per round
        ver.append(time.perf_counter() - t0)
        if not copies:
            continue
        grow = len(tree) + 1
        t0 = time.perf_counter()
        for layer in target.cache.layers:  # what DynamicLayer.update does with the new rows
            torch.cat([layer.keys, layer.keys[:, :, -grow:]], dim=-2)
            torch.cat([layer.values, layer.values[:, :, -grow:]], dim=-2)
        cat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for layer in target.cache.layers if groups > 1 else ():
            for x in (layer.keys, layer.values):  # [B, kvh, T, d] -> [B, heads, T, d], a copy
                b, kvh, t, d = x.shape
                x[:, :, None].expand(b, kvh, groups, t, d).reshape(b, kvh * groups, t, d)
        rep.append(time.perf_counter() - t0)
    if not copies:
        return 1e3 * min(ver)
    return 1e3 * min(ver), 1e3 * min(cat), 1e3 * min(rep)


def run(config: BenchDraftConfig = BenchDraftConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    modes, contexts = _check(config)
    import numpy as np
    import torch
    from tqdm import tqdm

    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.trees import product_tree

    from mfd_theory.llm.decoding.warmup import warm_up

    twin = slow_twin_module()
    torch.set_num_threads(config.threads)
    dev = torch.device("cpu")
    hf, model_name = build_target(BenchDecodeConfig(preset=config.preset, seed=config.seed), torch, dev, torch.float32)
    need = max(contexts) + config.rounds * max(config.new_rows, config.verify_nodes + 1) + config.block_size * max(modes)
    if need > hf.config.max_position_embeddings:
        raise ValueError(f"contexts: {max(contexts)} rows plus the timed rounds exceed the target's "
                         f"{hf.config.max_position_embeddings} positions")
    target = TargetModel(hf)
    concat_target = TargetModel(hf, cache_in_place=False)  # HF's DynamicCache as it is
    drafters = {k: build_drafter(hf, config.block_size, config.draft_layers, num_modes=k, seed=config.seed)
                for k in modes}
    folded = {k: build_drafter(hf, config.block_size, config.draft_layers, num_modes=k, seed=config.seed)
              for k in modes if k > 1}  # the same weights (same seed), modes folded into one call
    for drafter in folded.values():
        drafter.fold_modes = True
    g = torch.Generator().manual_seed(config.seed)
    width = hf.config.hidden_size
    feats = torch.randn(1, max(contexts) + config.rounds * config.new_rows, width, generator=g)
    feats = drafters[1].hidden_norm(feats).detach()  # [1, T_max + rounds * new_rows, H]
    log_q = torch.log_softmax(3.0 * torch.randn(config.block_size - 1, 64, generator=g), dim=-1).double().numpy()
    tree = product_tree(np.minimum(log_q, 0.0), config.verify_nodes)
    prompts = {t: torch.randint(0, hf.config.vocab_size - 1, (t,), generator=g) for t in contexts}
    warm_up(target, drafters[max(modes)])
    for drafter in [*drafters.values(), *folded.values()]:  # first calls allocate buffers and pick kernels
        round_ms(drafter, feats, min(contexts), 1, config.new_rows, torch)
    load = [os.getloadavg()[0]]  # the machine's load around the run: timings on a shared machine move with it
    reps = []
    for _ in tqdm(range(config.repeats), desc="repeats", disable=not progress):
        rep = {"draft_ms": {}, "attention_ms": {}, "verify_ms": {}, "verify_concat_ms": {}, "cache_cat_ms": {},
               "kv_repeat_ms": {}}
        for k in modes:
            slow = twin.SlowDraftCache(drafters[k])
            for t in contexts:
                rep["draft_ms"][f"after,K={k},T={t}"] = round_ms(drafters[k], feats, t, config.rounds, config.new_rows, torch)
                if k > 1:
                    rep["draft_ms"][f"folded,K={k},T={t}"] = round_ms(folded[k], feats, t, config.rounds,
                                                                      config.new_rows, torch)
                rep["draft_ms"][f"before,K={k},T={t}"] = round_ms(slow, feats, t, config.rounds, config.new_rows, torch)
                rep["attention_ms"][f"K={k},T={t}"] = _attention_ms(drafters[k], t, config, torch, folded=False)
                if k > 1:
                    rep["attention_ms"][f"folded,K={k},T={t}"] = _attention_ms(drafters[k], t, config, torch,
                                                                               folded=True)
        for t in contexts:
            rep["verify_concat_ms"][t], rep["cache_cat_ms"][t], rep["kv_repeat_ms"][t] = _verify_ms(
                concat_target, prompts[t], tree, config, torch, copies=True)
            rep["verify_ms"][t] = _verify_ms(target, prompts[t], tree, config, torch)
        reps.append(rep)
    load.append(os.getloadavg()[0])
    data = {"model": model_name, "width": width, "repeats": reps, "ratios": _ratios(reps, modes, contexts),
            "load_avg_1min": load, "cpu_count": os.cpu_count()}
    result = Result("bench_draft", dataclasses.asdict(config), data, seed=config.seed)
    result.save(Path(out_dir or config.out) / results_name(config.preset))
    return result


def results_name(preset: str) -> str:
    """One file per preset shape, so a run at one shape never overwrites another's."""
    return f"bench_draft_{preset}.json"


def _ratios(reps, modes, contexts) -> dict[str, list[float]]:
    """Per repeat: the two targets' ratios before and after, and the verify growth."""
    lo, hi, kmax = min(contexts), max(contexts), max(modes)
    out: dict[str, list[float]] = {}
    for rep in reps:
        d = rep["draft_ms"]
        for path in ("before", "after"):
            out.setdefault(f"{path}: K=1 T={hi} / K=1 T={lo}", []).append(d[f"{path},K=1,T={hi}"] / d[f"{path},K=1,T={lo}"])
            if kmax > 1:
                out.setdefault(f"{path}: K={kmax} T={hi} / K=1 T={hi}", []).append(
                    d[f"{path},K={kmax},T={hi}"] / d[f"{path},K=1,T={hi}"])
        a = rep["attention_ms"]
        out.setdefault(f"attention alone: K={kmax} T={hi} / K=1 T={hi}", []).append(
            a[f"K={kmax},T={hi}"] / a[f"K=1,T={hi}"])
        if kmax > 1:  # the K = 1 round is the same either way: folding only changes K > 1
            out.setdefault(f"folded: K={kmax} T={hi} / K=1 T={hi}", []).append(
                d[f"folded,K={kmax},T={hi}"] / d[f"after,K=1,T={hi}"])
            out.setdefault(f"folded attention alone: K={kmax} T={hi} / K=1 T={hi}", []).append(
                a[f"folded,K={kmax},T={hi}"] / a[f"K=1,T={hi}"])
            out.setdefault(f"speedup: K={kmax} T={hi} folded / after", []).append(
                d[f"folded,K={kmax},T={hi}"] / d[f"after,K={kmax},T={hi}"])
        out.setdefault(f"after minus attention: K={kmax} / K=1 at T={hi}", []).append(
            (d[f"after,K={kmax},T={hi}"] - a[f"K={kmax},T={hi}"]) / (d[f"after,K=1,T={hi}"] - a[f"K=1,T={hi}"]))
        out.setdefault(f"speedup: K={kmax} T={hi} before / after", []).append(
            d[f"before,K={kmax},T={hi}"] / d[f"after,K={kmax},T={hi}"])
        out.setdefault(f"verify: T={hi} / T={lo}", []).append(rep["verify_ms"][hi] / rep["verify_ms"][lo])
        out.setdefault(f"verify: concatenating / in-place cache at T={hi}", []).append(
            rep["verify_concat_ms"][hi] / rep["verify_ms"][hi])
        # shares of the verify with HF's concatenating cache, where both copies happen
        out.setdefault(f"verify: cache copy share at T={hi}", []).append(
            rep["cache_cat_ms"][hi] / rep["verify_concat_ms"][hi])
        out.setdefault(f"verify: kv head repeat share at T={hi}", []).append(
            rep["kv_repeat_ms"][hi] / rep["verify_concat_ms"][hi])
    return out


def report(result: Result) -> str:
    d, c = result.data, result.config
    lines = [f"target {d['model']} (width {d['width']}), {c['draft_layers']} draft layer(s), block {c['block_size']}, "
             f"{c['new_rows']} new context rows per round, {c['threads']} thread(s), {len(d['repeats'])} repeats"]
    keys = list(d["repeats"][0]["draft_ms"])
    lines.append("drafting round ms (fastest of the rounds; one column per repeat):")
    for key in keys:
        lines.append(f"  {key:24s} " + " ".join(f"{r['draft_ms'][key]:8.2f}" for r in d["repeats"]))
    for key in d["repeats"][0]["attention_ms"]:
        lines.append(f"  {'SDPA alone ' + key:24s} " + " ".join(f"{r['attention_ms'][key]:8.2f}" for r in d["repeats"]))
    for t in d["repeats"][0]["verify_ms"]:
        lines.append(f"  verify N={c['verify_nodes']} T={t} in place: "
                     + " ".join(f"{r['verify_ms'][t]:8.2f}" for r in d["repeats"])
                     + "   concatenating: " + " ".join(f"{r['verify_concat_ms'][t]:8.2f}" for r in d["repeats"])
                     + "   of which cache concatenation: " + " ".join(f"{r['cache_cat_ms'][t]:6.2f}" for r in d["repeats"])
                     + "   kv head repeat: " + " ".join(f"{r['kv_repeat_ms'][t]:6.2f}" for r in d["repeats"]))
    lines.append("ratios (min / median / max over repeats):")
    targets = {"K=1 T=": "target <= 3", "K=": "target <= 2.5"}
    for key, vals in d["ratios"].items():
        note = ""
        if key.startswith(("before:", "after:", "folded:")):
            body = key.split(": ", 1)[1]
            note = targets["K=1 T="] if body.startswith("K=1 ") else targets["K="]
        lines.append(f"  {key:42s} {min(vals):6.2f} {statistics.median(vals):6.2f} {max(vals):6.2f}  {note}")
    return "\n".join(lines)


def main(argv=None) -> Result:
    parser = make_parser("mfd bench draft", __doc__)
    add_dataclass_args(parser, BenchDraftConfig, skip=("out",))
    add_common(parser)
    args = parser.parse_args(argv)
    result = run(finish(parser, BenchDraftConfig, args, out=args.out), progress=not args.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
