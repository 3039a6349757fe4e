"""Decoding benchmark: per-component time split and tokens/s of every method, and the target's
verify-latency-vs-tree-size profile that the speedup cost model reads.

Side by side in one run (never a timed test):

1. every method ("ar", "chain", "ddtree", "mfd") decodes the same prompts with the same target and
   drafter; printed: tokens/s, speedup over "ar", tau, predicted vs measured acceptance, and the
   time split (draft, tree build + mask, verify, walk, commit). The share of a round spent outside
   the two forwards (tree build, mask, walk, compaction) is printed for the N = ``budget`` trees;
2. the round cost model (:func:`mfd_theory.llm.measure.profile.measure_round_profile`, the function the
   end-to-end runs call before decoding): every tree method decodes ``profile_tokens`` tokens of
   the first prompt at every size N in ``profile_sizes`` (chain at its block), and the loop's own
   per-round times give verify latency vs N, drafting vs K, the overhead (tree build + mask,
   walk, commit) per method vs N, the sampling draw, and a context-length probe; written to
   ``results/verify_latency_<device>.json`` in the format :mod:`mfd_theory.speedup` reads
   (``{name, device, model, assumption, t_target_ms, t_draft_ms, tree_sizes, verify_ms}`` plus the
   optional round fields ``draw_ms, draft_modes, draft_ms, overhead, context_probe``).

By default the target and drafter are random (no downloads): the time split and the latency
profile are meaningful, acceptance is not (a random drafter is rarely right). Pass
``--target-dir`` / ``--drafter-dir`` for real local checkpoints. ``--preset qwen3-8b`` builds a
random target with Qwen3-8B's shape (for GPU profiles). Results go to ``<out>/bench_decode.json``
(``--arch qwen3``) or ``<out>/bench_decode_qwen3_5.json`` (the hybrid, which has no latency file but
its own GDN profile): the two runs never overwrite each other.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.commands._cli import Checked, add_common, add_dataclass_args, finish, make_parser, opt, wrote
from mfd_theory.results import Result, atomic_write_text, provenance

PRESETS = {
    # name: (vocab, hidden, layers, heads, kv_heads, head_dim, intermediate)
    "micro": (64, 32, 2, 4, 2, 8, 64),  # for the smoke test
    "tiny": (2048, 256, 4, 4, 2, 64, 768),
    "small": (4096, 512, 8, 8, 4, 64, 1536),
    "qwen3-0.6b": (151936, 1024, 28, 16, 8, 128, 3072),
    "qwen3-4b": (151936, 2560, 36, 32, 8, 128, 9728),
    "qwen3-8b": (151936, 4096, 36, 32, 8, 128, 12288),
}


@dataclass(frozen=True)
class BenchDecodeConfig(Checked):
    preset: str = opt("small", "random target shape, ignored with --target-dir", choices=tuple(PRESETS))
    target_dir: str = opt("", "a local HF Qwen3 directory (optional)")
    drafter_dir: str = opt("", "a local DFlash/MFD drafter directory (optional)")
    device: str = opt("auto", "auto, cpu or cuda")
    dtype: str = opt("auto", "auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16 or float16",
                     choices=("auto", "float32", "bfloat16", "float16"))
    attn: str = opt("sdpa", "attention implementation of the target", choices=("sdpa", "eager"))
    block_size: int = opt(16, "drafter block size", ge=2)
    draft_layers: int = opt(1, "drafter decoder layers", ge=1)
    num_modes: int = opt(4, "modes K of the random MFD drafter", ge=1)
    budget: int = opt(64, "tree budget N", ge=1)
    prompt_len: int = opt(64, "prompt length in tokens", ge=1)
    max_new_tokens: int = opt(48, "new tokens per prompt", ge=1)
    prompts: int = opt(3, "prompts per method", ge=1)
    temperature: float = opt(0.0, "sampling temperature (0 = greedy)", ge=0)
    profile_sizes: str = opt("1,2,4,8,16,32,64,128,256,512,1024", "tree sizes of the verify-latency profile")
    profile_repeats: int = opt(5, "repeats per tree size (hybrid profile) / decodes per cell (round profile)", ge=1)
    profile_tokens: int = opt(8, "tokens each cell decodes per repeat for the round profile", ge=2)
    threads: int = opt(0, "torch CPU threads (0: leave torch's default)", ge=0)
    seed: int = opt(0, "random seed", ge=0)
    out: str = opt("results", "output directory (the --out option)")
    arch: str = opt("qwen3", "target architecture: qwen3, or qwen3_5 (the hybrid; adds the GDN tree-verification profile)",
                    choices=("qwen3", "qwen3_5"))
    hybrid_sizes: str = opt("1,16,32,64,128,256", "tree sizes of the hybrid profile (with --arch qwen3_5)")

    def validate(self) -> None:
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise ValueError(f"--device: must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        try:
            sizes = [int(x) for x in self.profile_sizes.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--profile-sizes: expected comma-separated integers, got {self.profile_sizes!r}")
        if not sizes or min(sizes) < 1:
            raise ValueError(f"--profile-sizes: need positive sizes, got {self.profile_sizes!r}")


def _torch_setup(cfg: BenchDecodeConfig):
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


def _device_tag(torch, dev) -> str:
    if dev.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(dev).lower()
    name = re.sub(r"^nvidia\s+", "", name)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cuda"


def build_target(cfg: BenchDecodeConfig, torch, dev, dtype):
    """(hf_model, description): a local checkpoint, or a random model of the preset's shape."""
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if cfg.target_dir:
        try:
            model = AutoModelForCausalLM.from_pretrained(cfg.target_dir, dtype=dtype, attn_implementation=cfg.attn,
                                                         local_files_only=True)
        except (OSError, ValueError) as exc:  # an incomplete or foreign checkpoint directory
            raise ValueError(f"--target-dir: cannot load a model from {cfg.target_dir}: {exc}") from exc
        return model.to(dev).eval(), Path(cfg.target_dir).name
    if cfg.preset not in PRESETS:
        raise ValueError(f"preset: must be one of {sorted(PRESETS)}, got {cfg.preset!r}")
    v, h, n, nh, kv, hd, inter = PRESETS[cfg.preset]
    qcfg = Qwen3Config(vocab_size=v, hidden_size=h, num_hidden_layers=n, num_attention_heads=nh,
                       num_key_value_heads=kv, head_dim=hd, intermediate_size=inter,
                       max_position_embeddings=32768, tie_word_embeddings=False, use_sliding_window=False)
    qcfg._attn_implementation = cfg.attn
    torch.manual_seed(cfg.seed)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(qcfg)
    model = model.to_empty(device=dev).to(dtype)  # random weights suffice for timing
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02 if p.dim() > 1 else 0.0)
    _reset_rope(model, qcfg, dev)
    return model.eval(), f"random-{cfg.preset}"


def build_pair(cfg: BenchDecodeConfig, torch, dev, dtype):
    """(hybrid, attention): a random Qwen3.5 hybrid (3 of 4 layers Gated DeltaNet) and a Qwen3 of the
    same preset size (hidden size, layers, heads, MLP), built with their own initialisers."""
    from mfd_theory.llm.training.train import LMConfig, lm_class, qwen3_config

    if cfg.preset not in PRESETS:
        raise ValueError(f"preset: must be one of {sorted(PRESETS)}, got {cfg.preset!r}")
    v, h, n, nh, kv, hd, inter = PRESETS[cfg.preset]
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


def hybrid_profile(cfg: BenchDecodeConfig, torch, dev, dtype, progress: bool = True) -> dict:
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
               "select": TargetModel(hyb, gdn_commit="select")}
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
            rec = {k: [] for k in ("attention", "replay", "select", "gdn_tree", "chain", "gdn_chain",
                                   "commit_replay", "commit_select")}
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
                t._forward(ids, pos, None, t.cache, False)
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
                         "round_select_ms": med["select"] + med["commit_select"]})
    finally:
        for hnd in handles:
            hnd.remove()
    from transformers import Qwen3_5TextConfig

    big = Qwen3_5TextConfig(hidden_size=5120, num_hidden_layers=64, linear_num_value_heads=48,
                            linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128)
    return {"rows": rows, "state_bytes": gdn_state_bytes(hyb.config), "state_bytes_27b": gdn_state_bytes(big),
            "layer_types": list(hyb.config.layer_types)}


def _reset_rope(model, qcfg, dev):
    """Meta-device construction leaves RoPE's inv_freq empty: rebuild the rotary module on ``dev``."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    model.model.rotary_emb = Qwen3RotaryEmbedding(qcfg).to(dev)


def _prompts(cfg: BenchDecodeConfig, torch, vocab: int, dev):
    g = torch.Generator().manual_seed(cfg.seed)
    return [torch.randint(0, vocab - 1, (cfg.prompt_len,), generator=g).to(dev) for _ in range(cfg.prompts)]


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def verify_profile(target, drafter, cfg: BenchDecodeConfig, torch, dev) -> dict:
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


def round_profile(target, drafter, cfg: BenchDecodeConfig, prompt, name: str, device: str, model: str,
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


def run(config: BenchDecodeConfig = BenchDecodeConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    from tqdm import tqdm

    from mfd_theory.llm import TargetModel, build_drafter, load_drafter
    from mfd_theory.llm.decoding.generate import METHODS, speculative_generate

    if config.arch not in ("qwen3", "qwen3_5"):
        raise ValueError(f"arch: must be 'qwen3' or 'qwen3_5', got {config.arch!r}")
    hybrid = config.arch == "qwen3_5"
    for flag, d in (("--target-dir", config.target_dir), ("--drafter-dir", config.drafter_dir)):
        if d and not (Path(d) / "config.json").is_file():
            raise ValueError(f"{flag}: {d} is not a local checkpoint directory (no config.json there)")
    torch, dev, dtype = _torch_setup(config)
    out_dir = Path(out_dir or config.out)
    if hybrid and not config.target_dir:
        hf, model_name = build_pair(config, torch, dev, dtype)[0], f"random-{config.preset}-qwen3_5"
    else:
        hf, model_name = build_target(config, torch, dev, dtype)
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
    run_methods = [m for m in METHODS if m != "dartree" or hasattr(drafter, "grow_tree")]
    runs: dict[str, list] = {m: [] for m in run_methods}
    for prompt in tqdm(prompts, desc="prompts", disable=not progress):
        for method in run_methods:  # interleaved so drift in machine load hits every method alike
            speculative_generate(target, drafter, prompt, 4, method, budget=config.budget, metrics=False)  # warm
            timing = speculative_generate(target, drafter, prompt, config.max_new_tokens, method,
                                          budget=config.budget, temperature=config.temperature,
                                          seed=config.seed, metrics=False)
            stats = speculative_generate(target, drafter, prompt, config.max_new_tokens, method,
                                         budget=config.budget, temperature=config.temperature, seed=config.seed)
            runs[method].append((timing, stats))
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
    tag = _device_tag(torch, dev)
    data = {"device": tag, "model": model_name, "methods": methods}
    if hybrid:  # a recurrent state cannot be cropped back: the hybrid gets its own profile
        data["hybrid_profile"] = hybrid_profile(config, torch, dev, dtype, progress)
    else:
        profile = round_profile(target, drafter, config, prompts[0], f"verify_latency_{tag}", tag, model_name,
                                progress).to_dict()
        data["verify_profile"] = profile
        latency = {**profile, "provenance": provenance()}
        lat_path = out_dir / f"verify_latency_{tag}.json"
        existed = lat_path.exists()
        atomic_write_text(lat_path, json.dumps(latency, indent=1) + "\n")
        wrote(lat_path, existed)
    result = Result("bench_decode", dataclasses.asdict(config), data, seed=config.seed)
    path = out_dir / results_name(config.arch)
    existed = path.exists()
    wrote(result.save(path), existed)
    return result


def results_name(arch: str) -> str:
    """``bench_decode.json`` for the attention target, ``bench_decode_<arch>.json`` otherwise, so a
    hybrid run never overwrites the attention run's results."""
    return "bench_decode.json" if arch == "qwen3" else f"bench_decode_{arch}.json"


def report(result: Result) -> str:
    d = result.data
    lines = [f"device {d['device']}, target {d['model']}, budget {result.config['budget']}, "
             f"block {result.config['block_size']}, K {result.config['num_modes']}",
             f"{'method':8s} {'tok/s':>8s} {'speedup':>8s} {'tau':>6s} {'acc':>6s} {'pred':>6s} {'N':>6s} "
             f"{'draft':>7s} {'tree':>7s} {'verify':>7s} {'walk':>7s} {'commit':>7s} {'outside':>8s}"]
    for m, r in d["methods"].items():
        s = r["time_split_s"]
        tot = sum(s[k] for k in ("draft", "tree", "verify", "walk", "commit")) or 1.0
        pct = {k: 100 * s[k] / tot for k in s}
        lines.append(f"{m:8s} {r['tokens_per_s']:8.1f} {r['speedup_vs_ar']:8.2f} {r['tau']:6.2f} "
                     f"{r['mean_accepted']:6.2f} {r['mean_predicted']:6.2f} {r['mean_tree_size']:6.1f} "
                     f"{pct['draft']:6.1f}% {pct['tree']:6.1f}% {pct['verify']:6.1f}% {pct['walk']:6.1f}% "
                     f"{pct['commit']:6.1f}% {100 * r['overhead_share']:7.1f}%")
    if "verify_profile" in d:
        p = d["verify_profile"]
        lines.append(f"AR target step {p['t_target_ms']:.2f} ms, draft {p['t_draft_ms']:.2f} ms; verify ms by N: "
                     + ", ".join(f"{n}:{t:.2f}" for n, t in zip(p["tree_sizes"], p["verify_ms"])))
    if "hybrid_profile" in d:
        lines.append(hybrid_table(d["hybrid_profile"]))
    for m in ("ddtree", "mfd"):
        lines.append(f"outside the two forwards at N = {result.config['budget']} ({m}): "
                     f"{100 * d['methods'][m]['overhead_share']:.1f}% of a round (target < 10%)")
    return "\n".join(lines)


def hybrid_table(prof: dict) -> str:
    """The hybrid profile as a markdown table (times are medians in ms)."""
    sb = prof["state_bytes"]
    lines = [f"hybrid layers {''.join('G' if t == 'linear_attention' else 'A' for t in prof['layer_types'])} "
             f"(G = Gated DeltaNet, A = attention); GDN state per sequence {sb['per_snapshot'] / 2 ** 10:.0f} KiB",
             "", "| N | depth | attention verify | hybrid verify | hybrid / attention | GDN in tree pass | GDN share | "
             "GDN in chain pass | GDN tree / chain | replay: commit, verify + commit | "
             "select: verify, commit, verify + commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in prof["rows"]:
        lines.append(f"| {r['N']} | {r['depth']} | {r['attention_ms']:.2f} | {r['replay_ms']:.2f} | "
                     f"{r['hybrid_over_attention']:.2f}x | {r['gdn_tree_ms']:.2f} | {100 * r['gdn_share']:.0f}% | "
                     f"{r['gdn_chain_ms']:.2f} | {r['gdn_tree_over_chain']:.2f}x | {r['commit_replay_ms']:.2f}, "
                     f"{r['round_replay_ms']:.2f} | {r['select_ms']:.2f}, {r['commit_select_ms']:.2f}, "
                     f"{r['round_select_ms']:.2f} |")
    big = prof.get("state_bytes_27b")
    if big:
        mib = 2 ** 20
        lines += ["", f"Qwen3.5-27B-shaped stack ({big['gdn_layers']} GDN layers): recurrent state "
                      f"{big['recurrent_per_layer'] / mib:.1f} MiB per layer, {big['per_snapshot'] / mib:.1f} MiB "
                      f"per node with conv windows; per round at N = 64: select keeps 65 snapshots = "
                      f"{65 * big['per_snapshot'] / 2 ** 30:.2f} GiB, replay keeps 65 input rows per GDN layer = "
                      f"{65 * big['gdn_layers'] * big['input_row_per_layer'] / mib:.1f} MiB (bf16)"]
    return "\n".join(lines)


def main(argv=None) -> Result:
    parser = make_parser("mfd bench decode", __doc__)
    add_dataclass_args(parser, BenchDecodeConfig, skip=("out",))
    add_common(parser)
    args = parser.parse_args(argv)
    cfg = finish(parser, BenchDecodeConfig, args, out=args.out)
    result = run(cfg, progress=not args.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
