"""The data contract: one compact, labeled array file per setting (design card, "The data contract").

A setting is stored as a single ``.npz`` file (NumPy's zip of arrays, loaded with
``allow_pickle=False``) with these fields:

=========  ==========================  ==================================================
field      shape / type                meaning
=========  ==========================  ==================================================
S          int   [N, K+1]              judge acceptance counts S_k in 0..M, round k = 0..K
y          int8  [N, K+1]              true validity y_k in {0, 1} of plan p_k
M          int   scalar                judge votes per round
probe_S    int   [Np]      (optional)  calibration-probe acceptance counts in 0..probe_M
probe_M    int   scalar    (optional)  votes per probe plan (16 in the paper)
probe_y    int8  [Np]      (optional)  probe labels, where known
meta       str   (JSON object)         setting, task, models, temperatures, seeds, versions
=========  ==========================  ==================================================

Round 0 is the initial plan p_0; round k >= 1 is the plan after k unconditional repairs
(the frozen-trajectory protocol, App. B). Text trajectories live in separate files; policies
and statistics only ever need these arrays.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.npzio import write_npz

REQUIRED_FIELDS = ("S", "y", "M", "meta")
OPTIONAL_FIELDS = ("probe_S", "probe_M", "probe_y")
ALL_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS


class DataContractError(ValueError):
    """A setting file (or in-memory setting) violates the data contract."""

    def __init__(self, source: str | os.PathLike, field_name: str, problem: str):
        self.source, self.field, self.problem = str(source), field_name, problem
        super().__init__(f"{source}: field '{field_name}': {problem}")


@dataclass
class Setting:
    """Compact arrays of one setting (see the module docstring for the contract)."""

    S: np.ndarray
    y: np.ndarray
    M: int
    probe_S: np.ndarray | None = None
    probe_M: int | None = None
    probe_y: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate(self, source="<in-memory setting>")

    @property
    def n_instances(self) -> int:
        return int(self.S.shape[0])

    @property
    def k_max(self) -> int:
        return int(self.S.shape[1] - 1)

    @property
    def name(self) -> str:
        return str(self.meta.get("setting", "unnamed"))


def _as_count_array(value: Any, source, name: str, ndim: int, upper: int, allow_bool: bool = False) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "b" and not allow_bool:
        raise DataContractError(source, name, "must hold integer counts, got booleans")
    if arr.ndim != ndim:
        raise DataContractError(source, name, f"expected {ndim}-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise DataContractError(source, name, "is empty")
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise DataContractError(source, name, "contains NaN")
        if not np.all(arr == np.round(arr)):
            raise DataContractError(source, name, "contains non-integer values")
    elif arr.dtype.kind not in "iub":
        raise DataContractError(source, name, f"must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > upper:
        raise DataContractError(source, name, f"values must lie in 0..{upper}, found range {lo}..{hi}")
    return arr


def _as_positive_int(value: Any, source, name: str) -> int:
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "iu" or int(arr) < 1:
        raise DataContractError(source, name, f"must be a positive integer scalar, got {value!r}")
    return int(arr)


def validate(setting: Setting, source: str | os.PathLike = "<in-memory setting>") -> None:
    """Check every field of the contract in place; raise DataContractError naming the field."""
    setting.M = _as_positive_int(setting.M, source, "M")
    setting.S = _as_count_array(setting.S, source, "S", 2, setting.M)
    if setting.S.shape[1] < 1:
        raise DataContractError(source, "S", "needs at least one round")
    if setting.y is None:
        raise DataContractError(source, "y", "missing labels: true validity is required for every round")
    setting.y = _as_count_array(setting.y, source, "y", 2, 1, allow_bool=True).astype(np.int8)
    if setting.y.shape != setting.S.shape:
        raise DataContractError(source, "y", f"shape {setting.y.shape} differs from S shape {setting.S.shape}")
    if setting.probe_S is not None:
        if setting.probe_M is None:
            raise DataContractError(source, "probe_M", "required when probe_S is given")
        setting.probe_M = _as_positive_int(setting.probe_M, source, "probe_M")
        setting.probe_S = _as_count_array(setting.probe_S, source, "probe_S", 1, setting.probe_M)
        if setting.probe_y is not None:
            setting.probe_y = _as_count_array(setting.probe_y, source, "probe_y", 1, 1, allow_bool=True).astype(np.int8)
            if setting.probe_y.shape != setting.probe_S.shape:
                raise DataContractError(source, "probe_y", f"shape {setting.probe_y.shape} differs from probe_S shape {setting.probe_S.shape}")
    elif setting.probe_y is not None:
        raise DataContractError(source, "probe_y", "given without probe_S")
    elif setting.probe_M is not None:
        raise DataContractError(source, "probe_M", "given without probe_S")
    if not isinstance(setting.meta, dict):
        raise DataContractError(source, "meta", "must be a JSON object (dict)")
    _check_meta_agrees(setting, source)


def _check_meta_agrees(setting: Setting, source) -> None:
    """Where the metadata restates a size, it must be the arrays' (a meta that disagrees is a mix-up)."""
    meta, (n, k1) = setting.meta, setting.S.shape
    for key, actual in (("M", setting.M), ("K_max", k1 - 1)):
        if key in meta and not (isinstance(meta[key], int) and not isinstance(meta[key], bool) and meta[key] == actual):
            raise DataContractError(source, f"meta.{key}", f"says {meta[key]!r}, the arrays have {actual}")
    if "indices" in meta and (not isinstance(meta["indices"], list) or len(meta["indices"]) != n):
        raise DataContractError(source, "meta.indices", f"must list the {n} instances of S")
    probe = meta.get("probe")
    if isinstance(probe, dict) and "votes" in probe and probe["votes"] != setting.probe_M:
        raise DataContractError(source, "meta.probe.votes", f"says {probe['votes']!r}, probe_M is {setting.probe_M}")


def save_setting(path: str | os.PathLike, setting: Setting) -> Path:
    """Write a setting as one ``.npz`` file atomically (temporary name, then rename)."""
    validate(setting, source=path)
    arrays: dict[str, np.ndarray] = {
        "S": setting.S.astype(np.int16),
        "y": setting.y.astype(np.int8),
        "M": np.asarray(setting.M, dtype=np.int64),
        "meta": np.asarray(json.dumps(setting.meta, sort_keys=True)),
    }
    if setting.probe_S is not None:
        arrays["probe_S"] = setting.probe_S.astype(np.int16)
        arrays["probe_M"] = np.asarray(setting.probe_M, dtype=np.int64)
        if setting.probe_y is not None:
            arrays["probe_y"] = setting.probe_y.astype(np.int8)
    return write_npz(path, arrays)


def load_setting(path: str | os.PathLike) -> Setting:
    """Load and validate a setting file; errors name the file and the offending field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: setting file not found")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as exc:  # not a zip / corrupt
        raise DataContractError(path, "<file>", f"not a readable .npz archive ({type(exc).__name__}: {exc})") from exc
    with archive:
        keys = set(archive.files)
        unknown = sorted(keys - {f"{n}" for n in ALL_FIELDS})
        if unknown:
            raise DataContractError(path, unknown[0], f"unknown key (allowed: {', '.join(ALL_FIELDS)})")
        for name in REQUIRED_FIELDS:
            if name not in keys:
                raise DataContractError(path, name, "missing required field")
        fields = {}
        for name in sorted(keys):
            try:  # members are read lazily: a corrupt member fails here (CRC, zlib, header)
                fields[name] = archive[name]
            except Exception as exc:
                raise DataContractError(path, name, f"unreadable ({type(exc).__name__}: {exc})") from exc
    try:
        meta = json.loads(str(fields.pop("meta")))
    except json.JSONDecodeError as exc:
        raise DataContractError(path, "meta", f"not valid JSON ({exc})") from exc
    setting = Setting.__new__(Setting)
    setting.S, setting.y, setting.M = fields["S"], fields["y"], fields["M"]
    setting.probe_S = fields.get("probe_S")
    setting.probe_M = fields.get("probe_M")
    setting.probe_y = fields.get("probe_y")
    setting.meta = meta
    validate(setting, source=path)
    return setting
