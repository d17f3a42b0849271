"""BFCL simple plug-in: loader, call extraction, labels by the REAL bfcl-eval AST checker (its own venv,
scripts/install_bfcl_eval.sh), malformed outputs, PM perturbations. Problems and possible answers are
read from ../shared/data at test time; none is written here.

Without the bfcl-eval venv the checker tests skip, unless VRR_REQUIRE_BFCL=1 (CI), where they fail."""
import ast
import json
import sys
import threading
from pathlib import Path

import pytest

from vrr.loop.prompts import problem_of
from vrr.loop.tasks import bfcl
from vrr.loop.tasks.bfcl import BFCLSimple, extract_answer

N_KNOWN = 25


@pytest.fixture(scope="module")
def task():
    return BFCLSimple()


@pytest.fixture(scope="module")
def problems(task):
    return task.load("python")


@pytest.fixture(scope="module")
def checker(bfcl_venv):
    """The real checker (the ``bfcl_venv`` fixture skips, or fails under VRR_REQUIRE_BFCL=1, without it)."""
    return bfcl.checker()


def _call(problem, args: dict, name: str | None = None) -> str:
    (gold_name, _), = problem.ground_truth[0].items()
    return bfcl._render(name or gold_name, args, problem.functions, problem.language)


def _gold_args(problem) -> dict:
    (_, params), = problem.ground_truth[0].items()
    return {k: bfcl._pick(o) for k, opts in params.items() for o, ok in [bfcl._first(opts)] if ok}


# --------------------------------------------------------------------------- without the checker
def test_loader_languages_and_alias(task, problems):
    assert len(problems) == 400 and len(task.load("java")) == 100 and len(task.load("javascript")) == 50
    assert [p.question for p in task.load("test")] == [p.question for p in problems]
    p = problems[4]
    assert p.ref == {"dataset": "bfcl", "split": "python", "index": 4} and p.answer["id"] == "simple_python_4"
    a, b = p.answer["request"]
    assert p.question.startswith(bfcl.REQUEST_HEAD) and a == len(bfcl.REQUEST_HEAD) < b
    assert bfcl.FUNCTIONS_HEAD in p.question[b:] and p.functions[0]["name"] in p.question[b:]
    assert "Java 8 SDK" in task.load("java")[0].question
    with pytest.raises(ValueError, match="language"):
        task.load("train")


@pytest.mark.parametrize("text,expected", [
    ("```python\nfoo(a=1)\n```", "foo(a=1)"),
    ("Sure.\nfoo(a=1, b='x)')\nThis calls foo.", "foo(a=1, b='x)')"),
    ("[foo(a=1), bar(b=2)]", "[foo(a=1), bar(b=2)]"),
    ("first\ngeo.dist(x=4, y=6)\nthen\ngeo.dist(x=3, y=6)", "geo.dist(x=3, y=6)"),
    ("  foo (a=[1, 2], b={'k': (1, 2)}) trailing", "foo (a=[1, 2], b={'k': (1, 2)})"),
    ("foo(a=1", "foo(a=1"),
    ("I cannot call any function.", None),
    ("", None),
    (None, None),
    (7, None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_missing_venv_raises_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("VRR_BFCL_PYTHON", str(tmp_path / "nope" / "bin" / "python"))
    with pytest.raises(bfcl.BFCLCheckerMissing, match="install_bfcl_eval.sh"):
        bfcl.checker()
    assert not bfcl.checker_available()


def test_worker_imports_only_bfcl_eval_and_the_standard_library():
    tree = ast.parse(Path(bfcl.WORKER).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert all(n.level == 0 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert roots - set(sys.stdlib_module_names) == {"bfcl_eval"}


def test_perturbation_edits_only_the_request_deterministically(task):
    kinds = set()
    for lang in ("python", "java", "javascript"):
        for p in task.load(lang):
            s1, s2 = task.make_perturbation(p, seed=1), task.make_perturbation(p, seed=1)
            assert s1 == s2 and set(s1) == {"kind", "start", "end", "orig", "new", "seed"}
            assert len(json.dumps(s1)) < 200  # a span, never the text
            kinds.add(s1["kind"])
            if s1["kind"] == "none":
                continue
            a, b = p.answer["request"]
            assert a <= s1["start"] < s1["end"] <= b and p.question[s1["start"]:s1["end"]] == s1["orig"]
            q2 = task.apply_perturbation(p.question, s1)
            assert q2 != p.question and q2[b + len(s1["new"]) - len(s1["orig"]):] == p.question[b:]
    assert kinds == {"numeric", "condition", "none"}


def test_prompts_keep_the_problem_recoverable(task, problems):
    p = problems[9]
    assert problem_of(task.prompts.generator_messages(p.question)) == p.question
    for style in ("verdict", "check", "reason"):
        assert problem_of(task.prompts.judge_messages(p.question, "f(x=1)", style)) == p.question
    for style in ("self-refine", "reflexion"):
        assert task.prompts.role_of(task.prompts.repair_messages(p.question, "f(x=1)", "fb", style)) == "repairer"


# --------------------------------------------------------------------------- the real checker
def test_known_calls_valid_and_corrupted_calls_invalid(task, problems, checker):
    """Calls built from the possible answers are valid; a wrong name, a wrong value or a missing
    required argument is not (the first problems, one batch)."""
    items, expect = [], []
    for p in problems[:N_KNOWN]:
        args = _gold_args(p)
        required = p.functions[0]["parameters"]["required"]
        items.append(({"answer": _call(p, args)}, p)); expect.append(1)
        items.append(({"plan": f"```python\n{_call(p, args)}\n```"}, p)); expect.append(1)
        items.append(({"answer": _call(p, args, name="not_" + p.functions[0]["name"])}, p)); expect.append(0)
        items.append(({"plan": task.synthetic_plan(p, False)}, p)); expect.append(0)
        if required:
            items.append(({"answer": _call(p, {k: v for k, v in args.items() if k != required[0]})}, p))
            expect.append(0)
    starts = checker.starts + (0 if checker._alive() else 1)
    assert task.label_rounds(items) == expect
    assert checker.starts == starts  # one worker process for the whole batch


@pytest.mark.parametrize("lang,min_valid", [("python", 400), ("javascript", 50), ("java", 85)])
def test_synthetic_plans_of_every_problem(task, checker, lang, min_valid):
    """The fake backend's plans: every wrong one is invalid; correct ones are valid except for a few Java
    items whose possible answers the bfcl-eval Java parser cannot reproduce (HashMap bodies, quoted
    Array<String> elements)."""
    probs = task.load(lang)
    good = task.check([(extract_answer(task.synthetic_plan(p, True)), p) for p in probs])
    bad = task.check([(extract_answer(task.synthetic_plan(p, False)), p) for p in probs])
    assert sum(v["valid"] for v in good) >= min_valid
    assert not any(v["valid"] for v in bad)


def test_malformed_outputs_are_invalid_with_a_reason(task, problems, checker):
    p = problems[0]
    good = _call(p, _gold_args(p))
    name = p.functions[0]["name"]
    first = p.functions[0]["parameters"]["required"][0]
    outputs = {
        "no call": None,
        "prose": "I am not sure which function to call.",
        "unparsable": good[:-3],
        "400 digits": _call(p, {**_gold_args(p), first: int("9" * 400)}),
        "400-digit output": "9" * 400,
        "json": '{"name": "%s"}' % name,
        "two calls": f"[{good}, {good}]",
        "positional": f"{name}(10, 5)",
        "code in arithmetic": f"{name}({first}=__import__('os').getpid() + 1)",
        "lambda": f"{name}({first}=lambda: 3)",
        "wrong type": _call(p, {**_gold_args(p), first: "ten"}),
    }
    verdicts = task.check([(o, p) for o in outputs.values()])
    assert {k: v["valid"] for k, v in zip(outputs, verdicts)} == {k: False for k in outputs}
    assert all(v["error"] for v in verdicts)
    assert verdicts[list(outputs).index("code in arithmetic")]["error_type"] == "vrr:unsafe_expression"
    assert task.label_rounds([({"plan": "no call here"}, p), ({"plan": good}, p)]) == [0, 1]


def test_a_runaway_call_times_out_and_the_worker_goes_on(problems, checker):
    p = problems[0]
    first = p.functions[0]["parameters"]["required"][0]
    reqs = [{"functions": p.functions, "ground_truth": p.ground_truth, "language": "python", "output": o}
            for o in (_call(p, _gold_args(p)).replace(f"{first}=", f"{first}=10**10**10+0*", 1),
                      _call(p, _gold_args(p)))]
    out = checker.run(reqs, item_seconds=2)
    assert out[0]["error_type"] == "vrr:timeout" and out[1]["valid"] is True


def test_labels_from_a_non_main_thread(task, problems, checker):
    items = [({"answer": _call(p, _gold_args(p))}, p) for p in problems[:10]]
    out = []
    t = threading.Thread(target=lambda: out.append(task.label_rounds(items)))
    t.start()
    t.join(timeout=120)
    assert out == [[1] * 10]
    assert checker.info["bfcl_eval"] == bfcl.BFCL_EVAL_VERSION


def test_a_later_block_without_a_call_does_not_hide_the_call():
    from vrr.loop.tasks.bfcl import extract_answer

    text = "```python\nget_weather(city='Oslo')\n```\nAnswer format:\n```\nyour call here\n```"
    assert extract_answer(text) == "get_weather(city='Oslo')"
    assert extract_answer("```\nno call at all\n```") == "no call at all"


def test_stray_text_and_an_echoed_answer_format_after_the_call_do_not_replace_it():
    """Lines that do not start a call (explanations, the echoed answer format) are never
    read as the call (synthetic plans)."""
    from vrr.loop.tasks.bfcl import extract_answer

    text = ("area.circle(radius=3)\nThis calls area.circle with radius 3 (= 28.27 square units).\n"
            "Put the call alone on the last line or in a ```python block.")
    assert extract_answer(text) == "area.circle(radius=3)"
