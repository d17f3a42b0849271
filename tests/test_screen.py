"""scripts/screen.py: the screening row's rates from a window's arrays, and "n/a" where a rate has no plan."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("screen", REPO / "scripts" / "screen.py")
screen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(screen)

META = {"sessions": [{"instances": 4, "seconds": 40.0, "engine_load_seconds": 5.0}]}


def test_rates_counts_and_first_repair():
    # 4 instances, rounds 0 and 1 (a third round is ignored), M = 4
    y = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1]])
    S = np.array([[4, 3, 0], [2, 1, 4], [1, 4, 4], [0, 2, 4]])
    s = screen.summarize(SimpleNamespace(S=S, y=y, M=4), META)
    # valid plans (rounds 0-1): (0,0),(0,1),(1,0),(2,1) -> 4+3+2+4 = 13 of 16 votes accept
    assert np.isclose(s["rho1"], 3 / 16)
    # invalid plans: (1,1),(2,0),(3,0),(3,1) -> 1+1+0+2 = 4 of 16 accept
    assert np.isclose(s["rho0"], 4 / 16) and np.isclose(s["J"], 1 - 4 / 16 - 3 / 16)
    assert (s["fixed"], s["invalid"], s["broken"], s["valid"]) == (1, 2, 1, 2)
    assert s["acc"] == 0.5 and np.isclose(s["seconds_per_instance"], 10.0)
    lo, hi = s["rho0_ci"]
    assert lo < 4 / 16 < hi
    assert s["validity"] == [0.5, 0.5, 0.5]          # every round of the run, Q_0 first


def test_the_row_prints_b_star_and_validity_by_round():
    """b* = alpha/(alpha+beta) from the first repair (Eq. 7 at tau = 0): here alpha 1/4, beta 1/2 -> 1/3."""
    y = np.array([[0, 1], [0, 0], [0, 0], [0, 0], [1, 1], [1, 0]])
    S = np.full((6, 2), 2)
    s = screen.summarize(SimpleNamespace(S=S, y=y, M=4), META)
    cells = [c.strip() for c in screen.row("x", s, "cmd").strip("|").split("|")]
    assert cells[5:9] == ["1/4", "1/2", "0.33", "0.33 0.33"]


def test_a_screen_without_valid_plans_says_n_a():
    y = np.zeros((3, 2), dtype=int)
    S = np.array([[2, 1], [0, 3], [1, 1]])
    s = screen.summarize(SimpleNamespace(S=S, y=y, M=4), META)
    line = screen.row("x", s, "cmd")
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2].startswith("0.33 [") and cells[3] == "n/a" and cells[4] == "**n/a**"
    assert cells[5:9] == ["0/3", "0/0", "n/a", "0.00 0.00"] and "nan" not in line


def test_the_table_command_names_the_same_run_folder():
    """The command a row records parses back to the same candidate, so rerunning it resumes that run."""
    import shlex
    argv = ["bfcl_multi_cpu", "--set", "verifier.style=check", "--set", "engine.batch_size=5", "--model",
            "qwen2.5-coder-1.5b", "--n", "10", "--label", "BFCL multi 1.5B, executor verifier (check)"]
    a = screen.parse_args(argv)
    command = screen.reproduce_command(a)
    assert command.startswith("python scripts/screen.py bfcl_multi_cpu ")
    again = screen.parse_args(shlex.split(command)[2:])
    assert screen.run_name(again) == screen.run_name(a)
    assert screen.run_name(screen.parse_args(argv[:-2])) != screen.run_name(a)   # the label is part of the key
