"""Where the files of one run lie: :class:`RunPaths` under ``<out root>/<setting>/``.

A shard writes its own part files, lock and run meta (``trajectories.shard-i-of-n.part.jsonl``,
``probe.shard-i-of-n.part.jsonl``, ``generate.shard-i-of-n.lock``, ``run_meta.shard-i-of-n.json``) beside
the run's shared ``config.json`` and frozen outputs. :func:`part_kind` tells a run's part files (a shard's
included) by their names. The store's readers take a run as :class:`RunPaths` or as the path of its folder
(:func:`run_paths`).
"""
from __future__ import annotations

import os
from pathlib import Path

from ...common.paths import REPO_ROOT
from ._errors import RunStoreError
from ._shard import Shard, shard_of_file

DEFAULT_OUT_ROOT = REPO_ROOT / "data" / "real"
TRAJ_PART_NAME = "trajectories.part.jsonl"
PROBE_PART_NAME = "probe.part.jsonl"


def _sharded_name(name: str, shard: Shard | None) -> str:
    """``trajectories.part.jsonl`` -> ``trajectories.shard-i-of-n.part.jsonl`` (the stem before the first dot)."""
    if shard is None:
        return name
    stem, rest = name.split(".", 1)
    return f"{stem}.{shard.tag}.{rest}"


class RunPaths:
    """The files of one run (``out_root/<setting>/``); with ``shard``, the files that shard writes
    (part files, lock, run meta) while the config and the frozen outputs stay the run's."""

    def __init__(self, out_root: str | os.PathLike, setting: str, shard: Shard | None = None):
        self.dir = Path(out_root) / setting
        self.shard = shard
        self.config = self.dir / "config.json"
        self.traj_part = self.dir / _sharded_name(TRAJ_PART_NAME, shard)
        self.probe_part = self.dir / _sharded_name(PROBE_PART_NAME, shard)
        self.traj = self.dir / "trajectories.jsonl.gz"
        self.probe = self.dir / "probe.jsonl.gz"
        self.meta = self.dir / _sharded_name("run_meta.json", shard)
        self.arrays = self.dir / "arrays.npz"
        self.arrays_partial = self.dir / "arrays.partial.npz"
        self.generate_lock = self.dir / _sharded_name("generate.lock", shard)
        self.run_lock = self.dir / "generate.lock"  # the whole run's lock (shards hold it shared)

    def shard_files(self, name: str) -> list[Path]:
        """The shard files of the run named like ``name`` (``run_meta.json`` -> ``run_meta.shard-*.json``)."""
        stem, rest = name.split(".", 1)
        return sorted((p for p in self.dir.glob(f"{stem}.shard-*-of-*.{rest}") if shard_of_file(p)),
                      key=lambda p: (shard_of_file(p).count, shard_of_file(p).index))


def part_kind(path: Path) -> str | None:
    """"trajectories" / "probe" for a run's part file (a shard's included), else None."""
    shard = shard_of_file(path)
    for kind, name in (("trajectories", TRAJ_PART_NAME), ("probe", PROBE_PART_NAME)):
        if Path(path).name == _sharded_name(name, shard):
            return kind
    return None


RUN_FILE_STEMS = ("config", "run_meta", "trajectories", "probe", "generate")  # the files a run folder holds


def run_paths(run: "RunPaths | str | os.PathLike") -> RunPaths:
    """A run's files, given as :class:`RunPaths` (returned as is) or as the path of its folder
    (``<out root>/<run name>``, e.g. ``"data/real/gsm8k_cpu_favorable"``).

    A path that is not a run folder is a :class:`RunStoreError` naming it: one that does not exist, a file,
    or a folder that holds none of a run's files (``config.json``, ``run_meta.json``, part files, the
    frozen window, the lock, a shard's files).
    """
    if isinstance(run, RunPaths):
        return run
    if not isinstance(run, (str, os.PathLike)):
        raise TypeError(f"a run is its folder's path (str or Path) or a RunPaths, got {type(run).__name__}")
    folder = Path(os.path.abspath(run))
    hint = "(a run folder is <out root>/<run name>, e.g. data/real/gsm8k_cpu_favorable, holding config.json)"
    if not folder.exists():
        raise RunStoreError(run, f"no such folder {hint}")
    if not folder.is_dir():
        raise RunStoreError(run, f"is a file, not a run folder {hint}")
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError as exc:
        raise RunStoreError(run, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not any(name.split(".", 1)[0] in RUN_FILE_STEMS and "." in name for name in names):
        raise RunStoreError(run, f"is not a run folder: it holds no config.json, run_meta.json or part file {hint}")
    return RunPaths(folder.parent, folder.name)
