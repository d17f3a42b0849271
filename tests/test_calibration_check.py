"""Algorithm 1 online, calibrated from labels: on an informative judge the controller's round-0 decision on a plan
with 5 of 6 accepts is to commit it in Stop mode (its posterior is far above b*, and the error radius of the
calibration is small enough for the sign of G-hat to be identifiable), and the calibration report names the mode
the decision ran in."""
import numpy as np

from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting
from vrr.policies.online import OnlineController


def test_from_labeled_commits_a_5_of_6_plan_at_round_0_in_stop_mode():
    truth = NoiseParams(rho0=0.25, rho1=0.2, alpha=0.45, beta=0.1, pi=0.5)
    M, n = 6, 300
    sim = simulate_setting(truth, n=n, k_max=5, M=M, seed=0)
    y = sim.y.astype(int)
    ctl = OnlineController.from_labeled(votes=sim.S[:, 0].tolist(), labels=y[:, 0].tolist(),
                                        repairs=[(y[i, 0], y[i, 1]) for i in range(n)], M=M, k_max=5)
    report = ctl.calibration_report
    decision = ctl.observe([1, 1, 1, 1, 1, 0])
    b_star = report.alpha / (report.alpha + report.beta)
    assert decision.belief > b_star                     # the sign of G-hat is negative: commit is right
    assert decision.mode == "stop" and decision.action == "commit" and decision.round == 0
    assert report.mode == decision.mode
    assert np.isfinite(decision.radius) and decision.gain + decision.radius <= 0.0
