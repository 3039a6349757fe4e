"""``generate_batch`` against its slow twin (tests/reference_generate.py) and the one-request
decoder: greedy rows equal, sampled rows independent of the batch (the keyed draws equal the
twin's pure-Python SplitMix64 and its token-by-token inverse CDF), the sampled tokens distributed
as the target says, a shared prompt prefix run once, bad arguments refused; ``mfd bench generate``
on a tiny target; and ``distill_prompts`` writing the same data at any batch size."""

from __future__ import annotations

import importlib
import json
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_hybrid, tiny_qwen3  # noqa: E402
from reference_generate import reference_draw, reference_generate, reference_probs, reference_uniform  # noqa: E402

from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.decoding.generate_batch import (MIN_SHARED_PREFIX, admission_order, can_batch,  # noqa: E402
                                                    generate_batch, generation_probs)
from mfd_theory.llm.decoding.sampling import (NUCLEUS_GUESS, Sampler, cut_distribution, draw_tokens,  # noqa: E402
                                              inverse_cdf, keyed_uniform)
from mfd_theory.llm.models.target import TargetModel  # noqa: E402

LENGTHS = (1, 6, 11, 3, 8, 2, 5)  # prompt lengths: every row padded differently
NEW = 10


def _prompts(vocab: int = 64, lengths=LENGTHS, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def _early_eos(rows: list[list[int]]) -> int:
    """A token that, taken as EOS, ends the most rows early but not every row."""
    n = len(rows)
    ends = Counter(t for r in rows for t in set(r[:-1]))
    return max((t for t in ends if ends[t] < n), key=lambda t: (ends[t], -t))


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def greedy_case(request):
    model = tiny_qwen3(attn=request.param)
    prompts = _prompts()
    eos = _early_eos([reference_generate(model, p, NEW) for p in prompts])
    want = [reference_generate(model, p, NEW, eos={eos}) for p in prompts]
    return model, prompts, eos, want


def test_greedy_rows_equal_one_at_a_time(greedy_case):
    model, prompts, eos, want = greedy_case
    lengths = [len(w) for w in want]
    assert min(lengths) < NEW and max(lengths) == NEW, lengths  # EOS ends some rows early, not all
    ar = [speculative_generate(model, None, p, NEW, "ar", eos_token_id=eos, metrics=False).tokens for p in prompts]
    assert ar == want
    for batch in (1, 3, len(prompts)):
        assert generate_batch(model, prompts, NEW, eos_token_id=eos, batch=batch) == want, batch


def test_a_target_model_is_taken_and_its_own_cache_left_alone(greedy_case):
    model, prompts, eos, want = greedy_case
    target = TargetModel(model)
    target.prefill(torch.tensor([1, 2, 3]), hidden=False)
    assert generate_batch(target, prompts, NEW, eos_token_id=eos, batch=4) == want
    # the target still continues [1, 2, 3]
    got = target.verify(5, None, hidden=False).logits[0]
    with torch.no_grad():
        torch.testing.assert_close(got, model(input_ids=torch.tensor([[1, 2, 3, 5]])).logits[0, -1].float())


def test_finished_rows_are_replaced_while_prompts_wait(greedy_case):
    """Every one-token (decode) forward holds ``batch`` rows until no prompt waits, then fewer and
    fewer: a finished row's place goes to the next prompt at once."""
    model, prompts, eos, want = greedy_case
    sizes = []  # (rows, tokens per row, first position): a decode step feeds one token past position 0
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: sizes.append((*kwargs["input_ids"].shape, int(kwargs["position_ids"].min()))),
        with_kwargs=True)
    try:
        assert generate_batch(model, prompts, NEW, eos_token_id=eos, batch=3) == want
    finally:
        hook.remove()
    decode = [b for b, q, first in sizes if q == 1 and b > 0 and first > 0]
    assert decode[0] == 3 and decode == sorted(decode, reverse=True), sizes
    # every new token but each row's last was fed exactly once (first tokens come from prefills)
    assert sum(decode) == sum(len(w) - 1 for w in want)


def test_prompts_are_admitted_longest_first_and_prefilled_in_small_groups(greedy_case, monkeypatch):
    """Free slots go to the longest waiting prompts first, prefilled at most PREFILL_GROUP at a time
    (each group padded to its own longest); the rows are still the one-at-a-time answers, in prompt order."""
    model, prompts, eos, want = greedy_case
    assert admission_order([3, 7, 7, 1, 5]) == [1, 2, 4, 0, 3]  # longest first, ties by place
    assert admission_order([]) == []
    monkeypatch.setattr(importlib.import_module("mfd_theory.llm.decoding.generate_batch"), "PREFILL_GROUP", 2)
    widths = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        assert generate_batch(model, prompts, NEW, eos_token_id=eos, batch=len(prompts)) == want
    finally:
        hook.remove()
    order = sorted(LENGTHS, reverse=True)
    groups = [(len(order[i:i + 2]), order[i]) for i in range(0, len(order), 2)]
    # every prompt is prefilled first (all fit the batch), in groups of two in admission order, each
    # as wide as its longest; every later forward is a one-token decode step
    assert widths[:len(groups)] == groups, widths
    assert all(q == 1 for _, q in widths[len(groups):]), widths


def test_a_row_can_end_at_its_first_token():
    model = tiny_qwen3()
    prompts = _prompts()
    first = reference_generate(model, prompts[0], 1)[0]
    want = [reference_generate(model, p, NEW, eos={first}) for p in prompts]
    assert want[0] == [first]
    assert generate_batch(model, prompts, NEW, eos_token_id=first, batch=3) == want
    assert generate_batch(model, prompts, 1, batch=3) == [reference_generate(model, p, 1) for p in prompts]


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 20, 0.8), (1.3, 5, 1.0)])
def test_sampled_rows_do_not_depend_on_the_batch(temperature, top_k, top_p):
    model = tiny_qwen3(init_std=0.05)  # flat conditionals: the draws spread over many tokens
    prompts = _prompts()
    seeds = [11 * i + 5 for i in range(len(prompts))]
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    want = [reference_generate(model, p, NEW, seed=s, **kw) for p, s in zip(prompts, seeds)]
    assert len({tuple(w) for w in want}) == len(want)
    for batch in (1, 3):
        assert generate_batch(model, prompts, NEW, seeds=seeds, batch=batch, **kw) == want, batch
    # the other prompts' order does not matter either
    back = generate_batch(model, prompts[::-1], NEW, seeds=seeds[::-1], batch=3, **kw)
    assert back[::-1] == want
    if top_k == 0:  # the one-request decoder's sampler draws the same tokens
        ar = [speculative_generate(model, None, p, NEW, "ar", temperature=temperature, top_p=top_p, seed=s,
                                   metrics=False).tokens for p, s in zip(prompts, seeds)]
        assert ar == want


def test_generation_probs_is_the_reference_distribution():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(3)) * 3
    logits[0, :4] = logits[0, 4]  # ties at the k-th value are kept
    for temperature, top_k, top_p in ((1.0, 0, 1.0), (0.7, 20, 0.8), (0.5, 5, 0.3), (2.0, 1, 1.0), (1.0, 80, 0.95)):
        got = generation_probs(logits, temperature, top_k, top_p)
        want = torch.stack([reference_probs(row, temperature, top_k, top_p) for row in logits])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_generation_probs_is_the_reference_distribution_on_a_wide_vocabulary():
    """Past ``NUCLEUS_GUESS`` tokens: a nucleus found among the likeliest ones (peaked rows) and one
    wider than them (flat rows: the whole vocabulary sorted), with ties at the k-th beyond k."""
    vocab = 4 * NUCLEUS_GUESS
    g = torch.Generator().manual_seed(5)
    logits = torch.cat([torch.randn(3, vocab, generator=g) * 8, torch.randn(3, vocab, generator=g) * 0.05])
    logits[0, 10:40] = logits[0, 10]  # 30 tokens tied: a k-th among them keeps them all
    above = int((logits[0] > logits[0, 10]).sum())
    k_tied = above + 5  # the k-th is one of the 30 tied tokens
    for temperature, top_k, top_p in ((1.0, 0, 0.9), (0.7, 0, 0.5), (1.0, k_tied, 1.0), (1.0, 300, 0.95),
                                      (1.3, 0, 1.0)):
        got = generation_probs(logits, temperature, top_k, top_p)
        want = torch.stack([reference_probs(row, temperature, top_k, top_p) for row in logits])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    flat = cut_distribution(logits[3:], 1.0, 0, 0.9)[1]
    assert flat.shape[1] == vocab and int((flat[0] > 0).sum()) > NUCLEUS_GUESS  # the wide nucleus, whole
    ids, probs = cut_distribution(logits[:1], 1.0, k_tied, 1.0)
    assert int((probs > 0).sum()) == above + 30 and probs.shape[1] >= above + 30


def test_keyed_draws_are_the_twins_splitmix64_and_inverse_cdf():
    seeds = [0, 1, 5, 2 ** 63, 2 ** 64 - 1, 123456789012345]
    index = [0, 7, 1, 2 ** 40, 3, 99]
    got = keyed_uniform(seeds, index)
    assert got.tolist() == [reference_uniform(s, n) for s, n in zip(seeds, index)]  # bit for bit
    many = keyed_uniform(np.repeat(np.arange(100), 100), np.tile(np.arange(100), 100))  # 10,000 (seed, index) pairs
    from scipy.stats import kstest

    assert ((many >= 0) & (many < 1)).all() and kstest(many, "uniform").pvalue > 1e-3
    assert len(set(many.tolist())) == many.size
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(2)) * 2
    for top_k, top_p in ((0, 1.0), (6, 1.0), (0, 0.7), (10, 0.6)):
        ids, probs = cut_distribution(logits, 0.9, top_k, top_p)
        u = keyed_uniform([3] * 5, range(5))
        want = [reference_draw(reference_probs(row, 0.9, top_k, top_p), float(x)) for row, x in zip(logits, u)]
        assert inverse_cdf(ids, probs, u).tolist() == want
        assert draw_tokens(logits, 0.9, [3] * 5, range(5), top_k, top_p) == want
        # one request's sampler: its n-th draw is draw n of its seed
        sampler = Sampler(0.9, top_p, 3, top_k=top_k)
        assert [sampler.draw(row) for row in logits] == want


def test_a_prefix_every_prompt_shares_is_run_once():
    """Prompts that share their first tokens: the prefix is one forward of its own (one row), every
    prefill after it feeds only the rest, and the rows are the one-at-a-time rows, greedy and
    sampled, at every batch size."""
    model = tiny_qwen3(init_std=0.05)
    head = _prompts(lengths=(MIN_SHARED_PREFIX + 3,), seed=7)[0]
    prompts = [head + tail for tail in _prompts(lengths=(1, 4, 2, 6, 3), seed=8)] + [head[:-1] + [head[-1] ^ 1]]
    shared = len(head) - 1  # the last prompt differs at the prefix's last token
    want = [reference_generate(model, p, NEW) for p in prompts]
    seeds = [7 * i + 1 for i in range(len(prompts))]
    kw = dict(temperature=1.0, top_k=8, top_p=0.9)
    want_sampled = [reference_generate(model, p, NEW, seed=s, **kw) for p, s in zip(prompts, seeds)]
    shapes = []
    hook = model.register_forward_pre_hook(
        lambda mod, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        for batch in (1, 3, len(prompts)):
            shapes.clear()
            assert generate_batch(model, prompts, NEW, batch=batch, eos_token_id=[]) == want, batch
            assert shapes[0] == (1, shared) and (1, shared) not in shapes[1:], shapes
            prefills = [q for b, q in shapes[1:] if q > 1]
            assert max(prefills) <= max(len(p) for p in prompts) - shared
            assert generate_batch(model, prompts, NEW, batch=batch, seeds=seeds, eos_token_id=[], **kw) == want_sampled
    finally:
        hook.remove()


def test_bench_generate_runs_both_paths_on_a_tiny_target(tmp_path, capsys):
    from mfd_theory.cli import main

    assert main(["bench", "generate", "--target", "tiny", "--prompts", "5", "--max-new-tokens", "4", "--batch", "2",
                 "--temperature", "0", "--threads", "1", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "bench_generate_tiny.json").read_text())["data"]
    assert data["rows_that_differ"] == [] and "greedy rows identical: yes" in out  # the old path's tokens too
    assert [r["tokens"] for r in data["runs"]["before"]] == [r["tokens"] for r in data["runs"]["after"]] == [20]
    assert data["ratio"] > 0 and "ratio (fastest after / fastest before)" in out
    assert data["host"]["cpu_flags"] is not None and "host: " in out


def _continuation_probs(model, prompt, vocab: int, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Exact probability of every three-token continuation of ``prompt`` under the cut distribution."""
    with torch.no_grad():
        seqs = torch.tensor([prompt + [a, b] for a in range(vocab) for b in range(vocab)])
        logits = model(input_ids=seqs).logits.float()
    n = len(prompt)

    def probs(row):
        return reference_probs(row, temperature, top_k, top_p).double().numpy()

    out = np.zeros((vocab,) * 3)
    p1 = probs(logits[0, n - 1])
    for a in range(vocab):
        p2 = probs(logits[a * vocab, n])
        for b in range(vocab):
            out[a, b] = p1[a] * p2[b] * probs(logits[a * vocab + b, n + 1])
    return out.reshape(-1)


def _pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value of ``counts`` against ``probs``: 0 if a cell of probability 0 was seen,
    else over the other cells, those under 5 expected pooled into one."""
    from scipy.stats import chisquare

    if counts[probs == 0].sum():
        return 0.0
    obs, exp = counts[probs > 0], probs[probs > 0] * counts.sum()
    small = exp < 5
    if small.any():
        obs, exp = np.append(obs[~small], obs[small].sum()), np.append(exp[~small], exp[small].sum())
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def test_sampled_tokens_follow_the_targets_cut_distribution():
    """4,000 three-token continuations of one prompt (seeds 0..3999, 64 rows at a time) against
    the exact distribution over all 125 continuations; the same counts against the distributions
    without one of the cuts, or at another temperature, are refused: the check sees each."""
    vocab, n, temperature, top_k, top_p = 5, 4_000, 0.8, 4, 0.7
    model = tiny_qwen3(vocab_size=vocab, init_std=0.1)
    prompt = [1, 2, 3]
    rows = generate_batch(model, [prompt] * n, 3, temperature=temperature, top_k=top_k, top_p=top_p,
                          seeds=list(range(n)), batch=64)
    counts = np.bincount([(a * vocab + b) * vocab + c for a, b, c in rows], minlength=vocab ** 3).astype(float)
    cut = _continuation_probs(model, prompt, vocab, temperature, top_k, top_p)
    assert counts[cut == 0].sum() == 0  # nothing outside the cut is ever drawn
    assert _pvalue(counts, cut) > 1e-3
    for k, p in ((0, 1.0), (top_k, 1.0), (0, top_p)):  # each cut alone removes real mass, and the check notices
        other = _continuation_probs(model, prompt, vocab, temperature, k, p)
        assert np.abs(other - cut).sum() > 0.1 and _pvalue(counts, other) < 1e-6, (k, p)
    # the temperature matters too
    assert _pvalue(counts, _continuation_probs(model, prompt, vocab, 1.0, top_k, top_p)) < 1e-6


def test_a_hybrid_target_runs_one_row_at_a_time():
    model = tiny_hybrid()
    prompts = _prompts(lengths=(3, 5, 1))
    assert not can_batch(model) and can_batch(tiny_qwen3())
    want = [speculative_generate(model, None, p, 6, "ar", metrics=False).tokens for p in prompts]
    assert generate_batch(model, prompts, 6, batch=1) == want
    with pytest.raises(ValueError, match=r"^batch: must be 1 .*Gated DeltaNet"):
        generate_batch(model, prompts, 6, batch=2)


BAD = [  # (arguments changed from two good prompts and 8 new tokens, the name the error starts with)
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=-1), "top_k"),
    (dict(top_k=1.5), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(batch=0), "batch"),
    (dict(batch=True), "batch"),
    (dict(temperature=1.0), "seeds"),  # sampling without seeds
    (dict(temperature=1.0, seeds=[1]), "seeds"),  # one seed for two prompts
    (dict(temperature=1.0, seeds="12"), "seeds"),
    (dict(seeds=[-1, 0]), r"seeds\[0\]"),
    (dict(seeds=[0, 2 ** 64]), r"seeds\[1\]"),
    (dict(prompts=[]), "prompts"),
    (dict(prompts=[[1], []]), r"prompts\[1\]"),
    (dict(prompts=[[1], [64]]), r"prompts\[1\]"),
    (dict(prompts=[[1.5]]), r"prompts\[0\]"),
    (dict(prompts=[[1] * 60]), r"prompts\[0\]: max_new_tokens"),  # past the context of 64
    (dict(eos_token_id=[64]), "eos_token_id"),
    (dict(on_finish="x"), "on_finish"),
]


@pytest.mark.parametrize("kwargs,name", BAD, ids=[f"{i}-{n.split(':')[0]}" for i, (_, n) in enumerate(BAD)])
def test_bad_arguments_are_refused_naming_them(kwargs, name):
    model = tiny_qwen3(max_position_embeddings=64)
    args = {"prompts": [[1, 2], [3]], "max_new_tokens": 8, **kwargs}
    with pytest.raises(ValueError, match=f"^{name}: "):
        generate_batch(model, args.pop("prompts"), args.pop("max_new_tokens"), **args)
    with pytest.raises(ValueError, match="^hf_model: "):
        generate_batch(object(), [[1]], 4)


# ---------------------------------------------------------------------------------- distill
@pytest.fixture(scope="module")
def distill_case(tmp_path_factory):
    from pipeline_helpers import save_tiny_target, write_prompts

    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.prompts import read_prompt_files

    root = tmp_path_factory.mktemp("distill_batch")
    model, tok = load_local_target(save_tiny_target(root / "target"))
    prompts = read_prompt_files(write_prompts(root / "prompts"))
    assert any(p.turns for p in prompts)  # a multi-turn prompt: its second turn holds the first answer
    return root, model, tok, prompts


def _distill(case, name, **kw):
    from mfd_theory.llm.training.distill import distill_prompts, load_distill_data

    root, model, tok, prompts = case
    out = root / name
    args = dict(max_new_tokens=12, temperature=1.0, seed=3, enable_thinking=False, config={}, shard_size=3,
                progress=False)
    distill_prompts(model, tok, prompts, out, **{**args, **kw})
    seqs, plens, _ = load_distill_data(out)
    return out, [s.tolist() for s in seqs], plens.tolist()


def test_distill_data_do_not_depend_on_the_batch_and_are_the_one_at_a_time_answers(distill_case):
    from mfd_theory.llm.training.prompts import run_conversation

    _, model, tok, prompts = distill_case
    want_seqs, want_plens = [], []
    for g, p in enumerate(prompts):
        def answer(ids, turn, g=g):
            return speculative_generate(model, None, ids, 12, "ar", temperature=1.0, seed=3 * 1_000_003 + 1000 * g + turn,
                                        metrics=False).tokens
        for ids, new in run_conversation(p, tok, False, answer):
            want_seqs.append(ids + new)
            want_plens.append(len(ids))
    outs = []
    for batch in (1, 2, 16):
        out, seqs, plens = _distill(distill_case, f"b{batch}", batch=batch)
        assert (seqs, plens) == (want_seqs, want_plens), batch
        outs.append(out)
        assert "batch" not in json.loads((out / "train_config.json").read_text())
    for shard in sorted(outs[0].glob("shard-*.safetensors")):
        assert all((o / shard.name).read_bytes() == shard.read_bytes() for o in outs[1:]), shard.name


def test_distill_top_k_and_top_p_cut_the_draws_and_are_recorded(distill_case):
    _, greedy, greedy_plens = _distill(distill_case, "greedy", temperature=0.0)
    out, top1, plens = _distill(distill_case, "top1", top_k=1)  # T = 1, but only the likeliest token
    assert (top1, plens) == (greedy, greedy_plens)
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["top_k"] == 1 and "top_p" not in saved
    out, tiny_p, _ = _distill(distill_case, "p", top_p=1e-6)  # a nucleus of the top token alone
    assert tiny_p == greedy and json.loads((out / "train_config.json").read_text())["top_p"] == 1e-6
    _, plain, _ = _distill(distill_case, "plain")
    assert plain != greedy
    saved = json.loads((distill_case[0] / "plain" / "train_config.json").read_text())
    assert "top_k" not in saved and "top_p" not in saved  # off: the record of a directory made before them


def test_distill_refuses_bad_sampling_settings(distill_case):
    for kw, name in ((dict(batch=0), "batch"), (dict(top_k=-2), "top_k"), (dict(top_p=2.0), "top_p")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            _distill(distill_case, "bad", **kw)
    assert not (distill_case[0] / "bad").exists()
