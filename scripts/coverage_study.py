#!/usr/bin/env python
"""Coverage and width of Algorithm 1's error radius B_k (Prop. 1, Eq. 8) on simulated windows with known parameters.

For each J and calibration size N, ``--reps`` calibration samples are drawn from known parameters (M votes on
the initial plan, one labeled repair pair per instance, and a labeled probe of ``--probe-n`` plans with 16 votes,
the size every real window has). The calibration is fit with ``--method`` and its bootstrap draws give the
radii below and above G-hat_k (``vrr.calibration.gain_radius``); a fresh evaluation window of ``--n-eval``
trajectories is filtered with the estimates and with the truth. Printed per cell, over all evaluation states:

* lower / upper coverage: the share of states with G_k >= G-hat_k - B_k^- and with G_k <= G-hat_k + B_k^+
  (each one-sided bound's level is 1 - eta; Prop. 1 uses one side at a time);
* median radius: the median of (B_k^- + B_k^+) / 2; median error: the median of |G-hat_k - G_k|; their ratio;
* check passes: under ``semisupervised_checked``, the share of calibrations whose calibration check passed (the
  semi-supervised EM ran; elsewhere the probe's labeled rates alone).

``--concentration c`` draws correlated votes (one judge leniency per instance, beta-binomial with concentration
c, ``vrr.data.simulate``); the true G_k is then the binomial filter's under the true marginal rates (the TPM's).
``--likelihood beta_binomial`` fits and filters with Eq. 5's exchangeable-vote likelihood
(``vrr.calibration.correlated``; phi0, phi1 fit and drawn with the rates); the true G_k is then the filter of that
likelihood under the true rates and the true vote correlation phi0 = phi1 = 1 / (c + 1) (0 without
``--concentration``).

    python scripts/coverage_study.py --reps 100 --j 0.2,0.3,0.46     # the first table of docs/integrity.md
    python scripts/coverage_study.py --reps 100 --j 0.2,0.3,0.46 --method semisupervised_checked
    python scripts/coverage_study.py --reps 200 --j 0.2,0.3,0.46 --method semisupervised_checked \
        --concentration 2.33 [--likelihood beta_binomial]            # correlated votes (docs/integrity.md)
    python scripts/coverage_study.py --reps 10 --boot 100            # a quick look
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
from vrr.calibration.correlated import LIKELIHOODS  # noqa: E402
from vrr.calibration.gain_radius import bootstrap_radius, gain_paths, parameter_draws  # noqa: E402
from vrr.core.model import NoiseParams  # noqa: E402
from vrr.data.simulate import simulate_setting  # noqa: E402

RHO1, ALPHA, BETA, PI = 0.18, 0.30, 0.30, 0.60   # a repair that helps and harms alike: G changes sign
PROBE_M = 16


def truth_for(j: float) -> NoiseParams:
    return NoiseParams(rho0=1.0 - j - RHO1, rho1=RHO1, alpha=ALPHA, beta=BETA, pi=PI)


def one_rep(args) -> tuple[float, float, float, float, int, float]:
    """(lower coverage, upper coverage, median radius, median error, states, check passed) of one calibration;
    the last is 1.0 or 0.0 where the method runs the calibration check (``semisupervised_checked``), NaN elsewhere."""
    j, n, rep, method, n_boot, eta, n_eval, M, probe_n, concentration, likelihood = args
    truth = truth_for(j)
    seed = 100_000 + 1000 * rep + int(1000 * j) + n
    calib = simulate_setting(truth, n=n, k_max=1, M=M, seed=seed, probe_n=probe_n, probe_M=PROBE_M,
                             judge_concentration=concentration)
    probe = dict(probe_S=calib.probe_S, probe_y=calib.probe_y, probe_M=PROBE_M) if probe_n else {}
    fit = calibrate(calib.S, calib.y, M, method=method, seed=rep, likelihood=likelihood, **probe)
    draws = parameter_draws(calib.S, calib.y, M, n_boot=n_boot, seed=rep, method=method, point=fit,
                            likelihood=likelihood, **probe)
    evaluation = simulate_setting(truth, n=n_eval, k_max=5, M=M, seed=900_000 + rep,
                                  judge_concentration=concentration)
    g_hat, low, high = bootstrap_radius(evaluation.S, M, fit.as_kwargs(), draws, eta)
    true_params = truth.as_dict()
    if likelihood == "beta_binomial":
        phi = 0.0 if concentration is None else 1.0 / (concentration + 1.0)
        true_params.update(phi0=phi, phi1=phi)
    g_true = gain_paths(evaluation.S, M, true_params)
    tol = 1e-12
    return (float(np.mean(g_true >= g_hat - low - tol)), float(np.mean(g_true <= g_hat + high + tol)),
            float(np.median((low + high) / 2.0)), float(np.median(np.abs(g_hat - g_true))), int(g_hat.size),
            float(fit.check["passed"]) if fit.check is not None else float("nan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--j", default="0.1,0.2,0.3,0.46")
    ap.add_argument("--n", default="100,300")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--eta", type=float, default=0.05)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--M", type=int, default=8)
    ap.add_argument("--probe-n", type=int, default=100)
    ap.add_argument("--method", default="binomial_em",
                    help="calibration method (vrr.settings.CALIBRATION_METHODS); the probe methods read the probe")
    ap.add_argument("--concentration", type=float, default=None, help="correlated votes (beta-binomial judge)")
    ap.add_argument("--likelihood", default="binomial", choices=LIKELIHOODS,
                    help="Eq. 5's vote likelihood of the fit and the filter (vrr.calibration.correlated)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    js = [float(x) for x in a.j.split(",")]
    ns = [int(x) for x in a.n.split(",")]
    print(f"method {a.method}, likelihood {a.likelihood}; eta = {a.eta} per side; {a.reps} calibrations per cell, {a.boot} bootstrap "
          f"replicates; M = {a.M}; probe {a.probe_n} x {PROBE_M} votes; rho1 = {RHO1}, alpha = {ALPHA}, "
          f"beta = {BETA}, pi = {PI}; {a.n_eval} evaluation trajectories of 6 rounds per calibration"
          + (f"; correlated votes (concentration {a.concentration:g})" if a.concentration else ""))
    print(f"{'J':>5} {'N':>4} {'lower cov.':>10} {'upper cov.':>10} {'median B':>9} {'median err':>10} "
          f"{'ratio':>6} {'check passes':>12} {'seconds':>7}")
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        for j in js:
            for n in ns:
                t0 = time.time()
                res = list(pool.map(one_rep, [(j, n, r, a.method, a.boot, a.eta, a.n_eval, a.M, a.probe_n,
                                               a.concentration, a.likelihood) for r in range(a.reps)]))
                lower, upper = np.mean([r[0] for r in res]), np.mean([r[1] for r in res])
                radius, err = np.median([r[2] for r in res]), np.median([r[3] for r in res])
                flag = "" if min(lower, upper) >= 1 - a.eta else "   < 1 - eta"
                passed = [r[5] for r in res if not np.isnan(r[5])]
                share = f"{np.mean(passed):.2f}" if passed else "--"
                print(f"{j:>5.2f} {n:>4d} {lower:>10.3f} {upper:>10.3f} {radius:>9.3f} {err:>10.3f} "
                      f"{radius / max(err, 1e-12):>6.1f} {share:>12} {time.time() - t0:>7.0f}{flag}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
