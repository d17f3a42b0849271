"""Keep benchmark problem texts out of committed files.

Generated plans sometimes restate the problem verbatim. Trajectories refer to problems by
dataset, split and index; any long verbatim copy of the problem inside a stored text is
replaced by a marker before it is written. Labels and votes are computed before redaction; where
the elision changed what a text reads as, the record says so beside the verdict it keeps
(``answer_elided``, ``elided_votes``), so relabeling gives the verdicts the live run gave.
"""
from __future__ import annotations

from difflib import SequenceMatcher

MARKER = "[problem text elided]"
MIN_CHARS = 30


def redact_problem_text(text: str, problem: str, min_chars: int = MIN_CHARS) -> str:
    """Replace every run of at least ``min_chars`` characters shared with ``problem`` by MARKER."""
    if not text or not problem:
        return text
    while True:
        matcher = SequenceMatcher(None, text, problem, autojunk=False)
        match = matcher.find_longest_match(0, len(text), 0, len(problem))
        if match.size < min_chars:
            return text
        text = text[:match.a] + MARKER + text[match.a + match.size:]


def contains_problem_text(text: str, problems, prefix_chars: int = 60) -> list[int]:
    """Indices of problems whose first ``prefix_chars`` characters occur verbatim in ``text``."""
    return [i for i, p in enumerate(problems) if len(p) >= prefix_chars and p[:prefix_chars] in text]


def _reads(extract_answer, text):
    try:
        return extract_answer(text)
    except Exception:  # noqa: BLE001  (a text the rule cannot read reads as nothing here)
        return None


def redact_record(record: dict, problem_text: str, extract_answer) -> dict:
    """A trajectory or probe record with every plan and judge output redacted against the
    problem text. Each plan's extracted final answer is stored first (``answer``), so labels
    are computed from exactly what the model wrote.

    The record is the evidence: what the live run voted and labeled on stays what relabeling
    reads. A plan whose redacted text reads another answer is marked ``answer_elided`` (its stored
    answer stands); the positions of the votes whose text the elision changed are listed in
    ``elided_votes`` beside the live verdicts (``votes``), which relabeling keeps for them."""
    def clean_round(rd: dict) -> dict:
        rd = dict(rd)
        if "plan" in rd and "answer" not in rd:
            try:
                rd["answer"] = extract_answer(rd["plan"])
            except Exception as exc:  # a malformed output labels invalid with a reason; it never costs the batch
                rd["answer"], rd["answer_error"] = None, f"{type(exc).__name__}: {exc}"[:300]
            redacted = redact_problem_text(rd["plan"], problem_text)
            if redacted != rd["plan"] and "answer_error" not in rd and _reads(extract_answer, redacted) != rd["answer"]:
                rd["answer_elided"] = True
            rd["plan"] = redacted
        if "judge" in rd:
            texts = [redact_problem_text(t, problem_text) for t in rd["judge"]]
            changed = [m for m, (a, b) in enumerate(zip(rd["judge"], texts)) if a != b]
            if changed and isinstance(rd.get("votes"), list):
                rd["elided_votes"] = changed
            rd["judge"] = texts
        return rd

    out = clean_round(record)
    if "rounds" in out:
        out["rounds"] = [clean_round(rd) for rd in out["rounds"]]
    return out
