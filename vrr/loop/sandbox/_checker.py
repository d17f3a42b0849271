"""A long-lived checker in another process, spoken to in JSON lines (App. B's official checkers).

Official checkers that must not run in our process or interpreter (math-verify with its SIGALRM
timeouts; the bfcl-eval AST checker in its own venv) run in a worker that reads one request per
line and answers one verdict per line; :class:`CheckerProcess` keeps it alive across batches,
enforces a deadline per request, and restarts it after a timeout or a crash.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import select
import subprocess
import tempfile
import threading
import time
import weakref

KILL_SECONDS = 30.0   # a worker silent this long on one request is killed and restarted


class _Timeout(Exception):
    pass


class _Died(Exception):
    pass


_LIVE: "weakref.WeakSet[CheckerProcess]" = weakref.WeakSet()


def _seconds(value, name: str) -> float:
    """A time limit: a finite number of seconds > 0 (0 would not mean "the default", nor "no limit")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"CheckerProcess: field '{name}': expected a finite number of seconds > 0, got {value!r}")
    return float(value)


class CheckerProcess:
    """A long-lived checker in another process, spoken to in JSON lines (one request, one verdict).

    ``argv()`` gives the command (resolved at first use, so a missing interpreter raises then). The
    worker first writes a ``{"ready": ...}`` line, then one verdict per request. Requests go one at a
    time with a deadline: a worker that misses it is killed (its item is invalid, "timeout") and
    restarted for the next item; a worker that dies marks its item invalid with its stderr tail.
    Thread-safe (one lock), fork-aware (a child process starts its own worker), killed at exit.
    Used by MATH-500 (math-verify) and BFCL (the bfcl-eval AST checker in its own venv).
    """

    def __init__(self, argv, name: str, item_seconds: float = KILL_SECONDS, start_seconds: float = 180.0,
                 env: dict | None = None):
        self._argv, self.name, self.env = argv, name, env
        self.item_seconds = _seconds(item_seconds, "item_seconds")
        self.start_seconds = _seconds(start_seconds, "start_seconds")
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = None
        self._buf = b""
        self._err = None
        self.info: dict = {}
        self.starts = 0  # > 1 after a timeout or a crash
        _LIVE.add(self)

    # -- process management
    def _start(self) -> None:
        self._err = tempfile.TemporaryFile()
        self._buf = b""
        # Same process group as the caller: a run killed as a group takes its checker with it; a
        # worker whose parent dies exits at the EOF of its stdin.
        self._proc = subprocess.Popen(self._argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, env=self.env)
        self._owner = os.getpid()
        self.starts += 1
        try:
            ready = json.loads(self._readline(time.monotonic() + self.start_seconds))
        except (_Timeout, _Died, ValueError) as exc:
            tail = self._stderr_tail()
            self.close()
            raise RuntimeError(f"{self.name}: the checker worker did not start ({type(exc).__name__}); "
                               f"its stderr ends with:\n{tail}") from None
        self.info = ready

    def _alive(self) -> bool:
        return self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None

    def close(self) -> None:
        """Kill the worker (it is restarted on the next request)."""
        proc, self._proc = self._proc, None
        if proc is not None and self._owner == os.getpid():
            try:
                proc.kill()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        if self._err is not None:
            self._err.close()
            self._err = None

    def _stderr_tail(self, n: int = 1500) -> str:
        if self._err is None:
            return ""
        try:
            self._err.seek(0)
            return self._err.read().decode("utf-8", "replace")[-n:]
        except (OSError, ValueError):
            return ""

    def _readline(self, deadline: float) -> bytes:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise _Timeout
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _Died
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    # -- requests
    def run(self, requests: list[dict], item_seconds: float | None = None) -> list[dict]:
        """One verdict dict per request (``valid``, ``error``, ...), in order. ``item_seconds``: the limit of
        each request (None: the worker's own); a limit that is not a positive finite number is an error."""
        limit = self.item_seconds if item_seconds is None else _seconds(item_seconds, "item_seconds")
        out = []
        with self._lock:
            for req in requests:
                if not self._alive():
                    if self._proc is not None:
                        self.close()
                    self._start()
                try:
                    self._proc.stdin.write((json.dumps(req) + "\n").encode("utf-8"))
                    self._proc.stdin.flush()
                    out.append(json.loads(self._readline(time.monotonic() + limit)))
                except _Timeout:
                    self.close()
                    out.append({"valid": False, "error": f"checker timeout after {limit:g} s",
                                "error_type": "vrr:timeout"})
                except (_Died, BrokenPipeError, ValueError) as exc:
                    tail = self._stderr_tail(500)
                    self.close()
                    out.append({"valid": False, "error": f"checker worker died ({type(exc).__name__}): {tail}",
                                "error_type": "vrr:worker_died"})
        return out


@atexit.register
def _close_all() -> None:
    for w in list(_LIVE):
        w.close()
