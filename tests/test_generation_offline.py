"""Frozen-trajectory generation with a fake engine at the edge: protocol shape, batching,
resumability after a simulated crash (nothing lost, nothing duplicated), atomic outputs, labeling
into the data contract."""
import gzip
import json

import numpy as np
import pytest

from vrr import prompts
from vrr.data import load_setting
from vrr.generation import GenConfig, generate, read_part, preset_config
from vrr.tasks import gsm8k


class FakeEngine:
    """Implements chat(conversations, temperature, max_tokens, n) deterministically.

    Generator: correct answer for even indices' first attempt. Judge: ACCEPT iff the plan's
    answer is correct for half of the votes (so J > 0). Repair: always flips correctness.
    Optionally raises after ``fail_after`` calls to simulate a kill mid-run.
    """

    def __init__(self, fail_after=None):
        self.calls = []
        self.fail_after = fail_after
        self.last_info = {}

    def _gold_for(self, text):
        for p in gsm8k.load_gsm8k("test")[:60] + gsm8k.load_gsm8k("train")[:40]:
            if p.question in text:
                return p
        return None

    def chat(self, conversations, temperature, max_tokens, n=1):
        assert max_tokens and max_tokens > 0
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls.append({"n": n, "B": len(conversations), "temperature": temperature, "max_tokens": max_tokens})
        outs = []
        for conv in conversations:
            user = conv[-1]["content"]
            p = self._gold_for(user)
            gold = int(float(p.gold)) if p else 0
            role = prompts.role_of(conv)
            if role == "judge":
                plan = user.split("Proposed solution:\n", 1)[1]
                ok = gsm8k.is_correct(gsm8k.extract_answer(plan), str(gold))
                outs.append(["ACCEPT" if (ok and m % 2 == 0) or (not ok and m % 4 == 0) else "REJECT"
                             for m in range(n)])
            elif role == "repairer":
                prev = user.split("Proposed solution:\n", 1)[1].split("\n\nReviewer feedback")[0]
                ok = gsm8k.is_correct(gsm8k.extract_answer(prev), str(gold))
                outs.append([f"Revised. The answer is {gold + 1 if ok else gold}."] * n)
            else:
                good = p is not None and p.index % 2 == 0
                outs.append([f"Step. The answer is {gold if good else gold + 7}."] * n)
        self.last_info = {"finish_reasons": [["stop"] * n for _ in conversations], "prompt_tokens": 10,
                          "generated_tokens": 5}
        return outs


def small_cfg(**kw):
    base = dict(setting="t_fav", n=10, start=0, K_max=2, M=4, batch_size=4, probe_split="train",
                probe_start=0, probe_n=6, probe_votes=6)
    base.update(kw)
    return GenConfig(**base)


def test_protocol_shapes_and_batching(tmp_path):
    cfg = small_cfg()
    eng = FakeEngine()
    paths = generate(cfg, engine=eng, out_root=tmp_path, progress=False)
    # probe: 2 batches (4+2) x (gen + judge); traj: 3 batches x (1 gen + 3 judge + 2 repair)
    judge_calls = [c for c in eng.calls if c["n"] == cfg.M]
    assert len(judge_calls) == 3 * (cfg.K_max + 1)
    assert all(c["B"] in (4, 2) for c in eng.calls)
    assert sum(c["n"] == 6 for c in eng.calls) == 2  # probe votes share one call per batch
    st = load_setting(paths.arrays)
    assert st.S.shape == (10, 3) and st.y.shape == (10, 3) and st.M == 4
    assert st.probe_S.shape == (6,) and st.probe_M == 6
    # fake semantics: even indices start correct, repair flips validity every round
    y0 = np.array([1 if i % 2 == 0 else 0 for i in range(10)])
    assert (st.y[:, 0] == y0).all() and (st.y[:, 1] == 1 - y0).all() and (st.y[:, 2] == y0).all()
    assert (st.S[st.y == 1] == 2).all() and (st.S[st.y == 0] == 1).all()
    assert st.meta["setting"] == "t_fav" and st.meta["indices"] == list(range(10))
    assert st.meta["probe"]["J"] == pytest.approx(3 / 6 - 2 / 6)  # m%2==0 vs m%4==0 of 6 votes
    # text trajectories: compressed, one record per instance, no problem text
    recs = [json.loads(l) for l in gzip.open(paths.traj, "rt")]
    assert [r["index"] for r in recs] == list(range(10))
    q0 = gsm8k.load_gsm8k("test")[0].question
    raw = gzip.open(paths.traj, "rt").read() + gzip.open(paths.probe, "rt").read()
    assert q0[:40] not in raw
    assert len(recs[0]["rounds"]) == 3 and len(recs[0]["rounds"][1]["judge"]) == 4
    assert not paths.arrays_partial.exists()


@pytest.mark.parametrize("fail_after", [1, 3, 9, 17])
def test_resume_after_kill_no_loss_no_duplicates(tmp_path, fail_after):
    cfg = small_cfg()
    with pytest.raises(KeyboardInterrupt):
        generate(cfg, engine=FakeEngine(fail_after=fail_after), out_root=tmp_path, progress=False)
    part = tmp_path / "t_fav" / "trajectories.part.jsonl"
    done_before = [r["index"] for r in read_part(part)]
    assert len(done_before) == len(set(done_before))
    assert not (tmp_path / "t_fav" / "arrays.npz").exists()
    # simulate a torn line from a kill during a write
    with open(part, "ab") as f:
        f.write(b'{"index": 999, "rounds": [')
    eng2 = FakeEngine()
    paths = generate(cfg, engine=eng2, out_root=tmp_path, progress=False)
    recs = read_part(paths.traj_part)
    idx = [r["index"] for r in recs]
    assert sorted(idx) == list(range(10)) and len(idx) == 10  # nothing lost, nothing duplicated
    assert idx[:len(done_before)] == done_before  # earlier work kept, not redone
    pidx = [r["index"] for r in read_part(paths.probe_part)]
    assert sorted(pidx) == list(range(6))
    assert load_setting(paths.arrays).S.shape == (10, 3)
    # a third run does nothing new
    eng3 = FakeEngine()
    generate(cfg, engine=eng3, out_root=tmp_path, progress=False)
    assert eng3.calls == []


def test_partial_arrays_and_limit(tmp_path):
    cfg = small_cfg()
    paths = generate(cfg, engine=FakeEngine(), out_root=tmp_path, limit=8, progress=False)
    # limit 8: 6 probe plans + 2 instances (batch of 2)
    assert not paths.arrays.exists() and paths.arrays_partial.exists()
    st = load_setting(paths.arrays_partial)
    assert st.S.shape[0] == 2 and st.meta["partial"]["instances_done"] == 2
    generate(cfg, engine=FakeEngine(), out_root=tmp_path, progress=False)
    assert paths.arrays.exists() and not paths.arrays_partial.exists()


def test_freeze_prefix_then_extend(tmp_path):
    """A run planned for n=10 is frozen at its first 4 instances, then extended to all 10."""
    from vrr.generation import Paths, finalize_setting

    paths = generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, limit=6 + 6, progress=False)
    assert len(read_part(paths.traj_part)) == 6 and not paths.arrays.exists()  # 6 probe plans + 6 instances
    assert finalize_setting(small_cfg(n=4, probe_n=5), Paths(tmp_path, "t_fav"), out_root=tmp_path) == "complete"
    frozen = load_setting(paths.arrays)
    assert frozen.S.shape == (4, 3) and frozen.meta["indices"] == [0, 1, 2, 3]
    assert frozen.meta["probe"]["indices"] == list(range(5))
    assert json.loads(paths.config.read_text())["n"] == 4  # config.json records the frozen window
    with gzip.open(paths.traj, "rt") as f:
        assert [json.loads(l)["index"] for l in f] == [0, 1, 2, 3]
    # extending: the 6 finished instances are kept, only 4 more are generated
    before = read_part(paths.traj_part)
    generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, progress=False)
    after = read_part(paths.traj_part)
    assert after[:6] == before and sorted(r["index"] for r in after) == list(range(10))
    assert load_setting(paths.arrays).S.shape == (10, 3)
    assert json.loads(paths.config.read_text())["n"] == 10


def test_config_change_refused_on_resume(tmp_path):
    generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, limit=2, progress=False)
    with pytest.raises(SystemExit):
        generate(small_cfg(M=8), engine=FakeEngine(), out_root=tmp_path, progress=False)
    # batch size is not part of the protocol
    generate(small_cfg(batch_size=3), engine=FakeEngine(), out_root=tmp_path, progress=False)


def test_pm_stress_perturbs_repairer_only(tmp_path):
    cfg = small_cfg(setting="t_pm", perturb="numeric", repair_temperature=1.0, probe_n=0, probe_split=None)
    seen = []

    class Spy(FakeEngine):
        def chat(self, conversations, temperature, max_tokens, n=1):
            seen.append((prompts.role_of(conversations[0]), [c[-1]["content"] for c in conversations], temperature))
            return super().chat(conversations, temperature, max_tokens, n)

    generate(cfg, engine=Spy(), out_root=tmp_path, progress=False)
    probs = gsm8k.load_gsm8k("test")
    recs = read_part(tmp_path / "t_pm" / "trajectories.part.jsonl")
    spec0 = recs[0]["perturbation"]
    assert spec0["kind"] == "numeric"
    origs = {p.question for p in probs[:10]}
    perturbed = {gsm8k.apply_perturbation(probs[r["index"]].question, r["perturbation"]) for r in recs}
    n_rep = n_judge = 0
    for system, users, temp in seen:
        for u in users:
            has_orig = any(q in u for q in origs)
            has_pert = any(q in u for q in perturbed)
            if system == "repairer":
                n_rep += 1
                assert temp == 1.0 and has_pert and not has_orig
            elif system == "judge":
                n_judge += 1
                assert has_orig and not has_pert
    assert n_rep == 10 * cfg.K_max and n_judge == 10 * (cfg.K_max + 1)
    assert recs[0]["rounds"][1]["perturbed"] and not recs[0]["rounds"][0]["perturbed"]


def test_nonstationary_schedule_and_resample():
    cfg = preset_config("gsm8k_cpu_nonstationary")
    assert cfg.gen_max_tokens == 256 and cfg.K_max == 6
    assert [cfg.perturbed_round(k) for k in range(7)] == [False, False, False, True, True, True, True]
    ctl = preset_config("gsm8k_cpu_nonstationary_resample")
    assert ctl.repair_mode == "resample"
    fav = preset_config("gsm8k_cpu_favorable")
    assert fav.K_max == 5 and fav.M == 8 and fav.probe_votes == 16 and fav.repair_temperature == 0.7
    pm = preset_config("gsm8k_cpu_pmstress")
    assert pm.repair_temperature == 1.0 and pm.perturbed_round(1) and pm.perturbed_round(5)


def test_resample_mode_uses_generator(tmp_path):
    cfg = small_cfg(setting="t_rs", repair_mode="resample", probe_n=0, probe_split=None, n=4)
    eng = FakeEngine()
    generate(cfg, engine=eng, out_root=tmp_path, progress=False)
    recs = read_part(tmp_path / "t_rs" / "trajectories.part.jsonl")
    assert all(rd["source"] == "resample" for rd in recs[0]["rounds"][1:])


def test_probe_window_must_be_disjoint():
    with pytest.raises(ValueError):
        GenConfig(setting="x", split="test", start=0, n=10, probe_split="test", probe_start=5, probe_n=10).validate()


def test_verdict_parsing():
    assert prompts.parse_verdict("ACCEPT", "verdict") == 1
    assert prompts.parse_verdict(" reject.", "verdict") == 0
    assert prompts.parse_verdict("INCORRECT", "verdict") == 0
    assert prompts.parse_verdict("hmm", "verdict") is None
    assert prompts.parse_verdict("x is 5, matches.\nVERDICT: ACCEPT", "check") == 1
    assert prompts.parse_verdict("VERDICT: ACCEPT? no wait\nVERDICT: REJECT", "reason") == 0
    assert prompts.parse_verdict("The solution is wrong. REJECT", "check") == 0
    assert prompts.vote(None) == 0


def test_measure_judge_styles_same_plans(tmp_path):
    from vrr.generation import measure_judge_styles

    cfg = small_cfg()
    out = tmp_path / "j.json"
    res = measure_judge_styles(FakeEngine(), cfg, ["verdict", "check"], split="train", start=0, n=10,
                               plans_per_problem=1, votes=4, out_path=out)
    assert res["plans"] == 10 and res["valid_plans"] == 5
    v = res["styles"]["verdict"]
    assert v["accept_valid"] == pytest.approx(0.5) and v["accept_invalid"] == pytest.approx(0.25)
    assert v["J"] == pytest.approx(0.25)
    # the fake judge answers the bare word, which the "check" parser reads from the tail
    assert res["styles"]["check"]["J"] == pytest.approx(0.25)
    assert json.loads(out.read_text())["styles"].keys() == {"verdict", "check"}


def test_repair_prompt_shares_judge_prefix():
    q, plan = "Q text 1 2 3", "Step. The answer is 6."
    j = prompts.judge_messages(q, plan, "verdict")
    r = prompts.repair_messages(q, plan, "1 of 8 reviewers judged the solution incorrect.")
    assert j[0] == r[0]
    prefix = f"Problem:\n{q}\n\nProposed solution:\n{plan}\n\n"
    assert j[1]["content"].startswith(prefix) and r[1]["content"].startswith(prefix)
    assert [prompts.role_of(c) for c in (prompts.generator_messages(q), j, r)] == ["generator", "judge", "repairer"]


def test_run_cost_from_sessions():
    from vrr.generation import run_cost

    meta = {"sessions": [
        {"instances": 10, "probe_plans": 0, "seconds": 500.0, "engine_load_seconds": 30.0,
         "engine_stats": {"generated_tokens": 9000, "prompt_tokens": 30000}},
        {"instances": 0, "probe_plans": 40, "seconds": 800.0, "engine_load_seconds": 30.0,
         "engine_stats": {"generated_tokens": 12000, "prompt_tokens": 20000}},
        {"instances": 4, "probe_plans": 0, "seconds": 260.0},  # killed: no engine_stats
    ]}
    c = run_cost(meta)
    assert c["instances"] == 14 and c["probe_plans"] == 40
    assert c["wall_seconds"] == 500 + 800 + 260 + 60
    assert c["seconds_per_instance"] == pytest.approx(760 / 14)
    assert c["seconds_per_probe_plan"] == pytest.approx(20.0)
    assert c["generated_tok_per_s"] == pytest.approx(21000 / 1300)


def test_finalize_only_cli_keeps_the_recorded_config(tmp_path):
    """`--finalize-only` rebuilds from the run's config.json: preset defaults (n=200, batch size)
    must not overwrite the recorded window or protocol."""
    from vrr.generation import main

    paths = generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, progress=False)
    recorded = json.loads(paths.config.read_text())
    assert main(["--preset", "gsm8k_cpu_favorable", "--setting", "t_fav", "--out-root", str(tmp_path),
                 "--finalize-only"]) == 0
    assert json.loads(paths.config.read_text()) == recorded
    assert load_setting(paths.arrays).meta["config"]["batch_size"] == recorded["batch_size"] == 4
    main(["--preset", "gsm8k_cpu_favorable", "--setting", "t_fav", "--out-root", str(tmp_path),
          "--finalize-only", "--n", "6"])
    assert load_setting(paths.arrays).S.shape[0] == 6 and json.loads(paths.config.read_text())["n"] == 6
