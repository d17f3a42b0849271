"""BFCL simple (single call): the task plug-in (paper App. B: "AST matching ... on BFCL", the official
bfcl-eval AST checker).

* ``load(split)``: split = the call language, "python" (the classic 400-item simple category; "test"
  is an alias), "java" (100) or "javascript" (50). Files ``BFCL_v4_simple_<lang>.json`` and
  ``possible_answer/...`` from ``$VRR_BFCL_DIR``, else ``../shared/data/bfcl``
  (``vrr.common.paths.shared_data_dirs``), else the data folder of the installed bfcl-eval package.
  The problem text is the user request followed by the function documentation (JSON) with BFCL's
  language hints; ``answer`` holds the raw functions, the possible answers and the language.
* ``extract_answer(text)``: the call string: the last fenced code block, or the last line that starts
  with ``name(`` / ``[name(``, cut at the balancing bracket. None when there is no call.
* ``is_valid`` / ``label_rounds``: the OFFICIAL checker, called in its own interpreter: the venv of
  ``scripts/install_bfcl_eval.sh`` (``$VRR_BFCL_PYTHON``, else ``~/.cache/vrr/venv-bfcl-eval/bin/python``)
  runs ``vrr/loop/tasks/bfcl_worker.py`` (``default_decode_ast_prompting`` + ``ast_checker``, as
  bfcl-eval's own runner does for prompting models). One long-lived worker serves every batch
  (:class:`vrr.loop.sandbox.CheckerProcess`); a missing venv raises :class:`BFCLCheckerMissing`
  naming the install command. Malformed outputs are invalid with the checker's reason, never raise.
* ``make_perturbation``: the PM-stress edit (App. B) of the user request only: one number changes (or,
  with prob. 1/3 or when there is no number, one condition word; failing both, one proper noun inside a
  sentence); span-only spec, as for GSM8K.
* ``synthetic_plan``: a call built from the first possible answer (correct) or with one argument
  value changed (incorrect), for the fake engine backend.
"""
from __future__ import annotations

import copy
import json
import os
import re
import threading
from pathlib import Path

from ...common.paths import shared_data_dirs
from ..prompts import PromptSet
from .base import Problem as _Problem
from .base import Task, count_rows, reads_model_text
from .gsm8k import _perturb_number, _rng
from .gsm8k import apply_perturbation as _apply_span
from ..sandbox import CheckerProcess

DATASET = "bfcl"
LANGUAGES = ("python", "java", "javascript")
SPLIT_ALIASES = {"test": "python"}
BFCL_EVAL_VERSION = "2026.3.23"  # the wheel the shared data were copied from
DEFAULT_VENV = Path.home() / ".cache" / "vrr" / "venv-bfcl-eval"
INSTALL_HINT = "bash scripts/install_bfcl_eval.sh {venv}"
ITEM_SECONDS = 30.0  # a call whose decoding does not finish in this time is invalid ("timeout")
WORKER = Path(__file__).with_name("bfcl_worker.py")
REQUEST_HEAD = "User request: "
FUNCTIONS_HEAD = "Available function (JSON):\n"


class BFCLCheckerMissing(RuntimeError):
    """The bfcl-eval venv (the official AST checker) is not installed."""


# --------------------------------------------------------------------------- the checker
def bfcl_python() -> Path:
    """Interpreter of the bfcl-eval venv: ``$VRR_BFCL_PYTHON``, else the default venv."""
    env = os.environ.get("VRR_BFCL_PYTHON")
    path = Path(env) if env else DEFAULT_VENV / "bin" / "python"
    if not path.exists():
        raise BFCLCheckerMissing(
            f"the official BFCL AST checker needs the bfcl-eval venv, and {path} does not exist. Install it "
            f"with `{INSTALL_HINT.format(venv=DEFAULT_VENV)}` (or set VRR_BFCL_PYTHON to the python of a venv "
            f"holding bfcl-eval=={BFCL_EVAL_VERSION})")
    return path


def _worker_env() -> dict:
    # The venv must see only its own packages (not this repo's PYTHONPATH).
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


_CHECKER: CheckerProcess | None = None
_CHECKER_LOCK = threading.Lock()


def checker() -> CheckerProcess:
    """The shared bfcl-eval worker of this process (started at first use; raises if the venv is missing)."""
    global _CHECKER
    bfcl_python()  # a clear error before any process is spawned
    with _CHECKER_LOCK:
        if _CHECKER is None:
            _CHECKER = CheckerProcess(lambda: [str(bfcl_python()), str(WORKER)], "bfcl/ast_checker",
                                      item_seconds=ITEM_SECONDS, env=_worker_env())
        return _CHECKER


def checker_available() -> bool:
    """True when the bfcl-eval venv exists (the tests skip without it)."""
    try:
        bfcl_python()
        return True
    except BFCLCheckerMissing:
        return False


def check_calls(items: list[tuple]) -> list[dict]:
    """Verdicts (``valid``, ``error``, ``error_type``) of ``(call string or None, problem)`` pairs by
    the official AST checker: one worker, one request per item."""
    reqs = [{"functions": p.functions, "ground_truth": p.ground_truth, "language": p.language,
             "output": a if isinstance(a, str) else None} for a, p in items]
    return checker().run(reqs) if reqs else []


# --------------------------------------------------------------------------- loading
class Problem(_Problem):
    """A BFCL simple problem: ``question`` = request + function docs; ``answer`` = {"id", "language",
    "functions", "ground_truth", "request": [start, end]} (the request's span inside ``question``)."""

    def __init__(self, split: str, index: int, question: str, answer: dict):
        super().__init__(split, index, question, answer, DATASET)

    @property
    def functions(self) -> list:
        """The raw function docs (what the checker gets)."""
        return self.answer["functions"]

    @property
    def ground_truth(self) -> list:
        """The possible answers: ``[{func: {param: [acceptable values]}}]``."""
        return self.answer["ground_truth"]

    @property
    def language(self) -> str:
        """"python", "java" or "javascript"."""
        return self.answer["language"]


def language_of(split: str) -> str:
    """The language a split names ("test" is python)."""
    lang = SPLIT_ALIASES.get(split, split)
    if lang not in LANGUAGES:
        raise ValueError(f"bfcl_single: split must be a language {LANGUAGES} (or 'test' = python), got {split!r}")
    return lang


def _data_dirs() -> list[Path]:
    dirs = shared_data_dirs(DATASET, env_var="VRR_BFCL_DIR")
    py = Path(os.environ["VRR_BFCL_PYTHON"]) if os.environ.get("VRR_BFCL_PYTHON") else DEFAULT_VENV / "bin" / "python"
    venv = py.parent.parent
    dirs += sorted(venv.glob("lib/python3*/site-packages/bfcl_eval/data"))  # the wheel's own copy
    return dirs


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


_HINT = {"python": " Note that the provided function is in Python 3 syntax.",
         "java": " Note that the provided function is in Java 8 SDK syntax.",
         "javascript": " Note that the provided function is in JavaScript syntax."}
_LANG_NAME = {"java": "Java", "javascript": "JavaScript"}


def prompt_functions(functions: list, language: str) -> list:
    """The function docs as the model sees them: BFCL's language hints, mirroring
    ``bfcl_eval.utils._func_doc_language_specific_pre_processing`` (prompt wording, not checking)."""
    out = copy.deepcopy(functions)
    for item in out:
        item["description"] = item.get("description", "") + _HINT[language]
        if language == "python":
            continue
        name = _LANG_NAME[language]
        for value in item["parameters"]["properties"].values():
            if value["type"] == "any":
                value["description"] += f" This parameter can be of any type of {name} object in string representation."
            else:
                value["description"] += f" This is {name} {value['type']} type parameter in string representation."
            if value["type"] in ("ArrayList", "Array", "array") and "items" in value:
                value["description"] += (f" The list elements are of type {value['items']['type']}; "
                                         "they are not in string representation.")
                del value["items"]
            if language == "javascript" and value["type"] == "dict" and "properties" in value:
                value["description"] += (" The dictionary entries have the following schema; they are not in "
                                         f"string representation. {json.dumps(value['properties'])}")
                del value["properties"]
            value["type"] = "string"
    return out


_CACHE: dict[tuple, list[Problem]] = {}


def _simple_files(lang: str) -> tuple[Path, Path]:
    """The question and possible-answer files of one language."""
    name = f"BFCL_v4_simple_{lang}.json"
    for d in _data_dirs():
        q, a = d / name, d / "possible_answer" / name
        if q.exists() and a.exists():
            return q, a
    raise FileNotFoundError(f"no {name} (+ possible_answer/) in {_data_dirs()}")


def load_bfcl(split: str = "python") -> list[Problem]:
    """All BFCL simple problems of one language (index = 0-based row number)."""
    lang = language_of(split)
    q, a = _simple_files(lang)
    key = (split, str(q))
    if key in _CACHE:
        return _CACHE[key]
    questions, answers = _read_jsonl(q), _read_jsonl(a)
    if [r["id"] for r in questions] != [r["id"] for r in answers]:
        raise ValueError(f"{q} and {a}: the ids differ")
    probs = []
    for i, (qr, ar) in enumerate(zip(questions, answers)):
        request = " ".join(m["content"] for m in qr["question"][0] if m["role"] == "user")
        docs = json.dumps(prompt_functions(qr["function"], lang), ensure_ascii=False)
        text = f"{REQUEST_HEAD}{request}\n\n{FUNCTIONS_HEAD}{docs}"
        span = [len(REQUEST_HEAD), len(REQUEST_HEAD) + len(request)]
        probs.append(Problem(split, i, text, {"id": qr["id"], "language": lang, "functions": qr["function"],
                                              "ground_truth": ar["ground_truth"], "request": span}))
    _CACHE[key] = probs
    return probs


# --------------------------------------------------------------------------- answers
_FENCE = re.compile(r"```[^\n`]*\n?(.*?)```", re.S)
# Possessive runs of blanks: a line of many spaces must not be retried at every split of two adjacent runs.
_CALL_START = re.compile(r"(?m)^[ \t]*+(\[?)[ \t]*+[A-Za-z_$][\w$]*+(?:\.[A-Za-z_$][\w$]*+)*[ \t]*+\(")


def _balanced(text: str, start: int, limit: int | None = None) -> str | None:
    """``text[start:]`` cut after the bracket that closes the first one (quotes respected); the whole
    rest when it never closes (the checker then reports the syntax error). With ``limit``, None when
    the scan would read more than ``limit`` characters (the caller's work budget)."""
    depth, quote, k = 0, None, start
    end = len(text) if limit is None else min(len(text), start + limit)
    while k < end:
        c = text[k]
        if quote:
            if c == "\\":
                k += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[start:k + 1]
        k += 1
    if end < len(text):
        return None
    return text[start:].rstrip()


def _last_call(text: str) -> str | None:
    """The last call that starts a line, cut at its balancing bracket."""
    hits = list(_CALL_START.finditer(text))
    if not hits:
        return None
    m = hits[-1]
    start = m.start() + len(m.group(0)) - len(m.group(0).lstrip(" \t"))  # at "[" or the name
    return _balanced(text, start)


@reads_model_text()
def extract_answer(text) -> str | None:
    """The function call of a model output (App. B answer format): inside the last fenced code block
    that holds one (a later block without a call, such as an echoed template, is passed over; with no
    call in any block, the last block as written), else in the text; the last line starting with
    ``name(`` or ``[name(``, cut at its balancing bracket. None when there is no call."""
    if not text.strip():
        return None
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    for block in reversed(blocks):
        call = _last_call(block)
        if call:
            return call
    if blocks:
        return blocks[-1].strip()
    return _last_call(text)


# --------------------------------------------------------------------------- synthetic plans
def _first(options: list):
    """The first acceptable value of a possible-answer list ("" means "may be omitted")."""
    for o in options:
        if o != "":
            return o, True
    return None, False


def _pick(value):
    """A concrete value from a possible answer: dicts (also inside lists) map keys to option lists."""
    if isinstance(value, dict):
        out = {}
        for k, opts in value.items():
            if isinstance(opts, list):
                o, ok = _first(opts)
                if ok:
                    out[k] = _pick(o)
            else:
                out[k] = opts
        return out
    if isinstance(value, list):
        return [_pick(v) for v in value]
    return value


def _py(v) -> str:
    """A value as Python source."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)


def _scalar_src(v) -> str:
    """A scalar as Java/JavaScript source (strings quoted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def _java(v, t: str, items: str | None) -> str:
    """Java source text that bfcl-eval's Java parser + type converter turn back into ``v``."""
    if isinstance(v, str) and (t not in ("String", "any", "char") or v.startswith("new ")):
        return v  # already Java source text in the possible answer
    if t == "long":
        return f"{v}L"
    if t == "float":
        return f"{v}f"
    if t == "char":
        return f"'{v}'"
    if t == "boolean" or isinstance(v, bool):
        return _scalar_src(v)
    if t in ("ArrayList", "Array") and isinstance(v, list):
        # typed elements (long, char, ...) need their literal form; strings and untyped ones are quoted
        typed = items not in ("String", "any", None)
        elems = ", ".join(_java(x, items, None) if typed else _scalar_src(x) for x in v)
        if t == "ArrayList":
            return f"new ArrayList<>(Arrays.asList({elems}))" if v else "new ArrayList<>()"
        jt = {"String": "String", "integer": "int", "long": "long", "char": "char", "boolean": "boolean",
              "double": "double", "float": "float"}.get(items or "", "Object")
        return f"new {jt}[]{{{elems}}}"
    if t == "HashMap" and isinstance(v, dict):
        puts = " ".join(f"put({json.dumps(str(k))}, {_scalar_src(x)});" for k, x in v.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    if isinstance(v, (int, float)):
        return str(v)
    return _scalar_src(v)


def _js(v, t: str, items: str | None) -> str:
    """JavaScript source text that bfcl-eval's JS parser + type converter turn back into ``v``."""
    if isinstance(v, str) and t not in ("String", "any"):
        return v
    if t == "Bigint":
        return f"{v}n"
    if isinstance(v, list):
        return "[" + ", ".join(_js(x, items or "any", None) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_js(x, 'any', None)}" for k, x in v.items()) + "}"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return _scalar_src(v)


def _render(name: str, args: dict, functions: list, language: str) -> str:
    props = functions[0]["parameters"]["properties"] if functions else {}
    parts = []
    for p, v in args.items():
        t = props.get(p, {}).get("type", "any")
        items = (props.get(p, {}).get("items") or {}).get("type")
        src = _py(v) if language == "python" else _java(v, t, items) if language == "java" else _js(v, t, items)
        parts.append(f"{p}={src}")
    return f"{name}({', '.join(parts)})"


def _wrong(v, options: list):
    """A value not among ``options`` (for an incorrect synthetic plan)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        w = v + 1
        while w in options:
            w += 1
        return w
    if isinstance(v, str):
        return v + "_changed"
    if isinstance(v, list):
        return v[:-1] if v else ["changed"]
    if isinstance(v, dict):
        return {**v, "changed": "changed"}
    return "changed"


def synthetic_call(problem: Problem, correct: bool) -> str:
    """A call from the first possible answer; ``correct=False`` changes the first argument's value."""
    (name, params), = problem.ground_truth[0].items()
    args, first = {}, None
    for p, opts in params.items():
        o, ok = _first(opts)
        if ok:
            args[p] = _pick(o)
            first = first or p
    if not correct:
        if first is None:
            name += "_changed"
        else:
            args[first] = _wrong(args[first], params[first])
    return _render(name, args, problem.functions, problem.language)


# --------------------------------------------------------------------------- perturbations
CONDITION_SWAPS = [
    ("maximum", "minimum"), ("minimum", "maximum"), ("highest", "lowest"), ("lowest", "highest"),
    ("largest", "smallest"), ("smallest", "largest"), ("biggest", "smallest"), ("first", "last"),
    ("last", "first"), ("increase", "decrease"), ("decrease", "increase"), ("before", "after"),
    ("after", "before"), ("above", "below"), ("below", "above"), ("latest", "earliest"),
    ("earliest", "latest"), ("north", "south"), ("south", "north"), ("east", "west"), ("west", "east"),
    ("buy", "sell"), ("sell", "buy"), ("add", "remove"), ("remove", "add"), ("male", "female"),
    ("female", "male"), ("morning", "evening"), ("today", "tomorrow"), ("tomorrow", "today"),
    ("more", "fewer"), ("less", "more"), ("true", "false"), ("false", "true"), ("enable", "disable"),
    ("disable", "enable"), ("ascending", "descending"), ("descending", "ascending"), ("current", "previous"),
    ("Celsius", "Fahrenheit"), ("Fahrenheit", "Celsius"), ("monthly", "yearly"), ("annual", "monthly"),
]
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_ENTITY = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]{2,}\b")  # capitalised, not at a sentence start
ENTITY_SWAPS = ["Denver", "Lisbon", "Oslo", "Nairobi", "Quito", "Perth", "Osaka", "Cairo"]


def make_perturbation(problem: Problem, seed: int, kind: str = "auto") -> dict:
    """Deterministic PM-stress spec for a problem under ``seed``: an edit inside the user request only
    (never the function docs). ``kind``: "numeric", "condition" or "auto" (condition with prob. 1/3 when
    one exists, else numeric; the other kind when the chosen one is absent). Span-only spec
    ``{"kind", "start", "end", "orig", "new", "seed"}`` with offsets into ``problem.question``."""
    rng = _rng(seed, problem.index, salt=f"pm-bfcl-{problem.language}")
    a, b = problem.answer["request"]
    req = problem.question[a:b]
    nums = [(a + m.start(), a + m.end(), m.group(0)) for m in _NUMBER.finditer(req)]
    low = req.lower()
    conds = []
    for x, y in CONDITION_SWAPS:
        for m in re.finditer(r"\b" + re.escape(x.lower()) + r"\b", low):
            conds.append((a + m.start(), a + m.end(), req[m.start():m.end()], y))
    conds.sort(key=lambda t: (t[0], -(t[1] - t[0])))
    dedup, last_end = [], -1
    for c in conds:
        if c[0] >= last_end and c[0] not in {d[0] for d in dedup}:
            dedup.append(c)
            last_end = c[1]
    conds = dedup
    use_cond = bool(conds) and (kind == "condition" or not nums or (kind == "auto" and rng.random() < 1 / 3))
    if use_cond:
        s, e, orig, new = conds[rng.randrange(len(conds))]
        if orig[:1].isupper():
            new = new[:1].upper() + new[1:]
        return {"kind": "condition", "start": s, "end": e, "orig": orig, "new": new, "seed": seed}
    if not nums:
        # No number and no condition word: a proper noun inside a sentence changes (another entity).
        ents = [(a + m.start(), a + m.end(), m.group(0)) for m in _ENTITY.finditer(req)]
        if not ents or kind == "numeric":
            return {"kind": "none", "start": 0, "end": 0, "orig": "", "new": "", "seed": seed}
        s, e, tok = ents[rng.randrange(len(ents))]
        new = rng.choice([w for w in ENTITY_SWAPS if w != tok])
        return {"kind": "condition", "start": s, "end": e, "orig": tok, "new": new, "seed": seed}
    s, e, tok = nums[rng.randrange(len(nums))]
    return {"kind": "numeric", "start": s, "end": e, "orig": tok, "new": _perturb_number(tok, rng), "seed": seed}


# --------------------------------------------------------------------------- prompts and plug-in
ANSWER_FORMAT = ("Output exactly one function call in Python syntax: the function's exact name as the documentation "
                 "spells it (dots included), then keyword arguments for the parameters you pass. Put the call alone "
                 "on the last line or in a ```python block.")

PROMPTS = PromptSet(
    generator_system=("You are an expert in composing function calls. You are given a user request and the "
                      "documentation of a function; you answer with the call that fulfils the request."),
    generator_instruction="Write the function call that fulfils the user request, with every argument it needs.",
    answer_format=ANSWER_FORMAT,
    judge_system=("You are a strict reviewer. You check whether a proposed function call fulfils a user "
                  "request, given the function's documentation."),
    judge_instructions={
        "verdict": ("Is the proposed function call correct: the right function, every required argument, and "
                    "values that match the request? Reply with exactly one word: ACCEPT if it is correct, "
                    "REJECT if it is not."),
        "check": ("Check the function name, the required arguments and each value against the request and the "
                  "documentation in at most two short sentences. Then write a last line that is exactly "
                  "\"VERDICT: ACCEPT\" if the call is correct or \"VERDICT: REJECT\" if it is not."),
        "reason": ("Work out yourself which call the request needs, argument by argument, then compare it with "
                   "the proposed call. Finish with a last line that is exactly \"VERDICT: ACCEPT\" if the "
                   "proposed call is correct or \"VERDICT: REJECT\" if it is not."),
    },
    repair_instructions={
        "self-refine": ("You are now the caller. Using the feedback, check the proposed call and write an "
                        "improved call (fix any wrong function name, missing argument or wrong value)."),
        "reflexion": ("You are now the caller. First write one or two sentences starting with \"Reflection:\" "
                      "about what may have gone wrong in the proposed call. Then write a new call."),
    },
)


class BFCLSimple(Task):
    """BFCL simple (one call) as a task plug-in: the official bfcl-eval AST checker decides validity (App. B)."""

    name = "bfcl_single"
    dataset = "bfcl"
    splits = ("python", "java", "javascript", "test")
    prompts = PROMPTS
    label_rule = f"bfcl_single official bfcl-eval=={BFCL_EVAL_VERSION} AST checker (simple) vs original problem"

    def load(self, split: str = "python") -> list[Problem]:
        """The problems of one language."""
        return load_bfcl(split)

    def split_size(self, split: str = "python") -> int:
        """The rows of the language's question file, counted."""
        return count_rows(_simple_files(language_of(split))[0])

    def extract_answer(self, text) -> str | None:
        """The call string of a plan."""
        return extract_answer(text)

    def check(self, items: list[tuple]) -> list[dict]:
        """Verdicts with reasons of ``(call, problem)`` pairs, one worker round trip each."""
        return check_calls(items)

    def is_valid(self, answer, problem: Problem) -> bool:
        """The official AST checker's verdict on one call (App. B)."""
        return bool(self.check([(answer, problem)])[0]["valid"])

    def label_rounds(self, items: list[tuple[dict, Problem]]) -> list[int]:
        """Labels of many stored plans, checked in one batch by the bfcl-eval worker."""
        pairs = [(rd["answer"] if "answer" in rd else self.extract_answer(rd.get("plan")), p) for rd, p in items]
        return [int(v["valid"]) for v in self.check(pairs)]

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        """The PM-stress spec of a problem (a span of the user request)."""
        return make_perturbation(problem, seed, kind)

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        """The repairer's copy of the problem text."""
        return _apply_span(text, spec)

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        """A correct call from the possible answers, or one with a wrong value (fake backend)."""
        return synthetic_call(problem, correct)
