"""GSM8K: the task plug-in (loader, prompts, answer extraction, exact-match label, PM-stress edits).

* ``load_gsm8k(split)`` reads the local copy (``$VRR_GSM8K_DIR``, else ``<repo>/../shared/data/gsm8k``,
  see ``vrr.common.paths.shared_data_dirs``) and falls back to the Hugging Face hub
  (``datasets.load_dataset("openai/gsm8k", "main")``, imported lazily) for online users.
* ``extract_answer(text)`` finds the final numeric answer of a model output: the last explicit
  answer statement that states a number (``\\boxed{N}``, ``#### N``, "The (final) answer is N",
  read at the first number after its phrase; template echoes and quoted statements are passed
  over), else the last "Answer: N", else the last number. Numbers are read by ONE grammar,
  ``parse_number`` (comma groups of three, decimals, exponents, signs, ``$``, ``%``, units; exact
  Fractions; non-finite, huge and mixed-script numbers are no number): the references, the plans'
  answers and what vote programs print.
* ``is_correct`` / ``label`` implement the paper's GSM8K validity rule (exact match, compared
  numerically; App. B, "True validity is adjudicated by exact match on GSM8K"); ``answers_agree`` is
  the same comparison for votes (a program's printed answer, another solver's answer).
* ``make_perturbation`` / ``apply_perturbation`` build the prompt-mismatch (PM) stress setting
  (App. B): the repairer's copy of the problem gets a numeric- or condition-level change,
  deterministic per ``(seed, index)``; judge and labels keep the original. A perturbation spec
  stores only the edited span (offset, original token, replacement), never the problem text.
* ``PROMPTS`` is the task's wording of the three roles; :class:`GSM8K` is the plug-in
  (``vrr.loop.tasks.get_task("gsm8k")``).
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import re
import sys
import unicodedata
from fractions import Fraction
from pathlib import Path

from ..sandbox import REDACTION_MARKER
from ..prompts import PromptSet
from .base import Problem as _Problem
from .base import Task, count_rows, local_file, read_jsonl_rows, reads_model_text

DATASET = "gsm8k"
SPLITS = ("train", "test")


# --------------------------------------------------------------------------- loading
class Problem(_Problem):
    """A GSM8K problem: ``answer`` is the worked reference solution ending in ``#### N``."""

    def __init__(self, split: str, index: int, question: str, answer: str):
        super().__init__(split, index, question, answer, DATASET)

    @property
    def gold(self) -> str:
        return gold_answer(self.answer)


def local_path(split: str) -> Path | None:
    return local_file(DATASET, f"{split}.jsonl", "VRR_GSM8K_DIR")


_CACHE: dict[tuple, list[Problem]] = {}


def load_gsm8k(split: str = "test", path: str | os.PathLike | None = None,
               allow_hub: bool = True) -> list[Problem]:
    """All problems of ``split`` as :class:`Problem` (index = 0-based row number)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    key = (split, str(path or local_path(split)))
    if key in _CACHE:
        return _CACHE[key]

    def from_hub():
        import datasets  # lazy: only online users need it

        return [{"question": r["question"], "answer": r["answer"]}
                for r in datasets.load_dataset("openai/gsm8k", "main")[split]]

    rows = read_jsonl_rows(DATASET, split, "VRR_GSM8K_DIR", path, allow_hub, from_hub)
    probs = [Problem(split, i, r["question"], r["answer"]) for i, r in enumerate(rows)]
    _CACHE[key] = probs
    return probs


def get_problem(split: str, index: int) -> Problem:
    return load_gsm8k(split)[index]


# --------------------------------------------------------------------------- answers
# The number grammar (labels and votes read numbers with it alone; see parse_number).
MAX_NUMBER_DIGITS = 400  # digits of one number; more is no number (beyond any double; bounds int())
MAX_EXPONENT = 400       # |exponent| of scientific notation; more is no number (10**e is never built)
LARGEST = Fraction(sys.float_info.max)  # a number of larger magnitude is not finite as a double: no number
TOLERANCE = Fraction(1, 10 ** 6)        # relative, for answers that are not both integers

# What glues digits into one token that is not a number of the grammar: an underscore ("1_000"), a
# separator of another script (Arabic U+066B/U+066C/U+060C, fullwidth U+FF0C/U+FF0E), an apostrophe or a
# middle dot ("1'000"), or letters followed by a digit ("0x10", "0b101", "5x3").
_GLUE = "_'\u2019\u00b7\u066b\u066c\u060c\uff0c\uff0e"
# A magnitude: an integer part with comma separators only in groups of exactly three digits ("1,000",
# never "1,8"), an optional decimal part, an optional exponent; the whole token: never preceded or
# followed by more of a number ("1,8", "1.2.3", "1_000", "0x10", "\u0661\u066b\u0665" are no numbers; a
# mantissa is never read without its exponent).
_MAGNITUDE = (rf"(?<![\d.,_])(?<!\d[{_GLUE}])(?<!\d[^\W\d_])(?:(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)"
              rf"(?:[eE][-+]?\d+|(?![eE][-+]?\d))(?![,.]?\d)(?!_)(?![{_GLUE}]\d)(?![^\W\d]+\d)")
# A sign (not an operator: no value right before it), an optional dollar sign, a magnitude, and an
# optional "/ magnitude".
_NUM = rf"(?:(?<![\w)\]}}])[-+])?(?:\$\s?)?{_MAGNITUDE}(?:\s*/\s*{_MAGNITUDE})?"
_PARTS = re.compile(r"([-+]?)(\d[\d,]*)?(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


def gold_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K reference solution, commas removed."""
    m = re.search(r"####\s*(.+)$", solution.strip(), flags=re.S)
    if not m:
        raise ValueError("reference solution has no '####'")
    return m.group(1).strip().replace(",", "").replace("$", "")


def _magnitude_value(token: str) -> Fraction | None:
    """The exact value of one signed magnitude token of the grammar (no "$", no spaces), or None when
    it is no number: digits of more than one script, too many digits, too large an exponent, or a value
    beyond the double range."""
    digits = re.findall(r"\d", token)
    zeros = {ord(c) - unicodedata.decimal(c) for c in digits}
    if len(zeros) != 1 or len(digits) > MAX_NUMBER_DIGITS:
        return None
    zero = zeros.pop()
    token = token.translate({zero + d: str(d) for d in range(10)})
    m = _PARTS.fullmatch(token)
    if m is None:
        return None
    sign, whole, frac, exp = m.groups()
    if exp is not None and abs(int(exp)) > MAX_EXPONENT:
        return None
    v = Fraction(int((whole or "0").replace(",", "") + (frac or "")), 10 ** len(frac or ""))
    v *= Fraction(10) ** int(exp or 0)
    v = -v if sign == "-" else v
    return v if abs(v) <= LARGEST else None


def _token_value(token: str) -> Fraction | None:
    """The value of one token of the grammar (``_NUM``: a number or ``a / b``), or None when the token is
    not one."""
    if re.fullmatch(_NUM, token.strip()) is None:
        return None
    parts = [p.replace("$", "").replace(" ", "").strip() for p in re.split(r"\s*/\s*", token)]
    values = [_magnitude_value(re.sub(r"\s", "", p)) for p in parts]
    if any(v is None for v in values):
        return None
    if len(values) == 2:
        if values[1] == 0:
            return None
        q = values[0] / values[1]
        return q if abs(q) <= LARGEST else None
    return values[0]


_FRAC = r"\\[dt]?frac\{\s*([-+]?[\d.,]+)\s*\}\{\s*([\d.,]+)\s*\}"


@reads_model_text()
def parse_number(s: str | None) -> Fraction | None:
    """The number a text states, exactly, as a Fraction (None: no number): the ONE number grammar of
    GSM8K, used for the reference answers, the plans' answers and what vote programs print.

    The FIRST number of the text is read (a ``\\frac{a}{b}`` only when it comes first), so words and
    numbers after it never replace it; when that first number is ill-formed the text states none (no
    later number is taken instead). A number is

    * an optional sign ``-``/``+``/U+2212 (a ``-`` right after a value is an operator: "5-3" reads 5),
      an optional ``$`` (also ``\\$``), then the magnitude;
    * the magnitude: an integer part whose comma separators group exactly three digits ("1,000",
      "12,345.5"; "1,8", "1,0000" and "12,34,567" are no numbers), an optional decimal part ("18.",
      "18.00", ".5"), an optional exponent ("1e3", "2e-05", "1e+16"); a number directly followed by
      another digit, comma-digit or dot-digit ("1.2.3") is no number;
    * optionally ``/`` and a second magnitude ("3/4"; a zero denominator is no number); also
      ``\\frac{a}{b}``, ``\\dfrac``, ``\\tfrac``;
    * units, "%" and text around it are ignored ("7 dollars", "50%");
    * the number is the whole token or no number: digits glued by an underscore, letters or another
      script's separator ("1_000", "0x10", "5x3", "\u0661\u066b\u0665", "\uff11\uff0c\uff10\uff10\uff10") are
      no number, and neither is one after a detached sign ("- 5": a sign, a space, then the number,
      with no value before the sign; the reader cannot tell minus five from a dash).

    Non-finite values are no numbers: "inf", "nan" and "Infinity" have no digits, and a value beyond
    the double range ("1e309", a 400-digit integer) or with more than :data:`MAX_NUMBER_DIGITS` digits
    or an exponent beyond :data:`MAX_EXPONENT` gives None (so nothing huge is ever built). Digits may
    be any Unicode decimal digits ("\uff11\uff18" and "\u0661\u0668" read 18), but all digits of one
    number must come from one script ("1\u0668" is no number); separators are ASCII."""
    t = s.strip().replace("\u2212", "-")
    t = re.sub(r"\\(?:text|mathrm|mbox)\{([^}]*)\}", r"\1", t)
    t = t.replace("\\$", "$").replace("\\%", "%").replace("\\!", "").replace("{,}", ",")
    frac, m, digit = re.search(_FRAC, t), re.search(_NUM, t), re.search(r"\d", t)
    if frac and (not m or frac.start() <= m.start()):
        a, b = _token_value(frac.group(1)), _token_value(frac.group(2))
        if a is None or b is None or b == 0 or abs(a / b) > LARGEST:
            return None
        return a / b
    if m is None or digit.start() < m.start():  # the first digits are no number: no later one stands in
        return None
    return _value_at(t, m)


def _value_at(text: str, m: re.Match) -> Fraction | None:
    """The value of the grammar's token ``m`` found in ``text``, or None when a detached sign stands before
    it: "- 5" (a sign, then space) is no number, unless the sign follows a value ("10 - 5", "x - 5"), where
    it is an operator and the number stands on its own."""
    return None if _detached_sign(text, m.start()) else _token_value(m.group(0))


def _detached_sign(text: str, start: int) -> bool:
    """True when a ``-``/``+`` and at least one space come right before ``start``, and no value (a digit, a
    closing bracket, ``%`` or a one-letter variable) stands before that sign. Only the spaces around the
    one sign are read, so scanning every number of a text stays linear."""
    j = start - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    if j == start - 1 or j < 0 or text[j] not in "+-":
        return False
    k = j - 1
    while k >= 0 and text[k].isspace():
        k -= 1
    if k < 0:
        return True
    c = text[k]
    if c.isdecimal() or c in ")]}%":
        return False
    return not (c.isalpha() and (k == 0 or not text[k - 1].isalnum()))


def same_number(a: Fraction, b: Fraction) -> bool:
    """Two numbers are the same answer: exactly equal when both are integers (10000000000000000 and
    1e+16 agree, 10000000000000001 does not); otherwise within a relative 1e-6 (a program's 12.3 may
    print as 12.299999999999999), computed exactly."""
    if a.denominator == 1 and b.denominator == 1:
        return a == b
    return abs(a - b) <= TOLERANCE * max(1, abs(a), abs(b))


def _as_number(x) -> Fraction | None:
    if x is None or isinstance(x, bool):
        return None
    if isinstance(x, str):
        return parse_number(x)
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    if isinstance(x, float) and math.isfinite(x):
        return Fraction(x)
    return None


MAX_BOX_CHARS = 1000        # of a box's content read for its number (a number opens a box)
MAX_STATEMENT_CHARS = 300  # of the line after an answer phrase read for its number (bounds each phrase's reading)


def _boxes(text: str) -> list[tuple[int, str]]:
    """Every closed ``\\boxed{...}`` / ``\\fbox{...}`` of the text as (position, content), in order
    (balanced braces; an unclosed box is left out), in one pass over the braces; each content is cut
    at :data:`MAX_BOX_CHARS` characters (nested boxes never make the reading quadratic)."""
    openers = {m.end(): m.start() for m in re.finditer(r"\\(?:boxed|fbox)\s*(?=\{)", text)}
    out, stack = [], []
    for brace in re.finditer(r"[{}]", text):
        k = brace.start()
        if text[k] == "{":
            stack.append(k)
        elif stack:
            j = stack.pop()
            if j in openers:
                out.append((openers[j], text[j + 1:min(k, j + 1 + MAX_BOX_CHARS)]))
    return sorted(out)


# Answer phrases; what follows one on its line is its statement (a phrase repeated on one line, "the answer
# is: The answer is 48", is found at every occurrence). The first three are explicit statements; a bare
# "Answer: N" only counts when no explicit statement states a number.
_ANSWER_PATTERNS = [
    r"####\s*",
    r"(?:the\s+)?final\s+answer\s*(?:is|:|=)\s*:?\s*",
    r"the\s+answer\s+is\s*:?\s*",
    r"answer\s*[:=]\s*",
]


def _line_after(text: str, start: int) -> str:
    """The statement after an answer phrase: the rest of its line, cut only when it is read (so phrases
    repeated on one line never copy it once each). A line longer than :data:`MAX_STATEMENT_CHARS` is cut at
    the last space before that, never inside a token (a number cut short would read as another number)."""
    piece = text[start:start + MAX_STATEMENT_CHARS + 1]
    line = piece.split("\n", 1)[0]
    if len(line) <= MAX_STATEMENT_CHARS:
        return line
    head = line[:MAX_STATEMENT_CHARS]
    if line[MAX_STATEMENT_CHARS].isspace() or head[-1].isspace():
        return head
    parts = head.rsplit(None, 1)  # from the right: only the cut token is read
    return head[:len(head) - len(parts[-1])] if len(parts) == 2 else ""
_EXPLICIT = 3  # the first _EXPLICIT patterns (and boxes) are explicit answer statements
_QUOTES = "\"\u201c\u00ab"

# What may stand between an answer phrase and its number: markup, a colon, a quote, "approximately".
_LEAD = re.compile(r"^(?:[\s:=*$({\[\"\u201c]|\\\$|\\[(\[]|\\boxed\{|\\text\{|approximately\b|about\b|exactly\b)*",
                   re.I)
# An arithmetic expression (numbers, operators, brackets, LaTeX operators, a one-letter variable):
# what may stand before the "=" of "expr = N".
_LATEX_OPS = re.compile(r"\\(?:times|cdot|div|left|right|[dt]?frac|[,;!$%])")
_EXPR = re.compile(r"[\d\s.,+\-*/\u00d7\u00f7\u00b7\u2212()\[\]{}$%^]*")


def _is_expression(s: str) -> bool:
    """True when ``s`` is arithmetic only (no words), with balanced round brackets."""
    bare = re.sub(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])", " ", _LATEX_OPS.sub(" ", s))
    return bool(s.strip()) and _EXPR.fullmatch(bare) is not None and bare.count("(") == bare.count(")")


def _stated_number(capture: str) -> Fraction | None:
    """The number an answer phrase states: the FIRST number right after the phrase (after markup, a
    colon, a quote or "approximately"), within its sentence (up to ". ", a line end, a closing
    ``\\)``/``\\]``/``$``). A statement that does not start with a number states none: the prompt's
    "N." template, or a sentence that mentions a number only later. One exception: a chain
    "expr = expr = N" of arithmetic states its result N; words before an "=" ("15 (3 boxes = 45)")
    mean the first number is the answer."""
    rest = capture[_LEAD.match(capture).end():]
    statement = re.split(r"\.\s|\.$|\n|\\\)|\\\]|(?<!\\)\$(?!\s?\d)", rest, maxsplit=1)[0]
    parts = statement.split("=")
    i = 0
    while i < len(parts) - 1 and _is_expression(parts[i]):
        i += 1
    if i:
        statement = parts[i][_LEAD.match(parts[i]).end():]
    if not re.match(r"[-+]?\$?\s?\.?\d|\\\$\s?\d|[-+]?\s?\\[dt]?frac\{", statement):
        return None
    return parse_number(statement)


def _quoted(text: str, start: int) -> bool:
    """True when the answer phrase at ``start`` opens a quotation ('... is "The answer is 12"'): an echo of
    the proposed solution, the feedback or the prompt, not the plan's own statement."""
    before = text[max(0, start - 200):start].rstrip(" *")
    return bool(before) and before[-1] in _QUOTES


def extract_answer(text: str | None) -> str | None:
    """Final numeric answer of a model output as a normalised string (None if absent).

    The answer is the LAST explicit answer statement that states a number: a ``\\boxed{N}``, "#### N",
    "final answer is N" or "The answer is N", whichever comes last in the text. A statement's answer is
    the first number right after its phrase (a later number or ``\\frac`` in the sentence never
    replaces it); a statement stating no number (an echo of the prompt's "The answer is N." template,
    an empty box, "the answer is calculated ...") is passed over for the one before it. A statement
    inside quotation marks (an echo of the proposed solution or the prompt) counts only when no
    unquoted one states a number. Without any explicit statement, the last "Answer: N"; otherwise
    the last number in the text.
    """
    return answer_statement(text)[0]


@reads_model_text(fallback=(None, None))
def answer_statement(text: str | None) -> tuple[str | None, str | None]:
    """:func:`extract_answer` with the text it read the answer from: the box's content or the answer
    statement's line (None when the answer is only the last number of the text)."""
    explicit, bare = [], []  # (position, quoted, box content or None, statement start or None)
    for pos, content in _boxes(text):
        explicit.append((pos, False, content, None))
    for rank, pat in enumerate(_ANSWER_PATTERNS):
        for hit in re.finditer(pat, text, flags=re.I):
            (explicit if rank < _EXPLICIT else bare).append((hit.start(), _quoted(text, hit.start()), None, hit.end()))
    for group in (explicit, bare):
        for want_quoted in (False, True):
            for pos, quoted, box, capture in sorted(group, key=lambda t: t[0], reverse=True):
                if quoted != want_quoted:
                    continue
                source = box if box is not None else _line_after(text, capture)
                v = parse_number(source) if box is not None else _stated_number(source)
                if v is not None:
                    return _fmt(v), source
    plain = text.replace("\u2212", "-")
    for m in reversed(list(re.finditer(_NUM, plain))):  # the grammar's tokens, last first
        v = _value_at(plain, m)
        if v is not None:
            return _fmt(v), None
    return None, None


def _fmt(v: Fraction) -> str:
    """A number as the answer string: an integer's digits, else a decimal rounded to 6 places."""
    r = round(Fraction(v), 6)
    if r.denominator == 1:
        return str(r.numerator)
    whole, frac = divmod(abs(r.numerator) * 10 ** 6 // r.denominator, 10 ** 6)
    return f"{'-' if r < 0 else ''}{whole}.{frac:06d}".rstrip("0")


def is_correct(pred, gold) -> bool:
    """Exact match compared numerically (App. B): both read with :func:`parse_number` (strings) or taken
    as they are (numbers), then :func:`same_number`. No number on either side is no match."""
    p, g = _as_number(pred), _as_number(gold)
    return p is not None and g is not None and same_number(p, g)


def answers_agree(a, b) -> bool:
    """Two answers name the same number: a plan's extracted answer and what a vote program printed (its
    last line) or another solver's answer. The one comparison of GSM8K votes (:func:`is_correct`)."""
    return is_correct(a, b)


def label(output_text: str | None, gold: str) -> int:
    """True validity y in {0,1} of one plan: exact match of its extracted final answer."""
    return int(is_correct(extract_answer(output_text), gold))


# --------------------------------------------------------------------------- perturbations
# Condition-level swaps (word-bounded, case-preserving on the first letter).
CONDITION_SWAPS = [
    ("more than", "less than"), ("less than", "more than"), ("fewer than", "more than"),
    ("twice", "three times"), ("three times", "twice"), ("double", "triple"), ("triple", "double"),
    ("half", "a third"), ("a third", "a quarter"), ("a quarter", "a third"),
    ("increases", "decreases"), ("decreases", "increases"), ("increased", "decreased"),
    ("decreased", "increased"), ("gains", "loses"), ("loses", "gains"), ("buys", "sells"),
    ("sells", "buys"), ("each day", "every other day"), ("per hour", "per minute"),
    ("every day", "every other day"), ("older", "younger"), ("younger", "older"),
    ("profit", "loss"), ("discount", "markup"), ("more", "fewer"), ("fewer", "more"),
]


def _rng(seed: int, index: int, salt: str = "pm") -> random.Random:
    h = hashlib.sha256(f"{salt}:{seed}:{index}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def _numeric_spans(q: str) -> list[tuple[int, int, str]]:
    out = []
    for m in re.finditer(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])", q):
        out.append((m.start(), m.end(), m.group(0)))
    return out


def _perturb_number(tok: str, rng: random.Random) -> str:
    clean = tok.replace(",", "")
    if "." in clean:
        v = float(clean)
        new = v * rng.choice([1.5, 2.0, 0.5, 1.25])
        s = f"{new:.2f}".rstrip("0").rstrip(".")
        return s if s != clean else f"{v + 1:.2f}".rstrip("0").rstrip(".")
    v = int(clean)
    choices = [v + d for d in (1, 2, 3, 5, 7) if v + d != v]
    if v > 2:
        choices += [v - d for d in (1, 2) if v - d > 0]
    if v >= 4:
        choices += [v * 2, max(1, v // 2) if v // 2 != v else v + 1]
    new = rng.choice(choices)
    if new == v:
        new = v + 1
    return f"{new:,}" if "," in tok else str(new)


def make_perturbation(question: str, seed: int, index: int, kind: str = "auto") -> dict:
    """Deterministic perturbation spec for problem ``index`` under ``seed``.

    ``kind``: "numeric" (change one number), "condition" (swap one relational phrase),
    or "auto" (condition with prob. 1/3 when one exists, else numeric). The spec is
    ``{"kind", "start", "end", "orig", "new", "seed"}``: offsets into the ORIGINAL question.
    """
    rng = _rng(seed, index)
    nums = _numeric_spans(question)
    return pick_edit(nums, condition_spans(question, CONDITION_SWAPS), rng, kind, seed)


def condition_spans(question: str, swaps, free=None) -> list[tuple[int, int, str, str]]:
    """Non-overlapping (start, end, original, replacement) spans of the condition phrases in ``question``
    (word-bounded, case-insensitive; the longer phrase wins an overlap); ``free(start, end)`` may veto spans."""
    low = question.lower()
    conds = [(m.start(), m.end(), question[m.start():m.end()], b) for a, b in swaps
             for m in re.finditer(r"\b" + re.escape(a) + r"\b", low) if free is None or free(m.start(), m.end())]
    conds.sort(key=lambda t: (t[0], -(t[1] - t[0])))
    dedup, last_end = [], -1
    for c in conds:
        if c[0] >= last_end:
            dedup.append(c)
            last_end = c[1]
    return dedup


def pick_edit(nums, conds, rng: random.Random, kind: str, seed: int) -> dict:
    """The PM-stress edit spec: a condition swap (kind "condition", or "auto" with probability 1/3 when
    there is one and always when there is no number), else one changed number, else none."""
    use_cond = kind == "condition" or (kind == "auto" and conds and (not nums or rng.random() < 1 / 3))
    if use_cond and conds:
        s, e, orig, new = conds[rng.randrange(len(conds))]
        if orig[:1].isupper():
            new = new[:1].upper() + new[1:]
        return {"kind": "condition", "start": s, "end": e, "orig": orig, "new": new, "seed": seed}
    if not nums:
        return {"kind": "none", "start": 0, "end": 0, "orig": "", "new": "", "seed": seed}
    s, e, tok = nums[rng.randrange(len(nums))]
    return {"kind": "numeric", "start": s, "end": e, "orig": tok, "new": _perturb_number(tok, rng), "seed": seed}


def apply_perturbation(question: str, spec: dict | None) -> str:
    """Rebuild the repairer's (perturbed) copy from the original question and a spec."""
    if not spec or spec.get("kind") in (None, "none"):
        return question
    s, e = spec["start"], spec["end"]
    if question[s:e] != spec["orig"]:
        raise ValueError("perturbation spec does not match the question text")
    return question[:s] + spec["new"] + question[e:]


# --------------------------------------------------------------------------- prompts and plug-in
ANSWER_FORMAT = 'End your response with a final line of the form "The answer is N." where N is a number.'

PROMPTS = PromptSet(
    generator_system="You are a careful math tutor. Solve grade-school math word problems step by step.",
    generator_instruction="Solve the problem step by step.",
    answer_format=ANSWER_FORMAT,
    judge_system=("You are a strict grader. You check whether a proposed solution to a math word "
                  "problem is correct."),
    judge_instructions={
        "verdict": ("Is the proposed solution correct, including its final answer? "
                    "Reply with exactly one word: ACCEPT if it is correct, REJECT if it is not."),
        "check": ("Check the key calculation(s) and the final answer against the problem in at most two "
                  "short sentences. Then write a last line that is exactly \"VERDICT: ACCEPT\" if the "
                  "solution is correct or \"VERDICT: REJECT\" if it is not."),
        "reason": ("Solve the problem yourself step by step, then compare your result with the proposed "
                   "final answer. Finish with a last line that is exactly \"VERDICT: ACCEPT\" if the "
                   "proposed solution is correct or \"VERDICT: REJECT\" if it is not."),
    },
    repair_instructions={
        "self-refine": ("You are now the solver. Using the feedback, check the proposed solution and write an "
                        "improved, complete step-by-step solution (fix any mistakes)."),
        "reflexion": ("You are now the solver. First write one or two sentences starting with \"Reflection:\" "
                      "about what may have gone wrong in the proposed solution. Then write a new, complete "
                      "step-by-step solution."),
    },
)


class GSM8K(Task):
    """GSM8K as a task plug-in: exact numeric match of the final answer (App. B)."""

    name = DATASET
    prompts = PROMPTS
    label_rule = "gsm8k exact match (numeric) vs original problem"
    splits = SPLITS

    def load(self, split: str) -> list[Problem]:
        return load_gsm8k(split)

    def split_size(self, split: str) -> int:
        """The rows of the split's local file, counted; without one, the problems loaded."""
        path = local_path(split) if split in SPLITS else None
        return count_rows(path) if path is not None else len(self.load(split))

    def extract_answer(self, text: str | None) -> str | None:
        return extract_answer(text)

    def is_valid(self, answer, problem: Problem) -> bool:
        return is_correct(answer, problem.gold)

    def label_round(self, round_record: dict, problem: Problem) -> int:
        """Exact match of the plan's answer. The answer stored at generation (read before redaction)
        stands, unless reading the stored plan again finds another answer in a stated answer (a box or
        an answer statement) that redaction left intact: then the current extraction rule wins."""
        return int(self.is_valid(self.stored_answer(round_record), problem))

    def stored_answer(self, round_record: dict):
        if "answer" in round_record and round_record.get("answer_elided") is True:  # redaction changed what the plan reads
            return round_record["answer"]
        if "answer" not in round_record:
            return extract_answer(round_record.get("plan"))
        again, source = answer_statement(round_record.get("plan"))
        if again != round_record["answer"] and source is not None and REDACTION_MARKER not in source:
            return again
        return round_record["answer"]

    def answers_agree(self, a, b) -> bool:
        """Two extracted final answers name the same number (the re-solving verifier's vote)."""
        return answers_agree(a, b)

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        return make_perturbation(problem.question, seed, problem.index, kind)

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        return apply_perturbation(text, spec)

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        gold = parse_number(problem.gold) or Fraction(0)
        return f"Step. The answer is {_fmt(gold if correct else gold + 7)}."
