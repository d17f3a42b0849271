"""Calibration estimators and cross-fitting (Sec. 4.2; App. A "Calibration Estimators";
App. B "Calibration protocol and cross-fitting"; App. E/I for the beta-binomial variant).

Vote-noise estimators (rho0, rho1) from acceptance counts S of M votes:
  * ``binomial_mixture_em``   label-free two-component binomial-mixture EM, random restarts,
                              highest log-likelihood kept, "higher-acceptance component = valid";
  * ``method_of_moments``     closed-form two-point mixture from the first three factorial moments;
  * ``labeled_mle``           per-class acceptance frequencies on labeled plans;
  * ``beta_binomial_em``      mixture of two beta-binomials with capped over-dispersion;
  * ``semisupervised_em``     the binomial mixture fit to unlabeled counts and the labeled probe together
                              (``vrr.calibration.semisupervised``);
  * ``semisupervised_checked`` the semi-supervised EM where the calibration check (``vrr.calibration.check``)
                              finds the label-free EM in agreement with the probe's labels, the probe's labeled
                              MLE alone where it rejects: there the unlabeled votes do not follow the binomial
                              mixture, and pooling them pulls the rates away from the labels (the decision
                              check, ``vrr.calibration.decision_check``, decides);
  * ``ppi``                   PPI++ (``vrr.calibration.ppi``): the label-free EM's posterior predicts the rates
                              on the window's votes and the labeled probe corrects the prediction; the default
                              where a window has a labeled probe (``vrr.settings.DEFAULT_CALIBRATION_METHOD``).
Each of these but ``mom`` and ``ppi`` has an exchangeable-vote (beta-binomial) counterpart for Eq. 5 with
correlated votes (``likelihood="beta_binomial"``; ``vrr.calibration.correlated``), which also fits the
intra-plan vote correlations phi0, phi1.
Repair transitions (alpha, beta) are frequencies on labeled first-round before/after pairs
(at most 300), and the prior pi is the validity rate of initial plans. ``crossfit`` fits all of
them on four folds and applies them to the fifth, so no decision touches its own label.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import special

from ..core.model import NoiseParams
from ..settings import BINOMIAL_ONLY_METHODS, CALIBRATION_METHODS as VOTE_METHODS
from ..settings import PROBE_CALIBRATION_METHODS as PROBE_METHODS  # the methods that read the labeled probe
from ._memo import memoized
from .check import calibration_check
from .mixture import (MIN_VOTES, VoteNoiseFit, _binom_logpmf_table, _em_restarts, _em_starts,  # noqa: F401
                      _hist_loglik, _histogram, _hists_loglik, _require_votes, _responsibilities, best_rates,
                      best_restart, binomial_em_chains, binomial_mixture_em, binomial_mixture_em_each,
                      binomial_mixture_em_many, em_step, labeled_mle, mixture_loglik, vote_histograms)

MAX_TRANSITION_PAIRS = 300


@dataclass(frozen=True)
class EstimatorOptions:
    """Settings of the iterative vote-noise estimators (a setting's ``calibration`` block).

    Defaults are the paper's: 10 EM restarts (App. B "Hyperparameters"), the beta-binomial
    over-dispersion cap phi <= 0.3 (App. I).
    """

    em_restarts: int = 10
    em_tol: float = 1e-10
    em_max_iter: int = 2000
    bb_phi_cap: float = 0.3
    bb_restarts: int = 8
    check_level: float = 0.05      # the calibration check's level (vrr.calibration.check)
    check_replicates: int = 200    # its bootstrap replicates
    check_rule: str = "decision"   # which check's verdict chooses the checked fit: "decision" or "wald"

    @classmethod
    def from_setting(cls, calibration_block: dict) -> "EstimatorOptions":
        return cls(**{k: calibration_block[k] for k in ("em_restarts", "em_tol", "em_max_iter", "bb_phi_cap",
                                                          "bb_restarts", "check_level", "check_replicates")
                      if k in calibration_block})


@dataclass(frozen=True)
class TransitionFit:
    """alpha-hat, beta-hat from labeled pre/post-repair pairs (App. A), with their counts."""

    alpha: float
    beta: float
    n_fixed: int
    n_invalid_before: int
    n_broken: int
    n_valid_before: int


@dataclass(frozen=True)
class Calibration:
    """Everything VRR-Stop needs from one calibration sample.

    ``rules`` records, per parameter, which estimate was used: "fit" (the vote-noise estimator),
    "frequency" (k/n, the paper's), or "jeffreys" (the Jeffreys posterior mean (k + 1/2)/(n + 1),
    used where the frequency sits on the boundary or is undefined; see :func:`defined_rate`).
    """

    params: NoiseParams
    votes: VoteNoiseFit
    transitions: TransitionFit
    n_pi_valid: int
    n_pi: int
    M: int
    rules: dict = field(default_factory=dict)
    check: dict | None = None     # the decision check of ``semisupervised_checked`` and ``ppi`` (decision_check)
    likelihood: str = "binomial"  # Eq. 5's vote likelihood (vrr.settings.CALIBRATION_LIKELIHOODS)
    phi0: float | None = None     # intra-plan vote correlation of invalid / valid plans (likelihood beta_binomial)
    phi1: float | None = None

    def as_kwargs(self) -> dict[str, float]:
        """The filter's parameters (Eq. 5-7): rho0, rho1, alpha, beta, pi, and phi0, phi1 under the
        exchangeable-vote likelihood."""
        out = self.params.as_dict()
        if self.likelihood == "beta_binomial":
            out.update(phi0=self.phi0, phi1=self.phi1)
        return out


def method_of_moments(S, M: int) -> VoteNoiseFit:
    """Method of moments for the two-component binomial mixture (App. I, "MoM").

    The factorial moments m_r = E[S(S-1)...(S-r+1)] / (M(M-1)...(M-r+1)) equal the raw
    moments of the two-point mixing distribution {p0, p1}; p0, p1 are the roots of
    x^2 - c1 x + c0 with [m1 -1; m2 -m1][c1 c0]^T = [m2 m3]^T, and pi = (m1 - p0)/(p1 - p0).
    Needs M >= 3. When the sample is not over-dispersed relative to one binomial (mixing
    variance <= 0) or the roots leave [0, 1], there is no valid two-point solution and the fit
    falls back to p0 = p1 = m1 (J = 0).
    """
    _require_votes("mom", M)  # three factorial moments
    S = np.asarray(S, dtype=float).ravel()
    m1 = np.mean(S) / M
    m2 = np.mean(S * (S - 1)) / (M * (M - 1))
    m3 = np.mean(S * (S - 1) * (S - 2)) / (M * (M - 1) * (M - 2))
    det = m1 * m1 - m2                                 # = -Var of the mixing distribution
    p0 = p1 = float(m1)                                # degenerate fit: no separation
    w = 0.5
    if det < -1e-12:                                   # a two-point mixture needs Var > 0
        c1 = (m2 * m1 - m3) / det
        c0 = (m2 * m2 - m1 * m3) / det
        disc = c1 * c1 - 4 * c0
        if disc > 0:
            root = np.sqrt(disc)
            hi, lo = (c1 + root) / 2, (c1 - root) / 2
            if 0.0 <= lo < hi <= 1.0:                  # roots outside [0, 1]: moments inconsistent
                p1, p0 = float(hi), float(lo)
                w = float(np.clip((m1 - p0) / (p1 - p0), 0, 1))
    n = S.size
    return VoteNoiseFit(rho0=p0, rho1=1 - p1, weight_valid=w, votes_valid=M * n * w,
                        votes_invalid=M * n * (1 - w), method="mom")


def beta_binomial_em(S, M: int, phi_cap: float = 0.3, n_restarts: int = 8, seed: int = 0) -> VoteNoiseFit:
    """Capped beta-binomial mixture (App. E, App. I "BB-EM").

    Each class draws a per-plan acceptance rate from a Beta with mean mu_c and intra-plan
    correlation phi_c in (0, phi_cap]; the cap keeps one component from absorbing the whole
    spread of S. rho1 = 1 - mu_valid, rho0 = mu_invalid. The beta-binomial M-step has no closed
    form, so the mixture likelihood that EM climbs is maximized directly by Nelder-Mead over logit-scaled
    weight, means and correlations, on the histogram of S, from ``n_restarts`` seeded starts; the best is
    polished, and the higher-mean component is "valid". The simplex search is
    ``vrr.calibration.correlated.label_free_bb``, whose vertex order breaks ties the same way on every CPU
    (scipy's sorts its simplex with numpy's SIMD quicksort, which orders ties differently per CPU).
    """
    from .correlated import label_free_bb

    _require_votes("beta_binomial_em", M)
    return label_free_bb(S, M, phi_cap=phi_cap, n_restarts=n_restarts, seed=seed)


def fit_vote_noise(method: str, S, M: int, y=None, seed: int = 0,
                   options: EstimatorOptions = EstimatorOptions(), labeled=None,
                   likelihood: str = "binomial") -> VoteNoiseFit:
    """Dispatch to one of ``VOTE_METHODS``; ``labeled_mle`` needs labels ``y``; ``semisupervised_em`` takes ``S``
    as unlabeled counts and ``labeled = (S_l, y_l, M_l)``, the labeled plans that enter with their class fixed.

    ``likelihood="beta_binomial"``: the method's exchangeable-vote estimator (``vrr.calibration.correlated``),
    which also fits phi0, phi1."""
    if likelihood != "binomial":
        return fit_exchangeable_votes(method, S, M, y=y, seed=seed, options=options, labeled=labeled)
    if method == "semisupervised_em":
        from .semisupervised import semisupervised_em

        if labeled is None:
            raise ValueError("semisupervised_em needs labeled plans (a probe with labels)")
        S_l, y_l, M_l = labeled
        return semisupervised_em(S, M, S_l, y_l, int(M_l), n_restarts=min(options.em_restarts, 4), seed=seed,
                                 tol=options.em_tol, max_iter=options.em_max_iter)
    if method == "binomial_em":
        return binomial_mixture_em(S, M, n_restarts=options.em_restarts, seed=seed, tol=options.em_tol,
                                   max_iter=options.em_max_iter)
    if method == "mom":
        return method_of_moments(S, M)
    if method == "labeled_mle":
        if y is None:
            raise ValueError("labeled_mle needs labels y")
        return labeled_mle(S, y, M)
    if method == "beta_binomial_em":
        return beta_binomial_em(S, M, phi_cap=options.bb_phi_cap, n_restarts=options.bb_restarts, seed=seed)
    raise ValueError(f"unknown calibration method {method!r}; choose one of {VOTE_METHODS}")


def fit_exchangeable_votes(method: str, S, M: int, y=None, seed: int = 0,
                           options: EstimatorOptions = EstimatorOptions(), labeled=None) -> VoteNoiseFit:
    """The exchangeable-vote (beta-binomial) estimator of ``method``, with phi0, phi1: ``labeled_mle`` the
    per-class MLE (labels ``y``), ``binomial_em`` and ``beta_binomial_em`` the label-free capped mixture (App. I),
    ``semisupervised_em`` the mixture with the labeled plans ``labeled = (S_l, y_l, M_l)`` (vrr.calibration.correlated).
    ``semisupervised_checked`` is :func:`calibrate`'s: the check of the label-free binomial EM against the probe
    picks the semi-supervised fit (passed) or the probe's labeled fit (rejected), under either likelihood."""
    from .correlated import label_free_bb, labeled_bb_mle, semisupervised_bb

    if method == "labeled_mle":
        if y is None:
            raise ValueError("labeled_mle needs labels y")
        return labeled_bb_mle(S, y, M)
    if method in ("binomial_em", "beta_binomial_em"):
        return label_free_bb(S, M, phi_cap=options.bb_phi_cap, n_restarts=options.bb_restarts, seed=seed)
    if method == "semisupervised_em":
        if labeled is None:
            raise ValueError("semisupervised_em needs labeled plans (a probe with labels)")
        S_l, y_l, M_l = labeled
        return semisupervised_bb(S, M, S_l, y_l, int(M_l), n_restarts=min(options.em_restarts, 4), seed=seed)
    raise ValueError(f"calibration method {method!r} has no exchangeable-vote (beta_binomial) estimator; choose one of "
                     + ", ".join(m for m in VOTE_METHODS if m not in BINOMIAL_ONLY_METHODS))


def labeled_subset(n: int, max_labels: int | None, seed: int = 0) -> np.ndarray:
    """Indices of the labeled calibration instances: all of them, or a seeded random subset of
    ``max_labels`` (App. B: "The calibration stage uses at most 300 labeled samples")."""
    if max_labels is None or n <= max_labels:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_labels, replace=False))


def transition_rates(y_before, y_after, max_pairs: int | None = MAX_TRANSITION_PAIRS,
                     seed: int = 0) -> TransitionFit:
    """alpha-hat = freq(invalid -> valid), beta-hat = freq(valid -> invalid) (App. A).

    Uses at most ``max_pairs`` labeled pairs, a seeded random subset when there are more.
    A class with no pairs gives NaN for its rate.
    """
    yb = np.asarray(y_before).astype(bool).ravel()
    ya = np.asarray(y_after).astype(bool).ravel()
    if yb.shape != ya.shape:
        raise ValueError("transition_rates: y_before and y_after differ in length")
    keep = labeled_subset(yb.size, max_pairs, seed)
    yb, ya = yb[keep], ya[keep]
    n_inv, n_val = int((~yb).sum()), int(yb.sum())
    n_fix, n_break = int((~yb & ya).sum()), int((yb & ~ya).sum())
    alpha = n_fix / n_inv if n_inv else float("nan")
    beta = n_break / n_val if n_val else float("nan")
    return TransitionFit(alpha, beta, n_fix, n_inv, n_break, n_val)


def calibrate(S, y, M: int, method: str = "binomial_em", seed: int = 0,
              vote_rounds: str = "first", probe_S=None, probe_y=None, probe_M: int | None = None,
              max_pairs: int | None = MAX_TRANSITION_PAIRS,
              options: EstimatorOptions = EstimatorOptions(), votes: VoteNoiseFit | None = None,
              likelihood: str = "binomial") -> Calibration:
    """Fit (rho0, rho1, alpha, beta, pi) on one calibration sample (Sec. 4.2, App. A/B).

    ``S``, ``y``: [n, K+1] arrays of the calibration instances. Vote noise comes from the
    round-0 counts (``vote_rounds="first"``, the paper's choice), from all rounds (``"all"``),
    or from a separate probe (``"probe"``: ``probe_S`` with ``probe_M`` votes, labels
    ``probe_y`` for labeled MLE). ``method="semisupervised_em"`` fits the first/all-round counts as
    unlabeled and the labeled probe with its classes fixed. alpha, beta come from the (y_0, y_1) pairs,
    pi = mean y_0. ``likelihood="beta_binomial"``: Eq. 5 with exchangeable votes; the vote noise is the method's
    beta-binomial fit (``vrr.calibration.correlated``) and the calibration also carries phi0, phi1.
    ``votes``: the vote-noise fit, computed elsewhere (a batch of several samples' fits).
    """
    from .correlated import check_likelihood

    check_likelihood(likelihood)
    from . import inputs

    M = inputs.votes_per_plan(M, source="calibrate")
    S = inputs.accept_counts(S, M, source="calibrate")
    y = inputs.labels(y, source="calibrate")
    inputs.same_shape({"S": S, "y": y}, source="calibrate")
    if probe_S is not None:
        probe_M = inputs.votes_per_plan(probe_M, name="probe_M", source="calibrate")
        probe_S = inputs.accept_counts(probe_S, probe_M, name="probe_S", source="calibrate")
        if probe_y is not None:
            probe_y = inputs.labels(probe_y, name="probe_y", source="calibrate")
            inputs.same_shape({"probe_S": probe_S, "probe_y": probe_y}, source="calibrate")
    labeled = None
    check = None
    if method in PROBE_METHODS:
        if vote_rounds == "probe":
            raise ValueError(f"{method}: the unlabeled votes come from the window (vote_rounds 'first' or "
                             "'all'), the labeled ones from the probe")
        if probe_S is None or probe_y is None or probe_M is None:
            raise ValueError(f"{method} needs a labeled probe (probe_S, probe_y, probe_M)")
        labeled = (np.asarray(probe_S), np.asarray(probe_y), int(probe_M))
    if vote_rounds == "first":
        vS, vy, vM = S[:, 0], y[:, 0], M
    elif vote_rounds == "all":
        vS, vy, vM = S.ravel(), y.ravel(), M
    elif vote_rounds == "probe":
        if probe_S is None or probe_M is None:
            raise ValueError("vote_rounds='probe' needs probe_S and probe_M")
        vS, vy, vM = np.asarray(probe_S), probe_y, int(probe_M)
    else:
        raise ValueError(f"vote_rounds must be 'first', 'all' or 'probe', got {vote_rounds!r}")
    if S.shape[1] < 2:
        raise ValueError("calibrate: need at least one repair round to estimate alpha, beta")
    trans = transition_rates(y[:, 0], y[:, 1], max_pairs=max_pairs, seed=seed)
    pairs = labeled_subset(y.shape[0], max_pairs, seed)      # the same <= 300 labeled plans
    n_pi_valid, n_pi = int(y[pairs, 0].sum()), int(pairs.size)
    alpha, alpha_rule = defined_rate(trans.n_fixed, trans.n_invalid_before, unsafe=())
    beta, beta_rule = defined_rate(trans.n_broken, trans.n_valid_before, unsafe=(0.0,))
    pi, pi_rule = defined_rate(n_pi_valid, n_pi, unsafe=(0.0, 1.0))
    if method == "ppi" and likelihood != "binomial":
        raise ValueError("ppi: the PPI++ rates are those of Eq. 5's binomial likelihood; under 'beta_binomial' choose "
                         "one of " + ", ".join(m for m in VOTE_METHODS if m not in BINOMIAL_ONLY_METHODS))
    if method in ("semisupervised_checked", "ppi") and votes is None:
        # the decision check (vrr.calibration.decision_check): under semisupervised_checked it chooses, the
        # semi-supervised fit where the label-free rates leave VRR-Stop's decisions on the sample's trajectories as
        # the labels would, the probe's labels alone where they give up more than 2 pp; under ppi (whose rates the
        # labels already anchor) it is the record of whether the label-free EM could have been trusted. The Wald
        # check is kept as a diagnostic in both.
        from .decision_check import checked_record

        wald = calibration_check(vS, vM, *labeled, level=options.check_level, n_boot=options.check_replicates,
                                 seed=seed, em_restarts=options.em_restarts, em_tol=options.em_tol,
                                 em_max_iter=options.em_max_iter).as_dict()
        check = checked_record(wald, S, M, alpha, beta, pi)
        if options.check_rule == "wald":      # the Wald verdict decides (the calibration ablation's comparison row)
            check = {**check, "passed": check["wald_passed"], "verdict": wald["verdict"], "reason": wald["reason"],
                     "check": "wald"}
        elif options.check_rule != "decision":
            raise ValueError(f"calibrate: check_rule must be 'decision' or 'wald', got {options.check_rule!r}")
        if method == "ppi":
            from .ppi import ppi_vote_fit

            votes = ppi_vote_fit(vS, vM, *labeled, fit_vote_noise("binomial_em", vS, vM, seed=seed, options=options))
        else:
            votes = (fit_vote_noise("semisupervised_em", vS, vM, seed=seed, options=options, labeled=labeled,
                                    likelihood=likelihood) if check["passed"] else
                     fit_vote_noise("labeled_mle", labeled[0], labeled[2], y=labeled[1], likelihood=likelihood))
    if votes is None:  # (a bootstrap passes the vote-noise fits it computed for many samples at once)
        votes = fit_vote_noise(method, vS, vM, y=vy, seed=seed, options=options, labeled=labeled,
                               likelihood=likelihood)
    values, vote_rules = vote_parameters(votes, likelihood)
    rules = {"rho0": vote_rules["rho0"], "rho1": vote_rules["rho1"], "alpha": alpha_rule, "beta": beta_rule,
             "pi": pi_rule, **{k: v for k, v in vote_rules.items() if k.startswith("phi")}}
    params = NoiseParams(rho0=values["rho0"], rho1=values["rho1"], alpha=alpha, beta=beta, pi=pi)
    phi = {name: values.get(name) for name in ("phi0", "phi1")}
    return Calibration(params=params, votes=votes, transitions=trans, n_pi_valid=n_pi_valid, n_pi=n_pi, M=vM,
                       rules=rules, check=check, likelihood=likelihood, **phi)


def vote_parameters(votes: VoteNoiseFit, likelihood: str) -> tuple[dict[str, float], dict[str, str]]:
    """rho0, rho1 (and phi0, phi1 under the exchangeable-vote likelihood) of a vote-noise fit as a calibration
    takes them, with the rule behind each: an undefined rate (NaN: labeled MLE with no plan of the class) is the
    Jeffreys 1/2, an undefined correlation 0 (nothing says the votes are correlated), each clipped to its range."""
    from .correlated import PHI_MAX

    values, rules = {}, {}
    for name in ("rho0", "rho1"):
        value = getattr(votes, name)
        rules[name] = "fit"
        if np.isnan(value):
            value, rules[name] = 0.5, "jeffreys"
        values[name] = float(np.clip(value, 0.0, 1.0))
    if likelihood == "beta_binomial":
        for name in ("phi0", "phi1"):
            value = getattr(votes, name)
            if value is None:
                raise ValueError(f"calibrate: likelihood 'beta_binomial' needs a vote fit with {name} "
                                 f"(got a {votes.method!r} fit without it)")
            rules[name] = "fit"
            if np.isnan(value):
                value, rules[name] = 0.0, "independent"
            values[name] = float(np.clip(value, 0.0, PHI_MAX))
    return values, rules


def defined_rate(k: int, n: int, unsafe: tuple[float, ...] = (0.0, 1.0)) -> tuple[float, str]:
    """A rate estimate that stays defined where the stopping rule needs it (App. A's frequencies, made total).

    The paper's estimate is the frequency k/n, kept wherever it is defined and is not one of the
    ``unsafe`` boundary values. Those are the values on which the rule would act with a certainty that
    finite data cannot give. A repair damage beta-hat = 0 makes G_k > 0 for every belief, so VRR-Stop
    repairs to K_max; a prior of exactly 0 or 1 freezes the belief. With n = 0 the rate is undefined.
    In these cases the Jeffreys posterior mean (k + 1/2) / (n + 1) is used instead. A zero repair
    benefit alpha-hat = 0 is not unsafe: it can only make the rule stop, and the paper's Qwen-7B row has it.
    The second value names the rule ("frequency" or "jeffreys"), so the calibration output records it.
    """
    if n > 0 and k / n not in unsafe:
        return k / n, "frequency"
    return (k + 0.5) / (n + 1.0), "jeffreys"


def crossfit_folds(n: int, n_folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold id (0..n_folds-1) per instance: a seeded permutation split into near-equal folds (App. B)."""
    if n_folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got n_folds={n_folds}")
    if n < n_folds:
        raise ValueError(f"cross-fitting with {n_folds} folds needs at least {n_folds} instances "
                         f"(one per fold), got N={n}")
    order = np.random.default_rng(seed).permutation(n)
    folds = np.empty(n, dtype=np.int64)
    folds[order] = np.arange(n) % n_folds
    return folds


@dataclass
class CrossFit:
    """Per-instance parameters where instance i's values were fit without i's fold."""

    folds: np.ndarray
    fits: list[Calibration]
    rho0: np.ndarray = field(init=False)
    rho1: np.ndarray = field(init=False)
    alpha: np.ndarray = field(init=False)
    beta: np.ndarray = field(init=False)
    pi: np.ndarray = field(init=False)
    likelihood: str = field(init=False)
    phi0: np.ndarray | None = field(init=False)
    phi1: np.ndarray | None = field(init=False)

    def __post_init__(self) -> None:
        for name in ("rho0", "rho1", "alpha", "beta", "pi"):
            per_fold = np.array([getattr(f.params, name) for f in self.fits])
            setattr(self, name, per_fold[self.folds])
        kinds = {f.likelihood for f in self.fits}
        if len(kinds) > 1:
            raise ValueError(f"CrossFit: the folds were fit under different vote likelihoods {sorted(kinds)}")
        self.likelihood = kinds.pop() if kinds else "binomial"
        self.phi0 = self.phi1 = None
        if self.likelihood == "beta_binomial":
            for name in ("phi0", "phi1"):
                setattr(self, name, np.array([getattr(f, name) for f in self.fits], dtype=float)[self.folds])

    def as_kwargs(self) -> dict[str, np.ndarray]:
        """Per-instance filter parameters (Eq. 5-7): rho0, rho1, alpha, beta, pi, and phi0, phi1 under the
        exchangeable-vote likelihood."""
        names = ("rho0", "rho1", "alpha", "beta", "pi")
        if self.likelihood == "beta_binomial":
            names += ("phi0", "phi1")
        return {k: getattr(self, k) for k in names}

    def to_dict(self) -> dict:
        """JSON-ready form (what 03_calibrate saves and 04_replay reads); floats round-trip exactly. Under the
        exchangeable-vote likelihood each fit also records ``likelihood``, ``phi0`` and ``phi1``."""
        fits = []
        for f in self.fits:
            votes = {k: v for k, v in asdict(f.votes).items() if not (k in ("phi0", "phi1") and v is None)}
            fit = {"params": asdict(f.params), "votes": votes, "transitions": asdict(f.transitions),
                   "n_pi_valid": f.n_pi_valid, "n_pi": f.n_pi, "M": f.M, "rules": f.rules, "check": f.check}
            if f.likelihood != "binomial":
                fit.update(likelihood=f.likelihood, phi0=f.phi0, phi1=f.phi1)
            fits.append(fit)
        return {"folds": [int(f) for f in self.folds], "fits": fits}

    @classmethod
    def from_dict(cls, data: dict, source: str = "calibration") -> "CrossFit":
        try:
            fits = [Calibration(params=NoiseParams(**f["params"]), votes=VoteNoiseFit(**f["votes"]),
                                transitions=TransitionFit(**f["transitions"]), n_pi_valid=int(f["n_pi_valid"]),
                                n_pi=int(f["n_pi"]), M=int(f["M"]), rules=dict(f.get("rules", {})),
                                check=f.get("check"), likelihood=str(f.get("likelihood", "binomial")),
                                phi0=f.get("phi0"), phi1=f.get("phi1"))
                    for f in data["fits"]]
            folds = np.asarray(data["folds"], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: field 'crossfit': not a saved cross-fit calibration ({exc})") from exc
        if folds.size and (folds.min() < 0 or folds.max() >= len(fits)):
            raise ValueError(f"{source}: field 'crossfit.folds': fold ids must lie in 0..{len(fits) - 1}")
        return cls(folds=folds, fits=fits)


def crossfit(S, y, M: int, method: str = "binomial_em", n_folds: int = 5, seed: int = 0,
             vote_rounds: str = "first", n_calib: int | None = None,
             probe_S=None, probe_y=None, probe_M: int | None = None,
             max_pairs: int | None = MAX_TRANSITION_PAIRS,
             options: EstimatorOptions = EstimatorOptions(), likelihood: str = "binomial") -> CrossFit:
    """Five-fold cross-fitting (App. B): fold f is scored with parameters fit on the other folds.

    ``likelihood``: Eq. 5's vote likelihood, "binomial" (the paper's) or "beta_binomial" (exchangeable votes).

    ``n_calib`` subsamples each training set (seeded) for the N_calib ablation (App. I).
    With ``vote_rounds="probe"`` the vote-noise fit uses the disjoint probe window, which never
    contains evaluation instances.
    """
    return _crossfit(np.asarray(S), np.asarray(y), M, method, n_folds, seed, vote_rounds, n_calib,
                     None if probe_S is None else np.asarray(probe_S), None if probe_y is None else np.asarray(probe_y),
                     probe_M, max_pairs, options, likelihood)


@memoized
def _crossfit(S, y, M, method, n_folds, seed, vote_rounds, n_calib, probe_S, probe_y, probe_M, max_pairs, options,
              likelihood) -> CrossFit:
    """:func:`crossfit`, computed once per distinct input (``vrr.calibration._memo``)."""
    folds = crossfit_folds(S.shape[0], n_folds, seed)
    rng = np.random.default_rng(seed + 1)
    trains = []
    for f in range(n_folds):
        train = np.flatnonzero(folds != f)
        if n_calib is not None and n_calib < train.size:
            train = np.sort(rng.choice(train, n_calib, replace=False))
        trains.append(train)
    votes = [None] * n_folds
    label_free_bb = method == "beta_binomial_em" or (method == "binomial_em" and likelihood == "beta_binomial")
    if label_free_bb and vote_rounds in ("first", "all") and M >= MIN_VOTES["beta_binomial_em"]:
        # the folds' capped beta-binomial mixtures in one batch (each fold's fit as alone; calibrate reads them)
        from .correlated import label_free_bb_many

        votes = label_free_bb_many([S[t, 0] if vote_rounds == "first" else S[t].ravel() for t in trains], M,
                                   phi_cap=options.bb_phi_cap, n_restarts=options.bb_restarts,
                                   seeds=[seed + f for f in range(n_folds)])
    if (method == "semisupervised_em" and likelihood == "beta_binomial" and vote_rounds in ("first", "all")
            and probe_S is not None and probe_y is not None and probe_M is not None):
        # the folds' semi-supervised mixtures in one batch (each fold's fit as alone; calibrate reads them)
        from .correlated import semisupervised_bb_many

        votes = semisupervised_bb_many([S[t, 0] if vote_rounds == "first" else S[t].ravel() for t in trains], M,
                                       probe_S, probe_y, int(probe_M), n_restarts=min(options.em_restarts, 4),
                                       seeds=[seed + f for f in range(n_folds)])
    fits = [calibrate(S[train], y[train], M, method=method, seed=seed + f, vote_rounds=vote_rounds,
                      probe_S=probe_S, probe_y=probe_y, probe_M=probe_M, max_pairs=max_pairs, options=options,
                      votes=votes[f], likelihood=likelihood)
            for f, train in enumerate(trains)]
    return CrossFit(folds=folds, fits=fits)


def with_params(cal: Calibration, **changes) -> Calibration:
    """Copy of a calibration with some parameters replaced (for sensitivity sweeps)."""
    return replace(cal, params=replace(cal.params, **changes))
