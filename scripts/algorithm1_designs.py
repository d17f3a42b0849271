#!/usr/bin/env python
"""Algorithm 1's designs side by side on every window of a results root (docs/algorithm1.md).

For each setting with a calibration (``<results>/<setting>/calibration.json``, written by ``make -j2 reproduce``)
it replays, on the same cross-fit folds and parameters:

* VRR-Stop and VRR-Guard, the two modes;
* "paper": the pseudocode of App. A (mode from the labeled J test, a switch to Guard inside the trajectory at the
  first round whose sign Eq. 8 cannot identify; ``rules.algorithm1_paper``);
* "J mode": the mode from the J test alone, held for the trajectory (the switch dropped);
* "J mode + guarded commit": as "J mode", but a commit whose sign is not identifiable commits the keep-best
  incumbent instead when it beat the plan by delta votes;
* "deployed": the mode from the labeled replay of both modes on each fold's calibration trajectories, with the
  decision check's rates (``rules.algorithm1``, the default).

It prints V per design and the gap of each to the better of VRR-Stop and VRR-Guard.

    python scripts/algorithm1_designs.py [--results results] [--settings "a b"]
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.core.belief import filter_beliefs, gain  # noqa: E402
from vrr.core.guard import keep_best  # noqa: E402
from vrr.data.contract import load_setting  # noqa: E402
from vrr.policies import rules as P  # noqa: E402
from vrr.policies.replay import algorithm1_inputs, algorithm1_plan, load_calibration  # noqa: E402

DESIGNS = ("VRR-Stop", "VRR-Guard", "paper", "J mode", "J mode + guarded commit", "deployed")


def designs(results: Path, name: str) -> dict:
    path = results / name / "calibration.json"
    cf, config = load_calibration(path)
    arrays = Path(json.loads(path.read_text())["arrays_path"])
    setting = load_setting(arrays if arrays.is_file() else REPO / arrays)
    S, y, M = setting.S, setting.y, setting.M
    n, rounds = S.shape
    est = cf.as_kwargs()
    alg = algorithm1_inputs(setting, cf, config)
    plan = algorithm1_plan(setting, cf, config, checks=alg["checks"], diags=alg["j_per_fold"])
    j_stop = np.array([j == j and j >= config.j_min for j in alg["j_per_fold"]])[cf.folds]
    stop = P.vrr_stop(S, M, tau=config.tau, **est).committed
    guard = keep_best(S, config.delta)[:, -1]
    rows = np.arange(n)
    b, _ = filter_beliefs(S, M, **{k: est[k] for k in ("rho0", "rho1", "alpha", "beta", "pi")})
    g = gain(b, np.broadcast_to(est["alpha"], (n,))[:, None], np.broadcast_to(est["beta"], (n,))[:, None])
    identified = (g + alg["radius"] <= config.tau)[rows, stop]
    incumbent = keep_best(S, config.delta)[rows, stop]
    better = S[rows, incumbent] >= S[rows, stop] + config.delta
    guarded = np.where(~identified & better, incumbent, stop)
    committed = {
        "VRR-Stop": stop, "VRR-Guard": guard,
        "paper": P.algorithm1_paper(S, M, radius=alg["radius"], radius_low=alg["radius_low"], stop_mode=j_stop,
                                    delta=config.delta, tau=config.tau, **est).committed,
        "J mode": np.where(j_stop, stop, guard),
        "J mode + guarded commit": np.where(j_stop, guarded, guard),
        "deployed": P.algorithm1(S, M, stop_mode=plan["stop_mode"], delta=config.delta, tau=config.tau,
                                 **plan["params"]).committed,
    }
    return {k: float(np.count_nonzero(y[rows, c]) / n) for k, c in committed.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(REPO / "results"))
    ap.add_argument("--settings", default="")
    a = ap.parse_args()
    root = Path(a.results)
    names = a.settings.split() or sorted(p.parent.name for p in root.glob("*/calibration.json"))
    if not names:
        ap.error(f"--results {root}: no <setting>/calibration.json (run make -j2 reproduce RESULTS={root})")
    warnings.simplefilter("ignore")
    print(f"{'setting':34s}" + "".join(f"{d:>25s}" for d in DESIGNS))
    for name in names:
        v = designs(root, name)
        best = max(v["VRR-Stop"], v["VRR-Guard"])
        print(f"{name:34s}" + "".join(f"{v[d]:>14.3f} ({(v[d] - best) * 100:+5.1f} pp)" for d in DESIGNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
