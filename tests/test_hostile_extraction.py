"""Hostile model text through every task's extraction and GSM8K's number grammar.

Each case is text a model could write that once crashed a labeler, took minutes, or was read as the
wrong number: numbers in notations the grammar must refuse or read exactly, values beyond every
float, digits of other scripts, nesting deeper than a recursive parser goes, literals beyond the
int/str conversion limit, and shapes that make a backtracking pattern quadratic. Extraction must give
an answer or "no answer" (an invalid plan, with the reason logged), never an exception; the sizes are
such that a quadratic reading takes minutes, while a linear one takes milliseconds.
"""
import json
import logging

import pytest

from vrr.loop.tasks import bfcl, bfcl_multi, gsm8k, math500, mbpp
from vrr.loop.tasks.base import MAX_MODEL_TEXT_CHARS, reads_model_text

DEEP = 20_000        # nesting depth of the deep cases (Python's recursion limit is 1,000)
HUGE_DIGITS = 5_000  # beyond the 4,300-digit int/str conversion limit


# --------------------------------------------------------------------------- the number grammar (labels)
@pytest.mark.parametrize("plan, gold, valid", [
    ("The answer is 1e3.", "1", 0),                        # a mantissa is never read without its exponent
    ("The answer is 1e3.", "1000", 1),
    ("The answer is 1,8.", "18", 0),                        # commas only between groups of three digits
    ("The answer is 1,8.", "1", 0),
    ("The answer is 18,000.", "18000", 1),
    ("The answer is 1e309.", "1", 0),                       # beyond the double range: no number
    ("The answer is 1e999999999.", "1", 0),                 # 10**999999999 is never built
    ("The answer is " + "7" * HUGE_DIGITS + ".", "7", 0),   # no int() beyond the conversion limit
    ("\\boxed{" + "9" * HUGE_DIGITS + "}", "9", 0),
    ("The answer is \\frac{1}{" + "3" * HUGE_DIGITS + "}.", "0", 0),
    ("The answer is \u0661\u0668.", "18", 1),               # one script of decimal digits reads as digits
    ("The answer is \uff11\uff18.", "18", 1),
    ("The answer is 1\u0668.", "18", 0),                    # mixed scripts: no number
    ("The answer is inf.", "0", 0),
    ("The answer is NaN.", "0", 0),
    ("The answer is 10000000000000001.", "10000000000000000", 0),   # integers compare exactly
])
def test_gsm8k_labels_read_the_grammar(plan, gold, valid):
    assert gsm8k.label(plan, gold) == valid


# --------------------------------------------------------------------------- the number grammar (votes)
@pytest.mark.parametrize("printed, plan_answer, agree", [
    ("1e309", "1", False), ("2e-05", "2", False), ("1e+16", "10000000000000000", True),
    ("1e+16", "10000000000000001", False), ("inf", "1", False), ("-inf", "1", False), ("nan", "1", False),
    ("1,8", "18", False), ("9" * HUGE_DIGITS, "9", False), ("4.2800574699772956e+20", "4", False),
])
def test_gsm8k_program_votes_read_the_grammar(printed, plan_answer, agree):
    assert gsm8k.answers_agree(plan_answer, printed) is agree


# --------------------------------------------------------------------------- every task's extraction
def _nested_fences(depth: int) -> str:
    return "```\n" * depth + "```python\ndef f():\n    return 1\n```\n" + "```\n" * depth


HOSTILE = [
    # (task module, text, the answer it must give)
    (gsm8k, "\\boxed{" * DEEP + "4" + "}" * DEEP, "4"),                        # nested boxes: linear
    (gsm8k, "\\boxed{" * DEEP, None),                                           # unclosed boxes
    (gsm8k, "The answer is " * DEEP + "x" * 50_000, None),                     # phrases on one long line
    (gsm8k, "1" * 150_000 + ",5", None),                                       # a digit run ending ill-formed
    (gsm8k, "x" * (MAX_MODEL_TEXT_CHARS + 1) + " The answer is 5.", None),     # longer than any output
    (math500, "\\boxed{" * DEEP + "\\boxed{}", None),                           # unclosed boxes: minutes before
    (math500, "\\boxed{ " * DEEP + "\\boxed{ }", None),
    (math500, "\\boxed{" * DEEP + "x" + "}" * DEEP, "x"),
    (math500, "\\boxed{" + "\\{" * DEEP + "}", "\\{" * DEEP),                   # escaped braces are literal
    (mbpp, "```\n" * DEEP, None),                                              # fences only
    (mbpp, _nested_fences(999), "def f():\n    return 1"),                     # deep nesting
    (mbpp, "```python\nx = '\ud800'\n```", "x = '\ud800'"),                    # a lone surrogate stays text
    (bfcl, " " * 100_000 + "x", None),                                          # blanks: quadratic before
    (bfcl, " " * 50_000 + "[" + " " * 50_000 + "x", None),
    (bfcl, "f(" * DEEP, "f(" * DEEP),                                           # unclosed: the rest, as written
    # a plan without "Turn k:" headers is turn 1; no call there is [[1, None]]
    (bfcl_multi, "<tool_call>" + "[" * DEEP + "]" * DEEP + "</tool_call>", [[1, None]]),   # RecursionError
    (bfcl_multi, "[cd(folder=0x" + "f" * 4_000 + ")]", [[1, None]]),           # ast.unparse ValueError
    (bfcl_multi, '{"name": "cd", "arguments": {"folder": ' + "1" * HUGE_DIGITS + "}}", [[1, None]]),
    (bfcl_multi, "f(" * DEEP + ")" * DEEP, [[1, None]]),                        # too deep for the parser
    (bfcl_multi, "Turn 1: [ls()]\nTurn " + "9" * HUGE_DIGITS + ": [pwd()]", [[1, "[ls()]"]]),  # no int()
]


@pytest.mark.parametrize("module, text, want", HOSTILE, ids=[f"{m.__name__.rsplit('.', 1)[1]}-{i}"
                                                             for i, (m, _, _) in enumerate(HOSTILE)])
def test_hostile_text_gives_an_answer_or_none_never_an_exception(module, text, want):
    assert module.extract_answer(text) == want


def test_a_failure_while_reading_is_no_answer_with_its_reason_logged(caplog):
    """The one guard: whatever a reader raises on model text becomes "no answer", and the log says why."""
    read_json = reads_model_text()(json.loads)
    with caplog.at_level(logging.WARNING, logger="vrr.loop.tasks"):
        assert read_json("[" * 100_000 + "]" * 100_000) is None
        assert read_json("x" * (MAX_MODEL_TEXT_CHARS + 1)) is None
    reasons = [r.getMessage() for r in caplog.records]
    assert any("RecursionError" in m for m in reasons) and any("characters (more than" in m for m in reasons)
    assert read_json("[1, 2]") == [1, 2]


def test_the_plugins_label_hostile_plans_invalid_without_raising():
    """Through the plug-ins' own entry points (the label and the vote comparison)."""
    from vrr.loop.tasks import get_task

    task = get_task("gsm8k")
    problem = task.problem("test", 0)
    for text in ("\\boxed{" + "9" * HUGE_DIGITS + "}", "The answer is 1e309.", "\\boxed{" * DEEP):
        assert task.label_round({"plan": text}, problem) == 0
    assert not task.answers_agree("18", "1e309") and not task.answers_agree(None, "18")


# --------------------------------------------------------------------------- linear reading of every extractor
EXTRACTORS = {"gsm8k": gsm8k.extract_answer, "gsm8k.parse_number": gsm8k.parse_number,
              "math500": math500.extract_answer, "mbpp": mbpp.extract_answer, "bfcl": bfcl.extract_answer,
              "bfcl_multi.extract_calls": bfcl_multi.extract_calls, "bfcl_multi": bfcl_multi.extract_answer}
# repeated units that make a backtracking or rescanning reader quadratic in time or memory
UNITS = ["f(\n", "[f(\n", "f(\"\n", "```python\n", "```\n```python\n", "<tool_call>", "Turn 1: f(\n", "\\boxed{",
         "The answer is ", "#### ", "1,", "- 1 "]
CPU_SECONDS = 2.0     # per reading of the largest text a reader takes (generous: a linear reading takes ~0.1 s)
PEAK_BYTES = 64 << 20  # per reading (a quadratic one took 1.8 GB)


def _cost(fn, text: str) -> tuple[float, int]:
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.process_time()
    try:
        fn(text)
    finally:
        seconds = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return seconds, peak


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_every_extractor_reads_hostile_text_in_linear_time_and_memory(name):
    """The largest text a reader takes (just under MAX_MODEL_TEXT_CHARS) and 1 MB, made of each hostile unit:
    bounded CPU time (time.process_time) and peak memory (tracemalloc)."""
    fn = EXTRACTORS[name]
    for unit in UNITS:
        for size in (MAX_MODEL_TEXT_CHARS - 10, 1 << 20):
            text = (unit * (size // len(unit) + 1))[:size]
            seconds, peak = _cost(fn, text)
            assert seconds < CPU_SECONDS and peak < PEAK_BYTES, (name, unit, size, seconds, peak)


@pytest.mark.parametrize("text, calls", [
    ("f(\n" * 8000, None),                                       # the case: 21 CPU-s before
    ("ls()\n" + "f(\n" * 8000, None),                            # beyond the work budget: no answer
    ("[ls()]\n" + "f(\n" * 8000, "[ls()]"),                      # the first call list that parses
    ("<tool_call>" * 3 + '<tool_call>{"name": "ls", "arguments": {}}</tool_call>', None),
    ('<tool_call>{"name": "ls", "arguments": {}}</tool_call>' + "<tool_call>" * 5000, "[ls()]"),
    ("cd(folder='a')\nls()\n", "[cd(folder='a'), ls()]"),       # ordinary plans read as before
    ("f(\n  g(1)\n)", "[f(g(1)), g(1)]"),
], ids=range(7))
def test_bfcl_multi_call_extraction_is_bounded_and_unchanged_on_plans(text, calls):
    assert bfcl_multi.extract_calls(text) == calls
