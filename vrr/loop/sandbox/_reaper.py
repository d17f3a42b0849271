"""What sandbox runs leave on the host when their process dies without cleaning up, and who removes it.

A run's cgroup and its host-side folder (program, captured output) are named
``<prefix>-<owner>-...`` (``prefix``: :data:`CGROUP_PREFIX`), where ``<owner>`` is ``<pid>-t<start>-n<ns>``:
the pid and the start time (clock ticks since boot, ``/proc/<pid>/stat``) of the process that made them, so a
reused pid is another owner, and its PID namespace (the inode of ``/proc/self/ns/pid``): an owner in another
namespace (a container sharing the cgroup tree) is never judged, as its pid means nothing here. A run removes both when it ends, however it ends in Python (an exception,
Ctrl-C). Where the process gets no chance to (SIGKILL, or a SIGTERM that kills its process group at
once), two mechanisms take over:

* **a guard**: the first run of a process starts one small process (:func:`start_guard`; this file run as a
  script, standard library only), in a session of its own so that a signal to its owner's process group
  misses it. It waits on a pidfd of its owner (the kernel reports the owner's exit: no polling); when the
  owner has exited, it kills every process left in the owner's cgroups (``cgroup.kill`` on cgroup v2,
  SIGKILL to each listed process on v1), and the bubblewrap process group of each of the owner's folders
  (the runs without a cgroup), removes the cgroups and the folders, and exits;
* **the next run**: the first run of a process also removes what an owner that is gone left behind, its
  guard killed as well (:func:`remove_stale`), and says so on stderr.

Names of another form are never touched; an owner whose pid is alive with the same start time is never
judged stale.
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

_OWNER = re.compile(r"(\d+)-t(\d+)-n(\d+)-")
LAUNCHER_FILE = "bwrap-pid"   # in a run's folder: "<pid> <start>" of its bubblewrap, the leader of its process group


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (field 22 of ``/proc/<pid>/stat``), or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


_TAG: tuple[int, str] = (0, "")


def pid_namespace() -> int:
    """The inode of this process's PID namespace."""
    return os.stat("/proc/self/ns/pid").st_ino


def owner_tag() -> str:
    """``<pid>-t<start>-n<ns>`` of this process."""
    global _TAG
    if _TAG[0] != os.getpid():
        _TAG = (os.getpid(), f"{os.getpid()}-t{start_ticks(os.getpid())}-n{pid_namespace()}")
    return _TAG[1]


def _owner_of(name: str, prefix: str) -> tuple[int, int, int] | None:
    if not name.startswith(prefix + "-"):
        return None
    m = _OWNER.match(name, len(prefix) + 1)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _gone(owner: tuple[int, int, int]) -> bool:
    """Whether the owner (pid, start, namespace) has exited; never for an owner of another PID namespace."""
    return owner[2] == pid_namespace() and start_ticks(owner[0]) != owner[1]


def _cgroup_pids(folder: Path) -> list[int]:
    try:
        return [int(x) for x in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


# A guard against a cgroup that never empties, not a measure of speed: a killed process leaves its cgroup only
# once the kernel has reaped it, which on a busy machine can take seconds; the loops below wait for that event.
CLEANUP_PATIENCE = 300.0


def _until(done, patience: float = CLEANUP_PATIENCE) -> bool:
    """Call ``done`` every 10 ms until it returns True (then True) or ``patience`` seconds have passed (then
    False): every sandboxed run ends here, so the wait is short, as a reaped process leaves its cgroup at once."""
    end = time.monotonic() + patience
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def kill_cgroup(folder: Path) -> None:
    """Kill every process of one cgroup folder: ``cgroup.kill`` (v2), then SIGKILL to whatever is listed
    until it is empty (v1, or a process that forked meanwhile)."""
    kill = folder / "cgroup.kill"
    if kill.exists():
        try:
            kill.write_text("1")
        except OSError:
            pass

    def emptied() -> bool:
        pids = _cgroup_pids(folder)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return not pids

    _until(emptied)


def remove_cgroup(folder: Path) -> None:
    """Remove one cgroup folder once its processes have exited (a killed process leaves it once reaped)."""
    def removed() -> bool:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    _until(removed)


def kill_launcher_group(folder: Path) -> None:
    """SIGKILL the process group of the run's bubblewrap (recorded in ``LAUNCHER_FILE``), if that very process
    (same start time) still leads it."""
    try:
        pid, start = map(int, (folder / LAUNCHER_FILE).read_text().split())
    except (OSError, ValueError):
        return
    if start_ticks(pid) == start:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _entries(prefix: str, cgroup_roots: list[str], tmp: str) -> list[tuple[str, Path, tuple[int, int, int]]]:
    """("cgroup" | "folder", path, owner) of every cgroup and host folder named by ``prefix``."""
    out = []
    for kind, parent in [("cgroup", r) for r in cgroup_roots] + [("folder", tmp)]:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            owner = _owner_of(name, prefix)
            if owner is not None:
                out.append((kind, Path(parent, name), owner))
    return out


def _remove(entries) -> None:
    for kind, path, _ in sorted(entries, key=lambda e: e[0] != "folder"):   # the launchers first, then the cgroups
        if kind == "folder":
            kill_launcher_group(path)
    for kind, path, _ in entries:
        if kind == "cgroup":
            kill_cgroup(path)
            remove_cgroup(path)
        else:
            shutil.rmtree(path, ignore_errors=True)


def remove_owned(prefix: str, owner: tuple[int, int, int], cgroup_roots: list[str], tmp: str) -> int:
    """Kill and remove the cgroups and folders of ``owner`` (pid, start, namespace); how many there were."""
    entries = [e for e in _entries(prefix, cgroup_roots, tmp) if e[2] == owner]
    _remove(entries)
    return len(entries)


def remove_stale(prefix: str, cgroup_roots: list[str], tmp: str, say=None) -> list[str]:
    """Kill and remove the cgroups and folders whose owner is gone; one line per owner, also given to ``say``
    (default: stderr)."""
    by_owner: dict[tuple[int, int, int], list] = {}
    for entry in _entries(prefix, cgroup_roots, tmp):
        if _gone(entry[2]):
            by_owner.setdefault(entry[2], []).append(entry)
    lines = []
    for (pid, _, _), entries in sorted(by_owner.items()):
        _remove(entries)
        n_cg = sum(e[0] == "cgroup" for e in entries)
        lines.append(f"vrr sandbox: removed {n_cg} cgroup(s) and {len(entries) - n_cg} folder(s) left by process "
                     f"{pid}, which exited without removing them (killed): "
                     + ", ".join(str(e[1]) for e in entries[:4]) + (" ..." if len(entries) > 4 else ""))
    for line in lines:
        (say or (lambda s: print(s, file=sys.stderr, flush=True)))(line)
    return lines


def start_guard(prefix: str, cgroup_roots: list[str], tmp: str) -> subprocess.Popen:
    """Start the guard of this process (module docstring)."""
    pid = os.getpid()
    return subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), prefix, str(pid),
                             str(start_ticks(pid)), str(pid_namespace()), tmp, *cgroup_roots],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def _guard(argv: list[str]) -> None:
    prefix, pid, start, ns, tmp, *roots = argv
    owner = (int(pid), int(start), int(ns))
    try:
        fd = os.pidfd_open(owner[0])
    except OSError:   # already gone
        fd = None
    if fd is not None and not _gone(owner):   # the pidfd is of the owner, not of a process that reused its pid
        select.select([fd], [], [])           # readable when the owner has exited
    remove_owned(prefix, owner, roots, tmp)


if __name__ == "__main__":
    _guard(sys.argv[1:])
