"""The one JSON writer and reader of the project (atomic, NumPy-aware)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .atomic import atomic_write


def json_default(x):
    """Serialise NumPy scalars and arrays; anything else is an error."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON-serialisable: {type(x)}")


def write_json(path: str | os.PathLike, obj, *, indent: int = 2, sort_keys: bool = False,
               trailing_newline: bool = False) -> Path:
    """Write JSON atomically (temporary name, then rename).

    Result files (calibration, stats) use the defaults; run records of the LLM loop
    (``config.json``, ``run_meta.json``) use ``indent=1, sort_keys=True, trailing_newline=True``
    so that their diffs stay small.
    """
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=json_default)
    if trailing_newline:
        text += "\n"
    return atomic_write(path, lambda fh: fh.write(text))


def read_json(path: str | os.PathLike):
    """Read a JSON file written by an earlier step; a missing file names the step to run."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: result file missing (run the previous notebook of the chain)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
