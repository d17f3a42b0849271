"""What both adapters share: one controller per problem, votes as 0/1, the repairer's feedback, the trace.

The loop both adapters run is the controller's own (``vrr.policies.online``, Algorithm 1 with the mode
chosen online): generate p_0; while the controller asks for a vote, ask the judge once more about the
current plan; ``decide()``; on repair, rewrite the current plan with the votes as feedback; on commit,
return the plan of round ``decision.candidate`` (Guard's keep-best incumbent, Eq. 9, where it applies).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ..policies.online import Decision, OnlineController

_ACCEPT = {"1", "true", "yes", "y", "accept", "accepted", "correct", "valid", "pass", "passed"}
_REJECT = {"0", "false", "no", "n", "reject", "rejected", "incorrect", "wrong", "invalid", "fail", "failed"}


def fresh_controller(controller: OnlineController) -> OnlineController:
    """A private copy of ``controller``, started for a new problem.

    The adapters run problems concurrently (Inspect's samples, ``dspy.Parallel``), and a controller holds
    the state of one problem, so every call works on its own copy; the caller's controller is untouched.
    """
    if not isinstance(controller, OnlineController):
        raise TypeError(f"controller must be a vrr.policies.online.OnlineController (from_parameters or "
                        f"from_calibration), got {type(controller).__name__}")
    return OnlineController.from_dict(controller.to_dict(), source=controller.config["source"]).start()


def as_vote(value, where: str) -> int:
    """A judge's verdict as a vote: 1 accept, 0 reject.

    Booleans and the numbers 0/1 are taken as they are; words such as yes/no, accept/reject,
    correct/incorrect, true/false are read case-insensitively. Any other text is an unparsable verdict
    and counts as a rejection, as the repository's LLM judge counts it (``vrr.loop.verifiers.vote``).
    Other types (a float reward of 0.7, None) are errors: the controller's likelihood (Eq. 5) is over
    binary votes.
    """
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Real):
        if value in (0, 1):
            return int(value)
        raise ValueError(f"{where}: a vote must be 0 or 1 (or a bool), got {value!r}; the controller models "
                         "binary judge votes (Eq. 5), so threshold a graded reward before returning it")
    if isinstance(value, str):
        word = value.strip().strip(".!*\"'`").lower()
        if word in _ACCEPT:
            return 1
        if word in _REJECT:
            return 0
        from ..loop.verifiers import vote  # a sentence: the LLM judge's verdict parser (unparsable -> 0)

        return vote(value)
    raise ValueError(f"{where}: a vote must be a bool, 0/1 or a verdict word, got {type(value).__name__} {value!r}")


def vote_feedback(decision: Decision) -> str:
    """What the repairer is told about the votes of a round (the summary the LLM judge's feedback gives)."""
    rejects = decision.votes - decision.accepts
    return f"{rejects} of {decision.votes} reviewers judged the solution incorrect."


@dataclass
class LoopTrace:
    """The record of one problem's loop: one :class:`Decision` per round, every round's plan, the costs.

    ``candidate`` is the round whose plan was returned (it differs from the last round when Guard kept an
    earlier incumbent, Eq. 9). ``verifier_calls`` / ``repair_calls`` are the controller's counts (with
    sequential voting, fewer verifier calls than M per round).
    """

    decisions: list[Decision] = field(default_factory=list)
    candidates: list = field(default_factory=list)   # the plan of every round (framework objects)

    @property
    def candidate(self) -> int:
        if not self.decisions or not self.decisions[-1].committed:
            raise RuntimeError("the loop has not committed yet")
        return self.decisions[-1].candidate

    @property
    def rounds(self) -> int:
        """Rounds judged (the initial plan and every repair)."""
        return len(self.decisions)

    @property
    def verifier_calls(self) -> int:
        return self.decisions[-1].verifier_calls if self.decisions else 0

    @property
    def repair_calls(self) -> int:
        return self.decisions[-1].repair_calls if self.decisions else 0

    def as_dict(self) -> dict:
        """JSON-ready (what the Inspect solver stores in the sample's metadata); a NaN (no B_k) becomes None."""
        def clean(d: dict) -> dict:
            return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in d.items()}

        return {"candidate": self.candidate, "rounds": self.rounds, "verifier_calls": self.verifier_calls,
                "repair_calls": self.repair_calls, "decisions": [clean(d.as_dict()) for d in self.decisions]}
