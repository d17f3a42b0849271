"""Frozen-trajectory generation with the package's fake engine backend (vrr.loop.engine.fake): protocol
shape, batching, resumability after a simulated crash (nothing lost, nothing duplicated), atomic
outputs, labeling into the data contract. Configs come from the setting YAML, as in real runs."""
import gzip
import json

import numpy as np
import pytest

from vrr.chain import main
from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop import verifiers
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine as _FakeEngine
from vrr.loop.runner import generate as _generate
from vrr.loop.store import RunPaths, read_part
from vrr.loop.tasks import get_task, gsm8k
from vrr.settings import load_config

TASK = get_task("gsm8k")
PROMPTS = TASK.prompts


def FakeEngine(fail_after=None):
    return _FakeEngine(TASK, fail_after=fail_after)


def small_cfg(setting="t_fav", base="gsm8k_cpu_favorable", **over):
    """A small real-setting config: the favorable YAML with overrides (dotted keys of the setting)."""
    o = {"window.N": 10, "window.start": 0, "K_max": 2, "M": 4, "engine.batch_size": 4, "probe.split": "train",
         "probe.start": 0, "probe.n": 6, "probe.M": 6}
    o.update(over)
    return run_config(load_config(base, overrides=o), setting=setting)


def generate(cfg, engine=None, out_root=None, limit=None, progress=False, finalize=True, **kw):
    paths = _generate(cfg, engine=engine, out_root=out_root, limit=limit, progress=progress, **kw)
    if finalize:
        finalize_setting(paths, cfg)
    return paths


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
    paths = generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, limit=6 + 6, progress=False)
    assert len(read_part(paths.traj_part)) == 6 and not paths.arrays.exists()  # 6 probe plans + 6 instances
    assert finalize_setting(RunPaths(tmp_path, "t_fav"), small_cfg(**{"window.N": 4, "probe.n": 5})) == "complete"
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
    with pytest.raises(ValueError, match=r"config.json.*'M': stored 4, requested 8"):
        generate(small_cfg(M=8), engine=FakeEngine(), out_root=tmp_path, progress=False)
    with pytest.raises(ValueError, match="'judge_model'"):
        generate(small_cfg(**{"models.judge": "another-judge"}), engine=FakeEngine(), out_root=tmp_path)
    # batch size is not part of the protocol; each session records its own, which sets its throughput
    paths = generate(small_cfg(**{"engine.batch_size": 3}), engine=FakeEngine(), out_root=tmp_path, progress=False)
    assert [s["batch_size"] for s in json.loads(paths.meta.read_text())["sessions"]] == [4, 3]


def test_pm_stress_perturbs_repairer_only(tmp_path):
    cfg = small_cfg(setting="t_pm", **{"perturbation.regime": "pm_stress", "perturbation.edit": "numeric",
                                       "temperatures.repair": 1.0, "probe.n": 0})
    seen = []

    class Spy(_FakeEngine):
        def chat(self, conversations, temperature, max_tokens, n=1):
            seen.append((PROMPTS.role_of(conversations[0]), [c[-1]["content"] for c in conversations], temperature))
            return super().chat(conversations, temperature, max_tokens, n)

    generate(cfg, engine=Spy(TASK), out_root=tmp_path, progress=False)
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


def test_settings_resolve_to_the_protocol_of_each_regime():
    cfg = run_config(load_config("gsm8k_cpu_nonstationary"))
    assert cfg.gen_max_tokens == 256 and cfg.K_max == 6
    assert [cfg.perturbed_round(k) for k in range(7)] == [False, False, False, True, True, True, True]
    ctl = run_config(load_config("gsm8k_cpu_nonstationary_resample"))
    assert ctl.repair_mode == "resample" and ctl.perturbed_round(3) and not ctl.perturbed_round(2)
    fav = run_config(load_config("gsm8k_cpu_favorable"))
    assert fav.K_max == 5 and fav.M == 8 and fav.probe_votes == 16 and fav.repair_temperature == 0.7
    assert not any(fav.perturbed_round(k) for k in range(6))
    pm = run_config(load_config("gsm8k_cpu_pmstress"))
    assert pm.repair_temperature == 1.0 and pm.perturbed_round(1) and pm.perturbed_round(5)
    assert pm.probe_from == "gsm8k_cpu_favorable"


def test_resample_mode_uses_generator(tmp_path):
    cfg = small_cfg(setting="t_rs", **{"repair.mode": "resample", "probe.n": 0, "window.N": 4})
    eng = FakeEngine()
    generate(cfg, engine=eng, out_root=tmp_path, progress=False)
    recs = read_part(tmp_path / "t_rs" / "trajectories.part.jsonl")
    assert all(rd["source"] == "resample" for rd in recs[0]["rounds"][1:])


def test_probe_window_must_be_disjoint():
    with pytest.raises(ValueError, match="probe.start"):
        small_cfg(**{"probe.split": "test", "probe.start": 5})


def test_verdict_parsing():
    assert verifiers.parse_verdict("ACCEPT", "verdict") == 1
    assert verifiers.parse_verdict(" reject.", "verdict") == 0
    assert verifiers.parse_verdict("INCORRECT", "verdict") == 0
    assert verifiers.parse_verdict("hmm", "verdict") is None
    assert verifiers.parse_verdict("x is 5, matches.\nVERDICT: ACCEPT", "check") == 1
    assert verifiers.parse_verdict("VERDICT: ACCEPT? no wait\nVERDICT: REJECT", "reason") == 0
    assert verifiers.parse_verdict("The solution is wrong. REJECT", "check") == 0
    assert verifiers.vote(None) == 0


def test_measure_judge_styles_same_plans(tmp_path):
    from vrr.loop.runner import measure_judge_styles

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
    j = PROMPTS.judge_messages(q, plan, "verdict")
    r = PROMPTS.repair_messages(q, plan, "1 of 8 reviewers judged the solution incorrect.")
    assert j[0] == r[0]
    prefix = f"Problem:\n{q}\n\nProposed solution:\n{plan}\n\n"
    assert j[1]["content"].startswith(prefix) and r[1]["content"].startswith(prefix)
    assert [PROMPTS.role_of(c) for c in (PROMPTS.generator_messages(q), j, r)] == ["generator", "judge", "repairer"]


def test_run_cost_from_sessions():
    from vrr.loop.store import run_cost

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


def test_a_window_resumed_on_another_machine_names_both(tmp_path):
    """Each session records its machine; the labeled arrays list every machine with what it generated."""
    from vrr.loop.store import machine_kind, session_machines

    bf16 = {"backend": "vllm-cpu", "cpu_kind": "AVX512-BF16", "dtype": "bfloat16", "cores": 2}
    fp32 = {"backend": "vllm-cpu", "cpu_kind": "AVX2", "dtype": "float32", "cores": 2}
    meta = {"sessions": [{"instances": 10, "seconds": 3600.0, "machine": bf16},
                         {"instances": 5, "probe_plans": 3, "seconds": 1500.0, "machine": fp32},
                         {"instances": 5, "seconds": 1700.0, "machine": fp32},
                         {"instances": 2, "seconds": 9.0}]}  # a session that did not record it
    rows = session_machines(meta)
    assert [(r["cpu_kind"], r["dtype"], r["instances"], r["probe_plans"], r["seconds"]) for r in rows] == [
        ("AVX512-BF16", "bfloat16", 10, 0, 3600.0), ("AVX2", "float32", 10, 3, 3200.0), (None, None, 2, 0, 9.0)]
    # a row's kind is its sessions' kind; the core count does not split a kind
    assert [machine_kind(r) for r in rows] == [machine_kind(bf16), machine_kind({**fp32, "cores": 8}), (None,) * 3]
    cfg = small_cfg(**{"probe.n": 0, "window.N": 4})
    paths = generate(cfg, engine=FakeEngine(), out_root=tmp_path, limit=2)
    generate(cfg, engine=FakeEngine(), out_root=tmp_path)
    machines = load_setting(paths.arrays).meta["machines"]
    assert len(machines) == 1 and machines[0]["instances"] == 4 and machines[0]["cpu_kind"] is not None


def test_run_cost_from_batch_times_when_a_session_ran_both_phases():
    from vrr.loop.store import run_cost

    meta = {"sessions": [{"instances": 3, "probe_plans": 2, "seconds": 100.0, "engine_load_seconds": 5.0}]}
    assert np.isnan(run_cost(meta)["seconds_per_instance"])  # mixed session: no split without records
    traj = [{"index": i, "batch": i // 2, "batch_seconds": [30.0, 20.0][i // 2]} for i in range(3)]
    probe = [{"index": i, "batch": 0, "batch_seconds": 40.0} for i in range(2)]
    c = run_cost(meta, {"traj": traj, "probe": probe})
    assert c["seconds_per_instance"] == pytest.approx(50.0 / 3)
    assert c["seconds_per_probe_plan"] == pytest.approx(20.0)


def test_finalize_only_cli_keeps_the_recorded_config(tmp_path):
    """`--finalize-only` rebuilds from the run's config.json: the setting's defaults (N=100, batch
    size 10) must not overwrite the recorded window or protocol."""
    paths = generate(small_cfg(), engine=FakeEngine(), out_root=tmp_path, progress=False)
    recorded = json.loads(paths.config.read_text())
    assert main(["generate", "gsm8k_cpu_favorable", "--run-name", "t_fav", "--out-root", str(tmp_path),
                 "--finalize-only"]) == 0
    assert json.loads(paths.config.read_text()) == recorded
    assert load_setting(paths.arrays).meta["config"]["batch_size"] == recorded["batch_size"] == 4
    main(["generate", "gsm8k_cpu_favorable", "--run-name", "t_fav", "--out-root", str(tmp_path),
          "--finalize-only", "--n", "6"])
    assert load_setting(paths.arrays).S.shape[0] == 6 and json.loads(paths.config.read_text())["n"] == 6


def test_cli_generates_with_the_fake_backend(tmp_path):
    """`python -m vrr generate <setting> --backend fake` runs generate -> label end to end, no vLLM."""
    assert main(["generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "3", "--probe-n", "2",
                 "--set", "K_max=1", "--set", "M=2", "--run-name", "cli", "--out-root", str(tmp_path),
                 "--no-progress"]) == 0
    st = load_setting(tmp_path / "cli" / "arrays.npz")
    assert st.S.shape == (3, 2) and st.probe_S.shape == (2,) and st.meta["engine"]["backend"] == "fake"
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["judge_model"] == "qwen2.5-coder-0.5b"


def test_judge_model_may_differ_from_the_generator(tmp_path):
    """A separate judge model gets its own engine; every role is served by the engine of its model."""
    cfg = small_cfg(setting="t_two", **{"models.judge": "judge-model", "probe.n": 0, "window.N": 4})
    calls = {"gen": [], "judge": []}

    class Tagged(_FakeEngine):
        def __init__(self, tag):
            super().__init__(TASK, model=tag)
            self.tag = tag

        def chat(self, conversations, temperature, max_tokens, n=1):
            calls[self.tag] += [PROMPTS.role_of(c) for c in conversations]
            return super().chat(conversations, temperature, max_tokens, n)

    gen, judge = Tagged("gen"), Tagged("judge")
    paths = generate(cfg, engine={"generator": gen, "judge": judge, "repairer": gen}, out_root=tmp_path)
    assert set(calls["judge"]) == {"judge"} and set(calls["gen"]) == {"generator", "repairer"}
    st = load_setting(paths.arrays)
    assert st.meta["models"] == {"generator": "qwen2.5-coder-0.5b", "judge": "judge-model",
                                 "repairer": "qwen2.5-coder-0.5b"}
    assert json.loads(paths.meta.read_text())["engine"]["other_roles"]["judge"]["model"] == "judge"


@pytest.mark.parametrize("flags, kind, bf16", [
    ("fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AMX", True),
    ("fpu sse avx2 avx512f avx512_bf16", "AVX512-BF16", True),
    ("fpu sse avx2 avx512f avx512bw", "AVX512 (no BF16)", False),
    ("fpu sse avx2 fma", "AVX2", False),
    ("fp asimd evtstrm", "other", False),
])
def test_the_machine_kind_and_the_default_cpu_dtype_follow_the_cpu_flags(monkeypatch, flags, kind, bf16):
    """The machine kind every figure names, and bfloat16 only where the CPU has BF16 instructions (a
    flag name inside another, e.g. 'avx512_bf16' in a model name line, does not count)."""
    from vrr.loop.engine import backend

    cpuinfo = f"processor\t: 0\nmodel name\t: a CPU not avx512_bf16 amx_bf16\nflags\t\t: {flags}\n"
    assert backend.cpu_kind(cpuinfo) == kind
    monkeypatch.setattr(backend, "cpu_kind", lambda cpuinfo=None: kind)
    monkeypatch.delenv("VRR_CPU_DTYPE", raising=False)
    assert backend.cpu_has_bf16() is bf16
    assert backend.default_dtype("vllm-cpu") == ("bfloat16" if bf16 else "float32")


def test_the_cpu_engine_binds_openmp_to_every_allowed_core_unless_told_otherwise():
    """vLLM's own CPU binding leaves one core of two for its scheduler; ours takes every allowed core (or a
    given share), reserves none, keeps a binding already set, and a served engine's environment is a copy."""
    import os

    from vrr.loop.engine.backend import bind_openmp, cpu_engine_env
    from vrr.loop.engine.server import cpu_server_env

    allowed = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    assert cpu_engine_env({}) == {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": allowed,
                                  "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert bind_openmp({}, [1, 3]) == {"VLLM_CPU_OMP_THREADS_BIND": "1,3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    told = {"VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_KVCACHE_SPACE": "2"}
    assert cpu_engine_env(dict(told)) == told
    before = dict(os.environ)
    served = cpu_server_env({"PATH": "/bin"})
    assert served["PATH"] == "/bin" and served["VLLM_CPU_OMP_THREADS_BIND"] == allowed
    assert dict(os.environ) == before


def test_a_batch_reports_its_round_and_role():
    """A batch of multi-turn plans runs for many minutes: the progress bar is told each round, role and plan step."""
    from vrr.loop.runner import run_batch, run_probe_batch

    cfg = small_cfg(K_max=2)
    seen: list[str] = []
    problems = TASK.load("test")[:2]
    run_batch(FakeEngine(), cfg, problems, task=TASK, stage=seen.append)
    assert seen == ["round 0: plans", "round 0 votes", "round 1 repair", "round 1 votes", "round 2 repair",
                    "round 2 votes"]
    seen.clear()
    run_batch(FakeEngine(), small_cfg(**{"repair.mode": "resample", "K_max": 1}), problems, task=TASK,
              stage=seen.append)
    assert seen == ["round 0: plans", "round 0 votes", "round 1 resample: plans", "round 1 votes"]
    seen.clear()
    run_probe_batch(FakeEngine(), cfg, problems, task=TASK, stage=seen.append)
    assert seen == ["plans", "votes"]


@pytest.mark.parametrize("quiet", [False, True])
def test_no_progress_silences_the_labelers_sandbox_bar(tmp_path, capfd, monkeypatch, quiet):
    """--no-progress reaches every bar, the MBPP labeler's sandbox batch included (shown here from 1 plan on)."""
    from vrr.loop.tasks.mbpp import MBPP

    monkeypatch.setattr(MBPP, "progress_min", 1)
    args = ["generate", "mbpp_cpu_favorable", "--backend", "fake", "--n", "2", "--probe-n", "0",
            "--set", "probe.from=null", "--set", "K_max=1", "--set", "M=2", "--run-name", "bars",
            "--out-root", str(tmp_path)]
    assert main(args + ["--no-finalize", "--no-progress"]) == 0
    capfd.readouterr()
    # --finalize-only labels in this process, where the bar's threshold is lowered
    assert main(args + ["--finalize-only"] + (["--no-progress"] if quiet else [])) == 0
    assert ("mbpp tests" in capfd.readouterr().err) is not quiet
