"""Hostile controller state files and calibration inputs: every refusal is a ControllerStateError (state files) or a
ValueError (constructors, calibration files) naming the field; nothing is accepted that would turn the next
decision into NaN, and no size is a MemoryError (vrr.policies.online: _state, _options, _calibrate,
_calibration_file; vrr.calibration.inputs)."""
import copy
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vrr.calibration import inputs
from vrr.policies.online import ControllerStateError, OnlineController
from vrr.policies.online._calibration_file import example_labeled_set

NAN = float("nan")


@pytest.fixture(scope="module")
def saved():
    """An Algorithm 1 controller (it has a prior grid) mid-problem, as its saved document."""
    ctl = OnlineController.from_labeled(**example_labeled_set())
    assert not ctl.observe([0] * 8).committed
    return ctl.to_dict()


def _set(path, value):
    def mutate(d):
        *head, last = path.split(".")
        for k in head:
            d = d[k]
        d[last] = value(d[last]) if callable(value) else value
    return mutate


STATE_CASES = [
    ("state.prior_grid", _set("state.prior_grid", lambda g: [NAN] + g[1:])),
    ("state.prior_grid", _set("state.prior_grid", lambda g: [-0.1] + g[1:])),
    ("state.prior_grid", _set("state.prior_grid", lambda g: [1.5] + g[1:])),
    ("state.prior_grid", _set("state.prior_grid", lambda g: [True] + g[1:])),
    ("state.prior_grid", _set("state.prior_grid", lambda g: ["0.5"] + g[1:])),
    ("state.prior_grid", _set("state.prior_grid", lambda g: g[:-1])),
    ("state.prior", _set("state.prior", NAN)),
    ("state.prior", _set("state.prior", True)),
    ("state.best_belief", _set("state.best_belief", NAN)),
    ("state.surprise", _set("state.surprise", 1)),
    ("state.last.action", _set("state.last.action", 3)),
    ("state.last.round", _set("state.last.round", "0")),
    ("state.last.round", _set("state.last.round", 99)),
    ("state.last.belief", _set("state.last.belief", "high")),
    ("state.last.belief", _set("state.last.belief", NAN)),
    ("state.last.gain", _set("state.last.gain", [])),
    ("state.last.tokens", _set("state.last.tokens", -1)),
    ("state.last.accepts", _set("state.last.accepts", True)),
    ("state.last.votes", _set("state.last.votes", 10 ** 9)),
    ("state.last.extra", _set("state.last.extra", 1)),
    ("state.last.reason", _set("state.last.reason", None)),
    ("config.M", _set("config.M", 10 ** 9)),
    ("config.M", _set("config.M", 10 ** 10)),
    ("config.k_max", _set("config.k_max", 10 ** 9)),
    ("calibration", _set("calibration", {"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})),
]


@pytest.mark.parametrize("field, mutate", STATE_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(STATE_CASES)])
def test_a_hostile_state_field_is_refused_by_name(tmp_path, saved, field, mutate):
    data = copy.deepcopy(saved)
    mutate(data)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ControllerStateError, match=re.escape(f"{path}: field '{field}")):
        OnlineController.load(path)


@pytest.mark.parametrize("raw, message", [
    (b"[" * 200_000 + b"]" * 200_000, "nested deeper"),
    (b'{"version": ' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"version": 4, "config": {}, "state": {}} \x80', "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[]", "expected a JSON object"),
])
def test_an_unreadable_state_file_is_a_controller_state_error(tmp_path, raw, message):
    path = tmp_path / "state.json"
    path.write_bytes(raw)
    with pytest.raises(ControllerStateError, match=message) as err:
        OnlineController.load(path)
    assert str(path) in str(err.value)


def test_a_saved_state_still_resumes(tmp_path, saved):
    ctl = OnlineController.from_dict(copy.deepcopy(saved))
    assert ctl.to_dict()["state"] == OnlineController.from_json(json.dumps(saved)).to_dict()["state"]


@given(value=st.one_of(st.floats(), st.booleans(), st.integers(-10, 10), st.text(max_size=3), st.none()),
       where=st.sampled_from(["prior", "prior_grid"]))
@settings(max_examples=150, deadline=None)
def test_any_saved_probability_is_finite_and_in_range_or_refused(saved, value, where):
    data = copy.deepcopy(saved)
    if where == "prior_grid":
        data["state"]["prior_grid"][0] = value
    else:
        data["state"][where] = value
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1
    try:
        ctl = OnlineController.from_json(json.dumps(data))
    except ControllerStateError as exc:
        assert not ok and f"field 'state.{where}" in str(exc)
        return
    assert ok
    d = ctl.observe([1] * ctl.M)
    assert not math.isnan(d.belief)


# ---------------------------------------------------------------- the constructors' inputs
REPAIRS = [(0, 1), (1, 1), (0, 0), (1, 0)]
GOOD = dict(votes=[1, 2, 7, 8, 0, 6], labels=[0, 0, 1, 1, 0, 1], repairs=REPAIRS, M=8)

LABELED_CASES = [
    ("votes[1]", dict(votes=[1, NAN, 7, 8, 0, 6])),
    ("votes[1]", dict(votes=np.array([1, np.nan, 7, 8, 0, 6]))),
    ("votes[2]", dict(votes=[1, 2, 9, 8, 0, 6])),
    ("votes[2]", dict(votes=[1, 2, -1, 8, 0, 6])),
    ("votes[1]", dict(votes=[1, True, 7, 8, 0, 6])),
    ("votes[1]", dict(votes=[1, "2", 7, 8, 0, 6])),
    ("votes[0]", dict(votes=[1.5, 2, 7, 8, 0, 6])),
    ("labels[1]", dict(labels=[0, 2, 1, 1, 0, 1])),
    ("labels[1]", dict(labels=np.array([0, 2.0, 1, 1, 0, 1]))),
    ("labels[1]", dict(labels=[0, NAN, 1, 1, 0, 1])),
    ("labels[1]", dict(labels=[0, "1", 1, 1, 0, 1])),
    ("M", dict(M=10 ** 10)),
    ("M", dict(M=inputs.MAX_VOTES + 1)),
    ("M", dict(M=0)),
    ("votes[1][0]", dict(votes=[[1, 0], [NAN, 1], [1, 1], [1, 1], [0, 0], [1, 1]], M=None)),
    ("votes[0][1]", dict(votes=[[1, 2], [0, 1], [1, 1], [1, 1], [0, 0], [1, 1]], M=None)),
    ("k_max", dict(k_max=10 ** 9)),
    ("repairs[0][1]", dict(repairs=[(0, 2)])),
]


@pytest.mark.parametrize("field, change", LABELED_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(LABELED_CASES)])
def test_from_labeled_refuses_bad_inputs_by_name(field, change):
    with pytest.raises(ValueError, match=re.escape(f"field '{field}'")):
        OnlineController.from_labeled(**{**GOOD, **change})


def test_from_labeled_takes_integral_float_counts():
    a = OnlineController.from_labeled(**GOOD).calibration_report.to_dict()
    b = OnlineController.from_labeled(**{**GOOD, "votes": np.array(GOOD["votes"], float)}).calibration_report.to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("field, change", [("M", dict(M=10 ** 10)), ("M", dict(M=4097)), ("k_max", dict(k_max=10 ** 9)),
                                           ("pi", dict(pi=NAN)), ("rho0", dict(rho0=2))])
def test_from_parameters_refuses_bad_inputs_by_name(field, change):
    kw = {**dict(M=8, k_max=3, rho0=0.2, rho1=0.2, alpha=0.3, beta=0.1, pi=0.4), **change}
    with pytest.raises(ValueError, match=f"field '{field}'"):
        OnlineController.from_parameters(**kw)


def test_a_calibration_file_with_a_huge_m_or_deep_nesting_is_named(tmp_path):
    from vrr.policies.online_calibration import read_online_calibration, save_online_calibration

    path = save_online_calibration(OnlineController.from_labeled(**example_labeled_set()).calibration_report,
                                   tmp_path / "c.json")
    doc = json.loads(path.read_text())
    doc["M"] = 10 ** 9
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="field 'M'"):
        read_online_calibration(path)
    path.write_bytes(b"[" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_online_calibration(path)


# ---------------------------------------------------------------- the calibration input checks
@given(S=st.lists(st.one_of(st.integers(-3, 12), st.floats(allow_nan=True), st.booleans()), min_size=1, max_size=8),
       M=st.integers(1, 10))
@settings(max_examples=200, deadline=None)
def test_accept_counts_are_integers_in_range_or_refused_by_entry(S, M):
    ok = all(not isinstance(v, bool) and (float(v).is_integer() if isinstance(v, float) and math.isfinite(v)
                                          else isinstance(v, int)) and 0 <= v <= M for v in S)
    try:
        out = inputs.accept_counts(S, M, "S", "probe")
    except inputs.CalibrationInputError as exc:
        assert not ok and str(exc).startswith("probe: field 'S[")
        return
    assert ok and out.dtype == np.int64 and out.tolist() == [int(v) for v in S]


@pytest.mark.parametrize("call, message", [
    (lambda: inputs.votes_per_plan(10 ** 10), "field 'M'"),
    (lambda: inputs.votes_per_plan(True), "field 'M'"),
    (lambda: inputs.accept_counts(np.array([[1, 2], [3, 99]]), 8), r"field 'S\[1\]\[1\]'"),
    (lambda: inputs.accept_counts([], 8), "field 'S'"),
    (lambda: inputs.labels(np.array([0, 1, 2]), "probe_y"), r"field 'probe_y\[2\]'"),
    (lambda: inputs.labels("01"), "field 'y'"),
    (lambda: inputs.same_shape({"S": np.zeros(3), "y": np.zeros(4)}), "field 'y'"),
    (lambda: inputs.probabilities([0.5, np.inf], "pi"), r"field 'pi\[1\]'"),
])
def test_the_calibration_input_checks_name_the_field(call, message):
    with pytest.raises(inputs.CalibrationInputError, match=message):
        call()
