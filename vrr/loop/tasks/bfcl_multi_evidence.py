"""What the executor judge and the repairer read of a BFCL multi-turn replay: a bounded summary that keeps each
call's name, its error if any (an executor error or an environment's ``{"error": ...}``) and the state each turn
changed (``evidence_text``), never a clip that could show nothing. Plain formatting of a replay that
``vrr.loop.tasks.bfcl_multi`` ran in the sandbox."""
from __future__ import annotations

import json
import re

TURN_LINE = "Turn {k}: "

RESULT_CHARS = 200  # of each execution result shown to the judge and the repairer
CALL_CHARS = 160    # of each call shown (its name always stays whole)
CALL_LIST_CHARS = 1500  # a turn's call list longer than this is not repeated on its header line
EVIDENCE_CHARS = 6000  # of a whole replay shown to the judge or the repairer (an 8k-token context holds the docs too)
EXECUTOR_FAILED = "Error during execution: the executor failed"
NAME_CHARS = 60  # of a call's name shown; a longer name is cut with a marker
# what would start a new line for a reader (line breaks of any kind) or hide text (other control characters)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text) -> str:
    """``text`` on one line: line breaks and other control characters escaped (``\\n``, ``\\x1b``,
    ``\\u2028``), so a call, a result or a state change can never add a line of its own ("Turn 2: ..." or
    "-> state changed: ...") to the evidence the judge reads."""
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                               else f"\\u{ord(m.group()):04x}"), str(text))


def call_name(call: str) -> str:
    """The function name of an execution string (``cd(folder='x')`` -> ``cd``), on one line and at most
    :data:`NAME_CHARS` characters (a longer one ends in ``[...]``)."""
    m = re.match(r"\s*([A-Za-z_][\w.]*)\s*\(", call)
    name = one_line(m.group(1) if m else call.strip()[:40])
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS] + "[...]"


def _rest(call: str) -> str:
    """What follows a call's name: its arguments, on one line."""
    m = re.match(r"\s*([A-Za-z_][\w.]*)\s*(?=\()", call)
    return one_line(call[m.end():] if m else call.strip()[40:])


def call_error(result) -> str | None:
    """The error of one call's execution result, or None when it succeeded: bfcl-eval's executor reports
    an exception as ``Error during execution: ...``; the environments report a refused operation by
    returning ``{"error": ...}`` (``cd: ..: No such directory``), which is a failed call as well."""
    text = str(result)
    if text.startswith("Error during execution"):
        return text
    if text.lstrip().startswith("{") and '"error"' in text:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if isinstance(obj, dict) and "error" in obj:
            return f"error: {obj['error']}"
    return None


def _clip(text: str, n: int) -> str:
    """``text`` on one line (:func:`one_line`), cut at ``n`` characters with a marker."""
    text = one_line(text)
    return text if len(text) <= n else text[:n] + " [...]"


def failure_counts(turns: list[dict]) -> tuple[int, int]:
    """(calls, failed calls) of a replay: a failed call is an executor error or an environment's
    ``{"error": ...}``."""
    calls = [c for t in turns for c in t["calls"]]
    return len(calls), sum(err is not None for _, _, err in calls)


def _runs(calls: list[tuple]) -> list[tuple[tuple, int]]:
    """Consecutive identical (call, result) collapsed: ((call, result, error), repeats)."""
    out: list[list] = []
    for c in calls:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return [(c, n) for c, n in out]


def _turn_lines(k: int, turn: dict, detail: int) -> list[str]:
    """One turn of the evidence at a level of detail: 2 = every call with its result, 1 = every call's
    name and its error, 0 = the names with their counts and the distinct errors, -1 = the header alone (how
    many calls, how many failed). The changes of state are shown at every level but the last."""
    calls = turn["calls"]
    counts = f"{len(calls)} calls, {sum(err is not None for _, _, err in calls)} failed"
    listed = "[" + ", ".join(one_line(c) for c, _, _ in calls) + "]"
    if not calls:
        head = TURN_LINE.format(k=k) + "[] (no call)"
    elif detail == 2 and len(listed) <= CALL_LIST_CHARS:
        head = TURN_LINE.format(k=k) + f"{listed} ({counts})"   # the plan's own line, read back by extract_answer
    else:
        head = TURN_LINE.format(k=k) + counts
    lines = [head]
    if detail >= 1:
        for (call, result, err), n in _runs(calls):
            times = f" (x{n})" if n > 1 else ""
            if detail == 2:
                shown = f"FAILED {err}" if err else result
                lines.append(f"  -> {call_name(call)}{_clip(_rest(call), CALL_CHARS)}{times}: "
                             f"{_clip(shown, RESULT_CHARS)}")
            else:
                lines.append(f"  -> {call_name(call)}{times}" + (f": FAILED {_clip(err, 80)}" if err else ""))
    elif calls:
        counts: dict[str, int] = {}
        for call, _, _ in calls:
            counts[call_name(call)] = counts.get(call_name(call), 0) + 1
        lines.append("  -> calls: " + ", ".join(f"{name} x{n}" for name, n in counts.items()))
        errors = list(dict.fromkeys(_clip(err, 80) for _, _, err in calls if err))
        lines += [f"  -> FAILED {e}" for e in errors[:5]] + ([f"  -> ... {len(errors) - 5} more errors"]
                                                          if len(errors) > 5 else [])
    if detail >= 0:
        lines += [f"  -> state changed: {_clip(ch, RESULT_CHARS)}" for ch in turn["state"]]
    return lines


def evidence_text(turns: list[dict], limit: int = EVIDENCE_CHARS) -> str:
    """What the executor judge and the repairer read of a replay, at most ``limit`` characters: per user
    turn its call list and how many calls failed, then one ``  -> `` line per call (identical consecutive
    calls once, with their count) with its result or error, and the environment state the turn changed. When that does not fit, results give way to the calls'
    names and errors, then to the names with their counts: every call's name and every failure stays
    visible however long one call is (a 200 KB literal, 1,000 ``pwd()`` calls)."""
    for detail in (2, 1, 0, -1):  # -1: each turn's header alone (its calls and failures counted)
        lines = [line for k, turn in enumerate(turns, 1) for line in _turn_lines(k, turn, detail)]
        text = "\n".join(lines)
        if len(text) <= limit:
            return text
    return clip_lines(lines, limit)


def clip_lines(lines: list[str], limit: int = EVIDENCE_CHARS) -> str:
    """The lines joined, cut at a line boundary once ``limit`` characters are reached, saying how many
    lines were left out; a single line longer than ``limit`` is cut itself."""
    out, size = [], 0
    for n, line in enumerate(lines):
        if size + len(line) + 1 > limit:
            if not out:
                out.append(line[:limit] + " [...]")
                n += 1
            if n < len(lines):
                out.append(f"[... {len(lines) - n} more lines]")
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)
