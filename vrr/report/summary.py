"""The README's result tables, built from the saved results (stats.json and calibration.json of each run).

`scripts/readme_tables.py` writes them between the README's ``<!-- results:begin -->`` and
``<!-- results:end -->`` markers, and `tests/test_readme_summary.py` checks that the committed README quotes
the committed results, so the README cannot drift from what `make reproduce` wrote.
"""
from __future__ import annotations

from pathlib import Path

from ..settings import load_config
from .paper import Results

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
HEADLINE_POLICIES = ["No repair", "Fixed K=5", "VRR-Stop", "TPM reference", "VRR-Guard", "Algorithm 1"]
PAIRED = ["VRR-Stop vs Fixed K=5", "VRR-Stop vs TPM reference", "VRR-Stop vs No repair", "VRR-Guard vs No repair"]


def _is_control(run: str) -> bool:
    """Resampling controls feed only the loop-dynamics figure, as in the Makefile's PAPER_SETTINGS."""
    return load_config(run)["perturbation"]["regime"] == "independent_resampling"


def _interval(row: dict) -> str:
    return f"{row['V']:.3f} [{row['V_low']:.2f},{row['V_high']:.2f}]".replace("[0.", "[.").replace(",0.", ",.")


def _pvalue(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}".replace("e-0", "e-")


def _paired(row: dict) -> str:
    pp = [100 * row[k] for k in ("dV", "dV_low", "dV_high")]
    return f"{pp[0]:+.1f} [{pp[1]:+.1f}, {pp[2]:+.1f}], p={_pvalue(row['mcnemar_p'])}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def readme_summary(results_root: str | Path) -> str:
    """Markdown tables of every run with saved statistics: the simulated settings (J and V of the headline
    policies), and for the real windows the loop dynamics (labeled rho0, rho1, J, first-repair alpha, beta,
    b* of Eq. 7 and validity by round), V with 95 % bootstrap CIs, and the paired differences with exact
    McNemar p (App. G)."""
    root = Path(results_root)
    runs = sorted(p.parent.name for p in root.glob("*/stats.json"))
    res = Results(root, [r for r in runs if not _is_control(r)])
    kind = {r: res.calibration[r]["loop_dynamics"].get("kind", "simulated") for r in res.runs}
    sim = [r for r in res.runs if kind[r] != "real"]
    real = [r for r in res.runs if kind[r] == "real"]

    def v(run, policy):
        row = res.policy_rows(run).get(policy)
        return "—" if row is None else f"{row['V']:.3f}"

    out = ["**Simulated settings** (true validity $V$ of the committed plan; labeled $J$):", ""]
    out += _table(["setting", "J", "no repair", "Fixed K=5", "VRR-Stop", "TPM", "VRR-Guard", "hindsight"],
                  [[res.label(r), f"{res.calibration[r]['loop_dynamics']['J']:.2f}",
                    *(v(r, p) for p in ["No repair", "Fixed K=5", "VRR-Stop", "TPM reference", "VRR-Guard",
                                        "Hindsight best"])] for r in sim])
    out += ["", "**Real windows: loop dynamics** (labeled estimates on the window; $\\alpha,\\beta$ from the first "
            "repair; `results/tables/loop_dynamics.csv`):", ""]
    rows = []
    for r in real:
        ld = res.calibration[r]["loop_dynamics"]
        rows.append([res.label(r), str(ld["N"]), *(f"{ld[k]:.3f}" for k in ("rho0", "rho1", "J", "alpha", "beta", "b_star")),
                     " ".join(f"{q:.2f}".lstrip("0") for q in ld["Q"])])
    out += _table(["setting", "N", "ρ0", "ρ1", "J", "α", "β", "b*", "validity by round k=0.."], rows)
    out += ["", "**Real windows: stopping** ($V$ [95 % bootstrap CI]; VRR-Stop's mean committed round ⟨K⟩ and "
            "verifier calls per instance; `results/tables/stopping_<setting>.csv`):", ""]
    rows = []
    for r in real:
        by = res.policy_rows(r)
        stop = by["VRR-Stop"]
        rows.append([res.label(r), *(_interval(by[p]) if p in by else "—" for p in HEADLINE_POLICIES),
                     f"{stop['mean_K']:.2f}", f"{stop['verifier_calls']:.1f}", v(r, "Hindsight best")])
    out += _table(["setting", "no repair", "Fixed K=5", "VRR-Stop", "TPM", "VRR-Guard", "Algorithm 1",
                   "VRR-Stop ⟨K⟩", "calls", "hindsight"], rows)
    out += ["", "**Real windows: paired differences** (pp, 95 % paired bootstrap CI, exact McNemar p; "
            "`results/tables/paired_stats.csv`):", ""]
    rows = []
    for r in real:
        by = {row["comparison"]: row for row in res.stats[r]["paired"]}
        rows.append([res.label(r), *(_paired(by[c]) if c in by else "—" for c in PAIRED)])
    out += _table(["setting", "VRR-Stop − Fixed K=5", "VRR-Stop − TPM", "VRR-Stop − no repair",
                   "VRR-Guard − no repair"], rows)
    return "\n".join(out) + "\n"


def splice(text: str, block: str, path: str = "README.md") -> str:
    """``text`` with the part between the markers replaced by ``block``; an error names the file if a marker
    is missing."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{path}: needs one {BEGIN} followed by one {END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block}{END}{tail}"
