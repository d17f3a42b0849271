"""The statistics' fast paths compute the same bits as the formulas they implement, and each fit once.

* ``em_step`` writes its intermediates into buffers: it must equal the EM step written as its formula;
* ``exchangeable_vote_log_pmf`` builds both running products in one buffer: it must equal the product form
  written out (and the beta-binomial of scipy, to rounding);
* the calibration check, the cross-fit and the bootstrap draws are kept per content of their inputs
  (``vrr.calibration._memo``): a second call returns the same result without computing it again, a changed input
  computes anew, and a caller that edits its result does not edit the next caller's;
* the draws behind B_k take rho0, rho1 (phi0, phi1) from the resamples' vote-noise fits by calibrate's rules
  without calling calibrate per resample: the same draws as calling it.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import special, stats

from vrr.calibration import _memo
from vrr.calibration import gain_radius
from vrr.calibration.check import calibration_check
from vrr.calibration.estimators import calibrate, crossfit
from vrr.calibration.mixture import VoteNoiseFit, em_step
from vrr.common import fpmath
from vrr.core.belief import exchangeable_vote_log_pmf


def em_step_formula(h, total, M, w, p1, p0):
    """The EM step of the binomial mixture as its formula reads (fresh arrays for every intermediate)."""
    s = np.arange(M + 1, dtype=float)
    log_comb = special.gammaln(M + 1) - special.gammaln(s + 1) - special.gammaln(M - s + 1)
    eps = 1e-12
    lv = fpmath.log(w)[..., None] + log_comb + s * fpmath.log(p1)[..., None] + (M - s) * fpmath.log1p(-p1)[..., None]
    li = fpmath.log1p(-w)[..., None] + log_comb + s * fpmath.log(p0)[..., None] + (M - s) * fpmath.log1p(-p0)[..., None]
    norm = np.logaddexp(lv, li)
    resp = fpmath.exp(lv - norm)
    ll = (norm * h).sum(axis=-1)
    nv = (resp * h).sum(axis=-1)
    ni = total - nv
    w_new = np.clip(nv / total, eps, 1 - eps)
    p1_new = np.clip(np.where(nv > eps, (resp * s * h).sum(axis=-1) / (M * np.maximum(nv, eps)), p1), eps, 1 - eps)
    p0_new = np.clip(np.where(ni > eps, ((1 - resp) * s * h).sum(axis=-1) / (M * np.maximum(ni, eps)), p0),
                     eps, 1 - eps)
    return ll, w_new, p1_new, p0_new


def log_pmf_formula(M, accept_mean, phi):
    """The exchangeable-vote log-pmf's product form, each running product concatenated after the empty one."""
    mu = np.asarray(accept_mean, dtype=float)[..., None]
    phi = np.asarray(phi, dtype=float)[..., None]
    theta = phi / (1.0 - phi)
    i = np.arange(M, dtype=float)
    with np.errstate(divide="ignore"):
        accept_terms = fpmath.log(mu + i * theta)
        reject_terms = fpmath.log((1.0 - mu) + i * theta)
    none = np.zeros(accept_terms.shape[:-1] + (1,))
    accept = np.concatenate([none, np.cumsum(accept_terms, axis=-1)], axis=-1)
    reject = np.concatenate([none, np.cumsum(reject_terms, axis=-1)], axis=-1)
    norm = np.cumsum(fpmath.log1p(i * theta), axis=-1)[..., -1:] if M else none
    return accept + reject[..., ::-1] - norm


@settings(max_examples=80, deadline=None)
@given(M=st.integers(1, 20), chains=st.integers(1, 40), seed=st.integers(0, 2**31 - 1),
       edge=st.sampled_from([None, 1e-12, 1 - 1e-12]))
def test_em_step_is_its_formula_bit_for_bit(M, chains, seed, edge):
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 30, (chains, M + 1)).astype(float)
    h[rng.random(h.shape) < 0.3] = 0.0
    h[:, rng.integers(0, M + 1)] += 1.0
    w, p1, p0 = (rng.uniform(1e-12, 1 - 1e-12, chains) for _ in range(3))
    if edge is not None:
        w[0], p1[-1], p0[chains // 2] = edge, edge, edge
    got = em_step(h, h.sum(axis=-1), M, w, p1, p0)
    want = em_step_formula(h, h.sum(axis=-1), M, w, p1, p0)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=80, deadline=None)
@given(M=st.integers(0, 24), shape=st.sampled_from([(), (1,), (5,), (2, 7)]), seed=st.integers(0, 2**31 - 1),
       edges=st.booleans())
def test_exchangeable_vote_log_pmf_is_its_product_form_bit_for_bit(M, shape, seed, edges):
    rng = np.random.default_rng(seed)
    mu, phi = rng.uniform(0, 1, shape), rng.uniform(0, 0.99, shape)
    if edges and shape:
        mu.flat[0], phi.flat[-1] = rng.choice([0.0, 1.0]), 0.0
    got = exchangeable_vote_log_pmf(M, mu, phi)
    want = log_pmf_formula(M, mu, phi)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("M, mu, phi", [(8, 0.3, 0.2), (16, 0.9, 0.05), (5, 0.5, 0.6), (3, 0.1, 0.0)])
def test_exchangeable_vote_log_pmf_is_the_beta_binomial(M, mu, phi):
    s = np.arange(M + 1)
    if phi == 0:
        want = stats.binom.logpmf(s, M, mu)
    else:
        a = mu * (1 - phi) / phi
        want = stats.betabinom.logpmf(s, M, a, (1 - mu) * (1 - phi) / phi)
    got = exchangeable_vote_log_pmf(M, mu, phi) + special.gammaln(M + 1) - special.gammaln(s + 1) \
        - special.gammaln(M - s + 1)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- one computation per content
@pytest.mark.parametrize("a, b, same", [
    (np.array([1, 2, 3]), np.array([1, 2, 3]), True),
    (np.array([1, 2, 3]), np.array([1, 2, 4]), False),
    (np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0]), False),        # another dtype, other bits
    (np.array([[1, 2], [3, 4]]), np.array([1, 2, 3, 4]), False),     # another shape
    (0.1, float("0.1"), True),                                      # the same float
    (0.1, np.nextafter(0.1, 1.0), False),                           # one ulp apart
    (None, 0, False),
    ((1, [2, 3]), (1, [2, 3]), True),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
])
def test_content_key_tells_inputs_apart_by_their_bits(a, b, same):
    assert (_memo.content_key(a) == _memo.content_key(b)) is same


def test_memoized_computes_once_per_content_and_hands_out_copies():
    calls = []

    @_memo.memoized
    def fit(x, level=0.5):
        calls.append(1)
        return {"sum": float(np.sum(x)), "items": [level]}

    x = np.arange(5.0)
    first = fit(x)
    first["items"].append("edited")
    again = fit(x.copy())
    assert again == {"sum": 10.0, "items": [0.5]} and len(calls) == 1
    fit(x, level=0.25)
    x[0] = 1.0
    fit(x)
    assert len(calls) == 3


def _probe(rng, n=60, M=8):
    y = rng.random(n) < 0.5
    return np.where(y, rng.binomial(M, 0.8, n), rng.binomial(M, 0.25, n)), y


def test_the_calibration_check_is_computed_once_per_input(monkeypatch):
    rng = np.random.default_rng(3)
    S_u = rng.binomial(8, np.where(rng.random(120) < 0.6, 0.8, 0.2))
    probe_S, probe_y = _probe(rng)
    import vrr.calibration.check as check

    calls = []
    real = check.em_rates
    monkeypatch.setattr(check, "em_rates", lambda *a, **k: calls.append(1) or real(*a, **k))
    check._check.cache_clear()
    one = calibration_check(S_u, 8, probe_S, probe_y, 8, n_boot=20, seed=1)
    two = calibration_check(list(S_u), 8, probe_S.astype(float), probe_y, 8, n_boot=20, seed=1)
    assert one == two and len(calls) == 1
    calibration_check(S_u, 8, probe_S, probe_y, 8, n_boot=20, seed=2)
    assert len(calls) == 2


def test_a_cached_crossfit_is_the_crossfit_and_not_shared_by_reference():
    rng = np.random.default_rng(5)
    y = rng.random((80, 3)) < 0.6
    S = np.where(y, rng.binomial(8, 0.8, y.shape), rng.binomial(8, 0.3, y.shape))
    one = crossfit(S, y, 8, seed=2)
    one.rho0[:] = -1.0
    two = crossfit(S, y, 8, seed=2)
    assert (two.rho0 >= 0).all()
    assert two.to_dict() == crossfit(S.copy(), y.copy(), 8, seed=2).to_dict()


_FITS = [VoteNoiseFit(0.2, 0.1, 0.6), VoteNoiseFit(float("nan"), 0.3, 0.5), VoteNoiseFit(-1e-3, 1.2, 0.5),
         VoteNoiseFit(0.2, float("nan"), 0.5, phi0=float("nan"), phi1=0.995),
         VoteNoiseFit(0.05, 0.4, 0.5, phi0=0.3, phi1=-0.01)]


@pytest.mark.parametrize("likelihood", ["binomial", "beta_binomial"])
@pytest.mark.parametrize("fit", _FITS)
def test_a_draws_rates_are_calibrates_rates(fit, likelihood):
    """What a draw takes from a resample's vote-noise fit is what calibrate makes of that fit (NaN, clipping)."""
    rng = np.random.default_rng(2)
    y = rng.random((30, 2)) < 0.5
    S = rng.integers(0, 9, (30, 2))
    if likelihood == "beta_binomial" and fit.phi0 is None:
        with pytest.raises(ValueError, match="phi0"):
            gain_radius._vote_parameters(fit, likelihood)
        with pytest.raises(ValueError, match="phi0"):
            calibrate(S, y, 8, votes=fit, likelihood=likelihood)
        return
    want = calibrate(S, y, 8, votes=fit, likelihood=likelihood).as_kwargs()
    got = gain_radius._vote_parameters(fit, likelihood)
    assert got == {k: want[k] for k in got}
    assert set(got) == ({"rho0", "rho1"} | ({"phi0", "phi1"} if likelihood == "beta_binomial" else set()))


@settings(max_examples=60, deadline=None)
@given(rho0=st.floats(-0.5, 1.5) | st.just(float("nan")), rho1=st.floats(-0.5, 1.5) | st.just(float("nan")),
       phi0=st.floats(-0.5, 1.5) | st.just(float("nan")), phi1=st.floats(-0.5, 1.5) | st.just(float("nan")))
def test_a_draws_rates_are_calibrates_rates_fuzzed(rho0, rho1, phi0, phi1):
    fit = VoteNoiseFit(rho0, rho1, 0.5, phi0=phi0, phi1=phi1)
    y = np.array([[True, False], [False, True], [True, True]])
    want = calibrate(np.array([[3, 1], [0, 8], [5, 6]]), y, 8, votes=fit, likelihood="beta_binomial").as_kwargs()
    got = gain_radius._vote_parameters(fit, "beta_binomial")
    assert got == {k: want[k] for k in got}


def test_labeled_probe_draws_are_the_labeled_fits_of_the_probe_resamples():
    """labeled_mle on the probe: each draw's rates are the labeled MLE of its probe resample (what calibrate fit)."""
    rng = np.random.default_rng(11)
    y = rng.random((70, 3)) < 0.55
    S = np.where(y, rng.binomial(8, 0.75, y.shape), rng.binomial(8, 0.3, y.shape))
    probe_S, probe_y = _probe(rng, 40, 16)
    draws = gain_radius.parameter_draws(S, y, 8, n_boot=12, seed=4, method="labeled_mle", vote_rounds="probe",
                                        probe_S=probe_S, probe_y=probe_y, probe_M=16)
    rng_b = np.random.default_rng(4 + 7919)
    [rng_b.integers(0, 70, 70) for _ in range(12)]                       # the instances' resamples come first
    for b in range(12):
        p = gain_radius._resample_probe(rng_b, probe_S, probe_y)
        cal = calibrate(S, y, 8, method="labeled_mle", vote_rounds="probe", probe_S=probe_S[p], probe_y=probe_y[p],
                        probe_M=16)
        assert (cal.params.rho0, cal.params.rho1) == (draws["rho0"][b], draws["rho1"][b])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 400), seed=st.integers(0, 2**31 - 1), agree=st.floats(0.0, 1.0))
def test_exact_mcnemar_is_statsmodels_bit_for_bit(n, seed, agree):
    from statsmodels.stats.contingency_tables import mcnemar

    from vrr.stats.inference import mcnemar_exact

    rng = np.random.default_rng(seed)
    a = rng.random(n) < 0.5
    b = np.where(rng.random(n) < agree, a, rng.random(n) < 0.5)
    table = [[int(np.sum(a & b)), int(np.sum(a & ~b))], [int(np.sum(~a & b)), int(np.sum(~a & ~b))]]
    want = float(mcnemar(table, exact=True).pvalue)
    assert np.float64(mcnemar_exact(a, b)).tobytes() == np.float64(want).tobytes()


@pytest.mark.parametrize("method, vote_rounds, likelihood", [
    ("binomial_em", "first", "binomial"),
    ("binomial_em", "first", "beta_binomial"),
    ("labeled_mle", "probe", "binomial"),
    ("labeled_mle", "probe", "beta_binomial"),
    ("labeled_mle", "first", "beta_binomial"),
    ("semisupervised_checked", "first", "binomial"),
    ("semisupervised_checked", "first", "beta_binomial"),
    ("ppi", "first", "binomial"),
    ("ppi", "all", "binomial"),
])
def test_the_folds_draws_in_one_batch_are_each_folds_draws_alone(method, vote_rounds, likelihood):
    """parameter_draws_folds (every fold's refits in one batch) against parameter_draws of each fold alone, bit for
    bit, with each fold's own cross-fit fit as the point."""
    rng = np.random.default_rng(17)
    y = rng.random((90, 3)) < 0.55
    S = np.where(y, rng.binomial(8, 0.8, y.shape), rng.binomial(8, 0.3, y.shape))
    probe_S, probe_y = _probe(rng, 50, 8)
    probe = dict(probe_S=probe_S, probe_y=probe_y, probe_M=8) if method != "binomial_em" else {}
    cf = crossfit(S, y, 8, method=method, n_folds=3, seed=1, vote_rounds=vote_rounds, likelihood=likelihood, **probe)
    kw = dict(n_boot=15, method=method, vote_rounds=vote_rounds, likelihood=likelihood, **probe)
    gain_radius._parameter_draws.cache_clear()
    gain_radius._parameter_draws_folds.cache_clear()
    batch = gain_radius.parameter_draws_folds(S, y, 8, cf.folds, seed=1, points=cf.fits, **kw)
    for f, fit in enumerate(cf.fits):
        train = cf.folds != f
        alone = gain_radius.parameter_draws(S[train], y[train], 8, seed=1 + f, point=fit, **kw)
        assert list(alone) == list(batch[f])
        for name in alone:
            assert alone[name].tobytes() == batch[f][name].tobytes(), (f, name)


@pytest.mark.parametrize("method, likelihood, vote_rounds", [("binomial_em", "beta_binomial", "first"),
                                                             ("beta_binomial_em", "binomial", "first"),
                                                             ("beta_binomial_em", "binomial", "all"),
                                                             ("semisupervised_em", "beta_binomial", "first"),
                                                             ("semisupervised_em", "beta_binomial", "all")])
def test_the_crossfits_mixtures_in_one_batch_are_each_folds_fit(method, likelihood, vote_rounds):
    """crossfit fits the folds' capped beta-binomial and semi-supervised mixtures in one batch: each fold's
    calibration is calibrate on the fold's sample alone, bit for bit."""
    from vrr.calibration.estimators import crossfit_folds

    rng = np.random.default_rng(23)
    y = rng.random((75, 3)) < 0.5
    S = np.where(y, rng.binomial(8, 0.8, y.shape), rng.binomial(8, 0.3, y.shape))
    probe_S, probe_y = _probe(rng, 40, 16)
    probe = dict(probe_S=probe_S, probe_y=probe_y, probe_M=16) if method.startswith("semi") else {}
    cf = crossfit(S, y, 8, method=method, n_folds=3, seed=4, vote_rounds=vote_rounds, likelihood=likelihood, **probe)
    folds = crossfit_folds(75, 3, 4)
    for f in range(3):
        alone = calibrate(S[folds != f], y[folds != f], 8, method=method, seed=4 + f, vote_rounds=vote_rounds,
                          likelihood=likelihood, **probe)
        assert repr(alone) == repr(cf.fits[f])


def mixture_nll_formula(z, h_u, M, h_v=None, h_i=None, M_l=None, cap=0.99):
    """The mixture likelihood as written: each parameter's expit, each class's table in its own call."""
    from vrr.calibration.correlated import _dot, _unpack

    w, mu1, phi1, mu0, phi0 = _unpack(z, cap)
    t1, t0 = log_pmf_formula(M, mu1, phi1), log_pmf_formula(M, mu0, phi0)
    ll = _dot(h_u, np.logaddexp(fpmath.log(w)[:, None] + t1, fpmath.log1p(-w)[:, None] + t0))
    if h_v is not None:
        ll = ll + _dot(h_v, log_pmf_formula(M_l, mu1, phi1)) + _dot(h_i, log_pmf_formula(M_l, mu0, phi0))
    return -ll


@settings(max_examples=60, deadline=None)
@given(C=st.integers(1, 30), seed=st.integers(0, 2**31 - 1), labeled=st.booleans(), cap=st.sampled_from([0.3, 0.99]))
def test_the_mixture_likelihood_is_its_formula_bit_for_bit(C, seed, labeled, cap):
    from vrr.calibration.correlated import mixture_nll

    rng = np.random.default_rng(seed)
    z = rng.normal(0, 4, (C, 5))
    z[0, rng.integers(0, 5)] = rng.choice([-12.0, 12.0])
    h_u = rng.integers(0, 20, (C, 9)).astype(float)
    h_v, h_i = (rng.integers(0, 6, (C, 17)).astype(float) for _ in range(2))
    args = (h_v, h_i, 16) if labeled else (None, None, None)
    assert mixture_nll(z, h_u, 8, *args, cap).tobytes() == mixture_nll_formula(z, h_u, 8, *args, cap).tobytes()


def test_em_rates_are_each_histograms_own_fit_however_batched_or_cached():
    """em_rates keeps each histogram's label-free EM fit under its own key: the bits are those of the histogram
    fit alone (binomial_em_chains + best_rates), whatever it was batched with and whether it came from the store."""
    from vrr.calibration import _memo
    from vrr.calibration.mixture import best_rates, binomial_em_chains, em_rates, vote_histograms

    rng = np.random.default_rng(11)
    samples = [rng.binomial(8, np.where(rng.random(90) < w, 0.75, 0.3)) for w in (0.3, 0.5, 0.7, 0.9)]
    hists = vote_histograms(samples, 8)
    alone = [best_rates(h[None], 8, binomial_em_chains(h[None], 8, [s])) for h, s in zip(hists, (1, 2, 3, 4))]
    _memo.clear_all()
    first = em_rates(hists[:2], 8, [1, 2])
    mixed = em_rates(hists[[3, 0, 2, 1, 0]], 8, [4, 1, 3, 2, 1])        # two from the store, repeats, new ones
    for got, i in zip(zip(*mixed), (3, 0, 2, 1, 0)):
        assert [float(v) for v in got] == [float(a[0]) for a in alone[i]]
    assert [float(v) for v in first[0]] == [float(alone[0][0][0]), float(alone[1][0][0])]
    em_rates(hists[:1], 8, [9])                     # another seed is another fit
    from vrr.calibration.mixture import _EM_RATES
    assert len(_EM_RATES) == 5
    small = _memo.RowStore(max_entries=2)
    for key in "abc":
        small[key] = key
    assert list(small) == ["b", "c"]                # the oldest goes first


def test_the_check_and_the_error_radius_refit_each_resample_once(monkeypatch):
    """The Wald check and B_k's draws resample a calibration sample's rows with one stream, so the label-free EM
    of each resample runs once for both (vrr.calibration.mixture.resample_rows, em_rates)."""
    from vrr.calibration import _memo, mixture
    from vrr.calibration.gain_radius import parameter_draws

    rng = np.random.default_rng(4)
    y = rng.random((120, 3)) < 0.6
    S = np.where(y, rng.binomial(8, 0.8, y.shape), rng.binomial(8, 0.25, y.shape))
    probe_S, probe_y = _probe(rng)
    fitted = []
    real = mixture.binomial_em_chains
    monkeypatch.setattr(mixture, "binomial_em_chains",
                        lambda hists, *a, **k: fitted.append(len(hists)) or real(hists, *a, **k))
    _memo.clear_all()
    calibration_check(S[:, 0], 8, probe_S, probe_y, 8, n_boot=30, seed=5)
    n_check = sum(fitted)
    assert 25 <= n_check <= 31                      # the sample and its distinct resamples
    parameter_draws(S, y, 8, n_boot=30, seed=5, method="binomial_em")
    assert sum(fitted) - n_check <= 1               # at most the point fit: every resample came from the store
