"""The controller's options, checked in one place: M, K_max and the calibrated parameters (rho0, rho1, alpha,
beta, pi of Sec. 3-4), the policy and its inputs (tau of Eq. 4 or a repair cost, delta of Eq. 9, the parameter
box behind B_k and the labeled J diagnostic of Algorithm 1 line 1), sequential voting and the budgets.

:func:`controller_config` turns the keyword arguments into the JSON-ready config the controller keeps (and
saves, ``CONFIG_FIELDS``); every refusal names the source and the field. :func:`repair_rates` reads alpha,
beta of one round (stationary, or VRR-Stop-t's alpha_t, beta_t) and :func:`radius_points` the parameter
draws whose gains give B_k.
"""
from __future__ import annotations

import difflib
import inspect
import json
import math

import numpy as np

from ...calibration.gain_radius import PARAM_NAMES
from ...calibration.inputs import MAX_VOTES
from ...common.jsonio import json_default
from ._budget import tau_for_cost
from ._checks import integer_field, number_field, unit_field
from ._modes import POLICIES, default_delta

SEQUENTIAL = ("off", "exact", "predictive", "sprt")
MAX_M = MAX_VOTES   # votes per round: every (M + 1)-sized table stays small; far above any verifier budget
MAX_ROUNDS = 1000   # K_max: per-round tables (alpha_t, beta_t, repair counts) have K_max entries
CONFIG_FIELDS = ("M", "k_max", "rho0", "rho1", "alpha", "beta", "pi", "policy", "delta", "tau", "repair_cost",
                 "value", "draws", "eta", "j_hat", "j_min", "check", "mode_evidence", "stop_mode", "sequential",
                 "error_rate", "budget_calls", "budget_tokens", "source")


class UnknownOptionError(ValueError, TypeError):
    """A keyword the controller does not take; the message names it and the nearest option. (A TypeError
    too, as Python's own error for an unknown keyword is.)"""


def refuse_unknown_options(cls, kwargs: dict) -> None:
    """Refuse a keyword ``cls.__init__`` does not take with an error naming it and the nearest option."""
    known = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
    for name in kwargs:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise UnknownOptionError(f"{kwargs.get('source', 'parameters')}: field '{name}': not an option of "
                                     f"OnlineController{hint} (options: {', '.join(known)})")


def _rate(value, k_max: int, source: str, name: str):
    """alpha or beta: one number, or a per-round sequence of K_max rates (alpha_t: repair after round t)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        seq = [unit_field(v, source, f"{name}[{t}]") for t, v in enumerate(value)]
        if len(seq) != k_max:
            raise ValueError(f"{source}: field '{name}': a per-round rate needs K_max={k_max} values "
                             f"(one per repair), got {len(seq)}")
        return seq
    return unit_field(value, source, name)


def _choose_policy(policy, draws, j_hat, stop_mode, src: str) -> str:
    """The policy left out: Algorithm 1 with its inputs, VRR-Stop from the point estimates alone."""
    if policy is not None:
        return policy
    has_draws, has_j = draws is not None, j_hat is not None or stop_mode is not None
    if has_draws and has_j:
        return "algorithm1"
    if not has_draws and not has_j:
        return "vrr_stop"
    missing = "j_hat=... (or stop_mode)" if has_draws else "draws=... (the parameter draws behind B_k)"
    raise ValueError(f"{src}: field 'policy': not given, and Algorithm 1's inputs are incomplete: "
                     f"policy='algorithm1' needs {missing}; pass policy='vrr_stop' to use the point estimates "
                     "alone or policy='vrr_guard' for keep-best")


def _j_hat(j_hat, src: str) -> float | None:
    """The labeled J-hat: None, a number in [-1, 1], or NaN (the diagnostic is undefined: a class is absent)."""
    if j_hat is None:
        return None
    if isinstance(j_hat, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}")
    try:
        j_hat = float(j_hat)
    except (TypeError, ValueError):
        raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}") from None
    if not (math.isnan(j_hat) or -1.0 <= j_hat <= 1.0):
        raise ValueError(f"{src}: field 'j_hat': expected a number in [-1, 1] or NaN, got {j_hat!r}")
    return j_hat


def _draws(draws, src: str) -> dict:
    """The bootstrap draws behind B_k, {name: [B values in [0, 1]]}, the same B >= 1 for each of PARAM_NAMES."""
    if not isinstance(draws, dict):
        raise ValueError(f"{src}: field 'draws': expected {{name: [values]}}, got {type(draws).__name__}")
    out, size = {}, None
    for name in PARAM_NAMES:
        if name not in draws:
            raise ValueError(f"{src}: field 'draws.{name}': missing")
        values = draws[name]
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__") or len(values) == 0:
            raise ValueError(f"{src}: field 'draws.{name}': expected a non-empty list of values in [0, 1]")
        row = [unit_field(v, src, f"draws.{name}[{i}]") for i, v in enumerate(values)]
        if size is not None and len(row) != size:
            raise ValueError(f"{src}: field 'draws.{name}': {len(row)} draws, the others have {size}")
        size, out[name] = len(row), row
    unknown = sorted(set(draws) - set(PARAM_NAMES))
    if unknown:
        raise ValueError(f"{src}: field 'draws.{unknown[0]}': unknown (the draws are of {PARAM_NAMES})")
    return out


def _check(check, src: str) -> dict | None:
    """The calibration check (``vrr.calibration.check``, its ``as_dict()``): None, or an object with ``passed``
    and ``reason``."""
    if check is None:
        return None
    if hasattr(check, "as_dict"):
        check = check.as_dict()
    if not isinstance(check, dict) or not isinstance(check.get("passed"), (bool, np.bool_)) or not isinstance(
            check.get("reason"), str):
        raise ValueError(f"{src}: field 'check': expected null or a calibration check with 'passed' (true/false) "
                         f"and 'reason', got {check!r}")
    return json.loads(json.dumps(check, default=json_default))


def _mode_evidence(evidence, src: str) -> dict | None:
    """What Algorithm 1's mode rests on besides J-hat (``vrr.policies.mode.algorithm1_mode``): None, or
    ``{"labeled_rates": bool, "replay": null | {"v_stop", "v_guard", "n"}}`` (the labeled replay of both modes on
    the calibration's trajectories)."""
    if evidence is None:
        return None
    if not isinstance(evidence, dict) or set(evidence) - {"labeled_rates", "replay"}:
        raise ValueError(f"{src}: field 'mode_evidence': expected null or an object with 'labeled_rates' and "
                         f"'replay', got {evidence!r}")
    labeled = evidence.get("labeled_rates", False)
    if not isinstance(labeled, (bool, np.bool_)):
        raise ValueError(f"{src}: field 'mode_evidence.labeled_rates': expected true or false, got {labeled!r}")
    replay = evidence.get("replay")
    if replay is not None:
        if not isinstance(replay, dict) or set(replay) != {"v_stop", "v_guard", "n"}:
            raise ValueError(f"{src}: field 'mode_evidence.replay': expected null or an object with v_stop, v_guard "
                             f"and n, got {replay!r}")
        for name in ("v_stop", "v_guard"):
            v = number_field(replay[name], src, f"mode_evidence.replay.{name}", "a validity in [0, 1]")
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{src}: field 'mode_evidence.replay.{name}': expected a validity in [0, 1], "
                                 f"got {v!r}")
        replay = {"v_stop": float(replay["v_stop"]), "v_guard": float(replay["v_guard"]),
                  "n": integer_field(replay["n"], src, "mode_evidence.replay.n", "an integer >= 1", low=1)}
    return {"labeled_rates": bool(labeled), "replay": replay}


def controller_config(*, M, k_max, rho0, rho1, alpha, beta, pi, policy, delta, tau, repair_cost, value, draws, eta,
                      j_hat, j_min, check, stop_mode, mode_evidence=None, sequential, error_rate, budget_calls, budget_tokens,
                      source) -> dict:
    """The controller's config from its keyword arguments (``OnlineController`` documents them), checked:
    a bad value raises ValueError naming ``source`` and the field."""
    src = source
    M = integer_field(M, src, "M", f"votes per round, an integer in 1..{MAX_M}", low=1)
    if M > MAX_M:
        raise ValueError(f"{src}: field 'M': expected votes per round, an integer in 1..{MAX_M}, got {M!r}")
    k_max = integer_field(k_max, src, "k_max", f"the repair budget, an integer in 0..{MAX_ROUNDS}", low=0)
    if k_max > MAX_ROUNDS:
        raise ValueError(f"{src}: field 'k_max': expected the repair budget, an integer in 0..{MAX_ROUNDS}, "
                         f"got {k_max!r}")
    policy = _choose_policy(policy, draws, j_hat, stop_mode, src)
    if policy not in POLICIES:
        raise ValueError(f"{src}: field 'policy': {policy!r} is not one of {POLICIES}")
    if sequential not in SEQUENTIAL:
        raise ValueError(f"{src}: field 'sequential': {sequential!r} is not one of {SEQUENTIAL}")
    error_rate = number_field(error_rate, src, "error_rate", "a number in (0, 1)")
    if not 0.0 < error_rate < 1.0:
        raise ValueError(f"{src}: field 'error_rate': expected a number in (0, 1), got {error_rate!r}")
    delta = default_delta(M) if delta is None else integer_field(delta, src, "delta",
                                                                 "the retention margin, an integer >= 0", low=0)
    eta = number_field(eta, src, "eta", "the level of B_k's one-sided bounds, a number in (0, 1)")
    if not 0.0 < eta < 1.0:
        raise ValueError(f"{src}: field 'eta': expected a number in (0, 1), got {eta!r}")
    j_min = number_field(j_min, src, "j_min", "a number in [-1, 1]")
    if not -1.0 <= j_min <= 1.0:
        raise ValueError(f"{src}: field 'j_min': expected a number in [-1, 1], got {j_min!r}")
    j_hat = _j_hat(j_hat, src)
    if stop_mode is not None and not isinstance(stop_mode, (bool, np.bool_)):
        raise ValueError(f"{src}: field 'stop_mode': expected true, false or null, got {stop_mode!r}")
    value = number_field(value, src, "value", "a finite value > 0")
    if value <= 0:
        raise ValueError(f"{src}: field 'value': expected a finite value > 0, got {value!r}")
    if repair_cost is not None:
        cost_tau = tau_for_cost(number_field(repair_cost, src, "repair_cost", "a finite cost >= 0"), value)
        if tau is not None and number_field(tau, src, "tau", "a finite number") != cost_tau:
            raise ValueError(f"{src}: field 'tau': {tau!r} disagrees with repair_cost / value = {cost_tau!r}; "
                             "give one of them")
        tau = cost_tau
    tau = 0.0 if tau is None else number_field(tau, src, "tau", "a finite number")
    if budget_calls is not None:
        budget_calls = integer_field(budget_calls, src, "budget_calls", "verifier calls per problem, an integer "
                                     ">= 1", low=1)
    if budget_tokens is not None:
        budget_tokens = integer_field(budget_tokens, src, "budget_tokens", "verifier tokens per problem, an "
                                      "integer >= 1", low=1)
    cfg = {"M": M, "k_max": k_max, "rho0": unit_field(rho0, src, "rho0"), "rho1": unit_field(rho1, src, "rho1"),
           "alpha": _rate(alpha, k_max, src, "alpha"), "beta": _rate(beta, k_max, src, "beta"),
           "pi": unit_field(pi, src, "pi"), "policy": policy, "delta": delta, "tau": tau,
           "repair_cost": None if repair_cost is None else float(repair_cost), "value": value,
           "draws": None, "eta": eta, "j_hat": j_hat, "j_min": j_min, "check": _check(check, src),
           "mode_evidence": _mode_evidence(mode_evidence, src),
           "stop_mode": None if stop_mode is None else bool(stop_mode),
           "sequential": sequential, "error_rate": error_rate, "budget_calls": budget_calls,
           "budget_tokens": budget_tokens, "source": str(source)}
    if policy == "algorithm1":
        if draws is None:
            raise ValueError(f"{src}: field 'draws': Algorithm 1 needs the bootstrap draws of the parameters behind "
                             f"the error radius B_k: {{name: [values]}} for {PARAM_NAMES} "
                             "(vrr.calibration.gain_radius.parameter_draws); pass policy='vrr_stop' to use the point "
                             "estimates alone")
        if isinstance(cfg["alpha"], list) or isinstance(cfg["beta"], list):
            raise ValueError(f"{src}: field 'alpha': Algorithm 1's error radius is defined for stationary "
                             "alpha, beta; per-round rates go with policy='vrr_stop'")
        if stop_mode is None and j_hat is None:
            raise ValueError(f"{src}: field 'j_hat': Algorithm 1 chooses its mode from the labeled J "
                             "diagnostic; give j_hat (or stop_mode), or pass policy='vrr_stop'")
    if draws is not None:
        cfg["draws"] = _draws(draws, src)
    return cfg


def radius_points(cfg: dict) -> dict | None:
    """Algorithm 1's parameter draws, one array [B] per parameter: each draw carries its own belief, and the
    gains of the draws give B_k (``vrr.calibration.gain_radius.radii_of_draws``); None for the other policies."""
    if cfg["policy"] != "algorithm1":
        return None
    return {name: np.array(cfg["draws"][name], dtype=float) for name in PARAM_NAMES}


def repair_rates(cfg: dict, k: int) -> tuple[float, float]:
    """alpha, beta of the repair after round k (the last round reuses the last repair's rates)."""
    out = []
    for name in ("alpha", "beta"):
        v = cfg[name]
        if isinstance(v, list):  # K_max = 0: no repair, so no rate (the only round commits)
            v = v[min(k, len(v) - 1)] if v else float("nan")
        out.append(v)
    return out[0], out[1]
