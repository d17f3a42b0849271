"""The online calibration file (``format`` ``vrr-online-calibration``): what ``save_calibration`` writes and
``OnlineController.from_calibration`` reads, and the shipped example ``examples/calibration_small.json``.

The file (:func:`save_online_calibration`) stores the data, not just the estimates: the first plans'
accept-count histograms (per class when labeled) and the repair counts (per round when given), the
settings (M, K_max, policy, J_min, eta, seed) and, for the reader, the report derived from them. Loading
fits again from the stored data (``_calibrate.fit_report``: Sec. 4.2-4.3, Algorithm 1 line 1) and refuses a
file whose report disagrees with it, naming the field. ``examples/calibration_small.json`` is
:func:`write_small_example`'s output (``python -m vrr.policies.online_calibration
examples/calibration_small.json``).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ...common.atomic import atomic_write
from ...core.model import NoiseParams
from ._calibrate import CalibrationReport, calibrate_labeled, check_k_max, controller_arguments, fit_report
from ._options import MAX_M

FORMAT = "vrr-online-calibration"
FORMAT_VERSION = 1
# the example shipped in examples/calibration_small.json: vrr's simulator with these parameters
EXAMPLE = {"params": {"rho0": 0.2, "rho1": 0.15, "alpha": 0.3, "beta": 0.1, "pi": 0.4},
           "n": 150, "k_max": 5, "M": 8, "seed": 7}


# ---------------------------------------------------------------- the file
def save_online_calibration(report: CalibrationReport, path: str | os.PathLike) -> Path:
    """Write ``report`` (data, settings and the derived report) as JSON, atomically."""
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "M": report.M, "k_max": report.k_max,
           "policy": report.policy, "j_min": report.j_min, "eta": report.eta, "seed": report.seed,
           "data": report.data, "report": {k: v for k, v in report.to_dict().items() if k not in (
               "data", "M", "k_max", "policy", "j_min", "eta", "seed")}}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    return atomic_write(path, lambda fh: fh.write(text))


def is_online_calibration(path: str | os.PathLike) -> bool:
    """True for a file :func:`save_online_calibration` wrote (its ``format`` field)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def _histogram(value, M: int, source: str, name: str) -> list:
    if not isinstance(value, list) or len(value) != M + 1 or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
        raise ValueError(f"{source}: field '{name}': expected {M + 1} counts >= 0, got {value!r}")
    return value


def read_online_calibration(path: str | os.PathLike) -> CalibrationReport:
    """Read and check a saved calibration: every field, then the report against a fit of the stored data.
    Errors name the file and the field."""
    path = Path(path)
    src = str(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: calibration file not found")
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    for key in ("format", "version", "M", "k_max", "policy", "j_min", "eta", "seed", "data", "report"):
        if key not in doc:
            raise ValueError(f"{path}: field '{key}': missing")
    if doc["format"] != FORMAT or doc["version"] != FORMAT_VERSION:
        raise ValueError(f"{path}: field 'version': {doc['format']!r} version {doc['version']!r}; this code reads "
                         f"{FORMAT!r} version {FORMAT_VERSION}")
    M, k_max = doc["M"], doc["k_max"]
    if isinstance(M, bool) or not isinstance(M, int) or not 1 <= M <= MAX_M:
        raise ValueError(f"{path}: field 'M': expected an integer in 1..{MAX_M}, got {M!r}")
    k_max = check_k_max(k_max, src)
    if doc["policy"] not in ("algorithm1", "vrr_stop", "vrr_guard"):
        raise ValueError(f"{path}: field 'policy': {doc['policy']!r} is not a policy")
    for key, ok in (("j_min", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and -1 <= v <= 1),
                    ("eta", lambda v: isinstance(v, float) and 0 < v < 1),
                    ("seed", lambda v: isinstance(v, int) and not isinstance(v, bool))):
        if not ok(doc[key]):
            raise ValueError(f"{path}: field '{key}': invalid value {doc[key]!r}")
    data = doc["data"]
    if not isinstance(data, dict) or "repairs" not in data:
        raise ValueError(f"{path}: field 'data.repairs': missing")
    labeled = "accept_histogram_valid" in data
    hist_keys = ("accept_histogram_valid", "accept_histogram_invalid") if labeled else ("accept_histogram",)
    unknown = sorted(set(data) - set(hist_keys) - {"repairs"})
    if unknown:
        raise ValueError(f"{path}: field 'data.{unknown[0]}': unknown")
    for key in hist_keys:
        _histogram(data.get(key), M, src, f"data.{key}")
    rep = data["repairs"]
    if not isinstance(rep, dict) or not isinstance(rep.get("per_round"), bool):
        raise ValueError(f"{path}: field 'data.repairs.per_round': expected true or false")
    n = max(k_max, 1) if rep["per_round"] else 1
    for key in ("fixed", "invalid_before", "broken", "valid_before"):
        value = rep.get(key)
        if not isinstance(value, list) or len(value) != n or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
            raise ValueError(f"{path}: field 'data.repairs.{key}': expected {n} counts >= 0, got {value!r}")
    for t in range(n):
        if rep["fixed"][t] > rep["invalid_before"][t] or rep["broken"][t] > rep["valid_before"][t]:
            raise ValueError(f"{path}: field 'data.repairs': round {t} has more fixes (breaks) than invalid "
                             "(valid) plans before repair")
    report = fit_report(data, M=M, k_max=k_max, policy=doc["policy"], j_min=float(doc["j_min"]), eta=doc["eta"],
                  seed=doc["seed"], source=src)
    stored = doc["report"]
    if not isinstance(stored, dict):
        raise ValueError(f"{path}: field 'report': expected an object")
    _compare(report.to_dict(), stored, src, "report", skip={"data", "M", "k_max", "policy", "j_min", "eta", "seed"})
    return report


def _compare(fitted, stored, source: str, where: str, skip=frozenset()) -> None:
    """The stored report must be what the stored data give (floats to 1e-9 relative: last-digit
    differences between CPUs are not errors)."""
    if isinstance(fitted, dict):
        if not isinstance(stored, dict):
            raise ValueError(f"{source}: field '{where}': expected an object, got {stored!r}")
        for key in sorted(set(fitted) | set(stored)):
            if key in skip:
                continue
            if key not in stored:
                raise ValueError(f"{source}: field '{where}.{key}': missing")
            if key not in fitted:
                raise ValueError(f"{source}: field '{where}.{key}': unknown")
            _compare(fitted[key], stored[key], source, f"{where}.{key}")
        return
    if isinstance(fitted, list):
        if not isinstance(stored, list) or len(stored) != len(fitted):
            raise ValueError(f"{source}: field '{where}': the stored data give {fitted!r}, the file says {stored!r}")
        for i, (a, b) in enumerate(zip(fitted, stored)):
            _compare(a, b, source, f"{where}[{i}]")
        return
    if isinstance(fitted, float) and isinstance(stored, (int, float)) and not isinstance(stored, bool):
        if math.isclose(fitted, stored, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(fitted) and math.isnan(stored)):
            return
    elif fitted == stored and type(fitted) is type(stored):
        return
    raise ValueError(f"{source}: field '{where}': the stored data give {fitted!r}, the file says {stored!r}")


def load_online_calibration(path, policy: str | None = None, round_dynamics: bool = False,
                            **options) -> tuple[dict, CalibrationReport]:
    """A saved calibration's controller arguments and report (``OnlineController.from_calibration``)."""
    report = read_online_calibration(path)
    return controller_arguments(report, policy, round_dynamics, options.pop("source", str(path)), **options)


# ---------------------------------------------------------------- the shipped example
def example_labeled_set() -> dict:
    """The labeled set behind ``examples/calibration_small.json``, ``from_labeled``'s arguments: trajectories
    of vrr's simulator (``EXAMPLE``: rho0 0.2, rho1 0.15, alpha 0.3, beta 0.1, pi 0.4; 150 problems, K_max 5,
    M 8, seed 7), the first plans' votes and labels and every round's repair pair with its round."""
    from ...data.simulate import simulate_setting

    e = EXAMPLE
    sim = simulate_setting(NoiseParams(**e["params"]), n=e["n"], k_max=e["k_max"], M=e["M"], seed=e["seed"])
    y = sim.y.astype(int)
    repairs = [(int(y[i, t]), int(y[i, t + 1]), t) for i in range(y.shape[0]) for t in range(e["k_max"])]
    return {"votes": sim.S[:, 0].tolist(), "labels": y[:, 0].tolist(), "repairs": repairs, "M": e["M"],
            "k_max": e["k_max"]}


def write_small_example(path: str | os.PathLike) -> Path:
    """Write ``examples/calibration_small.json`` (deterministic: same machine, same bytes)."""
    _, report = calibrate_labeled(**example_labeled_set())
    return save_online_calibration(report, path)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vrr.policies.online_calibration",
                                 description="write the example calibration (examples/calibration_small.json): "
                                             "from_labeled on 150 simulated loops")
    ap.add_argument("out", metavar="OUT.json", help="the calibration file to write")
    args = ap.parse_args(argv)
    print(write_small_example(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
