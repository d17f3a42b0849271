"""The controller installs on its own: the wheel built from this tree, installed into a fresh virtualenv outside
the repository, depends on NumPy and SciPy alone, and the README's controller snippet runs there as printed,
importing nothing outside the standard library, NumPy, SciPy and vrr.

The wheel is built from a copy of the tree (the build leaves nothing in the clone); the installer is uv, as
``make env`` uses, with its cache (the first run on a machine downloads NumPy and SciPy)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Use the controller in your own loop"

# Run in the fresh venv after the README's snippet: the third-party distributions installed and the top-level
# modules imported that are neither the standard library nor vrr.
BEFORE = "import sys as _sys\n_before = set(_sys.modules)\n"
REPORT = """
import importlib.metadata as md, json, sysconfig
from pathlib import Path
site = Path(sysconfig.get_paths()["purelib"])
installed = sorted({d.metadata["Name"].lower() for d in md.distributions()} - {"pip", "setuptools", "vrr"})
requires = [r for r in md.requires("vrr") or [] if "extra ==" not in r]
files = [Path(mod.__file__) for name, mod in list(_sys.modules.items())
         if name not in _before and getattr(mod, "__file__", None)]
imported = sorted({f.relative_to(site).parts[0] for f in files if f.is_relative_to(site)} - {"vrr"})
print("REPORT" + json.dumps({"installed": installed, "requires": requires, "imported": imported,
                             "vrr": vrr.__file__}))
"""


def readme_snippet() -> tuple[str, str, str]:
    """The section's install command, its python block and the output its last line's comment states."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    install = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1).split("#")[0].strip()
    code = re.search(r"```python\n(.*?)\n```", section, re.S).group(1)
    printed = code.strip().splitlines()[-1].split("#", 1)[1].split(":")[0].strip()
    return install, code, printed


def test_the_readme_section_starts_with_one_install_command():
    install, code, printed = readme_snippet()
    assert re.fullmatch(r'pip install "vrr @ file:///\S+"', install), install
    assert "example_calibration()" in code and printed.startswith(("commit", "repair"))


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    uv = [sys.executable, "-m", "uv"]
    if subprocess.run([*uv, "--version"], capture_output=True).returncode != 0:
        pytest.fail("uv is missing from the project venv (make env installs it)")
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO / "vrr", src / "vrr", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([*uv, "build", "--wheel", "-q", "-o", str(root / "dist"), str(src)], check=True, timeout=600)
    (wheel,) = (root / "dist").glob("vrr-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    subprocess.run([*uv, "pip", "install", "-q", "--python", str(python), str(wheel)], check=True, timeout=900)
    return python


def test_the_wheel_needs_numpy_and_scipy_alone_and_the_readme_snippet_runs_outside_the_clone(fresh_venv, tmp_path):
    _, code, printed = readme_snippet()
    out = subprocess.run([str(fresh_venv), "-I", "-c", BEFORE + code + "\n" + REPORT], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    report = json.loads(next(line for line in lines if line.startswith("REPORT"))[len("REPORT"):])
    assert lines[0] == printed                                  # the output the README states
    assert not report["vrr"].startswith(str(REPO))              # the installed copy, not the clone
    assert [re.split(r"[<>=!~; ]", r)[0].lower() for r in report["requires"]] == ["numpy", "scipy"]
    assert report["installed"] == ["numpy", "scipy"]
    assert set(report["imported"]) <= {"numpy", "numpy.libs", "scipy", "scipy.libs"}, report["imported"]


def test_import_vrr_and_the_controller_import_no_extra(tmp_path):
    """In the project venv too (where the extras are installed): ``import vrr`` and the README's controller path
    load no module of an extra (PyYAML, statsmodels, matplotlib, tqdm)."""
    _, code, _ = readme_snippet()
    probe = code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules} & " \
                   "{'yaml', 'statsmodels', 'matplotlib', 'tqdm', 'pandas'}))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_the_command_line_without_the_reproduction_extra_says_how_to_add_it(fresh_venv, tmp_path):
    out = subprocess.run([str(fresh_venv), "-I", "-m", "vrr", "status", "gsm8k_cpu_favorable"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "the extra 'repro'" in line and 'pip install "vrr[repro] @ ' in line
