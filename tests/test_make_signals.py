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
    """Start ``make reproduce``, send ``sig`` to make while 06's kernel computes, check nothing survives.

    The runner logs each notebook as it starts (``VRR_NOTEBOOK_STARTED_LOG``): the test waits for 06's line,
    an event that stays, rather than for its temporary output, which a fast 06 renames before a poll sees it.
    06 cannot finish first: its flip grid (200 replications per J, no cache) takes minutes."""
    started = results.parent / f"started-{mark}.log"
    (results / "flip_grid.npz").unlink(missing_ok=True)
    env = dict(os.environ, VRR_TEST_MARK=mark, VRR_NOTEBOOK_STARTED_LOG=str(started))
    cmd = ["make", "--no-print-directory", "reproduce", f"RESULTS={results}", f"SETTINGS={SETTING}",
           f"RESAMPLES={CHAIN_RESAMPLES}", "FLIP_REPS=200", "FLIP_EVAL=500"]   # a slow 06: the flip grid
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = RunProcesses(mark)
    deadline = time.time() + 600

    def kernel_runs_06():
        return (started.is_file() and str(results / "06_figures.ipynb") in started.read_text().splitlines()
                and any("ipykernel" in t["cmdline"] for t in run.scan().values()))

    while not kernel_runs_06():
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() < deadline
        time.sleep(0.2)
    assert started.read_text().splitlines()[-1] == str(results / "06_figures.ipynb")   # 06 is the last to start
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
