"""The loop pairs' validity by round with McNemar-resolved changes (vrr.stats.round_changes,
vrr.report.table_loop_pairs) and the 06 parameter that names the pairs."""
import copy
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


# ---------------------------------------------------------------- the stated peak test (vrr.stats.peak)
from itertools import product  # noqa: E402

from vrr.stats.peak import difference_in_differences, holm_round_tests, max_sign_flip_test, peak_test  # noqa: E402


def _brute_force_max_flip_p(y, rounds):
    """Every sign vector over the instances that change, the one-sided max statistic's exact p."""
    d = y[:, list(rounds)].astype(int) - y[:, [0]].astype(int)
    d = d[np.any(d != 0, axis=1)]
    observed = d.sum(axis=0).max()
    hits = [(np.array(signs)[:, None] * d).sum(axis=0).max() >= observed for signs in product((1, -1), repeat=len(d))]
    return float(np.mean(hits))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 40), st.sampled_from([(1,), (1, 2), (1, 2, 3), (2, 3)]))
def test_the_max_sign_flip_test_is_the_exact_permutation_test_when_few_instances_change(seed, n, rounds):
    rng = np.random.default_rng(seed)
    y = np.repeat(rng.random((n, 1)) < 0.5, 4, axis=1)   # instances that never change
    changed = rng.choice(n, size=min(n, 10), replace=False)   # at most 2**10 sign vectors to enumerate
    y[changed] = rng.random((changed.size, 4)) < 0.5
    res = max_sign_flip_test(y, rounds, n_resamples=1000)
    assert res["p"] == pytest.approx(_brute_force_max_flip_p(y, rounds), abs=1e-12)
    changes = [y[:, k].mean() - y[:, 0].mean() for k in rounds]
    assert res["change"] == pytest.approx(max(changes)) and res["round"] == rounds[int(np.argmax(changes))]


def test_the_sampled_sign_flip_null_agrees_with_the_enumerated_one(monkeypatch):
    """Above the enumeration limit the null is drawn: on the same data its p is the exact p within its noise, and
    it agrees with scipy.stats.permutation_test's one-sample sign flip of the balanced-ternary code of each
    instance's change vector (the code of -d is minus the code of d)."""
    from scipy import stats

    import vrr.stats.peak as peak

    rng = np.random.default_rng(3)
    y = (rng.random((300, 4)) < np.array([0.45, 0.5, 0.53, 0.5])).astype(int)
    exact = max_sign_flip_test(y, (1, 2, 3))["p"]
    monkeypatch.setattr(peak, "EXACT_LIMIT", 0)
    sampled = max_sign_flip_test(y, (1, 2, 3), n_resamples=20_000)["p"]
    assert abs(sampled - exact) < 4 * np.sqrt(exact * (1 - exact) / 20_000)
    d = y[:, 1:] - y[:, [0]]
    codes = np.sum(d * 3 ** np.arange(3), axis=1)

    def statistic(c, axis=-1):
        digits, rest = [], c
        for _ in range(3):
            digits.append((rest + 1) % 3 - 1)
            rest = (rest - digits[-1]) // 3
        return np.max([np.sum(g, axis=axis) for g in digits], axis=0)
    ref = stats.permutation_test((codes,), statistic, permutation_type="samples", vectorized=True,
                                 n_resamples=20_000, alternative="greater", rng=np.random.default_rng(0)).pvalue
    assert abs(ref - exact) < 4 * np.sqrt(exact * (1 - exact) / 20_000)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(1, 30))
def test_on_one_round_the_max_test_and_holm_are_the_one_sided_exact_mcnemar(gained, lost, unchanged):
    y = np.zeros((gained + lost + unchanged, 2), dtype=int)
    y[:gained, 1] = 1
    y[gained:gained + lost, 0] = 1
    expected = binomtest(gained, gained + lost, 0.5, alternative="greater").pvalue if gained + lost else 1.0
    holm, = holm_round_tests(y, (1,))
    assert (holm["gained"], holm["lost"]) == (gained, lost)
    assert holm["p"] == holm["p_holm"] == pytest.approx(expected, rel=1e-9)
    assert max_sign_flip_test(y, (1,))["p"] == pytest.approx(expected, rel=1e-9)   # one class: enumerated


def test_holm_adjusts_the_rounds_as_statsmodels_states_it():
    y = np.zeros((60, 4), dtype=int)
    y[:20, 1] = 1           # round 1: 20 gained, 5 lost
    y[20:25, 0] = 1
    y[20:25, 2] = 1         # round 2: 0 gained, 0 lost of those; 12 gained
    y[30:42, 2] = 1
    y[:3, 3] = 1            # round 3: 3 gained, 5 lost
    rows = holm_round_tests(y, (1, 2, 3))
    p = sorted((r["p"], r["round"]) for r in rows)
    adjusted = np.maximum.accumulate([min(1.0, (len(p) - i) * pi) for i, (pi, _) in enumerate(p)])
    assert [r["p_holm"] for r in sorted(rows, key=lambda r: r["p"])] == pytest.approx(adjusted)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_the_difference_in_differences_bootstrap_on_counts_matches_resampling_instances(seed, paired):
    """The multinomial over the cells is the instance bootstrap: its CI agrees with scipy's percentile bootstrap
    of the same statistic to within the resampling noise of 4,000 draws."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    y, yc = rng.random((150, 3)) < 0.5, rng.random((150, 3)) < 0.45
    did = difference_in_differences(y, yc, 2, paired=paired, n_resamples=4000, seed=1)
    d, dc = y[:, 2].astype(float) - y[:, 0], yc[:, 2].astype(float) - yc[:, 0]
    assert did.estimate == pytest.approx(d.mean() - dc.mean())
    ref = stats.bootstrap((d, dc), lambda a, b, axis=-1: a.mean(axis) - b.mean(axis), paired=paired,
                          n_resamples=4000, method="percentile", vectorized=True, rng=np.random.default_rng(2))
    assert did.low == pytest.approx(ref.confidence_interval.low, abs=0.025)
    assert did.high == pytest.approx(ref.confidence_interval.high, abs=0.025)
    assert did.low <= did.estimate <= did.high


def test_the_peak_test_resolves_a_rise_ignores_a_fall_and_refuses_bad_input():
    n = 200
    y = np.zeros((n, 5), dtype=int)
    y[:40, 1:3] = 1          # 40 fixed at rounds 1-2, lost again at round 3
    control = np.zeros((n, 5), dtype=int)
    res = peak_test(y, control, paired=True, rounds=(1, 2, 3), did_round=2, n_resamples=2000)
    assert res["resolved"] and res["peak_round"] == 1 and res["p_max"] < 0.001
    assert res["did"] == pytest.approx(0.2) and res["did_low"] > 0.1
    falling = 1 - y          # a fall is not a peak
    assert not peak_test(falling, control, n_resamples=2000)["resolved"]
    assert max_sign_flip_test(falling, (1, 2, 3), n_resamples=2000)["p"] > 0.9
    for bad, rounds in ((np.ones(5), (1,)), (y, (0, 1)), (y, (1, 5)), (y, (1, 1)), (y * 2, (1,))):
        with pytest.raises(ValueError, match="peak test"):
            max_sign_flip_test(bad, rounds)
    with pytest.raises(ValueError, match="paired arms"):
        difference_in_differences(y, control[:100], paired=True)


def test_the_table_reports_the_stated_peak_test(calibration, tmp_path):
    """The simulated pair's peak (rounds 1-2 repair before the round-3 mismatch) is resolved and its rise beats
    the resampling control; the two simulated windows are different draws, so they are resampled on their own."""
    pair = ("sim_nonstationary", "sim_nonstationary_control")
    root = calibration(pair[0]).parent.parent
    calibration(pair[1])
    panel, = vrr.report.loop_dynamics_panels(root, [pair], n_resamples=2000)
    rows = table_loop_pairs([panel], tmp_path)
    windows = [vrr.load_setting(REPO_ROOT / json.loads((root / s / "calibration.json").read_text())["arrays_path"])
               for s in pair]
    expected = peak_test(windows[0].y, windows[1].y, paired=False, n_resamples=2000)
    assert rows[0]["peak_p_max"] == expected["p_max"] and rows[0]["peak_resolved"] and not rows[0]["did_paired"]
    assert all(r["did"] == expected["did"] and r["peak_rounds"] == "1-3" for r in rows)
    assert expected["did_low"] > 0
    assert [r["round"] for r in rows if not np.isnan(r["p_holm_rise"])] == [1, 2, 3]
    written = list(csv.DictReader(open(tmp_path / "loop_pairs.csv")))
    assert written[0]["peak_resolved"] == "True" and float(written[2]["p_holm_rise"]) < 0.05


def test_the_real_loop_and_its_control_are_resampled_together():
    from vrr.report.paper import same_problems

    loop, control = (vrr.load_setting(REPO_ROOT / "data" / "real" / s / "arrays.npz")
                     for s in ("mbpp_cpu_loop", "mbpp_cpu_loop_resample"))
    assert same_problems(loop, control)
    # the first 100 of the same problems, and the same 200 in another order, are other windows
    assert not same_problems(loop, vrr.load_setting(REPO_ROOT / "data" / "real" / "mbpp_cpu_nonstationary" / "arrays.npz"))
    shuffled = copy.deepcopy(control)
    shuffled.meta["indices"] = list(reversed(control.meta["indices"]))
    assert not same_problems(loop, shuffled)
