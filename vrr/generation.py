"""Frozen-trajectory generation (paper Sec. 3.2 "calibration", App. B "Full Experimental Setup").

Protocol per instance (``repair_mode="repair"``): initial plan p_0 from the generator; for
k = 0..K_max: M judge votes on p_k (one ``chat`` call with ``n=M`` so the votes share one
prefill); for k < K_max an UNCONDITIONAL repair p_k -> p_{k+1} given the plan and the judges'
feedback (no verifier gating, so first-round transitions are free of selection bias).
``repair_mode="resample"`` is the independent-resampling control of the non-stationarity
diagnostic: p_{k+1} is a fresh generator sample (same budget / perturbation schedule).

Settings (App. B): favorable; prompt-mismatch (PM) stress (the repairer's copy of the problem is
perturbed, deterministically per (seed, index); judge and labels use the original; repair
temperature 1.0, else 0.7); non-stationary diagnostic (256-token initial budget, perturbation
for the repairs producing rounds 3..6) and its resampling control. See ``PRESETS``.

Calibration probe: ``probe_votes`` (16) judge votes on one generator plan for each problem of a
window DISJOINT from the evaluation window (GSM8K train split by default).

Storage (``data/real/<setting>/``), never the problem text (problems are referred to by
dataset+split+index; perturbations by their spec):

* ``config.json``                the run configuration (checked on resume),
* ``trajectories.part.jsonl``    one completed-instance record per line, appended + fsynced
                                 after each batch; on restart completed indices are skipped and a
                                 torn last line is dropped -> nothing lost or duplicated,
* ``probe.part.jsonl``           same for probe records,
* ``run_meta.json``              engine/model/sha256/package versions, seeds, per-session timings,
* ``trajectories.jsonl.gz``, ``probe.jsonl.gz``  final, written via tmp name + ``os.replace``,
* ``arrays.npz``                 labeled arrays of the data contract (complete runs only), else
                                 ``arrays.partial.npz`` (see :mod:`vrr.labeling`).

CLI: ``python -m vrr.generation --preset gsm8k_cpu_favorable [--limit N] [--out-root data/real]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from . import prompts
from .atomic import atomic_write
from .benchmark_text import redact_record
from .tasks import gsm8k

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT_ROOT = REPO_ROOT / "data" / "real"
MAX_PLAN_CHARS = 4000  # plans longer than this are clipped inside judge/repair prompts


class ChatEngine(Protocol):
    def chat(self, conversations: Sequence[Sequence[dict]], temperature: float, max_tokens: int,
             n: int = 1) -> list[list[str]]: ...


@dataclass
class GenConfig:
    setting: str
    model: str = "qwen2.5-coder-0.5b"
    backend: str = "auto"
    dataset: str = "gsm8k"
    split: str = "test"
    start: int = 0
    n: int = 200
    K_max: int = 5
    M: int = 8
    judge_style: str = "verdict"
    judge_max_tokens: int | None = None  # None -> prompts.JUDGE_MAX_TOKENS[style]
    repair_style: str = "self-refine"
    repair_mode: str = "repair"  # "repair" | "resample"
    gen_temperature: float = 0.7
    judge_temperature: float = 0.7
    repair_temperature: float = 0.7
    gen_max_tokens: int = 512  # initial-plan budget (256 in the non-stationary diagnostic)
    repair_max_tokens: int = 512
    perturb: str = "none"  # "none" | "numeric" | "condition" | "auto"
    perturb_from_round: int = 1  # plans p_k with k >= this come from a perturbed repair prompt
    perturb_to_round: int | None = None  # inclusive; None -> K_max
    seed: int = 0
    batch_size: int = 20
    max_model_len: int = 4096
    probe_split: str | None = "train"
    probe_start: int = 0
    probe_n: int = 200
    probe_votes: int = 16
    probe_from: str | None = None  # reuse the probe of another setting (same model & judge)
    notes: str = ""

    def judge_tokens(self) -> int:
        return self.judge_max_tokens or prompts.JUDGE_MAX_TOKENS[self.judge_style]

    def perturbed_round(self, k: int) -> bool:
        if self.perturb == "none":
            return False
        hi = self.K_max if self.perturb_to_round is None else self.perturb_to_round
        return self.perturb_from_round <= k <= hi

    def validate(self) -> None:
        if self.dataset != "gsm8k":
            raise ValueError("only the gsm8k task is wired in this module")
        if self.judge_style not in prompts.JUDGE_STYLES:
            raise ValueError(f"judge_style must be in {prompts.JUDGE_STYLES}")
        if self.repair_style not in prompts.REPAIR_STYLES:
            raise ValueError(f"repair_style must be in {prompts.REPAIR_STYLES}")
        if self.repair_mode not in ("repair", "resample"):
            raise ValueError("repair_mode must be 'repair' or 'resample'")
        if self.probe_split == self.split and self.probe_n > 0 and not self.probe_from:
            a, b = range(self.start, self.start + self.n), range(self.probe_start, self.probe_start + self.probe_n)
            if set(a) & set(b):
                raise ValueError("the probe window must be disjoint from the evaluation window")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# Paper App. B settings, CPU edition (model and N chosen for CPU feasibility; see docs/engine.md).
PRESETS: dict[str, dict[str, Any]] = {
    "gsm8k_cpu_favorable": dict(),
    "gsm8k_cpu_pmstress": dict(perturb="auto", perturb_from_round=1, repair_temperature=1.0,
                               probe_from="gsm8k_cpu_favorable"),
    "gsm8k_cpu_nonstationary": dict(K_max=6, gen_max_tokens=256, perturb="auto", perturb_from_round=3,
                                    perturb_to_round=6, probe_from="gsm8k_cpu_favorable"),
    "gsm8k_cpu_nonstationary_resample": dict(K_max=6, gen_max_tokens=256, perturb="auto",
                                             perturb_from_round=3, perturb_to_round=6,
                                             repair_mode="resample", probe_from="gsm8k_cpu_favorable"),
}


def preset_config(name: str, **overrides) -> GenConfig:
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    kw = dict(PRESETS[name])
    kw.update({k: v for k, v in overrides.items() if v is not None})
    kw.setdefault("setting", name)
    return GenConfig(**kw)


# --------------------------------------------------------------------------- file helpers
def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda fh: fh.write(data), binary=True)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def read_part(path: Path, repair: bool = True) -> list[dict]:
    """Completed records of a part file. A torn trailing line (crash mid-write) is dropped and,
    with ``repair=True``, truncated away so later appends start on a clean line."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    recs, good_end, pos = [], 0, 0
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        if nl < 0:
            break  # no newline: torn
        line = raw[pos:nl]
        if line.strip():
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                break
        pos = nl + 1
        good_end = pos
    if repair and good_end < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good_end)
            f.flush()
            os.fsync(f.fileno())
    return recs


def append_records(path: Path, records: Iterable[dict]) -> None:
    data = b"".join((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode() for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_gz(path: Path, records: Iterable[dict]) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    atomic_write_bytes(path, gzip.compress(lines.encode(), mtime=0))


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def unique_by_index(records: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in records:
        key = (r.get("split"), r["index"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return sorted(out, key=lambda r: r["index"])


# --------------------------------------------------------------------------- protocol
def _redacted(record: dict) -> dict:
    """Records are stored without verbatim copies of the problem text (vrr.benchmark_text)."""
    problem = gsm8k.get_problem(record["split"], record["index"]).question
    return redact_record(record, problem, gsm8k.extract_answer)


def _clip(plan: str) -> str:
    return plan if len(plan) <= MAX_PLAN_CHARS else plan[:MAX_PLAN_CHARS] + "\n[...]"


def _finish(engine, j: int, default: str | None = None) -> list[str | None] | None:
    info = getattr(engine, "last_info", None) or {}
    fr = info.get("finish_reasons")
    if fr is None or j >= len(fr):
        return None
    return fr[j]


def run_batch(engine: ChatEngine, cfg: GenConfig, problems: Sequence[gsm8k.Problem],
              batch_id: int = 0) -> list[dict]:
    """Run the full frozen-trajectory protocol for a batch of problems; one record each.

    Batched across instances: for round k there is one ``chat`` call over all the batch's
    judge conversations (``n=M``) and one over all repair conversations (``n=1``).
    """
    t0 = time.time()
    B = len(problems)
    specs = [gsm8k.make_perturbation(p.question, cfg.seed, p.index, cfg.perturb)
             if cfg.perturb != "none" else None for p in problems]
    rounds: list[list[dict]] = [[] for _ in range(B)]
    tokens = {"prompt": 0, "generated": 0}

    def _acc():
        info = getattr(engine, "last_info", None) or {}
        tokens["prompt"] += int(info.get("prompt_tokens", 0))
        tokens["generated"] += int(info.get("generated_tokens", 0))

    outs = engine.chat([prompts.generator_messages(p.question) for p in problems],
                       temperature=cfg.gen_temperature, max_tokens=cfg.gen_max_tokens, n=1)
    _acc()
    for i in range(B):
        fr = _finish(engine, i)
        rounds[i].append({"k": 0, "source": "generate", "perturbed": False, "plan": outs[i][0],
                          "finish": fr[0] if fr else None})
    for k in range(cfg.K_max + 1):
        jconv = [prompts.judge_messages(p.question, _clip(rounds[i][k]["plan"]), cfg.judge_style)
                 for i, p in enumerate(problems)]
        jout = engine.chat(jconv, temperature=cfg.judge_temperature, max_tokens=cfg.judge_tokens(), n=cfg.M)
        _acc()
        for i in range(B):
            if len(jout[i]) != cfg.M:
                raise RuntimeError(f"engine returned {len(jout[i])} judge votes, expected {cfg.M}")
            rounds[i][k]["judge"] = jout[i]
            rounds[i][k]["votes"] = [prompts.vote(t, cfg.judge_style) for t in jout[i]]
        if k == cfg.K_max:
            break
        pert = cfg.perturbed_round(k + 1)
        convs = []
        for i, p in enumerate(problems):
            q = gsm8k.apply_perturbation(p.question, specs[i]) if pert else p.question
            if cfg.repair_mode == "resample":
                convs.append(prompts.generator_messages(q))
            else:
                fb = prompts.feedback_text(jout[i], cfg.judge_style)
                convs.append(prompts.repair_messages(q, _clip(rounds[i][k]["plan"]), fb, cfg.repair_style))
        rout = engine.chat(convs, temperature=cfg.repair_temperature, max_tokens=cfg.repair_max_tokens, n=1)
        _acc()
        for i in range(B):
            fr = _finish(engine, i)
            rounds[i].append({"k": k + 1, "source": cfg.repair_mode, "perturbed": bool(pert and specs[i]
                                                                                        and specs[i]["kind"] != "none"),
                              "plan": rout[i][0], "finish": fr[0] if fr else None})
    dt = time.time() - t0
    recs = []
    for i, p in enumerate(problems):
        recs.append({**p.ref, "setting": cfg.setting, "perturbation": specs[i], "rounds": rounds[i],
                     "batch": batch_id, "batch_size": B, "batch_seconds": round(dt, 2),
                     "batch_tokens": tokens, "finished_at": round(time.time(), 1)})
    return recs


def run_probe_batch(engine: ChatEngine, cfg: GenConfig, problems: Sequence[gsm8k.Problem],
                    batch_id: int = 0) -> list[dict]:
    """Calibration probe: one generator plan per problem, ``probe_votes`` judge votes on it."""
    t0 = time.time()
    outs = engine.chat([prompts.generator_messages(p.question) for p in problems],
                       temperature=cfg.gen_temperature, max_tokens=cfg.repair_max_tokens, n=1)
    plans = [o[0] for o in outs]
    jout = engine.chat([prompts.judge_messages(p.question, _clip(pl), cfg.judge_style)
                        for p, pl in zip(problems, plans)],
                       temperature=cfg.judge_temperature, max_tokens=cfg.judge_tokens(), n=cfg.probe_votes)
    dt = time.time() - t0
    return [{**p.ref, "setting": cfg.setting, "plan": pl, "judge": j,
             "votes": [prompts.vote(t, cfg.judge_style) for t in j], "batch": batch_id,
             "batch_seconds": round(dt, 2), "finished_at": round(time.time(), 1)}
            for p, pl, j in zip(problems, plans, jout)]


# --------------------------------------------------------------------------- driver
class Paths:
    def __init__(self, out_root: Path, setting: str):
        self.dir = Path(out_root) / setting
        self.config = self.dir / "config.json"
        self.traj_part = self.dir / "trajectories.part.jsonl"
        self.probe_part = self.dir / "probe.part.jsonl"
        self.traj = self.dir / "trajectories.jsonl.gz"
        self.probe = self.dir / "probe.jsonl.gz"
        self.meta = self.dir / "run_meta.json"
        self.arrays = self.dir / "arrays.npz"
        self.arrays_partial = self.dir / "arrays.partial.npz"


_RESUME_KEYS_IGNORED = {"batch_size", "backend", "notes", "max_model_len"}
# The window LENGTH may change between runs: every instance runs the same per-instance protocol
# whatever the window's length, so a run can be frozen at a prefix (``--n 100 --finalize-only``)
# and extended later (``--n 200``). config.json records the latest window.
_WINDOW_KEYS = {"n", "probe_n"}


def check_config(paths: Paths, cfg: GenConfig) -> None:
    """Write config.json on first run; on resume refuse a config that changes the protocol
    (anything but the batch size, backend, notes and the window lengths ``n``/``probe_n``)."""
    new = cfg.to_json()
    if paths.config.exists():
        old = json.loads(paths.config.read_text())
        ignored = _RESUME_KEYS_IGNORED | _WINDOW_KEYS
        diff = {k for k in set(old) | set(new) if k not in ignored and old.get(k) != new.get(k)}
        if diff:
            raise SystemExit(f"{paths.config} differs from the requested config in {sorted(diff)}; "
                             "use another --setting name or --out-root, or delete the directory")
        if any(old.get(k) != new.get(k) for k in _WINDOW_KEYS):
            atomic_write_json(paths.config, {**old, **{k: new[k] for k in _WINDOW_KEYS}})
    else:
        atomic_write_json(paths.config, new)


def _progress(total: int, initial: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit="inst", dynamic_ncols=True,
                    mininterval=5.0, file=sys.stderr)
    except ImportError:  # pragma: no cover
        class _P:
            def update(self, k):
                pass

            def close(self):
                pass

        return _P()


def _update_meta(paths: Paths, cfg: GenConfig, engine, session: dict) -> None:
    meta = json.loads(paths.meta.read_text()) if paths.meta.exists() else {"sessions": []}
    desc = engine.describe() if hasattr(engine, "describe") else {"engine": type(engine).__name__}
    meta["engine"] = desc
    meta["config"] = cfg.to_json()
    sessions = [s for s in meta.get("sessions", []) if s.get("id") != session["id"]]
    sessions.append(session)
    meta["sessions"] = sessions
    meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in sessions), 1)
    atomic_write_json(paths.meta, meta)


def generate(cfg: GenConfig, engine: ChatEngine | None = None, out_root: Path | str = DEFAULT_OUT_ROOT,
             limit: int | None = None, phases: Sequence[str] = ("probe", "traj"),
             finalize: bool = True, progress: bool = True) -> Paths:
    """Run (or resume) a setting. ``limit`` caps the number of NEW instances this call (for
    timed sessions); ``phases`` selects probe and/or trajectories. Returns the output paths."""
    cfg.validate()
    paths = Paths(Path(out_root), cfg.setting)
    paths.dir.mkdir(parents=True, exist_ok=True)
    check_config(paths, cfg)
    probs = gsm8k.load_gsm8k(cfg.split)
    window = probs[cfg.start:cfg.start + cfg.n]
    probe_window = []
    if "probe" in phases and cfg.probe_split and cfg.probe_n > 0 and not cfg.probe_from:
        pp = gsm8k.load_gsm8k(cfg.probe_split)
        probe_window = pp[cfg.probe_start:cfg.probe_start + cfg.probe_n]
    done_t = {r["index"] for r in read_part(paths.traj_part)}
    done_p = {r["index"] for r in read_part(paths.probe_part)}
    todo_p = [p for p in probe_window if p.index not in done_p]
    todo_t = [p for p in window if p.index not in done_t] if "traj" in phases else []
    if limit is not None:
        todo_p, todo_t = todo_p[:limit], todo_t[:max(0, limit - len(todo_p))]
    session = {"id": f"{int(time.time())}-{os.getpid()}", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "instances": 0, "probe_plans": 0, "seconds": 0.0}
    if todo_p or todo_t:
        if engine is None:
            from .engine import make_engine

            engine = make_engine(cfg.model, backend=cfg.backend, seed=cfg.seed, max_model_len=cfg.max_model_len)
            session["engine_load_seconds"] = round(getattr(engine, "load_seconds", 0.0), 1)
        t_start = time.time()
        bs = max(1, cfg.batch_size)
        if todo_p:
            bar = _progress(len(probe_window), len(done_p), f"{cfg.setting} probe") if progress else None
            for b in range(0, len(todo_p), bs):
                batch = todo_p[b:b + bs]
                recs = run_probe_batch(engine, cfg, batch, batch_id=len(done_p) // bs + b // bs)
                append_records(paths.probe_part, [_redacted(r) for r in recs])
                session["probe_plans"] += len(recs)
                session["seconds"] = round(time.time() - t_start, 1)
                _update_meta(paths, cfg, engine, session)
                if bar:
                    bar.update(len(recs))
            if bar:
                bar.close()
        if todo_t:
            bar = _progress(len(window), len(done_t), f"{cfg.setting} traj") if progress else None
            for b in range(0, len(todo_t), bs):
                batch = todo_t[b:b + bs]
                recs = run_batch(engine, cfg, batch, batch_id=len(done_t) // bs + b // bs)
                append_records(paths.traj_part, [_redacted(r) for r in recs])
                session["instances"] += len(recs)
                session["seconds"] = round(time.time() - t_start, 1)
                _update_meta(paths, cfg, engine, session)
                if bar:
                    bar.update(len(recs))
            if bar:
                bar.close()
        if hasattr(engine, "stats"):
            session["engine_stats"] = dict(engine.stats)
        session["seconds"] = round(time.time() - t_start, 1)
        _update_meta(paths, cfg, engine, session)
    if finalize:
        finalize_setting(cfg, paths, out_root=Path(out_root))
    return paths


def finalize_setting(cfg: GenConfig, paths: Paths, out_root: Path = DEFAULT_OUT_ROOT) -> str:
    """Compress finished part files and (re)build the labeled arrays.

    The window is ``cfg.start .. cfg.start + cfg.n`` (and the probe's ``probe_n``): records beyond
    it are kept in the part files but left out of the outputs, so a longer run can be frozen at a
    prefix. Returns "complete" (arrays.npz written), "partial" (arrays.partial.npz; an existing
    arrays.npz of an earlier, shorter frozen window is left in place) or "empty".
    """
    from . import labeling

    check_config(paths, cfg)

    traj = unique_by_index(read_part(paths.traj_part, repair=False))
    want = set(range(cfg.start, cfg.start + cfg.n))
    traj = [r for r in traj if r["index"] in want]
    traj_complete = {r["index"] for r in traj} == want
    if cfg.probe_from:
        src = Paths(out_root, cfg.probe_from)
        probe = unique_by_index(read_part(src.probe_part, repair=False)) if src.probe_part.exists() else []
        src_cfg = json.loads(src.config.read_text()) if src.config.exists() else {}
        probe_n = src_cfg.get("probe_n", 0)
        probe_split = src_cfg.get("probe_split")
        probe_start = src_cfg.get("probe_start", 0)
    else:
        probe = unique_by_index(read_part(paths.probe_part, repair=False))
        probe_n, probe_split, probe_start = cfg.probe_n, cfg.probe_split, cfg.probe_start
    pwant = set(range(probe_start, probe_start + probe_n)) if probe_split else set()
    probe = [r for r in probe if r["index"] in pwant]
    probe_complete = {r["index"] for r in probe} == pwant
    if traj_complete:
        write_jsonl_gz(paths.traj, traj)
    if probe_complete and probe and not cfg.probe_from:  # a shared probe is stored once, by its owner
        write_jsonl_gz(paths.probe, probe)
    if not traj:
        return "empty"
    meta_extra = json.loads(paths.meta.read_text()) if paths.meta.exists() else {}
    setting = labeling.build_setting(cfg, traj, probe or None, run_meta=meta_extra)
    from .data import save_setting

    if traj_complete and (probe_complete or not pwant):
        save_setting(paths.arrays, setting)
        paths.arrays_partial.unlink(missing_ok=True)
        return "complete"
    setting.meta["partial"] = {"instances_done": len(traj), "instances_total": len(want),
                               "probe_done": len(probe), "probe_total": len(pwant)}
    save_setting(paths.arrays_partial, setting)
    return "partial"


def run_cost(meta: dict) -> dict:
    """Wall time and throughput of a setting's generation from its ``run_meta.json`` sessions.

    Sessions that ran only trajectories (only probe plans) give the per-instance (per-plan) cost;
    engine load time is counted in ``wall_seconds`` but not in the per-item costs.
    """
    sessions = meta.get("sessions", [])
    tot = {"sessions": len(sessions), "instances": 0, "probe_plans": 0, "seconds": 0.0,
           "load_seconds": 0.0, "generated_tokens": 0, "prompt_tokens": 0}
    traj_s = traj_n = probe_s = probe_n = 0.0
    for s in sessions:
        st = s.get("engine_stats") or {}
        tot["instances"] += s.get("instances", 0)
        tot["probe_plans"] += s.get("probe_plans", 0)
        tot["seconds"] += s.get("seconds", 0.0)
        tot["load_seconds"] += s.get("engine_load_seconds", 0.0)
        tot["generated_tokens"] += st.get("generated_tokens", 0)
        tot["prompt_tokens"] += st.get("prompt_tokens", 0)
        if s.get("instances") and not s.get("probe_plans"):
            traj_s, traj_n = traj_s + s.get("seconds", 0.0), traj_n + s["instances"]
        elif s.get("probe_plans") and not s.get("instances"):
            probe_s, probe_n = probe_s + s.get("seconds", 0.0), probe_n + s["probe_plans"]
    tot["wall_seconds"] = tot["seconds"] + tot["load_seconds"]
    # engine_stats are written at the end of a session: a killed session has seconds but no tokens
    timed = sum(s.get("seconds", 0.0) for s in sessions if s.get("engine_stats"))
    tot["generated_tok_per_s"] = tot["generated_tokens"] / timed if timed else float("nan")
    tot["seconds_per_instance"] = traj_s / traj_n if traj_n else float("nan")
    tot["seconds_per_probe_plan"] = probe_s / probe_n if probe_n else float("nan")
    return tot


def measure_judge_styles(engine: ChatEngine, cfg: GenConfig, styles: Sequence[str], split: str = "train",
                         start: int = 5000, n: int = 40, plans_per_problem: int = 2, votes: int = 16,
                         out_path: Path | None = None) -> dict:
    """Judge quality J = accept_rate(valid) - accept_rate(invalid) per judge style (paper Eq. 2).

    The SAME generator plans (``plans_per_problem`` per problem of a window disjoint from the
    evaluation and probe windows) are judged by each style with ``votes`` votes, so the styles
    are compared on identical inputs. Also records generated tokens and seconds per vote.
    """
    from .labeling import youden_j

    probs = gsm8k.load_gsm8k(split)[start:start + n]
    outs = engine.chat([prompts.generator_messages(p.question) for p in probs],
                       temperature=cfg.gen_temperature, max_tokens=cfg.gen_max_tokens, n=plans_per_problem)
    items = [(p, pl) for p, o in zip(probs, outs) for pl in o]
    y = [gsm8k.label(pl, p.gold) for p, pl in items]
    res = {"model": cfg.model, "split": split, "start": start, "n_problems": n, "plans": len(items),
           "plan_tokens": (getattr(engine, "last_info", None) or {}).get("generated_tokens"),
           "valid_plans": int(sum(y)), "votes": votes, "styles": {}}
    for spec in styles:
        # "style" or "style:votes" or "style:votes:max_plans" (expensive styles on a subset)
        parts = spec.split(":")
        st = parts[0]
        nv = int(parts[1]) if len(parts) > 1 else votes
        sub = items[:int(parts[2])] if len(parts) > 2 else items
        ysub = y[:len(sub)]
        t0 = time.time()
        mt = prompts.JUDGE_MAX_TOKENS[st]
        jout = engine.chat([prompts.judge_messages(p.question, _clip(pl), st) for p, pl in sub],
                           temperature=cfg.judge_temperature, max_tokens=mt, n=nv)
        dt = time.time() - t0
        info = getattr(engine, "last_info", None) or {}
        parsed = [[prompts.parse_verdict(t, st) for t in j] for j in jout]
        S = [sum(v == 1 for v in row) for row in parsed]
        import numpy as np

        r = youden_j(np.array(S), np.array(ysub), nv)
        r.update(votes=nv, plans=len(sub), max_tokens=mt, seconds=round(dt, 1),
                 gen_tokens_per_vote=round(info.get("generated_tokens", 0) / max(1, len(sub) * nv), 1),
                 unparsable_frac=round(sum(v is None for row in parsed for v in row) / (len(sub) * nv), 3),
                 example=jout[0][0][:300] if jout and jout[0] else "")
        res["styles"][st] = r
        print(f"[judge-J] {st}: J={r['J']:.3f} acc(valid)={r['accept_valid']:.3f} "
              f"acc(invalid)={r['accept_invalid']:.3f} tok/vote={r['gen_tokens_per_vote']} {dt:.0f}s",
              file=sys.stderr, flush=True)
        if out_path:
            atomic_write_json(Path(out_path), res)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vrr.generation", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--setting", help="output name (default: preset name)")
    ap.add_argument("--model")
    ap.add_argument("--backend", choices=["auto", "vllm", "vllm-cpu"])
    ap.add_argument("--split")
    ap.add_argument("--start", type=int)
    ap.add_argument("--n", type=int)
    ap.add_argument("--K-max", dest="K_max", type=int)
    ap.add_argument("--M", type=int)
    ap.add_argument("--judge-style", choices=prompts.JUDGE_STYLES)
    ap.add_argument("--judge-max-tokens", type=int)
    ap.add_argument("--repair-style", choices=prompts.REPAIR_STYLES)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--probe-n", type=int)
    ap.add_argument("--probe-start", type=int)
    ap.add_argument("--probe-split")
    ap.add_argument("--probe-from")
    ap.add_argument("--gen-max-tokens", type=int)
    ap.add_argument("--repair-max-tokens", type=int)
    ap.add_argument("--max-model-len", type=int)
    ap.add_argument("--out-root", default=str(DEFAULT_OUT_ROOT))
    ap.add_argument("--limit", type=int, help="at most this many new instances/probe plans this call")
    ap.add_argument("--phase", choices=["all", "probe", "traj"], default="all")
    ap.add_argument("--finalize-only", action="store_true", help="only rebuild outputs from part files")
    ap.add_argument("--measure-judge-styles", help="comma list of judge styles: measure J on a disjoint "
                    "train window (--probe-start/--probe-n) instead of generating; writes --judge-out")
    ap.add_argument("--judge-out", help="JSON output of --measure-judge-styles")
    a = ap.parse_args(argv)
    over = {k: getattr(a, k) for k in ("setting", "model", "backend", "split", "start", "n", "K_max", "M",
                                       "judge_style", "judge_max_tokens", "repair_style", "seed",
                                       "batch_size", "probe_n", "probe_start", "probe_split", "probe_from",
                                       "gen_max_tokens", "repair_max_tokens", "max_model_len")}
    cfg = preset_config(a.preset, **over)
    if a.finalize_only:
        paths = Paths(Path(a.out_root), cfg.setting)
        if paths.config.exists():  # the run's recorded config, with only the window lengths asked for
            stored = json.loads(paths.config.read_text())
            cfg = GenConfig(**{**stored, **{k: getattr(a, k) for k in _WINDOW_KEYS if getattr(a, k) is not None}})
        print(finalize_setting(cfg, paths, out_root=Path(a.out_root)))
        return 0
    if a.measure_judge_styles:
        from .engine import make_engine

        engine = make_engine(cfg.model, backend=cfg.backend, seed=cfg.seed, max_model_len=cfg.max_model_len)
        res = measure_judge_styles(engine, cfg, a.measure_judge_styles.split(","), split=a.probe_split or "train",
                                   start=a.probe_start if a.probe_start is not None else 5000,
                                   n=a.probe_n or 40, votes=cfg.probe_votes, out_path=a.judge_out)
        res["engine"] = engine.describe()
        if a.judge_out:
            atomic_write_json(Path(a.judge_out), res)
        print(json.dumps({k: v for k, v in res.items() if k != "engine"}, indent=1))
        return 0
    phases = ("probe", "traj") if a.phase == "all" else (a.phase,)
    paths = generate(cfg, out_root=a.out_root, limit=a.limit, phases=phases)
    print(paths.dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
