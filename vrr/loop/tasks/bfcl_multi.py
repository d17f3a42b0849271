"""BFCL multi-turn: the task plug-in (paper App. B, "BFCL multi (T)": validity by the official executor).

* ``load(split)``: split "base" (alias "test") = bfcl-eval's ``BFCL_v4_multi_turn_base.json`` (200 problems)
  with its possible answers, read from the installed bfcl-eval package (``$VRR_BFCL_DIR`` or
  ``../shared/data/bfcl`` first when they hold the file). The problem text is bfcl-eval's function-doc
  system prompt (``formulate_system_prompt`` with :data:`PROMPT_FORMAT`, computed by the bfcl-eval worker)
  followed by the user turns, one ``Turn k: ...`` line each. ``answer`` holds the id, the initial config,
  the involved classes, the ground truth per turn, the spans of the user turns and each function's
  parameter names (in the documentation's order).
* The multi-turn protocol (:meth:`BFCLMulti.plan_steps`, driven by :func:`vrr.loop.runner.chat_plans`): per
  user turn the model emits calls; :func:`extract_calls` reads them, bfcl-eval's decoder
  (``default_decode_execute_prompting``) turns them into execution strings, and they run in the problem's
  environment instances in the sandbox (state carried across turns: every step replays the trajectory so
  far from the initial config). Their results go back to the model as tool messages, until it emits no
  call or :data:`STEP_CAP` steps; then the next user turn. Once the conversation after the system prompt
  exceeds :data:`HISTORY_CHARS`, no more steps are asked (the context of a small CPU model is full). The plan is the whole trajectory, one line per
  turn: ``Turn k: [call, call, ...]`` (:func:`render_plan`).
* ``extract_answer(text)``: per ``Turn k:`` header, that turn's call list (:func:`extract_calls`); lines
  starting with ``->`` (execution results shown to the judge) are not read.
* The label (``label_rounds``): bfcl-eval's ``multi_turn_checker`` (state, response checks), called in the
  sandbox on the decoded trajectory (``vrr/loop/tasks/bfcl_multi_exec.py``); a turn without calls is an
  empty turn. Never computed in this process.
* ``make_perturbation``: the PM-stress edit of one user turn (a number, a condition word or a proper
  noun, as for BFCL simple); the function docs never change.
* ``synthetic_plan``: the ground truth (correct) or the ground truth with the last turn's last call
  dropped (incorrect), for the fake engine.
"""
from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import re
import threading
import zipfile
from pathlib import Path

from .. import sandbox
from ..prompts import PromptSet
from .base import Problem as _Problem
from .base import Task, count_rows, reads_model_text
from .bfcl import BFCL_EVAL_VERSION, CONDITION_SWAPS, ENTITY_SWAPS, _balanced, _data_dirs, checker
from .bfcl_multi_evidence import (CALL_CHARS, CALL_LIST_CHARS, EVIDENCE_CHARS, EXECUTOR_FAILED,  # noqa: F401
                                  RESULT_CHARS, TURN_LINE, call_error, call_name, clip_lines, evidence_text,
                                  failure_counts)
from .bfcl_multi_exec import ANSWER_TAG, refusal
from .gsm8k import _perturb_number, _rng
from .gsm8k import apply_perturbation as _apply_span

DATASET = "bfcl_multi"
CATEGORIES = {"base": "multi_turn_base"}
SPLIT_ALIASES = {"test": "base"}
# bfcl-eval's default prompting format with the function docs as Python signatures (its format-sensitivity
# option): a third of the tokens of the JSON docs, so the prompt of two environments fits a CPU context.
PROMPT_FORMAT = "ret_fmt=python&tool_call_tag=False&func_doc_fmt=python&prompt_fmt=plaintext&style=classic"
STEP_CAP = 5                  # model steps per user turn (bfcl-eval's own runner allows 20)
HISTORY_CHARS = 12000         # of turns, replies and results after the system prompt; beyond it, no more steps
TOOL_RESULT_CHARS = 1000      # of each execution result in the conversation
TURNS_HEAD = "\n\nUser turns:\n"
EXEC_PROGRAM = Path(__file__).with_name("bfcl_multi_exec.py")
CHECK_SECONDS = 30.0          # wall time of one sandboxed replay or check
CHECK_CPU_SECONDS = 20.0
LABEL_HASH_SEED = 0
ENVIRONMENT_PACKAGES = ("bfcl_eval/__init__.py", "bfcl_eval/constants/__init__.py",
                        "bfcl_eval/constants/executable_backend_config.py", "bfcl_eval/eval_checker/__init__.py",
                        "bfcl_eval/eval_checker/multi_turn_eval/")


# --------------------------------------------------------------------------- loading
class Problem(_Problem):
    """A BFCL multi-turn problem (``answer`` as in the module docstring)."""

    def __init__(self, split: str, index: int, question: str, answer: dict):
        super().__init__(split, index, question, answer, DATASET)

    @property
    def entry(self) -> dict:
        """What bfcl-eval's executor and checker read of the test entry."""
        return {"id": self.answer["id"], "initial_config": self.answer["initial_config"],
                "involved_classes": self.answer["involved_classes"]}

    @property
    def ground_truth(self) -> list[list[str]]:
        return self.answer["ground_truth"]

    @property
    def n_turns(self) -> int:
        return len(self.answer["turns"])


def category_of(split: str) -> str:
    s = SPLIT_ALIASES.get(split, split)
    if s not in CATEGORIES:
        raise ValueError(f"bfcl_multi: split must be one of {sorted(CATEGORIES)} (or 'test' = base), got {split!r}")
    return CATEGORIES[s]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _files(category: str) -> tuple[Path, Path]:
    name = f"BFCL_v4_{category}.json"
    for d in _data_dirs():
        q, a = d / name, d / "possible_answer" / name
        if q.exists() and a.exists():
            return q, a
    raise FileNotFoundError(f"no {name} (+ possible_answer/) in {_data_dirs()}; install bfcl-eval: "
                            "bash scripts/install_bfcl_eval.sh")


def user_turns(question: str) -> list[str]:
    """The user turns of a problem text (also of the repairer's perturbed copy)."""
    body = question.split(TURNS_HEAD, 1)[1] if TURNS_HEAD in question else ""
    turns, k = [], 1
    while body.startswith(TURN_LINE.format(k=k)):
        body = body[len(TURN_LINE.format(k=k)):]
        nxt = "\n" + TURN_LINE.format(k=k + 1)
        text, sep, rest = body.partition(nxt)
        turns.append(text)
        body = rest if sep else ""
        if sep:
            body = TURN_LINE.format(k=k + 1) + body
        k += 1
    return turns


def system_prompt(question: str) -> str:
    """bfcl-eval's function-doc system prompt inside a problem text."""
    return question.split(TURNS_HEAD, 1)[0]


_CACHE: dict[tuple, list[Problem]] = {}
_LOCK = threading.Lock()


def load_bfcl_multi(split: str = "base") -> list[Problem]:
    """All problems of one multi-turn category (index = 0-based row number)."""
    category = category_of(split)
    q, a = _files(category)
    key = (split, str(q))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        questions, answers = _read_jsonl(q), _read_jsonl(a)
        if [r["id"] for r in questions] != [r["id"] for r in answers]:
            raise ValueError(f"{q} and {a}: the ids differ")
        combos = sorted({tuple(r["involved_classes"]) for r in questions})
        docs = dict(zip(combos, checker().run([{"op": "system_prompt", "format": PROMPT_FORMAT, "params": True,
                                                 "entry": {"id": f"{category}_0", "involved_classes": list(c)}}
                                                for c in combos], item_seconds=60)))
        probs = []
        for i, (qr, ar) in enumerate(zip(questions, answers)):
            doc = docs[tuple(qr["involved_classes"])]
            if "text" not in doc:
                raise RuntimeError(f"bfcl-eval could not write the function docs of {qr['id']}: {doc}")
            turns = [" ".join(m["content"] for m in turn if m["role"] == "user") for turn in qr["question"]]
            text, spans = doc["text"] + TURNS_HEAD, []
            for k, t in enumerate(turns, 1):
                head = ("\n" if k > 1 else "") + TURN_LINE.format(k=k)
                spans.append([len(text) + len(head), len(text) + len(head) + len(t)])
                text += head + t
            probs.append(Problem(split, i, text, {
                "id": qr["id"], "initial_config": qr.get("initial_config", {}),
                "involved_classes": qr["involved_classes"], "ground_truth": ar["ground_truth"], "turns": spans,
                "params": doc.get("params", {})}))
        _CACHE[key] = probs
        return probs


# --------------------------------------------------------------------------- extraction
_FENCE = re.compile(r"```[^\n`]*\n?(.*?)```", re.S)
_LIST_START = re.compile(r"(?m)^[ \t]*(?:\*\*)?\[[ \t\n]*[A-Za-z_][\w.]*[ \t]*\(")
_CALL_LINE = re.compile(r"(?m)^[ \t]*(?:\d+\.[ \t]+|[-*][ \t]+)?([A-Za-z_][\w.]*)[ \t]*\(")
_TURN_HEAD = re.compile(r"(?mi)^[ \t#*]*turn[ \t]+(\d{1,6})[ \t*]*:[ \t*]*")
WRAPPER_KEYWORDS = ("params", "parameters", "arguments")


def _json_calls(text: str) -> list[str]:
    """Calls written as JSON objects ``{"name": f, "arguments": {...}}`` (Qwen's tool-call format) or
    ``{"function": f, "parameters": {...}}`` (bfcl-eval's JSON format): in ``<tool_call>`` blocks, else in
    fenced blocks or the whole text when that is one JSON value."""
    out = []
    blocks = _tool_call_blocks(text) or [b for b in _FENCE.findall(text) if b.strip()] or [text]
    for block in blocks:
        try:
            obj = json.loads(block)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder recurses
            continue
        for o in obj if isinstance(obj, list) else [obj]:
            if not isinstance(o, dict):
                continue
            name = o.get("name", o.get("function"))
            if isinstance(name, str):
                args = o.get("arguments", o.get("parameters", {}))
                if isinstance(args, dict) and re.fullmatch(r"[A-Za-z_]\w*", name):
                    try:
                        body = ", ".join(f"{k}={v!r}" for k, v in args.items() if re.fullmatch(r"[A-Za-z_]\w*", str(k)))
                    except (ValueError, RecursionError):  # an int beyond the str conversion limit, deep nesting
                        continue
                    out.append(f"{name}({body})")
    return out


def _normal_call(node: ast.Call) -> str | None:
    """A call as ``name(k=v, ...)``: the qualifier of ``Class.method`` dropped, a lone ``params={...}``
    wrapper unwrapped into keywords; other arguments as written."""
    func = ast.Name(id=node.func.attr, ctx=ast.Load()) if isinstance(node.func, ast.Attribute) else node.func
    if not isinstance(func, ast.Name):
        return None
    keywords = node.keywords
    if (not node.args and len(keywords) == 1 and keywords[0].arg in WRAPPER_KEYWORDS
            and isinstance(keywords[0].value, ast.Dict)
            and all(isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier()
                    for k in keywords[0].value.keys)):
        d = keywords[0].value
        keywords = [ast.keyword(arg=k.value, value=v) for k, v in zip(d.keys, d.values)]
    try:
        return ast.unparse(ast.Call(func=func, args=node.args, keywords=keywords))
    except (ValueError, RecursionError):  # a literal beyond the int/str conversion limit (0x + 4,300 digits)
        return None


def _calls_of(source: str) -> list[str] | None:
    """The calls of a list / tuple / single call expression, normalised; None when it does not parse."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    elts = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    if not elts or not all(isinstance(e, ast.Call) for e in elts):
        return None
    calls = [_normal_call(e) for e in elts]
    return None if any(c is None for c in calls) else calls


WORK_PER_CHAR = 8  # characters scanned and parsed per character of a text, at most (see _Work)


class _Work:
    """The reading budget of one text: call regions may overlap (a call line inside another call's arguments),
    so each region's scan and parse is charged, up to :data:`WORK_PER_CHAR` characters per character (the
    committed plans use at most 2); beyond it (thousands of unclosed ``f(`` lines) no answer, the reason logged."""

    def __init__(self, text: str):
        self.left = WORK_PER_CHAR * len(text) + 10_000

    def region(self, text: str, start: int) -> str:
        region = _balanced(text, start, limit=self.left)
        if region is None or len(region) * 2 > self.left:
            raise ValueError(f"reading the calls needs more than {WORK_PER_CHAR} characters of work per character")
        self.left -= 2 * len(region)  # its scan and its parse
        return region


def _tool_call_blocks(text: str) -> list[str]:
    """The ``<tool_call>`` blocks' contents, stripped, in one pass (a regex would rescan from every unclosed one)."""
    out, pos = [], 0
    while (a := text.find("<tool_call>", pos)) >= 0 and (b := text.find("</tool_call>", a + len("<tool_call>"))) >= 0:
        out.append(text[a + len("<tool_call>"):b].strip())
        pos = b + len("</tool_call>")
    return out


def _region_calls(text: str, work: _Work | None = None) -> list[str]:
    """Calls in one region: the first bracketed call list that parses, else every line that starts with a call
    (list markers allowed), each cut at its balancing bracket; ``work``: the text's reading budget."""
    work = work or _Work(text)
    for m in _LIST_START.finditer(text):
        start = text.index("[", m.start())
        calls = _calls_of(work.region(text, start))
        if calls:
            return calls
    out = []
    for m in _CALL_LINE.finditer(text):
        calls = _calls_of(work.region(text, m.start(1)))
        if calls:
            out += calls
    return out


@reads_model_text()
def extract_calls(text) -> str | None:
    """The extraction step in front of bfcl-eval's decoder, for one model step (stated in docs/tasks.md):

    1. calls written as JSON (``{"name": ..., "arguments": {...}}`` or ``{"function": ..., "parameters": ...}``)
       in ``<tool_call>`` blocks, else in fenced blocks or as the whole text, when there are any;
    2. else the fenced code blocks (all of them, in order), else the whole text;
    3. in each: the first bracketed list of calls that parses as Python, else every line that starts with a
       call (``1.`` / ``-`` list markers allowed), each cut at its balancing bracket;
    4. each call normalised: ``Class.method(...)`` -> ``method(...)``, a lone ``params={...}`` /
       ``parameters=`` / ``arguments=`` dict unwrapped into keywords.

    Returns ``"[call, call, ...]"`` (what bfcl-eval's decoder reads), or None when there is no call (also
    when the text cannot be read: :func:`vrr.loop.tasks.base.reads_model_text`). A call that cannot be
    written back (a literal beyond the int/str conversion limit) is no call. Nothing is evaluated: the
    text is only parsed."""
    if not text.strip():
        return None
    calls = _json_calls(text)
    if not calls:
        blocks = [b for b in _FENCE.findall(text) if b.strip()]
        work = _Work(text)
        for region in blocks or [text]:
            calls += _region_calls(region, work)
    return "[" + ", ".join(calls) + "]" if calls else None


def name_positional(call_list: str | None, params: dict) -> str | None:
    """The last part of the extraction step, once the problem is known: positional arguments named by
    the documentation's parameter order (bfcl-eval's decoder reads keywords only and would drop them).
    Arguments beyond the documented ones stay positional; text that does not parse is returned as is."""
    if not call_list:
        return call_list
    try:
        tree = ast.parse(call_list, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return call_list
    elts = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    if not all(isinstance(e, ast.Call) for e in elts):
        return call_list
    out = []
    for node in elts:
        names = params.get(node.func.id, []) if isinstance(node.func, ast.Name) else []
        given = {k.arg for k in node.keywords}
        free = [n for n in names if n not in given]
        named = [ast.keyword(arg=n, value=a) for n, a in zip(free, node.args)]
        node = ast.Call(func=node.func, args=node.args[len(named):], keywords=named + list(node.keywords))
        try:
            out.append(ast.unparse(node))
        except (ValueError, RecursionError):
            return call_list
    return "[" + ", ".join(out) + "]"


def render_plan(turns: list[list[str]]) -> str:
    """A trajectory as plan text: one ``Turn k: [call, ...]`` line per user turn."""
    return "\n".join(TURN_LINE.format(k=k) + "[" + ", ".join(calls) + "]" for k, calls in enumerate(turns, 1))


@reads_model_text()
def extract_answer(text) -> list | None:
    """The trajectory of a plan: ``[[turn number, call list text or None], ...]`` in the order written
    (the first section of a turn counts). Text before the first ``Turn k:`` header counts as turn 1 when
    there is no header at all. Lines starting with ``->`` are not read. None for an empty text."""
    if not text.strip():
        return None
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("->"))
    heads = list(_TURN_HEAD.finditer(text))
    if not heads:
        return [[1, extract_calls(text)]]
    out, seen = [], set()
    for h, nxt in zip(heads, heads[1:] + [None]):
        k = int(h.group(1))
        if k in seen:
            continue
        seen.add(k)
        out.append([k, extract_calls(text[h.end():nxt.start() if nxt else len(text)])])
    return out


# --------------------------------------------------------------------------- decoding and the sandbox
def decode(call_lists: list[str | None]) -> list[list[str] | None]:
    """bfcl-eval's multi-turn decoder (in its worker) on call-list texts: execution strings, or None."""
    todo = [c for c in call_lists if c]
    res = iter(checker().run([{"op": "decode_execute", "output": c} for c in todo]) if todo else [])
    return [(next(res).get("calls") or None) if c else None for c in call_lists]


_LIBS: dict[bool, str] = {}


def _site_packages() -> Path:
    for d in _data_dirs():
        if d.name == "data" and d.parent.name == "bfcl_eval":
            return d.parent.parent
    raise FileNotFoundError("the bfcl-eval venv's site-packages (bfcl_eval/data) was not found: "
                            "bash scripts/install_bfcl_eval.sh")


def _library(with_mpmath: bool) -> str:
    """The zip (base64) of bfcl-eval's executor modules, and of mpmath for the math environment."""
    if with_mpmath not in _LIBS:
        site = _site_packages()
        parts = list(ENVIRONMENT_PACKAGES) + (["mpmath/"] if with_mpmath else [])
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for part in parts:
                root = site / part
                if not root.exists():
                    raise FileNotFoundError(f"{root} is missing from the bfcl-eval venv: bash scripts/install_bfcl_eval.sh")
                files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py"))
                for f in files:
                    info = zipfile.ZipInfo(str(f.relative_to(site)), date_time=(1980, 1, 1, 0, 0, 0))
                    z.writestr(info, f.read_bytes(), zipfile.ZIP_DEFLATED)
        _LIBS[with_mpmath] = base64.b64encode(buf.getvalue()).decode("ascii")
    return _LIBS[with_mpmath]


def _program(request: dict, problem: Problem) -> str:
    lib = _library("MathAPI" in problem.answer["involved_classes"])
    return f"{EXEC_PROGRAM.read_text(encoding='utf-8')}\n_main({lib!r}, {json.dumps(request)!r})\n"


def _answer(res) -> dict | None:
    lines = [ln for ln in (res.stdout or "").splitlines() if ln.startswith(ANSWER_TAG)]
    return json.loads(lines[-1][len(ANSWER_TAG):]) if lines and res.passed else None


def run_sandboxed(items: list[tuple[dict, Problem]]) -> list[dict | None]:
    """Sandboxed executor requests (``bfcl_multi_exec``), two at a time; None where the run failed."""
    if not items:
        return []
    results = sandbox.run_many([_program(req, p) for req, p in items], timeout=CHECK_SECONDS, parallel=2,
                               cpu_limit=CHECK_CPU_SECONDS, hash_seeds=[LABEL_HASH_SEED] * len(items))
    return [_answer(r) or {"error": f"sandbox run failed: {r.error}"[:400]} for r in results]


def trajectory(answer, problem: Problem) -> list[str | None]:
    """Per user turn of the problem, the call-list text the plan gives it (None: no call), positional
    arguments named (:func:`name_positional`)."""
    by_turn = {}
    for k, calls in answer or []:
        by_turn.setdefault(int(k), calls)
    return [name_positional(by_turn.get(k), problem.answer["params"]) for k in range(1, problem.n_turns + 1)]


_VERDICTS: dict[str, dict] = {}
_REPLAYS: dict[str, list] = {}


def _key(problem: Problem, decoded) -> str:
    return hashlib.sha256(json.dumps([problem.answer["id"], decoded]).encode()).hexdigest()


def refused_call(call_list: str | None, problem: Problem) -> str | None:
    """The first call of an extracted call list that is not a plain call of the problem's functions with
    literal arguments (``bfcl_multi_exec.refusal``), with the reason; None when there is none. Read
    before bfcl-eval's decoder, which would turn such an argument into an inert string."""
    try:
        tree = ast.parse(call_list or "[]", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the decoder reports it
    allowed = set(problem.answer["params"])
    for elt in tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]:
        try:
            source = ast.unparse(elt)
        except (ValueError, RecursionError) as exc:
            return f"a call that cannot be written back ({type(exc).__name__})"
        why = refusal(source, allowed)
        if why:
            return f"{why}: {source}"[:300]
    return None


def check_trajectories(items: list[tuple[object, Problem]]) -> list[dict]:
    """The official multi-turn checker's verdicts on ``(answer, problem)`` pairs, each in the sandbox
    (identical trajectories are checked once per process). A trajectory with a call that is not a plain
    call of the problem's functions (:func:`refused_call`) is invalid without running."""
    decoded_all, refused = [], {}
    for n, (answer, p) in enumerate(items):
        lists = trajectory(answer, p)
        why = next((w for w in (refused_call(c, p) for c in lists) if w), None)
        if why:
            refused[n] = {"valid": False, "error_type": "vrr:refused_call", "error": why}
        turns = decode(lists) if not why else [None] * len(lists)
        decoded_all.append([[calls] if calls else [] for calls in turns])
    keys = [_key(p, d) for (_, p), d in zip(items, decoded_all)]
    todo = {k: ({"op": "check", "entry": p.entry, "decoded": d, "ground_truth": p.ground_truth}, p)
            for n, (k, (_, p), d) in enumerate(zip(keys, items, decoded_all))
            if k not in _VERDICTS and n not in refused}
    for k, v in zip(todo, run_sandboxed(list(todo.values()))):
        v = v if "valid" in v else {"valid": False, "error_type": "vrr:sandbox", "error": v.get("error", "")}
        _VERDICTS[k] = v
    return [refused.get(n) or _VERDICTS[k] for n, k in enumerate(keys)]


def replay_full(items: list[tuple[list[list[str]], Problem]]) -> list[dict | None]:
    """Fresh replays from the problem's initial state: ``{"results": [[result per call] per turn],
    "state": [[change per line] per turn]}`` (``bfcl_multi_exec``), or None where the run failed."""
    keys = [_key(p, turns) for turns, p in items]
    todo = {k: ({"op": "execute", "entry": p.entry, "turns": turns}, p)
            for k, (turns, p) in zip(keys, items) if k not in _REPLAYS}
    for k, v in zip(todo, run_sandboxed(list(todo.values()))):
        _REPLAYS[k] = v if v and "results" in v else None
    return [_REPLAYS[k] for k in keys]


def replay(items: list[tuple[list[list[str]], Problem]]) -> list[list[list[str]] | None]:
    """Fresh replays: the execution result of every call, per turn, from the problem's initial state."""
    return [r["results"] if r else None for r in replay_full(items)]


def replay_turns(answer, problem: Problem) -> list[dict]:
    """A fresh replay of a plan's trajectory, per user turn: ``{"calls": [(call, result, error or None),
    ...], "state": [change, ...]}``."""
    turns = decode(trajectory(answer, problem))
    full = replay_full([([c or [] for c in turns], problem)])[0]
    results, states = (full["results"], full.get("state") or []) if full else ([], [])
    out = []
    for k, calls in enumerate(turns):
        got = results[k] if k < len(results) else [EXECUTOR_FAILED] * len(calls or [])
        got = list(got) + [EXECUTOR_FAILED] * (len(calls or []) - len(got))
        out.append({"calls": [(c, str(r), call_error(r)) for c, r in zip(calls or [], got)],
                    "state": states[k] if k < len(states) else []})
    return out


# --------------------------------------------------------------------------- perturbation
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_ENTITY = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]{2,}\b")


def make_perturbation(problem: Problem, seed: int, kind: str = "auto") -> dict:
    """PM-stress spec: one edit inside the user turns (never the function docs): a number changes or,
    with prob. 1/3 or when no turn has a number, one condition word; failing both, a proper noun inside a
    sentence. Span-only spec ``{"kind", "start", "end", "orig", "new", "seed"}`` into ``problem.question``."""
    rng = _rng(seed, problem.index, salt="pm-bfcl-multi")
    text = problem.question
    nums, conds, ents = [], [], []
    for a, b in problem.answer["turns"]:
        turn = text[a:b]
        nums += [(a + m.start(), a + m.end(), m.group(0)) for m in _NUMBER.finditer(turn)]
        low = turn.lower()
        for x, y in CONDITION_SWAPS:
            conds += [(a + m.start(), a + m.end(), turn[m.start():m.end()], y)
                      for m in re.finditer(r"\b" + re.escape(x.lower()) + r"\b", low)]
        ents += [(a + m.start(), a + m.end(), m.group(0)) for m in _ENTITY.finditer(turn)]
    conds = sorted({c[0]: c for c in sorted(conds, key=lambda c: c[1] - c[0])}.values())
    use_cond = bool(conds) and (kind == "condition" or not nums or (kind == "auto" and rng.random() < 1 / 3))
    if use_cond:
        s, e, orig, new = conds[rng.randrange(len(conds))]
        new = new[:1].upper() + new[1:] if orig[:1].isupper() else new
        return {"kind": "condition", "start": s, "end": e, "orig": orig, "new": new, "seed": seed}
    if nums and kind != "condition":
        s, e, tok = nums[rng.randrange(len(nums))]
        return {"kind": "numeric", "start": s, "end": e, "orig": tok, "new": _perturb_number(tok, rng), "seed": seed}
    if ents and kind != "numeric":
        s, e, tok = ents[rng.randrange(len(ents))]
        return {"kind": "condition", "start": s, "end": e, "orig": tok,
                "new": rng.choice([w for w in ENTITY_SWAPS if w != tok]), "seed": seed}
    return {"kind": "none", "start": 0, "end": 0, "orig": "", "new": "", "seed": seed}


# --------------------------------------------------------------------------- synthetic plans
def ground_truth_plan(problem: Problem) -> list[list[str]]:
    """The possible answer's calls per turn, positional arguments named (:func:`name_positional`)."""
    return [[name_positional(c, problem.answer["params"])[1:-1] for c in turn] for turn in problem.ground_truth]


def synthetic_plan(problem: Problem, correct: bool) -> str:
    """The ground truth (correct) or, incorrect, the ground truth with the last call of the last turn
    that has calls dropped."""
    turns = ground_truth_plan(problem)
    if not correct:
        k = max(i for i, t in enumerate(turns) if t)
        turns[k] = turns[k][:-1]
    return render_plan(turns)


# --------------------------------------------------------------------------- prompts and plug-in
ANSWER_FORMAT = ("Write the whole corrected trajectory: one line per user turn, exactly `Turn k: [func(param=value, "
                 "...), func(...)]`, listing every call of that turn in order (`Turn k: []` for a turn that needs "
                 "no call). Use keyword arguments and the functions' exact names.")

PROMPTS = PromptSet(
    generator_system="You are an expert in composing functions.",
    generator_instruction="Write the calls that fulfil every user turn, in order.",
    answer_format=ANSWER_FORMAT,
    judge_system=("You are a strict reviewer of function-calling trajectories. You check whether the calls made for "
                  "each user turn fulfil that turn's request, given the available functions and what the calls "
                  "returned when they were executed."),
    judge_instructions={
        "verdict": ("Given the execution results (lines starting with ->), did the calls fulfil every user turn: "
                    "the right functions, with the right arguments, and no call that failed? Reply with exactly one "
                    "word: ACCEPT if the trajectory is correct, REJECT if it is not."),
        "check": ("Go through the turns: does each turn's calls do what the user asked, and did any call return an "
                  "error? Answer in at most two short sentences. Then write a last line that is exactly "
                  "\"VERDICT: ACCEPT\" if the trajectory is correct or \"VERDICT: REJECT\" if it is not."),
        "reason": ("For each user turn, work out which calls it needs, compare them with the calls made and their "
                   "execution results. Finish with a last line that is exactly \"VERDICT: ACCEPT\" if the "
                   "trajectory is correct or \"VERDICT: REJECT\" if it is not."),
    },
    repair_instructions={
        "self-refine": ("You are now the caller. Using the feedback and the execution results, rewrite the trajectory: "
                        "fix wrong functions, wrong or missing arguments, missing calls and calls that failed."),
        "reflexion": ("You are now the caller. First write one or two sentences starting with \"Reflection:\" about "
                      "what went wrong in the trajectory. Then rewrite it."),
    },
)


class BFCLMulti(Task):
    """BFCL multi-turn as a task plug-in: bfcl-eval's multi-turn checker decides validity (App. B)."""

    name = "bfcl_multi"
    dataset = DATASET
    splits = ("base", "test")
    prompts = PROMPTS
    label_rule = (f"bfcl_multi official bfcl-eval=={BFCL_EVAL_VERSION} multi_turn_checker (state and response "
                  "checks) on the decoded trajectory vs original problem, executed in the bubblewrap sandbox")

    def load(self, split: str = "base") -> list[Problem]:
        return load_bfcl_multi(split)

    def split_size(self, split: str = "base") -> int:  # counted: loading starts bfcl-eval for the docs
        return count_rows(_files(category_of(split))[0])

    def extract_answer(self, text) -> list | None:
        return extract_answer(text)

    def check(self, items: list[tuple]) -> list[dict]:
        """Verdicts (``valid``, ``error_type``, ``error``) of ``(answer, problem)`` pairs."""
        return check_trajectories(items)

    def is_valid(self, answer, problem: Problem) -> bool:
        return bool(self.check([(answer, problem)])[0]["valid"])

    def label_rounds(self, items: list[tuple[dict, Problem]]) -> list[int]:
        pairs = [(rd["answer"] if "answer" in rd else self.extract_answer(rd.get("plan")), p) for rd, p in items]
        return [int(v["valid"]) for v in self.check(pairs)]

    def execution_record(self) -> dict:
        """The label's execution rule and the sandbox it runs in (arrays' meta)."""
        return {"label": {"rule": self.label_rule, "sandbox": sandbox.isolation_rule(), "hash_seed": LABEL_HASH_SEED,
                          "cpu_seconds": CHECK_CPU_SECONDS, "wall_seconds": CHECK_SECONDS,
                          "libraries": f"bfcl-eval=={BFCL_EVAL_VERSION} executor and checker modules, mpmath"}}

    def execution_environment(self) -> dict:
        return {"label": sandbox.isolation_environment()}

    # -- what the executor verifier and the repairer see
    def replay_evidence(self, items: list[tuple[str, Problem]]) -> list[str]:
        """Each plan's trajectory as a fresh sandboxed replay shows it (:func:`evidence_text`)."""
        return [evidence_text(replay_turns(self.extract_answer(plan), p)) for plan, p in items]

    def repair_feedback(self, answer, problem: Problem) -> str:
        """The executor's results of the previous trajectory (a fresh replay), for the repairer."""
        turns = replay_turns(answer, problem)
        n_calls, n_failed = failure_counts(turns)
        return f"Executing the trajectory ({n_calls} calls, {n_failed} failed) gave:\n" + evidence_text(turns)

    # -- the multi-step generation hook (vrr.loop.runner.chat_plans)
    def plan_steps(self, problem: Problem, question: str | None = None):
        """The multi-turn protocol for one problem as a generator: it yields the conversation of the next
        engine request, receives the model's reply, and returns the plan text (the whole trajectory).
        ``question``: the problem text to use (the repairer's perturbed copy in resample mode)."""
        question = question or problem.question
        messages = [{"role": "system", "content": system_prompt(question)}]
        done: list[list[str]] = []
        for text in user_turns(question):
            messages.append({"role": "user", "content": text})
            calls_t: list[str] = []
            for _ in range(STEP_CAP):
                if sum(len(m["content"]) for m in messages[1:]) > HISTORY_CHARS:
                    break  # the context is full: this turn and the next ones get no more calls
                reply = yield [dict(m) for m in messages]
                messages.append({"role": "assistant", "content": reply or ""})
                calls = decode([name_positional(extract_calls(reply), problem.answer["params"])])[0]
                if not calls:
                    break
                results = replay([(done + [calls_t + calls], problem)])[0]
                shown = results[-1][-len(calls):] if results else [EXECUTOR_FAILED] * len(calls)
                calls_t += calls
                messages += [{"role": "tool", "content": str(r)[:TOOL_RESULT_CHARS]} for r in shown]
            done.append(calls_t)
        return render_plan(done)

    def step_context(self, conversation) -> tuple[Problem, int, bool] | None:
        """For the fake engine: (problem, 0-based turn, whether the turn awaits its first step) of a
        generation-step conversation, or None for any other conversation."""
        if len(conversation) < 2 or conversation[0]["role"] != "system" or conversation[1]["role"] != "user":
            return None
        if not hasattr(self, "_by_start"):
            self._by_start = {(system_prompt(p.question), user_turns(p.question)[0]): p
                              for s in ("base",) for p in self.load(s) if p.n_turns}
        problem = self._by_start.get((conversation[0]["content"], conversation[1]["content"]))
        if problem is None:
            return None
        turn = sum(m["role"] == "user" for m in conversation) - 1
        return problem, turn, conversation[-1]["role"] == "user"

    def synthetic_step(self, problem: Problem, turn: int, correct: bool) -> str:
        """The fake engine's first step of a turn: that turn's calls of :func:`synthetic_plan`."""
        line = synthetic_plan(problem, correct).splitlines()[turn]
        return line.split(": ", 1)[1]

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        return make_perturbation(problem, seed, kind)

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        return _apply_span(text, spec)

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        return synthetic_plan(problem, correct)
