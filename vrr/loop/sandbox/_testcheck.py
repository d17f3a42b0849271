"""Running tests against model-written code so that the code cannot touch the verdict.

A test (a hidden MBPP assert, or a judge-written assert that is a vote) is checked in two sandboxed
programs (:func:`vrr.loop.sandbox.run_many`), in the spirit of EvalPlus, which evaluates inputs in the sandbox
and compares outputs outside it:

1. **record** (the untrusted program): the task's imports, the code, then the tests *redacted*
   (:func:`redact_test`): every comparison that involves the code's values, and every call that mixes
   them with other arguments (``math.isclose(f(x), 2.5)``), is replaced by a call that evaluates only
   the code's side and yields True. So the program sees the tests' inputs but never an expected value,
   and it takes the path the tests take when every check passes. Every name the tests take from the
   code (the function under test, a constant, a class) is wrapped, and each call the tests make is
   recorded: the callee's name, its arguments and its return value or exception, as data
   (:mod:`vrr.loop.sandbox._codec`: built-in types only, never pickle). Whatever this program prints
   about the tests' outcome is ignored; only the record is read.
2. **replay** (a program without the code): the same tests, in a fresh interpreter, where each name
   the tests take from the code is a stand-in that checks that it is called with the recorded
   arguments in the recorded order and returns the recorded value (or raises the recorded exception
   type). The verdict is this program's.

So the code never sees a test's expected value or a pass token (values a test assigns to its own
variables stay visible: they are usually inputs), and nothing it does inside its own
interpreter (a lying ``__eq__``, patched builtins, an early ``sys.exit`` or ``os._exit``, a forged
line on stdout) can make a wrong answer pass: its influence ends at the values it returns, and those
are compared as plain data by a process it never ran in. Tests observe the code through its return
values and exceptions only (not through arguments it mutates in place).

:data:`LABEL_RULE` is the one rule for code labels, quoted by ``docs/tasks.md`` and stored in the
arrays' meta: limits, hash seeds (valid only if valid under every seed), allowed imports, and the
sandbox record (tool, interpreter and versions).
"""
from __future__ import annotations

import ast
import builtins
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ._bwrap import run_many
from ._limits import ALLOWED_PACKAGES, MEMORY_LIMIT, TASK_LIMIT, SandboxResult
from ._machine import isolation_rule

_CODEC_SOURCE = (Path(__file__).with_name("_codec.py")).read_text(encoding="utf-8")
RECORD_TAG = "VRR-RECORD "
VERDICT_TAG = "VRR-VERDICT "
MAX_CALLS = 10_000          # calls a test may make into the code (more: the record is refused)
MAX_RECORD_BYTES = 8 << 20  # bytes of one record


@dataclass(frozen=True)
class ExecutionRule:
    """How model-written code is run for a label or a vote (one rule, stated once).

    ``cpu_seconds`` per process (App. B's 5 s, as CPU time so that machine load cannot turn a
    correct program into a timeout), ``wall_seconds`` for the whole program (for programs that
    sleep), ``hash_seeds``: the ``PYTHONHASHSEED`` values the code runs under; it is valid only if it
    passes under every one (order-dependent code is not correct). Imports: the standard library and
    :data:`vrr.loop.sandbox.ALLOWED_PACKAGES`. Memory and tasks: one cgroup per program
    (:data:`vrr.loop.sandbox.MEMORY_LIMIT`, :data:`vrr.loop.sandbox.TASK_LIMIT`, threads count as
    tasks)."""

    cpu_seconds: float = 5.0
    wall_seconds: float = 30.0
    hash_seeds: tuple = (0, 1, 2, 3, 4)
    allowed_packages: tuple = field(default_factory=lambda: tuple(ALLOWED_PACKAGES))

    def text(self) -> str:
        """The rule in one sentence (docs/tasks.md quotes it)."""
        seeds = ", ".join(str(s) for s in self.hash_seeds)
        return (f"the code passes every test in the bubblewrap sandbox under each PYTHONHASHSEED in ({seeds}), with "
                f"{self.cpu_seconds:g} s of CPU time per process and {self.wall_seconds:g} s of wall time, "
                f"{MEMORY_LIMIT >> 20} MiB of memory and {TASK_LIMIT} processes and threads in "
                f"total, importing the standard library and {', '.join(self.allowed_packages) or 'nothing else'}; "
                "the tests' verdict is computed by a replay process the code never ran in")

    def record(self, allow_weak: bool | None = None) -> dict:
        """The rule and what its sandbox guarantees, for the arrays' meta (the same on every machine)."""
        return {"rule": self.text(), **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()},
                "sandbox": isolation_rule(allow_weak)}


LABEL_RULE = ExecutionRule()
VOTE_RULE = ExecutionRule(hash_seeds=(0,))  # a vote is one noisy run; labels take every seed


@dataclass(frozen=True)
class TestOutcome:
    """The verdict on one code answer: ``passed``, and when not, ``reason`` (the first failing test's
    number and exception, and the value the code returned; never a test's source)."""

    passed: bool
    reason: str
    seconds: float = 0.0


# --------------------------------------------------------------------------- which names come from the code
def code_names(tests: Sequence[str], imports: str = "") -> list[str]:
    """Names the tests read but neither bind themselves nor get from the imports, in order of first
    use: the names they may take from the code under test. Builtin names are included, since code may
    define its own ``sum``; the recording program reports which ones the code really defines, and the
    others stay builtins. Raises SyntaxError when a test does not parse."""
    bound: set[str] = set()
    for tree in [ast.parse(imports or "")] + [ast.parse(t) for t in tests]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    out: list[str] = []
    for t in tests:
        for node in ast.walk(ast.parse(t)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound \
                    and node.id not in out:
                out.append(node.id)
    return out


class _Redactor(ast.NodeTransformer):
    """Replaces comparisons (and calls mixing the code's values with other arguments) by
    ``__vrr_checked(<the code's side>)``, which evaluates to True."""

    def __init__(self, code_side: set[str]):
        self.code_side = code_side
        self.trusted_calls = code_side - set(dir(builtins))  # a builtin called with the code's values is a check

    def _uses_code(self, node) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.code_side for n in ast.walk(node))

    def _checked(self, parts, node):
        call = ast.Call(func=ast.Name("__vrr_checked", ast.Load()),
                        args=[self.visit(p) for p in parts if self._uses_code(p)], keywords=[])
        return ast.copy_location(call, node)

    def visit_Compare(self, node):
        if not self._uses_code(node):
            return node
        return self._checked([node.left, *node.comparators], node)

    def visit_Call(self, node):
        if any(isinstance(n, ast.Name) and n.id in self.trusted_calls for n in ast.walk(node.func)):
            return self.generic_visit(node)
        parts = [*node.args, *(k.value for k in node.keywords)]
        if any(self._uses_code(p) for p in parts) and not all(self._uses_code(p) for p in parts):
            return self._checked(parts, node)
        return self.generic_visit(node)


def redact_test(test: str, names: Sequence[str]) -> str:
    """The test as the recording program runs it (module docstring): no expected value left in a
    comparison or a mixed call, every such check evaluating to True."""
    tree = _Redactor(set(names)).visit(ast.parse(test))
    return ast.unparse(ast.fix_missing_locations(tree))


# --------------------------------------------------------------------------- the two programs
_RECORD_MAIN = r'''
def _vrr_record(payload):
    import builtins, json, os, sys, traceback
    p = json.loads(payload)
    status = {}

    def exc_text(e):
        return traceback.format_exception_only(type(e), e)[-1].strip()[:300]

    g = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(p["imports"], "<test imports>", "exec"), g)
    except BaseException as e:
        status["test imports"] = exc_text(e)
    try:
        exec(compile(p["code"], "<solution>", "exec"), g)
    except BaseException as e:
        status["solution"] = exc_text(e)
    calls, names = [], {}
    MAX_CALLS = p["max_calls"]

    def recorder(name, fn):
        def call(*args, **kwargs):
            entry = {"name": name, "args": data_only(encode([list(args), sorted(kwargs.items())]))}
            if len(calls) >= MAX_CALLS:
                entry["overflow"] = True
                calls.append(entry)
                raise RuntimeError("too many calls")
            calls.append(entry)
            try:
                v = fn(*args, **kwargs)
            except BaseException as e:
                entry["raise"] = [type(e).__name__, exc_text(e)]
                raise
            enc = encode(v)
            if isinstance(enc, dict) and enc.get("t") == "iter":
                v = iter(enc["items"])  # the test gets the same items again
            entry["return"] = data_only(enc)
            return v
        return call

    t = {"__name__": "__main__", "__builtins__": builtins, "__vrr_checked": lambda *values: True}
    try:
        exec(compile(p["imports"], "<test imports>", "exec"), t)
    except BaseException:
        pass
    for n in p["names"]:
        if n not in g:
            names[n] = {"missing": True}
        elif callable(g[n]):
            names[n] = {"callable": True}
            t[n] = recorder(n, g[n])
        else:
            names[n] = {"value": data_only(encode(g[n]))}
            t[n] = g[n]
    for i, test in enumerate(p["tests"]):
        try:
            exec(compile(test, "<test %d>" % (i + 1), "exec"), t)
        except BaseException:
            pass
    out = json.dumps({"status": status, "names": names, "calls": calls})
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os.write(1, ("\n" + RECORD_TAG + out + "\n").encode("utf-8", "surrogatepass"))
    os._exit(0)
'''

_REPLAY_MAIN = r'''
class _Mismatch(BaseException):
    pass


def _vrr_replay(payload):
    import builtins, json, os, traceback
    p = json.loads(payload)
    n_tests = len(p["tests"])

    def exc_text(e):
        return traceback.format_exception_only(type(e), e)[-1].strip()[:300]

    def one(rec):
        st = rec["status"]
        for where in ("test imports", "solution"):
            if where in st:
                return "%s: %s" % (where, st[where])
        calls = rec["calls"]
        nothing = object()
        state = {"i": 0, "bad": "", "last": nothing}

        def stand_in(name):
            def call(*args, **kwargs):
                i = state["i"]
                got = data_only(encode([list(args), sorted(kwargs.items())]))
                if i >= len(calls) or calls[i].get("name") != name or calls[i].get("args") != got \
                        or calls[i].get("overflow"):
                    state["bad"] = "the code's record does not match the calls the tests make"
                    raise _Mismatch()
                state["i"] = i + 1
                c = calls[i]
                if "raise" in c:
                    etype = getattr(builtins, str(c["raise"][0]), None)
                    if not (isinstance(etype, type) and issubclass(etype, Exception)):
                        etype = RuntimeError
                    raise etype(str(c["raise"][1]))
                if "return" not in c:
                    state["bad"] = "the code's record is incomplete"
                    raise _Mismatch()
                v = decode(c["return"])
                state["last"] = v
                return v
            return call

        t = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(p["imports"], "<test imports>", "exec"), t)
        for n, info in rec["names"].items():
            if n not in p["names"]:
                continue
            if info.get("callable"):
                t[n] = stand_in(n)
            elif "value" in info:
                t[n] = decode(info["value"])
        for k, test in enumerate(p["tests"], 1):
            state["last"] = nothing
            try:
                exec(compile(test, "<test %d>" % k, "exec"), t)
            except _Mismatch:
                return "test %d of %d: %s" % (k, n_tests, state["bad"])
            except BaseException as e:
                if state["bad"]:
                    return "test %d of %d: %s" % (k, n_tests, state["bad"])
                msg = exc_text(e)
                if isinstance(e, AssertionError) and state["last"] is not nothing:
                    msg += " (the call returned %s)" % repr(state["last"])[:200]
                return "test %d of %d: %s" % (k, n_tests, msg)
            if state["bad"]:
                return "test %d of %d: %s" % (k, n_tests, state["bad"])
        if state["i"] != len(calls):
            return "the code's record has calls the tests did not make"
        return ""

    failures = []
    for rec in p["records"]:
        try:
            failures.append(one(rec))
        except BaseException as e:
            failures.append("replay: " + exc_text(e))
    os.write(1, ("\n" + VERDICT_TAG + json.dumps({"failures": failures}) + "\n").encode("utf-8", "surrogatepass"))
    os._exit(0)
'''


def _program(main: str, call: str, payload: dict) -> str:
    return "\n".join([_CODEC_SOURCE, f"RECORD_TAG = {RECORD_TAG!r}", f"VERDICT_TAG = {VERDICT_TAG!r}", main,
                      f"{call}({json.dumps(payload)!r})", ""])


def _last_tagged(stdout: str, tag: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(tag):
            try:
                out = json.loads(line[len(tag):])
            except ValueError:
                return None
            return out if isinstance(out, dict) else None
    return None


def _record_failure(res: SandboxResult, rule: ExecutionRule) -> str:
    if res.timed_out:
        return f"timeout: the tests did not finish within {rule.wall_seconds:g} s of wall time"
    if res.cpu_limited:
        return f"timeout: the tests used more than {rule.cpu_seconds:g} s of CPU time"
    if res.memory_limited:
        return res.error
    if res.output_truncated:
        return "the program's output exceeded the sandbox's output cap"
    return res.error or "the program exited before the tests ran"


def run_tests(items: Sequence[tuple[str, str, Sequence[str]]], rule: ExecutionRule = LABEL_RULE, parallel: int = 2,
              progress: bool = False, desc: str = "tests", allow_weak: bool | None = None) -> list[TestOutcome]:
    """Check each ``(code, imports, tests)`` (module docstring): ``passed`` iff every test passes under
    every hash seed of ``rule``. Seeds after the first run only for answers that passed so far."""
    n = len(items)
    outcomes: list[TestOutcome | None] = [None] * n
    names: list[list[str]] = [[] for _ in range(n)]
    redacted: list[list[str]] = [[] for _ in range(n)]
    records: list[list[dict]] = [[] for _ in range(n)]
    seconds = [0.0] * n
    alive = []
    for i, (code, imports, tests) in enumerate(items):
        try:
            names[i] = code_names(tests, imports)
            redacted[i] = [redact_test(t, names[i]) for t in tests]
        except SyntaxError as e:
            outcomes[i] = TestOutcome(False, f"the test does not parse ({e.msg})")
            continue
        alive.append(i)
    for s_idx, seed in enumerate(rule.hash_seeds):
        if not alive:
            break
        progs = [_program(_RECORD_MAIN, "_vrr_record",
                          {"code": items[i][0], "imports": items[i][1], "tests": redacted[i],
                           "names": names[i], "max_calls": MAX_CALLS}) for i in alive]
        res = run_many(progs, timeout=rule.wall_seconds, cpu_limit=rule.cpu_seconds, parallel=parallel,
                       progress=progress and s_idx == 0, desc=f"{desc} (run)", hash_seeds=[seed] * len(progs),
                       allow_weak=allow_weak)
        for i, r in zip(alive, res):
            seconds[i] += r.seconds
            # an output past the sandbox's cap (OUTPUT_CAP bytes, whatever the characters) holds no record
            rec = None if r.output_truncated else _last_tagged(r.stdout, RECORD_TAG)
            if rec is None:
                outcomes[i] = TestOutcome(False, _record_failure(r, rule), seconds[i])
            else:
                records[i].append(rec)
        replay_ids = [i for i in alive if outcomes[i] is None]
        progs = [_program(_REPLAY_MAIN, "_vrr_replay",
                          {"imports": items[i][1], "tests": list(items[i][2]), "names": names[i],
                           "records": records[i][-1:]}) for i in replay_ids]
        res = run_many(progs, timeout=rule.wall_seconds, cpu_limit=rule.wall_seconds, parallel=parallel,
                       desc=f"{desc} (replay)", hash_seeds=[seed] * len(progs), allow_weak=allow_weak)
        for i, r in zip(replay_ids, res):
            seconds[i] += r.seconds
            verdict = _last_tagged(r.stdout, VERDICT_TAG)
            if verdict is None or not isinstance(verdict.get("failures"), list) or len(verdict["failures"]) != 1:
                outcomes[i] = TestOutcome(False, f"the replay did not finish ({r.error or 'no verdict'})", seconds[i])
            elif verdict["failures"][0]:
                why = str(verdict["failures"][0])
                if s_idx > 0:
                    why += f" (under PYTHONHASHSEED={seed}; it passed under {rule.hash_seeds[0]})"
                outcomes[i] = TestOutcome(False, why[:600], seconds[i])
        alive = [i for i in alive if outcomes[i] is None]
    for i in alive:
        outcomes[i] = TestOutcome(True, "", round(seconds[i], 3))
    return outcomes  # type: ignore[return-value]
