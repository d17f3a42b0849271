"""The online controller: VRR-Stop, VRR-Guard and Algorithm 1 (Sec. 4, Eqs. 4-9; App. A, Algorithm 1, with the
mode chosen online) for one problem at a time, round by round or vote by vote.

It owns the state of the current problem and the observe/decide cycle; the rest is composed: the options
(``_options``), the round's step (``_round``: Eqs. 5-9, Algorithm 1 lines 4-19), the curtailment rules of
sequential voting (``_curtail``), budgets and cost (``_budget``), the JSON state (``_state``) and the
constructors (``_constructors``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...common.atomic import atomic_write
from ...core.belief import boundary, predict
from . import _curtail as curtail
from ._budget import best_with, budget_choice, budget_left, budget_spent, token_count, tokens_reported
from ._checks import integer_field
from ._constructors import Constructors
from ._decision import Decision, Step
from ._modes import planned_mode
from ._options import controller_config, radius_points, refuse_unknown_options, repair_rates
from ._round import Round
from ._state import (STATE_KEYS, ControllerStateError, parse_document, read_calibration, read_document, read_state,
                     state_dict)


class OnlineController(Constructors):
    """VRR-Stop / VRR-Guard / Algorithm 1 for one problem at a time, round by round (App. A, Algorithm 1).

    Build it with :meth:`from_parameters`, :meth:`from_labeled`, :meth:`from_unlabeled` or
    :meth:`from_calibration`; call :meth:`start` for each new problem, then :meth:`observe` (a round's
    votes) or :meth:`need_vote` / :meth:`add_vote` / :meth:`decide` (one vote at a time) until a decision
    commits.
    """

    def __new__(cls, *args, **kwargs):
        """Refuse a keyword ``__init__`` does not take with an error naming it (before ``__init__`` runs)."""
        refuse_unknown_options(cls, kwargs)
        return super().__new__(cls)

    def __init__(self, *, M: int, k_max: int, rho0: float, rho1: float, alpha, beta, pi: float,
                 policy: str | None = None, delta: int | None = None, tau: float | None = None,
                 repair_cost: float | None = None, value: float = 1.0, draws: dict | None = None, eta: float = 0.05,
                 j_hat: float | None = None, j_min: float = 0.10, check: dict | None = None,
                 mode_evidence: dict | None = None, stop_mode: bool | None = None, sequential: str = "off", error_rate: float = 0.01, budget_calls: int | None = None,
                 budget_tokens: int | None = None, source: str = "parameters"):
        self._cfg = controller_config(
            M=M, k_max=k_max, rho0=rho0, rho1=rho1, alpha=alpha, beta=beta, pi=pi, policy=policy, delta=delta,
            tau=tau, repair_cost=repair_cost, value=value, draws=draws, eta=eta, j_hat=j_hat, j_min=j_min,
            check=check, mode_evidence=mode_evidence, stop_mode=stop_mode, sequential=sequential, error_rate=error_rate,
            budget_calls=budget_calls, budget_tokens=budget_tokens, source=source)
        self.calibration_report = None   # set by from_labeled / from_unlabeled / from_calibration
        self._critical = None            # VRR-Stop's breakpoints per round (future-aware curtailment), lazily
        self._grid = radius_points(self._cfg)
        self.start()

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
        return self._round

    @property
    def done(self) -> bool:
        """True once a decision committed (call :meth:`start` for the next problem)."""
        return self._done

    @property
    def last(self) -> Decision | None:
        """The most recent decision of this problem."""
        return self._last

    @property
    def mode(self) -> str:
        """The mode the current round runs in, ``"stop"`` or ``"guard"`` (:func:`planned_mode` at the start
        of a problem, held for the problem)."""
        return self._mode

    def threshold(self, k: int | None = None) -> float:
        """The cost-aware boundary b*_tau = (alpha - tau) / (alpha + beta) of round ``k`` (default: the
        current round), Eq. 7: VRR-Stop repairs while b_k < b*_tau (and never when alpha <= tau)."""
        a, be = repair_rates(self._cfg, self._round if k is None else int(k))
        return float(boundary(a, be, self._cfg["tau"]))

    def budget_left(self) -> dict:
        """Verifier calls and tokens left of this problem's budget (None where no budget is set)."""
        return budget_left(self._cfg, self._verifier_calls, self._tokens)

    # ------------------------------------------------------------------ per-problem state
    def start(self) -> "OnlineController":
        """Reset for a new problem (round 0, b^- = pi, no incumbent, counters at zero)."""
        c = self._cfg
        ci = None if self.calibration_report is None else self.calibration_report.j_ci
        self._round = 0
        self._prior = c["pi"]
        self._prior_grid = None if self._grid is None else self._grid["pi"].copy()
        self._mode, self._reason = planned_mode(c["policy"], c["j_hat"], c["j_min"], c["stop_mode"], j_ci=ci,
                                                check=c["check"], evidence=c["mode_evidence"])
        self._incumbent: int | None = None
        self._incumbent_votes: int | None = None
        self._best_round: int | None = None     # the judged plan with the highest posterior (budget commit)
        self._best_belief: float | None = None
        self._accepts = 0
        self._votes = 0
        self._verifier_calls = 0
        self._repair_calls = 0
        self._tokens = 0
        self._votes_without_tokens = 0
        self._done = False
        self._last: Decision | None = None
        self._cache: dict = {}
        return self

    def _snapshot(self) -> dict:
        return {name: getattr(self, "_" + name) for name in (*STATE_KEYS, "cache")}

    def _restore_snapshot(self, saved: dict) -> None:
        for name, value in saved.items():
            setattr(self, "_" + name, value)

    # ------------------------------------------------------------------ one round
    def _current(self) -> Round:
        return Round(self._cfg, self._grid, self._round, self._prior, self._prior_grid, self._mode, self._reason,
                     self._incumbent, self._incumbent_votes)

    def _step(self, S: int) -> Step:
        """Round k's step when the plan got S of M accepting votes (``Round.step``, cached for the round)."""
        key = ("step", S)
        if key not in self._cache:
            self._cache[key] = self._current().step(S)
        return self._cache[key]

    def _critical_priors(self) -> list | None:
        """:func:`curtail.critical_priors` of this controller's config, computed once."""
        if self._critical is None:
            self._critical = curtail.critical_priors(self._cfg) or []
        return self._critical or None

    def _settled(self) -> Step | None:
        """The round's step if the votes so far decide it, else None (sequential voting, ``_curtail``)."""
        c = self._cfg
        s, n, M = self._accepts, self._votes, c["M"]
        if n == M:
            return self._step(s)
        key = ("settled", s, n)
        if key in self._cache:
            return self._cache[key]
        steps = {S: self._step(S) for S in range(s, s + M - n + 1)}
        rnd = self._current()
        # exact curtailment: every completion of the remaining votes gives the same decision and state,
        # or (VRR-Stop) the same decision now and on every future vote path
        out = curtail.exact(steps) or curtail.future_aware(rnd, s, n, steps, self._critical_priors)
        if out is None and c["sequential"] == "predictive":
            out = curtail.predictive(rnd, s, n, steps)
        elif out is None and c["sequential"] == "sprt":
            out = curtail.sprt(rnd, s, n, steps)
        self._cache[key] = out
        return out

    # ------------------------------------------------------------------ votes and decisions
    def _spent(self) -> bool:
        """True once the per-problem budget (verifier calls or tokens) is used up."""
        return budget_spent(self._cfg, self._verifier_calls, self._tokens)

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError(f"round {self._round}: this problem is committed; call start() for the next one")

    def need_vote(self) -> bool:
        """True while the current round needs another vote (always until M votes when ``sequential="off"``;
        never once the budget is spent)."""
        if self._done or self._votes >= self._cfg["M"] or self._spent():
            return False
        if self._cfg["sequential"] == "off":
            return True
        return self._settled() is None

    def _vote(self, vote) -> int:
        if isinstance(vote, (bool, np.bool_)):
            vote = int(vote)
        if not isinstance(vote, (int, np.integer)) or vote not in (0, 1):
            raise ValueError(f"round {self._round}: field 'vote': a vote must be 0 (reject) or 1 (accept), "
                             f"got {vote!r}")
        return int(vote)

    def add_vote(self, vote, tokens: int | None = None) -> None:
        """One judge vote on the current plan (1 = accept, 0 = reject); ``tokens``: what the call cost
        (needed with ``budget_tokens``)."""
        self._check_open()
        v, t = self._vote(vote), token_count(tokens, self._cfg, self._round)
        if self._votes >= self._cfg["M"]:
            raise ValueError(f"round {self._round}: field 'vote': the round already has M={self._cfg['M']} votes; "
                             "call decide()")
        if self._spent():
            raise ValueError(f"round {self._round}: field 'vote': the budget is spent ({self.budget_left()}); call "
                             "decide()")
        self._accepts += v
        self._votes += 1
        self._verifier_calls += 1
        if t is None:
            self._votes_without_tokens += 1
        else:
            self._tokens += t

    def decide(self) -> Decision:
        """The decision of the current round from the votes received (all M, or enough in sequential mode).
        With the budget spent it commits the keep-best incumbent (Eq. 9) rather than the last plan."""
        self._check_open()
        c = self._cfg
        step = self._step(self._accepts) if self._votes == c["M"] else (
            self._settled() if c["sequential"] != "off" else None)
        k, s, n = self._round, self._accepts, self._votes
        if step is None and not self._spent():
            raise ValueError(f"round {k}: {n} of M={c['M']} votes do not decide the round yet; send more votes "
                             "while need_vote() is True (add_vote), then call decide()")
        mode_now = self._mode
        b, g, radius, radius_low, b_grid = self._current().evaluate(s, n)
        best = best_with(self._best_round, self._best_belief, k, b) if n > 0 else (
            None if self._best_round is None else (self._best_round, self._best_belief))
        if step is None:
            candidate, what = budget_choice(self._mode, self._incumbent, best, c["delta"])
            step = Step("commit", candidate, self._mode, f"budget spent in round {k} ({self._verifier_calls} "
                        f"verifier calls, {tokens_reported(self._tokens, self._votes_without_tokens)}): {what}",
                        self._incumbent, self._incumbent_votes, False)
        elif step.action == "repair" and self._spent():
            # the repaired plan could get no vote: return what the budget returns after this round
            candidate, what = budget_choice(step.mode, step.incumbent, best, c["delta"])
            step = Step("commit", candidate, step.mode, f"budget spent after round {k}: {what}", step.incumbent,
                        step.incumbent_votes, False)
        if step.action == "repair":
            self._repair_calls += 1
        decision = Decision(step.action, k, int(step.candidate), b, g, radius, step.mode, step.reason, s, n,
                            self._verifier_calls, self._repair_calls,
                            None if self._votes_without_tokens else self._tokens, radius_low)
        if step.action == "commit":
            self._done = True
        else:
            a, be = repair_rates(c, k)
            # predict step (Sec. 4.1). In Guard mode the belief is only reported, never acted on.
            self._prior = float(predict(b, a, be))
            if mode_now == "stop" and step.mode == "stop" and b_grid is not None:
                self._prior_grid = predict(b_grid, self._grid["alpha"], self._grid["beta"])
            self._mode, self._reason = step.mode, step.reason
            self._incumbent, self._incumbent_votes = step.incumbent, step.incumbent_votes
            if best is not None:
                self._best_round, self._best_belief = best[0], float(best[1])
            self._round += 1
            self._accepts = self._votes = 0
            self._cache = {}
        self._last = decision
        return decision

    def observe(self, votes, tokens=None) -> Decision:
        """Feed a round's votes (a list of 0/1) and get the round's decision (Algorithm 1, one iteration).
        ``tokens``: one token count per vote (needed with ``budget_tokens``). All or nothing: a call that is
        refused (too long, a bad vote, or too few votes to decide the round) leaves the state unchanged."""
        self._check_open()
        k, M = self._round, self._cfg["M"]
        if isinstance(votes, (str, bytes, dict)) or not hasattr(votes, "__iter__"):
            raise ValueError(f"round {k}: field 'votes': expected a list of 0/1 votes, got {votes!r}")
        votes = [self._vote(v) for v in votes]
        if tokens is None:
            tokens = [None] * len(votes)
        elif isinstance(tokens, (str, bytes, dict)) or not hasattr(tokens, "__len__") or len(tokens) != len(votes):
            raise ValueError(f"round {k}: field 'tokens': expected one token count per vote "
                             f"({len(votes)}), got {tokens!r}")
        tokens = [token_count(t, self._cfg, k) for t in tokens]
        room = M - self._votes
        left = self.budget_left()["calls"]
        if left is not None:
            room = min(room, left)
        if len(votes) > room:
            why = f"room for {room} (M={M}, {self._votes} received" + (
                f", {left} verifier calls left in the budget)" if left is not None else ")")
            raise ValueError(f"round {k}: field 'votes': {len(votes)} votes given, {why}")
        budget_tokens, used = self._cfg["budget_tokens"], self._tokens
        for i, t in enumerate(tokens):
            if budget_tokens is not None and used >= budget_tokens:
                raise ValueError(f"round {k}: field 'votes': the token budget ({budget_tokens}) is spent "
                                 f"after vote {i} of {len(votes)}; send votes while need_vote() is True")
            used += t or 0
        saved = self._snapshot()
        try:
            for v, t in zip(votes, tokens):
                self.add_vote(v, t)
            return self.decide()
        except ValueError:
            self._restore_snapshot(saved)   # all or nothing: the refused call leaves no vote behind
            spent = budget_spent(self._cfg, self._verifier_calls + len(votes),
                                 self._tokens + sum(t or 0 for t in tokens))
            if self._votes + len(votes) < M and not spent:
                raise ValueError(f"round {k}: field 'votes': {len(votes)} vote(s) leave the round at "
                                 f"{self._votes + len(votes)} of M={M}, which does not decide it; nothing "
                                 f"was recorded: send the round's {M - self._votes} remaining votes in one "
                                 "observe() call, or add_vote() while need_vote() is True") from None
            raise

    def observe_count(self, accepts) -> Decision:
        """A round's remaining votes given as the accept count S_k (frozen arrays store counts); all or
        nothing, as :meth:`observe`."""
        self._check_open()
        room = self._cfg["M"] - self._votes
        accepts = integer_field(accepts, f"round {self._round}", "accepts", f"an accept count in 0..{room}")
        if not 0 <= accepts <= room:
            raise ValueError(f"round {self._round}: field 'accepts': expected an accept count in 0..{room}, "
                             f"got {accepts!r}")
        return self.observe([1] * accepts + [0] * (room - accepts))

    # ------------------------------------------------------------------ state (``_state``)
    def to_dict(self) -> dict:
        """The whole controller (parameters and the state of the current problem), JSON-ready."""
        return state_dict(self.config, {name: getattr(self, "_" + name) for name in STATE_KEYS},
                          self.calibration_report)

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (floats round-trip exactly)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict, source: str = "controller state") -> "OnlineController":
        """Inverse of :meth:`to_dict`; a malformed state raises :class:`ControllerStateError` naming the field."""
        cfg = read_document(data, source)
        try:
            ctl = cls(**{k: v for k, v in cfg.items() if k != "source"}, source=source)
        except ValueError as exc:
            raise ControllerStateError(str(exc).replace(f"{source}: field '", f"{source}: field 'config.")) from exc
        ctl._cfg["source"] = cfg["source"]
        report = read_calibration(data, source)
        if report is not None:
            ctl.calibration_report = report
        grid_size = None if ctl._grid is None else ctl._grid["pi"].size
        ctl._restore_snapshot({**read_state(data["state"], ctl._cfg, grid_size, source), "cache": {}})
        return ctl

    @classmethod
    def from_json(cls, text: str, source: str = "controller state") -> "OnlineController":
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(parse_document(text, source), source)

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
        return cls.from_json(path.read_bytes(), source=str(path))
