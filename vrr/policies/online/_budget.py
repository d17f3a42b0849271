"""Budgets and cost: what a repair costs (tau of Eq. 4 from a price), the per-problem budget of verifier calls and
tokens, the token accounting of the votes, and the plan a spent budget returns (Eq. 5's posterior in Stop mode,
Eq. 9's keep-best incumbent in Guard mode).

Token counts are reported with the votes; a vote that came without its count makes the total unknown (None),
never 0. With ``budget_tokens`` set every vote must carry its count.
"""
from __future__ import annotations

from ._checks import integer_field, number_field


def tau_for_cost(repair_cost: float, value: float = 1.0) -> float:
    """The gain threshold of Eq. 4 from a stated cost per repair round: repair only when the expected
    validity gain pays for it, G_k * value > repair_cost, so tau = repair_cost / value (Eq. 7's
    b*_tau = (alpha - tau) / (alpha + beta) then follows). ``repair_cost``: the cost of one more round (the
    repair call and its votes) in the units of ``value``, the worth of committing a valid answer."""
    cost = number_field(repair_cost, "tau_for_cost", "repair_cost", "a finite cost >= 0")
    worth = number_field(value, "tau_for_cost", "value", "a finite value > 0")
    if cost < 0:
        raise ValueError(f"tau_for_cost: field 'repair_cost': expected a finite cost >= 0, got {repair_cost!r}")
    if worth <= 0:
        raise ValueError(f"tau_for_cost: field 'value': expected a finite value > 0, got {value!r}")
    return cost / worth


def budget_spent(cfg: dict, verifier_calls: int, tokens: int) -> bool:
    """True once ``verifier_calls`` or ``tokens`` use up the per-problem budget (``budget_calls``,
    ``budget_tokens``; None: no budget)."""
    return (cfg["budget_calls"] is not None and verifier_calls >= cfg["budget_calls"]) or (
        cfg["budget_tokens"] is not None and tokens >= cfg["budget_tokens"])


def budget_left(cfg: dict, verifier_calls: int, tokens: int) -> dict:
    """Verifier calls and tokens left of the problem's budget (None where no budget is set)."""
    return {"calls": None if cfg["budget_calls"] is None else cfg["budget_calls"] - verifier_calls,
            "tokens": None if cfg["budget_tokens"] is None else cfg["budget_tokens"] - tokens}


def token_count(tokens, cfg: dict, k: int) -> int | None:
    """One vote's reported token count, checked; None (unknown, not 0) when not reported, which
    ``budget_tokens`` refuses."""
    if tokens is None:
        if cfg["budget_tokens"] is not None:
            raise ValueError(f"round {k}: field 'tokens': budget_tokens is set, so every vote needs "
                             "its token count (add_vote(v, tokens=n))")
        return None   # unknown, not 0
    return integer_field(tokens, f"round {k}", "tokens", "the vote's token count, an integer >= 0", low=0)


def tokens_reported(tokens: int, votes_without_tokens: int) -> str:
    """The token total for a reason string: the sum, or how many votes came without a count."""
    if votes_without_tokens:
        return f"tokens unknown for {votes_without_tokens} vote(s)"
    return f"{tokens} tokens"


def best_with(best_round: int | None, best_belief: float | None, k: int, b: float) -> tuple:
    """The highest posterior so far, with round k's b (an earlier plan keeps a tie)."""
    if best_belief is None or b > best_belief:
        return k, b
    return best_round, best_belief


def budget_choice(mode: str, incumbent: int | None, best: tuple | None, delta: int) -> tuple[int, str]:
    """The plan a spent budget returns, and why, by the mode the loop is in.

    Stop mode trusts the calibrated model (J-hat >= J_min, or VRR-Stop as asked), and b_j is its
    Pr(plan j valid | votes) (Eq. 5), comparable across rounds whatever their priors: the judged plan
    with the highest posterior is the one most likely valid. Guard mode does not trust the posterior
    (the votes barely separate the classes), so it returns Eq. 9's keep-best incumbent (c_0 = p_0).
    ``best``: (round, b) of the highest posterior among the judged plans, or None."""
    if mode == "stop" and best is not None:
        return best[0], f"the judged plan with the highest posterior (round {best[0]}, b = {best[1]:.3f}, Eq. 5)"
    candidate = incumbent if incumbent is not None else 0
    return candidate, f"Guard's keep-best incumbent (round {candidate}, Eq. 9, delta = {delta})"
