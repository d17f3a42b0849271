"""The fast paths of the chain give the same numbers, to the last bit, as the literal computations they replace.

``make reproduce`` must write byte-identical tables and figures whatever the batching, so these tests
compare with exact equality: the grid search of the error radius against the batched filter, EM chains
run alone against the same chains run in a batch, the bootstrap box of one fold alone against the
cross-fit batch, and the cached beta-binomial likelihood against scipy's closed form.
"""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vrr.calibration.estimators import (_em_restarts, _em_starts, binomial_mixture_em, em_step,
                                        binomial_mixture_em_each, binomial_mixture_em_many, calibrate)
from vrr.calibration.identifiability import (PARAM_NAMES, _gain_path, bootstrap_intervals, bootstrap_intervals_each,
                                             error_radius, radius_grid)
from vrr.core.model import NoiseParams
from vrr.data.simulate import simulate_setting


def grid_search_radius(S, M, point, intervals, grid=5):
    """B_k as the literal search: one full belief filter per point of ``radius_grid`` (App. A)."""
    g_hat = _gain_path(S, M, point)
    radius = np.zeros_like(g_hat)
    for params in radius_grid(intervals, grid):
        radius = np.maximum(radius, np.abs(_gain_path(S, M, params) - g_hat))
    return g_hat, radius


@st.composite
def radius_inputs(draw):
    n = draw(st.integers(1, 12))
    rounds = draw(st.integers(1, 4))
    M = draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    S = rng.integers(0, M + 1, (n, rounds))
    per_instance = draw(st.booleans())
    edge = draw(st.sampled_from([0.0, 1e-9, 0.02]))   # 0: boxes touching 0 and 1 (log 0 paths)
    point, intervals = {}, {}
    for name in PARAM_NAMES:
        size = n if per_instance else None
        lo = rng.uniform(edge, 0.6, size)
        hi = np.minimum(lo + rng.uniform(0.0, 0.4, size), 1.0 - edge)
        point[name] = lo + rng.uniform(0, 1, size) * (hi - lo)
        intervals[name] = (lo, hi)
    return S, M, point, intervals, draw(st.sampled_from([2, 3, 5]))


@settings(max_examples=60, deadline=None)
@given(radius_inputs())
def test_error_radius_equals_the_grid_search_bit_for_bit(inputs):
    S, M, point, intervals, grid = inputs
    g_ref, r_ref = grid_search_radius(S, M, point, intervals, grid)
    g_hat, radius = error_radius(S, M, point, intervals, grid)
    assert g_hat.tobytes() == g_ref.tobytes()
    assert radius.tobytes() == r_ref.tobytes()


def masked_em_restarts(hists, M, w, p1, p0, tol, max_iter):
    """The EM over all chains at once for max_iter rounds, converged chains frozen by masks."""
    h = np.asarray(hists, dtype=float)[:, None, :]
    total = h.sum(axis=-1)
    w, p1, p0 = (np.asarray(a, dtype=float).copy() for a in (w, p1, p0))
    prev = np.full(w.shape, -np.inf)
    ll = prev.copy()
    active = np.ones(w.shape, dtype=bool)
    n_iter = np.zeros(w.shape, dtype=np.int64)
    for it in range(1, max_iter + 1):
        ll_new, w_new, p1_new, p0_new = em_step(h, total, M, w, p1, p0)
        ll = np.where(active, ll_new, ll)
        n_iter = np.where(active, it, n_iter)
        done = active & (ll_new - prev < tol)
        w, p1, p0 = (np.where(active & ~done, new, old) for new, old in ((w_new, w), (p1_new, p1), (p0_new, p0)))
        prev = np.where(active, ll_new, prev)
        active &= ~done
        if not active.any():
            break
    return w, p1, p0, ll, n_iter, ~active


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 10), st.integers(1, 6), st.integers(0, 2**31 - 1), st.sampled_from([5, 40, 2000]))
def test_em_chains_leave_the_batch_when_converged_with_the_same_values(M, H, seed, max_iter):
    rng = np.random.default_rng(seed)
    hists = rng.integers(0, 30, (H, M + 1)).astype(float)
    hists[:, 0] += 1                                            # no empty histogram
    starts = np.stack([_em_starts(rng, 4) for _ in range(H)])
    args = (hists, M, starts[..., 0], starts[..., 1], starts[..., 2], 1e-10, max_iter)
    for got, want in zip(_em_restarts(*args), masked_em_restarts(*args)):
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_em_fits_do_not_depend_on_their_batch():
    rng = np.random.default_rng(3)
    samples = [rng.binomial(8, rng.uniform(0.2, 0.8), rng.integers(30, 200)) for _ in range(6)]
    samples[2] = rng.binomial(8, 0.5, 150)                      # J = 0: the chains run long
    seeds = [11, 4, 9, 0, 7, 7]
    batch = binomial_mixture_em_each(samples, 8, seeds)
    for sample, seed, fit in zip(samples, seeds, batch):
        assert repr(binomial_mixture_em(sample, 8, seed=seed)) == repr(fit)
    hists = np.stack([np.bincount(x, minlength=9) for x in samples])
    rho0, rho1, w = binomial_mixture_em_many(hists, 8, seed=5)
    for i, h in enumerate(hists):
        one = binomial_mixture_em_many(h[None], 8, seed=5)
        assert (one[0][0], one[1][0], one[2][0]) == (rho0[i], rho1[i], w[i])


@pytest.mark.parametrize("method", ["binomial_em", "mom"])
def test_bootstrap_box_of_one_fold_equals_the_batched_folds(method):
    truth = NoiseParams(rho0=0.3, rho1=0.2, alpha=0.35, beta=0.3, pi=0.6)
    data = [simulate_setting(truth, n=n, k_max=2, M=8, seed=s) for n, s in ((90, 1), (60, 2), (120, 3))]
    samples = [(d.S, d.y, 10 + i) for i, d in enumerate(data)]
    batch = bootstrap_intervals_each(samples, 8, n_boot=40, method=method)
    for (S, y, seed), box in zip(samples, batch):
        assert bootstrap_intervals(S, y, 8, n_boot=40, seed=seed, method=method) == box
        point = calibrate(S, y, 8, seed=seed, method=method).params.as_dict()
        assert all(box[k][0] <= point[k] <= box[k][1] for k in PARAM_NAMES)


def test_the_first_notebooks_start_without_scipy_stats_statsmodels_or_matplotlib():
    """01_generate (and the notebook runner) need only the protocol and the simulator: importing them
    must not load the heavy libraries that every kernel of the chain would pay for."""
    code = ("import runpy, sys, contextlib, io\n"
            "sys.argv = ['vrr', '--help']\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    runpy.run_module('vrr', run_name='__main__')\n"
            "import vrr.settings, vrr.chain, vrr.core.model, vrr.data.simulate\n"
            "print(' '.join(m for m in ('scipy.stats', 'scipy.optimize', 'statsmodels', 'matplotlib', 'pandas') "
            "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
