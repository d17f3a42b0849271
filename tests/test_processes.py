"""Killing a generation run leaves no process behind (the engine's children included).

``python -m vrr generate`` is a supervisor around a worker in its own process group. The fake
engine's stub child stands in for vLLM's EngineCore here (tests/test_engine_real.py does the same
with the real engine). Every process of a run carries a marker in its environment, so survivors
are found even after they were re-parented.
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


def marked(mark: str) -> list[tuple[int, bool]]:
    """(pid, is_worker) of every live process whose environment carries ``mark``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if f"VRR_TEST_MARK={mark}".encode() in env and state != "Z":
            out.append((int(d.name), b"VRR_GENERATE_WORKER=1" in env))
    return out


def start_run(tmp_path, mark):
    env = dict(os.environ, VRR_TEST_MARK=mark, VRR_FAKE_CALL_SECONDS="0.3", VRR_FAKE_STUB_CHILD="1",
               PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "40",
           "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--batch-size", "2", "--run-name", "kill",
           "--out-root", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while len(marked(mark)) < 3:  # supervisor, worker, the engine's stand-in child
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run did not start its engine"
        time.sleep(0.2)
    time.sleep(1.0)  # let a batch or two finish
    return proc


def assert_no_survivor(mark, within=8.0):
    deadline = time.time() + within
    while marked(mark) and time.time() < deadline:
        time.sleep(0.2)
    assert marked(mark) == [], "processes outlived the run"


@pytest.mark.parametrize("target, sig", [("supervisor", signal.SIGKILL), ("supervisor", signal.SIGTERM),
                                         ("worker", signal.SIGKILL), ("worker", signal.SIGTERM)])
def test_killing_a_run_leaves_no_process(tmp_path, target, sig):
    mark = uuid.uuid4().hex
    proc = start_run(tmp_path, mark)
    pid = proc.pid if target == "supervisor" else next(p for p, worker in marked(mark) if worker)
    os.kill(pid, sig)
    proc.wait(timeout=30)
    assert_no_survivor(mark)
    # what finished before the kill is intact, and a rerun completes the window
    rerun = subprocess.run([sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake",
                            "--n", "40", "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--batch-size", "8",
                            "--run-name", "kill", "--out-root", str(tmp_path), "--no-progress"],
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (tmp_path / "kill" / "arrays.npz").is_file()
