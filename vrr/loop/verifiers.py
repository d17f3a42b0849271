"""Verifiers: where the M votes on a plan come from (Sec. 3.1 "Verifier signals", App. B, App. H).

A verifier is a plug-in with ``kind`` (the setting's ``verifier.kind``), ``votes(...)`` returning
the raw outputs and the 0/1 votes for a batch of plans, ``parse(text)`` (1 accept, 0 reject, None
unparsable) so that stored outputs can be relabeled without the engine, and ``feedback(outputs)``,
the text the repairer receives.

* :class:`LLMJudge` (``llm_judge``): an LLM votes M times on one prompt (``n=M`` shares the
  prefill). Judge styles (``vrr.settings.JUDGE_STYLES``):
  ``verdict`` one word ACCEPT/REJECT (~2-5 generated tokens per vote); ``check`` a short check of
  the key step(s), then ``VERDICT: ACCEPT|REJECT``; ``reason`` a full independent re-solution, then
  ``VERDICT: ...`` (~400 tokens per vote).

* :class:`ResolveJudge` (``llm_resolve``): each vote is the judge model's own solution of the problem,
  sampled independently; the vote accepts when its final answer agrees with the plan's (tasks with
  ``answers_agree``: GSM8K, MATH-500). J is about the judge's accuracy minus its rate of agreeing on
  a wrong answer.
* :class:`AssertJudge` (``llm_asserts``, code tasks): each of the M votes is one assert the judge
  model writes for the task (sampled afresh for every plan and round), executed against the plan's
  code in the sandbox; the vote accepts when the assert passes.
* :class:`ProgramJudge` (``llm_program``, tasks with a final answer): each vote is a short program the
  judge model writes for the problem alone (program-of-thought), run in the sandbox; the vote
  accepts when what it prints agrees with the plan's final answer by the task's answer rule.
* :class:`PRMJudge` (``prm``): a process reward model (the paper's Qwen2.5-Math-PRM-7B on MATH-500)
  scores every step of the plan; the plan is accepted when its weakest step scores >= 0.5. Its M
  votes are identical (App. H), so it is calibrated on labels.
* :class:`ExecutorJudge` (``executor``, BFCL multi-turn): the paper's executor verifier as a vote. The plan's
  call trajectory is replayed afresh in the sandbox (bfcl-eval's executable environments), and an LLM
  judge of one style votes M times on the calls together with every call's result or error.
* :class:`ShownTestJudge` (``visible_test``, code tasks): the test the prompt shows, executed; a
  deterministic verifier, so its M votes are identical and its rho0, rho1 come from labeled
  samples (App. H; the setting must calibrate with ``labeled_mle``).

The verifier's model may differ from the generator's (``models.judge`` in the setting).
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Sequence

from ..settings import DETERMINISTIC_VERIFIERS, JUDGE_STYLES, VERIFIER_KINDS

# default generated-token budgets per judge vote: by judge style for the LLM judge, by kind for the
# verifiers that write something longer than a verdict. The verdict style's 16 tokens hold the sentence a small
# model writes in place of one word ("The proposed solution is correct.": 7 tokens for SmolLM2); runs whose
# config.json leaves the budget unset ran with LEGACY_JUDGE_MAX_TOKENS (vrr.loop.config.from_stored).
JUDGE_MAX_TOKENS = {"verdict": 16, "check": 96, "reason": 512}
LEGACY_JUDGE_MAX_TOKENS = {"verdict": 4, "check": 96, "reason": 512}
VERIFIER_MAX_TOKENS = {"llm_asserts": 96, "llm_program": 256, "llm_resolve": 512}

_ACC = re.compile(r"\b(ACCEPT(?:ED)?|CORRECT)\b", re.I)
_REJ = re.compile(r"\b(REJECT(?:ED)?|INCORRECT|WRONG|NOT\s+CORRECT)\b", re.I)
# the one-word verdict style also reads the forms small models write in its place ("valid", "isn't correct")
_ACC_WORD = re.compile(r"\b(ACCEPT(?:ED|ABLE)?|CORRECT|VALID)\b", re.I)
_REJ_WORD = re.compile(r"\b(REJECT(?:ED)?|INCORRECT|INVALID|WRONG|(?:NOT|ISN'T|IS\s+NOT)\s+(?:CORRECT|VALID|ACCEPTABLE))\b",
                       re.I)
# a reply that opens with yes or no as a word of its own ("Yes, the proposed solution ...", "No."): it decides;
# "No errors: ..." or "no idea" do not open with an answer
_OPENING = re.compile(r"^\W*(YES|NO|TRUE|FALSE)\s*(?:[,.!:;]|$)", re.I)
_VERDICT_LINE = re.compile(r"VERDICT\s*[:\-]?\s*\**\s*(ACCEPT|REJECT)", re.I)


def parse_verdict(text: str | None, style: str = "verdict") -> int | None:
    """1 = accept, 0 = reject, None = unparsable (callers count None as a rejection).

    ``verdict``: an opening yes/no (true/false), else the first accept- or reject-like word or phrase
    ("ACCEPT", "correct", "valid"; "REJECT", "incorrect", "wrong", "invalid", "not correct", "isn't valid").
    ``check``/``reason``: the last ``VERDICT: X`` line; if missing, the last ACCEPT/REJECT-like word in the
    final 80 characters. The forms read are those small models write (``tests/test_judge_readability.py``).
    """
    if not text:
        return None
    if style == "verdict":
        opening = _OPENING.match(text)
        if opening:
            return int(opening.group(1).upper() in ("YES", "TRUE"))
        a, r = _ACC_WORD.search(text), _REJ_WORD.search(text)
        if a and (not r or a.start() < r.start()):
            # "INCORRECT" contains "CORRECT" only without word boundary; \b guards it
            return 1
        if r:
            return 0
        return None
    hits = _VERDICT_LINE.findall(text)
    if hits:
        return int(hits[-1].upper() == "ACCEPT")
    tail = text[-80:]
    a = list(_ACC.finditer(tail))
    r = list(_REJ.finditer(tail))
    if a or r:
        la = a[-1].start() if a else -1
        lr = r[-1].start() if r else -1
        return int(la > lr)
    return None


def vote(text: str | None, style: str = "verdict") -> int:
    """One judge output as a 0/1 vote (unparsable counts as a rejection)."""
    return 1 if parse_verdict(text, style) == 1 else 0


def feedback_text(judge_outputs: Sequence[str], style: str = "verdict") -> str:
    """Summary of the M judge votes handed to the repairer (plus the first rejecting judge's text
    when the style produces one)."""
    votes = [vote(t, style) for t in judge_outputs]
    m, rej = len(votes), len(votes) - sum(votes)
    fb = f"{rej} of {m} reviewers judged the solution incorrect."
    if style != "verdict":
        for t, v in zip(judge_outputs, votes):
            if v == 0 and t and t.strip():
                crit = t.strip()
                if len(crit) > 1200:
                    crit = crit[:1200] + " ..."
                fb += f"\nOne reviewer wrote:\n{crit}"
                break
    return fb


class LLMJudge:
    """An LLM judge of one style: M sampled verdicts per plan from one ``n=M`` request."""

    kind = "llm_judge"

    def __init__(self, style: str = "verdict", max_tokens: int | None = None, temperature: float = 0.7):
        if style not in JUDGE_STYLES:
            raise ValueError(f"judge style must be one of {JUDGE_STYLES}, got {style!r}")
        self.style = style
        self.max_tokens = max_tokens or JUDGE_MAX_TOKENS[style]
        self.temperature = temperature

    def parse(self, text: str | None) -> int | None:
        return parse_verdict(text, self.style)

    def feedback(self, outputs: Sequence[str]) -> str:
        return feedback_text(outputs, self.style)

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int
              ) -> tuple[list[list[str]], list[list[int]]]:
        """Raw outputs [B][M] and votes [B][M] for plan ``plans[i]`` of problem ``problems[i]``."""
        convs = [task.prompts.judge_messages(p.question, task.clip_plan(plan), self.style)
                 for p, plan in zip(problems, plans)]
        outs = engine.chat(convs, temperature=self.temperature, max_tokens=self.max_tokens, n=M)
        for o in outs:
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} judge votes, expected {M}")
        return outs, [[vote(t, self.style) for t in o] for o in outs]


class ExecutorJudge(LLMJudge):
    """M sampled verdicts on a call trajectory shown with the results of its fresh replay (``executor``).

    The task replays the plan's calls in the sandbox (``task.replay_evidence``); the judge reads the user
    turns, the calls and, under each call, what it returned or the error it raised. The votes are the
    judge's, stored as text and parsed like :class:`LLMJudge` votes."""

    kind = "executor"

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        if not hasattr(task, "replay_evidence"):
            raise NotImplementedError(f"verifier kind 'executor' replays call trajectories: task {task.name!r} "
                                      "has no executor (use bfcl_multi)")
        shown = task.replay_evidence(list(zip(plans, problems)))
        convs = [task.prompts.judge_messages(p.question, task.clip_plan(s), self.style) for p, s in zip(problems, shown)]
        outs = engine.chat(convs, temperature=self.temperature, max_tokens=self.max_tokens, n=M)
        for o in outs:
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} judge votes, expected {M}")
        return outs, [[vote(t, self.style) for t in o] for o in outs]


# The verdict of a vote that runs code (or compares answers) is the record's final line, which the
# labeler appends after the model's text: "<marker> <WORD> <details>", details one JSON object written
# by json.dumps (every line break in it escaped). Model text only ever comes before that line, so
# parse() reads the final line alone and nothing the model writes, prints or raises can reach it.
# Records whose final line is not of this form are read by each verifier's rule for the older shape
# (a marker line without JSON details; the committed windows' shape), see _legacy_exec.
def _trailer(marker: str, word: str, details: dict) -> str:
    return f"{marker} {word} {json.dumps(details, ensure_ascii=True, sort_keys=True)}"


def _with_trailer(body: str, marker: str, word: str, details: dict) -> str:
    return f"{body}\n{_trailer(marker, word, details)}"


def _final_line(text: str | None) -> str:
    return (text or "").rpartition("\n")[2]


def _read_trailer(text: str | None, marker: str, words: tuple[str, str]) -> tuple[str, dict] | None:
    """(WORD, details) of a record's final line when it is a verdict trailer of ``marker``, else None.
    The details are {} when they do not decode (the verdict word alone decides the vote)."""
    m = re.fullmatch(rf"{re.escape(marker)} ({words[0]}|{words[1]}) (\{{.*\}})", _final_line(text))
    if m is None:
        return None
    try:
        details = json.loads(m.group(2))
    except ValueError:
        details = {}
    return m.group(1), details if isinstance(details, dict) else {}


def _body(text: str | None) -> str:
    """The model's part of a record: everything before the final (verdict) line."""
    return (text or "").rpartition("\n")[0]


EXEC_MARKER = "# vrr-exec:"
_LEGACY_EXEC = re.compile(r"^# vrr-exec: (PASS$|FAIL: )")


def _legacy_exec(text: str | None) -> int | None:
    """A record without a trailer: "<test>\n# vrr-exec: PASS" or "<test>\n# vrr-exec: FAIL: <reason>".
    The labeler wrote exactly one such marker line (PASS only as the final line); a record with more
    than one, where the test or the reason carries a marker-shaped line, is unparsable."""
    lines = (text or "").split("\n")
    marks = [i for i, ln in enumerate(lines) if _LEGACY_EXEC.match(ln)]
    if len(marks) != 1:
        return None
    line = lines[marks[0]]
    if line == "# vrr-exec: PASS":
        return 1 if marks[0] == len(lines) - 1 else None
    return 0


ASSERT_SYSTEM = "You are a careful software tester. You write unit tests for Python functions."
ASSERT_INSTRUCTION = ("Write ONE new assert statement that a correct solution of this task must pass, on an input "
                      "of your choice (not the one shown), calling the function by the name the task uses. Reply "
                      "with the assert statement only, in a ```python code block.")
# The judge's reply is prefilled with the opening of the code block and the keyword, so that a small
# model writes a test rather than a solution (without it the 0.5B coder wrote code instead of an
# assert in over half of its votes on valid plans: format failures, not judgements).
ASSERT_PREFILL = "```python\nassert "


def _exec_record(test: str, passed: bool, reason: str = "") -> str:
    """A stored executed vote: the test, then the trailer ``# vrr-exec: PASS {}`` or
    ``# vrr-exec: FAIL {"reason": ...}`` (the outcome the sandbox reported, never the test's text)."""
    return _with_trailer(test, EXEC_MARKER, "PASS" if passed else "FAIL", {} if passed else {"reason": reason[:300]})


def _needs_code_task(task, kind: str):
    if not hasattr(task, "run_asserts"):
        raise NotImplementedError(f"verifier kind {kind!r} executes code: task {task.name!r} cannot run tests "
                                  "(use it with mbpp)")


class _Executed:
    """Shared parts of the executing verifiers: parse a stored verdict, feedback with the failing test."""

    def parse(self, text: str | None) -> int | None:
        """The verdict of the record's final line (the labeler's); records without one: :func:`_legacy_exec`."""
        trailer = _read_trailer(text, EXEC_MARKER, ("PASS", "FAIL"))
        if trailer is not None:
            return int(trailer[0] == "PASS")
        return _legacy_exec(text)

    def feedback(self, outputs: Sequence[str]) -> str:
        votes = [self.parse(t) == 1 for t in outputs]
        fb = f"{len(votes) - sum(votes)} of {len(votes)} tests failed."
        for t, ok in zip(outputs, votes):
            if not ok and t:
                trailer = _read_trailer(t, EXEC_MARKER, ("PASS", "FAIL"))
                if trailer is not None:
                    test, result = _body(t), f"FAIL: {trailer[1].get('reason', '')}"
                else:
                    test, _, result = t.partition("\n# vrr-exec: ")
                fb += f"\nA failing test:\n{test.strip()[:600]}\nResult: {result.strip()[:400]}"
                break
        return fb


class AssertJudge(_Executed):
    """M judge-written asserts per plan, each executed against the plan in the sandbox."""

    kind = "llm_asserts"

    def __init__(self, max_tokens: int | None = None, temperature: float = 0.7):
        self.max_tokens = max_tokens or VERIFIER_MAX_TOKENS["llm_asserts"]
        self.temperature = temperature

    @staticmethod
    def messages(problem_text: str) -> list[dict]:
        """The test writer's conversation; it ends with the prefilled reply the model continues."""
        return [{"role": "system", "content": ASSERT_SYSTEM},
                {"role": "user", "content": f"Task:\n{problem_text}\n\n{ASSERT_INSTRUCTION}"},
                {"role": "assistant", "content": ASSERT_PREFILL}]

    @staticmethod
    def extract_assert(continuation: str | None) -> str | None:
        """The first complete assert statement of the prefilled reply (``assert `` + the model's
        continuation, up to the closing fence); it may span lines. None when it does not parse."""
        body = "assert " + (continuation or "").split("```", 1)[0]
        lines = body.splitlines()
        for end in range(1, len(lines) + 1):
            candidate = "\n".join(lines[:end]).strip()
            try:
                with warnings.catch_warnings():  # e.g. "invalid decimal literal" in a half-written line
                    warnings.simplefilter("ignore", SyntaxWarning)
                    tree = ast.parse(candidate)
            except SyntaxError:
                continue
            first = tree.body[0] if tree.body else None
            return ast.get_source_segment(candidate, first) if isinstance(first, ast.Assert) else None
        return None

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        _needs_code_task(task, self.kind)
        outs = engine.chat([self.messages(p.question) for p in problems], temperature=self.temperature,
                           max_tokens=self.max_tokens, n=M, stop=["```"])
        items, where = [], []
        records = [[""] * M for _ in problems]
        for i, (p, plan, o) in enumerate(zip(problems, plans, outs)):
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} tests, expected {M}")
            code = task.extract_answer(plan)
            for m, text in enumerate(o):
                test = self.extract_assert(text)
                if test is None:  # no complete assert (e.g. cut at max_tokens): an unparsable vote, a rejection
                    records[i][m] = _exec_record(("assert " + (text or "")).strip()[:300], False,
                                                 "the judge wrote no complete assert")
                else:
                    items.append((code, p, test))
                    where.append((i, m, test))
        passed = [[False] * M for _ in problems]
        for (i, m, test), res in zip(where, task.run_asserts(items) if items else []):
            records[i][m] = _exec_record(test, res.valid, res.reason)
            passed[i][m] = bool(res.valid)
        return records, [[int(ok) for ok in row] for row in passed]


class ShownTestJudge(_Executed):
    """The prompt's shown test executed against the plan: deterministic, M identical votes (App. H)."""

    kind = "visible_test"

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        _needs_code_task(task, self.kind)
        items = [(task.extract_answer(plan), p, task.visible_test(p)) for p, plan in zip(problems, plans)]
        results = task.run_asserts(items)
        records = [[_exec_record("# the shown test", r.valid, r.reason)] * M for r in results]
        return records, [[int(bool(r.valid))] * M for r in results]


PROGRAM_SYSTEM = "You are a careful programmer. You solve math word problems by writing short Python programs."
PROGRAM_INSTRUCTION = ("Write a short Python program that computes the answer to this problem from the numbers in it, "
                       "and prints only the final answer as a number. Use plain Python, no input().")
PROGRAM_PREFILL = "```python\n"
PROGRAM_OUTPUT_CHARS = 80   # of the printed answer kept in the stored vote


class ProgramJudge:
    """M judge-written programs per plan (program-of-thought votes, ``llm_program``).

    Each vote is a Python program the judge model writes for the problem alone (it never sees the
    plan), run in the sandbox under :data:`vrr.loop.sandbox.VOTE_RULE`. The vote accepts when the
    last line the program prints names the same answer as the plan's extracted answer, by the task's
    own rule (``answers_agree``). The stored vote keeps the program and what it printed, so relabeling
    never reruns the model or the program."""

    kind = "llm_program"
    MARKER = "# vrr-program:"
    _LEGACY = re.compile(r"# vrr-program: (AGREE|DISAGREE) \(printed (.*)\)")

    def __init__(self, max_tokens: int | None = None, temperature: float = 0.7):
        self.max_tokens = max_tokens or VERIFIER_MAX_TOKENS["llm_program"]
        self.temperature = temperature

    @staticmethod
    def messages(problem_text: str) -> list[dict]:
        """The program writer's conversation; it ends with the prefilled opening of a code block."""
        return [{"role": "system", "content": PROGRAM_SYSTEM},
                {"role": "user", "content": f"Problem:\n{problem_text}\n\n{PROGRAM_INSTRUCTION}"},
                {"role": "assistant", "content": PROGRAM_PREFILL}]

    @staticmethod
    def printed_answer(stdout: str) -> str | None:
        """The last non-empty line a program printed (its answer), or None."""
        lines = [ln.strip() for ln in (stdout or "").splitlines() if ln.strip()]
        return lines[-1][:PROGRAM_OUTPUT_CHARS] if lines else None

    def _verdict(self, text: str | None) -> tuple[str, str] | None:
        """(AGREE or DISAGREE, what the program printed as shown to the repairer) from the record's final
        line, the labeler's: the trailer ``# vrr-program: AGREE {"printed": ...}``, or the older shape
        ``# vrr-program: AGREE (printed '...')`` (the printed value a Python repr, on one line)."""
        trailer = _read_trailer(text, self.MARKER, ("AGREE", "DISAGREE"))
        if trailer is not None:
            printed = trailer[1].get("printed")
            shown = repr(printed) if isinstance(printed, str) else f"nothing: {str(trailer[1].get('error', ''))!r}"
            return trailer[0], shown
        m = self._LEGACY.fullmatch(_final_line(text))
        return None if m is None else (m.group(1), m.group(2))

    def parse(self, text: str | None) -> int | None:
        found = self._verdict(text)
        return None if found is None else int(found[0] == "AGREE")

    def _printed(self, text: str | None) -> tuple[bool, str | None]:
        """(readable, what the program printed) from the labeler's final line: the trailer's ``printed``, or
        the older shape's Python repr (``nothing: ...`` when the program printed nothing)."""
        trailer = _read_trailer(text, self.MARKER, ("AGREE", "DISAGREE"))
        if trailer is not None:
            printed = trailer[1].get("printed")
            return (True, printed) if printed is None or isinstance(printed, str) else (False, None)
        m = self._LEGACY.fullmatch(_final_line(text))
        if m is None:
            return False, None
        if m.group(2).startswith("nothing: "):
            return True, None
        try:
            printed = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            return False, None
        return (True, printed) if isinstance(printed, str) else (False, None)

    def round_verdicts(self, texts: Sequence[str], task, round_record: dict) -> list[int | None]:
        """The votes of one stored plan, recomputed from their structured results: what each program printed
        against the plan's answer as its label reads it (``task.stored_answer``), by the task's one comparison
        (``answers_agree``), as :meth:`votes` decided them live. Relabeling uses this, so the number grammar
        of the label reaches the votes too; a record whose result does not read is None (unparsable)."""
        mine = task.stored_answer(round_record) if hasattr(task, "stored_answer") else \
            round_record.get("answer", task.extract_answer(round_record.get("plan")))
        out: list[int | None] = []
        for text in texts:
            readable, theirs = self._printed(text)
            out.append(None if not readable else
                       int(mine is not None and theirs is not None and bool(task.answers_agree(mine, theirs))))
        return out

    def feedback(self, outputs: Sequence[str]) -> str:
        """The disagreement: how many programs computed another answer, and which answers they printed."""
        printed = []
        for t in outputs:
            found = self._verdict(t)
            if found is not None and found[0] == "DISAGREE":
                printed.append(found[1])
        n = len(outputs)
        if not printed:
            return f"All {n} independent programs computed the same answer as the solution."
        counts: dict[str, int] = {}
        for p in printed:
            counts[p] = counts.get(p, 0) + 1
        shown = ", ".join(f"{a} ({c}x)" for a, c in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
        return (f"{len(printed)} of {n} independent programs that compute the answer disagree with the solution's "
                f"final answer. They printed: {shown}.")

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        if not hasattr(task, "answers_agree"):
            raise NotImplementedError(f"verifier kind 'llm_program' compares final answers: task {task.name!r} "
                                      "has no answers_agree (use gsm8k or math500)")
        from . import sandbox
        from .sandbox import VOTE_RULE

        outs = engine.chat([self.messages(p.question) for p in problems], temperature=self.temperature,
                           max_tokens=self.max_tokens, n=M, stop=["```"])
        programs, where = [], []
        for i, o in enumerate(outs):
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} programs, expected {M}")
            for m, text in enumerate(o):
                programs.append((text or "").split("```", 1)[0])
                where.append((i, m))
        results = sandbox.run_many([p if p.strip() else "raise SystemExit('empty program')" for p in programs],
                                   timeout=VOTE_RULE.wall_seconds, cpu_limit=VOTE_RULE.cpu_seconds,
                                   hash_seeds=[VOTE_RULE.hash_seeds[0]] * len(programs)) if programs else []
        records = [[""] * M for _ in problems]
        votes = [[0] * M for _ in problems]
        for (i, m), prog, res in zip(where, programs, results):
            mine = task.extract_answer(plans[i])
            theirs = self.printed_answer(res.stdout) if res.passed else None
            agree = mine is not None and theirs is not None and bool(task.answers_agree(mine, theirs))
            details = {"printed": theirs} if theirs is not None else {"printed": None, "error": res.error[:60]}
            records[i][m] = _with_trailer(prog.strip()[:800], self.MARKER, "AGREE" if agree else "DISAGREE", details)
            votes[i][m] = int(agree)
        return records, votes


PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
PRM_STEP = "<extra_0>"   # Qwen2.5-Math-PRM: the reward is read at this token after every step
_PRM = re.compile(r"^# vrr-prm: weakest step ([0-9.]+) of (\d+) steps: (ACCEPT|REJECT)$", re.M)


class ResolveJudge:
    """M independent solutions by the judge model; a vote accepts when its answer agrees with the plan's."""

    kind = "llm_resolve"
    MARKER = "# vrr-resolve:"
    _LEGACY = re.compile(r"# vrr-resolve: (AGREE|DISAGREE) \(judge's answer .*\)")

    def __init__(self, max_tokens: int | None = None, temperature: float = 0.7):
        self.max_tokens = max_tokens or VERIFIER_MAX_TOKENS["llm_resolve"]
        self.temperature = temperature

    def parse(self, text: str | None) -> int | None:
        """The verdict of the record's final line, the labeler's: the trailer
        ``# vrr-resolve: AGREE {"answer": ...}``, or the older shape ``# vrr-resolve: AGREE (judge's answer '...')``."""
        trailer = _read_trailer(text, self.MARKER, ("AGREE", "DISAGREE"))
        if trailer is not None:
            return int(trailer[0] == "AGREE")
        m = self._LEGACY.fullmatch(_final_line(text))
        return None if m is None else int(m.group(1) == "AGREE")

    def feedback(self, outputs: Sequence[str]) -> str:
        votes = [self.parse(t) == 1 for t in outputs]
        return f"{len(votes) - sum(votes)} of {len(votes)} independent solvers reached a different final answer."

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        if not hasattr(task, "answers_agree"):
            raise NotImplementedError(f"verifier kind 'llm_resolve' compares final answers: task {task.name!r} "
                                      "has no answers_agree (use gsm8k or math500)")
        outs = engine.chat([task.prompts.generator_messages(p.question) for p in problems],
                           temperature=self.temperature, max_tokens=self.max_tokens, n=M)
        records, votes = [], []
        for p, plan, o in zip(problems, plans, outs):
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} solutions, expected {M}")
            mine = task.extract_answer(plan)
            row, row_votes = [], []
            for text in o:
                theirs = task.extract_answer(text)
                agree = mine is not None and theirs is not None and bool(task.answers_agree(mine, theirs))
                row.append(_with_trailer((text or "")[-400:], self.MARKER, "AGREE" if agree else "DISAGREE",
                                         {"answer": None if theirs is None else str(theirs)[:60]}))
                row_votes.append(int(agree))
            records.append(row)
            votes.append(row_votes)
        return records, votes


class PRMJudge:
    """A process reward model as the verifier (App. B, MATH-500): deterministic, M identical votes.

    The plan is split into steps at blank lines (the Qwen2.5-Math-PRM recipe), ``<extra_0>`` follows
    every step, and the engine's ``reward`` returns the positive-class probability at each of them.
    """

    kind = "prm"

    def __init__(self, threshold: float = 0.5):
        self.threshold = threshold

    @staticmethod
    def messages(problem_text: str, plan: str) -> list[dict]:
        steps = [s.strip() for s in plan.split("\n\n") if s.strip()] or [plan.strip() or "(empty)"]
        return [{"role": "system", "content": PRM_SYSTEM}, {"role": "user", "content": problem_text},
                {"role": "assistant", "content": PRM_STEP.join(steps) + PRM_STEP}]

    def parse(self, text: str | None) -> int | None:
        m = _PRM.search(text or "")
        return None if m is None else int(m.group(3) == "ACCEPT")

    def feedback(self, outputs: Sequence[str]) -> str:
        m = _PRM.search(outputs[0] if outputs else "")
        if m is None or m.group(3) == "ACCEPT":
            return "The verifier accepted every step of the solution."
        return f"The verifier found a weak step (score {m.group(1)}); check the solution step by step."

    def votes(self, engine, task, problems: Sequence, plans: Sequence[str], M: int):
        if not hasattr(engine, "reward"):
            raise NotImplementedError("verifier kind 'prm' needs an engine with reward(): build the judge engine "
                                      "as a reward model (make_engine(..., reward_model=True))")
        scores = engine.reward([self.messages(p.question, task.clip_plan(plan)) for p, plan in zip(problems, plans)])
        records = []
        for s in scores:
            weakest = min(s) if len(s) else 0.0
            verdict = "ACCEPT" if weakest >= self.threshold else "REJECT"
            records.append([f"# vrr-prm: weakest step {weakest:.4f} of {len(s)} steps: {verdict}"] * M)
        return records, [[int(self.parse(r) == 1) for r in row] for row in records]


def make_verifier(kind: str, style: str = "verdict", max_tokens: int | None = None, temperature: float = 0.7):
    """The verifier plug-in of a setting's ``verifier`` block."""
    if kind == "llm_judge":
        return LLMJudge(style, max_tokens, temperature)
    if kind == "llm_asserts":
        return AssertJudge(max_tokens, temperature)
    if kind == "llm_resolve":
        return ResolveJudge(max_tokens, temperature)
    if kind == "visible_test":
        return ShownTestJudge()
    if kind == "llm_program":
        return ProgramJudge(max_tokens, temperature)
    if kind == "prm":
        return PRMJudge()
    if kind == "executor":
        return ExecutorJudge(style, max_tokens, temperature)
    if kind in VERIFIER_KINDS:
        raise NotImplementedError(f"verifier kind {kind!r} is registered in the settings schema but has no "
                                  "implementation in vrr.loop.verifiers yet (implemented: llm_judge, llm_resolve, "
                                  "llm_asserts, llm_program, visible_test, prm, executor)")
    raise ValueError(f"unknown verifier kind {kind!r}; known: {VERIFIER_KINDS}")


CODE_EXECUTING_VERIFIERS = ("llm_asserts", "visible_test", "llm_program")


def executes_code(kind: str) -> bool:
    """Whether a verifier's votes run model-written code (in the sandbox)."""
    return kind in CODE_EXECUTING_VERIFIERS


def is_deterministic(kind: str) -> bool:
    return kind in DETERMINISTIC_VERIFIERS
