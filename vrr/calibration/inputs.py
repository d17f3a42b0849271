"""Checks of the calibration's inputs at its public entries: votes per plan M, accept counts S in 0..M, labels
y in {0, 1}, matching sizes. Each refusal is a :class:`CalibrationInputError` that names the source and the
field (and the first offending entry), never numpy's message, a RuntimeWarning or a number computed from a
NaN; M is capped at :data:`MAX_VOTES`, so a table of M + 1 entries is never a MemoryError.
"""
from __future__ import annotations

import numpy as np

MAX_VOTES = 4096  # votes per plan M: far above any verifier budget; bounds every (M + 1)-sized table


class CalibrationInputError(ValueError):
    """A calibration input of the wrong type, range or size; the message names the source and the field."""


def _fail(source: str, name: str, what: str, got) -> CalibrationInputError:
    shown = repr(got)
    return CalibrationInputError(f"{source}: field '{name}': expected {what}, got "
                                 f"{shown if len(shown) <= 80 else shown[:77] + '...'}")


def _where(name: str, index: tuple) -> str:
    return name + "".join(f"[{i}]" for i in index)


def votes_per_plan(M, name: str = "M", source: str = "calibration") -> int:
    """M, an integer in 1..:data:`MAX_VOTES` (bools refused)."""
    if isinstance(M, (bool, np.bool_)) or not isinstance(M, (int, np.integer)) or not 1 <= M <= MAX_VOTES:
        raise _fail(source, name, f"votes per plan, an integer in 1..{MAX_VOTES}", M)
    return int(M)


def _numeric_array(values, name: str, what: str, source: str, bools: bool = False) -> np.ndarray:
    """``values`` as a numeric array. A Python sequence is read entry by entry first (numpy would turn
    ``[1, True]`` into ``[1, 1]`` and ``[1, "2"]`` into strings), so the first entry of a wrong type is named;
    booleans count only where ``bools``."""
    if isinstance(values, (str, bytes, dict)) or values is None or np.ndim(values) == 0 and not hasattr(values, "__len__"):
        raise _fail(source, name, what, values)
    if not isinstance(values, np.ndarray):
        try:
            arr = np.array(values, dtype=object)
        except (ValueError, TypeError):  # ragged rows
            raise _fail(source, name, what + " (one shape)", type(values).__name__) from None
        kinds = (int, np.integer, float, np.floating) + ((bool, np.bool_) if bools else ())
        for i, v in enumerate(arr.reshape(-1)):
            if not isinstance(v, kinds) or (not bools and isinstance(v, (bool, np.bool_))):
                raise _fail(source, _where(name, np.unravel_index(i, arr.shape)), what, v)
        values = arr.astype(float) if arr.size else np.zeros(arr.shape)
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "b" and not bools):
        raise _fail(source, name, what, f"an array of {arr.dtype}")
    return arr


def _first_bad(mask: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape)) if mask.ndim else ()


def accept_counts(S, M: int, name: str = "S", source: str = "calibration", allow_empty: bool = False) -> np.ndarray:
    """Accept counts (any shape) as int64: integers in 0..M, finite, no bools. ``M`` is checked first."""
    M = votes_per_plan(M, source=source)
    what = f"accept counts, integers in 0..{M}"
    arr = _numeric_array(S, name, what, source)
    if arr.size == 0 and not allow_empty:
        raise _fail(source, name, "at least one accept count", "an empty array")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < 0) | (arr > M)
    else:
        bad = (arr < 0) | (arr > M)
    if bad.any():
        index = _first_bad(bad)
        raise _fail(source, _where(name, index), what, arr[index].item() if index else arr.item())
    return arr.astype(np.int64)


def labels(y, name: str = "y", source: str = "calibration", allow_empty: bool = False) -> np.ndarray:
    """Labels (any shape) as int8: 0 or 1 (bools read as 0/1), finite."""
    what = "labels 0 or 1"
    arr = _numeric_array(y, name, what, source, bools=True)
    if arr.size == 0 and not allow_empty:
        raise _fail(source, name, "at least one label 0 or 1", "an empty array")
    bad = ~np.isin(arr, (0, 1)) if arr.dtype.kind != "b" else np.zeros(arr.shape, bool)
    if bad.any():
        index = _first_bad(bad)
        raise _fail(source, _where(name, index), what, arr[index].item() if index else arr.item())
    return arr.astype(np.int8)


def same_shape(arrays: dict, source: str = "calibration") -> None:
    """Arrays that pair up entry by entry (counts and their labels) have one shape; the error names both."""
    items = [(n, np.shape(a)) for n, a in arrays.items()]
    for n, shape in items[1:]:
        if shape != items[0][1]:
            raise CalibrationInputError(f"{source}: field '{n}': shape {shape} does not match field "
                                        f"'{items[0][0]}' {items[0][1]}")


def probabilities(values, name: str, source: str = "calibration") -> np.ndarray:
    """Probabilities (any shape) as float: finite numbers in [0, 1], no bools."""
    what = "probabilities, finite numbers in [0, 1]"
    arr = _numeric_array(values, name, what, source).astype(float)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        index = _first_bad(bad)
        raise _fail(source, _where(name, index), what, arr[index].item() if index else arr.item())
    return arr
