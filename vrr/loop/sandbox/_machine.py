"""This machine's sandbox: the bubblewrap binary, the interpreter, the allowed packages, and the record of
what the sandbox guarantees (:func:`isolation_rule`) and what it ran with (:func:`isolation_environment`)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ._cgroup import cgroup_support
from ._limits import (ALLOWED_PACKAGES, FILE_SIZE_LIMIT, MEMORY_LIMIT, TASK_LIMIT, TMPFS_BYTES, WEAK_ENV,
                      SandboxError)


def bwrap_path() -> str:
    """The bubblewrap binary, or :class:`SandboxError` naming the package to install."""
    found = shutil.which("bwrap")
    if not found:
        raise SandboxError("bubblewrap ('bwrap') is not installed: the sandbox for model-written code needs it. "
                           "Install Debian's 'bubblewrap' package (make env does this as root: apt-get install "
                           "bubblewrap)")
    return found


def interpreter() -> tuple[str, str]:
    """(the interpreter programs run on, its prefix): the base interpreter of this Python (a venv's
    ``bin/python`` is a link to it), whose standard library is bound read-only."""
    exe = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


def _allowed_package_dirs() -> list[tuple[str, Path]]:
    """(name, folder) of each allowed package importable by this Python, and its bundled libraries."""
    out = []
    for name in ALLOWED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        pkg = Path(list(spec.submodule_search_locations)[0]).resolve()
        out.append((name, pkg))
        libs = pkg.parent / f"{name}.libs"  # manylinux wheels keep their shared libraries beside the package
        if libs.is_dir():
            out.append((libs.name, libs.resolve()))
    return out


def _package_versions() -> dict:
    out = {}
    for name in ALLOWED_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


# --------------------------------------------------------------------------- the record
def isolation_rule(allow_weak: bool | None = None) -> dict:
    """What the sandbox guarantees, for the arrays' meta: the tool, the interpreter's version, the allowed
    packages, the limits, and what bounds memory and tasks together (a cgroup, or the weaker per-process
    limits, only on explicit opt-in). The same on every machine that runs the rule, so labels rebuilt
    elsewhere give the same bytes; the machine's own facts are :func:`isolation_environment`."""
    bwrap_path()
    cg = cgroup_support()
    if cg is None and not _weak_allowed(allow_weak):
        raise SandboxError(_no_cgroup_message())
    return {"tool": "bubblewrap", "python": "%d.%d" % sys.version_info[:2], "packages": list(ALLOWED_PACKAGES),
            "memory_bytes": MEMORY_LIMIT, "tasks": TASK_LIMIT, "tmpfs_bytes": TMPFS_BYTES,
            "file_bytes": FILE_SIZE_LIMIT, "network": "none",
            "memory_cap": "cgroup" if cg is not None else "per-process limits (explicit opt-in)",
            "filesystem": "read-only /usr, interpreter prefix and allowed packages; private /tmp, /dev/shm"}


def isolation_environment() -> dict:
    """This machine's sandbox: the tool's version, the interpreter's path and version, the allowed
    packages' versions and the cgroup version (``None``: none). Written beside the labels
    (``label_environment.json``) and into each generation session's ``run_meta.json``."""
    bwrap = bwrap_path()
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    exe, _ = interpreter()
    cg = cgroup_support()
    return {"tool": version, "interpreter": exe, "python": ".".join(map(str, sys.version_info[:3])),
            "packages": _package_versions(), "cgroup": None if cg is None else f"v{cg['version']}"}


def _weak_allowed(allow_weak: bool | None) -> bool:
    return bool(allow_weak) if allow_weak is not None else os.environ.get(WEAK_ENV) == "1"


def _no_cgroup_message() -> str:
    return ("the sandbox found no writable cgroup (v1 memory+pids or v2 with memory and pids delegated) to bound "
            "the memory and tasks of a program's processes together; run as root, delegate a cgroup, or accept "
            f"per-process limits explicitly with allow_weak=True or {WEAK_ENV}=1 (recorded in the arrays' meta)")
