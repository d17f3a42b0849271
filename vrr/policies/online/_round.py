"""One round of Algorithm 1 (App. A, lines 4-19) for a full round of M votes: the belief update (Eq. 5), the
gain (Eq. 6), the error radii B_k^- and B_k^+ below and above G-hat_k from the bootstrap draws of the parameters
(``vrr.calibration.gain_radius``: each draw filters the same votes, and G_k's one-sided percentiles over the draws
at level 1 - eta bound it), and the step each mode takes.

Stop mode commits when G-hat_k <= tau (Eqs. 6-7, ``rules.stop_commits``), under VRR-Stop and under Algorithm 1
alike (``rules.algorithm1``: the mode is chosen per calibration and holds for the problem). Algorithm 1 also
reports whether the round's sign is identifiable (Eq. 8, ``rules.algorithm1_step``: G-hat_k + B_k^+ <= tau for a
commit, G-hat_k - B_k^- > tau for a repair), which is where Prop. 1's guarantee covers the action. Guard mode
spends the whole repair budget and commits the keep-best incumbent (Eq. 9, ``vrr.core.guard``), which is also
tracked under VRR-Stop when a budget is set. Round K_max always commits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...calibration.gain_radius import radii_of_draws
from ...core.belief import belief_update, gain
from ...core.guard import keep_best_step
from ..rules import algorithm1_step, stop_commits
from ._decision import Step
from ._options import repair_rates


def tracks_incumbent(cfg: dict) -> bool:
    """Keep-best (Eq. 9) runs under Guard and Algorithm 1, and under VRR-Stop when a budget is set
    (the incumbent is what a spent budget returns)."""
    return cfg["policy"] != "vrr_stop" or cfg["budget_calls"] is not None or cfg["budget_tokens"] is not None


@dataclass(frozen=True)
class Round:
    """What round k is decided from: the config, B_k's parameter draws, the prior b^-_k (and one per draw), the
    mode with its reason and the keep-best incumbent with its votes."""

    cfg: dict
    grid: dict | None
    k: int
    prior: float
    prior_grid: np.ndarray | None
    mode: str
    reason: str
    incumbent: int | None
    incumbent_votes: int | None

    def evaluate(self, s: int, n: int) -> tuple[float, float, float, float, np.ndarray | None]:
        """b_k (Eq. 5), G-hat_k (Eq. 6), B_k^+ and B_k^- from s accepting votes out of n, with the draws'
        beliefs."""
        c = self.cfg
        a, be = repair_rates(c, self.k)
        b = belief_update(self.prior, s, n, c["rho0"], c["rho1"])
        g = gain(b, a, be)
        high = low = float("nan")
        b_grid = None
        if self.prior_grid is not None and self.mode == "stop":
            grid = self.grid
            b_grid = belief_update(self.prior_grid, s, n, grid["rho0"], grid["rho1"])
            below, above = radii_of_draws(gain(b_grid, grid["alpha"], grid["beta"]), g, c["eta"])
            low, high = float(below), float(above)
        return float(b), float(g), high, low, b_grid

    def step(self, S: int) -> Step:
        """Round k's step when the plan got S of M accepting votes (Algorithm 1 lines 4-19)."""
        c, k = self.cfg, self.k
        last = k == c["k_max"]
        incumbent, inc_votes = self.incumbent, self.incumbent_votes
        replaced = False
        if tracks_incumbent(c):  # keep-best tracking, Eq. 9 (c_0 = p_0)
            if k == 0:
                incumbent, inc_votes, replaced = 0, S, True
            else:
                incumbent, inc_votes = keep_best_step(incumbent, inc_votes, k, S, c["delta"])
                replaced = incumbent == k
        mode, reason = self.mode, self.reason
        if mode != "stop":
            if last:
                return Step("commit", incumbent, mode, "budget exhausted: commit the keep-best incumbent (Eq. 9)",
                            incumbent, inc_votes, False)
            return Step("repair", incumbent, mode, reason, incumbent, inc_votes, replaced)
        b, g, radius, radius_low, _ = self.evaluate(S, c["M"])
        a, _ = repair_rates(c, k)
        sign = ""
        if c["policy"] == "algorithm1":
            _, unidentifiable = algorithm1_step(g, radius, c["tau"], radius_low=radius_low)
            sign = ("; sign identifiable (Eq. 8, Prop. 1)" if not unidentifiable else
                    "; sign not identifiable (Eq. 8): acting on G-hat_k")
        if stop_commits(g, a, c["tau"]):
            why = "alpha <= tau: repair cannot gain" if a <= c["tau"] else "G-hat_k <= tau (Eqs. 6-7)"
            return Step("commit", k, mode, why + sign, incumbent, inc_votes, False)
        if last:
            return Step("commit", k, mode, "budget exhausted (K_max)", incumbent, inc_votes, False)
        return Step("repair", k, mode, "G-hat_k > tau (Eqs. 6-7)" + sign, incumbent, inc_votes, True)
