"""Conversations of the verify-repair loop: generator, judge (verifier) and repairer (Sec. 3.1, App. B).

A task supplies its wording as a :class:`PromptSet` (``vrr.loop.tasks.gsm8k.PROMPTS``); the shape
of every conversation is built here, the same for every task:

* generator: ``Problem:\\n<problem>\\n\\n<instruction> <answer format>``;
* judge: ``Problem: ... Proposed solution:\\n<plan>\\n\\n<style instruction>`` under the judge's
  system prompt (styles in ``vrr.settings.JUDGE_STYLES``);
* repairer: the judge's prefix plus ``Reviewer feedback:`` and the repair instruction of the
  style (``self-refine``: feedback -> revised full solution, Madaan et al. 2023; ``reflexion``: a
  short reflection, then a new solution, Shinn et al. 2023; ``re-solve``: the earlier attempt is not
  shown, only the feedback on it, and the repairer solves the problem afresh).

The repairer shares the judge's system prompt and the ``Problem ... Proposed solution ...`` prefix,
so vLLM's prefix cache reuses the judge prefill of (problem, plan) for the repair call of the same
round in unperturbed settings (~35 % less prefill per instance on CPU).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import JUDGE_STYLES, REPAIR_STYLES

REPAIR_MARKER = "Reviewer feedback:"
RESOLVE_INSTRUCTION = ("You are now the solver. An earlier attempt (not shown) received the feedback above. Solve the "
                       "problem again from scratch, step by step, and avoid the mistake the feedback points to.")
PROBLEM_HEAD = "Problem:\n"
PLAN_HEAD = "Proposed solution:\n"


@dataclass(frozen=True)
class PromptSet:
    """A task's wording of the three roles; the conversation shapes are fixed by the methods."""

    generator_system: str
    generator_instruction: str
    answer_format: str
    judge_system: str
    judge_instructions: dict          # judge style -> instruction
    repair_instructions: dict         # repair style -> instruction (without the answer format)

    def generator_messages(self, problem: str) -> list[dict]:
        return [
            {"role": "system", "content": self.generator_system},
            {"role": "user", "content": f"{PROBLEM_HEAD}{problem}\n\n{self.generator_instruction} {self.answer_format}"},
        ]

    def judge_messages(self, problem: str, plan: str, style: str = "verdict") -> list[dict]:
        if style not in JUDGE_STYLES:
            raise ValueError(f"judge style must be one of {JUDGE_STYLES}, got {style!r}")
        return [
            {"role": "system", "content": self.judge_system},
            {"role": "user", "content": f"{PROBLEM_HEAD}{problem}\n\n{PLAN_HEAD}{plan}\n\n{self.judge_instructions[style]}"},
        ]

    def repair_messages(self, problem: str, plan: str, feedback: str, style: str = "self-refine") -> list[dict]:
        if style not in REPAIR_STYLES:
            raise ValueError(f"repair style must be one of {REPAIR_STYLES}, got {style!r}")
        shown = "" if style == "re-solve" else f"{PLAN_HEAD}{plan}\n\n"
        head = f"{PROBLEM_HEAD}{problem}\n\n{shown}{REPAIR_MARKER}\n{feedback}\n\n"
        instr = f"{self.repair_instructions.get(style, RESOLVE_INSTRUCTION)} {self.answer_format}"
        return [{"role": "system", "content": self.judge_system}, {"role": "user", "content": head + instr}]

    def role_of(self, conversation) -> str:
        """'generator' | 'judge' | 'repairer' for a conversation built by this prompt set."""
        user = conversation[-1]["content"]
        if REPAIR_MARKER in user:
            return "repairer"
        if conversation[0]["content"] == self.judge_system:
            return "judge"
        return "generator"


def problem_of(conversation) -> str:
    """The problem text inside a conversation built by a :class:`PromptSet`."""
    user = conversation[-1]["content"]
    body = user[len(PROBLEM_HEAD):] if user.startswith(PROBLEM_HEAD) else user
    end = body.find("\n\n" + PLAN_HEAD)
    if end < 0:
        end = body.rfind("\n\n")
    return body[:end] if end >= 0 else body


def plan_of(conversation) -> str:
    """The proposed plan inside a judge or repair conversation ('' for a generator conversation)."""
    user = conversation[-1]["content"]
    if PLAN_HEAD not in user:
        return ""
    plan = user.split(PLAN_HEAD, 1)[1]
    for tail in ("\n\n" + REPAIR_MARKER,):
        plan = plan.split(tail)[0]
    return plan
