"""The judge's readability, measured and shown; a swap is a run of its own with its own probe.

* The verdict style reads the forms small models write in place of one word (a table of replies seen from
  SmolLM2-135M and Qwen2.5-0.5B), and never raises on any text (hypothesis).
* A window whose judge answers in prose (the fake backend's ``prose`` judge, cut at its token budget as a real
  engine cuts it) gets the unparsable share in the ``generate`` summary and in ``vrr status``, with a warning
  that quotes the most common unparsed replies; with the budget its format needs, the same judge reads.
* ``generate <setting with probe.from> --verifier X`` makes its own probe with the swapped models; ``--probe-n``
  on a run that borrows its probe is refused; ``resolve`` names the run folder, the probe's owner and the models
  that voted on it; a run never borrows a probe other models voted on.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from vrr.common.paths import REPO_ROOT
from vrr.loop.verifiers import JUDGE_MAX_TOKENS, parse_verdict

FORMS = [
    # reply (as the model wrote it, cut where its budget cut it), verdict
    ("ACCEPT", 1), ("REJECT", 0), ("Accepted.", 1), ("rejected", 0),
    ("Yes, the proposed", 1), ("Yes", 1), ("yes.", 1), ("No, the proposed solution", 0), ("No.", 0),
    ("The proposed solution is correct.", 1), ("The proposed solution is incorrect.", 0),
    ("The proposed solution is not correct", 0), ("The solution isn't correct.", 0),
    ("The solution is wrong because", 0), ("The answer is valid.", 1), ("The answer is invalid.", 0),
    ("This is acceptable.", 1), ("True", 1), ("False.", 0), ("**ACCEPT**", 1), ("Verdict: REJECT", 0),
    ("No errors: the solution is correct.", 1), ("No issues found; it is incorrect", 0),
    # no verdict in it: unparsable (a rejection in the arrays)
    ("The proposed solution is", None), ("To check the solution, we", None), ("ACK", None), ("", None),
    ("Let me verify step by step", None), ("Nobody", None), ("no idea", None), ("I am not sure about this one.", None),
]


@pytest.mark.parametrize("reply, verdict", FORMS)
def test_the_verdict_style_reads_what_small_models_write(reply, verdict):
    assert parse_verdict(reply, "verdict") == verdict


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["verdict", "check", "reason"]))
def test_any_reply_is_a_verdict_or_none(text, style):
    assert parse_verdict(text, style) in (0, 1, None)
    if style == "verdict":
        assert parse_verdict("ACCEPT " + text, style) == 1 and parse_verdict("REJECT " + text, style) == 0


def test_each_style_has_the_budget_its_format_needs():
    """The sentence a small model writes for a verdict fits the verdict style's budget (one token per word at
    most for these words); the styles that reason before their verdict get more."""
    sentence = "The proposed solution is correct, as the steps above show."
    assert len(sentence.split()) <= JUDGE_MAX_TOKENS["verdict"] < JUDGE_MAX_TOKENS["check"] < JUDGE_MAX_TOKENS["reason"]


def vrr(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "vrr", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


WINDOW = ["--backend", "fake", "--n", "3", "--set", "K_max=1", "--set", "M=4", "--no-progress"]


def test_a_judge_that_answers_prose_is_measured_and_warned_about(tmp_path):
    args = ["gsm8k_cpu_favorable", *WINDOW, "--probe-n", "2", "--verifier", "prose-judge", "--out-root", str(tmp_path)]
    out = vrr("generate", *args, "--set", "verifier.max_tokens=4")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    share = next(line for line in lines if line.startswith("judge votes unparsable:"))
    assert share.startswith("judge votes unparsable: 100.0 % of 24 in the window") and "of 32 on the probe" in share
    warning = next(line for line in lines if line.startswith("warning:"))
    assert "prose-judge" in warning and "'The proposed solution is' x56" in warning and "rejections" in warning
    args.remove("--no-progress")                                     # generate's, not status's
    status = vrr("status", *args, "--set", "verifier.max_tokens=4")
    assert status.returncode == 0, status.stderr[-3000:]
    assert "  judge votes unparsable: 100.0 %" in status.stdout and "  warning: more than 10%" in status.stdout
    report = json.loads(vrr("status", *args, "--set", "verifier.max_tokens=4", "--json").stdout)["readability"]
    assert report["judge"]["window"] == {"unparsable": 24, "votes": 24, "share": 1.0}
    assert report["judge"]["by_round"] == [1.0, 1.0] and report["warn"] and report["counted_as"] == "rejection"
    # the same judge with the budget its format needs: every vote reads, no warning
    fitted = vrr("generate", *args, "--set", "verifier.max_tokens=16", "--run-name", "fitted", "--no-progress")
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    assert "judge votes unparsable: 0.0 % of 24" in fitted.stdout and "warning:" not in fitted.stdout


def test_a_swapped_judge_makes_its_own_probe_and_resolve_says_who_voted(tmp_path):
    base = ["gsm8k_cpu_pmstress", "--out-root", str(tmp_path)]   # its probe is gsm8k_cpu_favorable's
    plain = json.loads(vrr("resolve", *base).stdout)["run"]
    assert plain["probe"]["owner"] == "gsm8k_cpu_favorable" and not plain["probe"]["own"]
    assert plain["probe"]["judge"] == "qwen2.5-coder-0.5b"
    for swap in (["--verifier", "prose-judge"], ["--set", "models.judge=prose-judge"]):
        resolved = json.loads(vrr("resolve", *base, *swap, "--backend", "fake").stdout)
        assert resolved["setting"]["probe"]["from"] is None
        assert resolved["run"]["folder"] == str(tmp_path / "gsm8k_cpu_pmstress--judge-prose-judge")
        assert resolved["run"]["probe"] == {"owner": "gsm8k_cpu_pmstress--judge-prose-judge",
                                            "folder": resolved["run"]["folder"], "generator": "qwen2.5-coder-0.5b",
                                            "judge": "prose-judge", "own": True}
    out = vrr("generate", *base, *WINDOW, "--probe-n", "2", "--set", "models.judge=prose-judge")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("complete: 3 of 3 trajectories and 2 of 2 probe plans stored"), out.stdout
    folder = tmp_path / "gsm8k_cpu_pmstress--judge-prose-judge"
    assert (folder / "probe.part.jsonl").is_file() and not (tmp_path / "gsm8k_cpu_favorable").exists()
    assert json.loads((folder / "config.json").read_text())["probe_n"] == 2


def test_probe_n_on_a_run_that_borrows_its_probe_is_refused():
    out = vrr("generate", "gsm8k_cpu_pmstress", *WINDOW, "--probe-n", "2")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "borrows its probe from 'gsm8k_cpu_favorable'" in out.stderr and "--set probe.from=null" in out.stderr


def test_a_run_never_borrows_a_probe_other_models_voted_on(tmp_path):
    """With the probe's owner run by another judge (its config.json), a borrowing run is refused before any
    engine call, naming who voted and how to give it a probe of its own."""
    owner = vrr("generate", "gsm8k_cpu_favorable", *WINDOW, "--probe-n", "2", "--out-root", str(tmp_path),
                "--phase", "probe")
    assert owner.returncode == 0, owner.stderr[-3000:]
    out = vrr("generate", "gsm8k_cpu_pmstress", *WINDOW, "--out-root", str(tmp_path), "--run-name", "borrower",
              "--set", "models.judge=prose-judge", "--set", "probe.from=gsm8k_cpu_favorable")
    assert out.returncode == 2, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]
    assert "voted on by qwen2.5-coder-0.5b" in line and "prose-judge" in line and "probe.from=null" in line
    assert not (tmp_path / "borrower" / "trajectories.part.jsonl").exists()
