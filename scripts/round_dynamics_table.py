#!/usr/bin/env python
"""VRR-Stop with round-dependent alpha_t, beta_t (VRR-Stop-t) against VRR-Stop, TPM and hindsight on every
committed setting (the simulated settings and the committed real windows).

Per setting, with the calibration 03_calibrate saved (5-fold cross-fit, the same folds for every column):

* VRR-Stop: the paper's rule, stationary alpha-hat, beta-hat from the first-round pairs;
* VRR-Stop-t: the same rule with alpha_t, beta_t from every round's labeled pairs, shrunk toward the
  first-round estimate by empirical Bayes (``vrr.calibration.round_dynamics``), no hindsight;
* TPM: VRR-Stop with the true stationary parameters (simulated) or the cross-fit labeled estimates (real);
  TPM-t: VRR-Stop-t with the true round-dependent schedule (simulated; the stationary truth where it has
  none) or with the labeled cross-fit rho0, rho1, pi and every round's labeled alpha_t, beta_t (real);
* Hindsight: the earliest truly valid round (not deployable);
* gap closed: (VRR-Stop-t - VRR-Stop) / (Hindsight - VRR-Stop); d: VRR-Stop-t - VRR-Stop in pp.

    .venv/bin/python scripts/round_dynamics_table.py            # prints and writes docs/round_dynamics.md
    .venv/bin/python scripts/round_dynamics_table.py --no-write
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrr.common.atomic import atomic_write  # noqa: E402
from vrr.common.paths import REPO_ROOT  # noqa: E402
from vrr.data.contract import load_setting  # noqa: E402
from vrr.policies.replay import TPM, load_calibration, replay  # noqa: E402

COMMAND = ".venv/bin/python scripts/round_dynamics_table.py"


def setting_row(cal: Path) -> dict:
    cf, config = load_calibration(cal)
    setting = load_setting(REPO_ROOT / json.loads(cal.read_text())["arrays_path"])
    res = replay(setting, config, policies=("VRR-Stop", "VRR-Stop-t", TPM, "TPM-t", "Hindsight best"), calibration=cf)
    v = {k: float(x.mean()) for k, x in res.validity.items()}
    row = {"setting": setting.name, "N": setting.S.shape[0], "VRR-Stop": v["VRR-Stop"], "VRR-Stop-t": v["VRR-Stop-t"],
           "TPM": v[TPM], "Hindsight": v["Hindsight best"], "TPM-t": v["TPM-t"],
           "K Stop": float(res.outcomes["VRR-Stop"].committed.mean()),
           "K Stop-t": float(res.outcomes["VRR-Stop-t"].committed.mean()),
           "kappa": [(f["kappa_alpha"], f["kappa_beta"]) for f in res.extras["round_rates_per_fold"]]}
    gap = row["Hindsight"] - row["VRR-Stop"]
    row["gap closed"] = (row["VRR-Stop-t"] - row["VRR-Stop"]) / gap if gap > 0 else float("nan")
    return row


def render(rows: list[dict]) -> str:
    head = ["setting", "N", "VRR-Stop", "VRR-Stop-t", "d (pp)", "TPM", "TPM-t", "Hindsight", "gap closed",
            "<K> Stop / Stop-t", "kappa (alpha, beta) fold 0"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda x: "--" if x != x else f"{x:.3f}"  # noqa: E731
    for r in rows:
        ka, kb = r["kappa"][0]
        out.append("| " + " | ".join([
            r["setting"], str(r["N"]), fmt(r["VRR-Stop"]), fmt(r["VRR-Stop-t"]),
            f"{100 * (r['VRR-Stop-t'] - r['VRR-Stop']):+.1f}", fmt(r["TPM"]), fmt(r["TPM-t"]), fmt(r["Hindsight"]),
            "--" if r["gap closed"] != r["gap closed"] else f"{100 * r['gap closed']:.0f}%",
            f"{r['K Stop']:.2f} / {r['K Stop-t']:.2f}", f"{ka:.3g}, {kb:.3g}"]) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--out", default=str(REPO_ROOT / "docs" / "round_dynamics.md"))
    args = ap.parse_args(argv)
    rows = [setting_row(cal) for cal in sorted((REPO_ROOT / "results").glob("*/calibration.json"))]
    table = render(rows)
    print(table)
    worst = min((r["VRR-Stop-t"] - r["VRR-Stop"], r["setting"]) for r in rows)
    print(f"\nlargest loss of VRR-Stop-t against VRR-Stop: {100 * worst[0]:+.1f} pp ({worst[1]})")
    if not args.no_write:
        text = (f"# Round-dependent alpha_t, beta_t (VRR-Stop-t)\n\nWritten by `{COMMAND}` from the committed "
                "calibrations (`results/*/calibration.json`) and arrays; see the script's docstring for the "
                "columns and `vrr/calibration/round_dynamics.py` for the estimator.\n\n" + table +
                f"\n\nLargest loss of VRR-Stop-t against VRR-Stop: {100 * worst[0]:+.1f} pp ({worst[1]}).\n")
        atomic_write(args.out, lambda fh: fh.write(text))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
