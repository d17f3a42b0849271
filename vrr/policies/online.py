"""Online controller: VRR-Stop, VRR-Guard and Algorithm 1 run inside a live verify-repair loop
(Sec. 4, Eqs. 4-9; App. A, Algorithm 1, with the mode chosen online).

The offline policies (``vrr.policies.rules``) replay whole frozen trajectories. This controller takes
one round at a time: the loop feeds it the current plan's judge votes and gets back a :class:`Decision`
(commit or repair, the candidate to return, b_k, G-hat_k, B_k, the mode with its reason, the verifier
and repair calls used so far). Every equation comes from the offline code: the belief update (Eq. 5)
and predict step from ``vrr.core.belief``, the commit tests from ``rules.stop_commits`` (Eqs. 6-7) and
``rules.algorithm1_step`` (Eq. 8), keep-best from ``vrr.core.guard.keep_best_step`` (Eq. 9) and the error
radius grid from ``vrr.calibration.identifiability.radius_grid``. Replayed round by round over frozen
arrays it commits the same rounds as the offline policies (``tests/test_online.py``).

Usage, M votes per round (``generate``, ``judge``, ``repair`` are the loop's own callables)::

    from vrr.policies.online import OnlineController

    ctl = OnlineController.from_calibration("examples/calibration_small.json")
    ctl.start()                                        # a new problem
    plans = [generate(problem)]
    while True:
        d = ctl.observe([judge(plans[-1]) for _ in range(ctl.M)])   # votes are 0/1 ints
        if d.action == "commit":
            answer = plans[d.candidate]                # Guard's incumbent, or the current plan
            break
        plans.append(repair(plans[-1]))

Sequential voting, one vote at a time (``sequential="exact"``: the same decisions with fewer votes;
``"sprt"``: also stop once the votes' likelihood ratio crosses Wald's boundaries at ``error_rate``;
``"predictive"``: stop once the action agrees with the full-M action with probability >= 1 - ``error_rate``)::

    while True:
        while ctl.need_vote():
            ctl.add_vote(judge(plans[-1]))
        d = ctl.decide()
        ...

``ctl.to_json()`` / ``OnlineController.from_json(text)`` (``save`` / ``load`` for files) carry the whole
state, so a loop can resume mid-trajectory, even mid-round.

Policies: ``"algorithm1"`` (Stop mode when the labeled J diagnostic gives J-hat >= J_min, else Guard;
Stop switches to Guard for the rest of the problem when the sign of G-hat_k is not identifiable, Eq. 8),
``"vrr_stop"`` (Eqs. 5-7; ``alpha`` and ``beta`` may be per-round sequences alpha_t, beta_t, the VRR-Stop-t
variant of ``vrr.calibration.round_dynamics``) and ``"vrr_guard"`` (Eq. 9, full budget, keep-best).
Left out, the policy is ``"algorithm1"`` when the parameter box and the J diagnostic are given
(``intervals`` with ``j_hat`` or ``stop_mode``), ``"vrr_stop"`` when neither is.

API stability: the names above and the fields of :class:`Decision` are the stable interface (the
adapters in ``vrr.adapters`` build on them).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.special import expit, logit

from ..common.atomic import atomic_write
from ..core.belief import belief_update, boundary, gain, predict, vote_log_likelihoods
from ..core.guard import keep_best_step
from ..calibration.identifiability import PARAM_NAMES, radius_grid
from .online_modes import PAPER_DELTA, PAPER_M, POLICIES, default_delta, planned_mode  # noqa: F401 (public here)
from .rules import algorithm1_step, stop_commits

SEQUENTIAL = ("off", "exact", "predictive", "sprt")
STATE_VERSION = 3
CONFIG_FIELDS = ("M", "k_max", "rho0", "rho1", "alpha", "beta", "pi", "policy", "delta", "tau", "repair_cost",
                 "value", "intervals", "j_hat", "j_min", "stop_mode", "grid", "sequential", "error_rate",
                 "budget_calls", "budget_tokens", "source")
# Future-aware curtailment compares log-odds of beliefs with analytic breakpoints. It runs only where the
# floating-point beliefs stay far from the breakpoints' resolution: parameters inside [LIM, 1 - LIM],
# boundaries |logit b*| <= LOGIT_MAX, and a margin EPS (log-odds) around every breakpoint.
_LIM, _LOGIT_MAX, _EPS = 1e-4, 15.0, 1e-5
class UnknownOptionError(ValueError, TypeError):
    """A keyword the controller does not take; the message names it and the nearest option. (A TypeError
    too, as Python's own error for an unknown keyword is.)"""


@dataclass(frozen=True)
class Decision:
    """What the controller decided after round ``round`` (Algorithm 1, one iteration of its loop).

    * ``action``: ``"commit"`` (return ``candidate`` and stop) or ``"repair"`` (repair the current plan
      and send the next round's votes);
    * ``candidate``: round index of the plan to return: on commit the committed plan (Guard's keep-best
      incumbent, Eq. 9, where it applies, and whenever the budget ran out); on repair the plan the policy
      would return if the loop had to stop now;
    * ``belief`` b_k (Eq. 5), ``gain`` G-hat_k (Eq. 6), ``radius`` B_k (App. A; NaN where the policy uses
      none); in sequential mode they are computed from the votes actually received this round;
    * ``mode``: ``"stop"`` or ``"guard"`` after this round, ``reason``: why (J diagnostic, Eq. 8, budget);
    * ``accepts`` / ``votes``: accepting votes and votes received this round;
    * ``verifier_calls`` / ``repair_calls``: totals for this problem so far (a repair decision counts the
      repair it asks for); ``tokens``: the verifier tokens reported with the votes so far, None (unknown,
      not 0) once a vote came without its token count.
    """

    action: str
    round: int
    candidate: int
    belief: float
    gain: float
    radius: float
    mode: str
    reason: str
    accepts: int
    votes: int
    verifier_calls: int
    repair_calls: int
    tokens: int | None = 0

    @property
    def committed(self) -> bool:
        return self.action == "commit"

    def as_dict(self) -> dict:
        return asdict(self)


class ControllerStateError(ValueError):
    """A saved controller state (JSON) that cannot be resumed; the message names the source and field."""


@dataclass(frozen=True)
class _Step:
    """Round k's step for one vote count S (full M votes): action, candidate and the state it leaves."""

    action: str
    candidate: int
    mode: str
    reason: str
    incumbent: int | None
    incumbent_votes: int | None
    needs_count: bool   # the state left behind depends on the exact S (a belief or a new incumbent)

    def key(self, S: int) -> tuple:
        """Two counts with equal keys lead to the same decision and the same future (curtailment).
        A commit ends the problem, so only what it returns counts; a repair also carries its state."""
        if self.action == "commit":
            return (self.action, self.candidate, self.mode)
        tail = (S,) if self.needs_count else ()
        return (self.action, self.candidate, self.mode, self.incumbent, self.incumbent_votes) + tail


def _number(value, source: str, name: str, what: str) -> float:
    """A finite real number (bools and strings refused), else an error naming the field."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    return out


def _integer(value, source: str, name: str, what: str, low: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (
            low is not None and value < low):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    return int(value)


def _unit(value, source: str, name: str) -> float:
    out = _number(value, source, name, "a number in [0, 1]")
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{source}: field '{name}': expected a number in [0, 1], got {value!r}")
    return out


def _rate(value, k_max: int, source: str, name: str):
    """alpha or beta: one number, or a per-round sequence of K_max rates (alpha_t: repair after round t)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        seq = [_unit(v, source, f"{name}[{t}]") for t, v in enumerate(value)]
        if len(seq) != k_max:
            raise ValueError(f"{source}: field '{name}': a per-round rate needs K_max={k_max} values "
                             f"(one per repair), got {len(seq)}")
        return seq
    return _unit(value, source, name)


def tau_for_cost(repair_cost: float, value: float = 1.0) -> float:
    """The gain threshold of Eq. 4 from a stated cost per repair round: repair only when the expected
    validity gain pays for it, G_k * value > repair_cost, so tau = repair_cost / value (Eq. 7's
    b*_tau = (alpha - tau) / (alpha + beta) then follows). ``repair_cost``: the cost of one more round (the
    repair call and its votes) in the units of ``value``, the worth of committing a valid answer."""
    cost = _number(repair_cost, "tau_for_cost", "repair_cost", "a finite cost >= 0")
    worth = _number(value, "tau_for_cost", "value", "a finite value > 0")
    if cost < 0:
        raise ValueError(f"tau_for_cost: field 'repair_cost': expected a finite cost >= 0, got {repair_cost!r}")
    if worth <= 0:
        raise ValueError(f"tau_for_cost: field 'value': expected a finite value > 0, got {value!r}")
    return cost / worth


def _choose_policy(policy, intervals, j_hat, stop_mode, src: str) -> str:
    """The policy left out: Algorithm 1 with its inputs, VRR-Stop from the point estimates alone."""
    if policy is not None:
        return policy
    has_box, has_j = intervals is not None, j_hat is not None or stop_mode is not None
    if has_box and has_j:
        return "algorithm1"
    if not has_box and not has_j:
        return "vrr_stop"
    missing = "j_hat=... (or stop_mode)" if has_box else "intervals=... (the parameter box behind B_k)"
    raise ValueError(f"{src}: field 'policy': not given, and Algorithm 1's inputs are incomplete: "
                     f"policy='algorithm1' needs {missing}; pass policy='vrr_stop' to use the point estimates "
                     "alone or policy='vrr_guard' for keep-best")


class OnlineController:
    """VRR-Stop / VRR-Guard / Algorithm 1 for one problem at a time, round by round (App. A, Algorithm 1).

    Build it with :meth:`from_parameters`, :meth:`from_labeled`, :meth:`from_unlabeled` or
    :meth:`from_calibration`; call :meth:`start` for each new problem, then :meth:`observe` (a round's
    votes) or :meth:`need_vote` / :meth:`add_vote` / :meth:`decide` (one vote at a time) until a decision
    commits.
    """

    def __new__(cls, *args, **kwargs):
        """Refuse a keyword ``__init__`` does not take with an error naming it (before ``__init__`` runs)."""
        import difflib
        import inspect as _inspect

        known = [n for n in _inspect.signature(cls.__init__).parameters if n != "self"]
        for name in kwargs:
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean '{near[0]}'?" if near else ""
                raise UnknownOptionError(f"{kwargs.get('source', 'parameters')}: field '{name}': not an option of "
                                         f"OnlineController{hint} (options: {', '.join(known)})")
        return super().__new__(cls)

    def __init__(self, *, M: int, k_max: int, rho0: float, rho1: float, alpha, beta, pi: float,
                 policy: str | None = None, delta: int | None = None, tau: float | None = None,
                 repair_cost: float | None = None, value: float = 1.0, intervals: dict | None = None,
                 j_hat: float | None = None, j_min: float = 0.10, stop_mode: bool | None = None, grid: int = 5,
                 sequential: str = "off", error_rate: float = 0.01, budget_calls: int | None = None,
                 budget_tokens: int | None = None, source: str = "parameters"):
        src = source
        M = _integer(M, src, "M", "votes per round, an integer >= 1", low=1)
        k_max = _integer(k_max, src, "k_max", "the repair budget, an integer >= 0", low=0)
        policy = _choose_policy(policy, intervals, j_hat, stop_mode, src)
        if policy not in POLICIES:
            raise ValueError(f"{src}: field 'policy': {policy!r} is not one of {POLICIES}")
        if sequential not in SEQUENTIAL:
            raise ValueError(f"{src}: field 'sequential': {sequential!r} is not one of {SEQUENTIAL}")
        error_rate = _number(error_rate, src, "error_rate", "a number in (0, 1)")
        if not 0.0 < error_rate < 1.0:
            raise ValueError(f"{src}: field 'error_rate': expected a number in (0, 1), got {error_rate!r}")
        delta = default_delta(M) if delta is None else _integer(delta, src, "delta", "the retention margin, an integer")
        grid = _integer(grid, src, "grid", "the grid levels of B_k, an integer >= 2", low=2)
        j_min = _number(j_min, src, "j_min", "a number in [-1, 1]")
        if not -1.0 <= j_min <= 1.0:
            raise ValueError(f"{src}: field 'j_min': expected a number in [-1, 1], got {j_min!r}")
        if j_hat is not None:   # NaN is meaningful: the diagnostic is undefined (a class is absent)
            if isinstance(j_hat, (bool, np.bool_, str, bytes)):
                raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}")
            try:
                j_hat = float(j_hat)
            except (TypeError, ValueError):
                raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}") from None
            if not (math.isnan(j_hat) or -1.0 <= j_hat <= 1.0):
                raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}")
        if stop_mode is not None and not isinstance(stop_mode, (bool, np.bool_)):
            raise ValueError(f"{src}: field 'stop_mode': expected true, false or null, got {stop_mode!r}")
        value = _number(value, src, "value", "a finite value > 0")
        if value <= 0:
            raise ValueError(f"{src}: field 'value': expected a finite value > 0, got {value!r}")
        if repair_cost is not None:
            cost_tau = tau_for_cost(_number(repair_cost, src, "repair_cost", "a finite cost >= 0"), value)
            if tau is not None and _number(tau, src, "tau", "a finite number") != cost_tau:
                raise ValueError(f"{src}: field 'tau': {tau!r} disagrees with repair_cost / value = {cost_tau!r}; "
                                 "give one of them")
            tau = cost_tau
        tau = 0.0 if tau is None else _number(tau, src, "tau", "a finite number")
        if budget_calls is not None:
            budget_calls = _integer(budget_calls, src, "budget_calls", "verifier calls per problem, an integer >= 1",
                                    low=1)
        if budget_tokens is not None:
            budget_tokens = _integer(budget_tokens, src, "budget_tokens", "verifier tokens per problem, an "
                                     "integer >= 1", low=1)
        cfg = {"M": M, "k_max": k_max, "rho0": _unit(rho0, src, "rho0"), "rho1": _unit(rho1, src, "rho1"),
               "alpha": _rate(alpha, k_max, src, "alpha"), "beta": _rate(beta, k_max, src, "beta"),
               "pi": _unit(pi, src, "pi"), "policy": policy, "delta": delta, "tau": tau,
               "repair_cost": None if repair_cost is None else float(repair_cost), "value": value,
               "intervals": None, "j_hat": j_hat, "j_min": j_min,
               "stop_mode": None if stop_mode is None else bool(stop_mode), "grid": grid,
               "sequential": sequential, "error_rate": error_rate, "budget_calls": budget_calls,
               "budget_tokens": budget_tokens, "source": str(source)}
        if policy == "algorithm1":
            if intervals is None:
                raise ValueError(f"{src}: field 'intervals': Algorithm 1 needs the parameter box behind the error "
                                 f"radius B_k: {{name: (lo, hi)}} for {PARAM_NAMES}; pass policy='vrr_stop' to "
                                 "use the point estimates alone")
            if isinstance(cfg["alpha"], list) or isinstance(cfg["beta"], list):
                raise ValueError(f"{src}: field 'alpha': Algorithm 1's error radius is defined for stationary "
                                 "alpha, beta; per-round rates go with policy='vrr_stop'")
            if stop_mode is None and j_hat is None:
                raise ValueError(f"{src}: field 'j_hat': Algorithm 1 chooses its mode from the labeled J "
                                 "diagnostic; give j_hat (or stop_mode), or pass policy='vrr_stop'")
        if intervals is not None:
            if not isinstance(intervals, dict):
                raise ValueError(f"{src}: field 'intervals': expected {{name: (lo, hi)}}, got {intervals!r}")
            box = {}
            for name in PARAM_NAMES:
                if name not in intervals:
                    raise ValueError(f"{src}: field 'intervals.{name}': missing")
                try:
                    lo, hi = (float(v) for v in intervals[name])
                except (TypeError, ValueError):
                    raise ValueError(f"{src}: field 'intervals.{name}': expected (lo, hi), "
                                     f"got {intervals[name]!r}") from None
                if not 0.0 <= lo <= hi <= 1.0:
                    raise ValueError(f"{src}: field 'intervals.{name}': need 0 <= lo <= hi <= 1, got ({lo}, {hi})")
                box[name] = [lo, hi]
            cfg["intervals"] = box
        self._cfg = cfg
        self.calibration_report = None   # set by from_labeled / from_unlabeled / from_calibration
        self._grid = None
        self._critical = None            # VRR-Stop's breakpoints per round (future-aware curtailment), lazily
        if policy == "algorithm1":
            points = list(radius_grid({k: tuple(v) for k, v in cfg["intervals"].items()}, cfg["grid"]))
            self._grid = {name: np.array([p[name] for p in points], dtype=float) for name in PARAM_NAMES}
        self.start()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_parameters(cls, *, M: int, k_max: int, rho0: float, rho1: float, alpha, beta, pi: float,
                        **options) -> "OnlineController":
        """A controller from calibrated parameters (Sec. 4.2). ``alpha``/``beta`` may be per-round
        sequences of K_max rates (VRR-Stop-t). Options: ``policy`` ("algorithm1" | "vrr_stop" |
        "vrr_guard"; left out: Algorithm 1 when ``intervals`` and ``j_hat``/``stop_mode`` are given, VRR-Stop
        when neither is), ``delta`` (Eq. 9; default :func:`default_delta`, 5 at M = 8), ``tau`` (Eq. 4/7) or ``repair_cost`` with ``value``
        (tau = repair_cost / value, :func:`tau_for_cost`), ``intervals`` ({name: (lo, hi)}, the box behind
        B_k), ``j_hat`` and ``j_min`` (Algorithm 1 line 1) or ``stop_mode``, ``grid`` (B_k's grid levels),
        ``sequential`` ("off" | "exact" | "sprt" | "predictive") and ``error_rate`` (sprt, predictive),
        ``budget_calls`` / ``budget_tokens`` (per problem; when spent, Stop mode returns the judged plan with
        the highest posterior, Guard mode its keep-best incumbent, Eq. 9)."""
        return cls(M=M, k_max=k_max, rho0=rho0, rho1=rho1, alpha=alpha, beta=beta, pi=pi, **options)

    @classmethod
    def from_labeled(cls, *, votes, labels, repairs, M: int | None = None, k_max: int = 5,
                     policy: str = "algorithm1", j_min: float = 0.10, **options) -> "OnlineController":
        """Calibrate from a small labeled set (Sec. 4.2-4.3; Algorithm 1 line 1) and build the controller.

        ``votes``: per first plan, its accept count (0..M) or its list of 0/1 votes; ``labels``: the plans'
        true labels (0/1); ``repairs``: labeled repair pairs ``(label_before, label_after)``, or triples
        ``(label_before, label_after, round)`` to also fit round-dependent alpha_t, beta_t (VRR-Stop-t).
        rho0, rho1 come from labeled MLE, pi from the labels, alpha, beta from the pairs, J-hat from the
        labeled J test; the mode (Stop when J-hat >= ``j_min``, else Guard) and its reason are in
        ``ctl.calibration_report`` (:class:`vrr.policies.online_calibration.CalibrationReport`). Options:
        ``eta`` (the parameter box's level, default 0.05), ``seed`` (the J test's bootstrap), and those of
        :meth:`from_parameters`. ``ctl.save_calibration(path)`` writes the calibration.
        """
        from .online_calibration import calibrate_labeled

        return cls._calibrated(*calibrate_labeled(votes=votes, labels=labels, repairs=repairs, M=M, k_max=k_max,
                                                  policy=policy, j_min=j_min, **options))

    @classmethod
    def from_unlabeled(cls, *, counts, repairs, M: int, k_max: int = 5, policy: str = "vrr_stop",
                       **options) -> "OnlineController":
        """Label-free calibration (Sec. 4.2): rho0, rho1 and pi from the binomial-mixture EM on unlabeled
        first-plan accept counts, alpha and beta from a few labeled repair pairs. There is no labeled J test,
        so the report's mode is Stop by default policy ``"vrr_stop"``; Algorithm 1 needs ``j_hat`` from a
        labeled diagnostic (or :meth:`from_labeled`). Options as in :meth:`from_labeled`."""
        from .online_calibration import calibrate_unlabeled

        return cls._calibrated(*calibrate_unlabeled(counts=counts, repairs=repairs, M=M, k_max=k_max,
                                                    policy=policy, **options))

    @classmethod
    def _calibrated(cls, kwargs: dict, report) -> "OnlineController":
        ctl = cls(**kwargs)
        ctl.calibration_report = report
        return ctl.start()   # the first round's reason is the report's (with the J test's CI)

    @classmethod
    def from_calibration(cls, path: str | os.PathLike, fold: int | None = None, *, arrays=None,
                         policy: str | None = None, round_dynamics: bool = False,
                         **options) -> "OnlineController":
        """A controller from a saved calibration: either a file :meth:`save_calibration` wrote (``format``
        ``vrr-online-calibration``, e.g. ``examples/calibration_small.json``) or the ``calibration.json``
        that 03_calibrate saved.

        Saved by :meth:`save_calibration`: the controller is rebuilt from the stored counts exactly as
        :meth:`from_labeled` built it (``policy`` defaults to the stored one; ``round_dynamics=True`` uses
        the stored per-round pairs for alpha_t, beta_t, VRR-Stop-t, with ``policy="vrr_stop"``).

        03_calibrate's file: ``fold`` uses that cross-fit fold's parameters, intervals and J diagnostic
        (exactly what replay uses for the fold's instances); ``None`` refits on all calibration instances
        (deployment). ``arrays``: the setting's ``arrays.npz`` (or a loaded ``Setting``); by default the file
        the calibration names (``arrays_path``). Without them the box comes from the saved counts
        (Clopper-Pearson) and J-hat from the saved probe diagnostic. ``policy`` defaults to "algorithm1".

        ``options`` as in :meth:`from_parameters`.
        """
        from .online_calibration import is_online_calibration, load_online_calibration

        if is_online_calibration(path):
            if fold is not None or arrays is not None:
                raise ValueError(f"{path}: 'fold' and 'arrays' apply to 03_calibrate's calibration.json, "
                                 "not to a saved online calibration")
            return cls._calibrated(*load_online_calibration(path, policy=policy, round_dynamics=round_dynamics,
                                                            **options))
        if round_dynamics:
            raise ValueError(f"{path}: round_dynamics=True needs a calibration saved by save_calibration with "
                             "per-round repair pairs; replay's VRR-Stop-t is vrr.calibration.crossfit_round_rates")
        from .replay import controller_parameters  # the calibration file (and arrays) -> parameters

        params = controller_parameters(path, fold=fold, arrays=arrays, policy=policy or "algorithm1", **options)
        return cls(**params)

    def save_calibration(self, path: str | os.PathLike) -> Path:
        """Write the calibration this controller was built from (:meth:`from_labeled` /
        :meth:`from_unlabeled`) as JSON, atomically; :meth:`from_calibration` reads it back."""
        from .online_calibration import save_online_calibration

        if self.calibration_report is None:
            raise ValueError("save_calibration: this controller was not calibrated here (from_labeled / "
                             "from_unlabeled / a saved online calibration); from_parameters has no data to save")
        return save_online_calibration(self.calibration_report, path)

    # ------------------------------------------------------------------ properties
    @property
    def M(self) -> int:
        """Votes per round (the fixed-M budget)."""
        return self._cfg["M"]

    @property
    def k_max(self) -> int:
        return self._cfg["k_max"]

    @property
    def policy(self) -> str:
        return self._cfg["policy"]

    @property
    def tau(self) -> float:
        """The gain threshold tau of Eq. 4 (given, or repair_cost / value)."""
        return self._cfg["tau"]

    @property
    def config(self) -> dict:
        """The controller's parameters (JSON-ready copy)."""
        return json.loads(json.dumps(self._cfg))

    @property
    def round(self) -> int:
        """The round whose votes are being collected (0 = the initial plan)."""
        return self._k

    @property
    def done(self) -> bool:
        """True once a decision committed (call :meth:`start` for the next problem)."""
        return self._done

    @property
    def last(self) -> Decision | None:
        """The most recent decision of this problem."""
        return self._last

    def threshold(self, k: int | None = None) -> float:
        """The cost-aware boundary b*_tau = (alpha - tau) / (alpha + beta) of round ``k`` (default: the
        current round), Eq. 7: VRR-Stop repairs while b_k < b*_tau (and never when alpha <= tau)."""
        a, be = self._rates(self._k if k is None else int(k))
        return float(boundary(a, be, self._cfg["tau"]))

    def budget_left(self) -> dict:
        """Verifier calls and tokens left of this problem's budget (None where no budget is set)."""
        c = self._cfg
        return {"calls": None if c["budget_calls"] is None else c["budget_calls"] - self._verifier_calls,
                "tokens": None if c["budget_tokens"] is None else c["budget_tokens"] - self._tokens}

    # ------------------------------------------------------------------ per-problem state
    def _initial_mode(self) -> tuple[str, str]:
        c = self._cfg
        ci = None if self.calibration_report is None else self.calibration_report.j_ci
        return planned_mode(c["policy"], c["j_hat"], c["j_min"], c["stop_mode"], j_ci=ci)

    @property
    def mode(self) -> str:
        """The mode the current round runs in, ``"stop"`` or ``"guard"`` (:func:`planned_mode` at the start
        of a problem; Algorithm 1 switches to Guard when Eq. 8 fails)."""
        return self._mode

    @property
    def _tracks_incumbent(self) -> bool:
        """Keep-best (Eq. 9) runs under Guard and Algorithm 1, and under VRR-Stop when a budget is set
        (the incumbent is what a spent budget returns)."""
        c = self._cfg
        return c["policy"] != "vrr_stop" or c["budget_calls"] is not None or c["budget_tokens"] is not None

    def start(self) -> "OnlineController":
        """Reset for a new problem (round 0, b^- = pi, no incumbent, counters at zero)."""
        c = self._cfg
        self._k = 0
        self._prior = c["pi"]
        self._prior_grid = None if self._grid is None else self._grid["pi"].copy()
        self._mode, self._reason = self._initial_mode()
        self._incumbent: int | None = None
        self._incumbent_votes: int | None = None
        self._best_round: int | None = None     # the judged plan with the highest posterior (budget commit)
        self._best_belief: float | None = None
        self._accepts = 0
        self._n = 0
        self._verifier_calls = 0
        self._repair_calls = 0
        self._tokens = 0
        self._votes_without_tokens = 0
        self._done = False
        self._last: Decision | None = None
        self._cache: dict = {}
        return self

    # ------------------------------------------------------------------ one round
    def _rates(self, k: int) -> tuple[float, float]:
        """alpha, beta of the repair after round k (the last round reuses the last repair's rates)."""
        out = []
        for name in ("alpha", "beta"):
            v = self._cfg[name]
            if isinstance(v, list):  # K_max = 0: no repair, so no rate (the only round commits)
                v = v[min(k, len(v) - 1)] if v else float("nan")
            out.append(v)
        return out[0], out[1]

    def _evaluate(self, s: int, n: int) -> tuple[float, float, float, np.ndarray | None]:
        """b_k (Eq. 5), G-hat_k (Eq. 6) and B_k from s accepting votes out of n, with the grid beliefs."""
        c = self._cfg
        a, be = self._rates(self._k)
        b = belief_update(self._prior, s, n, c["rho0"], c["rho1"])
        g = gain(b, a, be)
        radius, b_grid = float("nan"), None
        if self._prior_grid is not None and self._mode == "stop":
            grid = self._grid
            b_grid = belief_update(self._prior_grid, s, n, grid["rho0"], grid["rho1"])
            radius = float(np.max(np.abs(gain(b_grid, grid["alpha"], grid["beta"]) - g)))
        return float(b), float(g), radius, b_grid

    def _step(self, S: int) -> _Step:
        """Round k's step when the plan got S of M accepting votes (Algorithm 1 lines 4-19)."""
        key = ("step", S)
        if key in self._cache:
            return self._cache[key]
        c, k = self._cfg, self._k
        last = k == c["k_max"]
        incumbent, inc_votes = self._incumbent, self._incumbent_votes
        replaced = False
        if self._tracks_incumbent:  # keep-best tracking, Eq. 9 (c_0 = p_0)
            if k == 0:
                incumbent, inc_votes, replaced = 0, S, True
            else:
                incumbent, inc_votes = keep_best_step(incumbent, inc_votes, k, S, c["delta"])
                replaced = incumbent == k
        mode, reason = self._mode, self._reason
        if mode == "stop":
            b, g, radius, _ = self._evaluate(S, c["M"])
            if c["policy"] == "vrr_stop":
                a, _ = self._rates(k)
                if stop_commits(g, a, c["tau"]):
                    why = "alpha <= tau: repair cannot gain" if a <= c["tau"] else "G-hat_k <= tau (Eqs. 6-7)"
                    out = _Step("commit", k, mode, why, incumbent, inc_votes, False)
                elif last:
                    out = _Step("commit", k, mode, "budget exhausted (K_max)", incumbent, inc_votes, False)
                else:
                    out = _Step("repair", k, mode, "G-hat_k > tau (Eqs. 6-7)", incumbent, inc_votes, True)
            else:
                commit, unidentifiable = algorithm1_step(g, radius, c["tau"])
                if commit:
                    out = _Step("commit", k, mode, "G-hat_k + B_k <= tau: stop sign identifiable (Eq. 8)",
                                incumbent, inc_votes, False)
                elif unidentifiable:
                    why = f"sign not identifiable at round {k} (Eq. 8): Guard mode"
                    if last:
                        out = _Step("commit", incumbent, "guard", why + "; budget exhausted: keep-best incumbent",
                                    incumbent, inc_votes, False)
                    else:
                        out = _Step("repair", incumbent, "guard", why, incumbent, inc_votes, replaced)
                elif last:
                    out = _Step("commit", k, mode, "budget exhausted (K_max)", incumbent, inc_votes, False)
                else:
                    out = _Step("repair", k, mode, "G-hat_k - B_k > tau: repair (Eq. 8)", incumbent, inc_votes, True)
        else:
            if last:
                out = _Step("commit", incumbent, mode, "budget exhausted: commit the keep-best incumbent (Eq. 9)",
                            incumbent, inc_votes, False)
            else:
                out = _Step("repair", incumbent, mode, reason, incumbent, inc_votes, replaced)
        self._cache[key] = out
        return out

    def _settled(self) -> _Step | None:
        """The round's step if the votes so far decide it, else None (sequential voting)."""
        c = self._cfg
        s, n, M = self._accepts, self._n, c["M"]
        if n == M:
            return self._step(s)
        key = ("settled", s, n)
        if key in self._cache:
            return self._cache[key]
        completions = range(s, s + M - n + 1)
        steps = {S: self._step(S) for S in completions}
        keys = {step.key(S) for S, step in steps.items()}
        # exact curtailment: every completion of the remaining votes gives the same decision and state,
        # or (VRR-Stop) the same decision now and on every future vote path
        out = next(iter(steps.values())) if len(keys) == 1 else self._future_settled(s, n, steps)
        if out is None and c["sequential"] == "predictive":
            out = self._predictive(s, n, steps)
        elif out is None and c["sequential"] == "sprt":
            out = self._sprt(s, n, steps)
        self._cache[key] = out
        return out

    # ------------------------------------------------------------------ future-aware curtailment (VRR-Stop)
    def _critical_priors(self) -> list | None:
        """Per round j, the sorted log-odds of the prior b^-_j at which VRR-Stop's decisions on some future
        vote path change (Eqs. 5-7 composed with the predict step); None where the analysis does not apply.

        Round j commits iff the posterior log-odds l + L(S) reach logit b*_tau (Eq. 7), L(S) the votes'
        log-likelihood ratio; so its breakpoints are logit b*_tau - L(S) for every count S, plus, where it
        repairs, the preimages under l -> logit predict(expit(l + L(S))) (strictly monotone) of round j+1's
        breakpoints. Round K_max always commits and has none. Decisions from round j on are constant between
        consecutive breakpoints, so a set of priors with no breakpoint between them shares every future."""
        if self._critical is not None:
            return self._critical or None
        c = self._cfg
        M, K, tau = c["M"], c["k_max"], c["tau"]
        inside = lambda v: _LIM <= v <= 1.0 - _LIM  # noqa: E731
        self._critical = []
        if c["policy"] != "vrr_stop" or not (inside(c["rho0"]) and inside(c["rho1"])):
            return None
        S = np.arange(M + 1, dtype=float)
        L = S * (math.log1p(-c["rho1"]) - math.log(c["rho0"])) + (M - S) * (math.log(c["rho1"]) - math.log1p(-c["rho0"]))
        crit: list = [None] * (K + 1)
        crit[K] = np.empty(0)
        for j in range(K - 1, 0, -1):
            a, be = self._rates(j)
            if a <= tau:                        # always commits: no breakpoint, no future
                crit[j] = np.empty(0)
                continue
            if not (inside(a) and inside(be)) or abs(1.0 - a - be) < 1e-9:
                return None
            b_star = (a - tau) / (a + be)
            parts = []
            upper = math.inf                    # b* >= 1: never commits (b = 1.0 gives G = -beta > tau)
            if b_star < 1.0:
                upper = float(logit(b_star))
                if abs(upper) > _LOGIT_MAX:
                    return None
                parts.append(upper - L)
            if crit[j + 1].size:
                q = expit(crit[j + 1])
                b = (q - a) / (1.0 - a - be)
                b = b[(b > 0.0) & (b < 1.0)]
                lb = logit(b)
                lb = lb[lb < upper + _EPS]      # where round j commits, round j+1 is never reached
                parts.append((lb[:, None] - L[None, :]).ravel())
            pts = np.concatenate(parts) if parts else np.empty(0)
            a_prev, be_prev = self._rates(j - 1)  # round j's prior is predict(b_{j-1}) in [alpha, 1 - beta]
            lo, hi = sorted((a_prev, 1.0 - be_prev))
            lo, hi = (float(logit(v)) if 0.0 < v < 1.0 else (-math.inf if v <= 0 else math.inf) for v in (lo, hi))
            crit[j] = np.unique(pts[(pts >= lo - 1.0) & (pts <= hi + 1.0)])
        self._critical = crit
        return crit

    def _future_settled(self, s: int, n: int, steps: dict) -> _Step | None:
        """VRR-Stop's repair round is decided once every completion repairs and the beliefs they carry (and
        the one the votes seen carry) lie between the same two breakpoints of round k+1
        (:meth:`_critical_priors`): every future vote path then gets the same decisions."""
        c = self._cfg
        first = next(iter(steps.values()))
        if c["policy"] != "vrr_stop" or self._mode != "stop" or any(
                st.action != "repair" or st.key(0)[:-1] != first.key(0)[:-1] for st in steps.values()):
            return None
        crit = self._critical_priors()
        if crit is None:
            return None
        a, be = self._rates(self._k)
        counts = np.array(list(steps), dtype=float)
        b = np.append(belief_update(self._prior, counts, c["M"], c["rho0"], c["rho1"]),
                      belief_update(self._prior, s, n, c["rho0"], c["rho1"]))
        q = predict(b, a, be)
        if not np.all((q > 0.0) & (q < 1.0)):
            return None
        lq = logit(q)
        nxt = crit[self._k + 1]
        lo, hi = float(lq.min()) - _EPS, float(lq.max()) + _EPS
        if np.searchsorted(nxt, lo, side="left") != np.searchsorted(nxt, hi, side="right"):
            return None
        return _Step("repair", first.candidate, first.mode, first.reason + "; no remaining vote changes the "
                     "decision on any future path", first.incumbent, first.incumbent_votes, False)

    # ------------------------------------------------------------------ approximate early stopping
    def _predictive(self, s: int, n: int, steps: dict) -> _Step | None:
        """Stochastic curtailment on the model's own likelihood: stop asking once the decision that the
        full M votes would give is known with probability >= 1 - error_rate.

        Given s of n votes, the remaining r = M - n accepts are b_n Bin(r, 1-rho1) + (1-b_n) Bin(r, rho0),
        b_n the Eq. 5 posterior of the votes seen. Completions are grouped by action, candidate and the
        state they leave; a group that would need the exact count (a new Guard incumbent) never ends the
        round early. The belief carried forward is the posterior of the votes actually seen.
        """
        from scipy.stats import binom  # the predictive distribution of the remaining votes

        c = self._cfg
        r = c["M"] - n
        b = belief_update(self._prior, s, n, c["rho0"], c["rho1"])
        j = np.arange(r + 1)
        prob = b * binom.pmf(j, r, 1.0 - c["rho1"]) + (1.0 - b) * binom.pmf(j, r, c["rho0"])
        groups: dict = {}
        for jj, p in zip(j, prob):
            step = steps[s + int(jj)]
            exact_needed = step.needs_count and not (step.action == "repair" and step.mode == "stop"
                                                     and step.incumbent == self._incumbent
                                                     and step.incumbent_votes == self._incumbent_votes)
            gkey = (step.action, step.candidate, step.mode, step.incumbent, step.incumbent_votes,
                    s + int(jj) if exact_needed else None)
            groups[gkey] = groups.get(gkey, 0.0) + float(p)
        best = max(groups, key=groups.get)
        if best[-1] is None and groups[best] >= 1.0 - c["error_rate"]:
            action, candidate, mode, incumbent, inc_votes, _ = best
            reason = next(st.reason for S, st in steps.items()
                          if (st.action, st.candidate, st.mode, st.incumbent, st.incumbent_votes)
                          == (action, candidate, mode, incumbent, inc_votes))
            return _Step(action, candidate, mode, reason, incumbent, inc_votes, False)
        return None

    def _sprt(self, s: int, n: int, steps: dict) -> _Step | None:
        """Wald's SPRT on the votes' binomial likelihood ratio (the likelihood of Eq. 5), anytime-valid.

        LR_n = ((1-rho1)/rho0)^s (rho1/(1-rho0))^(n-s) is a nonnegative martingale with mean 1 under an
        invalid plan, and 1/LR_n under a valid one, so by Ville's inequality LR_n reaches 1/error_rate on an
        invalid plan, or error_rate on a valid one, with probability <= error_rate at any vote, whatever the
        order. The round ends early when LR_n >= 1/error_rate and the Stop-mode rule on the votes seen
        commits, or LR_n <= error_rate and it repairs: an early commit of an invalid plan, or an early repair
        of a valid one, has probability <= error_rate under the calibrated model. Guard decisions and new
        incumbents need the exact count and never end early here.
        """
        c = self._cfg
        if self._mode != "stop" or len({(st.incumbent, st.incumbent_votes) for st in steps.values()}) != 1:
            return None
        ll_valid, ll_invalid = vote_log_likelihoods(s, n, c["rho0"], c["rho1"])
        llr = float(ll_valid - ll_invalid)
        bound = math.log(1.0 / c["error_rate"])
        if -bound < llr < bound or math.isnan(llr):
            return None
        _, g, radius, _ = self._evaluate(s, n)
        if c["policy"] == "vrr_stop":
            commit, unidentifiable = stop_commits(g, self._rates(self._k)[0], c["tau"]), False
        else:
            commit, unidentifiable = algorithm1_step(g, radius, c["tau"])
        first = next(iter(steps.values()))
        k = self._k
        if llr >= bound and commit:
            return _Step("commit", k, "stop", f"SPRT: likelihood ratio >= 1/{c['error_rate']:g} and the votes "
                         "seen commit", first.incumbent, first.incumbent_votes, False)
        if llr <= -bound and not commit and not unidentifiable and k < c["k_max"]:
            return _Step("repair", k, "stop", f"SPRT: likelihood ratio <= {c['error_rate']:g} and the votes "
                         "seen repair", first.incumbent, first.incumbent_votes, False)
        return None

    # ------------------------------------------------------------------ votes and decisions
    def _spent(self) -> bool:
        """True once the per-problem budget (verifier calls or tokens) is used up."""
        c = self._cfg
        return (c["budget_calls"] is not None and self._verifier_calls >= c["budget_calls"]) or (
            c["budget_tokens"] is not None and self._tokens >= c["budget_tokens"])

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError(f"round {self._k}: this problem is committed; call start() for the next one")

    def need_vote(self) -> bool:
        """True while the current round needs another vote (always until M votes when ``sequential="off"``;
        never once the budget is spent)."""
        if self._done or self._n >= self._cfg["M"] or self._spent():
            return False
        if self._cfg["sequential"] == "off":
            return True
        return self._settled() is None

    def _vote(self, vote) -> int:
        if isinstance(vote, (bool, np.bool_)):
            vote = int(vote)
        if not isinstance(vote, (int, np.integer)) or vote not in (0, 1):
            raise ValueError(f"round {self._k}: field 'vote': a vote must be 0 (reject) or 1 (accept), got {vote!r}")
        return int(vote)

    def _token_count(self, tokens) -> int:
        if tokens is None:
            if self._cfg["budget_tokens"] is not None:
                raise ValueError(f"round {self._k}: field 'tokens': budget_tokens is set, so every vote needs "
                                 "its token count (add_vote(v, tokens=n))")
            return None   # unknown, not 0
        return _integer(tokens, f"round {self._k}", "tokens", "the vote's token count, an integer >= 0", low=0)

    def add_vote(self, vote, tokens: int | None = None) -> None:
        """One judge vote on the current plan (1 = accept, 0 = reject); ``tokens``: what the call cost
        (needed with ``budget_tokens``)."""
        self._check_open()
        v, t = self._vote(vote), self._token_count(tokens)
        if self._n >= self._cfg["M"]:
            raise ValueError(f"round {self._k}: field 'vote': the round already has M={self._cfg['M']} votes; "
                             "call decide()")
        if self._spent():
            raise ValueError(f"round {self._k}: field 'vote': the budget is spent ({self.budget_left()}); call "
                             "decide()")
        self._accepts += v
        self._n += 1
        self._verifier_calls += 1
        if t is None:
            self._votes_without_tokens += 1
        else:
            self._tokens += t

    def _budget_choice(self, mode: str, incumbent: int | None, best: tuple | None) -> tuple[int, str]:
        """The plan a spent budget returns, and why, by the mode the loop is in.

        Stop mode trusts the calibrated model (J-hat >= J_min, or VRR-Stop as asked), and b_j is its
        Pr(plan j valid | votes) (Eq. 5), comparable across rounds whatever their priors: the judged plan
        with the highest posterior is the one most likely valid. Guard mode does not trust the posterior
        (the votes barely separate the classes), so it returns Eq. 9's keep-best incumbent (c_0 = p_0).
        ``best``: (round, b) of the highest posterior among the judged plans, or None."""
        if mode == "stop" and best is not None:
            return best[0], f"the judged plan with the highest posterior (round {best[0]}, b = {best[1]:.3f}, Eq. 5)"
        candidate = incumbent if incumbent is not None else 0
        return candidate, f"Guard's keep-best incumbent (round {candidate}, Eq. 9, delta = {self._cfg['delta']})"

    def _best_with(self, k: int, b: float) -> tuple:
        """The highest posterior so far, with round k's b (an earlier plan keeps a tie)."""
        if self._best_belief is None or b > self._best_belief:
            return k, b
        return self._best_round, self._best_belief

    def decide(self) -> Decision:
        """The decision of the current round from the votes received (all M, or enough in sequential mode).
        With the budget spent it commits the keep-best incumbent (Eq. 9) rather than the last plan."""
        self._check_open()
        c = self._cfg
        step = self._step(self._accepts) if self._n == c["M"] else (
            self._settled() if c["sequential"] != "off" else None)
        k, s, n = self._k, self._accepts, self._n
        if step is None and not self._spent():
            raise ValueError(f"round {k}: {n} of M={c['M']} votes do not decide the round yet; send more votes "
                             "while need_vote() is True (add_vote), then call decide()")
        mode_now = self._mode
        b, g, radius, b_grid = self._evaluate(s, n)
        best = self._best_with(k, b) if n > 0 else (
            None if self._best_round is None else (self._best_round, self._best_belief))
        if step is None:
            candidate, what = self._budget_choice(self._mode, self._incumbent, best)
            step = _Step("commit", candidate, self._mode, f"budget spent in round {k} ({self._verifier_calls} "
                         f"verifier calls, {self._tokens_reported()}): {what}", self._incumbent,
                         self._incumbent_votes, False)
        elif step.action == "repair" and self._spent():
            # the repaired plan could get no vote: return what the budget returns after this round
            candidate, what = self._budget_choice(step.mode, step.incumbent, best)
            step = _Step("commit", candidate, step.mode, f"budget spent after round {k}: {what}", step.incumbent,
                         step.incumbent_votes, False)
        if step.action == "repair":
            self._repair_calls += 1
        decision = Decision(step.action, k, int(step.candidate), b, g, radius, step.mode, step.reason, s, n,
                            self._verifier_calls, self._repair_calls,
                            None if self._votes_without_tokens else self._tokens)
        if step.action == "commit":
            self._done = True
        else:
            a, be = self._rates(k)
            # predict step (Sec. 4.1). In Guard mode the belief is only reported, never acted on.
            self._prior = float(predict(b, a, be))
            if mode_now == "stop" and step.mode == "stop" and b_grid is not None:
                self._prior_grid = predict(b_grid, self._grid["alpha"], self._grid["beta"])
            self._mode, self._reason = step.mode, step.reason
            self._incumbent, self._incumbent_votes = step.incumbent, step.incumbent_votes
            if best is not None:
                self._best_round, self._best_belief = best[0], float(best[1])
            self._k += 1
            self._accepts = self._n = 0
            self._cache = {}
        self._last = decision
        return decision

    def observe(self, votes, tokens=None) -> Decision:
        """Feed a round's votes (a list of 0/1) and get the round's decision (Algorithm 1, one iteration).
        ``tokens``: one token count per vote (needed with ``budget_tokens``). All or nothing: a call that is
        refused (too long, a bad vote, or too few votes to decide the round) leaves the state unchanged."""
        self._check_open()
        if isinstance(votes, (str, bytes, dict)) or not hasattr(votes, "__iter__"):
            raise ValueError(f"round {self._k}: field 'votes': expected a list of 0/1 votes, got {votes!r}")
        votes = [self._vote(v) for v in votes]
        if tokens is None:
            tokens = [None] * len(votes)
        elif isinstance(tokens, (str, bytes, dict)) or not hasattr(tokens, "__iter__") or len(list(tokens)) != len(votes):
            raise ValueError(f"round {self._k}: field 'tokens': expected one token count per vote "
                             f"({len(votes)}), got {tokens!r}")
        tokens = [self._token_count(t) for t in tokens]
        room = self._cfg["M"] - self._n
        left = self.budget_left()["calls"]
        if left is not None:
            room = min(room, left)
        if len(votes) > room:
            why = f"room for {room} (M={self._cfg['M']}, {self._n} received" + (
                f", {left} verifier calls left in the budget)" if left is not None else ")")
            raise ValueError(f"round {self._k}: field 'votes': {len(votes)} votes given, {why}")
        budget_tokens, used = self._cfg["budget_tokens"], self._tokens
        for i, t in enumerate(tokens):
            if budget_tokens is not None and used >= budget_tokens:
                raise ValueError(f"round {self._k}: field 'votes': the token budget ({budget_tokens}) is spent "
                                 f"after vote {i} of {len(votes)}; send votes while need_vote() is True")
            used += t or 0
        saved = self._snapshot()
        try:
            for v, t in zip(votes, tokens):
                self.add_vote(v, t)
            return self.decide()
        except ValueError as exc:
            self._restore_snapshot(saved)   # all or nothing: the refused call leaves no vote behind
            if self._n + len(votes) < self._cfg["M"] and not self._spent_after(len(votes), sum(t or 0 for t in tokens)):
                need = self._cfg["M"] - self._n
                raise ValueError(f"round {self._k}: field 'votes': {len(votes)} vote(s) leave the round at "
                                 f"{self._n + len(votes)} of M={self._cfg['M']}, which does not decide it; nothing "
                                 f"was recorded: send the round's {need} remaining votes in one observe() call, or "
                                 "add_vote() while need_vote() is True") from None
            raise

    _STATE = ("_k", "_prior", "_prior_grid", "_mode", "_reason", "_incumbent", "_incumbent_votes", "_best_round",
              "_best_belief", "_accepts", "_n", "_verifier_calls", "_repair_calls", "_tokens", "_votes_without_tokens",
              "_done", "_last", "_cache")

    def _tokens_reported(self) -> str:
        if self._votes_without_tokens:
            return f"tokens unknown for {self._votes_without_tokens} vote(s)"
        return f"{self._tokens} tokens"

    def _snapshot(self) -> dict:
        return {name: getattr(self, name) for name in self._STATE}

    def _restore_snapshot(self, saved: dict) -> None:
        for name, value in saved.items():
            setattr(self, name, value)

    def _spent_after(self, calls: int, tokens: int) -> bool:
        c = self._cfg
        return (c["budget_calls"] is not None and self._verifier_calls + calls >= c["budget_calls"]) or (
            c["budget_tokens"] is not None and self._tokens + tokens >= c["budget_tokens"])

    def observe_count(self, accepts) -> Decision:
        """A round's remaining votes given as the accept count S_k (frozen arrays store counts); all or
        nothing, as :meth:`observe`."""
        self._check_open()
        room = self._cfg["M"] - self._n
        accepts = _integer(accepts, f"round {self._k}", "accepts", f"an accept count in 0..{room}")
        if not 0 <= accepts <= room:
            raise ValueError(f"round {self._k}: field 'accepts': expected an accept count in 0..{room}, "
                             f"got {accepts!r}")
        return self.observe([1] * accepts + [0] * (room - accepts))

    # ------------------------------------------------------------------ state
    def to_dict(self) -> dict:
        """The whole controller (parameters and the state of the current problem), JSON-ready."""
        return {"version": STATE_VERSION, "config": self.config, "state": {
            "round": self._k, "prior": self._prior,
            "prior_grid": None if self._prior_grid is None else [float(x) for x in self._prior_grid],
            "mode": self._mode, "reason": self._reason, "incumbent": self._incumbent,
            "incumbent_votes": self._incumbent_votes, "best_round": self._best_round,
            "best_belief": self._best_belief, "accepts": self._accepts, "votes": self._n,
            "verifier_calls": self._verifier_calls, "repair_calls": self._repair_calls, "tokens": self._tokens,
            "votes_without_tokens": self._votes_without_tokens,
            "done": self._done, "last": None if self._last is None else self._last.as_dict()},
            "calibration": None if self.calibration_report is None else self.calibration_report.to_dict()}

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (floats round-trip exactly)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict, source: str = "controller state") -> "OnlineController":
        """Inverse of :meth:`to_dict`; a malformed state raises :class:`ControllerStateError` naming the field."""
        if not isinstance(data, dict):
            raise ControllerStateError(f"{source}: expected a JSON object, got {type(data).__name__}")
        for key in ("version", "config", "state"):
            if key not in data:
                raise ControllerStateError(f"{source}: field '{key}': missing")
        if data["version"] != STATE_VERSION:
            raise ControllerStateError(f"{source}: field 'version': {data['version']!r}, this code reads {STATE_VERSION}")
        cfg = data["config"]
        if not isinstance(cfg, dict):
            raise ControllerStateError(f"{source}: field 'config': expected an object")
        unknown = sorted(set(data) - {"version", "config", "state", "calibration"})
        if unknown:
            raise ControllerStateError(f"{source}: field '{unknown[0]}': unknown")
        known = set(CONFIG_FIELDS)
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ControllerStateError(f"{source}: field 'config.{unknown[0]}': unknown")
        missing = sorted(known - set(cfg))
        if missing:
            raise ControllerStateError(f"{source}: field 'config.{missing[0]}': missing")
        try:
            ctl = cls(**{k: v for k, v in cfg.items() if k != "source"}, source=source)
        except ValueError as exc:
            raise ControllerStateError(str(exc).replace(f"{source}: field '", f"{source}: field 'config.")) from exc
        ctl._cfg["source"] = cfg["source"]
        if data.get("calibration") is not None:
            from .online_calibration import CalibrationReport

            try:
                ctl.calibration_report = CalibrationReport.from_dict(data["calibration"], f"{source}: field 'calibration'")
            except ValueError as exc:
                raise ControllerStateError(str(exc)) from None
        ctl._restore(data["state"], source)
        return ctl

    def _restore(self, st, source: str) -> None:
        if not isinstance(st, dict):
            raise ControllerStateError(f"{source}: field 'state': expected an object")
        c = self._cfg

        def field(name, check, what):
            if name not in st:
                raise ControllerStateError(f"{source}: field 'state.{name}': missing")
            value = st[name]
            if not check(value):
                raise ControllerStateError(f"{source}: field 'state.{name}': expected {what}, got {value!r}")
            return value

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        k = field("round", lambda v: is_int(v) and 0 <= v <= c["k_max"], f"an integer in 0..{c['k_max']}")
        prior = field("prior", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1,
                      "a probability")
        grid_n = None if self._grid is None else self._grid["pi"].size
        prior_grid = field("prior_grid", lambda v: (v is None) if grid_n is None else (
            isinstance(v, list) and len(v) == grid_n and all(isinstance(x, (int, float)) for x in v)),
            "null" if grid_n is None else f"a list of {grid_n} probabilities")
        mode = field("mode", lambda v: v in ("stop", "guard"), "'stop' or 'guard'")
        reason = field("reason", lambda v: isinstance(v, str), "a string")
        incumbent = field("incumbent", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
        inc_votes = field("incumbent_votes", lambda v: v is None or (is_int(v) and 0 <= v <= c["M"]),
                          f"null or a count in 0..{c['M']}")
        best_round = field("best_round", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
        best_belief = field("best_belief", lambda v: (v is None) if best_round is None else (
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1),
            "null exactly when 'state.best_round' is, else a probability")
        n = field("votes", lambda v: is_int(v) and 0 <= v <= c["M"], f"an integer in 0..{c['M']}")
        accepts = field("accepts", lambda v: is_int(v) and 0 <= v <= n, f"an integer in 0..{n}")
        vcalls = field("verifier_calls", lambda v: is_int(v) and v >= n, f"an integer >= {n}")
        rcalls = field("repair_calls", lambda v: is_int(v) and v >= 0, "an integer >= 0")
        tokens = field("tokens", lambda v: is_int(v) and v >= 0, "an integer >= 0")
        untokened = field("votes_without_tokens", lambda v: is_int(v) and 0 <= v <= vcalls,
                          f"an integer in 0..{vcalls} (state.verifier_calls)")
        done = field("done", lambda v: isinstance(v, bool), "true or false")
        last = field("last", lambda v: v is None or isinstance(v, dict), "null or a decision object")
        if (incumbent is None) != (inc_votes is None):
            raise ControllerStateError(f"{source}: field 'state.incumbent_votes': must be null exactly when "
                                       "'state.incumbent' is")
        if last is not None:
            try:
                last = Decision(**last)
            except TypeError as exc:
                raise ControllerStateError(f"{source}: field 'state.last': {exc}") from None
        self._k, self._prior = k, float(prior)
        self._prior_grid = None if prior_grid is None else np.asarray(prior_grid, dtype=float)
        self._mode, self._reason = mode, reason
        self._incumbent, self._incumbent_votes = incumbent, inc_votes
        self._best_round, self._best_belief = best_round, None if best_belief is None else float(best_belief)
        self._accepts, self._n = accepts, n
        self._verifier_calls, self._repair_calls, self._tokens = vcalls, rcalls, tokens
        self._votes_without_tokens = untokened
        self._done, self._last = done, last
        self._cache = {}

    @classmethod
    def from_json(cls, text: str, source: str = "controller state") -> "OnlineController":
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ControllerStateError(f"{source}: not valid JSON ({exc})") from None
        return cls.from_dict(data, source)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the state to ``path`` atomically."""
        text = self.to_json()
        return atomic_write(path, lambda fh: fh.write(text))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "OnlineController":
        """Read a state :meth:`save` wrote; errors name the file and the field."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: controller state file not found")
        return cls.from_json(path.read_text(), source=str(path))
