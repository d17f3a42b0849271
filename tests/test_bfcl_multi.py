"""BFCL multi-turn plug-in: loader, the extraction step, labels by the REAL bfcl-eval multi-turn checker run
in the sandbox (bfcl-eval's venv, scripts/install_bfcl_eval.sh, ships its executor into the sandbox), hostile
call strings, the multi-step generation driven by the runner, and a fake-engine window end to end.
Problems and possible answers are read from the installed bfcl-eval at test time; none is written here.

Without the bfcl-eval venv these tests skip, unless VRR_REQUIRE_BFCL=1 (CI), where they fail."""
import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from vrr.loop.tasks import bfcl_multi, get_task
from vrr.loop.tasks.bfcl_multi import extract_answer, extract_calls, render_plan
from vrr.loop.tasks.bfcl_multi_exec import refusal


@pytest.fixture(scope="module")
def task(bfcl_venv):
    return get_task("bfcl_multi")


@pytest.fixture(scope="module")
def problems(task):
    return task.load("base")


@pytest.fixture(scope="module")
def sample(problems):
    """The first problem of each of the eight environments (every executor class is exercised)."""
    out, seen = [], set()
    for p in problems:
        new = set(p.answer["involved_classes"]) - seen
        if new:
            out.append(p)
            seen |= new
    assert len(seen) == 8
    return out


# --------------------------------------------------------------------------- extraction (text only)
@pytest.mark.parametrize("text, calls", [
    ("[cd(folder='document'), ls()]", "[cd(folder='document'), ls()]"),
    ("Sure! First I go there:\n```python\ncd(folder='document')\nls(a=True)\n```\nDone.",
     "[cd(folder='document'), ls(a=True)]"),
    ("1. cd(folder='document')\n2. mkdir(dir_name='temp')", "[cd(folder='document'), mkdir(dir_name='temp')]"),
    ("[GorillaFileSystem.cd(folder='x')]", "[cd(folder='x')]"),
    ("cd(params={'folder': 'x'})", "[cd(folder='x')]"),
    ('<tool_call>\n{"name": "cd", "arguments": {"folder": "x"}}\n</tool_call>', "[cd(folder='x')]"),
    ('```json\n[{"function": "cd", "parameters": {"folder": "x"}}, {"name": "ls", "arguments": {}}]\n```',
     "[cd(folder='x'), ls()]"),
    ("I moved the file. The task is complete.", None),
    ("", None),
    ("The call cd(folder='x') is not at a line start", None),
])
def test_extraction_step(text, calls):
    assert extract_calls(text) == calls


def test_positional_arguments_are_named_by_the_documentation():
    params = {"cat": ["file_name"], "cp": ["source", "destination"]}
    got = bfcl_multi.name_positional("[cat('a.txt'), cp('a', destination='b'), cp('a', 'b', 'c'), ls(1)]", params)
    assert got == "[cat(file_name='a.txt'), cp(source='a', destination='b'), cp('c', source='a', destination='b'), ls(1)]"
    assert bfcl_multi.name_positional("not [ a call", params) == "not [ a call"


def test_extraction_only_parses(tmp_path):
    marker = tmp_path / "never"
    text = f"[cd(folder=__import__('os').system('touch {marker}'))]"
    assert extract_calls(text) is not None and not marker.exists()


def test_plan_text_roundtrip_and_evidence_lines_are_not_read():
    plan = render_plan([["cd(folder='a')", "ls()"], [], ["pwd()"]])
    assert plan.splitlines() == ["Turn 1: [cd(folder='a'), ls()]", "Turn 2: []", "Turn 3: [pwd()]"]
    assert extract_answer(plan) == [[1, "[cd(folder='a'), ls()]"], [2, None], [3, "[pwd()]"]]
    shown = plan.replace("Turn 2: []", "Turn 2: []\n  -> rm(file_name='x'): None")
    assert extract_answer(shown) == extract_answer(plan)
    repaired = "**Turn 2:**\n```python\n[ls()]\n```\nTurn 1: [pwd()]\nTurn 2: [cd(folder='b')]"
    assert extract_answer(repaired) == [[2, "[ls()]"], [1, "[pwd()]"]]   # the first section of a turn counts
    assert extract_answer("ls()") == [[1, "[ls()]"]]


# --------------------------------------------------------------------------- loading and perturbation
def test_loader_reads_the_installed_bfcl_eval(problems):
    assert len(problems) == 200 and problems[0].answer["id"] == "multi_turn_base_0"
    for p in problems[:20]:
        turns = bfcl_multi.user_turns(p.question)
        assert [p.question[a:b] for a, b in p.answer["turns"]] == turns and len(turns) == len(p.ground_truth)
        assert "Here is a list of functions in python format" in bfcl_multi.system_prompt(p.question)
        assert not any(c in p.question for turn in p.ground_truth for c in turn)   # never the answers


def test_perturbation_edits_one_user_turn_only(task, problems):
    kinds = set()
    for p in problems[:30]:
        spec = task.make_perturbation(p, seed=0)
        kinds.add(spec["kind"])
        if spec["kind"] == "none":
            continue
        edited = task.apply_perturbation(p.question, spec)
        assert bfcl_multi.system_prompt(edited) == bfcl_multi.system_prompt(p.question)
        before, after = bfcl_multi.user_turns(p.question), bfcl_multi.user_turns(edited)
        assert len(after) == len(before) and sum(a != b for a, b in zip(before, after)) == 1
        assert set(spec) == {"kind", "start", "end", "orig", "new", "seed"}
        assert task.make_perturbation(p, seed=0) == spec and spec["orig"] != spec["new"]
    assert {"numeric", "condition"} <= kinds


# --------------------------------------------------------------------------- labels: the official checker
def _changed(call: str) -> str | None:
    """The call with its first string or number argument changed, or None when it has none."""
    node = ast.parse(call, mode="eval").body
    for kw in node.keywords:
        v = kw.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            kw.value = ast.Constant(v.value + "_x")
            return ast.unparse(node)
        if isinstance(v, ast.Constant) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool):
            kw.value = ast.Constant(v.value + 7)
            return ast.unparse(node)
    return None


def test_ground_truth_is_valid_and_its_edits_are_not(task, sample):
    gold = [bfcl_multi.ground_truth_plan(p) for p in sample]
    plans, expect = [], []
    for p, turns in zip(sample, gold):
        plans.append((render_plan(turns), p))
        expect.append(1)
        k = max(i for i, t in enumerate(turns) if t)           # one call dropped
        plans.append((render_plan(turns[:k] + [turns[k][:-1]] + turns[k + 1:]), p))
        expect.append(0)
        for k, t in enumerate(turns):                           # one argument changed
            hit = next(((j, c) for j, c in enumerate(t) if _changed(c)), None)
            if hit:
                j, c = hit
                plans.append((render_plan(turns[:k] + [t[:j] + [_changed(c)] + t[j + 1:]] + turns[k + 1:]), p))
                expect.append(0)
                break
    got = task.label_rounds([({"plan": pl}, p) for pl, p in plans])
    assert got == expect, [(p.answer["id"], pl) for (pl, p), g, e in zip(plans, got, expect) if g != e]


HOSTILE = [
    "__import__('os').system('touch /tmp/vrr-hostile')",
    "open('/tmp/vrr-hostile', 'w').write('x')",
    "exec('import os')",
    "cd(folder=__import__('os').getcwd())",
    "cd(folder=open('/etc/passwd').read())",
    "cd(folder=(lambda: 1)())",
    "cd(*['x'])",
]


@pytest.mark.parametrize("call", HOSTILE)
def test_refusal_screens_every_hostile_call(call):
    assert refusal(call, {"cd", "ls"}) is not None
    assert refusal("cd(folder='x', depth=-1, opts={'a': [1, (2, 3)]})", {"cd", "ls"}) is None
    assert refusal("cd(folder=ls(a=True))", {"cd", "ls"}) is None   # nested calls, as bfcl-eval decodes them


def test_hostile_calls_are_contained_and_invalid(task, sample):
    p = sample[0]
    gold = bfcl_multi.ground_truth_plan(p)
    marker = Path("/tmp/vrr-hostile")
    marker.unlink(missing_ok=True)
    plans = [render_plan([[call] + gold[0]] + gold[1:]) for call in HOSTILE]
    plans.append("import os\nos.system('touch /tmp/vrr-hostile')\n" + render_plan(gold))   # prose import: no call
    labels = task.label_rounds([({"plan": pl}, p) for pl in plans])
    assert labels[:-1] == [0] * len(HOSTILE) and not marker.exists()
    # past the decoder too: the sandboxed program refuses them itself, and the executor reports an error
    raw = [{"op": "execute", "entry": p.entry, "turns": [[c]]} for c in HOSTILE[:3]]
    for res in bfcl_multi.run_sandboxed([(r, p) for r in raw]):
        assert res["results"][0][0].startswith("Error during execution: name 'vrr_refused_call'")
    assert not marker.exists()


# --------------------------------------------------------------------------- the loop
def test_multi_step_plans_advance_in_lockstep(task, problems):
    from vrr.loop.engine import FakeEngine
    from vrr.loop.runner import _Tokens, chat_plans

    batch = problems[:3]
    engine, tokens, stages = FakeEngine(task), _Tokens(), []
    plans, fins = chat_plans(engine, task, batch, tokens=tokens, stage=stages.append)
    # two requests per turn (the calls, then "Done." after their results), one request over the whole batch
    assert len(engine.calls) == 2 * max(p.n_turns for p in batch)
    assert stages[0] == "plans step 1 (3 unfinished)" and len(stages) == len(engine.calls)
    assert [int(s.split("(")[1].split()[0]) for s in stages] == [c["B"] for c in engine.calls]
    assert [c["B"] for c in engine.calls][0] == 3 and tokens.counts["prompt"] > 0
    for p, (plan,), (fin,) in zip(batch, plans, fins):
        assert plan == bfcl_multi.synthetic_plan(p, p.index % 2 == 0) and fin == "stop"
    steps = task.plan_steps(batch[0])
    conv = next(steps)
    first_turn = bfcl_multi.extract_answer(plans[0][0])[0][1]
    conv = steps.send(first_turn)
    n = len(ast.parse(first_turn, mode="eval").body.elts)      # one tool message per call, in order
    assert [m["role"] for m in conv][-n - 1:] == ["assistant"] + ["tool"] * n
    assert not any(m["content"].startswith("Error") for m in conv[-n:])


def test_fake_engine_window_end_to_end(tmp_path, task):
    from vrr.data import load_setting
    from vrr.label import finalize_setting
    from vrr.loop.config import run_config
    from vrr.loop.engine import FakeEngine
    from vrr.loop.runner import generate
    from vrr.settings import load_config

    over = {"window.N": 2, "K_max": 1, "M": 4, "perturbation.regime": "favorable", "perturbation.edit": "none"}
    cfg = run_config(load_config("bfcl_multi_cpu", overrides=over), setting="bm")
    paths = generate(cfg, engine=FakeEngine(task), out_root=tmp_path, progress=False, task=task)
    assert finalize_setting(paths, cfg) == "complete"
    st = load_setting(paths.arrays)
    assert st.y.tolist() == [[1, 0], [0, 1]]            # even index correct; the fake repair flips it
    assert (st.S[st.y == 1] == 2).all() and (st.S[st.y == 0] == 1).all()
    assert st.meta["task"] == "bfcl_multi" and "multi_turn_checker" in st.meta["label_rule"]
    assert st.meta["execution"]["label"]["sandbox"]["tool"] == "bubblewrap"
    text = paths.traj.read_bytes()
    import gzip
    rec = json.loads(gzip.decompress(text).decode().splitlines()[0])
    judge = rec["rounds"][0]["judge"]
    assert len(judge) == 4 and all(re.fullmatch(r"ACCEPT|REJECT", j) for j in judge)
    assert rec["rounds"][1]["source"] == "repair" and rec["rounds"][0]["answer"][0][0] == 1


def test_executor_judge_sees_a_fresh_replay(task, sample):
    from vrr.loop.engine.fake import RecordingEngine
    from vrr.loop.verifiers import make_verifier

    p = sample[0]
    plan = bfcl_multi.synthetic_plan(p, True)
    engine = RecordingEngine(task)
    outs, votes = make_verifier("executor", "check").votes(engine, task, [p], [plan], 3)
    user = engine.requests[0]["conversations"][0][-1]["content"]
    assert "  -> " in user and "Error during execution" not in user and len(votes[0]) == 3
    fb = task.repair_feedback(task.extract_answer(plan), p)
    assert fb.startswith("Executing the trajectory (") and ", 0 failed)" in fb
    assert np.all(np.array(votes) == [1, 0, 1])   # the fake judge: m = 0, 2, ... accept a valid plan


def test_evidence_is_clipped_at_a_line_boundary():
    """A looping trajectory's replay must not overflow the judge's or the repairer's context."""
    lines = [f"  -> ls(): result {i}" for i in range(2000)]
    text = bfcl_multi.clip_lines(lines)
    assert len(text) <= bfcl_multi.EVIDENCE_CHARS + 40
    kept = text.split("\n")
    assert kept[:-1] == lines[:len(kept) - 1] and kept[-1] == f"[... {2000 - len(kept) + 1} more lines]"
    assert bfcl_multi.clip_lines(lines[:3]) == "\n".join(lines[:3])


# --------------------------------------------------------------------------- hostile text and the judge's evidence
@pytest.mark.parametrize("text", [
    "<tool_call>" + "[" * 100_000 + "]" * 100_000 + "</tool_call>",                 # RecursionError in json
    '<tool_call>{"name": "cd", "arguments": {"folder": ' + "[" * 50_000 + "]" * 50_000 + "}}</tool_call>",
    "[cd(folder=0x" + "f" * 4_000 + ")]",                                             # 4,800 decimal digits
    "cd(folder=0x" + "f" * 4_000 + ")",
    '<tool_call>{"name": "cd", "arguments": {"folder": ' + "9" * 5_000 + "}}</tool_call>",
    "[" * 300 + "cd()" + "]" * 300,
    " " * 200_001,
])
def test_hostile_call_text_is_no_call_not_a_crash(text):
    assert extract_calls(text) is None
    assert extract_answer("Turn 1: " + text) in (None, [[1, None]])


def test_a_call_beside_an_unwritable_one_is_kept():
    assert extract_calls("[cd(folder=0x" + "f" * 4_000 + ")]\nls()") == "[ls()]"


def _turn(calls, results, state=()):
    return {"calls": [(c, r, bfcl_multi.call_error(r)) for c, r in zip(calls, results)], "state": list(state)}


def test_environment_errors_are_failed_calls():
    turns = [_turn(["cd(folder='nope')", "cd(folder='..')", "ls()"],
                   ['{"error": "cd: nope: No such directory"}', '{"error": "Current directory is already the root."}',
                    '{"current_directory_content": []}'])]
    assert bfcl_multi.failure_counts(turns) == (3, 2)
    text = bfcl_multi.evidence_text(turns)
    assert text.startswith("Turn 1: [cd(folder='nope'), cd(folder='..'), ls()] (3 calls, 2 failed)")
    assert text.count("FAILED") == 2


def test_a_huge_call_line_still_shows_every_call_name():
    """1,000 ``pwd()`` calls in one turn, then a 200 KB literal: the judge still reads which functions ran."""
    turns = [_turn(["pwd()"] * 1000, ['{"current_working_directory": "/w"}'] * 1000),
             _turn([f"echo(content='{'x' * 200_000}')", "cd(folder='x')"],
                   ["None", '{"error": "cd: x: No such directory"}'], ["root.contents.x added: {}"])]
    text = bfcl_multi.evidence_text(turns)
    assert len(text) <= bfcl_multi.EVIDENCE_CHARS
    assert "pwd" in text and "(x1000)" in text and "echo" in text and "cd" in text
    assert "Turn 2: 2 calls, 1 failed" in text and "state changed: root.contents.x added" in text
    many = [_turn([f"f{i}()" for i in range(3000)], ["ok"] * 3000)]
    assert len(bfcl_multi.evidence_text(many)) <= bfcl_multi.EVIDENCE_CHARS


@pytest.fixture(scope="module")
def file_system_problem(problems):
    return next(q for q in problems if "GorillaFileSystem" in q.answer["involved_classes"])


def test_the_replay_counts_environment_errors_as_failed_calls(task, file_system_problem):
    """Through the sandboxed replay: two ``cd`` into folders that do not exist return ``{"error": ...}``."""
    errors = render_plan([["cd(folder='vrr_no_such_dir_a')", "cd(folder='vrr_no_such_dir_b')"]])
    fb = task.repair_feedback(task.extract_answer(errors), file_system_problem)
    assert fb.startswith("Executing the trajectory (2 calls, 2 failed)"), fb[:200]


def test_the_judge_sees_call_names_when_one_turn_has_1000_calls(task, file_system_problem):
    """1,000 ``pwd()`` calls on one turn: a 7,000-character call line, and yet the name shows."""
    shown = task.replay_evidence([(render_plan([["pwd()"] * 1000]), file_system_problem)])[0]
    assert "pwd" in shown and "1000 calls" in shown and len(shown) <= bfcl_multi.EVIDENCE_CHARS


def test_the_judge_sees_the_state_a_turn_changed(task, file_system_problem):
    made = task.replay_evidence([(render_plan([["mkdir(dir_name='vrr_new_dir')"]]), file_system_problem)])[0]
    assert re.search(r"-> state changed: .*vrr_new_dir added", made), made
