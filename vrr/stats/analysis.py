"""Per-setting analyses behind the notebooks: loop dynamics (Table "loop-dynamics", App. C),
calibration summaries (App. E), ablations (App. I), paired comparisons (App. G), and the
result files that carry them from one notebook to the next.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.belief import boundary
from ..calibration.estimators import binomial_mixture_em, calibrate, labeled_mle
from ..data.contract import Setting
from ..calibration.identifiability import labeled_j_diagnostic
from ..policies.replay import TPM, ReplayConfig, ReplayResult, fit_calibration, replay
from .inference import N_RESAMPLES, mcnemar_exact, paired_bootstrap, policy_table


# ---------------------------------------------------------------- a replay's policy table
def summarize_replay(result: ReplayResult, n_resamples: int = N_RESAMPLES, seed: int | None = None,
                     reference: str | None = TPM) -> list[dict]:
    """V with its bootstrap CI, <K> and paired differences against ``reference`` for every policy of a
    replay (App. G), plus the mean committed round."""
    committed = {k: o.committed for k, o in result.outcomes.items()}
    rounds = {k: o.rounds_used for k, o in result.outcomes.items()}
    if reference not in result.outcomes:
        reference = None
    rows = policy_table(result.validity, committed, rounds, reference=reference, n_resamples=n_resamples,
                        seed=result.config.seed if seed is None else seed,
                        verifier_calls=result.verifier_calls or None)
    for row in rows:
        row["setting"] = result.setting
    return rows


# ---------------------------------------------------------------- loop dynamics (RQ1)
SHAPE_LEVEL = 0.05


def trajectory_shape(y, level: float = SHAPE_LEVEL) -> tuple[str, int | None]:
    """Classify the per-round validity curve of a window (Table "loop-dynamics"): "interior peak",
    "monotone up", "monotone down" or "flat"; returns (shape, K*) with K* the interior peak round or None.

    The labels are tested on the paired per-instance validity y[i, k] (exact McNemar), so a window too
    small to resolve a change is called flat rather than labeled by its noise:
    * interior peak at K* = argmax_k Q_k (0 < K* < K) if Q_K* exceeds both round 0 and the last round,
      each at ``level / (K - 1)`` (Bonferroni over the K - 1 interior rounds, since K* is chosen from the data);
    * otherwise monotone up / down if the last round differs from round 0 at ``level``;
    * otherwise flat.
    "Monotone" names the net direction over the window, as the paper's column does."""
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[1] < 2 or y.shape[0] < 1:
        raise ValueError(f"trajectory_shape: y must be [instances, rounds] with at least 2 rounds, got shape {y.shape}")
    if not 0 < level < 1:
        raise ValueError(f"trajectory_shape: level must be in (0, 1), got {level}")
    y = y.astype(bool)
    q, last = y.mean(axis=0), y.shape[1] - 1
    peak = int(np.argmax(q))
    if 0 < peak < last:
        interior_level = level / (last - 1)
        if all(q[peak] > q[end] and mcnemar_exact(y[:, peak], y[:, end]) < interior_level for end in (0, last)):
            return f"interior peak (K*={peak})", peak
    if mcnemar_exact(y[:, 0], y[:, last]) < level:
        return ("monotone up" if q[last] > q[0] else "monotone down"), None
    return "flat", None


def loop_dynamics(setting: Setting) -> dict:
    """The loop-dynamics row of one setting: round-1 labeled estimates of rho0, rho1, J, alpha,
    beta, b* (Eq. 7), per-round validity Q_k and acceptance A_k, and the trajectory shape.
    (The best-fixed-round minus myopic column needs the replay: ``vrr.report.table_loop_dynamics``.)"""
    S, y, M = setting.S, setting.y, setting.M
    votes = labeled_mle(S[:, 0], y[:, 0], M)
    cal = calibrate(S, y, M, method="labeled_mle", max_pairs=None)
    q = y.mean(axis=0)
    shape, peak_round = trajectory_shape(y)
    row = {
        "setting": setting.name, "label": setting.meta.get("label", setting.name), "N": setting.n_instances,
        # simulated arrays carry their generating parameters; LLM trajectories do not
        "kind": "simulated" if "true_params" in setting.meta else "real",
        "rho0": votes.rho0, "rho1": votes.rho1, "J": 1 - votes.rho0 - votes.rho1,
        # the labeled frequencies themselves (descriptive; the decision rule uses defined_rate)
        "alpha": cal.transitions.alpha, "beta": cal.transitions.beta,
        "b_star": float(boundary(cal.transitions.alpha, cal.transitions.beta)),
        "Q": q.tolist(), "A": (S.mean(axis=0) / M).tolist(), "shape": shape, "peak_round": peak_round,
        "transitions": {k: int(v) for k, v in vars(cal.transitions).items() if k.startswith("n_")},
    }
    return row


def initial_vote_counts(setting: Setting) -> dict:
    """Round-0 plans by label and number of accepting votes, observed and as the noise model expects.

    Eq. 3 makes the M votes on a plan independent given its validity, so a valid plan's accept count is
    Binomial(M, 1 - rho1) and an invalid plan's Binomial(M, rho0), with rho0, rho1 the labeled estimates of
    :func:`loop_dynamics`. Votes correlated within a plan pile up in the end counts (0 and M) beyond it.
    """
    from scipy.stats import binom  # imported on use: only this analysis needs it

    S, y, M = setting.S[:, 0], setting.y[:, 0].astype(bool), setting.M
    votes = labeled_mle(S, y, M)
    out = {"M": M}
    for name, mask, accept_rate in (("valid", y, 1 - votes.rho1), ("invalid", ~y, votes.rho0)):
        n = int(mask.sum())
        expected = n * binom.pmf(np.arange(M + 1), M, accept_rate) if n else np.full(M + 1, np.nan)
        out[name] = {"n": n, "observed": np.bincount(S[mask].astype(int), minlength=M + 1).tolist(),
                     "binomial": expected.tolist()}
    return out


def damage_statistics(setting: Setting) -> dict:
    """Raw-label statistics of App. C: the share of instances that see a valid plan repaired
    into an invalid one, and the share of those damaging repairs that win majority acceptance."""
    y = setting.y.astype(bool)
    damaged = y[:, :-1] & ~y[:, 1:]
    accepted_after = setting.S[:, 1:] > setting.M / 2
    n_damage = int(damaged.sum())
    return {
        "frac_instances_damaged": float(damaged.any(axis=1).mean()),
        "damaging_repairs": n_damage,
        "frac_damaging_repairs_majority_accepted": float((damaged & accepted_after).sum() / n_damage) if n_damage else float("nan"),
    }


# ---------------------------------------------------------------- calibration (RQ3, App. E)
def calibration_summary(setting: Setting, config: ReplayConfig = ReplayConfig()) -> dict:
    """Cross-fit estimates (``config.method``) next to labeled values of the initial plans (p_0, "round 1" in
    the paper's tables), EM on the probe, the labeled J test, and each fold's calibration check
    (``vrr.calibration.check``: the label-free EM against the labeled probe), with the folds' verdict."""
    S, y, M = setting.S, setting.y, setting.M
    cf = fit_calibration(setting, config)
    truth = labeled_mle(S[:, 0], y[:, 0], M)
    folds = [{"fold": i, **f.params.as_dict(), "rules": f.rules, "weight_valid": f.votes.weight_valid,
              "loglik": f.votes.loglik, "converged": f.votes.converged} for i, f in enumerate(cf.fits)]
    em_rho0 = float(np.mean([f["rho0"] for f in folds]))
    em_rho1 = float(np.mean([f["rho1"] for f in folds]))
    out = {
        "setting": setting.name, "method": config.method, "folds": folds,
        "em_mean": {"rho0": em_rho0, "rho1": em_rho1},
        "labeled": {"rho0": truth.rho0, "rho1": truth.rho1},
        "bias": {"rho0": em_rho0 - truth.rho0, "rho1": em_rho1 - truth.rho1},
        "true_params": setting.meta.get("true_params"),
        "config": config.as_dict(), "crossfit": cf.to_dict(),
    }
    out["dominant_bias"] = max(("rho0", "rho1"), key=lambda k: abs(out["bias"][k]))
    from ..calibration.check import folds_verdict
    from ..policies.replay import fold_check

    checks = [fold_check(setting, cf, f, config) for f in range(len(cf.fits))]
    out["calibration_check"] = {"per_fold": checks, **folds_verdict(checks)}
    if setting.probe_S is not None:
        probe_em = binomial_mixture_em(setting.probe_S, setting.probe_M, seed=config.seed)
        out["probe"] = {"n": int(setting.probe_S.size), "M": int(setting.probe_M),
                        "em_accept_valid": 1 - probe_em.rho1, "em_accept_invalid": probe_em.rho0}
        if setting.probe_y is not None:
            d = labeled_j_diagnostic(setting.probe_S, setting.probe_y, setting.probe_M, seed=config.seed)
            out["probe"].update({"j_hat": d.j_hat, "j_ci": [d.ci_low, d.ci_high], "j_p_value": d.p_value,
                                 "accept_valid": d.accept_valid, "accept_invalid": d.accept_invalid})
    return out


# ---------------------------------------------------------------- paired comparisons (App. G)
PAIRED_COMPARISONS = [
    ("VRR-Stop", "Fixed K=5"), ("VRR-Stop", "ConfStop"), ("VRR-Stop", "Majority stopping"),
    ("VRR-Stop", TPM), ("VRR-Stop", "No repair"), ("VRR-Guard", "VRR-Stop"), ("VRR-Guard", "Fixed K=5"),
    ("VRR-Guard", "Verifier-best"), ("VRR-Guard", "No repair"),
]


def paired_comparisons(validity: dict[str, np.ndarray], pairs=PAIRED_COMPARISONS,
                       n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[dict]:
    """Delta V with a paired bootstrap CI and the exact McNemar p for each (left, right) pair."""
    rows = []
    conf = next((k for k in validity if k.startswith("ConfStop")), "ConfStop")
    for left, right in pairs:
        left, right = (conf if x == "ConfStop" else x for x in (left, right))
        if left not in validity or right not in validity:
            continue
        iv = paired_bootstrap(validity[left], validity[right], n_resamples=n_resamples, seed=seed)
        rows.append({"comparison": f"{left} vs {right}", "dV": iv.estimate, "dV_low": iv.low, "dV_high": iv.high,
                     "mcnemar_p": mcnemar_exact(validity[left], validity[right])})
    return rows


def round_vs_round(y, a: int, b: int, n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """Paired bootstrap of validity at round a minus round b (RQ1 interior peak rows)."""
    iv = paired_bootstrap(y[:, a], y[:, b], n_resamples=n_resamples, seed=seed)
    return {"comparison": f"round {a} vs round {b}", "dV": iv.estimate, "dV_low": iv.low, "dV_high": iv.high}


def round_changes(y) -> list[dict]:
    """Validity by round with its paired changes (the loop-dynamics figure's pairs): for each round k, Q_k, the
    instances that turned valid (``gained``) and invalid (``lost``) since round 0, and the exact McNemar p (App. G)
    of round k against round 0 and against round k - 1, each comparison on its own, not corrected for the number
    of rounds (:func:`trajectory_shape` is the corrected summary)."""
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[1] < 2 or y.shape[0] < 1:
        raise ValueError(f"round_changes: y must be [instances, rounds] with at least 2 rounds, got shape {y.shape}")
    y = y.astype(bool)
    rows = []
    for k in range(y.shape[1]):
        rows.append({"round": k, "Q": float(y[:, k].mean()),
                     "gained": int(np.sum(~y[:, 0] & y[:, k])), "lost": int(np.sum(y[:, 0] & ~y[:, k])),
                     "p_vs_round0": mcnemar_exact(y[:, 0], y[:, k]) if k else float("nan"),
                     "p_vs_previous": mcnemar_exact(y[:, k - 1], y[:, k]) if k else float("nan")})
    return rows


# ---------------------------------------------------------------- ablations (App. I)
def delta_sweep(setting: Setting, deltas=range(0, 9), config: ReplayConfig = ReplayConfig()) -> list[dict]:
    """VRR-Guard validity for each retention margin delta (App. I "Retention-margin ablation")."""
    rows = []
    for d in deltas:
        res = replay(setting, replace(config, delta=int(d)), policies=("VRR-Guard",))
        rows.append({"delta": int(d), "V_guard": float(res.validity["VRR-Guard"].mean())})
    return rows


def n_calib_sweep(setting: Setting, sizes=(50, 100, 200, 300), config: ReplayConfig = ReplayConfig()) -> list[dict]:
    """Subsampled re-estimation (App. I): per N_calib, the share of instances whose committed
    round agrees with the full-sample calibration, the share that disagrees with the TPM
    decision (instance-level; the per-decision flip rate is ``flip_risk_grid``'s), and the
    validity gap to TPM."""
    full = replay(setting, config, policies=("VRR-Stop", TPM))
    base = full.outcomes["VRR-Stop"].committed
    tpm = full.outcomes[TPM].committed
    rows = []
    for n in sizes:
        res = replay(setting, replace(config, n_calib=int(n)), policies=("VRR-Stop",))
        c = res.outcomes["VRR-Stop"].committed
        rows.append({"n_calib": int(n), "agreement_with_full": float(np.mean(c == base)),
                     "disagreement_with_tpm": float(np.mean(c != tpm)),
                     "V_stop": float(res.validity["VRR-Stop"].mean()),
                     "abs_gap_to_tpm": float(abs(res.validity["VRR-Stop"].mean() - full.validity[TPM].mean()))})
    return rows


def calibration_input_sweep(setting: Setting, methods=("binomial_em", "mom", "labeled_mle", "beta_binomial_em"),
                            config: ReplayConfig = ReplayConfig()) -> list[dict]:
    """VRR-Stop under each calibration input (App. I "Calibration-input ablation")."""
    rows = []
    for m in methods:
        res = replay(setting, replace(config, method=m), policies=("VRR-Stop",))
        fits = res.calibration.fits
        rows.append({"method": m, "V_stop": float(res.validity["VRR-Stop"].mean()),
                     "mean_K": float(res.outcomes["VRR-Stop"].rounds_used.mean()),
                     "rho0_hat": float(np.mean([f.params.rho0 for f in fits])),
                     "rho1_hat": float(np.mean([f.params.rho1 for f in fits]))})
    return rows


def median_decision_margin(setting: Setting, config: ReplayConfig = ReplayConfig()) -> float:
    """Median |G_k - tau| over the states the TPM rule visits (the Delta of a real verifier on the
    RQ3 grid), with the same TPM parameters as the replay."""
    from ..core.belief import filter_beliefs, gain
    from ..policies.replay import _tpm_params

    params, _ = _tpm_params(setting, config)
    b, _ = filter_beliefs(setting.S, setting.M, params["rho0"], params["rho1"], params["alpha"], params["beta"], params["pi"])
    n = b.shape[0]
    a = np.broadcast_to(np.asarray(params["alpha"], float), (n,))[:, None]
    be = np.broadcast_to(np.asarray(params["beta"], float), (n,))[:, None]
    g = gain(b, a, be) - config.tau
    stop = g <= 0
    commit = np.where(stop.any(1), stop.argmax(1), setting.k_max)
    visited = np.arange(setting.k_max + 1)[None, :] <= commit[:, None]
    return float(np.median(np.abs(g[visited])))


def findings_markdown(policy_rows: list[dict], paired_rows: list[dict], label: str,
                      tpm_source: str = "true parameters") -> str:
    """Plain statements of what this run found (the notebooks report these, not the paper's numbers)."""
    V = {r["policy"]: r for r in policy_rows}
    P = {r["comparison"]: r for r in paired_rows}

    def pp(x):
        return f"{100 * x:+.1f} pp"

    def paired(name):
        r = P.get(name)
        if r is None:
            return ""
        sig = "excludes 0" if r["dV_low"] > 0 or r["dV_high"] < 0 else "includes 0"
        p = f", McNemar p = {r['mcnemar_p']:.2g}" if "mcnemar_p" in r else ""
        return f" (paired 95% CI [{pp(r['dV_low'])}, {pp(r['dV_high'])}], {sig}{p})"

    lines = [f"**Findings for {label}.**"]
    none, stop, tpm = V["No repair"]["V"], V["VRR-Stop"]["V"], V["TPM reference"]["V"]
    if "Fixed K=5" in V:
        f5 = V["Fixed K=5"]["V"]
        verb = "collapses" if f5 < none - 0.05 else ("improves" if f5 > none + 0.05 else "leaves")
        lines.append(f"- Fixed 5-round repair {verb} validity: {f5:.3f} vs {none:.3f} without repair ({pp(f5 - none)}).")
    lines.append(f"- VRR-Stop reaches {stop:.3f} with <K> = {V['VRR-Stop']['mean_K']:.2f} repair rounds, "
                 f"{pp(stop - none)} vs no repair{paired('VRR-Stop vs No repair')}.")
    lines.append(f"- Against the TPM reference ({tpm:.3f}, same rule with {tpm_source}) the gap is {pp(stop - tpm)}"
                 f"{paired('VRR-Stop vs TPM reference')}.")
    if "VRR-Guard" in V:
        g = V["VRR-Guard"]["V"]
        lines.append(f"- VRR-Guard commits plans of validity {g:.3f}, {pp(g - none)} vs no repair"
                     f"{paired('VRR-Guard vs No repair')}; vs VRR-Stop {pp(g - stop)}.")
    return "\n".join(lines)


def setting_statistics(arrays: Setting, replay_saved: dict, n_resamples: int = N_RESAMPLES, seed: int = 0,
                       peak_round: int | None = None, ablations: dict | None = None) -> dict:
    """Everything 05_stats reports for one setting: the policy table with bootstrap CIs and
    paired tests against TPM, the App. G paired comparisons, the median TPM decision margin
    (RQ3 marker), optional interior-peak rows (RQ1) and App. I ablations.

    ``ablations`` maps "deltas", "n_calib", "methods" to the sweep values (None: no ablations).
    """

    config = ReplayConfig.from_dict(replay_saved["config"])
    stats = {
        "setting": replay_saved["setting"],
        "policy_table": policy_table(replay_saved["validity"], replay_saved["committed"], replay_saved["rounds_used"],
                                     reference=TPM, n_resamples=n_resamples, seed=seed,
                                     verifier_calls=replay_saved.get("verifier_calls")),
        "paired": paired_comparisons(replay_saved["validity"], n_resamples=n_resamples, seed=seed),
        "median_margin": median_decision_margin(arrays, config),
        "n_resamples": n_resamples,
        "tpm_source": replay_saved["tpm_source"],
    }
    if peak_round is not None:
        stats["paired"] += [round_vs_round(arrays.y, peak_round, arrays.k_max, n_resamples, seed),
                            round_vs_round(arrays.y, 0, arrays.k_max, n_resamples, seed)]
    if ablations:
        stats["ablations"] = {
            "delta_sweep": delta_sweep(arrays, ablations["deltas"], config),
            "n_calib_sweep": n_calib_sweep(arrays, ablations["n_calib"], config),
            "calibration_input": calibration_input_sweep(arrays, ablations["methods"], config),
        }
    return stats
