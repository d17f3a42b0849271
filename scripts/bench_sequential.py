#!/usr/bin/env python
"""Sequential voting: verifier calls of the online controller with M votes per round against one vote at
a time (issue 12, item 2).

For every committed setting (``results/*/calibration.json``: the simulated settings and the real
windows of ``data/real/``) and each policy (Algorithm 1, VRR-Stop, VRR-Guard), the controller runs per
cross-fit fold with the calibration replay uses, and prints:

* fixed: verifier calls per instance with M votes per round evaluated (the paper's cost);
* exact: calls with exact curtailment (``sequential="exact"``: a round stops asking once no completion
  of its remaining votes changes the decision or the state it leaves), and the ratio exact / fixed;
* pred: calls with the predictive test (``sequential="predictive"``, per-round error rate
  ``--error-rate`` under the calibrated model) and its ratio;
* changed: instances whose committed plan differs from fixed M (exact: must be 0), and the validity
  V of the committed plans under fixed M and under the predictive test.

Vote order: the real windows replay the judge votes in the order the loop stored them
(``data/real/<setting>/trajectories.jsonl.gz``, ``rounds[k].votes``; an unparsable verdict counts as a
reject, as in S_k). The simulated arrays store only counts S_k, so each round's S_k accepts are placed in
a random order (``vrr.policies.sequential.vote_orders``, ``--seed``, default 0).

    .venv/bin/python scripts/bench_sequential.py                     # all settings (a few minutes)
    .venv/bin/python scripts/bench_sequential.py --settings sim_qwen3b_pmstress --markdown
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrr.common.paths import REPO_ROOT  # noqa: E402
from vrr.data.contract import load_setting  # noqa: E402
from vrr.policies.replay import algorithm1_inputs, load_calibration  # noqa: E402
from vrr.policies.sequential import fold_controllers, run_controller, vote_orders  # noqa: E402

POLICIES = {"algorithm1": "Algorithm 1", "vrr_stop": "VRR-Stop", "vrr_guard": "VRR-Guard"}


def stored_votes(arrays_path: Path, S: np.ndarray, M: int) -> np.ndarray | None:
    """The judge votes in stored order, [N, K+1, M], from the run's trajectories beside ``arrays.npz``;
    None when the run kept no trajectories. The votes must add up to the arrays' S_k."""
    path = arrays_path.parent / "trajectories.jsonl.gz"
    if not path.is_file():
        return None
    from vrr.loop.store import read_jsonl_gz, unique_by_index

    records = unique_by_index(read_jsonl_gz(path))
    if len(records) != S.shape[0]:
        raise ValueError(f"{path}: {len(records)} trajectories, the arrays have {S.shape[0]}")
    votes = np.array([[[1 if v == 1 else 0 for v in rd["votes"]] for rd in r["rounds"]] for r in records],
                     dtype=np.int8)
    if votes.shape != S.shape + (M,) or not np.array_equal(votes.sum(axis=2), S):
        raise ValueError(f"{path}: stored votes do not add up to the arrays' S_k")
    return votes


def setting_inputs(name: str, seed: int = 0, results: Path = REPO_ROOT / "results"):
    """(setting, cross-fit, config, votes in arrival order, where the order comes from) of a setting whose
    calibration step has run into ``results``."""
    cal = Path(results) / name / "calibration.json"
    cf, config = load_calibration(cal)
    arrays = REPO_ROOT / json.loads(cal.read_text())["arrays_path"]
    setting = load_setting(arrays)
    votes = stored_votes(arrays, setting.S, setting.M)
    order = "stored order"
    if votes is None:
        votes, order = vote_orders(setting.S, setting.M, seed), f"random order (seed {seed})"
    return setting, cf, config, votes, order


def bench_setting(name: str, seed: int = 0, error_rate: float = 0.05, results: Path = REPO_ROOT / "results") -> list[dict]:
    setting, cf, config, votes, order = setting_inputs(name, seed, results)
    alg = algorithm1_inputs(setting, cf, config)
    rows = []
    for policy, label in POLICIES.items():
        runs = {}
        for mode in ("off", "exact", "predictive"):
            ctls = fold_controllers(setting, cf, config, policy, alg_inputs=alg, sequential=mode,
                                    error_rate=error_rate)
            runs[mode] = run_controller(ctls, setting.S, votes=None if mode == "off" else votes, folds=cf.folds)
        fixed = runs["off"]
        n = setting.S.shape[0]
        rows.append({
            "setting": name, "policy": label, "order": order, "N": n,
            "fixed": float(fixed.verifier_calls.mean()),
            "exact": float(runs["exact"].verifier_calls.mean()),
            "pred": float(runs["predictive"].verifier_calls.mean()),
            "changed_exact": int((runs["exact"].outcome.committed != fixed.outcome.committed).sum()),
            "changed_pred": int((runs["predictive"].outcome.committed != fixed.outcome.committed).sum()),
            "V_fixed": float(fixed.outcome.validity(setting.y).mean()),
            "V_pred": float(runs["predictive"].outcome.validity(setting.y).mean()),
        })
    return rows


def render(rows: list[dict], error_rate: float, markdown: bool) -> str:
    head = ["setting", "policy", "fixed", "exact", "exact/fixed", "changed", f"pred({error_rate:g})",
            "pred/fixed", "changed", "V fixed", "V pred", "vote order"]
    lines = []
    for r in rows:
        lines.append([r["setting"], r["policy"], f"{r['fixed']:.2f}", f"{r['exact']:.2f}",
                      f"{r['exact'] / r['fixed']:.3f}", f"{r['changed_exact']}/{r['N']}", f"{r['pred']:.2f}",
                      f"{r['pred'] / r['fixed']:.3f}", f"{r['changed_pred']}/{r['N']}", f"{r['V_fixed']:.3f}",
                      f"{r['V_pred']:.3f}", r["order"]])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(line) for line in lines])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="*", help="setting names (default: every RESULTS/*/calibration.json)")
    ap.add_argument("--results", type=Path, default=REPO_ROOT / "results", help="results root of make reproduce")
    ap.add_argument("--seed", type=int, default=0, help="vote order of the simulated settings")
    ap.add_argument("--error-rate", type=float, default=0.05, help="per-round error rate of the predictive test")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    names = args.settings or sorted(p.parent.name for p in args.results.glob("*/calibration.json"))
    if not names:
        ap.error(f"{args.results}: no */calibration.json (run `make reproduce` first)")
    rows = []
    for name in names:
        rows += bench_setting(name, args.seed, args.error_rate, args.results)
    print(render(rows, args.error_rate, args.markdown))
    by_policy = {}
    for r in rows:
        by_policy.setdefault(r["policy"], []).append(r)
    print()
    for policy, rs in by_policy.items():
        fixed, exact, pred = (sum(r[k] * r["N"] for r in rs) for k in ("fixed", "exact", "pred"))
        print(f"{policy}: exact saves {100 * (1 - exact / fixed):.1f}% of verifier calls, predictive "
              f"{100 * (1 - pred / fixed):.1f}% (pooled over {len(rs)} settings); exact changed "
              f"{sum(r['changed_exact'] for r in rs)} decisions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
