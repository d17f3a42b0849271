"""Text trajectories -> labeled compact arrays of the data contract (:mod:`vrr.data`).

* ``S[i, k]``  = number of judge outputs on plan p_k that parse as ACCEPT (``prompts.vote``;
  unparsable outputs count as rejections), re-parsed from the stored judge text so a parser
  change relabels without regenerating;
* ``y[i, k]``  = GSM8K exact match of p_k's extracted final answer against the ORIGINAL
  problem's reference answer (App. B: labels always use the unperturbed statement);
* probe ``probe_S`` / ``probe_y`` likewise for the calibration probe (16 votes per plan).

CLI: ``python -m vrr.labeling data/real/<setting>`` rebuilds arrays from the part/final files.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import prompts
from .tasks import gsm8k


def _gold(split: str, index: int) -> str:
    return gsm8k.get_problem(split, index).gold


def _label_round(rd: dict, gold: str) -> int:
    """Exact match of the plan's final answer; ``answer`` was extracted before the stored text
    was redacted (vrr.benchmark_text), older records fall back to the text itself."""
    if "answer" in rd:
        return int(gsm8k.is_correct(rd["answer"], gold))
    return gsm8k.label(rd["plan"], gold)


def label_records(records: Sequence[dict], judge_style: str, M: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(S [N,K+1], y [N,K+1], stats) from trajectory records (all with the same K)."""
    if not records:
        raise ValueError("no trajectory records")
    K1 = len(records[0]["rounds"])
    N = len(records)
    S = np.zeros((N, K1), dtype=np.int64)
    y = np.zeros((N, K1), dtype=np.int8)
    unparsable = 0
    truncated = 0
    for i, r in enumerate(records):
        if len(r["rounds"]) != K1:
            raise ValueError(f"instance {r['index']} has {len(r['rounds'])} rounds, expected {K1}")
        gold = _gold(r["split"], r["index"])
        for k, rd in enumerate(r["rounds"]):
            outs = rd["judge"]
            if len(outs) != M:
                raise ValueError(f"instance {r['index']} round {k}: {len(outs)} votes, expected {M}")
            parsed = [prompts.parse_verdict(t, judge_style) for t in outs]
            unparsable += sum(p is None for p in parsed)
            S[i, k] = sum(p == 1 for p in parsed)
            y[i, k] = _label_round(rd, gold)
            truncated += int(rd.get("finish") == "length")
    stats = {"judge_unparsable_frac": unparsable / float(N * K1 * M),
             "plans_truncated_frac": truncated / float(N * K1)}
    return S, y, stats


def label_probe(records: Sequence[dict], judge_style: str) -> tuple[np.ndarray, np.ndarray, int]:
    if not records:
        raise ValueError("no probe records")
    pm = len(records[0]["votes"] if "votes" in records[0] else records[0]["judge"])
    S = np.array([sum(prompts.parse_verdict(t, judge_style) == 1 for t in r["judge"]) for r in records],
                 dtype=np.int64)
    y = np.array([_label_round(r, _gold(r["split"], r["index"])) for r in records], dtype=np.int8)
    return S, y, pm


def youden_j(S: np.ndarray, y: np.ndarray, M: int) -> dict:
    """Accept rates on valid / invalid plans and J = acc(valid) - acc(invalid) (paper Eq. 2)."""
    S, y = np.asarray(S, float), np.asarray(y)
    out = {"n_valid": int((y == 1).sum()), "n_invalid": int((y == 0).sum())}
    acc1 = float(S[y == 1].mean() / M) if out["n_valid"] else float("nan")
    acc0 = float(S[y == 0].mean() / M) if out["n_invalid"] else float("nan")
    out.update(accept_valid=acc1, accept_invalid=acc0, J=acc1 - acc0)
    return out


def _registry_label(setting: str) -> str:
    """The display label of ``settings/<setting>.yaml`` (tables, figures), else the name."""
    try:
        from .settings import load_config

        return load_config(setting)["label"]
    except (ImportError, FileNotFoundError, KeyError, ValueError):
        return setting


def build_setting(cfg, traj: Sequence[dict], probe: Sequence[dict] | None, run_meta: dict | None = None):
    """Build a :class:`vrr.data.Setting` from records and the run's :class:`GenConfig`."""
    from .data import Setting

    S, y, stats = label_records(traj, cfg.judge_style, cfg.M)
    meta: dict[str, Any] = {
        "setting": cfg.setting, "label": _registry_label(cfg.setting), "task": "gsm8k", "dataset": "gsm8k", "split": cfg.split,
        "indices": [int(r["index"]) for r in traj],
        "M": cfg.M, "K_max": cfg.K_max, "config": cfg.to_json(),
        "temperatures": {"generate": cfg.gen_temperature, "judge": cfg.judge_temperature,
                         "repair": cfg.repair_temperature},
        "seeds": {"engine": cfg.seed, "perturbation": cfg.seed},
        "models": {"generator": cfg.model, "judge": cfg.model, "repairer": cfg.model},
        "label_rule": "gsm8k exact match (numeric) vs original problem",
        "label_stats": stats,
        "validity_by_round": [float(v) for v in y.mean(axis=0)],
        "accept_rate_by_round": [float(v) for v in (S.mean(axis=0) / cfg.M)],
    }
    if run_meta:
        eng = run_meta.get("engine", {})
        meta["engine"] = {k: eng.get(k) for k in ("backend", "model", "engine_config", "versions")}
        mi = eng.get("model_info") or {}
        meta["model_sha256"] = mi.get("sha256")
        meta["model_source"] = {k: mi.get(k) for k in ("hf_id", "quant", "packages", "source")}
        meta["package_versions"] = eng.get("versions")
        meta["generation_seconds"] = run_meta.get("total_seconds")
    kw = {}
    if probe:
        pS, py, pM = label_probe(probe, cfg.judge_style)
        kw = dict(probe_S=pS, probe_M=pM, probe_y=py)
        meta["probe"] = {"split": probe[0]["split"], "indices": [int(r["index"]) for r in probe],
                         "votes": pM, **youden_j(pS, py, pM)}
    return Setting(S=S, y=y, M=cfg.M, meta=meta, **kw)


def main(argv=None) -> int:
    from .generation import GenConfig, Paths, finalize_setting

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m vrr.labeling data/real/<setting> [...]", file=sys.stderr)
        return 2
    for d in argv:
        d = Path(d)
        cfg = GenConfig(**json.loads((d / "config.json").read_text()))
        print(d, finalize_setting(cfg, Paths(d.parent, d.name), out_root=d.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
