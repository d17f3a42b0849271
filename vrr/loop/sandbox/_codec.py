"""Values as data: how a sandboxed program's return values cross to the process that judges them.

This file is the source of the encoder and decoder that :mod:`vrr.loop.sandbox._testcheck` embeds into its
sandboxed programs (it is read as text, so it imports nothing but the standard library). The
project's own process imports it only to test it.

``encode`` turns a value into JSON-ready data by its *built-in* type, reading subclasses through the
base type's own methods, so an object's overridden ``__eq__``, ``__iter__`` or ``__int__`` never
decides what it is worth: an ``int`` subclass whose ``__eq__`` always answers True is encoded as the
plain ``int`` it holds. Containers keep their type (list, tuple, dict with any keys and its order,
set and frozenset in a canonical order), floats keep nan/inf/-0.0, iterators and generators are
materialized (at most :data:`MAX_ITEMS` items) and stay iterators, NumPy arrays and scalars keep
their dtype. Anything else is ``opaque``: it decodes to an object equal only to itself.

``decode`` builds the value back from built-in types only (never by pickle or ``eval``).
"""
import json
import math

MAX_DEPTH = 60
MAX_ITEMS = 100_000


def _key(item):
    return json.dumps(item, sort_keys=True, separators=(",", ":"))


def encode(v, depth=0, budget=None):
    """The value ``v`` as JSON data (module docstring)."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        return {"t": "too_large"}
    if v is None or v is True or v is False:
        return v
    if isinstance(v, bool):
        return bool(int.__int__(v))
    if isinstance(v, int):
        n = int.__int__(v)
        return n if abs(n) < 2 ** 53 else {"t": "int", "v": hex(n)}
    if isinstance(v, float):
        x = float.__float__(v)
        if math.isnan(x) or math.isinf(x) or (x == 0.0 and math.copysign(1.0, x) < 0):
            return {"t": "float", "v": repr(x)}
        return x
    if isinstance(v, complex):
        z = complex.__complex__(v) if hasattr(complex, "__complex__") else complex(v.real, v.imag)
        return {"t": "complex", "v": [encode(z.real, depth + 1, budget), encode(z.imag, depth + 1, budget)]}
    if isinstance(v, str):
        return {"t": "str", "v": str.__str__(v)}
    if isinstance(v, bytes):
        return {"t": "bytes", "v": bytes.hex(v)}
    if isinstance(v, bytearray):
        return {"t": "bytearray", "v": bytearray.hex(v)}
    if isinstance(v, list):
        return {"t": "list", "v": [encode(x, depth + 1, budget) for x in list.__iter__(v)]}
    if isinstance(v, tuple):
        return {"t": "tuple", "v": [encode(x, depth + 1, budget) for x in tuple.__iter__(v)]}
    if isinstance(v, (set, frozenset)):
        base = set if isinstance(v, set) else frozenset
        items = sorted((encode(x, depth + 1, budget) for x in base.__iter__(v)), key=_key)
        return {"t": base.__name__, "v": items}
    if isinstance(v, dict):
        return {"t": "dict", "v": [[encode(k, depth + 1, budget), encode(x, depth + 1, budget)]
                                   for k, x in dict.items(v)]}
    if isinstance(v, range):
        return {"t": "range", "v": [range.__getattribute__(v, "start"), range.__getattribute__(v, "stop"),
                                    range.__getattribute__(v, "step")]}
    mod = type(v).__module__ or ""
    if mod == "numpy" or mod.startswith("numpy."):
        try:
            import numpy
            if isinstance(v, numpy.ndarray):
                return {"t": "ndarray", "dtype": str(v.dtype), "shape": list(v.shape),
                        "v": encode(numpy.ndarray.tolist(v), depth + 1, budget)}
            if isinstance(v, numpy.generic):
                return {"t": "npscalar", "dtype": str(v.dtype), "v": encode(numpy.generic.item(v), depth + 1, budget)}
        except Exception:
            pass
    if mod == "fractions" and type(v).__name__ == "Fraction":
        return {"t": "fraction", "v": [hex(v.numerator), hex(v.denominator)]}
    if mod == "decimal" and type(v).__name__ == "Decimal":
        return {"t": "decimal", "v": str(v)}
    if hasattr(type(v), "__next__") and hasattr(type(v), "__iter__"):
        items = []
        for x in v:
            if len(items) >= MAX_ITEMS:
                return {"t": "too_large"}
            items.append(x)
        return {"t": "iter", "v": [encode(x, depth + 1, budget) for x in items], "items": items}
    return {"t": "opaque", "type": type(v).__name__[:100]}


class Opaque:
    """A value that has no data form (an object of a user-defined class, a function): equal only
    to itself."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return "<%s object>" % self.type_name


class ReplayedIterator:
    """An iterator over materialized items (what a generator or ``map`` yielded)."""

    def __init__(self, items):
        self._items = list(items)
        self._i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._i >= len(self._items):
            raise StopIteration
        self._i += 1
        return self._items[self._i - 1]

    def __repr__(self):
        return "<iterator>"


def decode(d):
    """The value of ``encode``'s data, built from built-in types only."""
    if d is None or isinstance(d, (bool, int, float)):
        return d
    if not isinstance(d, dict) or "t" not in d:
        raise ValueError("not an encoded value")
    t = d["t"]
    v = d.get("v")
    if t == "int":
        return int(v, 16)
    if t == "float":
        return float(v)
    if t == "complex":
        return complex(decode(v[0]), decode(v[1]))
    if t == "str":
        if not isinstance(v, str):
            raise ValueError("str")
        return v
    if t == "bytes":
        return bytes.fromhex(v)
    if t == "bytearray":
        return bytearray.fromhex(v)
    if t == "list":
        return [decode(x) for x in v]
    if t == "tuple":
        return tuple(decode(x) for x in v)
    if t == "set":
        return set(decode(x) for x in v)
    if t == "frozenset":
        return frozenset(decode(x) for x in v)
    if t == "dict":
        return {decode(k): decode(x) for k, x in v}
    if t == "range":
        return range(int(v[0]), int(v[1]), int(v[2]))
    if t == "ndarray":
        import numpy
        return numpy.array(decode(v), dtype=d["dtype"]).reshape(d["shape"])
    if t == "npscalar":
        import numpy
        return numpy.dtype(d["dtype"]).type(decode(v))
    if t == "fraction":
        import fractions
        return fractions.Fraction(int(v[0], 16), int(v[1], 16))
    if t == "decimal":
        import decimal
        return decimal.Decimal(v)
    if t == "iter":
        return ReplayedIterator(decode(x) for x in v)
    if t in ("opaque", "too_large"):
        return Opaque(str(d.get("type", t)))
    raise ValueError("unknown tag %r" % (t,))


def data_only(d):
    """``encode``'s result without the materialized items it keeps for the recording program."""
    if isinstance(d, list):
        return [data_only(x) for x in d]
    if isinstance(d, dict):
        return {k: data_only(x) for k, x in d.items() if k != "items"}
    return d
