"""The program that runs INSIDE the sandbox for BFCL multi-turn (paper App. B: "the official executor").

:mod:`vrr.loop.tasks.bfcl_multi` appends a call ``_main(<library zip, base64>, <request JSON>)`` to this
file's source and runs the result in :mod:`vrr.loop.sandbox`. It imports only the standard library until
the zip is on ``sys.path``; the zip holds the parts of the installed ``bfcl_eval`` package the executor
needs (its executable environments, ``multi_turn_utils``, ``multi_turn_checker``) and, for problems with
the math environment, ``mpmath``: bfcl-eval's own code, read from its venv, never a copy in the repository.

Requests (``op``):

* ``execute``: the calls of each turn run in turn, in one set of environment instances built from the
  problem's initial config (bfcl-eval's ``execute_multi_turn_func_call``, state carried across turns);
  the answer is ``{"results": [[<result or "Error during execution: ...">, ...] per turn], "state": [[<change>,
  ...] per turn]}``, where a change is one line naming an environment attribute the turn changed (the
  public attributes bfcl-eval's state checker compares), at most :data:`STATE_CHANGES` per turn;
* ``check``: bfcl-eval's ``multi_turn_checker`` on the decoded trajectory against the ground truth; the
  answer is ``{"valid": <bool>, "error_type": <str>, "error": <str>}``.

Every model-written call is screened first (:func:`refusal`): a call expression whose functions are
methods of the problem's environments and whose arguments are literals (nested calls of such methods
allowed, as bfcl-eval's decoder writes them). Anything else (names, attributes, ``__import__``, unpacking,
lambdas) never reaches bfcl-eval's ``eval``: it is replaced by a call of an undefined name, so the
executor reports an execution error for it, as for any call that fails. In ``check`` a trajectory with a
refused call is invalid without running (the one deviation from bfcl-eval's checker, toward invalid: the
official checker tolerates extra failing calls). The answer is written to the
real stdout as one line after :data:`ANSWER_TAG`; library output goes to stderr.
"""
import ast
import base64
import json
import os
import sys

ANSWER_TAG = "vrr-bfcl-multi-answer: "
REFUSED = "vrr_refused_call()"  # an undefined name: evaluating it raises NameError inside the executor
LIB_PATH = "/tmp/vrr-bfcl-lib.zip"
MODEL_NAME = "vrr"
STATE_CHANGES = 12     # changes reported per turn
STATE_DEPTH = 8        # nesting read of an environment's attributes
VALUE_CHARS = 120      # of a changed value shown
_LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp, ast.UAdd, ast.USub, ast.Load,
             ast.keyword, ast.Call)


def refusal(call, allowed):
    """Why a call string must not be evaluated, or None: it must be one call of an allowed method whose
    arguments are literals or nested calls of allowed methods."""
    try:
        tree = ast.parse(call, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "not a Python call expression"
    if not isinstance(tree.body, ast.Call):
        return "not a call"
    called = set()
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in allowed:
                return "calls something that is not a function of the environments"
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                return "argument unpacking"
            called.add(id(node.func))
        elif isinstance(node, ast.Name):
            if id(node) not in called:
                return f"a name ({node.id}) as a value"
        elif not isinstance(node, _LITERALS):
            return f"a {type(node).__name__} among the arguments"
    return None


def screened(calls, allowed):
    """The calls with every refused one replaced by :data:`REFUSED`."""
    return [c if isinstance(c, str) and refusal(c, allowed) is None else REFUSED for c in calls]


def _methods(involved_classes):
    import importlib
    import inspect

    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    names = set()
    for cls_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[cls_name]), cls_name)
        names.update(n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_"))
    return names


def _plain(x, depth=0, path=()):
    """An environment's state as JSON-like data: public attributes of objects, containers, scalars;
    cycles and nesting beyond :data:`STATE_DEPTH` cut."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if depth >= STATE_DEPTH or id(x) in path:
        return "..."
    path = path + (id(x),)
    if isinstance(x, dict):
        return {str(k): _plain(v, depth + 1, path) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v, depth + 1, path) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted((_plain(v, depth + 1, path) for v in x), key=repr)
    if hasattr(x, "__dict__"):
        return {k: _plain(v, depth + 1, path) for k, v in vars(x).items() if not k.startswith("_")}
    return repr(x)


def _short(v):
    text = json.dumps(v, default=str)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "..."


def _diff(a, b, where, out):
    """Lines naming what changed from ``a`` to ``b`` (at most :data:`STATE_CHANGES`)."""
    if a == b or len(out) >= STATE_CHANGES:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if len(out) >= STATE_CHANGES:
                return
            if k not in a:
                out.append(f"{where}.{k} added: {_short(b[k])}")
            elif k not in b:
                out.append(f"{where}.{k} removed")
            else:
                _diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{where}[{i}]", out)
    else:
        out.append(f"{where}: {_short(a)} -> {_short(b)}")


def _snapshot(instances):
    try:
        return {name: _plain(inst) for name, inst in instances.items()}
    except Exception as exc:  # noqa: BLE001 - the state report must never cost the results
        return {"(state not readable)": type(exc).__name__}


def _changes(before, after):
    try:
        out = []
        _diff(before, after, "", out)
        return [line.lstrip(".") for line in out]
    except Exception as exc:  # noqa: BLE001 - the state report must never cost the results
        return [f"(state not readable: {type(exc).__name__})"]


def _execute(req):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    entry = req["entry"]
    allowed = _methods(entry["involved_classes"])
    args = (entry["initial_config"], entry["involved_classes"], MODEL_NAME, entry["id"])
    _, instances = execute_multi_turn_func_call([], *args)  # builds the environments from the initial config
    before = _snapshot(instances)
    results, states = [], []
    for calls in req["turns"]:
        out, instances = execute_multi_turn_func_call(screened(calls, allowed), *args)
        after = _snapshot(instances)
        results.append(out)
        states.append(_changes(before, after))
        before = after
    return {"results": results, "state": states}


def _check(req):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    entry = req["entry"]
    allowed = _methods(entry["involved_classes"])
    refused = [c for turn in req["decoded"] for step in turn for c in step if refusal(c, allowed)]
    if refused:
        return {"valid": False, "error_type": "vrr:refused_call",
                "error": f"{refusal(refused[0], allowed)}: {refused[0]}"[:500]}
    decoded = req["decoded"]
    if len(decoded) != len(req["ground_truth"]):  # as bfcl-eval's runner: a missing turn fails the entry
        return {"valid": False, "error_type": "multi_turn:force_terminated",
                "error": f"{len(decoded)} turns for {len(req['ground_truth'])}"}
    try:
        res = multi_turn_checker(decoded, req["ground_truth"], entry, entry["id"].rsplit("_", 1)[0], MODEL_NAME)
    except Exception as exc:  # noqa: BLE001 - the official runner would crash; here the plan is invalid
        return {"valid": False, "error_type": "vrr:checker_exception", "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"valid": bool(res.get("valid")), "error_type": str(res.get("error_type", "")),
            "error": str(res.get("error_message", ""))[:500]}


def _main(lib_b64, request_json):
    real = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # environment and checker prints must not reach the answer line
    with open(LIB_PATH, "wb") as fh:
        fh.write(base64.b64decode(lib_b64))
    sys.path.insert(0, LIB_PATH)
    req = json.loads(request_json)
    answer = {"execute": _execute, "check": _check}[req["op"]](req)
    real.write(ANSWER_TAG + json.dumps(answer, default=str) + "\n")
    real.flush()
