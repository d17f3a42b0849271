"""Prompts of the verify-repair loop: generator, judge (verifier) and repairer (paper Sec. 3.1, App. B).

Judge styles (``JUDGE_STYLES``), a parameter of every run:

* ``"verdict"``  one word, ACCEPT or REJECT (cheapest; ~2-5 generated tokens per vote),
* ``"check"``    a short check of the key step(s) (<= 2 sentences), then ``VERDICT: ACCEPT|REJECT``,
* ``"reason"``   full independent re-solution, then ``VERDICT: ACCEPT|REJECT`` (~400 tokens per vote).

Repair styles (``REPAIR_STYLES``):

* ``"self-refine"`` (Madaan et al. 2023): feedback -> revised full solution,
* ``"reflexion"``   (Shinn et al. 2023): a short verbal reflection on what went wrong, then a new
  full solution.

The repairer always receives the current plan and the judges' feedback (how many of the M
votes rejected it, plus the first rejecting judge's text when the style produces one). Under the
prompt-mismatch stress setting it receives a *perturbed* copy of the problem; the judge always
sees the original (App. B).
"""
from __future__ import annotations

import re

JUDGE_STYLES = ("verdict", "check", "reason")
REPAIR_STYLES = ("self-refine", "reflexion")

ANSWER_FORMAT = 'End your response with a final line of the form "The answer is N." where N is a number.'

GENERATOR_SYSTEM = "You are a careful math tutor. Solve grade-school math word problems step by step."


def generator_messages(question: str) -> list[dict]:
    return [
        {"role": "system", "content": GENERATOR_SYSTEM},
        {"role": "user", "content": f"Problem:\n{question}\n\nSolve the problem step by step. {ANSWER_FORMAT}"},
    ]


JUDGE_SYSTEM = ("You are a strict grader. You check whether a proposed solution to a math word "
                "problem is correct.")

_JUDGE_INSTR = {
    "verdict": ("Is the proposed solution correct, including its final answer? "
                "Reply with exactly one word: ACCEPT if it is correct, REJECT if it is not."),
    "check": ("Check the key calculation(s) and the final answer against the problem in at most two "
              "short sentences. Then write a last line that is exactly \"VERDICT: ACCEPT\" if the "
              "solution is correct or \"VERDICT: REJECT\" if it is not."),
    "reason": ("Solve the problem yourself step by step, then compare your result with the proposed "
               "final answer. Finish with a last line that is exactly \"VERDICT: ACCEPT\" if the "
               "proposed solution is correct or \"VERDICT: REJECT\" if it is not."),
}

# default generated-token budgets per judge vote
JUDGE_MAX_TOKENS = {"verdict": 4, "check": 96, "reason": 512}


def judge_messages(question: str, plan: str, style: str = "verdict") -> list[dict]:
    if style not in JUDGE_STYLES:
        raise ValueError(f"judge style must be one of {JUDGE_STYLES}")
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": f"Problem:\n{question}\n\nProposed solution:\n{plan}\n\n{_JUDGE_INSTR[style]}"},
    ]


_ACC = re.compile(r"\b(ACCEPT(?:ED)?|CORRECT)\b", re.I)
_REJ = re.compile(r"\b(REJECT(?:ED)?|INCORRECT|WRONG|NOT\s+CORRECT)\b", re.I)
_VERDICT_LINE = re.compile(r"VERDICT\s*[:\-]?\s*\**\s*(ACCEPT|REJECT)", re.I)


def parse_verdict(text: str | None, style: str = "verdict") -> int | None:
    """1 = accept, 0 = reject, None = unparsable (callers count None as a rejection).

    ``verdict``: the first ACCEPT/REJECT-like word. ``check``/``reason``: the last
    ``VERDICT: X`` line; if missing, the last ACCEPT/REJECT word in the final 80 characters.
    """
    if not text:
        return None
    if style == "verdict":
        a, r = _ACC.search(text), _REJ.search(text)
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
    v = parse_verdict(text, style)
    return 1 if v == 1 else 0


# The repairer shares the judge's system prompt and the "Problem ... Proposed solution ..."
# prefix, so vLLM's prefix cache reuses the judge prefill of (problem, plan) for the repair call
# of the same round (unperturbed settings): ~35 % less prefill per instance on CPU. The judge
# prompt is byte-identical to the one whose J was measured (docs/engine.md).
REPAIR_SYSTEM = JUDGE_SYSTEM


def feedback_text(judge_outputs: list[str], style: str = "verdict") -> str:
    """Summary of the M judge votes handed to the repairer."""
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


REPAIR_MARKER = "Reviewer feedback:"


def role_of(conversation) -> str:
    """'generator' | 'judge' | 'repairer' for a conversation built by this module."""
    user = conversation[-1]["content"]
    if REPAIR_MARKER in user:
        return "repairer"
    if conversation[0]["content"] == JUDGE_SYSTEM:
        return "judge"
    return "generator"


def repair_messages(question: str, plan: str, feedback: str, style: str = "self-refine") -> list[dict]:
    if style not in REPAIR_STYLES:
        raise ValueError(f"repair style must be one of {REPAIR_STYLES}")
    head = f"Problem:\n{question}\n\nProposed solution:\n{plan}\n\n{REPAIR_MARKER}\n{feedback}\n\n"
    if style == "self-refine":
        instr = ("You are now the solver. Using the feedback, check the proposed solution and write an "
                 f"improved, complete step-by-step solution (fix any mistakes). {ANSWER_FORMAT}")
    else:
        instr = ("You are now the solver. First write one or two sentences starting with \"Reflection:\" "
                 "about what may have gone wrong in the proposed solution. Then write a new, complete "
                 f"step-by-step solution. {ANSWER_FORMAT}")
    return [{"role": "system", "content": REPAIR_SYSTEM}, {"role": "user", "content": head + instr}]


def strip_reflection(text: str) -> str:
    """For reflexion-style outputs the plan is the whole text (the reflection is harmless to
    answer extraction, which reads the final answer line)."""
    return text
