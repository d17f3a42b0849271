"""What both adapters share: the loop of Algorithm 1 as a sequence of requests, votes as 0/1, the repair
feedback, the per-role costs, the trace, deterministic judges and labeled calibration.

The loop is the controller's own (``vrr.policies.online``, App. A, Algorithm 1 with the mode chosen online):
generate p_0; ask the judge about the current plan while the controller asks for votes; ``decide()``; on
repair, rewrite the current plan with the votes as feedback; on commit, return the plan of round
``decision.candidate`` (Guard's keep-best incumbent, Eq. 9, where it applies). :func:`refine_steps` writes
that loop once, as a generator of requests; each adapter answers the requests with its framework's calls,
synchronously or asynchronously.
"""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..policies.online import Decision, OnlineController

_ACCEPT = {"1", "true", "yes", "y", "accept", "accepted", "correct", "valid", "pass", "passed"}
_REJECT = {"0", "false", "no", "n", "reject", "rejected", "incorrect", "wrong", "invalid", "fail", "failed"}
ROLES = ("generator", "judge", "repairer")


class DeterministicJudgeWarning(UserWarning):
    """The judge gives the same verdict for the same input, so its M votes are one vote repeated."""


def fresh_controller(controller: OnlineController, one_vote: bool = False) -> OnlineController:
    """A private copy of ``controller``, started for a new problem (``one_vote``: with M = 1).

    The adapters run problems concurrently (Inspect's samples, ``dspy.Parallel``), and a controller holds
    the state of one problem, so every call works on its own copy; the caller's controller is untouched.
    """
    if not isinstance(controller, OnlineController):
        raise TypeError(f"controller must be a vrr.policies.online.OnlineController (from_parameters, "
                        f"from_calibration or from_labeled), got {type(controller).__name__}")
    data = controller.to_dict()
    if one_vote:
        data = {**data, "config": {**data["config"], "M": 1}}
    return OnlineController.from_dict(data, source=controller.config["source"]).start()


def deterministic_judge_note(reason: str, controller: OnlineController | None, stacklevel: int = 3) -> str:
    """Warn that a deterministic judge counts as one vote per round, and say what that changes.

    Eq. 5 treats the M votes of a round as independent given the plan's validity. A judge that repeats its
    verdict for the same input breaks that: M copies of one verdict would count M times. The adapters ask
    such a judge once per round and run the controller with M = 1 (its rho0, rho1 are per-vote rates).
    """
    note = f"deterministic judge ({reason}): one vote per round, the controller runs with M = 1"
    if controller is not None and controller.M > 1:
        note += f" instead of M = {controller.M}"
        if controller.policy != "vrr_stop" and controller.config["delta"] > 1:
            note += (f"; Guard's retention margin delta = {controller.config['delta']} exceeds one vote, so a "
                     "later plan never replaces the incumbent (Eq. 9)")
    warnings.warn(note, DeterministicJudgeWarning, stacklevel=stacklevel)   # at the user's line
    return note


def text_vote(text) -> int | None:
    """A judge's reply text as a vote: 1 accept, 0 reject, None when no verdict can be read from it.

    A verdict word alone (yes/no, accept/reject, correct/incorrect, true/false, ...) is read
    case-insensitively; a longer reply goes through the repository's LLM-judge verdict parser
    (``vrr.loop.verifiers.parse_verdict``)."""
    if text is None:
        return None
    word = str(text).strip().strip(".!*\"'`").lower()
    if word in _ACCEPT:
        return 1
    if word in _REJECT:
        return 0
    from ..loop.verifiers import parse_verdict  # a sentence: the LLM judge's verdict parser

    return parse_verdict(str(text))


def as_vote(value, where: str, threshold: float | None = None) -> int:
    """A judge's verdict as a vote: 1 accept, 0 reject.

    With ``threshold``, a number is a graded reward and the vote is ``reward >= threshold``. Without it,
    booleans and the numbers 0/1 are taken as they are, and other numbers are errors: the controller's
    likelihood (Eq. 5) is over binary votes. Words such as yes/no, accept/reject, correct/incorrect,
    true/false are read case-insensitively. Any other text is an unparsable verdict and counts as a
    rejection, as the repository's LLM judge counts it (``vrr.loop.verifiers.vote``).
    """
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Real):
        if threshold is not None:
            if math.isnan(value):
                raise ValueError(f"{where}: the reward is NaN")
            return int(value >= threshold)
        if value in (0, 1):
            return int(value)
        raise ValueError(f"{where}: a vote must be 0 or 1 (or a bool), got {value!r}; the controller models "
                         "binary judge votes (Eq. 5), so give a threshold for a graded reward")
    if isinstance(value, str):
        read = text_vote(value)
        return 0 if read is None else read   # unparsable counts as a rejection, as in the paper's runs
    raise ValueError(f"{where}: a vote must be a bool, 0/1 or a verdict word, got {type(value).__name__} {value!r}")


def vote_feedback(decision: Decision) -> str:
    """What the repairer is told about the votes of a round (the summary the LLM judge's feedback gives)."""
    rejects = decision.votes - decision.accepts
    return f"{rejects} of {decision.votes} reviewers judged the solution incorrect."


def calibration_decision(accepts: int, votes: int) -> Decision:
    """The repair request of a calibration trajectory, in the shape the feedback functions read.

    Calibration repairs every first plan once (Sec. 4.2: the labeled transitions come from frozen
    trajectories in which every round repairs), so no controller decides; b_k, G_k and B_k are NaN.
    """
    nan = float("nan")
    return Decision("repair", 0, 0, nan, nan, nan, "calibration",
                    "calibration: every first plan is repaired once (Sec. 4.2)", accepts, votes, votes, 1)


def add_usage(usage: dict, role: str, calls: int = 1, input_tokens: int = 0, output_tokens: int = 0,
              total_tokens: int | None = None, calls_without_usage: int = 0) -> None:
    """Add ``calls`` model calls and their tokens to ``usage[role]`` (roles: generator, judge, repairer).

    ``calls_without_usage`` of them came back without token usage: their tokens are unknown, so the role's
    token fields become None (unknown, never 0) and ``calls_without_usage`` counts them."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {ROLES}")
    row = usage.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                                  "calls_without_usage": 0})
    row["calls"] += int(calls)
    row["calls_without_usage"] += int(calls_without_usage)
    total = total_tokens if total_tokens is not None else (input_tokens or 0) + (output_tokens or 0)
    for key, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens), ("total_tokens", total)):
        row[key] = None if row["calls_without_usage"] or row[key] is None else row[key] + int(value or 0)


def round_record(decision: Decision) -> dict:
    """One round for a transcript or a log: b_k (Eq. 5), G-hat_k (Eq. 6), B_k, action, mode and reason."""
    d = decision.as_dict()
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in d.items()}


@dataclass
class LoopTrace:
    """The record of one problem's loop: one :class:`Decision` per round, every round's plan, the costs.

    ``candidate`` is the round whose plan was returned (it differs from the last round when Guard kept an
    earlier incumbent, Eq. 9). ``verifier_calls`` / ``repair_calls`` are the controller's counts (with
    sequential voting, fewer verifier calls than M per round). ``usage`` holds the model calls and tokens
    per role (generator: the first plan; judge: the votes; repairer: every rewrite; tokens None when a call
    came back without usage). ``unparsable`` lists the judge replies no verdict could be read from: each
    counted as a rejection, as the paper's runs and the calibration count them. ``failures`` lists the
    calls that raised and were retried; ``kept_plans`` the repairs whose module could not write its framework's
    output format (a small model's prose), each judged on the last good plan it kept (its round, the round kept,
    the error); ``judge_note`` says why the judge counts as one vote per round;
    ``error`` is set when the loop itself raised.
    """

    decisions: list[Decision] = field(default_factory=list)
    candidates: list = field(default_factory=list)   # the plan of every round (framework objects)
    votes: list[list[int]] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    unparsable: list[dict] = field(default_factory=list)
    kept_plans: list[dict] = field(default_factory=list)
    judge_note: str | None = None
    error: str | None = None

    @property
    def committed(self) -> bool:
        return bool(self.decisions) and self.decisions[-1].committed

    @property
    def candidate(self) -> int:
        if not self.committed:
            raise RuntimeError("the loop has not committed yet")
        return self.decisions[-1].candidate

    @property
    def rounds(self) -> int:
        """Rounds judged (the initial plan and every repair)."""
        return len(self.decisions)

    @property
    def verifier_calls(self) -> int:
        """Votes the judge gave (also counted for a round that did not reach its decision)."""
        return sum(len(v) for v in self.votes)

    @property
    def repair_calls(self) -> int:
        return self.decisions[-1].repair_calls if self.decisions else 0

    def as_dict(self) -> dict:
        """JSON-ready (what the Inspect solver stores in the sample's metadata); a NaN (no B_k) becomes None."""
        return {"candidate": self.candidate if self.committed else None, "rounds": self.rounds,
                "verifier_calls": self.verifier_calls, "repair_calls": self.repair_calls,
                "decisions": [round_record(d) for d in self.decisions], "votes": [list(v) for v in self.votes],
                "usage": {role: dict(row) for role, row in self.usage.items()},
                "failures": list(self.failures), "unparsable": [dict(u) for u in self.unparsable],
                "kept_plans": [dict(k) for k in self.kept_plans],
                "judge_note": self.judge_note, "error": self.error}

    def read_vote(self, text, round_: int, parse_vote=None) -> int:
        """A judge reply as a vote; a reply no verdict can be read from counts as a rejection and is listed
        in ``unparsable`` (its round and its first 200 characters)."""
        read = text_vote(text) if parse_vote is None else parse_vote(text)
        if read is None:
            self.unparsable.append({"round": round_, "reply": str(text)[:200]})
            return 0
        return as_vote(read, f"judge vote in round {round_}")


@dataclass(frozen=True)
class Plan:
    """Request: write the plan of round ``round`` (round 0 from scratch; later, a repair of ``previous``
    after ``decision``)."""

    round: int
    previous: object = None
    decision: Decision | None = None

    @property
    def role(self) -> str:
        return "generator" if self.round == 0 else "repairer"


@dataclass(frozen=True)
class Votes:
    """Request: ``count`` judge votes on ``plan`` (round ``round``); answer with a list of 0/1."""

    round: int
    count: int
    plan: object


@dataclass(frozen=True)
class Decided:
    """Notice: round ``decision.round`` was decided (the adapters log it); answer with None."""

    decision: Decision


def check_vote_batch(vote_batch) -> None:
    if vote_batch is not None and (isinstance(vote_batch, bool) or not isinstance(vote_batch, int) or vote_batch < 1):
        raise ValueError(f"vote_batch must be an integer >= 1, got {vote_batch!r}")


def votes_per_request(controller: OnlineController, vote_batch: int | None) -> int:
    """Votes asked at once: all M concurrently without sequential voting; one at a time (or ``vote_batch``)
    with it, so that the controller can stop asking early."""
    check_vote_batch(vote_batch)
    if controller.config["sequential"] == "off":
        return controller.M if vote_batch is None else min(vote_batch, controller.M)
    return 1 if vote_batch is None else min(vote_batch, controller.M)


def refine_steps(ctl: OnlineController, trace: LoopTrace, vote_batch: int | None):
    """Algorithm 1's loop as a generator of requests (:class:`Plan`, :class:`Votes`, :class:`Decided`).

    The adapter sends back the plan, the list of votes, or None. Every vote received is given to the
    controller (a batch never exceeds the votes the round still has room for). Returns ``trace``.
    """
    batch = votes_per_request(ctl, vote_batch)
    decision = None
    while True:
        k = ctl.round
        plan = yield Plan(k, trace.candidates[-1] if trace.candidates else None, decision)
        trace.candidates.append(plan)
        trace.votes.append([])
        while ctl.need_vote():
            n = min(batch, ctl.M - len(trace.votes[-1]))
            got = yield Votes(k, n, plan)
            if len(got) != n:
                raise RuntimeError(f"round {k}: asked for {n} votes, got {len(got)}")
            for v in got:
                ctl.add_vote(v)
                trace.votes[-1].append(int(v))
        decision = ctl.decide()
        trace.decisions.append(decision)
        yield Decided(decision)
        if decision.committed:
            return trace


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of an error; for an exception group (concurrent votes), of its first error and
    how many there were."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = []

        def walk(group):
            for e in group.exceptions:
                walk(e) if isinstance(e, BaseExceptionGroup) else leaves.append(e)

        walk(exc)
        if leaves:
            more = f" (and {len(leaves) - 1} more)" if len(leaves) > 1 else ""
            return f"{type(leaves[0]).__name__}: {leaves[0]}{more}"
    return f"{type(exc).__name__}: {exc}"


class FailureBudget:
    """``dspy.Refine``'s ``fail_count``: calls that raise are retried until ``limit`` failures, then the last
    error is raised. Each failure is recorded in the trace with its role and round."""

    def __init__(self, limit: int, trace: LoopTrace):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"fail_count must be an integer >= 0, got {limit!r}")
        self.limit, self.trace = limit, trace

    def failed(self, role: str, round_: int, exc: BaseException) -> None:
        """Record a failed call; re-raise it once more than ``limit`` calls failed."""
        self.trace.failures.append({"role": role, "round": round_, "error": describe_error(exc)})
        if len(self.trace.failures) > self.limit:
            raise exc


def labeled_controller(votes: list, labels: list, repairs: list, *, M: int, k_max: int, policy: str,
                       j_min: float, **options) -> OnlineController:
    """The controller calibrated from a labeled set (``OnlineController.from_labeled``): first-plan votes
    and labels give rho0, rho1, pi and the labeled J diagnostic; the repair pairs give alpha, beta."""
    if not votes:
        raise ValueError("calibration needs at least one labeled example; the set is empty")
    return OnlineController.from_labeled(votes=votes, labels=labels, repairs=repairs, M=M, k_max=k_max,
                                         policy=policy, j_min=j_min, **options)
