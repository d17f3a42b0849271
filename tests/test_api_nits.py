"""The public API says what it does: ``vrr.UnknownOptionError`` at the top level; ``from_parameters``'s docstring
names the options it takes and no other; a negative keep-best margin is refused; a controller state file given
as a calibration is named for what it is; a stub server's HTTP attempts are counted per role, and the warning
about replies without usage says it is given once per engine."""
import re
import warnings

import pytest

import vrr
from vrr.policies.online import OnlineController, UnknownOptionError
from vrr.policies.online._options import CONFIG_FIELDS

from test_openai_backend import CONV, engine_for, stub_factory  # noqa: F401  (the fixture)

PARAMS = dict(M=8, k_max=5, rho0=0.2, rho1=0.2, alpha=0.3, beta=0.1, pi=0.5)


def test_unknown_option_error_is_public():
    assert vrr.UnknownOptionError is UnknownOptionError and "UnknownOptionError" in vrr.__all__
    with pytest.raises(vrr.UnknownOptionError, match="intervals"):
        OnlineController.from_parameters(**PARAMS, intervals={})


def test_from_parameters_docstring_names_exactly_the_options_it_takes():
    doc = OnlineController.from_parameters.__doc__
    named = set(re.findall(r"``([a-z_]+)``", doc))
    options = set(CONFIG_FIELDS) - {"source"} - set(PARAMS)
    assert options <= named, sorted(options - named)
    assert named - set(CONFIG_FIELDS) <= {"alpha", "beta"}, sorted(named - set(CONFIG_FIELDS))
    for refused in ("intervals", "grid"):
        with pytest.raises(UnknownOptionError):
            OnlineController.from_parameters(**PARAMS, **{refused: None})


@pytest.mark.parametrize("delta, ok", [(-1, False), (-5, False), (0, True), (3, True)])
def test_the_keep_best_margin_is_a_count_of_votes_at_least_zero(delta, ok):
    if ok:
        assert OnlineController.from_parameters(**PARAMS, policy="vrr_guard", delta=delta).to_dict()["config"]["delta"] == delta
    else:
        with pytest.raises(ValueError, match=r"field 'delta': expected the retention margin, an integer >= 0"):
            OnlineController.from_parameters(**PARAMS, policy="vrr_guard", delta=delta)


def test_a_state_file_given_as_a_calibration_is_named_for_what_it_is(tmp_path):
    state = OnlineController.from_parameters(**PARAMS).save(tmp_path / "state.json")
    with pytest.raises(ValueError, match=r"a controller state file \(OnlineController.save\), not a calibration; "
                                         r"resume it with OnlineController.load") as info:
        OnlineController.from_calibration(state)
    assert "older 03_calibrate" not in str(info.value)
    assert OnlineController.load(state).to_dict() == OnlineController.from_parameters(**PARAMS).to_dict()


def test_http_attempts_are_counted_per_role_and_the_usage_warning_says_once(stub_factory):  # noqa: F811
    from vrr.loop.engine.openai_backend import UsageUnknownWarning
    from vrr.loop.engine.roles import RoleEngine, usage_record

    engine = engine_for(stub_factory(usage=False))
    gen, judge = RoleEngine(engine, "generator", "generator"), RoleEngine(engine, "judge", "generator")
    with pytest.warns(UsageUnknownWarning, match="Warned once per engine"):
        gen.chat([CONV], temperature=0.7, max_tokens=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UsageUnknownWarning)       # once: the later batches count, silently
        judge.chat([CONV, CONV, CONV], temperature=0.7, max_tokens=8)
        judge.chat([CONV], temperature=0.7, max_tokens=8)
    usage = usage_record({"generator": gen, "judge": judge})["usage"]
    total = engine.usage_notes()["http_attempts"]
    assert usage["judge"]["http_attempts"] == usage["judge"]["requests"] == 4
    assert usage["generator"]["http_attempts"] == total - 4 >= usage["generator"]["requests"] == 1
    assert usage["judge"]["requests_without_usage"] == 4 and usage["generator"]["requests_without_usage"] == 1
