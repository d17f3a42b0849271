"""Replay of stopping policies over a setting's frozen trajectories under cross-fitting
(Sec. 5.1 protocol; App. B "Calibration protocol and cross-fitting").

``replay`` calibrates once per fold, runs every requested policy vectorized over instances,
and returns per-instance outcomes (for paired tests) plus the summary V, <K>.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from . import policies as P
from .calibration import CrossFit, crossfit
from .data import Setting
from .identifiability import crossfit_intervals, error_radius, labeled_j_diagnostic
from .stats import N_RESAMPLES, policy_table

TPM = "TPM reference"


@dataclass(frozen=True)
class ReplayConfig:
    """Hyperparameters of a replay (App. B "Hyperparameters"; defaults are the paper's)."""

    n_folds: int = 5
    seed: int = 0
    method: str = "binomial_em"        # vote-noise estimator: binomial_em | mom | labeled_mle | beta_binomial_em
    vote_rounds: str = "first"         # EM input: round-0 votes ("first"), all rounds, or the probe
    n_calib: int | None = None         # subsample the calibration folds (App. I ablation)
    delta: int = 5                     # VRR-Guard retention margin (Eq. 9)
    tau: float = 0.0                   # gain threshold (Eq. 7)
    fixed_ks: tuple[int, ...] = (1, 3, 5)
    conf_tau: float = 0.85             # ConfStop threshold
    eta: float = 0.05                  # error-radius coverage (Prop. 1)
    j_min: float = 0.10                # Algorithm 1 mode switch
    tpm: str = "auto"                  # "true" (simulated meta), "labeled" (cross-fit labeled MLE), or "auto"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ReplayResult:
    setting: str
    config: ReplayConfig
    outcomes: dict[str, P.PolicyOutcome]
    validity: dict[str, np.ndarray]
    calibration: CrossFit
    tpm_source: str
    extras: dict = field(default_factory=dict)

    def summary(self, n_resamples: int = N_RESAMPLES, seed: int | None = None, reference: str | None = TPM) -> list[dict]:
        rounds = {k: o.rounds_used for k, o in self.outcomes.items()}
        if reference not in self.outcomes:
            reference = None
        rows = policy_table(self.validity, rounds, reference=reference, n_resamples=n_resamples,
                            seed=self.config.seed if seed is None else seed)
        for row in rows:
            row["setting"] = self.setting
            row["mean_committed_round"] = float(np.mean(self.outcomes[row["policy"]].committed))
        return rows


def _tpm_params(setting: Setting, config: ReplayConfig) -> tuple[dict, str]:
    truth = setting.meta.get("true_params")
    if config.tpm == "true" or (config.tpm == "auto" and truth):
        if not truth:
            raise ValueError(f"setting {setting.name}: tpm='true' needs meta['true_params']")
        return {k: float(truth[k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")}, "true parameters"
    # Labeled oracle: labeled MLE on all rounds of the other folds, same fold split.
    cf = crossfit(setting.S, setting.y, setting.M, method="labeled_mle", n_folds=config.n_folds,
                  seed=config.seed, vote_rounds="all", max_pairs=None)
    return cf.as_kwargs(), "labeled estimates (cross-fit)"


def _j_stop_mode(setting: Setting, folds: np.ndarray, config: ReplayConfig) -> tuple[np.ndarray, list]:
    """Algorithm 1 line 1: held-out labeled J diagnostic per fold (probe if it has labels)."""
    diags = []
    for f in range(config.n_folds):
        if setting.probe_S is not None and setting.probe_y is not None:
            S, y, M = setting.probe_S, setting.probe_y, setting.probe_M
        else:
            train = folds != f
            S, y, M = setting.S[train, 0], setting.y[train, 0], setting.M
        try:
            diags.append(labeled_j_diagnostic(S, y, M, n_resamples=200, seed=config.seed).j_hat)
        except ValueError:  # one class absent: separation cannot be shown
            diags.append(float("nan"))
    j = np.array(diags)
    return np.nan_to_num(j, nan=-1.0)[folds] >= config.j_min, diags


DEFAULT_POLICIES = ("No repair", "Majority stopping", "ConfStop", "Fixed", "Accepted-first",
                    "Last-accepted", "Verifier-best", "VRR-Stop", "VRR-Guard", "Algorithm 1",
                    TPM, "Hindsight best")


def replay(setting: Setting, config: ReplayConfig = ReplayConfig(),
           policies: tuple[str, ...] = DEFAULT_POLICIES) -> ReplayResult:
    """Run the policies on one setting (App. A definitions, App. B cross-fitting)."""
    S, y, M = setting.S, setting.y, setting.M
    k_max = setting.k_max
    probe = {}
    if config.vote_rounds == "probe":
        probe = dict(probe_S=setting.probe_S, probe_y=setting.probe_y, probe_M=setting.probe_M)
    cf = crossfit(S, y, M, method=config.method, n_folds=config.n_folds, seed=config.seed,
                  vote_rounds=config.vote_rounds, n_calib=config.n_calib, **probe)
    est = cf.as_kwargs()
    out: dict[str, P.PolicyOutcome] = {}
    extras: dict = {}
    tpm_source = ""
    for name in policies:
        if name == "No repair":
            out[name] = P.no_repair(S)
        elif name == "Majority stopping":
            out[name] = P.majority_stop(S, M)
        elif name == "ConfStop":
            out[f"ConfStop-{config.conf_tau:g}"] = P.conf_stop(S, M, config.conf_tau)
        elif name == "Fixed":
            for k in config.fixed_ks:
                if k <= k_max:
                    out[f"Fixed K={k}"] = P.fixed_k(S, k)
        elif name == "Accepted-first":
            out[name] = P.accepted_first(S, M)
        elif name == "Last-accepted":
            out[name] = P.last_accepted(S, M)
        elif name == "Verifier-best":
            out[name] = P.verifier_best(S)
        elif name == "VRR-Stop":
            out[name] = P.vrr_stop(S, M, tau=config.tau, **est)
        elif name == "VRR-Guard":
            out[name] = P.vrr_guard(S, config.delta)
        elif name == "Algorithm 1":
            _, radius = error_radius(S, M, est, crossfit_intervals(cf, config.eta))
            stop_mode, diags = _j_stop_mode(setting, cf.folds, config)
            extras["j_diagnostic_per_fold"] = diags
            extras["error_radius_mean"] = float(radius.mean())
            out[name] = P.algorithm1(S, M, radius=radius, stop_mode=stop_mode, delta=config.delta,
                                     tau=config.tau, **est)
        elif name == TPM:
            params, tpm_source = _tpm_params(setting, config)
            out[name] = P.vrr_stop(S, M, tau=config.tau, **params)
        elif name == "Hindsight best":
            out[name] = P.hindsight_best(y)
        else:
            raise ValueError(f"unknown policy {name!r}; known: {DEFAULT_POLICIES}")
    validity = {k: o.validity(y) for k, o in out.items()}
    return ReplayResult(setting.name, config, out, validity, cf, tpm_source, extras)
