"""Run untrusted Python (model-written code) inside bubblewrap (App. B: MBPP validity is "sandboxed
unit tests ... 5-second timeout").

Every program runs in a fresh ``bwrap`` sandbox (bubblewrap, the isolation tool Flatpak builds on;
Debian package ``bubblewrap``, installed by ``make env``). What a program sees and may use:

* **filesystem**: read-only ``/usr`` (with the usual ``/lib``, ``/lib64``, ``/bin`` links), the
  interpreter's own prefix (its standard library), and the allowed third-party packages
  (:data:`ALLOWED_PACKAGES`) under ``/opt/vrr-site``; its program at ``/sandbox/main.py``, read-only.
  ``/tmp`` and ``/dev/shm`` are private tmpfs mounts of at most :data:`TMPFS_BYTES` each that vanish
  with the sandbox. Every writable mount has a size of its own: the root ``/`` and ``/sandbox`` are tmpfs
  mounts of :data:`ROOT_TMPFS_BYTES` and :data:`PROGRAM_TMPFS_BYTES` holding only mount points, and
  they and ``/dev`` are read-only once everything is mounted. None of the repository, ``../shared``, the home folder, ``/etc`` or the host's
  ``/proc`` is visible (``/proc`` is the sandbox's own);
* **namespaces**: new user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``); the
  program runs as uid/gid 65534 with no capabilities, in a new session, and cannot create further
  user namespaces. The network namespace is empty: no connection leaves the sandbox, not even to
  127.0.0.1. When bubblewrap's init exits, the kernel kills every process left in the PID namespace;
  bubblewrap dies with its parent (``--die-with-parent``);
* **limits**: one cgroup per run holds every process of the program: :data:`MEMORY_LIMIT` bytes of
  memory in total (tmpfs pages included, no swap) and at most :data:`TASK_LIMIT` tasks (processes and
  threads together). Per process: ``RLIMIT_CPU`` (the CPU-time limit), ``RLIMIT_FSIZE`` 10 MB per
  file, ``RLIMIT_NOFILE`` 256, no core files. A wall-clock limit for the whole run is enforced here;
  on expiry the cgroup's processes are killed;
* **environment**: the program's is only ``PATH``, ``LANG``, ``HOME=/tmp``, ``TMPDIR=/tmp``, ``PWD``
  (bubblewrap's, ``/tmp``), ``PYTHONPATH=/opt/vrr-site``, ``PYTHONDONTWRITEBYTECODE=1`` and ``PYTHONHASHSEED``
  (a parameter). bubblewrap itself starts with an empty environment (:data:`LAUNCH_ENV`), so its init, PID 1
  of the sandbox, whose ``/proc/1/environ`` and ``/proc/1/cmdline`` the program can read, holds none of the
  caller's variables; it reads its options from a file, so its command line shows only the interpreter's
  path and the program's. stdin is ``/dev/null``;
  interpreter flags ``-s -S -B`` (no site-packages but the allowed ones, no bytecode files);
* **interrupts**: a run's cgroup and host-side folder are named after the process that made them (pid and
  start time) and removed when the run ends, however it ends in Python. A process killed with no chance
  to clean up (SIGKILL) has a guard, started with its first run in a session of its own, that waits on a
  pidfd of it and then kills and removes what it left; the next process's first run removes what dead
  owners left and says so on stderr (``_reaper``);
* **output**: stdout and stderr go to files outside the sandbox (capped by ``RLIMIT_FSIZE``); only the
  last ``OUTPUT_CAP`` bytes of each are read back.

Where bubblewrap is missing or cannot start, :func:`run_many` raises :class:`SandboxError` saying
what is missing. "Cannot start" is bubblewrap's own report: it exits without having written the
program's ``exit-code`` on its status pipe (``--json-status-fd``, a pipe no process in the sandbox
holds). Whatever a program writes or how it exits is that program's result, never an error of
the batch: one hostile program cannot stop the others. Where the machine offers no writable cgroup (v1 or v2) for memory and tasks, it
raises too, unless weaker isolation is asked for explicitly (``allow_weak=True`` or
``VRR_SANDBOX_ALLOW_WEAK=1``): then each process gets ``RLIMIT_AS`` = :data:`MEMORY_LIMIT` /
:data:`WEAK_PROCESS_SLOTS` and ``RLIMIT_NPROC``, so their sum fits, and :func:`isolation_rule`
says ``"cgroup": null`` (the arrays' meta records it).

What it is not: there is no seccomp filter, so the program can use every system call the kernel
allows an unprivileged user in a user namespace; a kernel bug reachable from there is not contained.
CPU time is bounded per process, not summed across the program's processes. Never run generated
code in the project's own process: use this package.

Call it from one thread at a time; :func:`run_many` overlaps several programs from that one thread.

The package is the one place that starts bubblewrap (a program in it: ``_bwrap``; its version: ``_machine``);
everything that executes model-written code goes through this face:

* running programs: :func:`run_python`, :func:`run_many` (``_bwrap``), their limits and
  :class:`SandboxResult` (``_limits``), the machine's sandbox and its record (``_machine``, ``_cgroup``),
  what a killed process left behind (``_reaper``);
* unit tests the code cannot touch: :func:`run_tests` under an :class:`ExecutionRule`
  (:data:`LABEL_RULE`, :data:`VOTE_RULE`), a recording and a replay program (``_testcheck``) whose
  values cross as data (``_codec``);
* official checkers in their own process: :class:`CheckerProcess` (``_checker``);
* keeping problem texts out of stored records: :func:`redact_record` (``_redact``).
"""
from __future__ import annotations

from ._bwrap import error_line, run_many, run_python
from ._cgroup import cgroup_parents, cgroup_support, live_sandbox_processes
from ._checker import KILL_SECONDS, CheckerProcess
from ._limits import (ALLOWED_PACKAGES, CGROUP_PREFIX, DEFAULT_TIMEOUT, FILE_SIZE_LIMIT, LAUNCH_ENV, MEMORY_LIMIT,
                      OPEN_FILES_LIMIT, OUTPUT_CAP, PROGRAM_PATH, PROGRAM_TMPFS_BYTES, ROOT_TMPFS_BYTES, SANDBOX_UID,
                      SITE_DIR, TASK_LIMIT, TMPFS_BYTES, WEAK_ENV, WEAK_PROCESS_SLOTS, SandboxError, SandboxResult)
from ._machine import bwrap_path, interpreter, isolation_environment, isolation_rule
from ._redact import MARKER as REDACTION_MARKER
from ._redact import contains_problem_text, redact_problem_text, redact_record
from ._testcheck import LABEL_RULE, VOTE_RULE, ExecutionRule, TestOutcome, code_names, redact_test, run_tests

__all__ = [
    # running programs
    "run_python", "run_many", "SandboxResult", "SandboxError", "error_line",
    # limits
    "DEFAULT_TIMEOUT", "MEMORY_LIMIT", "TASK_LIMIT", "TMPFS_BYTES", "ROOT_TMPFS_BYTES", "PROGRAM_TMPFS_BYTES", "FILE_SIZE_LIMIT", "OPEN_FILES_LIMIT",
    "OUTPUT_CAP", "WEAK_PROCESS_SLOTS", "SANDBOX_UID", "ALLOWED_PACKAGES", "PROGRAM_PATH", "SITE_DIR",
    "CGROUP_PREFIX", "WEAK_ENV", "LAUNCH_ENV",
    # the machine's sandbox and its record
    "bwrap_path", "interpreter", "cgroup_support", "cgroup_parents", "live_sandbox_processes", "isolation_rule",
    "isolation_environment",
    # unit tests the code cannot touch
    "ExecutionRule", "LABEL_RULE", "VOTE_RULE", "TestOutcome", "run_tests", "code_names", "redact_test",
    # official checkers in their own process
    "CheckerProcess", "KILL_SECONDS",
    # problem texts kept out of stored records
    "REDACTION_MARKER", "redact_problem_text", "contains_problem_text", "redact_record",
]

# the public names are shown, pickled and documented as this package's, wherever their code lives (httpx style)
for _name in __all__:
    if callable(globals()[_name]):
        globals()[_name].__module__ = __name__
del _name
