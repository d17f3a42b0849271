"""A run's window as one value: its records from every part file, its config and its paths.

:func:`stored_window` reads the records of any config's window, read only (never repaired), so it may
run beside a generator; :func:`read_window` is the window a run's ``config.json`` sets, after checking a
requested config against it. The label step reads a window once, as a :class:`StoredWindow`, and works
on that value.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from ..config import RunConfig, from_stored
from ._config import check_config, read_stored_config
from ._merge import read_window_records
from ._meta import read_run_meta
from ._paths import RunPaths, run_paths
from ._window import check_window_fits, probe_window, trajectory_window


@dataclass(frozen=True)
class StoredWindow:
    """The window's records stored so far: trajectories of ``traj_want``'s instances, and probe plans of
    ``probe_want`` (the run's own probe, or its ``probe.from`` owner's; ``probe_missing`` says why the
    owner's cannot be read). ``cfg`` is the config whose window this is, ``paths`` the run's files, and
    ``stored_config`` the run's ``config.json`` as stored (None when the window was read for a config
    given, not the stored one)."""
    paths: RunPaths
    cfg: RunConfig
    traj: list[dict]
    traj_want: set[int]
    probe: list[dict]
    probe_want: set[int]
    probe_missing: str = ""
    stored_config: dict | None = None

    @property
    def traj_complete(self) -> bool:
        return {r["index"] for r in self.traj} == self.traj_want

    @property
    def probe_complete(self) -> bool:
        return {r["index"] for r in self.probe} == self.probe_want and not self.probe_missing

    @cached_property
    def run_meta(self) -> dict:
        """The run's ``run_meta.json`` with every shard's sessions (:func:`read_run_meta`), read on first use:
        a window without records is frozen without it."""
        return read_run_meta(self.paths)


def stored_window(paths: RunPaths | str | os.PathLike, cfg: RunConfig, out_root: Path | None = None) -> StoredWindow:
    """The records of ``cfg``'s window in the run's part files (every shard's); read only, never repaired.
    ``paths``: the run's :class:`RunPaths` or its folder's path (:func:`vrr.loop.store.run_paths`); a
    borrowed probe is read from its owner's folder in ``out_root`` (default: the folder that holds the run's)."""
    from ..tasks import get_task  # the task registry; imported here so importing the store loads no task

    paths = run_paths(paths)
    out_root = Path(out_root) if out_root is not None else paths.dir.parent
    traj_window = trajectory_window(cfg)
    check_window_fits(traj_window, get_task(cfg.dataset).split_size(cfg.split))
    traj = read_window_records(paths.traj_part, traj_window)
    probe_missing = ""
    probe_win = None
    if cfg.probe_from:
        src = RunPaths(out_root, cfg.probe_from)
        if src.config.exists():
            probe_win = probe_window(from_stored(read_stored_config(src), str(src.config)))
        else:
            probe_missing = f"the probe's owner {src.dir} has no config.json"
        probe = read_window_records(src.probe_part, probe_win) if probe_win else []
    else:
        probe_win = probe_window(cfg)
        probe = read_window_records(paths.probe_part, probe_win)
    pwant = set(probe_win.indices) if probe_win is not None and probe_win.split else set()
    return StoredWindow(paths, cfg, traj, set(traj_window.indices), probe, pwant, probe_missing)


def read_window(paths: RunPaths | str | os.PathLike, requested: RunConfig | None = None,
                out_root: Path | None = None) -> StoredWindow:
    """The window the run's ``config.json`` sets, with the config as stored. ``paths``: the run's
    :class:`RunPaths` or its folder's path (:func:`vrr.loop.store.run_paths`).

    ``requested`` is first checked against the stored ``config.json`` (:func:`check_config`: written on the
    first run, may change the window lengths); without it the stored config is used as is. A borrowed
    probe is read from its owner's folder in ``out_root`` (default: the folder that holds the run's).
    """
    paths = run_paths(paths)
    out_root = Path(out_root) if out_root is not None else paths.dir.parent
    if requested is not None:
        check_config(paths, requested)
    stored_config = read_stored_config(paths)
    cfg = from_stored(stored_config, str(paths.config))
    return replace(stored_window(paths, cfg, out_root), stored_config=stored_config)
