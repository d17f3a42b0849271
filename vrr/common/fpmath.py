"""Element-wise exp, log and log1p whose float64 results are the same on every x86-64 CPU kind.

numpy picks its loops for ``np.exp``, ``np.log``, ``np.log1p``, ``np.expm1`` and ``np.power`` at run time by
CPU: with AVX512 it runs its own vectorized code, otherwise the C library's functions, and the two round
differently in the last bit. That bit is enough to move a flat likelihood's optimum in the 5th digit, so every
printed estimate evaluates these functions here instead: through scipy.special ufuncs, which are compiled once
for all CPUs and call the C library's (glibc's) ``exp``, ``log`` and cephes' ``log1p``. ``tests/test_cpu_kinds.py``
runs the calibration, replay and statistics with numpy's AVX512 loops disabled and enabled and compares bytes.

What numpy computes the same everywhere, and the project uses directly: ``+ - * /``, ``sqrt``, ``np.sum`` and
``np.mean`` (their pairwise order is fixed), ``np.logaddexp`` (C library calls), comparisons and sorting.
Matrix products (``@``, ``np.dot``, ``np.einsum(optimize=...)``) go to BLAS, whose kernels and threads
change the order of a sum; a printed estimate multiplies element-wise and sums with ``np.sum`` instead.
"""
from __future__ import annotations

import numpy as np
from scipy import special


def log(x, out=None) -> np.ndarray:
    """Natural logarithm: ``1 * log(x)`` as scipy's ``xlogy`` evaluates it (the C library's ``log``)."""
    return special.xlogy(1.0, x, out=out)


def log1p(x) -> np.ndarray:
    """``log(1 + x)``, accurate for small x (cephes' ``log1p`` in scipy.special)."""
    return special.log1p(x)


def exp(x, out=None) -> np.ndarray:
    """Exponential: the inverse Box-Cox transform at lambda = 0, which scipy evaluates as the C library's ``exp``."""
    return special.inv_boxcox(x, 0.0, out=out)
