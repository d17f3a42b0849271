"""The whole notebook chain through papermill and the Makefile, with tiny parameters.

Runs ``make reproduce`` into a temporary results/data root and checks that every expected
table, figure, executed notebook and the index exist and parse.
"""
import csv
import json
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
SETTINGS = ["sim_qwen3b_pmstress", "sim_llama3_8b_pmstress", "sim_qwen3b_favorable",
            "sim_nonstationary", "sim_nonstationary_control"]


@pytest.mark.chain
def test_make_reproduce_tiny(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    cmd = ["make", "--no-print-directory", "-j2", "reproduce", f"RESULTS={results}", f"DATA={data}",
           f"SETTINGS={' '.join(SETTINGS)}", "N=40", "RESAMPLES=200", "FLIP_REPS=2", "FLIP_EVAL=60"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "make reproduce:" in proc.stdout

    for s in SETTINGS:
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
        assert (results / s / "arrays.npz").is_file()  # simulated arrays belong to their results root
    ablated = json.loads((results / "sim_qwen3b_pmstress" / "stats.json").read_text())["ablations"]
    assert [r["delta"] for r in ablated["delta_sweep"]] == list(range(9))

    tables = results / "tables"
    for name in ("robustness", "loop_dynamics", "calibration_stress", "paired_stats", "ablation_delta",
                 "ablation_n_calib", "ablation_calibration_input", "stopping_sim_qwen3b_pmstress"):
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
    for name in ("robustness.csv", "pareto.png", "06_figures" , "sim_llama3_8b_pmstress"):
        assert name in index
    assert not list(results.rglob("*.tmp.ipynb")) and not list(results.rglob("*.failed.ipynb"))


@pytest.mark.chain
def test_steps_03_to_05_write_the_same_bytes_twice(tmp_path):
    """Calibration, replay and statistics of one setting are byte-identical across two runs."""
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        target = root / "gsm8k_cpu_pmstress" / "05_stats.ipynb"
        proc = subprocess.run(["make", "--no-print-directory", f"RESULTS={root}", "RESAMPLES=300", str(target)],
                              cwd=REPO, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("calibration.json", "replay.npz", "stats.json", "stopping_gsm8k_cpu_pmstress.csv",
                 "stopping_gsm8k_cpu_pmstress.tex"):
        a, b = (root / "gsm8k_cpu_pmstress" / name for root in roots)
        assert a.read_bytes() == b.read_bytes(), name
