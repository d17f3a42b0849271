"""Where the files of one run lie: :class:`RunPaths` under ``<out root>/<setting>/``.

A shard writes its own part files, lock and run meta (``trajectories.shard-i-of-n.part.jsonl``,
``probe.shard-i-of-n.part.jsonl``, ``generate.shard-i-of-n.lock``, ``run_meta.shard-i-of-n.json``) beside
the run's shared ``config.json`` and frozen outputs. :func:`part_kind` tells a run's part files (a shard's
included) by their names.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...common.paths import REPO_ROOT
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
