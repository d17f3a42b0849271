"""TPM-t, VRR-Stop-t's oracle (vrr.policies.replay): the true round-dependent schedule in simulation, the labeled
per-round estimates on real data."""
import numpy as np

from vrr.data.contract import load_setting
from vrr.data.simulate import simulate_from_config, simulate_setting
from vrr.settings import load_config
from vrr.core.model import NoiseParams
from vrr.policies import rules as P
from vrr.policies.replay import ReplayConfig, replay


def test_with_a_true_schedule_tpm_t_is_vrr_stop_t_on_the_truth():
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.3, beta=0.1, pi=0.4)
    st = simulate_setting(truth, n=200, k_max=4, M=8, seed=3)
    a_t, b_t = [0.3, 0.3, 0.05, 0.05], [0.1, 0.1, 0.6, 0.6]
    st.meta.update(true_params=dict(rho0=0.3, rho1=0.2, alpha=0.3, beta=0.1, pi=0.4),
                   alpha_t=a_t, beta_t=b_t)
    res = replay(st, ReplayConfig(), policies=("TPM-t", "TPM reference"))
    n = st.S.shape[0]
    want = P.vrr_stop_t(st.S, st.M, 0.3, 0.2, np.tile(a_t + [a_t[-1]], (n, 1)), np.tile(b_t + [b_t[-1]], (n, 1)), 0.4)
    assert np.array_equal(res.outcomes["TPM-t"].committed, want.committed)
    assert res.extras["tpm_t_source"] == "true parameters"
    # the schedule matters: stationary TPM repairs on where the late rounds only break
    assert res.outcomes["TPM-t"].committed.mean() < res.outcomes["TPM reference"].committed.mean()


def test_without_the_truth_tpm_t_learns_the_schedule_from_labels():
    """The labeled path (real data): on the simulated non-stationary setting with its truth hidden, the labeled
    per-round rates recover what the stationary labeled TPM misses, close to TPM-t on the true schedule."""
    st = simulate_from_config(load_config("sim_nonstationary"))
    truth_t = replay(st, ReplayConfig(), policies=("TPM-t",))
    labeled = replay(st, ReplayConfig(tpm="labeled"), policies=("TPM-t", "TPM reference"))
    assert labeled.extras["tpm_t_source"] == "labeled estimates (cross-fit, per round)"
    v = {k: float(x.mean()) for k, x in labeled.validity.items()}
    assert v["TPM-t"] > v["TPM reference"] + 0.01
    assert abs(v["TPM-t"] - float(truth_t.validity["TPM-t"].mean())) < 0.03
