"""The four-parameter noise model (Sec. 3 "Preliminaries and Motivation", Sec. 4.1).

Verifier: each of M judge votes on a truly valid plan accepts with probability 1 - rho1
(false-rejection rate rho1); on an invalid plan it accepts with probability rho0
(false-acceptance rate rho0). Repairer: an invalid plan becomes valid with probability alpha,
a valid plan is damaged with probability beta. The generator's initial plan is valid with
probability pi. Youden's J = 1 - rho0 - rho1 measures how well the judge separates the classes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class NoiseParams:
    """Parameters (rho0, rho1, alpha, beta, pi) of the loop-noise model."""

    rho0: float
    rho1: float
    alpha: float
    beta: float
    pi: float

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (0.0 <= float(value) <= 1.0) or np.isnan(value):
                raise ValueError(f"NoiseParams.{name} must lie in [0, 1], got {value!r}")

    @property
    def youden_j(self) -> float:
        """Youden's J = 1 - rho0 - rho1 (Sec. 3)."""
        return youden_j(self.rho0, self.rho1)

    @property
    def boundary(self) -> float:
        """Stopping boundary b* = alpha / (alpha + beta) (Eq. 7)."""
        return population_fixed_point(self.alpha, self.beta)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def youden_j(rho0, rho1):
    """Youden's J = 1 - rho0 - rho1: judge discrimination (Sec. 3, "Verifier signals")."""
    return 1.0 - np.asarray(rho0, dtype=float) - np.asarray(rho1, dtype=float) + 0.0


def population_step(q, alpha, beta):
    """One round of unconditional repair, Q_{t+1} = Q_t (1 - beta) + (1 - Q_t) alpha (Sec. 3)."""
    q = np.asarray(q, dtype=float)
    return q * (1.0 - beta) + (1.0 - q) * alpha


def population_dynamics(q0: float, alpha, beta, rounds: int) -> np.ndarray:
    """Validity Q_0..Q_rounds under repair every round (Sec. 3, "More repair is not always beneficial").

    ``alpha`` and ``beta`` may be scalars or length-``rounds`` sequences (round-dependent
    alpha_t, beta_t: the transition from round t to t+1 uses element t).
    """
    alpha_t = np.broadcast_to(np.asarray(alpha, dtype=float), (rounds,))
    beta_t = np.broadcast_to(np.asarray(beta, dtype=float), (rounds,))
    q = np.empty(rounds + 1)
    q[0] = q0
    for t in range(rounds):
        q[t + 1] = population_step(q[t], alpha_t[t], beta_t[t])
    return q


def acceptance_rate(q, rho0, rho1):
    """Population verification rate A_t = E[S_t / M] = rho0 + J Q_t (Sec. 3, "Verifier signals")."""
    return np.asarray(rho0, dtype=float) + youden_j(rho0, rho1) * np.asarray(q, dtype=float)


def population_fixed_point(alpha, beta):
    """Fixed point Q* = alpha / (alpha + beta) of the population map; equals b* of Eq. 7.

    Returns NaN where alpha + beta = 0 (every Q is then a fixed point).
    """
    alpha = np.asarray(alpha, dtype=float)
    beta = np.asarray(beta, dtype=float)
    total = alpha + beta
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, alpha / np.where(total > 0, total, 1.0), np.nan)
    return out if out.ndim else float(out)


def class_accept_rates(S, y, M: int) -> dict:
    """Empirical accept rates on labeled valid / invalid plans, 1 - rho1 and rho0, and their difference
    J = acc(valid) - acc(invalid) = 1 - rho0 - rho1 (Sec. 3, Youden's J from labeled votes)."""
    S, y = np.asarray(S, float), np.asarray(y)
    out = {"n_valid": int((y == 1).sum()), "n_invalid": int((y == 0).sum())}
    acc1 = float(S[y == 1].mean() / M) if out["n_valid"] else float("nan")
    acc0 = float(S[y == 0].mean() / M) if out["n_invalid"] else float("nan")
    out.update(accept_valid=acc1, accept_invalid=acc0, J=acc1 - acc0)
    return out
