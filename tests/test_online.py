"""The online controller (vrr.policies.online): round by round it reproduces the offline policies exactly,
its state round-trips through JSON mid-trajectory, and bad input is refused with the field named."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vrr.calibration.gain_radius import PARAM_NAMES, bootstrap_radius
from vrr.core.belief import belief_update, filter_beliefs, gain, predict
from vrr.policies import rules as P
from vrr.policies.online import ControllerStateError, Decision, OnlineController
from vrr.policies.replay import algorithm1_plan
from vrr.policies.sequential import fold_controllers, run_controller

from conftest import CHAIN_SETTINGS, EVERY_SETTING, vote_problems


def test_every_committed_setting_is_covered():
    names = set(CHAIN_SETTINGS)
    assert {"gsm8k_cpu_favorable", "gsm8k_cpu_pmstress", "sim_nonstationary", "sim_qwen3b_pmstress"} <= names
    assert len(names) >= 12


@pytest.mark.parametrize("name", EVERY_SETTING)
def test_controller_reproduces_offline_policies_on_committed_settings(name, committed):
    """Per cross-fit fold, the controller fed one round at a time commits the same round and runs the same
    repairs as the vectorized VRR-Stop, VRR-Guard and Algorithm 1 (and the TPM reference) on every instance."""
    setting, cf, config, alg = committed(name)
    S, M = setting.S, setting.M
    assert cf.folds.size == S.shape[0]
    plan = algorithm1_plan(setting, cf, config, checks=alg["checks"], diags=alg["j_per_fold"])
    offline = {
        "vrr_stop": P.vrr_stop(S, M, tau=config.tau, **cf.as_kwargs()),
        "vrr_guard": P.vrr_guard(S, config.delta),
        "algorithm1": P.algorithm1(S, M, stop_mode=plan["stop_mode"], delta=config.delta, tau=config.tau,
                                   **plan["params"]),
    }
    for policy, expected in offline.items():
        run = run_controller(fold_controllers(setting, cf, config, policy, alg_inputs=alg), S, folds=cf.folds)
        np.testing.assert_array_equal(run.outcome.committed, expected.committed, err_msg=policy)
        np.testing.assert_array_equal(run.outcome.rounds_used, expected.rounds_used, err_msg=policy)
        # fixed-M cost accounting: M votes per round evaluated, one repair per repair decision
        np.testing.assert_array_equal(run.verifier_calls, M * (run.repair_calls + 1))
    truth = setting.meta.get("true_params")
    if truth:
        tpm = OnlineController.from_parameters(M=M, k_max=setting.k_max, policy="vrr_stop",
                                               **{k: truth[k] for k in PARAM_NAMES})
        run = run_controller(tpm, S)
        np.testing.assert_array_equal(run.outcome.committed, P.vrr_stop(S, M, **{k: truth[k] for k in PARAM_NAMES}).committed)


# ------------------------------------------------------------------ random trajectories and parameters
inner = st.floats(0.01, 0.99)


def box_draws(box: dict, n: int = 12, seed: int = 0) -> dict:
    """``n`` parameter draws spread over ``box`` ({name: (lo, hi)}): B_k's draws for the random problems."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(lo, hi, n).tolist() for name, (lo, hi) in box.items()}


def _assert_controller_equals_offline(M, k_max, S, params, draws, tau, delta, stop_mode, eta=0.05):
    """VRR-Stop, VRR-Guard and Algorithm 1 run round by round commit the same round as the vectorized
    policies; Algorithm 1's B_k^- and B_k^+ on both sides from the same parameter draws."""
    common = dict(M=M, k_max=k_max, delta=delta, tau=tau, **params)
    stop = run_controller(OnlineController.from_parameters(policy="vrr_stop", **common), S).outcome
    expected = P.vrr_stop(S, M, tau=tau, **params)
    assert stop.committed.tolist() == expected.committed.tolist()
    assert stop.rounds_used.tolist() == expected.rounds_used.tolist()
    guard = run_controller(OnlineController.from_parameters(policy="vrr_guard", **common), S).outcome
    assert guard.committed.tolist() == P.vrr_guard(S, delta).committed.tolist()
    assert guard.rounds_used.tolist() == [k_max] * S.shape[0]
    ctl = OnlineController.from_parameters(policy="algorithm1", draws=draws, eta=eta, stop_mode=stop_mode, **common)
    alg = run_controller(ctl, S).outcome
    g_hat, low, high = bootstrap_radius(S, M, params, draws, eta)
    expected = P.algorithm1(S, M, stop_mode=stop_mode, delta=delta, tau=tau, **params)
    assert alg.committed.tolist() == expected.committed.tolist()
    assert alg.rounds_used.tolist() == expected.rounds_used.tolist()
    return g_hat, low, high


@settings(max_examples=60, deadline=None)
@given(vote_problems(), st.sampled_from([0.0, 0.05, -0.02]), st.integers(0, 6), st.booleans(), st.integers(0, 9),
       st.sampled_from([0.05, 0.2]))
def test_controller_equals_offline_on_random_trajectories(problem, tau, delta, stop_mode, seed, eta):
    """Random problems, parameters and parameter draws: the controller's per-draw beliefs and replay's
    ``bootstrap_radius`` give the same B_k^- and B_k^+, so the same decisions."""
    M, k_max, S, params, box = problem
    _assert_controller_equals_offline(M, k_max, S, params, box_draws(box, seed=seed), tau, delta, stop_mode, eta)


def test_controller_equals_offline_with_replays_draw_count():
    """200 draws (``RADIUS_REPLICATES``, as replay) on a problem where Algorithm 1 both commits in Stop mode
    and falls back to Guard for an unidentifiable sign; the controller reports replay's B_k^- and B_k^+."""
    rng = np.random.default_rng(7)
    S = rng.integers(0, 9, (16, 6))
    params = dict(rho0=0.3, rho1=0.25, alpha=0.35, beta=0.2, pi=0.45)
    draws = box_draws({name: (v - 0.08, v + 0.08) for name, v in params.items()}, n=200)
    g_hat, low, high = _assert_controller_equals_offline(8, 5, S, params, draws, tau=0.0, delta=2, stop_mode=True)
    commits, unidentifiable = P.algorithm1_step(g_hat[:, :-1], high[:, :-1], radius_low=low[:, :-1])
    assert commits.any() and unidentifiable.any(), "the problem exercises both Stop-mode branches"
    assert not np.allclose(low, high), "the radii differ below and above G-hat"
    d = OnlineController.from_parameters(M=8, k_max=5, policy="algorithm1", draws=draws, stop_mode=True,
                                         **params).observe_count(int(S[0, 0]))
    assert (d.radius, d.radius_low) == (high[0, 0], low[0, 0])


@settings(max_examples=40, deadline=None)
@given(vote_problems(), st.data())
def test_controller_with_round_dependent_rates_equals_offline_vrr_stop_t(problem, data):
    M, k_max, S, params, _ = problem
    alpha_t = [data.draw(inner) for _ in range(k_max)]
    beta_t = [data.draw(inner) for _ in range(k_max)]
    ctl = OnlineController.from_parameters(M=M, k_max=k_max, policy="vrr_stop", rho0=params["rho0"],
                                           rho1=params["rho1"], pi=params["pi"], alpha=alpha_t, beta=beta_t)
    n = S.shape[0]
    pad = lambda v: np.tile(np.array(v + v[-1:] if v else [0.5], dtype=float), (n, 1))  # noqa: E731
    expected = P.vrr_stop(S, M, rho0=params["rho0"], rho1=params["rho1"], pi=params["pi"],
                          alpha=pad(alpha_t), beta=pad(beta_t))
    assert run_controller(ctl, S).outcome.committed.tolist() == expected.committed.tolist()


def test_decision_reports_eq5_belief_eq6_gain_and_costs():
    """b_k and G-hat_k against the closed forms of Eqs. 5-6 written out by hand; calls counted."""
    rho0, rho1, alpha, beta, pi, M = 0.3, 0.2, 0.4, 0.25, 0.5, 4
    ctl = OnlineController.from_parameters(M=M, k_max=3, rho0=rho0, rho1=rho1, alpha=alpha, beta=beta, pi=pi,
                                           policy="vrr_stop")
    d = ctl.observe([1, 0, 0, 0])
    num = pi * (1 - rho1) ** 1 * rho1 ** 3
    b0 = num / (num + (1 - pi) * rho0 ** 1 * (1 - rho0) ** 3)
    assert d.belief == pytest.approx(b0, rel=1e-12)
    assert d.gain == pytest.approx((1 - b0) * alpha - b0 * beta, rel=1e-12)
    assert d.gain > 0 and d.action == "repair" and d.candidate == 0
    assert (d.verifier_calls, d.repair_calls, d.votes, d.accepts) == (4, 1, 4, 1)
    prior = (1 - beta) * b0 + alpha * (1 - b0)
    d = ctl.observe([1, 1, 1, 1])
    num = prior * (1 - rho1) ** 4
    b1 = num / (num + (1 - prior) * rho0 ** 4)
    assert d.belief == pytest.approx(b1, rel=1e-12)
    assert d.action == "commit" and d.candidate == 1 and (d.verifier_calls, d.repair_calls) == (8, 1)
    with pytest.raises(RuntimeError, match="start"):
        ctl.add_vote(1)
    assert ctl.start().round == 0 and ctl.last is None


def test_algorithm1_mode_reasons():
    box = {name: (0.2, 0.6) for name in PARAM_NAMES}
    common = dict(M=8, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.3, pi=0.5, draws=box_draws(box))
    low = OnlineController.from_parameters(j_hat=0.05, j_min=0.1, **common)
    d = low.observe([1] * 8)
    assert d.mode == "guard" and "below J_min" in d.reason and d.action == "repair" and np.isnan(d.radius)
    nan = OnlineController.from_parameters(j_hat=float("nan"), **common)
    assert nan.observe([0] * 8).mode == "guard"
    high = OnlineController.from_parameters(j_hat=0.5, **common)
    d = high.observe([1, 0, 1, 0, 1, 0, 1, 0])
    assert d.radius > 0 and d.mode in ("stop", "guard")
    if d.mode == "guard":
        assert "not identifiable" in d.reason and "Eq. 8" in d.reason
    with pytest.raises(ValueError, match="j_hat"):
        OnlineController.from_parameters(**{k: v for k, v in common.items()})


# ------------------------------------------------------------------ state
@settings(max_examples=40, deadline=None)
@given(vote_problems(), st.integers(0, 200), st.sampled_from(["off", "exact", "predictive", "sprt"]), st.integers(0, 5))
def test_json_round_trip_mid_trajectory_resumes_identically(problem, cut, sequential, seed):
    """Save after any number of votes (mid-round too), load, continue: the same decisions as without the break."""
    M, k_max, S, params, box = problem
    rng = np.random.default_rng(seed)
    votes = [[int(v) for v in rng.permutation([1] * s + [0] * (M - s))] for s in S[0]]
    def make():
        return OnlineController.from_parameters(M=M, k_max=k_max, policy="algorithm1", draws=box_draws(box), j_hat=0.3,
                                                sequential=sequential, **params)

    def run(ctl, cut):
        decisions, fed = [], 0
        for k in range(k_max + 1):
            j = 0
            while ctl.need_vote():
                if fed == cut:
                    ctl = OnlineController.from_json(ctl.to_json())
                ctl.add_vote(votes[k][j])
                j += 1
                fed += 1
            decisions.append(ctl.decide())
            if decisions[-1].committed:
                return decisions, ctl
        raise AssertionError("no commit at K_max")

    straight, a = run(make(), -1)
    resumed, b = run(make(), cut)
    assert json.dumps([d.as_dict() for d in straight]) == json.dumps([d.as_dict() for d in resumed])  # NaN-safe
    assert a.to_json() == b.to_json()


def test_save_and_load_file(tmp_path):
    ctl = OnlineController.from_parameters(M=3, k_max=2, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6,
                                           policy="vrr_guard")
    ctl.observe([1, 1, 0])
    path = ctl.save(tmp_path / "state.json")
    assert OnlineController.load(path).to_json() == ctl.to_json()
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("state"), "state"),
    (lambda d: d["state"].update(prior=1.5), "state.prior"),
    (lambda d: d["state"].update(round=7), "state.round"),
    (lambda d: d["state"].update(accepts=3, votes=1), "state.accepts"),
    (lambda d: d["state"].update(mode="fast"), "state.mode"),
    (lambda d: d["config"].update(policy="magic"), "config.policy"),
    (lambda d: d["config"].update(rho0="x"), "config.rho0"),
    (lambda d: d["config"].update(extra=1), "config.extra"),
    (lambda d: d.update(version=99), "version"),
])
def test_malformed_state_names_the_field(tmp_path, mutate, field):
    ctl = OnlineController.from_parameters(M=3, k_max=2, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6,
                                           policy="vrr_stop")
    data = ctl.to_dict()
    mutate(data)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ControllerStateError, match=f"{path}: field '{field}'"):
        OnlineController.load(path)
    path.write_text("{not json")
    with pytest.raises(ControllerStateError, match=str(path)):
        OnlineController.load(path)


def test_bad_votes_and_parameters_are_refused():
    ctl = OnlineController.from_parameters(M=2, k_max=1, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6,
                                           policy="vrr_stop")
    with pytest.raises(ValueError, match="0 .reject. or 1"):
        ctl.add_vote(2)
    with pytest.raises(ValueError, match="room for 2"):
        ctl.observe([1, 1, 1])
    ctl.add_vote(1)
    with pytest.raises(ValueError, match="do not decide"):
        ctl.decide()
    with pytest.raises(ValueError, match="field 'alpha'"):
        OnlineController.from_parameters(M=2, k_max=3, rho0=0.2, rho1=0.1, alpha=[0.3], beta=0.2, pi=0.6)
    with pytest.raises(ValueError, match="policy='algorithm1' needs draws=.*pass policy='vrr_stop'"):
        OnlineController.from_parameters(M=2, k_max=3, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6, j_hat=0.4)
    with pytest.raises(ValueError, match="field 'draws'"):
        OnlineController.from_parameters(M=2, k_max=3, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6, j_hat=0.4,
                                         policy="algorithm1")


def test_from_calibration_uses_the_folds_replay_uses(calibration, committed):
    path = calibration("sim_qwen3b_pmstress")
    setting, cf, config, alg = committed("sim_qwen3b_pmstress")
    ctl = OnlineController.from_calibration(path, fold=2)
    c = ctl.config
    plan = algorithm1_plan(setting, cf, config, checks=alg["checks"], diags=alg["j_per_fold"])
    first = int(np.flatnonzero(cf.folds == 2)[0])
    for name in PARAM_NAMES:   # fold 2's calibration, with the rates Algorithm 1 decides with (the decision check's)
        assert c[name] == plan["params"][name][first]
    for name in PARAM_NAMES:   # B_k's draws are fold 2's, the ones replay scores fold 2's instances with
        assert c["draws"][name] == alg["draws"][name][:, first].tolist()
    assert c["draws"]["rho0"] != alg["draws"]["rho0"][:, int(np.flatnonzero(cf.folds == 1)[0])].tolist()
    assert c["j_hat"] == alg["j_per_fold"][2] and (c["M"], c["k_max"]) == (setting.M, setting.k_max)
    assert c["check"] == alg["checks"][2] and (ctl.mode, ctl.to_dict()["state"]["reason"]) == plan["modes"][2]
    deployed = OnlineController.from_calibration(path)          # refit on every calibration instance
    assert 0 < deployed.config["rho0"] < 1 and deployed.config["source"] == str(path)
    no_arrays = OnlineController.from_calibration(path, fold=0, arrays=False, M=8, k_max=5, draws=c["draws"])
    assert no_arrays.config["j_hat"] == json.loads(path.read_text())["probe"]["j_hat"]
    with pytest.raises(ValueError, match="pass the arrays, draws=..., or policy='vrr_stop'"):
        OnlineController.from_calibration(path, fold=0, arrays=False, M=8, k_max=5)
    with pytest.raises(ValueError, match="arrays_path"):
        OnlineController.from_calibration(path, arrays=False)
    assert isinstance(ctl.observe([1] * 8), Decision)


def test_round_one_belief_path_matches_filter_beliefs():
    """The controller's reported b_k and G-hat_k along a trajectory equal filter_beliefs' (Eqs. 5-6)."""
    S = np.array([[1, 2, 0, 3, 1]])
    p = dict(rho0=0.35, rho1=0.25, alpha=0.3, beta=0.1, pi=0.2)
    b, _ = filter_beliefs(S, 4, **p)
    ctl = OnlineController.from_parameters(M=4, k_max=4, policy="vrr_stop", **p)
    for k in range(5):
        d = ctl.observe_count(S[0, k])
        assert d.belief == b[0, k] and d.gain == gain(b[0, k], p["alpha"], p["beta"])
        if d.committed:
            break


# ------------------------------------------------------------------ input checks, policy default, budget, cost
def _stop(**extra):
    return OnlineController.from_parameters(M=4, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5,
                                            **dict({"policy": "vrr_stop"}, **extra))


def test_refused_vote_lists_leave_the_state_unchanged():
    ctl = _stop()
    ctl.add_vote(1)
    before = ctl.to_json()
    for bad in ([1, 2], [1, 1, 1, 1], "1100", [0.5], [None]):
        with pytest.raises(ValueError, match="round 0: field 'vote"):
            ctl.observe(bad)
        assert ctl.to_json() == before
    with pytest.raises(ValueError, match="field 'tokens'"):
        ctl.observe([1, 0], tokens=[3])
    assert ctl.to_json() == before


@pytest.mark.parametrize("bad", [-1, 3.7, True, "2", 5])
def test_observe_count_refuses_what_is_not_a_count(bad):
    ctl = _stop()
    with pytest.raises(ValueError, match="field 'accepts'"):
        ctl.observe_count(bad)
    assert ctl.to_json() == _stop().to_json()


@pytest.mark.parametrize("option, field", [
    (dict(tau=float("nan")), "tau"), (dict(tau="0"), "tau"), (dict(eta=0), "eta"), (dict(eta=1.5), "eta"),
    (dict(j_min="0.1"), "j_min"), (dict(j_min=float("inf")), "j_min"), (dict(error_rate="0.1"), "error_rate"),
    (dict(error_rate=0.0), "error_rate"), (dict(delta=1.5), "delta"), (dict(M=True), "M"), (dict(k_max=-1), "k_max"),
    (dict(budget_calls=0), "budget_calls"), (dict(repair_cost=-1.0), "repair_cost"), (dict(j_hat="x"), "j_hat"),
    (dict(stop_mode="yes"), "stop_mode"), (dict(rho0=float("nan")), "rho0"), (dict(value=0), "value"),
])
def test_bad_parameters_name_the_field(option, field):
    params = dict(M=4, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5, policy="vrr_stop")
    params.update(option)
    with pytest.raises(ValueError, match=f"field '{field}'"):
        OnlineController.from_parameters(**params)


def test_after_a_commit_every_call_says_call_start():
    ctl = _stop()
    assert ctl.observe([1, 1, 1, 1]).committed
    for call in (lambda: ctl.add_vote(1), lambda: ctl.observe([1]), lambda: ctl.observe([1] * 9),
                 lambda: ctl.observe_count(2), ctl.decide):
        with pytest.raises(RuntimeError, match=r"committed; call start\(\)"):
            call()
    assert not ctl.need_vote() and ctl.start().observe([0, 0, 0, 0]).action == "repair"


def test_policy_left_out_is_vrr_stop_from_point_estimates_and_algorithm1_with_its_inputs():
    box = {name: (0.1, 0.6) for name in PARAM_NAMES}
    point = dict(M=4, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5)
    assert OnlineController.from_parameters(**point).policy == "vrr_stop"
    assert OnlineController.from_parameters(draws=box_draws(box), j_hat=0.3, **point).policy == "algorithm1"
    assert OnlineController.from_parameters(draws=box_draws(box), stop_mode=False, **point).policy == "algorithm1"
    with pytest.raises(ValueError, match="policy='algorithm1' needs j_hat"):
        OnlineController.from_parameters(draws=box_draws(box), **point)


def test_budget_returns_the_keep_best_incumbent_not_the_last_plan():
    """VRR-Stop repairs a weak plan; the budget runs out during the next round: the incumbent (round 0,
    the only plan with a full round) is returned, not the repaired plan."""
    ctl = _stop(budget_calls=6)
    d = ctl.observe([1, 1, 0, 0])
    assert d.action == "repair"
    ctl.add_vote(0)
    ctl.add_vote(0)
    assert not ctl.need_vote() and ctl.budget_left()["calls"] == 0
    with pytest.raises(ValueError, match="budget is spent"):
        ctl.add_vote(1)
    d = ctl.decide()
    assert d.committed and d.candidate == 0 and d.round == 1 and "budget spent" in d.reason
    # keep-best (Eq. 9) picks the later plan when it beats the incumbent by delta
    ctl = _stop(budget_calls=8, delta=2)
    assert ctl.observe([0, 0, 0, 0]).action == "repair"
    d = ctl.observe([1, 1, 0, 0])
    assert d.committed and d.candidate == 1 and "budget spent after round 1" in d.reason
    # without a budget the same votes repair on
    free = _stop(delta=2)
    assert free.observe([0, 0, 0, 0]).action == free.observe([1, 1, 0, 0]).action == "repair"


def test_token_budget_needs_token_counts_and_stops_at_the_budget():
    ctl = _stop(budget_tokens=50)
    with pytest.raises(ValueError, match="field 'tokens'"):
        ctl.add_vote(1)
    ctl.observe([1, 0, 0, 0], tokens=[10, 10, 10, 10])
    with pytest.raises(ValueError, match="token budget"):
        ctl.observe([0, 0], tokens=[10, 10])
    ctl.add_vote(0, tokens=10)
    d = ctl.decide()
    # Stop mode: the judged plan with the highest posterior; one reject on the repaired plan (alpha = 0.4)
    # leaves it likelier valid than the first plan with 1 of 4 accepts
    b0 = belief_update(0.5, 1, 4, 0.3, 0.2)
    b1 = belief_update(predict(b0, 0.4, 0.25), 0, 1, 0.3, 0.2)
    assert b1 > b0 and d.belief == pytest.approx(b1)
    assert d.committed and d.candidate == 1 and d.tokens == 50 and d.verifier_calls == 5


def test_repair_cost_sets_tau_and_the_cost_aware_boundary():
    from vrr.policies.online import tau_for_cost

    ctl = _stop(repair_cost=0.5, value=5.0)
    assert ctl.tau == tau_for_cost(0.5, 5.0) == 0.1
    assert ctl.threshold() == pytest.approx((0.4 - 0.1) / (0.4 + 0.25))
    assert _stop().threshold() == pytest.approx(0.4 / 0.65)
    # a belief between b*_tau and b* repairs at tau = 0 and commits at the cost-aware tau
    b = 0.55
    assert ctl.threshold() < b < _stop().threshold()
    with pytest.raises(ValueError, match="field 'tau'"):
        _stop(repair_cost=0.5, tau=0.2)
    assert OnlineController.from_json(ctl.to_json()).tau == 0.1


def test_algorithm1_stop_mode_commit_round_ends_early():
    """A commit leaves no state, so a Stop-mode commit round is decided once every completion commits, even
    though the completions would leave different Guard incumbents."""
    box = {name: (lo, lo + 0.02) for name, lo in zip(PARAM_NAMES, (0.1, 0.1, 0.3, 0.05, 0.5))}
    ctl = OnlineController.from_parameters(M=8, k_max=3, rho0=0.11, rho1=0.11, alpha=0.31, beta=0.06, pi=0.51,
                                           draws=box_draws(box), j_hat=0.7, sequential="exact")
    fixed = OnlineController.from_parameters(**dict(ctl.config, sequential="off"))
    n = 0
    while ctl.need_vote():
        ctl.add_vote(1)
        n += 1
    d = ctl.decide()
    assert n < 8 and d.committed and d.mode == "stop"
    assert fixed.observe([1] * 8).candidate == d.candidate == 0


# ------------------------------------------------------------------ every call takes effect whole or not at all
def test_too_few_votes_are_refused_whole_and_the_full_round_then_goes_through():
    ctl = OnlineController.from_parameters(M=8, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5)
    before = ctl.to_json()
    with pytest.raises(ValueError, match=r"field 'votes': 7 vote\(s\) leave the round at 7 of M=8.*send the "
                                         r"round's 8 remaining votes"):
        ctl.observe([1] * 7)
    assert ctl.to_json() == before
    assert ctl.observe([1] * 8).votes == 8


_CALLS = st.one_of(
    st.tuples(st.just("observe"), st.lists(st.sampled_from([0, 1, 1, 0, 2]), max_size=10)),
    st.tuples(st.just("observe_count"), st.integers(-1, 9)),
    st.tuples(st.just("add_vote"), st.sampled_from([0, 1, 2, True])),
    st.tuples(st.just("decide"), st.none()),
    st.tuples(st.just("start"), st.none()),
)


@given(config=st.fixed_dictionaries({
    "M": st.sampled_from([1, 3, 4, 8]), "policy": st.sampled_from(["vrr_stop", "vrr_guard", "algorithm1"]),
    "sequential": st.sampled_from(["off", "exact", "sprt"]), "budget_calls": st.sampled_from([None, 5, 11])}),
    calls=st.lists(_CALLS, max_size=15))
@settings(max_examples=60, deadline=None)
def test_observe_observe_count_and_add_vote_take_effect_whole_or_not_at_all(config, calls):
    """Over random call sequences: a refused call leaves to_json() byte-identical; an accepted observe
    (observe_count) equals add_vote for every vote followed by decide() on a copy."""
    box = {name: (0.05, 0.6) for name in PARAM_NAMES}
    extra = dict(draws=box_draws(box), j_hat=0.4) if config["policy"] == "algorithm1" else {}
    ctl = OnlineController.from_parameters(k_max=3, rho0=0.2, rho1=0.15, alpha=0.35, beta=0.1, pi=0.4,
                                           **config, **extra)
    for name, arg in calls:
        before = ctl.to_json()
        twin = OnlineController.from_json(before) if name.startswith("observe") else None
        try:
            out = getattr(ctl, name)(*(() if arg is None else (arg,)))
        except (ValueError, RuntimeError):
            assert ctl.to_json() == before, f"{name}({arg!r}) was refused but changed the state"
            continue
        if name in ("observe", "observe_count"):
            votes = list(arg) if name == "observe" else [1] * arg + [0] * (twin.M - twin.to_dict()["state"]["votes"] - arg)
            for v in votes:
                twin.add_vote(v)
            assert repr(twin.decide()) == repr(out) and twin.to_json() == ctl.to_json()


def test_an_unknown_option_names_the_field_and_the_nearest_one():
    from vrr.policies.online import UnknownOptionError

    params = dict(M=4, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5)
    for make in (lambda **kw: OnlineController(**params, **kw), lambda **kw: OnlineController.from_parameters(**params, **kw),
                 lambda **kw: OnlineController.from_calibration("examples/calibration_small.json", **kw)):
        with pytest.raises(UnknownOptionError, match=r"field 'budget_call': not an option of OnlineController; did "
                                                     r"you mean 'budget_calls'\?"):
            make(budget_call=10)
    assert issubclass(UnknownOptionError, ValueError) and issubclass(UnknownOptionError, TypeError)


# ------------------------------------------------------------------ what a spent budget returns
@pytest.mark.parametrize("M", [4, 6, 8])
def test_a_spent_budget_in_stop_mode_returns_the_judged_plan_with_the_highest_posterior(M):
    """A rejected first plan (0 of M), a middling repair (M/2 of M, G > 0: repair), the budget spent after two
    rejects in round 2: VRR-Stop returns round 1, the plan with the highest Eq. 5 posterior (Eq. 9 with
    delta = 5 would keep p_0, which the votes make near-certainly invalid)."""
    p = dict(rho0=0.3, rho1=0.2, alpha=0.5, beta=0.02, pi=0.3)
    b0 = belief_update(p["pi"], 0, M, p["rho0"], p["rho1"])
    b1 = belief_update(predict(b0, p["alpha"], p["beta"]), M // 2, M, p["rho0"], p["rho1"])
    b2 = belief_update(predict(b1, p["alpha"], p["beta"]), 0, 2, p["rho0"], p["rho1"])
    assert b1 > b2 > b0 and gain(b1, p["alpha"], p["beta"]) > 0
    ctl = OnlineController.from_parameters(M=M, k_max=5, policy="vrr_stop", budget_calls=2 * M + 2, **p)
    assert ctl.observe([0] * M).action == "repair"
    assert ctl.observe([1] * (M // 2) + [0] * (M - M // 2)).action == "repair"
    ctl.add_vote(0)
    ctl.add_vote(0)
    d = ctl.decide()
    assert d.committed and d.candidate == 1 and f"highest posterior (round 1, b = {b1:.3f}" in d.reason, d.reason


@pytest.mark.parametrize("M", [4, 6, 8])
def test_a_spent_budget_in_guard_mode_returns_keep_best_with_delta_scaled_to_M(M):
    """Guard returns Eq. 9's incumbent with the default delta = ceil(5 M / 8) (3, 4, 5): a repair with M - 1 of
    M accepts over a first plan with none replaces it at every M (with delta = 5 at M = 4 nothing could)."""
    from vrr.policies.online import default_delta

    assert default_delta(M) == {4: 3, 6: 4, 8: 5}[M] and M - 1 >= default_delta(M)
    ctl = OnlineController.from_parameters(M=M, k_max=5, policy="vrr_guard", budget_calls=2 * M + 2,
                                           rho0=0.25, rho1=0.2, alpha=0.35, beta=0.1, pi=0.4)
    ctl.observe([0] * M)
    ctl.observe([1] * (M - 1) + [0])
    ctl.add_vote(0)
    ctl.add_vote(0)
    d = ctl.decide()
    assert d.committed and d.candidate == 1 and "keep-best incumbent (round 1" in d.reason, d.reason


def test_guard_keeps_the_first_plan_when_no_repair_earns_the_margin():
    ctl = OnlineController.from_parameters(M=4, k_max=5, rho0=0.25, rho1=0.2, alpha=0.35, beta=0.1, pi=0.4,
                                           policy="vrr_guard", budget_calls=10)
    ctl.observe([1, 1, 0, 0])
    d = ctl.observe([1, 1, 1, 1])           # 4 < 2 + delta(4) = 5: no replacement
    assert ctl.config["delta"] == 3
    for v in (1, 1):
        ctl.add_vote(v)
    d = ctl.decide()
    assert d.committed and d.candidate == 0 and "keep-best incumbent (round 0" in d.reason


# ------------------------------------------------------------------ one source for the mode
@pytest.mark.parametrize("policy", ["algorithm1", "vrr_stop", "vrr_guard"])
@pytest.mark.parametrize("j_hat", [0.02, 0.5])
def test_the_planned_mode_is_the_mode_the_first_round_runs_in(policy, j_hat):
    from vrr.policies.online import planned_mode

    box = {name: (0.05, 0.6) for name in PARAM_NAMES}
    ctl = OnlineController.from_parameters(M=4, k_max=3, rho0=0.3, rho1=0.2, alpha=0.4, beta=0.25, pi=0.5,
                                           policy=policy, draws=box_draws(box), j_hat=j_hat)
    mode, reason = planned_mode(policy, j_hat, 0.10)
    assert ctl.mode == mode and ctl.to_dict()["state"]["reason"] == reason
    expected = {"vrr_stop": "stop", "vrr_guard": "guard", "algorithm1": "stop" if j_hat >= 0.1 else "guard"}[policy]
    assert mode == expected
    if policy != "algorithm1" and expected != ("stop" if j_hat >= 0.1 else "guard"):
        assert "as asked, although Algorithm 1 would run" in reason


def test_tokens_a_vote_does_not_report_are_unknown_not_zero():
    ctl = _stop()
    d = ctl.observe([0, 0, 1, 0], tokens=[5, 5, 5, 5])
    assert d.tokens == 20
    ctl.add_vote(1, tokens=7)
    ctl.add_vote(1)                                   # no count: the total is no longer known
    resumed = OnlineController.from_json(ctl.to_json())
    for c in (ctl, resumed):
        d = c.observe([1, 1])
        assert d.tokens is None and d.verifier_calls == 8
    assert _stop().observe([1, 1, 1, 1]).tokens is None
