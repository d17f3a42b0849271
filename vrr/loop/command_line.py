"""The command line's names, swaps and argument types (``python -m vrr``): a model name an engine can load, a run
folder that exists, which roles a setting's overrides swap, a swap's own probe, and where a run's probe comes from
and who voted on it."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..common.paths import SETTINGS_DIR
from ..settings import SettingConfigError, UnknownNameError, load_config
from . import store
from .config import RunConfig, from_stored


def check_model_names(cfg: dict) -> None:
    """An in-process engine loads a model by registry name, local directory or Hugging Face id (``org/name``);
    anything else is a typo, refused with the nearest registry names before an engine starts
    (:class:`vrr.settings.UnknownNameError`). An OpenAI-compatible server and the fake backend take any name."""
    from .engine.models import MODELS

    if cfg["kind"] != "real" or cfg["engine"]["backend"] in ("fake", "openai"):
        return
    for role, model in cfg["models"].items():
        if model in MODELS or "/" in str(model) or Path(str(model)).is_dir():
            continue
        raise UnknownNameError("model", model, MODELS, where=f"{cfg['_path']} (models.{role})",
                               field=f"models.{role}")


def check_run_folder(folder) -> None:
    """A run folder given on the command line exists; else one line with the nearest folders beside it."""

    folder = Path(folder)
    if not folder.is_dir():
        parent = folder.parent if folder.parent.is_dir() else None
        raise UnknownNameError("run folder", str(folder),
                               [str(folder.parent / p.name) for p in parent.iterdir() if p.is_dir()] if parent else [])


def swapped_models(base: dict, cfg: dict) -> tuple[str | None, str | None]:
    """The generator and the judge of ``cfg`` where they differ from the setting's own (``base``): a model swap,
    by ``--model``/``--verifier`` or by ``--set models.*`` alike; None where a role is not swapped. A swap of
    the repairer alone counts as a swap of the generator (``--model`` sets both)."""
    gen = cfg["models"]["generator"] if (cfg["models"]["generator"], cfg["models"]["repairer"]) != \
        (base["models"]["generator"], base["models"]["repairer"]) else None
    judge = cfg["models"]["judge"] if cfg["models"]["judge"] != base["models"]["judge"] else None
    return gen, judge


def swap_with_own_probe(base: dict, cfg: dict, overrides: dict) -> tuple[dict, dict]:
    """A swap is a run of its own with its own probe: where ``cfg`` swaps the generator or the judge of a setting
    that borrows its probe (``probe.from``), the probe is made by this run, with the swapped models
    (``probe.from: null``; the setting's ``probe.n``, ``split`` and ``start``), never borrowed from a run whose
    plans and votes came from other models. ``--probe-n`` on a run that still borrows its probe is refused:
    the probe's size is its owner's. Returns the (re)loaded setting and the overrides that made it."""
    if cfg["kind"] != "real":
        return cfg, overrides
    owner = cfg["probe"]["from"]
    if owner and any(swapped_models(base, cfg)) and "probe.from" not in overrides:
        overrides = {**overrides, "probe.from": None}
        cfg = load_config(cfg["_path"], overrides=overrides)
        if cfg["probe"]["n"] == 0:
            raise SettingConfigError("--probe-n", "probe.n", f"{cfg['_path']} borrows its probe from {owner!r}, "
                                     "which other models voted on; a swapped run makes its own: pass --probe-n N")
    elif owner and overrides.get("probe.n", 0) != 0:   # 0: no probe plans here, which holds for a borrower
        raise SettingConfigError("--probe-n", "probe.n", f"{cfg['_path']} borrows its probe from {owner!r}, which sets "
                                 f"its size: pass --probe-n to the run of {owner!r}, or "
                                 "--set probe.from=null to make a probe of this run's own")
    return cfg, overrides


def probe_source(cfg: RunConfig, out_root) -> dict[str, Any]:
    """Where a run's probe comes from and which models voted on it: ``{"owner", "folder", "generator",
    "judge"}`` (its own, or the borrowed owner's: its stored ``config.json``, else its setting); None without
    a probe."""
    if not cfg.probe_from and not (cfg.probe_n and cfg.probe_split):
        return None
    owner = cfg.probe_from or cfg.setting
    folder = Path(out_root) / owner
    gen, judge = cfg.model, cfg.judge_model
    if cfg.probe_from:
        if (folder / "config.json").is_file():
            stored = from_stored(store.read_stored_config(folder), str(folder / "config.json"))
            gen, judge = stored.model, stored.judge_model
        elif (Path(SETTINGS_DIR) / f"{owner}.yaml").is_file():
            setting = load_config(owner)
            gen, judge = setting["models"]["generator"], setting["models"]["judge"]
        else:
            gen = judge = None
    return {"owner": owner, "folder": str(folder.resolve()), "generator": gen, "judge": judge,
            "own": not cfg.probe_from}


def count_arg(text: str) -> int:
    """A whole number >= 0 (a negative count would slice from the end of a list)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def shard_arg(text: str):
    try:
        return store.Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_probe_voters(paths: store.RunPaths, cfg: RunConfig) -> None:
    """A run never borrows a probe that other models made and voted on: a borrowed probe's owner must have the
    run's generator and judge (its ``config.json``, else its setting), or the run is refused with a
    :class:`vrr.loop.store.RunStoreError` that says how to give it a probe of its own."""
    source = probe_source(cfg, paths.dir.parent)
    if not source or source["own"] or source["generator"] is None:
        return   # no probe, its own, or an owner that check_probe_owner names
    if (source["generator"], source["judge"]) != (cfg.model, cfg.judge_model):
        raise store.RunStoreError(paths.dir, f"field 'probe.from': the probe of {source['owner']!r} was made by "
                                  f"{source['generator']} and voted on by {source['judge']}; this run's generator "
                                  f"and judge are {cfg.model} and {cfg.judge_model}. Give it a probe of its own: "
                                  "--set probe.from=null (with --probe-n N where the setting has none)")


def judge_styles_arg(text: str) -> list[str]:
    """``--styles style[:votes[:max_plans]],...`` of ``measure-judge-styles``, checked before any engine starts: an
    unknown style is one line with the nearest known ones, a count that is not a whole number is named."""
    from ..settings import JUDGE_STYLES

    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give at least one judge style, e.g. verdict:16")
    for item in items:
        style, *counts = item.split(":")
        if style not in JUDGE_STYLES:
            raise argparse.ArgumentTypeError(str(UnknownNameError("judge style", style, JUDGE_STYLES)))
        if len(counts) > 2 or any(not c.isdigit() or int(c) < 1 for c in counts):
            raise argparse.ArgumentTypeError(f"{item!r}: expected style[:votes[:max_plans]], whole numbers >= 1")
    return items
