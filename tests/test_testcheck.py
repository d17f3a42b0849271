"""The checker the code cannot touch (vrr.loop.sandbox.run_tests) and its value codec (vrr.loop.sandbox._codec)."""
import ast
import json
import math
from pathlib import Path

from hypothesis import given, settings, strategies as st

from vrr.loop.sandbox import _codec as codec
from vrr.loop.sandbox import LABEL_RULE, ExecutionRule, code_names, redact_test, run_tests

REPO = Path(__file__).resolve().parents[1]

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
                    st.binary(max_size=10), st.complex_numbers(allow_nan=False))
hashable = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10), st.tuples(st.integers()))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.sets(hashable, max_size=4),
    st.frozensets(hashable, max_size=4), st.dictionaries(hashable, inner, max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(values)
def test_codec_round_trips_built_in_values_exactly(v):
    data = json.loads(json.dumps(codec.data_only(codec.encode(v))))
    back = codec.decode(data)
    assert back == v and type(back) is type(v)
    if isinstance(v, float):
        assert math.copysign(1, back) == math.copysign(1, v)


def test_codec_reads_subclasses_through_their_base_type():
    class LyingInt(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

    class LyingList(list):
        def __eq__(self, other):
            return True

    class Counterish(dict):
        pass

    assert codec.decode(codec.encode(LyingInt(5))) == 5 and codec.decode(codec.encode(LyingInt(5))) != 6
    assert codec.decode(codec.encode(LyingList([1]))) == [1] and codec.decode(codec.encode(LyingList([1]))) != [2]
    assert codec.decode(codec.encode(Counterish(a=2))) == {"a": 2}
    for special in (float("nan"), float("inf"), -0.0, 2 ** 200, -(2 ** 70)):
        back = codec.decode(json.loads(json.dumps(codec.encode(special))))
        assert (math.isnan(back) if isinstance(special, float) and math.isnan(special) else back == special)
        assert math.copysign(1, back) == math.copysign(1, special) if isinstance(special, float) else True
    gen = codec.decode(codec.data_only(codec.encode(x for x in range(3))))
    assert list(gen) == [0, 1, 2] and gen != [0, 1, 2]
    opaque = codec.decode(codec.encode(object()))
    assert opaque != opaque.__class__("object") and opaque == opaque


def test_the_recording_program_never_sees_an_expected_value():
    tests = ["assert remove_x('hello', 'l') == 'heo'", "assert math.isclose(area(2), 12.566, rel_tol=0.001)",
             "assert set(pairs([1, 2])) == {(1, 2)}", "assert all(double(i) == i * 2 for i in range(3))",
             "assert f(3) is not None and f(4) != 99"]
    for t in tests:
        names = code_names([t], "import math")
        red = redact_test(t, names)
        constants = {repr(n.value) for n in ast.walk(ast.parse(red)) if isinstance(n, ast.Constant)}
        assert not constants & {"'heo'", "12.566", "99"}, (t, red)
        assert "__vrr_checked(" in red
    assert code_names(["x = 3\nassert f(x) == g()"], "") == ["f", "g"]


def test_a_test_that_does_not_parse_fails_without_running():
    out = run_tests([("def f():\n    return 1\n", "", ["assert f( == 1"])])[0]
    assert not out.passed and "does not parse" in out.reason


def test_records_that_diverge_from_the_tests_are_invalid():
    # the code answers a different call sequence than the tests make (it calls itself through the test namespace)
    code = ("import sys\ndef f(x):\n    fr = sys._getframe(1)\n"
            "    while fr is not None and '__vrr_checked' not in fr.f_globals:\n        fr = fr.f_back\n"
            "    if fr is not None and not getattr(f, 'done', False):\n        f.done = True\n"
            "        fr.f_globals['f'](x + 1)\n    return x\n")
    out = run_tests([(code, "", ["assert f(1) == 1"])])[0]
    assert not out.passed and "record" in out.reason


def test_the_label_rule_is_stated_once_and_quoted_by_the_docs():
    docs = (REPO / "docs" / "tasks.md").read_text()
    assert LABEL_RULE.text() in docs
    rec = LABEL_RULE.record()
    assert rec["hash_seeds"] == list(LABEL_RULE.hash_seeds) and rec["sandbox"]["tool"] == "bubblewrap"
    assert rec["sandbox"]["packages"] == ["numpy"]
    assert "version" not in json.dumps(rec)   # machine facts (tool and package versions) live beside the labels
    assert ExecutionRule(hash_seeds=(0,)).text() != LABEL_RULE.text()


def test_code_may_define_a_builtin_name_and_the_tests_use_it():
    code = "def sum(a, b):\n    return a + b\n"
    tests = ["assert sum(10, 15) == 25", "assert len([sum(1, 1)]) == 1"]
    assert run_tests([(code, "", tests)])[0].passed
    assert not run_tests([("def sum(a, b):\n    return a - b\n", "", tests)])[0].passed
    assert "25" not in redact_test(tests[0], code_names(tests[:1]))
    # a builtin the code does not define stays the builtin
    assert run_tests([("def f(x):\n    return len(x)\n", "", ["assert f([1, 2]) == len([1, 2])"])])[0].passed


def test_output_past_the_cap_is_judged_by_bytes_whatever_the_characters():
    """A correct solution printing 100 KB of ASCII and one printing 100 KB of 2-byte characters get the same label:
    the sandbox keeps the last OUTPUT_CAP bytes of the output, and an output past it holds no record."""
    from vrr.loop.sandbox import OUTPUT_CAP

    tests = ["assert f(2) == 4"]
    items = [(f"def f(x):\n    print({ch!r} * {n})\n    return 2 * x", "", tests)
             for ch, n in (("a", 100_000), ("\u00e9", 50_000), ("a", 1000), ("\u00e9", 1000))]
    assert len("\u00e9".encode()) == 2 and 100_000 > OUTPUT_CAP
    out = run_tests(items, LABEL_RULE, parallel=2)
    assert [o.passed for o in out] == [False, False, True, True], out
    assert "output cap" in out[0].reason and out[0].reason == out[1].reason
