"""Named errors instead of silent defaults or tracebacks: a checker's time limit of 0, token counts given as a
generator, a run meta whose seconds are not numbers (``python -m vrr status``)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vrr.loop.sandbox import CheckerProcess
from vrr.loop.store import RunStoreError, run_cost, session_machines
from vrr.policies.online import OnlineController

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("seconds", [0, -1, 0.0, math.nan, math.inf, "30", True])
def test_a_checker_time_limit_must_be_positive(seconds):
    proc = CheckerProcess([sys.executable, "-c", "pass"], "test/none")
    with pytest.raises(ValueError, match="item_seconds"):
        proc.run([{"op": "x"}], item_seconds=seconds)
    with pytest.raises(ValueError, match="item_seconds"):
        CheckerProcess([sys.executable, "-c", "pass"], "test/none", item_seconds=seconds)


@pytest.mark.parametrize("tokens", [(t for t in [1, 2, 3]), iter([1, 2, 3]), map(int, "123")])
def test_token_counts_given_as_an_iterator_are_refused_unconsumed(tokens):
    ctl = OnlineController.from_parameters(M=3, k_max=2, rho0=0.2, rho1=0.1, alpha=0.3, beta=0.2, pi=0.6,
                                           policy="vrr_stop")
    before = ctl.to_json()
    with pytest.raises(ValueError, match="field 'tokens'"):
        ctl.observe([1, 1, 0], tokens=tokens)
    assert list(tokens) == [1, 2, 3] and ctl.to_json() == before
    assert ctl.observe([1, 1, 0], tokens=(1, 2, 3)).tokens == 6


@pytest.mark.parametrize("session, field", [
    ({"seconds": "abc", "instances": 3}, "sessions[0].seconds"),
    ({"seconds": 1.0, "instances": "3"}, "sessions[0].instances"),
    ({"seconds": math.nan, "instances": 3}, "sessions[0].seconds"),
    ({"seconds": -1, "instances": 3}, "sessions[0].seconds"),
    ({"seconds": 1, "engine_load_seconds": [1]}, "sessions[0].engine_load_seconds"),
    ({"seconds": 1, "engine_stats": {"generated_tokens": "many"}}, "sessions[0].engine_stats.generated_tokens"),
    ({"seconds": 1, "probe_plans": True}, "sessions[0].probe_plans"),
])
def test_run_cost_names_a_field_that_is_not_a_number(session, field):
    for call in (lambda: run_cost({"sessions": [session]}), lambda: session_machines({"sessions": [session]})):
        with pytest.raises(RunStoreError, match=f"run_meta.json: field '{field.replace('[', '.').replace(']', '.')}'"):
            call()


def test_status_shows_a_bad_run_meta_as_one_error_line(tmp_path):
    from vrr.loop.config import run_config
    from vrr.loop.engine import FakeEngine
    from vrr.loop.runner import generate
    from vrr.loop.tasks import get_task
    from vrr.settings import load_config

    overrides = {"window.N": 2, "window.start": 0, "K_max": 1, "M": 2, "engine.batch_size": 2, "probe.n": 0}
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides=overrides), setting="gsm8k_cpu_favorable")
    paths = generate(cfg, engine=FakeEngine(get_task("gsm8k")), out_root=tmp_path, progress=False)
    meta = json.loads(paths.meta.read_text())
    meta["sessions"][0]["seconds"] = "abc"
    paths.meta.write_text(json.dumps(meta))
    out = subprocess.run([sys.executable, "-m", "vrr", "status", "gsm8k_cpu_favorable", "--out-root", str(tmp_path),
                          "--no-labels"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().startswith("error: ") and "field 'sessions[0].seconds'" in out.stderr


@pytest.mark.parametrize("task_name, split", [("gsm8k", "test"), ("gsm8k", "train"), ("math500", "test"),
                                              ("mbpp", "test"), ("bfcl_single", "python"), ("bfcl_multi", "base")])
def test_a_split_is_sized_without_loading_its_problems(monkeypatch, task_name, split):
    """stored_window checks a window against the split's size: counted from the file, the problems never built
    (BFCL multi-turn's load starts bfcl-eval for the docs)."""
    from vrr.loop.tasks import bfcl, bfcl_multi, get_task

    task = get_task(task_name)
    try:
        rows = {"bfcl_single": lambda: len(bfcl._read_jsonl(bfcl._simple_files("python")[0])),
                "bfcl_multi": lambda: len(bfcl_multi._read_jsonl(bfcl_multi._files("base")[0]))}.get(
            task_name, lambda: len(task.load(split)))()
    except FileNotFoundError:
        pytest.skip(f"no local {task_name} data on this machine")
    if task_name != "mbpp":  # a JSON array: its size is its load
        monkeypatch.setattr(type(task), "load", lambda self, s: pytest.fail("the split was loaded"))
    assert task.split_size(split) == rows


def test_stored_window_does_not_load_the_split(tmp_path, monkeypatch):
    from vrr.loop.config import run_config
    from vrr.loop.store import RunPaths, stored_window
    from vrr.loop.tasks import get_task
    from vrr.settings import load_config

    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={"window.N": 3}), setting="gsm8k_cpu_favorable")
    monkeypatch.setattr(type(get_task("gsm8k")), "load", lambda self, s: pytest.fail("the split was loaded"))
    window = stored_window(RunPaths(tmp_path, "gsm8k_cpu_favorable"), cfg, tmp_path)
    assert window.traj == [] and len(window.traj_want) == 3


def test_a_shard_lock_that_vanishes_is_not_a_running_shard(tmp_path, monkeypatch):
    from vrr.loop.store import RunPaths, Shard
    from vrr.loop.store import _lock

    paths = RunPaths(tmp_path, "run", Shard(0, 2))
    paths.dir.mkdir(parents=True)
    gone = paths.dir / "generate.shard-1-of-2.lock"
    monkeypatch.setattr(RunPaths, "shard_files", lambda self, name: [gone])  # listed, removed before it is opened
    assert _lock._running_shards(paths) == []
