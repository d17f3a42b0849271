"""Run untrusted Python (model-written code) in a contained subprocess (App. B: MBPP validity is
"sandboxed unit tests ... 5-second timeout").

Each program runs in a fresh interpreter in a fresh temporary directory, deleted afterwards:

* **process**: a new session and process group (``start_new_session``); a tiny bootstrap starts a
  keeper process as PID 1 of a new PID namespace when the kernel allows it, and the keeper runs
  the program. When the program ends, or the keeper is killed on timeout (by a pidfd, never by
  name), the kernel kills every process left in the namespace, including ones that called
  ``setsid()``. Without a PID namespace the whole process group is killed;
* **time**: a wall-clock timeout (default 5 s, the paper's) plus ``RLIMIT_CPU`` as a backstop; or, with
  ``cpu_limit``, the CPU time is the limit and the wall clock the backstop (MBPP labels do this, so
  that a loaded machine cannot turn a correct program into a timeout);
* **memory, files, processes**: ``RLIMIT_AS`` 1 GiB, ``RLIMIT_FSIZE`` 10 MB per file,
  ``RLIMIT_NOFILE`` 64, ``RLIMIT_CORE`` 0, and (when the uid is switched) ``RLIMIT_NPROC`` 32;
* **user**: when the parent runs as root, the program runs as a dedicated unprivileged uid/gid
  (``UID_BASE + slot``, a number with no passwd entry, one slot per concurrent sandbox, held by a
  lock file) with no supplementary groups; its working directory is chowned to that uid. So it
  cannot write to root-owned directories, read 0600/0700 files, signal the parent or read the
  parent's ``/proc/<pid>/environ``;
* **network**: a new, empty network namespace (``unshare(CLONE_NEWNET)`` via libc; only a down
  loopback device), so no connection leaves the sandbox, not even to 127.0.0.1;
* **environment**: nothing of the parent's: only ``PATH=/usr/bin:/bin``, ``LANG``, ``HOME`` and
  ``TMPDIR`` (the sandbox directory), ``PYTHONHASHSEED=0`` (labels do not depend on set order)
  and ``PYTHONDONTWRITEBYTECODE=1``; stdin is ``/dev/null``;
* **interpreter**: ``-s -S -B``: no user or system site-packages, no bytecode files. ``-I``
  is not used because its ``-E`` would drop ``PYTHONHASHSEED=0``; the environment is already
  scrubbed, so ``-E`` adds nothing. When the uid is switched the interpreter must be reachable
  by that uid: ``sys.executable`` if every directory on its path is world-searchable, else the
  system ``python3.X`` (recorded in ``SandboxResult.interpreter``);
* **output**: stdout and stderr go to files outside the sandbox directory (capped by
  ``RLIMIT_FSIZE``); only the last ``OUTPUT_CAP`` bytes of each are read back.

Each :class:`SandboxResult` records which of uid switch, network namespace and PID namespace
were in effect (``uid``, ``net_isolated``, ``pid_isolated``): a kernel or an unprivileged user
that refuses them gets a run without them, and the result says so.

What is NOT isolated: the filesystem is the host's. The program can read every world-readable
file (including the benchmark data under ``../shared/data``), write into world-writable
directories (``/tmp``, ``/var/tmp``, ``/dev/shm``; 10 MB per file, no total quota), and see the
host's process list in ``/proc``. There is no seccomp filter, no cgroup (memory is bounded per
process only, so NPROC x AS is the worst case), and no limit on disk use in total. This is a
guard against accidents and against the usual failure modes of generated code (infinite loops,
fork and memory bombs, stray writes, network calls), **not a security boundary against a
determined attacker**. Never run generated code in the project's own process: use this module.

Call it from one thread at a time (the child is set up by ``subprocess``'s ``preexec_fn``);
:func:`run_many` overlaps several programs from that one thread.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import math
import os
import pwd
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

DEFAULT_TIMEOUT = 5.0          # seconds of wall time (App. B: MBPP unit tests, 5 s timeout)
MEMORY_LIMIT = 1 << 30         # RLIMIT_AS, bytes
FILE_SIZE_LIMIT = 10 << 20     # RLIMIT_FSIZE, bytes per file written
OPEN_FILES_LIMIT = 64          # RLIMIT_NOFILE
PROCESS_LIMIT = 32             # RLIMIT_NPROC for the sandbox uid (processes + threads)
OUTPUT_CAP = 64 << 10          # bytes of stdout / stderr read back (the tail)
UID_BASE = int(os.environ.get("VRR_SANDBOX_UID_BASE", "990000"))
UID_SLOTS = 64
PROGRAM_NAME = "main.py"

_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1

# Runs as the sandboxed process (host PID namespace) before the program. It forks a keeper, the
# first process (PID 1) of the new PID namespace when unshare succeeded, tells the parent the
# keeper's pid and its namespaces, and exits with the program's status. The keeper forks and execs
# the program (not PID 1 itself, so signals behave as usual: PID 1 ignores default-action signals),
# waits for it and exits with its status; the keeper's exit takes every process of the namespace
# with it. Bootstrap, keeper and program die with their parents (PDEATHSIG).
_BOOTSTRAP = r"""
import os, sys, json
fd, interp, prog = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def ns(name):
    try:
        return os.readlink("/proc/self/ns/" + name)
    except OSError:
        return ""
def status(pid):
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return code if code >= 0 else 128 - code
os.set_inheritable(fd, False)
boot = os.getpid()
try:
    keeper = os.fork()
except OSError as e:
    os.write(2, ("sandbox: fork failed: %s\n" % e).encode())
    os._exit(125)
def die_with_parent():
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass
if keeper == 0:
    die_with_parent()
    if os.getppid() not in (boot, 0):
        os._exit(137)
    try:
        prog_pid = os.fork()
    except OSError as e:
        os.write(2, ("sandbox: fork failed: %s\n" % e).encode())
        os._exit(125)
    if prog_pid == 0:
        die_with_parent()
        try:
            os.execv(interp, [interp, "-s", "-S", "-B", prog])
        finally:
            os._exit(126)
    os._exit(status(prog_pid))
os.write(fd, json.dumps({"init": keeper, "net": ns("net"), "pid": ns("pid_for_children")}).encode())
os.close(fd)
os._exit(status(keeper))
"""


@dataclass
class SandboxResult:
    """The outcome of one sandboxed program.

    ``passed``: exit status 0 within the timeout. ``returncode``: the program's exit status
    (128 + N when killed by signal N, e.g. 137 when the sandbox killed it on timeout). ``error``: the
    last line of a traceback (e.g. ``AssertionError`` or ``NameError: name 'f' is not defined``),
    ``"timeout after 5.0 s"``, or ``""``. ``stdout`` / ``stderr``: the last ``OUTPUT_CAP`` bytes.
    ``uid``: the uid it ran as (None: the parent's own). ``net_isolated`` / ``pid_isolated``:
    whether the network / PID namespace was in effect."""

    passed: bool
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    error: str
    seconds: float
    net_isolated: bool
    pid_isolated: bool
    uid: int | None
    interpreter: str
    output_truncated: bool = False


class SandboxError(RuntimeError):
    """The sandbox itself could not run a program (not the program's failure)."""


# --------------------------------------------------------------------------- machine facts
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _is_root() -> bool:
    return os.geteuid() == 0


def _searchable_by_others(path: str) -> bool:
    """Whether a uid with no relation to the file's owner can execute ``path``: every directory
    on the resolved path must be world-searchable and the file world-executable."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


_INTERPRETERS: dict[bool, str] = {}


def sandbox_interpreter(switch_uid: bool | None = None) -> str:
    """The Python interpreter sandboxed programs run on: ``sys.executable`` when the sandbox uid
    can reach it, else the system ``python3.X`` of the same version, else ``python3``."""
    switch_uid = _is_root() if switch_uid is None else switch_uid
    if switch_uid not in _INTERPRETERS:
        if not switch_uid:
            _INTERPRETERS[switch_uid] = sys.executable
        else:
            ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
            candidates = [sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", "")]
            for name in (ver, "python3"):
                found = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
                if found:
                    candidates.append(found)
            usable = [c for c in candidates if c and _searchable_by_others(c)]
            if not usable:
                raise SandboxError("no Python interpreter is reachable by an unprivileged uid "
                                   f"(tried {candidates}); install a system python3")
            _INTERPRETERS[switch_uid] = usable[0]
    return _INTERPRETERS[switch_uid]


def processes_of_uid(uid: int) -> list[int]:
    """Pids of live processes whose ``/proc/<pid>`` belongs to ``uid`` (leftover checks)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
            except OSError:
                pass
    return out


class _UidSlot:
    """A dedicated sandbox uid, held by an exclusive lock file for the length of one run so
    that concurrent sandboxes (in this or another process) never share a uid or its NPROC budget."""

    LOCK_DIR = Path(tempfile.gettempdir()) / "vrr-sandbox-slots"

    def __init__(self):
        self.uid = None
        self._fh = None
        self.LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.LOCK_DIR, 0o700)  # sandboxed uids must not touch the locks
        for slot in range(UID_SLOTS):
            uid = UID_BASE + slot
            try:
                pwd.getpwuid(uid)
                continue  # a real account: never borrow it
            except KeyError:
                pass
            fh = open(self.LOCK_DIR / f"{slot}.lock", "a")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            if processes_of_uid(uid):  # leftovers of a crashed run: skip the slot
                fh.close()
                continue
            self.uid, self._fh = uid, fh
            return
        raise SandboxError(f"all {UID_SLOTS} sandbox uid slots are busy")

    def release(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _limits(timeout: float, switch_uid: bool, cpu_limit: float | None = None) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) pairs, never above the parent's hard limits unless root. With
    ``cpu_limit`` the CPU time is the limit (SIGXCPU at that many seconds), else a backstop one
    second past the wall timeout."""
    cpu = int(math.ceil(cpu_limit)) if cpu_limit is not None else int(math.ceil(timeout)) + 1
    wanted = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)),
              (resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT)),
              (resource.RLIMIT_NOFILE, (OPEN_FILES_LIMIT, OPEN_FILES_LIMIT)), (resource.RLIMIT_CORE, (0, 0))]
    if switch_uid:  # NPROC counts every process of the uid; only a dedicated uid makes it small
        wanted.append((resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT)))
    out = []
    for res, (soft, hard) in wanted:
        cur_hard = resource.getrlimit(res)[1]
        if not _is_root() and cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        out.append((res, (soft, hard)))
    return out


def _make_preexec(limits, uid: int | None):
    """The function run in the child between fork and exec: namespaces (needs privilege, so
    first), resource limits, then the unprivileged uid, then death-with-parent (PDEATHSIG is
    cleared by a uid change, so last)."""
    libc = _libc()
    if uid is not None:
        ns_options = [_CLONE_NEWNET | _CLONE_NEWPID, _CLONE_NEWNET]
    else:  # unprivileged: a user namespace may allow the others
        ns_options = [_CLONE_NEWNET | _CLONE_NEWPID, _CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWPID,
                      _CLONE_NEWUSER | _CLONE_NEWNET]

    def preexec():
        for flags in ns_options:
            if libc.unshare(flags) == 0:
                break
        for res, lim in limits:
            resource.setrlimit(res, lim)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


def _own_ns(name: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError:
        return ""


def _tail(path: Path, cap: int = OUTPUT_CAP) -> tuple[str, bool]:
    """The last ``cap`` bytes of a file, decoded leniently, and whether anything was cut."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - cap))
            data = f.read(cap)
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), size > cap


def error_line(stderr: str) -> str:
    """The error of a failed run: the last traceback line (``ExcType: message``), else the last
    non-empty line of stderr."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return ""
    if "Traceback (most recent call last):" in stderr:
        for ln in reversed(lines):
            if ln and not ln.startswith((" ", "\t")):
                return ln[:500]
    return lines[-1][:500]


# --------------------------------------------------------------------------- one run
class _Job:
    """One program: its directories, process and result. ``start`` / ``done`` / ``kill`` /
    ``collect`` let :func:`run_many` keep several in flight from one thread."""

    def __init__(self, code: str, timeout: float, switch_uid: bool | None = None,
                 interpreter: str | None = None, cpu_limit: float | None = None):
        self.code, self.timeout, self.cpu_limit = code, float(timeout), cpu_limit
        self.switch_uid = _is_root() if switch_uid is None else switch_uid
        self.interpreter = interpreter or sandbox_interpreter(self.switch_uid)
        self.proc = None
        self.slot = None
        self.root = None
        self.pidfd = None
        self.status_r = None
        self.status = None
        self.timed_out = False
        self.t0 = self.deadline = 0.0

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vrr-sandbox-"))
        try:
            self._start()
        except BaseException:
            self.cleanup()
            raise

    def _start(self) -> None:
        os.chmod(self.root, 0o711)  # the sandbox uid may pass through, not list
        work, out = self.root / "work", self.root / "out"
        work.mkdir(mode=0o700)
        out.mkdir(mode=0o700)  # root-only: the program cannot touch its own captured output
        (work / PROGRAM_NAME).write_text(self.code, encoding="utf-8", errors="surrogatepass")
        uid = None
        if self.switch_uid:
            self.slot = _UidSlot()
            uid = self.slot.uid
            os.chown(work, uid, uid)
            os.chown(work / PROGRAM_NAME, uid, uid)
        self.uid = uid
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work),
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        self.stdout_path, self.stderr_path = out / "stdout", out / "stderr"
        status_r, status_w = os.pipe()
        self.status_r = status_r
        try:
            with open(self.stdout_path, "wb") as so, open(self.stderr_path, "wb") as se:
                self.t0 = time.monotonic()
                self.deadline = self.t0 + self.timeout
                self.proc = subprocess.Popen(
                    [self.interpreter, "-s", "-S", "-B", "-c", _BOOTSTRAP, str(status_w), self.interpreter,
                     PROGRAM_NAME],
                    cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=so, stderr=se, close_fds=True,
                    pass_fds=(status_w,), start_new_session=True,
                    preexec_fn=_make_preexec(_limits(self.timeout, self.switch_uid, self.cpu_limit), uid))
        finally:
            os.close(status_w)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def done(self) -> bool:
        return self.proc.poll() is not None

    def _read_status(self) -> dict:
        if self.status is None and self.status_r is not None:
            os.set_blocking(self.status_r, False)
            try:
                raw = os.read(self.status_r, 4096)
            except OSError:
                raw = b""
            try:
                self.status = json.loads(raw.decode()) if raw else {}
            except ValueError:
                self.status = {}
        return self.status or {}

    def kill(self) -> None:
        """Kill the program's whole tree: the keeper, PID 1 of the namespace (by pidfd: no pid reuse),
        whose death takes every process of the namespace and lets the bootstrap reap it and exit; then
        the process group, for runs without a PID namespace. Only processes this job started
        are signalled."""
        if self.proc is None:
            return
        init = self._read_status().get("init")
        if init and self.proc.poll() is None:
            try:
                fd = os.pidfd_open(init)
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                finally:
                    os.close(fd)
                self.proc.wait(timeout=2)
            except (AttributeError, OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable process
            pass

    def collect(self) -> SandboxResult:
        """The result, after the process ended or was killed; removes the temporary directory."""
        seconds = time.monotonic() - self.t0
        status = self._read_status()
        pid_isolated = bool(status.get("pid")) and status.get("pid") != _own_ns("pid")
        if not pid_isolated:  # stragglers that kept the group (e.g. `sleep 100 &`) die now
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        stdout, cut_out = _tail(self.stdout_path)
        stderr, cut_err = _tail(self.stderr_path)
        rc = self.proc.returncode
        if self.timed_out:
            error = f"timeout after {self.timeout:g} s"
        elif self.cpu_limit is not None and rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU, -signal.SIGKILL, 137) \
                and "VRR-FAIL" not in stderr:
            error = f"cpu time limit of {self.cpu_limit:g} s exceeded"
        elif rc == 0:
            error = ""
        else:
            error = error_line(stderr) or _signal_text(rc)
        res = SandboxResult(
            passed=(rc == 0 and not self.timed_out), returncode=rc, timed_out=self.timed_out,
            stdout=stdout, stderr=stderr, error=error, seconds=round(seconds, 3),
            net_isolated=bool(status.get("net")) and status.get("net") != _own_ns("net"),
            pid_isolated=pid_isolated, uid=self.uid, interpreter=self.interpreter,
            output_truncated=cut_out or cut_err)
        self.cleanup()
        return res

    def cleanup(self) -> None:
        for fd_name in ("pidfd", "status_r"):
            fd = getattr(self, fd_name)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, fd_name, None)
        if self.slot is not None:
            self.slot.release()
            self.slot = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)  # rmtree never follows the program's symlinks
            self.root = None


def _signal_text(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    if sig:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {rc}"


# --------------------------------------------------------------------------- public API
def run_python(code: str, timeout: float = DEFAULT_TIMEOUT, *, switch_uid: bool | None = None,
               interpreter: str | None = None, cpu_limit: float | None = None) -> SandboxResult:
    """Run one Python program in the sandbox (module docstring) and wait for it, at most
    ``timeout`` seconds of wall time (App. B: 5 s) and, with ``cpu_limit``, that many CPU seconds."""
    return run_many([code], timeout=timeout, parallel=1, switch_uid=switch_uid, interpreter=interpreter,
                    cpu_limit=cpu_limit)[0]


def run_many(codes: Sequence[str], timeout: float = DEFAULT_TIMEOUT, parallel: int = 2, progress: bool = False,
             desc: str = "sandbox", *, switch_uid: bool | None = None,
             interpreter: str | None = None, cpu_limit: float | None = None) -> list[SandboxResult]:
    """Run many programs, ``parallel`` at a time (each with its own timeout), from this one
    thread; results in input order. ``progress`` shows a tqdm bar. ``cpu_limit`` makes CPU seconds
    the limit (a loaded machine then cannot turn a correct program into a timeout), with ``timeout``
    as the wall-clock backstop for programs that sleep."""
    if parallel < 1:
        raise ValueError("parallel must be >= 1")
    pending = deque(enumerate(codes))
    results: list[SandboxResult | None] = [None] * len(pending)
    running: list[tuple[int, _Job]] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm  # lazy: only batch users with a bar need it

        bar = tqdm(total=len(pending), desc=desc)
    try:
        while pending or running:
            while pending and len(running) < parallel:
                i, code = pending.popleft()
                job = _Job(code, timeout, switch_uid=switch_uid, interpreter=interpreter, cpu_limit=cpu_limit)
                job.start()
                running.append((i, job))
            _wait_any([job for _, job in running])
            still = []
            for i, job in running:
                if not job.done() and time.monotonic() >= job.deadline:
                    job.timed_out = True
                    job.kill()
                if job.done():
                    results[i] = job.collect()
                    if bar is not None:
                        bar.update(1)
                else:
                    still.append((i, job))
            running = still
    finally:
        for _, job in running:  # interrupted: leave nothing behind
            job.kill()
            job.cleanup()
        if bar is not None:
            bar.close()
    return results  # type: ignore[return-value]


def _wait_any(jobs: list[_Job]) -> None:
    """Block until a job's process exits or the nearest deadline passes."""
    wait = max(0.0, min(j.deadline for j in jobs) - time.monotonic())
    fds = [j.pidfd for j in jobs if j.pidfd is not None]
    if len(fds) == len(jobs):
        try:
            select.select(fds, [], [], wait)
            return
        except OSError as e:  # pragma: no cover - EINTR is retried by Python
            if e.errno != errno.EINTR:
                raise
    time.sleep(min(wait, 0.005))


_CAPABILITIES: dict | None = None


def sandbox_capabilities() -> dict:
    """What the sandbox achieves on this machine, from one trivial probe run (cached):
    ``{"uid": ..., "net_isolated": ..., "pid_isolated": ..., "interpreter": ...}``."""
    global _CAPABILITIES
    if _CAPABILITIES is None:
        r = run_python("import os\nprint(os.getuid())", timeout=10.0)
        if not r.passed:
            raise SandboxError(f"the sandbox cannot run a trivial program: {r.error or r.stderr[-500:]}")
        _CAPABILITIES = {"uid": r.uid, "net_isolated": r.net_isolated, "pid_isolated": r.pid_isolated,
                         "interpreter": r.interpreter, "root": _is_root()}
    return dict(_CAPABILITIES)
