"""Killing ``make reproduce`` by its PID stops the whole run and leaves nothing that looks complete."""
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import CHAIN_RESAMPLES
from test_processes import RunProcesses, assert_no_survivor

REPO = Path(__file__).resolve().parent.parent


SETTING = "sim_qwen3b_pmstress"


def _kill_make_during_06(results, mark, sig):
    """Start ``make reproduce``, send ``sig`` to make while 06's kernel computes, check nothing survives."""
    env = dict(os.environ, VRR_TEST_MARK=mark)
    cmd = ["make", "--no-print-directory", "reproduce", f"RESULTS={results}", f"SETTINGS={SETTING}",
           f"RESAMPLES={CHAIN_RESAMPLES}", "FLIP_REPS=200", "FLIP_EVAL=500"]   # a slow 06: the flip grid
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = RunProcesses(mark)
    deadline = time.time() + 600
    while not (results / "06_figures.ipynb.tmp.ipynb").exists():
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() < deadline
        run.scan()
        time.sleep(0.2)
    time.sleep(3)  # 06 is running: its kernel is computing
    assert any("ipykernel" in t["cmdline"] for t in run.scan().values()), "06's kernel is not a member of the run"
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert_no_survivor(run, within=20)
    assert not (results / "06_figures.ipynb").exists()
    assert not (results / "06_figures.ipynb.tmp.ipynb").exists()
    assert not (results / "README.md").exists()
    assert not (results / "tables").exists() and not (results / "figures").exists()
    # the per-setting steps before 06 finished and stay valid
    assert (results / SETTING / "05_stats.ipynb").is_file()


@pytest.mark.chain
def test_sigkill_or_sigterm_to_make_during_06_stops_everything_and_publishes_nothing(tmp_path, chain_results):
    """SIGKILL gives make no chance to clean up: the notebook runner learns of its parent's death from
    the kernel (PR_SET_PDEATHSIG) and stops its own kernel. Steps 01-05 are the chain fixture's (copied with
    their times, so make starts at 06 unless a source changed since)."""
    results = tmp_path / "results"
    shutil.copytree(chain_results / SETTING, results / SETTING)
    _kill_make_during_06(results, uuid.uuid4().hex, signal.SIGKILL)
    _kill_make_during_06(results, uuid.uuid4().hex, signal.SIGTERM)
