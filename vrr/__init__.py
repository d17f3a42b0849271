"""vrr: reference implementation of "Verify, Repair, Repeat, or Stop?" (VRR-Stop / VRR-Guard).

Where each part of the paper lives:

=====================================================  ===========================
paper                                                  module
=====================================================  ===========================
noise model, J, population dynamics Q_t, A_t (Sec. 3)  ``vrr.model``
belief update Eq. 5, predict, gain Eq. 6, b* Eq. 7      ``vrr.belief``
EM / MoM / labeled MLE / BB-EM, alpha, beta, pi,        ``vrr.calibration``
five-fold cross-fitting (App. A, B, I)
error radius B_k, Eq. 8, J diagnostic, flip risk        ``vrr.identifiability``
keep-best Eq. 9, Lemma 1 tails and bounds               ``vrr.guard``
baselines, TPM, hindsight, Algorithm 1 (App. A)         ``vrr.policies``
replay under cross-fitting                              ``vrr.replay``
bootstrap, paired bootstrap, McNemar (App. G)           ``vrr.stats``
simulated trajectories                                  ``vrr.simulate``
the data contract (one .npz per setting)                ``vrr.data``
=====================================================  ===========================
"""
from .data import DataContractError, Setting, load_setting, save_setting
from .model import NoiseParams

__all__ = ["DataContractError", "NoiseParams", "Setting", "load_setting", "save_setting"]
__version__ = "0.1.0"
