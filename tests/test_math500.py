"""MATH-500 plug-in: loader, boxed-answer extraction, math-verify labels in a worker process (also from
a non-main thread), malformed outputs, PM perturbations. Problems and answers are read from
../shared/data at test time; none is written here."""
import json
import sys
import threading

import pytest

from vrr.loop.prompts import problem_of
from vrr.loop.tasks import math500
from vrr.loop.tasks.math500 import MATH500, CheckerProcess, check_answers, extract_answer

N_KNOWN = 25


@pytest.fixture(scope="module")
def task():
    return MATH500()


@pytest.fixture(scope="module")
def problems(task):
    return task.load("test")


def test_loader_reads_the_local_copy(problems):
    assert len(problems) == 500
    assert problems[7].ref == {"dataset": "math500", "split": "test", "index": 7}
    assert all(p.gold == p.answer and p.gold.strip() for p in problems)
    with pytest.raises(ValueError, match="split"):
        math500.load_math500("train")


@pytest.mark.parametrize("text,expected", [
    ("so $x = \\boxed{5}$.", "5"),
    ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\left( 2, \\frac{\\pi}{3} \\right)}", "\\left( 2, \\frac{\\pi}{3} \\right)"),
    ("\\boxed {x^{2}+1} done", "x^{2}+1"),
    ("the set \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\boxed{ 7 }", "7"),
    ("truncated \\boxed{\\frac{1}{", None),
    ("no box, the answer is 5", None),
    ("", None),
    (None, None),
    (42, None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_known_answers_label_valid_and_corrupted_ones_invalid(task, problems):
    """The first problems' gold answers, boxed, are valid; gold + 1 (or another expression) is not."""
    items = [({"plan": f"Work.\nSo the answer is $\\boxed{{{p.gold}}}$."}, p) for p in problems[:N_KNOWN]]
    items += [({"answer": math500.wrong_answer(p.gold)}, p) for p in problems[:N_KNOWN]]
    y = task.label_rounds(items)
    assert y == [1] * N_KNOWN + [0] * N_KNOWN
    assert task.is_valid(problems[0].gold, problems[0]) and not task.is_valid("0", problems[0])


def test_synthetic_plans_of_all_problems(task, problems):
    """Correct synthetic plans are valid and wrong ones invalid on every problem (the fake backend)."""
    items = [({"plan": task.synthetic_plan(p, correct)}, p) for p in problems for correct in (True, False)]
    assert task.label_rounds(items) == [1, 0] * len(problems)


def test_equivalent_forms_are_accepted_by_math_verify():
    pairs = [("0.5", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "\\frac12"), ("2\\sqrt{2}", "\\sqrt{8}"),
             ("x=3", "3"), ("\\frac{\\pi}{4}", "\\pi/4"), ("3", "4"), ("(1,2)", "(2,1)")]
    assert [v["valid"] for v in check_answers(pairs)] == [True, True, True, True, True, False, False]


def test_malformed_outputs_are_invalid_with_a_reason_and_never_raise(problems):
    p = problems[3]
    answers = [None, "", "   ", "\\frac{", "}}{{", "1" * 400, "x" * 6000, 12345, ["a"], "\\boxed{"]
    verdicts = check_answers([(a, p.gold) for a in answers])
    assert [v["valid"] for v in verdicts] == [False] * len(answers)
    assert all(v["error"] for v in verdicts)
    assert verdicts[0]["error_type"] == "vrr:no_answer" and verdicts[6]["error_type"] == "vrr:too_long"
    assert extract_answer("no box at all") is None


def test_a_runaway_expression_times_out_and_the_worker_goes_on(problems):
    p = problems[3]
    v = check_answers([("10^{10^{10^{10}}}", p.gold), (p.gold, p.gold)], seconds=2)
    assert v[0] == {"valid": False, "error": "math-verify timeout after 2 s", "error_type": "vrr:timeout"}
    assert v[1]["valid"] is True


def test_labels_from_a_non_main_thread(task, problems):
    """math-verify's SIGALRM timeout fails outside the main thread; the worker process makes it safe."""
    from math_verify import parse

    err = []
    t = threading.Thread(target=lambda: err.append(_raises(lambda: parse("$1$"))))
    t.start()
    t.join()
    assert err == [True]  # the problem is real: direct use in a thread raises
    items = [({"answer": p.gold}, p) for p in problems[:10]] + [({"answer": "-1234567"}, problems[0])]
    out = []
    t = threading.Thread(target=lambda: out.append(task.label_rounds(items)))
    t.start()
    t.join(timeout=120)
    assert out == [[1] * 10 + [0]]


def _raises(fn) -> bool:
    try:
        fn()
    except ValueError:
        return True
    return False


def test_checker_process_kills_a_hung_worker_and_restarts():
    """The parent's backstop: a worker silent past the deadline is killed; the next item gets a new one."""
    code = ("import json,sys,time\nprint(json.dumps({'ready': True}), flush=True)\n"
            "for line in sys.stdin:\n    r = json.loads(line)\n    time.sleep(60) if r['hang'] else None\n"
            "    print(json.dumps({'valid': True, 'error': ''}), flush=True)\n")
    w = CheckerProcess(lambda: [sys.executable, "-c", code], "test", item_seconds=1.0)
    try:
        out = w.run([{"hang": False}, {"hang": True}, {"hang": False}])
        assert [o["valid"] for o in out] == [True, False, True]
        assert out[1]["error_type"] == "vrr:timeout" and w.starts == 2
    finally:
        w.close()
    broken = CheckerProcess(lambda: [sys.executable, "-c", "import sys; sys.exit('no checker here')"], "broken")
    with pytest.raises(RuntimeError, match="did not start"):
        broken.run([{}])


def test_perturbation_is_deterministic_span_only_and_changes_the_statement(task, problems):
    kinds = set()
    for p in problems[:200]:
        s1, s2 = task.make_perturbation(p, seed=3), task.make_perturbation(p, seed=3)
        assert s1 == s2
        assert set(s1) == {"kind", "start", "end", "orig", "new", "seed"}
        assert len(s1["orig"]) <= 20 and len(json.dumps(s1)) < 200  # a span, never the statement
        kinds.add(s1["kind"])
        q2 = task.apply_perturbation(p.question, s1)
        if s1["kind"] == "none":
            assert q2 == p.question
            continue
        assert p.question[s1["start"]:s1["end"]] == s1["orig"] != s1["new"]
        assert q2 == p.question[:s1["start"]] + s1["new"] + p.question[s1["end"]:]
        asy = [(m.start(), m.end()) for m in math500._ASY.finditer(p.question)]
        assert not any(a <= s1["start"] < b for a, b in asy)  # figures are never edited
    assert {"numeric", "condition"} <= kinds
    specs = {json.dumps(task.make_perturbation(problems[5], seed=s)) for s in range(8)}
    assert len(specs) > 1  # the seed matters
    assert task.apply_perturbation(problems[0].question, None) == problems[0].question


def test_prompts_keep_the_problem_recoverable(task, problems):
    """The fake engine finds the problem back in every conversation (no blank line in the format)."""
    p = problems[11]
    assert problem_of(task.prompts.generator_messages(p.question)) == p.question
    for style in ("verdict", "check", "reason"):
        conv = task.prompts.judge_messages(p.question, "plan", style)
        assert problem_of(conv) == p.question and task.prompts.role_of(conv) == "judge"
    for style in ("self-refine", "reflexion"):
        conv = task.prompts.repair_messages(p.question, "plan", "feedback", style)
        assert task.prompts.role_of(conv) == "repairer" and "\\boxed{}" in conv[-1]["content"]


def test_an_echoed_empty_box_is_passed_over_and_a_truncated_last_box_is_no_answer():
    from vrr.loop.tasks.math500 import extract_answer

    assert extract_answer("so \\boxed{\\frac{1}{2}}. Put your final answer within \\boxed{}.") == "\\frac{1}{2}"
    assert extract_answer("\\boxed{2} and then \\boxed{5") is None
    assert extract_answer("Put your final answer within \\boxed{}.") is None


def test_a_stored_empty_answer_is_read_again_from_the_plan_unless_redaction_cut_its_box():
    from vrr.loop.tasks import get_task

    task = get_task("math500")
    assert task.stored_answer({"answer": "", "plan": "\\boxed{3}. Within \\boxed{}."}) == "3"
    assert task.stored_answer({"answer": "", "plan": "\\boxed{-[problem text elided]} \\boxed{}"}) is None
    assert task.stored_answer({"answer": "7", "plan": "\\boxed{8}"}) == "7"   # what generation extracted stands


def test_stray_constructs_after_the_box_and_template_echoes_do_not_replace_it():
    """Only box contents are read, so a later ``\\frac``, number or answer sentence outside
    a box never replaces the boxed answer; an echoed empty box is passed over (synthetic plans)."""
    from vrr.loop.tasks.math500 import extract_answer

    assert extract_answer("So \\boxed{15}. Half of 129 is \\frac{129}{2}, not needed.") == "15"
    assert extract_answer("\\boxed{9}\nThe answer is 4. Put your final answer within \\boxed{}.") == "9"
    assert extract_answer("First \\boxed{2}; after the correction, \\boxed{3}.") == "3"  # the last box is final
