"""GSM8K loader, answer extraction, exact-match labeling and PM perturbations (pure Python)."""
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from vrr.loop.tasks import gsm8k


def test_loader_local_rows_and_gold():
    test = gsm8k.load_gsm8k("test", allow_hub=False)
    train = gsm8k.load_gsm8k("train", allow_hub=False)
    assert len(test) == 1319 and len(train) == 7473
    assert test[0].gold == "18" and test[0].index == 0 and test[0].split == "test"
    assert test[5].ref == {"dataset": "gsm8k", "split": "test", "index": 5}
    for p in test[:200]:
        assert gsm8k.parse_number(p.gold) is not None


@pytest.mark.parametrize("text,expected", [
    ("She sells 9 eggs.\nThe answer is 18.", "18"),
    ("so the total is \\boxed{1,234} dollars", "1234"),
    ("work...\n#### 1,000", "1000"),
    ("The final answer is: $42.00.", "42"),
    ("Answer: 7 apples", "7"),
    ("The answer is -3.", "-3"),
    ("The answer is 2.5 hours.", "2.5"),
    ("The answer is \\$5\\!", "5"),
    ("First 3 then 4, so we get 12", "12"),
    ("The answer is 75%.", "75"),
    ("\\boxed{\\frac{3}{4}}", "0.75"),
    ("The answer is 12.\nThe answer is 13.", "13"),
    ("no number here", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert gsm8k.extract_answer(text) == expected


def test_exact_match_numeric():
    assert gsm8k.is_correct("18", "18")
    assert gsm8k.is_correct("18.0", "18")
    assert gsm8k.is_correct("1,000", "1000")
    assert not gsm8k.is_correct("17", "18")
    assert not gsm8k.is_correct(None, "18")
    assert gsm8k.label("... The answer is $18.", "18") == 1
    assert gsm8k.label("... The answer is 19.", "18") == 0
    assert gsm8k.label("I don't know", "18") == 0


def test_perturbation_deterministic_and_applicable():
    probs = gsm8k.load_gsm8k("test", allow_hub=False)[:100]
    kinds = set()
    for p in probs:
        s1 = gsm8k.make_perturbation(p.question, seed=0, index=p.index)
        s2 = gsm8k.make_perturbation(p.question, seed=0, index=p.index)
        assert s1 == s2  # deterministic per (seed, index)
        kinds.add(s1["kind"])
        q2 = gsm8k.apply_perturbation(p.question, s1)
        if s1["kind"] != "none":
            assert q2 != p.question
            assert s1["orig"] != s1["new"]
            assert q2.replace(s1["new"], s1["orig"], 1) == p.question or s1["kind"] == "numeric"
        # the spec never carries the problem text
        assert len(s1["orig"]) < 30 and len(s1["new"]) < 30
    assert {"numeric", "condition"} <= kinds
    # different seeds give (mostly) different perturbations
    diff = sum(gsm8k.make_perturbation(p.question, 0, p.index) != gsm8k.make_perturbation(p.question, 1, p.index)
               for p in probs)
    assert diff > 50


def test_perturbation_kinds_forced():
    q = "Tom has 3 more than twice as many apples as Ann, who has 10 apples."
    n = gsm8k.make_perturbation(q, 0, 1, kind="numeric")
    assert n["kind"] == "numeric" and n["orig"] in ("3", "10")
    c = gsm8k.make_perturbation(q, 0, 1, kind="condition")
    assert c["kind"] == "condition" and c["orig"] in ("more than", "twice")
    with pytest.raises(ValueError):
        gsm8k.apply_perturbation("other text entirely with more words", c)


def test_prompts_are_byte_identical_to_the_committed_runs():
    """The GSM8K prompts moved onto the task plug-in unchanged: every conversation of every judge and
    repair style for three problems hashes to the value computed with the code that generated the
    committed trajectories (commit 0f9f998, vrr/prompts.py)."""
    import hashlib
    import json

    from vrr.loop import verifiers
    from vrr.loop.tasks import get_task
    from vrr.settings import JUDGE_STYLES

    task = get_task("gsm8k")
    h = hashlib.sha256()
    for split, idx in (("test", 0), ("test", 7), ("train", 3)):
        q = task.problem(split, idx).question
        plan = "Step 1. 3 + 4 = 7.\nThe answer is 7."
        convs = [task.prompts.generator_messages(q)]
        convs += [task.prompts.judge_messages(q, plan, st) for st in JUDGE_STYLES]
        for rs in ("self-refine", "reflexion"):  # the styles of the committed runs
            for st in JUDGE_STYLES:
                fb = verifiers.feedback_text(["REJECT because wrong", "ACCEPT", "VERDICT: REJECT"], st)
                convs.append(task.prompts.repair_messages(q, plan, fb, rs))
        h.update(json.dumps(convs, sort_keys=True).encode())
    assert h.hexdigest() == "8673b9050cebfbc3419a0261656954bce41d2beb26ca63f9a818e8dcfd3d5f15"


@pytest.mark.parametrize("plan, want", [
    ("Half of it is 3. The answer is 15. Check: \\frac{129}{2} is not it.", "15"),   # a later \frac never wins
    ("The answer is 9.\nEnd with a final line of the form \"The answer is N.\" where N is a number like 4.", "9"),
    ("So the answer is: The answer is 48 grams.", "48"),                  # a phrase repeated on one line
    ("The answer is \\(5 \\times 20 + 67 = 167\\).", "167"),              # "expr = N" states N
    ("The answer is 55%.\nIf the solution is correct, the answer is N.", "55"),
    ("#### 42", "42"), ("The answer is 1,234.", "1234"), ("so \\boxed{7}", "7"), ("The answer is -3.", "-3"),
    ("The answer is 2.5.", "2.5"), ("The answer is $\\frac{3}{4}$.", "0.75"), ("The answer is: **18**", "18"),
    ("The answer is \\$18.00.", "18"), ("Final answer: 12 apples", "12"), ("x is 5, so 6 in all", "6"),
])
def test_the_stated_answer_wins_over_stray_numbers_and_template_echoes(plan, want):
    """Synthetic plans: the last statement that states a number is read, at its first number."""
    assert gsm8k.extract_answer(plan) == want


def test_a_stored_answer_is_read_again_only_from_a_statement_redaction_left_intact():
    from vrr.loop.tasks import get_task

    task = get_task("gsm8k")
    fixed = {"answer": "64.5", "plan": "The answer is 15. Half is \\frac{129}{2}."}
    assert task.stored_answer(fixed) == "15"
    cut = {"answer": "12", "plan": "The answer is [problem text elided] 7."}
    assert task.stored_answer(cut) == "12"
    only_last_number = {"answer": "8", "plan": "It is not 8 but 10"}
    assert task.stored_answer(only_last_number) == "8"


# The stated final answer wins. Each synthetic plan below has a tempting wrong reading (in the comment).
@pytest.mark.parametrize("plan, want", [
    ("The final answer is 100.\nRecomputing: 4 * 10 = 40.\nThe answer is 40.", "40"),   # not 100
    ("So the total is \\boxed{9}.\nRounding down, the answer is 8.", "8"),                # not 9
])
def test_the_last_explicit_statement_wins_whatever_its_form(plan, want):
    """Boxes, "final answer is" and "The answer is" are read in text order: the last one that states a
    number is the answer (a box or "final answer" before the final line does not beat it)."""
    assert gsm8k.extract_answer(plan) == want


@pytest.mark.parametrize("plan, want", [
    ('The answer is 12. The feedback says the proposed "The answer is 30" is wrong.', "12"),  # not 30
    ("The answer is 12.\nThe reviewer quoted \u201cThe answer is 30.\u201d", "12"),         # not 30
    ('The proposed solution said "The answer is 30." I agree.', "30"),  # only a quoted statement: it counts
])
def test_a_quoted_answer_statement_is_an_echo(plan, want):
    """A statement that opens a quotation echoes the proposed solution or the prompt; it counts only when
    no unquoted statement states a number."""
    assert gsm8k.extract_answer(plan) == want


def test_every_box_is_tried_and_a_placeholder_box_is_passed_over():
    plan = "\\boxed{7}\nCheck: 3 + 4 = 7 apples over 2 days. Format: \\boxed{N}"
    assert gsm8k.extract_answer(plan) == "7"  # was 2 (the last number: only the last box was tried)


@pytest.mark.parametrize("plan, want", [
    ("The answer is 15 (the 3 boxes = 45 - 30).", "15"),          # was 45
    ("The answer is 2 + 3 = 5 \\times 2 = 10 apples.", "10"),      # an arithmetic chain states its result
    ("The answer is \\(6 \\cdot 7 = 42\\).", "42"),
    ("The answer is x = 5.", "5"),
])
def test_expr_equals_n_only_for_arithmetic_before_the_equals_sign(plan, want):
    assert gsm8k.extract_answer(plan) == want


def test_a_quoted_number_is_the_stated_answer():
    assert gsm8k.extract_answer('The answer is "18". It took 3 days.') == "18"  # was 3


@pytest.mark.parametrize("plan, want", [
    ("#### 42", "42"), ("The answer is 1,234.", "1234"), ("\\boxed{7}", "7"), ("The answer is -12.", "-12"),
    ("#### -3", "-3"), ("The answer is 0.25.", "0.25"), ("\\boxed{-2.5}", "-2.5"), ("Answer: 3.75", "3.75"),
    ("The final answer is $1,234.50.", "1234.5"), ("The answer is 9.\nProposed answer: 12", "9"),
    ("Half is 3. The answer is 15. Then \\frac{129}{2} is not it.", "15"),
    ("The answer is 9.\nEnd with a final line of the form \"The answer is N.\" where N is a number.", "9"),
])
def test_ordinary_answers_still_extract(plan, want):
    assert gsm8k.extract_answer(plan) == want


def test_the_label_path_reads_the_last_statement_again():
    """A stored answer taken from an earlier box gives way to the plan's last statement (not redacted)."""
    from vrr.loop.tasks import get_task

    rd = {"answer": "9", "plan": "So the total is \\boxed{9}.\nRounding down, the answer is 8."}
    assert get_task("gsm8k").stored_answer(rd) == "8"


# The number grammar: one row per (text, the number it states or None). Labels and votes read numbers with
# parse_number alone, so each row holds for both.
GRAMMAR = [
    ("18", 18), ("-3", -3), ("+5", 5), ("\u22124", -4), ("0", 0), ("007", 7),
    ("1,000", 1000), ("12,345", 12345), ("1,000,000", 10 ** 6), ("1,234.50", Fraction(2469, 2)),
    ("1,8", None), ("1,0000", None), ("12,34,567", None), ("1234,567", None), ("1,000,00", None),
    ("18.", 18), ("18.00", 18), ("2.5", Fraction(5, 2)), (".5", Fraction(1, 2)), ("1.2.3", None),
    ("1e3", 1000), ("1E3", 1000), ("2e-05", Fraction(1, 50000)), ("1e+16", 10 ** 16), ("-1.5e2", -150),
    ("6.182536106574134e+38", Fraction(6182536106574134) * 10 ** 23),
    ("1e309", None), ("-1e309", None), ("1e99999999", None), ("1" * 400, None), ("9" * 309, None),
    ("inf", None), ("-inf", None), ("nan", None), ("Infinity", None),
    ("$18.00", 18), ("-$5", -5), ("\\$5", 5), ("$ 7", 7), ("50%", 50), ("7 dollars", 7), ("5kg", 5),
    ("3/4", Fraction(3, 4)), ("3 / 4", Fraction(3, 4)), ("3/0", None), ("\\frac{3}{4}", Fraction(3, 4)),
    ("\\dfrac{1,000}{8}", 125), ("\\frac{1,8}{2}", None), ("\\frac{1}{0}", None),
    ("\uff11\uff18", 18), ("\u0661\u0668", 18), ("\u0967\u0968", 12), ("1\u0668", None), ("\u00b2", None),
    ("5-3", 5), ("x = 12 apples", 12), ("about 3 then 4", 3), ("1e309 or 5", None),
    ("", None), ("no number", None),
    # a number is the whole token or no number: glued digits, detached signs, other scripts' separators
    ("1_000", None), ("0x10", None), ("0b101", None), ("0o17", None), ("5x3", None), ("1'000", None),
    ("- 5", None), ("+ 5", None), ("(- 5)", None), ("= -  5", None), ("10 - 5", 10), ("x - 5", 5),
    ("\u0661\u066b\u0665", None), ("1\u066b5", None), ("\u0661\u066c\u0660\u0660\u0660", None),
    ("\uff11\uff0c\uff10\uff10\uff10", None), ("\uff11\uff0e\uff15", None), ("1,8 apples and 5 pears", None),
    ("0x10 apples and 5 pears", None), ("12abc", 12), ("a_5", None),
]


@pytest.mark.parametrize("text, want", GRAMMAR)
def test_the_number_grammar(text, want):
    got = gsm8k.parse_number(text)
    assert got == want and (got is None) == (want is None)


@pytest.mark.parametrize("plan, gold, valid", [
    ("The answer is 1e3.", "1", 0), ("The answer is 1e3.", "1000", 1), ("The answer is 1,8.", "18", 0),
    ("The answer is 1,8.", "1", 0), ("The answer is 10000000000000001.", "10000000000000000", 0),
    ("The answer is - 5.", "5", 0), ("The answer is - 5.", "-5", 0), ("The answer is 1_000.", "1", 0),
    ("The answer is 0x10.", "0", 0), ("The answer is 0x10.", "16", 0), ("x = 1_000", "1", 0),
    ("The answer is \uff11\uff0c\uff10\uff10\uff10.", "1", 0),
    ("The answer is 1e+16.", "10000000000000000", 1), ("The answer is 18.0000001.", "18", 1),
])
def test_labels_read_the_grammar(plan, gold, valid):
    assert gsm8k.label(plan, gold) == valid


@pytest.mark.parametrize("printed, plan_answer, agree", [
    ("1e309", "1", False), ("2e-05", "2", False), ("1e+16", "10000000000000000", True),
    ("1e+16", "10000000000000001", False), ("1,8", "18", False), ("1,800", "1800", True),
    ("12.299999999999999", "12.3", True), ("72.0", "72", True), ("inf", "1", False), ("nan", "0", False),
    ("6.182536106574134e+38", "6", False), ("-8", "8", False), ("\uff17\uff12", "72", True),
    ("1_000", "1", False), ("1_000", "1000", False), ("0x10", "0", False), ("- 5", "5", False),
    ("\u0661\u066b\u0665", "1", False), ("\uff11\uff0c\uff10\uff10\uff10", "1", False),
])
def test_program_votes_compare_with_the_same_grammar(printed, plan_answer, agree):
    """What the vote programs printed, against the plan's answer (``task.answers_agree``, the call of
    vrr.loop.verifiers.ProgramJudge)."""
    from vrr.loop.tasks import get_task

    assert gsm8k.answers_agree(plan_answer, printed) is agree
    assert get_task("gsm8k").answers_agree(plan_answer, printed) is agree


def test_integers_compare_exactly_and_answers_format_exactly():
    assert gsm8k.same_number(Fraction(10 ** 16), Fraction(10 ** 16))
    assert not gsm8k.same_number(Fraction(10 ** 16 + 1), Fraction(10 ** 16))
    assert gsm8k.extract_answer("The answer is 10000000000000001.") == "10000000000000001"
    assert gsm8k.extract_answer("The answer is 2e-05.") == "0.00002"
    assert gsm8k.extract_answer("The answer is 1,8.") is None  # an ill-formed number is no answer


_GLUES = ["_", "'", "\u2019", "\u00b7", "\u066b", "\u066c", "\u060c", "\uff0c", "\uff0e", "x", "b", "o", "e_"]
_DIGIT_SETS = ["0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
               "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19"]


@given(a=st.integers(0, 10 ** 6), b=st.integers(0, 10 ** 6), glue=st.sampled_from(_GLUES),
       digits=st.sampled_from(_DIGIT_SETS), before=st.sampled_from(["", "The answer is ", "x = ", "(", "So "]),
       after=st.sampled_from(["", ".", " apples", " and 7"]))
@settings(max_examples=300, deadline=None)
def test_glued_digits_are_no_number_in_any_script(a, b, glue, digits, before, after):
    """A number is the whole token: digits glued by an underscore, another script's separator, an apostrophe
    or letters ("1_000", "1\u066b5", "0x10") are no number, and no part of them is read instead."""
    script = str.maketrans("0123456789", digits)
    token = f"{a}".translate(script) + glue + f"{b}".translate(script)
    assert gsm8k.parse_number(before + token + after) is None
    assert not gsm8k.answers_agree(str(a), token) and not gsm8k.answers_agree(str(b), token)


@given(n=st.integers(-10 ** 12, 10 ** 12), spaces=st.text(" \t", min_size=1, max_size=3),
       lead=st.sampled_from(["", "The answer is ", "(", "= ", "total: "]))
@settings(max_examples=200, deadline=None)
def test_a_detached_sign_is_no_number_and_a_whole_token_reads_its_value(n, spaces, lead):
    assert gsm8k.parse_number(str(n)) == n and gsm8k.parse_number(f"{n:,}") == n
    assert gsm8k.parse_number(f"{lead}-{spaces}{abs(n)}") is None
    assert gsm8k.parse_number(f"{lead}+{spaces}{abs(n)}") is None
    assert gsm8k.label(f"The answer is -{spaces}{abs(n)}.", str(abs(n))) == 0
    assert gsm8k.label(f"The answer is {n}.", str(n)) == 1


@pytest.mark.parametrize("plan, answer", [
    ("The answer is " + "9" * 400 + "/7", None),              # a statement cut inside its number reads nothing
    ("The answer is " + "9" * 400, None),
    ("The answer is 5 " + "x " * 400, "5"),                    # a long line keeps its first number
    ("The answer is " + "x " * 140 + "12345 and 7", "7"),      # past the cap: the last number of the text
])
def test_a_long_statement_is_never_cut_inside_a_number(plan, answer):
    assert gsm8k.extract_answer(plan) == answer
