"""VRRRefine with a program module whose LM cannot write DSPy's field format (a small model's prose), against
DSPy's real ChatAdapter and a DummyLM that answers in plain sentences.

A repair whose reply does not parse keeps the last good plan, is counted in ``trace.kept_plans`` and the loop goes
on; a first plan that never parses raises DSPy's error with a note naming the recipe; under ``PlainTextAdapter``
(the recipe of docs/adapters.md) the prose is the answer and the loop runs."""
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from conftest import require_adapter_library as _require  # noqa: E402

dspy = _require("dspy")
from dspy.utils import DummyLM  # noqa: E402
from dspy.utils.exceptions import AdapterParseError  # noqa: E402

from vrr.adapters.dspy import PlainTextAdapter, VRRRefine  # noqa: E402
from vrr.policies.online import OnlineController  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_remote_connections")


class Prose:
    """DummyLM's output format for a model that writes sentences and no DSPy field markers (a scripted reply
    under the key ``text``; any other key is written in DSPy's format, as a model that can)."""

    def format_field_with_value(self, fields_with_values, role=None):
        if [f.name for f in fields_with_values] == ["text"]:
            return " ".join(str(v) for v in fields_with_values.values())
        return dspy.ChatAdapter().format_field_with_value(fields_with_values)


def prose_lm(replies):
    return DummyLM([{"text": r} for r in replies], adapter=Prose())


def controller():
    return OnlineController.from_parameters(M=4, k_max=3, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5,
                                            policy="vrr_stop")


def judge_rejecting_then_accepting():
    """A judge that rejects every plan of the first two rounds and accepts from the third (4 votes a round)."""
    calls = {"n": 0}

    def judge(inputs, prediction):
        calls["n"] += 1
        return calls["n"] > 8
    return judge


def test_a_repair_the_module_cannot_write_keeps_the_last_good_plan_and_says_so():
    # round 0 in DSPy's format; the repairs in prose, which ChatAdapter cannot parse
    lm = DummyLM([{"answer": "5"}] + [{"text": "The answer should be four, I think."}] * 10, adapter=Prose())
    refine = VRRRefine(dspy.Predict("question -> answer"), controller(), judge_rejecting_then_accepting(),
                       deterministic_judge=False)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        pred = refine(question="What is 2 + 2?")
    trace = pred.vrr
    assert pred.answer == "5" and trace.committed
    assert [k["round"] for k in trace.kept_plans] == list(range(1, trace.rounds))
    assert all(k["kept_round"] == 0 and "AdapterParseError" in k["error"] for k in trace.kept_plans)
    assert trace.failures == [] and trace.as_dict()["kept_plans"] == [dict(k) for k in trace.kept_plans]


def test_a_first_plan_in_prose_raises_with_the_recipe():
    refine = VRRRefine(dspy.Predict("question -> answer"), controller(), judge_rejecting_then_accepting(),
                       deterministic_judge=False, fail_count=1)
    with dspy.context(lm=prose_lm(["Four.", "It is four."]), adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        with pytest.raises(AdapterParseError) as info:
            refine(question="What is 2 + 2?")
    assert any("PlainTextAdapter" in note for note in info.value.__notes__)
    assert len(info.value.vrr.failures) == 2        # counted: fail_count retries, then raised


def test_plain_text_adapter_reads_a_small_model_s_prose():
    replies = ["Two plus two makes five.", "Two plus two is four.", "Four.", "Four, surely."]
    refine = VRRRefine(dspy.ChainOfThought("question -> answer"), controller(), judge_rejecting_then_accepting(),
                       deterministic_judge=False)
    with dspy.context(lm=prose_lm(replies), adapter=PlainTextAdapter()):
        pred = refine(question="What is 2 + 2?")
    trace = pred.vrr
    assert trace.committed and trace.kept_plans == [] and trace.failures == []
    assert [c.answer for c in trace.candidates] == replies[:trace.rounds]
    assert all(c.reasoning == "" for c in trace.candidates)


def test_plain_text_adapter_leaves_typed_outputs_to_dspy():
    with dspy.context(lm=prose_lm(["maybe"]), adapter=PlainTextAdapter()):
        with pytest.raises(AdapterParseError):
            dspy.Predict("question -> answer: int")(question="What is 2 + 2?")
