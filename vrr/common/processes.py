"""The kernel's help in leaving no process behind: death signals (``PR_SET_PDEATHSIG``) and the names of
what a process owns (its pid, start time and PID namespace), so that what a killed process left can be told
from what a live one uses. (The sandbox keeps its own copy in ``vrr.loop.sandbox._reaper``: it imports
nothing of vrr outside itself.)"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def set_death_signal(sig: int) -> None:
    """``prctl(PR_SET_PDEATHSIG, sig)``: the kernel sends ``sig`` to this process when the thread that started
    it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def death_signal_preexec(sig: int, parent: int):
    """A ``preexec_fn`` for a child of ``parent``: its death signal set before exec, then the check that the
    parent is still alive (it may have died before the prctl took effect; then the child ends at once)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl   # loaded before the fork

    def preexec():
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, field 22 of ``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_namespace() -> int:
    """The inode of this process's PID namespace."""
    return os.stat("/proc/self/ns/pid").st_ino


def owner_tag() -> str:
    """``<pid>-t<start>-n<ns>`` of this process: its pid, its start time (a reused pid is another owner) and its
    PID namespace (an owner in another namespace is never judged from here)."""
    return f"{os.getpid()}-t{start_ticks(os.getpid())}-n{pid_namespace()}"


def owner_gone(pid: int, start: int, namespace: int) -> bool:
    """Whether the owner named by :func:`owner_tag`'s parts has exited (never for another PID namespace)."""
    return namespace == pid_namespace() and start_ticks(pid) != start
