#!/usr/bin/env python
"""Coverage of the calibrated parameter box and of the error radius B_k (Prop. 1, Eq. 8) on simulated data.

For each J and calibration size N, ``--reps`` calibration samples are drawn from known parameters
(M votes on the initial plan, one labeled repair pair per instance), the intervals are computed,
and a fresh evaluation window of ``--n-eval`` trajectories is filtered with the estimates and with
the truth. Printed per cell:

* box coverage: the share of calibrations whose interval box contains all five true parameters;
* state coverage: the share of evaluation states with |G-hat_k - G_k| <= B_k;
* the mean B_k.

Both coverages should be at least 1 - eta. ``--method`` picks the intervals: ``bootstrap`` (the
bootstrap of the whole calibration used by Algorithm 1) or ``counts`` (the earlier Clopper-Pearson
intervals on effective counts, for comparison).

    python scripts/coverage_study.py --reps 40            # the table of docs/integrity.md (about 30 min on 2 cores)
    python scripts/coverage_study.py --reps 20 --boot 100 # a quick look
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vrr.calibration import calibrate  # noqa: E402
from vrr.calibration.identifiability import (PARAM_NAMES, bootstrap_intervals, error_radius,  # noqa: E402
                                             parameter_intervals)
from vrr.core.model import NoiseParams  # noqa: E402
from vrr.data.simulate import simulate_setting  # noqa: E402

RHO1, ALPHA, BETA, PI = 0.18, 0.30, 0.30, 0.60   # a repair that helps and harms alike: G changes sign


def truth_for(j: float) -> NoiseParams:
    return NoiseParams(rho0=1.0 - j - RHO1, rho1=RHO1, alpha=ALPHA, beta=BETA, pi=PI)


def one_rep(args) -> tuple[bool, float, float]:
    j, n, rep, method, n_boot, eta, n_eval, M = args
    truth = truth_for(j)
    calib = simulate_setting(truth, n=n, k_max=1, M=M, seed=100_000 + 1000 * rep + int(1000 * j) + n)
    if method == "bootstrap":
        box = bootstrap_intervals(calib.S, calib.y, M, eta=eta, n_boot=n_boot, seed=rep)
    else:
        box = parameter_intervals(calibrate(calib.S, calib.y, M, seed=rep), eta)
    covered = all(box[k][0] <= getattr(truth, k) <= box[k][1] for k in PARAM_NAMES)
    point = calibrate(calib.S, calib.y, M, seed=rep).params.as_dict()
    evaluation = simulate_setting(truth, n=n_eval, k_max=5, M=M, seed=900_000 + rep)
    g_hat, radius = error_radius(evaluation.S, M, point, box)
    g_true, _ = error_radius(evaluation.S, M, truth.as_dict(), {k: (v, v) for k, v in truth.as_dict().items()})
    return covered, float(np.mean(np.abs(g_hat - g_true) <= radius + 1e-12)), float(radius.mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--j", default="0.05,0.1,0.2,0.3,0.46")
    ap.add_argument("--n", default="100,300")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--eta", type=float, default=0.05)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--M", type=int, default=8)
    ap.add_argument("--method", choices=["bootstrap", "counts"], default="bootstrap")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    js = [float(x) for x in a.j.split(",")]
    ns = [int(x) for x in a.n.split(",")]
    print(f"intervals: {a.method}; eta = {a.eta}; {a.reps} calibrations per cell"
          + (f", {a.boot} bootstrap replicates" if a.method == "bootstrap" else "")
          + f"; M = {a.M}; rho1 = {RHO1}, alpha = {ALPHA}, beta = {BETA}, pi = {PI}; {a.n_eval} evaluation"
          " trajectories of 6 rounds per calibration")
    print(f"{'J':>6} {'N':>5} {'box coverage':>13} {'state coverage':>15} {'mean B_k':>9} {'seconds':>8}")
    rows = []
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for j in js:
            for n in ns:
                t0 = time.time()
                res = list(pool.map(one_rep, [(j, n, r, a.method, a.boot, a.eta, a.n_eval, a.M) for r in range(a.reps)]))
                box = np.mean([r[0] for r in res])
                state = np.mean([r[1] for r in res])
                radius = np.mean([r[2] for r in res])
                rows.append((j, n, box, state, radius))
                flag = "" if min(box, state) >= 1 - a.eta else "   < 1 - eta"
                print(f"{j:>6.2f} {n:>5d} {box:>13.3f} {state:>15.3f} {radius:>9.3f} {time.time() - t0:>8.0f}{flag}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
