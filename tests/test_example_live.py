"""examples/live_gsm8k.py end to end with the fake engine backend (vrr/loop/engine/fake.py), so the
example stays covered without a model; the real-engine run is shown in docs/adapters.md.

The fake engine is deterministic: the generator's plan is correct for even problem indices, the
repairer flips a plan's correctness, and the judge accepts 4 of 8 votes on a correct plan and 2 of 8 on
a wrong one. So the votes, the controller's decisions and the final validity can all be checked.
"""
import json
import math
import subprocess
import sys
from pathlib import Path


from vrr.policies.online import OnlineController

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "live_gsm8k.py"
# The fake judge's rates: accept 4/8 on valid plans (rho1 = 0.5), 2/8 on invalid ones (rho0 = 0.25).
PARAMS = dict(rho0=0.25, rho1=0.5, alpha=0.9, beta=0.1, pi=0.5)


def run_example(tmp_path, *args):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--backend", "fake", "--json", str(out), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(out.read_text())


def check_decisions(controller, rounds):
    """The example's recorded decisions equal those of an independent controller fed the same votes."""
    ctl = controller.start()
    for rd in rounds:
        votes = [1] * rd["accepts"] + [0] * (rd["votes"] - rd["accepts"])
        want = ctl.observe(votes).as_dict()
        for key in ("radius", "radius_low"):  # no error radius outside Algorithm 1: NaN, written as null
            assert math.isnan(want.pop(key)) and rd[key] is None
        assert want == {k: rd[k] for k in want}


def test_the_controller_drives_the_live_loop(tmp_path):
    params = ",".join(f"{k}={v}" for k, v in PARAMS.items())
    stdout, data = run_example(tmp_path, "--problems", "2", "--params", params, "--k-max", "3")
    results = data["results"]
    assert [(r["dataset"], r["split"], r["index"]) for r in results] == [("gsm8k", "test", 0), ("gsm8k", "test", 1)]
    for r in results:
        for k, rd in enumerate(r["rounds"]):
            assert rd["round"] == k
            assert rd["valid"] == ((r["index"] % 2 == 0) != (k % 2 == 1))      # the repairer flips the plan
            assert (rd["accepts"], rd["votes"]) == ((4, 8) if rd["valid"] else (2, 8))
        assert [rd["action"] for rd in r["rounds"]] == ["repair"] * (len(r["rounds"]) - 1) + ["commit"]
        check_decisions(OnlineController.from_parameters(M=8, k_max=3, policy="vrr_stop", **PARAMS), r["rounds"])
        assert r["valid"] == r["rounds"][r["committed_round"]]["valid"]        # the official check of the committed plan
        assert r["verifier_calls"] == 8 * len(r["rounds"])
        assert r["repair_calls"] == len(r["rounds"]) - 1
    # A valid plan (S = 4) after a repair gives b = 0.966 > b* = 0.9: problem 0 is repaired twice, problem 1 once.
    assert [(r["committed_round"], r["valid"]) for r in results] == [(2, True), (1, True)]
    rounds = [ln for ln in stdout.splitlines() if " round " in ln and "committed" not in ln]
    assert len(rounds) == 5 and all(" b=" in ln and " G=" in ln and "-> " in ln for ln in rounds)
    assert "official GSM8K check: valid" in stdout and "committed valid: 2/2" in stdout


def test_sequential_voting_makes_fewer_judge_requests(tmp_path):
    # One vote per request; the fake judge's first sample of a request always accepts.
    stdout, data = run_example(tmp_path, "--problems", "2", "--params", ",".join(f"{k}={v}" for k, v in PARAMS.items()),
                               "--k-max", "3", "--sequential", "exact")
    for r in data["results"]:
        assert all(rd["accepts"] == rd["votes"] for rd in r["rounds"])
        check_decisions(OnlineController.from_parameters(M=8, k_max=3, policy="vrr_stop", sequential="exact",
                                                         **PARAMS), r["rounds"])
        assert r["verifier_calls"] == sum(rd["votes"] for rd in r["rounds"]) < 8 * len(r["rounds"])


def test_guard_mode_from_the_saved_calibration_keeps_the_incumbent(tmp_path, calibration):
    cal = calibration("gsm8k_cpu_favorable")    # what 03_calibrate saves
    stdout, data = run_example(tmp_path, "--problems", "2", "--k-max", "2", "--calibration", str(cal))
    assert data["controller"]["policy"] == "algorithm1"
    for r in data["results"]:
        assert [rd["mode"] for rd in r["rounds"]] == ["guard"] * 3     # J-hat below J_min: Guard (Algorithm 1 line 1)
        assert r["committed_round"] == 0                               # no later plan wins by delta = 5 votes
        assert r["valid"] == (r["index"] % 2 == 0)
    assert "labeled J-hat" in stdout


def test_bad_arguments_are_clear_errors(tmp_path, calibration):
    cal = str(calibration("gsm8k_cpu_favorable"))
    for args, message in ((["--params", "rho0=0.2"], "missing rho1"),
                          (["--params", "rho0=x,rho1=0.1,alpha=0.1,beta=0.1,pi=0.5"], "rho0 must be a number"),
                          (["--calibration", str(tmp_path / "none.json")], "no saved calibration"),
                          (["--model", "smollm2-135m", "--calibration", cal], "calibrated for another loop")):
        proc = subprocess.run([sys.executable, str(EXAMPLE), "--backend", "fake", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300)
        assert proc.returncode != 0 and message in proc.stderr, (args, proc.stderr)


def test_the_fake_engine_line_of_the_adapters_page_runs_as_written(tmp_path):
    """docs/adapters.md's no-model command works on a fresh clone: no results/ calibration needed."""
    lines = [ln for ln in (REPO / "docs" / "adapters.md").read_text().splitlines()
             if ln.startswith(".venv/bin/python examples/live_gsm8k.py --backend fake")]
    assert len(lines) == 1, lines
    stdout, data = run_example(tmp_path, *lines[0].split()[2:])  # the page's --backend fake repeats run_example's
    assert "gsm8k test #1" in stdout and "committed valid:" in stdout


def test_each_role_runs_on_its_settings_model(tmp_path):
    """A setting with a 1.5B generator and repairer and a 0.5B judge (the GSM8K program votes) gets one engine per
    model: the judge's votes go to the judge's model, the plans and repairs to the generator's."""
    params = ",".join(f"{k}={v}" for k, v in PARAMS.items())
    stdout, data = run_example(tmp_path, "--setting", "gsm8k_cpu_program_favorable", "--problems", "2",
                               "--params", params, "--k-max", "3")
    roles = data["engine"]["roles"]
    assert {r: v["model"] for r, v in roles.items()} == {
        "generator": "qwen2.5-coder-1.5b", "judge": "qwen2.5-coder-0.5b", "repairer": "qwen2.5-coder-1.5b"}
    results = data["results"]
    assert roles["generator"]["calls"] == len(results)
    assert roles["judge"]["calls"] == sum(len(r["rounds"]) for r in results)    # one n=M request per round
    assert roles["repairer"]["calls"] == sum(r["repair_calls"] for r in results) > 0
    assert "judge=qwen2.5-coder-0.5b" in stdout


def test_a_stress_setting_repairs_from_the_perturbed_copy(tmp_path):
    """Under PM stress the example's repairer sees the setting's perturbed copy of the problem, as in `vrr generate`
    (runner.repair_question); the favorable setting's never does."""
    params = ",".join(f"{k}={v}" for k, v in PARAMS.items())
    for setting, stressed in (("gsm8k_cpu_program_pmstress", True), ("gsm8k_cpu_program_favorable", False)):
        stdout, data = run_example(tmp_path, "--setting", setting, "--problems", "2", "--params", params,
                                   "--k-max", "2")
        for r in data["results"]:
            assert [rd["perturbed"] for rd in r["rounds"]] == [False] + [stressed] * (len(r["rounds"]) - 1)
            assert len(r["rounds"]) > 1
        assert ("from a perturbed copy" in stdout) == stressed


def test_resample_mode_draws_each_round_from_the_generator(tmp_path):
    """The independent-resampling control (repair mode "resample"): every later round is a fresh generator sample,
    so the repairer is never called."""
    params = ",".join(f"{k}={v}" for k, v in PARAMS.items())
    _, data = run_example(tmp_path, "--setting", "gsm8k_cpu_nonstationary_resample", "--problems", "2",
                          "--params", params, "--k-max", "3")
    roles, results = data["engine"]["roles"], data["results"]
    repairs = sum(r["repair_calls"] for r in results)
    assert repairs > 0 and roles["repairer"]["calls"] == 0
    assert roles["generator"]["calls"] == len(results) + repairs
