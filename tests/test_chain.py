"""The notebook chain through papermill and the Makefile: one ``make reproduce`` of tests/conftest.py's
CHAIN_SUBSET per test run (the ``chain_results`` fixture). Every expected table, figure, executed notebook and
the index exist and parse; the chain's calibrations are the ones the in-process ``calibration`` fixture gives
the other tests; a kernel per notebook writes the same bytes as make's one kernel per setting. Then the
notebook runner itself: the namespace reset between notebooks, and what a failed notebook leaves."""
import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import pytest

from conftest import CHAIN_RESAMPLES, CHAIN_SUBSET
from vrr.common.notebook_runner import parse_notebook_chains, parse_notebook_runs

REPO = Path(__file__).resolve().parent.parent
STEPS = ("01_generate", "02_label", "03_calibrate", "04_replay", "05_stats")


@pytest.mark.chain
def test_make_reproduce_writes_every_notebook_table_figure_and_the_index(chain_results):
    results = chain_results
    for s in CHAIN_SUBSET:
        for step in STEPS:
            nb = nbformat.read(results / s / f"{step}.ipynb", as_version=4)
            assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
            errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("output_type") == "error"]
            assert not errors, f"{s}/{step}: {errors}"
        stats = json.loads((results / s / "stats.json").read_text())
        names = {r["policy"] for r in stats["policy_table"]}
        assert {"No repair", "VRR-Stop", "VRR-Guard", "TPM reference", "Fixed K=5"} <= names
        assert all(0 <= r["V_low"] <= r["V"] <= r["V_high"] <= 1 for r in stats["policy_table"])
        if s.startswith("sim_"):
            assert (results / s / "arrays.npz").is_file()  # simulated arrays belong to their results root
    ablated = json.loads((results / "sim_qwen3b_pmstress" / "stats.json").read_text())["ablations"]
    assert [r["delta"] for r in ablated["delta_sweep"]] == list(range(9))

    tables = results / "tables"
    for name in ("robustness", "loop_dynamics", "calibration_stress", "paired_stats", "ablation_delta",
                 "ablation_n_calib", "ablation_calibration_input", "stopping_sim_qwen3b_pmstress",
                 "stopping_gsm8k_cpu_pmstress", "iterative_feedback", "round_dynamics", "calibration_ablation", "loop_pairs"):
        rows = list(csv.DictReader(open(tables / f"{name}.csv")))
        assert rows, name
        tex = (tables / f"{name}.tex").read_text()
        assert "\\toprule" in tex and "\\bottomrule" in tex
    figures = results / "figures"
    for name in ("cross_setting_dynamics", "signal_quality_decoupling", "gain_geometry", "loop_dynamics",
                 "probe_separation", "identifiability_flip_grid", "pareto"):
        img = mpimg.imread(figures / f"{name}.png")
        assert img.shape[0] > 200 and img.shape[1] > 300, name
        assert (figures / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    index = (results / "README.md").read_text()
    for name in ("robustness.csv", "pareto.png", "06_figures", "sim_qwen3b_pmstress", "mbpp_cpu_pmstress"):
        assert name in index
    assert not list(results.rglob("*.tmp.ipynb")) and not list(results.rglob("*.failed.ipynb"))


@pytest.mark.chain
def test_the_round_dynamics_table_replays_the_saved_calibrations(chain_results):
    """Its VRR-Stop and TPM columns are 04_replay's (same calibration, same folds); on the simulated
    non-stationary diagnostic the round-dependent rates close part of the hindsight gap, and on its
    stationary control they change nothing beyond noise."""
    rows = {r["setting"]: r for r in csv.DictReader(open(chain_results / "tables" / "round_dynamics.csv"))}
    assert set(rows) == set(CHAIN_SUBSET)   # the non-stationary pair is in it although 06 tables leave it out
    for s, row in rows.items():
        policies = {r["policy"]: r for r in json.loads((chain_results / s / "stats.json").read_text())["policy_table"]}
        assert float(row["V_stop"]) == pytest.approx(policies["VRR-Stop"]["V"], abs=1e-6)
        assert float(row["V_tpm"]) == pytest.approx(policies["TPM reference"]["V"], abs=1e-6)
        assert float(row["V_hindsight"]) == pytest.approx(policies["Hindsight best"]["V"], abs=1e-6)
    assert float(rows["sim_nonstationary"]["d_pp"]) > 1 and float(rows["sim_nonstationary"]["gap_closed"]) > 0.2
    assert abs(float(rows["sim_nonstationary_control"]["d_pp"])) < 1


@pytest.mark.chain
def test_the_chain_calibrations_are_the_in_process_ones(chain_results, calibration):
    """03_calibrate's calibration.json equals the ``calibration`` fixture's, field by field, on the same arrays:
    the tests that read the fixture's files (every setting, no papermill) read what the chain writes."""
    for name in CHAIN_SUBSET:
        chain = json.loads((chain_results / name / "calibration.json").read_text())
        fixture = json.loads(calibration(name).read_text())
        chain_arrays, fixture_arrays = REPO / chain.pop("arrays_path"), REPO / fixture.pop("arrays_path")
        assert chain == fixture, name
        assert chain_arrays.read_bytes() == fixture_arrays.read_bytes(), name


@pytest.mark.chain
def test_a_kernel_per_notebook_writes_the_same_bytes_as_the_shared_kernel(chain_results, tmp_path):
    """make -j2 runs the settings' notebooks on two kernels, each kernel taking setting after setting (the chain
    fixture: CHAIN_SUBSET); run one kernel per notebook instead (five ``python -m vrr notebook`` calls into a
    fresh root), and the calibration, replay, statistics and tables are byte-identical: nothing a notebook or a
    setting leaves in a kernel changes the next one's numbers."""
    setting = "gsm8k_cpu_pmstress"
    assert setting in CHAIN_SUBSET and len(CHAIN_SUBSET) > 2   # so that the fixture's kernels ran other settings too
    dry = subprocess.run(["make", "-n", "--no-print-directory", f"RESULTS={tmp_path}", f"RESAMPLES={CHAIN_RESAMPLES}",
                          f"SETTINGS={setting}", str(tmp_path / setting / "05_stats.ipynb")], cwd=REPO,
                         capture_output=True, text=True)
    line = next(l for l in dry.stdout.splitlines() if " -m vrr notebook " in l)
    (runs,), jobs = parse_notebook_chains(shlex.split(line)[4:])
    assert jobs == 1 and [r.notebook.name for r in runs] == [f"{s}.ipynb" for s in STEPS]
    for r in runs:
        args = [x for k, v in r.parameters.items() for x in ("-p", k, json.dumps(v))]
        proc = _run_notebooks(r.notebook, r.output, *args)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("calibration.json", "replay.npz", "stats.json", f"stopping_{setting}.csv", f"stopping_{setting}.tex"):
        a, b = (root / setting / name for root in (chain_results, tmp_path))
        assert a.read_bytes() == b.read_bytes(), name


# --------------------------------------------------------------------------- the notebook runner
def _notebook(path: Path, *cells: str) -> Path:
    """A notebook whose first code cell is the ``parameters`` cell."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _run_notebooks(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vrr", "notebook", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_notebooks_of_one_kernel_see_none_of_each_others_variables(tmp_path):
    """Two notebooks in one kernel: the second starts with an empty namespace and an execution counter at
    1, as in a fresh kernel, while the modules the first imported stay loaded; the kernel talks over IPC."""
    first = _notebook(tmp_path / "first.ipynb", "x = 1", "import fractions\ny = x + 1")
    second = _notebook(tmp_path / "second.ipynb", "z = 0",
                       "import sys\nprint(sorted(k for k in ('x', 'y', 'fractions') if k in globals()),"
                       " 'fractions' in sys.modules)",
                       "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)")
    out = tmp_path / "out"
    proc = _run_notebooks(first, out / "first.ipynb", "-p", "x", "5", second, out / "second.ipynb")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = nbformat.read(out / "second.ipynb", as_version=4)
    code = [c for c in ran.cells if c.cell_type == "code"]
    assert code[0].execution_count == 1
    assert code[-2].outputs[0]["text"].strip() == "[] True"
    # Unix sockets, not loopback TCP ports: two settings started at once cannot race for a port
    assert code[-1].outputs[0]["text"].strip() == "ipc"
    injected = nbformat.read(out / "first.ipynb", as_version=4)
    assert any("x = 5" in c.source for c in injected.cells)
    assert sorted(p.name for p in out.iterdir()) == ["first.ipynb", "second.ipynb"]   # no log, no temporary


def test_a_failed_notebook_stops_the_run_and_keeps_only_the_finished_outputs(tmp_path):
    """The notebook that fails is kept as *.failed.ipynb with its traceback, the one before it stays
    published, and the one after it never runs."""
    ok = _notebook(tmp_path / "ok.ipynb", "a = 1", "b = a")
    bad = _notebook(tmp_path / "bad.ipynb", "a = 1", "raise ValueError('broken step')")
    after = _notebook(tmp_path / "after.ipynb", "a = 1", "open('ran-after', 'w').close()")
    out = tmp_path / "out"
    proc = _run_notebooks(ok, out / "ok.ipynb", bad, out / "bad.ipynb", after, out / "after.ipynb")
    assert proc.returncode == 1
    assert "broken step" in proc.stderr and f"FAILED: {out / 'bad.ipynb'}" in proc.stderr
    assert (out / "ok.ipynb").is_file() and (out / "bad.failed.ipynb").is_file()
    assert not (out / "bad.ipynb").exists() and not (out / "after.ipynb").exists()
    assert not (REPO / "ran-after").exists()
    assert not list(out.glob("*.tmp.ipynb"))
    assert (out / "ok..after.log").is_file()


def test_a_failed_chain_costs_the_other_chains_nothing(tmp_path):
    """Three chains on two kernels: the failing one stops at its bad notebook (kept as *.failed.ipynb, the one
    after it never runs) while the others finish and are published; a notebook that takes its kernel down
    (os._exit) costs only its own chain, the next chain on that kernel gets a fresh one; the run exits 1
    naming each failure, and its log lies where every chain's outputs meet."""
    ok = _notebook(tmp_path / "ok.ipynb", "a = 1", "b = a")
    bad = _notebook(tmp_path / "bad.ipynb", "a = 1", "raise ValueError('broken step')")
    dies = _notebook(tmp_path / "dies.ipynb", "a = 1", "import os\nos._exit(3)")
    after = _notebook(tmp_path / "after.ipynb", "a = 1", "open('ran-after', 'w').close()")
    out = tmp_path / "out"
    proc = _run_notebooks("--jobs", 2, ok, out / "a" / "ok.ipynb", bad, out / "a" / "bad.ipynb",
                          after, out / "a" / "after.ipynb",
                          "--chain", dies, out / "b" / "dies.ipynb", after, out / "b" / "after.ipynb",
                          "--chain", ok, out / "c" / "ok.ipynb", ok, out / "c" / "ok2.ipynb",
                          "--chain", ok, out / "d" / "ok.ipynb")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "broken step" in proc.stderr
    assert f"FAILED: {out / 'a' / 'bad.ipynb'}" in proc.stderr and f"FAILED: {out / 'b' / 'dies.ipynb'}" in proc.stderr
    assert sorted(p.name for p in (out / "a").iterdir()) == ["bad.failed.ipynb", "ok.ipynb"]
    assert sorted(p.name for p in (out / "b").iterdir()) == ["dies.failed.ipynb"]
    assert sorted(p.name for p in (out / "c").iterdir()) == ["ok.ipynb", "ok2.ipynb"]
    assert sorted(p.name for p in (out / "d").iterdir()) == ["ok.ipynb"]
    assert not (REPO / "ran-after").exists()
    assert (out / "notebook-chains.log").is_file()


def test_chains_run_side_by_side_on_their_own_kernels(tmp_path):
    """--jobs 2: two chains, each notebook of which waits for a file the other chain's first notebook writes,
    finish only if they run at the same time (an event, no clock); each chain's second notebook runs in its
    chain's kernel (the first one's import is still loaded) with a fresh namespace."""
    def waiter(me, other):
        return _notebook(tmp_path / f"{me}.ipynb", "flag = ''",
                         f"import pathlib, time, fractions\npathlib.Path(flag, '{me}').touch()\n"
                         f"while not pathlib.Path(flag, '{other}').exists():\n    time.sleep(0.05)")
    probe = _notebook(tmp_path / "probe.ipynb", "x = 0",
                      "import sys\nprint('flag' in globals(), 'fractions' in sys.modules)")
    out, flags = tmp_path / "out", tmp_path / "flags"
    flags.mkdir()
    proc = _run_notebooks("--jobs", 2, waiter("one", "two"), out / "1" / "w.ipynb", "-p", "flag", flags,
                          probe, out / "1" / "probe.ipynb",
                          "--chain", waiter("two", "one"), out / "2" / "w.ipynb", "-p", "flag", flags,
                          probe, out / "2" / "probe.ipynb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for chain in ("1", "2"):
        ran = nbformat.read(out / chain / "probe.ipynb", as_version=4)
        assert [c for c in ran.cells if c.cell_type == "code"][-1].outputs[0]["text"].strip() == "False True"


@pytest.mark.parametrize("args, message", [
    (["--jobs", "0", "a.ipynb", "o.ipynb"], "--jobs takes a number"),
    (["a.ipynb", "o.ipynb", "--chain"], "--chain with no notebook"),
    (["a.ipynb", "o.ipynb", "--chain", "--chain", "b.ipynb", "p.ipynb"], "--chain with no notebook"),
])
def test_notebook_chain_command_line_errors_name_the_problem(args, message):
    with pytest.raises(SystemExit, match=message):
        parse_notebook_chains(args)


def test_notebook_chains_parse_into_runs_and_jobs():
    chains, jobs = parse_notebook_chains(["--jobs", "3", "a.ipynb", "o1.ipynb", "-p", "k", "1",
                                          "--chain", "b.ipynb", "o2.ipynb", "c.ipynb", "o3.ipynb"])
    assert jobs == 3
    assert [[(str(r.notebook), str(r.output), r.parameters) for r in chain] for chain in chains] == \
        [[("a.ipynb", "o1.ipynb", {"k": 1})], [("b.ipynb", "o2.ipynb", {}), ("c.ipynb", "o3.ipynb", {})]]


@pytest.mark.parametrize("args, message", [
    (["-p", "a", "1"], "-p comes after the notebook"),
    (["a.ipynb"], "needs an output path"),
    (["a.ipynb", "out.ipynb", "-p", "a"], "-p takes NAME VALUE"),
    ([], "give NOTEBOOK OUTPUT"),
])
def test_notebook_command_line_errors_name_the_problem(args, message):
    with pytest.raises(SystemExit, match=message):
        parse_notebook_runs(args)
