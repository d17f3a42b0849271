"""Every number the README's findings list states is one the committed tables hold (results/tables/*.csv).

A rate with d decimals must be some table value rounded to d decimals; "N pp" must be some table difference
(a fraction) times 100 at the printed precision. Thresholds the text quotes as conditions (after a comparison
sign, "approx" or "level") are parameters, not results, and are skipped.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.$])[-+]?\d+\.\d+")
CONDITION = re.compile(r"(\\ge|\\le|\\approx|level|=)\s*\$?$")


def findings_section(text: str) -> str:
    start = text.index("## Findings")
    return text[start:text.index("\n## ", start + 1)]


def table_values() -> list[float]:
    values = []
    for path in sorted((REPO / "results" / "tables").glob("*.csv")):
        values += [float(x) for x in re.findall(r"[-+]?\d*\.\d+(?:e[-+]?\d+)?", path.read_text())]
    return values


def stated_numbers(section: str) -> list[tuple[str, bool]]:
    """(number as printed, whether it is in percentage points) for every result the section states."""
    out = []
    for m in NUMBER.finditer(section):
        if CONDITION.search(section[max(0, m.start() - 12):m.start()]):
            continue
        out.append((m.group(), section[m.end():m.end() + 3] == " pp" or section[m.end():].startswith(" to ")
                    and "pp" in section[m.end():m.end() + 16]))
    return out


def test_every_number_in_the_findings_is_in_a_committed_table():
    section = findings_section((REPO / "README.md").read_text())
    values = table_values()
    stated = stated_numbers(section)
    assert len(stated) >= 10, "the findings list states fewer numbers than this test expects to check"
    missing = []
    for text, in_pp in stated:
        decimals = len(text.partition(".")[2])
        target = float(text)
        scale = 100.0 if in_pp else 1.0
        if not any(abs(round(abs(v) * scale, decimals) - abs(target)) < 10 ** -(decimals + 3) for v in values):
            missing.append(text + (" pp" if in_pp else ""))
    assert not missing, f"README findings state numbers no committed table holds: {missing}"


def test_a_number_not_in_the_tables_is_caught():
    values = table_values()
    assert not any(abs(round(v, 3) - 0.123456) < 1e-9 for v in values)
    stated = stated_numbers("## Findings\n* V is 0.987 here, 12.3 pp over that, at level 0.05.\n")
    assert stated == [("0.987", False), ("12.3", True)]


def test_the_readme_is_short_and_in_the_reader_s_order():
    """At most 200 lines: what the paper claims, a two-command quick start, the findings, the figures, the
    results, then the reference sections; the Runtime table has one column per machine kind."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    heads = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert heads[:5] == ["Quick start", "Findings", "Key figures", "Results", "Where each part of the paper lives"]
    quick = text[text.index("## Quick start"):text.index("## Findings")]
    block = quick[quick.index("```bash"):quick.index("```", quick.index("```bash") + 3)]
    assert [line.split("#")[0].strip() for line in block.splitlines()[1:]] == ["make -j2 reproduce", "make test"]
    runtime = text[text.index("## Runtime"):]
    header = next(line for line in runtime.splitlines() if line.startswith("| step"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [
        "AVX512-BF16, bf16", "AVX512 without BF16, fp32", "AVX2, fp32", "GPU"]
