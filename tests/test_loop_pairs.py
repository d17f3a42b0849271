"""The loop pairs' validity by round with McNemar-resolved changes (vrr.stats.round_changes,
vrr.report.table_loop_pairs) and the 06 parameter that names the pairs."""
import csv
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import binomtest

import vrr
from vrr.common.paths import REPO_ROOT
from vrr.report import parse_loop_pairs, table_loop_pairs
from vrr.stats import round_changes


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 40), st.integers(2, 5))
def test_round_changes_count_the_discordant_pairs_and_test_them_exactly(seed, n, rounds):
    y = np.random.default_rng(seed).random((n, rounds)) < 0.5
    rows = round_changes(y)
    assert [r["round"] for r in rows] == list(range(rounds))
    assert np.isnan(rows[0]["p_vs_round0"]) and rows[0]["gained"] == rows[0]["lost"] == 0
    for k in range(1, rounds):
        gained, lost = int(np.sum(~y[:, 0] & y[:, k])), int(np.sum(y[:, 0] & ~y[:, k]))
        assert (rows[k]["gained"], rows[k]["lost"]) == (gained, lost)
        assert rows[k]["Q"] == pytest.approx(y[:, 0].mean() + (gained - lost) / n)
        # exact McNemar = the two-sided binomial test of the discordant pairs against 1/2
        expected = binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
        assert rows[k]["p_vs_round0"] == pytest.approx(expected, rel=1e-9)
        up, down = int(np.sum(~y[:, k - 1] & y[:, k])), int(np.sum(y[:, k - 1] & ~y[:, k]))
        expected = binomtest(up, up + down, 0.5).pvalue if up + down else 1.0
        assert rows[k]["p_vs_previous"] == pytest.approx(expected, rel=1e-9)


def test_round_changes_resolve_a_peak_and_reject_bad_input():
    # 30 instances: 12 fixed by round 1, then 10 of the 12 broken again at round 2
    y = np.zeros((30, 3), dtype=bool)
    y[:12, 1] = True
    y[:2, 2] = True
    rows = round_changes(y)
    assert rows[1]["p_vs_round0"] < 0.001 and rows[2]["p_vs_previous"] < 0.01 and rows[2]["p_vs_round0"] == 0.5
    with pytest.raises(ValueError, match="round_changes"):
        round_changes(np.ones(5))


def test_parse_loop_pairs_reads_the_parameter_and_names_a_bad_pair():
    assert parse_loop_pairs("a:b, c:d,") == [("a", "b"), ("c", "d")]
    assert parse_loop_pairs("") == []
    for bad in ("a", "a:b:c", "a:", ":b", "a:b,c"):
        with pytest.raises(ValueError, match="loop_pairs"):
            parse_loop_pairs(bad)


def test_the_table_reads_each_pair_from_its_calibrations(calibration, tmp_path):
    """On the simulated pair: one row per round, the mismatch marked from the YAML schedule's start, Q equal to
    each window's labels, and the repair's collapse after the switch resolved while resampling stays put."""
    pair = ("sim_nonstationary", "sim_nonstationary_control")
    root = calibration(pair[0]).parent.parent
    calibration(pair[1])
    panels = vrr.report.loop_dynamics_panels(root, [pair, ("sim_nonstationary", "no_such_control")])
    rows = table_loop_pairs(panels, tmp_path)
    start = vrr.load_config(pair[0])["schedule"]["start_round"]
    windows = [vrr.load_setting(REPO_ROOT / json.loads((root / s / "calibration.json").read_text())["arrays_path"])
               for s in pair]
    assert [r["round"] for r in rows] == list(range(windows[0].y.shape[1]))   # the incomplete pair is left out
    assert [r["perturbed"] for r in rows] == [k >= start for k in range(len(rows))]
    assert [r["Q_repair"] for r in rows] == pytest.approx(windows[0].y.mean(axis=0).tolist())
    assert [r["Q_resample"] for r in rows] == pytest.approx(windows[1].y.mean(axis=0).tolist())
    switch = rows[start]
    assert switch["Q_repair"] < rows[start - 1]["Q_repair"] and switch["p_repair_vs_previous"] < 1e-6
    assert all(r["p_resample_vs_previous"] > 0.01 for r in rows[start:])
    panel, = panels
    assert panel["p_main_vs_round0"][1:] == [r["p_repair_vs_round0"] for r in rows][1:]   # the figure's rings
    written = list(csv.DictReader(open(tmp_path / "loop_pairs.csv")))
    assert len(written) == len(rows) and written[start]["perturbed"] == "True"


def test_the_mismatch_rounds_follow_each_settings_perturbation_block():
    from vrr.report import perturbed_rounds

    assert perturbed_rounds("mbpp_cpu_nonstationary", 7) == [False, False, False, True, True, True, True]
    assert perturbed_rounds("mbpp_cpu_loop_resample", 7) == [False] * 7   # edit: none
    start = vrr.load_config("sim_nonstationary")["schedule"]["start_round"]
    assert perturbed_rounds("sim_nonstationary", 7) == [k >= start for k in range(7)]
    assert perturbed_rounds("mbpp_cpu_favorable", 3) == [False] * 3   # stationary: no mismatch in any round
