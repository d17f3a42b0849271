"""Checks of the controller's numeric inputs, shared by its options, its votes and its budgets: each refuses a
bad value with an error naming the source and the field."""
from __future__ import annotations

import math

import numpy as np


def number_field(value, source: str, name: str, what: str) -> float:
    """A finite real number (bools and strings refused), else an error naming the field."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    return out


def integer_field(value, source: str, name: str, what: str, low: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (
            low is not None and value < low):
        raise ValueError(f"{source}: field '{name}': expected {what}, got {value!r}")
    return int(value)


def unit_field(value, source: str, name: str) -> float:
    out = number_field(value, source, name, "a number in [0, 1]")
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{source}: field '{name}': expected a number in [0, 1], got {value!r}")
    return out
