"""The controller's JSON state, version ``STATE_VERSION``: its config, the state of the current problem (round,
prior, mode, incumbent, counters, the last decision; mid-round, the votes received so far) and the calibration
report it was built from, so a loop can resume mid-trajectory, even mid-round.

``{"version": 4, "config": {...CONFIG_FIELDS}, "state": {...STATE_KEYS}, "calibration": null | {...}}``

:func:`read_state` checks every field of a saved state and names the source and the field it refuses
(:class:`ControllerStateError`); the controller holds each state field ``x`` as its attribute ``_x``.
"""
from __future__ import annotations

import json
import math

import numpy as np

from ._decision import Decision
from ._options import CONFIG_FIELDS

STATE_VERSION = 4
STATE_KEYS = ("round", "prior", "prior_grid", "mode", "reason", "incumbent", "incumbent_votes", "best_round",
              "best_belief", "accepts", "votes", "verifier_calls", "repair_calls", "tokens", "votes_without_tokens",
              "done", "last")


class ControllerStateError(ValueError):
    """A saved controller state (JSON) that cannot be resumed; the message names the source and field."""


MAX_DEPTH = 32  # nesting of a saved document (the deepest field, a check's details, is a few levels down)


def parse_document(text: str | bytes, source: str):
    """A saved state's JSON text (or its UTF-8 bytes) as data: text that is not UTF-8, not JSON, or nested
    deeper than :data:`MAX_DEPTH` is a :class:`ControllerStateError` naming the source."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ControllerStateError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not isinstance(text, str):
        raise ControllerStateError(f"{source}: expected JSON text, got {type(text).__name__}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ControllerStateError(f"{source}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ControllerStateError(f"{source}: not valid JSON (nested deeper than {MAX_DEPTH} levels)") from None
    check_depth(data, source)
    return data


def check_depth(data, source: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH`, naming the first field too deep (iteratively:
    no recursion on hostile input)."""
    stack = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise ControllerStateError(f"{source}: field '{where or '(top)'}': nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                name = f"{where}.{k}" if isinstance(value, dict) and where else (str(k) if isinstance(value, dict)
                                                                                 else f"{where}[{k}]")
                stack.append((v, name, depth + 1))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _probability(v) -> bool:
    return _number(v) and math.isfinite(v) and 0 <= v <= 1


def _decision(last, source: str, k: int, M: int) -> Decision:
    """The saved last decision, each field checked (a wrong type would resurface in the next decision)."""
    where = f"{source}: field 'state.last"
    fields = {f.name for f in Decision.__dataclass_fields__.values()}
    unknown = sorted(set(last) - fields)
    if unknown:
        raise ControllerStateError(f"{where}.{unknown[0]}': unknown")

    def is_int(v, lo, hi=None):
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)

    checks = {
        "action": (lambda v: v in ("commit", "repair"), "'commit' or 'repair'"),
        "round": (lambda v: is_int(v, 0, k), f"a round in 0..{k}"),
        "candidate": (lambda v: is_int(v, 0, k), f"a round in 0..{k}"),
        "belief": (_probability, "a probability"),
        "gain": (lambda v: _number(v) and not math.isinf(v), "a number or NaN"),
        "radius": (lambda v: _number(v) and not math.isinf(v), "a number or NaN"),
        "radius_low": (lambda v: _number(v) and not math.isinf(v), "a number or NaN"),
        "mode": (lambda v: v in ("stop", "guard"), "'stop' or 'guard'"),
        "reason": (lambda v: isinstance(v, str), "a string"),
        "accepts": (lambda v: is_int(v, 0, M), f"a count in 0..{M}"),
        "votes": (lambda v: is_int(v, 0, M), f"a count in 0..{M}"),
        "verifier_calls": (lambda v: is_int(v, 0), "an integer >= 0"),
        "repair_calls": (lambda v: is_int(v, 0), "an integer >= 0"),
        "tokens": (lambda v: v is None or is_int(v, 0), "null or an integer >= 0"),
    }
    for name, (ok, what) in checks.items():
        if name not in last:
            if name in ("tokens", "radius_low"):  # optional: their defaults
                continue
            raise ControllerStateError(f"{where}.{name}': missing")
        if not ok(last[name]):
            raise ControllerStateError(f"{where}.{name}': expected {what}, got {last[name]!r}")
    if last["accepts"] > last["votes"]:
        raise ControllerStateError(f"{where}.accepts': {last['accepts']} accepts of {last['votes']} votes")
    return Decision(**{n: (float(v) if n in ("belief", "gain", "radius", "radius_low") else v)
                       for n, v in last.items()})


def state_dict(config: dict, state: dict, report) -> dict:
    """The JSON-ready document of a controller: ``state`` holds the values of ``STATE_KEYS``."""
    out = dict(state)
    out["prior_grid"] = None if state["prior_grid"] is None else [float(x) for x in state["prior_grid"]]
    out["last"] = None if state["last"] is None else state["last"].as_dict()
    return {"version": STATE_VERSION, "config": config, "state": out,
            "calibration": None if report is None else report.to_dict()}


def read_document(data, source: str) -> dict:
    """The config of a saved document, after checking its nesting, its top-level fields and the config's keys."""
    if not isinstance(data, dict):
        raise ControllerStateError(f"{source}: expected a JSON object, got {type(data).__name__}")
    check_depth(data, source)
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
    missing = sorted(known - set(cfg) - {"mode_evidence"})   # optional: null when absent
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
    unknown = sorted(set(st) - set(STATE_KEYS), key=str)
    if unknown:
        raise ControllerStateError(f"{source}: field 'state.{unknown[0]}': unknown")
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
    prior = field("prior", _probability, "a probability")
    grid_n = grid_size
    prior_grid = field("prior_grid", lambda v: (v is None) if grid_n is None else (
        isinstance(v, list) and len(v) == grid_n and all(_probability(x) for x in v)),
        "null" if grid_n is None else f"a list of {grid_n} probabilities in [0, 1] (one per parameter draw)")
    mode = field("mode", lambda v: v in ("stop", "guard"), "'stop' or 'guard'")
    reason = field("reason", lambda v: isinstance(v, str), "a string")
    incumbent = field("incumbent", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
    inc_votes = field("incumbent_votes", lambda v: v is None or (is_int(v) and 0 <= v <= c["M"]),
                      f"null or a count in 0..{c['M']}")
    best_round = field("best_round", lambda v: v is None or (is_int(v) and 0 <= v <= k), f"null or a round <= {k}")
    best_belief = field("best_belief", lambda v: (v is None) if best_round is None else _probability(v),
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
        last = _decision(last, source, k, c["M"])
    return {"round": k, "prior": float(prior),
            "prior_grid": None if prior_grid is None else np.asarray(prior_grid, dtype=float),
            "mode": mode, "reason": reason, "incumbent": incumbent, "incumbent_votes": inc_votes,
            "best_round": best_round, "best_belief": None if best_belief is None else float(best_belief),
            "accepts": accepts, "votes": n, "verifier_calls": vcalls, "repair_calls": rcalls, "tokens": tokens,
            "votes_without_tokens": untokened, "done": done, "last": last}
