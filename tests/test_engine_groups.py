"""tests/conftest.py refuses an engine test that names no xdist group: make test's engine phase runs two workers
whose shares are balanced by measured time, and a test left to dynamic scheduling would unbalance them."""
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

# a project whose conftest is the suite's own hook, loaded under another module name
PROJECT_CONFTEST = f'''import importlib.util
spec = importlib.util.spec_from_file_location("vrr_suite_conftest", {str(CONFTEST)!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_collection_modifyitems = suite.pytest_collection_modifyitems
'''


def collect(tmp_path: Path, test_source: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(PROJECT_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    engine: real engine\n")
    (tmp_path / "test_probe.py").write_text(test_source)
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("grouped", [False, True])
def test_an_engine_test_without_a_group_fails_collection(tmp_path, grouped):
    group = '@pytest.mark.xdist_group("served_share")\n' if grouped else ""
    proc = collect(tmp_path, "import pytest\n\n@pytest.mark.engine\n" + group + "def test_new_engine_case():\n"
                             "    pass\n\n\ndef test_plain():\n    pass\n")
    out = proc.stdout + proc.stderr
    if grouped:
        assert proc.returncode == 0, out
        assert "2 tests collected" in out
    else:
        assert proc.returncode != 0, out
        assert "engine tests without an xdist_group mark" in out and "test_new_engine_case" in out
        assert "test_plain" not in out.split("xdist_group mark")[1]
