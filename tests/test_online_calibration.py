"""Calibration where the loop runs (vrr.policies.online_calibration): from_labeled recovers known parameters
of simulated loops, picks Guard when the votes do not separate the classes, saves and reloads exactly, refuses
bad input and bad files naming the field; the shipped example is what its generator writes."""
import json
import warnings

import numpy as np
import pytest

from vrr.common.paths import REPO_ROOT
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.policies.online import OnlineController
from vrr.policies.online_calibration import EXAMPLE, write_small_example


def _data(truth: NoiseParams, n=400, k_max=5, M=8, seed=0, rounds=False):
    sim = simulate_setting(truth, n=n, k_max=k_max, M=M, seed=seed)
    y = sim.y.astype(int)
    if rounds:
        repairs = [(y[i, t], y[i, t + 1], t) for i in range(n) for t in range(k_max)]
    else:
        repairs = [(y[i, 0], y[i, 1]) for i in range(n)]
    return sim, dict(votes=sim.S[:, 0].tolist(), labels=y[:, 0].tolist(), repairs=repairs, M=M, k_max=k_max)


@pytest.mark.parametrize("seed", [0, 1])
def test_from_labeled_recovers_known_parameters_within_the_draws(seed):
    truth = NoiseParams(rho0=0.25, rho1=0.15, alpha=0.35, beta=0.12, pi=0.45)
    _, data = _data(truth, seed=seed)
    ctl = OnlineController.from_labeled(**data)
    r = ctl.calibration_report
    draws = ctl.config["draws"]
    for name, value in truth.as_dict().items():
        assert len(draws[name]) == 200 and min(draws[name]) <= value <= max(draws[name]), name
        assert r[name] == pytest.approx(value, abs=0.08), name
    assert r.j_ci[0] <= truth.youden_j <= r.j_ci[1]
    # independent votes: the check passes, and the mode is algorithm1_mode's, the one replay uses
    assert r.check["passed"] and ctl.config["check"] == r.check and "calibration check: pass" in r.summary()
    assert r.mode == "stop" and "labeled rates" in r.reason and "check passes" in r.reason and ctl.policy == "algorithm1"
    assert (r.n_plans, r.n_repairs, r.M, r.k_max) == (400, 400, 8, 5)
    assert ctl.config["j_hat"] == r.j_hat and ctl.config["eta"] == r.eta == 0.05
    # the estimates are labeled MLE and pair frequencies, written out by hand
    S, y = np.array(data["votes"]), np.array(data["labels"])
    assert r.rho0 == S[y == 0].sum() / (8 * (y == 0).sum())
    assert r.rho1 == 1 - S[y == 1].sum() / (8 * (y == 1).sum())
    before = np.array([p[0] for p in data["repairs"]])
    after = np.array([p[1] for p in data["repairs"]])
    assert r.alpha == (after[before == 0] == 1).mean() and r.beta == (after[before == 1] == 0).mean()
    assert r.pi == y.mean()


def test_vote_lists_give_the_same_calibration_as_counts():
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.3, beta=0.1, pi=0.5)
    _, data = _data(truth, n=60)
    rng = np.random.default_rng(0)
    lists = [list(rng.permutation([1] * s + [0] * (8 - s))) for s in data["votes"]]
    a = OnlineController.from_labeled(**data).calibration_report
    b = OnlineController.from_labeled(**dict(data, votes=lists, M=None)).calibration_report
    assert a == b


def test_near_zero_j_runs_stop_on_labeled_rates_and_guard_on_label_free_ones():
    """from_labeled fits labeled rates, which keep the belief calibrated at J = 0: Algorithm 1 runs VRR-Stop's rule,
    which repairs exactly while the prior lies below b* (Eq. 7). Label-free rates
    with the same J-hat run Guard (the paper's J_min test)."""
    truth = NoiseParams(rho0=0.5, rho1=0.5, alpha=0.3, beta=0.2, pi=0.5)
    _, data = _data(truth, n=300)
    ctl = OnlineController.from_labeled(**data)
    r = ctl.calibration_report
    assert abs(r.j_hat) < 0.1 and r.mode == "stop" and "labeled rates" in r.reason
    stop = OnlineController.from_labeled(policy="vrr_stop", **data)
    assert ctl.observe([1] * 8).action == stop.observe([1] * 8).action
    free = OnlineController.from_parameters(M=8, k_max=5, rho0=r.rho0, rho1=r.rho1, alpha=r.alpha, beta=r.beta, pi=r.pi,
                                            policy="algorithm1", draws=ctl.config["draws"], j_hat=r.j_hat)
    assert free.mode == "guard" and "below J_min" in free.to_dict()["state"]["reason"]
    d = free.observe([1] * 8)
    assert d.mode == "guard" and d.action == "repair"        # Guard spends the budget, keep-best


def test_save_and_reload_round_trip_and_round_dynamics(tmp_path):
    truth = NoiseParams(rho0=0.2, rho1=0.15, alpha=0.3, beta=0.1, pi=0.4)
    _, data = _data(truth, n=120, rounds=True)
    ctl = OnlineController.from_labeled(**data, delta=4, sequential="exact")
    path = ctl.save_calibration(tmp_path / "cal.json")
    back = OnlineController.from_calibration(path, delta=4, sequential="exact")
    assert back.calibration_report == ctl.calibration_report
    assert {k: v for k, v in back.config.items() if k != "source"} == {
        k: v for k, v in ctl.config.items() if k != "source"}
    t = OnlineController.from_calibration(path, policy="vrr_stop", round_dynamics=True)
    assert len(t.config["alpha"]) == 5 and t.config["alpha"] == ctl.calibration_report.round_rates["alpha"]
    with pytest.raises(ValueError, match="policy='vrr_stop'"):
        OnlineController.from_calibration(path, round_dynamics=True)
    pooled = OnlineController.from_labeled(**dict(data, repairs=[p[:2] for p in data["repairs"]]))
    pooled.save_calibration(tmp_path / "pooled.json")
    with pytest.raises(ValueError, match="field 'round_rates'"):
        OnlineController.from_calibration(tmp_path / "pooled.json", policy="vrr_stop", round_dynamics=True)
    # the controller state carries the report (adapters copy controllers through to_dict / from_dict)
    assert OnlineController.from_json(ctl.to_json()).calibration_report == ctl.calibration_report


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["report"].update(rho0=0.5), "report.rho0"),
    (lambda d: d["report"].update(mode="stop" if d["report"]["mode"] == "guard" else "guard"), "report.mode"),
    (lambda d: d["data"]["repairs"].update(fixed="3"), "data.repairs.fixed"),
    (lambda d: d["data"].update(accept_histogram_valid=[1, 2]), "data.accept_histogram_valid"),
    (lambda d: d.pop("M"), "M"),
    (lambda d: d.update(eta=2.0), "eta"),
    (lambda d: d.update(version=9), "version"),
    (lambda d: d["data"].update(extra=1), "data.extra"),
])
def test_bad_calibration_files_name_file_and_field(tmp_path, mutate, field):
    src = REPO_ROOT / "examples" / "calibration_small.json"
    doc = json.loads(src.read_text())
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"{path}: field '{field}'"):
        OnlineController.from_calibration(path)


@pytest.mark.parametrize("change, field", [
    (dict(labels=[0, 1]), "labels"), (dict(votes=[9]), "votes"), (dict(votes="11"), "votes"),
    (dict(repairs=[(0, 2)]), "repairs"), (dict(repairs=[(0, 1, 9)]), "repairs"), (dict(repairs=[]), "repairs"),
    (dict(M=None), "M"), (dict(M="8"), "M"), (dict(M=0), "M"), (dict(votes=[[]] * 30, M=None), "votes"), (dict(k_max=-1), "k_max"),
    (dict(j_min="high"), "j_min"), (dict(eta=0), "eta"),
])
def test_bad_labeled_sets_name_the_field(change, field):
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.3, beta=0.1, pi=0.5)
    _, data = _data(truth, n=30)
    with pytest.raises(ValueError, match=f"field '{field}"):
        OnlineController.from_labeled(**dict(data, **change))


def test_one_class_missing_is_refused():
    with pytest.raises(ValueError, match=">= 2 valid and >= 2 invalid"):
        OnlineController.from_labeled(votes=[8, 7, 6], labels=[1, 1, 1], repairs=[(0, 1)], M=8)


def test_from_unlabeled_em_recovers_the_noise():
    truth = NoiseParams(rho0=0.2, rho1=0.1, alpha=0.3, beta=0.1, pi=0.5)
    sim, data = _data(truth, n=800)
    ctl = OnlineController.from_unlabeled(counts=data["votes"], repairs=data["repairs"], M=8, k_max=5)
    r = ctl.calibration_report
    assert r.method == "binomial_em" and r.j_hat is None and r.mode == "stop"
    assert r.reason == ctl.to_dict()["state"]["reason"]        # the report states what runs
    assert r.rho0 == pytest.approx(0.2, abs=0.03) and r.rho1 == pytest.approx(0.1, abs=0.03)
    assert r.pi == pytest.approx(0.5, abs=0.06) and ctl.policy == "vrr_stop"


def test_shipped_example_is_what_the_generator_writes(tmp_path):
    shipped = json.loads((REPO_ROOT / "examples" / "calibration_small.json").read_text())
    fresh = json.loads(write_small_example(tmp_path / "cal.json").read_text())

    def close(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
        if isinstance(a, float):
            return isinstance(b, float) and abs(a - b) <= 1e-12 * max(1.0, abs(a))   # CPUs differ in last digits
        return a == b and type(a) is type(b)

    assert close(fresh, shipped)
    assert shipped["M"] == EXAMPLE["M"] and shipped["k_max"] == EXAMPLE["k_max"]
    ctl = OnlineController.from_calibration(REPO_ROOT / "examples" / "calibration_small.json")
    assert ctl.calibration_report.mode == "stop" and ctl.policy == "algorithm1"


# ---------------------------------------------------------------- the report states what runs
@pytest.mark.parametrize("policy", ["algorithm1", "vrr_stop", "vrr_guard"])
@pytest.mark.parametrize("rho", [0.5, 0.15])   # J = 0 (Guard by the J test) and J = 0.7 (Stop)
def test_the_report_mode_is_the_mode_the_controller_runs(policy, rho, tmp_path):
    from vrr.policies.online_calibration import CalibrationWarning

    truth = NoiseParams(rho0=rho, rho1=rho, alpha=0.35, beta=0.12, pi=0.45)
    _, data = _data(truth, n=300, seed=2)
    j_says = "stop"      # labeled rates: Algorithm 1 runs Stop at any J (vrr.policies.mode)
    overrides = policy != "algorithm1" and j_says != {"vrr_stop": "stop", "vrr_guard": "guard"}[policy]
    with pytest.warns(CalibrationWarning, match="as asked, although Algorithm 1 would run") if overrides else \
            _no_calibration_warning():
        ctl = OnlineController.from_labeled(policy=policy, **data)
    path = tmp_path / "cal.json"
    ctl.save_calibration(path)
    for c in (ctl, OnlineController.from_calibration(path)):
        r = c.calibration_report
        assert r.policy == c.policy == policy
        assert (r.mode, r.reason) == (c.mode, c.to_dict()["state"]["reason"])
        assert r.mode == {"vrr_stop": "stop", "vrr_guard": "guard", "algorithm1": j_says}[policy]
    # a policy given when loading (VRRRefine.calibrate and calibrate_from_log pass theirs the same way)
    for other in ("algorithm1", "vrr_stop", "vrr_guard"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CalibrationWarning)
            c = OnlineController.from_calibration(path, policy=other)
        assert (c.calibration_report.policy, c.calibration_report.mode) == (other, c.mode)
        assert c.calibration_report.reason == c.to_dict()["state"]["reason"]


def _no_calibration_warning():
    import contextlib

    from vrr.policies.online_calibration import CalibrationWarning

    @contextlib.contextmanager
    def guard():
        with warnings.catch_warnings():
            warnings.simplefilter("error", CalibrationWarning)
            yield
    return guard()


def test_a_rate_no_pair_measures_is_a_stated_prior_with_a_warning():
    from vrr.policies.online_calibration import CalibrationWarning

    truth = NoiseParams(rho0=0.25, rho1=0.15, alpha=0.35, beta=0.12, pi=0.45)
    _, data = _data(truth, n=100)
    only_valid_before = [(1, 1)] * 9 + [(1, 0)]
    with pytest.warns(CalibrationWarning, match=r"field 'repairs': no round-0 pair starts from an invalid plan, so "
                                                r"nothing measures alpha.*alpha = 0.5 is the Jeffreys prior mean"):
        r = OnlineController.from_labeled(**dict(data, repairs=only_valid_before)).calibration_report
    assert r.alpha == 0.5 and r.rules["alpha"].startswith("prior: no invalid-before pair")
    assert r.beta == 0.1 and r.rules["beta"] == "frequency"


def test_the_example_generator_prints_help_and_writes_no_file(tmp_path):
    import subprocess
    import sys

    for arg in ("--help", "-h"):
        out = subprocess.run([sys.executable, "-m", "vrr.policies.online_calibration", arg], cwd=tmp_path,
                             capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT), "PATH": ""})
        assert out.returncode == 0 and "usage:" in out.stdout and "OUT.json" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "vrr.policies.online_calibration", "--out"], cwd=tmp_path,
                         capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT), "PATH": ""})
    assert bad.returncode == 2 and "required: OUT.json" in bad.stderr
    assert list(tmp_path.iterdir()) == []
