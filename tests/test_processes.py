"""Killing a generation run leaves no process behind (the engine's children included).

``python -m vrr generate`` is a supervisor around a worker in its own process group. The fake
engine's stub child stands in for vLLM's EngineCore here (tests/test_engine_real.py does the same
with the real engine). Survivors are found by marker, process group and descent (:class:`RunProcesses`),
so a renamed child without the marker that outlived its parent is found too.
"""
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _live_thread_state(proc_dir: Path) -> str | None:
    """The state of a thread of the process that is not yet a zombie, if any: the kernel shows the leader
    as ``Z`` once it exited, while the other threads (and the open files they share) may still be live."""
    try:
        for task in (proc_dir / "task").iterdir():
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                return state
    except OSError:
        pass
    return None


def _proc_table() -> dict[int, dict]:
    """pid -> ppid, pgid, start time, state, marker environment and command line of every live process."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            env = (d / "environ").read_bytes().split(b"\0")
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":   # a zombie leader whose other threads still exit still holds the process's files
            fields[0] = _live_thread_state(d) or "Z"
        table[int(d.name)] = {"state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2]),
                              "start": int(fields[19]), "env": env, "cmdline": cmdline}
    return table


class RunProcesses:
    """Every process of one run, found three ways so that none escapes by renaming itself, clearing
    its environment or being re-parented: the marker ``VRR_TEST_MARK=<mark>`` in the environment, the
    process groups of marked processes (vLLM's EngineCore and workers share the generation worker's
    group), and descent from a member. Each :meth:`scan` remembers what it saw (pid and start time),
    so a process seen once is still found after its parent died."""

    def __init__(self, mark: str):
        self.mark = f"VRR_TEST_MARK={mark}".encode()
        self.seen: dict[int, int] = {}          # pid -> start time
        self.groups: set[int] = set()
        self.ours = {os.getpid(), os.getpgrp()}   # the test itself and its group are never members

    def scan(self) -> dict[int, dict]:
        """The members alive now (zombies excluded), by pid."""
        table = {pid: t for pid, t in _proc_table().items() if t["state"] != "Z"}
        members = {pid for pid, t in table.items() if self.mark in t["env"]}
        members |= {pid for pid, t in table.items() if t["pgid"] in self.groups}
        members |= {pid for pid, start in self.seen.items() if table.get(pid, {}).get("start") == start}
        grew = True
        while grew:   # descendants of members
            new = {pid for pid, t in table.items() if t["ppid"] in members} - members
            members |= new
            grew = bool(new)
        members -= {os.getpid()}
        for pid in members:
            self.seen.setdefault(pid, table[pid]["start"])
            if table[pid]["pgid"] not in self.ours:
                self.groups.add(table[pid]["pgid"])
        return {pid: table[pid] for pid in members}

    def roles(self) -> dict[str, list[int]]:
        """Members of a generation run by role: worker, engine (a worker's child that is not Python's
        resource tracker), other."""
        alive = self.scan()
        workers = [p for p, t in alive.items() if b"VRR_GENERATE_WORKER=1" in t["env"]]
        engine = [p for p, t in alive.items() if t["ppid"] in workers and "resource_tracker" not in t["cmdline"]]
        return {"worker": workers, "engine": engine,
                "other": [p for p in alive if p not in workers and p not in engine]}


def assert_no_survivor(run: RunProcesses, within=600.0):
    """Wait until no member of the run is alive (an event: returns as soon as it holds); ``within`` only guards
    against a hung test, it is not a measure of speed."""
    deadline = time.time() + within
    while run.scan() and time.time() < deadline:
        time.sleep(0.2)
    left = run.scan()
    assert left == {}, "processes outlived the run: " + "; ".join(f"{p}: {t['cmdline'][:80]}" for p, t in left.items())


def start_run(tmp_path, mark):
    env = dict(os.environ, VRR_TEST_MARK=mark, VRR_FAKE_CALL_SECONDS="0.3", VRR_FAKE_STUB_CHILD="1",
               PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "40",
           "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--batch-size", "2", "--run-name", "kill",
           "--out-root", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run = RunProcesses(mark)
    deadline = time.time() + 600
    while not (proc.pid in run.scan() and all(run.roles()[r] for r in ("worker", "engine"))):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run did not start its engine"
        time.sleep(0.2)
    time.sleep(1.0)  # let a batch or two finish
    run.scan()
    return proc, run


PLANT = """
import ctypes, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import ctypes, time; ctypes.CDLL(None).prctl(15, b'EngineCore', 0, 0, 0); time.sleep(600)"], env={})
print(child.pid, flush=True)
time.sleep(600)
"""


def test_the_orphan_check_finds_a_renamed_unmarked_reparented_child():
    """The check is shown to catch what the marker alone misses: a child with an empty environment and
    another process name, which outlives its parent (re-parented, like an EngineCore whose worker was
    SIGKILLed)."""
    mark = uuid.uuid4().hex
    parent = subprocess.Popen([sys.executable, "-c", PLANT], env=dict(os.environ, VRR_TEST_MARK=mark),
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(parent.stdout.readline())
    try:
        run = RunProcesses(mark)
        assert set(run.scan()) == {parent.pid, child}
        assert run.mark not in _proc_table()[child]["env"]          # the marker alone would miss it
        parent.kill()
        parent.wait()
        time.sleep(0.2)
        assert _proc_table()[child]["ppid"] != parent.pid           # re-parented
        assert set(run.scan()) == {child}
        with pytest.raises(AssertionError, match="outlived"):
            assert_no_survivor(run, within=0.5)
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("target, sig", [("supervisor", signal.SIGKILL), ("supervisor", signal.SIGTERM),
                                         ("worker", signal.SIGKILL), ("worker", signal.SIGTERM)])
def test_killing_a_run_leaves_no_process(tmp_path, target, sig):
    mark = uuid.uuid4().hex
    proc, run = start_run(tmp_path, mark)
    pid = proc.pid if target == "supervisor" else run.roles()["worker"][0]
    os.kill(pid, sig)
    proc.wait(timeout=600)
    assert_no_survivor(run)
    # what finished before the kill is intact, and a rerun completes the window
    rerun = subprocess.run([sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake",
                            "--n", "40", "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--batch-size", "8",
                            "--run-name", "kill", "--out-root", str(tmp_path), "--no-progress"],
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (tmp_path / "kill" / "arrays.npz").is_file()
