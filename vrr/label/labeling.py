"""Text trajectories -> labeled compact arrays of the data contract (:mod:`vrr.data`), step 02.

* ``S[i, k]``  = number of verifier outputs on plan p_k that parse as ACCEPT (the verifier
  plug-in's ``parse``; unparsable outputs count as rejections), re-parsed from the stored text so
  a parser change relabels without regenerating;
* ``y[i, k]``  = the task's validity rule on p_k's extracted final answer against the ORIGINAL
  problem (App. B: labels always use the unperturbed statement; GSM8K: exact numeric match);
* probe ``probe_S`` / ``probe_y`` likewise for the calibration probe (16 votes per plan).

:func:`finalize_setting` freezes a run's window: it writes ``trajectories.jsonl.gz`` /
``probe.jsonl.gz`` and ``arrays.npz`` (``arrays.partial.npz`` while the window is incomplete).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..common.jsonio import write_json
from ..core.model import class_accept_rates
from ..data.contract import Setting, save_setting
from ..loop import store
from ..loop.config import RunConfig
from ..loop.store import stored_window  # noqa: F401  (the chain and status read a window through here)
from ..loop.tasks import Task, get_task
from ..loop.verifiers import make_verifier
from ..settings import SettingConfigError, load_config

LABEL_ENVIRONMENT = "label_environment.json"  # beside the arrays: the machine's sandbox (tool, package versions)


def round_verdicts(verifier, task: Task, round_record: dict, texts: Sequence[str]) -> list[int | None]:
    """The stored votes of one plan: recomputed from their structured results where the verifier can
    (``round_verdicts``: answer-comparing programs), else the verdict the labeler stored (``parse``).
    A vote whose text lost problem text to redaction after it was cast (``elided_votes``) keeps the live
    verdict stored beside it (``votes``): the elided text is not what was voted on."""
    if hasattr(verifier, "round_verdicts"):
        out = list(verifier.round_verdicts(texts, task, round_record))
    else:
        out = [verifier.parse(t) for t in texts]
    elided = round_record.get("elided_votes") or []
    if elided:
        live = round_record.get("votes")
        if (not isinstance(elided, list) or not isinstance(live, list) or len(live) != len(out)
                or any(isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < len(out) for m in elided)
                or any(v not in (0, 1) for v in live)):
            raise ValueError(f"round record: elided_votes {elided!r} do not index its {len(out)} live votes {live!r}")
        for m in elided:
            out[m] = int(live[m])
    return out


def stored_votes(records: Sequence[dict], cfg: RunConfig) -> np.ndarray:
    """Each round's votes in the order they were cast, [N, K+1, M] of 0/1, read as the label path reads them
    (:func:`round_verdicts`), so they add up to the labeled arrays' S; an unparsable vote is a rejection."""
    task = get_task(cfg.dataset)
    verifier = make_verifier(cfg.verifier, cfg.judge_style, cfg.judge_tokens(), cfg.judge_temperature)
    return np.array([[[int(v == 1) for v in round_verdicts(verifier, task, rd, rd["judge"])] for rd in r["rounds"]]
                     for r in records], dtype=np.int8)


def label_records(records: Sequence[dict], task: Task, verifier, M: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(S [N,K+1], y [N,K+1], stats) from trajectory records (all with the same K)."""
    if not records:
        raise ValueError("no trajectory records")
    K1 = len(records[0]["rounds"])
    N = len(records)
    S = np.zeros((N, K1), dtype=np.int64)
    y = np.zeros((N, K1), dtype=np.int8)
    unparsable = truncated = no_answer = 0
    to_label: list[tuple[dict, object]] = []
    for i, r in enumerate(records):
        if len(r["rounds"]) != K1:
            raise ValueError(f"instance {r['index']} has {len(r['rounds'])} rounds, expected {K1}")
        problem = task.problem(r["split"], r["index"])
        for k, rd in enumerate(r["rounds"]):
            outs = rd["judge"]
            if len(outs) != M:
                raise ValueError(f"instance {r['index']} round {k}: {len(outs)} votes, expected {M}")
            parsed = round_verdicts(verifier, task, rd, outs)
            unparsable += sum(p is None for p in parsed)
            S[i, k] = sum(p == 1 for p in parsed)
            to_label.append((rd, problem))
            truncated += int(rd.get("finish") == "length")
            no_answer += int("answer" in rd and rd["answer"] is None)  # labeled invalid: no final answer
    y[:] = np.asarray(task.label_rounds(to_label), dtype=np.int8).reshape(N, K1)
    stats = {"judge_unparsable_frac": unparsable / float(N * K1 * M),
             "plans_truncated_frac": truncated / float(N * K1),
             "plans_without_answer_frac": no_answer / float(N * K1)}
    return S, y, stats


def label_probe(records: Sequence[dict], task: Task, verifier) -> tuple[np.ndarray, np.ndarray, int]:
    """(probe_S, probe_y, votes per plan) from probe records."""
    if not records:
        raise ValueError("no probe records")
    pm = len(records[0]["votes"] if "votes" in records[0] else records[0]["judge"])
    S = np.array([sum(v == 1 for v in round_verdicts(verifier, task, r, r["judge"])) for r in records], dtype=np.int64)
    y = np.array(task.label_rounds([(r, task.problem(r["split"], r["index"])) for r in records]), dtype=np.int8)
    return S, y, pm


def _registry_label(setting: str) -> str:
    """The display label of ``settings/<setting>.yaml`` (tables, figures), else the name."""
    try:
        return load_config(setting)["label"]
    except (FileNotFoundError, SettingConfigError):
        return setting


def build_setting(cfg: RunConfig, traj: Sequence[dict], probe: Sequence[dict] | None,
                  run_meta: dict | None = None, stored_config: dict | None = None, progress: bool = True) -> Setting:
    """A :class:`vrr.data.Setting` from records and the run's config.

    ``meta["config"]`` is the run's ``config.json`` as stored (``stored_config``), so relabeling a
    frozen run reproduces its arrays byte for byte. ``progress``: the labeler's progress bars.
    """
    task = get_task(cfg.dataset)
    task.show_progress = progress
    verifier = make_verifier(cfg.verifier, cfg.judge_style, cfg.judge_tokens(), cfg.judge_temperature)
    S, y, stats = label_records(traj, task, verifier, cfg.M)
    meta: dict[str, Any] = {
        "setting": cfg.setting, "label": _registry_label(cfg.setting), "task": cfg.dataset, "dataset": cfg.dataset,
        "split": cfg.split, "indices": [int(r["index"]) for r in traj],
        "M": cfg.M, "K_max": cfg.K_max, "config": stored_config if stored_config is not None else cfg.to_json(),
        "temperatures": {"generate": cfg.gen_temperature, "judge": cfg.judge_temperature,
                         "repair": cfg.repair_temperature},
        "seeds": {"engine": cfg.seed, "perturbation": cfg.seed},
        "models": {"generator": cfg.model, "judge": cfg.judge_model, "repairer": cfg.repairer_model},
        "label_rule": task.label_rule,
        "label_stats": stats,
        "validity_by_round": [float(v) for v in y.mean(axis=0)],
        "accept_rate_by_round": [float(v) for v in (S.mean(axis=0) / cfg.M)],
    }
    execution = task.execution_record()
    if execution is not None:
        meta["execution"] = execution
    if run_meta:
        eng = run_meta.get("engine", {})
        meta["engine"] = {k: eng.get(k) for k in ("backend", "model", "engine_config", "versions")}
        mi = eng.get("model_info") or {}
        meta["model_sha256"] = mi.get("sha256")
        meta["model_source"] = {k: mi.get(k) for k in ("hf_id", "quant", "packages", "source")}
        meta["package_versions"] = eng.get("versions")
        meta["generation_seconds"] = run_meta.get("total_seconds")
        if any(sess.get("machine") for sess in run_meta.get("sessions", [])):  # "engine" is the last session's
            meta["machines"] = store.session_machines(run_meta)
    kw = {}
    if probe:
        pS, py, pM = label_probe(probe, task, verifier)
        kw = dict(probe_S=pS, probe_M=pM, probe_y=py)
        meta["probe"] = {"split": probe[0]["split"], "indices": [int(r["index"]) for r in probe],
                         "votes": pM, **class_accept_rates(pS, py, pM)}
    return Setting(S=S, y=y, M=cfg.M, meta=meta, **kw)


def finalize_setting(paths: store.RunPaths, cfg: RunConfig | None = None,
                     out_root: Path | None = None, progress: bool = True) -> str:
    """Freeze the window of a run and (re)build its labeled arrays.

    ``cfg`` (the requested config) is checked against the stored ``config.json`` and may change
    the window lengths; without it the stored config is used as is. The window is
    ``start .. start + n`` (and the probe's ``probe_n``): records beyond it stay in the part files
    but are left out of the outputs, so a longer run can be frozen at a prefix. Returns
    "complete" (arrays.npz written), "partial" (arrays.partial.npz; an existing arrays.npz of an
    earlier, shorter frozen window is left in place) or "empty". ``progress``: the labeler's progress bars.
    """
    window = store.read_window(paths, cfg, out_root)
    cfg, traj, probe = window.cfg, window.traj, window.probe
    if window.traj_complete:
        store.write_jsonl_gz(paths.traj, traj)
    if window.probe_complete and probe and not cfg.probe_from:  # a shared probe is stored once, by its owner
        store.write_jsonl_gz(paths.probe, probe)
    if not traj:
        return "empty"
    setting = build_setting(cfg, traj, probe or None, run_meta=window.run_meta, stored_config=window.stored_config,
                            progress=progress)
    environment = get_task(cfg.dataset).execution_environment()
    if environment is not None:  # the machine the labels ran on; the arrays' meta holds only the rule
        write_json(paths.dir / LABEL_ENVIRONMENT, environment, indent=1, sort_keys=True, trailing_newline=True)
    if window.traj_complete and (window.probe_complete or not (window.probe_want or window.probe_missing)):
        save_setting(paths.arrays, setting)
        paths.arrays_partial.unlink(missing_ok=True)
        return "complete"
    setting.meta["partial"] = {"instances_done": len(traj), "instances_total": len(window.traj_want),
                               "probe_done": len(probe), "probe_total": len(window.probe_want)}
    if window.probe_missing:
        setting.meta["partial"]["probe_missing"] = window.probe_missing
    save_setting(paths.arrays_partial, setting)
    return "partial"


def relabel(run_dir: str | Path) -> str:
    """Rebuild a run's arrays from its stored records and config (no engine); a sharded run's ``run_meta.json``
    is rewritten with every shard's sessions (``store.merge_run_meta``), as finalizing a generation does."""
    run_dir = Path(run_dir)
    paths = store.RunPaths(run_dir.parent, run_dir.name)
    status = finalize_setting(paths)
    store.merge_run_meta(paths)
    return status
