"""The robustness table's CSV prints its numbers to three decimals, as its LaTeX table, its interval column
and the other tables of the paper do (``vrr.report.table_robustness``)."""
import csv
import re
from pathlib import Path

import pytest

from vrr.report import Results, table_robustness

REPO = Path(__file__).resolve().parent.parent
# a real window with J undefined (nan), simulated ones whose values have many digits
RUNS = ["sim_qwen3b_favorable", "sim_mistral7b_pmstress", "bfcl_multi_cpu"]
AT_MOST_THREE_DECIMALS = re.compile(r"-?\d+(\.\d{1,3})?|nan")
NUMBER = re.compile(r"-?\d+\.\d+")


def numeric_cells(path: Path) -> list[str]:
    """Every number of the CSV: the plain cells and the bounds inside the interval cells."""
    cells = []
    for row in csv.DictReader(open(path, newline="")):
        for key, value in row.items():
            if key == "setting":
                continue
            cells += NUMBER.findall(value) if value.startswith("[") else [value]
    return cells


def too_long(cells):
    return [c for c in cells if not AT_MOST_THREE_DECIMALS.fullmatch(c)]


def test_table_robustness_writes_three_decimals_and_returns_the_values(tmp_path):
    res = Results(REPO / "results", RUNS)
    if res.missing:
        pytest.fail(f"results of {res.missing} are not committed under results/")
    rows = table_robustness(res, tmp_path)
    cells = numeric_cells(tmp_path / "robustness.csv")
    assert cells and not too_long(cells), too_long(cells)
    written = list(csv.DictReader(open(tmp_path / "robustness.csv", newline="")))
    for row, out in zip(rows, written):
        for key in ("J", "No repair", "Fixed K=5", "VRR-Stop", "TPM", "VRR-Guard"):
            assert out[key] == ("nan" if row[key] != row[key] else f"{row[key]:.3f}"), (row["setting"], key)
    # the rows keep their floats (06_figures prints them with its own format)
    assert isinstance(rows[0]["J"], float) and len(f"{rows[0]['J']}") > 5


def test_the_committed_robustness_csv_prints_three_decimals():
    cells = numeric_cells(REPO / "results" / "tables" / "robustness.csv")
    assert cells and not too_long(cells), too_long(cells)
