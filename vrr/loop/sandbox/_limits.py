"""The sandbox's limits, its result and its error (the numbers :mod:`vrr.loop.sandbox` enforces)."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TIMEOUT = 5.0          # seconds (App. B: MBPP unit tests, 5 s timeout)
MEMORY_LIMIT = 1 << 30         # bytes, all processes of one run together (cgroup)
TASK_LIMIT = 256               # processes + threads of one run together (cgroup pids.max)
TMPFS_BYTES = 64 << 20         # size of the private /tmp and /dev/shm (also charged to MEMORY_LIMIT)
ROOT_TMPFS_BYTES = 1 << 20     # size of the sandbox's root, /, a tmpfs holding only mount points (read-only)
PROGRAM_TMPFS_BYTES = 1 << 20  # size of /sandbox, a tmpfs holding only the program's mount point (read-only)
FILE_SIZE_LIMIT = 10 << 20     # RLIMIT_FSIZE, bytes per file written
OPEN_FILES_LIMIT = 256         # RLIMIT_NOFILE
OUTPUT_CAP = 64 << 10          # bytes of stdout / stderr read back (the tail)
WEAK_PROCESS_SLOTS = 8         # without a cgroup: RLIMIT_AS = MEMORY_LIMIT / this, RLIMIT_NPROC = this
SANDBOX_UID = 65534            # "nobody" inside the user namespace
ALLOWED_PACKAGES = ("numpy",)  # third-party packages a program may import (besides the standard library)
PROGRAM_PATH = "/sandbox/main.py"
SITE_DIR = "/opt/vrr-site"
CGROUP_PREFIX = "vrr-sandbox"    # names the cgroups and the host-side folders of sandbox runs

WEAK_ENV = "VRR_SANDBOX_ALLOW_WEAK"
# bubblewrap itself starts with no environment: its init is PID 1 of the sandbox, whose
# /proc/1/environ every process there can read; the program's variables are set by --setenv
LAUNCH_ENV: dict[str, str] = {}


@dataclass
class SandboxResult:
    """The outcome of one sandboxed program.

    ``passed``: exit status 0 within the limits. ``returncode``: the program's exit status (128 + N
    when killed by signal N). ``error``: the last line of a traceback (e.g. ``AssertionError``),
    ``"timeout after 5 s"``, ``"cpu time limit of 5 s exceeded"``, ``"memory limit ..."`` or ``""``.
    ``stdout`` / ``stderr``: the last ``OUTPUT_CAP`` bytes. ``interpreter``: the interpreter path
    inside the sandbox. ``hash_seed``: the ``PYTHONHASHSEED`` it ran with."""

    passed: bool
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    error: str
    seconds: float
    interpreter: str
    hash_seed: int = 0
    output_truncated: bool = False
    cpu_limited: bool = False
    memory_limited: bool = False


class SandboxError(RuntimeError):
    """The sandbox itself could not run a program (not the program's failure)."""
