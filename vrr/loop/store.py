"""The trajectory store: the files of one run under ``data/real/<setting>/``.

Problem texts are never stored: problems are referred to by dataset, split and index, and
perturbations by their spec (``vrr.loop.redact`` removes verbatim restatements).

* ``config.json``                the resolved run config (``vrr.loop.config``), checked on resume,
* ``trajectories.part.jsonl``    one completed-instance record per line, appended and fsynced after
                                 each batch; on restart completed indices are skipped and a torn last
                                 line is dropped, so nothing is lost or duplicated,
* ``probe.part.jsonl``           the same for the calibration probe,
* ``run_meta.json``              engine, model, sha256, package versions, per-session timings,
* ``trajectories.jsonl.gz``, ``probe.jsonl.gz``  the frozen window (written by ``vrr.label``),
* ``arrays.npz``                 the labeled arrays of the data contract (complete windows only),
                                 else ``arrays.partial.npz``.
"""
from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path
from typing import Iterable

from ..common.atomic import atomic_write_bytes
from ..common.jsonio import write_json
from ..common.paths import REPO_ROOT
from .config import RunConfig, from_stored, protocol_differences, WINDOW_KEYS

DEFAULT_OUT_ROOT = REPO_ROOT / "data" / "real"


class RunPaths:
    """The files of one run (``out_root/<setting>/``)."""

    def __init__(self, out_root: str | os.PathLike, setting: str):
        self.dir = Path(out_root) / setting
        self.config = self.dir / "config.json"
        self.traj_part = self.dir / "trajectories.part.jsonl"
        self.probe_part = self.dir / "probe.part.jsonl"
        self.traj = self.dir / "trajectories.jsonl.gz"
        self.probe = self.dir / "probe.jsonl.gz"
        self.meta = self.dir / "run_meta.json"
        self.arrays = self.dir / "arrays.npz"
        self.arrays_partial = self.dir / "arrays.partial.npz"


def write_record_json(path: Path, obj) -> None:
    """config.json / run_meta.json: sorted keys, indent 1, trailing newline (small diffs)."""
    write_json(path, obj, indent=1, sort_keys=True, trailing_newline=True)


def read_stored_config(paths: RunPaths) -> dict:
    return json.loads(paths.config.read_text())


def check_config(paths: RunPaths, cfg: RunConfig) -> None:
    """Write config.json on the first run; on resume refuse a config whose protocol changed.

    Only the window lengths (``n``, ``probe_n``) and ``NON_PROTOCOL_KEYS`` may change; a changed
    window length is recorded. The error names the file and every field that differs.
    """
    if not paths.config.exists():
        paths.dir.mkdir(parents=True, exist_ok=True)
        write_record_json(paths.config, cfg.to_json())
        return
    stored_raw = read_stored_config(paths)
    stored = from_stored(stored_raw, str(paths.config))
    diff = protocol_differences(stored, cfg)
    if diff:
        old, new = stored.to_json(), cfg.to_json()
        detail = "; ".join(f"'{k}': stored {old[k]!r}, requested {new[k]!r}" for k in diff)
        raise ValueError(f"{paths.config}: the requested run changes the protocol of the stored one ({detail}). "
                         "Use another setting name or output root, or delete the folder to start over.")
    if any(stored_raw.get(k) != getattr(cfg, k) for k in WINDOW_KEYS):
        write_record_json(paths.config, {**stored_raw, **{k: getattr(cfg, k) for k in WINDOW_KEYS}})


def read_part(path: Path, repair: bool = True) -> list[dict]:
    """Completed records of a part file. A torn trailing line (crash mid-write) is dropped and,
    with ``repair=True``, truncated away so later appends start on a clean line."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    recs, good_end, pos = [], 0, 0
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        if nl < 0:
            break  # no newline: torn
        line = raw[pos:nl]
        if line.strip():
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                break
        pos = nl + 1
        good_end = pos
    if repair and good_end < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good_end)
            f.flush()
            os.fsync(f.fileno())
    return recs


def append_records(path: Path, records: Iterable[dict]) -> None:
    data = b"".join((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode() for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_gz(path: Path, records: Iterable[dict]) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    atomic_write_bytes(path, gzip.compress(lines.encode(), mtime=0))


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def unique_by_index(records: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in records:
        key = (r.get("split"), r["index"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return sorted(out, key=lambda r: r["index"])


def update_meta(paths: RunPaths, cfg: RunConfig, engine_desc: dict, session: dict) -> None:
    """Record the engine and this session's counts and timings in ``run_meta.json``."""
    meta = json.loads(paths.meta.read_text()) if paths.meta.exists() else {"sessions": []}
    meta["engine"] = engine_desc
    meta["config"] = cfg.to_json()
    sessions = [s for s in meta.get("sessions", []) if s.get("id") != session["id"]]
    sessions.append(session)
    meta["sessions"] = sessions
    meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in sessions), 1)
    write_record_json(paths.meta, meta)


def new_session() -> dict:
    return {"id": f"{int(time.time())}-{os.getpid()}", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "instances": 0, "probe_plans": 0, "seconds": 0.0}


def run_cost(meta: dict) -> dict:
    """Wall time and throughput of a setting's generation from its ``run_meta.json`` sessions.

    Sessions that ran only trajectories (only probe plans) give the per-instance (per-plan) cost;
    engine load time is counted in ``wall_seconds`` but not in the per-item costs.
    """
    sessions = meta.get("sessions", [])
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
    tot["seconds_per_instance"] = traj_s / traj_n if traj_n else float("nan")
    tot["seconds_per_probe_plan"] = probe_s / probe_n if probe_n else float("nan")
    return tot


def read_run_meta(paths: RunPaths) -> dict:
    return json.loads(paths.meta.read_text()) if paths.meta.exists() else {}
