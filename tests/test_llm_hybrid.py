"""Hybrid targets (Gated DeltaNet + attention): exact tree verification, commit, decoding."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import (  # noqa: E402
    HYBRID_PATTERNS, DecoyDrafter, NanGateDrafter, OracleDrafter, sampled_continuations_pvalue, tiny_hybrid,
    tiny_qwen3,
)

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import METHODS, speculative_generate  # noqa: E402
from mfd_theory.llm.models.hybrid import gdn_state_bytes  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

# float32 throughout: the tree runs HF's per-token recurrent kernel, a fresh prefill its chunked
# kernel (different summation order), so values agree to rounding, far below 1e-4
ATOL = 1e-4
PROMPT = [3, 7, 1, 9, 4]


def _hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


def _full_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1].float()


def _tree():
    return DraftTree.from_paths([(5,), (9,), (5, 2), (5, 7), (9, 2), (5, 2, 11), (5, 7, 3), (9, 2, 2)])


@pytest.mark.parametrize("arch,pattern", [("qwen3_5", "gdn_first"), ("qwen3_5", "attention_first"),
                                          ("qwen3_5", "gdn_between"), ("qwen3_next", "gdn_first"),
                                          ("qwen3_5_moe", "attention_first")])
def test_verify_equals_recomputing_each_path(arch, pattern):
    model = tiny_hybrid(arch, HYBRID_PATTERNS[pattern], seed=1)
    t = TargetModel(model)
    t.prefill(torch.tensor(PROMPT))
    tree = _tree()
    out = t.verify(42, tree)
    assert torch.allclose(out.logits[0], _full_logits(model, PROMPT + [42]), atol=ATOL)
    for i, path in enumerate(tree.paths()):
        assert torch.allclose(out.logits[i + 1], _full_logits(model, PROMPT + [42] + list(path)), atol=ATOL), i
        with torch.no_grad():  # the hidden states the drafter reads, layer by layer
            ref = model(torch.tensor([PROMPT + [42] + list(path)]), output_hidden_states=True).hidden_states
        for a, b in zip(out.hidden_states, ref):
            assert torch.allclose(a[0, i + 1], b[0, -1], atol=ATOL), i


def _cache_equal(t: TargetModel, model, seq):
    """The target's cache against a fresh prefill of ``seq``: attention KV, conv windows, GDN states."""
    ref = TargetModel(model, check_mask=False)
    ref.prefill(torch.tensor(seq))
    assert t.length == len(seq)
    n_gdn = 0
    for a, b in zip(t.cache.layers, ref.cache.layers):
        if hasattr(a, "recurrent_states"):
            n_gdn += 1
            assert torch.allclose(a.conv_states[0], b.conv_states[0], atol=ATOL)
            assert torch.allclose(a.recurrent_states[0], b.recurrent_states[0], atol=ATOL)
        else:
            assert a.keys.shape == b.keys.shape
            assert torch.allclose(a.keys, b.keys, atol=ATOL) and torch.allclose(a.values, b.values, atol=ATOL)
    assert n_gdn > 0


class _Checked(TargetModel):
    """A TargetModel that, after every commit, compares its cache with a fresh prefill."""

    def prefill(self, input_ids, hidden=True):
        self.seq = [int(x) for x in torch.as_tensor(input_ids).flatten()]
        return super().prefill(input_ids, hidden)

    def verify(self, root_token, tree=None, hidden=True, mask=None):
        self._round = (int(root_token), tree)
        return super().verify(root_token, tree, hidden, mask)

    def commit(self, path=()):
        super().commit(path)
        root, tree = self._round
        self.seq += [root] + [int(tree.token[i]) for i in path]
        _cache_equal(self, self.model, self.seq)
        self.checked = getattr(self, "checked", 0) + 1


@pytest.mark.parametrize("gdn_commit", ["path", "replay", "select"])
@pytest.mark.parametrize("pattern", sorted(HYBRID_PATTERNS))
def test_cache_equals_a_fresh_prefill_after_every_commit(pattern, gdn_commit):
    model = tiny_hybrid("qwen3_5", HYBRID_PATTERNS[pattern], seed=2)
    t = _Checked(model, gdn_commit=gdn_commit)
    # the decoy's chain is never accepted: root-only commits; the tree rounds accept deep paths
    for method, drafter in (("chain", DecoyDrafter(model, 6, 2, seed=3)), ("ar", None),
                            ("mfd", DecoyDrafter(model, 6, 2, seed=3)), ("mfd", OracleDrafter(model, 6, 2, seed=3))):
        res = speculative_generate(t, drafter, PROMPT, 16, method, budget=32)
        assert res.tokens == _hf_greedy(model, PROMPT, 16)
    assert t.checked >= 20 and max(s.accepted for s in res.steps) >= 3


def _sibling_rank(tree, i):
    """Rank of node i among its siblings by the tree's score (0 = the first child)."""
    sib = np.flatnonzero(tree.parent == tree.parent[i])
    return int(np.sum(tree.log_score[sib] > tree.log_score[i]))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("pattern", sorted(HYBRID_PATTERNS))
def test_greedy_equals_hf_generate(pattern, attn):
    model = tiny_hybrid("qwen3_5", HYBRID_PATTERNS[pattern], seed=0, attn=attn)
    target = TargetModel(model)
    ref = _hf_greedy(model, PROMPT, 24)
    depth_seen = set()
    for method in METHODS:
        drafters = [DecoyDrafter(model, 6, 2, seed=1), OracleDrafter(model, 6, 1, seed=2)]
        if method == "ar":
            drafters = [None]
        for drafter in drafters:
            res = speculative_generate(target, drafter, PROMPT, 24, method, budget=32, keep_trees=True)
            assert res.tokens == ref, (method, type(drafter).__name__)
            if isinstance(drafter, DecoyDrafter) and method in ("ddtree", "mfd"):
                for s in res.steps:  # the accepted path took a second sibling at every depth
                    node = -1
                    for d in range(s.accepted):
                        kids = np.flatnonzero(s.tree.parent == node)
                        nxt = [i for i in kids if s.node_log_cond[i] == 0.0]
                        assert len(nxt) == 1
                        node = nxt[0]
                        assert _sibling_rank(s.tree, node) > 0
                        depth_seen.add(d + 1)
    assert {1, 2, 3} <= depth_seen


@pytest.mark.parametrize("pattern", sorted(HYBRID_PATTERNS))
def test_best_mode_greedy_equals_hf_generate(pattern):
    """method "mfd" with the best-mode tree on a hybrid: a decoy drafter (its accepted paths take
    second siblings), an oracle, a package MFD drafter and the same with unreadable weights."""
    model = tiny_hybrid("qwen3_5", HYBRID_PATTERNS[pattern], seed=0)
    target = TargetModel(model)
    ref = _hf_greedy(model, PROMPT, 24)
    mfd = build_drafter(model, 5, 1, 3, seed=6)
    for drafter in (DecoyDrafter(model, 6, 2, seed=1), OracleDrafter(model, 6, 2, seed=2), mfd, NanGateDrafter(mfd)):
        res = speculative_generate(target, drafter, PROMPT, 24, "mfd", budget=32, scorer="best_mode")
        assert res.tokens == ref, type(drafter).__name__


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5_moe"])
def test_greedy_equals_hf_generate_other_hybrids(arch):
    model = tiny_hybrid(arch, HYBRID_PATTERNS["gdn_between"], seed=4)
    target = TargetModel(model)
    ref = _hf_greedy(model, PROMPT, 20)
    for method, drafter in itertools.product(METHODS, ("decoy", "block")):
        d = DecoyDrafter(model, 6, 2, seed=5) if drafter == "decoy" else build_drafter(
            model, 5, 1, 1 if method == "dartree" else 2, seed=6, kind="dartree" if method == "dartree" else "dflash")
        assert speculative_generate(target, d, PROMPT, 20, method, budget=24).tokens == ref, (method, drafter)


def test_sampled_decoding_is_the_targets_own_sampling():
    """End to end on a hybrid: 1,000 three-token continuations, V = 4, the four methods pooled:
    the output distribution is the target's own (chi-square, cells with < 5 expected merged).
    Fewer draws than the attention test (a hybrid round is slower); still ~16 per cell."""
    m = tiny_hybrid("qwen3_5", HYBRID_PATTERNS["gdn_first"], vocab_size=4, hidden_size=16, seed=3, init_std=0.5)
    assert sampled_continuations_pvalue(m, vocab_size=4, n=1_000) > 1e-3


# ------------------------------------------------------------------------------------ bad input
class _Renamed(torch.nn.Module):
    """A hybrid wrapped in another class: an architecture the tree verifier does not know."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, **kw):
        return self.inner(**kw)


def test_unknown_hybrid_architecture_is_refused():
    m = tiny_hybrid("qwen3_5", HYBRID_PATTERNS["gdn_first"])
    with pytest.raises(ValueError, match="architecture _Renamed"):
        TargetModel(_Renamed(m))


def test_sliding_window_layers_are_refused():
    m = tiny_qwen3(num_layers=2)
    m.config.layer_types = ["sliding_attention", "full_attention"]
    m.config.sliding_window = 8
    with pytest.raises(ValueError, match="DynamicSlidingWindowLayer"):
        TargetModel(m)


def test_bad_gdn_commit_is_refused():
    with pytest.raises(ValueError, match="gdn_commit"):
        TargetModel(tiny_hybrid("qwen3_5"), gdn_commit="rollback")


def test_state_memory_of_a_27b_shaped_stack():
    """Per GDN layer 48 value heads x 128 x 128 float32 = 3 MiB; 48 GDN layers of 64 in all."""
    from transformers import Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(hidden_size=5120, num_hidden_layers=64, linear_num_value_heads=48,
                            linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128)
    mem = gdn_state_bytes(cfg)
    assert mem["gdn_layers"] == 48 and mem["recurrent_per_layer"] == 3 * 2 ** 20
    assert mem["gdn_layers"] * mem["recurrent_per_layer"] == 144 * 2 ** 20
    assert 144 * 2 ** 20 < mem["per_snapshot"] < 150 * 2 ** 20  # plus the conv windows (80 KiB a layer)


# ------------------------------------------------------------------------------------ drafters
def _published_layout_checkpoint(directory, target, mask_token_id, target_layer_ids, sliding=False):
    """A checkpoint directory laid out like z-lab's Qwen3.5 DFlash drafters, at a tiny size: a Qwen3
    ``config.json`` with top-level ``block_size`` and ``num_target_layers``, ``dflash_config`` holding
    only ``mask_token_id`` and ``target_layer_ids``, and DFlash's tensor names in safetensors."""
    import json

    from safetensors.torch import save_file

    src = build_drafter(target, block_size=4, num_layers=2, seed=7, mask_token_id=mask_token_id,
                        target_layer_ids=target_layer_ids)
    cfg = target.config
    layer_types = ["sliding_attention", "full_attention"] if sliding else ["full_attention"] * 2
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4,
        "num_target_layers": cfg.num_hidden_layers,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": target_layer_ids},
        "hidden_size": cfg.hidden_size, "intermediate_size": 2 * cfg.hidden_size, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": cfg.hidden_size // 4,
        "vocab_size": cfg.vocab_size, "rms_norm_eps": 1e-6, "rope_theta": 10000000, "hidden_act": "silu",
        "max_position_embeddings": 512, "attention_bias": False, "tie_word_embeddings": False,
        "layer_types": layer_types, "use_sliding_window": sliding, "sliding_window": 8 if sliding else None,
        "dtype": "bfloat16",
    }
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in src.state_dict().items() if not k.startswith("rotary_emb.")},
              str(directory / "model.safetensors"))
    return src


def test_published_qwen3_5_drafter_layout_loads_on_a_hybrid(tmp_path):
    from mfd_theory.llm import load_drafter

    model = tiny_hybrid("qwen3_5", HYBRID_PATTERNS["gdn_between"], seed=8)
    src = _published_layout_checkpoint(tmp_path / "dflash", model, mask_token_id=60, target_layer_ids=[1, 2])
    d = load_drafter(tmp_path / "dflash", model)
    assert d.block_size == 4 and d.mask_token_id == 60 and d.target_layer_ids == [1, 2]
    for (name, a), b in zip(d.state_dict().items(), src.state_dict().values()):
        assert torch.equal(a, b), name
    # target_layer_ids index the hybrid stack's hidden_states exactly as for Qwen3: [layer + 1]
    t = TargetModel(model)
    ids = torch.tensor(PROMPT)
    _, hidden = t.prefill(ids)
    with torch.no_grad():
        ref = model(ids[None], output_hidden_states=True).hidden_states
        assert len(hidden) == len(ref) == model.config.num_hidden_layers + 1
        feats = d.hidden_norm(d.fc(torch.cat([ref[2], ref[3]], dim=-1)))
    assert torch.allclose(d.fuse_hidden(hidden), feats, atol=ATOL)
    res = speculative_generate(t, d, PROMPT, 12, "ddtree", budget=8)
    assert res.tokens == _hf_greedy(model, PROMPT, 12)


def test_sliding_window_draft_layers_are_refused(tmp_path):
    from mfd_theory.llm import load_drafter

    model = tiny_hybrid("qwen3_5", seed=8)
    _published_layout_checkpoint(tmp_path / "dflash", model, 60, [0, 2], sliding=True)
    with pytest.raises(ValueError, match="sliding-window"):
        load_drafter(tmp_path / "dflash", model)


def test_build_drafter_on_a_hybrid_uses_full_rotary_qwen3_layers():
    from mfd_theory.llm.models.drafter import default_target_layer_ids

    model = tiny_hybrid("qwen3_5", seed=8)
    assert model.config.rope_parameters["partial_rotary_factor"] < 1
    d = build_drafter(model, block_size=4, num_layers=2)
    assert "partial_rotary_factor" not in d.config.rope_parameters
    assert d.rotary_emb.inv_freq.numel() == d.config.head_dim // 2
    assert d.target_layer_ids == default_target_layer_ids(3, 2)


# ------------------------------------------------------------------------------------ pipeline
def test_e2e_trains_and_decodes_a_hybrid_target(tmp_path):
    """``mfd e2e --target-arch qwen3_5`` at a toy size: the target is a Qwen3.5 hybrid, every greedy
    row equals ar's output (lossless), the same table is written."""
    import json

    from mfd_theory.commands.experiments.e2e import main

    main(["--preset", "micro", "--target-arch", "qwen3_5", "--out", str(tmp_path), "--quiet",
          "--n-train", "200", "--seq-len", "32", "--target-steps", "6", "--drafter-steps", "4",
          "--distill-prompts", "8", "--distill-gen-len", "12", "--eval-prompts", "1", "--max-new-tokens", "8",
          "--temperatures", "0", "--budgets", "8", "--hf-assisted", "false"])
    res = json.loads((tmp_path / "end_to_end.json").read_text())
    assert res["config"]["target_arch"] == "qwen3_5"
    target_cfg = json.loads(next((tmp_path / "cache").glob("target-*/model/config.json")).read_text())
    assert target_cfg["architectures"] == ["Qwen3_5ForCausalLM"] and "linear_attention" in target_cfg["layer_types"]
    rows = res["data"]["rows"]
    assert {r["method"] for r in rows} == set(METHODS)
    assert all(r["matches_ar"] for r in rows)
    # the README's e2e-hybrid block is generated from this file under results/hybrid/
    from mfd_theory.report import BLOCKS, render

    assert BLOCKS["e2e-hybrid"][0] == "hybrid/end_to_end.json"
    (tmp_path / "results" / "hybrid").mkdir(parents=True)
    (tmp_path / "results" / "hybrid" / "end_to_end.json").write_text((tmp_path / "end_to_end.json").read_text())
    text, changed, _ = render("<!-- report:e2e-hybrid -->\nold\n<!-- /report:e2e-hybrid -->\n", tmp_path / "results")
    assert changed == ["e2e-hybrid"] and "old" not in text
    spec = [r for r in rows if r["method"] != "ar"]
    assert f"Greedy (T = 0): {len(spec)} of {len(spec)} rows equal ar's output" in text
    from mfd_theory.llm.measure.evaluate import cell_key, scorer_of

    # one table line per cell: method, drafter and, for an mfd drafter, the scorer (mixture, best-mode)
    cells = {cell_key(r["method"], r["drafter"], scorer=scorer_of(r)) for r in spec}
    assert any(k[-1] == "best_mode" for k in cells)
    assert len([ln for ln in text.splitlines() if ln.startswith("| 0 |")]) == len(cells)


def test_bench_hybrid_profile_micro():
    from mfd_theory.commands.bench.bench_decode import BenchDecodeConfig, hybrid_profile
    from mfd_theory.report.bench import hybrid_table

    cfg = BenchDecodeConfig(shape="micro", arch="qwen3_5", block_size=4, prompt_len=8, hybrid_sizes="1,4",
                            profile_repeats=1)
    prof = hybrid_profile(cfg, torch, torch.device("cpu"), torch.float32, progress=False)
    assert [r["N"] for r in prof["rows"]] == [1, 4]
    for r in prof["rows"]:
        assert 0 < r["gdn_tree_ms"] <= r["replay_ms"] and r["gdn_chain_ms"] > 0 and 0 < r["gdn_share"] <= 1
        assert r["commit_replay_ms"] > 0 and r["commit_select_ms"] > 0 and r["attention_ms"] > 0
    assert "GDN tree / chain" in hybrid_table(prof)


def test_bench_decode_hybrid_writes_its_own_file_and_block(tmp_path):
    """``mfd bench decode --arch qwen3_5`` writes bench_decode_qwen3_5.json (never the attention
    run's bench_decode.json), and the README's bench-decode-hybrid block is generated from it."""
    from mfd_theory.commands.bench.bench_decode import BenchDecodeConfig, run
    from mfd_theory.report import BLOCKS, render

    cfg = BenchDecodeConfig(shape="micro", arch="qwen3_5", block_size=4, num_modes=2, budget=4, prompt_len=8,
                            max_new_tokens=4, prompts=1, hybrid_sizes="1,4", profile_repeats=1)
    res = run(cfg, out_dir=tmp_path, progress=False)
    assert (tmp_path / "bench_decode_qwen3_5.json").is_file() and not (tmp_path / "bench_decode.json").exists()
    assert BLOCKS["bench-decode-hybrid"][0] == "bench_decode_qwen3_5.json"
    text, changed, _ = render("<!-- report:bench-decode-hybrid -->\nold\n<!-- /report:bench-decode-hybrid -->\n",
                              tmp_path)
    assert changed == ["bench-decode-hybrid"]
    rows = res.data["hybrid_profile"]["rows"]
    for m, r in res.data["methods"].items():  # the decoding split, one row per method
        assert f"| {m} | {r['tokens_per_s']:.1f} |" in text
    for r in rows:  # the profile, one row per tree size
        assert f"| {r['N']} | {r['depth']} | {r['attention_ms']:.2f} | {r['replay_ms']:.2f} |" in text
    ref = rows[-1]  # N = budget = 4: the summary sentence reads that row
    assert f"costs {ref['gdn_tree_over_chain']:.2f}x their chain pass" in text
    assert f"replay {ref['round_replay_ms']:.1f} ms, select {ref['round_select_ms']:.1f} ms" in text


# ------------------------------------------------------------------------------------ the tree rule
@pytest.mark.parametrize("n_nodes,hk,seed", [(1, 2, 0), (7, 2, 1), (40, 1, 2), (40, 4, 3)])
def test_tree_gated_delta_rule_equals_walking_each_path(n_nodes, hk, seed):
    """The all-rows-at-once tree form against HF's one-token rule run along every row's path."""
    from reference_hybrid import tree_gated_delta_rule_ref

    from mfd_theory.llm.models.hybrid import _plan_verify as plan_verify, tree_gated_delta_rule
    from mfd_theory.trees import product_tree

    g0 = torch.Generator().manual_seed(seed)
    lq = torch.log_softmax(2.0 * torch.randn(6, 5, generator=g0), -1).double().numpy()
    tree = product_tree(lq, n_nodes)
    plan = plan_verify(tree.parent, tree.depth, 4, "cpu")  # a forest of one tree
    ancestor = plan.ancestor[0]  # [n, n]
    parent_row = torch.cat([torch.tensor([-1]), torch.as_tensor(tree.parent) + 1])
    n, hv, dk, dv = n_nodes + 1, 4, 8, 6
    q = torch.nn.functional.normalize(torch.randn(n, hk, dk, generator=g0), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(n, hk, dk, generator=g0), dim=-1)
    v = torch.randn(n, hv, dv, generator=g0)
    g = -torch.rand(n, hv, generator=g0) * 2  # log decays <= 0
    beta = torch.rand(n, hv, generator=g0)
    s0 = torch.randn(hv, dk, dv, generator=g0)
    out, states = tree_gated_delta_rule(q, k, v, g, beta, s0, ancestor, torch.arange(n))
    ref_out, ref_states = tree_gated_delta_rule_ref(q, k, v, g, beta, s0, parent_row)
    # float32, one triangular solve vs a token-by-token recursion: rounding only
    assert torch.allclose(out, ref_out, atol=1e-5) and torch.allclose(states, ref_states, atol=1e-5)


def test_a_failing_verify_restores_the_model():
    """The GDN functions and module forwards swapped during a verify pass are restored even when
    the forward raises (here an out-of-vocabulary node token), and the target stays usable."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq

    model = tiny_hybrid("qwen3_5", HYBRID_PATTERNS["gdn_first"], seed=9)
    before = (mq.causal_conv1d_fn, mq.torch_chunk_gated_delta_rule)
    t = TargetModel(model)
    t.prefill(torch.tensor(PROMPT))
    with pytest.raises(IndexError):
        t.verify(3, DraftTree.from_paths([(5,), (999,)]))
    assert (mq.causal_conv1d_fn, mq.torch_chunk_gated_delta_rule) == before
    assert all("forward" not in layer.linear_attn.__dict__ for layer in model.model.layers
               if hasattr(layer, "linear_attn"))
    assert speculative_generate(model, None, PROMPT, 6, "ar").tokens == _hf_greedy(model, PROMPT, 6)
