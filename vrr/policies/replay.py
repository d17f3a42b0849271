"""Replay of stopping policies over a setting's frozen trajectories under cross-fitting
(Sec. 5.1 protocol; App. B "Calibration protocol and cross-fitting").

``replay`` calibrates once per fold, runs every requested policy vectorized over instances,
and returns per-instance outcomes (for paired tests) plus the summary V, <K>.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from . import rules as P
from ..common.npzio import write_npz
from ..common.jsonio import json_default, read_json
from ..calibration.estimators import CrossFit, EstimatorOptions, crossfit
from ..data.contract import Setting
from ..calibration.identifiability import labeled_j_diagnostic
from ..calibration.estimators import MIN_VOTES, PROBE_METHODS
from .mode import algorithm1_mode, labeled_replay, paper_mode
from ..settings import reads_probe

TPM = "TPM reference"


@dataclass(frozen=True)
class ReplayConfig:
    """Hyperparameters of a replay (App. B "Hyperparameters"; defaults are the paper's)."""

    n_folds: int = 5
    seed: int = 0
    method: str = "binomial_em"        # vote-noise estimator: vrr.settings.CALIBRATION_METHODS
    vote_rounds: str = "first"         # EM input: round-0 votes ("first"), all rounds, or the probe
    likelihood: str = "binomial"       # Eq. 5's vote likelihood: vrr.settings.CALIBRATION_LIKELIHOODS
    n_calib: int | None = None         # subsample the calibration folds (App. I ablation)
    max_pairs: int | None = 300        # labeled transition pairs behind alpha, beta (App. B)
    estimator: EstimatorOptions = EstimatorOptions()  # EM restarts, tolerance, iterations, BB cap
    delta: int = 5                     # VRR-Guard retention margin (Eq. 9)
    tau: float = 0.0                   # gain threshold (Eq. 7)
    fixed_ks: tuple[int, ...] = (1, 3, 5)
    conf_tau: float = 0.85             # ConfStop threshold
    eta: float = 0.05                  # error-radius coverage (Prop. 1)
    j_min: float = 0.10                # Algorithm 1 mode switch
    tpm: str = "auto"                  # "true" (simulated meta), "labeled" (cross-fit labeled MLE), or "auto"

    def __post_init__(self) -> None:
        from ..calibration.correlated import check_likelihood

        check_likelihood(self.likelihood)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_setting(cls, cfg: dict, **params) -> "ReplayConfig":
        """The calibration fields from a setting's ``calibration`` block; ``params`` set the others
        (and may override a calibration field); a ``None`` value keeps the setting's."""
        cal = cfg["calibration"]
        base = dict(n_folds=cal["n_folds"], method=cal["method"], vote_rounds=cal["vote_rounds"],
                    likelihood=cal.get("likelihood", "binomial"), max_pairs=cal["max_pairs"],
                    estimator=EstimatorOptions.from_setting(cal))
        base.update({k: v for k, v in params.items() if v is not None})
        return cls(**base)

    @classmethod
    def from_dict(cls, data: dict) -> "ReplayConfig":
        data = dict(data)
        data["estimator"] = EstimatorOptions(**data.get("estimator", {}))
        data["fixed_ks"] = tuple(data.get("fixed_ks", cls.fixed_ks))
        return cls(**data)

    def with_policy(self, **params) -> "ReplayConfig":
        """A copy with policy parameters changed; the calibration fields stay as calibrated."""
        clash = sorted(set(params) & set(CALIBRATION_FIELDS))
        if clash:
            raise ValueError(f"{clash[0]} is a calibration field: set it in 03_calibrate (or the setting)")
        return replace(self, **params)


CALIBRATION_FIELDS = ("n_folds", "seed", "method", "vote_rounds", "likelihood", "n_calib", "max_pairs", "estimator")


@dataclass
class ReplayResult:
    """Per-instance outcomes of every replayed policy with the cross-fit calibration behind them (Sec. 5.1)."""

    setting: str
    config: ReplayConfig
    outcomes: dict[str, P.PolicyOutcome]
    validity: dict[str, np.ndarray]
    calibration: CrossFit
    tpm_source: str
    extras: dict = field(default_factory=dict)
    verifier_calls: dict[str, np.ndarray] = field(default_factory=dict)  # per instance, fixed-M counting


def _tpm_uses_truth(setting: Setting, config: ReplayConfig) -> bool:
    truth = setting.meta.get("true_params")
    if config.tpm == "true" and not truth:
        raise ValueError(f"setting {setting.name}: tpm='true' needs meta['true_params']")
    return config.tpm == "true" or (config.tpm == "auto" and bool(truth))


def _tpm_crossfit(setting: Setting, config: ReplayConfig) -> CrossFit:
    """The labeled oracle: labeled MLE on all rounds of the other folds, same fold split, under the config's vote
    likelihood (with beta_binomial, each class's phi too)."""
    return crossfit(setting.S, setting.y, setting.M, method="labeled_mle", n_folds=config.n_folds,
                    seed=config.seed, vote_rounds="all", max_pairs=None, likelihood=config.likelihood)


def _true_correlations(setting: Setting, config: ReplayConfig) -> dict:
    """The simulation's true phi0 = phi1 under the exchangeable-vote likelihood: 1 / (c + 1) for a judge of
    concentration c (``vrr.data.simulate``), 0 for independent votes; nothing under the binomial."""
    if config.likelihood == "binomial":
        return {}
    c = setting.meta.get("judge_concentration")
    phi = 0.0 if c is None else 1.0 / (float(c) + 1.0)
    return {"phi0": phi, "phi1": phi}


def _tpm_params(setting: Setting, config: ReplayConfig) -> tuple[dict, str]:
    if _tpm_uses_truth(setting, config):
        truth = setting.meta["true_params"]
        return ({**{k: float(truth[k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")},
                 **_true_correlations(setting, config)}, "true parameters")
    return _tpm_crossfit(setting, config).as_kwargs(), "labeled estimates (cross-fit)"


def _tpm_round_params(setting: Setting, config: ReplayConfig) -> tuple[dict, str]:
    """TPM-t's parameters: VRR-Stop-t's oracle. With the simulation's truth, the true rho0, rho1, pi and its
    round-dependent alpha_t, beta_t schedule (stationary alpha, beta where it has none); on real data the
    labeled cross-fit rho0, rho1, pi with alpha_t, beta_t from every round's labeled pairs of the other folds
    (``crossfit_round_rates`` on the labeled oracle's folds, all pairs)."""
    n, rounds = setting.S.shape
    if _tpm_uses_truth(setting, config):
        truth, meta = setting.meta["true_params"], setting.meta
        if meta.get("alpha_t") is not None:
            a, b = (np.tile(np.append(meta[k], meta[k][-1]), (n, 1)) for k in ("alpha_t", "beta_t"))
        else:
            a, b = (np.full((n, rounds), float(truth[k])) for k in ("alpha", "beta"))
        return {"rho0": float(truth["rho0"]), "rho1": float(truth["rho1"]), "pi": float(truth["pi"]),
                "alpha_t": a, "beta_t": b, **_true_correlations(setting, config)}, "true parameters"
    from ..calibration.round_dynamics import crossfit_round_rates
    cf = _tpm_crossfit(setting, config)
    est = cf.as_kwargs()
    a, b, _ = crossfit_round_rates(setting.y, cf, max_pairs=None, seed=config.seed)
    phi = {k: est[k] for k in ("phi0", "phi1") if k in est}
    return {"rho0": est["rho0"], "rho1": est["rho1"], "pi": est["pi"], "alpha_t": a, "beta_t": b, **phi}, \
        "labeled estimates (cross-fit, per round)"


def j_diagnostic(setting: Setting, folds: np.ndarray, fold: int | None, config: ReplayConfig) -> float:
    """Algorithm 1 line 1: the held-out labeled J-hat of one fold (Sec. 4.3): on the probe when it has
    labels, else on the round-0 votes of the fold's training instances (all instances for ``fold=None``).
    NaN when a class is absent (separation cannot be shown)."""
    if setting.probe_S is not None and setting.probe_y is not None:
        S, y, M = setting.probe_S, setting.probe_y, setting.probe_M
    else:
        train = np.ones(setting.S.shape[0], dtype=bool) if fold is None else folds != fold
        S, y, M = setting.S[train, 0], setting.y[train, 0], setting.M
    try:
        return labeled_j_diagnostic(S, y, M, n_resamples=200, seed=config.seed).j_hat
    except ValueError:  # one class absent: separation cannot be shown
        return float("nan")


def fold_check(setting: Setting, cf: CrossFit, fold: int | None, config: ReplayConfig, fit=None) -> dict | None:
    """The calibration checks of one fold's calibration sample (``fold=None``: all instances, ``fit`` their
    calibration): the label-free EM on its training instances' round-0 votes against the labeled probe, as the
    decision check (``vrr.calibration.decision_check.checked_record``, its verdict) with the Wald check
    (``vrr.calibration.check``) as a diagnostic. The check the fold's fit already ran (``semisupervised_checked``,
    ``ppi``) is reused. None where there is nothing to check against (no labeled probe) or the label-free EM is not
    identifiable (M < 3)."""
    if fold is not None and cf.fits[fold].check is not None:
        return cf.fits[fold].check
    if setting.probe_S is None or setting.probe_y is None or setting.M < MIN_VOTES["binomial_em"]:
        return None
    from ..calibration.check import calibration_check

    train = np.ones(setting.S.shape[0], dtype=bool) if fold is None else cf.folds != fold
    opts = config.estimator
    seed = config.seed + (0 if fold is None else fold)
    from ..calibration.decision_check import checked_record

    wald = calibration_check(setting.S[train, 0], setting.M, setting.probe_S, setting.probe_y, setting.probe_M,
                             level=opts.check_level, n_boot=opts.check_replicates, seed=seed,
                             em_restarts=opts.em_restarts, em_tol=opts.em_tol, em_max_iter=opts.em_max_iter).as_dict()
    p = (cf.fits[fold] if fit is None else fit).params
    return checked_record(wald, setting.S[train], setting.M, p.alpha, p.beta, p.pi)


def fold_parameter_draws(setting: Setting, cf: CrossFit, fold: int | None, config: ReplayConfig,
                         point=None) -> dict[str, np.ndarray]:
    """The bootstrap draws behind B_k for one fold's calibration sample, {name: [B]}
    (:func:`vrr.calibration.gain_radius.parameter_draws` of the fold's training instances with the fold's fit as
    the point; ``fold=None``: all instances, ``point`` their fit). Replay's per-instance draws and the online
    controller's are these."""
    from ..calibration.gain_radius import parameter_draws

    train = np.ones(setting.S.shape[0], dtype=bool) if fold is None else cf.folds != fold
    return parameter_draws(setting.S[train], setting.y[train], setting.M, seed=config.seed + (0 if fold is None else fold),
                           method=config.method, vote_rounds=config.vote_rounds, max_pairs=config.max_pairs,
                           options=config.estimator, point=cf.fits[fold] if fold is not None else point,
                           likelihood=config.likelihood, **probe_kwargs(setting, config))


def algorithm1_inputs(setting: Setting, cf: CrossFit, config: ReplayConfig) -> dict:
    """What Algorithm 1 needs besides the point estimates, per instance under cross-fitting: G-hat and the
    bootstrap error radii above and below G-hat (``g_hat``, ``radius``, ``radius_low``, [N, K+1];
    ``vrr.calibration.gain_radius``) from the folds' parameter draws (``draws``, {name: [B, N]},
    :func:`fold_parameter_draws`), each fold's J-hat and calibration check (``j_per_fold``, ``checks``), the mode
    and its reason per fold (``modes``; :func:`vrr.policies.mode.algorithm1_mode`) and per instance
    (``stop_mode``)."""
    from ..calibration.gain_radius import bootstrap_radius, instance_draws, parameter_draws_folds

    S, M = setting.S, setting.M
    # every fold's fold_parameter_draws, their refits run as one batch
    per_fold = parameter_draws_folds(S, setting.y, M, cf.folds, seed=config.seed, method=config.method,
                                     vote_rounds=config.vote_rounds, max_pairs=config.max_pairs,
                                     options=config.estimator, points=cf.fits, likelihood=config.likelihood,
                                     **probe_kwargs(setting, config))
    draws = instance_draws(cf.folds, per_fold)
    g_hat, radius_low, radius = bootstrap_radius(S, M, cf.as_kwargs(), draws, config.eta)
    if setting.probe_S is not None and setting.probe_y is not None:   # J-hat on the probe: the same for every fold
        diags = [j_diagnostic(setting, cf.folds, 0, config)] * config.n_folds
    else:
        diags = [j_diagnostic(setting, cf.folds, f, config) for f in range(config.n_folds)]
    checks = [fold_check(setting, cf, f, config) for f in range(config.n_folds)]
    modes = [paper_mode(j, config.j_min) for j in diags]
    stop_mode = np.array([m == "stop" for m, _ in modes])[cf.folds]
    return {"g_hat": g_hat, "radius": radius, "radius_low": radius_low, "stop_mode": stop_mode, "j_per_fold": diags,
            "checks": checks, "modes": modes, "draws": draws}


def algorithm1_fold_plan(setting: Setting, fit, check: dict | None, j_hat: float, train: np.ndarray,
                         config: ReplayConfig) -> dict:
    """Algorithm 1 as deployed on one calibration sample (the instances ``train`` and their ``fit``): the rates it
    decides with, the decision check behind them, the labeled replay of both modes and the mode.

    ``check`` is the fold's checks record (:func:`fold_check`); where its decision check
    (``vrr.calibration.decision_check``) rejects, the labeled probe's rates decide (the checked calibration already
    fit them; any other method's rates are replaced here, under the binomial likelihood). Both modes are then
    replayed on the sample's labeled trajectories with those rates (:func:`vrr.policies.mode.labeled_replay`),
    and the mode is :func:`vrr.policies.mode.algorithm1_mode`'s. Returns ``params`` (keyword arguments of
    ``rules.algorithm1``), ``decision_check``, ``replay``, ``labeled_rates``, ``mode`` and ``reason``."""
    S, y, M = setting.S[train], setting.y[train], setting.M
    names = ("rho0", "rho1", "alpha", "beta", "pi") + (("phi0", "phi1") if config.likelihood != "binomial" else ())
    fitted = fit.as_kwargs()
    params = {name: float(fitted[name]) for name in names}
    labeled = config.method == "labeled_mle"
    decision = None if check is None else check.get("decision")
    if decision is not None and not decision["passed"]:
        labeled = True
        if config.method not in ("semisupervised_checked", "ppi") and config.likelihood == "binomial":
            # the checked calibration already fit the labels where it rejects, and PPI++'s rates are anchored to
            # them; any other switches here
            params.update(rho0=float(check["rho0_labeled"]), rho1=float(check["rho1_labeled"]))
    replayed = labeled_replay(S, y, M, params, config.delta, config.tau)
    mode, reason = algorithm1_mode(j_hat, config.j_min, decision, replay=replayed, labeled_rates=labeled)
    return {"params": params, "decision_check": decision, "replay": replayed, "labeled_rates": labeled,
            "mode": mode, "reason": reason}


def algorithm1_plan(setting: Setting, cf: CrossFit, config: ReplayConfig, checks: list | None = None,
                    diags: list | None = None) -> dict:
    """:func:`algorithm1_fold_plan` of every cross-fit fold (each fold's calibration, check and J-hat, on its
    training instances), mapped to the instances: ``params`` (per-instance keyword arguments of
    ``rules.algorithm1``), ``stop_mode`` [N], and per fold ``decision_checks``, ``replays``, ``modes``."""
    n_folds = len(cf.fits)
    if checks is None:
        checks = [fold_check(setting, cf, f, config) for f in range(n_folds)]
    if diags is None:
        diags = [j_diagnostic(setting, cf.folds, f, config) for f in range(n_folds)]
    plans = [algorithm1_fold_plan(setting, fit, checks[f], diags[f], cf.folds != f, config)
             for f, fit in enumerate(cf.fits)]
    params = {name: np.array([p["params"][name] for p in plans])[cf.folds] for name in plans[0]["params"]}
    stop_mode = np.array([p["mode"] == "stop" for p in plans])[cf.folds]
    return {"params": params, "stop_mode": stop_mode, "decision_checks": [p["decision_check"] for p in plans],
            "replays": [p["replay"] for p in plans], "labeled_rates": [p["labeled_rates"] for p in plans],
            "modes": [(p["mode"], p["reason"]) for p in plans], "j_per_fold": diags, "checks": checks}

LABEL_FREE = "VRR-Stop (label-free EM)"
ALGORITHM1_PAPER = "Algorithm 1 (paper)"
DEFAULT_POLICIES = ("No repair", "Majority stopping", "ConfStop", "Fixed", "Accepted-first",
                    "Last-accepted", "Verifier-best", "VRR-Stop", LABEL_FREE, "VRR-Guard", "Algorithm 1",
                    ALGORITHM1_PAPER, TPM, "Hindsight best")
# replayed on request (``policies=DEFAULT_POLICIES + EXTRA_POLICIES``): VRR-Stop with round-dependent
# alpha_t, beta_t (vrr.calibration.round_dynamics; vrr.report.table_round_dynamics)
EXTRA_POLICIES = ("VRR-Stop-t", "TPM-t")


def probe_kwargs(setting: Setting, config: ReplayConfig) -> dict:
    """The probe arrays, when the vote-noise fit uses the probe (``vote_rounds="probe"``, or the semi-supervised
    EM, whose labeled plans are the probe's)."""
    if reads_probe(config.method, config.vote_rounds):
        return dict(probe_S=setting.probe_S, probe_y=setting.probe_y, probe_M=setting.probe_M)
    return {}


def fit_calibration(setting: Setting, config: ReplayConfig) -> CrossFit:
    """The cross-fitted calibration of a setting under ``config`` (Sec. 4.2, App. B)."""
    probe = probe_kwargs(setting, config)
    return crossfit(setting.S, setting.y, setting.M, method=config.method, n_folds=config.n_folds, seed=config.seed,
                    vote_rounds=config.vote_rounds, n_calib=config.n_calib, max_pairs=config.max_pairs,
                    options=config.estimator, likelihood=config.likelihood, **probe)


def replay(setting: Setting, config: ReplayConfig = ReplayConfig(),
           policies: tuple[str, ...] = DEFAULT_POLICIES, calibration: CrossFit | None = None) -> ReplayResult:
    """Run the policies on one setting (App. A definitions, App. B cross-fitting).

    ``calibration``: the cross-fit saved by 03_calibrate (``load_calibration``); without it the
    calibration is fit here with ``config``. ``config.likelihood="beta_binomial"``: every filtering policy
    (VRR-Stop, its variants, Algorithm 1 and its radius, the TPM reference) updates beliefs by Eq. 5 with the
    exchangeable-vote likelihood, with phi0, phi1 from the same calibration.
    """
    S, y, M = setting.S, setting.y, setting.M
    k_max = setting.k_max
    if calibration is not None and calibration.folds.shape != (S.shape[0],):
        raise ValueError(f"setting {setting.name}: the calibration has {calibration.folds.size} instances, "
                         f"the arrays {S.shape[0]}")
    cf = calibration if calibration is not None else fit_calibration(setting, config)
    if cf.likelihood != config.likelihood:
        raise ValueError(f"setting {setting.name}: the calibration was fit under the {cf.likelihood!r} vote "
                         f"likelihood, the config asks for {config.likelihood!r}")
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
        elif name == LABEL_FREE:
            # the paper's label-free EM beside the configured calibration, where that EM applies
            if config.method in PROBE_METHODS + ("binomial_em",) and M >= MIN_VOTES["binomial_em"]:
                free = cf if config.method == "binomial_em" else fit_calibration(
                    setting, replace(config, method="binomial_em"))
                out[name] = P.vrr_stop(S, M, tau=config.tau, **free.as_kwargs())
        elif name == "VRR-Guard":
            out[name] = P.vrr_guard(S, config.delta)
        elif name == "Algorithm 1":
            plan = algorithm1_plan(setting, cf, config, checks=extras.get("calibration_check_per_fold"),
                                   diags=extras.get("j_diagnostic_per_fold"))
            extras["j_diagnostic_per_fold"] = plan["j_per_fold"]
            extras["calibration_check_per_fold"] = plan["checks"]
            extras["decision_check_per_fold"] = plan["decision_checks"]
            extras["labeled_replay_per_fold"] = plan["replays"]
            extras["algorithm1_mode_per_fold"] = [{"mode": m, "reason": r} for m, r in plan["modes"]]
            out[name] = P.algorithm1(S, M, stop_mode=plan["stop_mode"], delta=config.delta, tau=config.tau,
                                     **plan["params"])
        elif name == ALGORITHM1_PAPER:
            alg = algorithm1_inputs(setting, cf, config)
            extras["j_diagnostic_per_fold"] = alg["j_per_fold"]
            extras["calibration_check_per_fold"] = alg["checks"]
            extras["algorithm1_paper_mode_per_fold"] = [{"mode": m, "reason": r} for m, r in alg["modes"]]
            half = (alg["radius"] + alg["radius_low"]) / 2.0
            extras["error_radius_mean"] = float(half.mean())
            extras["error_radius_median"] = float(np.median(half))
            out[name] = P.algorithm1_paper(S, M, radius=alg["radius"], radius_low=alg["radius_low"],
                                           stop_mode=alg["stop_mode"], delta=config.delta, tau=config.tau, **est)
        elif name == "VRR-Stop-t":
            from ..calibration.round_dynamics import crossfit_round_rates
            alpha_t, beta_t, fits = crossfit_round_rates(y, cf, max_pairs=config.max_pairs, seed=config.seed)
            extras["round_rates_per_fold"] = [f.as_dict() for f in fits]
            out[name] = P.vrr_stop_t(S, M, est["rho0"], est["rho1"], alpha_t, beta_t, est["pi"], tau=config.tau,
                                     phi0=est.get("phi0"), phi1=est.get("phi1"))
        elif name == "TPM-t":
            params, extras["tpm_t_source"] = _tpm_round_params(setting, config)
            out[name] = P.vrr_stop_t(S, M, tau=config.tau, **params)
        elif name == TPM:
            params, tpm_source = _tpm_params(setting, config)
            out[name] = P.vrr_stop(S, M, tau=config.tau, **params)
        elif name == "Hindsight best":
            out[name] = P.hindsight_best(y)
        else:
            raise ValueError(f"unknown policy {name!r}; known: {DEFAULT_POLICIES + EXTRA_POLICIES}")
    validity = {k: o.validity(y) for k, o in out.items()}
    calls = {k: o.verifier_calls(M) for k, o in out.items()}
    return ReplayResult(setting.name, config, out, validity, cf, tpm_source, extras, calls)


# ---------------------------------------------------------------- the replay file (04 -> 05)
def save_replay(path: str | os.PathLike, result: ReplayResult) -> Path:
    """Per-instance outcomes of every policy, [P, N] arrays, for paired tests downstream."""
    names = list(result.outcomes)
    arrays = {
        "committed": np.stack([result.outcomes[k].committed for k in names]),
        "rounds_used": np.stack([result.outcomes[k].rounds_used for k in names]),
        "validity": np.stack([result.validity[k] for k in names]),
        "verifier_calls": np.stack([result.verifier_calls[k] for k in names]),
        "folds": result.calibration.folds,
        "meta": np.asarray(json.dumps({"policies": names, "setting": result.setting,
                                       "config": result.config.as_dict(), "tpm_source": result.tpm_source,
                                       "extras": result.extras}, default=json_default)),
    }
    return write_npz(path, arrays)


def load_replay(path: str | os.PathLike) -> dict:
    """Inverse of ``save_replay``: {"policies", "validity": {name: [N]}, "rounds_used", "committed",
    "verifier_calls", ...}; a key the file does not hold is left out."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: replay file missing (run 04_replay first)")
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        names = meta["policies"]
        keys = [k for k in ("committed", "rounds_used", "validity", "verifier_calls") if k in z.files]
        out = {key: {n: z[key][i] for i, n in enumerate(names)} for key in keys}
        out.update(meta)
        out["folds"] = z["folds"]
    return out


# ---------------------------------------------------------------- the calibration file (03 -> 04)
def load_calibration(path: str | os.PathLike) -> tuple[CrossFit, ReplayConfig]:
    """The cross-fitted calibration 03_calibrate saved (``calibration.json``) and the config it was
    fit with; 04_replay replays with exactly these parameters (``config.with_policy(...)``)."""
    data = read_json(path)
    for key in ("crossfit", "config"):
        if key not in data:
            raise ValueError(f"{path}: field '{key}': missing (written by an older 03_calibrate; rerun it)")
    try:
        config = ReplayConfig.from_dict(data["config"])
    except TypeError as exc:
        raise ValueError(f"{path}: field 'config': {exc}") from exc
    return CrossFit.from_dict(data["crossfit"], source=str(path)), config


# ---------------------------------------------------------------- the online controller's parameters
def controller_parameters(path: str | os.PathLike, fold: int | None = None, arrays=None,
                          policy: str = "algorithm1", **options) -> dict:
    """Keyword arguments of ``OnlineController`` from a saved calibration (Sec. 4.2; Algorithm 1 inputs).

    ``fold``: that cross-fit fold's parameters, bootstrap draws behind B_k (:func:`fold_parameter_draws`), J-hat
    and calibration check (:func:`fold_check`), exactly what replay uses for the fold's instances; ``None``:
    refit on all calibration instances with the saved config (deployment). ``arrays``: a ``Setting`` or the path
    of its ``arrays.npz`` (default: the file the calibration names in ``arrays_path``, looked up as given and
    under the repository). Without arrays (``arrays=False`` or none found) only ``fold`` works, J-hat is the saved
    probe diagnostic, the check the fold's saved one, and Algorithm 1 needs its ``draws`` given (they resample
    the calibration instances). ``options`` override the saved config (``delta``, ``tau``, ``j_min``, ``eta``)
    or pass through to the controller (``M``, ``k_max``, ``draws``, ``j_hat``, ...).
    """
    from ..calibration.estimators import calibrate
    from ..common.paths import REPO_ROOT
    from ..data.contract import load_setting

    path = Path(path)
    cf, config = load_calibration(path)
    if config.likelihood != "binomial":
        raise ValueError(f"{path}: field 'config.likelihood': the online controller filters votes with the binomial "
                         f"likelihood of Eq. 5; this calibration was fit under {config.likelihood!r}")
    saved = read_json(path)
    config = config.with_policy(**{k: options.pop(k) for k in ("delta", "tau", "j_min", "eta") if k in options})
    setting = arrays if isinstance(arrays, Setting) else None
    if setting is None and arrays is not False:
        candidates = [Path(arrays)] if arrays is not None else (
            [Path(saved["arrays_path"]), REPO_ROOT / saved["arrays_path"]] if saved.get("arrays_path") else [])
        found = [c for c in candidates if c.is_file()]
        if arrays is not None and not found:
            raise FileNotFoundError(f"{arrays}: arrays file not found (for the calibration {path})")
        setting = load_setting(found[0]) if found else None
    if fold is not None and not 0 <= fold < len(cf.fits):
        raise ValueError(f"{path}: field 'crossfit.fits': fold {fold} outside 0..{len(cf.fits) - 1}")
    if setting is not None and setting.S.shape[0] != cf.folds.size:
        raise ValueError(f"{path}: field 'crossfit.folds': {cf.folds.size} instances, the arrays have "
                         f"{setting.S.shape[0]}")
    out = {"policy": policy, "delta": config.delta, "tau": config.tau, "j_min": config.j_min, "eta": config.eta,
           "source": str(path) if fold is None else f"{path} (fold {fold})"}
    wants_mode = policy == "algorithm1" and "stop_mode" not in options
    if setting is not None:
        out.update(M=setting.M, k_max=setting.k_max)
        if fold is None:
            fit = calibrate(setting.S, setting.y, setting.M, seed=config.seed, method=config.method,
                            vote_rounds=config.vote_rounds, max_pairs=config.max_pairs, options=config.estimator,
                            **probe_kwargs(setting, config))
        else:
            fit = cf.fits[fold]
        out.update(fit.params.as_dict())
        if policy == "algorithm1" and "draws" not in options:
            draws = fold_parameter_draws(setting, cf, fold, config, point=fit)
            out["draws"] = {name: [float(v) for v in d] for name, d in draws.items()}
        if wants_mode and "j_hat" not in options:
            out["j_hat"] = j_diagnostic(setting, cf.folds, fold, config)
        if wants_mode and "check" not in options:
            out["check"] = fit.check if fit.check is not None else fold_check(setting, cf, fold, config, fit=fit)
        if wants_mode and "mode_evidence" not in options:
            # Algorithm 1's mode and rates as replay runs them (algorithm1_fold_plan) on the calibration instances
            train = np.ones(setting.S.shape[0], dtype=bool) if fold is None else cf.folds != fold
            plan = algorithm1_fold_plan(setting, fit, out.get("check"), out.get("j_hat", options.get("j_hat")),
                                        train, config)
            out.update({k: plan["params"][k] for k in ("rho0", "rho1")})
            out["mode_evidence"] = {"labeled_rates": plan["labeled_rates"], "replay": plan["replay"]}
    else:
        if fold is None:
            raise ValueError(f"{path}: field 'arrays_path': refitting on all instances needs the setting's "
                             "arrays; pass arrays=... or fold=<i> to use one cross-fit fold")
        fit = cf.fits[fold]
        out.update(fit.params.as_dict())
        if policy == "algorithm1" and "draws" not in options:
            raise ValueError(f"{path}: field 'arrays_path': Algorithm 1's error radius B_k resamples the "
                             "calibration instances; pass the arrays, draws=..., or policy='vrr_stop'")
        if wants_mode and "j_hat" not in options:
            probe = saved.get("probe") or {}
            if "j_hat" not in probe:
                raise ValueError(f"{path}: field 'probe.j_hat': no saved J diagnostic; pass the arrays or j_hat")
            out["j_hat"] = float(probe["j_hat"])
        if wants_mode and "check" not in options:
            out["check"] = fit.check
    out.update(options)
    for name in ("M", "k_max"):
        if name not in out:
            raise ValueError(f"{path}: field 'arrays_path': without the arrays, pass {name}=... (the loop's budget)")
    return out
