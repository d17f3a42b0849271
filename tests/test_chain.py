"""The notebook chain through papermill and the Makefile: one ``make reproduce`` of tests/conftest.py's
CHAIN_SUBSET per test run (the ``chain_results`` fixture). Every expected table, figure, executed notebook and
the index exist and parse; the chain's calibrations are the ones the in-process ``calibration`` fixture gives
the other tests; steps 03-05 write the same bytes in a second root."""
import csv
import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import pytest

from conftest import CHAIN_RESAMPLES, CHAIN_SUBSET

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.chain
def test_make_reproduce_writes_every_notebook_table_figure_and_the_index(chain_results):
    results = chain_results
    for s in CHAIN_SUBSET:
        for step in ("01_generate", "02_label", "03_calibrate", "04_replay", "05_stats"):
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
                 "stopping_gsm8k_cpu_pmstress", "iterative_feedback"):
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
def test_steps_03_to_05_write_the_same_bytes_twice(chain_results, tmp_path):
    """Calibration, replay and statistics of one setting are byte-identical across two runs (the chain
    fixture's and a second make into a fresh root that starts from the fixture's steps 01-02, times kept)."""
    (tmp_path / "gsm8k_cpu_pmstress").mkdir()
    for step in ("01_generate.ipynb", "02_label.ipynb"):
        shutil.copy2(chain_results / "gsm8k_cpu_pmstress" / step, tmp_path / "gsm8k_cpu_pmstress" / step)
    target = tmp_path / "gsm8k_cpu_pmstress" / "05_stats.ipynb"
    proc = subprocess.run(["make", "--no-print-directory", f"RESULTS={tmp_path}", f"RESAMPLES={CHAIN_RESAMPLES}",
                           str(target)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("calibration.json", "replay.npz", "stats.json", "stopping_gsm8k_cpu_pmstress.csv",
                 "stopping_gsm8k_cpu_pmstress.tex"):
        a, b = (root / "gsm8k_cpu_pmstress" / name for root in (chain_results, tmp_path))
        assert a.read_bytes() == b.read_bytes(), name
