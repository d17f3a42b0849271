"""The calibration ablation (vrr.stats.calibration_ablation) and its table (vrr.report.calibration_ablation_table):
a row reproduces VRR-Stop under an independently assembled calibration, rows that cannot run say n/a and why, and
on correlated votes with known truth the beta-binomial likelihood's belief is the better calibrated one."""
from types import SimpleNamespace

import numpy as np
import pytest

from vrr.calibration.estimators import crossfit
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.policies import rules
from vrr.calibration.check import folds_verdict
from vrr.policies.replay import ReplayConfig, replay
from vrr.common.jsonio import write_json
from vrr.report.calibration_ablation_table import table_calibration_ablation
from vrr.report.render import read_csv
from vrr.settings import (CALIBRATION_LIKELIHOODS, CALIBRATION_METHODS, VOTE_ROUNDS, SettingConfigError,
                          load_config)
from vrr.stats.calibration_ablation import (ABLATION_FILE, CALIBRATIONS, expected_calibration_error, not_applicable,
                                            setting_calibration_ablation)

# the Qwen-3B stress row's parameters (settings/sim_qwen3b_pmstress.yaml), votes correlated 1 / (2.33 + 1) = 0.3
STRESS = NoiseParams(rho0=0.364, rho1=0.177, alpha=0.32, beta=0.786, pi=0.7)
LABELED_PROBE = [c for c in CALIBRATIONS if c[1] == "labeled_mle"]


def correlated(n=200, seed=3, probe_n=100, M=8):
    return simulate_setting(STRESS, n=n, M=M, seed=seed, judge_concentration=2.33, probe_n=probe_n, probe_M=16,
                            name="correlated_test")


def test_the_labeled_probe_row_is_vrr_stop_under_a_crossfit_of_the_probes_labels():
    """The binomial labeled-probe row's VRR-Stop V equals the validity of the VRR-Stop rule run on rates fit by
    labeled MLE on the probe under five-fold cross-fitting, assembled here without replay; the window's own labels
    (vote_rounds 'first') would give another V, so the row reads the probe."""
    s = correlated()
    out = setting_calibration_ablation(s, ReplayConfig(), "llm_judge", n_resamples=200, calibrations=LABELED_PROBE,
                                       likelihoods=("binomial",))
    (row,) = out["rows"]
    assert row["applies"] and row["method"] == "labeled_mle" and row["vote_rounds"] == "probe"

    def stop_v(**kwargs):
        cf = crossfit(s.S, s.y, s.M, method="labeled_mle", n_folds=5, seed=0, **kwargs)
        committed = rules.vrr_stop(s.S, s.M, **cf.as_kwargs()).committed
        return float(s.y[np.arange(s.S.shape[0]), committed].mean())

    probe_v = stop_v(vote_rounds="probe", probe_S=s.probe_S, probe_y=s.probe_y, probe_M=s.probe_M)
    assert row["VRR-Stop"]["V"] == pytest.approx(probe_v, abs=1e-12)
    assert probe_v != stop_v(vote_rounds="first")
    assert row["V"]["No repair"] == pytest.approx(float(s.y[:, 0].mean()))
    stop = row["VRR-Stop"]
    for key in ("vs_no_repair", "vs_tpm"):
        assert stop[key]["dV_low"] <= stop[key]["dV"] <= stop[key]["dV_high"]
    assert stop["vs_no_repair"]["dV"] == pytest.approx(stop["V"] - row["V"]["No repair"])
    assert row["check"]["verdict"] in ("pass", "reject", "split") and row["check"]["folds"] == 5
    # the checks the ablation computes once per setting are the ones replay computes for this row alone
    alone = replay(s, ReplayConfig(method="labeled_mle", vote_rounds="probe"), policies=("Algorithm 1",))
    assert row["Algorithm 1"]["V"] == float(alone.validity["Algorithm 1"].mean())
    assert row["check"] == folds_verdict(alone.extras["calibration_check_per_fold"])


def test_rows_that_cannot_run_say_na_with_the_reason(tmp_path):
    no_probe = correlated(n=60, probe_n=0)
    out = setting_calibration_ablation(no_probe, ReplayConfig(), "llm_judge", n_resamples=50,
                                       likelihoods=("binomial",))
    by = {r["calibration"]: r for r in out["rows"]}
    assert by["label-free EM"]["applies"]
    for name in ("labeled probe", "semi-supervised (checked)", "semi-supervised (Wald-checked)",
                 "PPI++ (probe + EM posterior)"):
        assert not by[name]["applies"] and by[name]["reason"] == "no labeled probe"
        assert "VRR-Stop" not in by[name]
    write_json(tmp_path / "correlated_test" / ABLATION_FILE, out)
    results = SimpleNamespace(root=tmp_path, runs=["correlated_test", "without_ablation"], label=lambda run: "no probe")
    assert len(table_calibration_ablation(results, tmp_path / "tables")) == 5
    table = {r["calibration"]: r for r in read_csv(tmp_path / "tables" / "calibration_ablation.csv")}
    assert len(table) == 5
    assert table["labeled probe"]["stop_V"] == "n/a (no labeled probe)" and table["labeled probe"]["check"] == ""
    assert table["label-free EM"]["stop_V"] == f"{by['label-free EM']['VRR-Stop']['V']:.3f}"
    assert table["label-free EM"]["tpm_V"] == f"{by['label-free EM']['V']['TPM reference']:.3f}"

    s = correlated(n=60)
    for method in ("binomial_em", "semisupervised_checked"):   # deterministic votes repeat one answer
        assert "deterministic verifier (executor)" in not_applicable(s, "executor", method, "binomial", "first")
    assert not_applicable(s, "executor", "labeled_mle", "binomial", "probe") is None
    four = correlated(n=60, M=4)   # the binomial mixture needs 3 votes per plan, the beta-binomial one 5
    assert not_applicable(four, "llm_judge", "binomial_em", "binomial", "first") is None
    assert not_applicable(four, "llm_judge", "binomial_em", "beta_binomial", "first") == \
        "M = 4 votes per plan, below the 5 that beta_binomial_em needs"
    unlabeled = correlated(n=60)
    unlabeled.probe_y = None
    assert not_applicable(unlabeled, "llm_judge", "labeled_mle", "binomial", "probe") == "the probe has no labels"
    assert not_applicable(unlabeled, "llm_judge", "binomial_em", "binomial", "probe") is None  # reads no labels


@pytest.mark.parametrize("verifier_kind", ["llm_judge", "executor"])
@pytest.mark.parametrize("probe_n", [0, 100])
def test_the_settings_refuse_what_the_ablation_reports_na_and_with_the_same_reason(verifier_kind, probe_n):
    """One rule: every calibration (method, vote rounds, likelihood) the ablation reports n/a on a setting is one
    the settings refuse for that setting, naming the ablation's reason, and every one it runs they accept."""
    s = correlated(n=40, probe_n=probe_n)
    verdicts = set()
    for method in CALIBRATION_METHODS:
        for vote_rounds in VOTE_ROUNDS:
            for likelihood in CALIBRATION_LIKELIHOODS:
                reason = not_applicable(s, verifier_kind, method, likelihood, vote_rounds)
                overrides = {"verifier.kind": verifier_kind, "probe.n": probe_n, "calibration.method": method,
                             "calibration.vote_rounds": vote_rounds, "calibration.likelihood": likelihood}
                case = (method, vote_rounds, likelihood, reason)
                verdicts.add(reason is None)
                if reason is None:
                    assert load_config("sim_correlated_pmstress", overrides=overrides)["calibration"]["method"] \
                        == method
                    continue
                with pytest.raises(SettingConfigError) as info:
                    load_config("sim_correlated_pmstress", overrides=overrides)
                assert f"({reason}); " in info.value.problem and repr(method) in info.value.problem, case
    assert verdicts == {True, False}      # both directions are exercised


def test_on_correlated_votes_the_beta_binomial_belief_is_better_calibrated():
    """Votes correlated 0.3 within a plan: the binomial filter counts 8 correlated votes as 8 independent ones and
    is overconfident; with the beta-binomial likelihood the belief's calibration error and Brier score are lower."""
    s = correlated(n=300, seed=5)
    out = setting_calibration_ablation(s, ReplayConfig(), "llm_judge", n_resamples=50, calibrations=LABELED_PROBE)
    binomial, exchangeable = out["rows"]
    assert (binomial["likelihood"], exchangeable["likelihood"]) == ("binomial", "beta_binomial")
    assert exchangeable["belief_ece"] < binomial["belief_ece"] - 0.05
    assert exchangeable["belief_brier"] < binomial["belief_brier"]
    assert exchangeable["estimates"]["phi1"] == pytest.approx(0.3, abs=0.15)


def test_expected_calibration_error():
    rng = np.random.default_rng(0)
    b = rng.random(20000)
    y = rng.random(b.size) < b
    assert expected_calibration_error(b, y) < 0.02                   # y ~ Bernoulli(b): calibrated
    overconfident = np.where(b > 0.5, 1.0, 0.0)
    assert expected_calibration_error(overconfident, y) == pytest.approx(0.25, abs=0.02)
    assert expected_calibration_error([0.05, 0.05, 0.95, 0.95], [0, 1, 1, 1]) == pytest.approx(
        0.5 * abs(0.05 - 0.5) + 0.5 * abs(0.95 - 1.0))
