"""The settings registry: one YAML file per setting under ``settings/``.

A setting names everything a run needs: task, generator, verifier, perturbation (favorable /
pm_stress / nonstationary / independent_resampling), M, K_max, temperatures, window N, seed,
probe size. ``kind: simulated`` settings also carry the noise-model ``params`` (the paper's
Table "loop-dynamics" rows) and are drawn by ``vrr.simulate``; ``kind: real`` settings carry an
``engine`` block and a ``data_dir`` holding frozen trajectories and labeled arrays.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .data import Setting
from .model import NoiseParams
from .simulate import perturbation_schedule, simulate_setting

SETTINGS_DIR = Path(__file__).resolve().parent.parent / "settings"
REQUIRED = ("name", "kind", "label", "task", "generator", "verifier", "perturbation", "M", "K_max", "N", "seed")
KINDS = ("simulated", "real")


class SettingConfigError(ValueError):
    """A settings file is malformed; the message names the file and the field."""


def _fail(path, field, problem):
    raise SettingConfigError(f"{path}: field '{field}': {problem}")


def load_config(name_or_path: str | Path, settings_dir: Path = SETTINGS_DIR) -> dict[str, Any]:
    """Load and validate one setting's YAML (by name, e.g. ``sim_qwen3b_pmstress``, or by path)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = Path(settings_dir) / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(list_settings(settings_dir))
        raise FileNotFoundError(f"{path}: no such setting (known: {known})")
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SettingConfigError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(cfg, dict):
        raise SettingConfigError(f"{path}: expected a mapping at top level")
    for field in REQUIRED:
        if field not in cfg:
            _fail(path, field, "missing")
    if cfg["kind"] not in KINDS:
        _fail(path, "kind", f"must be one of {KINDS}, got {cfg['kind']!r}")
    for field in ("M", "K_max", "N"):
        if not isinstance(cfg[field], int) or cfg[field] < 1:
            _fail(path, field, f"must be a positive integer, got {cfg[field]!r}")
    if cfg["kind"] == "simulated":
        params = cfg.get("params")
        if not isinstance(params, dict):
            _fail(path, "params", "simulated settings need rho0, rho1, alpha, beta, pi")
        try:
            NoiseParams(**{k: params[k] for k in ("rho0", "rho1", "alpha", "beta", "pi")})
        except KeyError as exc:
            _fail(path, f"params.{exc.args[0]}", "missing")
        except ValueError as exc:
            _fail(path, "params", str(exc))
    else:
        if "data_dir" not in cfg:
            _fail(path, "data_dir", "real settings need the folder of their frozen trajectories")
    cfg["_path"] = str(path)
    return cfg


def list_settings(settings_dir: Path = SETTINGS_DIR, kind: str | None = None) -> list[str]:
    """Names of all registered settings (optionally of one kind)."""
    names = sorted(p.stem for p in Path(settings_dir).glob("*.yaml"))
    if kind is None:
        return names
    return [n for n in names if yaml.safe_load((Path(settings_dir) / f"{n}.yaml").read_text()).get("kind") == kind]


def simulate_from_config(cfg: dict[str, Any], n: int | None = None, seed: int | None = None,
                         probe_n: int | None = None) -> Setting:
    """Draw a simulated setting's arrays from its registered parameters (overrides optional)."""
    if cfg["kind"] != "simulated":
        raise ValueError(f"{cfg.get('_path', cfg['name'])}: kind is {cfg['kind']!r}, not 'simulated'")
    params = NoiseParams(**{k: float(cfg["params"][k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")})
    alpha_t = beta_t = None
    if "schedule" in cfg:
        sched = cfg["schedule"]
        alpha_t, beta_t = perturbation_schedule(
            cfg["K_max"], (params.alpha, params.beta),
            (float(sched["perturbed"]["alpha"]), float(sched["perturbed"]["beta"])), int(sched["start_round"]))
    probe = cfg.get("probe", {})
    meta = {k: cfg[k] for k in ("label", "task", "generator", "verifier", "perturbation", "temperatures", "shift")
            if k in cfg}
    return simulate_setting(
        params, n=int(n or cfg["N"]), k_max=int(cfg["K_max"]), M=int(cfg["M"]),
        seed=int(cfg["seed"] if seed is None else seed), alpha_t=alpha_t, beta_t=beta_t,
        judge_concentration=cfg.get("judge_concentration"),
        probe_n=int(probe.get("n", 0) if probe_n is None else probe_n), probe_M=int(probe.get("M", 16)),
        name=cfg["name"], extra_meta=meta)
