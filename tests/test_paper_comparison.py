"""The paper's printed validity values beside the simulated settings (vrr/report/paper_values.csv,
vrr.report.paper_comparison): the transcription against the paper's .tex, the verdicts, the implied values and
their cache, and the table 06 writes."""
import csv
import json
import re

import numpy as np
import pytest

import vrr
from vrr.report import paper_comparison as pc
from vrr.report.paper_comparison import (DIFFERS, INCONSISTENT, PAPER_TEX, REPRODUCED, VERDICTS, PaperValuesError,
                                         implied_values, paper_comparison_summary, paper_value_groups,
                                         read_paper_values, table_paper_comparison, verdict)

TABLES = ("tab:stopping-performance-main", "tab:robustness-main", "tab:app-full-stopping", "tab:app-calibration-stress",
          "tab:app-full-robustness")


@pytest.fixture(scope="module")
def tex_lines():
    assert PAPER_TEX.is_file(), f"{PAPER_TEX}: the paper is not beside the clone (../shared/paper)"
    return PAPER_TEX.read_text().split("\n")


def _cells(line):
    return [c.strip() for c in line.rstrip().removesuffix("\\\\").split("&")]


def _environment(lines, number):
    """(label, first line, last line) of the table environment around 1-based line ``number``, or None."""
    i = number - 1
    start = next((k for k in range(i, -1, -1) if lines[k].startswith("\\begin{table")), None)
    if start is None:
        return None
    end = next(k for k in range(start, len(lines)) if lines[k].startswith("\\end{table"))
    if not start < i < end:
        return None
    label = next(re.search(r"\\label\{(.*?)\}", lines[k]).group(1) for k in range(start, end) if "\\label{" in lines[k])
    return label, start, end


def _section_label(lines, number):
    """The label of the section that holds 1-based line ``number``."""
    section = max(k for k in range(number) if lines[k].startswith("\\section"))
    return re.search(r"\\label\{(.*?)\}", lines[section + 1]).group(1)


def test_every_transcribed_value_is_printed_where_the_file_says(tex_lines):
    values = read_paper_values()
    assert len(values) >= 90
    for v in values:
        line = tex_lines[v["line"] - 1]
        where = f"{v['setting']}, {v['policy']} ({v['table']}:{v['line']})"
        env = _environment(tex_lines, v["line"])
        if v["table"].startswith("tab:"):
            assert env is not None and env[0] == v["table"], where
            header = _cells(tex_lines[next(k for k in range(env[1], env[2]) if tex_lines[k].strip() == "\\toprule") + 1])
            cells = _cells(line)
            assert cells[0] == v["row"], where
            cell = cells[header.index(v["column"])]
            assert re.sub(r"\\textbf\{(.*?)\}", r"\1", cell).split()[0] == v["value"], where
        else:   # a value in the text: the phrase beside it, in the stated section
            assert env is None and _section_label(tex_lines, v["line"]) == v["table"], where
            assert v["row"] in line and f"\\({v['value']}\\)" in line, where


def test_the_transcription_holds_every_validity_value_of_the_transcribed_rows(tex_lines):
    """Nothing left out: in each table, every bare value of a transcribed row (not J, not a CI) is in the file."""
    values = read_paper_values()
    have = {(v["table"], v["line"], v["column"]) for v in values}
    for table in TABLES:
        lines = sorted({v["line"] for v in values if v["table"] == table})
        assert lines, table
        _, start, end = _environment(tex_lines, lines[0])
        header = _cells(tex_lines[next(k for k in range(start, end) if tex_lines[k].strip() == "\\toprule") + 1])
        for number in lines:
            for column, cell in zip(header[1:], _cells(tex_lines[number - 1])[1:]):
                bare = re.sub(r"\\textbf\{(.*?)\}", r"\1", cell)
                if column != "\\(J\\)" and re.match(r"0\.\d{3}", bare):
                    assert (table, number, column) in have, (table, number, column, cell)


def test_each_value_belongs_to_a_simulated_setting_and_a_replayed_policy():
    known = set(vrr.report.PAPER_POLICY_ORDER)
    for v in read_paper_values():
        cfg = vrr.load_config(v["setting"])
        assert cfg["kind"] == "simulated"
        assert v["policy"] in known or pc.ROUND_POLICY.match(v["policy"]), v


def test_printings_of_one_value_agree_and_the_most_precise_one_is_kept():
    groups = {(g["setting"], g["policy"]): g for g in paper_value_groups(read_paper_values())}
    g = groups["sim_nonstationary", "Validity at round 2"]   # printed 0.867 and 0.87
    assert g["printed"] == "0.867" and g["rounding"] == pytest.approx(5e-4) and "app:extended-discussion:757" in g["sources"]
    assert len(groups["sim_qwen3b_pmstress", "VRR-Stop"]["sources"].split("; ")) == 5   # all five tables
    bad = [dict(setting="s", policy="p", value="0.70", table="t", line=1, row="r", column=""),
           dict(setting="s", policy="p", value="0.722", table="u", line=2, row="r", column="")]
    with pytest.raises(PaperValuesError, match="prints 0.722"):
        paper_value_groups(bad)


@pytest.mark.parametrize("edit, message", [
    (lambda r: {**r, "value": "0,722"}, "field 'value'"),
    (lambda r: {**r, "line": "x"}, "field 'line'"),
    (lambda r: {**r, "setting": " "}, "field 'setting': missing"),
])
def test_a_malformed_entry_is_named_with_its_file_and_line(tmp_path, edit, message):
    rows = [{k: str(v) for k, v in r.items()} for r in read_paper_values()[:3]]
    rows[1] = edit(rows[1])
    path = tmp_path / "values.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=pc.PAPER_VALUE_FIELDS)
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(PaperValuesError, match=rf"values.csv:3: {message}"):
        read_paper_values(path)


@pytest.mark.parametrize("paper, ours, implied, departures, expected", [
    ("0.700", (0.704, 0.691, 0.718), (0.701, 0.698, 0.703), [], REPRODUCED),
    ("0.719", (0.704, 0.691, 0.7186), None, [], REPRODUCED),        # inside once the printed rounding is allowed
    ("0.7190", (0.704, 0.691, 0.7186), None, [], DIFFERS),          # a printing one digit finer is not
    ("0.116", (0.286, 0.272, 0.299), (0.290, 0.288, 0.292), [], INCONSISTENT),
    ("0.116", (0.286, 0.272, 0.299), (0.301, 0.299, 0.303), [], INCONSISTENT),   # the two CIs touch
    ("0.223", (0.470, 0.455, 0.485), (0.800, 0.798, 0.802), ["votes are beta-binomial"], DIFFERS),
    ("0.693", (0.847, 0.837, 0.857), None, ["repair is round-dependent"], DIFFERS),
    ("0.875", (0.951, 0.944, 0.957), (0.875, 0.873, 0.877), [], DIFFERS),   # the paper matches its model, we do not
])
def test_the_verdicts(paper, ours, implied, departures, expected):
    label, how = verdict(float(paper), pc._half_unit(paper), ours, implied, departures)
    assert label == expected
    assert bool(how) == (expected != REPRODUCED)
    for text in departures:
        assert text in how


def test_the_departures_name_what_differs_from_the_papers_model():
    assert pc.model_departures(vrr.load_config("sim_qwen3b_pmstress")) == []
    assert "beta-binomial" in pc.model_departures(vrr.load_config("sim_llama3_8b_pmstress"))[0]
    assert "round-dependent" in pc.model_departures(vrr.load_config("sim_nonstationary"))[0]
    departures = pc.model_departures(vrr.load_config("sim_correlated_pmstress"))
    assert any("calibration ppi where the paper uses" in d for d in departures)


def test_the_implied_values_follow_the_papers_model_and_are_cached_by_their_inputs(tmp_path):
    """No repair and Fixed K=k are the Markov chain of Sec. 3 (Q_k+1 = Q_k (1 - beta) + (1 - Q_k) alpha); TPM uses
    the true parameters. The cache returns the stored values for the same inputs and recomputes for others."""
    n = 40_000
    values = implied_values(["sim_qwen3b_pmstress", "sim_llama3_8b_pmstress"], tmp_path, n=n)
    for name in values:
        p = vrr.load_config(name)["params"]
        q = [p["pi"]]
        for _ in range(5):
            q.append(q[-1] * (1 - p["beta"]) + (1 - q[-1]) * p["alpha"])
        for policy, k in (("No repair", 0), ("Fixed K=1", 1), ("Fixed K=3", 3), ("Fixed K=5", 5)):
            assert abs(values[name][policy] - q[k]) < 4 * np.sqrt(q[k] * (1 - q[k]) / n), (name, policy)
    # the implied Llama row has binomial votes: its label-free EM is not the collapse of the beta-binomial window
    assert values["sim_llama3_8b_pmstress"]["VRR-Stop"] > 0.7
    cache = tmp_path / "sim_qwen3b_pmstress" / pc.IMPLIED_CACHE   # one file per setting
    stored = json.loads(cache.read_text())
    stored["values"]["sim_qwen3b_pmstress"]["No repair"] = 0.123   # what a reread of the cache returns
    cache.write_text(json.dumps(stored))
    assert implied_values(["sim_llama3_8b_pmstress", "sim_qwen3b_pmstress"], tmp_path, n=n)[
        "sim_qwen3b_pmstress"]["No repair"] == 0.123
    other = implied_values(["sim_qwen3b_pmstress"], tmp_path, n=n, seed=1)   # other inputs: recomputed
    assert other["sim_qwen3b_pmstress"]["No repair"] != 0.123
    assert json.loads(cache.read_text())["key"] != stored["key"]
    # a setting's values do not depend on which others are computed with it
    alone = implied_values(["sim_llama3_8b_pmstress"], tmp_path / "alone", n=n)
    assert alone["sim_llama3_8b_pmstress"] == values["sim_llama3_8b_pmstress"]


def test_a_settings_own_steps_compute_its_implied_values_and_only_where_the_paper_prints_them(tmp_path):
    """04_replay calls setting_implied_values: a transcribed stationary setting gets its values (what 06 then reads
    from the cache), a setting the paper prints nothing for, or one with a round-dependent schedule, gets None."""
    got = pc.setting_implied_values("sim_qwen3b_pmstress", tmp_path, n=20_000)
    assert got == implied_values(["sim_qwen3b_pmstress"], tmp_path, n=20_000)["sim_qwen3b_pmstress"]
    assert (tmp_path / "sim_qwen3b_pmstress" / pc.IMPLIED_CACHE).is_file()
    assert pc.setting_implied_values("mbpp_cpu_loop", tmp_path, n=20_000) is None
    assert "schedule" in vrr.load_config("sim_nonstationary")
    assert pc.setting_implied_values("sim_nonstationary", tmp_path, n=20_000) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_qwen3b_pmstress"]


def _fake_results(root, name, shift):
    """A results root with one setting's stats.json and calibration.json: every policy's V at the implied value
    plus ``shift``, with a 1.5 pp CI."""
    cfg = vrr.load_config(name)
    implied = implied_values([name], root, n=20_000)[name]
    (root / name).mkdir(parents=True, exist_ok=True)
    rows = [{"policy": p, "V": v + shift, "V_low": v + shift - 0.015, "V_high": v + shift + 0.015}
            for p, v in implied.items()]
    (root / name / "stats.json").write_text(json.dumps({"policy_table": rows}))
    (root / name / "calibration.json").write_text(json.dumps({"loop_dynamics": {"N": 4500, "label": cfg["label"]},
                                                               "arrays_path": "unused"}))


def test_the_table_has_one_row_with_a_verdict_per_printed_value(tmp_path):
    root = tmp_path / "results"
    _fake_results(root, "sim_qwen3b_pmstress", 0.0)
    rows = table_paper_comparison(root, tmp_path / "tables", implied_n=20_000)
    expected = {(g["setting"], g["policy"]) for g in paper_value_groups(read_paper_values())
                if g["setting"] == "sim_qwen3b_pmstress"}
    assert {(r["setting"], r["policy"]) for r in rows} == expected and len(rows) == len(expected)
    assert all(r["verdict"] in VERDICTS for r in rows)
    by = {r["policy"]: r for r in rows}
    assert by["No repair"]["verdict"] == REPRODUCED                     # 0.700 = pi
    assert by["Fixed K=5"]["verdict"] == INCONSISTENT                   # 0.116 against the chain's 0.29
    written = list(csv.DictReader(open(tmp_path / "tables" / "paper_comparison.csv")))
    assert [w["policy"] for w in written] == [r["policy"] for r in rows] and written[0]["implied_N"] == "20000"
    tex = (tmp_path / "tables" / "paper_comparison.tex").read_text()
    assert "Qwen-3B stress (sim.) & Fixed K=5 & 0.116 &" in tex
    summary = paper_comparison_summary(written)
    counts = [int(x) for x in re.findall(r"(\d+) (?:are|is|differ)", summary)]
    assert f"Of the {len(rows)} validity values" in summary and sum(counts) == len(rows)


def test_the_summary_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match="unknown verdict"):
        paper_comparison_summary([{"setting": "s", "verdict": "maybe"}])
