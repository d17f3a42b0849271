"""Step functions of the notebook chain (01_generate ... 06_figures) and its path conventions.

Notebooks stay thin: each calls one or two of these and displays what comes back.

Layout (per setting ``name``)::

    data/simulated/<name>/arrays.npz     simulated settings (rebuilt by 01_generate, not committed)
    data/real/<name>/arrays.npz          real settings: labeled compact arrays (committed)
    data/real/<name>/trajectories.jsonl.gz, probe.jsonl.gz, run_meta.json
    results/<name>/0X_*.ipynb            executed notebooks (swapped models: results/swap-*/<name>/)
    results/<name>/calibration.json, replay.npz, stats.json
    results/tables/*.csv|tex, results/figures/*.png|pdf, results/README.md
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .data import Setting, load_setting, save_setting
from .settings import simulate_from_config

REPO = Path(__file__).resolve().parent.parent


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.split("/")[-1]).strip("-").lower()


@dataclass(frozen=True)
class SettingPaths:
    run: str                 # setting name, suffixed when the model or verifier is swapped
    data_dir: Path
    results_dir: Path

    @property
    def arrays(self) -> Path:
        return self.data_dir / "arrays.npz"

    @property
    def calibration(self) -> Path:
        return self.results_dir / "calibration.json"

    @property
    def replay(self) -> Path:
        return self.results_dir / "replay.npz"

    @property
    def stats(self) -> Path:
        return self.results_dir / "stats.json"


def setting_paths(cfg: dict, data_root: str | os.PathLike = "data", results_root: str | os.PathLike = "results",
                  model: str | None = None, verifier: str | None = None) -> SettingPaths:
    """Where a setting's data and results live; swapping the model or verifier makes a new run name."""
    run = cfg["name"]
    if model and model != cfg.get("generator"):
        run += f"--gen-{_slug(model)}"
    if verifier and verifier != cfg.get("verifier"):
        run += f"--judge-{_slug(verifier)}"
    kind_dir = "simulated" if cfg["kind"] == "simulated" else "real"
    data_dir = Path(data_root) / kind_dir / run
    if cfg["kind"] == "real" and run == cfg["name"] and "data_dir" in cfg and Path(data_root) == Path("data"):
        data_dir = Path(cfg["data_dir"])
    # Results are keyed by setting name; a model swap gets its own results root (see Makefile).
    return SettingPaths(run, data_dir, Path(results_root) / cfg["name"])


def generate(cfg: dict, paths: SettingPaths, n: int | None = None, seed: int | None = None,
             run_engine: bool = False, engine_python: str | None = None, model: str | None = None,
             verifier: str | None = None, backend: str = "auto", extra_args: tuple[str, ...] = ()) -> Setting:
    """01_generate. Simulated: draw the arrays from the registered parameters. Real: use the
    frozen trajectories when their labeled arrays exist; otherwise, with ``run_engine``, run
    (or resume) LLM generation and labeling in a separate engine process."""
    if cfg["kind"] == "simulated":
        setting = simulate_from_config(cfg, n=n, seed=seed)
        setting.meta["models_are_labels_only"] = True
        save_setting(paths.arrays, setting)
        return setting
    if paths.arrays.is_file():
        return load_setting(paths.arrays)
    if not run_engine:
        raise FileNotFoundError(
            f"{paths.arrays}: no frozen trajectories for real setting '{paths.run}'. Generate them with "
            f"`make generate SETTINGS={cfg['name']}` (needs the engine; hours on a CPU) or replay a committed setting.")
    run_engine_generation(cfg, paths, engine_python=engine_python, model=model, verifier=verifier,
                          backend=backend, n=n, seed=seed, extra_args=extra_args)
    return load_setting(paths.arrays)


def run_engine_generation(cfg: dict, paths: SettingPaths, engine_python: str | None = None,
                          model: str | None = None, verifier: str | None = None, backend: str = "auto",
                          n: int | None = None, seed: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
    """Run (or resume) ``python -m vrr.generation`` in the engine's interpreter, then relabel
    with ``python -m vrr.labeling``. vLLM runs in its own process, never inside a notebook kernel.

    The generation presets (``vrr.generation.PRESETS``) hold the task protocol; the setting's
    ``engine`` block picks the preset, model and backend. One model plays generator, judge and
    repairer, as in the paper's LLM-judge settings.
    """
    if cfg["task"] != "gsm8k":
        raise NotImplementedError(f"{cfg['_path']}: field 'task': generation is implemented for gsm8k only, "
                                  f"not {cfg['task']!r}")
    engine = cfg.get("engine", {})
    if verifier and verifier != (model or engine.get("model")):
        raise NotImplementedError("a judge model different from the generator is not supported by the engine yet")
    python = engine_python or os.environ.get("VRR_ENGINE_PYTHON") or sys.executable
    args = ["--preset", engine.get("preset", cfg["name"]), "--setting", paths.run,
            "--out-root", str(paths.data_dir.parent), "--backend", backend or engine.get("backend", "auto")]
    if model or engine.get("model"):
        args += ["--model", model or engine["model"]]
    if engine.get("judge_style"):
        args += ["--judge-style", engine["judge_style"]]
    if n is not None:
        args += ["--n", str(n)]
    if seed is not None:
        args += ["--seed", str(seed)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for module, module_args in (("vrr.generation", args + list(extra_args)), ("vrr.labeling", [str(paths.data_dir)])):
        proc = subprocess.run([python, "-m", module, *module_args], cwd=REPO, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{module} failed for {paths.run} (exit {proc.returncode}); rerun to resume")
    if not paths.arrays.is_file():
        raise RuntimeError(f"{paths.arrays}: generation stopped before the window was complete; rerun to resume")
