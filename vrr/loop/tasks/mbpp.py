"""MBPP: the task plug-in (loader, prompts, code extraction, sandboxed unit-test label, PM-stress edits).

* Data: the hand-verified ``sanitized-mbpp.json`` (427 problems) of Austin et al. (2021), from
  ``$VRR_MBPP_DIR``, else ``../shared/data/mbpp`` (``vrr.common.paths.shared_data_dirs``), else the
  Hugging Face hub (``google-research-datasets/mbpp``, config ``sanitized``). Splits follow the
  upstream README and the HF ``mbpp`` loader (v1.0.2) for the sanitized config, by task_id:
  prompt 1-10 (7 problems), test 11-510 (257), validation 511-600 (43), train 601-974 (120), in file
  order. ``Problem.index`` is the 0-based row within the split.
* What the model sees (``Problem.question``): the problem statement, then
  ``Your code should pass this test:`` and the task's FIRST test assert, as in the original MBPP
  prompt format (which lists the tests); the first assert fixes the function's name and signature.
  The other asserts stay hidden. The prompt wording (``PROMPTS``) is ours: the paper does not
  print its MBPP prompts.
* ``extract_answer(text)``: the code of the last ```` ```python ```` block (also ``py``/``python3``;
  an untagged block only when there is no tagged one; an unclosed final block counts, as when the
  output was cut at the token budget; fences may nest, as in ```` ``` ```` around ```` ```python ````).
  ``None`` when there is no code. It never raises.
* The label (App. B: "sandboxed unit tests on MBPP (5-second timeout)"): the code, after the task's
  ``test_imports``, passes ALL of its ``test_list`` asserts under
  :data:`vrr.loop.sandbox.LABEL_RULE` (5 s of CPU time per process, every hash seed of the rule,
  the bubblewrap sandbox). The code runs in a recording program; the asserts are judged by a
  replay program the code never ran in (:func:`vrr.loop.sandbox.run_tests`), so it cannot see the hidden
  tests or fake their outcome. The code is never compiled or run in this process.
* ``make_perturbation`` / ``apply_perturbation`` (PM stress, App. B): one number, number word or
  condition word of the statement (never of the shown test) is changed, deterministic per
  ``(seed, index)``; the spec stores only the edited span, like GSM8K's.
* ``synthetic_plan``: the reference solution (correct) or a function of the right name that
  returns ``None`` (incorrect), for the fake engine.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import re
import textwrap
from dataclasses import dataclass, replace
from types import SimpleNamespace
from pathlib import Path

from .. import sandbox
from ..prompts import PromptSet
from ..sandbox import LABEL_RULE, REDACTION_MARKER, VOTE_RULE, ExecutionRule, run_tests
from .base import Problem, Task, local_file, missing_message, reads_model_text, rows_from_hub
from .gsm8k import _numeric_spans, _perturb_number, _rng
from .gsm8k import apply_perturbation as _apply_span_edit

DATASET = "mbpp"
SPLIT_TASK_IDS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
SHOWN_TEST_HEAD = "\nYour code should pass this test:\n"
MAX_CODE_CHARS = 50_000  # longer "solutions" are labeled invalid without running them


@dataclass(frozen=True)
class Reference:
    """What MBPP's label needs: the reference code, the asserts, their imports; and where the
    statement ends inside ``Problem.question`` (perturbations stay inside it)."""

    task_id: int
    code: str
    tests: tuple
    imports: tuple
    statement_chars: int


@dataclass(frozen=True)
class CheckResult:
    """One code answer checked against one problem's tests: ``valid`` and, when not, ``reason``
    (never the test's source text)."""

    valid: bool
    reason: str
    seconds: float = 0.0


# --------------------------------------------------------------------------- loading
def local_path() -> Path | None:
    """The first local ``sanitized-mbpp.json`` among the dataset's folders (None if none)."""
    return local_file(DATASET, "sanitized-mbpp.json", "VRR_MBPP_DIR")


_CACHE: dict[tuple, list[Problem]] = {}


def _problem(split: str, index: int, row: dict) -> Problem:
    statement = row["prompt"].strip()
    tests = tuple(row["test_list"])
    question = statement + SHOWN_TEST_HEAD + tests[0].strip()
    ref = Reference(task_id=int(row["task_id"]), code=row["code"], tests=tests,
                    imports=tuple(row.get("test_imports") or ()), statement_chars=len(statement))
    return Problem(split, index, question, ref, DATASET)


def load_mbpp(split: str = "test", path: str | os.PathLike | None = None, allow_hub: bool = True) -> list[Problem]:
    """All sanitized-MBPP problems of ``split`` (task_id ranges in ``SPLIT_TASK_IDS``), in file order."""
    if split not in SPLIT_TASK_IDS:
        raise ValueError(f"split must be one of {tuple(SPLIT_TASK_IDS)}")
    p = Path(path) if path else local_path()
    key = (split, str(p))
    if key in _CACHE:
        return _CACHE[key]
    lo, hi = SPLIT_TASK_IDS[split]
    if p is not None and p.exists():
        rows = [r for r in json.loads(p.read_text(encoding="utf-8")) if lo <= int(r["task_id"]) <= hi]
    else:
        def from_hub():
            import datasets  # lazy: only online users need it

            return [dict(r) for r in datasets.load_dataset("google-research-datasets/mbpp", "sanitized")[split]]

        rows = rows_from_hub(missing_message("sanitized-mbpp.json", path, DATASET, "VRR_MBPP_DIR"),
                             from_hub if allow_hub else None)
    probs = [_problem(split, i, r) for i, r in enumerate(rows)]
    _CACHE[key] = probs
    return probs


# --------------------------------------------------------------------------- answers
_PY_TAGS = {"python", "py", "python3", "py3"}
_LINE_FENCE = re.compile(r"[ \t]*```")                        # a fence at a line start
_NESTED_OPENER = re.compile(r"[ \t]*```([A-Za-z0-9_+.-]+)[ \t]*")  # a fence and a language tag, nothing else
_ANY_OPENER = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)")           # outside blocks a fence may follow text


def code_blocks(text: str) -> list[tuple[int, str, int, int]]:
    """The fenced blocks of a text as ``(start, tag, content start, content end)``, ordered by where they
    open (spans, not copies: nested blocks never copy the text once per level). Outside blocks, a fence
    opens one (with the word after it as its tag; it may follow text on its line). Inside a block, a line
    that is a fence and a language tag alone opens a nested block (models nest ```` ```python ```` inside
    ```` ``` ````); any other line starting with a fence (```` ``` ````, ```` ```` ````, ```` ``` Explanation... ````)
    closes the innermost open block. Blocks still open at the end run to the end (an output cut at the
    token budget)."""
    blocks, stack, pos = [], [], 0  # stack: (start, tag, content start)
    for line in text.splitlines(keepends=True):
        end = pos + len(line)
        if "```" in line:  # a line without a fence neither opens nor closes a block
            body = line.rstrip("\r\n")
            if stack:
                nested = _NESTED_OPENER.fullmatch(body)
                if nested:
                    stack.append((pos, nested.group(1).lower(), end))
                elif _LINE_FENCE.match(body):
                    start, tag, content_start = stack.pop()
                    blocks.append((start, tag, content_start, pos))
            else:
                m = _ANY_OPENER.search(body)
                if m:
                    stack.append((pos + m.start(), m.group(1).lower(), end))
        pos = end
    blocks += [(start, tag, content_start, len(text)) for start, tag, content_start in stack]
    return sorted(blocks)


@reads_model_text()
def extract_answer(text: str | None) -> str | None:
    """The code of the last ```python block of a model output (module docstring); None if none."""
    if "```" not in text:
        return None
    blocks = code_blocks(text)
    chosen = [b for b in blocks if b[1] in _PY_TAGS] or [b for b in blocks if not b[1]]
    if not chosen:
        return None
    _, _, a, b = chosen[-1]
    code = textwrap.dedent(text[a:b]).strip("\n").rstrip()
    return code if code.strip() else None


def _pre_check(answer) -> str | None:
    """Why an answer is invalid without running it (None: it must run)."""
    if answer is None:
        return "no ```python code block in the output"
    if not isinstance(answer, str):
        return f"answer is a {type(answer).__name__}, not code"
    if not answer.strip():
        return "empty code block"
    if len(answer) > MAX_CODE_CHARS:
        return f"code longer than {MAX_CODE_CHARS} characters"
    return None


def check_many(pairs: list[tuple[object, Problem]], rule: ExecutionRule = LABEL_RULE, parallel: int = 2,
               progress: bool = False) -> list[CheckResult]:
    """Check many (code answer, problem) pairs against the problems' tests with
    :func:`vrr.loop.sandbox.run_tests` under ``rule``, ``parallel`` programs at a time; identical
    pairs (same code, same problem, same tests) run once. Never raises on a malformed answer: it is
    invalid with a reason."""
    out: list[CheckResult | None] = [None] * len(pairs)
    to_run: dict[tuple, list[int]] = {}
    for i, (answer, problem) in enumerate(pairs):
        why = _pre_check(answer)
        if why is not None:
            out[i] = CheckResult(False, why)
        else:
            # the tests are part of the key: the execution verifiers run one plan against M different asserts
            to_run.setdefault((answer, problem.answer.task_id, tuple(problem.answer.tests)), []).append(i)
    keys = list(to_run)
    items = [(key[0], "\n".join(pairs[to_run[key][0]][1].answer.imports), list(key[2])) for key in keys]
    results = run_tests(items, rule=rule, parallel=parallel, progress=progress, desc="mbpp tests")
    for key, r in zip(keys, results):
        res = CheckResult(r.passed, r.reason, r.seconds)
        for i in to_run[key]:
            out[i] = res
    return out  # type: ignore[return-value]


def entry_point(problem: Problem) -> str:
    """The name of the function the tests call: the first name called in the first test that the
    reference code defines at top level (else the first non-builtin name the test calls)."""
    ref: Reference = problem.answer
    defined = [n.name for n in ast.parse(ref.code).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    called = [n.func.id for n in ast.walk(ast.parse(ref.tests[0]))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    for name in called:
        if name in defined:
            return name
    return next((n for n in called if n not in dir(builtins)), defined[-1] if defined else "solution")


# --------------------------------------------------------------------------- perturbations
# Word-level swaps that change what the function must compute (case kept on the first letter).
CONDITION_SWAPS = {
    "maximum": "minimum", "minimum": "maximum", "max": "min", "min": "max",
    "largest": "smallest", "smallest": "largest", "biggest": "smallest", "highest": "lowest",
    "lowest": "highest", "longest": "shortest", "shortest": "longest", "greatest": "least",
    "greater": "smaller", "smaller": "greater", "larger": "smaller", "less": "more", "more": "less",
    "fewer": "more", "first": "last", "last": "first", "even": "odd", "odd": "even",
    "positive": "negative", "negative": "positive", "sum": "product", "product": "sum",
    "increasing": "decreasing", "decreasing": "increasing", "ascending": "descending",
    "descending": "ascending", "lowercase": "uppercase", "uppercase": "lowercase", "lower": "upper",
    "upper": "lower", "before": "after", "after": "before", "left": "right", "right": "left",
    "front": "rear", "rear": "front", "next": "previous", "previous": "next", "all": "any",
    "any": "all", "common": "uncommon", "unique": "duplicate", "duplicate": "unique",
    "prime": "composite", "square": "cube", "cube": "square", "squares": "cubes", "cubes": "squares",
    "area": "perimeter", "perimeter": "area", "union": "intersection", "intersection": "union",
    "true": "false", "false": "true", "remove": "keep", "begins": "ends", "ends": "begins",
    "start": "end", "end": "start", "vowels": "consonants", "consonants": "vowels", "add": "subtract",
    "difference": "sum", "multiply": "add", "divisible": "indivisible", "equal": "unequal",
    "volume": "surface area", "circumference": "area", "nth": "(n+1)th", "once": "twice",
    "octagonal": "hexagonal", "hexagonal": "octagonal", "decagonal": "octagonal", "tetrahedral": "triangular",
    "triangular": "square", "sort": "reverse", "sorted": "reversed", "binary": "octal", "contains": "lacks",
    "present": "absent", "exists": "is missing", "count": "sum", "ratio": "difference", "zeroes": "ones",
    "integer": "float", "tuple": "list", "tuples": "lists", "space": "comma", "camel": "pascal",
    "snake": "kebab", "lucas": "fibonacci", "xor": "and", "angle": "magnitude", "depth": "width",
    "longer": "shorter", "shorter": "longer", "median": "mean", "mean": "median", "reverse": "sort",
    "empty": "non-empty", "polar": "cartesian", "blank": "non-blank", "drop": "keep", "power": "root",
}
NUMBER_WORDS = {
    "one": "two", "two": "three", "three": "four", "four": "five", "five": "six", "twice": "three times",
    "second": "third", "third": "fourth", "single": "double", "half": "a third",
}


def _word_spans(statement: str, table: dict) -> list[tuple[int, int, str, str]]:
    out = []
    for m in re.finditer(r"[A-Za-z]+", statement):
        new = table.get(m.group(0).lower())
        if new is not None:
            if m.group(0)[:1].isupper():
                new = new[:1].upper() + new[1:]
            out.append((m.start(), m.end(), m.group(0), new))
    return out


def make_perturbation(problem: Problem, seed: int, kind: str = "auto") -> dict:
    """Deterministic PM edit of problem ``problem.index`` under ``seed``: one span of the statement.

    ``kind``: "numeric" (a number or number word), "condition" (a swap from ``CONDITION_SWAPS``),
    or "auto" (uniform over all candidate spans). The spec is ``{"kind", "start", "end", "orig",
    "new", "seed"}`` with offsets into the ORIGINAL question; "none" when the statement has no
    candidate."""
    statement = problem.question[:problem.answer.statement_chars]
    rng = _rng(seed, problem.index, salt="mbpp-pm")
    numeric = [(s, e, tok, None) for s, e, tok in _numeric_spans(statement)] + _word_spans(statement, NUMBER_WORDS)
    condition = _word_spans(statement, CONDITION_SWAPS)
    pool = {"numeric": [("numeric", c) for c in numeric], "condition": [("condition", c) for c in condition]}
    cands = pool.get(kind) if kind != "auto" else pool["numeric"] + pool["condition"]
    if cands is None:
        raise ValueError("kind must be 'auto', 'numeric' or 'condition'")
    if not cands:
        return {"kind": "none", "start": 0, "end": 0, "orig": "", "new": "", "seed": seed}
    cands.sort(key=lambda c: c[1][0])
    chosen_kind, (s, e, orig, new) = cands[rng.randrange(len(cands))]
    if new is None:
        new = _perturb_number(orig, rng)
    return {"kind": chosen_kind, "start": s, "end": e, "orig": orig, "new": new, "seed": seed}


def apply_perturbation(question: str, spec: dict | None) -> str:
    """The repairer's (perturbed) copy of the question, rebuilt from the original and a spec."""
    return _apply_span_edit(question, spec)


# --------------------------------------------------------------------------- prompts and plug-in
ANSWER_FORMAT = ("Put your complete solution (the function and the imports it needs) in one ```python "
                 "code block at the end of your response.")

PROMPTS = PromptSet(
    generator_system="You are an expert Python programmer. You write correct, self-contained Python functions.",
    generator_instruction="Write a Python function that solves the task.",
    answer_format=ANSWER_FORMAT,
    judge_system=("You are a strict code reviewer. You check whether a proposed Python solution to a "
                  "programming task is correct."),
    judge_instructions={
        "verdict": ("Is the proposed code correct for every valid input of the task, including the shown test? "
                    "Reply with exactly one word: ACCEPT if it is correct, REJECT if it is not."),
        "check": ("Check the code's logic and the shown test in at most two short sentences. Then write a last "
                  "line that is exactly \"VERDICT: ACCEPT\" if the code is correct or \"VERDICT: REJECT\" if "
                  "it is not."),
        "reason": ("Trace the code on the shown test and on one edge case of your own, step by step. Finish "
                   "with a last line that is exactly \"VERDICT: ACCEPT\" if the code is correct or "
                   "\"VERDICT: REJECT\" if it is not."),
    },
    repair_instructions={
        "self-refine": ("You are now the programmer. Using the feedback, check the proposed code and write an "
                        "improved, complete solution (fix any mistakes)."),
        "reflexion": ("You are now the programmer. First write one or two sentences starting with \"Reflection:\" "
                      "about what may be wrong with the proposed code. Then write a new, complete solution."),
    },
)


class MBPP(Task):
    """Sanitized MBPP as a task plug-in: valid = all unit tests pass in the sandbox in 5 s (App. B)."""

    name = DATASET
    prompts = PROMPTS
    label_rule = "mbpp sanitized: all test_list asserts (after test_imports) pass; " + LABEL_RULE.text()
    splits = tuple(SPLIT_TASK_IDS)
    parallel = 2          # sandboxed programs in flight at once
    progress_min = 200    # label batches at least this big show a progress bar
    _CACHE_MAX = 100_000

    def __init__(self):
        self._checked: dict[str, CheckResult] = {}

    def load(self, split: str) -> list[Problem]:
        """The problems of ``split`` (:func:`load_mbpp`)."""
        return load_mbpp(split)

    def extract_answer(self, text: str | None) -> str | None:
        """The code of the last ```python block (:func:`extract_answer`)."""
        return extract_answer(text)

    @staticmethod
    def _key(answer: str, problem: Problem) -> str:
        return hashlib.sha256(f"{problem.answer.task_id}\0{answer}".encode("utf-8", "surrogatepass")).hexdigest()

    def check_many(self, pairs: list[tuple[object, Problem]], progress: bool = False) -> list[CheckResult]:
        """:func:`check_many` with a per-instance cache (the fake engine and relabeling ask again)."""
        out: list[CheckResult | None] = [None] * len(pairs)
        todo = []
        for i, (answer, problem) in enumerate(pairs):
            if isinstance(answer, str):
                hit = self._checked.get(self._key(answer, problem))
                if hit is not None:
                    out[i] = hit
                    continue
            todo.append(i)
        fresh = check_many([pairs[i] for i in todo], parallel=self.parallel, progress=progress)
        for i, res in zip(todo, fresh):
            out[i] = res
            answer, problem = pairs[i]
            if isinstance(answer, str) and len(self._checked) < self._CACHE_MAX:
                self._checked[self._key(answer, problem)] = res
        return out  # type: ignore[return-value]

    def check(self, answer, problem: Problem) -> CheckResult:
        """Validity of one code answer with the reason when invalid."""
        return self.check_many([(answer, problem)])[0]

    def is_valid(self, answer, problem: Problem) -> bool:
        """App. B's MBPP label: all of the problem's unit tests pass under :data:`LABEL_RULE`."""
        return self.check(answer, problem).valid

    def failing_feedback(self, answer, problem: Problem) -> str:
        """The first failing test's error (e.g. ``test 2 of 3: AssertionError (the call returned 5)``),
        for repair feedback; ``""`` when all tests pass. Never includes a test's source."""
        res = self.check(answer, problem)
        return "" if res.valid else res.reason

    def execution_record(self) -> dict:
        """The label's execution rule with the sandbox it ran in (arrays' meta). The votes' rule is
        recorded per generation session in ``run_meta.json`` (``vote_execution``), where they ran."""
        return {"label": LABEL_RULE.record()}

    def execution_environment(self) -> dict:
        return {"label": sandbox.isolation_environment()}

    def run_asserts(self, items: list[tuple[object, Problem, str]]) -> list[CheckResult]:
        """Run each code answer against ONE given assert (after the problem's test imports) under
        :data:`vrr.loop.sandbox.VOTE_RULE`: what the execution verifiers vote with. The assert is the
        verifier's, never a hidden test."""
        pairs = [(code, SimpleNamespace(answer=replace(problem.answer, tests=(test,))))
                 for code, problem, test in items]
        return check_many(pairs, rule=VOTE_RULE, parallel=self.parallel)

    def visible_test(self, problem: Problem) -> str:
        """The one test the prompt shows (the others stay hidden: they are the label)."""
        return problem.answer.tests[0]

    def repair_feedback(self, answer, problem: Problem) -> str:
        """Self-debug feedback for the repairer: the shown test's error, if it fails. Only the test the
        prompt already shows is run, so the hidden tests (the label) never leak into the loop."""
        if answer is None:
            return "The response contains no ```python code block."
        res = self.run_asserts([(answer, problem, self.visible_test(problem))])[0]
        return "" if res.valid else f"Running the shown test: {res.reason.replace('test 1 of 1', 'the test')}"

    def label_rounds(self, items: list[tuple[dict, Problem]]) -> list[int]:
        """Labels of many stored plans in one sandbox batch (``parallel`` at a time, each distinct
        code once)."""
        pairs = [(self.stored_answer(rd), problem) for rd, problem in items]
        results = self.check_many(pairs, progress=self.show_progress and len(pairs) >= self.progress_min)
        return [int(r.valid) for r in results]

    def stored_answer(self, rd: dict):
        """The code a stored plan is labeled with: the answer stored at generation (extracted before the
        plan's problem text was redacted), unless reading the stored plan again gives other code that
        redaction left whole (the extraction rule changed). Code with the redaction marker anywhere, in a
        comment too, may have lost lines to it (a shown test joined to the comment before it): the stored
        answer stands."""
        if "answer" in rd and rd.get("answer_elided") is True:  # redaction changed what the plan reads
            return rd["answer"]
        if "answer" not in rd:
            return self.extract_answer(rd.get("plan"))
        again = self.extract_answer(rd.get("plan"))
        if again is not None and again != rd["answer"] and REDACTION_MARKER not in again:
            return again
        return rd["answer"]

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        """The PM-stress edit of one statement span (:func:`make_perturbation`)."""
        return make_perturbation(problem, seed, kind)

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        """The repairer's perturbed copy of the question (:func:`apply_perturbation`)."""
        return apply_perturbation(text, spec)

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        """A plan for the fake engine: the reference code (correct) or a stub of the tested
        function that returns None (incorrect), in a ```python block."""
        if correct:
            code = problem.answer.code.replace("\r\n", "\n").strip("\n")
        else:
            code = f"def {entry_point(problem)}(*args, **kwargs):\n    return None"
        return f"Here is the solution.\n\n```python\n{code}\n```"
