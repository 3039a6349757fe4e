"""The report block of C3 over decoding rounds (``mfd tau --chimera-budget N``, docs/real-targets.md):
for every drafter and tree cell of a tau run, the dead, splice and chimera shares of its N-node
trees at the rounds the replayed decodes visited, beside the oracle tree's own dead share (the
floor), and what the search cost.

:func:`real_c3` is a block (``block(results) -> str``, :mod:`.inputs`).
"""

from __future__ import annotations

from pathlib import Path

from mfd_theory.report._text import span
from mfd_theory.report.inputs import Results

__all__ = ["cell_name", "real_c3"]


def cell_name(cell: dict) -> str:
    """How the table names a chimera cell of a drafter: ``chain``, ``DDTree``, ``mixture``,
    ``best-mode``, ``DARTree``."""
    method, scorer = cell["method"], cell.get("scorer")
    if method == "mfd":
        return "best-mode" if scorer == "best_mode" else "mixture"
    return {"chain": "chain", "ddtree": "DDTree", "dartree": "DARTree"}.get(method, method)


def _pct(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    pct = 100 * v
    # a share under a tenth of a percent keeps two decimals so that it does not print as 0.0%
    return f"{pct:.2f}%" if 0 < pct < 0.1 else f"{pct:.{digits}f}%"


def _pair(vals) -> str:
    return "-" if vals is None else " / ".join(_pct(v) for v in vals)


def _drafter_name(dr: dict) -> str:
    name = Path(str(dr["drafter"])).name
    return f"{name} (K = {dr.get('modes', 1)})"


def real_c3(results: Results) -> str:
    """The C3 table of a tau run that measured chimeras over the rounds: one row per drafter, prompt
    set and cell (rounds, mean nodes, covered mass, dead share at each eps, chimera share, the
    oracle's dead share), then the run (prompts, stride, budget, temperature of P(s), host, commit)
    and its cost. Raises ValueError when the run measured no chimeras."""
    res = results.main
    d, cfg, prov = res.data, res.config, res.provenance or {}
    # the search of a prompt set is one for every drafter (one target cache moved along each answer):
    # each drafter's record holds the whole run's cost, so it is counted once per set
    rows, costs, eps, sets = [], {}, None, []
    for dr in d["drafters"]:
        for set_name, s in dr["sets"].items():
            ch = s.get("chimeras")
            if not ch:
                continue
            sets.append(set_name)
            costs.setdefault(set_name, ch)
            for c in ch["cells"]:
                eps = eps or c["eps"]
                rows.append(f"| {_drafter_name(dr)} | {set_name} | {cell_name(c)} | {c['rounds']} | {c['nodes']:.1f} | "
                            f"{c['covered']:.2f} | {_pair(c['dead_share'])} | {_pair(c.get('chimera_share'))} | "
                            f"{_pair(c.get('oracle_dead_share'))} | {c.get('oracle_covered') or 0:.1f} |")
    if not rows:
        raise ValueError("real-c3: the tau run measured no chimeras (run mfd tau with --chimera-budget)")
    ch0 = next(iter(costs.values()))
    eps_txt = " / ".join(f"{e:g}" for e in eps)
    num = prov.get("numerics") or {}
    host = f"{num.get('cpu') or prov.get('host') or '?'} ({num.get('isa_level') or '?'})"
    dtype = d.get("dtype") or cfg.get("dtype")
    sets_d = d.get("sets") or {}
    prompts = ", ".join(f"{n} ({sets_d.get(n, {}).get('prompts', '?')} prompts)" for n in dict.fromkeys(sets))
    lines = [
        f"Drafter trees of N = {ch0['budget']} nodes at every {ch0['stride']}th round of the replayed T = 0 decodes "
        f"of the first {ch0['answers']} answers of {prompts}; P(s) under `{d.get('target')}` at T = "
        f"{ch0['p_temperature']:g}; dead at eps = {eps_txt}. Measured {str(prov.get('created', '?'))[:10]} at "
        f"`{str(prov.get('git_sha', '?'))[:7]}` on {host}, {dtype}, {d.get('threads', cfg.get('threads'))} threads.",
        "",
        f"| drafter | set | tree | rounds | nodes | mass covered | dead ({eps_txt}) | chimeras ({eps_txt}) | "
        f"oracle's dead ({eps_txt}) | oracle's mass |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    runs = list(costs.values())
    roots = sum(c["cost"]["roots"] for c in runs)
    secs = sum(c["seconds"] for c in runs)
    fw, ofw = (sum(c["cost"][k] for c in runs) for k in ("forwards", "oracle_forwards"))
    rw, orw = (sum(c["cost"][k] for c in runs) for k in ("rows", "oracle_rows"))
    per_root = [c["seconds"] / c["cost"]["roots"] for c in runs if c["cost"]["roots"]]
    lines.append(
        f"Shares per round, averaged over the rounds (per answer in the record). Cost, one search for every "
        f"drafter: {roots} roots in "
        f"{secs / 60:.1f} min ({span(per_root, '{:.0f}')} s a root); the oracle searches ran {ofw:,} of the "
        f"{fw:,} target forwards and {orw:,} of the {rw:,} rows"
        + (f" ({sum(c.get('resumed', 0) for c in runs)} answers read back from the store of a run stopped part "
           "way, their time as measured then)" if any(c.get("resumed") for c in runs) else "") + ".")
    return "\n".join(lines)
