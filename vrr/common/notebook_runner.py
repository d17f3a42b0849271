"""The notebook runner behind ``python -m vrr notebook`` (what make runs): chains of notebooks executed with
papermill on one or more kernels, each output written whole or not at all, every process and temporary gone
when the run is stopped (:func:`run_notebook_chains`)."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml

from .notebook_engine import SHARED_CLIENT_ENGINE, register_shared_client_engine
from .paths import REPO_ROOT
from .processes import death_signal_preexec, owner_gone, owner_tag, set_death_signal


MAKE_PID_ENV = "VRR_MAKE_PID"   # the Makefile exports make's own pid: its commands can tell it has died


def die_with_parent(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux ``PR_SET_PDEATHSIG``),
    so that ``make`` killed by any signal, SIGKILL included, takes its notebooks with it. If the parent
    is already gone when this runs, ``sig`` is raised at once: either it changed during the call, or
    the ``make`` named in ``VRR_MAKE_PID`` has exited and is no longer our parent (it died before this
    process got here)."""
    import signal

    parent = os.getppid()
    set_death_signal(sig)
    make = os.environ.get(MAKE_PID_ENV, "")
    make_gone = make.isdigit() and int(make) != parent and not Path(f"/proc/{make}").exists()
    if os.getppid() != parent or make_gone:  # the parent died before prctl took effect
        signal.raise_signal(sig)


# --------------------------------------------------------------------------- one notebook of the chain
PAPERMILL_CLOUD_IO = ("boto3", "azure", "gcsfs", "pyarrow", "github")


def _import_papermill():
    """papermill without its cloud-storage handlers (S3, Azure, GCS, HDFS, GitHub): the chain's notebooks
    are local files, and importing boto3 and the others would cost every notebook run ~0.15 s of CPU.
    papermill skips a handler whose library does not import; the block is lifted right after."""
    if "papermill" in sys.modules:
        return sys.modules["papermill"]
    blocked = [name for name in PAPERMILL_CLOUD_IO if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None
    try:
        import papermill
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return papermill


@dataclass(frozen=True)
class NotebookRun:
    """One notebook to execute: its source, where the executed copy goes, and its papermill parameters."""

    notebook: Path
    output: Path
    parameters: dict


def parse_notebook_runs(tokens: Sequence[str]) -> list[NotebookRun]:
    """``NB OUT [-p NAME VALUE]... [NB OUT [-p NAME VALUE]...]...`` -> the runs, in order.

    A ``-p`` belongs to the notebook before it; its value is read as YAML (40 is an int, a,b a string)."""
    runs: list[NotebookRun] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "-p":
            if not runs:
                raise SystemExit("python -m vrr notebook: -p comes after the notebook it belongs to")
            if i + 2 >= len(tokens):
                raise SystemExit(f"python -m vrr notebook: -p takes NAME VALUE (got {list(tokens[i + 1:])})")
            runs[-1].parameters[tokens[i + 1]] = yaml.safe_load(tokens[i + 2])
            i += 3
        else:
            if i + 1 >= len(tokens) or tokens[i + 1] == "-p":
                raise SystemExit(f"python -m vrr notebook: {tokens[i]} needs an output path after it")
            runs.append(NotebookRun(Path(tokens[i]), Path(tokens[i + 1]), {}))
            i += 2
    if not runs:
        raise SystemExit("python -m vrr notebook: give NOTEBOOK OUTPUT [-p NAME VALUE]...")
    return runs


def parse_notebook_chains(tokens: Sequence[str]) -> tuple[list[list[NotebookRun]], int]:
    """``[--jobs J] RUNS [--chain RUNS]...`` (RUNS as in :func:`parse_notebook_runs`) -> (the chains, J).

    ``--chain`` begins another chain: its notebooks run in order in one kernel, possibly beside the others."""
    tokens = list(tokens)
    jobs = 1
    if tokens[:1] == ["--jobs"]:
        if len(tokens) < 2 or not tokens[1].isdigit() or int(tokens[1]) < 1:
            raise SystemExit(f"python -m vrr notebook: --jobs takes a number of kernels >= 1 (got {tokens[1:2]})")
        jobs, tokens = int(tokens[1]), tokens[2:]
    chains, part = [], []
    for token in tokens + ["--chain"]:
        if token == "--chain":
            if part:
                chains.append(parse_notebook_runs(part))
            elif chains:
                raise SystemExit("python -m vrr notebook: --chain with no notebook after it")
            part = []
        else:
            part.append(token)
    if not chains:
        raise SystemExit("python -m vrr notebook: give NOTEBOOK OUTPUT [-p NAME VALUE]...")
    return chains, jobs


# The kernels keep no output cache (Out, _1, ...: with one, each namespace reset runs a full garbage collection,
# ~0.07 s per notebook once scipy is loaded) and no input history (a SQLite file in the user's home, which
# concurrent kernels would share). Neither changes what a notebook computes or shows.
KERNEL_ARGUMENTS = ("--InteractiveShell.cache_size=0", "--HistoryManager.enabled=False")
RUNNING_PREFIX = ".vrr-running-"   # a runner's folder of temporary notebooks, beside its outputs
KERNEL_PREFIX = "vrr-kernel-"       # a runner's folder of kernel sockets, in the temporary folder


def remove_stale_runner_folders(folders: Sequence[Path]) -> list[Path]:
    """Remove the temporary folders (:data:`RUNNING_PREFIX` in ``folders``, :data:`KERNEL_PREFIX` in the
    temporary folder) of notebook runners that are gone (SIGKILL gives a runner no chance to remove its
    own), saying so on stderr; returns what was removed."""
    import shutil
    import tempfile

    places = [(Path(f), RUNNING_PREFIX) for f in folders] + [(Path(tempfile.gettempdir()), KERNEL_PREFIX)]
    removed = []
    for folder, prefix in places:
        try:
            names = [n for n in os.listdir(folder) if n.startswith(prefix)]
        except OSError:
            continue
        for name in names:
            m = re.match(r"(\d+)-t(\d+)-n(\d+)(-|$)", name[len(prefix):])
            if m and owner_gone(int(m[1]), int(m[2]), int(m[3])):
                shutil.rmtree(folder / name, ignore_errors=True)
                removed.append(folder / name)
                print(f"vrr notebook: removed {folder / name}, left by runner process {m[1]}, which was killed",
                      file=sys.stderr, flush=True)
    return removed


def _run_log(chains: Sequence[Sequence[NotebookRun]]) -> Path:
    """Where a run keeps the stderr of papermill and its kernels (shown only on failure): beside a single chain's
    outputs, else in the folder that holds every chain's."""
    if len(chains) == 1:
        first, last = chains[0][0].output, chains[0][-1].output
        return first.with_name(first.name + ".log") if len(chains[0]) == 1 else \
            first.with_name(f"{first.stem}..{last.stem}.log")
    common = Path(os.path.commonpath([str(run.output.parent.resolve()) for chain in chains for run in chain]))
    return common / "notebook-chains.log"


def run_notebook_chains(chains: Sequence[Sequence[NotebookRun]], jobs: int = 1,
                        cwd: str | os.PathLike | None = None) -> int:
    """Execute chains of notebooks with papermill on up to ``jobs`` kernels; each output appears under its name
    only when that notebook succeeded.

    A chain's notebooks run in order in one kernel; each kernel takes the next chain in the order given as soon as
    it is free (``make reproduce`` passes one chain per setting, the longest first). A kernel is started once and
    its namespace is reset between notebooks (``vrr.common.notebook_engine``): a notebook sees none of the previous
    one's variables, but the libraries imported before stay loaded, so the start and the imports are paid once per
    kernel, not once per setting (``docs/profile.md``). Each notebook runs into ``<output>.tmp.ipynb`` inside this
    runner's own folder beside it (``.vrr-running-<pid>-t<start>-n<ns>``); success renames it to ``output``; a
    failure keeps it as ``<output stem>.failed.ipynb`` and runs nothing more of that chain, while the other chains
    go on (the kernel is started again if the failure took it down); the log is printed at the end. SIGTERM,
    SIGINT and SIGHUP stop every kernel, and the death of the parent (``make``, by any signal) sends SIGTERM
    (:func:`die_with_parent`), so killing ``make`` stops the whole run and leaves no output that looks complete.
    The signal removes the runner's folders first: papermill never creates a folder, so whatever it is still
    writing, however slowly a kernel dies, no temporary notebook appears afterwards. The kernels have
    ``PR_SET_PDEATHSIG`` (SIGKILL) set: a runner killed by SIGKILL takes them with it, and the next runner
    removes the folders it left (:func:`remove_stale_runner_folders`). Returns the exit status (0 on success,
    1 when a notebook failed, 130 on a signal).

    When the environment variable ``VRR_NOTEBOOK_STARTED_LOG`` names a file, the output path of each notebook
    is appended to it, one line, as its kernel starts executing it: tests wait on that line to act while a
    given notebook runs (tests/test_make_signals.py).
    """
    import queue
    import shutil
    import signal
    import tempfile
    import threading

    chains = [list(chain) for chain in chains if chain]
    if not chains:
        raise ValueError("run_notebook_chains: no notebook to run")
    jobs = max(1, min(int(jobs), len(chains)))
    runs = [run for chain in chains for run in chain]
    owner = owner_tag()
    scratch = {Path(run.output.parent) / f"{RUNNING_PREFIX}{owner}" for run in runs}
    stopping = threading.Event()

    def remove_scratch():
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)

    def stop(signum, _frame):
        stopping.set()
        remove_scratch()
        raise KeyboardInterrupt(f"signal {signum}")

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)
    try:
        die_with_parent(signal.SIGTERM)
    except KeyboardInterrupt:
        print(f"INTERRUPTED: {runs[0].output} (the parent had already stopped; nothing run)", file=sys.stderr,
              flush=True)
        return 130
    papermill = _import_papermill()
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    # One BLAS thread per kernel: the kernels share the cores, and extra OpenBLAS threads only spin.
    # The printed numbers make no BLAS call (vrr.common.fpmath), so they do not depend on it.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for run in runs:
        run.output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_runner_folders(sorted({run.output.parent for run in runs}))
    for folder in scratch:   # made here only: once a signal removed them, nothing makes them again
        folder.mkdir(exist_ok=True)
    log = _run_log(chains)
    # IPC transport (Unix sockets in a private directory of this run) rather than TCP: concurrent runs
    # never race for a loopback port, and no other user of the machine can reach a kernel.
    socket_dir = tempfile.mkdtemp(prefix=f"{KERNEL_PREFIX}{owner}-")
    # Asynchronous kernel managers, as nbclient's own: their clients wait for a cell's output without blocking
    # the event loop, so that nbclient's check of the kernel's life runs and a kernel that dies ends its
    # notebook (DeadKernelError) instead of leaving the runner waiting forever.
    kernels = [AsyncKernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(socket_dir, f"kernel{i}"))
               for i in range(jobs)]
    pending: queue.SimpleQueue = queue.SimpleQueue()
    for chain in chains:
        pending.put(chain)
    current: list[NotebookRun | None] = [None] * jobs
    failures: list[tuple[NotebookRun, BaseException]] = []
    started_log = os.environ.get("VRR_NOTEBOOK_STARTED_LOG")

    def temporary(run: NotebookRun) -> Path:
        return run.output.parent / f"{RUNNING_PREFIX}{owner}" / (run.output.name + ".tmp.ipynb")

    def start_kernel(km):
        run_sync(km.start_kernel)(cwd=str(cwd or REPO_ROOT), extra_arguments=list(KERNEL_ARGUMENTS),
                                  preexec_fn=death_signal_preexec(signal.SIGKILL, os.getpid()))

    def execute_chains(i: int):
        # Runs in a worker thread: nbclient's own SIGTERM handler (installed only from the main thread)
        # would shut the kernel down gracefully and let the notebook go on; ours stops the run at once.
        km, engine = kernels[i], f"{SHARED_CLIENT_ENGINE}-{i}"
        shared = register_shared_client_engine(engine)
        try:
            while not stopping.is_set():
                try:
                    chain = pending.get_nowait()
                except queue.Empty:
                    return
                for run in chain:
                    if stopping.is_set():
                        return
                    if not run_sync(km.is_alive)():   # a failure before took the kernel down: a fresh one for the rest
                        if shared["client"] is not None:
                            shared["client"].stop_channels()
                            shared["client"] = None
                        start_kernel(km)
                    current[i] = run
                    print(f"[papermill] {run.notebook.name} -> {run.output}", flush=True)
                    if started_log:
                        with open(started_log, "a") as fh:
                            fh.write(f"{run.output}\n")
                    tmp = temporary(run)
                    try:
                        papermill.execute_notebook(str(run.notebook), str(tmp), parameters=run.parameters,
                                                   cwd=str(cwd or REPO_ROOT), progress_bar=False, log_output=False,
                                                   km=km, engine_name=engine)
                    except BaseException as exc:  # papermill's execution error carries the failing cell's traceback
                        if stopping.is_set():
                            return
                        print(exc, file=sys.stderr, flush=True)
                        failures.append((run, exc))
                        failed = run.output.with_name(run.output.stem + ".failed.ipynb")
                        if tmp.exists():
                            os.replace(tmp, failed)
                        break   # nothing after a failed notebook of this chain
                    os.replace(tmp, run.output)
                    run.output.with_name(run.output.stem + ".failed.ipynb").unlink(missing_ok=True)
                current[i] = None
        finally:
            if not stopping.is_set():
                current[i] = None
            if shared["client"] is not None:
                shared["client"].stop_channels()

    status, workers = 0, []
    saved_stderr = os.dup(2)
    with open(log, "w") as log_fh:
        os.dup2(log_fh.fileno(), 2)
        try:
            for km in kernels:   # all from this thread, before any worker: their PR_SET_PDEATHSIG is the runner's
                start_kernel(km)
            workers = [threading.Thread(target=execute_chains, args=(i,), name=f"vrr-notebooks-{i}", daemon=True)
                       for i in range(jobs)]
            for worker in workers:
                worker.start()
            for worker in workers:
                while worker.is_alive():
                    worker.join(0.2)
            status = 1 if failures else 0
        except KeyboardInterrupt:
            stopping.set()
            status = 130
        finally:
            if status == 130:
                remove_scratch()   # before the kernels are stopped: no late write of papermill lands anywhere
            for km in kernels:
                if km.has_kernel:
                    # every output is written by this process, not the kernel: nothing is lost by not waiting up
                    # to a second for its graceful exit
                    run_sync(km.shutdown_kernel)(now=True)
            for worker in workers:
                worker.join(30)   # a dead kernel ends its notebook's execution; wait for papermill's last write
            shutil.rmtree(socket_dir, ignore_errors=True)
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
    if status == 130:
        for run in [r for r in current if r is not None] or [runs[0]]:
            print(f"INTERRUPTED: {run.output} (nothing written; log {log})", file=sys.stderr, flush=True)
    elif failures:
        sys.stderr.write(log.read_text()[-8000:])
        for run, _exc in failures:
            failed = run.output.with_name(run.output.stem + ".failed.ipynb")
            print(f"FAILED: {run.output} (see {failed} and {log})", file=sys.stderr, flush=True)
    else:
        log.unlink(missing_ok=True)
    remove_scratch()
    return status
