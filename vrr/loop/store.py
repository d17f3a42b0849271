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
import warnings
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


class PartFileWarning(UserWarning):
    """A part file had lines that are not completed records; they were set aside, not lost."""


def _parse_line(line: bytes) -> tuple[dict | None, str]:
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
    if not isinstance(rec, dict):
        return None, f"not a JSON object ({type(rec).__name__})"
    if not isinstance(rec.get("index"), int) or isinstance(rec.get("index"), bool):
        return None, "no integer 'index'"
    return rec, ""


def read_part(path: Path, repair: bool = True) -> list[dict]:
    """The completed records of a part file; a bad line never costs the good ones.

    Every line that is not a completed record (not UTF-8, not JSON, not an object with an integer
    ``index``, or the torn last line of a crash mid-write) is skipped and reported with the file and
    line number (:class:`PartFileWarning`). With ``repair=True`` the bad lines are moved to
    ``<file>.rejected`` and the part file is rewritten atomically with the good records only, so
    later appends start on a clean line; completed records are never truncated away.
    """
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = lines.pop() if lines else b""  # after the last newline: empty, or a line cut by a crash
    recs, good_lines, bad = [], [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        rec, problem = _parse_line(line)
        if rec is None:
            bad.append((number, line, problem))
        else:
            recs.append(rec)
            good_lines.append(line)
    if torn.strip():
        bad.append((len(lines) + 1, torn, "torn last line (no newline: the write was interrupted)"))
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, _, why in bad[:5]) + (" ..." if len(bad) > 5 else "")
        action = f"moved to {path.name}.rejected" if repair else "skipped"
        warnings.warn(f"{path}: {len(bad)} bad line(s) {action}, {len(recs)} records kept ({shown})",
                      PartFileWarning, stacklevel=2)
        if repair:
            with open(path.with_name(path.name + ".rejected"), "ab") as f:
                f.write(b"".join(line + b"\n" for _, line, _ in bad))
            atomic_write_bytes(path, b"".join(line + b"\n" for line in good_lines))
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
    """The first record of each (split, index), sorted by index (a resumed batch may repeat one)."""
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


def batch_time(records: list[dict]) -> tuple[float, int]:
    """Engine-batch seconds spent on these records (each batch counted once: records of one batch share
    its ``batch`` id and ``batch_seconds``) and the number of records."""
    batches = {(r.get("batch"), r.get("batch_seconds")) for r in records if r.get("batch_seconds") is not None}
    return float(sum(sec for _, sec in batches)), len(records)


def run_cost(meta: dict, records: dict[str, list[dict]] | None = None) -> dict:
    """Wall time and throughput of a setting's generation from its ``run_meta.json`` sessions.

    Sessions that ran only trajectories (only probe plans) give the per-instance (per-plan) cost;
    engine load time is counted in ``wall_seconds`` but not in the per-item costs. ``records``
    (``{"traj": [...], "probe": [...]}``, the stored records) gives the per-item costs from the batch
    times instead, which also works for sessions that ran both phases.
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
    for phase, rows in (records or {}).items():
        sec, n = batch_time(rows)
        if phase == "traj" and n:
            traj_s, traj_n = sec, n
        elif phase == "probe" and n:
            probe_s, probe_n = sec, n
    tot["seconds_per_instance"] = traj_s / traj_n if traj_n else float("nan")
    tot["seconds_per_probe_plan"] = probe_s / probe_n if probe_n else float("nan")
    return tot


def read_run_meta(paths: RunPaths) -> dict:
    return json.loads(paths.meta.read_text()) if paths.meta.exists() else {}
