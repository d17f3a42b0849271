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

``M`` and ``probe_M`` are at most ``MAX_VOTES`` (1024), ``K`` at most ``MAX_ROUNDS`` (1000), ``N`` and
``Np`` at most ``MAX_INSTANCES`` (10**6). Every field of ``meta`` that restates the arrays must agree
with them (:func:`_check_meta_agrees`): ``M``, ``K_max``, the sizes ``N``, ``K`` and ``Np`` (the names of
the table above), ``indices`` (N distinct integers),
``validity_by_round`` and ``accept_rate_by_round`` (K+1 rates), ``probe.indices``, ``probe.votes``,
``probe.n_valid``/``n_invalid`` and the probe's accept rates, and the run's ``config`` (``n``, ``M``,
``K_max``, ``probe_votes``, ``setting``, ``split``, ``start``). A file named ``arrays.npz`` or
``arrays.partial.npz`` of a generated or simulated run (its meta has ``config`` or ``source``) lives in
the folder named after ``meta.setting``.

Round 0 is the initial plan p_0; round k >= 1 is the plan after k unconditional repairs
(the frozen-trajectory protocol, App. B). Text trajectories live in separate files; policies
and statistics only ever need these arrays.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.npzio import NpzFormatError, read_npz, write_npz
from ..settings import MAX_INSTANCES, MAX_ROUNDS, MAX_VOTES  # the protocol's bounds are the arrays' bounds

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


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _as_positive_int(value: Any, source, name: str, upper: int = MAX_VOTES) -> int:
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "iu" or int(arr) < 1:
        raise DataContractError(source, name, f"must be a positive integer scalar, got {_short(value)}")
    if int(arr) > upper:
        raise DataContractError(source, name, f"must be <= {upper}, got {int(arr)}")
    return int(arr)


def validate(setting: Setting, source: str | os.PathLike = "<in-memory setting>") -> None:
    """Check every field of the contract in place; raise DataContractError naming the field."""
    setting.M = _as_positive_int(setting.M, source, "M")
    setting.S = _as_count_array(setting.S, source, "S", 2, setting.M)
    if setting.S.shape[1] < 1:
        raise DataContractError(source, "S", "needs at least one round")
    if setting.S.shape[0] > MAX_INSTANCES or setting.S.shape[1] > MAX_ROUNDS + 1:
        raise DataContractError(source, "S", f"shape {setting.S.shape} exceeds {MAX_INSTANCES} instances "
                                f"x {MAX_ROUNDS + 1} rounds")
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
        if setting.probe_S.shape[0] > MAX_INSTANCES:
            raise DataContractError(source, "probe_S", f"{setting.probe_S.shape[0]} plans, more than {MAX_INSTANCES}")
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(meta: dict, key: str, actual, source, prefix: str = "meta.") -> None:
    if key in meta and not (_is_int(meta[key]) and meta[key] == actual):
        raise DataContractError(source, f"{prefix}{key}", f"says {_short(meta[key])}, the arrays have {actual}")


def _check_indices(value: Any, length: int, source, field_name: str, what: str) -> None:
    if not isinstance(value, list) or len(value) != length:
        got = f"{len(value)} entries" if isinstance(value, list) else _short(value)
        raise DataContractError(source, field_name, f"must list the {length} {what}, got {got}")
    bad = next((v for v in value if not _is_int(v) or v < 0), None)
    if bad is not None:
        raise DataContractError(source, field_name, f"must hold non-negative integer indices, got {_short(bad)}")
    if len(set(value)) != len(value):
        dup = next(v for i, v in enumerate(value) if v in value[:i])
        raise DataContractError(source, field_name, f"lists index {dup} more than once")


def _same_rate(claimed: Any, actual: float) -> bool:
    if not isinstance(claimed, (int, float)) or isinstance(claimed, bool):
        return False
    if math.isnan(actual):
        return math.isnan(claimed)
    return math.isfinite(claimed) and abs(claimed - actual) <= 1e-9


def _check_rates(meta: dict, key: str, actual: np.ndarray, source, what: str) -> None:
    if key not in meta:
        return
    claimed = meta[key]
    if not isinstance(claimed, list) or len(claimed) != len(actual):
        got = f"{len(claimed)} entries" if isinstance(claimed, list) else _short(claimed)
        raise DataContractError(source, f"meta.{key}", f"must list the {len(actual)} rounds' {what}, got {got}")
    for k, (c, a) in enumerate(zip(claimed, actual)):
        if not _same_rate(c, float(a)):
            raise DataContractError(source, f"meta.{key}", f"round {k} says {_short(c)}, the arrays give {float(a)!r}")


def _check_meta_agrees(setting: Setting, source) -> None:
    """Every meta field that restates the arrays must agree with them (a meta that disagrees is a mix-up)."""
    meta, (n, k1) = setting.meta, setting.S.shape
    _check_count(meta, "M", setting.M, source)
    _check_count(meta, "K_max", k1 - 1, source)
    # the contract's own names of the sizes (S is [N, K+1], probe_S is [Np])
    _check_count(meta, "N", n, source)
    _check_count(meta, "K", k1 - 1, source)
    _check_count(meta, "Np", 0 if setting.probe_S is None else len(setting.probe_S), source)
    if "indices" in meta:
        _check_indices(meta["indices"], n, source, "meta.indices", "instances of S")
    _check_rates(meta, "validity_by_round", setting.y.mean(axis=0), source, "validity")
    _check_rates(meta, "accept_rate_by_round", setting.S.mean(axis=0) / setting.M, source, "accept rates")
    if "setting" in meta:
        if not isinstance(meta["setting"], str) or not meta["setting"]:
            raise DataContractError(source, "meta.setting", f"must be the setting's name, got {_short(meta['setting'])}")
        _check_folder(meta, source)
    _check_probe_meta(setting, source)
    if not str(source).startswith("<"):  # a run's config is checked when its file is saved or loaded: a
        _check_config_meta(setting, source)  # setting being built may not have its ``partial`` record yet


def _check_folder(meta: dict, source) -> None:
    """A run's ``arrays.npz`` lives in ``<out_root>/<setting>/``: its folder is its name."""
    if not str(source).startswith("<") and ("config" in meta or "source" in meta):
        path = Path(source)
        if path.name in ("arrays.npz", "arrays.partial.npz") and path.parent.name != meta["setting"]:
            raise DataContractError(source, "meta.setting", f"says {_short(meta['setting'])}, the file is in the "
                                    f"folder {path.parent.name!r}")


def _check_probe_meta(setting: Setting, source) -> None:
    probe = setting.meta.get("probe")
    if probe is None:
        return
    if not isinstance(probe, dict):
        raise DataContractError(source, "meta.probe", f"must be a JSON object, got {_short(probe)}")
    if "votes" in probe and probe["votes"] != setting.probe_M:
        raise DataContractError(source, "meta.probe.votes", f"says {_short(probe['votes'])}, probe_M is {setting.probe_M}")
    restates = [k for k in ("indices", "n_valid", "n_invalid", "accept_valid", "accept_invalid", "J") if k in probe]
    if not restates:
        return
    if setting.probe_S is None:
        raise DataContractError(source, f"meta.probe.{restates[0]}", "describes a probe, but the file has no probe_S")
    n_probe = setting.probe_S.shape[0]
    if "indices" in probe:
        _check_indices(probe["indices"], n_probe, source, "meta.probe.indices", "plans of probe_S")
    counted = [k for k in ("n_valid", "n_invalid", "accept_valid", "accept_invalid", "J") if k in probe]
    if counted:
        if setting.probe_y is None:
            raise DataContractError(source, f"meta.probe.{counted[0]}", "restates probe labels, but the file has no probe_y")
        from ..core.model import class_accept_rates
        actual = class_accept_rates(setting.probe_S, setting.probe_y, setting.probe_M)
        for key in counted:
            claimed = probe[key]
            ok = (_is_int(claimed) and claimed == actual[key]) if key.startswith("n_") else _same_rate(claimed, actual[key])
            if not ok:
                raise DataContractError(source, f"meta.probe.{key}", f"says {_short(claimed)}, probe_S and probe_y "
                                        f"give {actual[key]!r}")


def _check_config_meta(setting: Setting, source) -> None:
    """``meta.config`` is the run's ``config.json``: its sizes are the arrays' (the window's, when partial)."""
    meta = setting.meta
    config = meta.get("config")
    if config is None:
        return
    if not isinstance(config, dict):
        raise DataContractError(source, "meta.config", f"must be a JSON object, got {_short(config)}")
    n = setting.S.shape[0]
    partial = meta.get("partial")
    if isinstance(partial, dict):  # arrays.partial.npz: the instances done so far of a window of config.n
        _check_count(partial, "instances_done", n, source, "meta.partial.")
        if "n" in config and partial.get("instances_total") != config["n"]:
            raise DataContractError(source, "meta.partial.instances_total",
                                    f"says {_short(partial.get('instances_total'))}, config.n is {_short(config['n'])}")
    else:
        _check_count(config, "n", n, source, "meta.config.")
    _check_count(config, "M", setting.M, source, "meta.config.")
    _check_count(config, "K_max", setting.S.shape[1] - 1, source, "meta.config.")
    if setting.probe_M is not None:
        _check_count(config, "probe_votes", setting.probe_M, source, "meta.config.")
    for key in ("setting", "split"):
        if key in config and key in meta and config[key] != meta[key]:
            raise DataContractError(source, f"meta.config.{key}", f"says {_short(config[key])}, meta.{key} is "
                                    f"{_short(meta[key])}")
    indices = meta.get("indices")
    if "start" in config and isinstance(indices, list) and indices:  # N distinct integers (checked above)
        start, total = config["start"], config.get("n", n)
        if not (_is_int(start) and _is_int(total) and start <= min(indices) and max(indices) < start + total):
            raise DataContractError(source, "meta.indices", f"must lie in the window [{_short(start)}, "
                                    f"{_short(start)} + {_short(total)}) of meta.config (start, n)")


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
        fields = read_npz(path)
    except NpzFormatError as exc:
        raise DataContractError(path, exc.member, exc.problem) from exc
    unknown = sorted(set(fields) - set(ALL_FIELDS))
    if unknown:
        raise DataContractError(path, unknown[0][:80], f"unknown key (allowed: {', '.join(ALL_FIELDS)})")
    for name in REQUIRED_FIELDS:
        if name not in fields:
            raise DataContractError(path, name, "missing required field")
    raw_meta = fields.pop("meta")
    if raw_meta.ndim != 0 or raw_meta.dtype.kind not in "US":
        raise DataContractError(path, "meta", f"must be one JSON string, got a {raw_meta.dtype} array of shape {raw_meta.shape}")
    try:
        meta = json.loads(str(raw_meta))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DataContractError(path, "meta", f"not valid JSON ({_short(str(exc), 200)})") from exc
    setting = Setting.__new__(Setting)
    setting.S, setting.y, setting.M = fields["S"], fields["y"], fields["M"]
    setting.probe_S = fields.get("probe_S")
    setting.probe_M = fields.get("probe_M")
    setting.probe_y = fields.get("probe_y")
    setting.meta = meta
    validate(setting, source=path)
    return setting
