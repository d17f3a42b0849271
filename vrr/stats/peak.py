"""The real loop's peak test (App. G's paired tests, applied to the loop-dynamics pairs; stated in
docs/round_dynamics.md before the N = 200 data): does validity rise above round 0 at some round of
``PEAK_ROUNDS``, once the choice of the round is paid for, and does the rise exceed what independent
resampling shows over the same rounds?

A peak is a rise, so both tests are one-sided (the alternative: validity above round 0 at some round);
a fall, such as the collapse under a prompt mismatch, is not a peak and is tested round by round elsewhere
(``vrr.stats.round_changes``).

* :func:`max_sign_flip_test`: the max-statistic paired permutation test over the rounds. Per instance i the
  changes d_ik = y_ik - y_i0 (k in the rounds) form one vector; under the null of no change each vector is as
  likely as its negative, so the test flips the sign of whole vectors (the one-sample sign-flip test of
  ``scipy.stats.permutation_test``, computed here on the counts of each change vector) and compares
  max_k sum_i d_ik with its flipped distribution. Flipping whole vectors keeps the rounds' dependence within an
  instance, which is what makes the maximum a correction for choosing the peak.
* :func:`holm_round_tests`: the one-sided exact McNemar p of each round against round 0 (the binomial test of the
  instances gained against those lost), Holm-adjusted over the same rounds.
* :func:`difference_in_differences`: (Q_k - Q_0) of the loop minus (Q_k - Q_0) of its resampling control with
  a percentile bootstrap CI, computed on counts: each instance's change is one of three values (-1, 0, +1), so
  a bootstrap resample of N instances is a multinomial draw over those cells (over the 9 joint cells when the
  two arms are the same problems and resampled together).
"""
from __future__ import annotations

import numpy as np

from .inference import N_RESAMPLES, Interval, percentile_interval

PEAK_ROUNDS = (1, 2, 3)   # the rounds the peak may sit in: the repairs before and at the mismatch's start
DID_ROUND = 2             # the round of the difference in differences (the pre-mismatch peak)
PEAK_LEVEL = 0.05
EXACT_LIMIT = 200_000     # the sign-flip null is enumerated exactly up to this many combinations of class counts


def _changes(y, rounds) -> np.ndarray:
    """d[i, j] = y[i, rounds[j]] - y[i, 0] as int8, after checking y and the rounds."""
    y = np.asarray(y)
    if y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 2:
        raise ValueError(f"peak test: y must be [instances, rounds] with at least 2 rounds, got shape {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("peak test: y must hold 0/1 validity labels")
    rounds = tuple(int(k) for k in rounds)
    if not rounds or len(set(rounds)) != len(rounds) or min(rounds) < 1 or max(rounds) >= y.shape[1]:
        raise ValueError(f"peak test: rounds must be distinct rounds in 1..{y.shape[1] - 1}, got {rounds}")
    y = y.astype(np.int8)
    return y[:, list(rounds)] - y[:, [0]]


def _flip_p(patterns: np.ndarray, counts: np.ndarray, observed: int, n_resamples: int, seed: int) -> float:
    """P(max_k sum_i s_i d_ik >= observed) over independent fair signs s_i, on counts.

    ``patterns`` [C, R] are the distinct nonzero change vectors up to sign (each with its first nonzero entry
    positive) and ``counts`` [C] how many instances show each one or its negative; the instances of a class that
    keep the pattern's sign after the flips number X_c ~ Binomial(n_c, 1/2), independent across classes, and the
    flipped sums are sum_c (2 X_c - n_c) patterns[c]. Exact (every X with its binomial weight) where the classes
    allow at most ``EXACT_LIMIT`` combinations; otherwise ``n_resamples`` draws of X and the randomized p
    (1 + hits) / (1 + draws), as ``scipy.stats.permutation_test`` reports it.
    """
    from scipy.special import gammaln

    sizes = counts + 1
    if np.prod(sizes.astype(float)) <= EXACT_LIMIT:
        x = np.stack([g.ravel() for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")], axis=1)
        log_w = np.sum(gammaln(counts + 1) - gammaln(x + 1) - gammaln(counts - x + 1), axis=1) - counts.sum() * np.log(2)
        flipped = np.max(np.sum((2 * x - counts)[:, :, None] * patterns[None], axis=1), axis=1)
        return float(min(1.0, np.sum(np.exp(log_w[flipped >= observed]))))
    x = np.random.default_rng(seed).binomial(counts, 0.5, size=(n_resamples, counts.size))
    flipped = np.max(np.sum((2 * x - counts)[:, :, None] * patterns[None], axis=1), axis=1)
    return float((1 + np.sum(flipped >= observed)) / (1 + n_resamples))


def max_sign_flip_test(y, rounds=PEAK_ROUNDS, n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """Max-statistic sign-flip test of rounds ``rounds`` against round 0 (see the module): the statistic is
    max_k (Q_k - Q_0) over the rounds, its null distribution the same maximum with the sign of each instance's
    change vector flipped at random; one-sided, a rise. Computed on counts (:func:`_flip_p`): the instances fall in
    at most (3^R - 1) / 2 classes of change vectors up to sign, so the null is a few binomials per resample, not a
    sign per instance; exact where the classes are small enough to enumerate.

    Returns {"rounds", "round" (the round of the maximum, the first on a tie), "change" (its Q_k - Q_0), "p"}.
    """
    rounds = tuple(int(k) for k in rounds)
    d = _changes(y, rounds).astype(np.int64)
    n = d.shape[0]
    sums = d.sum(axis=0)
    best = int(np.argmax(sums))
    out = {"rounds": list(rounds), "round": rounds[best], "change": float(sums[best]) / n}
    d = d[np.any(d != 0, axis=1)]   # an instance that never changes adds 0 whichever its sign
    if d.shape[0] == 0:
        return {**out, "p": 1.0}
    first = d[np.arange(d.shape[0]), np.argmax(d != 0, axis=1)]
    patterns, counts = np.unique(d * first[:, None], axis=0, return_counts=True)
    return {**out, "p": _flip_p(patterns, counts, int(sums.max()), n_resamples, seed)}


def holm_round_tests(y, rounds=PEAK_ROUNDS) -> list[dict]:
    """One-sided exact McNemar p (App. G; the binomial test of the instances gained since round 0 against those
    lost, alternative: more gained) of each round in ``rounds``, with Holm's adjustment over those rounds
    (``statsmodels``): [{"round", "gained", "lost", "p", "p_holm"}] in the order of ``rounds``."""
    from scipy import stats
    from statsmodels.stats.multitest import multipletests  # imported on use: it loads pandas

    rounds = tuple(int(k) for k in rounds)
    d = _changes(y, rounds)
    gained, lost = (d == 1).sum(axis=0), (d == -1).sum(axis=0)
    p = [stats.binomtest(int(g), int(g + l), 0.5, alternative="greater").pvalue if g + l else 1.0
         for g, l in zip(gained, lost)]
    adjusted = multipletests(p, method="holm")[1]
    return [{"round": k, "gained": int(g), "lost": int(l), "p": float(pk), "p_holm": float(ak)}
            for k, g, l, pk, ak in zip(rounds, gained, lost, p, adjusted)]


def _cell_draws(cells: np.ndarray, n_resamples: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap resamples of the instances of a sample whose instances fall in a few cells: the resampled count of
    each distinct cell (the cells and [B, cells]), drawn as one multinomial (what resampling N instances with replacement is)."""
    values, counts = np.unique(cells, axis=0, return_counts=True)
    n = int(counts.sum())
    return values, rng.multinomial(n, counts / n, size=n_resamples)


def difference_in_differences(y, y_control, k: int = DID_ROUND, paired: bool = False,
                              n_resamples: int = N_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> Interval:
    """(Q_k - Q_0) of the loop ``y`` minus (Q_k - Q_0) of its resampling control ``y_control``, with a percentile
    bootstrap CI over instances (App. G's instance-level bootstrap, on counts; see the module). ``paired``: the
    two arms are the same problems in the same order, resampled together (the joint 3 x 3 cells of the two
    changes); otherwise each arm is resampled on its own."""
    d = _changes(y, (k,))[:, 0]
    d_control = _changes(y_control, (k,))[:, 0]
    estimate = float(d.mean() - d_control.mean())
    rng = np.random.default_rng(seed)
    if paired:
        if d.shape != d_control.shape:
            raise ValueError(f"difference_in_differences: paired arms need the same instances, got {d.size} and "
                             f"{d_control.size}")
        values, draws = _cell_draws(np.stack([d, d_control], axis=1), n_resamples, rng)
        diff = np.sum(draws * (values[:, 0] - values[:, 1]), axis=1) / d.size
    else:
        values, draws = _cell_draws(d[:, None], n_resamples, rng)
        values_c, draws_c = _cell_draws(d_control[:, None], n_resamples, rng)
        diff = np.sum(draws * values[:, 0], axis=1) / d.size - np.sum(draws_c * values_c[:, 0], axis=1) / d_control.size
    low, high = percentile_interval(diff, confidence)
    return Interval(estimate, float(low), float(high))


def peak_test(y, y_control, paired: bool = False, rounds=PEAK_ROUNDS, did_round: int = DID_ROUND,
              n_resamples: int = N_RESAMPLES, seed: int = 0, level: float = PEAK_LEVEL) -> dict:
    """The stated peak test of a loop pair (docs/round_dynamics.md): the max-statistic sign-flip p over
    ``rounds``, the Holm-adjusted exact McNemar p of each round, and the difference in differences at
    ``did_round`` against the resampling control with its 95 % CI. ``resolved`` is True where the
    max-statistic test rejects at ``level`` with a rise (the round of the maximum above round 0)."""
    flip = max_sign_flip_test(y, rounds, n_resamples=n_resamples, seed=seed)
    did = difference_in_differences(y, y_control, did_round, paired=paired, n_resamples=n_resamples, seed=seed)
    return {"rounds": flip["rounds"], "peak_round": flip["round"], "peak_change": flip["change"],
            "p_max": flip["p"], "holm": holm_round_tests(y, rounds), "did_round": did_round,
            "did": did.estimate, "did_low": did.low, "did_high": did.high, "paired": bool(paired),
            "resolved": bool(flip["p"] < level and flip["change"] > 0)}
