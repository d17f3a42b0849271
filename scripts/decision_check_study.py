#!/usr/bin/env python
"""How often the calibration checks reject on simulated windows whose truth is known (docs/integrity.md).

For each simulated setting's parameters (``settings/sim_*.yaml``) it draws ``--reps`` windows of ``--n``
trajectories with the setting's probe, fits the paper's label-free binomial-mixture EM on the round-0 votes and the
labeled MLE on the probe, and runs

* the decision check (``vrr.calibration.decision_check``, threshold 2 pp), and
* the Wald check (``vrr.calibration.check``), the diagnostic,

and measures what the label-free decisions truly cost: VRR-Stop's commit rounds under the EM's rates against those
under the true rates, both scored by the belief filtered with the true parameters (the true model's expected
validity of the committed plan). It prints, per setting, the share of windows each check rejects, overall and among
the windows whose true cost is below 1 pp (where a rejection changes nothing worth changing) and above 2 pp (where
it should reject).

    python scripts/decision_check_study.py [--reps 40] [--n 200] [--settings "sim_qwen3b_favorable ..."]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.calibration.check import calibration_check  # noqa: E402
from vrr.calibration.decision_check import decision_check, stop_rounds  # noqa: E402
from vrr.calibration.estimators import calibrate, labeled_mle  # noqa: E402
from vrr.core.model import NoiseParams  # noqa: E402
from vrr.data.simulate import simulate_setting  # noqa: E402
from vrr.settings import load_config  # noqa: E402


def one_window(cfg: dict, n: int, seed: int, wald: bool) -> dict:
    truth = NoiseParams(**{k: float(cfg["params"][k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")})
    st = simulate_setting(truth, n=n, k_max=int(cfg["K_max"]), M=int(cfg["M"]), seed=seed,
                          judge_concentration=cfg.get("judge_concentration"), probe_n=int(cfg["probe"]["n"]),
                          probe_M=int(cfg["probe"]["M"]))
    fit = calibrate(st.S, st.y, st.M, method="binomial_em", seed=seed)
    lab = labeled_mle(st.probe_S, st.probe_y, st.probe_M)
    p = fit.params
    free, labeled = (p.rho0, p.rho1), (float(lab.rho0), float(lab.rho1))
    d = decision_check(st.S, st.M, free, labeled, p.alpha, p.beta, p.pi)
    k_true, b_true = stop_rounds(st.S, st.M, truth.rho0, truth.rho1, truth.alpha, truth.beta, truth.pi)
    k_free, _ = stop_rounds(st.S, st.M, p.rho0, p.rho1, truth.alpha, truth.beta, truth.pi)
    rows = np.arange(n)
    cost = float(np.sum(b_true[rows, k_true] - b_true[rows, k_free]) / n)
    out = {"decision_reject": not d.passed, "loss": d.loss, "cost": cost}
    if wald:
        w = calibration_check(st.S[:, 0], st.M, st.probe_S, st.probe_y, st.probe_M, seed=seed, n_boot=100)
        out["wald_reject"] = not w.passed
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--n", type=int, default=200, help="trajectories per simulated window")
    ap.add_argument("--settings", default="", help="sim setting names (default: every settings/sim_*.yaml)")
    ap.add_argument("--no-wald", action="store_true", help="skip the Wald check (the slower of the two)")
    a = ap.parse_args()
    names = a.settings.split() or sorted(p.stem for p in (REPO / "settings").glob("sim_*.yaml"))
    print(f"{'setting':28s} {'J':>5s} {'decision rejects':>17s} {'| cost<1pp':>10s} {'| cost>2pp':>10s} "
          f"{'Wald rejects':>13s} {'| cost<1pp':>10s}  mean L / mean cost (pp)")
    for name in names:
        cfg = load_config(name)
        if "schedule" in cfg:     # non-stationary: the stationary truth does not score its decisions
            continue
        res = [one_window(cfg, a.n, 1000 + r, not a.no_wald) for r in range(a.reps)]
        cost = np.array([r["cost"] for r in res])
        dec = np.array([r["decision_reject"] for r in res])
        small, large = cost < 0.01, cost > 0.02

        def share(mask, sub):
            return f"{mask[sub].mean():.2f} ({sub.sum()})" if sub.any() else "  —"

        j = 1 - float(cfg["params"]["rho0"]) - float(cfg["params"]["rho1"])
        line = f"{name:28s} {j:5.2f} {dec.mean():17.2f} {share(dec, small):>10s} {share(dec, large):>10s}"
        if not a.no_wald:
            wald = np.array([r["wald_reject"] for r in res])
            line += f" {wald.mean():13.2f} {share(wald, small):>10s}"
        line += f"  {np.mean([r['loss'] for r in res]) * 100:.2f} / {cost.mean() * 100:.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
