"""VRRRefine (vrr/adapters/dspy.py) against the real DSPy library and its own dummy LM (dspy.utils.DummyLM).

Without dspy these tests skip, unless VRR_REQUIRE_ADAPTERS=1 (``make test``), where they fail.
Every test checks that nothing tried to reach a non-loopback address (DummyLM is local; the LiteLLM
model-cost map is kept local by LITELLM_LOCAL_MODEL_COST_MAP).
"""
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never download LiteLLM's model-cost map


from conftest import require_adapter_library as _require  # noqa: E402


dspy = _require("dspy")
from dspy.utils import DummyLM  # noqa: E402

from vrr.adapters.dspy import VRRRefine  # noqa: E402
from vrr.policies.online import OnlineController  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_remote_connections")  # every test: no non-loopback connection


class Judge(dspy.Signature):
    """Is the answer to the question correct?"""

    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    verdict: bool = dspy.OutputField()


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


def test_sequential_voting_asks_fewer_votes_for_the_same_decisions():
    votes = [[0] * 8, [1] * 8]
    full, _, judge_full = run(stop_controller(), ["5", "4", "9"], votes)
    seq_ctl = stop_controller(sequential="exact")
    seq, _, judge_seq = run(seq_ctl, ["5", "4", "9"], votes)
    asked = consumed(judge_seq, 16)
    assert asked == seq.vrr.verifier_calls < 16 == consumed(judge_full, 16)
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


def test_a_callable_judge_votes_like_a_reward_function():
    seen = []

    def judge(inputs, prediction):
        seen.append((inputs["question"], prediction.answer))
        return prediction.answer == "4"

    gen = DummyLM([{"answer": "5"}, {"answer": "4"}, {"answer": "9"}])
    refine = VRRRefine(dspy.Predict("question -> answer"), stop_controller(), judge)
    with dspy.context(lm=gen):
        pred = refine(question="What is 2 + 2?")
    assert pred.answer == "4"
    assert seen == [("What is 2 + 2?", "5")] * 8 + [("What is 2 + 2?", "4")] * 8


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
    gen = DummyLM([{"answer": "5"}])
    graded = VRRRefine(dspy.Predict("question -> answer"), ctl, lambda inputs, pred: 0.7)
    with dspy.context(lm=gen), pytest.raises(ValueError, match="must be 0 or 1"):
        graded(question="What is 2 + 2?")
    needs_context = VRRRefine(dspy.Predict("question -> answer"), ctl, "question, answer, context -> verdict: bool")
    with dspy.context(lm=DummyLM([{"answer": "5"}])), pytest.raises(ValueError, match=r"\['context'\]"):
        needs_context(question="What is 2 + 2?")
