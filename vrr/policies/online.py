"""Online controller: VRR-Stop, VRR-Guard and Algorithm 1 run inside a live verify-repair loop
(Sec. 4, Eqs. 5-9; App. A, Algorithm 1, with the mode chosen online).

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

    ctl = OnlineController.from_calibration("results/gsm8k_cpu_pmstress/calibration.json")
    ctl.start()                                        # a new problem
    plans = [generate(problem)]
    while True:
        d = ctl.observe([judge(plans[-1]) for _ in range(ctl.M)])   # votes are 0/1 ints
        if d.action == "commit":
            answer = plans[d.candidate]                # Guard's incumbent, or the current plan
            break
        plans.append(repair(plans[-1]))

Sequential voting (``sequential="exact"``: the same decisions with fewer votes; ``"predictive"``: stop
asking once the action agrees with the full-M action with probability >= 1 - ``error_rate``)::

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

from ..common.atomic import atomic_write
from ..core.belief import belief_update, gain, predict
from ..core.guard import keep_best_step
from ..calibration.identifiability import PARAM_NAMES, radius_grid
from .rules import algorithm1_step, stop_commits

POLICIES = ("algorithm1", "vrr_stop", "vrr_guard")
SEQUENTIAL = ("off", "exact", "predictive")
STATE_VERSION = 1


@dataclass(frozen=True)
class Decision:
    """What the controller decided after round ``round`` (Algorithm 1, one iteration of its loop).

    * ``action``: ``"commit"`` (return ``candidate`` and stop) or ``"repair"`` (repair the current plan
      and send the next round's votes);
    * ``candidate``: round index of the plan to return: on commit the committed plan (Guard's keep-best
      incumbent, Eq. 9, where it applies); on repair the plan the policy would return if the loop had to
      stop now;
    * ``belief`` b_k (Eq. 5), ``gain`` G-hat_k (Eq. 6), ``radius`` B_k (App. A; NaN where the policy uses
      none); in sequential mode they are computed from the votes actually received this round;
    * ``mode``: ``"stop"`` or ``"guard"`` after this round, ``reason``: why (J diagnostic, Eq. 8, budget);
    * ``accepts`` / ``votes``: accepting votes and votes received this round;
    * ``verifier_calls`` / ``repair_calls``: totals for this problem so far (a repair decision counts the
      repair it asks for).
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
        """Two counts with equal keys lead to the same decision and the same future (curtailment)."""
        tail = (S,) if self.needs_count else ()
        return (self.action, self.candidate, self.mode, self.incumbent, self.incumbent_votes) + tail


def _unit(value, source: str, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: field '{name}': expected a number in [0, 1], got {value!r}") from None
    if not 0.0 <= out <= 1.0 or math.isnan(out):
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


class OnlineController:
    """VRR-Stop / VRR-Guard / Algorithm 1 for one problem at a time, round by round (App. A, Algorithm 1).

    Build it with :meth:`from_parameters` or :meth:`from_calibration`; call :meth:`start` for each new
    problem, then :meth:`observe` (a round's votes) or :meth:`need_vote` / :meth:`add_vote` /
    :meth:`decide` (one vote at a time) until a decision commits.
    """

    def __init__(self, *, M: int, k_max: int, rho0: float, rho1: float, alpha, beta, pi: float,
                 policy: str = "algorithm1", delta: int = 5, tau: float = 0.0, intervals: dict | None = None,
                 j_hat: float | None = None, j_min: float = 0.10, stop_mode: bool | None = None, grid: int = 5,
                 sequential: str = "off", error_rate: float = 0.01, source: str = "parameters"):
        src = source
        if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
            raise ValueError(f"{src}: field 'M': votes per round must be an integer >= 1, got {M!r}")
        if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 0:
            raise ValueError(f"{src}: field 'k_max': the repair budget must be an integer >= 0, got {k_max!r}")
        if policy not in POLICIES:
            raise ValueError(f"{src}: field 'policy': {policy!r} is not one of {POLICIES}")
        if sequential not in SEQUENTIAL:
            raise ValueError(f"{src}: field 'sequential': {sequential!r} is not one of {SEQUENTIAL}")
        if not 0.0 < float(error_rate) < 1.0:
            raise ValueError(f"{src}: field 'error_rate': must lie in (0, 1), got {error_rate!r}")
        if isinstance(delta, bool) or not isinstance(delta, (int, np.integer)):
            raise ValueError(f"{src}: field 'delta': the retention margin must be an integer, got {delta!r}")
        cfg = {"M": int(M), "k_max": int(k_max), "rho0": _unit(rho0, src, "rho0"), "rho1": _unit(rho1, src, "rho1"),
               "alpha": _rate(alpha, int(k_max), src, "alpha"), "beta": _rate(beta, int(k_max), src, "beta"),
               "pi": _unit(pi, src, "pi"), "policy": policy, "delta": int(delta), "tau": float(tau),
               "intervals": None, "j_hat": None if j_hat is None else float(j_hat), "j_min": float(j_min),
               "stop_mode": None if stop_mode is None else bool(stop_mode), "grid": int(grid),
               "sequential": sequential, "error_rate": float(error_rate), "source": str(source)}
        if policy == "algorithm1":
            if intervals is None:
                raise ValueError(f"{src}: field 'intervals': Algorithm 1 needs the parameter box behind the error "
                                 f"radius B_k: {{name: (lo, hi)}} for {PARAM_NAMES}")
            if isinstance(cfg["alpha"], list) or isinstance(cfg["beta"], list):
                raise ValueError(f"{src}: field 'alpha': Algorithm 1's error radius is defined for stationary "
                                 "alpha, beta; per-round rates go with policy='vrr_stop'")
            if stop_mode is None and j_hat is None:
                raise ValueError(f"{src}: field 'j_hat': Algorithm 1 chooses its mode from the labeled J "
                                 "diagnostic; give j_hat (or stop_mode)")
        if intervals is not None:
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
        self._grid = None
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
        "vrr_guard"), ``delta`` (Eq. 9), ``tau`` (Eq. 7), ``intervals`` ({name: (lo, hi)}, the box behind
        B_k), ``j_hat`` and ``j_min`` (Algorithm 1 line 1) or ``stop_mode``, ``grid`` (B_k's grid levels),
        ``sequential`` ("off" | "exact" | "predictive") and ``error_rate`` (predictive mode)."""
        return cls(M=M, k_max=k_max, rho0=rho0, rho1=rho1, alpha=alpha, beta=beta, pi=pi, **options)

    @classmethod
    def from_calibration(cls, path: str | os.PathLike, fold: int | None = None, *, arrays=None,
                         policy: str = "algorithm1", **options) -> "OnlineController":
        """A controller from the calibration 03_calibrate saved (``calibration.json``).

        ``fold``: use that cross-fit fold's parameters, intervals and J diagnostic (exactly what replay
        uses for the fold's instances); ``None`` refits on all calibration instances (deployment).
        ``arrays``: the setting's ``arrays.npz`` (or a loaded ``Setting``); by default the file the
        calibration names (``arrays_path``). With the arrays, B_k's box is the bootstrap box and J-hat the
        held-out labeled diagnostic, as in replay; without them the box comes from the saved counts
        (Clopper-Pearson) and J-hat from the saved probe diagnostic. ``options`` as in
        :meth:`from_parameters` (``delta``, ``tau``, ``j_min`` default to the saved config; ``M`` and
        ``k_max`` to the arrays).
        """
        from .replay import controller_parameters  # the calibration file (and arrays) -> parameters

        params = controller_parameters(path, fold=fold, arrays=arrays, policy=policy, **options)
        return cls(**params)

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

    # ------------------------------------------------------------------ per-problem state
    def _initial_mode(self) -> tuple[str, str]:
        c = self._cfg
        if c["policy"] == "vrr_stop":
            return "stop", "VRR-Stop (Sec. 4.1): commit when G-hat_k <= tau"
        if c["policy"] == "vrr_guard":
            return "guard", "VRR-Guard (Sec. 4.3): full budget, keep-best incumbent (Eq. 9)"
        if c["stop_mode"] is not None:
            return ("stop", "Stop mode given") if c["stop_mode"] else ("guard", "Guard mode given")
        j = c["j_hat"]
        if math.isnan(j):
            return "guard", "labeled J diagnostic undefined (a class is absent): Guard mode"
        if j >= c["j_min"]:
            return "stop", f"labeled J-hat {j:.3f} >= J_min {c['j_min']:g}: Stop mode"
        return "guard", f"labeled J-hat {j:.3f} below J_min {c['j_min']:g}: Guard mode"

    def start(self) -> "OnlineController":
        """Reset for a new problem (round 0, b^- = pi, no incumbent, counters at zero)."""
        c = self._cfg
        self._k = 0
        self._prior = c["pi"]
        self._prior_grid = None if self._grid is None else self._grid["pi"].copy()
        self._mode, self._reason = self._initial_mode()
        self._incumbent: int | None = None
        self._incumbent_votes: int | None = None
        self._accepts = 0
        self._n = 0
        self._verifier_calls = 0
        self._repair_calls = 0
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
        if c["policy"] != "vrr_stop":  # keep-best tracking, Eq. 9 (c_0 = p_0)
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
                    out = _Step("commit", k, mode, why, None, None, False)
                elif last:
                    out = _Step("commit", k, mode, "budget exhausted (K_max)", None, None, False)
                else:
                    out = _Step("repair", k, mode, "G-hat_k > tau (Eqs. 6-7)", None, None, True)
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
        out = None
        if c["sequential"] == "exact" or len(keys) == 1:
            # curtailment: every completion of the remaining votes gives the same decision and state
            out = next(iter(steps.values())) if len(keys) == 1 else None
        elif c["sequential"] == "predictive":
            out = self._predictive(s, n, steps)
        self._cache[key] = out
        return out

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

    def need_vote(self) -> bool:
        """True while the current round needs another vote (always until M votes when ``sequential="off"``)."""
        if self._done or self._n >= self._cfg["M"]:
            return False
        if self._cfg["sequential"] == "off":
            return True
        return self._settled() is None

    def add_vote(self, vote) -> None:
        """One judge vote on the current plan (1 = accept, 0 = reject)."""
        if self._done:
            raise RuntimeError("the controller committed this problem; call start() for the next one")
        if isinstance(vote, (bool, np.bool_)):
            vote = int(vote)
        if not isinstance(vote, (int, np.integer)) or vote not in (0, 1):
            raise ValueError(f"a vote must be 0 (reject) or 1 (accept), got {vote!r}")
        if self._n >= self._cfg["M"]:
            raise ValueError(f"round {self._k} already has M={self._cfg['M']} votes; call decide()")
        self._accepts += int(vote)
        self._n += 1
        self._verifier_calls += 1

    def decide(self) -> Decision:
        """The decision of the current round from the votes received (all M, or enough in sequential mode)."""
        if self._done:
            raise RuntimeError("the controller committed this problem; call start() for the next one")
        c = self._cfg
        step = self._step(self._accepts) if self._n == c["M"] else (
            self._settled() if c["sequential"] != "off" else None)
        if step is None:
            raise ValueError(f"round {self._k}: {self._n} of M={c['M']} votes do not decide the round yet "
                             "(send votes while need_vote() is True)")
        k, s, n = self._k, self._accepts, self._n
        mode_now = self._mode
        b, g, radius, b_grid = self._evaluate(s, n)
        if step.action == "repair":
            self._repair_calls += 1
        decision = Decision(step.action, k, int(step.candidate), b, g, radius, step.mode, step.reason, s, n,
                            self._verifier_calls, self._repair_calls)
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
            self._k += 1
            self._accepts = self._n = 0
            self._cache = {}
        self._last = decision
        return decision

    def observe(self, votes) -> Decision:
        """Feed a round's votes (a list of 0/1) and get the round's decision (Algorithm 1, one iteration)."""
        votes = list(votes)
        if len(votes) > self._cfg["M"] - self._n:
            raise ValueError(f"round {self._k}: {len(votes)} votes given, room for {self._cfg['M'] - self._n} "
                             f"(M={self._cfg['M']})")
        for v in votes:
            self.add_vote(v)
        return self.decide()

    def observe_count(self, accepts: int) -> Decision:
        """A round's M votes given as the accept count S_k (frozen arrays store counts)."""
        accepts = int(accepts)
        return self.observe([1] * accepts + [0] * (self._cfg["M"] - self._n - accepts))

    # ------------------------------------------------------------------ state
    def to_dict(self) -> dict:
        """The whole controller (parameters and the state of the current problem), JSON-ready."""
        return {"version": STATE_VERSION, "config": self.config, "state": {
            "round": self._k, "prior": self._prior,
            "prior_grid": None if self._prior_grid is None else [float(x) for x in self._prior_grid],
            "mode": self._mode, "reason": self._reason, "incumbent": self._incumbent,
            "incumbent_votes": self._incumbent_votes, "accepts": self._accepts, "votes": self._n,
            "verifier_calls": self._verifier_calls, "repair_calls": self._repair_calls, "done": self._done,
            "last": None if self._last is None else self._last.as_dict()}}

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
        known = {"M", "k_max", "rho0", "rho1", "alpha", "beta", "pi", "policy", "delta", "tau", "intervals",
                 "j_hat", "j_min", "stop_mode", "grid", "sequential", "error_rate", "source"}
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
        n = field("votes", lambda v: is_int(v) and 0 <= v <= c["M"], f"an integer in 0..{c['M']}")
        accepts = field("accepts", lambda v: is_int(v) and 0 <= v <= n, f"an integer in 0..{n}")
        vcalls = field("verifier_calls", lambda v: is_int(v) and v >= n, f"an integer >= {n}")
        rcalls = field("repair_calls", lambda v: is_int(v) and v >= 0, "an integer >= 0")
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
        self._accepts, self._n = accepts, n
        self._verifier_calls, self._repair_calls = vcalls, rcalls
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
