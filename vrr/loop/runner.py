"""The frozen-trajectory protocol (paper Sec. 3.2, App. B "Full Experimental Setup").

Per instance (``repair_mode="repair"``): the generator writes p_0; for k = 0..K_max the verifier
gives M votes on p_k (one ``n=M`` request, so the votes share one prefill); for k < K_max an
UNCONDITIONAL repair p_k -> p_{k+1} from the plan and the verifier's feedback (never gated, so the
first-round transitions are free of selection bias). ``repair_mode="resample"`` is the
independent-resampling control of the non-stationarity diagnostic: p_{k+1} is a fresh generator
sample under the same budget and perturbation schedule.

Prompt-mismatch (PM) stress: the repairer's copy of the problem is perturbed (deterministically per
seed and index, by the task plug-in) for the rounds the setting names; the verifier and the labels
always use the original. The calibration probe gives ``probe_votes`` (16) votes on one generator
plan for each problem of a window disjoint from the evaluation window.

Everything a run does comes from its :class:`vrr.loop.config.RunConfig`, resolved from the setting
YAML; :func:`generate` runs or resumes it into the trajectory store (``vrr.loop.store``). Labeling
the finished window into arrays is the next stage (``vrr.label``); ``python -m vrr generate``
runs both.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..core.model import class_accept_rates
from . import store
from .command_line import check_probe_voters
from .config import RunConfig
from .engine.roles import ROLES, usage_record
from .sandbox import redact_record
from .tasks import Problem, Task, get_task
from .verifiers import JUDGE_MAX_TOKENS, executes_code, make_verifier


class ChatEngine(Protocol):
    def chat(self, conversations: Sequence[Sequence[dict]], temperature: float, max_tokens: int,
             n: int = 1) -> list[list[str]]: ...


def role_models(cfg: RunConfig) -> dict[str, str]:
    return {"generator": cfg.model, "judge": cfg.judge_model, "repairer": cfg.repairer_model}


def make_engines(cfg: RunConfig, task: Task, options: dict | None = None, **engine_kwargs) -> dict[str, ChatEngine]:
    """One engine per distinct model (and server) of the three roles, each role's usage counted
    (:func:`vrr.loop.engine.roles.make_role_engines`; ``options``: the setting's ``engine`` block)."""
    from .engine.roles import make_role_engines

    return make_role_engines(role_models(cfg), cfg.backend, task, seed=cfg.seed, max_model_len=cfg.max_model_len,
                             reward_roles=("judge",) if cfg.verifier == "prm" else (), options=options,
                             **engine_kwargs)


def _as_roles(engine) -> dict[str, ChatEngine]:
    return engine if isinstance(engine, dict) else {role: engine for role in ROLES}


def describe_engines(engines: dict[str, ChatEngine]) -> dict:
    """run_meta's engine record: the generator's engine, plus the others' where they differ."""
    def desc(e):
        return e.describe() if hasattr(e, "describe") else {"engine": type(e).__name__}

    out = desc(engines["generator"])
    others = {r: desc(e) for r, e in engines.items() if e is not engines["generator"]}
    if others:
        out = {**out, "other_roles": others}
    return out


def session_machine(desc: dict) -> dict:
    """Where one session's records were generated: backend, dtype and CPU kind. A window resumed on
    another machine spans several, and ``run_meta.json``'s top-level ``engine`` is only the last one's."""
    from .engine.backend import cpu_kind

    return {"backend": desc.get("backend"), "dtype": (desc.get("engine_config") or {}).get("dtype"),
            "cpu_kind": cpu_kind(), "cores": os.cpu_count()}


def repair_feedback(task: Task, verifier, outputs: Sequence[str], plan: str, problem: Problem) -> str:
    """What the repairer is told: the verifier's summary of its M votes, plus the task's own execution
    feedback where it has one (code: the shown test's error, self-debug style)."""
    text = verifier.feedback(outputs)
    if hasattr(task, "repair_feedback"):
        extra = task.repair_feedback(task.extract_answer(plan), problem)
        if extra:
            text += "\n" + extra
    return text


def perturbation_spec(task: Task, cfg: RunConfig, problem: Problem) -> dict | None:
    """The problem's prompt-mismatch edit under the setting's ``perturbation`` (deterministic per seed and
    problem), or None when the setting perturbs nothing."""
    return task.make_perturbation(problem, cfg.seed, cfg.perturb) if cfg.perturb != "none" else None


def repair_question(task: Task, cfg: RunConfig, problem: Problem, spec: dict | None, k: int) -> str:
    """The problem text the repairer (or, in resample mode, the generator) sees for round ``k``: the
    perturbed copy on the rounds the setting perturbs, else the problem's own."""
    return task.apply_perturbation(problem.question, spec) if cfg.perturbed_round(k) else problem.question


def perturbs(cfg: RunConfig, spec: dict | None, k: int) -> bool:
    """Whether round ``k``'s plan is written from an edited copy of the problem: a round the setting perturbs
    and an edit that changes something (``spec["kind"]`` not "none")."""
    return bool(cfg.perturbed_round(k) and spec and spec["kind"] != "none")


def repair_conversation(task: Task, cfg: RunConfig, verifier, judge_outputs: Sequence[str], plan: str,
                        problem: Problem, question: str) -> list:
    """The repairer's conversation for one plan: the ``cfg.repair_style`` prompt on ``question`` (the problem's
    own text or its perturbed copy, :func:`repair_question`), the clipped plan and :func:`repair_feedback`."""
    return task.prompts.repair_messages(question, task.clip_plan(plan),
                                        repair_feedback(task, verifier, judge_outputs, plan, problem), cfg.repair_style)


def chat_plans(engine, task: Task, problems: Sequence[Problem], questions: Sequence[str] | None = None,
               temperature: float = 0.7, max_tokens: int = 512, n: int = 1, tokens=None, stage=None
               ) -> tuple[list[list[str]], list[list]]:
    """Generator plans ``[B][n]`` and their finish reasons, for the problem texts ``questions`` (default:
    the problems' own; the repairer's perturbed copies in resample mode).

    A task with ``plan_steps`` (multi-step plans: BFCL multi-turn) writes each plan over several engine
    requests: ``plan_steps(problem, question)`` is a generator that yields the conversation of its next
    request, receives the reply, and returns the plan. The plans of the batch advance in lockstep, one
    engine request over every unfinished plan per step; a plan's finish is "length" when any of its
    steps was cut. Other tasks: one ``generator_messages`` request with ``n`` samples. ``tokens`` (a
    ``_Tokens``) counts every request; ``stage`` (a callable taking a short text) is told each step."""
    questions = [p.question for p in problems] if questions is None else list(questions)
    if not hasattr(task, "plan_steps"):
        if stage is not None:
            stage("plans")
        outs = engine.chat([task.prompts.generator_messages(q) for q in questions], temperature=temperature,
                           max_tokens=max_tokens, n=n)
        if tokens is not None:
            tokens.add(engine)
        return outs, [[_finish(engine, i)] * n for i in range(len(problems))]
    slots = [(i, task.plan_steps(p, q)) for i, (p, q) in enumerate(zip(problems, questions)) for _ in range(n)]
    plans: list = [None] * len(slots)
    finish: list = [None] * len(slots)
    pending = {}
    for j, (_, steps) in enumerate(slots):
        pending[j] = next(steps)
    step = 0
    while pending:
        order = sorted(pending)
        step += 1
        if stage is not None:
            stage(f"plans step {step} ({len(order)} unfinished)")
        outs = engine.chat([pending[j] for j in order], temperature=temperature, max_tokens=max_tokens, n=1)
        if tokens is not None:
            tokens.add(engine)
        for pos, j in enumerate(order):
            fr = _finish(engine, pos)
            finish[j] = "length" if "length" in (finish[j], fr) else fr
            try:
                pending[j] = slots[j][1].send(outs[pos][0])
            except StopIteration as done:
                plans[j] = done.value
                del pending[j]
    by_problem: list[list[str]] = [[] for _ in problems]
    fins: list[list] = [[] for _ in problems]
    for j, (i, _) in enumerate(slots):
        by_problem[i].append(plans[j])
        fins[i].append(finish[j])
    return by_problem, fins


def _redacted(task: Task, record: dict) -> dict:
    """Records are stored without verbatim copies of the problem text (vrr.loop.sandbox.redact_record)."""
    problem = task.problem(record["split"], record["index"]).question
    return redact_record(record, problem, task.extract_answer)


def _finish(engine, j: int) -> str | None:
    fr = (getattr(engine, "last_info", None) or {}).get("finish_reasons")
    return fr[j][0] if fr is not None and j < len(fr) and fr[j] else None


class _Tokens:
    def __init__(self):
        self.counts = {"prompt": 0, "generated": 0}

    def add(self, engine) -> None:
        info = getattr(engine, "last_info", None) or {}
        self.counts["prompt"] += int(info.get("prompt_tokens", 0))
        self.counts["generated"] += int(info.get("generated_tokens", 0))


def run_batch(engine, cfg: RunConfig, problems: Sequence[Problem], batch_id: int = 0,
              task: Task | None = None, stage=None) -> list[dict]:
    """Run the full frozen-trajectory protocol for a batch of problems; one record each.

    Batched across instances: for round k there is one request over all the batch's verifier
    conversations (``n=M``) and one over all repair conversations (``n=1``). ``stage``, if given, is told
    which round and role the batch is at (a batch of multi-turn plans runs for many minutes).
    """
    stage = stage or (lambda _text: None)

    def at(text: str):
        return lambda detail: stage(f"{text}: {detail}")

    task = task or get_task(cfg.dataset)
    engines = _as_roles(engine)
    verifier = make_verifier(cfg.verifier, cfg.judge_style, cfg.judge_tokens(), cfg.judge_temperature)
    t0 = time.time()
    B = len(problems)
    specs = [perturbation_spec(task, cfg, p) for p in problems]
    rounds: list[list[dict]] = [[] for _ in range(B)]
    tokens = _Tokens()
    gen, rep = engines["generator"], engines["repairer"]
    outs, fins = chat_plans(gen, task, problems, temperature=cfg.gen_temperature, max_tokens=cfg.gen_max_tokens,
                            tokens=tokens, stage=at("round 0"))
    for i in range(B):
        rounds[i].append({"k": 0, "source": "generate", "perturbed": False, "plan": outs[i][0],
                          "finish": fins[i][0]})
    for k in range(cfg.K_max + 1):
        stage(f"round {k} votes")
        jout, votes = verifier.votes(engines["judge"], task, problems, [rounds[i][k]["plan"] for i in range(B)],
                                     cfg.M)
        tokens.add(engines["judge"])
        for i in range(B):
            rounds[i][k]["judge"] = jout[i]
            rounds[i][k]["votes"] = votes[i]
        if k == cfg.K_max:
            break
        questions = [repair_question(task, cfg, p, specs[i], k + 1) for i, p in enumerate(problems)]
        if cfg.repair_mode == "resample":  # a fresh sample comes from the generator
            rout, rfin = chat_plans(gen, task, problems, questions, temperature=cfg.repair_temperature,
                                    max_tokens=cfg.repair_max_tokens, tokens=tokens,
                                    stage=at(f"round {k + 1} resample"))
        else:
            stage(f"round {k + 1} repair")
            convs = [repair_conversation(task, cfg, verifier, jout[i], rounds[i][k]["plan"], p, q)
                     for i, (p, q) in enumerate(zip(problems, questions))]
            rout = rep.chat(convs, temperature=cfg.repair_temperature, max_tokens=cfg.repair_max_tokens, n=1)
            rfin = [[_finish(rep, i)] for i in range(B)]
            tokens.add(rep)
        for i in range(B):
            rounds[i].append({"k": k + 1, "source": cfg.repair_mode, "perturbed": perturbs(cfg, specs[i], k + 1),
                              "plan": rout[i][0],
                              "finish": rfin[i][0]})
    dt = time.time() - t0
    return [{**p.ref, "setting": cfg.setting, "perturbation": specs[i], "rounds": rounds[i],
             "batch": batch_id, "batch_size": B, "batch_seconds": round(dt, 2),
             "batch_tokens": tokens.counts, "finished_at": round(time.time(), 1)}
            for i, p in enumerate(problems)]


def run_probe_batch(engine, cfg: RunConfig, problems: Sequence[Problem], batch_id: int = 0,
                    task: Task | None = None, stage=None) -> list[dict]:
    """Calibration probe: one generator plan per problem, ``probe_votes`` verifier votes on it."""
    task = task or get_task(cfg.dataset)
    engines = _as_roles(engine)
    verifier = make_verifier(cfg.verifier, cfg.judge_style, cfg.judge_tokens(), cfg.judge_temperature)
    t0 = time.time()
    outs, _ = chat_plans(engines["generator"], task, problems, temperature=cfg.gen_temperature,
                         max_tokens=cfg.repair_max_tokens, stage=stage)
    plans = [o[0] for o in outs]
    if stage is not None:
        stage("votes")
    jout, votes = verifier.votes(engines["judge"], task, problems, plans, cfg.probe_votes)
    dt = time.time() - t0
    return [{**p.ref, "setting": cfg.setting, "plan": pl, "judge": j, "votes": v, "batch": batch_id,
             "batch_seconds": round(dt, 2), "finished_at": round(time.time(), 1)}
            for p, pl, j, v in zip(problems, plans, jout, votes)]


def _progress(total: int, initial: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="inst", dynamic_ncols=True, mininterval=5.0,
                file=sys.stderr)


def generate(cfg: RunConfig, engine=None, out_root: Path | str = store.DEFAULT_OUT_ROOT,
             limit: int | None = None, phases: Sequence[str] = ("probe", "traj"),
             progress: bool = True, task: Task | None = None, shard: store.Shard | None = None,
             engine_options: dict | None = None) -> store.RunPaths:
    """Run (or resume) a setting into ``out_root/<setting>/``.

    ``engine``: one engine for every role, a ``{role: engine}`` mapping, or None to build the
    engines of the config (one per distinct model). ``limit`` caps the number of NEW instances
    this call (for timed sessions); ``phases`` selects probe and/or trajectories. ``shard`` runs only
    that shard's share of the windows into its own files (:class:`vrr.loop.store.Shard`);
    ``engine_options`` is the setting's ``engine`` block for the engines built here.

    The run's lock (``generate.lock``) is held for the whole session: a second generator on the
    same run stops at once with a :class:`vrr.loop.store.RunLockedError` naming the holder. Before
    any engine starts, the windows are checked against the dataset, ``config.json`` and
    ``run_meta.json`` are read, and the part files are checked (foreign and malformed records set
    aside, conflicting duplicates refused).
    """
    task = task or get_task(cfg.dataset)
    paths = store.RunPaths(Path(out_root), cfg.setting, shard=shard)
    with store.generation_lock(paths):
        _generate_locked(cfg, paths, task, engine, limit, phases, progress, engine_options)
    return paths


def _generate_locked(cfg: RunConfig, paths: store.RunPaths, task: Task, engine, limit: int | None,
                     phases: Sequence[str], progress: bool, engine_options: dict | None = None) -> None:
    traj_window = store.trajectory_window(cfg, task.dataset, shard=paths.shard)
    probe_window = store.probe_window(cfg, task.dataset, shard=paths.shard)
    problems = task.load(cfg.split)
    store.check_window_fits(traj_window, len(problems))
    traj_problems = [p for p in problems[cfg.start:cfg.start + cfg.n] if traj_window.owns(p.index)]
    probe_problems: list[Problem] = []
    if probe_window.n > 0:
        probe_all = task.load(cfg.probe_split)
        store.check_window_fits(probe_window, len(probe_all))
        if "probe" in phases:
            probe_problems = [p for p in probe_all[cfg.probe_start:cfg.probe_start + cfg.probe_n]
                              if probe_window.owns(p.index)]
    store.check_config(paths, cfg)
    check_probe_voters(paths, cfg)  # a borrowed probe was made and voted on by this run's models
    store.read_run_meta(paths)  # a corrupt run_meta.json stops the run here, before a batch is appended
    # this process holds the lock, so the part files may be repaired (bad lines set aside)
    done_t = {r["index"] for r in store.read_window_records(paths.traj_part, traj_window, repair=True)}
    done_p = ({r["index"] for r in store.read_window_records(paths.probe_part, probe_window, repair=True)}
              if probe_window.split else set())
    todo_p = [p for p in probe_problems if p.index not in done_p]
    todo_t = [p for p in traj_problems if p.index not in done_t] if "traj" in phases else []
    if limit is not None:
        todo_p, todo_t = todo_p[:limit], todo_t[:max(0, limit - len(todo_p))]
    if not (todo_p or todo_t):
        return
    session = store.new_session()
    if executes_code(cfg.verifier):  # the rule and sandbox the votes of this session run under
        from .sandbox import VOTE_RULE, isolation_environment
        session["vote_execution"] = {**VOTE_RULE.record(), "environment": isolation_environment()}
    engines = _as_roles(engine) if engine is not None else make_engines(cfg, task, options=engine_options)
    if engine is None:
        session["engine_load_seconds"] = round(sum(getattr(e, "load_seconds", 0.0)
                                                   for e in {id(e): e for e in engines.values()}.values()), 1)
    desc = describe_engines(engines)
    session["machine"] = session_machine(desc)
    t_start = time.time()
    bs = max(1, cfg.batch_size)
    session["batch_size"] = bs  # instances in flight: not part of the protocol, but it sets the throughput
    for phase, todo, done, total, part, run, counter in (
            ("probe", todo_p, done_p, len(probe_problems), paths.probe_part, run_probe_batch, "probe_plans"),
            ("traj", todo_t, done_t, len(traj_problems), paths.traj_part, run_batch, "instances")):
        if not todo:
            continue
        bar = _progress(total, len(done), f"{cfg.setting} {phase}") if progress else None
        for b in range(0, len(todo), bs):
            batch = todo[b:b + bs]
            recs = run(engines, cfg, batch, batch_id=len(done) // bs + b // bs, task=task,
                       stage=bar.set_postfix_str if bar else None)
            store.append_records(part, [_redacted(task, r) for r in recs])
            session[counter] += len(recs)
            session["seconds"] = round(time.time() - t_start, 1)
            session.update(usage_record(engines))
            store.update_meta(paths, cfg, desc, session)
            if bar:
                bar.update(len(recs))
        if bar:
            bar.close()
    stats = [dict(e.stats) for e in {id(e): e for e in engines.values()}.values() if hasattr(e, "stats")]
    if stats:
        session["engine_stats"] = {k: sum(s.get(k, 0) for s in stats) for k in stats[0]}
    session["seconds"] = round(time.time() - t_start, 1)
    store.update_meta(paths, cfg, desc, session)


def measure_judge_styles(engine, cfg: RunConfig, styles: Sequence[str], split: str = "train",
                         start: int = 5000, n: int = 40, plans_per_problem: int = 2, votes: int = 16,
                         out_path: Path | None = None, task: Task | None = None) -> dict:
    """Judge quality J = accept_rate(valid) - accept_rate(invalid) per judge style (Sec. 3, Youden's J).

    The SAME generator plans (``plans_per_problem`` per problem of a window disjoint from the
    evaluation and probe windows) are judged by each style with ``votes`` votes, so the styles
    are compared on identical inputs. Also records generated tokens and seconds per vote.
    """
    task = task or get_task(cfg.dataset)
    engines = _as_roles(engine)
    probs = task.load(split)[start:start + n]
    outs, _ = chat_plans(engines["generator"], task, probs, temperature=cfg.gen_temperature,
                         max_tokens=cfg.gen_max_tokens, n=plans_per_problem)
    items = [(p, pl) for p, o in zip(probs, outs) for pl in o]
    y = [task.label_round({"plan": pl}, p) for p, pl in items]
    res = {"model": cfg.model, "judge_model": cfg.judge_model, "split": split, "start": start, "n_problems": n,
           "plans": len(items), "plan_tokens": (getattr(engines["generator"], "last_info", None) or {}).get(
               "generated_tokens"), "valid_plans": int(sum(y)), "votes": votes, "styles": {}}
    for spec in styles:
        # "style" or "style:votes" or "style:votes:max_plans" (expensive styles on a subset)
        parts = spec.split(":")
        st = parts[0]
        nv = int(parts[1]) if len(parts) > 1 else votes
        sub = items[:int(parts[2])] if len(parts) > 2 else items
        ysub = y[:len(sub)]
        judge = make_verifier("llm_judge", st, JUDGE_MAX_TOKENS[st], cfg.judge_temperature)
        t0 = time.time()
        jout, _ = judge.votes(engines["judge"], task, [p for p, _ in sub], [pl for _, pl in sub], nv)
        dt = time.time() - t0
        info = getattr(engines["judge"], "last_info", None) or {}
        parsed = [[judge.parse(t) for t in j] for j in jout]
        S = [sum(v == 1 for v in row) for row in parsed]
        r = class_accept_rates(np.array(S), np.array(ysub), nv)
        r.update(votes=nv, plans=len(sub), max_tokens=judge.max_tokens, seconds=round(dt, 1),
                 gen_tokens_per_vote=round(info.get("generated_tokens", 0) / max(1, len(sub) * nv), 1),
                 unparsable_frac=round(sum(v is None for row in parsed for v in row) / (len(sub) * nv), 3),
                 example=jout[0][0][:300] if jout and jout[0] else "")
        res["styles"][st] = r
        print(f"[judge-J] {st}: J={r['J']:.3f} acc(valid)={r['accept_valid']:.3f} "
              f"acc(invalid)={r['accept_invalid']:.3f} tok/vote={r['gen_tokens_per_vote']} {dt:.0f}s",
              file=sys.stderr, flush=True)
        if out_path:
            store.write_record_json(Path(out_path), res)
    return res


def dry_run(cfg: RunConfig, n_problems: int = 1, task: Task | None = None) -> list[dict]:
    """The engine requests a run of ``cfg`` would make for its first ``n_problems`` problems (all
    rounds, plus one probe batch), with their models, sampling parameters and conversations,
    answered by a recording fake engine: nothing is loaded. What ``python -m vrr resolve --calls`` prints."""
    from .engine.fake import RecordingEngine

    task = task or get_task(cfg.dataset)
    by_model = {m: RecordingEngine(task, model=m) for m in dict.fromkeys(role_models(cfg).values())}
    engines = {role: by_model[m] for role, m in role_models(cfg).items()}
    window = task.load(cfg.split)[cfg.start:cfg.start + n_problems]
    run_batch(engines, cfg, window, task=task)
    if cfg.probe_n > 0 and cfg.probe_split and not cfg.probe_from:
        run_probe_batch(engines, cfg, task.load(cfg.probe_split)[cfg.probe_start:cfg.probe_start + n_problems],
                        task=task)
    calls = []
    for engine in by_model.values():
        calls += engine.requests
    return calls
