"""Benchmark: ``make -j2 reproduce`` from an empty results root against a plain loop of the same steps.

Both runs use temporary results roots (the repository's ``results/`` is never touched):

* chain: ``make -j2 reproduce RESULTS=<tmp>``; wall time, the CPU time of make and everything it
  started, and per step (01..06) the summed papermill durations of the executed notebooks;
* plain loop: the code cells of the same notebooks, with the same parameters (read from
  ``make -n reproduce``, so they are the Makefile's), executed in this one Python process in make's
  order, without papermill or a kernel; wall and CPU seconds per step (06's CPU seconds leave out its figure
  writer's second process, ``vrr.report.FigureWriter``).

The ratio chain / plain loop is what the notebook design costs (kernel start-up, papermill, writing
the executed notebooks, and -j2 scheduling).

Per setting it prints each step's time (the chain's papermill seconds and the plain loop's CPU seconds) and
05's distance from its floor: 05's CPU seconds divided by the CPU time of one vectorised pass over the
setting's histograms, that is one EM step (E- and M-step, ``vrr.calibration.mixture.em_step``) of every chain
05's statistics run for a calibration: n_folds x (check replicates + 1 + radius replicates) x EM restarts
chains over the M + 1 count cells. A 05 at ratio r costs as much as r such passes; the EM chains it fits
need up to ``em_max_iter`` passes each, so r in the thousands is the arithmetic, not overhead.

``--record`` writes the chain's figures to docs/runtime/<machine kind>.json (the README's runtime table is rendered
from these by ``python scripts/readme_tables.py``); ``--chain-only`` skips the plain loop.

``--profile N`` adds a second, profiled pass of the plain loop (cProfile on CPU time; the timed pass runs
without the profiler) and prints per step the N functions with the most cumulative CPU time. ``--skip-chain`` runs only the plain loop.

    python scripts/bench_chain.py [--jobs 2] [--data data] [--settings "a b"] [--profile 8] [--skip-chain]
    python scripts/bench_chain.py --record --chain-only      # the README's runtime table, on this machine
    make bench-chain
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# as in the chain's kernels (vrr.common.notebook_runner.run_notebook_chains): one BLAS thread per process
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.loop.engine.backend import cpu_kind  # noqa: E402

STEPS = ("01", "02", "03", "04", "05", "06")


def make_vars(results: Path, args) -> list[str]:
    out = [f"RESULTS={results}", f"DATA={args.data}"]
    if args.settings is not None:
        out.append(f"SETTINGS={args.settings}")
    return out


def notebook_commands(results: Path, args) -> list[tuple[str, str, dict]]:
    """(notebook, output, parameters) of every notebook ``make reproduce`` runs, in make's order."""
    from vrr.common.notebook_runner import parse_notebook_chains

    dry = subprocess.run(["make", "-n", "reproduce", *make_vars(results, args)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    out = []
    for line in dry.splitlines():
        words = shlex.split(line) if " -m vrr notebook " in line else []
        if len(words) < 5 or words[1:4] != ["-m", "vrr", "notebook"]:
            continue
        chains, _jobs = parse_notebook_chains(words[4:])
        out += [(str(r.notebook), str(r.output), r.parameters) for chain in chains for r in chain]
    return out


def step_of(notebook: str) -> str:
    return Path(notebook).name[:2]


def run_chain(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-chain-") as tmp:
        results = Path(args.results) if args.results else Path(tmp) / "results"
        if results.exists() and any(results.iterdir()):
            raise SystemExit(f"{results}: the chain must start from an empty results root")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(["make", f"-j{args.jobs}", "reproduce", *make_vars(results, args)], cwd=REPO,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            raise SystemExit(f"make reproduce failed (exit {proc.returncode})")
        per_step, count = papermill_durations(results)
        per_setting = setting_durations(results)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "per_step": per_step, "count": count, "per_setting": per_setting}


def papermill_durations(results: Path) -> tuple[dict, dict]:
    """Summed papermill durations (seconds) and notebook counts per step of the executed notebooks under ``results``."""
    per_step, count = defaultdict(float), defaultdict(int)
    for nb in Path(results).rglob("0*.ipynb"):
        if nb.name.endswith((".tmp.ipynb", ".failed.ipynb")):
            continue
        duration = json.loads(nb.read_text())["metadata"].get("papermill", {}).get("duration") or 0.0
        per_step[step_of(nb.name)] += duration
        count[step_of(nb.name)] += 1
    return dict(per_step), dict(count)


def setting_durations(results: Path) -> dict:
    """{setting: {step: papermill seconds}} of the executed notebooks under ``results`` (06 under "all")."""
    out: dict = defaultdict(dict)
    for nb in Path(results).rglob("0*.ipynb"):
        if nb.name.endswith((".tmp.ipynb", ".failed.ipynb")):
            continue
        duration = json.loads(nb.read_text())["metadata"].get("papermill", {}).get("duration") or 0.0
        setting = "all" if nb.parent == Path(results) else nb.parent.name
        out[setting][step_of(nb.name)] = duration
    return dict(out)


def histogram_floor(arrays_path: Path, config: dict, repeats: int = 5) -> tuple[float, int]:
    """(CPU seconds, chains) of the floor named in the module docstring for one setting: one ``em_step`` over
    n_folds x (check replicates + 1 + radius replicates) x EM restarts chains of the setting's M + 1 cells,
    the fastest of ``repeats`` passes."""
    import numpy as np

    from vrr.calibration.gain_radius import RADIUS_REPLICATES
    from vrr.calibration.mixture import em_step
    from vrr.data.contract import load_setting

    setting = load_setting(arrays_path)
    est = config.get("estimator", {})
    chains = int(config.get("n_folds", 5)) * (int(est.get("check_replicates", 200)) + 1 + RADIUS_REPLICATES) \
        * int(est.get("em_restarts", 10))
    M = setting.M
    hist = np.bincount(np.asarray(setting.S[:, 0], dtype=np.int64), minlength=M + 1).astype(float)
    h = np.broadcast_to(hist, (chains, M + 1))
    rng = np.random.default_rng(0)
    w, p1, p0 = (rng.uniform(0.05, 0.95, chains) for _ in range(3))
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        em_step(h, h.sum(axis=-1), M, w, p1, p0)
        best = min(best, time.process_time() - c0)
    return best, chains


def exec_notebook(notebook: str, params: dict, profiler: cProfile.Profile | None) -> None:
    """The notebook's code cells in a fresh namespace: the ``parameters`` cell, then the injected
    parameters (as papermill injects them), then the rest; figures are closed after each notebook."""
    cells = json.loads((REPO / notebook).read_text())["cells"]
    namespace: dict = {"__name__": "__main__"}
    injected = False
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        code = compile("".join(cell["source"]), f"{notebook}", "exec")
        if profiler is not None:
            profiler.enable()
        try:
            exec(code, namespace)
        finally:
            if profiler is not None:
                profiler.disable()
        if not injected and "parameters" in cell.get("metadata", {}).get("tags", []):
            namespace.update(params)
            injected = True
    if not injected:
        raise SystemExit(f"{notebook}: no cell tagged 'parameters'")
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def run_plain(args, profile: bool = False) -> dict:
    import io
    import contextlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    os.chdir(REPO)  # papermill runs the kernels in the repository root too
    from vrr.calibration._memo import clear_all

    clear_all()     # each pass computes every fit (the kernels of a chain start empty too)
    wall, cpu = defaultdict(float), defaultdict(float)
    per_setting: dict = defaultdict(dict)   # {setting: {step: CPU seconds}}
    floors: dict = {}
    # CPU time, not wall time: the figures stay meaningful on a loaded machine
    profiles = {s: cProfile.Profile(time.process_time) for s in STEPS} if profile else {}
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as tmp:
        results = Path(tmp) / "results"
        commands = notebook_commands(results, args)
        for notebook, _output, params in commands:
            step = step_of(notebook)
            t0, c0 = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):
                exec_notebook(notebook, params, profiles.get(step))
            wall[step] += time.perf_counter() - t0
            cpu[step] += time.process_time() - c0
            name = params.get("setting", "all") if step != "06" else "all"
            per_setting[name][step] = time.process_time() - c0
            if step == "05" and not profile:
                floors[name] = step_floor(results, name, args.data)
    return {"wall": dict(wall), "cpu": dict(cpu), "n": len(commands), "profiles": profiles,
            "per_setting": dict(per_setting), "floors": floors}


def step_floor(results: Path, setting: str, data: str = "data"):
    """The floor of the module docstring for one setting whose 04 has run under ``results`` (None without it)."""
    from vrr.chain import setting_paths
    from vrr.policies.replay import load_replay
    from vrr.settings import load_config

    paths = setting_paths(load_config(setting), data, results)
    if not paths.replay.exists():
        return None
    return histogram_floor(paths.arrays, load_replay(paths.replay)["config"])


def print_per_setting(chain, plain) -> None:
    """Each setting's steps (papermill seconds of the chain and CPU seconds of the plain loop) and 05's ratio to its
    floor."""
    names = sorted(set(plain["per_setting"]) | set((chain or {}).get("per_setting", {})), key=lambda n: (n == "all", n))
    print(f"\n{'setting':<34}" + "".join(f"{s:>13}" for s in STEPS) + f"{'05 floor ms':>13}{'05 / floor':>12}")
    print(f"{'':<34}" + "".join(f"{'chain/plain':>13}" for _ in STEPS))
    for name in names:
        pm = (chain or {}).get("per_setting", {}).get(name, {})
        pl = plain["per_setting"].get(name, {})
        cells = "".join(f"{(f'{pm[s]:.1f}' if s in pm else '-') + '/' + (f'{pl[s]:.1f}' if s in pl else '-'):>13}"
                        for s in STEPS)
        floor = plain["floors"].get(name)
        if floor and "05" in pl:
            tail = f"{1e3 * floor[0]:13.2f}{pl['05'] / floor[0]:12.0f}"
        else:
            tail = f"{'-':>13}{'-':>12}"
        print(f"{name:<34}{cells}{tail}")
    floors = [f for f in plain["floors"].values() if f]
    if floors:
        print(f"floor: one em_step over n_folds x (check replicates + 1 + radius replicates) x EM restarts chains "
              f"({min(c for _, c in floors)}-{max(c for _, c in floors)} chains) of the setting's M + 1 count cells")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return " ".join(line.partition(":")[2].split())
    return "unknown CPU"


def write_record(chain: dict, load_start: float) -> Path:
    """docs/runtime/<machine kind>.json: the chain's wall and CPU seconds, per step, the slowest 05 (the README's
    runtime table, ``scripts/readme_tables.py``)."""
    from datetime import date

    from vrr.common.atomic import atomic_write

    fives = {s: steps["05"] for s, steps in chain["per_setting"].items() if "05" in steps}
    slowest = max(fives, key=fives.get)
    record = {"machine": cpu_kind(), "cpu_model": cpu_model(), "cores": os.cpu_count(), "commit": commit(),
              "date": date.today().isoformat(), "load_start": round(load_start, 2),
              "load_end": round(os.getloadavg()[0], 2), "settings": len(fives),
              "wall_s": round(chain["wall"], 1), "cpu_s": round(chain["cpu"], 1),
              "steps": {s: round(chain["per_step"].get(s, 0.0), 1) for s in STEPS},
              "slowest_05": {"setting": slowest, "seconds": round(fives[slowest], 2)},
              "command": "python scripts/bench_chain.py --record --chain-only"}
    slug = "".join(c if c.isalnum() else "-" for c in cpu_kind().lower()).strip("-")
    path = REPO / "docs" / "runtime" / f"{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: fh.write(json.dumps(record, indent=1) + "\n"))
    print(f"wrote {path.relative_to(REPO)}")
    return path


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "vrr", "notebooks", "Makefile"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    return head + (" (+ uncommitted changes in vrr/, notebooks/ or the Makefile)" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="make -j (default 2)")
    ap.add_argument("--data", default="data", help="DATA= for make (default data)")
    ap.add_argument("--settings", default=None, help="SETTINGS= for make (default: the Makefile's)")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="top N functions per step (plain loop)")
    ap.add_argument("--skip-chain", action="store_true", help="only the plain loop")
    ap.add_argument("--results", metavar="DIR", help="run the chain into this (new or empty) results root and "
                    "keep it, e.g. to compare its files with another build (default: a temporary root)")
    ap.add_argument("--durations", metavar="RESULTS", help="only print the papermill seconds per step of an "
                    "existing results root (e.g. one built by make reproduce) and exit")
    ap.add_argument("--record", action="store_true", help="write the chain's figures to docs/runtime/<kind>.json")
    ap.add_argument("--chain-only", action="store_true", help="skip the plain loop")
    args = ap.parse_args()
    if args.record and (args.skip_chain or args.settings is not None or args.data != "data" or args.jobs != 2):
        raise SystemExit("--record measures the default chain: make -j2 reproduce of every setting")
    if args.durations:
        per_step, count = papermill_durations(Path(args.durations))
        for s in STEPS:
            print(f"{s}  {count.get(s, 0):3d} notebooks  {per_step.get(s, 0.0):7.1f} s")
        print(f"sum {sum(count.values()):3d} notebooks  {sum(per_step.values()):7.1f} s")
        print_per_setting({"per_setting": setting_durations(Path(args.durations))},
                          {"per_setting": {}, "floors": {}})
        return

    load_start = os.getloadavg()[0]
    print(f"machine: {cpu_kind()}, {os.cpu_count()} cores; commit {commit()}; load average {load_start:.2f} at start")
    chain = None if args.skip_chain else run_chain(args)
    if args.record:
        write_record(chain, load_start)
    if args.chain_only:
        print(f"make -j{args.jobs} reproduce: {chain['wall']:.1f} s wall, {chain['cpu']:.1f} s CPU")
        print_per_setting(chain, {"per_setting": {}, "floors": {}})
        return
    plain = run_plain(args)
    profiled = run_plain(args, profile=True) if args.profile else None
    print(f"\n{'step':<6}{'notebooks':>10}{'papermill s':>13}{'plain wall s':>14}{'plain CPU s':>13}")
    for s in STEPS:
        pm = f"{chain['per_step'].get(s, 0.0):13.1f}" if chain else f"{'-':>13}"
        n = chain["count"].get(s, 0) if chain else "-"
        print(f"{s:<6}{n:>10}{pm}{plain['wall'].get(s, 0.0):14.1f}{plain['cpu'].get(s, 0.0):13.1f}")
    plain_wall, plain_cpu = sum(plain["wall"].values()), sum(plain["cpu"].values())
    if chain:
        print(f"{'sum':<6}{sum(chain['count'].values()):>10}{sum(chain['per_step'].values()):13.1f}"
              f"{plain_wall:14.1f}{plain_cpu:13.1f}")
        print(f"\nmake -j{args.jobs} reproduce: {chain['wall']:.1f} s wall, {chain['cpu']:.1f} s CPU "
              f"({sum(chain['count'].values())} notebooks)")
    print(f"plain loop, one process: {plain_wall:.1f} s wall, {plain_cpu:.1f} s CPU ({plain['n']} notebooks' code)")
    if chain:
        print(f"ratio make / plain loop: {chain['wall'] / plain_wall:.2f}x wall, {chain['cpu'] / plain_cpu:.2f}x CPU")
    print_per_setting(chain, plain)
    for s, prof in (profiled or {"profiles": {}})["profiles"].items():
        print(f"\n--- step {s}: top {args.profile} functions by cumulative CPU time (a second, profiled pass of "
              f"the plain loop: {profiled['cpu'].get(s, 0.0):.1f} s CPU with the profiler's overhead)")
        stream = __import__("io").StringIO()
        stats = pstats.Stats(prof, stream=stream)
        stats.sort_stats("cumulative").print_stats(args.profile + 12)
        lines = [ln for ln in stream.getvalue().splitlines() if ln.strip()]
        head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        rows = [ln for ln in lines[head + 1:] if ".ipynb:" not in ln and "{built-in method builtins.exec}" not in ln
                and "bench_chain.py" not in ln]
        print(lines[head])
        print("\n".join(rows[:args.profile]))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
