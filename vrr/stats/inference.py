"""Statistics of replayed outcomes (Sec. 5.1 "Metrics"; App. G "Paired Statistical Tests").

Percentile bootstrap CIs with B = 10,000 instance-level resamples, paired bootstrap of
differences, and exact McNemar tests. scipy.stats.bootstrap and scipy.stats.binom (statsmodels' exact
McNemar without its pandas import) are used directly; ``bootstrap_means`` is the equivalent vectorized
resampler for many policies at once (one multinomial resampling-count matrix shared by every row, so
differences are paired).
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


def paired_bootstrap(a, b, n_resamples: int = N_RESAMPLES, seed: int = 0,
                     confidence: float = 0.95) -> Interval:
    """Paired percentile bootstrap CI of mean(a - b), resampling instances (App. G)."""
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"paired_bootstrap: needs two paired 1-D samples of at least 2 values, got {a.shape} and {b.shape}")
    res = stats.bootstrap((a, b), lambda x, z, axis=-1: x.mean(axis) - z.mean(axis), paired=True,
                          n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                          vectorized=True, rng=np.random.default_rng(seed))
    return Interval(float(a.mean() - b.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high))


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

    Each resample draws N instance indices with replacement (as scipy.stats.bootstrap does);
    their per-instance counts W [B, N] give the resampled means of all P rows, so every row (and every
    difference of rows) sees the same resamples. Each mean is an element-wise product summed by ``np.sum``,
    not a matrix product: BLAS kernels and threads order a sum differently on each CPU.
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    n = values.shape[1]
    if n < 2:
        raise ValueError(f"bootstrap_means: needs at least 2 instances, got {n}")
    idx = np.random.default_rng(seed).integers(0, n, (n_resamples, n), dtype=np.int64)
    idx += (np.arange(n_resamples, dtype=np.int64) * n)[:, None]
    counts = np.bincount(idx.ravel(), minlength=n_resamples * n).reshape(n_resamples, n)
    counts = counts.astype(float)
    return np.stack([np.sum(counts * row, axis=1) for row in values]) / n


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
