"""Sequential voting: exact curtailment never changes a decision (random problems and every committed
setting, votes in stored order for the real windows), and the predictive test keeps its stated error rate."""
import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vrr.common.paths import REPO_ROOT
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.policies.online import OnlineController
from vrr.policies.replay import algorithm1_inputs
from vrr.policies.sequential import fold_controllers, run_controller, vote_orders

_spec = importlib.util.spec_from_file_location("bench_sequential", REPO_ROOT / "scripts" / "bench_sequential.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

from conftest import CHAIN_SETTINGS as SETTINGS, vote_problems  # noqa: E402


def test_vote_orders_keep_the_counts_and_the_seed():
    S = np.random.default_rng(0).integers(0, 9, (20, 4))
    v = vote_orders(S, 8, seed=3)
    assert v.shape == (20, 4, 8) and np.array_equal(v.sum(axis=2), S)
    assert np.array_equal(v, vote_orders(S, 8, seed=3)) and not np.array_equal(v, vote_orders(S, 8, seed=4))


@settings(max_examples=60, deadline=None)
@given(vote_problems(max_k_max=4, max_n=8), st.integers(0, 6), st.sampled_from([0.0, 0.03]), st.booleans(), st.integers(0, 9))
def test_exact_curtailment_never_changes_a_decision(problem, delta, tau, stop_mode, seed):
    M, k_max, S, params, box = problem
    votes = vote_orders(S, M, seed)
    for policy in ("vrr_stop", "vrr_guard", "algorithm1"):
        extra = dict(intervals=box, stop_mode=stop_mode, grid=3) if policy == "algorithm1" else {}
        make = lambda seq: OnlineController.from_parameters(M=M, k_max=k_max, policy=policy, delta=delta,  # noqa
                                                            tau=tau, sequential=seq, **params, **extra)
        fixed = run_controller(make("off"), S)
        exact = run_controller(make("exact"), S, votes=votes)
        assert exact.outcome.committed.tolist() == fixed.outcome.committed.tolist(), policy
        assert exact.outcome.rounds_used.tolist() == fixed.outcome.rounds_used.tolist(), policy
        assert np.all(exact.verifier_calls <= fixed.verifier_calls)


@pytest.mark.parametrize("name", SETTINGS)
def test_exact_curtailment_on_committed_settings(name, chain_results):
    """Every committed setting, every policy: identical committed plans and repairs with fewer votes."""
    setting, cf, config, votes, order = bench.setting_inputs(name, seed=0, results=chain_results)
    real = (REPO_ROOT / "data" / "real" / name).is_dir()
    assert order == ("stored order" if real else "random order (seed 0)")
    alg = algorithm1_inputs(setting, cf, config)
    for policy in ("vrr_stop", "vrr_guard", "algorithm1"):
        fixed = run_controller(fold_controllers(setting, cf, config, policy, alg_inputs=alg), setting.S, folds=cf.folds)
        exact = run_controller(fold_controllers(setting, cf, config, policy, alg_inputs=alg, sequential="exact"),
                               setting.S, votes=votes, folds=cf.folds)
        np.testing.assert_array_equal(exact.outcome.committed, fixed.outcome.committed, err_msg=policy)
        np.testing.assert_array_equal(exact.outcome.rounds_used, fixed.outcome.rounds_used, err_msg=policy)
        assert exact.verifier_calls.sum() <= fixed.verifier_calls.sum()


def test_stored_votes_are_checked_against_the_counts(chain_results):
    setting, cf, config, votes, order = bench.setting_inputs("gsm8k_cpu_pmstress", results=chain_results)
    assert order == "stored order" and np.array_equal(votes.sum(axis=2), setting.S)
    with pytest.raises(ValueError, match="do not add up"):
        bench.stored_votes(REPO_ROOT / "data" / "real" / "gsm8k_cpu_pmstress" / "arrays.npz", setting.S + 1, setting.M)


def test_predictive_test_keeps_its_error_rate_on_the_first_round():
    """Under the model it was derived from (true parameters), the round-0 action of the predictive test
    differs from the fixed-M action in at most error_rate of the problems (+3 binomial standard errors)."""
    truth = NoiseParams(rho0=0.364, rho1=0.177, alpha=0.32, beta=0.786, pi=0.7)
    sim = simulate_setting(truth, n=3000, k_max=1, M=8, seed=5)
    votes = vote_orders(sim.S, 8, seed=5)
    eps = 0.05
    common = dict(M=8, k_max=1, policy="vrr_stop", **truth.as_dict())
    fixed = OnlineController.from_parameters(**common)
    pred = OnlineController.from_parameters(sequential="predictive", error_rate=eps, **common)
    differ, calls = 0, 0
    for i in range(sim.S.shape[0]):
        a = fixed.start().observe_count(sim.S[i, 0]).action
        pred.start()
        j = 0
        while pred.need_vote():
            pred.add_vote(int(votes[i, 0, j]))
            j += 1
        d = pred.decide()
        differ += d.action != a
        calls += d.votes
    n = sim.S.shape[0]
    assert differ / n <= eps + 3 * np.sqrt(eps * (1 - eps) / n)
    assert calls < 8 * n * 0.8          # and it does stop early
