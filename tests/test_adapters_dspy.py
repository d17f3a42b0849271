"""VRRRefine (vrr/adapters/dspy.py) against the real DSPy library and its own dummy LM (dspy.utils.DummyLM).

Without dspy these tests skip, unless VRR_REQUIRE_ADAPTERS=1 (``make test``), where they fail.
Every test checks that nothing tried to reach a non-loopback address (DummyLM is local; the LiteLLM
model-cost map is kept local by LITELLM_LOCAL_MODEL_COST_MAP).
"""
import asyncio
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never download LiteLLM's model-cost map


from conftest import require_adapter_library as _require  # noqa: E402


dspy = _require("dspy")
from dspy.utils import DummyLM  # noqa: E402
from dspy.utils.callback import BaseCallback  # noqa: E402

from vrr.adapters._common import DeterministicJudgeWarning  # noqa: E402
from vrr.adapters.dspy import VRRRefine  # noqa: E402
from vrr.policies.online import OnlineController  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_remote_connections")  # every test: no non-loopback connection


class Judge(dspy.Signature):
    """Is the answer to the question correct?"""

    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    verdict: bool = dspy.OutputField()


class SamplingSettings(BaseCallback):
    """A DSPy callback noting the (temperature, rollout_id) each LM call ran with."""

    def __init__(self):
        self.seen = []

    def on_lm_start(self, call_id, instance, inputs):
        self.seen.append((instance.kwargs.get("temperature"), instance.kwargs.get("rollout_id")))


def stop_controller(**kw):
    """VRR-Stop with a symmetric judge (rho0 = rho1 = 0.2) and a helpful repairer: b* = 0.8."""
    params = dict(M=8, k_max=3, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5, policy="vrr_stop")
    params.update(kw)
    return OnlineController.from_parameters(**params)


def scripted(rounds):
    """Judge answers for a list of rounds, each a list of 0/1 votes."""
    return [{"verdict": bool(v)} for votes in rounds for v in votes]


def consumed(lm, total):
    """How many scripted answers a list-mode DummyLM handed out (its iterator is shared by copies)."""
    return total - len(list(lm.answers))


def expected_decisions(controller, rounds):
    """The decisions an independent copy of the controller makes on the same vote stream."""
    ctl = OnlineController.from_dict(controller.to_dict()).start()
    out = []
    for votes in rounds:
        it = iter(votes)
        while ctl.need_vote():
            ctl.add_vote(next(it))
        out.append(ctl.decide())
        if out[-1].committed:
            break
    return out


def same(decisions, others):
    """Decisions equal field by field (repr, because a missing B_k is NaN and NaN != NaN)."""
    return [repr(d) for d in decisions] == [repr(d) for d in others]


def run(controller, answers, votes, **kw):
    gen = DummyLM([{"answer": a} for a in answers])
    judge_lm = DummyLM(scripted(votes))
    judge = dspy.Predict(Judge)
    judge.set_lm(judge_lm)
    refine = VRRRefine(dspy.Predict("question -> answer"), controller, judge, **kw)
    with dspy.context(lm=gen):
        pred = refine(question="What is 2 + 2?")
    return pred, gen, judge_lm


def test_repairs_while_the_gain_is_positive_then_commits():
    ctl = stop_controller()
    votes = [[0, 0, 0, 0, 0, 0, 0, 1], [1] * 8]
    pred, gen, judge_lm = run(ctl, ["5", "4", "9"], votes)
    assert pred.answer == "4"                          # the repaired candidate, not the first or a third
    assert consumed(gen, 3) == 2                       # one generation, one repair: the controller stopped it
    assert consumed(judge_lm, 16) == 16                # M votes per round
    want = expected_decisions(ctl, votes)
    assert [d.action for d in pred.vrr.decisions] == ["repair", "commit"]
    assert same(pred.vrr.decisions, want)                 # b_k, G_k, reasons and costs as the controller computes them
    assert pred.vrr.decisions[0].gain > 0 >= pred.vrr.decisions[1].gain
    assert (pred.vrr.verifier_calls, pred.vrr.repair_calls) == (16, 1)
    assert [c.answer for c in pred.vrr.candidates] == ["5", "4"]


def test_commits_the_first_plan_when_repair_cannot_gain():
    ctl = stop_controller(alpha=0.0)                   # alpha = 0: G_k = -b_k beta <= 0 for every belief
    pred, gen, judge_lm = run(ctl, ["5", "4"], [[0] * 8])
    assert pred.answer == "5"
    assert consumed(gen, 2) == 1
    assert pred.vrr.decisions[0].action == "commit" and pred.vrr.rounds == 1


def test_guard_returns_the_incumbent_not_the_last_plan():
    ctl = OnlineController.from_parameters(M=8, k_max=2, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5,
                                           policy="vrr_guard", delta=3)
    votes = [[1] * 6 + [0] * 2, [1] + [0] * 7, [1, 1] + [0] * 6]
    pred, gen, judge_lm = run(ctl, ["4", "7", "8"], votes)
    assert consumed(gen, 3) == 3                        # Guard spends the whole budget (K_max repairs)
    assert pred.answer == "4"                           # no later plan won by delta votes: round 0 is kept
    assert pred.vrr.candidate == 0 and pred.vrr.rounds == 3
    assert same(pred.vrr.decisions, expected_decisions(ctl, votes))


def test_a_later_plan_that_wins_by_the_margin_replaces_the_incumbent():
    ctl = OnlineController.from_parameters(M=8, k_max=2, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5,
                                           policy="vrr_guard", delta=3)
    votes = [[1, 1] + [0] * 6, [1] * 6 + [0] * 2, [1, 1, 1] + [0] * 5]
    pred, _, _ = run(ctl, ["7", "4", "8"], votes)
    assert pred.answer == "4" and pred.vrr.candidate == 1


def judge_by_answer():
    """A judge LM (DummyLM's dictionary mode) that rejects the answer 5 and accepts 4, however many votes
    a round asks for."""
    lm = DummyLM({"[[ ## answer ## ]]\n5\n": {"verdict": False}, "[[ ## answer ## ]]\n4\n": {"verdict": True}})
    judge = dspy.Predict(Judge)
    judge.set_lm(lm)
    return judge


def test_sequential_voting_asks_fewer_votes_for_the_same_decisions():
    votes = [[0] * 8, [1] * 8]
    full, _, judge_full = run(stop_controller(), ["5", "4", "9"], votes)
    seq_ctl = stop_controller(sequential="exact")
    refine = VRRRefine(dspy.Predict("question -> answer"), seq_ctl, judge_by_answer())
    with dspy.context(lm=DummyLM([{"answer": "5"}, {"answer": "4"}, {"answer": "9"}])):
        seq = refine(question="What is 2 + 2?")
    assert seq.vrr.usage["judge"]["calls"] == seq.vrr.verifier_calls < 16 == consumed(judge_full, 16)
    assert [(d.action, d.candidate) for d in seq.vrr.decisions] == [(d.action, d.candidate) for d in full.vrr.decisions]
    assert seq.answer == full.answer == "4"
    assert same(seq.vrr.decisions, expected_decisions(seq_ctl, votes))


def test_the_repair_hint_reaches_the_module():
    # Dictionary mode: DummyLM answers by the first key found in the prompt's last message.
    gen = DummyLM({"reviewers judged the solution incorrect": {"answer": "4"}, "What is 2 + 2?": {"answer": "5"}})
    judge_lm = DummyLM(scripted([[0] * 8, [1] * 8]))
    judge = dspy.Predict(Judge)
    judge.set_lm(judge_lm)
    refine = VRRRefine(dspy.Predict("question -> answer"), stop_controller(), judge)
    with dspy.context(lm=gen):
        pred = refine(question="What is 2 + 2?")
    assert [c.answer for c in pred.vrr.candidates] == ["5", "4"]   # only the repair call saw the feedback


def test_a_callable_judge_is_deterministic_and_counts_as_one_vote_per_round():
    seen = []

    def judge(inputs, prediction):
        seen.append((inputs["question"], prediction.answer))
        return prediction.answer == "4"

    gen = DummyLM([{"answer": "5"}, {"answer": "4"}, {"answer": "9"}])
    ctl = stop_controller()
    with pytest.warns(DeterministicJudgeWarning, match="M = 1 instead of M = 8"):
        refine = VRRRefine(dspy.Predict("question -> answer"), ctl, judge)
    with dspy.context(lm=gen):
        pred = refine(question="What is 2 + 2?")
    assert pred.answer == "4"
    assert seen == [("What is 2 + 2?", "5"), ("What is 2 + 2?", "4")]   # once per round, not M times
    one_vote = OnlineController.from_parameters(**{**ctl.config, "M": 1})
    assert same(pred.vrr.decisions, expected_decisions(one_vote, [[0], [1]]))
    assert "a Python function judges" in pred.vrr.judge_note


def test_a_judge_at_temperature_zero_is_deterministic_and_guard_margin_is_named():
    guard = OnlineController.from_parameters(M=8, k_max=2, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5,
                                             policy="vrr_guard", delta=3)
    with pytest.warns(DeterministicJudgeWarning, match="temperature 0.*delta = 3 exceeds one vote"):
        VRRRefine(dspy.Predict("question -> answer"), guard, Judge, judge_temperature=0)


def test_graded_rewards_vote_by_threshold_and_their_feedback_reaches_the_repair():
    rewards = {"5": dspy.Prediction(score=0.2, feedback="off by one"), "4": dspy.Prediction(score=0.9)}
    calls = []

    def reward_fn(inputs, prediction):
        calls.append(prediction.answer)
        return rewards[prediction.answer]

    # the repair prompt carries the reward's feedback; only then does the module answer "4"
    gen = DummyLM({"off by one": {"answer": "4"}, "What is 2 + 2?": {"answer": "5"}})
    refine = VRRRefine(dspy.Predict("question -> answer"), stop_controller(), reward_fn=reward_fn, threshold=0.5,
                       deterministic_judge=False)
    with dspy.context(lm=gen):
        pred = refine(question="What is 2 + 2?")
    assert pred.answer == "4" and calls == ["5"] * 8 + ["4"] * 8
    assert [(d.accepts, d.votes) for d in pred.vrr.decisions] == [(0, 8), (8, 8)]
    graded = VRRRefine(dspy.Predict("question -> answer"), stop_controller(), reward_fn=lambda i, p: 0.7,
                       deterministic_judge=False)
    with dspy.context(lm=DummyLM([{"answer": "5"}])), pytest.raises(ValueError, match="give a threshold"):
        graded(question="What is 2 + 2?")


def test_acall_asks_the_votes_of_a_round_concurrently_with_the_same_decisions():
    in_flight, peak = [0], [0]

    async def judge(inputs, prediction):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0)
        in_flight[0] -= 1
        return prediction.answer == "4"

    ctl = stop_controller()
    refine = VRRRefine(dspy.Predict("question -> answer"), ctl, judge, deterministic_judge=False)
    with dspy.context(lm=DummyLM([{"answer": "5"}, {"answer": "4"}, {"answer": "9"}])):
        pred = asyncio.run(refine.acall(question="What is 2 + 2?"))
    assert pred.answer == "4" and peak[0] == 8                  # all M votes of a round in flight together
    assert same(pred.vrr.decisions, expected_decisions(ctl, [[0] * 8, [1] * 8]))
    # with an LM judge (DummyLM's async path) and sequential voting: fewer votes, one request at a time
    seq_ctl = stop_controller(sequential="exact")
    seq = VRRRefine(dspy.Predict("question -> answer"), seq_ctl, judge_by_answer())
    with dspy.context(lm=DummyLM([{"answer": "5"}, {"answer": "4"}])):
        pred = asyncio.run(seq.acall(question="What is 2 + 2?"))
    assert pred.answer == "4" and pred.vrr.usage["judge"]["calls"] == pred.vrr.verifier_calls < 16
    assert same(pred.vrr.decisions, expected_decisions(seq_ctl, [[0] * 8, [1] * 8]))


class Calls:
    """A call counter that a module's deep copies share (VRRRefine runs a copy of the module per plan)."""

    def __init__(self):
        self.n = 0

    def __deepcopy__(self, memo):
        return self


class Flaky(dspy.Module):
    """Raises a provider error on the calls numbered in ``fails`` (1-based), answers through its predictor
    otherwise."""

    def __init__(self, fails):
        super().__init__()
        self.predict = dspy.Predict("question -> answer")
        self.fails, self.calls = set(fails), Calls()

    def forward(self, **kwargs):
        self.calls.n += 1
        if self.calls.n in self.fails:
            raise ConnectionError("provider unavailable")
        return self.predict(**kwargs)


def test_module_failures_are_retried_up_to_fail_count_and_the_trace_survives_the_error():
    judge = dspy.Predict(Judge)
    judge.set_lm(DummyLM(scripted([[0] * 8, [1] * 8])))
    refine = VRRRefine(Flaky({1, 2}), stop_controller(), judge, fail_count=2)
    with dspy.context(lm=DummyLM([{"answer": "5"}, {"answer": "4"}])):
        pred = refine(question="What is 2 + 2?")
    assert pred.answer == "4"
    assert [(f["role"], f["round"]) for f in pred.vrr.failures] == [("generator", 0), ("generator", 0)]
    assert "ConnectionError: provider unavailable" in pred.vrr.failures[0]["error"]
    # round 0 answers, then every repair raises: the third failure exceeds fail_count=2
    judge = dspy.Predict(Judge)
    judge.set_lm(DummyLM(scripted([[0] * 8])))
    failing = VRRRefine(Flaky({2, 3, 4}), stop_controller(), judge, fail_count=2)
    with dspy.context(lm=DummyLM([{"answer": "5"}])), pytest.raises(ConnectionError) as err:
        failing(question="What is 2 + 2?")
    trace = err.value.vrr
    assert [d.action for d in trace.decisions] == ["repair"] and len(trace.failures) == 3
    assert [f["role"] for f in trace.failures] == ["repairer"] * 3
    assert trace.error.startswith("ConnectionError") and not trace.committed


def test_the_judge_is_hidden_from_optimizers_and_samples_at_its_own_temperature():
    settings = SamplingSettings()
    refine = VRRRefine(dspy.ChainOfThought("question -> answer"), stop_controller(k_max=0), Judge,
                       temperature=0.7, judge_temperature=0.3)
    assert [name for name, _ in refine.named_predictors()] == ["module.predict"]
    assert isinstance(refine.judge, dspy.Predict)
    refine.judge.set_lm(DummyLM(scripted([[1] * 8])))
    with dspy.context(lm=DummyLM([{"reasoning": "r", "answer": "4"}]), callbacks=[settings]):
        pred = refine(question="What is 2 + 2?")
    assert pred.answer == "4"
    assert settings.seen == [(0.7, 0)] + [(0.3, r) for r in range(8)]   # own temperature and rollout ids


def test_usage_is_reported_per_role():
    pred, _, _ = run(stop_controller(), ["5", "4", "9"], [[0] * 7 + [1], [1] * 8])
    assert {role: row["calls"] for role, row in pred.vrr.usage.items()} == {"generator": 1, "judge": 16,
                                                                            "repairer": 1}
    assert all(row["total_tokens"] == 0 for row in pred.vrr.usage.values())   # DummyLM reports zero tokens


def test_the_trace_keeps_the_committed_candidate_and_the_controller_is_reusable():
    ctl = stop_controller()
    gen = DummyLM([{"answer": "5"}, {"answer": "4"}, {"answer": "6"}, {"answer": "4"}])
    judge_lm = DummyLM(scripted([[0] * 8, [1] * 8, [0] * 8, [1] * 8]))
    judge = dspy.Predict(Judge)
    judge.set_lm(judge_lm)
    refine = VRRRefine(dspy.Predict("question -> answer"), ctl, judge)
    with dspy.context(lm=gen, trace=[]):
        first = refine(question="What is 2 + 2?")
        trace = list(dspy.settings.trace)
        second = refine(question="What is 2 + 2?")
    assert len(trace) == 1 and trace[0][2].answer == "4"         # the committed call, no judge calls
    assert first.answer == second.answer == "4" and second.vrr.rounds == 2
    assert ctl.round == 0 and not ctl.done                      # the caller's controller was only copied


def test_bad_inputs_are_clear_errors():
    ctl = stop_controller()
    with pytest.raises(TypeError, match="dspy.Module"):
        VRRRefine(lambda **kw: None, ctl, Judge)
    with pytest.raises(TypeError, match="OnlineController"):
        VRRRefine(dspy.Predict("question -> answer"), {"M": 8}, Judge)
    with pytest.raises(ValueError, match="verdict_field 'score'"):
        VRRRefine(dspy.Predict("question -> answer"), ctl, Judge, verdict_field="score")
    with pytest.raises(TypeError, match="exactly one of judge"):
        VRRRefine(dspy.Predict("question -> answer"), ctl, Judge, reward_fn=lambda i, p: 1)
    with pytest.raises(ValueError, match="vote_batch"):
        VRRRefine(dspy.Predict("question -> answer"), ctl, Judge, vote_batch=0)
    with pytest.raises(RuntimeError, match="calibrate"):
        VRRRefine(dspy.Predict("question -> answer"), None, Judge)(question="What is 2 + 2?")
    needs_context = VRRRefine(dspy.Predict("question -> answer"), ctl, "question, answer, context -> verdict: bool")
    with dspy.context(lm=DummyLM([{"answer": "5"}])), pytest.raises(ValueError, match=r"\['context'\]"):
        needs_context(question="What is 2 + 2?")


# Calibration set: per example, (first answer, repaired answer, the judge's M=4 votes on the first answer).
CALIBRATION = [("4", "4", [1, 1, 1, 0]), ("4", "5", [1, 1, 1, 1]), ("5", "4", [0, 0, 1, 0]),
               ("5", "6", [0, 0, 0, 0]), ("6", "4", [1, 0, 0, 0]), ("4", "4", [1, 1, 0, 1])]


def test_calibrate_collects_votes_labels_and_repairs_from_a_labeled_devset():
    trainset = [dspy.Example(question=f"Problem {i}: what is 2 + 2?", answer="4").with_inputs("question")
                for i in range(len(CALIBRATION))]
    gen = DummyLM([{"answer": a} for first, repaired, _ in CALIBRATION for a in (first, repaired)])
    judge_lm = DummyLM(scripted([votes for _, _, votes in CALIBRATION]))
    judge = dspy.Predict(Judge)
    judge.set_lm(judge_lm)
    refine = VRRRefine(dspy.Predict("question -> answer"), None, judge)
    with dspy.context(lm=gen):
        report = refine.calibrate(trainset, lambda example, pred, trace=None: pred.answer == example.answer,
                                  M=4, k_max=2, policy="vrr_stop")
    assert consumed(gen, 12) == 12 and consumed(judge_lm, 24) == 24
    assert {role: row["calls"] for role, row in refine.calibration_trace.usage.items()} == {
        "generator": 6, "judge": 24, "repairer": 6}
    # first plans: valid ones got 3, 4, 3 accepts; invalid ones 1, 0, 1 (what the adapter handed over)
    assert report.data["accept_histogram_valid"] == [0, 0, 0, 2, 1]
    assert report.data["accept_histogram_invalid"] == [1, 2, 0, 0, 0]
    assert (report.n_plans, report.n_repairs) == (6, 6)
    # labeled MLE on these counts: rho0 = 2/12 false accepts, rho1 = 2/12 false rejects, pi = 3/6;
    # repairs: 2 of 3 invalid plans fixed (alpha), 1 of 3 valid plans broken (beta)
    assert (report.rho0, report.rho1, report.pi) == pytest.approx((1 / 6, 1 / 6, 0.5))
    assert (report.alpha, report.beta) == pytest.approx((2 / 3, 1 / 3))
    assert refine.controller.M == 4 and refine.controller.k_max == 2 and refine.controller.policy == "vrr_stop"
    assert report.mode in ("stop", "guard") and report.reason


def test_calibrate_errors_name_the_example_and_a_deterministic_judge_calibrates_one_vote():
    refine = VRRRefine(dspy.Predict("question -> answer"), None, Judge)
    with pytest.raises(ValueError, match="give M"):
        refine.calibrate([dspy.Example(question="q", answer="4").with_inputs("question")], lambda e, p: 1)
    with pytest.raises(ValueError, match=r"trainset\[0\].*with_inputs"):
        refine.calibrate([dspy.Example(question="q", answer="4")], lambda e, p: 1, M=4)
    with pytest.warns(DeterministicJudgeWarning):
        exact = VRRRefine(dspy.Predict("question -> answer"), None, lambda inputs, pred: pred.answer == "4")
    trainset = [dspy.Example(question=f"Problem {i}", answer="4").with_inputs("question") for i in range(4)]
    gen = DummyLM([{"answer": a} for a in ("4", "4", "5", "4", "5", "5", "4", "6")])
    with dspy.context(lm=gen):
        report = exact.calibrate(trainset, lambda example, pred: float(pred.answer == example.answer),
                                 metric_threshold=0.5, k_max=1, policy="vrr_stop")
    assert report.M == 1 and exact.controller.M == 1
    assert report.data["accept_histogram_valid"] == [0, 2] and report.data["accept_histogram_invalid"] == [2, 0]
    with pytest.raises(ValueError, match="one vote"):
        exact.calibrate(trainset, lambda example, pred: 1, M=4)


# ---------------------------------------------------------------- a real dspy.LM on an OpenAI-compatible server
class LoopbackServer:
    """An OpenAI-compatible chat server on 127.0.0.1 that does not follow DSPy's field format for the judge.

    A request whose prompt names the ``verdict`` field is the judge's: it is answered in plain text from
    ``judge_replies`` in turn ("ACCEPT", "REJECT", or text with no verdict). Any other request is the program's,
    answered in DSPy's chat format with ``answer``. No reply carries ``usage``, as some servers send none."""

    def __init__(self, judge_replies, answer="4"):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.judge_replies, self.judge_requests, self.program_requests = list(judge_replies), [], []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = "\n".join(str(m.get("content")) for m in body["messages"])
                with server.lock:
                    if "verdict" in prompt:
                        server.judge_requests.append(body)
                        text = server.judge_replies.pop(0)
                    else:
                        server.program_requests.append(body)
                        text = f"[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]"
                data = json.dumps({"id": "r", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("mode", ["sync", "acall"])
def test_a_dspy_lm_on_an_openai_compatible_server_whose_judge_ignores_dspy_format(mode):
    """dspy.LM("openai/<model>", api_base=...) against a loopback server: the judge's plain-text replies are
    votes, a reply without a verdict is an unparsable vote (a rejection, listed in trace.unparsable), one LM
    call per vote (no JSON-adapter retry), the decisions are an independent controller's on the same votes,
    and the server's missing usage leaves the tokens unknown (None), not 0."""
    replies = ["REJECT", "I am not sure about this one.", "REJECT", "ACCEPT", "REJECT", "no idea", "REJECT", "REJECT",
               "ACCEPT", "ACCEPT", "Yes, ACCEPT.", "ACCEPT", "REJECT", "ACCEPT", "ACCEPT", "ACCEPT"]
    server = LoopbackServer(replies)
    try:
        lm = dspy.LM("openai/loopback-model", api_base=server.url, api_key="EMPTY", cache=False)
        with dspy.context(lm=lm):
            qa = VRRRefine(dspy.Predict("question -> answer"), stop_controller(),
                           judge=dspy.Predict("question, answer -> verdict"))
            pred = qa(question="What is 2 + 2?") if mode == "sync" else asyncio.run(qa.acall(question="What is 2 + 2?"))
    finally:
        server.close()
    trace = pred.vrr
    votes = [v for round_votes in trace.votes for v in round_votes]
    assert len(server.judge_requests) == trace.verifier_calls == len(votes) == 16
    assert len(server.program_requests) == trace.rounds == 2
    unparsable = [r for r in replies[:16] if "ACCEPT" not in r and "REJECT" not in r]
    got = [u["reply"] for u in trace.unparsable]
    assert len(unparsable) == 2 and sorted(got) == sorted(unparsable)
    if mode == "sync":   # acall asks a round's votes concurrently, so their order is the server's
        assert got == unparsable and votes == [int("ACCEPT" in r) for r in replies[:16]]
    assert sorted(votes[:8]) == sorted(int("ACCEPT" in r) for r in replies[:8])
    twin = stop_controller()
    expected = [twin.observe(v) for v in trace.votes]
    assert [d.action for d in trace.decisions] == [d.action for d in expected] == ["repair", "commit"]
    assert pred.answer == "4" and trace.candidate == 1
    judge_usage = trace.usage["judge"]
    assert judge_usage["calls"] == 16 and judge_usage["calls_without_usage"] == 16
    assert judge_usage["total_tokens"] is None and trace.usage["generator"]["input_tokens"] is None


def test_calibrate_reports_the_mode_that_then_runs():
    """A judge whose votes do not separate the classes (J-hat = 0 < J_min) with policy="vrr_stop": the report
    says Stop, as the controller then runs. Labeled rates keep the belief calibrated at any J, so Algorithm 1
    would run Stop too and no CalibrationWarning is raised."""
    import warnings

    from vrr.policies.online_calibration import CalibrationWarning

    same_votes = [1, 0, 1, 0]
    rows = [("4", "4"), ("5", "4"), ("4", "5"), ("5", "5"), ("4", "4"), ("5", "4")]
    trainset = [dspy.Example(question=f"Problem {i}: what is 2 + 2?", answer="4").with_inputs("question")
                for i in range(len(rows))]
    gen = DummyLM([{"answer": a} for pair in rows for a in pair])
    judge_lm = DummyLM(scripted([same_votes] * len(rows)))
    judge = dspy.Predict(Judge)
    judge.set_lm(judge_lm)
    refine = VRRRefine(dspy.Predict("question -> answer"), None, judge)
    with dspy.context(lm=gen), warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        report = refine.calibrate(trainset, lambda example, pred, trace=None: pred.answer == example.answer,
                                  M=4, k_max=2, policy="vrr_stop")
    assert report.j_hat == 0.0 and report.mode == refine.controller.mode == "stop"
    assert report.reason == refine.controller.to_dict()["state"]["reason"]
    judge.set_lm(DummyLM(scripted([[1, 1, 1, 1]])))
    with dspy.context(lm=DummyLM([{"answer": "4"}])):
        pred = refine(question="Problem 0: what is 2 + 2?")
    assert pred.vrr.decisions[0].mode == report.mode
