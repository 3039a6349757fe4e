"""A drafter's reduced draft vocabulary (``d2t`` / ``t2d``): its distributions against a slow twin
(the full head's logits restricted by hand), every decoding method still lossless and never
drafting a token outside it, checkpoints that keep it (and refuse inconsistent ones), the training
loss over it, the frequency choice of ``mfd train-drafter --draft-vocab`` and ``--init-layers
target``."""

import collections
import itertools
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import FAMILIES, hf_greedy  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.batch import speculative_generate_batch  # noqa: E402
from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.models.domino import domino_from_checkpoint  # noqa: E402
from mfd_theory.llm.models.drafter import drafter_from_checkpoint, load_drafter  # noqa: E402
from mfd_theory.llm.training.train import block_loss, position_weights  # noqa: E402

V = 64
# the draft vocabulary: every third id plus a few the prompts' greedy texts are likely to need
VOCAB = sorted(set(range(0, V, 3)) | {5, 7, 11})
PROMPTS = [[3, 7, 1, 9, 4], [50, 2], [11, 12, 13, 14, 15, 16, 17, 18, 19], [5, 33, 8]]
KW = dict(num_layers=1, mask_token_id=V - 2, target_layer_ids=[0, 2])


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def model(request):
    return FAMILIES[request.param](vocab_size=V, seed=0)


def _pair(model, modes=1, kind="dflash", seed=3):
    """The same drafter twice: drafting the whole vocabulary, and restricted to VOCAB."""
    full = build_drafter(model, 5, num_modes=modes, seed=seed, kind=kind, **KW).eval()
    reduced = build_drafter(model, 5, num_modes=modes, seed=seed, kind=kind, draft_vocab=VOCAB, **KW).eval()
    return full, reduced


def _draft(model, drafter, prompt=(3, 7, 1, 9, 4), root=4):
    with torch.no_grad():
        hs = model(torch.tensor([list(prompt)]), output_hidden_states=True).hidden_states
        drafter.reset()
        return drafter.draft_modes(drafter.fuse_hidden(hs), root)


def _restricted(log_q: torch.Tensor) -> torch.Tensor:
    """Slow twin: the full distribution renormalised over VOCAB, -inf elsewhere."""
    ids = torch.tensor(VOCAB)
    out = torch.full_like(log_q, float("-inf"))
    out[..., ids] = log_q[..., ids] - torch.logsumexp(log_q[..., ids], dim=-1, keepdim=True)
    return out


def test_the_buffers_are_eagle3s_layout(model):
    d = build_drafter(model, 5, draft_vocab=[9, 3, 3, 40], **KW)
    assert d.draft_vocab.tolist() == [3, 9, 40]
    assert d.d2t.tolist() == [3, 8, 38]  # draft id i is target id i + d2t[i]
    assert d.t2d.dtype == torch.bool and d.t2d.shape == (V,) and d.t2d.nonzero().flatten().tolist() == [3, 9, 40]
    assert d.draft_index(torch.tensor([[3, 4, 40], [9, 0, 3]])).tolist() == [[0, -1, 2], [1, -1, 0]]
    plain = build_drafter(model, 5, **KW)
    assert plain.draft_vocab is None and "d2t" not in plain.state_dict()
    assert torch.equal(plain.draft_index(torch.tensor([1, 2])), torch.tensor([1, 2]))


@pytest.mark.parametrize("modes,kind", [(1, "dflash"), (2, "dflash")])
def test_drafted_distributions_are_the_full_heads_restricted(model, modes, kind):
    full, reduced = _pair(model, modes, kind)
    lp_f, lq_f = _draft(model, full)
    lp_r, lq_r = _draft(model, reduced)
    torch.testing.assert_close(lp_r, lp_f)
    assert lq_r.shape == lq_f.shape  # the decoders see the target's vocabulary
    want = _restricted(lq_f)
    outside = torch.ones(V, dtype=torch.bool)
    outside[VOCAB] = False
    assert torch.isinf(lq_r[..., outside]).all() and (lq_r[..., outside] < 0).all()
    torch.testing.assert_close(lq_r[..., ~outside], want[..., ~outside], atol=1e-5, rtol=1e-5)


def test_batched_drafting_matches_one_request(model):
    _, reduced = _pair(model, 2)
    _, lq_one = _draft(model, reduced)
    ctx = reduced.batch_context()
    with torch.no_grad():
        hs = model(torch.tensor([[3, 7, 1, 9, 4]]), output_hidden_states=True).hidden_states
        ctx.add(hs, [3, 7, 1, 9, 4])
        _, lq = ctx.draft([None], [4])
    torch.testing.assert_close(lq[0], lq_one, atol=1e-5, rtol=1e-5)


def test_training_forward_over_the_draft_vocabulary(model):
    """Inside reduced_output the forward returns [.., V'] columns: the restricted twin's VOCAB ones."""
    full, reduced = _pair(model, 2)
    g = torch.Generator().manual_seed(0)
    ctx = torch.randn(3, 6, full.config.hidden_size, generator=g)
    block = torch.full((3, 5), V - 2)
    block[:, 0] = torch.tensor([4, 9, 1])
    with torch.no_grad():
        lp_f, lq_f = full.train_forward(ctx, block)
        with reduced.reduced_output():
            lp_r, lq_r = reduced.train_forward(ctx, block)
        _, lq_back = reduced.train_forward(ctx, block)  # outside the scope: the target's vocabulary again
    assert lq_r.shape[-1] == len(VOCAB) and lq_back.shape[-1] == V
    torch.testing.assert_close(lp_r, lp_f)
    torch.testing.assert_close(lq_r, _restricted(lq_f)[..., VOCAB], atol=1e-5, rtol=1e-5)


def test_block_loss_drops_the_positions_it_cannot_draft():
    """Slow twin: the weighted log-likelihood summed over kept positions by loops."""
    g = torch.Generator().manual_seed(1)
    B, K, L, W = 4, 2, 3, 6
    log_q = torch.log_softmax(torch.randn(B, K, L, W, generator=g), -1)
    log_pi = torch.log_softmax(torch.randn(B, K, generator=g), -1)
    labels = torch.randint(0, W, (B, L), generator=g)
    keep = torch.tensor([[1, 0, 1], [1, 1, 1], [0, 0, 1], [0, 1, 0]], dtype=torch.bool)
    w = position_weights(L, 2.0)
    loss, _ = block_loss((log_pi, log_q), labels, w, balance=0.0, keep=keep)
    want = 0.0
    for b in range(B):
        joint = [float(log_pi[b, k]) + sum(float(w[i] * log_q[b, k, i, labels[b, i]]) for i in range(L) if keep[b, i])
                 for k in range(K)]
        want -= float(torch.logsumexp(torch.tensor(joint), 0))
    assert float(loss) == pytest.approx(want / B / float(w.sum()), rel=1e-5)
    loss1, logs = block_loss(log_q[:, 0], labels, w, keep=keep)
    want1 = -sum(float(w[i] * log_q[b, 0, i, labels[b, i]]) for b in range(B) for i in range(L) if keep[b, i])
    assert float(loss1) == pytest.approx(want1 / B / float(w.sum()), rel=1e-5)
    hits = [bool(log_q[b, 0, 0].argmax() == labels[b, 0]) for b in range(B) if keep[b, 0]]
    assert logs["acc1"] == pytest.approx(sum(hits) / len(hits))
    # all kept: the same loss as without keep
    all_kept = torch.ones_like(keep)
    assert float(block_loss(log_q[:, 0], labels, w, keep=all_kept)[0]) == pytest.approx(
        float(block_loss(log_q[:, 0], labels, w)[0]))


ONE_REQUEST = [("ar", None), ("chain", None), ("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode"),
               ("dartree", None)]


def test_every_method_stays_lossless_and_drafts_only_its_vocabulary(model):
    target = TargetModel(model)
    drafters = {
        "dflash": build_drafter(model, 5, seed=3, draft_vocab=VOCAB, **KW),
        "mfd2": build_drafter(model, 5, num_modes=2, seed=4, draft_vocab=VOCAB, **KW),
        "domino": build_drafter(model, 5, seed=5, kind="dartree", draft_vocab=VOCAB, **KW),
    }
    allowed = set(VOCAB)
    for (method, scorer), (i, prompt) in itertools.product(ONE_REQUEST, enumerate(PROMPTS)):
        name = "domino" if method == "dartree" else ("mfd2" if method == "mfd" else "dflash")
        res = speculative_generate(target, drafters[name], prompt, 12, method, budget=16, scorer=scorer,
                                   keep_trees=True)
        assert res.tokens == hf_greedy(model, prompt, 12), (method, scorer, i)
        for s in res.steps:
            if s.tree is not None and s.tree_size:
                assert set(int(t) for t in s.tree.token) <= allowed, (method, s.tree.token)
    for method, name in (("ddtree", "dflash"), ("mfd", "mfd2")):
        out = speculative_generate_batch(target, drafters[name], PROMPTS, 12, method, budget=16)
        assert [r.tokens for r in out.results] == [hf_greedy(model, p, 12) for p in PROMPTS], method


def test_checkpoints_keep_the_vocabulary(model, tmp_path):
    _, reduced = _pair(model, 2)
    reduced.save_pretrained(tmp_path / "d")
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert cfg["draft_vocab_size"] == len(VOCAB)
    back = load_drafter(tmp_path / "d", model).eval()
    assert back.draft_vocab.tolist() == VOCAB
    torch.testing.assert_close(_draft(model, back)[1], _draft(model, reduced)[1])
    # a K = 4 start and a Domino start from a reduced K = 1 checkpoint keep it
    _, one = _pair(model, 1)
    one.save_pretrained(tmp_path / "one")
    assert drafter_from_checkpoint(tmp_path / "one", model, 4).draft_vocab.tolist() == VOCAB
    dom = domino_from_checkpoint(tmp_path / "one", model, rank=4)
    assert dom.draft_vocab.tolist() == VOCAB
    # a plain checkpoint writes no draft_vocab_size
    full, _ = _pair(model, 1)
    full.save_pretrained(tmp_path / "plain")
    assert "draft_vocab_size" not in json.loads((tmp_path / "plain" / "config.json").read_text())


def _rewrite(directory, change):
    state = load_file(str(directory / "model.safetensors"))
    change(state)
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})


def test_inconsistent_vocabularies_are_refused(model, tmp_path):
    _, reduced = _pair(model, 1)
    for name, change, match in [
        ("no_t2d", lambda s: s.pop("t2d"), "d2t without t2d"),
        ("no_d2t", lambda s: s.pop("d2t"), "t2d without d2t"),
        ("flipped", lambda s: s.__setitem__("t2d", ~s["t2d"]), "same ascending draft vocabulary"),
        ("unsorted", lambda s: s.__setitem__("d2t", s["d2t"].flip(0)), "same ascending draft vocabulary"),
    ]:
        d = tmp_path / name
        reduced.save_pretrained(d)
        _rewrite(d, change)
        with pytest.raises(ValueError, match=match):
            load_drafter(d, model)
    d = tmp_path / "size"
    reduced.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["draft_vocab_size"] = 5
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="draft_vocab_size 5"):
        load_drafter(d, model)


@pytest.mark.parametrize("ids,match", [([3], "at least 2"), ([[1, 2]], "1-D"), ([1.0, 2.0], "integer"),
                                       ([-1, 2], r"\[0, 64\)"), ([3, 64], r"\[0, 64\)")])
def test_bad_vocabularies_are_refused(model, ids, match):
    with pytest.raises(ValueError, match=match):
        build_drafter(model, 5, draft_vocab=ids, **KW)


def test_frequent_tokens_against_counting():
    from mfd_theory.runs.pipeline.train_drafter import frequent_tokens

    g = np.random.default_rng(4)
    seqs = [g.integers(0, 20, size=n) for n in (9, 14, 30, 6)]
    plens = [3, 5, 10, 6]
    for n in (1, 4, 7, 25):
        ids, note = frequent_tokens(seqs, plens, n, 20)
        counts = collections.Counter(int(t) for s, p in zip(seqs, plens) for t in s[p:])
        ranked = sorted(range(20), key=lambda t: (-counts.get(t, 0), t))
        assert ids == sorted(ranked[:n])
        total = sum(counts.values())
        assert note["answer_tokens"] == total and note["distinct"] == len(counts)
        assert note["coverage"] == pytest.approx(sum(counts.get(t, 0) for t in ids) / total)
    with pytest.raises(ValueError, match="outside"):
        frequent_tokens([np.array([1, 2, 30])], [1], 3, 20)


def test_train_drafter_over_a_draft_vocabulary(model, tmp_path):
    """A few steps with the reduced loss: the loss falls, the checkpoint holds the vocabulary and
    decodes losslessly."""
    from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

    # a learnable pattern: each row walks a cycle of ids, one in four of them outside VOCAB
    cycle = np.array([0, 3, 6, 1, 9, 12, 15, 2])
    data = np.stack([np.roll(np.tile(cycle, 4), -r)[:24] for r in range(8)])
    d = build_drafter(model, 4, seed=0, draft_vocab=VOCAB, **KW)
    cfg = DrafterTrainConfig(block_size=4, num_layers=1, batch_size=4, blocks_per_seq=2, steps=30, lr=1e-2,
                             warmup=1, ckpt_every=100)
    curve = train_drafter(model, d, data, 6, tmp_path / "run", cfg, progress=False)
    assert np.mean([c["loss"] for c in curve[-3:]]) < np.mean([c["loss"] for c in curve[:3]])
    back = load_drafter(tmp_path / "run" / "drafter", model)
    assert back.draft_vocab.tolist() == VOCAB
    res = speculative_generate(TargetModel(model), back, PROMPTS[0], 10, "ddtree", budget=8)
    assert res.tokens == hf_greedy(model, PROMPTS[0], 10)


def test_init_layers_from_target_copies_its_last_layers(model):
    from mfd_theory.runs.pipeline.train_drafter import init_layers_from_target

    d = build_drafter(model, 5, **{**KW, "num_layers": 2})
    copied = init_layers_from_target(d, model)
    for j, src in enumerate(model.model.layers[-2:]):
        theirs = src.state_dict()
        assert set(d.layers[j].state_dict()) == set(theirs)  # the target's attention layout, every tensor
        for name, mine in d.layers[j].state_dict().items():
            assert torch.equal(mine, theirs[name]), (j, name)
    assert torch.equal(d.norm.weight, model.model.norm.weight) and copied["norm.weight"] == "model.norm.weight"
    assert not torch.equal(d.layers[0].mlp.up_proj.weight, model.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(ValueError, match="only 4"):
        init_layers_from_target(build_drafter(model, 5, **{**KW, "num_layers": 5}), model)
