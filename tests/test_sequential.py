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
from vrr.policies.sequential import fold_controllers, run_controller, vote_orders

_spec = importlib.util.spec_from_file_location("bench_sequential", REPO_ROOT / "scripts" / "bench_sequential.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

from conftest import EVERY_SETTING, vote_problems  # noqa: E402
from test_online import box_draws  # noqa: E402


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
        extra = dict(draws=box_draws(box, seed=seed), stop_mode=stop_mode) if policy == "algorithm1" else {}
        make = lambda seq: OnlineController.from_parameters(M=M, k_max=k_max, policy=policy, delta=delta,  # noqa
                                                            tau=tau, sequential=seq, **params, **extra)
        fixed = run_controller(make("off"), S)
        exact = run_controller(make("exact"), S, votes=votes)
        assert exact.outcome.committed.tolist() == fixed.outcome.committed.tolist(), policy
        assert exact.outcome.rounds_used.tolist() == fixed.outcome.rounds_used.tolist(), policy
        assert np.all(exact.verifier_calls <= fixed.verifier_calls)


@pytest.mark.parametrize("name", EVERY_SETTING)
def test_exact_curtailment_on_committed_settings(name, calibration, committed):
    """Every committed setting, every policy: identical committed plans and repairs with fewer votes. The
    controllers are per fold, so an instance's check does not depend on which others run: a simulated window
    (N = 4,500) is checked on a seeded sample of 600 of its instances, a real one on all of them."""
    setting, cf, config, votes, order = bench.setting_inputs(name, seed=0, results=calibration(name).parent.parent)
    real = (REPO_ROOT / "data" / "real" / name).is_dir()
    assert order == ("stored order" if real else "random order (seed 0)")
    alg = committed(name)[3]
    n = setting.S.shape[0]
    rows = np.arange(n) if n <= 600 else np.sort(np.random.default_rng(0).choice(n, 600, replace=False))
    S, votes, folds = setting.S[rows], votes[rows], cf.folds[rows]
    for policy in ("vrr_stop", "vrr_guard", "algorithm1"):
        fixed = run_controller(fold_controllers(setting, cf, config, policy, alg_inputs=alg), S, folds=folds)
        exact = run_controller(fold_controllers(setting, cf, config, policy, alg_inputs=alg, sequential="exact"),
                               S, votes=votes, folds=folds)
        np.testing.assert_array_equal(exact.outcome.committed, fixed.outcome.committed, err_msg=policy)
        np.testing.assert_array_equal(exact.outcome.rounds_used, fixed.outcome.rounds_used, err_msg=policy)
        assert exact.verifier_calls.sum() <= fixed.verifier_calls.sum()


def test_stored_votes_are_checked_against_the_counts(calibration):
    setting, cf, config, votes, order = bench.setting_inputs("gsm8k_cpu_pmstress",
                                                             results=calibration("gsm8k_cpu_pmstress").parent.parent)
    assert order == "stored order" and np.array_equal(votes.sum(axis=2), setting.S)
    with pytest.raises(ValueError, match="do not add up"):
        bench.stored_votes(REPO_ROOT / "data" / "real" / "gsm8k_cpu_pmstress" / "arrays.npz", setting.S + 1, setting.M)


def _first_round(ctl, stream):
    """A new problem's round-0 decision, its votes asked one at a time from ``stream``."""
    ctl.start()
    for vote in stream:
        if not ctl.need_vote():
            break
        ctl.add_vote(int(vote))
    return ctl.decide()


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
        d = _first_round(pred, votes[i, 0])
        differ += d.action != a
        calls += d.votes
    n = sim.S.shape[0]
    assert differ / n <= eps + 3 * np.sqrt(eps * (1 - eps) / n)
    assert calls < 8 * n * 0.8          # and it does stop early


# ------------------------------------------------------------------ VRR-Stop: future-aware exact curtailment
rates = st.floats(0.02, 0.98)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10), st.integers(1, 5), st.fixed_dictionaries({n: rates for n in ("rho0", "rho1", "pi")}),
       st.lists(st.tuples(rates, rates), min_size=5, max_size=5), st.booleans(),
       st.sampled_from([0.0, 0.04, -0.03]), st.integers(0, 10**6))
def test_vrr_stop_future_aware_curtailment_changes_no_decision(M, k_max, params, ab, per_round, tau, seed):
    """On trajectories simulated from the controller's own model (and vote orders drawn at random), exact mode
    commits the same round with the same repairs as fixed M, with stationary and round-dependent rates."""
    alpha = [a for a, _ in ab][:k_max] if per_round else ab[0][0]
    beta = [b for _, b in ab][:k_max] if per_round else ab[0][1]
    truth = NoiseParams(alpha=ab[0][0], beta=ab[0][1], **params)
    S = simulate_setting(truth, n=25, k_max=k_max, M=M, seed=seed % 1000).S
    common = dict(M=M, k_max=k_max, policy="vrr_stop", tau=tau, alpha=alpha, beta=beta, **params)
    fixed = run_controller(OnlineController.from_parameters(**common), S)
    exact = run_controller(OnlineController.from_parameters(sequential="exact", **common), S,
                           votes=vote_orders(S, M, seed))
    assert exact.outcome.committed.tolist() == fixed.outcome.committed.tolist()
    assert exact.outcome.rounds_used.tolist() == fixed.outcome.rounds_used.tolist()
    assert np.all(exact.verifier_calls <= fixed.verifier_calls)


def test_vrr_stop_repair_rounds_end_early_and_keep_every_decision():
    """Repair rounds (not only commit rounds) stop asking: on simulated Qwen-3B PM-stress-like trajectories the
    exact controller saves calls in rounds that repair, and commits exactly where fixed M commits."""
    truth = NoiseParams(rho0=0.364, rho1=0.177, alpha=0.32, beta=0.086, pi=0.3)
    sim = simulate_setting(truth, n=300, k_max=5, M=8, seed=11)
    common = dict(M=8, k_max=5, policy="vrr_stop", **truth.as_dict())
    fixed = run_controller(OnlineController.from_parameters(**common), sim.S)
    exact = run_controller(OnlineController.from_parameters(sequential="exact", **common), sim.S,
                           votes=vote_orders(sim.S, 8, 11))
    assert exact.outcome.committed.tolist() == fixed.outcome.committed.tolist()
    repair_rounds = np.arange(6)[None, :] < fixed.outcome.committed[:, None]
    assert repair_rounds.sum() > 100
    assert (exact.votes_per_round[repair_rounds] < 8).mean() > 0.3     # most repair rounds end early
    assert exact.verifier_calls.sum() < 0.8 * fixed.verifier_calls.sum()


def test_extreme_parameters_fall_back_to_the_count_rule():
    """Parameters too close to 0/1 for the breakpoint analysis: repair rounds then need every vote."""
    ctl = OnlineController.from_parameters(M=4, k_max=3, rho0=1e-6, rho1=0.2, alpha=0.4, beta=0.3, pi=0.2,
                                           policy="vrr_stop", sequential="exact")
    ctl.add_vote(0)
    ctl.add_vote(0)
    assert ctl.need_vote()


# ------------------------------------------------------------------ SPRT
def test_sprt_keeps_its_error_rate_under_the_model():
    """Under the model it is derived from, an early SPRT stop commits an invalid plan, or repairs a valid one,
    in at most error_rate of the rounds of that class (Ville's inequality; +3 binomial standard errors)."""
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.35, beta=0.15, pi=0.5)
    eps, M, n = 0.05, 12, 3000
    sim = simulate_setting(truth, n=n, k_max=1, M=M, seed=3)
    votes = vote_orders(sim.S, M, seed=3)
    ctl = OnlineController.from_parameters(M=M, k_max=1, policy="vrr_stop", sequential="sprt", error_rate=eps,
                                           **truth.as_dict())
    wrong = {0: 0, 1: 0}
    early = 0
    for i in range(n):
        d = _first_round(ctl, votes[i, 0])
        if d.votes < M and "SPRT" in d.reason:
            early += 1
            y = int(sim.y[i, 0])
            wrong[y] += (d.action == "commit") if y == 0 else (d.action == "repair")
    for y in (0, 1):
        size = int((sim.y[:, 0] == y).sum())
        assert wrong[y] / size <= eps + 3 * np.sqrt(eps * (1 - eps) / size), y
    assert early > 0.3 * n                    # and it does stop early


def test_sprt_on_committed_windows_reports_changes(calibration):
    """The bench's rows: exact changes nothing; SPRT's changed decisions and validity change are reported."""
    rows = bench.bench_setting("gsm8k_cpu_pmstress", results=calibration("gsm8k_cpu_pmstress").parent.parent)
    stop = next(r for r in rows if r["policy"] == "VRR-Stop")
    assert stop["changed_exact"] == 0 and stop["calls_exact"] < stop["calls_off"]
    assert stop["calls_sprt"] <= stop["calls_exact"] and 0 <= stop["changed_sprt"] <= stop["N"]
    assert stop["gen_off"] > stop["gen_exact"] > 0 and stop["prompt_off"] > stop["prompt_exact"] > 0
    text = bench.render_text(rows, 0.05)
    assert text.startswith("setting") and "prompt tokens" in text and "VRR-Stop: exact saves" in text
    page = (REPO_ROOT / "docs" / "online.md").read_text().splitlines()
    table = bench.render_markdown(rows, 0.05).splitlines()
    window = [line for line in table if line.startswith("| gsm8k_cpu_pmstress ")]
    assert len(window) == 4 and window[0].startswith("| gsm8k_cpu_pmstress (real) | ")
    for line in window:                  # the page shows this command's output, not a hand copy
        assert line in page, f"docs/online.md lacks the bench's line {line!r}; re-run `bench_sequential.py --markdown`"
    head = [line for line in table if line.startswith("| setting |") or line.startswith("| policy |")]
    assert len(head) == 3 and all(line in page for line in head)


def test_fold_controllers_refuse_a_beta_binomial_calibration():
    """The online controller filters with the binomial likelihood: a calibration fit under the exchangeable-vote
    likelihood is refused naming the field, not run with its rates and without its phi."""
    from vrr.policies.replay import ReplayConfig, fit_calibration

    truth = NoiseParams(rho0=0.2, rho1=0.2, alpha=0.3, beta=0.2, pi=0.5)
    setting = simulate_setting(truth, n=120, k_max=2, M=8, seed=1, judge_concentration=3.0)
    config = ReplayConfig(method="labeled_mle", likelihood="beta_binomial")
    cf = fit_calibration(setting, config)
    with pytest.raises(ValueError, match="field 'calibration.likelihood'"):
        fold_controllers(setting, cf, config, "vrr_stop")
