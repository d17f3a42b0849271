"""The record is the evidence: relabeling a stored record after redaction gives the verdicts and labels the
live run gave (vrr.loop.sandbox.redact_record, vrr.label.labeling.round_verdicts)."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from vrr.label.labeling import round_verdicts
from vrr.loop.sandbox import REDACTION_MARKER, redact_record
from vrr.loop.tasks import get_task
from vrr.loop.verifiers import ProgramJudge, ResolveJudge, make_verifier

PROBLEM = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
           "for her friends every day with four. She sells the remainder at the farmers' market daily.")


def _program_vote(task, plan: str, printed: str) -> tuple[str, int]:
    """One vote as ProgramJudge.votes casts it: the program's record and its live verdict."""
    judge = ProgramJudge()
    theirs = judge.printed_answer(printed)
    agree = bool(task.answers_agree(task.extract_answer(plan), theirs))
    trailer = f"{judge.MARKER} {'AGREE' if agree else 'DISAGREE'} {json.dumps({'printed': theirs})}"
    return f"print({printed!r})\n{trailer}", int(agree)


PRINTED = [
    # the case: the live vote reads 16 (DISAGREE); the elided text would read 18
    ("ducks lay 16 eggs per day. She eats three for breakfast, so she makes 18", "The answer is 18."),
    ("ducks lay 16 eggs per day. She eats three for breakfast", "The answer is 16."),
    ("18", "The answer is 18."),
    ("She eats three for breakfast every morning and bakes 7", "The answer is 7."),
]


@pytest.mark.parametrize("printed, plan", PRINTED)
def test_program_votes_relabel_as_they_were_cast(printed, plan):
    task = get_task("gsm8k")
    text, live = _program_vote(task, plan, printed)
    record = {"index": 0, "rounds": [{"k": 0, "plan": plan, "judge": [text], "votes": [live]}]}
    stored = redact_record(record, PROBLEM, task.extract_answer)["rounds"][0]
    assert round_verdicts(ProgramJudge(), task, stored, stored["judge"]) == [live]


@given(lead=st.sampled_from(["", "so ", "x "]), cut=st.integers(30, len(PROBLEM)),
       tail=st.sampled_from(["", ", so she makes 18", " 9", " and 16"]),
       answer=st.sampled_from(["16", "18", "9", "3"]))
@settings(max_examples=150, deadline=None)
def test_any_elided_program_output_relabels_as_cast(lead, cut, tail, answer):
    task = get_task("gsm8k")
    plan = f"The answer is {answer}."
    text, live = _program_vote(task, plan, lead + PROBLEM[cut - 30:cut] + tail)
    record = {"index": 0, "judge": [text, text], "votes": [live, live], "plan": plan}
    stored = redact_record(record, PROBLEM, task.extract_answer)
    assert round_verdicts(ProgramJudge(), task, stored, stored["judge"]) == [live, live]


def test_an_elided_judge_text_keeps_its_live_verdict():
    """An LLM judge quoting the problem: its first verdict-like word sits in the quote."""
    task = get_task("gsm8k")
    problem = "Tom says the correct total is the sum of all the apples he picked on Monday and Tuesday."
    text = f'"{problem}" That reasoning is WRONG, REJECT'
    verifier = make_verifier("llm_judge", "verdict")
    live = verifier.parse(text)
    rd = {"k": 0, "plan": "The answer is 3.", "judge": [text], "votes": [live]}
    stored = redact_record({"index": 0, "rounds": [rd]}, problem, task.extract_answer)["rounds"][0]
    assert REDACTION_MARKER in stored["judge"][0] and stored["elided_votes"] == [0]
    assert round_verdicts(verifier, task, stored, stored["judge"]) == [live]


def test_a_plan_whose_redaction_reads_another_answer_keeps_its_stored_answer():
    task = get_task("gsm8k")
    problem = "A farmer says that the answer is 12 when he counts the cows in the big red barn on the hill."
    plan = f"First we count. The answer is 5. Wait, re-reading: {problem}"
    stored = redact_record({"index": 0, "rounds": [{"k": 0, "plan": plan, "judge": []}]}, problem,
                           task.extract_answer)["rounds"][0]
    assert stored["answer"] == "12" and stored["answer_elided"] is True
    assert task.stored_answer(stored) == "12"


def test_an_untouched_record_has_no_elision_fields():
    task = get_task("gsm8k")
    rd = {"k": 0, "plan": "The answer is 3.", "judge": ["ACCEPT"], "votes": [1]}
    stored = redact_record({"index": 0, "rounds": [rd]}, PROBLEM, task.extract_answer)["rounds"][0]
    assert "elided_votes" not in stored and "answer_elided" not in stored


@pytest.mark.parametrize("elided, votes", [([3], [1]), (["0"], [1]), ([0], [2]), ([0], None), ([True], [1])])
def test_malformed_elision_fields_are_named(elided, votes):
    rd = {"k": 0, "plan": "The answer is 3.", "judge": ["ACCEPT"], "votes": votes, "elided_votes": elided}
    with pytest.raises(ValueError, match="elided_votes"):
        round_verdicts(make_verifier("llm_judge", "verdict"), get_task("gsm8k"), rd, rd["judge"])


def test_resolve_votes_are_unchanged_by_the_fix():
    assert ResolveJudge().parse('x\n# vrr-resolve: AGREE {"answer": "3"}') == 1
