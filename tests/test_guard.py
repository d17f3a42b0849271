"""Eq. 9 keep-best rule and Lemma 1 (App. A "Proof and Numerical Evaluation of Lemma 1")."""
import numpy as np
import pytest

from vrr.core.guard import hoeffding_bound, keep_best, replacement_tail_exact, union_bound, union_bound_exact
from vrr.policies.reference import guard_one

M, DELTA = 8, 5
# (rho0, rho1) from Table "loop-dynamics" and the paper's exact single-round tails.
PAPER_TAILS = {
    "Qwen-3B": (0.364, 0.177, 5.6e-6),
    "Qwen-7B": (0.725, 0.048, 1.0e-6),
    "Mistral": (0.707, 0.111, 5.3e-5),
    "Llama": (0.358, 0.609, 5.9e-3),
}


@pytest.mark.parametrize("name", sorted(PAPER_TAILS))
def test_lemma1_exact_tails_match_paper(name):
    rho0, rho1, paper = PAPER_TAILS[name]
    exact = replacement_tail_exact(M, rho0, rho1, DELTA)
    assert exact == pytest.approx(paper, rel=0.05)
    # the five-round union bound stays below 3% even for Llama
    assert union_bound_exact(M, rho0, rho1, DELTA, 5) < 0.03
    # Hoeffding is conservative relative to the exact tail
    assert hoeffding_bound(M, 1 - rho0 - rho1, DELTA) >= exact


def test_exact_tail_matches_monte_carlo():
    rng = np.random.default_rng(0)
    rho0, rho1, delta = 0.45, 0.35, 2
    n = 400_000
    d = rng.binomial(M, rho0, n) - rng.binomial(M, 1 - rho1, n)
    mc = np.mean(d >= delta)
    assert replacement_tail_exact(M, rho0, rho1, delta) == pytest.approx(mc, abs=4 * np.sqrt(mc / n))


def test_hoeffding_closed_form_and_union_cap():
    assert hoeffding_bound(8, 0.5, 5) == pytest.approx(np.exp(-(4 + 5) ** 2 / 16))
    assert union_bound(8, 0.0, 0, 5) == 1.0
    with pytest.raises(ValueError):
        hoeffding_bound(8, -0.1, 5)


def test_keep_best_rule():
    S = np.array([[4, 6, 8, 2, 8, 8],    # 8 - 4 < 5 ... never replaced
                  [1, 6, 3, 8, 2, 7],    # replaced at round 1 (6 >= 1 + 5), then never
                  [0, 5, 4, 8, 8, 8],    # replaced at 1 (5 >= 5); 8 < 5 + 5
                  [8, 0, 0, 0, 0, 0]])
    inc = keep_best(S, 5)
    assert inc[:, -1].tolist() == [0, 1, 1, 0]
    assert inc[1].tolist() == [0, 1, 1, 1, 1, 1]
    # delta = 0: the latest plan with at least the incumbent's votes wins
    assert keep_best(S, 0)[:, -1].tolist() == [5, 3, 5, 0]


def test_keep_best_matches_reference_loop():
    rng = np.random.default_rng(3)
    S = rng.integers(0, 9, (300, 6))
    for delta in range(0, 9):
        inc = keep_best(S, delta)[:, -1]
        assert inc.tolist() == [guard_one(list(row), delta)[0] for row in S]
