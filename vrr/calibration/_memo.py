"""One computation of each calibration fit per process: results kept by a content hash of their inputs.

The chain runs a setting's notebooks (03 calibrate, 04 replay, 05 statistics and its ablation) in one kernel, and
the same fit recurs among them: the calibration check of a fold, the fold's cross-fit, its bootstrap draws behind
B_k, the probe's J-hat. A function wrapped by :func:`memoized` computes each distinct input once; its result is
stored as it was returned and handed out as a copy, so a caller that changes what it got cannot change what the
next caller gets. The key hashes every array's dtype, shape and bytes and the ``repr`` of everything else (floats
by ``repr`` round-trip exactly), so two inputs share a result only when they are the same bits.
"""
from __future__ import annotations

import copy
import functools
import hashlib
from collections import OrderedDict

import numpy as np

MAX_ENTRIES = 256     # per function; a setting's chain needs a few dozen
_STORES: list = []    # every memoized function's store, for clear_all


def _feed(h, value) -> None:
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        a = np.ascontiguousarray(value)
        h.update(f"nd{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__}{len(value)}(".encode())
        for v in value:
            _feed(h, v)
        h.update(b")")
    elif isinstance(value, dict):
        h.update(f"dict{len(value)}(".encode())
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
        h.update(b")")
    else:
        h.update(f"{type(value).__qualname__}:{value!r};".encode())


def content_key(*args, **kwargs) -> str:
    """A SHA-256 of the arguments' contents (arrays by dtype, shape and bytes; the rest by type and ``repr``)."""
    h = hashlib.sha256()
    _feed(h, args)
    _feed(h, kwargs)
    return h.hexdigest()


def memoized(func):
    """``func`` with its results kept per content of its arguments (module docstring); ``func.cache_clear()``
    empties the store."""
    store: OrderedDict[str, object] = OrderedDict()
    _STORES.append(store)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        key = content_key(*args, **kwargs)
        if key in store:
            store.move_to_end(key)
        else:
            store[key] = func(*args, **kwargs)
            if len(store) > MAX_ENTRIES:
                store.popitem(last=False)
        return copy.deepcopy(store[key])

    wrapper.cache_clear = store.clear
    wrapper.cache_size = lambda: len(store)
    return wrapper


class RowStore(OrderedDict):
    """Per-row results of a batched fit whose rows do not depend on each other: each row under its own key, so a
    row that recurs in another batch is not fit again; the oldest go beyond ``max_entries``."""

    def __init__(self, max_entries: int):
        super().__init__()
        self.max_entries = max_entries

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        while len(self) > self.max_entries:
            self.popitem(last=False)


def row_store(max_entries: int) -> RowStore:
    """A :class:`RowStore`, emptied by :func:`clear_all` with the memoized functions' stores."""
    store = RowStore(max_entries)
    _STORES.append(store)
    return store


def clear_all() -> None:
    """Empty every memoized function's store (a benchmark's second pass computes everything again)."""
    for store in _STORES:
        store.clear()
