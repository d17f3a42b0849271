"""The README's result tables quote the committed results (vrr.report.summary, scripts/readme_tables.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vrr.report.summary import BEGIN, END, readme_summary, splice

REPO = Path(__file__).resolve().parents[1]


def test_readme_quotes_the_committed_results():
    """Fails when a rebuilt results/ moved a number the README still shows (rerun scripts/readme_tables.py)."""
    text = (REPO / "README.md").read_text()
    assert splice(text, readme_summary(REPO / "results")) == text


def test_a_changed_result_shows_in_the_tables(tmp_path):
    """The block is read from the committed tables, so a moved V moves the README."""
    shutil.copytree(REPO / "results" / "tables", tmp_path / "tables")
    before = readme_summary(tmp_path)
    assert "| MBPP CPU fav. | 0.062 |" in before and "| Qwen-3B stress (sim.) | 0.46 |" in before
    path = tmp_path / "tables" / "stopping_mbpp_cpu_favorable.csv"
    text = path.read_text()
    assert "VRR-Stop,\"0.470 [.400,.540]\"" in text
    path.write_text(text.replace("VRR-Stop,\"0.470 [.400,.540]\"", "VRR-Stop,\"0.999 [.400,.540]\""))
    after = readme_summary(tmp_path)
    assert after != before and "0.999 [.400,.540]" in after


def test_splice_needs_both_markers():
    with pytest.raises(ValueError, match="README.md: needs one"):
        splice("no markers here", "x\n")
    with pytest.raises(ValueError, match="needs one"):
        splice(f"{END}\n{BEGIN}\n", "x\n")
    assert splice(f"a\n{BEGIN}\nold\n{END}\nb\n", "new\n") == f"a\n{BEGIN}\nnew\n{END}\nb\n"


def test_check_mode_reports_a_stale_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{BEGIN}\nstale\n{END}\n<!-- runtime:begin -->\nstale\n<!-- runtime:end -->\n")
    script = [sys.executable, str(REPO / "scripts" / "readme_tables.py"), "--readme", str(readme)]
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "differ" in stale.stderr
    subprocess.run(script, check=True)
    assert subprocess.run([*script, "--check"]).returncode == 0


def test_an_estimate_without_plans_of_its_class_reads_n_a(tmp_path):
    """A window with no valid plan has no rho1, J or beta: the table says n/a, not nan, and keeps rho0."""
    shutil.copytree(REPO / "results" / "tables", tmp_path / "tables")
    path = tmp_path / "tables" / "loop_dynamics.csv"
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("MBPP CPU fav.,"))
    cells = lines[i].split(",")
    cells[2:7] = ["nan", "nan", "0", "nan", "nan"]  # rho1, J, alpha, beta, b*
    lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    block = readme_summary(tmp_path)
    assert "| MBPP CPU fav. | 0.062 | n/a | n/a | 0.000 | n/a | n/a |" in block and "nan" not in block


def _readme_tables():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_tables", REPO / "scripts" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runtime_table_is_rendered_from_the_benchmarks_records(tmp_path):
    """The README's chain runtime table is what scripts/bench_chain.py --record measured (docs/runtime/*.json), a
    column per machine kind; a new record changes it."""
    rt = _readme_tables()
    text = (REPO / "README.md").read_text()
    assert splice(text, rt.runtime_block(), "README.md", rt.RUNTIME_BEGIN, rt.RUNTIME_END) == text
    records = sorted((REPO / "docs" / "runtime").glob("*.json"))
    assert records
    import json

    record = json.loads(records[0].read_text())
    assert record["machine"] in rt.KIND_ORDER and record["command"].startswith("python scripts/bench_chain.py --record")
    shutil.copy(records[0], tmp_path / records[0].name)
    other = dict(record, machine="AVX2", wall_s=123.4, cpu_s=200.0)
    (tmp_path / "avx2.json").write_text(json.dumps(other))
    block = rt.runtime_block(tmp_path)
    assert f"| {record['machine']} | AVX2 |" in block and "2 min 3 s (3 min 20 s CPU)" in block
