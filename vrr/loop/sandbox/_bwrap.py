"""Starting bubblewrap: one program (:class:`_Job`) and a batch of them (:func:`run_many`), each with its
limits and a :class:`SandboxResult` (what each program sees and may use: :mod:`vrr.loop.sandbox`). The only
module that runs a program in bubblewrap (``_machine`` only asks it for its version)."""
from __future__ import annotations

import errno
import json
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Sequence

from ._cgroup import _Cgroup, cgroup_parents, cgroup_support
from ._limits import (CGROUP_PREFIX, DEFAULT_TIMEOUT, FILE_SIZE_LIMIT, LAUNCH_ENV, MEMORY_LIMIT, OPEN_FILES_LIMIT,
                      OUTPUT_CAP, PROGRAM_PATH, PROGRAM_TMPFS_BYTES, ROOT_TMPFS_BYTES, SANDBOX_UID, SITE_DIR,
                      TMPFS_BYTES, WEAK_PROCESS_SLOTS, SandboxError, SandboxResult)
from ._machine import _allowed_package_dirs, _no_cgroup_message, _weak_allowed, bwrap_path, interpreter
from ._reaper import LAUNCHER_FILE, owner_tag, remove_stale, start_guard, start_ticks


def _bwrap_argv(program: Path, hash_seed: int) -> tuple[list[str], str]:
    exe, prefix = interpreter()
    argv = [bwrap_path(), "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--hostname", "sandbox",
            # every writable mount has a size of its own: the root first (bubblewrap's own root tmpfs has none),
            # everything else is mounted on it
            "--size", str(ROOT_TMPFS_BYTES), "--tmpfs", "/",
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
             "--size", str(PROGRAM_TMPFS_BYTES), "--tmpfs", os.path.dirname(PROGRAM_PATH),
             "--ro-bind", str(program), PROGRAM_PATH,
             # the root, /sandbox and /dev hold only mount points: read-only once everything is mounted
             "--remount-ro", os.path.dirname(PROGRAM_PATH), "--remount-ro", "/dev", "--remount-ro", "/",
             "--chdir", "/tmp", "--clearenv",
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
        _guard_this_process()
        self.root = Path(tempfile.mkdtemp(prefix=f"{CGROUP_PREFIX}-{owner_tag()}-"))  # 0700, ours; whose: _reaper
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
        # the guard kills bubblewrap's process group by this record if we die (a run without a cgroup)
        (self.root / LAUNCHER_FILE).write_text(f"{self.proc.pid} {start_ticks(self.proc.pid)}")
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


_GUARD: dict = {"pid": 0, "proc": None}


def _guard_this_process() -> None:
    """Before this process's first run (and again after a fork, or if its guard died): remove what dead
    owners left behind, saying so, and start this process's guard (:mod:`._reaper`)."""
    guard = _GUARD["proc"]
    if _GUARD["pid"] == os.getpid() and guard is not None and guard.poll() is None:
        return
    parents, tmp = cgroup_parents(), tempfile.gettempdir()
    if _GUARD["pid"] != os.getpid():
        remove_stale(CGROUP_PREFIX, parents, tmp)
    _GUARD.update(pid=os.getpid(), proc=start_guard(CGROUP_PREFIX, parents, tmp))


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
                running.append((i, job))   # before start: an interrupt inside start still kills what it spawned
                job.start()
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
