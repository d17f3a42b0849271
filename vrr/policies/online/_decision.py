"""What one round of Algorithm 1 (App. A) yields: the public :class:`Decision` the loop receives, and the
:class:`Step` the controller and its curtailment rules compare before a decision is made."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Decision:
    """What the controller decided after round ``round`` (Algorithm 1, one iteration of its loop).

    * ``action``: ``"commit"`` (return ``candidate`` and stop) or ``"repair"`` (repair the current plan
      and send the next round's votes);
    * ``candidate``: round index of the plan to return: on commit the committed plan (Guard's keep-best
      incumbent, Eq. 9, where it applies, and whenever the budget ran out); on repair the plan the policy
      would return if the loop had to stop now;
    * ``belief`` b_k (Eq. 5), ``gain`` G-hat_k (Eq. 6), ``radius`` B_k^+ and ``radius_low`` B_k^-, the error
      radii above and below G-hat_k (App. A; ``vrr.calibration.gain_radius``; NaN where the policy uses none);
      in sequential mode they are computed from the votes actually received this round;
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
    radius_low: float = float("nan")

    @property
    def committed(self) -> bool:
        return self.action == "commit"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Step:
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
