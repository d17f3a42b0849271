"""The robustness table's CSV prints its numbers to three decimals, as its LaTeX table, its interval column
and the other tables of the paper do (``vrr.report.table_robustness``)."""
import csv
import re
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
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


def test_write_table_prints_csv_decimals_where_asked(tmp_path):
    """The writer behind table_robustness: ``csv_decimals=3`` rounds every float cell (nan stays nan), while the
    default keeps the stated significant digits."""
    from vrr.report.render import write_table

    rows = [{"setting": "a", "J": 0.4362761, "V": 0.8333333333, "CI": "[0.812,0.855]"},
            {"setting": "b", "J": float("nan"), "V": 0.5, "CI": "[0.400,0.600]"}]
    columns = [("setting", "Setting"), ("J", "J"), ("V", "V"), ("CI", "CI")]
    write_table(rows, columns, tmp_path / "three", csv_decimals=3)
    cells = numeric_cells(tmp_path / "three.csv")
    assert cells == ["0.436", "0.833", "0.812", "0.855", "nan", "0.500", "0.400", "0.600"]
    write_table(rows, columns, tmp_path / "default")
    assert too_long(numeric_cells(tmp_path / "default.csv"))   # six significant digits: the check can fail


def test_the_committed_robustness_csv_prints_three_decimals():
    cells = numeric_cells(REPO / "results" / "tables" / "robustness.csv")
    assert cells and not too_long(cells), too_long(cells)
