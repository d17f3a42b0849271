"""Relabel committed real windows with the current label path and report every cell that changed.

    python scripts/relabel_report.py data/real/mbpp_cpu_favorable [...] [--json out.json]

For each run folder: the labels in its ``arrays.npz`` (or ``arrays.partial.npz``) before, the run is
relabeled from its stored records (``vrr.label.labeling.relabel``: no engine), and each changed cell
(instance, round; probe plan) is listed with the current checker's reason. Problems are named by
dataset, split and index only.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrr.label.labeling import relabel  # noqa: E402
from vrr.loop import store  # noqa: E402
from vrr.loop.config import from_stored  # noqa: E402
from vrr.loop.tasks import get_task  # noqa: E402


def _arrays(run: Path) -> Path | None:
    for name in ("arrays.npz", "arrays.partial.npz"):
        if (run / name).exists():
            return run / name
    return None


def _labels(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    with np.load(path, allow_pickle=False) as z:
        return z["y"].copy(), (z["probe_y"].copy() if "probe_y" in z.files else None)


def _reason(task, record_round: dict, problem) -> str:
    if hasattr(task, "stored_answer"):  # the answer its label reads
        answer = task.stored_answer(record_round)
    else:
        answer = record_round["answer"] if "answer" in record_round else task.extract_answer(record_round.get("plan"))
    if task.name == "mbpp":
        res = task.check(answer, problem)
        if res.valid and isinstance(answer, str) and "numpy" in answer:
            return "valid (imports numpy, an allowed import)"
        return res.reason or "valid"
    return f"extracted answer {answer!r}"


def _kind(reason: str) -> str:
    if "PYTHONHASHSEED" in reason:
        return "fails under another hash seed"
    if reason.startswith("timeout"):
        return "timeout"
    if "record does not match" in reason or "record has calls" in reason:
        return "the code's calls differ from the tests'"
    if reason.startswith("valid"):
        return "now valid" + reason[len("valid"):]
    return reason.split(":")[0] if ":" in reason else reason


def report(run: Path) -> dict:
    before_path = _arrays(run)
    if before_path is None:
        return {"run": str(run), "status": "no arrays"}
    y0, p0 = _labels(before_path)
    status = relabel(run)
    after_path = _arrays(run)
    y1, p1 = _labels(after_path)
    cfg = from_stored(store.read_stored_config(store.RunPaths(run.parent, run.name)), str(run / "config.json"))
    task = get_task(cfg.dataset)
    traj = store.read_jsonl_gz(run / "trajectories.jsonl.gz") if (run / "trajectories.jsonl.gz").exists() and \
        status == "complete" else store.unique_by_index(store.read_part(run / "trajectories.part.jsonl", repair=False))
    traj = sorted(traj, key=lambda r: r["index"])[: y1.shape[0]]
    cells = []
    if y0.shape == y1.shape:
        for i, k in zip(*np.nonzero(y0 != y1)):
            rec = traj[int(i)]
            rd = rec["rounds"][int(k)]
            why = _reason(task, rd, task.problem(rec["split"], rec["index"]))
            cells.append({"split": rec["split"], "index": int(rec["index"]), "round": int(k),
                          "before": int(y0[i, k]), "after": int(y1[i, k]), "reason": why[:300]})
    probe_changed = int((p0 != p1).sum()) if p0 is not None and p1 is not None and p0.shape == p1.shape else None
    return {"run": run.name, "status": status, "cells": int(y1.size), "changed": len(cells),
            "valid_to_invalid": sum(c["before"] > c["after"] for c in cells),
            "invalid_to_valid": sum(c["before"] < c["after"] for c in cells),
            "by_kind": dict(Counter(_kind(c["reason"]) for c in cells)), "probe_plans_changed": probe_changed,
            "validity_by_round_before": [round(float(v), 3) for v in y0.mean(axis=0)],
            "validity_by_round_after": [round(float(v), 3) for v in y1.mean(axis=0)], "changed_cells": cells}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", help="write the full report (every changed cell) here")
    a = ap.parse_args(argv)
    out = []
    for run in a.runs:
        r = report(Path(run))
        out.append(r)
        print(f"{r['run']}: {r.get('status')}, {r.get('changed')} of {r.get('cells')} cells changed "
              f"(valid->invalid {r.get('valid_to_invalid')}, invalid->valid {r.get('invalid_to_valid')}), "
              f"probe plans changed {r.get('probe_plans_changed')}, by kind {r.get('by_kind')}", flush=True)
        print(f"  validity by round {r.get('validity_by_round_before')} -> {r.get('validity_by_round_after')}",
              flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
