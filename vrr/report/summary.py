"""The README's result tables, built from the committed tables of 06_figures (``results/tables/*.csv``).

`scripts/readme_tables.py` writes them between the README's ``<!-- results:begin -->`` and
``<!-- results:end -->`` markers, and `tests/test_readme_summary.py` checks that the committed README quotes
the committed tables, so the README cannot drift from what `make reproduce` wrote.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..settings import load_config
from .render import rate_text, read_csv

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
HEADLINE_POLICIES = ["No repair", "Fixed K=5", "VRR-Stop", "VRR-Stop (label-free EM)", "TPM reference", "VRR-Guard",
                     "Algorithm 1", "Algorithm 1 (paper)"]
_NUMBER = re.compile(r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?")


def _numbers(text: str) -> list[float]:
    return [float(x) for x in _NUMBER.findall(text)]


def _estimate(text: str) -> str:
    """A labeled estimate from the CSV, to three decimals ("n/a" where undefined)."""
    return rate_text(float(text), 3)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def readme_summary(results_root: str | Path) -> str:
    """Markdown tables of every setting with a stopping table: the simulated settings (labeled J and V of the
    headline policies), and for the real windows the loop dynamics (labeled rho0, rho1, J, first-repair alpha,
    beta, b* of Eq. 7 and the shape of validity by round) and V with 95 % bootstrap CIs (the paired differences
    with exact McNemar p are results/tables/paired_stats.csv)."""
    tables = Path(results_root) / "tables"
    dynamics = {r["setting"]: r for r in read_csv(tables / "loop_dynamics.csv")}
    runs = []
    for path in sorted(tables.glob("stopping_*.csv")):
        name = path.stem.removeprefix("stopping_")
        cfg = load_config(name)
        runs.append((name, cfg["label"], name.startswith("sim_"), {r["policy"]: r for r in read_csv(path)}))
    order = [label for label in dynamics]
    runs.sort(key=lambda run: order.index(run[1]) if run[1] in order else len(order))

    def v(rows, policy):
        return f"{_numbers(rows[policy]['V [95% CI]'])[0]:.3f}" if policy in rows else "—"

    out = ["**Simulated settings** (true validity $V$ of the committed plan; labeled $J$):", ""]
    out += _table(["setting", "J", "no repair", "Fixed K=5", "VRR-Stop", "TPM", "VRR-Guard", "Algorithm 1",
                   "Alg. 1 (paper)", "hindsight"],
                  [[label, f"{float(dynamics[label]['J']):.2f}",
                    *(v(rows, p) for p in ["No repair", "Fixed K=5", "VRR-Stop", "TPM reference", "VRR-Guard",
                                           "Algorithm 1", "Algorithm 1 (paper)", "Hindsight best"])]
                   for _, label, sim, rows in runs if sim])
    real = [(name, label, rows) for name, label, sim, rows in runs if not sim]
    out += ["", "**Real windows: loop dynamics** (labeled estimates on the window's initial plans; $\\alpha,\\beta$ from "
            "the first repair; n/a: no plan of that class to estimate it on; shape: a change counts where exact McNemar tests on "
            "the paired rounds resolve it at 0.05, `vrr.stats.trajectory_shape`; `results/tables/loop_dynamics.csv`):", ""]
    out += _table(["setting", "ρ0", "ρ1", "J", "α", "β", "b*", "validity by round (shape)"],
                  [[label, *(_estimate(dynamics[label][k]) for k in ("rho0", "rho1", "J", "alpha", "beta", "b_star")),
                    dynamics[label]["shape"]] for _, label, _ in real])
    out += ["", "**Real windows: stopping** ($V$ [95 % bootstrap CI]; VRR-Stop's mean committed round ⟨K⟩ and "
            "verifier calls per instance; `results/tables/stopping_<setting>.csv`):", ""]
    rows = []
    for _, label, by in real:
        stop = by["VRR-Stop"]
        check = by.get("Calibration check", {}).get("V [95% CI]", "—").split(":")[0]
        rows.append([label, *(by[p]["V [95% CI]"] if p in by else "—" for p in HEADLINE_POLICIES),
                     stop["<K>"], stop["verifier calls"], v(by, "Hindsight best"), check])
    out += _table(["setting", "no repair", "Fixed K=5", "VRR-Stop", "VRR-Stop (label-free EM)", "TPM", "VRR-Guard",
                   "Algorithm 1", "Alg. 1 (paper)", "VRR-Stop ⟨K⟩", "calls", "hindsight", "calibration check"], rows)
    return "\n".join(out) + "\n"


def splice(text: str, block: str, path: str = "README.md", begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the part between the markers ``begin`` and ``end`` replaced by ``block``; an error names the
    file if a marker is missing."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: needs one {begin} followed by one {end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}{end}{tail}"
