"""Run untrusted Python (model-written code) inside bubblewrap (App. B: MBPP validity is "sandboxed
unit tests ... 5-second timeout").

Every program runs in a fresh ``bwrap`` sandbox (bubblewrap, the isolation tool Flatpak builds on;
Debian package ``bubblewrap``, installed by ``make env``). What a program sees and may use:

* **filesystem**: read-only ``/usr`` (with the usual ``/lib``, ``/lib64``, ``/bin`` links), the
  interpreter's own prefix (its standard library), and the allowed third-party packages
  (:data:`ALLOWED_PACKAGES`) under ``/opt/vrr-site``; its program at ``/sandbox/main.py``, read-only.
  ``/tmp`` and ``/dev/shm`` are private tmpfs mounts of at most :data:`TMPFS_BYTES` each that vanish
  with the sandbox. None of the repository, ``../shared``, the home folder, ``/etc`` or the host's
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
code in the project's own process: use this module.

Call it from one thread at a time; :func:`run_many` overlaps several programs from that one thread.
"""
from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

DEFAULT_TIMEOUT = 5.0          # seconds (App. B: MBPP unit tests, 5 s timeout)
MEMORY_LIMIT = 1 << 30         # bytes, all processes of one run together (cgroup)
TASK_LIMIT = 256               # processes + threads of one run together (cgroup pids.max)
TMPFS_BYTES = 64 << 20         # size of the private /tmp and /dev/shm (also charged to MEMORY_LIMIT)
FILE_SIZE_LIMIT = 10 << 20     # RLIMIT_FSIZE, bytes per file written
OPEN_FILES_LIMIT = 256         # RLIMIT_NOFILE
OUTPUT_CAP = 64 << 10          # bytes of stdout / stderr read back (the tail)
WEAK_PROCESS_SLOTS = 8         # without a cgroup: RLIMIT_AS = MEMORY_LIMIT / this, RLIMIT_NPROC = this
SANDBOX_UID = 65534            # "nobody" inside the user namespace
ALLOWED_PACKAGES = ("numpy",)  # third-party packages a program may import (besides the standard library)
PROGRAM_PATH = "/sandbox/main.py"
SITE_DIR = "/opt/vrr-site"
CGROUP_PREFIX = "vrr-sandbox"

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


# --------------------------------------------------------------------------- machine facts
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


# --------------------------------------------------------------------------- cgroups
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
        name = f"{CGROUP_PREFIX}-{os.getpid()}-{_Cgroup._count}-{time.monotonic_ns()}"
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
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            try:
                (self.dirs[0] / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still exiting
                    time.sleep(0.01)


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


# --------------------------------------------------------------------------- one run
def _bwrap_argv(program: Path, hash_seed: int) -> tuple[list[str], str]:
    exe, prefix = interpreter()
    argv = [bwrap_path(), "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr"]
    for top in ("lib", "lib64", "lib32", "bin", "sbin"):
        host = Path("/", top)
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{top}"]
    if not prefix.startswith("/usr/"):
        argv += ["--ro-bind", prefix, prefix]
    if not exe.startswith((prefix + "/", "/usr/")):
        argv += ["--ro-bind", exe, exe]
    for name, folder in _allowed_package_dirs():
        argv += ["--ro-bind", str(folder), f"{SITE_DIR}/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp", "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm",
             "--ro-bind", str(program), PROGRAM_PATH, "--chdir", "/tmp", "--clearenv",
             "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", "/tmp",
             "--setenv", "TMPDIR", "/tmp", "--setenv", "PYTHONPATH", SITE_DIR,
             "--setenv", "PYTHONHASHSEED", str(int(hash_seed)), "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             "--", exe, "-s", "-S", "-B", PROGRAM_PATH]
    return argv, exe


def _limits(cpu_seconds: float, weak: bool) -> list[tuple[int, tuple[int, int]]]:
    cpu = max(1, int(math.ceil(cpu_seconds)))
    wanted = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT)),
              (resource.RLIMIT_NOFILE, (OPEN_FILES_LIMIT, OPEN_FILES_LIMIT)), (resource.RLIMIT_CORE, (0, 0))]
    if weak:
        per = MEMORY_LIMIT // WEAK_PROCESS_SLOTS
        wanted += [(resource.RLIMIT_AS, (per, per)), (resource.RLIMIT_NPROC, (WEAK_PROCESS_SLOTS, WEAK_PROCESS_SLOTS))]
    out = []
    for res, (soft, hard) in wanted:
        cur_hard = resource.getrlimit(res)[1]
        if cur_hard != resource.RLIM_INFINITY and os.geteuid() != 0:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        out.append((res, (soft, hard)))
    return out


def _make_preexec(limits, cgroup_procs: list[str]):
    """Run in the child between fork and exec: join the run's cgroup (so bubblewrap and all it starts
    are bounded together), then set the per-process limits."""

    def preexec():
        pid = str(os.getpid())
        for f in cgroup_procs:
            with open(f, "w") as fh:
                fh.write(pid)
        for res, lim in limits:
            resource.setrlimit(res, lim)

    return preexec


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


class _Job:
    """One program: its host-side folder (program and captured output, never visible to the program
    but for its read-only ``main.py``), its cgroup, process and result."""

    def __init__(self, code: str, timeout: float, cpu_limit: float | None, hash_seed: int, allow_weak: bool | None):
        self.code, self.timeout = code, float(timeout)
        self.cpu_limit = float(cpu_limit) if cpu_limit is not None else self.timeout
        self.hash_seed = int(hash_seed)
        self.allow_weak = allow_weak
        self.proc = None
        self.cgroup = None
        self.root = None
        self.pidfd = None
        self.timed_out = False
        self.t0 = self.deadline = 0.0
        self.interpreter = ""
        self.status_read = None

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vrr-sandbox-"))  # 0700, ours
        try:
            self._start()
        except BaseException:
            self.cleanup()
            raise

    def _start(self) -> None:
        program = self.root / "main.py"
        program.write_text(self.code, encoding="utf-8", errors="surrogatepass")
        os.chmod(program, 0o644)
        roots = cgroup_support()
        weak = roots is None
        if weak and not _weak_allowed(self.allow_weak):
            raise SandboxError(_no_cgroup_message())
        self.cgroup = None if weak else _Cgroup(roots)
        argv, self.interpreter = _bwrap_argv(program, self.hash_seed)
        # bubblewrap reads its options from a file (so its command line, which every process in the
        # sandbox can read as /proc/1/cmdline, names no host folder but the interpreter's) and reports on a pipe only it
        # holds whether it started the program (--json-status-fd: "exit-code" is written only after
        # the program was executed).
        args_path = self.root / "bwrap-args"
        split = argv.index("--")  # bubblewrap takes the command itself from its command line
        args_path.write_bytes(b"".join(a.encode() + b"\0" for a in argv[1:split]))
        self.status_read, status_write = os.pipe()
        os.set_blocking(self.status_read, False)
        self.stdout_path, self.stderr_path = self.root / "stdout", self.root / "stderr"
        try:
            with open(self.stdout_path, "wb") as so, open(self.stderr_path, "wb") as se, \
                    open(args_path, "rb") as args_file:
                self.t0 = time.monotonic()
                self.deadline = self.t0 + self.timeout
                self.proc = subprocess.Popen(
                    [argv[0], "--json-status-fd", str(status_write), "--args", str(args_file.fileno()), *argv[split:]],
                    stdin=subprocess.DEVNULL, stdout=so, stderr=se, close_fds=True,
                    pass_fds=(args_file.fileno(), status_write), start_new_session=True, env=LAUNCH_ENV,
                    preexec_fn=_make_preexec(_limits(self.cpu_limit, weak),
                                             self.cgroup.procs_files() if self.cgroup else []))
        finally:
            os.close(status_write)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def done(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> None:
        """Kill bubblewrap and every process of the run (its cgroup; its process group without one)."""
        if self.proc is None:
            return
        try:
            self.proc.kill()
        except OSError:
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - an unkillable process
            pass

    def collect(self) -> SandboxResult:
        """The result, after the process ended or was killed; removes the run's folder and cgroup."""
        seconds = time.monotonic() - self.t0
        memory_hit = self.cgroup.memory_hit() if self.cgroup is not None else False
        self.kill()  # stragglers of an ended run die now
        stdout, cut_out = _tail(self.stdout_path)
        stderr, cut_err = _tail(self.stderr_path)
        rc = self.proc.returncode
        cpu_hit = rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU)
        if self._setup_failed(rc):
            self.cleanup()
            raise SandboxError(f"bubblewrap could not start the sandbox (exit status {rc}): {stderr.strip()[:500]}")
        if self.timed_out:
            error = f"timeout after {self.timeout:g} s"
        elif cpu_hit:
            error = f"cpu time limit of {self.cpu_limit:g} s exceeded"
        elif rc == 0:
            error = ""
        else:
            error = error_line(stderr) or _signal_text(rc)
            if memory_hit:
                error = f"memory limit of {MEMORY_LIMIT >> 20} MiB reached ({error})"
        res = SandboxResult(
            passed=(rc == 0 and not self.timed_out), returncode=rc, timed_out=self.timed_out, stdout=stdout,
            stderr=stderr, error=error, seconds=round(seconds, 3), interpreter=self.interpreter,
            hash_seed=self.hash_seed, output_truncated=cut_out or cut_err, cpu_limited=cpu_hit,
            memory_limited=memory_hit)
        self.cleanup()
        return res

    def _status(self) -> list[dict]:
        """What bubblewrap wrote on its status pipe (JSON documents, one a line)."""
        data = b""
        while self.status_read is not None:
            try:
                chunk = os.read(self.status_read, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        out = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def _setup_failed(self, rc: int | None) -> bool:
        """Whether bubblewrap exited on its own without executing the program: no "exit-code" on its
        status pipe, which it writes only once the program was executed. Decided by bubblewrap's own
        report and exit status, never by what the program wrote (a program that prints "bwrap:" and
        fails is the program's failure). A run killed here (timeout) or by the kernel (cgroup memory) is
        the program's too."""
        if self.timed_out or rc is None or rc <= 0:
            return False
        return not any("exit-code" in doc for doc in self._status())

    def cleanup(self) -> None:
        if self.status_read is not None:
            os.close(self.status_read)
            self.status_read = None
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()
            self.cgroup = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# --------------------------------------------------------------------------- public API
def run_python(code: str, timeout: float = DEFAULT_TIMEOUT, *, cpu_limit: float | None = None, hash_seed: int = 0,
               allow_weak: bool | None = None) -> SandboxResult:
    """Run one Python program in the sandbox (module docstring) and wait for it: at most ``timeout``
    seconds of wall time and ``cpu_limit`` (default: ``timeout``) CPU seconds per process."""
    return run_many([code], timeout=timeout, parallel=1, cpu_limit=cpu_limit, hash_seeds=[hash_seed],
                    allow_weak=allow_weak)[0]


def run_many(codes: Sequence[str], timeout: float = DEFAULT_TIMEOUT, parallel: int = 2, progress: bool = False,
             desc: str = "sandbox", *, cpu_limit: float | None = None, hash_seeds: Sequence[int] | None = None,
             allow_weak: bool | None = None) -> list[SandboxResult]:
    """Run many programs, ``parallel`` at a time (each with its own limits), from this one thread;
    results in input order. ``hash_seeds[i]`` is program i's ``PYTHONHASHSEED`` (default 0).
    ``progress`` shows a tqdm bar."""
    if parallel < 1:
        raise ValueError("parallel must be >= 1")
    seeds = list(hash_seeds) if hash_seeds is not None else [0] * len(codes)
    if len(seeds) != len(codes):
        raise ValueError(f"hash_seeds has {len(seeds)} entries for {len(codes)} programs")
    bwrap_path()
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
                job = _Job(code, timeout, cpu_limit, seeds[i], allow_weak)
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
