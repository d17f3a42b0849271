#!/usr/bin/env python
"""Sequential voting: verifier calls (and, on the real windows, verifier tokens) of the online controller
with M votes per round against one vote at a time.

For every committed setting (``results/*/calibration.json``: the simulated settings and the real
windows of ``data/real/``) and each policy (Algorithm 1, VRR-Stop, VRR-Guard), the controller runs per
cross-fit fold with the calibration replay uses, in four modes:

* fixed: M votes per round evaluated (the paper's cost);
* exact: exact curtailment (``sequential="exact"``: a round stops asking once no completion of its
  remaining votes changes the decision or the state it leaves; under VRR-Stop, once none changes the
  decision on any future vote path). It must change 0 decisions;
* sprt: also Wald's SPRT on the votes' likelihood ratio (``sequential="sprt"``, anytime-valid at
  ``--error-rate``);
* pred: also the predictive test (``sequential="predictive"``, per-round error rate ``--error-rate``).

Per setting and policy it prints mean verifier calls per instance for each mode, the decisions each mode
changed against fixed M (committed plans that differ), and the validity V of the committed plans (fixed)
with its change Delta V under sprt and pred. For the real windows a second table gives generated and
prompt tokens of the verifier per instance, per mode. The run data record no tokens per vote (only each
batch's totals over all roles), so they are estimated: generated tokens per vote = the vote's stored
judge output length in characters times the window's recorded generated tokens per generated character
(plans and judge outputs); prompt tokens per verifier call = the window's recorded prompt tokens per prompt
sent (generation, judge and repair prompts alike), one prompt per call (a loop that samples a round's M
votes from one prompt with n=M sends one prompt per round instead).

Vote order: the real windows replay the judge votes in the order the loop stored them
(``data/real/<setting>/trajectories.jsonl.gz``, ``rounds[k].votes``; an unparsable verdict counts as a
reject, as in S_k). The simulated arrays store only counts S_k, so each round's S_k accepts are placed in
a random order (``vrr.policies.sequential.vote_orders``, ``--seed``, default 0).

    .venv/bin/python scripts/bench_sequential.py                     # all settings (several minutes)
    .venv/bin/python scripts/bench_sequential.py --settings sim_qwen3b_pmstress --markdown

``--markdown`` prints docs/online.md's tables (a row per setting, the pooled savings, the real windows' tokens).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vrr.common.paths import REPO_ROOT  # noqa: E402
from vrr.data.contract import load_setting  # noqa: E402
from vrr.policies.replay import algorithm1_inputs, load_calibration  # noqa: E402
from vrr.policies.sequential import fold_controllers, run_controller, vote_orders  # noqa: E402

POLICIES = {"algorithm1": "Algorithm 1", "vrr_stop": "VRR-Stop", "vrr_guard": "VRR-Guard"}


def stored_votes(arrays_path: Path, S: np.ndarray, M: int) -> np.ndarray | None:
    """The judge votes in stored order, [N, K+1, M], from the run's trajectories beside ``arrays.npz``;
    None when the run kept no trajectories. The votes must add up to the arrays' S_k."""
    path = arrays_path.parent / "trajectories.jsonl.gz"
    if not path.is_file():
        return None
    from vrr.label import labeling
    from vrr.loop.config import from_stored
    from vrr.loop.store import RunPaths, read_jsonl_gz, read_stored_config, unique_by_index

    records = unique_by_index(read_jsonl_gz(path))
    if len(records) != S.shape[0]:
        raise ValueError(f"{path}: {len(records)} trajectories, the arrays have {S.shape[0]}")
    run = RunPaths(arrays_path.parent.parent, arrays_path.parent.name)
    votes = labeling.stored_votes(records, from_stored(read_stored_config(run)))
    if votes.shape != S.shape + (M,) or not np.array_equal(votes.sum(axis=2), S):
        raise ValueError(f"{path}: stored votes do not add up to the arrays' S_k")
    return votes


def setting_inputs(name: str, seed: int = 0, results: Path = REPO_ROOT / "results"):
    """(setting, cross-fit, config, votes in arrival order, where the order comes from) of a setting whose
    calibration step has run into ``results``."""
    cal = Path(results) / name / "calibration.json"
    cf, config = load_calibration(cal)
    arrays = REPO_ROOT / json.loads(cal.read_text())["arrays_path"]
    setting = load_setting(arrays)
    votes = stored_votes(arrays, setting.S, setting.M)
    order = "stored order"
    if votes is None:
        votes, order = vote_orders(setting.S, setting.M, seed), f"random order (seed {seed})"
    return setting, cf, config, votes, order


def _texts(judge, M: int) -> list[str]:
    if isinstance(judge, list) and len(judge) == M:
        return [str(j) for j in judge]
    text = str(judge)                    # one stored string for the round: split it evenly
    return [text[i * len(text) // M:(i + 1) * len(text) // M] for i in range(M)]


def token_estimates(arrays_path: Path, S: np.ndarray, M: int):
    """(generated tokens per vote [N, K+1, M], prompt tokens per verifier call) estimated from the window's
    recorded batch totals (see the module docstring); None without trajectories."""
    path = arrays_path.parent / "trajectories.jsonl.gz"
    if not path.is_file():
        return None
    from vrr.label import labeling
    from vrr.loop.config import from_stored
    from vrr.loop.store import RunPaths, read_jsonl_gz, read_stored_config, unique_by_index

    records = unique_by_index(read_jsonl_gz(path))
    gen_tokens = prompt_tokens = gen_chars = prompts = 0.0
    chars = np.zeros(S.shape + (M,))
    for i, r in enumerate(records):
        share = 1.0 / r["batch_size"]    # every record of a batch repeats the batch's totals
        gen_tokens += share * r["batch_tokens"]["generated"]
        prompt_tokens += share * r["batch_tokens"]["prompt"]
        rounds = r["rounds"]
        prompts += 2 * len(rounds)       # one generation or repair prompt and one judge prompt per round
        for k, rd in enumerate(rounds):
            chars[i, k] = [len(x) for x in _texts(rd.get("judge", ""), M)]
            gen_chars += len(rd.get("plan", ""))
    gen_chars += chars.sum()
    return chars * (gen_tokens / gen_chars), prompt_tokens / prompts


MODES = ("off", "exact", "sprt", "predictive")


def bench_setting(name: str, seed: int = 0, error_rate: float = 0.05, results: Path = REPO_ROOT / "results") -> list[dict]:
    setting, cf, config, votes, order = setting_inputs(name, seed, results)
    alg = algorithm1_inputs(setting, cf, config)
    arrays = REPO_ROOT / json.loads((Path(results) / name / "calibration.json").read_text())["arrays_path"]
    tokens = token_estimates(arrays, setting.S, setting.M) if order == "stored order" else None
    rows = []
    n = setting.S.shape[0]
    for policy, label in POLICIES.items():
        row = {"setting": name, "policy": label, "order": order, "N": n}
        fixed = None
        for mode in MODES:
            ctls = fold_controllers(setting, cf, config, policy, alg_inputs=alg, sequential=mode,
                                    error_rate=error_rate)
            run = run_controller(ctls, setting.S, votes=None if mode == "off" else votes, folds=cf.folds)
            fixed = run if mode == "off" else fixed
            row[f"calls_{mode}"] = float(run.verifier_calls.mean())
            row[f"changed_{mode}"] = int((run.outcome.committed != fixed.outcome.committed).sum())
            row[f"V_{mode}"] = float(run.outcome.validity(setting.y).mean())
            if tokens is not None:
                per_vote, per_call = tokens
                asked = np.arange(setting.M)[None, None, :] < run.votes_per_round[:, :, None]
                row[f"gen_{mode}"] = float((per_vote * asked).sum() / n)
                row[f"prompt_{mode}"] = float(per_call * run.verifier_calls.mean())
        rows.append(row)
    return rows


def _table(head: list[str], lines: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(out + ["| " + " | ".join(line) + " |" for line in lines])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(line) for line in lines])


def pooled(rows: list[dict]) -> dict:
    """Per policy and mode: (percent of the fixed-M verifier calls saved, decisions changed, instances, settings),
    pooled over the rows' settings, each weighted by its instances."""
    by_policy: dict = {}
    for r in rows:
        by_policy.setdefault(r["policy"], []).append(r)
    out = {}
    for policy, rs in by_policy.items():
        total = {m: sum(r[f"calls_{m}"] * r["N"] for r in rs) for m in MODES}
        n = sum(r["N"] for r in rs)
        out[policy] = {m: (100 * (1 - total[m] / total["off"]), sum(r[f"changed_{m}"] for r in rs), n, len(rs))
                       for m in MODES[1:]}
    return out


def _token_table(rows: list[dict], markdown: bool) -> str:
    real = [r for r in rows if "gen_off" in r]
    head = ["setting", "policy"] + [f"{kind} tokens {m}" for kind in ("gen", "prompt")
                                    for m in ("fixed", "exact", "sprt", "pred")]
    lines = [[r["setting"], r["policy"]] + [f"{r[f'{kind}_{m}']:.0f}" for kind in ("gen", "prompt")
                                             for m in MODES] for r in real]
    return _table(head, lines, markdown) if real else ""


def render_text(rows: list[dict], error_rate: float) -> str:
    """Plain-text tables for the terminal: one line per setting and policy."""
    e = f"{error_rate:g}"
    head = ["setting", "policy", "fixed", "exact", "exact/fixed", f"sprt({e})", f"pred({e})",
            "changed exact/sprt/pred", "V fixed", "dV sprt", "dV pred", "vote order"]
    lines = [[r["setting"], r["policy"], f"{r['calls_off']:.2f}", f"{r['calls_exact']:.2f}",
              f"{r['calls_exact'] / r['calls_off']:.3f}" if r["calls_off"] else "-",
              f"{r['calls_sprt']:.2f}", f"{r['calls_predictive']:.2f}",
              f"{r['changed_exact']}/{r['changed_sprt']}/{r['changed_predictive']} of {r['N']}",
              f"{r['V_off']:.3f}", f"{r['V_sprt'] - r['V_off']:+.3f}", f"{r['V_predictive'] - r['V_off']:+.3f}",
              r["order"]] for r in rows]
    out = [_table(head, lines, False)]
    tokens = _token_table(rows, False)
    if tokens:
        out += ["", "Verifier tokens per instance (estimated from the recorded batch totals, real windows):", "", tokens]
    out += [""] + [f"{policy}: " + "; ".join(
        f"{m} saves {pct:.1f}% (changed {changed}/{n} = {100 * changed / n:.2f}%)" for m, (pct, changed, n, _) in modes.items())
        + f" of verifier calls, pooled over {next(iter(modes.values()))[3]} settings" for policy, modes in pooled(rows).items()]
    return "\n".join(out)


def render_markdown(rows: list[dict], error_rate: float) -> str:
    """The tables of docs/online.md's sequential-voting section, exactly as the page shows them: one row per
    setting (the three policies side by side), the pooled savings, and the real windows' verifier tokens."""
    by_setting: dict = {}
    for r in rows:
        by_setting.setdefault(r["setting"], {})[r["policy"]] = r
    e = f"{error_rate:g}"
    lines = []
    for name, p in by_setting.items():
        alg, stop, guard = p["Algorithm 1"], p["VRR-Stop"], p["VRR-Guard"]
        real = " (real)" if stop["order"] == "stored order" else ""
        lines.append([f"{name}{real}", f"{alg['calls_off']:.2f} → {alg['calls_exact']:.2f}",
                      f"{stop['calls_off']:.2f} → {stop['calls_exact']:.2f} "
                      f"({stop['calls_sprt']:.2f}, {stop['calls_predictive']:.2f})",
                      f"{stop['changed_sprt']}/{stop['changed_predictive']} of {stop['N']}, "
                      f"{stop['V_sprt'] - stop['V_off']:+.3f}/{stop['V_predictive'] - stop['V_off']:+.3f}",
                      f"{guard['calls_off']:.2f} → {guard['calls_exact']:.2f}"])
    head = ["setting", "Alg. 1 fixed → exact", "VRR-Stop fixed → exact (sprt, pred.)",
            "VRR-Stop changed sprt/pred., ΔV sprt/pred.", "VRR-Guard fixed → exact"]
    pools = pooled(rows)
    changed_exact = sum(modes["exact"][1] for modes in pools.values())
    exact_line = ("Exact mode changed 0 decisions anywhere, under every policy." if changed_exact == 0
                  else f"Exact mode changed {changed_exact} decisions.")
    pool_lines = [[policy] + [f"{pct:.1f} % ({changed} changed)" for pct, changed, _, _ in modes.values()]
                  for policy, modes in pools.items()]
    out = [_table(head, lines, True), "",
           f"{exact_line} Pooled over the {len(by_setting)} committed settings it saves:", "",
           _table(["policy", "exact", f"sprt ({e})", f"predictive ({e})"], pool_lines, True)]
    tokens = _token_table(rows, True)
    return "\n".join(out + (["", tokens] if tokens else []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="*", help="setting names (default: every RESULTS/*/calibration.json)")
    ap.add_argument("--results", type=Path, default=REPO_ROOT / "results", help="results root of make reproduce")
    ap.add_argument("--seed", type=int, default=0, help="vote order of the simulated settings")
    ap.add_argument("--error-rate", type=float, default=0.05, help="error rate of the SPRT and the predictive test")
    ap.add_argument("--markdown", action="store_true",
                    help="print docs/online.md's tables (one row per setting, pooled savings, tokens)")
    args = ap.parse_args(argv)
    names = args.settings or sorted(p.parent.name for p in args.results.glob("*/calibration.json"))
    if not names:
        ap.error(f"{args.results}: no */calibration.json (run `make reproduce` first)")
    rows = []
    for name in names:
        rows += bench_setting(name, args.seed, args.error_rate, args.results)
    print(render_markdown(rows, args.error_rate) if args.markdown else render_text(rows, args.error_rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
