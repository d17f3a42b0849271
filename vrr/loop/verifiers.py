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

The verifier's model may differ from the generator's (``models.judge`` in the setting).
"""
from __future__ import annotations

import re
from typing import Sequence

from ..settings import JUDGE_STYLES, VERIFIER_KINDS

# default generated-token budgets per judge vote
JUDGE_MAX_TOKENS = {"verdict": 4, "check": 96, "reason": 512}

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

    def votes(self, engine, task, problems: Sequence[str], plans: Sequence[str], M: int
              ) -> tuple[list[list[str]], list[list[int]]]:
        """Raw outputs [B][M] and votes [B][M] for plan ``plans[i]`` of problem ``problems[i]``."""
        convs = [task.prompts.judge_messages(q, task.clip_plan(p), self.style) for q, p in zip(problems, plans)]
        outs = engine.chat(convs, temperature=self.temperature, max_tokens=self.max_tokens, n=M)
        for o in outs:
            if len(o) != M:
                raise RuntimeError(f"engine returned {len(o)} judge votes, expected {M}")
        return outs, [[vote(t, self.style) for t in o] for o in outs]


def make_verifier(kind: str, style: str = "verdict", max_tokens: int | None = None, temperature: float = 0.7):
    """The verifier plug-in of a setting's ``verifier`` block."""
    if kind == "llm_judge":
        return LLMJudge(style, max_tokens, temperature)
    if kind in VERIFIER_KINDS:
        raise NotImplementedError(f"verifier kind {kind!r} is registered in the settings schema but has no "
                                  "implementation in vrr.loop.verifiers yet (only 'llm_judge')")
    raise ValueError(f"unknown verifier kind {kind!r}; known: {VERIFIER_KINDS}")
