"""Target families besides Qwen3: Qwen2 (q/k/v bias, untied head, RoPE theta 1e6) and Llama (head
tied to the embedding, RoPE theta 1e5). Every decoding method stays lossless on both, with DFlash,
MFD and Domino drafters built for them; checkpoints, drafter training, the ceiling and the round
profile run on them too."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import FAMILIES, OracleDrafter, hf_greedy, sampled_continuations_pvalue  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.batch import speculative_generate_batch  # noqa: E402
from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.models.drafter import check_drafter_target, load_drafter  # noqa: E402

# mixed lengths; token 0 (the helpers' pad id) avoided so HF generate's inferred mask is all ones
PROMPTS = [[3, 7, 1, 9, 4], [50, 2], [11, 12, 13, 14, 15, 16, 17, 18, 19], [5, 33, 8]]
N_NEW = 12
P_MIN = 1e-3  # chi-square p-value floor: fixed seeds, so a pass is deterministic, not flaky
V = 64
MASK_ID = V - 2  # inside the vocabulary, not the default last id
LAYER_IDS = [0, 2]  # two of the 4 target layers fused


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    """(name, HF model, TargetModel, the greedy references {prompt index: tokens})."""
    model = FAMILIES[request.param](vocab_size=V, seed=0)
    refs = {i: hf_greedy(model, p, N_NEW) for i, p in enumerate(PROMPTS)}
    return request.param, model, TargetModel(model), refs


def _drafters(model) -> dict:
    kw = dict(num_layers=1, mask_token_id=MASK_ID, target_layer_ids=LAYER_IDS)
    return {
        "dflash": build_drafter(model, 5, seed=3, **kw),
        "mfd2": build_drafter(model, 5, num_modes=2, seed=4, **kw),
        "domino": build_drafter(model, 5, seed=5, kind="dartree", **kw),
        "oracle": OracleDrafter(model, block_size=6, num_modes=2, seed=1),
    }


# every (method, scorer) of one request; which drafters run it
ONE_REQUEST = [("ar", None), ("chain", None), ("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode"),
               ("dartree", None)]


def test_the_families_are_what_they_claim():
    """The helpers' models have their family's traits, so the tests below exercise them."""
    q2, ll = FAMILIES["qwen2"](), FAMILIES["llama"]()
    a2, al = q2.model.layers[0].self_attn, ll.model.layers[0].self_attn
    assert a2.q_proj.bias is not None and a2.k_proj.bias is not None and a2.v_proj.bias is not None
    assert al.q_proj.bias is None and not hasattr(al, "q_norm") and not hasattr(a2, "q_norm")
    assert q2.get_output_embeddings().weight is not q2.get_input_embeddings().weight
    assert ll.get_output_embeddings().weight is ll.get_input_embeddings().weight
    assert q2.config.rope_parameters["rope_theta"] == 1e6 and ll.config.rope_parameters["rope_theta"] == 1e5


def test_a_drafter_is_sized_and_rotated_as_its_target(family):
    """The draft layers' head size and RoPE frequencies are the target's (a Qwen2 config names no
    head_dim: the drafter once took Qwen3's 128), and its embedding and head are the target's own."""
    name, model, target, _ = family
    for d in list(_drafters(model).values())[:3]:
        attn = d.layers[0].self_attn
        assert attn.head_dim == model.config.hidden_size // model.config.num_attention_heads == 8
        torch.testing.assert_close(d.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)
        assert d._embed_tokens.weight is model.get_input_embeddings().weight
        assert d._lm_head.weight is model.get_output_embeddings().weight
        assert d.mask_token_id == MASK_ID and d.target_layer_ids == LAYER_IDS
        check_drafter_target(d, model)


def test_greedy_one_request_equals_hf_generate(family):
    name, model, target, refs = family
    drafters = _drafters(model)
    accepted = {}
    for (method, scorer), (dname, drafter), i in itertools.product(ONE_REQUEST, drafters.items(), (0, 2)):
        if (method == "ar" and dname != "dflash") or (method == "dartree" and not drafter.grows_trees):
            continue
        res = speculative_generate(target, drafter, PROMPTS[i], N_NEW, method, budget=10,
                                   scorer=scorer if method == "mfd" else None)
        assert res.tokens == refs[i], (name, method, scorer, dname, i)
        accepted[method, scorer, dname] = accepted.get((method, scorer, dname), 0) + sum(s.accepted for s in res.steps)
    # the oracle's trees are mostly right: every tree method walked real branches, dartree included
    for method, scorer in ONE_REQUEST[1:]:
        assert accepted[method, scorer, "oracle"] >= 8, (name, method, scorer, accepted)


def test_sdpa_target_gives_the_same_tokens(family):
    name, _, _, _ = family
    model = FAMILIES[name](vocab_size=V, seed=0, attn="sdpa")
    target, drafter = TargetModel(model), OracleDrafter(model, block_size=6, num_modes=2, seed=1)
    refs = [hf_greedy(model, p, N_NEW) for p in PROMPTS]
    assert speculative_generate(target, drafter, PROMPTS[0], N_NEW, "mfd", budget=10).tokens == refs[0]
    res = speculative_generate_batch(target, drafter, PROMPTS, N_NEW, "mfd", budget=10, policy="global")
    assert [r.tokens for r in res.results] == refs


BATCHED = [("ar", None), ("chain", None), ("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode")]


def test_greedy_batch_equals_hf_generate(family):
    """Four prompts of different lengths decoded together under per-request budgets, and at most 3
    at a time (so a request joins mid-decode) under one global budget: every request decodes HF's
    greedy tokens."""
    name, model, target, refs = family
    want = [refs[i] for i in range(len(PROMPTS))]
    drafters = {k: v for k, v in _drafters(model).items() if k != "domino"}
    for (method, scorer), (dname, drafter), (policy, max_batch) in itertools.product(
            BATCHED, drafters.items(), (("per_request", None), ("global", 3))):
        if method == "ar" and (dname != "dflash" or policy != "per_request"):
            continue
        res = speculative_generate_batch(target, drafter, PROMPTS, N_NEW, method, budget=8, policy=policy,
                                         max_batch=max_batch, scorer=scorer if method == "mfd" else None)
        assert [r.tokens for r in res.results] == want, (name, method, scorer, dname, policy, max_batch)
        assert max(r.batch_size for r in res.rounds) == (max_batch or len(PROMPTS))
        if method != "ar":
            assert any(sum(r.nodes) for r in res.rounds)  # trees were verified
        if dname == "oracle":
            assert res.tau > 2.0, (name, method, scorer, policy, res.tau)


# spread targets (next-token entropy 1.2-1.3 nats of log 4 = 1.39): six-node trees miss often, so
# the walk's rejections and bonus draws carry the test (a peaked target's trees cover everything)
SAMPLING_SEEDS = {"qwen2": 2, "llama": 0}


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_sampling_at_temperature_one_is_the_targets_own(name):
    """1,000 three-token continuations at T = 1, V = 4 (about 16 per cell), the methods pooled:
    Qwen2 through a 2-mode MFD drafter (chain, ddtree, mfd), Llama through a Domino drafter
    (dartree, ddtree, mfd); the output distribution is the target's own (chi-square). A walk
    drawing an accepted node's bonus token at its parent's row fails here (p < 1e-3)."""
    model = FAMILIES[name](vocab_size=4, hidden_size=16, num_layers=1, seed=SAMPLING_SEEDS[name], init_std=0.2)
    if name == "qwen2":
        p = sampled_continuations_pvalue(model, vocab_size=4, n=1_000, temperature=1.0,
                                         methods=("chain", "ddtree", "mfd"))
    else:
        domino = build_drafter(model, block_size=3, num_layers=1, seed=1, kind="dartree", mask_token_id=2)
        p = sampled_continuations_pvalue(model, vocab_size=4, n=1_000, temperature=1.0,
                                         methods=("dartree", "ddtree", "mfd"), drafter=domino)
    assert p > P_MIN


def _same_drafts(a, b, model) -> None:
    """``a`` and ``b`` draft the same block from the same context (prompt 0's hidden states)."""
    with torch.no_grad():
        hidden = model(torch.tensor([PROMPTS[0]]), output_hidden_states=True).hidden_states
    out = []
    for d in (a, b):
        d.reset()
        out.append(d.draft_modes(d.fuse_hidden(hidden), 7))
    for x, y in zip(*out):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_checkpoint_round_trip(family, tmp_path):
    """save_pretrained then load_drafter, for a DFlash, an MFD and a Domino drafter of each family:
    the same class, weights and drafts, tied to this target's tables; the other family's target
    is refused (by fingerprint)."""
    name, model, target, refs = family
    other = FAMILIES[next(f for f in FAMILIES if f != name)](vocab_size=V, seed=0)
    for dname, d in list(_drafters(model).items())[:3]:
        d.save_pretrained(tmp_path / dname)
        back = load_drafter(tmp_path / dname, model)
        assert type(back) is type(d) and back.num_modes == d.num_modes
        assert back.config.head_dim == d.config.head_dim and back.mask_token_id == MASK_ID
        assert back.state_dict().keys() == d.state_dict().keys()
        for k, v in d.state_dict().items():
            assert torch.equal(back.state_dict()[k], v), (dname, k)
        check_drafter_target(back, model)
        _same_drafts(d, back, model)
        method = "dartree" if dname == "domino" else "mfd"
        assert speculative_generate(target, back, PROMPTS[2], N_NEW, method, budget=8).tokens == refs[2]
        with pytest.raises(ValueError, match="another target"):
            load_drafter(tmp_path / dname, other)


@pytest.mark.parametrize("kind, modes", [("dflash", 2), ("dartree", 1)])
def test_a_short_drafter_training_run(family, tmp_path, kind, modes):
    """Three steps of train_drafter on the target's own continuations (a tied head for Llama): the
    drafter's weights move, the target's embedding and head do not, and the saved drafter loads
    and decodes losslessly."""
    from mfd_theory.llm.training.train import DrafterTrainConfig, make_distill_data, train_drafter

    name, model, target, refs = family
    prompts = np.array([PROMPTS[0] + [6], [50, 2, 44, 5, 6, 7], PROMPTS[2][:6], [5, 33, 8, 9, 1, 2]])
    data = make_distill_data(model, prompts, 10, temperature=1.0, seed=0, progress=False)  # [4, 16]
    assert data.shape == (4, 16) and (data[:, :6] == prompts).all()
    drafter = build_drafter(model, 4, 1, num_modes=modes, seed=0, kind=kind, mask_token_id=MASK_ID,
                            target_layer_ids=LAYER_IDS)
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    tables = [model.get_input_embeddings().weight.clone(), model.get_output_embeddings().weight.clone()]
    cfg = DrafterTrainConfig(block_size=4, num_modes=modes, batch_size=4, blocks_per_seq=2, steps=3, warmup=1,
                             ckpt_every=2, lr=1e-2)
    curve = train_drafter(model, drafter, data, 6, tmp_path, cfg, progress=False)
    assert len(curve) == 3 and all(np.isfinite(c["loss"]) for c in curve)
    assert any(not torch.equal(before[k], v) for k, v in drafter.state_dict().items())
    assert torch.equal(model.get_input_embeddings().weight, tables[0])
    assert torch.equal(model.get_output_embeddings().weight, tables[1])
    back = load_drafter(tmp_path / "drafter", model)
    assert back.num_modes == modes and type(back) is type(drafter)
    method = "dartree" if kind == "dartree" else "mfd"
    assert speculative_generate(target, back, PROMPTS[1], N_NEW, method, budget=8).tokens == refs[1]


def _path_log_prob(model, context, path, T: float = 1.0) -> float:
    """log P_T(path | context) from plain HF forwards of the whole sequence."""
    with torch.no_grad():
        lg = model(torch.tensor([list(context) + list(path)])).logits[0].double()  # [len, V]
    lp = torch.log_softmax(lg / T, dim=-1)
    return float(sum(lp[len(context) - 1 + i, t] for i, t in enumerate(path)))


def test_the_ceiling_on_each_family():
    """prompt_ceiling with tiny options on both families: the oracle tree covers at least what
    every other tree covers, each coverage is the sum of its nodes' P(s) from plain HF forwards,
    and the Monte-Carlo check agrees with it."""
    from mfd_theory.llm.measure.ceiling import CeilingOptions, TargetScorer, oracle_tree_of, prompt_ceiling

    opt = CeilingOptions(L=3, budgets=(1, 4, 12), modes=(1, 2), samples=200, dead_at=12, top_k=5, batch=200,
                         fit_iters=20)
    context = [1, 5, 2]
    for name, build in sorted(FAMILIES.items()):
        model = build(vocab_size=8, num_layers=2, seed=4)
        rec = prompt_ceiling(model, context, 1.0, opt, seed=0)
        cov, mc = rec["coverage"], rec["mc"]
        assert set(cov) == {"oracle", "product", "mixture K=2"}, name
        for n in ("1", "4", "12"):
            assert all(cov[k][n] <= cov["oracle"][n] + 1e-9 for k in cov), (name, n)
            for k in cov:
                assert abs(mc[k][n][0] - cov[k][n]) <= 5 * mc[k][n][1] + 0.01, (name, k, n)
        oracle = oracle_tree_of(TargetScorer(model, context, 3), 12)
        want = sum(np.exp(_path_log_prob(model, context, p)) for p in oracle.paths())
        assert cov["oracle"]["12"] == pytest.approx(want, rel=1e-4), name


def test_the_round_profile_on_each_family():
    """measure_round_profile times chain, ddtree and mfd rounds on both families' targets."""
    from mfd_theory.llm.measure.evaluate import Cell
    from mfd_theory.llm.measure.profile import measure_round_profile

    for name, build in sorted(FAMILIES.items()):
        model = build(vocab_size=V, num_layers=2, seed=0)
        d1, d2 = (build_drafter(model, 4, 1, num_modes=k, seed=k, mask_token_id=MASK_ID) for k in (1, 2))
        cells = [Cell("chain", "k1", 3, d1), Cell("ddtree", "k1", 4, d1), Cell("mfd", "k2", 4, d2)]
        prof = measure_round_profile(TargetModel(model), cells, [np.arange(1, 9), np.arange(5, 15)], 6,
                                     progress=False, name=name, model=name, context_probe=False)
        assert prof.measured_round and prof.tree_sizes == (3, 4), name
        assert prof.t_target_ms > 0 and all(t > 0 for t in prof.verify_ms), name
        assert {(t.method, t.K) for t in prof.overhead} == {("chain", 1), ("ddtree", 1), ("mfd", 2)}, name
