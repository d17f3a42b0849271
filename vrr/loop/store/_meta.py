"""A run's ``run_meta.json``: the engine, the config and one entry per generation session.

A session records its counts, timings, machine and token usage under its id; a shard keeps its own
run meta, and the run's read back (:func:`read_run_meta`) holds every shard's sessions. Finalizing a
sharded run writes that merged run meta into the run's own ``run_meta.json`` (:func:`merge_run_meta`),
so a sharded run keeps one as an unsharded run does.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from ..config import RunConfig
from ._errors import RunStoreError
from ._files import read_run_json, write_record_json
from ._paths import RunPaths, run_paths
from ._shard import shard_of_file


def update_meta(paths: RunPaths, cfg: RunConfig, engine_desc: dict, session: dict) -> None:
    """Record the engine and this session's counts and timings in ``run_meta.json`` (a shard's in its own)."""
    meta = _read_meta_file(paths.meta) or {"sessions": []}
    meta["engine"] = engine_desc
    meta["config"] = cfg.to_json()
    sessions = [s for s in meta.get("sessions", []) if s.get("id") != session["id"]]
    sessions.append(session)
    meta["sessions"] = sessions
    meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in sessions), 1)
    write_record_json(paths.meta, meta)


_SESSION_NUMBER = itertools.count()


def new_session() -> dict:
    # the per-process number keeps two sessions of one process in one second apart (update_meta keys on the id)
    return {"id": f"{int(time.time())}-{os.getpid()}-{next(_SESSION_NUMBER)}", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "instances": 0, "probe_plans": 0, "seconds": 0.0}


def _read_meta_file(path: Path) -> dict:
    if not path.exists():
        return {}
    meta = read_run_json(path)
    sessions = meta.get("sessions", [])
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise RunStoreError(path, "field 'sessions' is not a list of session objects")
    return meta


def read_run_meta(paths: RunPaths | str | os.PathLike) -> dict:
    """The run's ``run_meta.json`` ({} before the first session); a corrupt file is a
    :class:`RunStoreError` naming it. ``paths``: the run's :class:`RunPaths`, or its folder's path
    (:func:`vrr.loop.store.run_paths`: a path that is not a run folder is a :class:`RunStoreError`).

    For the whole run (``paths.shard`` None) the shards' run metas are merged in: their sessions
    (each marked with its ``shard``) follow the run's own, ``total_seconds`` counts them all, and the
    engine and config are the run's own, else the first shard's. A session is counted once: a merged
    ``run_meta.json`` (:func:`merge_run_meta`) holds copies of shard sessions, and the shard's own file,
    where the session is kept up to date, wins. A shard's paths read its own file.
    """
    paths = run_paths(paths)
    meta = _read_meta_file(paths.meta)
    if paths.shard is not None:
        return meta
    shard_files = paths.shard_files("run_meta.json")
    if not shard_files:
        return meta
    from_shards = []
    for path in shard_files:
        part = _read_meta_file(path)
        for key in ("engine", "config"):
            if key in part and key not in meta:
                meta[key] = part[key]
        shard = str(shard_of_file(path))
        from_shards += [{**s, "shard": shard} for s in part.get("sessions", [])]
    in_shards = {s.get("id") for s in from_shards}
    own = [s for s in meta.get("sessions", []) if not ("shard" in s and s.get("id") in in_shards)]
    meta["sessions"] = own + from_shards
    if meta["sessions"]:
        meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in meta["sessions"]), 1)
    return meta


def merge_run_meta(paths: RunPaths | str | os.PathLike) -> dict:
    """Write a sharded run's merged run meta (:func:`read_run_meta`: its own sessions and every shard's)
    into the run's own ``run_meta.json`` and return it; the shards' files stay. A run without shard run
    metas is left as it is. Finalizing a run calls this, so readers of ``run_meta.json`` see every session."""
    paths = run_paths(paths)
    whole = RunPaths(paths.dir.parent, paths.dir.name)
    meta = read_run_meta(whole)
    if whole.shard_files("run_meta.json") and meta.get("sessions"):
        write_record_json(whole.meta, meta)
    return meta
