"""Names that forgive: an unknown setting, file, model, key, choice, option or command gives one line naming the
nearest known names (difflib), exit status 2 and no traceback, in every subcommand and in ``load_config``."""
import subprocess
import sys

import pytest

from vrr.common.paths import REPO_ROOT
from vrr.settings import SettingConfigError, UnknownNameError, load_config, nearest

CASES = [
    # argv, a name the one line must carry
    (["status", "gsm8k_cpu_favorit"], "gsm8k_cpu_favorable"),
    (["generate", "gsm8k_cpu_favorit", "--backend", "fake"], "gsm8k_cpu_favorable"),
    (["resolve", "gsm8k_cpu_favorit"], "gsm8k_cpu_favorable"),
    (["measure-judge-styles", "gsm8k_cpu_favorit", "--styles", "verdict"], "gsm8k_cpu_favorable"),
    (["status", "gsm8k_cpu_favorable.yml"], "gsm8k_cpu_favorable"),
    (["resolve", "settings/gsm8k_cpu_favorable.yml"], "settings/gsm8k_cpu_favorable.yaml"),
    (["resolve", "gsm8k_cpu_favorable", "--verifier", "smollm2-135"], "smollm2-135m"),
    (["resolve", "gsm8k_cpu_favorable", "--set", "models.judge=qwen2.5-coder-0.5"], "qwen2.5-coder-0.5b"),
    (["resolve", "gsm8k_cpu_favorable", "--set", "window.NN=3"], "window.N"),
    (["resolve", "gsm8k_cpu_favorable", "--set", "verifier.kind=llm_juge"], "llm_judge"),
    (["status", "gsm8k_cpu_favorable", "--verifer", "x"], "--verifier"),
    (["generate", "gsm8k_cpu_favorable", "--phase", "prob"], "probe"),
    (["stauts", "gsm8k_cpu_favorable"], "status"),
    (["label", "data/real/gsm8k_cpu_favorit"], "data/real/gsm8k_cpu_favorable"),
    (["measure-judge-styles", "gsm8k_cpu_favorable", "--styles", "verdic:16", "--backend", "fake"], "verdict"),
    (["status", "gsm8k_cpu_favorable", "--no-progress"], "an option of another subcommand"),
]


@pytest.mark.parametrize("argv, near", CASES, ids=[" ".join(c[0][:2]) + f" ->{c[1]}" for c in CASES])
def test_an_unknown_name_is_one_line_with_the_nearest_and_exit_2(argv, near):
    out = subprocess.run([sys.executable, "-m", "vrr", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert near in lines[0] and ("did you mean" in lines[0] or "another subcommand" in lines[0]), lines[0]
    assert out.stdout == ""


def test_load_config_names_the_nearest_setting():
    with pytest.raises(UnknownNameError, match="did you mean gsm8k_cpu_favorable") as info:
        load_config("gsm8k_cpu_favorit")
    assert isinstance(info.value, SettingConfigError) and "\n" not in str(info.value)
    assert "mbpp_cpu_loop_resample" not in str(info.value)      # the nearest names, not the whole list
    with pytest.raises(SettingConfigError, match="window.N"):
        load_config("gsm8k_cpu_favorable", overrides={"window.NN": 3})


@pytest.mark.parametrize("name, known, expected", [
    ("gsm8k_cpu_favorit", ["gsm8k_cpu_favorable", "bfcl_cpu"], ["gsm8k_cpu_favorable"]),
    ("SMOLLM2-135M", ["smollm2-135m"], ["smollm2-135m"]),
    ("zzzz", ["gsm8k_cpu_favorable"], []),
])
def test_nearest(name, known, expected):
    assert nearest(name, known) == expected
