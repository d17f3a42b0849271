"""Benchmark: replay + statistics for one setting, vectorized vs a plain per-instance Python loop.

Simulated N=500, K_max=5, M=8 (the Qwen-3B PM-stress row). The vectorized path is exactly what
``make reproduce`` runs: five-fold cross-fitting, every policy of App. A, and 10,000-resample
bootstrap CIs with paired differences and McNemar tests. The loop path calibrates the same way,
then walks every instance through the literal per-instance policies of
``vrr.policies_reference`` and bootstraps with a Python loop over resamples. Both are timed in
this one run and the ratio is printed.

    python scripts/bench_replay.py [--n 500] [--resamples 10000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from vrr.policies import reference as R
from vrr.calibration import crossfit
from vrr.core.model import NoiseParams
from vrr.policies.replay import ReplayConfig, replay
from vrr.stats.analysis import summarize_replay
from vrr.data.simulate import simulate_setting
from vrr.stats.inference import mcnemar_exact


def vectorized(setting, resamples):
    result = replay(setting, ReplayConfig(seed=0))
    rows = summarize_replay(result, n_resamples=resamples)
    return {r["policy"]: r["V"] for r in rows}


def plain_loop(setting, resamples):
    S, y, M = setting.S, setting.y, setting.M
    truth = setting.meta["true_params"]
    cf = crossfit(S, y, M, seed=0)
    outcomes = {}
    per_instance = {
        "No repair": lambda i, r: (0, 0),
        "Majority stopping": lambda i, r: R.first_accepted_one(r, M),
        "ConfStop-0.85": lambda i, r: R.first_accepted_one(r, M, 0.85),
        "Fixed K=1": lambda i, r: (1, 1), "Fixed K=3": lambda i, r: (3, 3), "Fixed K=5": lambda i, r: (5, 5),
        "Accepted-first": lambda i, r: R.first_accepted_one(r, M),
        "Last-accepted": lambda i, r: R.last_accepted_one(r, M),
        "Verifier-best": lambda i, r: R.verifier_best_one(r),
        "VRR-Stop": lambda i, r: R.vrr_stop_one(r, M, cf.rho0[i], cf.rho1[i], cf.alpha[i], cf.beta[i], cf.pi[i]),
        "VRR-Guard": lambda i, r: R.guard_one(r, 5),
        "TPM reference": lambda i, r: R.vrr_stop_one(r, M, truth["rho0"], truth["rho1"], truth["alpha"],
                                                     truth["beta"], truth["pi"]),
        "Hindsight best": lambda i, r: R.hindsight_one(list(y[i])),
    }
    for name, fn in per_instance.items():
        valid = []
        for i in range(S.shape[0]):
            committed, _ = fn(i, [int(v) for v in S[i]])
            valid.append(int(y[i, committed]))
        outcomes[name] = valid
    rng = np.random.default_rng(0)
    n = S.shape[0]
    summary = {}
    ref = outcomes["TPM reference"]
    for name, valid in outcomes.items():
        means, diffs = [], []
        for _ in range(resamples):
            idx = rng.integers(0, n, n)
            means.append(sum(valid[j] for j in idx) / n)
            diffs.append(sum(valid[j] - ref[j] for j in idx) / n)
        summary[name] = (sum(valid) / n, np.percentile(means, [2.5, 97.5]), np.percentile(diffs, [2.5, 97.5]),
                         mcnemar_exact(valid, ref))
    return {k: v[0] for k, v in summary.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    truth = NoiseParams(0.364, 0.177, 0.320, 0.786, 0.700)
    setting = simulate_setting(truth, n=args.n, k_max=5, M=8, seed=0, name="bench_pm_stress")

    vectorized(setting, 100)  # warm-up (imports, caches)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        v_fast = vectorized(setting, args.resamples)
        times.append(time.perf_counter() - t0)
    fast = min(times)
    t0 = time.perf_counter()
    v_slow = plain_loop(setting, args.resamples)
    slow = time.perf_counter() - t0
    for name, v in v_slow.items():
        assert abs(v_fast[name] - v) < 1e-12, f"{name}: loop {v} != vectorized {v_fast[name]}"
    print(f"setting: simulated PM-stress, N={args.n}, K_max=5, M=8, {args.resamples} bootstrap resamples")
    print(f"vectorized replay + statistics (all policies, 5-fold cross-fit): {fast:.3f} s (best of {args.repeats})")
    print(f"plain per-instance Python loop (same policies and statistics):   {slow:.3f} s")
    print(f"speed ratio: {slow / fast:.1f}x   (point estimates identical for {len(v_slow)} policies)")


if __name__ == "__main__":
    main()
