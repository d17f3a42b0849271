"""The controller's JSON state, version ``STATE_VERSION``: its config, the state of the current problem (round,
prior, mode, incumbent, counters, the last decision; mid-round, the votes received so far) and the calibration
report it was built from, so a loop can resume mid-trajectory, even mid-round.

``{"version": 4, "config": {...CONFIG_FIELDS}, "state": {...STATE_KEYS}, "calibration": null | {...}}``

:func:`read_state` checks every field of a saved state and names the source and the field it refuses
(:class:`ControllerStateError`); the controller holds each state field ``x`` as its attribute ``_x``.
"""
from __future__ import annotations

import numpy as np

from ._decision import Decision
from ._options import CONFIG_FIELDS

STATE_VERSION = 4
STATE_KEYS = ("round", "prior", "prior_grid", "mode", "reason", "incumbent", "incumbent_votes", "best_round",
              "best_belief", "accepts", "votes", "verifier_calls", "repair_calls", "tokens", "votes_without_tokens",
              "done", "last")


class ControllerStateError(ValueError):
    """A saved controller state (JSON) that cannot be resumed; the message names the source and field."""


def state_dict(config: dict, state: dict, report) -> dict:
    """The JSON-ready document of a controller: ``state`` holds the values of ``STATE_KEYS``."""
    out = dict(state)
    out["prior_grid"] = None if state["prior_grid"] is None else [float(x) for x in state["prior_grid"]]
    out["last"] = None if state["last"] is None else state["last"].as_dict()
    return {"version": STATE_VERSION, "config": config, "state": out,
            "calibration": None if report is None else report.to_dict()}


def read_document(data, source: str) -> dict:
    """The config of a saved document, after checking its top-level fields and the config's keys."""
    if not isinstance(data, dict):
        raise ControllerStateError(f"{source}: expected a JSON object, got {type(data).__name__}")
    for key in ("version", "config", "state"):
        if key not in data:
            raise ControllerStateError(f"{source}: field '{key}': missing")
    if data["version"] != STATE_VERSION:
        raise ControllerStateError(f"{source}: field 'version': {data['version']!r}, this code reads {STATE_VERSION}")
    cfg = data["config"]
    if not isinstance(cfg, dict):
        raise ControllerStateError(f"{source}: field 'config': expected an object")
    unknown = sorted(set(data) - {"version", "config", "state", "calibration"})
    if unknown:
        raise ControllerStateError(f"{source}: field '{unknown[0]}': unknown")
    known = set(CONFIG_FIELDS)
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ControllerStateError(f"{source}: field 'config.{unknown[0]}': unknown")
    missing = sorted(known - set(cfg))
    if missing:
        raise ControllerStateError(f"{source}: field 'config.{missing[0]}': missing")
    return cfg


def read_calibration(data: dict, source: str):
    """The saved calibration report, or None."""
    if data.get("calibration") is None:
        return None
    from ._calibrate import CalibrationReport

    try:
        return CalibrationReport.from_dict(data["calibration"], f"{source}: field 'calibration'")
    except ValueError as exc:
        raise ControllerStateError(str(exc)) from None


def read_state(st, cfg: dict, grid_size: int | None, source: str) -> dict:
    """The values of ``STATE_KEYS`` from a saved ``state`` object, each checked against the config (``grid_size``:
    the number of B_k's parameter draws, None without them)."""
    if not isinstance(st, dict):
        raise ControllerStateError(f"{source}: field 'state': expected an object")
    c = cfg

    def field(name, check, what):
        if name not in st:
            raise ControllerStateError(f"{source}: field 'state.{name}': missing")
        value = st[name]
        if not check(value):
            raise ControllerStateError(f"{source}: field 'state.{name}': expected {what}, got {value!r}")
        return value

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    k = field("round", lambda v: is_int(v) and 0 <= v <= c["k_max"], f"an integer in 0..{c['k_max']}")
    prior = field("prior", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1,
                  "a probability")
    grid_n = grid_size
    prior_grid = field("prior_grid", lambda v: (v is None) if grid_n is None else (
        isinstance(v, list) and len(v) == grid_n and all(isinstance(x, (int, float)) for x in v)),
        "null" if grid_n is None else f"a list of {grid_n} probabilities (one per parameter draw)")
    mode = field("mode", lambda v: v in ("stop", "guard"), "'stop' or 'guard'")
    reason = field("reason", lambda v: isinstance(v, str), "a string")
    incumbent = field("incumbent", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
    inc_votes = field("incumbent_votes", lambda v: v is None or (is_int(v) and 0 <= v <= c["M"]),
                      f"null or a count in 0..{c['M']}")
    best_round = field("best_round", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
    best_belief = field("best_belief", lambda v: (v is None) if best_round is None else (
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1),
        "null exactly when 'state.best_round' is, else a probability")
    n = field("votes", lambda v: is_int(v) and 0 <= v <= c["M"], f"an integer in 0..{c['M']}")
    accepts = field("accepts", lambda v: is_int(v) and 0 <= v <= n, f"an integer in 0..{n}")
    vcalls = field("verifier_calls", lambda v: is_int(v) and v >= n, f"an integer >= {n}")
    rcalls = field("repair_calls", lambda v: is_int(v) and v >= 0, "an integer >= 0")
    tokens = field("tokens", lambda v: is_int(v) and v >= 0, "an integer >= 0")
    untokened = field("votes_without_tokens", lambda v: is_int(v) and 0 <= v <= vcalls,
                      f"an integer in 0..{vcalls} (state.verifier_calls)")
    done = field("done", lambda v: isinstance(v, bool), "true or false")
    last = field("last", lambda v: v is None or isinstance(v, dict), "null or a decision object")
    if (incumbent is None) != (inc_votes is None):
        raise ControllerStateError(f"{source}: field 'state.incumbent_votes': must be null exactly when "
                                   "'state.incumbent' is")
    if last is not None:
        try:
            last = Decision(**last)
        except TypeError as exc:
            raise ControllerStateError(f"{source}: field 'state.last': {exc}") from None
    return {"round": k, "prior": float(prior),
            "prior_grid": None if prior_grid is None else np.asarray(prior_grid, dtype=float),
            "mode": mode, "reason": reason, "incumbent": incumbent, "incumbent_votes": inc_votes,
            "best_round": best_round, "best_belief": None if best_belief is None else float(best_belief),
            "accepts": accepts, "votes": n, "verifier_calls": vcalls, "repair_calls": rcalls, "tokens": tokens,
            "votes_without_tokens": untokened, "done": done, "last": last}
