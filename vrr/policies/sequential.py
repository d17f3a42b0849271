"""Running the online controller over frozen trajectories, one vote at a time (sequential voting).

The controller (:mod:`vrr.policies.online`) asks for one judge vote at a time and stops asking once the
round is decided: exactly (``sequential="exact"``: curtailment, no completion of the remaining votes
changes the action, the candidate or the state the round leaves, and under VRR-Stop none changes a
decision on any future vote path, so every decision equals the fixed-M one), by Wald's SPRT on the votes'
likelihood ratio (``sequential="sprt"``, anytime-valid at ``error_rate``) or by its predictive test
(``sequential="predictive"``, error rate ``error_rate`` per round under the calibrated model). This module
replays it over frozen arrays so the saving can be measured:

* :func:`vote_orders` the order in which a round's votes arrive: the stored order where the loop kept
  it (``data/real/*/trajectories``), else a seeded random permutation of the S_k accepts among M votes;
* :func:`run_controller` one controller per cross-fit fold, every instance run round by round, with the
  committed round, repairs run and verifier calls per instance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .online import OnlineController
from .rules import PolicyOutcome


def vote_orders(S, M: int, seed: int = 0) -> np.ndarray:
    """Votes in arrival order, [N, K+1, M] of 0/1, for arrays that store only the counts S_k.

    Each round's S_k accepts are placed at positions drawn uniformly at random (``np.random.default_rng(seed)``,
    one permutation per round and instance): under the model the M votes of a round are exchangeable
    given y_k (Sec. 4.1), so every order is equally likely.
    """
    S = np.asarray(S, dtype=np.int64)
    n, rounds = S.shape
    rng = np.random.default_rng(seed)
    keys = rng.random((n, rounds, M))
    ranks = np.argsort(np.argsort(keys, axis=-1), axis=-1)
    return (ranks < S[:, :, None]).astype(np.int8)


@dataclass(frozen=True)
class ControllerRun:
    """Per-instance results of a controller replayed over frozen trajectories."""

    outcome: PolicyOutcome        # committed round and repairs run (comparable with the offline policies)
    verifier_calls: np.ndarray    # votes the controller asked for, per instance
    repair_calls: np.ndarray
    votes_per_round: np.ndarray   # [N, K+1] votes asked in each round (0 after the commit)


def run_controller(controllers, S, votes=None, folds=None) -> ControllerRun:
    """Replay ``controllers`` round by round over the frozen counts ``S`` [N, K+1].

    ``controllers``: one :class:`OnlineController`, or a sequence indexed by fold with ``folds`` [N] (the
    cross-fit fold of each instance). ``votes`` [N, K+1, M]: the votes in arrival order; without it each
    round gets its M votes at once (``observe_count``), as in fixed-M replay. With ``votes`` the
    controller is asked vote by vote (``need_vote`` / ``add_vote`` / ``decide``), so in sequential mode it
    uses only a prefix of each round's votes.
    """
    S = np.asarray(S)
    n, rounds = S.shape
    if isinstance(controllers, OnlineController):
        controllers, folds = [controllers], np.zeros(n, dtype=np.int64)
    elif folds is None:
        raise ValueError("run_controller: one controller per fold needs the folds of the instances")
    committed = np.empty(n, dtype=np.int64)
    used = np.empty(n, dtype=np.int64)
    calls = np.empty(n, dtype=np.int64)
    repairs = np.empty(n, dtype=np.int64)
    per_round = np.zeros((n, rounds), dtype=np.int64)
    for i in range(n):
        ctl = controllers[int(folds[i])].start()
        if ctl.k_max != rounds - 1:
            raise ValueError(f"run_controller: the controller has K_max={ctl.k_max}, the arrays {rounds - 1}")
        for k in range(rounds):
            if votes is None:
                d = ctl.observe_count(S[i, k])
            else:
                stream = votes[i, k]
                j = 0
                while ctl.need_vote():
                    ctl.add_vote(int(stream[j]))
                    j += 1
                d = ctl.decide()
            per_round[i, k] = d.votes
            if d.committed:
                break
        committed[i], used[i] = d.candidate, d.repair_calls
        calls[i], repairs[i] = d.verifier_calls, d.repair_calls
    return ControllerRun(PolicyOutcome(committed, used), calls, repairs, per_round)


def fold_controllers(setting, calibration, config, policy: str, alg_inputs: dict | None = None,
                     **options) -> list[OnlineController]:
    """One controller per cross-fit fold with exactly the parameters replay gives the fold's instances
    (``calibration``: the ``CrossFit``; ``config``: its ``ReplayConfig``). Algorithm 1 also takes the fold's
    parameter draws behind B_k, its J-hat and calibration check (``alg_inputs``:
    :func:`vrr.policies.replay.algorithm1_inputs`, computed here when not given). ``options`` go to the
    controllers (``sequential``, ``error_rate``, ...)."""
    from .replay import algorithm1_inputs, algorithm1_plan

    if config.likelihood != "binomial":
        # the online controller filters with Eq. 5's binomial likelihood; phi-less rates would mix two models
        raise ValueError(f"{setting.name}: field 'calibration.likelihood': the online controller runs the binomial "
                         f"likelihood, and this calibration is {config.likelihood!r}")
    if policy == "algorithm1" and alg_inputs is None:
        alg_inputs = algorithm1_inputs(setting, calibration, config)
    plan = None
    if policy == "algorithm1":
        plan = algorithm1_plan(setting, calibration, config, checks=alg_inputs["checks"],
                               diags=alg_inputs["j_per_fold"])
    out = []
    for f, fit in enumerate(calibration.fits):
        params = dict(fit.params.as_dict(), M=setting.M, k_max=setting.k_max, policy=policy, delta=config.delta,
                      tau=config.tau, source=f"{setting.name} fold {f}")
        if policy == "algorithm1":
            first = int(np.flatnonzero(calibration.folds == f)[0])
            params["draws"] = {name: d[:, first].tolist() for name, d in alg_inputs["draws"].items()}
            params.update(rho0=float(plan["params"]["rho0"][first]), rho1=float(plan["params"]["rho1"][first]))
            params.update(eta=config.eta, j_hat=float(alg_inputs["j_per_fold"][f]), j_min=config.j_min,
                          check=alg_inputs["checks"][f],
                          mode_evidence={"labeled_rates": plan["labeled_rates"][f], "replay": plan["replays"][f]})
        out.append(OnlineController.from_parameters(**dict(params, **options)))
    return out
