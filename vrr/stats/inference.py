"""Statistics of replayed outcomes (Sec. 5.1 "Metrics"; App. G "Paired Statistical Tests").

Percentile bootstrap CIs with B = 10,000 instance-level resamples, paired bootstrap of
differences, and exact McNemar tests. ``bootstrap_ci`` is scipy.stats.bootstrap's; scipy.stats.binom gives
statsmodels' exact McNemar without its pandas import. The paired bootstrap and ``bootstrap_means`` resample
instances on counts: resampling N instances with replacement is a multinomial over the instances, and instances
with the same outcomes (a policy's 0/1 validity, or one row of every policy's) can be pooled, so a resample is a
multinomial draw over the distinct outcome patterns with their counts. Same distribution as resampling indices,
at the cost of the few patterns rather than of N (``tests/test_stats_data_identifiability.py`` checks it against
scipy.stats.bootstrap).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def bootstrap_ci(values, n_resamples: int = N_RESAMPLES, seed: int = 0,
                 confidence: float = 0.95) -> Interval:
    """Percentile bootstrap CI of a mean (scipy.stats.bootstrap; App. G)."""
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError(f"bootstrap_ci: needs a 1-D sample of at least 2 values, got shape {values.shape}")
    res = stats.bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return Interval(float(values.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high))


def _pattern_draws(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap draws of the row means of ``values`` [P, N]: [P, B]. The N columns are pooled into their distinct
    patterns with counts, and each resample is one multinomial draw of N over the patterns (module docstring).
    Integer-valued rows are summed in integers, so their means are exact whatever the CPU; other rows by
    ``np.sum`` of element-wise products (no BLAS)."""
    n = values.shape[1]
    patterns, counts = np.unique(values.T, axis=0, return_counts=True)      # [U, P], [U]
    weights = np.random.default_rng(seed).multinomial(n, counts / n, size=n_resamples)   # [B, U]
    if np.array_equal(patterns, np.round(patterns)):
        ints = patterns.astype(np.int64)
        return np.stack([np.sum(weights * ints[:, p], axis=1) for p in range(ints.shape[1])]) / n
    return np.stack([np.sum(weights * patterns[:, p], axis=1) for p in range(patterns.shape[1])]) / n


def paired_bootstrap(a, b, n_resamples: int = N_RESAMPLES, seed: int = 0,
                     confidence: float = 0.95) -> Interval:
    """Paired percentile bootstrap CI of mean(a - b), resampling instances (App. G), on the counts of the
    distinct (a, b) pairs (module docstring)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"paired_bootstrap: needs two paired 1-D samples of at least 2 values, got {a.shape} and {b.shape}")
    draws = _pattern_draws(np.stack([a, b]), n_resamples, seed)
    lo, hi = percentile_interval(draws[0] - draws[1], confidence)
    return Interval(float(a.mean() - b.mean()), float(lo), float(hi))


def mcnemar_exact(a, b) -> float:
    """Exact McNemar p-value for paired binary outcomes a, b (App. G; statsmodels): the two-sided
    binomial test of the discordant pairs against 1/2.

    min(1, 2 P(Bin(n01 + n10, 1/2) <= min(n01, n10))), the scipy call of statsmodels' ``mcnemar(exact=True)``
    made here: statsmodels loads pandas, about a second of CPU in every kernel."""
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"mcnemar_exact: paired outcomes differ in shape, {a.shape} and {b.shape}")
    a, b = a.astype(bool), b.astype(bool)
    n01, n10 = float(np.sum(a & ~b)), float(np.sum(~a & b))
    return float(np.minimum(stats.binom.cdf(np.minimum(n01, n10), int(n01 + n10), 0.5) * 2, 1))


def bootstrap_means(values, n_resamples: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of row means, [P, B], from one shared resampling of instances.

    Each resample draws N instances with replacement, as a multinomial over the distinct columns (every row's
    outcome of one instance) with their counts, so every row (and every difference of rows) sees the same
    resamples (module docstring)."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    n = values.shape[1]
    if n < 2:
        raise ValueError(f"bootstrap_means: needs at least 2 instances, got {n}")
    return _pattern_draws(values, n_resamples, seed)


def percentile_interval(draws: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap draws along the last axis."""
    tail = 50.0 * (1.0 - confidence)
    lo, hi = np.percentile(draws, [tail, 100.0 - tail], axis=-1)
    return lo, hi


def policy_table(validity: dict[str, np.ndarray], committed: dict[str, np.ndarray], rounds_used: dict[str, np.ndarray],
                 reference: str | None = None, n_resamples: int = N_RESAMPLES, seed: int = 0,
                 confidence: float = 0.95, verifier_calls: dict[str, np.ndarray] | None = None) -> list[dict]:
    """One row per policy: V [CI], <K>, the repair rounds run, and the paired difference to
    ``reference`` with its bootstrap CI and exact McNemar p-value (Tables "stopping-performance",
    "app-full-stopping", "paired-stats").

    ``mean_K`` is the paper's <K>: the mean committed round (Verifier-best 0.73 and Last-accepted
    2.28 in Table "app-full-stopping"). ``repairs_run`` is the mean number of repair rounds actually
    run, which is K_max for the policies that choose after the whole trajectory (the full-budget cost).
    ``verifier_calls`` (per policy, per instance; ``PolicyOutcome.verifier_calls``: M per round evaluated)
    adds the column ``verifier_calls``, the mean verifier calls per instance.
    """
    names = list(validity)
    matrix = np.stack([np.asarray(validity[k], dtype=float) for k in names])
    draws = bootstrap_means(matrix, n_resamples, seed)
    lo, hi = percentile_interval(draws, confidence)
    rows = []
    ref_idx = names.index(reference) if reference is not None else None
    for i, name in enumerate(names):
        row = {"policy": name, "V": float(matrix[i].mean()), "V_low": float(lo[i]), "V_high": float(hi[i]),
               "mean_K": float(np.mean(committed[name])), "repairs_run": float(np.mean(rounds_used[name]))}
        if verifier_calls is not None:
            row["verifier_calls"] = float(np.mean(verifier_calls[name]))
        if ref_idx is not None:
            dlo, dhi = percentile_interval(draws[i] - draws[ref_idx], confidence)
            row.update({"dV": float(matrix[i].mean() - matrix[ref_idx].mean()),
                        "dV_low": float(dlo), "dV_high": float(dhi),
                        "mcnemar_p": mcnemar_exact(matrix[i], matrix[ref_idx]) if i != ref_idx else 1.0})
        rows.append(row)
    return rows
