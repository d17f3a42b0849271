"""Stopping policies replayed on frozen trajectories (App. A "Formal Definitions of Baselines
and References", Algorithm 1).

Every policy is vectorized over instances: it reads the [N, K+1] vote counts ``S`` (and, for
references, labels or parameters) and returns a ``PolicyOutcome`` holding, per instance, the
committed round and the number of repair rounds actually run. Stopping policies run exactly
as many repairs as the round they commit; policies that need the whole trajectory before
choosing (fixed-K, last-accepted, verifier-best, VRR-Guard, hindsight) run all K_max.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.belief import filter_beliefs, gain
from ..core.guard import keep_best


@dataclass(frozen=True)
class PolicyOutcome:
    """Per-instance committed round and repair rounds used; ``reads_votes`` is False for the policies that
    never query the verifier (no repair, fixed K, hindsight)."""

    committed: np.ndarray
    rounds_used: np.ndarray
    reads_votes: bool = True

    def verifier_calls(self, M: int) -> np.ndarray:
        """Verifier calls per instance under fixed-M counting (Sec. 4.3 "Each round costs M verifier
        calls"): M per round evaluated, i.e. M (rounds_used + 1) for a policy that reads votes, 0 otherwise.
        The online controller's sequential voting (``vrr.policies.online``) needs fewer."""
        if not self.reads_votes:
            return np.zeros_like(self.rounds_used)
        return M * (self.rounds_used + 1)

    def validity(self, y) -> np.ndarray:
        """True validity of each committed plan, y[i, committed_i]."""
        y = np.asarray(y)
        return y[np.arange(y.shape[0]), self.committed].astype(np.int8)


def _first_true_or_last(mask: np.ndarray) -> np.ndarray:
    """Index of the first True in each row, or the last column when a row has none."""
    k_max = mask.shape[1] - 1
    return np.where(mask.any(axis=1), mask.argmax(axis=1), k_max)


def _stopping(committed: np.ndarray, reads_votes: bool = True) -> PolicyOutcome:
    committed = committed.astype(np.int64)
    return PolicyOutcome(committed, committed.copy(), reads_votes)


def _full_budget(committed: np.ndarray, k_max: int, reads_votes: bool = True) -> PolicyOutcome:
    committed = committed.astype(np.int64)
    return PolicyOutcome(committed, np.full_like(committed, k_max), reads_votes)


def no_repair(S) -> PolicyOutcome:
    """No-repair: commit p_0 (App. A)."""
    return _stopping(np.zeros(np.shape(S)[0], dtype=np.int64), reads_votes=False)


def fixed_k(S, k: int) -> PolicyOutcome:
    """Fixed-K: repair unconditionally K times and commit p_K (App. A)."""
    k_max = np.shape(S)[1] - 1
    if not 0 <= k <= k_max:
        raise ValueError(f"fixed_k: K={k} outside 0..{k_max}")
    return _stopping(np.full(np.shape(S)[0], k, dtype=np.int64), reads_votes=False)


def majority_stop(S, M: int) -> PolicyOutcome:
    """Majority stopping: commit p_k at the first k with S_k > M/2, else p_{K_max} (App. A)."""
    return _stopping(_first_true_or_last(np.asarray(S) > M / 2))


def conf_stop(S, M: int, tau_conf: float = 0.85) -> PolicyOutcome:
    """ConfStop-tau_conf: commit at the first k with S_k / M >= tau_conf, else p_{K_max} (App. A)."""
    return _stopping(_first_true_or_last(np.asarray(S) / M >= tau_conf))


def accepted_first(S, M: int) -> PolicyOutcome:
    """Accepted-first: the first majority-accepted candidate, else the final round (App. A).

    On a frozen trajectory this commits the same plan as majority stopping, as in the paper's
    table (both 0.690, <K> 0.92).
    """
    return _stopping(_first_true_or_last(np.asarray(S) > M / 2))


def last_accepted(S, M: int) -> PolicyOutcome:
    """Last-accepted: the last majority-accepted candidate, else p_0 (App. A)."""
    accepted = np.asarray(S) > M / 2
    k_max = accepted.shape[1] - 1
    last = k_max - np.argmax(accepted[:, ::-1], axis=1)
    return _full_budget(np.where(accepted.any(axis=1), last, 0), k_max)


def verifier_best(S) -> PolicyOutcome:
    """Verifier-best-of-trajectory: highest S_k, ties to the earlier round (App. A)."""
    S = np.asarray(S)
    return _full_budget(np.argmax(S, axis=1), S.shape[1] - 1)


def stop_commits(g_hat, alpha, tau: float = 0.0):
    """VRR-Stop's per-round commit test, Eq. 4 with the gain of Eq. 6 (boundary Eq. 7; Sec. 4.1): commit p_k when
    G-hat_k <= tau, and always when alpha <= tau (repair cannot gain). The vectorized policies and the
    online controller (``vrr.policies.online``) both decide with it."""
    out = (np.asarray(g_hat) <= tau) | (np.asarray(alpha) <= tau)
    return out if np.ndim(out) else bool(out)


def algorithm1_step(g_hat, radius, tau: float = 0.0, radius_low=None):
    """Algorithm 1's Stop-mode test for one round (lines 10-14; Eq. 8, sign identifiability).

    Returns ``(commit, unidentifiable)``: commit p_k when G-hat_k + B_k <= tau; otherwise, when
    G-hat_k - B_k <= tau the sign is not identifiable (the paper's pseudocode then switches to Guard mode,
    :func:`algorithm1_paper`; the deployed :func:`algorithm1` reports it and acts on G-hat_k).
    ``radius_low``: a radius below G-hat_k of its own (an interval not symmetric about G-hat_k,
    ``vrr.calibration.gain_radius``); then ``radius`` is the one above.
    """
    g_hat, radius = np.asarray(g_hat, dtype=float), np.asarray(radius, dtype=float)
    below = radius if radius_low is None else np.asarray(radius_low, dtype=float)
    commit = g_hat + radius <= tau
    unidentifiable = ~commit & (g_hat - below <= tau)
    if np.ndim(commit):
        return commit, unidentifiable
    return bool(commit), bool(unidentifiable)


def _rate_matrix(param, n: int, rounds: int) -> np.ndarray:
    """alpha or beta as [N, K+1]: per instance ([N] or scalar) repeated over rounds, or per round as given."""
    param = np.asarray(param, dtype=float)
    if param.ndim == 2:
        return param
    return np.broadcast_to(np.broadcast_to(param, (n,))[:, None], (n, rounds))


def vrr_stop(S, M: int, rho0, rho1, alpha, beta, pi, tau: float = 0.0, phi0=None, phi1=None) -> PolicyOutcome:
    """VRR-Stop (Sec. 4.1, Eqs. 5-7): filter votes into b_k, commit p_k at the first round with
    G_k = (1-b_k) alpha - b_k beta <= tau (no repair at all when alpha <= tau), else at K_max.

    Parameters may be scalars or per-instance arrays (cross-fitting). ``alpha`` and ``beta`` may also be
    [N, K+1] round-dependent rates alpha_t, beta_t (column k: the repair after round k), the VRR-Stop-t
    variant (``vrr.calibration.round_dynamics``). With the true parameters this is the TPM reference.
    ``phi0``, ``phi1`` (scalars or [N]): Eq. 5 with the exchangeable-vote likelihood (belief update, beta-binomial
    votes with intra-plan correlation phi); None, the paper's binomial.
    """
    S = np.asarray(S)
    b, _ = filter_beliefs(S, M, rho0, rho1, alpha, beta, pi, phi0, phi1)
    alpha_m = _rate_matrix(alpha, *b.shape)
    beta_m = _rate_matrix(beta, *b.shape)
    commit_now = stop_commits(gain(b, alpha_m, beta_m), alpha_m, tau)
    return _stopping(_first_true_or_last(commit_now))


def vrr_stop_t(S, M: int, rho0, rho1, alpha_t, beta_t, pi, tau: float = 0.0, phi0=None,
               phi1=None) -> PolicyOutcome:
    """VRR-Stop-t: VRR-Stop (Eqs. 5-7) with round-dependent repair rates alpha_t, beta_t ([N, K+1], column t
    the repair after round t; ``vrr.calibration.round_dynamics.crossfit_round_rates``) in the predict step
    and in the gain G_k = (1 - b_k) alpha_k - b_k beta_k (Eq. 6).

    ``phi0``, ``phi1``: Eq. 5 with the exchangeable-vote likelihood, as in :func:`vrr_stop`."""
    if np.ndim(alpha_t) != 2 or np.ndim(beta_t) != 2:
        raise ValueError("vrr_stop_t: alpha_t and beta_t must be [N, K+1] arrays")
    return vrr_stop(S, M, rho0, rho1, alpha_t, beta_t, pi, tau, phi0, phi1)


def vrr_guard(S, delta: int = 5) -> PolicyOutcome:
    """VRR-Guard (Sec. 4.3, Eq. 9): run the full budget, commit the keep-best incumbent."""
    S = np.asarray(S)
    return _full_budget(keep_best(S, delta)[:, -1], S.shape[1] - 1)


def hindsight_best(y) -> PolicyOutcome:
    """Hindsight best round (diagnostic, not deployable): the earliest truly valid round, else p_0."""
    y = np.asarray(y).astype(bool)
    return _full_budget(np.where(y.any(axis=1), y.argmax(axis=1), 0), y.shape[1] - 1, reads_votes=False)


def algorithm1(S, M: int, rho0, rho1, alpha, beta, pi, stop_mode, delta: int = 5, tau: float = 0.0,
               phi0=None, phi1=None) -> PolicyOutcome:
    """Algorithm 1 as this repository deploys it (App. A; ``vrr.policies.mode`` chooses the mode).

    Line 1 chooses a mode per calibration (``stop_mode``, bool, scalar or per instance); the mode then holds for the
    whole trajectory. Stop mode runs VRR-Stop's rule (Eqs. 5-7, :func:`vrr_stop`): commit p_k at the first round with
    G-hat_k <= tau. Guard mode spends the budget and commits the keep-best incumbent (Eq. 9, :func:`vrr_guard`).

    The paper's pseudocode (:func:`algorithm1_paper`) also switches a Stop-mode trajectory to Guard at the first
    round whose gain sign is not identifiable (Eq. 8 fails). That switch is dropped here: where the sign is
    identifiable, Eq. 8's commit (G-hat_k + B_k^+ <= tau) and repair (G-hat_k - B_k^- > tau) agree with the sign of
    G-hat_k, so every such action is the one Prop. 1 covers; where it is not, acting on G-hat_k keeps VRR-Stop's
    gain, while Guard's incumbent is mostly p_0 and gives up what repair earned. The guarantee kept: each round at
    which Eq. 8 holds acts as the true G_k would with probability >= 1 - eta (Prop. 1); the mode, not the round,
    is where Guard protects against a calibration that cannot be trusted.
    """
    S = np.asarray(S)
    n, rounds = S.shape
    k_max = rounds - 1
    stop = np.broadcast_to(np.asarray(stop_mode, dtype=bool), (n,))
    stop_round = vrr_stop(S, M, rho0, rho1, alpha, beta, pi, tau, phi0, phi1).committed
    guard_round = keep_best(S, delta)[:, -1]
    committed = np.where(stop, stop_round, guard_round).astype(np.int64)
    used = np.where(stop, stop_round, k_max).astype(np.int64)
    return PolicyOutcome(committed, used)


def algorithm1_paper(S, M: int, rho0, rho1, alpha, beta, pi, radius, stop_mode,
               delta: int = 5, tau: float = 0.0, radius_low=None, phi0=None, phi1=None) -> PolicyOutcome:
    """Algorithm 1 as the paper's pseudocode writes it (App. A, lines 1-19): VRR-Stop with the guarded fallback,
    both modes, switching to Guard inside a trajectory. The stopping tables' row "Algorithm 1 (paper)".

    ``stop_mode`` (bool, scalar or per instance) is the J_min switch: True where the labeled
    held-out diagnostic gave J-hat >= J_min. ``radius`` is the error radius B_k, [N, K+1]
    (``identifiability.error_radius``). In Stop mode round k commits p_k when
    G-hat_k + B_k <= tau; when G-hat_k - B_k <= tau (sign not identifiable, Eq. 8) the instance
    switches to Guard mode for the rest of its trajectory. At K_max, Stop mode commits p_K and
    Guard mode commits the keep-best incumbent (Eq. 9). ``radius_low`` ([N, K+1]): the radius below
    G-hat_k where it differs from the one above (``radius``); see :func:`algorithm1_step`. ``phi0``, ``phi1``:
    Eq. 5 with the exchangeable-vote likelihood, as in :func:`vrr_stop`.
    """
    S = np.asarray(S)
    n, rounds = S.shape
    k_max = rounds - 1
    b, _ = filter_beliefs(S, M, rho0, rho1, alpha, beta, pi, phi0, phi1)
    alpha_col = np.broadcast_to(np.asarray(alpha, dtype=float), (n,))[:, None]
    beta_col = np.broadcast_to(np.asarray(beta, dtype=float), (n,))[:, None]
    g_hat = gain(b, alpha_col, beta_col)
    radius = np.broadcast_to(np.asarray(radius, dtype=float), (n, rounds))
    below = radius if radius_low is None else np.broadcast_to(np.asarray(radius_low, dtype=float), (n, rounds))
    incumbent = keep_best(S, delta)
    stop = np.broadcast_to(np.asarray(stop_mode, dtype=bool), (n,)).copy()
    committed = np.full(n, -1, dtype=np.int64)
    used = np.full(n, k_max, dtype=np.int64)
    for k in range(rounds):
        open_ = committed < 0
        commit, unidentifiable = algorithm1_step(g_hat[:, k], radius[:, k], tau, below[:, k])
        commit_now = open_ & stop & commit
        committed[commit_now] = k
        used[commit_now] = k
        stop[open_ & stop & unidentifiable] = False
    still_open = committed < 0
    committed[still_open] = np.where(stop[still_open], k_max, incumbent[still_open, k_max])
    return PolicyOutcome(committed, used)
