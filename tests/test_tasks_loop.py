"""Every task through the whole loop (generate -> label) with the fake engine backend, the labels
checked against the task's official checker run independently on the stored outputs; the execution
verifiers of code tasks; per-task repair feedback."""
import gzip
import json

import numpy as np
import pytest

from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate
from vrr.loop.tasks import get_task
from vrr.loop.tasks.bfcl import checker_available
from vrr.settings import SettingConfigError, load_config

SPLIT = {"gsm8k": "test", "math500": "test", "mbpp": "test", "bfcl_single": "python"}


def run_fake(tmp_path, task, verifier="llm_judge", n=4, **over):
    o = {"task": task, "window.split": SPLIT[task], "window.N": n, "K_max": 1, "M": 4, "probe.n": 0,
         "verifier.kind": verifier, "engine.batch_size": 4}
    if verifier == "visible_test":
        o["calibration.method"] = "labeled_mle"
    o.update(over)
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides=o), setting=f"{task}-{verifier}")
    t = get_task(task)
    paths = generate(cfg, engine=FakeEngine(t), out_root=tmp_path, progress=False, task=t)
    assert finalize_setting(paths, cfg) == "complete"
    return t, paths, load_setting(paths.arrays)


def stored_rounds(paths):
    return [json.loads(line) for line in gzip.open(paths.traj, "rt")]


@pytest.mark.parametrize("task", ["gsm8k", "math500", "mbpp", "bfcl_single"])
def test_generate_label_through_the_fake_engine(tmp_path, task):
    if task == "bfcl_single" and not checker_available():
        pytest.skip("the bfcl-eval venv is missing: bash scripts/install_bfcl_eval.sh")
    t, paths, st = run_fake(tmp_path, task)
    # the fake writes a correct plan for even indices and the repair flips it
    y0 = np.array([1 - i % 2 for i in range(4)])
    assert (st.y[:, 0] == y0).all() and (st.y[:, 1] == 1 - y0).all()
    assert st.meta["task"] == task and st.meta["label_rule"] == t.label_rule
    # the official checker, run again on the stored answers, agrees with every stored label
    recs = stored_rounds(paths)
    again = t.label_rounds([(rd, t.problem(r["split"], r["index"])) for r in recs for rd in r["rounds"]])
    assert np.array_equal(np.array(again).reshape(st.y.shape), st.y)


def test_mbpp_with_judge_written_asserts_executed_in_the_sandbox(tmp_path):
    t, paths, st = run_fake(tmp_path, "mbpp", verifier="llm_asserts")
    # the fake test writer writes the shown test: correct plans pass every vote, wrong ones none
    assert (st.S[st.y == 1] == 4).all() and (st.S[st.y == 0] == 0).all()
    judge = stored_rounds(paths)[1]["rounds"][0]["judge"]
    assert all("# vrr-exec: FAIL" in j for j in judge)   # index 1 starts wrong


def test_shown_test_verifier_is_deterministic_and_must_be_calibrated_on_labels(tmp_path):
    _, _, st = run_fake(tmp_path, "mbpp", verifier="visible_test")
    assert set(np.unique(st.S)) <= {0, 4}
    with pytest.raises(SettingConfigError, match="calibration.method"):
        load_config("gsm8k_cpu_favorable", overrides={"verifier.kind": "visible_test"})


def test_code_repair_feedback_carries_the_failing_shown_test(tmp_path):
    seen = []

    class Spy(FakeEngine):
        def chat(self, conversations, temperature, max_tokens, n=1):
            seen.extend(c[-1]["content"] for c in conversations if "Reviewer feedback:" in c[-1]["content"])
            return super().chat(conversations, temperature, max_tokens, n)

    t = get_task("mbpp")
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={
        "task": "mbpp", "window.N": 2, "K_max": 1, "M": 2, "probe.n": 0}), setting="fb")
    generate(cfg, engine=Spy(t), out_root=tmp_path, progress=False, task=t)
    wrong = [s for s in seen if "Running the shown test" in s]
    assert len(seen) == 2 and len(wrong) == 1 and "AssertionError" in wrong[0]
    # the hidden tests (the label) never reach the loop
    hidden = t.problem("test", 1).answer.tests[1:]
    assert not any(h in s for s in seen for h in hidden)


def test_an_execution_verifier_needs_a_code_task(tmp_path):
    with pytest.raises(NotImplementedError, match="cannot run tests"):
        run_fake(tmp_path, "gsm8k", verifier="llm_asserts")


def test_math500_with_the_process_reward_model_verifier(tmp_path):
    """The PRM verifier is deterministic: M identical votes, calibrated on labels (App. H)."""
    _, paths, st = run_fake(tmp_path, "math500", verifier="prm", **{"calibration.method": "labeled_mle"})
    assert (st.S[st.y == 1] == 4).all() and (st.S[st.y == 0] == 0).all()
    judge = stored_rounds(paths)[0]["rounds"][0]["judge"]
    assert len(set(judge)) == 1 and "# vrr-prm: weakest step" in judge[0]


def test_gsm8k_with_the_re_solving_verifier(tmp_path):
    """Each vote is the judge's own solution: it agrees with a correct plan when the judge solves it."""
    _, paths, st = run_fake(tmp_path, "gsm8k", verifier="llm_resolve")
    # the fake solves even indices correctly: there a correct plan gets 4 agreeing votes, a wrong one 0
    even = np.arange(4) % 2 == 0
    assert (st.S[even][st.y[even] == 1] == 4).all() and (st.S[even][st.y[even] == 0] == 0).all()
    judge = stored_rounds(paths)[0]["rounds"][0]["judge"]
    assert all("# vrr-resolve: AGREE" in j for j in judge)


def test_re_solve_repair_does_not_show_the_earlier_attempt():
    from vrr.loop.tasks import get_task

    P = get_task("mbpp").prompts
    conv = P.repair_messages("Write f.", "def f(): return 1", "1 of 2 tests failed.", "re-solve")
    assert "def f(): return 1" not in conv[-1]["content"] and "1 of 2 tests failed." in conv[-1]["content"]
    assert P.role_of(conv) == "repairer"


@pytest.mark.parametrize("continuation, test", [
    ("f(1) == 2\n", "assert f(1) == 2"),
    ("f([1,\n   2]) == [2,\n 1]\nprint('x')", "assert f([1,\n   2]) == [2,\n 1]"),
    ("f(1) == 2, 'msg'  # comment", "assert f(1) == 2, 'msg'"),
    ("f(1) == 2\n```\nmore text", "assert f(1) == 2"),
    ("f(1) == [1, 2", None),                      # cut at max_tokens: no complete statement
    ("f(1) == 2; x = 1", "assert f(1) == 2"),
    ("\ndef f(x):\n    return x", None),            # wrote code, not a test
    ("", None),
])
def test_assert_judge_reads_the_first_complete_assert_of_the_prefilled_reply(continuation, test):
    from vrr.loop.verifiers import ASSERT_PREFILL, AssertJudge

    assert AssertJudge.extract_assert(continuation) == test
    conv = AssertJudge.messages("Task text")
    assert conv[-1] == {"role": "assistant", "content": ASSERT_PREFILL} and ASSERT_PREFILL.endswith("assert ")


def test_a_chat_batch_is_all_prefilled_or_none():
    from vrr.loop.engine.backend import continues_reply

    fresh = [{"role": "user", "content": "q"}]
    prefilled = fresh + [{"role": "assistant", "content": "```python\nassert "}]
    assert continues_reply([prefilled, prefilled]) is True
    assert continues_reply([fresh]) is False
    with pytest.raises(ValueError, match="mixes prefilled"):
        continues_reply([fresh, prefilled])
