"""Signals at random moments, with the sandbox in use, leave no process, cgroup, temporary folder or held lock.

Every wait here is on an event (a folder appears, a process exits, a line is written), bounded only by
:data:`PATIENCE`, minutes, so that a busy machine makes the tests slower, never red. Survivors are found by
:class:`test_processes.RunProcesses` (marker, process group, descent); a sandbox's cgroups and host folders are
found by their owner's pid in their names (``vrr-sandbox-<pid>-t<start>-...``).
"""
import fcntl
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from test_processes import RunProcesses, assert_no_survivor
from vrr.loop import sandbox

REPO = Path(__file__).resolve().parent.parent
PATIENCE = 600.0   # seconds: only a guard against a hung test, never a measure of speed
PREFIX = sandbox.CGROUP_PREFIX


def _cgroup_parents() -> list[str]:
    roots = sandbox.cgroup_support()
    assert roots is not None, "the machine offers no writable cgroup"
    return [roots["memory"], roots["pids"]] if roots["version"] == 1 else [roots["dir"]]


def _wait_for(what, message):
    end = time.monotonic() + PATIENCE
    while not what():
        assert time.monotonic() < end, message
        time.sleep(0.05)


def _owned(pids) -> list[Path]:
    """The sandbox cgroups and host folders made by any of ``pids``."""
    out = []
    for parent in _cgroup_parents() + [tempfile.gettempdir()]:
        for name in os.listdir(parent):
            if any(name.startswith(f"{PREFIX}-{pid}-") for pid in pids):
                out.append(Path(parent, name))
    return out


def _assert_nothing_left(run: RunProcesses):
    assert_no_survivor(run, within=PATIENCE)
    owners = set(run.seen)
    _wait_for(lambda: not _owned(owners), f"sandbox leftovers: {_owned(owners)}")


def _lock_is_free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- a process using the sandbox
SANDBOX_USER = """
import sys
from vrr.loop.sandbox import run_many
print("ready", flush=True)
while True:   # programs that sleep: the sandbox is always in use
    run_many(["import time\\ntime.sleep(600)\\n"] * 2, timeout=float(sys.argv[1]), parallel=2)
"""


def _start_sandbox_user(mark, wall=600.0):
    env = dict(os.environ, VRR_TEST_MARK=mark, PYTHONPATH=str(REPO))
    # SIGINT at its default in the child: a pytest-xdist worker ignores SIGINT, a child inherits that, and Python
    # then installs no KeyboardInterrupt handler, so the signal under test would never arrive
    proc = subprocess.Popen([sys.executable, "-c", SANDBOX_USER, str(wall)], env=env, stdout=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline() == "ready\n"
    _wait_for(lambda: len([p for p in _owned([proc.pid]) if str(p.parent) == _cgroup_parents()[0]]) == 2,
              "the sandbox programs did not start")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_process_killed_while_its_sandbox_runs_leaves_nothing(sig):
    """SIGKILL (and SIGTERM, whose default kills at once) gives the process no chance to clean up: its guard
    (a pidfd on it) kills the sandbox's processes and removes its cgroups and folders; SIGINT runs the cleanup
    in the process. The sandboxed programs sleep: they would live 600 s if left."""
    mark = uuid.uuid4().hex
    run = RunProcesses(mark)
    proc = _start_sandbox_user(mark)
    run.scan()
    assert len(run.scan()) >= 3   # the process, its guard, the bubblewrap processes
    proc.send_signal(sig)
    proc.wait(timeout=PATIENCE)
    _assert_nothing_left(run)


def test_the_next_run_removes_what_a_killed_owner_left_and_says_so(tmp_path):
    """What the guard would remove, left as if the guard were killed too: a cgroup holding a live process and a
    host folder, named for an owner that has exited. The next process's first run kills and removes them and
    says so on stderr; a live owner's are untouched. (The cgroup's process is killed and the cgroup removed by
    whichever process sweeps first, this run or a concurrent one.)"""
    gone = subprocess.Popen(["true"])
    start = int(Path(f"/proc/{gone.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    gone.wait()
    live = os.getpid()
    live_start = int(Path(f"/proc/{live}/stat").read_text().rsplit(")", 1)[1].split()[19])
    ns = os.stat("/proc/self/ns/pid").st_ino
    stale_name, live_name = f"{PREFIX}-{gone.pid}-t{start}-n{ns}-1", f"{PREFIX}-{live}-t{live_start}-n{ns}-99"
    elsewhere = f"{PREFIX}-{gone.pid}-t{start}-n{ns + 1}-1"   # the same pid in another PID namespace: not ours
    sleeper = subprocess.Popen(["sleep", "600"])
    made = []
    try:
        for parent in _cgroup_parents():
            for name in (stale_name, live_name, elsewhere):
                Path(parent, name).mkdir()
                made.append(Path(parent, name))
            Path(parent, stale_name, "cgroup.procs").write_text(str(sleeper.pid))
        # the host folder in a temporary directory of its own: every process's first run sweeps dead owners'
        # leftovers, so a concurrent test may take the shared cgroups first, but only this run sees this folder
        own_tmp = tmp_path / "tmp"
        own_tmp.mkdir()
        folder = own_tmp / (stale_name + "-abc")
        folder.mkdir()
        (folder / "stdout").write_text("left")
        r = subprocess.run([sys.executable, "-c", "from vrr.loop.sandbox import run_python\n"
                            "print(run_python('print(1)', timeout=600, cpu_limit=5).stdout, end='')"],
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(own_tmp)),
                           capture_output=True, text=True, timeout=PATIENCE)
        assert r.returncode == 0 and r.stdout == "1\n", r.stderr
        assert f"left by process {gone.pid}" in r.stderr and "killed" in r.stderr
        assert sleeper.wait(timeout=PATIENCE) == -signal.SIGKILL
        assert not folder.exists()
        assert all(not Path(p, stale_name).exists() and Path(p, live_name).is_dir() and Path(p, elsewhere).is_dir()
                   for p in _cgroup_parents())
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in made:
            end = time.monotonic() + PATIENCE
            while d.exists():   # a killed process leaves its cgroup a moment later
                try:
                    d.rmdir()
                except OSError:
                    assert time.monotonic() < end, d
                    time.sleep(0.05)


# --------------------------------------------------------------------------- generation with sandboxed votes
def _generate(tmp_path, mark, extra=()):
    env = dict(os.environ, VRR_TEST_MARK=mark, VRR_FAKE_CALL_SECONDS="0.05", VRR_FAKE_STUB_CHILD="1",
               PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_program_favorable", "--backend", "fake", "--n", "40",
           "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--batch-size", "2", "--run-name", "sig",
           "--out-root", str(tmp_path), "--no-progress", *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


RANDOM_SIGNALS = [(target, sig, seed) for seed, (target, sig) in enumerate(
    [(t, s) for t in ("supervisor", "worker") for s in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)])]


@pytest.mark.parametrize("target, sig, seed", RANDOM_SIGNALS,
                         ids=[f"{t}-{s.name}" for t, s, _ in RANDOM_SIGNALS])
def test_a_signal_at_a_random_moment_of_a_sandboxed_generation_leaves_nothing(tmp_path, target, sig, seed):
    """``python -m vrr generate`` with program votes (each vote runs in the sandbox), the fake engine with its
    stub EngineCore. Once the worker's sandbox is in use (its first host folder appeared), the signal comes after
    a random delay (seeded). Afterwards: no process, no cgroup, no folder, and the run's lock is free."""
    mark = uuid.uuid4().hex
    run = RunProcesses(mark)
    proc = _generate(tmp_path, mark)

    def sandbox_in_use():
        workers = run.roles()["worker"]
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        return workers and _owned(workers)

    _wait_for(sandbox_in_use, "the worker never ran a sandboxed vote")
    time.sleep(random.Random(seed).uniform(0.0, 0.5))
    pid = proc.pid if target == "supervisor" else run.roles()["worker"][0]
    os.kill(pid, sig)
    proc.wait(timeout=PATIENCE)
    _assert_nothing_left(run)
    lock = tmp_path / "sig" / "generate.lock"
    _wait_for(lambda: _lock_is_free(lock), f"{lock} is still held")


@pytest.mark.parametrize("attempt", range(3))
def test_a_supervisor_killed_while_its_worker_starts_takes_the_worker_along(tmp_path, attempt):
    """SIGKILL to the supervisor as soon as its worker exists (the worker is still importing): the worker must
    not run on unsupervised holding the run's lock. It was set a death signal before exec and checks its parent
    right after; a resume is then not refused."""
    mark = uuid.uuid4().hex
    run = RunProcesses(mark)
    proc = _generate(tmp_path, mark)
    def worker_started():
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        return run.roles()["worker"]

    _wait_for(worker_started, "no worker started")
    time.sleep(random.Random(attempt).uniform(0.0, 0.2) * attempt)
    proc.kill()
    proc.wait()
    assert_no_survivor(run, within=PATIENCE)
    lock = tmp_path / "sig" / "generate.lock"
    _wait_for(lambda: not lock.exists() or _lock_is_free(lock), f"{lock} is still held")


# --------------------------------------------------------------------------- the run lock and the runner's start
HOLD_LOCK = """
import sys
from pathlib import Path
from vrr.loop.store import run_lock
with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_run_lock_left_by_a_killed_holder_is_taken_and_reported(tmp_path, capfd):
    """The kernel frees a SIGKILLed holder's flock, but its record stays in the file: the next holder says whose
    lock it found (pid), then records itself."""
    from vrr.loop.store import run_lock

    lock = tmp_path / "generate.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    with run_lock(lock) as me:
        assert me["pid"] == os.getpid()
    err = capfd.readouterr().err
    assert f"pid {holder.pid}" in err and "stopped without releasing" in err
    with run_lock(lock):   # a lock released normally leaves no record: nothing to report
        pass
    assert "stopped without releasing" not in capfd.readouterr().err


def test_a_notebook_runner_that_starts_after_make_died_stops_at_once(tmp_path):
    """make exports its pid (VRR_MAKE_PID); a runner whose make is already gone when it asks for its death
    signal (the kernel would never send it) stops before it starts a kernel, and writes nothing."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "quick.ipynb")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "vrr", "notebook", str(tmp_path / "quick.ipynb"), str(out / "quick.ipynb")],
                       cwd=REPO, env=dict(os.environ, VRR_MAKE_PID=str(dead.pid)), capture_output=True, text=True,
                       timeout=PATIENCE)
    assert r.returncode != 0
    assert not out.exists() or not [p for p in out.rglob("*") if p.suffix == ".ipynb"]
