"""The calibration's public entries refuse bad input naming the field (vrr.calibration.inputs): NaN votes, labels
other than 0/1, counts above M, a huge M; never numpy's message, a RuntimeWarning or a number from a NaN."""
import warnings

import numpy as np
import pytest

from vrr.calibration.check import calibration_check
from vrr.calibration.estimators import calibrate
from vrr.calibration.inputs import CalibrationInputError
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting

ST = simulate_setting(NoiseParams(0.3, 0.2, 0.3, 0.1, 0.5), n=80, k_max=3, M=8, seed=1, probe_n=40, probe_M=16)


def _with(arr, index, value, dtype=float):
    out = np.array(arr, dtype=dtype)
    out[index] = value
    return out


@pytest.mark.parametrize("field, kwargs, match", [
    ("probe_S", dict(probe_S=_with(ST.probe_S, 3, np.nan)), r"probe_S\[3\]"),
    ("probe_y", dict(probe_y=_with(ST.probe_y, 5, 2, int)), r"probe_y\[5\]"),
    ("probe_S", dict(probe_S=_with(ST.probe_S, 0, 17)), r"probe_S\[0\]"),
])
def test_calibration_check_names_the_bad_probe_field(field, kwargs, match):
    args = dict(S_unlabeled=ST.S[:, 0], M=8, probe_S=ST.probe_S, probe_y=ST.probe_y, probe_M=16, n_boot=20)
    args.update(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no RuntimeWarning on the way to the refusal
        with pytest.raises(CalibrationInputError, match=match):
            calibration_check(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(S=_with(ST.S, (2, 1), np.nan)), r"S\[2\]\[1\]"),
    (dict(S=_with(ST.S, (0, 0), 9)), r"S\[0\]\[0\]"),
    (dict(y=_with(ST.y, (4, 2), 2, int)), r"y\[4\]\[2\]"),
    (dict(M=10 ** 10), r"'M'"),
    (dict(M=True), r"'M'"),
    (dict(probe_S=_with(ST.probe_S, 1, np.nan), method="semisupervised_checked"), r"probe_S\[1\]"),
])
def test_calibrate_names_the_bad_field(kwargs, match):
    args = dict(S=ST.S, y=ST.y, M=8, method="binomial_em", probe_S=ST.probe_S, probe_y=ST.probe_y, probe_M=16)
    args.update(kwargs)
    with pytest.raises(CalibrationInputError, match=match):
        calibrate(**args)


def test_good_input_calibrates_as_before():
    fit = calibrate(ST.S, ST.y, 8, method="binomial_em")
    assert 0 < fit.params.rho0 < 1 and 0 < fit.params.pi < 1
