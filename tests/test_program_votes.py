"""Program-of-thought votes (``llm_program``): each vote is a program the judge writes for the problem
alone, run in the sandbox; it accepts when what it prints agrees with the plan's final answer."""
import gzip
import json

import numpy as np

from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate
from vrr.loop.tasks import get_task
from vrr.loop.verifiers import ProgramJudge, make_verifier
from vrr.settings import load_config


class Scripted:
    """An engine stand-in that returns fixed judge outputs (only the program writer is asked)."""

    def __init__(self, outputs):
        self.outputs = outputs

    def chat(self, conversations, temperature, max_tokens, n=1, **_):
        assert all(c[0]["content"].startswith("You are a careful programmer") for c in conversations)
        assert all(c[-1] == {"role": "assistant", "content": "```python\n"} for c in conversations)
        return [self.outputs[:n] for _ in conversations]


def test_votes_compare_what_the_program_prints_with_the_plans_answer(tmp_path):
    task = get_task("gsm8k")
    problem = task.load("test")[0]
    right = task.extract_answer(task.synthetic_plan(problem, True))
    marker = tmp_path / "written-by-a-vote"
    outputs = [f"x = {right}\nprint(x)\n", f"print({right} + 1)\n", "while True:\n    pass\n",
               f"open({str(marker)!r}, 'w').write('x')\nprint({right})\n", "print(", f"print('{right}')\n```"]
    judge = make_verifier("llm_program")
    assert isinstance(judge, ProgramJudge)
    plans = [task.synthetic_plan(problem, True), task.synthetic_plan(problem, False)]
    records, votes = judge.votes(Scripted(outputs), task, [problem, problem], plans, M=len(outputs))
    # right plan: the exact program and the one printing the right number as a string agree
    assert votes[0] == [1, 0, 0, 0, 0, 1]
    # the wrong plan's answer is printed by no program
    assert votes[1] == [0, 0, 0, 0, 0, 0]
    assert not marker.exists()  # the vote that writes a file ran in the sandbox and failed there
    assert [judge.parse(r) for r in records[0]] == votes[0]
    assert "timeout" in records[0][2] or "cpu time" in records[0][2]
    fb = judge.feedback(records[0])
    assert fb.startswith("4 of 6 independent programs") and f"'{int(float(right)) + 1}'" in fb.replace('"', "'")


def test_a_gsm8k_window_with_program_votes_through_the_fake_engine(tmp_path):
    o = {"window.N": 4, "K_max": 1, "M": 4, "probe.n": 0, "verifier.kind": "llm_program", "engine.batch_size": 4}
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides=o), setting="gsm8k-program")
    t = get_task("gsm8k")
    paths = generate(cfg, engine=FakeEngine(t), out_root=tmp_path, progress=False, task=t)
    assert finalize_setting(paths, cfg) == "complete"
    st = load_setting(paths.arrays)
    # the fake program writer prints the right answer for even votes and the fake's wrong answer for odd
    # votes, so every plan (right, or wrong the fake's way) gets exactly half of the votes
    assert (st.S == 2).all()
    recs = [json.loads(line) for line in gzip.open(paths.traj, "rt")]
    assert all("# vrr-program: " in j for r in recs for rd in r["rounds"] for j in rd["judge"])
    assert np.array_equal(st.y[:, 0], np.array([1, 0, 1, 0]))
    meta = json.loads(paths.meta.read_text())
    rule = meta["sessions"][-1]["vote_execution"]
    assert rule["hash_seeds"] == [0] and rule["sandbox"]["tool"].startswith("bubblewrap")
    assert "execution" not in st.meta  # GSM8K's label runs no code


def test_a_program_vote_gets_a_program_sized_budget_unless_the_setting_names_one():
    # gsm8k_cpu_favorable names its one-word verdict's 4 tokens (the committed run's budget); a setting that names
    # none gets its verifier kind's
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={"verifier.kind": "llm_program",
                                                                   "verifier.max_tokens": None}), setting="b")
    assert cfg.judge_tokens() == 256
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={"verifier.kind": "llm_program",
                                                                   "verifier.max_tokens": 300}), setting="b")
    assert cfg.judge_tokens() == 300
    assert run_config(load_config("gsm8k_cpu_favorable"), setting="b").judge_tokens() == 4  # one-word verdict
