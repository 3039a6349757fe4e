"""The torch half of ``mfd bench decode`` (:mod:`mfd_theory.commands.bench.bench_decode`): the random (or
local) target and drafter, every method's decoding split, the round cost model of the attention
target and the Gated DeltaNet profile of the hybrid one. Functions take the ``torch`` module as an
argument, as the benchmarks' helpers always have."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.runs.bench.shapes import SHAPES

__all__ = ["build_pair", "build_target", "hybrid_profile", "measure", "round_profile", "verify_profile"]


def _torch_setup(cfg):
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    dev = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if cfg.device == "auto" else cfg.device))
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ValueError(f"--device: {cfg.device!r} asked for, but this torch has no CUDA device "
                             f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use --device cpu")
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"--device: {cfg.device!r} asked for, but only {n} CUDA device(s) exist")
    if cfg.dtype == "auto":
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    else:
        dtype = getattr(torch, cfg.dtype)
    return torch, dev, dtype


def build_target(preset: str, seed: int, dev, dtype, target_dir: str = "", attn: str = "sdpa"):
    """(hf_model, description): the local checkpoint ``target_dir``, or (none given) a random model
    of the shape ``preset`` (:data:`~mfd_theory.runs.bench.shapes.SHAPES`) drawn with ``seed``."""
    from transformers import AutoModelForCausalLM

    from mfd_theory.llm.models.testing import random_qwen3

    if target_dir:
        try:
            model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype, attn_implementation=attn,
                                                         local_files_only=True)
        except (OSError, ValueError) as exc:  # an incomplete or foreign checkpoint directory
            raise ValueError(f"--target-dir: cannot load a model from {target_dir}: {exc}") from exc
        return model.to(dev).eval(), Path(target_dir).name
    model = random_qwen3(SHAPES[preset], dtype=dtype, device=dev, seed=seed, attn=attn)  # timing only
    return model, f"random-{preset}"


def build_pair(cfg, torch, dev, dtype):
    """(hybrid, attention): a random Qwen3.5 hybrid (3 of 4 layers Gated DeltaNet) and a Qwen3 of the
    same preset size (hidden size, layers, heads, MLP), built with their own initialisers."""
    from mfd_theory.llm.training.train import LMConfig, lm_class, qwen3_config

    v, h, n, nh, kv, hd, inter = SHAPES[cfg.shape]
    models = []
    for arch in ("qwen3_5", "qwen3"):
        lm = LMConfig(hidden_size=h, num_layers=n, num_heads=nh, num_kv_heads=kv, head_dim=hd,
                      intermediate_size=inter, max_position_embeddings=32768, arch=arch)
        hcfg = qwen3_config(lm, v, None)
        hcfg._attn_implementation = cfg.attn
        torch.manual_seed(cfg.seed)
        with torch.device(dev):
            models.append(lm_class(arch)(hcfg).to(dtype).eval())
    return models[0], models[1]


def _gdn_timer(target, torch, dev):
    """Forward hooks on the GDN modules summing their wall time (synchronised on CUDA)."""
    acc = {"s": 0.0}
    handles = []
    for module in target.hybrid.gdn.values():
        def pre(mod, args, kwargs):
            _sync(torch, dev)
            acc["t0"] = time.perf_counter()

        def post(mod, args, kwargs, out):
            _sync(torch, dev)
            acc["s"] += time.perf_counter() - acc["t0"]
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    return acc, handles


def hybrid_profile(cfg, torch, dev, dtype, progress: bool = True) -> dict:
    """Per tree size N, side by side in one run: verify latency of the hybrid and of the same-size
    attention target; the GDN layers' time inside the hybrid's tree pass (and its share); the GDN
    layers' time in a *chain* pass, i.e. the model's own forward over N new tokens from the same
    cache; their ratio; and the commit time of both GDN commit designs (deepest path accepted)."""
    from tqdm import tqdm

    from mfd_theory.llm import TargetModel
    from mfd_theory.llm.models.hybrid import gdn_state_bytes
    from mfd_theory.trees import product_tree

    hyb, att = build_pair(cfg, torch, dev, dtype)
    sizes = [int(x) for x in cfg.hybrid_sizes.split(",") if x.strip()]
    targets = {"attention": TargetModel(att), "replay": TargetModel(hyb, gdn_commit="replay"),
               "select": TargetModel(hyb, gdn_commit="select"), "path": TargetModel(hyb, gdn_commit="path")}
    prompt = _prompts(cfg, torch, targets["attention"].vocab_size, dev)[0]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    log_q = torch.log_softmax(3.0 * torch.randn(cfg.block_size - 1, 64, generator=g), dim=-1).double().numpy()
    acc, handles = _gdn_timer(targets["replay"], torch, dev)
    rows = []
    try:
        for n in tqdm(sizes, desc="hybrid profile", disable=not progress):
            tree = product_tree(log_q, n)
            deepest = [int(tree.depth.argmax())]
            while tree.parent[deepest[-1]] >= 0:
                deepest.append(int(tree.parent[deepest[-1]]))
            path = deepest[::-1]
            ids = torch.randint(0, targets["attention"].vocab_size - 1, (1, n), generator=g).to(dev)
            rec = {k: [] for k in ("attention", "replay", "select", "path", "gdn_tree", "chain", "gdn_chain",
                                   "commit_replay", "commit_select", "commit_path")}
            for rep in range(cfg.profile_repeats + 1):  # interleaved; the first repeat warms up
                for name, t in targets.items():
                    t.prefill(prompt, hidden=False)
                    acc["s"] = 0.0
                    _sync(torch, dev)
                    t0 = time.perf_counter()
                    t.verify(1, tree, hidden=False)
                    _sync(torch, dev)
                    t1 = time.perf_counter()
                    gdn = acc["s"]  # GDN modules' time inside this verify pass only
                    t.commit(path)
                    _sync(torch, dev)
                    t2 = time.perf_counter()
                    if rep:
                        rec[name].append(t1 - t0)
                        if name != "attention":
                            rec["commit_" + name].append(t2 - t1)
                        if name == "replay":
                            rec["gdn_tree"].append(gdn)
                # the chain pass: the model's own forward over n new tokens from the same cache
                t = targets["replay"]
                t.prefill(prompt, hidden=False)
                acc["s"] = 0.0
                pos = torch.arange(t.length, t.length + n, device=dev)[None]
                _sync(torch, dev)
                t0 = time.perf_counter()
                t.forward(ids, pos, None, t.cache, False)
                _sync(torch, dev)
                if rep:
                    rec["chain"].append(time.perf_counter() - t0)
                    rec["gdn_chain"].append(acc["s"])
            med = {k: 1e3 * statistics.median(v) for k, v in rec.items() if v}
            rows.append({"N": n, "depth": int(tree.depth.max()), **{k + "_ms": v for k, v in med.items()},
                         "gdn_share": med["gdn_tree"] / med["replay"],
                         "gdn_tree_over_chain": med["gdn_tree"] / med["gdn_chain"],
                         "hybrid_over_attention": med["replay"] / med["attention"],
                         "round_replay_ms": med["replay"] + med["commit_replay"],
                         "round_select_ms": med["select"] + med["commit_select"],
                         "round_path_ms": med["path"] + med["commit_path"]})
    finally:
        for hnd in handles:
            hnd.remove()
    from transformers import Qwen3_5TextConfig

    big = Qwen3_5TextConfig(hidden_size=5120, num_hidden_layers=64, linear_num_value_heads=48,
                            linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128)
    return {"rows": rows, "state_bytes": gdn_state_bytes(hyb.config), "state_bytes_27b": gdn_state_bytes(big),
            "layer_types": list(hyb.config.layer_types)}


def _prompts(cfg, torch, vocab: int, dev):
    g = torch.Generator().manual_seed(cfg.seed)
    return [torch.randint(0, vocab - 1, (cfg.prompt_len,), generator=g).to(dev) for _ in range(cfg.prompts)]


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def verify_profile(target, drafter, cfg, torch, dev) -> dict:
    """Median verify time per tree size (a product tree from a random block), AR step, draft time."""
    from mfd_theory.trees import product_tree

    sizes = [int(s) for s in cfg.profile_sizes.split(",") if s.strip()]
    prompt = _prompts(cfg, torch, target.vocab_size, dev)[0]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    L = cfg.block_size - 1
    log_q = torch.log_softmax(3.0 * torch.randn(L, 64, generator=g), dim=-1).double().numpy()

    def timed(fn):
        out = []
        for _ in range(cfg.profile_repeats + 1):
            _sync(torch, dev)
            t0 = time.perf_counter()
            fn()
            _sync(torch, dev)
            out.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(out[1:])  # the first call warms up

    target.prefill(prompt, hidden=False)

    def step(tree):
        def run():
            target.verify(1, tree, hidden=drafter is not None)
            target.commit([])
            target.cache.crop(-1)  # back to the prompt: every size sees the same context
            target.length -= 1
        return run

    t_target = timed(step(None))
    verify_ms = [timed(step(product_tree(log_q, n))) for n in sizes]
    t_draft = float("nan")
    if drafter is not None:
        _, hidden = target.prefill(prompt, hidden=True)
        feats = drafter.fuse_hidden(hidden)

        def draft():
            drafter.reset()
            drafter.draft_modes(feats, 1)
        with torch.no_grad():
            t_draft = timed(draft)
    return {"t_target_ms": t_target, "t_draft_ms": t_draft, "tree_sizes": sizes, "verify_ms": verify_ms}


def round_profile(target, drafter, cfg, prompt, name: str, device: str, model: str,
                  progress: bool = True):
    """The round cost model of this target and drafter: chain at its block, ddtree (and mfd when
    K > 1) at every size of ``cfg.profile_sizes``, ``cfg.profile_tokens`` tokens per decode."""
    from mfd_theory.llm.measure.evaluate import Cell
    from mfd_theory.llm.measure.profile import measure_round_profile

    sizes = [int(s) for s in cfg.profile_sizes.split(",") if s.strip()]
    methods = ("ddtree", "mfd") if int(drafter.num_modes) > 1 else ("ddtree",)
    cells = [Cell("chain", "drafter", int(drafter.block_size) - 1, drafter)]
    cells += [Cell(m, "drafter", n, drafter) for m in methods for n in sizes]
    return measure_round_profile(target, cells, [prompt], cfg.profile_tokens, repeats=cfg.profile_repeats, name=name,
                                 device=device, model=model, progress=progress)



@keeps_torch_threads
def measure(config, progress: bool = True) -> dict:
    """Every method on the same prompts (interleaved), then the profile: the round cost model of
    an attention target, or the hybrid's own Gated DeltaNet profile. The Result's data."""
    from tqdm import tqdm

    from mfd_theory.llm import TargetModel, build_drafter, load_drafter
    from mfd_theory.llm.decoding.generate import METHODS, speculative_generate
    from mfd_theory.llm.measure.profile import device_tag

    hybrid = config.arch == "qwen3_5"
    torch, dev, dtype = _torch_setup(config)
    if hybrid and not config.target_dir:
        hf, model_name = build_pair(config, torch, dev, dtype)[0], f"random-{config.shape}-qwen3_5"
    else:
        hf, model_name = build_target(config.shape, config.seed, dev, dtype, config.target_dir, config.attn)
    target = TargetModel(hf)
    if config.drafter_dir:
        try:
            drafter = load_drafter(config.drafter_dir, target)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--drafter-dir: cannot load a drafter for this target from {config.drafter_dir}: "
                             f"{exc}") from exc
    else:
        drafter = build_drafter(hf, config.block_size, config.draft_layers, num_modes=config.num_modes,
                                seed=config.seed)
    prompts = _prompts(config, torch, target.vocab_size, dev)
    # "dartree" needs a Domino drafter (its own tree growth); the others run on any drafter
    run_methods = [m for m in METHODS if m != "dartree" or drafter.grows_trees]
    runs: dict[str, list] = {m: [] for m in run_methods}
    load_before = _load_average()
    for prompt in tqdm(prompts, desc="prompts", disable=not progress):
        for method in run_methods:  # interleaved so drift in machine load hits every method alike
            speculative_generate(target, drafter, prompt, 4, method, budget=config.budget, metrics=False)  # warm
            timing = speculative_generate(target, drafter, prompt, config.max_new_tokens, method,
                                          budget=config.budget, temperature=config.temperature,
                                          seed=config.seed, metrics=False)
            stats = speculative_generate(target, drafter, prompt, config.max_new_tokens, method,
                                         budget=config.budget, temperature=config.temperature, seed=config.seed)
            runs[method].append((timing, stats))
    tag = device_tag(dev)
    data = {"device": tag, "model": model_name, "methods": _method_rows(runs),
            # what :func:`~mfd_theory.commands.bench.bench_decode.disturbed_timing` reads
            "machine": {"ar_s_per_token": [t.t_total / max(1, len(t.tokens)) for t, _ in runs["ar"]],
                        "load_before": load_before, "load_after": _load_average(),
                        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                        "threads": torch.get_num_threads(), "device_type": dev.type}}
    if hybrid:  # a recurrent state cannot be cropped back: the hybrid gets its own profile
        data["hybrid_profile"] = hybrid_profile(config, torch, dev, dtype, progress)
    else:
        data["verify_profile"] = round_profile(target, drafter, config, prompts[0], f"verify_latency_{tag}", tag,
                                               model_name, progress).to_dict()
    return data


def _load_average() -> float | None:
    """The machine's 1-minute load average (None where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _method_rows(runs: dict[str, list]) -> dict[str, dict]:
    """{method: tokens/s, speedup over ar, tau, acceptance, tree size, dead share, time split}."""
    methods = {}
    ar_time = sum(t.t_total for t, _ in runs["ar"]) / sum(len(t.tokens) for t, _ in runs["ar"])
    for method, pairs in runs.items():
        timings = [t for t, _ in pairs]
        steps = [s for _, st in pairs for s in st.steps]
        n_tok = sum(len(t.tokens) for t in timings)
        t_tot = sum(t.t_total for t in timings)
        split = {k: sum(t.time_split()[k] for t in timings) for k in timings[0].time_split()}
        step_time = sum(s.t_step for t in timings for s in t.steps)
        overhead = sum(s.t_overhead for t in timings for s in t.steps)
        methods[method] = {
            "new_tokens": n_tok, "seconds": t_tot, "tokens_per_s": n_tok / t_tot,
            "speedup_vs_ar": ar_time / (t_tot / n_tok),
            "tau": sum(s.accepted + 1 for s in steps) / len(steps),
            "mean_accepted": sum(s.accepted for s in steps) / len(steps),
            "mean_predicted": sum(s.predicted for s in steps) / len(steps),
            "mean_covered_mass": sum(s.covered_mass for s in steps) / len(steps),
            "mean_tree_size": sum(s.tree_size for s in steps) / len(steps),
            "dead_share": (sum(s.dead_share for s in steps if s.tree_size) / max(1, sum(1 for s in steps if s.tree_size))),
            "time_split_s": split, "overhead_share": overhead / step_time if step_time else float("nan"),
        }
    return methods
