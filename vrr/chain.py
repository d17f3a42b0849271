"""Step functions of the notebook chain and its path conventions; the ``python -m vrr`` commands.

Notebooks stay thin: each calls one or two functions of ``vrr`` and displays what comes back.

Layout (per setting ``name``; ``results`` is the results root of the run, ``RESULTS=`` in make)::

    results/<name>/arrays.npz            simulated settings: drawn by 01_generate (keyed by the
                                         results root, so runs with other N never mix)
    data/real/<name>/arrays.npz          real settings: labeled compact arrays (committed)
    data/real/<name>/trajectories.jsonl.gz, probe.jsonl.gz, config.json, run_meta.json
    results/<name>/0X_*.ipynb            executed notebooks (swapped models: results/swap-*/<name>/)
    results/<name>/calibration.json, replay.npz, stats.json
    results/tables/*.csv|tex, results/figures/*.png|pdf, results/README.md

Generation of real settings runs in the engine's interpreter, never inside a notebook kernel:
``python -m vrr generate settings/<name>.yaml`` (see :func:`main`).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .common.paths import REPO_ROOT
from .common.notebook_runner import parse_notebook_chains, run_notebook_chains
from .common.processes import death_signal_preexec
from .data.contract import Setting, load_setting, save_setting
from .data.simulate import simulate_from_config, simulation_protocol
from .loop.store import RunPaths
from .settings import check_plain_name, load_config, parse_set_overrides


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.split("/")[-1]).strip("-").lower()


@dataclass(frozen=True)
class SettingPaths:
    """Where one setting's arrays and results live (see the module docstring for the layout)."""

    run: str                 # setting name, suffixed when the model or verifier is swapped
    data_dir: Path
    results_dir: Path

    @property
    def arrays(self) -> Path:
        return self.data_dir / "arrays.npz"

    @property
    def run_files(self) -> RunPaths:
        """The files of a real setting's generation run (``vrr.loop.store.RunPaths``)."""
        return RunPaths(self.data_dir.parent, self.data_dir.name)

    @property
    def calibration(self) -> Path:
        return self.results_dir / "calibration.json"

    @property
    def replay(self) -> Path:
        return self.results_dir / "replay.npz"

    @property
    def stats(self) -> Path:
        return self.results_dir / "stats.json"


def swap_overrides(model: str | None = None, verifier: str | None = None) -> dict[str, Any]:
    """Setting overrides of a model swap: ``model`` plays generator and repairer, ``verifier`` the judge."""
    out: dict[str, Any] = {}
    if model:
        out.update({"models.generator": model, "models.repairer": model})
    if verifier:
        out["models.judge"] = verifier
    return out


def run_name(cfg: dict, model: str | None = None, verifier: str | None = None) -> str:
    run = cfg["name"]
    if model and model != cfg["models"]["generator"]:
        run += f"--gen-{_slug(model)}"
    if verifier and verifier != cfg["models"]["judge"]:
        run += f"--judge-{_slug(verifier)}"
    return run


def setting_paths(cfg: dict, data_root: str | os.PathLike = "data", results_root: str | os.PathLike = "results",
                  model: str | None = None, verifier: str | None = None) -> SettingPaths:
    """Where a setting's data and results live; swapping the model or verifier makes a new run name."""
    run = run_name(cfg, model, verifier)
    results_dir = Path(results_root) / cfg["name"]
    if cfg["kind"] == "simulated":
        return SettingPaths(run, results_dir, results_dir)
    data_dir = Path(data_root) / "real" / run
    if run == cfg["name"] and Path(data_root) == Path("data"):
        data_dir = Path(cfg["data_dir"])
    return SettingPaths(run, data_dir, results_dir)


def generate(cfg: dict, paths: SettingPaths, n: int | None = None, seed: int | None = None,
             run_engine: bool = False, engine_python: str | None = None, model: str | None = None,
             verifier: str | None = None, backend: str | None = None) -> Setting:
    """01_generate. Simulated: draw the arrays from the registered parameters. Real: use the
    frozen trajectories when their labeled arrays exist; otherwise, with ``run_engine``, run
    (or resume) the LLM loop and labeling in a separate engine process."""
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
    overrides = swap_overrides(model, verifier)
    if n is not None:
        overrides["window.N"] = n
    if seed is not None:
        overrides["seed"] = seed
    if backend:
        overrides["engine.backend"] = backend
    run_generation_process(cfg["_path"], paths, overrides, python=engine_python)
    return load_setting(paths.arrays)



def calibration_record(cfg: dict, paths: SettingPaths, arrays: Setting, config) -> dict:
    """03_calibrate's ``calibration.json``: the cross-fit calibration summary (``vrr.stats.analysis``), the loop
    dynamics, the arrays it was fit on and, for a real run, the judge's readability (``vrr.report.status``)."""
    from .report.status import run_readability
    from .stats.analysis import calibration_summary, loop_dynamics

    record = calibration_summary(arrays, config)
    record.update({"loop_dynamics": loop_dynamics(arrays), "arrays_path": str(paths.arrays)})
    if cfg["kind"] != "simulated":
        record["judge_readability"] = run_readability(paths.data_dir)
    return record

def _set_args(overrides: dict[str, Any]) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def run_generation_process(setting_file: str, paths: SettingPaths, overrides: dict[str, Any],
                           python: str | None = None) -> None:
    """``python -m vrr generate`` in the engine's interpreter (vLLM runs in its own process)."""
    python = python or os.environ.get("VRR_ENGINE_PYTHON") or sys.executable
    args = [python, "-m", "vrr", "generate", setting_file, "--run-name", paths.run,
            "--out-root", str(paths.data_dir.parent), *_set_args(overrides)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"generation failed for {paths.run} (exit {proc.returncode}); rerun to resume")
    if not paths.arrays.is_file():
        raise RuntimeError(f"{paths.arrays}: generation stopped before the window was complete; rerun to resume")


# --------------------------------------------------------------------------- process hygiene
WORKER_ENV = "VRR_GENERATE_WORKER"


SUPERVISOR_ENV = "VRR_GENERATE_SUPERVISOR"   # the worker's expected parent: the pid of its supervisor


def supervise(argv: Sequence[str]) -> int:
    """Run ``python -m vrr generate ...`` as a worker in its own process group and reap that whole
    group (vLLM's EngineCore and workers included) on every exit path of this process.

    SIGTERM/SIGINT here are forwarded to the group, which gets SIGKILL 10 s later at the latest (a signal
    that comes while the worker starts is forwarded once it exists); a worker that dies (even by SIGKILL)
    has its group killed. If this supervisor itself is SIGKILLed, at any moment, the worker's start
    included, the worker kills its group: the kernel sends it SIGTERM (``PR_SET_PDEATHSIG``, set in the
    child before exec, which then checks that its parent is still this supervisor), and its watchdog
    (:func:`start_orphan_watchdog`) waits on a pidfd of this process.
    """
    import signal

    env = dict(os.environ, **{WORKER_ENV: "1", SUPERVISOR_ENV: str(os.getpid())})
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    stopping = {"signal": 0}
    proc = None

    def kill_group(sig):
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def on_signal(signum, _frame):
        stopping["signal"] = signum
        kill_group(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "vrr", *argv], env=env, start_new_session=True,
                                preexec_fn=death_signal_preexec(signal.SIGTERM, os.getpid()))
        if stopping["signal"]:
            kill_group(signal.SIGTERM)
        while True:
            try:
                rc = proc.wait(timeout=10 if stopping["signal"] else None)
                break
            except subprocess.TimeoutExpired:
                kill_group(signal.SIGKILL)
    finally:
        kill_group(signal.SIGKILL)  # whatever the worker left behind (EngineCore, workers) goes with it
        for s, h in old.items():
            signal.signal(s, h)
    return 128 + stopping["signal"] if stopping["signal"] else rc


def start_orphan_watchdog() -> None:
    """In a generation worker: kill our own process group (the engine's child processes, which would otherwise
    live on) on SIGTERM and when the supervisor exits, however it exits. The kernel reports that exit twice:
    as SIGTERM (``PR_SET_PDEATHSIG``, set by :func:`supervise` before exec) and on a pidfd of the supervisor
    that a thread waits on (it acts even while the main thread is in a C call, when Python would hold the
    signal's handler back). A supervisor that died while this worker started is seen at once: the parent is
    no longer the process named in ``VRR_GENERATE_SUPERVISOR``."""
    import select
    import signal
    import threading

    def kill_own_group(*_):
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, kill_own_group)
    parent = int(os.environ.get(SUPERVISOR_ENV) or os.getppid())
    try:
        pidfd = os.pidfd_open(parent)
    except OSError:   # already gone
        kill_own_group()
    if os.getppid() != parent:   # the pidfd may be of another process that took the pid
        kill_own_group()

    def watch():
        select.select([pidfd], [], [])   # readable once the supervisor has exited
        kill_own_group()

    threading.Thread(target=watch, name="vrr-orphan-watchdog", daemon=True).start()


# --------------------------------------------------------------------------- python -m vrr
def _resolve(a) -> tuple[dict, dict]:
    overrides = parse_set_overrides(getattr(a, "set", None) or [])
    overrides.update(swap_overrides(getattr(a, "model", None), getattr(a, "verifier", None)))
    for flag, key in (("n", "window.N"), ("probe_n", "probe.n"), ("seed", "seed"), ("backend", "engine.backend"),
                      ("batch_size", "engine.batch_size")):
        if getattr(a, flag, None) is not None:
            overrides[key] = getattr(a, flag)
    from .loop.command_line import swap_with_own_probe

    return swap_with_own_probe(load_config(a.setting), load_config(a.setting, overrides=overrides), overrides)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["notebook"] and not any(t in ("-h", "--help") for t in argv[1:]):
        # what make runs once per setting: none of the generation commands' imports (scipy among them)
        chains, jobs = parse_notebook_chains(argv[1:])
        return run_notebook_chains(chains, jobs=jobs)
    from .label.labeling import finalize_setting, relabel
    from .loop import runner, store, summary
    from .common.names import ForgivingParser
    from .report.status import window_gaps
    from .loop.command_line import (check_model_names, check_run_folder, count_arg, judge_styles_arg, probe_source,
                                    shard_arg, swapped_models)
    from .loop.config import WINDOW_KEYS, from_stored, run_config

    ap = ForgivingParser(prog="python -m vrr", description="VRR-Stop reproduction: run the LLM loop, label.")
    sub = ap.add_subparsers(dest="command", required=True)

    def setting_args(p):
        p.add_argument("setting", help="a setting name (settings/<name>.yaml) or a path to a setting YAML")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a field of the setting, e.g. --set window.N=200 --set models.judge=NAME")
        p.add_argument("--model", help="generator and repairer model (a swap: the run gets its own name)")
        p.add_argument("--verifier", help="judge model (a swap)")
        p.add_argument("--n", type=int, help="= --set window.N=")
        p.add_argument("--probe-n", type=int, help="= --set probe.n=")
        p.add_argument("--seed", type=int, help="= --set seed=")
        p.add_argument("--backend", help="= --set engine.backend=")
        p.add_argument("--batch-size", type=int, help="= --set engine.batch_size=")
        p.add_argument("--run-name", help="output folder name (default: the setting name, suffixed on a swap)")

    g = sub.add_parser("generate", help="run or resume a real setting, then label its window")
    setting_args(g)
    g.add_argument("--out-root", default=str(store.DEFAULT_OUT_ROOT))
    g.add_argument("--limit", type=count_arg, help="at most this many new instances/probe plans this call")
    g.add_argument("--phase", choices=["all", "probe", "traj"], default="all")
    g.add_argument("--no-finalize", action="store_true", help="do not label the window after generating")
    g.add_argument("--finalize-only", action="store_true",
                   help="only rebuild the outputs from the stored records (window lengths from --n/--probe-n); "
                        "an incomplete window is an error naming its missing shards and instances")
    g.add_argument("--allow-partial", action="store_true",
                   help="with --finalize-only: an incomplete window exits 0 (arrays.partial.npz; what is missing "
                        "is still named, on stderr)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bars (generation, and labeling's sandbox batches)")
    g.add_argument("--shard", metavar="I/N", type=shard_arg,
                   help="run shard I of N (0 <= I < N: the instances with index %% N == I) into its own part files; "
                        "finalizing merges every shard of the run")
    st = sub.add_parser("status", help="how far a real setting's run has come and its interim labels "
                                       "(reads the stored records only; safe beside a running generator)")
    setting_args(st)   # the same resolution as generate's: a swap's flags name its folder
    st.add_argument("--out-root", default=str(store.DEFAULT_OUT_ROOT))
    st.add_argument("--no-labels", action="store_true",
                    help="counts and cost only (the labels run the task's checker on every stored plan; code tasks "
                         "execute their tests in the sandbox)")
    st.add_argument("--json", action="store_true", help="print the report as JSON")
    r = sub.add_parser("resolve", help="print the resolved setting and run config (no engine)")
    setting_args(r)
    r.add_argument("--out-root", default=str(store.DEFAULT_OUT_ROOT), help="where the run folder is (as in generate)")
    r.add_argument("--calls", action="store_true",
                   help="also print the engine requests of one problem (models, sampling, prompts): a dry run")
    lab = sub.add_parser("label", help="relabel stored runs: data/real/<setting> [...]")
    lab.add_argument("run_dirs", nargs="+")
    j = sub.add_parser("measure-judge-styles", help="J of each judge style on the same plans (no generation)")
    setting_args(j)
    j.add_argument("--styles", required=True, type=judge_styles_arg, help="comma list: style[:votes[:max_plans]]")
    j.add_argument("--split", default="train")
    j.add_argument("--start", type=count_arg, default=5000)
    j.add_argument("--problems", type=count_arg, default=40)
    j.add_argument("--out", help="JSON output")
    sub.add_parser("notebook", usage="python -m vrr notebook [--jobs J] NOTEBOOK OUTPUT [-p NAME VALUE]... "
                                     "[NOTEBOOK OUTPUT ...] [--chain NOTEBOOK OUTPUT ...]...",
                   help="execute notebooks of the chain in order in one kernel (what make runs); "
                        "-p NAME VALUE is a parameter of the notebook before it, its value read as YAML; "
                        "--chain begins another chain, and --jobs J runs the chains on J kernels at once")
    a = ap.parse_args(argv)
    starts_engines = a.command == "measure-judge-styles" or (a.command == "generate" and not a.finalize_only)
    if starts_engines:
        if os.environ.get(WORKER_ENV) != "1":
            return supervise(argv)
        start_orphan_watchdog()
    if a.command == "label":
        for d in a.run_dirs:
            check_run_folder(d)
        for d in a.run_dirs:
            print(d, relabel(d))
        return 0
    cfg, _ = _resolve(a)
    if a.command in ("generate", "measure-judge-styles", "resolve") and not getattr(a, "finalize_only", False):
        check_model_names(cfg)   # before an engine starts (finalize and status only name a folder)
    name = check_plain_name(a.run_name, "--run-name", "run_name") if a.run_name else \
        run_name(load_config(a.setting), *swapped_models(load_config(a.setting), cfg))
    if a.command == "resolve":
        shown = {k: v for k, v in cfg.items() if not k.startswith("_")}
        out = {"setting": shown, **({"simulation": simulation_protocol(cfg)} if cfg["kind"] == "simulated" else {})}
        if cfg["kind"] == "real":
            out["run_config"] = run_config(cfg, setting=name).to_json()
            out["run"] = {"folder": str((Path(a.out_root) / name).resolve()),
                          "probe": probe_source(run_config(cfg, setting=name), a.out_root)}
            if a.calls:
                out["engine_calls"] = runner.dry_run(run_config(cfg, setting=name))
        print(json.dumps(out, indent=1))
        return 0
    rc = run_config(cfg, setting=name)
    if a.command == "status":
        from .common.jsonio import json_default
        from .report.status import format_status, run_status

        report = run_status(store.RunPaths(a.out_root, rc.setting), rc, labels=not a.no_labels)
        print(json.dumps(report, indent=1, default=json_default) if a.json else format_status(report))
        return 0
    if a.command == "measure-judge-styles":
        engines = runner.make_engines(rc, runner.get_task(rc.dataset), options=cfg["engine"])
        res = runner.measure_judge_styles(engines, rc, a.styles, split=a.split, start=a.start,
                                          n=a.problems, votes=rc.probe_votes, out_path=a.out)
        print(json.dumps(res, indent=1))
        return 0
    paths = store.RunPaths(a.out_root, rc.setting)
    command = summary.GenerateCommand.from_args(a)
    if not a.run_name and name != cfg["name"] and not a.finalize_only:   # once, where a swap starts writing
        print(summary.swap_note(paths.dir), file=sys.stderr, flush=True)
    if a.finalize_only:
        summary.require_run(paths)
        stored = from_stored(store.read_stored_config(paths), str(paths.config))
        for key in WINDOW_KEYS:
            if getattr(a, key, None) is not None:
                setattr(stored, key, getattr(a, key))
        status = finalize_setting(paths, stored, progress=not a.no_progress)
        store.merge_run_meta(paths)
        print(summary.run_summary(status, paths, stored, command, readability=_readability(paths, stored)))
        if status != "complete":
            gaps = window_gaps(paths, stored)
            if not a.allow_partial:
                raise store.IncompleteWindowError(paths.dir, f"the window is {status}: {gaps}. Generate what is "
                                                             "missing, or pass --allow-partial to accept a partial "
                                                             "window (arrays.partial.npz)")
            print(f"{paths.dir}: the window is {status}: {gaps}", file=sys.stderr)
        return 0
    phases = ("probe", "traj") if a.phase == "all" else (a.phase,)
    runner.generate(rc, out_root=a.out_root, limit=a.limit, phases=phases, progress=not a.no_progress,
                    shard=a.shard, engine_options=cfg["engine"])
    status = None
    if not a.no_finalize:  # a shard's finalize merges whatever every shard has stored so far
        status = finalize_setting(paths, rc, progress=not a.no_progress)
        store.merge_run_meta(paths)
    print(summary.run_summary(status, paths, rc, command, shard=a.shard, readability=_readability(paths, rc)))
    return 0


def _readability(paths, cfg) -> list[str]:
    """The summary's lines on the judge's unparsable votes (``vrr.report.status.judge_readability``)."""
    from .report.status import judge_readability, readability_lines

    report = judge_readability(paths, cfg)
    return readability_lines(report) if report else []
