"""Killing ``make reproduce`` by its PID stops the whole run and leaves nothing that looks complete."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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
    proc.wait(timeout=600)
    assert proc.returncode != 0
    assert_no_survivor(run, within=600)
    assert not (results / "06_figures.ipynb").exists()
    assert not list(results.rglob("*.tmp.ipynb")) and not list(results.glob(".vrr-running-*"))
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


# --------------------------------------------------------------------------- the notebook runner alone
PATIENCE = 600.0   # seconds: a guard against a hung test, never a measure of speed


def _sleeping_notebook(path: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = x"),   # papermill saves after it
                nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


# a stand-in for make: starts the runner and waits for it
PARENT = "import subprocess, sys\nsubprocess.Popen(sys.argv[1:]).wait()\n"


def _start_runner(tmp_path, mark, parent: bool):
    """``python -m vrr notebook`` on a notebook that sleeps, under a stand-in parent or alone; returns once its
    kernel executes the notebook and papermill has saved the temporary (the started log's line, a live kernel
    process, a *.tmp.ipynb: events, no clock)."""
    nb, out, started = _sleeping_notebook(tmp_path / "slow.ipynb"), tmp_path / "out", tmp_path / "started.log"
    env = dict(os.environ, VRR_TEST_MARK=mark, VRR_NOTEBOOK_STARTED_LOG=str(started), PYTHONPATH=str(REPO))
    runner = [sys.executable, "-m", "vrr", "notebook", str(nb), str(out / "slow.ipynb")]
    proc = subprocess.Popen([sys.executable, "-c", PARENT, *runner] if parent else runner, cwd=REPO, env=env)
    run = RunProcesses(mark)
    end = time.monotonic() + PATIENCE
    while not (started.is_file() and any("ipykernel" in t["cmdline"] for t in run.scan().values())
               and list(out.rglob("*.tmp.ipynb"))):
        assert proc.poll() is None and time.monotonic() < end
        time.sleep(0.1)
    return proc, run, out


def _runner_of(run: RunProcesses, parent: int) -> int:
    return next(p for p, t in run.scan().items() if t["ppid"] == parent)


def test_sigkill_to_the_runners_parent_leaves_no_temporary_notebook(tmp_path):
    """make's SIGKILL reaches the runner as SIGTERM (PR_SET_PDEATHSIG): it removes its folder of temporaries
    before it stops the kernel, so no late write of papermill can leave a *.tmp.ipynb, however slowly the
    kernel dies; nothing runs on."""
    proc, run, out = _start_runner(tmp_path, uuid.uuid4().hex, parent=True)
    runner = _runner_of(run, proc.pid)
    proc.kill()
    proc.wait()
    assert_no_survivor(run, within=PATIENCE)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert not list(out.rglob("*.tmp.ipynb")) and not (out / "slow.ipynb").exists(), left
    assert not [p.name for p in out.iterdir() if p.name.startswith(".vrr-running-")], left
    assert not list(Path(tempfile.gettempdir()).glob(f"vrr-kernel-{runner}-*"))


def test_sigkill_to_the_runner_takes_its_kernel_and_the_next_run_removes_its_temporaries(tmp_path):
    """SIGKILL to the runner itself: its kernel dies with it (PR_SET_PDEATHSIG, no polling), and the folder it
    could not remove is removed by the next runner, which says so."""
    proc, run, out = _start_runner(tmp_path, uuid.uuid4().hex, parent=False)
    proc.kill()
    proc.wait()
    assert_no_survivor(run, within=PATIENCE)
    left = [p for p in out.iterdir() if p.name != "slow.ipynb.log"]
    assert left and not (out / "slow.ipynb").exists()   # what SIGKILL left: the runner's folder of temporaries
    import nbformat

    quick = tmp_path / "quick.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, quick)
    again = subprocess.run([sys.executable, "-m", "vrr", "notebook", str(quick), str(out / "quick.ipynb")], cwd=REPO,
                           capture_output=True, text=True, timeout=PATIENCE)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"left by runner process {proc.pid}, which was killed" in again.stderr
    assert not list(out.rglob("*.tmp.ipynb"))
    assert sorted(p.name for p in out.iterdir()) == ["quick.ipynb", "slow.ipynb.log"]
