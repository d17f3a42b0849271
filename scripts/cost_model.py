#!/usr/bin/env python
"""PROJECTION: GPU-hours and wall time of the paper's eight settings at N instances on 1, 8 and 64 GPUs.

The tokens per instance are MEASURED: every stored trajectory record carries its batch's prompt and generated
token counts (``batch_tokens``), so a committed run's mean per instance is exact for that run
(``data/real/<run>/trajectories.jsonl.gz``). Everything else is an ASSUMPTION, stated on the command line
and printed with the table:

* each paper setting takes the tokens per instance of the committed CPU run of its task and regime (the
  CPU runs used Qwen2.5-Coder-0.5B; the paper's 3B-8B models write plans of another length), scaled by
  (K_max + 1) and M of the setting against the run's; BFCL multi-turn has no committed run and takes BFCL
  single's tokens times ``--bfcl-multi-turns``;
* a GPU processes ``--decode-tok-s`` generated and ``--prefill-tok-s`` prompt tokens per second when the
  batch is full (vLLM, bf16, a 7B model on one 80 GB GPU); prefix sharing of the M votes (n=M) is already
  in the measured prompt tokens, cache hits beyond it are not counted;
* with G GPUs (data parallel: ``vllm serve --data-parallel-size G`` or G shards) the window's work splits
  evenly, and the wall time cannot fall below one instance's critical path: (K_max + 1) rounds of a plan
  and a repair decoded one token after another at ``--stream-tok-s``, plus ``--load-min`` to load the model;
* the calibration probe (``probe.n`` x ``probe.M`` votes) is left out.

    python scripts/cost_model.py                    # the table of docs/scale.md
    python scripts/cost_model.py --n 500 --gpus 1,8,64 --decode-tok-s 2500 --prefill-tok-s 20000
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# the paper's eight settings (Table "loop-dynamics") -> the committed run whose tokens per instance stand in
PAPER_SETTINGS = {
    "gpu_qwen3b_favorable": "gsm8k_cpu_favorable",
    "gpu_qwen3b_pmstress": "gsm8k_cpu_pmstress",
    "gpu_qwen7b_pmstress": "gsm8k_cpu_pmstress",
    "gpu_mistral7b_pmstress": "gsm8k_cpu_pmstress",
    "gpu_llama3_8b_pmstress": "gsm8k_cpu_pmstress",
    "gpu_math500": "math500_cpu",
    "gpu_bfcl_single": "bfcl_cpu",
    "gpu_bfcl_multi": "bfcl_cpu",
}


def measured_tokens(run_dir: Path) -> dict:
    """Mean prompt and generated tokens per instance of a committed run, and its K_max, M and plan tokens."""
    records = [json.loads(line) for line in gzip.open(run_dir / "trajectories.jsonl.gz", "rt")]
    counted = [r for r in records if "batch_tokens" in r and r.get("batch_size")]
    if not counted:
        raise SystemExit(f"{run_dir}: no record carries batch_tokens; the run predates token counting")
    config = json.loads((run_dir / "config.json").read_text())
    n = len(counted)
    return {"run": run_dir.name, "instances": n, "K_max": config["K_max"], "M": config["M"],
            "prompt": sum(r["batch_tokens"]["prompt"] / r["batch_size"] for r in counted) / n,
            "generated": sum(r["batch_tokens"]["generated"] / r["batch_size"] for r in counted) / n}


def project(a) -> list[dict]:
    from vrr.settings import load_config

    rows = []
    for setting, run in PAPER_SETTINGS.items():
        cfg = load_config(setting)
        tok = measured_tokens(Path(a.runs) / run)
        scale = (cfg["K_max"] + 1) / (tok["K_max"] + 1) * (1 + cfg["M"]) / (1 + tok["M"])
        if cfg["task"] == "bfcl_multi":
            scale *= a.bfcl_multi_turns
        prompt, generated = tok["prompt"] * scale, tok["generated"] * scale
        gpu_seconds = a.n * (prompt / a.prefill_tok_s + generated / a.decode_tok_s)
        # critical path: per round one plan or repair decoded at one stream's speed (votes are short)
        plan_tokens = generated / (cfg["K_max"] + 1) / 2
        floor = (cfg["K_max"] + 1) * 2 * plan_tokens / a.stream_tok_s
        row = {"setting": setting, "proxy": run, "prompt_per_inst": round(prompt), "gen_per_inst": round(generated),
               "gpu_hours": gpu_seconds / 3600, "wall_minutes": {}}
        for g in a.gpus:
            row["wall_minutes"][g] = (max(gpu_seconds / g, floor) + 60 * a.load_min) / 60
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=500, help="instances per setting")
    ap.add_argument("--gpus", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8, 64])
    ap.add_argument("--decode-tok-s", type=float, default=2500.0, help="generated tok/s per GPU, full batch")
    ap.add_argument("--prefill-tok-s", type=float, default=20000.0, help="prompt tok/s per GPU, full batch")
    ap.add_argument("--stream-tok-s", type=float, default=50.0, help="decode tok/s of one sequence")
    ap.add_argument("--load-min", type=float, default=3.0, help="minutes to load the model on a GPU")
    ap.add_argument("--bfcl-multi-turns", type=float, default=3.0, help="BFCL multi-turn: turns per problem")
    ap.add_argument("--runs", default=str(REPO / "data" / "real"))
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    rows = project(a)
    print(f"PROJECTION (not a measurement): N={a.n} per setting; {a.decode_tok_s:g} generated + {a.prefill_tok_s:g} "
          f"prompt tok/s per GPU; {a.stream_tok_s:g} tok/s per sequence; {a.load_min:g} min model load; probe left out.")
    print("Tokens per instance: measured on the committed CPU run named (Qwen2.5-Coder-0.5B), scaled to the "
          "setting's K_max and M.")
    head = f"{'setting':<24}{'tokens from':<22}{'prompt/inst':>12}{'gen/inst':>10}{'GPU-h':>8}"
    head += "".join(f"{f'wall min @{g}':>13}" for g in a.gpus)
    print(head)
    for r in rows:
        line = (f"{r['setting']:<24}{r['proxy']:<22}{r['prompt_per_inst']:>12}{r['gen_per_inst']:>10}"
                f"{r['gpu_hours']:>8.2f}")
        line += "".join(f"{r['wall_minutes'][g]:>13.1f}" for g in a.gpus)
        print(line)
    total = sum(r["gpu_hours"] for r in rows)
    print(f"{'all eight':<24}{'':<22}{'':>12}{'':>10}{total:>8.2f}"
          + "".join(f"{sum(r['wall_minutes'][g] for r in rows):>13.1f}" for g in a.gpus)
          + "   (settings one after another)")
    if a.json:
        Path(a.json).write_text(json.dumps({"assumptions": {k: v for k, v in vars(a).items() if k != "json"},
                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
