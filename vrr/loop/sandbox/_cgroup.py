"""One cgroup per sandbox run: the memory and task limits of all its processes together."""
from __future__ import annotations

import os
from pathlib import Path

from ._limits import CGROUP_PREFIX, MEMORY_LIMIT, TASK_LIMIT
from ._reaper import kill_cgroup, owner_tag, remove_cgroup


def _cgroup_roots() -> dict | None:
    """Where this process may create a cgroup with memory and pids limits: ``{"version": 2, "dir":
    ...}`` or ``{"version": 1, "memory": ..., "pids": ...}``; None when neither is writable."""
    mounts = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _, opts = (right.split() + ["", ""])[:3]
                point = left.split()[4]
                if fstype == "cgroup2":
                    mounts.setdefault("v2", point)
                elif fstype == "cgroup":
                    for ctl in ("memory", "pids"):
                        if ctl in opts.split(","):
                            mounts[ctl] = point
    except OSError:
        return None
    if "memory" in mounts and "pids" in mounts and all(os.access(mounts[c], os.W_OK) for c in ("memory", "pids")):
        return {"version": 1, "memory": mounts["memory"], "pids": mounts["pids"]}
    v2 = mounts.get("v2")
    if v2 and os.access(v2, os.W_OK):
        try:
            ctl = Path(v2, "cgroup.subtree_control").read_text().split()
        except OSError:
            ctl = []
        if "memory" in ctl and "pids" in ctl:
            return {"version": 2, "dir": v2}
    return None


_CGROUPS: dict | None | bool = False  # False: not probed yet


def cgroup_support() -> dict | None:
    """The cached :func:`_cgroup_roots` of this machine."""
    global _CGROUPS
    if _CGROUPS is False:
        _CGROUPS = _cgroup_roots()
    return _CGROUPS  # type: ignore[return-value]


class _Cgroup:
    """One cgroup (or a v1 pair: memory + pids) holding every process of one sandbox run."""

    _count = 0

    def __init__(self, roots: dict):
        _Cgroup._count += 1
        name = f"{CGROUP_PREFIX}-{owner_tag()}-{_Cgroup._count}"   # whose it is: _reaper
        if roots["version"] == 1:
            self.dirs = [Path(roots["memory"], name), Path(roots["pids"], name)]
        else:
            self.dirs = [Path(roots["dir"], name)]
        self.version = roots["version"]
        for d in self.dirs:
            d.mkdir(mode=0o700)
        try:
            if self.version == 1:
                mem, pids = self.dirs
                (mem / "memory.limit_in_bytes").write_text(str(MEMORY_LIMIT))
                if (mem / "memory.memsw.limit_in_bytes").exists():  # no swap beyond the cap
                    (mem / "memory.memsw.limit_in_bytes").write_text(str(MEMORY_LIMIT))
                (pids / "pids.max").write_text(str(TASK_LIMIT))
            else:
                (self.dirs[0] / "memory.max").write_text(str(MEMORY_LIMIT))
                if (self.dirs[0] / "memory.swap.max").exists():
                    (self.dirs[0] / "memory.swap.max").write_text("0")
                (self.dirs[0] / "pids.max").write_text(str(TASK_LIMIT))
        except OSError:
            self.remove()
            raise

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        out = set()
        for f in self.procs_files():
            try:
                out.update(int(x) for x in Path(f).read_text().split())
            except OSError:
                pass
        return sorted(out)

    def memory_hit(self) -> bool:
        """Whether the memory limit was reached (the kernel refused or reclaimed at the cap)."""
        try:
            if self.version == 1:
                ctl = (self.dirs[0] / "memory.oom_control").read_text().split()
                oom = int(dict(zip(ctl[::2], ctl[1::2])).get("oom_kill", 0))
                return oom > 0 or int((self.dirs[0] / "memory.failcnt").read_text()) > 0
            events = (self.dirs[0] / "memory.events").read_text().split()
            return int(dict(zip(events[::2], events[1::2])).get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    def kill_all(self) -> None:
        for d in self.dirs:
            kill_cgroup(d)

    def remove(self) -> None:
        for d in self.dirs:
            remove_cgroup(d)


def cgroup_parents() -> list[str]:
    """The folders this machine's sandbox cgroups are made in ([] without a cgroup)."""
    roots = cgroup_support()
    if roots is None:
        return []
    return [roots["memory"], roots["pids"]] if roots["version"] == 1 else [roots["dir"]]


def live_sandbox_processes(made_by: int | None = None) -> list[int]:
    """Pids of live processes in any cgroup made by this module (leftover checks); with ``made_by``, only
    in the cgroups that process made (a test beside others running the sandbox at the same time)."""
    mark = CGROUP_PREFIX if made_by is None else f"{CGROUP_PREFIX}-{made_by}-"
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if mark in Path(f"/proc/{name}/cgroup").read_text():
                    out.append(int(name))
            except OSError:
                pass
    return out
