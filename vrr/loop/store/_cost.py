"""What a run's generation cost: wall time, throughput and the machines its sessions ran on.

Read from a run meta's sessions (and, for per-item costs, from the engine-batch times of the stored
records); a window resumed on another machine kind spans several machines, and each is named.
"""
from __future__ import annotations

import math

from ._errors import RunStoreError

META_FILE = "run_meta.json"


def _amount(session: dict, key: str, where: str, source) -> float:
    """A session's count or seconds: a finite number >= 0 (0 when absent), else a :class:`RunStoreError`
    naming the file and the field."""
    value = session.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RunStoreError(source, f"field '{where}.{key}': expected a number >= 0, got {value!r}")
    return value


def _sessions(meta: dict, source) -> list[dict]:
    """The sessions of a run meta, each with its counts and seconds checked."""
    sessions = meta.get("sessions", [])
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise RunStoreError(source, "field 'sessions': expected a list of session objects")
    for i, s in enumerate(sessions):
        for key in ("instances", "probe_plans", "seconds", "engine_load_seconds"):
            _amount(s, key, f"sessions[{i}]", source)
        stats = s.get("engine_stats") or {}
        if not isinstance(stats, dict):
            raise RunStoreError(source, f"field 'sessions[{i}].engine_stats': expected an object")
        for key in ("generated_tokens", "prompt_tokens"):
            _amount(stats, key, f"sessions[{i}].engine_stats", source)
    return sessions


def batch_time(records: list[dict]) -> tuple[float, int]:
    """Engine-batch seconds spent on these records (each batch counted once: records of one batch share
    its ``batch`` id and ``batch_seconds``) and the number of records."""
    batches = {(r.get("batch"), r.get("batch_seconds")) for r in records if r.get("batch_seconds") is not None}
    return float(sum(sec for _, sec in batches)), len(records)


MACHINE_KIND_FIELDS = ("backend", "cpu_kind", "dtype")


def machine_kind(machine: dict | None) -> tuple:
    """The key that groups a session's machine record into a machine kind: (backend, CPU kind, dtype),
    ``None`` where the session did not record a field. A session row or a :func:`session_machines` row works."""
    machine = machine or {}
    return tuple(machine.get(k) for k in MACHINE_KIND_FIELDS)


def session_machines(meta: dict, source=META_FILE) -> list[dict]:
    """The machines a run's sessions ran on (backend, CPU kind, dtype; ``None`` where a session did not record
    it), each with the instances, probe plans and seconds generated there, in order of first use: a window
    resumed on another machine kind spans several, and its figures name each."""
    out: dict[tuple, dict] = {}
    for s in _sessions(meta, source):
        key = machine_kind(s.get("machine"))
        row = out.setdefault(key, {**dict(zip(MACHINE_KIND_FIELDS, key)), "instances": 0, "probe_plans": 0,
                                   "seconds": 0.0})
        row["instances"] += s.get("instances", 0)
        row["probe_plans"] += s.get("probe_plans", 0)
        row["seconds"] = round(row["seconds"] + s.get("seconds", 0.0), 1)
    return list(out.values())


def run_cost(meta: dict, records: dict[str, list[dict]] | None = None, source=META_FILE) -> dict:
    """Wall time and throughput of a setting's generation from its ``run_meta.json`` sessions.

    Sessions that ran only trajectories (only probe plans) give the per-instance (per-plan) cost;
    engine load time is counted in ``wall_seconds`` but not in the per-item costs. ``records``
    (``{"traj": [...], "probe": [...]}``, the stored records) gives the per-item costs from the batch
    times instead, which also works for sessions that ran both phases. A count or seconds that is not a
    number >= 0 is a :class:`RunStoreError` naming ``source`` (the run meta's file) and the field.
    """
    sessions = _sessions(meta, source)
    tot = {"sessions": len(sessions), "instances": 0, "probe_plans": 0, "seconds": 0.0,
           "load_seconds": 0.0, "generated_tokens": 0, "prompt_tokens": 0}
    traj_s = traj_n = probe_s = probe_n = 0.0
    for s in sessions:
        st = s.get("engine_stats") or {}
        tot["instances"] += s.get("instances", 0)
        tot["probe_plans"] += s.get("probe_plans", 0)
        tot["seconds"] += s.get("seconds", 0.0)
        tot["load_seconds"] += s.get("engine_load_seconds", 0.0)
        tot["generated_tokens"] += st.get("generated_tokens", 0)
        tot["prompt_tokens"] += st.get("prompt_tokens", 0)
        if s.get("instances") and not s.get("probe_plans"):
            traj_s, traj_n = traj_s + s.get("seconds", 0.0), traj_n + s["instances"]
        elif s.get("probe_plans") and not s.get("instances"):
            probe_s, probe_n = probe_s + s.get("seconds", 0.0), probe_n + s["probe_plans"]
    tot["wall_seconds"] = tot["seconds"] + tot["load_seconds"]
    # engine_stats are written at the end of a session: a killed session has seconds but no tokens
    timed = sum(s.get("seconds", 0.0) for s in sessions if s.get("engine_stats"))
    tot["generated_tok_per_s"] = tot["generated_tokens"] / timed if timed else float("nan")
    for phase, rows in (records or {}).items():
        sec, n = batch_time(rows)
        if phase == "traj" and n:
            traj_s, traj_n = sec, n
        elif phase == "probe" and n:
            probe_s, probe_n = sec, n
    tot["seconds_per_instance"] = traj_s / traj_n if traj_n else float("nan")
    tot["seconds_per_probe_plan"] = probe_s / probe_n if probe_n else float("nan")
    return tot
