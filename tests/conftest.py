"""Shared fixtures. ``chain_results``: a results root with steps 01-03 of the chain (arrays and saved
calibrations) for every simulated and committed real setting, built by ``make`` as ``make reproduce`` builds
it. A clone holds only the tables and figures under results/, so tests never read the developer's results/."""
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# every setting make reproduce runs: the simulated ones and each committed real window
CHAIN_SETTINGS = sorted([p.stem for p in (REPO / "settings").glob("sim_*.yaml")]
                        + [p.parent.name for p in (REPO / "data" / "real").glob("*/arrays.npz")])


@pytest.fixture(scope="session")
def chain_results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chain_results")
    targets = [str(root / name / "03_calibrate.ipynb") for name in CHAIN_SETTINGS]
    proc = subprocess.run(["make", "--no-print-directory", "-j2", f"RESULTS={root}", *targets], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    missing = [n for n in CHAIN_SETTINGS if not (root / n / "calibration.json").is_file()]
    assert not missing, f"make wrote no calibration for {missing}"
    return root
