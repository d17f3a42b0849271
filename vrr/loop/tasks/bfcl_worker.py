"""BFCL checker worker: runs INSIDE the bfcl-eval venv and calls the official AST checker (paper App. B,
"BFCL ... abstract syntax tree (AST) matching").

Started by :mod:`vrr.loop.tasks.bfcl` as ``<bfcl venv python> bfcl_worker.py``; it imports only the
standard library and ``bfcl_eval`` (never ``vrr``, which is not installed in that venv).

Protocol (JSON lines). After its imports the worker writes one line
``{"ready": true, "bfcl_eval": <version>, "python": <version>}``. Then, per request line
``{"functions": [...], "ground_truth": [...], "output": <str|null>, "language": "python"|"java"|"javascript"}``
it writes one verdict line ``{"valid": <bool>, "error": <str>, "error_type": <str>}``.

The multi-turn plug-in (:mod:`vrr.loop.tasks.bfcl_multi`) sends two more requests, marked by ``op``:
``{"op": "system_prompt", "entry": {"id", "involved_classes"}, "format": <bfcl-eval prompt format>}`` ->
``{"text": <str>, "params": {function: [parameter names]} (when asked)}`` (``populate_test_cases_with_predefined_functions`` reads the environments' function docs,
``formulate_system_prompt`` writes the function-doc prompt of bfcl-eval's prompting handlers), and
``{"op": "decode_execute", "output": <str>}`` -> ``{"calls": [<str>, ...]}`` or ``{"calls": null, "error": <str>}``
(``default_decode_execute_prompting``, the decoder bfcl-eval's multi-turn runner applies to every step;
the same arithmetic guard as below). Decoding never executes a call: the calls run in the sandbox.

Per item it does what ``bfcl_eval.eval_checker.eval_runner._evaluate_single_ast_entry`` does for a
prompting (non-FC) model: ``default_decode_ast_prompting`` (the decoder of the open-model handlers), the
``is_function_calling_format_output`` check, then ``ast_checker`` with the ``simple_<language>`` category.
Two deviations, both toward "invalid" and both for safety: any exception becomes an invalid verdict with
its text (the official runner would crash on a checker exception), and a Python call whose arithmetic
sub-expression contains anything but literals is not handed to the decoder, which would ``eval`` it.
"""
import ast
import json
import os
import sys
import types

_LANGS = ("python", "java", "javascript")
# Only literal arithmetic may reach the decoder's eval() of BinOp values; names, calls, attributes,
# subscripts, comprehensions etc. inside an arithmetic expression are refused.
_SAFE_IN_ARITH = (ast.Constant, ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop, ast.expr_context)


def _install_model_config_stub():
    """The real ``bfcl_eval.constants.model_config`` imports every provider SDK (openai, anthropic, ...).
    The AST checker reads it only in ``convert_func_name`` (``underscore_to_dot``), which is False for
    the prompting open models; the stub answers False for every model name."""
    stub = types.ModuleType("bfcl_eval.constants.model_config")

    class _AnyModel(dict):
        def __missing__(self, key):
            return types.SimpleNamespace(model_name=key, underscore_to_dot=False, is_fc_model=False)

    stub.MODEL_CONFIG_MAPPING = _AnyModel()
    sys.modules["bfcl_eval.constants.model_config"] = stub


def _unsafe_python(text):
    """Why the Python call text must not reach the decoder's eval(), or None if it is safe."""
    try:
        tree = ast.parse(text.strip().strip("`\n ").strip("'"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the decoder reports the syntax error itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            return "lambda in the call (not evaluated)"
        if isinstance(node, ast.BinOp):
            for sub in ast.walk(node):
                if not isinstance(sub, _SAFE_IN_ARITH):
                    return f"non-literal arithmetic ({type(sub).__name__}) in the call (not evaluated)"
    return None


def check(req, api):
    """Verdict of one request: the official decode + format check + AST checker."""
    lang = req.get("language") or "python"
    if lang not in _LANGS:
        return {"valid": False, "error": f"unknown language {lang!r}", "error_type": "vrr:bad_request"}
    out = req.get("output")
    if not isinstance(out, str) or not out.strip():
        return {"valid": False, "error": "no function call in the output", "error_type": "vrr:no_call"}
    if lang == "python":
        why = _unsafe_python(out)
        if why:
            return {"valid": False, "error": why, "error_type": "vrr:unsafe_expression"}
    try:
        decoded = api["decode"](out, api["ReturnFormat"](lang))
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, RecursionError, ... all mean "not decodable"
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return {"valid": False, "error": f"Invalid syntax. Failed to decode AST. {exc}"[:2000],
                "error_type": "ast_decoder:decoder_failed"}
    if not api["is_fc_format"](decoded):
        return {"valid": False, "error": "Did not output in the specified format.",
                "error_type": "ast_decoder:decoder_wrong_output_format"}
    try:
        res = api["ast_checker"](req["functions"], decoded, req["ground_truth"], api["Language"](lang),
                                 f"simple_{lang}", "vrr")
    except Exception as exc:  # noqa: BLE001
        return {"valid": False, "error": f"checker error: {type(exc).__name__}: {exc}"[:2000],
                "error_type": "vrr:checker_exception"}
    err = res.get("error") or []
    return {"valid": bool(res.get("valid")), "error": "; ".join(map(str, err))[:2000],
            "error_type": str(res.get("error_type", ""))}


def decode_execute(req, api):
    """The execution strings of one step's output (bfcl-eval's multi-turn decoder), or the reason there are none."""
    out = req.get("output")
    if not isinstance(out, str) or not out.strip():
        return {"calls": None, "error": "no function call in the output"}
    why = _unsafe_python(out)
    if why:
        return {"calls": None, "error": why}
    try:
        calls = api["decode_execute"](out)
    except BaseException as exc:  # noqa: BLE001 - any decoding failure means "no calls"
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return {"calls": None, "error": f"Failed to decode: {type(exc).__name__}: {exc}"[:2000]}
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        return {"calls": None, "error": "Did not output in the specified format."}
    return {"calls": calls}


def serve(req, api):
    """Dispatch one request by its ``op`` (default: the single-call AST check)."""
    op = req.get("op", "ast_check")
    if op == "ast_check":
        return check(req, api)
    if op == "decode_execute":
        return decode_execute(req, api)
    if op == "system_prompt":
        entry, = api["populate"]([dict(req["entry"])])
        out = {"text": api["system_prompt"](req.get("format") or api["default_prompt_format"], entry["function"])}
        if req.get("params"):  # each function's parameter names in the documentation's order
            out["params"] = {f["name"]: list(f.get("parameters", {}).get("properties", {})) for f in entry["function"]}
        return out
    return {"valid": False, "error": f"unknown op {op!r}", "error_type": "vrr:bad_request"}


def main():
    """Serve requests on stdin until EOF (see the module docstring)."""
    # Library prints must not corrupt the protocol: keep the real stdout for verdicts only.
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", buffering=1)
    sys.stdout = sys.stderr
    _install_model_config_stub()
    import importlib.metadata

    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.constants.default_prompts import DEFAULT_SYSTEM_PROMPT_FORMAT
    from bfcl_eval.model_handler.utils import (default_decode_ast_prompting, default_decode_execute_prompting,
                                               formulate_system_prompt)
    from bfcl_eval.utils import is_function_calling_format_output, populate_test_cases_with_predefined_functions

    api = {"decode": default_decode_ast_prompting, "is_fc_format": is_function_calling_format_output,
           "ast_checker": ast_checker, "Language": Language, "ReturnFormat": ReturnFormat,
           "decode_execute": default_decode_execute_prompting, "system_prompt": formulate_system_prompt,
           "default_prompt_format": DEFAULT_SYSTEM_PROMPT_FORMAT, "populate": populate_test_cases_with_predefined_functions}
    ready = {"ready": True, "bfcl_eval": importlib.metadata.version("bfcl-eval"), "python": sys.version.split()[0]}
    proto.write(json.dumps(ready) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            verdict = serve(json.loads(line), api)
        except Exception as exc:  # noqa: BLE001 - a bad request must not kill the batch
            verdict = {"valid": False, "error": f"bad request: {exc}"[:2000], "error_type": "vrr:bad_request"}
        proto.write(json.dumps(verdict) + "\n")


if __name__ == "__main__":
    main()
