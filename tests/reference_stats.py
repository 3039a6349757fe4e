"""Slow, obviously correct twins of mfd_theory.stats: each floor and each power written out with
loops or simulated through ``compare`` itself, so that it can be checked by reading it."""

from __future__ import annotations

import math

import numpy as np

from mfd_theory.stats import compare


def nested_var_by_loops(d) -> float:
    """The prompt-by-run residual variance of log ratios d [R, P], one cell at a time."""
    d = [list(map(float, row)) for row in np.asarray(d)]
    R, P = len(d), len(d[0])
    grand = sum(sum(row) for row in d) / (R * P)
    run_mean = [sum(row) / P for row in d]
    prompt_mean = [sum(d[r][p] for r in range(R)) / R for p in range(P)]
    total = 0.0
    for r in range(R):
        for p in range(P):
            total += (d[r][p] - run_mean[r] - prompt_mean[p] + grand) ** 2
    return total / ((R - 1) * (P - 1))


def decide_power_by_simulation(mean: float, sd: float, runs: int, *, margin: float, level: float = 0.95,
                               family: int = 1, sims: int = 4000, seed: int = 0) -> float:
    """The share of simulated replications whose ``compare`` verdict is not "inconclusive": each
    replication draws ``runs`` run means ~ N(mean, sd) (log scale) and hands compare() runs of two
    identical prompts each (so that no floor but the spread's is in force)."""
    g = np.random.default_rng(seed)
    decided = 0
    for _ in range(sims):
        x = g.normal(mean, sd, size=runs)
        a = np.exp(x)[:, None] * np.ones((runs, 2))
        if compare(a, np.ones((runs, 2)), margin=margin, level=level, family=family).verdict != "inconclusive":
            decided += 1
    return decided / sims


def quantised_tau(true_tau, tokens: int) -> np.ndarray:
    """What a decode of ``tokens`` tokens measures for a true tau: tokens over a whole number of
    rounds (the nearest), elementwise."""
    out = []
    for t in np.asarray(true_tau, dtype=float).ravel():
        rounds = max(1, int(math.floor(tokens / t + 0.5)))
        out.append(tokens / rounds)
    return np.array(out).reshape(np.shape(true_tau))
