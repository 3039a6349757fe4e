"""GPU check and round cost profile: greedy equality in bfloat16, the measured round profile, e2e.

``make gpu-check`` (= ``mfd bench gpu-check --device cuda``) runs, on one CUDA device, four steps
in one script sized to finish within ``time_budget_s`` (8 minutes); each step prints its elapsed
time, and the result keeps them (``elapsed_s``):

1. **greedy equality.** A random target of Qwen3-8B's shape with ``check_layers`` layers
   (bfloat16, SDPA); every method of :mod:`mfd_theory.llm.decoding.generate` decodes the same prompts with
   (a) a random MFD drafter of K = ``num_modes`` (drafts mostly rejected: the bonus path) and
   (b) a *replay* drafter that drafts HF's own continuation with one corrupted position in mode 0
   (accepted paths, cache compaction). Every output must equal HF ``generate`` (greedy). A
   divergence where HF's own top-two logits are closer than ``TIE_RTOL`` is reported as a
   bfloat16 near-tie, any other divergence as a failure (exit status 1).
2. **round profile.** A Qwen3-8B-shaped stack of ``profile_layers`` layers (36 = the whole
   model) and random block drafters (K = 1 and K = ``num_modes``): the full round cost model of
   :func:`mfd_theory.llm.measure.profile.measure_round_profile` (the AR round, verify by tree size,
   drafting by K, tree build / walk / commit by method and N, the sampling draw, the context
   probe), from ``profile_prompts`` decodes of ``profile_tokens`` tokens after a
   ``profile_context``-token prompt with chain, ddtree and mfd at every ``tree_sizes`` budget.
   Written to ``results/verify_latency_<device>.json`` (the file ``--profile-path`` takes, the
   format :func:`mfd_theory.speedup.load_latency_profile` reads; read back to prove it).
3. **drafting latency vs context.** K = 1 and K = ``num_modes`` drafting rounds at
   ``draft_contexts`` on the same stack (drafter width 4096, vocabulary 151,936).
4. **e2e.** ``mfd e2e --preset micro --device <device>`` (``--e2e false`` skips it).

Time per step on one H100/H200-class GPU, *estimated* from the sizes (not measured here):
(1) a 4-layer model and about 30 decodes of 32 tokens, plus numba compiling the tree builders
once: under 1 minute; (2) building the 36-layer stack (16 GB of bfloat16 weights) and 2 x 18
decodes of 16 rounds, each round a forward of up to 1,025 tokens after 512: 1-2 minutes;
(3) 2 drafters x 2 contexts x ``repeats`` rounds: seconds; (4) the micro preset (a 2-layer
target, three drafters, each a few dozen steps, then a short evaluation): 2-3 minutes. Total
about 5-6 minutes; a run that exceeds ``time_budget_s`` says so at the end.

``--small true`` runs all of it at the ``tiny`` bench shape (for ``--device cpu``: it proves the
script runs; the numbers are not a GPU profile).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.results import Result, atomic_write_text, provenance

from mfd_theory.commands._cli import Checked, add_common, add_dataclass_args, finish, make_parser, opt

from mfd_theory.commands.bench_decode import PRESETS, _device_tag

TIE_RTOL = 0.02  # top-two logit gap, relative to max(1, |top logit|), below which bfloat16 rounding may flip argmax


@dataclass(frozen=True)
class GpuCheckConfig(Checked):
    device: str = opt("cuda", "torch device (cuda, cuda:N; cpu only to prove the script runs)")
    small: bool = opt(False, "tiny shape and short lists (a CPU run that proves the script works)")
    shape: str = opt("", "one of mfd bench decode's preset shapes ('' = qwen3-8b, or tiny with --small)")
    dtype: str = opt("bfloat16", "model dtype", choices=("bfloat16", "float16", "float32"))
    check_layers: int = opt(4, "target layers of the greedy-equality check", ge=1)
    profile_layers: int = opt(36, "target layers of the round profile", ge=1)
    draft_layers: int = opt(5, "drafter layers (a guess at DFlash's Qwen3-8B drafter)", ge=1)
    block_size: int = opt(16, "drafter block size", ge=2)
    num_modes: int = opt(4, "modes K of the MFD drafter", ge=2)
    budget: int = opt(64, "tree budget N of the greedy check", ge=1)
    prompts: int = opt(2, "prompts of the greedy check", ge=1)
    prompt_len: int = opt(32, "prompt length in tokens", ge=1)
    new_tokens: int = opt(32, "new tokens per prompt", ge=1)
    init_std: float = opt(0.02, "standard deviation of the random weights", gt=0)
    profile_context: int = opt(512, "prompt length (context) of the round profile's decodes", ge=1)
    profile_prompts: int = opt(2, "round profile: prompts each cell decodes", ge=1)
    profile_tokens: int = opt(16, "round profile: new tokens per decode", ge=2)
    tree_sizes: str = opt("1,16,32,64,128,256,512,1024", "round profile: budgets N of ddtree and mfd")
    draft_contexts: str = opt("512,4096", "contexts of the K = 1 / K = 4 drafting latency")
    repeats: int = opt(5, "timed repeats per drafting-latency point", ge=1)
    e2e: bool = opt(True, "also run mfd e2e --preset micro on the device")
    time_budget_s: float = opt(480.0, "seconds the whole check should take (it says so when it takes longer)",
                               gt=0)
    seed: int = opt(0, "random seed", ge=0)
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"--device: must be cuda, cuda:N or cpu, got {self.device!r}")
        for flag, text in (("--tree-sizes", self.tree_sizes), ("--draft-contexts", self.draft_contexts)):
            try:
                vals = [int(x) for x in text.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
            if not vals or min(vals) < 1:
                raise ValueError(f"{flag}: need positive integers, got {text!r}")

SMALL = {"check_layers": 2, "profile_layers": 4, "draft_layers": 1, "prompts": 1, "new_tokens": 12,
         "profile_context": 64, "profile_prompts": 1, "profile_tokens": 8, "tree_sizes": "1,16,64",
         "draft_contexts": "128,512", "repeats": 2}


def effective(cfg: GpuCheckConfig) -> GpuCheckConfig:
    """``--small``: the tiny shape's short lists (fields left at their defaults are replaced)."""
    if not cfg.small:
        return cfg
    defaults = GpuCheckConfig()
    return dataclasses.replace(cfg, **{k: v for k, v in SMALL.items() if getattr(cfg, k) == getattr(defaults, k)})


def _ints(name: str, text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ValueError(f"{name}: expected positive integers, got {text!r}")
    return vals


def _check(cfg: GpuCheckConfig, torch):
    if cfg.device not in ("cuda", "cpu") and not cfg.device.startswith("cuda:"):
        raise ValueError(f"--device: must be cuda, cuda:<i> or cpu, got {cfg.device!r}")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device: {cfg.device!r} requested but CUDA is not available (use --device cpu --small true)")
    if cfg.dtype not in ("bfloat16", "float16", "float32"):
        raise ValueError(f"--dtype: must be bfloat16, float16 or float32, got {cfg.dtype!r}")
    for name in ("check_layers", "profile_layers", "draft_layers", "num_modes", "budget", "prompts", "prompt_len",
                 "new_tokens", "profile_context", "profile_prompts", "repeats"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(cfg, name)}")
    if cfg.profile_tokens < 2:
        raise ValueError(f"--profile-tokens: a round needs at least 2 new tokens, got {cfg.profile_tokens}")
    if cfg.block_size < 2:
        raise ValueError(f"--block-size: must be >= 2, got {cfg.block_size}")
    if cfg.shape and cfg.shape not in PRESETS:
        raise ValueError(f"--shape: must be one of {sorted(PRESETS)}, got {cfg.shape!r}")
    if not cfg.init_std > 0:
        raise ValueError(f"--init-std: must be > 0, got {cfg.init_std}")
    return _ints("--tree-sizes", cfg.tree_sizes), _ints("--draft-contexts", cfg.draft_contexts)


def random_qwen3(shape: str, layers: int, dtype, dev, seed: int, std: float, torch):
    """A random Qwen3ForCausalLM of a ``mfd bench decode`` preset's shape with ``layers`` layers."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    v, h, _, nh, kv, hd, inter = PRESETS[shape]
    cfg = Qwen3Config(vocab_size=v, hidden_size=h, num_hidden_layers=layers, num_attention_heads=nh,
                      num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, max_position_embeddings=32768,
                      tie_word_embeddings=False, use_sliding_window=False, eos_token_id=None, pad_token_id=None,
                      bos_token_id=None)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(dev):
        model = Qwen3ForCausalLM(cfg)
    g = torch.Generator(device=dev).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "lm_head.weight":  # logits of std ~4: argmax far from ties, as in a trained model
                p.normal_(0.0, 4.0 / h ** 0.5, generator=g)
            else:
                p.normal_(0.0, std, generator=g)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


class ReplayDrafter:
    """Drafts a known continuation (HF's greedy output): mode 1 the true tokens, mode 0 the same
    with one position changed, so trees are partly accepted. Tokens beyond the known continuation
    are drafted as 0. Implements the drafter protocol of :mod:`mfd_theory.llm.decoding.generate`."""

    def __init__(self, full, vocab: int, block_size: int, device, seed: int = 0):
        import torch

        self.full = [int(t) for t in full]  # prompt + HF continuation
        self.vocab, self.block_size, self.num_modes = vocab, block_size, 2
        self.mask_token_id, self.target_layer_ids, self.config = 0, [0], None
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.seq: list[int] = []

    def reset(self):
        self.seq = []

    def observe_tokens(self, toks):
        self.seq.extend(int(t) for t in toks)

    def fuse_hidden(self, hidden_states):
        return hidden_states[-1]

    def draft_modes(self, ctx, root):
        import torch

        L, start = self.block_size - 1, len(self.seq) + 1  # the root sits at len(seq)
        true = [self.full[i] if i < len(self.full) else 0 for i in range(start, start + L)]
        wrong = list(true)
        j = int(torch.randint(0, L, (1,), generator=self.gen))
        wrong[j] = (wrong[j] + 1) % self.vocab
        logits = torch.zeros(2, L, self.vocab)
        for k, toks in enumerate((wrong, true)):
            logits[k, torch.arange(L), torch.tensor(toks)] = 8.0
        log_pi = torch.log(torch.tensor([0.7, 0.3]))
        return log_pi.to(self.device), torch.log_softmax(logits, dim=-1).to(self.device)


def greedy_check(cfg: GpuCheckConfig, shape: str, torch, dev, dtype) -> list[dict]:
    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.llm.decoding.generate import METHODS, speculative_generate

    hf = random_qwen3(shape, cfg.check_layers, dtype, dev, cfg.seed, cfg.init_std, torch)
    target = TargetModel(hf)
    mfd = build_drafter(hf, cfg.block_size, 1, num_modes=cfg.num_modes, seed=cfg.seed)
    domino = build_drafter(hf, cfg.block_size, 1, seed=cfg.seed, kind="dartree")  # for method "dartree"
    g = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for p in range(cfg.prompts):
        prompt = torch.randint(0, hf.config.vocab_size, (cfg.prompt_len,), generator=g).to(dev)
        with torch.no_grad():
            # an explicit all-ones mask: otherwise generate masks prompt tokens equal to pad_token_id
            out = hf.generate(prompt[None], attention_mask=torch.ones_like(prompt[None]), max_new_tokens=cfg.new_tokens,
                              do_sample=False, output_scores=True, return_dict_in_generate=True)
        ref = out.sequences[0, cfg.prompt_len:].tolist()
        scores = [s[0].float() for s in out.scores]  # [V] per step
        replay = ReplayDrafter(prompt.tolist() + ref, hf.config.vocab_size, cfg.block_size, dev, seed=p)
        for name, drafter in (("random-mfd", mfd), ("replay", replay), ("random-domino", domino)):
            for method in METHODS:
                if (name == "replay" and method == "ar") or ((method == "dartree") != (name == "random-domino")):
                    continue
                res = speculative_generate(target, drafter, prompt, cfg.new_tokens, method, budget=cfg.budget)
                rows.append({"prompt": p, "drafter": name, "method": method, "tau": res.tau,
                             **_compare(res.tokens, ref, scores)})
    return rows


def _compare(tokens: list[int], ref: list[int], scores) -> dict:
    """Equal, a bfloat16 near-tie at the first divergence, or a failure."""
    if tokens == ref:
        return {"status": "equal", "first_diff": None, "gap": None}
    i = next((j for j, (a, b) in enumerate(zip(tokens, ref)) if a != b), min(len(tokens), len(ref)))
    if i >= len(ref) or i >= len(tokens):
        return {"status": "FAIL (length)", "first_diff": i, "gap": None}
    s = scores[i]
    gap = float(s[ref[i]] - s[tokens[i]])
    tie = gap <= TIE_RTOL * max(1.0, abs(float(s[ref[i]])))
    return {"status": "near-tie" if tie else "FAIL", "first_diff": i, "gap": gap}


def round_cost(cfg: GpuCheckConfig, shape: str, sizes: list[int], torch, dev, dtype, progress: bool = True):
    """The round profile (:func:`~mfd_theory.llm.measure.profile.measure_round_profile`) of a random
    ``shape``-shaped stack of ``profile_layers`` layers with random block drafters (K = 1 for
    chain and ddtree, K = ``num_modes`` for mfd); returns (HF model, {K: drafter}, LatencyProfile)."""
    from mfd_theory.llm import TargetModel, build_drafter
    from mfd_theory.llm.measure.evaluate import Cell
    from mfd_theory.llm.measure.profile import measure_round_profile

    hf = random_qwen3(shape, cfg.profile_layers, dtype, dev, cfg.seed, cfg.init_std, torch)
    target = TargetModel(hf)
    drafters = {k: build_drafter(hf, cfg.block_size, cfg.draft_layers, num_modes=k, seed=cfg.seed)
                for k in sorted({1, cfg.num_modes})}
    K = cfg.num_modes
    cells = [Cell("chain", "k1", cfg.block_size - 1, drafters[1])]
    cells += [Cell("ddtree", "k1", n, drafters[1]) for n in sizes]
    cells += [Cell("mfd", f"k{K}", n, drafters[K]) for n in sizes]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    prompts = [torch.randint(0, hf.config.vocab_size, (cfg.profile_context,), generator=g)
               for _ in range(cfg.profile_prompts)]
    name = f"verify_latency_{dev.type}" if not cfg.small else f"verify_latency_{dev.type}_small"
    profile = measure_round_profile(
        target, cells, prompts, cfg.profile_tokens, name=name, device=_device_tag(torch, dev),
        model=f"random {shape}-shaped Qwen3, {cfg.profile_layers} layers, {cfg.dtype}, batch 1, HF SDPA",
        note=(f"Measured by mfd bench gpu-check: random weights and random {cfg.draft_layers}-layer block drafters "
              f"(K = 1 and {K}), {cfg.profile_prompts} prompt(s) of {cfg.profile_context} tokens, "
              f"{cfg.profile_tokens} new tokens per decode"),
        progress=progress)
    return hf, drafters, profile


def draft_latency(cfg: GpuCheckConfig, hf, drafters: dict, contexts: list[int], torch, dev, dtype) -> dict:
    """{"K=k,T=t": ms}: the fastest of ``repeats`` drafting rounds after ``t`` context rows."""
    from mfd_theory.commands.bench_draft import round_ms

    gen = torch.Generator().manual_seed(cfg.seed)
    feats = torch.randn(1, max(contexts) + 4 * (cfg.repeats + 1), hf.config.hidden_size, generator=gen)
    feats = drafters[1].hidden_norm(feats.to(dev, dtype)).detach()
    out = {}
    for k, d in drafters.items():
        round_ms(d, feats, min(contexts), 1, 4, torch)  # first call: buffers, kernels
        for t in contexts:
            out[f"K={k},T={t}"] = round_ms(d, feats, t, cfg.repeats, 4, torch)
    return out


def run(config: GpuCheckConfig = GpuCheckConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    import time

    import torch

    from mfd_theory.speedup import load_latency_profile

    cfg = effective(config)
    sizes, contexts = _check(cfg, torch)
    out_dir = Path(out_dir or cfg.out)
    dev = torch.device(cfg.device)
    dtype = getattr(torch, cfg.dtype)
    shape = cfg.shape or ("tiny" if cfg.small else "qwen3-8b")
    start = time.perf_counter()
    elapsed: dict[str, float] = {}

    def step(i: int, what: str):
        if progress:
            print(f"[{i}/4] {what} ...", flush=True)
        return time.perf_counter()

    def done(key: str, t0: float):
        elapsed[key] = time.perf_counter() - t0
        if progress:
            print(f"      {elapsed[key]:.1f} s (total {time.perf_counter() - start:.1f} s of the "
                  f"{cfg.time_budget_s:.0f} s budget)", flush=True)

    if progress:
        print(f"gpu-check on {dev} ({shape} shape, {cfg.dtype})", flush=True)
    t0 = step(1, "greedy equality against HF generate")
    rows = greedy_check(cfg, shape, torch, dev, dtype)
    done("greedy", t0)
    t0 = step(2, "round profile (measure_round_profile)")
    hf, drafters, profile = round_cost(cfg, shape, sizes, torch, dev, dtype, progress)
    done("round_profile", t0)
    t0 = step(3, "drafting latency by context")
    draft_ms = draft_latency(cfg, hf, drafters, contexts, torch, dev, dtype)
    done("draft_latency", t0)
    del hf, drafters  # the profile stack's memory, before the e2e run
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    tag = _device_tag(torch, dev)
    if dev.type == "cuda":
        profile.device = f"{tag} ({torch.cuda.get_device_name(dev)})"
    prof = {**profile.to_dict(), "provenance": provenance()}
    path = out_dir / f"{profile.name}.json"
    atomic_write_text(path, json.dumps(prof, indent=1) + "\n")
    load_latency_profile(path, make_monotone=True)  # the speedup model reads it
    e2e = None
    if cfg.e2e:
        from mfd_theory.commands.e2e import main as e2e_main

        t0 = step(4, "mfd e2e --preset micro")
        res = e2e_main(["--preset", "micro", "--device", cfg.device, "--out", str(out_dir / "gpu_check_e2e"),
                        *([] if progress else ["--quiet"])])
        done("e2e", t0)
        e2e = {"out": str(out_dir / "gpu_check_e2e"), "result": res.name}
    total = time.perf_counter() - start
    data = {"device": tag, "shape": shape, "greedy": rows, "latency_profile": str(path),
            "round_profile": profile.to_dict(), "draft_ms": draft_ms, "e2e": e2e,
            "elapsed_s": elapsed, "total_s": total, "time_budget_s": cfg.time_budget_s,
            "within_budget": total <= cfg.time_budget_s}
    result = Result("gpu_check", dataclasses.asdict(cfg), data, seed=cfg.seed)
    result.save(out_dir / f"gpu_check_{dev.type}{'_small' if cfg.small else ''}.json")
    return result


def report(result: Result) -> str:
    d, c = result.data, result.config
    lines = [f"gpu-check on {d['device']} ({d['shape']} shape, {c['dtype']})"]
    counts: dict[str, int] = {}
    for r in d["greedy"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        if r["status"] != "equal":
            lines.append(f"  {r['status']}: prompt {r['prompt']} {r['drafter']} {r['method']} first diff at "
                         f"{r['first_diff']} (HF top-two gap {r['gap']})")
    lines.append("greedy equality vs HF generate: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    p = d["round_profile"]
    lines.append(f"round profile: AR round {p['t_target_ms']:.2f} ms; verify ms by N: "
                 + ", ".join(f"{n}:{t:.2f}" for n, t in zip(p["tree_sizes"], p["verify_ms"])))
    lines.append("  drafting pass ms by K: " + ", ".join(f"{k}:{t:.2f}" for k, t in zip(p["draft_modes"], p["draft_ms"]))
                 + f"; sampling draw {p['draw_ms']:.3f} ms")
    for o in p.get("overhead") or []:
        lines.append(f"  {o['method']} (K = {o['K']}) tree + walk + commit ms by N: "
                     + ", ".join(f"{n}:{a + b + e:.2f}" for n, a, b, e in
                                 zip(o["tree_sizes"], o["tree_ms"], o["walk_ms"], o["commit_ms"])))
    lines.append("drafting round ms by context: " + ", ".join(f"{k} {v:.2f}" for k, v in d["draft_ms"].items()))
    lines.append(f"round profile written to {d['latency_profile']}")
    if d["e2e"]:
        lines.append(f"e2e micro: results in {d['e2e']['out']}")
    el = d.get("elapsed_s") or {}
    lines.append("elapsed: " + ", ".join(f"{k} {v:.1f} s" for k, v in el.items())
                 + f"; total {d['total_s']:.1f} s of the {d['time_budget_s']:.0f} s budget"
                 + ("" if d["within_budget"] else " (OVER BUDGET: lower --tree-sizes, --profile-prompts or "
                                                  "--profile-layers)"))
    return "\n".join(lines)


def main(argv=None) -> Result:
    parser = make_parser("mfd bench gpu-check", __doc__)
    add_dataclass_args(parser, GpuCheckConfig, skip=("out",))
    add_common(parser)
    args = parser.parse_args(argv)
    result = run(finish(parser, GpuCheckConfig, args, out=args.out), progress=not args.quiet)
    print(report(result))
    if any(r["status"].startswith("FAIL") for r in result.data["greedy"]):
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
