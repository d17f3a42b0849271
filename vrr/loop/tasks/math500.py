"""MATH-500: the task plug-in (paper App. B: "symbolic verification on MATH-500", with math-verify).

* ``load_math500("test")`` reads the local copy (``$VRR_MATH500_DIR``, else ``../shared/data/math500``,
  see ``vrr.common.paths.shared_data_dirs``) and falls back to the Hugging Face hub
  (``HuggingFaceH4/MATH-500``, imported lazily) for online users. Index = 0-based row number.
* ``extract_answer(text)``: the content of the last ``\\boxed{...}`` (balanced braces), else None.
* ``is_valid`` / ``label_rounds``: the official checker, math-verify, called as
  ``verify(parse("$" + gold + "$"), parse("\\boxed{" + answer + "}"))``. math-verify times out with
  SIGALRM, which only works in the main thread of the main interpreter; the runner may label from
  another thread. So the checking runs in a worker process (:class:`CheckerProcess`, the same
  interpreter running :func:`serve_checker`): there math-verify's own timeouts are switched off and
  the worker's main thread enforces ``ITEM_SECONDS`` per item with its own alarm; the parent kills
  and restarts a worker that does not answer within ``KILL_SECONDS`` (a C-level hang). Every failure
  (no boxed answer, unparsable, timeout, crash) is an invalid label with a reason, never an exception.
* ``make_perturbation`` / ``apply_perturbation``: the PM-stress edit (App. B): one number or one
  condition word of the statement changes, deterministic per ``(seed, index)``; the spec holds only
  the edited span (offsets, original token, replacement), never the problem text.
* ``synthetic_plan``: a plan ending in ``\\boxed{gold}`` or in a wrong boxed answer, for the fake
  engine backend.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

from ...common.paths import REPO_ROOT
from ..prompts import PromptSet
from ..sandbox import REDACTION_MARKER
from .base import Problem as _Problem
from ..sandbox import KILL_SECONDS, CheckerProcess
from .base import Task, count_rows, local_file, read_jsonl_rows, reads_model_text

from .gsm8k import _rng, condition_spans, pick_edit
from .gsm8k import apply_perturbation as _apply_span

DATASET = "math500"
SPLITS = ("test",)
ITEM_SECONDS = 10.0   # the worker's own alarm per item (parse + verify)
MAX_ANSWER_CHARS = 5000  # longer "answers" are not handed to sympy
GOLD_CACHE_MAX = 5000    # parsed references kept by a checker worker


# --------------------------------------------------------------------------- loading
class Problem(_Problem):
    """A MATH-500 problem: ``answer`` is the reference final answer (LaTeX, as in the dataset)."""

    def __init__(self, split: str, index: int, question: str, answer: str):
        super().__init__(split, index, question, answer, DATASET)

    @property
    def gold(self) -> str:
        """The reference final answer."""
        return self.answer


def local_path(split: str) -> Path | None:
    """The local ``<split>.jsonl`` (first of ``shared_data_dirs``), or None."""
    return local_file(DATASET, f"{split}.jsonl", "VRR_MATH500_DIR")


_CACHE: dict[tuple, list[Problem]] = {}


def load_math500(split: str = "test", path: str | os.PathLike | None = None,
                 allow_hub: bool = True) -> list[Problem]:
    """All problems of ``split`` (only "test": the 500-problem subset of Lightman et al. 2023)."""
    if split not in SPLITS:
        raise ValueError(f"math500: split must be one of {SPLITS}, got {split!r}")
    key = (split, str(path or local_path(split)))
    if key in _CACHE:
        return _CACHE[key]

    def from_hub():
        import datasets  # lazy: only online users need it

        return list(datasets.load_dataset("HuggingFaceH4/MATH-500")[split])

    rows = read_jsonl_rows(DATASET, split, "VRR_MATH500_DIR", path, allow_hub, from_hub)
    probs = [Problem(split, i, r["problem"], r["answer"]) for i, r in enumerate(rows)]
    _CACHE[key] = probs
    return probs


# --------------------------------------------------------------------------- answers
_BOXED = re.compile(r"\\boxed\s*\{")


_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.S)  # an escaped character (\{, \}, \\) or a brace


def _boxes(text: str) -> list[tuple[int, int | None]]:
    """Every ``\\boxed{`` of the text as (index of its "{", index of the "}" closing it or None), in
    order, from one pass over the braces (``\\{`` and ``\\}`` are literal braces): linear however the
    boxes nest or fail to close."""
    openers = [m.end() - 1 for m in _BOXED.finditer(text)]
    is_box, closes, stack = set(openers), {}, []
    for tok in _BRACE_TOKENS.finditer(text):
        if tok.group() == "{":
            stack.append(tok.start())
        elif tok.group() == "}" and stack:
            j = stack.pop()
            if j in is_box:
                closes[j] = tok.start()
    return [(j, closes.get(j)) for j in openers]


@reads_model_text()
def extract_answer(text) -> str | None:
    """Content of the last non-empty ``\\boxed{...}`` of a model output. An empty box (an echo of the
    prompt's "within \\boxed{}") is passed over; None when there is no box or the last one is not
    closed (a truncated output)."""
    for i, (start, end) in enumerate(reversed(_boxes(text))):
        if end is None:
            if i == 0:
                return None
            continue
        content = text[start + 1:end].strip()
        if content:
            return content
    return None


def wrong_answer(gold: str) -> str:
    """A boxed answer that math-verify rejects against ``gold`` (for synthetic wrong plans):
    gold + 1 for an integer, else ``gold+1``; checked on all 500 problems in tests/test_math500.py."""
    g = gold.strip()
    if re.fullmatch(r"-?\d+", g):
        return str(int(g) + 1)
    return g + "+1"


# --------------------------------------------------------------------------- the math-verify worker
class _Alarm(BaseException):
    """Raised by the worker's alarm; a BaseException so that math-verify's ``except Exception``
    handlers cannot swallow it."""


def check_one(gold: str, answer, seconds: float = ITEM_SECONDS, _mv: tuple | None = None) -> dict:
    """Verdict of one answer against the reference, by math-verify (App. B). Call it in the main
    thread of a process (the worker): it arms SIGALRM for ``seconds``."""
    if not isinstance(answer, str) or not answer.strip():
        return {"valid": False, "error": "no \\boxed{} answer", "error_type": "vrr:no_answer"}
    if len(answer) > MAX_ANSWER_CHARS:
        return {"valid": False, "error": f"answer longer than {MAX_ANSWER_CHARS} characters",
                "error_type": "vrr:too_long"}
    if _mv is None:
        from math_verify import parse, verify

        _mv = (parse, verify, {})
    parse, verify, gold_cache = _mv
    fired = []

    def on_alarm(signum, frame):
        """The worker's own timeout (math-verify's is off)."""
        fired.append(1)
        raise _Alarm

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        if gold not in gold_cache:
            if len(gold_cache) >= GOLD_CACHE_MAX:  # model answers stand as references in agreement votes
                gold_cache.clear()
            gold_cache[gold] = parse("$" + gold + "$", parsing_timeout=None)
        g = gold_cache[gold]
        a = parse("\\boxed{" + answer + "}", parsing_timeout=None)
        ok = bool(a) and bool(g) and verify(g, a, timeout_seconds=None)
    except _Alarm:
        ok = None
    except Exception as exc:  # noqa: BLE001 - math-verify/sympy internals
        return {"valid": False, "error": f"math-verify error: {type(exc).__name__}: {exc}"[:1000],
                "error_type": "vrr:checker_exception"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if ok is None or fired:
        return {"valid": False, "error": f"math-verify timeout after {seconds:g} s", "error_type": "vrr:timeout"}
    if not a:
        return {"valid": False, "error": "answer not parsable by math-verify", "error_type": "vrr:unparsable"}
    if ok:
        return {"valid": True, "error": "", "error_type": ""}
    return {"valid": False, "error": "not equivalent to the reference answer", "error_type": "vrr:wrong_answer"}


def serve_checker() -> None:
    """The worker's main loop (``python -c "from vrr.loop.tasks.math500 import serve_checker;
    serve_checker()"``): requests ``{"gold", "answer", "seconds"?}`` on stdin, verdicts on stdout."""
    import importlib.metadata
    import logging

    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": we enforce our own
    from math_verify import parse, verify

    mv = (parse, verify, {})
    proto.write(json.dumps({"ready": True, "math_verify": importlib.metadata.version("math-verify")}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            verdict = check_one(req["gold"], req.get("answer"), float(req.get("seconds") or ITEM_SECONDS), mv)
        except _Alarm:  # fired in the instant between the check and disarming the timer
            verdict = {"valid": False, "error": "math-verify timeout", "error_type": "vrr:timeout"}
        except Exception as exc:  # noqa: BLE001 - a bad request must not kill the batch
            verdict = {"valid": False, "error": f"bad request: {exc}"[:1000], "error_type": "vrr:bad_request"}
        proto.write(json.dumps(verdict) + "\n")


def _worker_argv() -> list[str]:
    return [sys.executable, "-c", "from vrr.loop.tasks.math500 import serve_checker; serve_checker()"]


def _worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


_CHECKER: CheckerProcess | None = None
_CHECKER_LOCK = threading.Lock()


def checker() -> CheckerProcess:
    """The shared math-verify worker of this process (started at first use)."""
    global _CHECKER
    with _CHECKER_LOCK:
        if _CHECKER is None:
            _CHECKER = CheckerProcess(_worker_argv, "math500/math-verify", item_seconds=KILL_SECONDS,
                                      env=_worker_env())
        return _CHECKER


def check_answers(pairs: list[tuple], seconds: float = ITEM_SECONDS, kill_seconds: float | None = None) -> list[dict]:
    """Verdicts (``valid``, ``error``) of many ``(answer, gold)`` pairs, in one worker round trip each."""
    reqs = [{"gold": str(g), "answer": a if isinstance(a, str) else None, "seconds": seconds} for a, g in pairs]
    return checker().run(reqs, item_seconds=kill_seconds or max(KILL_SECONDS, 3 * seconds))


# --------------------------------------------------------------------------- perturbations
# Condition-level swaps of competition statements (word-bounded; longer phrases win overlaps).
CONDITION_SWAPS = [
    ("at least", "at most"), ("at most", "at least"), ("more than", "less than"), ("less than", "more than"),
    ("greater than", "less than"), ("positive", "negative"), ("negative", "positive"),
    ("greatest", "least"), ("least", "greatest"), ("largest", "smallest"), ("smallest", "largest"),
    ("maximum", "minimum"), ("minimum", "maximum"), ("odd", "even"), ("even", "odd"),
    ("sum", "product"), ("product", "sum"), ("increasing", "decreasing"), ("decreasing", "increasing"),
    ("twice", "three times"), ("half", "a third"), ("distinct", "identical"),
]
_NUMBER = re.compile(r"(?<![\w.\\])\d+(?:\.\d+)?(?![\w])")
_ASY = re.compile(r"\[asy\].*?\[/asy\]", re.S)


def _blocked(question: str) -> list[tuple[int, int]]:
    """Spans where no edit is made: Asymptote figures (a changed coordinate is not a changed condition)."""
    return [(m.start(), m.end()) for m in _ASY.finditer(question)]


def make_perturbation(question: str, seed: int, index: int, kind: str = "auto") -> dict:
    """Deterministic PM-stress spec for problem ``index`` under ``seed`` (App. B).

    ``kind``: "numeric" (change one number), "condition" (swap one condition word), or "auto"
    (condition with prob. 1/3 when one exists, else numeric). The spec is ``{"kind", "start", "end",
    "orig", "new", "seed"}``: offsets into the ORIGINAL statement, never its text.
    """
    rng = _rng(seed, index, salt="pm-math500")
    blocked = _blocked(question)

    def free(s: int, e: int) -> bool:
        """True when [s, e) is outside every blocked span."""
        return not any(a <= s < b or a < e <= b for a, b in blocked)

    nums = [(m.start(), m.end(), m.group(0)) for m in _NUMBER.finditer(question) if free(m.start(), m.end())]
    return pick_edit(nums, condition_spans(question, CONDITION_SWAPS, free), rng, kind, seed)


def apply_perturbation(question: str, spec: dict | None) -> str:
    """The repairer's (perturbed) copy of the statement, rebuilt from the original and a spec."""
    return _apply_span(question, spec)


# --------------------------------------------------------------------------- prompts and plug-in
ANSWER_FORMAT = "Put your final answer within \\boxed{}."

PROMPTS = PromptSet(
    generator_system="You are a careful mathematician. Solve competition mathematics problems step by step.",
    generator_instruction="Please reason step by step.",
    answer_format=ANSWER_FORMAT,
    judge_system=("You are a strict grader. You check whether a proposed solution to a competition "
                  "mathematics problem is correct."),
    judge_instructions={
        "verdict": ("Is the proposed solution correct, including its final boxed answer? "
                    "Reply with exactly one word: ACCEPT if it is correct, REJECT if it is not."),
        "check": ("Check the key step(s) and the final boxed answer against the problem in at most two short "
                  "sentences. Then write a last line that is exactly \"VERDICT: ACCEPT\" if the solution is "
                  "correct or \"VERDICT: REJECT\" if it is not."),
        "reason": ("Solve the problem yourself step by step, then compare your result with the proposed final "
                   "boxed answer (equivalent forms count as equal). Finish with a last line that is exactly "
                   "\"VERDICT: ACCEPT\" if the proposed solution is correct or \"VERDICT: REJECT\" if it is not."),
    },
    repair_instructions={
        "self-refine": ("You are now the solver. Using the feedback, check the proposed solution and write an "
                        "improved, complete step-by-step solution (fix any mistakes)."),
        "reflexion": ("You are now the solver. First write one or two sentences starting with \"Reflection:\" "
                      "about what may have gone wrong in the proposed solution. Then write a new, complete "
                      "step-by-step solution."),
    },
)


class MATH500(Task):
    """MATH-500 as a task plug-in: symbolic equivalence of the final boxed answer by math-verify (App. B)."""

    name = DATASET
    splits = SPLITS
    prompts = PROMPTS
    label_rule = "math500 math-verify verify(parse($gold$), parse(\\boxed{answer})) vs original problem"

    def load(self, split: str = "test") -> list[Problem]:
        """The problems of ``split`` (only "test")."""
        return load_math500(split)

    def split_size(self, split: str) -> int:
        """The rows of the split's local file, counted; without one, the problems loaded."""
        path = local_path(split) if split in SPLITS else None
        return count_rows(path) if path is not None else len(self.load(split))

    def extract_answer(self, text) -> str | None:
        """The last ``\\boxed{}`` content of a plan."""
        return extract_answer(text)

    def check(self, items: list[tuple]) -> list[dict]:
        """Verdicts with reasons of ``(answer, problem)`` pairs (one worker, one round trip each)."""
        return check_answers([(a, p.gold) for a, p in items])

    def is_valid(self, answer, problem: Problem) -> bool:
        """math-verify equivalence of ``answer`` with the reference (App. B)."""
        return bool(self.check([(answer, problem)])[0]["valid"])

    def answers_agree(self, a, b) -> bool:
        """Two final answers are math-verify equivalent (the re-solving verifier's vote). Both are model
        text here (``a`` stands as the reference), so both are bounded like an answer."""
        if not isinstance(a, str) or not isinstance(b, str) or max(len(a), len(b)) > MAX_ANSWER_CHARS:
            return False
        return bool(check_answers([(b, a)])[0]["valid"])

    def label_rounds(self, items: list[tuple[dict, Problem]]) -> list[int]:
        """Labels of many stored plans, checked in one batch by the math-verify worker.

        The answer is the one stored at generation (extracted before the plan's problem text was
        redacted). A stored empty answer is what an echoed empty ``\\boxed{}`` gave before empty boxes
        were passed over: the stored plan is read again then, unless its box lost text to redaction."""
        return [int(v["valid"]) for v in self.check([(self.stored_answer(rd), p) for rd, p in items])]

    def stored_answer(self, rd: dict):
        if "answer" in rd and rd.get("answer_elided") is True:  # redaction changed what the plan reads
            return rd["answer"]
        answer = rd["answer"] if "answer" in rd else self.extract_answer(rd.get("plan"))
        if answer == "":
            answer = self.extract_answer(rd.get("plan"))
            if answer is not None and REDACTION_MARKER in answer:
                return None
        return answer

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        """The PM-stress spec of a problem (span only)."""
        return make_perturbation(problem.question, seed, problem.index, kind)

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        """The repairer's copy of the statement."""
        return apply_perturbation(text, spec)

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        """A plan ending in the boxed gold answer, or in a wrong boxed answer (fake backend)."""
        ans = problem.gold if correct else wrong_answer(problem.gold)
        return f"We work through the problem step by step.\nTherefore, the final answer is $\\boxed{{{ans}}}$."
